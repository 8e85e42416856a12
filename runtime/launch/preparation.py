"""What a launch does to its run directory before any process starts, and the clean-up its end owes.

Its own module (split from local.py, which starts and watches the processes): these steps touch only
files, never a process, and each decides from the directory alone. prepare() refuses to delete
checkpoints unasked (changing nothing), says how the previous launch ended when it could not say so
itself, and starts afresh the token, the logs and the run's files; drop_checkpoints() is --overwrite's
deletion, once the input has been read and partitioned (an input refused in one line deletes nothing);
remove_segments() the shared memory killed processes could not unlink. make_run_dir() and
remove_fresh() keep a launch that fails before it starts a process (an input it cannot read, a graph
the spec does not fit) from leaving a run directory behind that it made.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphtrain.contract import rundir
from graphtrain.contract.spec import GraphTraining, Phase
from graphtrain.runtime.data.cache import atomic_file, refusal, write_json
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch import reuse
from graphtrain.runtime.launch.processes import LOCK, rotate_logs
from graphtrain.runtime.train import history

TERMINAL = (Phase.succeeded.value, Phase.failed.value)


@dataclass(frozen=True)
class Prepared:
    """What prepare() leaves the launch: its token ("" when nothing starts), the result of a --resume of
    a run already complete (None: train), and the checkpoints --overwrite deletes once the input is in."""

    token: str = ""
    finished: dict[str, Any] | None = None
    overwritten: Path | None = None


def make_run_dir(run_dir: Path) -> list[Path]:
    """Make `run_dir` (and its missing parents), private to the user; returns the directories this
    call made, the outermost first (remove_fresh's to remove).

    Raises:
        GraphtrainError: it cannot be made (a file there, a read-only or missing parent): one line."""
    made = [p for p in [run_dir, *run_dir.parents] if not p.exists()][::-1]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir.chmod(0o700)  # a directory from before keeps nothing readable to others
    except OSError as exc:
        raise GraphtrainError(
            f"--run-dir {run_dir}: cannot be made a run directory ({refusal(exc)})"
        ) from None
    return made


def fresh(run_dir: Path) -> bool:
    """Whether `run_dir`, locked by this launch, holds nothing but its lock: then all it will hold is
    this launch's own (asked under the lock, so that another launch's files, written before this one
    took it, never count as ours)."""
    return {p.name for p in run_dir.iterdir()} <= {LOCK}


def remove_fresh(run_dir: Path, made: list[Path]) -> None:
    """Remove what a launch that stopped before it started any process wrote in `run_dir` (fresh() when
    it took the lock): the directory itself and the parents in `made` when the launch made them (those
    left empty only), else its contents. A typo in a data path, corrected, then runs in a directory as
    new as before, never one holding a Failed status or needing --overwrite."""
    for p in [run_dir] if run_dir in made else list(run_dir.iterdir()):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    for parent in reversed(made[:-1]):
        with contextlib.suppress(OSError):  # another run directory made in it meanwhile: kept
            parent.rmdir()


def prepare(
    run_dir: Path,
    gt: GraphTraining,
    *,
    resume: bool,
    overwrite: bool,
    say: Callable[[str], None],
    skip_earlier: Callable[[], None],
) -> Prepared:
    """Make `run_dir` (locked by the caller) ready for a launch of `gt` (module docstring); `skip_earlier`:
    told when the earlier launches' progress is behind (their epochs were printed by them).

    Raises:
        CheckpointsExist: checkpoints there, and neither `resume` nor `overwrite`.
        RunFailed: a --resume whose checkpoints do not check out or whose model changed."""
    checkpoints = run_dir / "checkpoints"
    held = checkpoints.is_dir() and any(checkpoints.iterdir())
    if held and not (resume or overwrite):
        what = reuse.describe_checkpoints(checkpoints)
        raise reuse.CheckpointsExist(
            f"{run_dir} holds checkpoints ({what}): continue them with --resume, or delete them "
            "with --overwrite"
        )
    with contextlib.suppress(OSError, ValueError, AttributeError):
        phase = json.loads((run_dir / "status.json").read_text()).get("phase")
        if phase not in TERMINAL:  # and its launcher is gone: we hold the lock
            say(f"[run] the previous launch ended without a final status (killed?); it was {phase}")
    overwritten = None
    if resume:
        finished = reuse.choose_checkpoint(checkpoints, run_dir, gt.spec, say)
        if finished is not None:  # nothing to start: the previous launch's files stay as they are
            return Prepared(finished=finished)
    elif held:  # deleted once the input has been read and partitioned (drop_checkpoints)
        overwritten = checkpoints
    checkpoints.mkdir(exist_ok=True)
    token = run_dir / "token"
    with contextlib.suppress(OSError):  # what the previous launch's killed processes left in /dev/shm
        remove_segments(token.read_text().strip())
    fresh = secrets.token_hex(24)  # fresh shared-memory names for this launch's processes
    with atomic_file(token, mode=0o600) as f:
        f.write(fresh.encode())
    if (run_dir / "logs").is_dir():
        rotate_logs(run_dir / "logs")
    for stale in (rundir.PROGRESS_FILE, "result.json"):
        (run_dir / stale).unlink(missing_ok=True)
    if not resume:  # a resumed run continues its history; a new one starts its own
        (run_dir / rundir.HISTORY_FILE).unlink(missing_ok=True)
        (run_dir / history.METRICS_FILE).unlink(missing_ok=True)
        shutil.rmtree(run_dir / history.TENSORBOARD_DIR, ignore_errors=True)
    skip_earlier()
    shutil.rmtree(run_dir / "trainers", ignore_errors=True)  # the previous launch's heartbeats
    # what readers of the directory (the REST API's local source) take the training's identity from
    write_json(run_dir / rundir.SPEC_FILE, gt.model_dump(by_alias=True, exclude_none=True, mode="json"))
    return Prepared(token=fresh, overwritten=overwritten)


def drop_checkpoints(checkpoints: Path | None, say: Callable[[str], None]) -> None:
    """--overwrite's deletion of the previous `checkpoints` (None: none to delete), after the input was
    read and partitioned: an input refused in one line deletes nothing."""
    if checkpoints is None:
        return
    say(f"[run] --overwrite: deleting {checkpoints} ({reuse.describe_checkpoints(checkpoints)})")
    shutil.rmtree(checkpoints)
    checkpoints.mkdir()


def remove_segments(token: str) -> None:
    """Shared memory that killed processes of the launch with `token` could not unlink (call it once
    every one of them has exited)."""
    from graphtrain.runtime.kvstore.tables.shm import job_prefix, remove_leftovers

    with contextlib.suppress(OSError):
        remove_leftovers(job_prefix(token))
