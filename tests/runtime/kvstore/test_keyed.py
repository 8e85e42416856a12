"""Dynamic vocabularies on the shard servers (storage/keyed.py): arbitrary int64 keys routed by key mod
shards get rows on first sight with their key's initial value; lookups and updates equal one process
holding every key's row (within 1e-5) over in-process shards and over real shard-server processes;
evaluation pulls insert nothing; a full shard refuses naming table, shard and capacity, or evicts its
least recently used rows; checkpoints (whole and copy-on-write) keep the keys and restore into another
shard count; malformed keyed requests are refused without harm."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.checkpoint.snapshot import Pace, StagingBudget, TableSnapshot
from graphtrain.runtime.data.cache import read_json
from graphtrain.runtime.kvstore.client.transport import Call
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from graphtrain.runtime.optim.optimizers import SparseOptimizer
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import keyed as kd
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.inits import init_keyed
from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary
from tests.runtime.conftest import TOKEN, servers

INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 7}
DIM, STEPS = 4, 4
TOL = {"atol": 1e-5, "rtol": 1e-5}
CONFIGS = [
    OptimConfig("adagrad", 0.1, eps=1e-8),
    OptimConfig("rowwise_adagrad", 0.1, eps=1e-8, duplicate="mean"),
    OptimConfig("adam", 0.01, eps=1e-8, step_count="global", duplicate="mean"),
    OptimConfig("sgd", 0.1),
]


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys with repeats, negative and huge ones, and a weight per occurrence."""
    rng = np.random.default_rng(step)
    pool = np.array([-(2**62), -7, 0, 3, 5, 11, 2**40, 2**62 + 5, 123456789, 42], dtype=np.int64)
    keys = rng.choice(pool, size=9)
    return torch.from_numpy(keys), torch.from_numpy(rng.standard_normal((9, DIM)).astype(np.float32))


def reference(config: OptimConfig) -> tuple[dict[int, np.ndarray], list[np.ndarray]]:
    """Every key's row after STEPS steps in one process, and the rows each lookup returned."""
    keys = np.unique(np.concatenate([batch(s)[0].numpy() for s in range(STEPS)]))
    index = {int(k): i for i, k in enumerate(keys)}
    table = torch.from_numpy(init_keyed(INIT, keys, DIM))
    state = make_state(config, len(keys), DIM)
    looked = []
    for s in range(STEPS):
        k, w = batch(s)
        ids = torch.tensor([index[int(x)] for x in k], dtype=torch.int64)
        looked.append(table[ids].numpy().copy())
        sparse_step(config, table, state, ids, w, backend="torch")
    return {int(k): table[i].numpy() for i, k in enumerate(keys)}, looked


def train(client: kvstore.KVClient, config: OptimConfig, capacity: int = 64) -> tuple[DistEmbedding, list]:
    emb = DistEmbedding(1000, DIM, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(capacity))
    opt = SparseOptimizer([emb], config)
    looked = []
    for s in range(STEPS):
        k, w = batch(s)
        rows = emb(k)
        looked.append(rows.detach().numpy().copy())
        (rows * w).sum().backward()
        opt.step()
    return emb, looked


def check(emb: DistEmbedding, looked: list, config: OptimConfig) -> None:
    want, want_looked = reference(config)
    for got, exp in zip(looked, want_looked, strict=True):
        np.testing.assert_allclose(got, exp, **TOL)
    keys = np.array(sorted(want), dtype=np.int64)
    np.testing.assert_allclose(emb.rows(keys).numpy(), np.stack([want[int(k)] for k in keys]), **TOL)


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.kind}-{c.duplicate}")
def test_in_process_shards_match_one_process(shards: int, config: OptimConfig) -> None:
    emb, looked = train(kvstore.standalone(shards), config)
    check(emb, looked, config)


def test_evaluation_pull_reads_init_and_inserts_nothing() -> None:
    client = kvstore.standalone(2)
    emb = DistEmbedding(10, DIM, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(8))
    keys = torch.tensor([5, -3, 2**50, 5])
    np.testing.assert_allclose(emb.rows(keys).numpy(), init_keyed(INIT, keys.numpy(), DIM))
    with torch.no_grad():
        emb(keys)
    assert [s["tensors"]["dyn"]["keys"] for s in client.stats()] == [0, 0]
    emb(keys)  # a training lookup inserts
    assert sum(s["tensors"]["dyn"]["keys"] for s in client.stats()) == 3


def test_row_norm_scales_new_rows_as_kge_entities_start() -> None:
    client = kvstore.standalone(2)
    emb = DistEmbedding(10, DIM, "ent", INIT, client=client, vocabulary=DynamicVocabulary(8))
    emb.attach(OptimConfig("adagrad", 0.1, row_norm=1.0))
    rows = emb(torch.tensor([1, 2, 3])).detach()
    np.testing.assert_allclose(rows.norm(dim=1).numpy(), 1.0, rtol=1e-6)


def test_full_shard_refuses_naming_table_shard_and_capacity() -> None:
    client = kvstore.standalone(2)
    emb = DistEmbedding(10, DIM, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(4))
    emb(torch.tensor([0, 2]))  # shard 0's two rows
    with pytest.raises(RemoteError, match=r"table 'dyn' shard 0 of 2 is full: capacity 2 rows"):
        emb(torch.tensor([4]))
    assert [s["tensors"]["dyn"]["keys"] for s in client.stats()] == [2, 0]
    emb(torch.tensor([1, 3]))  # the other shard still takes keys


def test_full_shard_evicts_least_recently_used_and_restarts_from_init() -> None:
    client = kvstore.standalone(1)
    emb = DistEmbedding(10, DIM, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(2, evict=True))
    opt = SparseOptimizer([emb], OptimConfig("sgd", 1.0))
    emb(torch.tensor([10])).sum().backward()
    opt.step()
    emb(torch.tensor([20]))  # 10 is now the least recently used
    opt.zero_grad()
    emb(torch.tensor([30]))  # takes 10's row
    got = emb.rows(torch.tensor([10, 20, 30])).numpy()
    np.testing.assert_allclose(got, init_keyed(INIT, np.array([10, 20, 30]), DIM))  # 10 starts afresh


def test_gradient_of_a_key_evicted_since_its_pull_is_dropped() -> None:
    state = ShardTensors(0)
    state.create("d", 2, (DIM,), "float32", 0, 2, INIT, keyed={"shards": 1, "evict": True})
    state.set_optimizer("d", {"kind": "sgd", "lr": 1.0})
    state.pull_stream("d", np.array([1, 2], dtype=np.int64), 1 << 20)
    state.pull_stream("d", np.array([3], dtype=np.int64), 1 << 20)  # evicts 1
    updated, _ = state.push_grad("d", [(np.array([1, 2], np.int64), np.ones((2, DIM), np.float32))])
    assert updated == 1 and state.get("d").keyed.dropped == 1


@pytest.mark.parametrize("background", [False, True])
def test_checkpoint_restores_into_another_shard_count(tmp_path: Path, background: bool) -> None:
    config = CONFIGS[2]
    emb, _ = train(kvstore.standalone(3), config)
    root = tmp_path / "ck"
    states = emb.client.transport.states  # type: ignore[attr-defined]
    pieces = [p for st in states for p in st.checkpoint(root, background=background)]
    if background:  # the host tables' pieces are listed by the status once written
        assert all(st.background is not None and st.background.wait(30) for st in states)
        pieces = [p for st in states for p in st.checkpoint_status(root)["pieces"]]
    ckpt.write_top(root, pieces, 3, None)
    keys, rows = ckpt.export_keyed(root, "dyn") or (None, None)
    want, _ = reference(config)
    assert keys is not None and sorted(want) == keys.tolist()
    np.testing.assert_allclose(rows, np.stack([want[int(k)] for k in keys]), **TOL)
    client2 = kvstore.standalone(2, checkpoint_root=tmp_path)
    emb2 = DistEmbedding(1000, DIM, "dyn", INIT, client=client2, vocabulary=DynamicVocabulary(64))
    emb2.attach(config)
    assert client2.restore("ck") == ["dyn"]
    np.testing.assert_allclose(emb2.rows(keys).numpy(), rows, **TOL)
    assert sum(s["tensors"]["dyn"]["keys"] for s in client2.stats()) == len(keys)
    step = [st.get("dyn").state["step"] for st in client2.transport.states]  # type: ignore[attr-defined]
    assert all(int(s[0]) == STEPS for s in step)


def test_restore_refuses_a_share_too_small_for_its_keys(tmp_path: Path) -> None:
    emb, _ = train(kvstore.standalone(1), CONFIGS[0])
    root = tmp_path / "ck"
    st = emb.client.transport.states[0]  # type: ignore[attr-defined]
    ckpt.write_top(root, st.checkpoint(root), 1, None)
    small = ShardTensors(0)
    small.create("dyn", 4, (DIM,), "float32", 0, 4, INIT, keyed={"shards": 1, "evict": False})
    with pytest.raises(Exception, match=r"table 'dyn' shard 0 of 1: the checkpoint holds more of its keys"):
        small.restore(root)


def test_keyed_requests_are_checked() -> None:
    state = ShardTensors(1)
    state.create("d", 6, (DIM,), "float32", 3, 6, INIT, keyed={"shards": 2, "evict": False})
    with pytest.raises(StorageError, match="key 4 of 'd' belongs to shard 0, not 1"):
        state.pull_stream("d", np.array([3, 4], dtype=np.int64), 1 << 20)
    with pytest.raises(StorageError, match=r"exists as dynamic vocabulary \{'shards': 2, 'evict': False\}"):
        state.create("d", 6, (DIM,), "float32", 3, 6, INIT)
    for other in ({"shards": 3, "evict": False}, {"shards": 2, "evict": True}):  # attached only as it is
        with pytest.raises(StorageError, match="asked for"):
            state.create("d", 6, (DIM,), "float32", 3, 6, INIT, keyed=other)
    for shape, dtype in (((), "float32"), ((2, 3), "float32"), ((DIM,), "int64")):
        with pytest.raises(
            StorageError, match="must have float32, float16 or bfloat16 rows of one dimension"
        ):
            state.create("e", 6, shape, dtype, 3, 6, INIT, keyed={"shards": 2, "evict": False})
    assert "e" not in state.tensors
    with pytest.raises(StorageError, match="shard 1 of 1"):
        ShardTensors(1).create("e", 6, (DIM,), "float32", 0, 6, INIT, keyed={"shards": 1, "evict": False})
    assert len(state.get("d").keyed.keymap) == 0


@pytest.mark.timeout(180)
def test_real_shard_servers_train_checkpoint_and_restore_into_three(tmp_path: Path) -> None:
    """Two shard-server processes: the lookups and updates equal one process; a checkpoint written by
    them restores into three server processes with the same keys and rows; a malformed keyed request
    is refused and the server keeps serving."""
    config = CONFIGS[0]
    root = tmp_path / "root"
    root.mkdir()
    with servers(2, root) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN, shm=True)
        emb, looked = train(client, config)
        check(emb, looked, config)
        with pytest.raises(RemoteError, match="keyed has unknown keys"):
            client.transport.call_many(
                [
                    Call(
                        0,
                        "create",
                        "x",
                        (),
                        {
                            "num_rows": 2,
                            "row_shape": [1],
                            "dtype": "float32",
                            "lo": 0,
                            "hi": 1,
                            "keyed": {"bogus": 1},
                        },
                    )
                ]
            )
        client.checkpoint("ck", root=root)
        client.close()
    want, _ = reference(config)
    keys = np.array(sorted(want), dtype=np.int64)
    with servers(3, root) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        emb3 = DistEmbedding(1000, DIM, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(64))
        emb3.attach(config)
        deadline = time.monotonic() + 30
        while client.restore("ck") != ["dyn"] and time.monotonic() < deadline:
            time.sleep(0.1)
        np.testing.assert_allclose(emb3.rows(keys).numpy(), np.stack([want[int(k)] for k in keys]), **TOL)
        client.close()


def test_share_bounds_tile_the_capacity() -> None:
    assert kd.share_bounds(10, 3).tolist() == [0, 4, 7, 10]
    assert [kd.share(10, 3, s) for s in range(3)] == [4, 3, 3]
    assert kd.owners(np.array([-1, -4, 5], dtype=np.int64), 3).tolist() == [2, 2, 2]


@pytest.mark.parametrize(("seed", "stream"), [(0, 0), (7, 1), (2**63 - 1, 1)])
def test_the_native_init_hash_gives_the_numpy_reference_bits(seed: int, stream: int) -> None:
    from graphtrain.runtime.storage import inits

    keys = np.array([0, 1, -1, 2**62, -(2**63), 2**63 - 1, 123_456_789], dtype=np.int64)
    keys = np.concatenate([keys, np.random.default_rng(seed % 1000).integers(-(2**63), 2**63 - 1, 5000)])
    np.testing.assert_array_equal(
        inits._unit(keys, 9, seed, stream), inits.unit_reference(keys, 9, seed, stream)
    )


def test_a_restarted_shard_restores_its_keys_when_the_table_is_created_again(tmp_path: Path) -> None:
    """A shard server restarted with --restore-from gets its keys, rows and state back at the create."""
    emb, _ = train(kvstore.standalone(2), CONFIGS[0])
    root = tmp_path / "ck"
    states = emb.client.transport.states  # type: ignore[attr-defined]
    ckpt.write_top(root, [p for st in states for p in st.checkpoint(root)], 2, None)
    again = ShardTensors(1, restore_from=root)
    t = again.create("dyn", 64, (DIM,), "float32", 32, 64, INIT, keyed={"shards": 2, "evict": False})
    before = states[1].get("dyn")
    np.testing.assert_array_equal(t.keyed.keys(), before.keyed.keys())
    used = len(before.keyed.keymap)
    np.testing.assert_array_equal(t.data[:used].numpy(), before.data[:used].numpy())
    assert t.config == before.config


def test_a_dynamic_table_is_checkpointed_whole_even_when_few_rows_changed(tmp_path: Path) -> None:
    """Incremental checkpoints leave dynamic vocabularies out (a row may hold another key since the
    base): the second checkpoint's piece holds every row and the keys, and restores alone."""
    st = ShardTensors(0)
    st.create("d", 8, (DIM,), "float32", 0, 8, INIT, keyed={"shards": 1, "evict": True})
    st.set_optimizer("d", {"kind": "sgd", "lr": 1.0})
    grad = [(np.array([1, 2, 3], np.int64), np.ones((3, DIM), np.float32))]
    st.pull_stream("d", np.array([1, 2, 3], np.int64), 1 << 20)
    st.push_grad("d", grad)
    for name in ("a", "b"):
        root = tmp_path / name
        pieces = st.checkpoint(root, background=True)
        assert st.background is not None and st.background.wait(30)
        pieces += st.checkpoint_status(root)["pieces"]
        ckpt.write_top(root, pieces, 1, None)
        assert all("base" not in p for p in pieces) and (root / pieces[0]["dir"] / kd.KEYS).exists()
        st.pull_stream("d", np.array([9], np.int64), 1 << 20)  # one new key before the next one
    again = ShardTensors(0)
    t = again.create("d", 8, (DIM,), "float32", 0, 8, INIT, keyed={"shards": 1, "evict": True})
    again.restore(tmp_path / "b")
    assert t.keyed.keys().tolist() == [1, 2, 3, 9]


@pytest.mark.parametrize("tamper", ["duplicate", "other shard"])
def test_a_checkpoint_whose_keys_are_not_its_pieces_own_is_refused(tmp_path: Path, tamper: str) -> None:
    """keys.npy rewritten (its hash too, as someone with write access could): a key twice, or a key of
    another shard's piece, is refused by restore and export alike, never loaded."""
    from graphtrain.runtime.data.cache import read_json, sha256_file, write_json

    emb, _ = train(kvstore.standalone(2), CONFIGS[0])
    root = tmp_path / "ck"
    states = emb.client.transport.states  # type: ignore[attr-defined]
    ckpt.write_top(root, [p for st in states for p in st.checkpoint(root)], 2, None)
    piece = sorted((root / "dyn").iterdir())[0]
    keys = np.load(piece / kd.KEYS)
    keys[1] = keys[0] if tamper == "duplicate" else 1  # shard 0 holds even keys
    np.save(piece / kd.KEYS, keys)
    manifest = read_json(piece / ckpt.MANIFEST)
    manifest["files"][kd.KEYS] = sha256_file(piece / kd.KEYS)
    write_json(piece / ckpt.MANIFEST, manifest)
    want = "a key appears twice" if tamper == "duplicate" else "key 1 does not belong to piece 0 of 2"
    with pytest.raises(Exception, match=want):
        ckpt.export_keyed(root, "dyn")
    again = ShardTensors(0)
    again.create("dyn", 64, (DIM,), "float32", 0, 32, INIT, keyed={"shards": 2, "evict": False})
    with pytest.raises(Exception, match=want):
        again.restore(root)


def test_a_dynamic_kge_table_starts_on_the_unit_sphere() -> None:
    """A dynamic vocabulary's rows of a KGE model (entity and relation alike) start with L2 norm 1, as
    a fixed table's are put there at start; the init spec's `norm` does it wherever a key is inserted."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.train.tables import table_init

    doc = load_yaml(Path("examples/nations-transe.yaml").read_text())
    spec = doc.spec.model_copy(deep=True)
    for t in spec.embeddings:
        t.vocabulary.kind, t.vocabulary.capacity = "dynamic", 64
    for name in ("entity", "relation"):
        init = table_init(spec, name)
        assert init["norm"] == 1.0
        rows = init_keyed(init, np.array([3, -9, 2**40]), 16)
        np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-6)
    fixed = load_yaml(Path("examples/nations-transe.yaml").read_text()).spec
    assert "norm" not in table_init(fixed, "relation")  # a fixed table is normalised at start instead


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (np.arange(4, dtype=np.float64), "holds float64 (4,), not a piece's 1-D int64 keys"),
        (np.arange(4).reshape(2, 2), "holds int64 (2, 2), not a piece's 1-D int64 keys"),
        (np.array([None, 1], dtype=object), "not a readable .npy array"),
        (np.arange(0, 20, 2), "holds 10 keys, more than the piece's 8 rows"),
    ],
    ids=["float", "2-d", "object", "more-than-rows"],
)
def test_a_keys_file_that_is_no_pieces_keys_is_one_line(tmp_path: Path, keys: np.ndarray, said: str) -> None:
    """keys.npy (its sha256 made to match) of another type was an IndexError or numpy's ValueError
    from inside export and restore: a traceback, not one line naming the file."""
    from graphtrain.runtime.errors import DataError
    from graphtrain.runtime.storage.keyed import KEYS, read_keys

    np.save(tmp_path / KEYS, keys, allow_pickle=True)
    with pytest.raises(DataError, match=re.escape(said)):
        read_keys(tmp_path, 8)
    np.save(tmp_path / KEYS, np.arange(0, 8, 2))
    assert read_keys(tmp_path, 8).tolist() == [0, 2, 4, 6]


def held_rows_of(root: Path) -> list[tuple[int, int, int]]:
    """Per piece of table 'dyn'/'d' under `root`: (keys, rows of data.npy, the manifest's rows)."""
    out = []
    for manifest_path in sorted(root.glob("*/*/manifest.json")) + sorted(root.glob("*/manifest.json")):
        d = manifest_path.parent
        if (d / kd.KEYS).exists():
            manifest = read_json(manifest_path)
            rows = np.load(d / "data.npy", mmap_mode="r").shape[0]
            out.append((len(np.load(d / kd.KEYS)), rows, int(manifest.get("rows", -1))))
    return out


@pytest.mark.parametrize("background", [False, True])
def test_a_checkpoint_holds_the_rows_in_use_not_the_capacity(tmp_path: Path, background: bool) -> None:
    """A dynamic vocabulary's piece wrote its share's whole capacity: docs/collective.md's snippet
    (capacity 2,000,000) on Nations wrote 2 GB a checkpoint for 14 keys. Its files hold the rows in use
    now, the manifest says how many, and a key inserted while a background checkpoint is armed is
    neither in it nor disturbs it."""
    st = ShardTensors(0)
    t = st.create("d", 10_000, (DIM,), "float32", 0, 10_000, INIT, keyed={"shards": 1, "evict": False})
    st.set_optimizer("d", {"kind": "adagrad", "lr": 0.1})
    st.pull_stream("d", np.array([5, 7, 9], np.int64), 1 << 20)
    root = tmp_path / "ck"
    pieces = st.checkpoint(root, background=background)
    st.pull_stream("d", np.array([11, 13], np.int64), 1 << 20)  # new rows 3, 4 while it is written
    if background:
        assert st.background is not None and st.background.wait(30)
        pieces += st.checkpoint_status(root)["pieces"]
    ckpt.write_top(root, pieces, 1, None)
    assert held_rows_of(root) == [(3, 3, 3)]
    keys, rows = ckpt.export_keyed(root, "d") or (None, None)
    assert keys is not None and keys.tolist() == [5, 7, 9]
    np.testing.assert_array_equal(rows, t.data[:3].numpy())
    again = ShardTensors(0)
    t2 = again.create("d", 10_000, (DIM,), "float32", 0, 10_000, INIT, keyed={"shards": 1, "evict": False})
    again.restore(root)
    assert t2.keyed.keys().tolist() == [5, 7, 9]
    np.testing.assert_array_equal(t2.data[:3].numpy(), rows)


def test_a_snapshot_ignores_rows_keys_take_after_it_was_armed(tmp_path: Path) -> None:
    """Chunks of one row: a row past the snapshot's rows in use was indexed as a chunk it does not have."""
    st = ShardTensors(0)
    t = st.create("d", 64, (DIM,), "float32", 0, 64, INIT, keyed={"shards": 1, "evict": False})
    st.pull_stream("d", np.array([1, 2, 3], np.int64), 1 << 20)
    snap = TableSnapshot(tmp_path, t, StagingBudget(1 << 20), chunk_bytes=DIM * 4)
    assert (snap.n, snap.chunks) == (3, 3)
    before = t.data[:3].clone()
    with t.lock:
        snap.preserve(np.array([1, 40], np.int64))  # row 1 kept as it is; row 40 is not the snapshot's
        t.data[1] += 1.0
    snap.drain({"data": np.empty((1, DIM), np.float32)}, Pace(0))
    snap.commit()
    d = ckpt.piece_dir(tmp_path, "d", 0, 64)
    np.testing.assert_array_equal(np.load(d / "data.npy"), before.numpy())


def test_a_fixed_table_is_not_loaded_from_a_dynamic_vocabularys_checkpoint(tmp_path: Path) -> None:
    """Its pieces hold keys' rows in insertion order (and now only those in use): loaded by position into a
    table of fixed rows, they were other rows' values."""
    st = ShardTensors(0)
    st.create("d", 8, (DIM,), "float32", 0, 8, INIT, keyed={"shards": 1, "evict": False})
    st.pull_stream("d", np.array([5, 7], np.int64), 1 << 20)
    root = tmp_path / "ck"
    ckpt.write_top(root, st.checkpoint(root), 1, None)
    fixed = ShardTensors(0)
    fixed.create("d", 8, (DIM,), "float32", 0, 8, INIT)
    with pytest.raises(Exception, match=r"table 'd' is a dynamic vocabulary's in the checkpoint"):
        fixed.restore(root)


def test_a_gpu_tables_chunked_piece_holds_the_rows_in_use_too(tmp_path: Path) -> None:
    """gpu.save_chunked (a GPU shard server's writer, in chunks under the table's lock), run here on the
    host's tensors: with the keys, the rows in use alone, in chunks of two rows."""
    st = ShardTensors(0)
    t = st.create("d", 1_000, (DIM,), "float32", 0, 1_000, INIT, keyed={"shards": 1, "evict": False})
    st.set_optimizer("d", {"kind": "adam", "lr": 0.1, "step_count": "global"})
    st.pull_stream("d", np.array([4, 8, 15, 16, 23], np.int64), 1 << 20)
    keys = t.keyed.keys()

    def writer(directory: Path, view) -> None:
        gpu.save_chunked(directory, view, t, chunk_bytes=2 * 3 * DIM * 4, rows=len(keys))
        ckpt.save_keys(directory, view, keys)

    root = tmp_path / "ck"
    ckpt.write_top(root, [ckpt.write_piece(root, t, writer)], 1, None)
    assert held_rows_of(root) == [(5, 5, 5)]
    got_keys, rows = ckpt.export_keyed(root, "d") or (None, None)
    assert got_keys is not None and got_keys.tolist() == [4, 8, 15, 16, 23]
    np.testing.assert_array_equal(rows, t.data[:5].numpy())
    again = ShardTensors(0)
    t2 = again.create("d", 1_000, (DIM,), "float32", 0, 1_000, INIT, keyed={"shards": 1, "evict": False})
    again.restore(root)
    np.testing.assert_array_equal(t2.data[:5].numpy(), t.data[:5].numpy())
    np.testing.assert_array_equal(t2.state["exp_avg"][:5].numpy(), t.state["exp_avg"][:5].numpy())
