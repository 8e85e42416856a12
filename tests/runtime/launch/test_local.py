"""The launcher's pure parts: condition transition times, how a process' end is worded, the run
directory's lock and the per-launch rotation of logs; and how it stops its shard servers at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphtrain.contract.spec import Condition, Progress, load_yaml, parse
from graphtrain.runtime.launch import status
from graphtrain.runtime.launch.processes import (
    RunDirLocked,
    child_env,
    ended,
    lock_run_dir,
    remove_sockets,
    rotate_logs,
)
from graphtrain.runtime.launch.reuse import partition_key

EXAMPLE = Path(__file__).parents[3] / "examples" / "nations-transe.yaml"
T1, T2, T3 = "2025-01-01T00:00:01+00:00", "2025-01-01T00:00:02+00:00", "2025-01-01T00:00:03+00:00"


def times(conditions: list[Condition]) -> dict[str, tuple[str, str | None]]:
    return {str(c.type): (c.status, c.last_transition_time) for c in conditions}


def test_a_condition_keeps_the_time_of_its_last_transition() -> None:
    gt = load_yaml(EXAMPLE.read_text())
    shards = [{"index": 0, "state": "Pending"}, {"index": 1, "state": "Ready"}]
    obs = status.RunObserved(phase="Starting", shards=shards)
    first = status.build(gt, obs, [], T1).conditions
    assert times(first) == {"SpecValid": ("True", T1), "ShardsReady": ("False", T1)}

    obs.shards[0]["state"] = "Ready"
    obs.progress = Progress(epoch=1, epochs=2)
    second = status.build(gt, obs, first, T2).conditions
    # SpecValid held: its time stays; ShardsReady turned True: now; TrainersReady is new: now.
    assert times(second) == {
        "SpecValid": ("True", T1),
        "ShardsReady": ("True", T2),
        "TrainersReady": ("True", T2),
    }

    third = status.build(gt, obs, second, T3).conditions  # nothing changed: no time moves
    assert times(third) == times(second)


def test_a_finished_run_says_its_trainers_are_done_as_the_operator_does() -> None:
    gt = load_yaml(EXAMPLE.read_text())
    obs = status.RunObserved(phase="Succeeded", shards=[{"index": 0, "state": "Ready"}])
    obs.progress = Progress(epoch=2, epochs=2)
    conds = {str(c.type): c for c in status.build(gt, obs, [], T1).conditions}
    assert (conds["TrainersReady"].status, conds["TrainersReady"].reason) == ("False", "Completed")
    assert (conds["Succeeded"].status, conds["Succeeded"].reason) == ("True", "Completed")


def test_build_is_pure() -> None:
    gt = load_yaml(EXAMPLE.read_text())
    obs = status.RunObserved(phase="Training", shards=[{"index": 0, "state": "Ready"}])
    assert status.build(gt, obs, [], T1) == status.build(gt, obs, [], T1)


@pytest.mark.parametrize(
    "code, text",
    [
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (-9, "was killed by SIGKILL"),
        (-15, "was killed by SIGTERM"),
        (-11, "was killed by SIGSEGV"),
    ],
)
def test_a_process_end_is_worded_by_signal_name(code: int, text: str) -> None:
    assert ended(code) == text


def test_a_locked_run_directory_names_its_holder(tmp_path: Path) -> None:
    with lock_run_dir(tmp_path):
        with pytest.raises(RunDirLocked) as caught, lock_run_dir(tmp_path):
            pass
        message = str(caught.value)
        assert str(tmp_path) in message and f"pid {os.getpid()}" in message
        assert "\n" not in message
    with lock_run_dir(tmp_path):  # released with its holder
        pass


def test_logs_rotate_once_per_launch(tmp_path: Path) -> None:
    for launch in ("first", "second", "third", "fourth"):
        rotate_logs(tmp_path, keep=2)
        (tmp_path / "trainer-0.log").write_text(f"{launch}\n")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["trainer-0.log", "trainer-0.log.1", "trainer-0.log.2"]
    assert (tmp_path / "trainer-0.log").read_text() == "fourth\n"
    assert (tmp_path / "trainer-0.log.1").read_text() == "third\n"
    assert (tmp_path / "trainer-0.log.2").read_text() == "second\n"


def test_the_partition_is_reused_whatever_the_pods_placement() -> None:
    """The local executor ignores where Kubernetes would run the partition Job (resources,
    nodeSelector, ...): changing it does not partition again; changing the partition does."""
    base = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "wn"},
        "spec": {"graph": {"dataset": "wordnet"}, "partition": {"parts": 2}},
    }
    placed = {
        **base,
        "spec": {
            **base["spec"],
            "partition": {
                "parts": 2,
                "resources": {"limits": {"memory": "64Gi"}},
                "nodeSelector": {"pool": "big"},
                "tolerations": [{"key": "big", "operator": "Exists"}],
                "priorityClassName": "batch",
            },
        },
    }

    def key(doc: dict) -> str:
        spec = parse(doc).spec
        return partition_key(spec, spec.graph, {"graph.dataset": "abc"})

    assert key(placed) == key(base)
    more = {**base, "spec": {**base["spec"], "partition": {"parts": 3}}}
    assert key(more) != key(base)
    spec = parse(base).spec
    assert partition_key(spec, spec.graph, {"graph.dataset": "other"}) != key(base)  # other input bytes


def test_the_servers_stop_at_the_end_of_a_run_by_sigterm_without_torch(tmp_path: Path) -> None:
    """The end of a run stops its shard servers with SIGTERM (what roles/shard_server.py takes as a
    shutdown request), not through a kvstore client, whose import is torch's: ~2 s of CPU at the end of
    every `graphtrain run`. Two stand-in servers that leave on SIGTERM only, in a process without torch."""
    server = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print('up')"
    server += "; sys.stdout.flush(); time.sleep(60)"
    code = f"""
import sys
from pathlib import Path
from graphtrain.runtime.launch import local, plan, processes

run = local.LocalRun.__new__(local.LocalRun)
plans = [plan.ProcessPlan(f"shard-{{i}}", [sys.executable, "-c", {server!r}]) for i in range(2)]
run.servers = [processes.spawn(p, Path({str(tmp_path)!r}), announces=True) for p in plans]
for c in run.servers:
    assert c.proc.stdout.readline() == b"up\\n"
run._shutdown_servers(grace=20)
print([c.proc.returncode for c in run.servers], "torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[0, 0] False", done.stdout  # each left by its SIGTERM handler


def test_every_child_runs_with_the_roles_process_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short OpenMP spin (contract/roles.process_env) reaches every process of a run, and the zygote
    they fork from; a user's own spin count wins."""
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert child_env()["GOMP_SPINCOUNT"] == "30000"
    monkeypatch.setenv("GOMP_SPINCOUNT", "500")
    assert child_env()["GOMP_SPINCOUNT"] == "500"


def test_the_sockets_a_killed_server_left_are_removed_its_lanes_too_and_nothing_else(tmp_path: Path) -> None:
    import socket

    made = []
    for name in ("shard-0.sock", "shard-0.sock.lane", "shard-1.sock.lane"):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp_path / name))
        made.append(s)
    (tmp_path / "shard-2.sock.lane").write_text("not a socket: kept")
    remove_sockets(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-2.sock.lane"]
    for s in made:
        s.close()
