"""`graphtrain plot RUN_DIR`: a run's loss and validation curves as a PNG, from its metrics.csv.

Reading is pure (read_metrics: the CSV's text to columns of floats, an empty cell a gap); drawing uses
matplotlib's Agg backend (no display needed), imported only here: the `plot` extra brings it.
Two panels side by side: the training loss by epoch, and the validation metrics by epoch (accuracy for
GraphSAGE; MRR and Hits@k for KGE, all in [0, 1]), each metric drawn only where it was evaluated.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from graphtrain.contract import rundir
from graphtrain.runtime.data.cache import atomic_file, make_dirs, read_text
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.targets import check_target
from graphtrain.runtime.train.history import LEADING, METRICS_FILE, TRAILING


@dataclass(frozen=True)
class Metrics:
    """A run's history by epoch: the loss and each validation metric (NaN where not evaluated)."""

    epochs: list[int]
    loss: list[float]
    validation: dict[str, list[float]]


def _number(cell: str) -> float:
    try:
        return float(cell) if cell else math.nan
    except ValueError:
        return math.nan


def _epoch(cell: str, where: str) -> int:
    """An epoch cell: a whole number >= 0 (a damaged or edited file says where it is not)."""
    value = _number(cell)
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise GraphtrainError(f"{where}: epoch {cell!r} is not a whole number of epochs")
    return int(value)


def read_metrics(text: str, source: str = METRICS_FILE) -> Metrics:
    """The columns of a metrics.csv (history.py's layout).

    Raises:
        GraphtrainError: not such a file, or one without a row (`source` names it).
    """
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][: len(LEADING)] != list(LEADING):
        raise GraphtrainError(
            f"{source}: not a graphtrain metrics.csv (its header should start with epoch,step,loss)"
        )
    header = rows[0]
    body = [(n, r) for n, r in enumerate(rows[1:], start=2) if len(r) == len(header)]
    if not body:
        raise GraphtrainError(f"{source}: no epoch finished yet, nothing to plot")
    names = [c for c in header if c not in LEADING and c not in TRAILING]
    cols = {c: [_number(r[i]) for _, r in body] for i, c in enumerate(header)}
    return Metrics(
        epochs=[_epoch(r[0], f"{source}:{n}") for n, r in body],
        loss=cols["loss"],
        validation={n: cols[n] for n in names if any(not math.isnan(v) for v in cols[n])},
    )


def plot(m: Metrics, out: Path, title: str = "", mode: int = 0o666) -> Path:
    """Draw `m` into the PNG `out`, written under a temporary name and renamed into place (its missing
    parent directories created, as export and predict do); `mode` before the umask (0o600 inside a run
    directory, whose files are the user's alone).

    Raises:
        GraphtrainError: matplotlib is not installed (the `plot` extra), or `out` cannot be written.
    """
    try:
        import matplotlib
    except ImportError:
        raise GraphtrainError("graphtrain plot needs matplotlib: pip install 'graphtrain[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    left.plot(m.epochs, m.loss, marker="o", markersize=3, color="tab:blue")
    left.set(xlabel="epoch", ylabel="training loss (epoch mean)", title="loss")
    for name, values in m.validation.items():
        points = [(e, v) for e, v in zip(m.epochs, values, strict=True) if not math.isnan(v)]
        xs, ys = zip(*points, strict=True)
        right.plot(xs, ys, marker="o", markersize=3, label=name)
    right.set(xlabel="epoch", title="validation")
    if m.validation:
        first = next(iter(m.validation.values()))
        best = max((v, -e) for e, v in zip(m.epochs, first, strict=True) if not math.isnan(v))
        right.axvline(-best[1], color="grey", linestyle=":", label=f"best epoch {-best[1]}")
        right.legend(loc="best", fontsize="small")
    else:
        right.text(0.5, 0.5, "no validation pass", ha="center", va="center", transform=right.transAxes)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        make_dirs(out.parent)
        with atomic_file(out, mode) as f:
            fig.savefig(f, format="png")
    finally:
        plt.close(fig)
    return out


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """The curves of the run in `run_dir` into `out` (default <run_dir>/metrics.png).

    Raises:
        GraphtrainError: the run has no metrics.csv or no finished epoch in it, or `out` is not a .png
            file that can be written.
    """
    if not run_dir.exists():
        raise GraphtrainError(f"{run_dir}: no such run directory")
    if out is None and not run_dir.is_dir():
        raise GraphtrainError(f"{run_dir}: not a run directory (a file)")
    option = "--output" if out is not None else "the plot"
    private = out is None  # the default, inside the run directory: private as the run's own files
    out = out or run_dir / "metrics.png"
    # before any work: not a directory, a .png, a parent that can be made and written in
    check_target(out, (".png",), "metrics", option)
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise GraphtrainError(
            f"{run_dir} has no metric history ({METRICS_FILE}): not a run directory, or no epoch finished yet"
        )
    if not path.is_file():  # a FIFO would block the read
        raise GraphtrainError(f"{path}: not a regular file")
    text = read_text(path)  # one line for an unreadable or non-UTF-8 file
    return plot(read_metrics(text, str(path)), out, title=run_name(run_dir), mode=0o600 if private else 0o666)


def run_name(run_dir: Path) -> str:
    """The training's name, as its run directory records it (else the directory's name)."""
    try:
        return str(json.loads((run_dir / rundir.SPEC_FILE).read_text())["metadata"]["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return run_dir.name
