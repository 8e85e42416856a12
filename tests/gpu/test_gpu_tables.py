"""The tables of a GPU shard server in process (ShardTensors(device="cuda")): where each table lives, that
every dtype and shape is pulled as on the host, that the learnable table trains as a CPU one does, that
a checkpoint copied from the GPU in chunks holds the same bytes as a host one and restores onto the GPU,
that pulls and pushes from worker threads on their own streams see every write, and that the server's
pull buffers are pinned."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.kvstore.serving.server import ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.errors import StorageError
from tests.runtime.conftest import TOKEN
from tests.runtime.kvstore.test_placement import TABLES

ADAM = {"kind": "adam", "lr": 0.05, "step_count": "global"}
ROWS, DIM = 5000, 32


def steps(s: ShardTensors, n: int = 5) -> None:
    g = np.random.default_rng(0)
    for step in range(1, n + 1):
        ids = g.choice(ROWS, 1000, replace=False).astype(np.int64)
        s.push_grad("emb", [(ids, g.standard_normal((1000, DIM)).astype(np.float32))], step)


def pull(s: ShardTensors, name: str, ids: np.ndarray) -> np.ndarray:
    stream = s.pull_stream(name, ids, 1 << 30)
    return stream.next()[2]


def test_only_the_learnable_table_and_its_state_are_on_the_gpu() -> None:
    s = ShardTensors(0, device="cuda")
    emb = s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 1})
    label = s.create("label", ROWS, (), "int64", 0, ROWS)
    feat = s.create("ndata.feat", ROWS, (4,), "float32", 0, ROWS, node_data=True)
    assert emb.data.device.type == "cpu"  # until its optimizer attaches
    before = emb.data.clone()
    s.set_optimizer("emb", ADAM)
    assert emb.data.device == torch.device("cuda:0") and emb.data.is_contiguous()
    assert all(v.device == emb.data.device for v in emb.state.values())
    assert torch.equal(emb.data.cpu(), before)  # moved, not changed
    assert label.data.device.type == "cpu" and feat.data.device.type == "cpu"


@pytest.mark.parametrize(("dtype", "row_shape"), TABLES)
@pytest.mark.parametrize("on_gpu", [False, True])
def test_every_dtype_and_shape_pulls_as_on_the_host(
    dtype: str, row_shape: tuple[int, ...], on_gpu: bool
) -> None:
    """From a GPU server's host tables, and (on_gpu) from a table of any dtype and shape put on the GPU:
    the gather routing serves it with torch where the CUDA core's float32 2-D gather does not apply."""
    ids = np.array([49, 10, 17, 17, 30], dtype=np.int64)
    got, want = [], []
    for device, out in (("cuda", got), ("cpu", want)):
        s = ShardTensors(0, device=device)
        init = {"kind": "uniform", "seed": 4} if "float" in dtype else None
        t = s.create("t", 50, row_shape, dtype, 10, 50, init)
        if dtype == "int64":
            t.data.copy_(torch.arange(40))
        if device == "cuda" and on_gpu:
            t.data = t.data.cuda()
        out.append(pull(s, "t", ids))
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])


def test_an_optimizer_that_does_not_fit_the_gpu_is_refused_and_the_table_keeps_working() -> None:
    room = {"gpu": 0}
    s = ShardTensors(0, device="cuda", free=lambda d: room["gpu"] if d.type == "cuda" else 1 << 40)
    t = s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 1})
    with pytest.raises(StorageError, match="optimizer state of 'emb' needs .* cuda:0 has 0.00 GiB"):
        s.set_optimizer("emb", ADAM)
    assert t.config is None and t.data.device.type == "cpu"
    assert pull(s, "emb", np.arange(3, dtype=np.int64)).shape == (3, DIM)
    room["gpu"] = 1 << 40
    s.set_optimizer("emb", ADAM)  # the retry succeeds
    assert t.data.is_cuda and t.config is not None


def test_a_learnable_table_on_the_gpu_trains_as_on_the_cpu() -> None:
    rows = []
    for device in ("cuda", "cpu"):
        s = ShardTensors(0, device=device)
        s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "normal", "std": 0.1, "seed": 1})
        s.set_optimizer("emb", ADAM)
        steps(s)
        rows.append(pull(s, "emb", np.arange(ROWS, dtype=np.int64)))
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk_bytes", [1000, 1 << 26])
def test_a_gpu_checkpoint_in_chunks_holds_the_host_bytes_and_restores_onto_the_gpu(
    tmp_path: Path, chunk_bytes: int
) -> None:
    s = ShardTensors(0, device="cuda")
    t = s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "normal", "seed": 1})
    s.set_optimizer("emb", ADAM)
    steps(s)
    piece = ckpt.write_piece(tmp_path / "ck", t, lambda d, v: gpu.save_chunked(d, v, t, chunk_bytes))
    ckpt.write_top(tmp_path / "ck", [piece], 1)
    d = tmp_path / "ck" / piece["dir"]
    assert np.array_equal(np.load(d / "data.npy"), t.data.cpu().numpy())
    for key, value in t.state.items():
        assert np.array_equal(np.load(d / f"state.{key}.npy"), value.cpu().numpy()), key
    ckpt.verify_checkpoint(tmp_path / "ck")  # the manifest hashes what was written
    fresh = ShardTensors(0, device="cuda", restore_from=tmp_path / "ck")
    r = fresh.create("emb", ROWS, (DIM,), "float32", 0, ROWS)
    assert r.data.is_cuda and r.config is not None and all(v.is_cuda for v in r.state.values())
    assert torch.equal(r.data, t.data) and int(r.state["step"][0]) == 5
    assert s.checkpoint(tmp_path / "whole")  # the server's own path (64 MB chunks)


@pytest.mark.parametrize("room", [True, False])
def test_a_background_checkpoint_of_a_gpu_table_holds_the_rows_it_was_armed_with(
    tmp_path: Path, room: bool
) -> None:
    """With room on the device the table is frozen (gpu.freeze) and written by the thread: the op answers
    with no piece, a push right after it changes the table but not the checkpoint. Without room it is
    written within the op, as before."""
    table = ROWS * DIM * 4 * 3 + 8  # rows, Adam's two moments, its one step count: what a copy takes
    free = (1 << 40) if room else int(1.1 * table)  # the table fits; without room, not a copy beside it
    s = ShardTensors(0, device="cuda", free=lambda d: free)
    t = s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "normal", "seed": 1})
    s.set_optimizer("emb", ADAM)
    steps(s)
    armed = (t.data.cpu().numpy().copy(), {k: v.cpu().numpy().copy() for k, v in t.state.items()})
    within = s.checkpoint(tmp_path / "bg", background=True)
    assert (within == []) is room
    steps(s, 2)  # pushes while it is written
    assert s.background is not None and s.background.wait(60), "not written in 60 s"
    status = s.checkpoint_status(tmp_path / "bg")
    assert status["state"] == "done", status
    ckpt.write_top(tmp_path / "bg", status["pieces"], 1)
    ckpt.verify_checkpoint(tmp_path / "bg")
    assert np.array_equal(ckpt.export_table(tmp_path / "bg", "emb"), armed[0])
    state = ckpt.export_state(tmp_path / "bg", "emb")
    for key, value in armed[1].items():
        assert np.array_equal(state[key], value), key
    assert not np.array_equal(t.data.cpu().numpy(), armed[0])  # the pushes did land in the table


@pytest.mark.timeout(120)
def test_workers_on_their_own_streams_see_every_write() -> None:
    """A pusher and a puller on two threads, each on its stream (as server workers): after the pusher's
    last step, a pull on the other stream reads exactly the rows a single-threaded run ends with."""
    want = ShardTensors(0, device="cuda")
    want.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "normal", "seed": 1})
    want.set_optimizer("emb", ADAM)
    steps(want, 20)
    s = ShardTensors(0, device="cuda")
    s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "normal", "seed": 1})
    s.set_optimizer("emb", ADAM)
    done = threading.Event()

    def push() -> None:
        with gpu.worker_stream(s.device):
            steps(s, 20)
        done.set()

    def read() -> None:
        with gpu.worker_stream(s.device):
            while not done.is_set():
                pull(s, "emb", np.arange(0, ROWS, 7, dtype=np.int64))
            results.append(pull(s, "emb", np.arange(ROWS, dtype=np.int64)))

    results: list[np.ndarray] = []
    threads = [threading.Thread(target=push), threading.Thread(target=read)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=100)
    assert np.array_equal(results[0], pull(want, "emb", np.arange(ROWS, dtype=np.int64)))


def test_a_gpu_server_stages_pulls_in_pinned_memory() -> None:
    srv = ShardServer(ShardTensors(0, device="cuda"), TOKEN, "tcp://127.0.0.1:0", workers=1)
    try:
        assert srv._buffers.take(1000).is_pinned()  # noqa: SLF001 - the buffers are the point here
    finally:
        srv.state.close()
        srv.ctx.term()
