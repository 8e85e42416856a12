"""Fuzzing the shard server's request path (issue 14), bounded for CI (1,500 requests through the
dispatcher, 1,000 to a live server: about 30 s; the long coverage-guided run is bench/fuzz.py).
What must hold for every request, however hostile:
- nothing but ProtocolError / GraphtrainError / ValueError escapes validation and dispatch;
- a refused request changes no stored row and no optimizer state;
- a live server keeps answering, and logs no internal error, whatever it was sent."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher
from graphtrain.runtime.kvstore.tables.state import PullStream, ShardTensors
from graphtrain.runtime.kvstore.wire import opargs, protocol
from tests.runtime.conftest import TOKEN, dealer, servers
from tests.runtime.kvstore import fuzz_requests as kv_fuzz

_dispatcher: Dispatcher | None = None


def dispatcher() -> Dispatcher:
    """One shard with a table under Adam, shared by the examples (hypothesis runs them in a loop). Its
    checkpoints (each piece fsynced) go to memory, /dev/shm where there is one: the examples test what
    a refused request leaves, not the disk. (The test took 15 s alone and 314 s once in the suite,
    beside the first image build of a fresh machine; a disk busy with another test's writes is the
    suspect, not proven.) The module's fixture removes the directory."""
    global _dispatcher
    if _dispatcher is None:
        shm = Path("/dev/shm")
        root = Path(tempfile.mkdtemp(prefix="gt-fuzz-", dir=shm if shm.is_dir() else None))
        state = ShardTensors(0)
        state.create(
            "emb", kv_fuzz.ROWS, (kv_fuzz.DIM,), "float32", 0, kv_fuzz.ROWS, {"kind": "uniform", "seed": 1}
        )
        state.set_optimizer("emb", {"kind": "adam", "lr": 0.1})
        _dispatcher = Dispatcher(state, root)
    return _dispatcher


@pytest.fixture(scope="module", autouse=True)
def _remove_dispatcher_root() -> Iterator[None]:
    global _dispatcher
    yield
    if _dispatcher is not None:
        if _dispatcher.checkpoint_root is not None:
            shutil.rmtree(_dispatcher.checkpoint_root, ignore_errors=True)
        _dispatcher = None


def snapshot(state: ShardTensors) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in state.tensors.items():
        out[name] = t.data.clone()
        out.update({f"{name}.{k}": v.clone() for k, v in t.state.items()})
    return out


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(kv_fuzz.requests())
def test_a_refused_request_changes_nothing(drawn) -> None:
    op, name, arrays, args = drawn
    d = dispatcher()
    before = snapshot(d.state)
    req = protocol.Request(op, 1, name, arrays, args, sum(a.nbytes for a in arrays))
    try:
        out = d.run(req, opargs.validate(req), who=("fuzz", 1))
        if isinstance(out, PullStream):
            while not out.done:
                out.next()
        if op == "barrier" and out is None:
            d.barriers.withdraw(args["key"], ("fuzz", 1))
    except (protocol.ProtocolError, GraphtrainError, ValueError):
        after = snapshot(d.state)
        assert after.keys() == before.keys()
        for key, value in before.items():
            assert torch.equal(after[key], value), f"{op} was refused but changed {key}"
    for t in d.state.tensors.values():
        if t.dtype.startswith("float"):
            assert torch.isfinite(t.data).all(), f"{op} stored a non-finite value in {t.name}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fuzz")
    with servers(1, root) as srv:
        client = kvstore.connect([srv[0].address], TOKEN, timeout=20, retries=0)
        client.create(
            "emb", kv_fuzz.ROWS, (kv_fuzz.DIM,), "float32", np.array([0, kv_fuzz.ROWS]), {"kind": "uniform"}
        )
        client.set_optimizer("emb", {"kind": "adagrad", "lr": 0.1})
        sock = dealer(srv[0].address, RCVHWM=0)
        yield srv[0], client, sock
        sock.close(linger=0)
        client.close()
    shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(kv_fuzz.requests(live=True), st.binary(max_size=3) | st.just(b""), st.booleans())
def test_a_live_server_answers_every_message(live, drawn, flip: bytes, garbage_frame: bool) -> None:
    srv, client, sock = live
    frames = kv_fuzz.encode(*drawn, mutate=flip)
    if garbage_frame:
        frames.append(b"\x00\xff" * 3)
    sock.send_multipart(frames)
    assert sock.poll(10_000), f"no answer to {drawn[0]} within 10 s"
    while sock.poll(0):  # a pull may stream several chunks
        header = msgpack.unpackb(sock.recv_multipart()[0], raw=False)
        assert header["v"] == 2


def test_the_live_server_survived_the_fuzzing(live) -> None:
    srv, client, _ = live
    health = client.health()[0]
    assert health["live"] is True and health["workers"] == 4
    rows = client.pull(
        "emb", np.arange(kv_fuzz.ROWS), np.array([0, kv_fuzz.ROWS]), (kv_fuzz.DIM,), np.float32
    )
    assert np.isfinite(rows).all()
    log = srv.log_text()
    assert "internal error" not in log and "Traceback" not in log, log[-3000:]
