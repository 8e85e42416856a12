"""Checkpoints: written by 2 servers, restored into 3 and into standalone mode with identical rows and
optimizer state; a killed server restarted with --restore latest has its last checkpoint back; and
`graphtrain export` writes a table in original node order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.kvstore.client.transport import KVTimeout
from graphtrain.runtime.kvstore.tables.shm import job_prefix
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from tests.runtime.conftest import TOKEN, servers, start_server

ROWS, DIM = 5000, 12
CONFIG = OptimConfig("adam", 0.01, eps=1e-8, step_count="row")


def train(emb: DistEmbedding, opt: SparseOptimizer, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ids = torch.randint(0, ROWS, (600,), generator=g)
        (emb(ids) * torch.randn(600, DIM, generator=g)).sum().backward()
        opt.step()


def all_rows(client, book: PartitionBook) -> np.ndarray:
    return client.pull("emb", np.arange(ROWS), book.bounds, (DIM,), np.float32)


@pytest.mark.timeout(240)
def test_two_servers_restore_into_three_and_standalone(ckroot: Path) -> None:
    with servers(2, ckroot) as two:
        c2 = kvstore.connect([s.address for s in two], TOKEN)
        emb = DistEmbedding(ROWS, DIM, "emb", client=c2)
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 5, seed=1)
        c2.checkpoint("ck", root=ckroot)
        rows = all_rows(c2, emb.table.book)
        c2.close()
    state = ckpt.export_state(ckroot / "ck", "emb")

    book3 = PartitionBook(np.array([0, 1234, 3000, ROWS]))
    with servers(3, ckroot) as three:
        c3 = kvstore.connect([s.address for s in three], TOKEN)
        DistEmbedding(ROWS, DIM, "emb", book=book3, client=c3, init={"kind": "zeros"})
        assert c3.restore("ck") == ["emb"]
        assert np.array_equal(all_rows(c3, book3), rows)
        c3.checkpoint("ck3", root=ckroot)
        c3.close()
    again = ckpt.export_state(ckroot / "ck3", "emb")
    assert set(again) == set(state)
    for key in state:
        assert np.array_equal(again[key], state[key]), key

    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone, init={"kind": "zeros"})
    assert alone.restore("ck") == ["emb"]
    assert np.array_equal(all_rows(alone, PartitionBook.even(ROWS, 1)), rows)
    t = alone.transport.states[0].tensors["emb"]
    assert t.config == CONFIG
    for key in state:
        assert np.array_equal(t.state[key].numpy(), state[key]), key


@pytest.mark.timeout(240)
def test_killed_server_restarts_from_its_last_checkpoint(ckroot: Path) -> None:
    with servers(2, ckroot, "--restore", "latest") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=20)
        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 3, seed=2)
        client.checkpoint("step3", root=ckroot)
        ckpt.mark_latest(ckroot, "step3")
        saved = all_rows(client, emb.table.book)
        train(emb, opt, 2, seed=3)  # progress after the checkpoint is lost with the server
        assert not np.array_equal(all_rows(client, emb.table.book), saved)

        victim = srv[1]
        victim.kill()
        # the same port: its clients reconnect to the address they know, as to a restarted pod
        srv[1] = start_server(1, ckroot, "--restore", "latest", port=victim.port)
        DistEmbedding(ROWS, DIM, "emb", client=client)  # re-create (attach) = restore on the new server
        emb.attach(CONFIG)
        rows = all_rows(client, emb.table.book)
        lo = int(emb.table.book.bounds[1])
        assert np.array_equal(rows[lo:], saved[lo:]), "the restarted shard has its checkpointed rows"
        assert not np.array_equal(rows[:lo], saved[:lo]), "the surviving shard kept its newer rows"
        train(emb, opt, 1, seed=4)  # and training goes on
        client.close()


def test_incomplete_checkpoint_is_refused(ckroot: Path) -> None:
    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone)
    alone.each("checkpoint", None, {"path": "partial"})  # pieces written, never marked complete
    with pytest.raises(Exception, match="not a complete checkpoint"):
        alone.restore("partial")
    with pytest.raises(Exception, match="not a complete checkpoint"):
        ckpt.mark_latest(ckroot, "partial")


def test_changed_checkpoint_file_is_detected(ckroot: Path) -> None:
    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone)
    alone.checkpoint("ck", root=ckroot)
    data = next((ckroot / "ck" / "emb").glob("rows-*")) / "data.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 1
    data.write_bytes(bytes(raw))
    with pytest.raises(Exception, match="does not match the recorded"):
        alone.restore("ck")


@pytest.mark.parametrize(
    "edit",
    [
        {"lo": "0"},
        {"num_rows": 5000.0},
        {"hi": None},
        {"files": []},  # these four: an AttributeError, KeyError or TypeError from verify_files
        {"files": None},
        {"files": {"data.npy": 5}},
        {"files": {"../../../etc/hostname": "0" * 64}},  # hashed outside the checkpoint
    ],
)
def test_a_piece_manifest_of_the_wrong_shape_is_named(ckroot: Path, edit: dict) -> None:
    """A hand-edited piece manifest (no hash covers it) failed the trainer with "TypeError: '<' not
    supported between instances of 'int' and 'str'": it is refused naming the file."""
    import json

    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone)
    alone.checkpoint("ck", root=ckroot)
    manifest = next((ckroot / "ck" / "emb").glob("rows-*")) / "manifest.json"
    doc = json.loads(manifest.read_text())
    if "files" in edit and isinstance(edit["files"], dict):
        edit = {"files": {**doc["files"], **edit["files"]}}
    manifest.write_text(json.dumps({**doc, **edit}))
    with pytest.raises(DataError, match="manifest.json: not a piece manifest"):
        ckpt.verify_checkpoint(ckroot / "ck")


@pytest.mark.parametrize("files", [[1], {"../../x": "0" * 64}, {"/etc/hostname": "0" * 64}, {"a": None}])
def test_checkpoint_json_files_of_the_wrong_shape_are_named(ckroot: Path, files: object) -> None:
    """checkpoint.json's files (no hash covers it): a list was a TypeError from `graphtrain infer`'s first
    check, a name with ../ was hashed outside the checkpoint."""
    import json

    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone)
    alone.checkpoint("ck", root=ckroot)
    top = ckroot / "ck" / ckpt.TOP
    top.write_text(json.dumps({**json.loads(top.read_text()), "files": files}))
    with pytest.raises(DataError, match="checkpoint.json: not a graphtrain checkpoint: files"):
        ckpt.verify_checkpoint(ckroot / "ck")


def test_rows_of_nan_are_refused_on_restore_naming_the_piece(ckroot: Path) -> None:
    """NaN rows written into a piece and its sha256 re-recorded (a hand edit): restored, they failed an
    inference later as a refused push of 'scratch:layer0', naming no table."""
    import hashlib
    import json

    alone = kvstore.standalone(1, checkpoint_root=ckroot)
    DistEmbedding(ROWS, DIM, "emb", client=alone)
    alone.checkpoint("ck", root=ckroot)
    piece = next((ckroot / "ck" / "emb").glob("rows-*"))
    rows = np.load(piece / "data.npy")
    rows[7, 2] = np.nan
    np.save(piece / "data.npy", rows)
    manifest = json.loads((piece / "manifest.json").read_text())
    manifest["files"]["data.npy"] = hashlib.sha256((piece / "data.npy").read_bytes()).hexdigest()
    (piece / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(Exception, match=r"data.npy: 1 row\(s\) hold NaN or infinity \(first: row 7\)"):
        alone.restore("ck")


def test_export_writes_original_node_order(ckroot: Path, tmp_path: Path) -> None:
    from graphtrain.runtime import partition
    from tests.conftest import planted_graph

    g = planted_graph(n=400, k=2)
    cfg = partition.write(g, partition.partition_graph(g, 2), tmp_path / "part")
    book = PartitionBook(partition.load_config(cfg).node_bounds)
    alone = kvstore.standalone(2, checkpoint_root=ckroot)
    emb = DistEmbedding(400, 3, "node", book=book, client=alone, init={"kind": "zeros"})
    node_map = partition.load_maps(partition.load_config(cfg))["node_map"]
    # row of new id i holds the original id of node i: after export, row j must hold j
    emb.table[np.arange(400)] = np.repeat(node_map[:, None], 3, axis=1).astype(np.float32)
    alone.checkpoint("ck", root=ckroot)
    out = tmp_path / "node.npy"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtrain.runtime.cli",
            "export",
            str(ckroot / "ck"),
            "--name",
            "node",
            "--partition",
            str(cfg),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    table = np.load(out)
    assert np.array_equal(table[:, 0], np.arange(400, dtype=np.float32))


def test_standalone_and_distributed_share_the_code_path() -> None:
    """The same user code on an in-process store: DistEmbedding + optimizer + DistTensor."""
    alone = kvstore.standalone(3)
    kvstore.set_default_client(alone)
    try:
        emb = DistEmbedding(ROWS, DIM, "emb")
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 2, seed=5)
        assert sum(s["tensors"]["emb"]["hi"] - s["tensors"]["emb"]["lo"] for s in alone.stats()) == ROWS
    finally:
        kvstore.set_default_client(None)


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        d = tmp_path / f"step-{step:09d}"
        d.mkdir()
        if step != 2:
            (d / ckpt.TOP).write_text("{}")
    (tmp_path / "step-000000005").mkdir()  # being written, newer than LATEST: untouched
    ckpt.mark_latest(tmp_path, "step-000000004")
    removed = ckpt.prune(tmp_path, 2)
    assert removed == ["step-000000001", "step-000000002"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "step-000000003",
        "step-000000004",
        "step-000000005",
    ]


@pytest.mark.timeout(240)
def test_a_client_that_maps_a_restarted_servers_memory_refuses_to_go_on(ckroot: Path) -> None:
    """Partition locality (a trainer beside its shard server, tables mapped from /dev/shm): after the
    server restarts, the old mapping is no longer what it serves, and its restored rows would never be
    read. The next request to it fails, naming the shard, rather than train on stale rows."""
    with servers(2, ckroot, "--shm", "--restore", "latest") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, timeout=20, shm=True)
        emb = DistEmbedding(ROWS, DIM, "emb", client=client)
        opt = SparseOptimizer([emb], CONFIG)
        train(emb, opt, 2, seed=2)
        assert client.transport.is_local(1)  # mapped, not requested
        client.checkpoint("step2", root=ckroot)
        ckpt.mark_latest(ckroot, "step2")
        victim = srv[1]
        victim.kill()
        srv[1] = start_server(1, ckroot, "--shm", "--restore", "latest", port=victim.port)
        try:
            with pytest.raises(
                KVTimeout, match=r"shard 1 .* closed its connection \(the server stopped, or was restarted\)"
            ):
                for _ in range(50):  # bounded: the disconnect is seen by the first request after it
                    train(emb, opt, 1, seed=3)
            client.close()
        finally:  # what the SIGKILLed server could not unlink (only its own: other tests share the token)
            for leftover in Path("/dev/shm").glob(f"{job_prefix(TOKEN)}-1-{victim.proc.pid}-*"):
                leftover.unlink(missing_ok=True)


def test_tables_created_after_the_start_do_not_need_its_checkpoint_once_it_is_pruned(tmp_path: Path) -> None:
    """A resumed run keeps its last few checkpoints, so the one it started from is pruned mid-run. A table
    created after that (evaluation's scratch layers, at the run's end) must not reach for it: scratch rows
    are in no checkpoint, and once the server has written a checkpoint of its own, a new table starts from
    its init. Found by a 2x2 WordNet run stopped with SIGTERM and resumed: its final evaluation failed
    ("refused create: .../step-000000080: no checkpoint.json")."""
    import shutil

    from graphtrain.runtime.storage.shard import SCRATCH_PREFIX

    client = kvstore.standalone(1, checkpoint_root=tmp_path)
    emb = DistEmbedding(ROWS, DIM, "emb", {"kind": "uniform", "low": -1, "high": 1}, client=client)
    train(emb, SparseOptimizer([emb], CONFIG), 2, seed=0)
    client.checkpoint("start", root=tmp_path)
    want = emb.rows(torch.arange(ROWS))

    resumed = kvstore.standalone(1, checkpoint_root=tmp_path)
    state = resumed.transport.states[0]  # type: ignore[attr-defined]
    state.restore_from = tmp_path / "start"
    again = DistEmbedding(ROWS, DIM, "emb", {"kind": "uniform", "low": -1, "high": 1}, client=resumed)
    assert torch.equal(again.rows(torch.arange(ROWS)), want)  # restored at creation
    resumed.checkpoint("next", root=tmp_path)
    assert state.restore_from is None
    shutil.rmtree(tmp_path / "start")  # pruned
    scratch = state.create(f"{SCRATCH_PREFIX}layer0", 10, (4,), "float32", 0, 10)
    assert torch.count_nonzero(scratch.data) == 0
    late = state.create("late", 10, (4,), "float32", 0, 10, init={"kind": "uniform", "low": 2, "high": 3})
    assert torch.all(late.data >= 2.0)

    fresh = kvstore.standalone(1, checkpoint_root=tmp_path)  # never checkpointed, its restore point gone
    fresh_state = fresh.transport.states[0]  # type: ignore[attr-defined]
    fresh_state.restore_from = tmp_path / "start"
    assert fresh_state.create(f"{SCRATCH_PREFIX}layer0", 10, (4,), "float32", 0, 10).num_rows == 10
