"""A trainer whose peer went away mid-collective says so in one line (rank, gloo's reason), not torch's
traceback: two real gloo ranks on this host, rank 0 leaving after the first collective."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphtrain.runtime.train.dist import peer_lost

RANK = """
import os, sys, time
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.train.dist import Dist, peers_named
rank = int(sys.argv[1])
with Dist(rank, 2, "portfile:" + sys.argv[2]) as dist:
    dist.sum([1.0])
    if rank == 0:
        os._exit(1)
    try:
        with peers_named(rank):
            for _ in range(500):
                dist.sum([1.0])
                time.sleep(0.01)
    except GraphtrainError as exc:
        print(exc)
"""


@pytest.mark.timeout(120)
def test_a_lost_peer_is_one_line_naming_the_rank(tmp_path: Path) -> None:
    port = str(tmp_path / "port")
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    out, err = ranks[1].communicate(timeout=90)
    ranks[0].communicate(timeout=30)
    assert ranks[1].returncode == 0, err[-2000:]
    (line,) = out.splitlines()
    assert line.startswith("trainer 1: another trainer went away (") and "by peer" in line, line
    assert "GLHF" not in line and "pair.cc" not in line


def test_other_errors_are_not_taken_for_a_lost_peer() -> None:
    assert peer_lost("expected scalar type Float but found Double") is None
    said = peer_lost(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[10.0.0.7]:11429. This is typically caused by a remote worker crashing. GLHF!"
    )
    assert said is not None and said.startswith(
        "another trainer went away (Connection closed by peer [10.0.0.7]:11429)"
    )
