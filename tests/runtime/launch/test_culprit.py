"""processes.culprit: which failed process a local run names, and when it waits to know."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from graphtrain.contract.roles import PEER_LOST
from graphtrain.runtime.launch.processes import PEER_LOSS_GRACE, Child, culprit

LOST = f"error: trainer 0: {PEER_LOST} (Connection closed by peer): its own log says why"


def child(tmp_path: Path, name: str, said: str, ended_at: float | None) -> Child:
    """A failed child whose log says `said`; `ended_at`: the zygote's stamp (None: a plain process)."""
    log = tmp_path / f"{name}.log"
    log.write_text(f"starting\n{said}\n")
    proc = SimpleNamespace(returncode=1, ended_at=ended_at, poll=lambda: 1)
    return Child(plan=SimpleNamespace(name=name), proc=proc, log=log)  # type: ignore[arg-type]


def test_an_own_failure_is_named_before_an_earlier_peer_loss(tmp_path: Path) -> None:
    survivor = child(tmp_path, "trainer-0", LOST, ended_at=10.0)
    killed = child(tmp_path, "trainer-1", "", ended_at=10.5)  # its report came later
    assert culprit([survivor, killed], others_running=True, now=11.0) is killed
    assert culprit([killed, survivor], others_running=False, now=11.0) is killed


def test_of_two_own_failures_the_first_to_end_is_named(tmp_path: Path) -> None:
    a = child(tmp_path, "trainer-0", "error: out of memory", ended_at=5.0)
    b = child(tmp_path, "shard-0", "error: disk full", ended_at=4.0)
    assert culprit([a, b], others_running=True, now=6.0) is b


def test_a_peer_loss_alone_waits_while_another_trainer_runs_then_is_named(tmp_path: Path) -> None:
    """The killed peer's end may not have been seen yet: wait, bounded by PEER_LOSS_GRACE."""
    survivor = child(tmp_path, "trainer-0", LOST, ended_at=100.0)
    assert culprit([survivor], others_running=True, now=100.1) is None
    assert culprit([survivor], others_running=True, now=100.0 + PEER_LOSS_GRACE - 0.1) is None
    assert culprit([survivor], others_running=True, now=100.0 + PEER_LOSS_GRACE) is survivor  # a hung peer
    assert culprit([survivor], others_running=False, now=100.1) is survivor  # no one left to blame


def test_a_plain_process_is_timed_from_when_the_launcher_first_saw_it_ended(tmp_path: Path) -> None:
    survivor = child(tmp_path, "trainer-0", LOST, ended_at=None)
    assert culprit([survivor], others_running=True, now=50.0) is None
    assert survivor.seen_ended == 50.0
    assert culprit([survivor], others_running=True, now=50.0 + PEER_LOSS_GRACE / 2) is None
    assert survivor.seen_ended == 50.0  # the first sighting, not the latest
    assert culprit([survivor], others_running=True, now=50.0 + PEER_LOSS_GRACE) is survivor


def test_a_peer_loss_said_by_an_earlier_run_in_the_same_log_does_not_count(tmp_path: Path) -> None:
    """A restarted trainer appends to its predecessor's log: only its own lines (from `offset`) tell."""
    c = child(tmp_path, "trainer-0", LOST, ended_at=1.0)
    c.offset = c.log.stat().st_size
    with c.log.open("a") as f:
        f.write("error: out of memory\n")
    assert not c.lost_peer()
    assert culprit([c], others_running=True, now=1.1) is c


# what the kvstore client raises when a shard server is gone (zmq_transport.py, client/fastlane.py), as
# a trainer says it (roles/train.py: leave_failed)
SHARD_GONE = [
    "error: shard 1 (tcp://10.0.0.7:7000) did not answer push_grad of 'emb' within 30 s (1 attempt); is the "
    "server running?",
    "error: shard 0 (tcp://127.0.0.1:41234) closed the connection before answering barrier (not retried: it "
    "may have been applied); did the server stop or restart?",
    "error: shard 1 (tcp://h:7000) closed its connection (the server stopped, or was restarted): ...",
    "error: shard 1 (tcp://h:7000): the fast lane failed before answering push_grad of 'emb' (not retried)",
]


@pytest.mark.parametrize("said", SHARD_GONE)
def test_a_trainer_that_lost_its_shard_server_waits_for_the_servers_end_then_names_it(
    tmp_path: Path, said: str
) -> None:
    """A killed shard server's end can be reported after the trainer it failed: the trainer is not named
    at once (even with no other trainer running), and the server is once its end is seen."""
    trainer = child(tmp_path, "trainer-0", said, ended_at=20.0)
    assert trainer.lost_shard() and not trainer.lost_peer()
    assert culprit([trainer], others_running=False, now=20.5) is None
    server = child(tmp_path, "shard-1", "", ended_at=19.9)
    assert culprit([trainer, server], others_running=False, now=21.0) is server
    assert culprit([trainer], others_running=False, now=20.0 + PEER_LOSS_GRACE) is trainer  # a hung server


def test_a_shard_servers_refusal_is_the_trainers_own_failure(tmp_path: Path) -> None:
    """A server that answered (an id outside its rows) is alive: nothing to wait for."""
    said = (
        "error: shard 0 (tcp://h:7000) refused pull: id 9 (position 0) of 'emb' is outside this shard's rows"
    )
    trainer = child(tmp_path, "trainer-0", said, ended_at=5.0)
    assert not trainer.lost_shard()
    assert culprit([trainer], others_running=True, now=5.1) is trainer
