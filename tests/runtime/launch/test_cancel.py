"""A run in a thread stopped from another (bench/hosts.py's and bench/faults.py's timeouts, Ctrl-C there):
LocalRun.cancel stops it as Ctrl-C stops `graphtrain run`. Those harnesses called stop_all from their
own thread, which the run's monitor took for failed trainers: it restarted them, and the harness' own
exit then waited on a run it believed stopped (seen across simulated hosts cut apart)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from graphtrain.runtime.stopping import Terminated
from tests.runtime.launch.test_run import launch, nations


@pytest.mark.timeout(240)
def test_cancel_stops_a_run_in_another_thread_without_a_restart(tmp_path: Path) -> None:
    run = launch(nations(epochs=10_000), tmp_path / "run")
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = run.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test (Terminated is a KeyboardInterrupt)
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 180
    while not (run.run_dir / "progress.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.cancel("the harness' timeout")
    thread.join(timeout=60)
    assert not thread.is_alive(), "the run did not stop"
    assert isinstance(out.get("error"), Terminated), out
    doc = json.loads((run.run_dir / "status.json").read_text())
    failed = next(c for c in doc["conditions"] if c["type"] == "Failed")
    assert (doc["phase"], doc.get("restarts", 0), failed["message"]) == ("Failed", 0, "the harness' timeout")
    assert all(c.proc.poll() is not None for c in [*run.trainers, *run.servers])
