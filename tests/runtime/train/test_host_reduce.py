"""HostReduce: co-located trainers' gradients summed through shared memory, the same bits as gloo's
all_reduce, round after round; ranks on different hosts keep gloo; a dead peer is said, not waited out."""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.contract.roles import PEER_LOST
from graphtrain.runtime.train import host_reduce
from tests.runtime.collective import ranks

SCENARIOS = "tests.runtime.train.host_reduce_scenarios"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
def test_rounds_match_gloo(world: int, tmp_path: Path) -> None:
    got = ranks.run(f"{SCENARIOS}.against_gloo", world, tmp_path)
    for r in range(world):
        if world == 2:  # a + b, whichever way round: gloo's bits
            np.testing.assert_array_equal(got[r]["mine"], got[r]["gloo"])
        else:  # added in rank order here, in gloo's ring order there
            np.testing.assert_allclose(got[r]["mine"], got[r]["gloo"], rtol=1e-6, atol=1e-4)  # |x| to 300
        np.testing.assert_array_equal(got[r]["mine"], got[0]["mine"])  # every rank the same bits


@pytest.mark.timeout(120)
def test_ranks_that_do_not_share_a_place_keep_gloo(tmp_path: Path) -> None:
    got = ranks.run(f"{SCENARIOS}.apart", 2, tmp_path)
    assert all(bool(g["none"]) for g in got)


@pytest.mark.timeout(120)
def test_no_room_in_dev_shm_keeps_gloo_and_leaves_nothing(tmp_path: Path) -> None:
    got = ranks.run(f"{SCENARIOS}.no_room", 2, tmp_path)
    assert all(bool(g["none"]) and int(g["left"]) == 0 and int(g["named"]) > 0 for g in got)


@pytest.mark.timeout(120)
def test_a_dead_peer_is_said_within_seconds(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    ctx = ranks.forked.context()
    procs = [
        ctx.Process(target=ranks._main, args=(f"{SCENARIOS}.peer_gone", r, 2, str(tmp_path), "{}"))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    assert procs[1].exitcode == -9
    assert procs[0].exitcode == 0, (
        (tmp_path / "rank0.err").read_text() if (tmp_path / "rank0.err").exists() else ""
    )
    with np.load(tmp_path / "rank0.npz", allow_pickle=False) as f:
        said = str(f["said"])
        assert (
            said.startswith(f"trainer 0: {PEER_LOST} (trainer 1, pid ")
            and "ended before it published" in said
        )
        assert float(f["seconds"]) < 10


def test_the_place_key_is_stable() -> None:
    assert host_reduce.place_key() == host_reduce.place_key() >= 0


def test_a_second_start_without_finish_is_refused_at_once() -> None:
    numel = 8
    reduce = host_reduce.HostReduce(
        mmap.mmap(-1, host_reduce.header_bytes(1) + 4 * numel), numel, 0, 1, 600.0
    )
    reduce.start([torch.ones(numel)])
    with pytest.raises(RuntimeError, match="never finished"):
        reduce.start([torch.ones(numel)])
    out = torch.empty(numel)
    reduce.finish(out)
    assert out.tolist() == [1.0] * numel
    reduce.start([torch.full((numel,), 2.0)])  # finished: the next round goes on


def test_a_pid_is_alive_only_as_the_process_that_started_then() -> None:
    state, started = host_reduce._stat(os.getpid())
    assert state == "R" and started > 0
    assert host_reduce._alive(os.getpid(), started)
    assert not host_reduce._alive(os.getpid(), started + 1)  # the pid, reused by another process
    child = subprocess.Popen(["true"])
    child_started = host_reduce._stat(child.pid)[1]
    for _ in range(200):  # bounded: `true` exits at once, a zombie until reaped
        if host_reduce._stat(child.pid)[0] == "Z":
            break
        time.sleep(0.01)
    assert not host_reduce._alive(child.pid, child_started)  # a zombie is dead
    child.wait()
    assert not host_reduce._alive(child.pid, child_started)  # reaped: gone
