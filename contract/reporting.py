"""How trainers report progress to their executor: one schema (the spec's Progress, in its wire form:
camelCase JSON, as in a GraphTraining's status.progress), two places it is written.

- A local run: trainer 0 replaces <run-dir>/progress.json on every report; the launcher reads it into
  status.json and watches its updatedAt for stalls.
- A pod: every rank patches its own report into the training's progress ConfigMap under `rank-<i>` (the
  heartbeat the operator's stall detection reads), and rank 0 also under `progress` (what the operator
  copies into status.progress).

Beside the latest report, rank 0 keeps a history: one entry per finished epoch (after its evaluation),
the last HISTORY_LIMIT of them, as a JSON list of reports: <run-dir>/progress-history.json in a local
run, the progress ConfigMap's `history` key in a pod (500 entries are ~125 KB, well under a ConfigMap's
1 MiB). In a local run every rank also writes its own latest report to <run-dir>/trainers/rank-<i>.json
(its heartbeat, as `rank-<i>` is in the ConfigMap).

Encoding and decoding live here, beside the schema, so that writers (runtime/train) and readers (the
launcher, the operator) cannot disagree on a key; a report that does not parse reads as absent, never as
an error: a reader keeps what it had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from graphtrain.contract.spec import Progress

PROGRESS_KEY = "progress"  # in the progress ConfigMap: the training's progress (rank 0's)
HISTORY_KEY = "history"  # in the progress ConfigMap
HISTORY_LIMIT = 500  # entries kept: the latest ones


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
    # JSONDecodeError is a ValueError; a document nested deeper than the interpreter recurses (a crafted
    # ConfigMap or file: '[' * 200000) raises RecursionError: as unreadable as any other
    except (ValueError, RecursionError, ValidationError):
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


def append_history(history: list[Progress], entry: Progress, limit: int = HISTORY_LIMIT) -> list[Progress]:
    """`history` with `entry` last, cut to its latest `limit` entries (a new list; `history` is kept).
    Entries of `entry`'s epoch or later go: a training resumed from an earlier checkpoint trains those
    epochs again, and the history holds one entry per epoch, in order."""
    kept = [p for p in history if p.epoch < entry.epoch]
    return [*kept, entry][-limit:] if limit > 0 else []


def epoch_line(p: Progress) -> str:
    """One finished epoch as people read it: `epoch N/E  loss L  val_<metric> V  R samples/s  validation
    S s`. The loss is the epoch's mean and the metric the one evaluated in that epoch (a history entry
    carries none when the epoch was not evaluated, so no stale value is ever shown); the rate counts the
    training steps only, and the validation pass's seconds follow it."""
    parts = [f"epoch {p.epoch}/{p.epochs}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.eval_metric and p.eval_value is not None:
        parts.append(f"{p.eval_metric} {p.eval_value:.4f}")
    if p.samples_per_second:
        parts.append(f"{p.samples_per_second:,.0f} samples/s")
    if p.eval_metric and p.eval_value is not None and p.eval_seconds is not None:
        parts.append(f"validation {p.eval_seconds:.1f} s")
    return "  ".join(parts)


def in_epoch_line(p: Any) -> str:
    """A line on an epoch still running: `epoch N/E running  step S  loss L  R samples/s` (the loss of
    the latest steps: the epoch's mean comes with its own line; no validation metric, which belongs to
    an epoch already finished). `p`: a Progress, or a trainer's tally with the same fields (epoch counts
    the epochs done, so the one running is epoch + 1). The launcher's line and the trainer log's alike."""
    parts = [f"epoch {p.epoch + 1}/{p.epochs} running", f"step {p.step}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.samples_per_second:
        parts.append(f"{p.samples_per_second:,.0f} samples/s")
    return "  ".join(parts)


def entry_key(p: Progress) -> tuple[int, int, str | None]:
    """What tells history entries apart: an epoch trained again after a resume is a new entry."""
    return (p.epoch, p.step, p.updated_at)


def unseen(history: list[Progress], seen: set[tuple[int, int, str | None]]) -> list[Progress]:
    """The entries of `history` not in `seen` (by entry_key), in order: what a reader prints next."""
    return [p for p in history if entry_key(p) not in seen]


def encode_history(history: list[Progress]) -> str:
    return json.dumps([to_wire(p) for p in history], separators=(",", ":"))


def decode_history(text: str | bytes | None) -> list[Progress]:
    """A history read back: [] when there is none or it is not a JSON list; an entry that does not
    parse is skipped, the others kept (one bad entry costs one point of a chart, not the chart)."""
    if not text:
        return []
    try:
        items = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(items, list):
        return []
    history = []
    for item in items:
        try:
            history.append(Progress.model_validate(item))
        except ValidationError:
            continue
    return history
