"""How trainers report progress to their executor: one schema (the spec's Progress, in its wire form:
camelCase JSON, as in a GraphTraining's status.progress), two places it is written.

- A local run: trainer 0 replaces <run-dir>/progress.json on every report; the launcher reads it into
  status.json and watches its updatedAt for stalls.
- A pod: every rank patches its own report into the training's progress ConfigMap under `rank-<i>` (the
  heartbeat the operator's stall detection reads), and rank 0 also under `progress` (what the operator
  copies into status.progress).

Encoding and decoding live here, beside the schema, so that writers (runtime/train) and readers (the
launcher, the operator) cannot disagree on a key; a report that does not parse reads as absent, never as
an error: a reader keeps what it had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from graphtrain.runtime.spec.model import Progress

PROGRESS_FILE = "progress.json"  # in a local run's directory
PROGRESS_KEY = "progress"  # in the progress ConfigMap: the training's progress (rank 0's)


def heartbeat_key(rank: int) -> str:
    """The progress ConfigMap's key of one rank's own report."""
    return f"rank-{rank}"


def to_wire(progress: Progress) -> dict[str, Any]:
    """The JSON document of a report (the same form as status.progress)."""
    return progress.model_dump(by_alias=True, exclude_none=True, mode="json")


def encode(progress: Progress) -> str:
    return json.dumps(to_wire(progress), separators=(",", ":"))


def decode(text: str | bytes | None) -> Progress | None:
    """A report read back; None when there is none or it does not parse (a reader keeps what it had)."""
    if not text:
        return None
    try:
        return Progress.model_validate(json.loads(text))
    except (ValueError, ValidationError):  # JSONDecodeError is a ValueError
        return None


def configmap_data(progress: Progress, rank: int) -> dict[str, str]:
    """What rank `rank` patches into the progress ConfigMap's data: its own report (its heartbeat) and,
    from rank 0, the training's progress."""
    text = encode(progress)
    return {heartbeat_key(rank): text, **({PROGRESS_KEY: text} if rank == 0 else {})}


def training_progress(data: Mapping[str, str] | None) -> Progress | None:
    """The training's progress from the progress ConfigMap's data."""
    return decode((data or {}).get(PROGRESS_KEY))


def rank_report(data: Mapping[str, str] | None, rank: int) -> Progress | None:
    """Rank `rank`'s last report from the progress ConfigMap's data."""
    return decode((data or {}).get(heartbeat_key(rank)))


# ------------------------------------------------------------------------------ progress history
# One entry per finished epoch (after its evaluation), the same Progress schema, bounded: a reader (the
# API) gets a training's curve without a time-series database, and the writer's file or ConfigMap key
# never grows past HISTORY_LIMIT entries (500 entries ~ 125 KB, well under a ConfigMap's 1 MiB).

HISTORY_FILE = "progress-history.json"  # in a local run's directory, written by rank 0
HISTORY_KEY = "history"  # in the progress ConfigMap, patched by rank 0
HISTORY_LIMIT = 500


def rank_file(rank: int) -> str:
    """A local run's file of one rank's own latest report (its heartbeat), relative to the run directory."""
    return f"trainers/rank-{rank}.json"


def append_history(history: list[Progress], entry: Progress, limit: int = HISTORY_LIMIT) -> list[Progress]:
    """The history with `entry` appended, keeping only the last `limit` entries (a new list)."""
    return [*history, entry][-limit:] if limit > 0 else []


def encode_history(history: list[Progress]) -> str:
    return json.dumps([to_wire(p) for p in history], separators=(",", ":"))


def decode_history(text: str | bytes | None) -> list[Progress]:
    """A history read back: [] when there is none or it does not parse, entries that do not parse
    skipped (a reader shows what it can)."""
    if not text:
        return []
    try:
        entries = json.loads(text)
    except ValueError:
        return []
    if not isinstance(entries, list):
        return []
    history = []
    for entry in entries:
        try:
            history.append(Progress.model_validate(entry))
        except ValidationError:
            continue
    return history
