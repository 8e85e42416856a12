"""GPU tables checkpointed beside training (gpu.freeze, snapshot.BackgroundCheckpoint's frozen pieces).

A GPU table is copied on its device under its lock when a background checkpoint is armed, and that copy
is written by the checkpoint's thread, so training goes on at once (the H200 paused 1.5 s per checkpoint
while a GPU table was written within the op). The copy and the writer are device-agnostic: here they
run on host tensors; tests/gpu/test_gpu_tables.py runs the whole path on a GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint import snapshot as snap
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.shard import TensorShard
from graphtrain.runtime.tensor import DistEmbedding

ROWS, DIM = 5000, 16


def _table() -> TensorShard:
    s = ShardTensors(0)
    s.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 2})
    s.set_optimizer("emb", {"kind": "adam", "lr": 0.1})
    g = np.random.default_rng(0)
    ids = g.choice(ROWS, 500, replace=False).astype(np.int64)
    s.push_grad("emb", [(ids, g.standard_normal((500, DIM)).astype(np.float32))])
    return s.tensors["emb"]


def test_a_frozen_copy_holds_the_rows_and_state_apart_from_the_table() -> None:
    t = _table()
    need = gpu.table_bytes(t)
    assert need == ROWS * DIM * 4 * 3 + ROWS * 8  # rows, exp_avg, exp_avg_sq, a step count per row
    with t.lock:
        copy = gpu.freeze(t, int(need * gpu.FREEZE_HEADROOM) + 1)
    assert copy is not None
    assert torch.equal(copy.data, t.data) and copy.data.data_ptr() != t.data.data_ptr()
    assert copy.state.keys() == t.state.keys()
    for key, value in t.state.items():
        assert torch.equal(copy.state[key], value) and copy.state[key].data_ptr() != value.data_ptr()
    assert copy.lock is not t.lock and (copy.name, copy.lo, copy.hi, copy.config) == (
        t.name,
        0,
        ROWS,
        t.config,
    )
    t.data.add_(1.0)  # training goes on: the copy keeps the rows as they were
    assert not torch.equal(copy.data, t.data)


def test_no_copy_where_the_device_has_no_room_for_it() -> None:
    t = _table()
    with t.lock:
        assert gpu.freeze(t, int(gpu.table_bytes(t) * gpu.FREEZE_HEADROOM) - 1) is None


def test_no_copy_where_the_next_step_needs_the_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free memory counts the allocator's unused blocks, which the next step will want back: the work's
    own peak (gpu.working_bytes) is kept aside before a copy is made."""
    t = _table()
    need = int(gpu.table_bytes(t) * gpu.FREEZE_HEADROOM)
    assert gpu.working_bytes(t.data.device) == 0  # the host: nothing kept aside
    monkeypatch.setattr(gpu, "working_bytes", lambda device: 1000)
    with t.lock:
        assert gpu.freeze(t, need + 999) is None
        assert gpu.freeze(t, need + 1000) is not None


def test_the_frozen_piece_is_written_by_the_thread_and_restores_the_rows_it_froze(tmp_path: Path) -> None:
    t = _table()
    with t.lock:
        copy = gpu.freeze(t, 1 << 40)
    assert copy is not None
    before = (t.data.clone(), {k: v.clone() for k, v in t.state.items()})
    gate = threading.Event()

    def write(v: TensorShard, stopped: Callable[[], bool]) -> dict:
        assert gate.wait(30)  # the op has answered and training goes on before the piece is written
        return ckpt.write_piece(tmp_path / "ck", v, ckpt.gpu_writer(v, None, stopped))

    bg = snap.BackgroundCheckpoint("ck", tmp_path / "ck", [], [], frozen=[(copy, write)])
    t.data.mul_(2.0)  # a push after the checkpoint was armed
    assert bg.status.state == "writing" and bg.status.row_bytes == gpu.table_bytes(t)
    gate.set()
    assert bg.wait(60) and bg.status.state == "done", bg.status.error
    assert not bg.frozen  # the copy is let go once written
    ckpt.write_top(tmp_path / "ck", bg.status.pieces, 1)
    ckpt.verify_checkpoint(tmp_path / "ck")
    assert np.array_equal(ckpt.export_table(tmp_path / "ck", "emb"), before[0].numpy())
    state = ckpt.export_state(tmp_path / "ck", "emb")
    for key, value in before[1].items():
        assert np.array_equal(state[key], value.numpy()), key


def test_an_aborted_checkpoint_writes_no_frozen_piece(tmp_path: Path) -> None:
    """abort() while a frozen table is being written: the piece ends at its next chunk and is never
    renamed into place; the tables after it are not written."""
    t = _table()
    with t.lock:
        copy = gpu.freeze(t, 1 << 40)
    assert copy is not None
    started, go, calls = threading.Event(), threading.Event(), []

    def slow(directory: Path, view: TensorShard, stopped: Callable[[], bool]) -> None:
        checks = []

        def stop() -> bool:  # the first chunk is written, then the checkpoint is abandoned
            checks.append(1)
            if len(checks) == 2:
                started.set()
                assert go.wait(30)
            return stopped()

        gpu.save_chunked(directory, view, view, chunk_bytes=20_000, stopped=stop)

    def write(v: TensorShard, stopped: Callable[[], bool]) -> dict:
        return ckpt.write_piece(tmp_path / "ck", v, lambda d, view: slow(d, view, stopped))

    hold = snap.BackgroundCheckpoint(
        "ck", tmp_path / "ck", [], [], frozen=[(copy, write), (copy, calls.append)]
    )
    assert started.wait(30)
    hold.aborted = True  # as abort() sets it, while the first piece is being written
    go.set()
    assert hold.wait(30) and hold.status.state == "failed" and "abandoned" in hold.status.error
    assert calls == [] and not hold.frozen
    assert not ckpt.piece_dir(tmp_path / "ck", "emb", 0, ROWS).exists()


def test_standalone_on_the_host_still_writes_before_training_goes_on() -> None:
    """Only in-process GPU tables are written beside training; shard servers always are."""
    client = kvstore.standalone(2)
    emb = DistEmbedding(ROWS, DIM, "emb", client=client)
    SparseOptimizer([emb], OptimConfig("sgd", 0.1))
    assert not client.background_checkpoints


@pytest.mark.parametrize("background", [False, True])
def test_host_tables_are_never_frozen(
    tmp_path: Path, background: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    froze: list[str] = []
    monkeypatch.setattr(gpu, "freeze", lambda t, free: froze.append(t.name))
    s = ShardTensors(0)
    s.create("emb", ROWS, (DIM,), "float32", 0, ROWS)
    s.set_optimizer("emb", {"kind": "sgd", "lr": 0.1})
    s.checkpoint(tmp_path / "ck", background=background)
    if s.background is not None:
        assert s.background.wait(60) and s.background.status.state == "done"
    assert froze == []


def test_in_process_shards_write_a_checkpoint_begun_beside_training(tmp_path: Path) -> None:
    """The path standalone takes when its tables are on a GPU (Checkpoints.save: checkpoint_begin, then
    checkpoint_done between steps), through the in-process transport."""
    client = kvstore.standalone(2, tmp_path)
    emb = DistEmbedding(ROWS, DIM, "emb", client=client)
    opt = SparseOptimizer([emb], OptimConfig("adam", 0.1))
    (emb(torch.arange(0, ROWS, 7)) ** 2).sum().backward()
    opt.step()
    armed = emb.rows(torch.arange(ROWS)).numpy().copy()
    client.checkpoint_begin("ck")
    (emb(torch.arange(0, ROWS, 3)) ** 2).sum().backward()
    opt.step()  # after the checkpoint was armed: not in it
    for _ in range(600):
        if (pieces := client.checkpoint_done("ck")) is not None:
            break
        time.sleep(0.05)
    assert pieces is not None and len(pieces) == 2
    ckpt.write_top(tmp_path / "ck", pieces, 2)
    ckpt.verify_checkpoint(tmp_path / "ck")
    assert np.array_equal(ckpt.export_table(tmp_path / "ck", "emb"), armed)


def test_a_frozen_half_table_keeps_the_rounding_count_its_rows_were_rounded_with() -> None:
    """A half table's manifest records how many rounded steps its rows took (a resumed run's rounding seeds
    go on from it): the frozen copy counts apart from the live table, which steps on while it is written."""
    s = ShardTensors(0)
    t = s.create("emb", ROWS, (DIM,), "bfloat16", 0, ROWS, {"kind": "uniform", "seed": 2})
    s.set_optimizer("emb", {"kind": "adam", "lr": 0.1})
    ids = np.arange(0, ROWS, 7, dtype=np.int64)
    for _ in range(3):
        s.push_grad("emb", [(ids, np.ones((len(ids), DIM), np.float32))])
    with t.lock:
        copy = gpu.freeze(t, 1 << 40)
    assert copy is not None and copy.steps == t.steps == 3
    s.push_grad("emb", [(ids, np.ones((len(ids), DIM), np.float32))])  # training goes on
    assert t.steps == 4 and copy.steps == 3
