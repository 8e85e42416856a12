"""float16 and bfloat16 tables on the shard servers (issue 47, item 3): stored, pulled and checkpointed in
half, read by the model widened to float32, stepped in float32 by the CPU core and rounded back
stochastically (tests/native/test_half_tables.py states the rounding).

Real shard-server processes over TCP and over shared memory compute what in-process shards compute, bit
for bit (the rounding seed is the table's, its rows' and its step count's, not the process'); a
checkpoint holds the rows in half and restores into another number of shards; export widens to float32.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from graphtrain.runtime.optim import SparseAdagrad, SparseAdam
from graphtrain.runtime.storage.inits import init_keyed
from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary
from tests.runtime.conftest import TOKEN, servers

HALF = (torch.float16, torch.bfloat16)
DYNAMIC_KEYS = np.array([-(2**62), -7, 0, 3, 5, 11, 2**40, 2**62 + 5, 123456789, 42], dtype=np.int64)
INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 4}
ROWS, DIM = 600, 24


def train(client: kvstore.KVClient, dtype: torch.dtype, steps: int = 6) -> tuple[DistEmbedding, torch.Tensor]:
    emb = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=dtype)
    opt = SparseAdagrad([emb], lr=0.05)
    gen = torch.Generator().manual_seed(1)
    target = torch.randn(ROWS, DIM, generator=gen)
    for _ in range(steps):
        ids = torch.randint(0, ROWS, (256,), generator=gen)  # duplicates included
        loss = ((emb(ids) - target[ids]) ** 2).sum()
        loss.backward()
        opt.step()
    return emb, emb.rows(torch.arange(ROWS))


def in_process(half_gradients: bool) -> kvstore.KVClient:
    """Two in-process shards; `half_gradients`: fed a half table's gradients in its type, as over TCP."""
    client = kvstore.standalone(2)
    client.transport.half_gradients = half_gradients  # type: ignore[misc]
    return client


@pytest.mark.parametrize("dtype", HALF)
def test_served_rows_are_half_and_equal_in_process_bit_for_bit(dtype: torch.dtype, tmp_path: Path) -> None:
    # over TCP the gradients travel in the table's type (rounded to nearest), through shared memory in
    # float32: each equals in-process shards fed the same gradients, bit for bit
    local = {tcp: train(in_process(tcp), dtype)[1] for tcp in (True, False)}
    assert not torch.equal(local[True], local[False])  # the rounding of the gradients shows
    assert (local[True] - local[False]).abs().max() < 0.02  # and is small
    for shm in (False, True):
        with servers(2, tmp_path, *(["--shm"] if shm else [])) as srv:
            client = kvstore.connect([s.address for s in srv], TOKEN, shm=shm)
            emb, served = train(client, dtype)
            assert served.dtype == torch.float32  # the model reads float32
            assert torch.equal(served, local[not shm]), f"shm={shm}"
            raw = client.pull("e", np.arange(ROWS), emb.table.book.bounds, (DIM,), emb.table.np_dtype)
            assert raw.itemsize == 2 and raw.nbytes == ROWS * DIM * 2  # pulled in half
            described = client.stats()[0]["tensors"]["e"]
            assert described["dtype"] == str(dtype).removeprefix("torch.")
            client.close()


@pytest.mark.parametrize("dtype", HALF)
def test_a_checkpoint_holds_half_rows_restores_into_three_shards_and_exports_float32(
    dtype: torch.dtype, tmp_path: Path
) -> None:
    client = kvstore.standalone(2, checkpoint_root=tmp_path)
    _, rows = train(client, dtype)
    root = tmp_path / "ck"
    client.checkpoint("ck", root=tmp_path)
    data = sorted(root.rglob("e/*/data.npy"))
    assert sum(np.load(f).nbytes for f in data) == ROWS * DIM * 2
    exported = ckpt.export_table(root, "e")
    assert exported.dtype == np.float32 and np.array_equal(exported, rows.numpy())
    three = kvstore.standalone(3)
    for state in three.transport.states:  # type: ignore[attr-defined]
        state.restore_from = root
    again = DistEmbedding(ROWS, DIM, "e", INIT, client=three, dtype=dtype)
    assert torch.equal(again.rows(torch.arange(ROWS)), rows)


def test_adam_state_stays_float32_and_the_table_half(tmp_path: Path) -> None:
    client = kvstore.standalone(1)
    emb = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=torch.bfloat16)
    opt = SparseAdam([emb], lr=0.01)
    emb(torch.arange(10)).sum().backward()
    opt.step()
    t = client.transport.states[0].tensors["e"]  # type: ignore[attr-defined]
    assert t.data.dtype == torch.bfloat16 and t.data.element_size() == 2
    assert {k: v.dtype for k, v in t.state.items()} == {
        "exp_avg": torch.float32,
        "exp_avg_sq": torch.float32,
        "step": torch.int64,
    }


def test_a_nonfinite_gradient_is_refused_and_nothing_changes() -> None:
    client = kvstore.standalone(1)
    emb = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=torch.float16)
    SparseAdagrad([emb], lr=0.1)
    before = emb.rows(torch.arange(ROWS))
    grads = torch.zeros(3, DIM)
    grads[1, 2] = float("nan")
    with pytest.raises(RemoteError, match="hold NaN or infinity"):
        emb.apply_gradients(torch.tensor([1, 2, 3]), grads)
    assert torch.equal(emb.rows(torch.arange(ROWS)), before)


def train_dynamic(client: kvstore.KVClient, dtype: torch.dtype) -> tuple[DistEmbedding, np.ndarray]:
    """A dynamic vocabulary in half over arbitrary int64 keys: Adam steps, then its keys' rows."""
    from tests.runtime.kvstore.test_keyed import STEPS, batch

    emb = DistEmbedding(1000, 4, "dyn", INIT, client=client, vocabulary=DynamicVocabulary(64), dtype=dtype)
    opt = SparseAdam([emb], lr=0.05)
    for s in range(STEPS):
        keys, weights = batch(s)
        (emb(keys) * weights).sum().backward()
        opt.step()
    return emb, emb.rows(torch.from_numpy(DYNAMIC_KEYS)).numpy()


@pytest.mark.parametrize("dtype", HALF)
def test_a_dynamic_half_table_trains_within_rounding_over_tcp_as_in_process_and_restores(
    dtype: torch.dtype, tmp_path: Path
) -> None:
    """Half rows on every shard (2 bytes an element), the steps within a few units in the last place of
    a float32 table's, the shard servers' rows those of in-process shards fed the same (half) gradients,
    an unseen key's evaluation pull its initial value rounded to nearest, and a checkpoint restoring
    into another shard count bit for bit."""
    from tests.runtime.kvstore.test_keyed import STEPS

    emb, local = train_dynamic(in_process(True), dtype)
    for state in emb.client.transport.states:  # type: ignore[attr-defined]
        assert state.tensors["dyn"].data.dtype == dtype
    f32, want = train_dynamic(in_process(False), torch.float32)
    assert f32.table.wire == "float32" and not np.array_equal(local, want)
    bound = (STEPS + 2) * torch.finfo(dtype).eps * np.maximum(np.abs(local), np.abs(want)) + 1e-6
    assert np.all(np.abs(local - want) <= bound)
    unseen = torch.tensor([-11, 2**55])
    start = torch.from_numpy(init_keyed(INIT, unseen.numpy(), 4)).to(dtype).float()
    assert torch.equal(emb.rows(unseen), start)
    with servers(2, tmp_path) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        _, served = train_dynamic(client, dtype)
        np.testing.assert_array_equal(served, local)
        client.checkpoint("ck", root=tmp_path)
        client.close()
    root = tmp_path / "ck"
    assert all(np.load(f).itemsize == 2 for f in root.rglob("dyn/*/data.npy"))
    keys, rows = ckpt.export_keyed(root, "dyn")  # type: ignore[misc]
    assert rows.dtype == np.float32  # widened, as a fixed table's export
    np.testing.assert_array_equal(
        rows[np.searchsorted(keys, DYNAMIC_KEYS[np.argsort(DYNAMIC_KEYS)])], local[np.argsort(DYNAMIC_KEYS)]
    )
    three = kvstore.standalone(3)
    for state in three.transport.states:  # type: ignore[attr-defined]
        state.restore_from = root
    again = DistEmbedding(1000, 4, "dyn", INIT, client=three, vocabulary=DynamicVocabulary(64), dtype=dtype)
    np.testing.assert_array_equal(again.rows(torch.from_numpy(DYNAMIC_KEYS)).numpy(), local)


@pytest.mark.timeout(300)
def test_a_background_delta_of_a_half_table_restores_bit_for_bit(tmp_path: Path) -> None:
    """A full background checkpoint, a step touching few rows, a delta of those rows: the delta holds
    half rows and a server restarted with --restore latest comes back with the rows as they were."""
    from tests.runtime.kvstore.test_checkpoint_background import complete

    with servers(1, tmp_path) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        emb = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=torch.bfloat16)
        opt = SparseAdagrad([emb], lr=0.05)
        emb(torch.arange(ROWS)).sum().backward()
        opt.step()
        for name, ids in (("ck-1", None), ("ck-2", torch.arange(10))):
            if ids is not None:
                (emb(ids) ** 2).sum().backward()
                opt.step()
            client.checkpoint_begin(name)
            complete(client, tmp_path, name)
            ckpt.mark_latest(tmp_path, name)
        rows = emb.rows(torch.arange(ROWS))
        client.close()
    delta = json.loads(next((tmp_path / "ck-2" / "e").glob("*/manifest.json")).read_text())
    assert delta.get("delta", {}).get("depth") == 1 and delta["dtype"] == "bfloat16"
    full = json.loads(next((tmp_path / "ck-1" / "e").glob("*/manifest.json")).read_text())
    assert (full["round_steps"], delta["round_steps"]) == (1, 2)  # the count as each was begun
    assert np.array_equal(ckpt.export_table(tmp_path / "ck-2", "e"), rows.numpy())
    with servers(1, tmp_path, "--restore", "latest") as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        back = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=torch.bfloat16)
        assert torch.equal(back.rows(torch.arange(ROWS)), rows)
        client.close()


def test_a_manifest_that_does_not_describe_its_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """The sha256 of data.npy proves it is the file written, not that manifest.json (not hashed) says
    what it holds: float16 rows under a manifest saying bfloat16 loaded as other numbers, and a file
    with a row missing (its hash recomputed) failed inside numpy. Verification, export and restore
    now compare each file's header with its manifest."""
    from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
    from graphtrain.runtime.errors import DataError

    client = kvstore.standalone(1, checkpoint_root=tmp_path)
    train(client, torch.float16, steps=1)
    client.checkpoint("ck", root=tmp_path)
    root = tmp_path / "ck"
    piece = next((root / "e").iterdir())
    manifest = read_json(piece / "manifest.json")
    write_json(piece / "manifest.json", {**manifest, "dtype": "bfloat16"})
    for check in (ckpt.verify_checkpoint, lambda r: ckpt.export_table(r, "e", verify=False)):
        with pytest.raises(
            DataError, match=r"data.npy: holds float16 \(600, 24\), its manifest says bfloat16"
        ):
            check(root)
    write_json(piece / "manifest.json", manifest)
    np.save(piece / "data.npy", np.load(piece / "data.npy")[:-1])  # a row short, its hash made to match
    write_json(
        piece / "manifest.json",
        {**manifest, "files": {**manifest["files"], "data.npy": sha256_file(piece / "data.npy")}},
    )
    with pytest.raises(DataError, match=r"holds float16 \(599, 24\), its manifest says float16 \(600, 24\)"):
        ckpt.verify_checkpoint(root)
    three = kvstore.standalone(2)
    for state in three.transport.states:  # type: ignore[attr-defined]
        state.restore_from = root
    with pytest.raises(RemoteError, match=r"holds float16 \(599, 24\)"):
        DistEmbedding(ROWS, DIM, "e", INIT, client=three, dtype=torch.float16)


@pytest.mark.parametrize("bad", ["object", "not-npy", "short"])
def test_a_file_numpy_cannot_read_as_an_array_is_refused_in_one_line(tmp_path: Path, bad: str) -> None:
    """A data.npy that is no plain array (pickled objects, no .npy header, fewer bytes than its header
    says), its hash made to match, was a ValueError from inside numpy: export ended in a traceback and
    `graphtrain run --resume` too, instead of falling back to the checkpoint before."""
    from graphtrain.runtime.data.cache import read_json, sha256_file, write_json
    from graphtrain.runtime.errors import DataError

    client = kvstore.standalone(1, checkpoint_root=tmp_path)
    train(client, torch.float16, steps=1)
    client.checkpoint("ck", root=tmp_path)
    root = tmp_path / "ck"
    piece = next((root / "e").iterdir())
    data = piece / "data.npy"
    if bad == "object":
        np.save(data, np.full((600, 24), None, dtype=object), allow_pickle=True)
    elif bad == "not-npy":
        data.write_bytes(b"hello\n")
    else:
        data.write_bytes(data.read_bytes()[:-10])
    manifest = read_json(piece / "manifest.json")
    write_json(
        piece / "manifest.json", {**manifest, "files": {**manifest["files"], "data.npy": sha256_file(data)}}
    )
    for check in (ckpt.verify_checkpoint, lambda r: ckpt.export_table(r, "e", verify=False)):
        with pytest.raises(DataError, match=r"data.npy: not a readable .npy array"):
            check(root)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_tables_gradients_cross_a_socket_in_half_and_shared_memory_in_float32(dtype: str) -> None:
    from graphtrain.runtime import dtypes
    from graphtrain.runtime.kvstore.client.kvclient import KVClient

    class Wire:  # what KVClient asks of a transport that sends bytes, and the calls it is given
        num_shards, max_frame_bytes, chunked_pushes, half_gradients = 2, None, False, True

        def __init__(self, local: bool) -> None:
            self.local, self.calls = local, []

        def is_local(self, shard: int) -> bool:
            return self.local

        def push_buffer(self, nbytes: int):  # noqa: ANN201 - a shared-memory stand-in
            return (memoryview_holder(nbytes), "seg") if self.local else None

        def call_many(self, calls, timeout=None):  # noqa: ANN001, ANN201
            self.calls += calls
            return []

        def settle(self) -> None:
            pass

    class memoryview_holder:  # noqa: N801 - the segment's `buf`
        def __init__(self, n: int) -> None:
            self.buf = bytearray(n)

    grads = np.array([[0.1, -70000.0], [np.nan, 3.0], [1e-3, 2.0]], np.float32)
    ids, bounds = np.array([0, 2, 3]), np.array([0, 2, 4])
    wire = Wire(local=False)
    KVClient(wire).push_grad("e", ids, grads, bounds, mean=False, half=dtype)  # type: ignore[arg-type]
    sent = [c.arrays[1] for c in wire.calls]
    assert all(v.dtype == dtypes.NUMPY[dtype] and v.itemsize == 2 for v in sent)  # half the bytes
    back = np.concatenate([dtypes.widened(v, dtype) for v in sent])
    if dtype == "float16":
        assert back[0, 1] == -65504.0  # beyond float16's range: saturated, not infinite
    else:
        assert back[0, 1] == pytest.approx(-70000.0, rel=4e-3)  # bfloat16 has float32's range
    assert np.isnan(back[1, 0])  # a NaN stays one (the server refuses it)
    np.testing.assert_allclose(back[[0, 2]][:, 0], [0.1, 1e-3], rtol=4e-3)
    local = Wire(local=True)
    KVClient(local).push_grad("e", ids, grads, bounds, mean=False, half=dtype)  # type: ignore[arg-type]
    assert all("shm" in c.args for c in local.calls)  # through shared memory: float32, untouched


def test_predict_reads_a_dynamic_half_tables_checkpoint_as_float32_and_unseen_keys_rounded(
    tmp_path: Path,
) -> None:
    """checkpoint_rows (what predict scores with): the keys' rows widened, exactly as trained; a key the
    table never saw its initial value rounded to the table's type, as an evaluation pull reads it."""
    import yaml

    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.train.tables import checkpoint_rows, table_init

    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-distmult.yaml").read_text())
    entity = doc["spec"]["embeddings"][0]
    entity.update(dtype="bfloat16", vocabulary={"kind": "dynamic", "capacity": 14}, dim=8)
    doc["spec"]["embeddings"][1]["dim"] = 8
    spec = load_yaml(yaml.safe_dump(doc)).spec
    client = kvstore.standalone(2, checkpoint_root=tmp_path)
    init = table_init(spec, entity["name"])
    emb = DistEmbedding(
        14, 8, entity["name"], init, client=client, vocabulary=DynamicVocabulary(14), dtype=torch.bfloat16
    )
    opt = SparseAdam([emb], lr=0.05)
    seen = torch.tensor([0, 3, 5, 13])
    emb(seen).pow(2).sum().backward()
    opt.step()
    trained = emb.rows(seen).numpy()
    client.checkpoint("ck", root=tmp_path)
    rows = checkpoint_rows(tmp_path / "ck", spec, entity["name"], 14)
    assert rows.dtype == np.float32 and np.abs(rows).max() < 10
    np.testing.assert_array_equal(rows[seen.numpy()], trained)
    unseen = np.array([1, 2, 4])
    start = torch.from_numpy(init_keyed(init, unseen, 8)).bfloat16().float().numpy()
    np.testing.assert_array_equal(rows[unseen], start)
    np.testing.assert_array_equal(rows[unseen], emb.rows(torch.from_numpy(unseen)).numpy())


def vma_flags(address: int) -> list[str]:
    """The VmFlags of this process' mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_large_table_the_cpu_core_steps_asks_for_huge_pages(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server table of 4 MB+ of rows the CPU core steps is advised to 2 MB pages before its first
    write, half tables too (they were left on 4 KB pages: their step gains as much as float32's from
    fewer TLB misses); a table of integers is not. The advice is read back from the kernel (the
    mapping's `hg` flag); that the integer table is not advised is read from the calls, since memory
    that an earlier test had advised and freed may come back from malloc with its flag."""
    from graphtrain.runtime.kvstore.tables.state import ShardTensors
    from graphtrain.runtime.native import memory

    advised: list[int] = []
    advise = memory.advise_hugepages
    monkeypatch.setattr(memory, "advise_hugepages", lambda t: advised.append(t.data_ptr()) or advise(t))
    state = ShardTensors()
    rows = (8 << 20) // (64 * 4)  # 8 MB of float32 rows, 4 MB of half ones
    table = state.create("t", rows, (64,), dtype, 0, rows, {"kind": "uniform", "seed": 1})
    assert advised == [table.data.data_ptr()]
    assert "hg" in vma_flags(table.data.data_ptr() + table.data.nbytes // 2)
    ids = state.create("i", rows, (64,), "int32", 0, rows, {"kind": "zeros"})
    assert advised == [table.data.data_ptr()], "an integer table was advised to huge pages"
    assert ids.data.nbytes >= memory.HUGE_PAGE_MIN_BYTES  # large enough that only its type spared it


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrowing_casts_in_range_rows_straight_and_saturates_the_rest_bit_for_bit(dtype: str) -> None:
    """dtypes.narrowed's fast path (rows within the type's range: one cast) and its saturating path give
    the bits of one rule: finite values clamped to the largest, then rounded to nearest even; NaN and
    infinities kept."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    from graphtrain.runtime import dtypes

    top = torch.finfo(getattr(torch, dtype)).max

    def rule(a: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(a.copy())
        t = torch.where(torch.isfinite(t), t.clamp(-top, top), t)
        return t.to(getattr(torch, dtype)).view(torch.int16).numpy()

    values = st.one_of(
        st.floats(width=32, allow_nan=True, allow_infinity=True),
        st.sampled_from([top, -top, 65519.0, 65520.0, 3.4e38, -3.4e38, 0.0, -0.0, 6e-8, 1e-45]),
    )

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(arrays(np.float32, st.tuples(st.integers(0, 5), st.integers(1, 7)), elements=values))
    def one(a: np.ndarray) -> None:
        got = dtypes.narrowed(a, dtype)
        assert got.dtype == dtypes.NUMPY[dtype] and got.shape == a.shape
        assert np.array_equal(got.view(np.int16), rule(a)), a

    one()


@pytest.mark.parametrize("dtype", HALF)
def test_a_run_resumed_from_a_checkpoint_rounds_as_the_run_that_went_on(
    dtype: torch.dtype, tmp_path: Path
) -> None:
    """A half table's rounding seeds come from its step count (TensorShard.round_steps): the checkpoint
    keeps the count with the rows, so steps after a restore round as the uninterrupted run's did (the
    resume of a float32 run is bit for bit already: tests/runtime/train/test_resume.py)."""

    def steps(emb: DistEmbedding, opt: SparseAdagrad, seeds: range) -> None:
        for s in seeds:
            ids = torch.randint(0, ROWS, (128,), generator=torch.Generator().manual_seed(s))
            (emb(ids) ** 2).sum().backward()
            opt.step()

    client = kvstore.standalone(2, checkpoint_root=tmp_path)
    emb = DistEmbedding(ROWS, DIM, "e", INIT, client=client, dtype=dtype)
    opt = SparseAdagrad([emb], lr=0.05)
    steps(emb, opt, range(3))
    client.checkpoint("ck", root=tmp_path)
    counts = json.loads(next((tmp_path / "ck" / "e").glob("*/manifest.json")).read_text())["round_steps"]
    assert counts == 3
    steps(emb, opt, range(3, 7))
    went_on = emb.rows(torch.arange(ROWS))
    resumed = kvstore.standalone(2)
    for state in resumed.transport.states:  # type: ignore[attr-defined]
        state.restore_from = tmp_path / "ck"
    again = DistEmbedding(ROWS, DIM, "e", INIT, client=resumed, dtype=dtype)
    steps(again, SparseAdagrad([again], lr=0.05), range(3, 7))
    assert torch.equal(again.rows(torch.arange(ROWS)), went_on)


@pytest.mark.parametrize("bad", ["3", -1, 2**63, True, 1.5, None])
def test_a_rounding_count_that_is_not_a_count_is_refused_in_one_line(bad: object, tmp_path: Path) -> None:
    """A manifest edited to hold a round_steps of another kind or beyond an int64 names its file, where
    int() or the int64 array had raised a traceback (or a bool passed as 1)."""
    from graphtrain.runtime.errors import DataError

    client = kvstore.standalone(1, checkpoint_root=tmp_path)
    train(client, torch.bfloat16, steps=1)
    client.checkpoint("ck", root=tmp_path)
    manifest = next((tmp_path / "ck" / "e").glob("*/manifest.json"))
    doc = json.loads(manifest.read_text())
    doc["round_steps"] = bad
    manifest.write_text(json.dumps(doc))
    with pytest.raises(
        DataError, match=r"manifest.json: round_steps must be a whole number in \[0, 2\*\*63\)"
    ):
        ckpt.saved_round_steps(ckpt.pieces_of(tmp_path / "ck", "e"), 0, ROWS)


def plant_nonfinite(piece: Path, row: int, dtype: torch.dtype) -> None:
    """A half piece's row `row` made to hold an infinity (bfloat16: a NaN's bits, int16 on disk), its
    sha256 re-recorded: a hand edit that the file's hash no longer shows."""
    from graphtrain.runtime.data.cache import read_json, sha256_file, write_json

    rows = np.load(piece / "data.npy")
    rows[row, 1] = np.int16(0x7FC0) if dtype == torch.bfloat16 else np.float16("inf")
    np.save(piece / "data.npy", rows)
    manifest = read_json(piece / "manifest.json")
    manifest["files"]["data.npy"] = sha256_file(piece / "data.npy")
    write_json(piece / "manifest.json", manifest)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("dtype", HALF)
def test_half_rows_of_nan_or_infinity_are_refused_on_restore_naming_the_row(
    dtype: torch.dtype, dynamic: bool, tmp_path: Path
) -> None:
    """As a float32 table's (test_checkpoint.py): a bfloat16 piece's rows are int16 bits, and the check
    passed integers over, so a bfloat16 NaN planted in a checkpoint was restored and served; a dynamic
    table's restore checked no row of any type."""
    client = kvstore.standalone(1, checkpoint_root=tmp_path)
    if dynamic:
        train_dynamic(client, dtype)
    else:
        train(client, dtype, steps=1)
    client.checkpoint("ck", root=tmp_path)
    name = "dyn" if dynamic else "e"
    piece = next((tmp_path / "ck" / name).glob("rows-*"))
    plant_nonfinite(piece, 7, dtype)
    if dynamic:
        key = int(np.load(piece / "keys.npy")[7])
        where = f"key {key}"
    else:
        where = "row 7"
    refused = rf"data.npy: 1 row\(s\) hold NaN or infinity \(first: {where}\)"
    with pytest.raises(DataError, match=refused):  # so resuming skips it for the checkpoint before
        ckpt.verify_checkpoint(tmp_path / "ck")
    again = kvstore.standalone(2)
    for state in again.transport.states:  # type: ignore[attr-defined]
        state.restore_from = tmp_path / "ck"
    with pytest.raises(RemoteError, match=refused):
        if dynamic:
            DistEmbedding(1000, 4, name, INIT, client=again, vocabulary=DynamicVocabulary(64), dtype=dtype)
        else:
            DistEmbedding(ROWS, DIM, name, INIT, client=again, dtype=dtype)
