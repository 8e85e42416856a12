"""The best epoch by validation metric, and early stopping (training.earlyStopping): pure decisions.

Two references, as PyTorch Lightning keeps them apart: the best checkpoint follows the highest value seen
(any strict rise moves it), while patience counts validation passes since the last *counted*
improvement, a rise of more than `min_delta` over the value that last counted. Accuracy and filtered
MRR are better when higher; an error (edge regression's RMSE) when lower (`lower`: a fall counts).

The state is not stored in the checkpoints: every validation pass is appended to
<checkpoints>/validation.json (rank 0), and a resumed trainer replays the passes up to its checkpoint's
step. So a checkpoint taken before its epoch's evaluation (a step interval that ends on the epoch's last
step) still resumes with the right state, and passes of an abandoned timeline (after the checkpoint
resumed from) are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from graphtrain.runtime.data.cache import atomic_file

VALIDATION_FILE = "validation.json"  # in the checkpoint root


@dataclass(frozen=True)
class Pass:
    """One validation pass: the epoch and step it followed and the metric's value."""

    epoch: int
    step: int
    value: float


@dataclass(frozen=True)
class Best:
    """Where a training stands: its best pass (None before the first), the value of the last counted
    improvement and the passes since it."""

    best: Pass | None = None
    reference: float | None = None
    stale: int = 0


def update(state: Best, p: Pass, min_delta: float = 0.0, lower: bool = False) -> tuple[Best, bool]:
    """`state` after pass `p`, and whether `p` is the new best (its checkpoint becomes BEST); `lower`:
    the metric is better when lower."""
    sign = -1.0 if lower else 1.0
    improved = state.best is None or sign * p.value > sign * state.best.value
    counted = state.reference is None or sign * p.value > sign * state.reference + min_delta
    return (
        Best(
            best=p if improved else state.best,
            reference=p.value if counted else state.reference,
            stale=0 if counted else state.stale + 1,
        ),
        improved,
    )


def replay(passes: Iterable[Pass], min_delta: float = 0.0, lower: bool = False) -> Best:
    """The state after `passes`, in order."""
    state = Best()
    for p in passes:
        state, _ = update(state, p, min_delta, lower)
    return state


def should_stop(state: Best, patience: int | None) -> bool:
    """Early stopping's rule: `patience` passes without a counted improvement (never without patience)."""
    return patience is not None and state.stale >= patience


def stop_reason(state: Best, metric: str, patience: int, min_delta: float) -> str:
    """Why a training stopped early, in one sentence."""
    assert state.best is not None
    by = f" by more than {min_delta:g}" if min_delta else ""
    return (
        f"{metric} has not improved{by} for {patience} validation pass{'es' if patience != 1 else ''} "
        f"(training.earlyStopping.patience); best {state.best.value:.4f} at epoch {state.best.epoch}"
    )


def checkpoint_name(step: int) -> str:
    """A checkpoint's directory name (the trainers' step-%09d)."""
    return f"step-{step:09d}"


def until(passes: Sequence[Pass], step: int, epoch: int | None = None) -> list[Pass]:
    """The passes at or before `step` and of the `epoch` epochs done: those a checkpoint of that step
    had seen. A checkpoint taken at an epoch's last step by checkpointInterval records the epoch as
    still running (its validation pass comes after it, at the same step), so the step alone would
    replay that pass and the resumed run, ending the epoch again, would record it twice."""
    return [p for p in passes if p.step <= step and (epoch is None or p.epoch <= epoch)]


def load(root: Path) -> list[Pass]:
    """The passes recorded under a checkpoint root; [] when none (or the file does not parse: then the
    best checkpoint starts over, which loses a marker, never a model)."""
    try:
        items = json.loads((root / VALIDATION_FILE).read_text())
        return [Pass(int(i["epoch"]), int(i["step"]), float(i["value"])) for i in items]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return []


def save(root: Path, passes: Sequence[Pass]) -> None:
    """Replace the recorded passes (atomically)."""
    root.mkdir(parents=True, exist_ok=True)
    with atomic_file(root / VALIDATION_FILE) as f:
        f.write(json.dumps([asdict(p) for p in passes], separators=(",", ":")).encode())
