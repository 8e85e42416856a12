"""The shard server's pure policies, with literal inputs: who may connect (ZAP), in which order requests
run (FairQueue), when a peer that does not read is dropped (Outbox), and barrier rounds."""

from __future__ import annotations

import pytest

from graphtrain.runtime.kvstore.serving.barrier import Barriers
from graphtrain.runtime.kvstore.serving.fairqueue import FairQueue, PeerState, QueueFull
from graphtrain.runtime.kvstore.serving.outbox import Outbox, Sent
from graphtrain.runtime.kvstore.wire import auth
from graphtrain.runtime.kvstore.wire.protocol import ProtocolError

TOKEN = b"s3cret-token"


def zap(
    mechanism: bytes = b"PLAIN",
    user: bytes = auth.USERNAME,
    password: bytes = TOKEN,
    domain: bytes = b"graphtrain",
):
    return [b"1.0", b"id-7", domain, b"10.0.0.9", b"", mechanism, user, password]


@pytest.mark.parametrize(
    ("request_", "ok"),
    [
        (zap(), True),
        (zap(password=b"s3cret-tokeN"), False),
        (zap(password=b""), False),
        (zap(password=TOKEN + b"x"), False),
        (zap(user=b"root"), False),
        (zap(mechanism=b"NULL"), False),
        (zap(domain=b"other"), False),
        (zap()[:6], False),  # PLAIN without credentials
        ([b"1.0"], False),
        ([], False),
    ],
)
def test_zap_admits_only_the_token(request_: list[bytes], ok: bool) -> None:
    reply, admitted = auth.zap_reply(request_, TOKEN)
    assert admitted is ok
    assert reply[0] == b"1.0" and len(reply) == 6
    assert reply[2] == (b"200" if ok else b"400" if len(request_) >= 6 else b"500")
    assert TOKEN not in b"".join(reply)  # the reply never carries the secret


def test_token_length_is_bounded_by_plain() -> None:
    assert auth.check_token("a" * 255) == b"a" * 255
    with pytest.raises(ValueError, match="256 bytes"):
        auth.check_token("a" * 256)


# ------------------------------------------------------------------------------------ FairQueue


def drain(q: FairQueue) -> list[tuple[str, str]]:
    out = []
    while (item := q.get(0.0)) is not None:
        out.append(item)
        q.finish(item[0])
    return out


def test_peers_are_served_round_robin_and_in_order() -> None:
    q = FairQueue(slots=1)
    for i in range(3):
        q.put("flood", f"f{i}")
    q.put("quiet", "q0")
    assert drain(q) == [("flood", "f0"), ("quiet", "q0"), ("flood", "f1"), ("flood", "f2")]


def test_a_peer_holds_at_most_its_slots() -> None:
    q = FairQueue(slots=2)
    for i in range(4):
        q.put("a", i)
    q.put("b", "b0")
    assert q.get(0) == ("a", 0)
    assert q.get(0) == ("b", "b0")  # round robin: a's second slot waits its turn
    assert q.get(0) == ("a", 1)
    assert q.get(0) is None  # a has both slots, b has nothing left
    assert q.state("a") is PeerState.running
    q.finish("a")
    assert q.get(0) == ("a", 2)  # in the order they came


def test_a_parked_stream_keeps_its_slot_and_resumes_first() -> None:
    q = FairQueue(slots=1)
    q.put("a", "pull")
    q.put("a", "push")
    assert q.get(0) == ("a", "pull")
    q.park("a")
    assert q.state("a") is PeerState.parked and q.get(0) is None  # the only slot is the stream's
    q.resume("a", "pull, continued")
    assert q.get(0) == ("a", "pull, continued")
    q.finish("a")
    assert q.get(0) == ("a", "push")


def test_queue_bound_and_drop() -> None:
    q = FairQueue(per_peer=2)
    q.put("a", 1)
    q.put("a", 2)
    with pytest.raises(QueueFull):
        q.put("a", 3)
    assert q.drop("a") == [1, 2]
    assert q.get(0) is None and q.queued() == 0
    q.resume("a", "late")  # a dropped peer's parked stream is not resumed
    assert q.get(0) is None


def test_oldest_wait_counts_ready_peers_only() -> None:
    q = FairQueue()
    assert q.oldest_wait(1e9) == 0.0
    q.put("a", 1)
    assert q.oldest_wait(1e12) > 0
    q.get(0)
    assert q.oldest_wait(1e12) == 0.0  # running, not waiting for a worker


# --------------------------------------------------------------------------------------- Outbox


class Pipe:
    """A fake ROUTER: each peer's pipe takes `room` messages, then is full; unknown peers are gone."""

    def __init__(self, room: dict[bytes, int]):
        self.room = room
        self.sent: list[tuple[bytes, list]] = []

    def __call__(self, peer: bytes, frames: list) -> Sent:
        if peer not in self.room:
            return Sent.gone
        if self.room[peer] <= 0:
            return Sent.full
        self.room[peer] -= 1
        self.sent.append((peer, frames))
        return Sent.ok


def test_a_full_peer_waits_without_holding_back_others() -> None:
    pipe = Pipe({b"slow": 1, b"fast": 100})
    box = Outbox(pipe, max_messages=10, stall_seconds=5)
    for i in range(3):
        box.post(b"slow", [f"s{i}"])
        box.post(b"fast", [f"f{i}"])
    assert box.flush(0.0) == []
    assert [f for p, f in pipe.sent if p == b"fast"] == [["f0"], ["f1"], ["f2"]]
    assert box.backlog(b"slow") == 2
    pipe.room[b"slow"] = 5  # it reads again: the backlog goes out, in order
    assert box.flush(1.0) == []
    assert [f for p, f in pipe.sent if p == b"slow"] == [["s0"], ["s1"], ["s2"]]
    assert not box.pending()


def test_a_peer_past_its_backlog_bound_is_dropped() -> None:
    pipe = Pipe({b"p": 0})
    box = Outbox(pipe, max_messages=3, stall_seconds=100)
    for i in range(5):
        box.post(b"p", [i], 10)
    (d,) = box.flush(0.0)
    assert (d.peer, d.reason) == (b"p", "backlog")
    assert box.is_dropped(b"p")
    box.post(b"p", ["late"])
    assert box.flush(0.1) == [] and not box.pending()


def test_a_peer_that_takes_nothing_for_the_stall_time_is_dropped() -> None:
    pipe = Pipe({b"p": 0})
    box = Outbox(pipe, max_messages=100, stall_seconds=5)
    box.post(b"p", ["x"])
    assert box.flush(0.0) == []
    assert box.flush(4.9) == []
    (d,) = box.flush(5.1)
    assert d.reason == "stalled"


def test_progress_resets_the_stall_clock_and_bytes_are_bounded() -> None:
    pipe = Pipe({b"p": 0})
    box = Outbox(pipe, max_messages=100, max_bytes=1000, stall_seconds=5)
    box.post(b"p", ["a"], 400)
    box.post(b"p", ["b"], 400)
    box.flush(0.0)
    pipe.room[b"p"] = 1
    assert box.flush(4.0) == []  # one went out: the clock restarts
    assert box.flush(8.5) == []
    box.post(b"p", ["c"], 700)
    (d,) = box.flush(8.6)
    assert d.reason == "backlog"


def test_a_vanished_peer_is_gone() -> None:
    box = Outbox(Pipe({}))
    box.post(b"x", ["reply"])
    (d,) = box.flush(0.0)
    assert d.reason == "gone"


# ------------------------------------------------------------------------------------- barriers


def test_a_round_is_released_when_complete() -> None:
    b = Barriers()
    assert b.arrive("k", 2, "a", 10.0) is None
    assert b.arrive("k", 2, "b", 10.0) == ["a", "b"]
    assert b.open() == 0


def test_a_participant_that_gave_up_does_not_count_in_the_next_round() -> None:
    b = Barriers()
    assert b.arrive("k", 2, "a-late", 1.0) is None
    (e,) = b.expire(1.5)
    assert (e.who, e.key, e.arrived, e.count) == ("a-late", "k", 1, 2)
    assert b.arrive("k", 2, "a", 10.0) is None  # the round does not count the one that gave up
    assert b.arrive("k", 2, "b", 10.0) == ["a", "b"]


def test_a_round_keeps_its_count() -> None:
    b = Barriers()
    b.arrive("k", 3, "a", 10.0)
    with pytest.raises(ProtocolError, match="open for 3 participants, not 2"):
        b.arrive("k", 2, "b", 10.0)
    b.withdraw("k", "a")
    assert b.open() == 0
