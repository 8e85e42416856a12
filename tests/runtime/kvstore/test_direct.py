"""Standalone's direct path (kvstore/client/direct.py): a table's pieces pulled and stepped where they lie.

It serves GPU tables; here it is opened to host tables (DEVICE_TYPES) so that the same code runs on the
CPU and is compared, step for step, with the protocol path every other table takes. tests/gpu runs it
on a GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.kvstore.client import direct
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.optim.optimizers import SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding

ROWS, DIM = 97, 8
INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 3}


@pytest.fixture
def host_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct, "DEVICE_TYPES", ("cuda", "cpu"))


CPU = torch.device("cpu")


def _table(shards: int, config: OptimConfig) -> DistEmbedding:
    """A table of in-process shards whose trainer computes on the host (where the path is opened)."""
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=kvstore.standalone(shards, direct_to=CPU))
    emb.attach(config)
    return emb


def _ids(step: int, n: int = 64) -> torch.Tensor:
    """Skewed ids with many duplicates: row 5 in every batch, several times."""
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(0, ROWS, (n,), generator=g)
    ids[::7] = 5
    return ids


def _train(emb: DistEmbedding, steps: int = 4) -> list[int]:
    opt = SparseOptimizer([emb], emb.config)  # type: ignore[arg-type]
    updated = []
    w = torch.linspace(-1.0, 1.0, DIM)
    for s in range(steps):
        rows = emb(_ids(s).view(8, 8))
        loss = ((rows * w).sum(-1) ** 2).sum()
        loss.backward()
        updated.append(opt.step())
    return updated


CONFIGS = [
    OptimConfig("sgd", 0.1),
    OptimConfig("sgd", 0.1, duplicate="mean", weight_decay=0.01),
    OptimConfig("adagrad", 0.1),
    OptimConfig("rowwise_adagrad", 0.1, duplicate="mean"),
    OptimConfig("adam", 0.01),
    OptimConfig("adam", 0.01, step_count="global"),
    dataclasses.replace(OptimConfig("adagrad", 0.1), row_norm=1.0),
]


@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"{c.kind}-{c.duplicate}-{c.step_count}-{c.row_norm}"
)
@pytest.mark.parametrize("shards", [1, 3])
def test_direct_training_matches_the_protocol_path(
    config: OptimConfig, shards: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same rows, optimizer state and unique counts as the protocol path (client dedup, then the shard's
    step), duplicates reduced by the shard's step instead of the client."""
    via_protocol = _table(shards, config)
    assert via_protocol.client.direct("emb") is None  # host tables take the protocol path
    want_updates = _train(via_protocol)
    monkeypatch.setattr(direct, "DEVICE_TYPES", ("cuda", "cpu"))
    on_the_spot = _table(shards, config)
    assert on_the_spot.client.direct("emb") is not None
    assert _train(on_the_spot) == want_updates
    all_ids = torch.arange(ROWS)
    torch.testing.assert_close(on_the_spot.rows(all_ids), via_protocol.rows(all_ids), rtol=1e-5, atol=1e-6)
    for a, b in zip(
        on_the_spot.client.transport.states, via_protocol.client.transport.states, strict=True
    ):  # the optimizer state too, Adam's table-wide count included
        for key, value in a.tensors["emb"].state.items():
            torch.testing.assert_close(value, b.tensors["emb"].state[key], rtol=1e-5, atol=1e-6)


def test_pull_gives_each_id_its_row_in_order(host_direct: None) -> None:
    emb = _table(3, OptimConfig("sgd", 0.1))
    ids = torch.tensor([96, 0, 40, 5, 96, 33, 64, 1])
    pieces = emb.client.direct("emb")
    assert pieces is not None and [p.lo for p in pieces] == [0, 32, 64]
    full = torch.cat([p.data for p in pieces])
    torch.testing.assert_close(direct.pull(pieces, ids), full[ids], rtol=0, atol=0)
    assert direct.pull(pieces, torch.empty(0, dtype=torch.int64)).shape == (0, DIM)
    # evaluation's reads (rows) take the same path, in the ids' shape
    torch.testing.assert_close(emb.rows(ids.view(2, 4)), full[ids].view(2, 4, DIM), rtol=0, atol=0)
    torch.testing.assert_close(emb.rows(ids.tolist()), full[ids], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [-1, ROWS, 2**40])
def test_an_id_outside_the_table_is_refused_by_name_and_nothing_changes(host_direct: None, bad: int) -> None:
    emb = _table(2, OptimConfig("sgd", 0.1))
    pieces = emb.client.direct("emb")
    assert pieces is not None
    before = [p.data.clone() for p in pieces]
    ids = torch.tensor([3, bad, 7])
    with pytest.raises(RemoteError, match=rf"refused pull: ids\[1\] = {bad} of 'emb' is outside"):
        direct.pull(pieces, ids)
    with pytest.raises(RemoteError, match=rf"refused push_grad: ids\[1\] = {bad} of 'emb'"):
        direct.push_grad(pieces, ids, torch.ones(3, DIM), 1)
    for p, b in zip(pieces, before, strict=True):
        assert torch.equal(p.data, b)


def test_split_groups_ids_by_shard_and_checks_them_in_one_read(host_direct: None) -> None:
    emb = _table(3, OptimConfig("sgd", 0.1))
    pieces = emb.client.direct("emb")
    assert pieces is not None
    ids = torch.tensor([70, 2, 40, 34, 96, 0])
    order, local = direct.split(pieces, ids)
    assert order is not None and order.tolist() == [1, 5, 2, 3, 0, 4]
    assert [loc.tolist() for loc in local] == [[2, 0], [8, 2], [6, 32]]
    with pytest.raises(SparseInputError, match=r"ids\[0\] = -3"):
        direct.split(pieces, torch.tensor([-3]))


def test_nonfinite_gradients_refused_with_the_servers_message(host_direct: None) -> None:
    emb = _table(1, OptimConfig("adagrad", 0.1))
    pieces = emb.client.direct("emb")
    assert pieces is not None
    before = pieces[0].data.clone()
    grads = torch.ones(4, DIM)
    grads[2, 1] = float("nan")
    with pytest.raises(RemoteError, match=r"1 gradient row\(s\) hold NaN or infinity \(first id 9\); no row"):
        direct.push_grad(pieces, torch.tensor([1, 4, 9, 4]), grads, 1)
    assert torch.equal(pieces[0].data, before)
    assert torch.equal(pieces[0].state["sum"], torch.zeros_like(pieces[0].state["sum"]))


def test_one_ids_finite_gradients_summing_to_infinity_are_refused_by_name(host_direct: None) -> None:
    """The CPU core checks each id's reduced row: two finite 3e38 of id 4 sum to infinity."""
    emb = _table(1, OptimConfig("sgd", 1e-38))
    pieces = emb.client.direct("emb")
    assert pieces is not None
    before = pieces[0].data.clone()
    with pytest.raises(RemoteError, match=r"the gradients of id 4 sum to infinity; no row was updated"):
        direct.push_grad(pieces, torch.tensor([1, 4, 4]), torch.full((3, DIM), 3e38), 1)
    assert torch.equal(pieces[0].data, before)


@pytest.mark.parametrize("duplicate", ["sum", "mean"])
def test_an_id_with_a_nonfinite_occurrence_is_skipped_whole_as_on_the_protocol_path(
    host_direct: None, duplicate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated ids (a bag looked up per occurrence): the protocol path reduces them on the client, so one
    NaN occurrence makes the id's row nonfinite and the shard skips it; the direct path drops every
    occurrence of it too, rather than averaging the finite ones."""
    config = dataclasses.replace(OptimConfig("sgd", 1.0, duplicate=duplicate), nonfinite="skip")  # type: ignore[arg-type]
    ids = torch.tensor([3, 70, 3, 40, 70])
    grads = torch.ones(5, DIM)
    grads[2, 0] = float("nan")  # one of id 3's two occurrences
    tables = []
    for opened in (False, True):
        monkeypatch.setattr(direct, "DEVICE_TYPES", ("cuda", "cpu") if opened else ("cuda",))
        emb = _table(2, config)
        assert (emb.client.direct("emb") is not None) is opened
        emb.steps = 0
        emb.apply_gradients(ids, grads)
        tables.append(emb.rows(torch.arange(ROWS)))
    torch.testing.assert_close(tables[1], tables[0], rtol=0, atol=0)
    fresh = _table(1, config).rows(torch.tensor([3, 40]))
    assert torch.equal(tables[1][3], fresh[0])  # untouched
    assert not torch.equal(tables[1][40], fresh[1])


def test_nonfinite_gradients_skipped_where_the_table_says_so(host_direct: None) -> None:
    emb = _table(2, dataclasses.replace(OptimConfig("sgd", 1.0), nonfinite="skip"))
    pieces = emb.client.direct("emb")
    assert pieces is not None
    before = torch.cat([p.data for p in pieces]).clone()
    grads = torch.ones(3, DIM)
    grads[1, 0] = float("inf")
    assert direct.push_grad(pieces, torch.tensor([1, 60, 80]), grads, 1) == 2
    after = torch.cat([p.data for p in pieces])
    torch.testing.assert_close(after[[1, 80]], before[[1, 80]] - 1.0)
    assert torch.equal(after[60], before[60])


def test_tables_that_are_not_usable_take_the_protocol_path(host_direct: None) -> None:
    client = kvstore.standalone(2, direct_to=CPU)
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client)
    assert client.direct("emb") is None  # no optimizer yet: set_optimizer may still move it
    emb.attach(OptimConfig("sgd", 0.1))
    pieces = client.direct("emb")
    assert pieces is not None and direct.usable(pieces)
    assert not direct.usable([pieces[0], None])
    assert not direct.usable([])
    half = dataclasses.replace(pieces[0], data=pieces[0].data.to(torch.float64))
    assert not direct.usable([half, pieces[1]])
    keyed = dataclasses.replace(pieces[0], keyed=object())
    assert not direct.usable([keyed, pieces[1]])
    elsewhere = dataclasses.replace(pieces[0], data=torch.empty(pieces[0].data.shape, device="meta"))
    assert not direct.usable([elsewhere, pieces[1]])
    assert client.direct("absent") is None


def test_host_tables_stay_on_the_protocol_path() -> None:
    """Only GPU tables go direct: host tables are already read in place (InProcTransport.local_view)."""
    client = kvstore.standalone(1)
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client)
    emb.attach(OptimConfig("sgd", 0.1))
    assert direct.DEVICE_TYPES == ("cuda",)
    assert client.direct("emb") is None
    rows = emb(torch.tensor([1, 2]))
    assert rows.device.type == "cpu"


def test_a_shard_server_client_never_goes_direct() -> None:
    from graphtrain.runtime.kvstore.client.zmq_transport import ZmqTransport

    assert ZmqTransport.direct(object(), "emb") is None  # type: ignore[arg-type]


def test_a_step_splits_its_ids_once(host_direct: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The push of the ids a pull split reuses that split: one wait for the device per table and step."""
    calls: list[int] = []
    real = direct.split
    monkeypatch.setattr(direct, "split", lambda pieces, ids: calls.append(len(ids)) or real(pieces, ids))
    emb = _table(3, OptimConfig("adam", 0.01))
    _train(emb, steps=3)
    assert calls == [64, 64, 64]
    emb(torch.tensor([1, 2]))
    emb.clear()  # a lookup without its step: the next push splits its own ids
    rows = emb(torch.tensor([4, 5, 4]))
    rows.sum().backward()
    emb.apply_gradients(torch.tensor([4, 5, 4]), torch.ones(3, DIM))
    assert calls == [64, 64, 64, 2, 3, 3]


def test_only_the_trainers_own_device_goes_direct(host_direct: None) -> None:
    """A trainer on the host beside GPU tables (standalone, shardServers.device cuda, trainers.device cpu)
    must get host rows; a caller that names no device (library use) gets host arrays as always."""
    for client in (kvstore.standalone(2, direct_to=torch.device("meta")), kvstore.standalone(2)):
        emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client)
        emb.attach(OptimConfig("sgd", 0.1))
        assert client.direct("emb") is None and emb.device == CPU
        emb(torch.tensor([1, 50])).sum().backward()
        assert emb.apply_gradients(*emb.pending()) == 2  # the protocol path
