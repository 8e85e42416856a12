"""Blocks at a fixed capacity (models/fixed_blocks.py): the shapes a captured GraphSAGE step reads
are the same at every step, and a step on them gives the seeds' outputs and every gradient of the step
on the batch as sampled, the table rows' included (the added ids repeat a real one with a zero
gradient)."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from graphtrain.runtime.models import fixed_blocks as fb
from graphtrain.runtime.models.graphsage import GraphSAGE
from graphtrain.runtime.models.layers import fitted
from tests.runtime.models.test_layers import block


def batch(seed: int = 0, scale: int = 1) -> list:
    """Two chained blocks of a sampled batch: 2,003 -> 1,001 -> 97 nodes (times `scale`, roughly)."""
    return [
        block(num_dst=1_001 * scale, num_src=2_003 * scale, edges=6_007 * scale, rels=1, seed=seed),
        block(num_dst=97, num_src=1_001 * scale, edges=511 * scale, rels=1, seed=seed + 1),
    ]


def test_a_capacity_covers_what_it_learned_with_room_for_an_added_node() -> None:
    seen = [fb.sizes(batch(s)) for s in range(3)]
    assert seen[0] == fb.Sizes((2_003, 1_001, 97), (6_007, 511))
    cap = fb.capacity_for(seen, seeds=97)
    assert cap.nodes[-1] == 98 and cap.nodes[0] >= cap.nodes[1] >= cap.nodes[2]
    assert all(c > 1.2 * n for c, n in zip(cap.nodes[:-1], seen[0].nodes[:-1], strict=True))
    assert all(fb.fits(s, cap) for s in seen)
    assert not fb.fits(fb.Sizes((cap.nodes[0], 1_001, 97), (6_007, 511)), cap)  # no added node left
    assert not fb.fits(fb.Sizes((2_003, 1_001, 97), (cap.edges[0] + 1, 511)), cap)
    assert not fb.fits(fb.Sizes((2_003, 97), (6_007,)), cap)
    small = fb.capacity_for([fb.Sizes((4, 4, 4), (9, 9))], seeds=4)  # every node a seed
    assert small.nodes == (6, 6, 5) and small.edges == (12, 12)
    with pytest.raises(ValueError, match="same depth"):
        fb.capacity_for([fb.Sizes((3, 2), (4,)), fb.Sizes((3, 2, 1), (4, 2))], seeds=1)


def test_packed_blocks_hold_the_real_means_and_zeros_elsewhere() -> None:
    bs = batch()
    cap = fb.capacity_for([fb.sizes(bs)], seeds=97)
    buffers = fb.pack(bs, cap)
    assert len(buffers) == cap.tensors()
    again = fb.pack(batch(5), cap)  # another batch: the same shapes
    assert [t.shape for t in again] == [t.shape for t in buffers]
    for p, b in zip(fb.unpack(buffers, cap), bs, strict=True):
        assert p.mean is not None and p.mean_t is not None and b.mean is not None
        dense, want = p.mean.to_dense(), b.mean.to_dense()
        assert dense.shape == (p.num_dst, p.num_src)
        assert torch.equal(dense[: b.num_dst, : b.num_src], want)
        assert not dense[b.num_dst :].any() and not dense[:, b.num_src :].any()
        assert torch.equal(p.mean_t.to_dense(), dense.t())
        assert p.mean.values().shape[0] == p.mean_t.values().shape[0]


def test_a_batch_beyond_the_capacity_is_refused_by_pack() -> None:
    cap = fb.capacity_for([fb.sizes(batch())], seeds=97)
    big = batch(scale=2)
    assert not fb.fits(fb.sizes(big), cap)
    with pytest.raises(ValueError, match="does not fit"):
        fb.pack(big, cap)


def _step(blocks: list, ids: torch.Tensor, table: torch.Tensor, data: torch.Tensor, y: torch.Tensor):
    """A GraphSAGE step reading `table`'s rows at `ids` beside data columns: loss, the weights'
    gradients, the table's."""
    torch.manual_seed(0)
    model = GraphSAGE(16 + 8, 32, 5, num_layers=2, dropout=0.0, frozen=8)
    rows = table.detach().requires_grad_()
    out = model(blocks, rows.index_select(0, ids), data)
    loss = functional.cross_entropy(fitted(out, len(y)), y)
    loss.backward()
    assert rows.grad is not None
    return loss.detach(), [p.grad for p in model.parameters()], rows.grad


def test_a_sage_step_at_capacity_is_the_step_on_the_batch() -> None:
    g = torch.Generator().manual_seed(3)
    bs = batch()
    table = torch.randn(5_000, 16, generator=g)
    ids = torch.randperm(5_000, generator=g)[:2_003]
    data = torch.randn(2_003, 8, generator=g)
    y = torch.randint(0, 5, (97,), generator=g)
    cap = fb.capacity_for([fb.sizes(bs)], seeds=97)
    want = _step(bs, ids, table, data, y)
    got = _step(
        fb.unpack(fb.pack(bs, cap), cap),
        fb.padded_rows(ids, cap.nodes[0], repeat_first=True),
        table,
        fb.padded_rows(data, cap.nodes[0]),
        y,
    )
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got[2], want[2], rtol=1e-4, atol=1e-6)  # the added ids gave back 0
    assert torch.equal(got[2][ids[0]] != 0, want[2][ids[0]] != 0)


def test_padded_rows_repeat_an_id_or_add_zeros() -> None:
    ids = torch.tensor([7, 3])
    assert fb.padded_rows(ids, 4, repeat_first=True).tolist() == [7, 3, 7, 7]
    assert fb.padded_rows(torch.ones(2, 3), 3)[2].tolist() == [0.0, 0.0, 0.0]
    assert fb.padded_rows(ids, 2) is ids
    with pytest.raises(ValueError, match="do not fit"):
        fb.padded_rows(ids, 1)


def test_added_entries_are_distinct_and_sorted_in_the_added_rows() -> None:
    """cuSPARSE's CSR: no repeated (row, column) pair; the added entries spread over the added rows."""
    bs = batch()
    cap = fb.capacity_for([fb.sizes(bs)], seeds=97)
    for i, b in enumerate(bs):
        assert b.mean is not None
        crow, col, val = fb.padded_csr(b.mean, cap.nodes[i + 1], cap.edges[i], cap.nodes[i])
        assert crow[-1] == len(col) == len(val) == cap.edges[i]
        assert torch.equal(crow[: b.num_dst + 1], b.mean.crow_indices())
        for r in range(b.num_dst, cap.nodes[i + 1]):
            cols = col[crow[r] : crow[r + 1]]
            assert torch.equal(cols, torch.arange(len(cols))), r
            assert not val[crow[r] : crow[r + 1]].any()
    one_row = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1.0]), (1, 3))
    crow, col, _ = fb.padded_csr(one_row, 2, 8, 3)  # 7 added entries in one added row of 3 columns
    assert crow.tolist() == [0, 1, 8] and col.tolist() == [0, 0, 1, 2, 0, 1, 2, 0]
