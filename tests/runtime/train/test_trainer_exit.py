"""A trainer that fails leaves at once (roles/train.py leave_failed), whatever its process group is doing:
the interpreter's teardown destroys gloo's process group, which joins its thread waiting in a collective
whose peer is gone or cut off, so a trainer that had said `error: ...` sat out gloo's timeout before its
launcher or pod saw it fail (a cut between simulated hosts, runtime/launch/hosts.py: 600 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

RANK = """
import sys, time
from pathlib import Path
import torch, torch.distributed as dist
rank, store = int(sys.argv[1]), sys.argv[2]
if rank == 1:  # a peer that never joins rank 0's collective: cut off, or busy elsewhere
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=1, world_size=2)
    time.sleep(120)
    sys.exit(0)
from graphtrain.contract.roles import TrainParams
from graphtrain.runtime import graph
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.roles.train import train
from graphtrain.runtime.train import tasks

graph.standalone_client = graph.DistGraph = lambda *args, **kwargs: None  # no partition needed

def failing(*args, **kwargs):  # a step failed with gradients in flight (DDP's all-reduce)
    global pending
    pending = dist.all_reduce(torch.ones(4), async_op=True)
    raise GraphtrainError("shard 1 did not answer")

tasks.make_task = failing
params = dict(spec_path=Path(sys.argv[3]), partition=Path("p"), standalone=True, world=2, init=f"file://{store}")
train(TrainParams(**params))
"""


@pytest.mark.timeout(120)
def test_a_failed_trainer_leaves_at_once_with_a_collective_in_flight(tmp_path: Path) -> None:
    store, spec = tmp_path / "store", Path(__file__).parents[3] / "examples" / "wordnet-sage.yaml"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    argv = [sys.executable, "-c", RANK]
    peer = subprocess.Popen([*argv, "1", str(store), str(spec)], env=env, stdout=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        done = subprocess.run(
            [*argv, "0", str(store), str(spec)], env=env, capture_output=True, text=True, timeout=60
        )
        took = time.monotonic() - start
    finally:
        peer.kill()
        peer.wait(10)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "error: shard 1 did not answer"
    assert "Traceback" not in done.stderr
    assert took < 30, took  # not the process group's timeout (600 s) of the all-reduce in flight
