"""A local run that fails (test_run.py's launcher, on Nations): the error shows only this launch's log,
the previous launches' kept beside it, and runPolicy.activeDeadlineSeconds stops every process with the
operator's reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphtrain.runtime.launch.local import RunFailed
from tests.runtime.launch.test_run import launch, nations, run_and_kill, status


@pytest.mark.timeout(300)
def test_a_failure_shows_only_this_launchs_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "trainer-0.log").write_text("from an earlier launch: epoch 20/20, all done\n")
    (run_dir / "launch.lock").write_text(
        ""
    )  # every launch leaves its lock (a directory of other files is refused)
    run = launch(nations(epochs=50), run_dir, standalone=True)
    result, error = run_and_kill(run, "trainer-0", after_checkpoint=False, at_once=True)
    assert result is None and isinstance(error, RunFailed)
    assert "trainer-0 was killed by SIGKILL" in str(error)
    assert "earlier launch" not in str(error)
    assert "earlier launch" not in (run_dir / "logs" / "trainer-0.log").read_text()
    assert "earlier launch" in (run_dir / "logs" / "trainer-0.log.1").read_text()  # kept, beside


@pytest.mark.timeout(300)
def test_the_deadline_stops_the_run_with_the_operators_reason(tmp_path: Path) -> None:
    doc = nations(epochs=100_000)
    doc["spec"]["runPolicy"] = {"activeDeadlineSeconds": 2}
    run = launch(doc, tmp_path / "run", standalone=True)
    with pytest.raises(RunFailed, match="activeDeadlineSeconds"):
        run.run()
    st = status(run.run_dir)
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert st["phase"] == "Failed" and failed["reason"] == "DeadlineExceeded", st["conditions"]
    assert all(c.proc.poll() is not None for c in run.trainers)
