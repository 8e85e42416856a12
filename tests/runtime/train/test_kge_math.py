"""KGE math against brute force: negatives, losses, filtered realistic ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.train import kge_math


def test_corrupt_changes_exactly_one_side_and_never_to_the_original() -> None:
    gen = torch.Generator().manual_seed(0)
    pos = torch.tensor([[0, 1, 2], [3, 0, 4], [5, 2, 6], [7, 1, 8]])
    neg = kge_math.corrupt(pos, 50, 10, gen)
    assert neg.shape == (4, 50, 3)
    flat, orig = neg.view(-1, 3), pos.repeat_interleave(50, 0)
    half = len(flat) // 2
    assert torch.equal(flat[:, 1], orig[:, 1])  # relations never change
    assert torch.all(flat[:half, 0] != orig[:half, 0]) and torch.equal(flat[:half, 2], orig[:half, 2])
    assert torch.all(flat[half:, 2] != orig[half:, 2]) and torch.equal(flat[half:, 0], orig[half:, 0])
    assert flat[:, [0, 2]].min() >= 0 and flat[:, [0, 2]].max() < 10
    assert set(flat[:50, 0].tolist()) == set(range(1, 10))  # uniform over the 9 other entities


def test_corrupt_tails_only_replaces_every_tail() -> None:
    """Link prediction's negatives (tails_only): heads and relations kept, each tail another entity."""
    gen = torch.Generator().manual_seed(0)
    pos = torch.tensor([[0, 1, 2], [3, 0, 4], [5, 2, 6]])
    neg = kge_math.corrupt(pos, 200, 10, gen, tails_only=True)
    assert neg.shape == (3, 200, 3)
    assert torch.equal(neg[..., :2], pos[:, None, :2].expand(-1, 200, -1))
    assert torch.all(neg[..., 2] != pos[:, 2:])
    assert set(neg[0, :, 2].tolist()) == set(range(10)) - {2}


def test_losses_match_their_definitions() -> None:
    pos, neg = torch.tensor([2.0, -1.0]), torch.tensor([[1.0, 3.0], [0.0, -2.0]])
    margin = np.mean([max(0, 1 - 2 + 1), max(0, 1 - 2 + 3), max(0, 1 + 1 + 0), max(0, 1 + 1 - 2)])
    assert kge_math.loss("margin", pos, neg, 1.0).item() == pytest.approx(margin)
    sp = lambda x: np.log1p(np.exp(x))  # noqa: E731
    softplus = np.mean([sp(-2), sp(1), sp(1), sp(3), sp(0), sp(-2)])
    assert kge_math.loss("softplus", pos, neg).item() == pytest.approx(softplus, rel=1e-6)
    ce = np.mean([-2 + np.log(np.exp([2, 1, 3]).sum()), 1 + np.log(np.exp([-1, 0, -2]).sum())])
    assert kge_math.loss("crossentropy", pos, neg).item() == pytest.approx(ce, rel=1e-6)
    with pytest.raises(ValueError, match="unknown KGE loss"):
        kge_math.loss("hinge", pos, neg)


def brute_rank(scores: np.ndarray, true: int, filtered: set[int]) -> float:
    s = scores[true]
    others = [scores[e] for e in range(len(scores)) if e != true and e not in filtered]
    return 1 + sum(x > s for x in others) + sum(x == s for x in others) / 2


def test_filtered_ranks_equal_brute_force() -> None:
    rng = np.random.default_rng(0)
    n, nr = 30, 4
    known = np.unique(
        np.stack([rng.integers(0, n, 400), rng.integers(0, nr, 400), rng.integers(0, n, 400)], 1), axis=0
    )
    index = kge_math.FilterIndex(known, n, nr)
    queries = known[rng.choice(len(known), 25, replace=False)]
    scores = torch.from_numpy(rng.integers(0, 5, (25, n)).astype(np.float32))  # many ties
    for side, anchor_col, true_col in (("tail", 0, 2), ("head", 2, 0)):
        rows, cols = index.known(side, queries[:, anchor_col], queries[:, 1])
        ranks = kge_math.filtered_ranks(scores, torch.from_numpy(queries[:, true_col]), rows, cols)
        for i, q in enumerate(queries):
            if side == "tail":
                others = {int(t) for h, r, t in known if h == q[0] and r == q[1]}
            else:
                others = {int(h) for h, r, t in known if t == q[2] and r == q[1]}
            assert ranks[i].item() == brute_rank(
                scores[i].numpy(), int(q[true_col]), others - {int(q[true_col])}
            )


def test_a_score_that_cannot_be_ordered_counts_against_the_model() -> None:
    """NaN compares false with everything: a diverged model's NaN scores ranked every query first."""
    nan, inf = float("nan"), float("inf")
    scores = torch.tensor(
        [
            [nan, nan, nan, nan, nan],  # all NaN: the last of the 4 left
            [1.0, nan, 3.0, 0.0, 0.0],  # a NaN rival counts as better
            [-inf, -inf, 0.0, 1.0, 2.0],  # -inf true score: tied only with the rivals left
            [5.0, 1.0, 1.0, 0.0, 0.0],  # true 1 not among the known: not its own tie
        ]
    )
    true = torch.tensor([0, 0, 0, 1])
    rows, cols = np.array([2, 2]), np.array([1, 3])  # query 2's known entities 1 and 3 removed
    ranks = kge_math.filtered_ranks(scores, true, rows, cols).tolist()
    assert ranks == [5.0, 3.0, 3.0, 2.5]


def test_rank_sums_metrics() -> None:
    sums = kge_math.RankSums()
    sums.add(torch.tensor([1.0, 2.0, 4.0, 20.0]))
    m = kge_math.RankSums.metrics(sums.as_list())
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0.25 + 0.05) / 4)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (0.25, 0.5, 0.75)


@pytest.mark.parametrize("kind", ["margin", "softplus", "crossentropy"])
def test_every_loss_stays_on_the_scores_device(kind: str) -> None:
    """A GPU trainer's scores: the loss makes nothing on the host (the crossentropy target was made on
    the CPU, and the first TransE step on a GPU failed). The meta device stands in for a GPU in CI."""
    pos, neg = torch.zeros(4, device="meta"), torch.zeros(4, 3, device="meta")
    assert kge_math.loss(kind, pos, neg).device.type == "meta"


@pytest.mark.parametrize("kind", ["transe-l1", "transe-l2", "distmult", "complex", "rotate"])
@pytest.mark.parametrize(("batch", "chunk"), [(8, 2), (7, 3), (5, 8)])
@pytest.mark.parametrize("heads", [None, 0])
def test_joint_scores_are_each_positive_scored_against_its_chunks_shared_entities(
    kind: str, batch: int, chunk: int, heads: int | None
) -> None:
    """The batched chunk products equal the brute force: positive i (head side: the first half, none
    with heads=0, link prediction's tails only) scored with its head, or tail, replaced by each entity of
    its chunk's draw; uneven last chunks included."""
    from graphtrain.contract.spec import ComplExModel, DistMultModel, RotatEModel, TransEModel
    from graphtrain.runtime.models import complex, distmult, rotate, transe

    model, module = {
        "distmult": (DistMultModel(), distmult),
        "complex": (ComplExModel(), complex),
        "rotate": (RotatEModel(), rotate),
    }.get(kind) or (TransEModel(norm=int(kind[-1])), transe)
    g = torch.Generator().manual_seed(batch * 10 + chunk)
    n, k, d = 20, 6, 6  # even: the complex models' rows hold pairs
    ent, rel = (torch.randn(m, d, generator=g, dtype=torch.float64) for m in (n, 3))
    pos = torch.stack([torch.randint(m, (batch,), generator=g) for m in (n, 3, n)], 1)  # seeded: g
    shared = kge_math.joint_draw(batch, k, chunk, n, g, heads=heads)
    half = kge_math.head_side(batch) if heads is None else heads
    assert shared.shape == (kge_math.chunks(half, chunk) + kge_math.chunks(batch - half, chunk), k)
    h, r, t = ent[pos[:, 0]], rel[pos[:, 1]], ent[pos[:, 2]]
    got = kge_math.joint_scores(
        lambda r_, t_, e: module.heads(r_, t_, e, model),
        lambda h_, r_, e: module.tails(h_, r_, e, model),
        (h, r, t),
        ent[shared],
        chunk,
        heads=heads,
    )
    want = torch.empty(batch, k, dtype=torch.float64)
    for i in range(batch):
        side, place = (0, i // chunk) if i < half else (2, kge_math.chunks(half, chunk) + (i - half) // chunk)
        for j, e in enumerate(shared[place].tolist()):
            hh, tt = (ent[e], t[i]) if side == 0 else (h[i], ent[e])
            want[i, j] = module.score(hh, r[i], tt, model)
    torch.testing.assert_close(got, want)
    own = kge_math.own_entity(pos, shared, chunk, heads=heads)
    for i in range(batch):
        side, place = (0, i // chunk) if i < half else (2, kge_math.chunks(half, chunk) + (i - half) // chunk)
        assert own[i].tolist() == [e == int(pos[i, side]) for e in shared[place].tolist()]


def test_joint_draw_is_seeded_and_uniform_over_every_entity() -> None:
    a = kge_math.joint_draw(1024, 256, 256, 50, torch.Generator().manual_seed(3))
    b = kge_math.joint_draw(1024, 256, 256, 50, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (4, 256)  # 2 chunks of heads, 2 of tails
    counts = torch.bincount(a.reshape(-1), minlength=50)
    assert len(counts) == 50 and counts.min() > 0  # every entity drawn, none out of range


def test_a_positives_own_entity_among_the_shared_ones_adds_no_loss_and_no_gradient() -> None:
    """Scored -inf where the shared entity is the true one: every loss ignores it, finite elsewhere."""
    pos = torch.tensor([1.0, 2.0], requires_grad=True)
    neg = torch.tensor([[0.5, 3.0], [1.0, -1.0]], requires_grad=True)
    own = torch.tensor([[False, True], [False, False]])
    for kind in ("margin", "softplus", "crossentropy"):
        masked = neg.masked_fill(own, float("-inf"))
        value = kge_math.loss(kind, pos, masked)
        (gp, gn) = torch.autograd.grad(value, [pos, neg])
        assert torch.isfinite(value) and torch.isfinite(gp).all() and torch.isfinite(gn).all()
        assert gn[0, 1] == 0


@pytest.mark.parametrize("kind", ["transe", "distmult", "complex", "rotate"])
@pytest.mark.parametrize(("b", "k"), [(6, 4), (5, 3), (7, 1), (1, 5), (2, 1)])
def test_sided_scores_are_the_gathered_ones(kind: str, b: int, k: int) -> None:
    """The negatives scored from their replaced entity's rows and their positive's broadcast equal the
    scores of the whole corrupted triples gathered, bit for bit, and so do the rows' gradients (to the
    order of a sum), whether corrupt's split falls between positives or within one (b * k odd)."""
    from graphtrain.contract.spec import ComplExModel, DistMultModel, RotatEModel, TransEModel
    from graphtrain.runtime.models import kge_entry

    cls = {"transe": TransEModel, "distmult": DistMultModel, "complex": ComplExModel, "rotate": RotatEModel}
    model = cls[kind](entityEmbedding="e", relationEmbedding="r")
    entry = kge_entry(kind)
    gen = torch.Generator().manual_seed(b * 10 + k)
    n, nr, d = 9, 3, 8
    pos = torch.stack([torch.randint(m, (b,), generator=gen) for m in (n, nr, n)], 1)  # seeded: gen
    neg = kge_math.corrupt(pos, k, n, gen)
    ent, rel = torch.randn(n, d, generator=gen), torch.randn(nr, d, generator=gen)

    def scored(sided: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e, rr = ent.clone().requires_grad_(), rel.clone().requires_grad_()
        h, r, t = e[pos[:, 0]], rr[pos[:, 1]], e[pos[:, 2]]
        if sided:
            rows = e[kge_math.replaced(neg)]
            s = kge_math.sided_scores(lambda x, y, z: entry.score(x, y, z, model), (h, r, t), rows)
        else:
            s = entry.score(e[neg[..., 0]], r.unsqueeze(1), e[neg[..., 2]], model)
        (s * torch.linspace(-1, 1, s.numel()).view(s.shape)).sum().backward()
        assert e.grad is not None and rr.grad is not None
        return s, e.grad, rr.grad

    (s0, ge0, gr0), (s1, ge1, gr1) = scored(False), scored(True)
    assert s1.shape == (b, k) and torch.equal(s0, s1)
    # sums of O(1) float32 terms in another order: up to 3.8e-6 apart over 200 draws of each case
    torch.testing.assert_close(ge1, ge0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gr1, gr0, rtol=1e-5, atol=1e-5)


def test_replaced_is_the_entity_corrupt_put_in() -> None:
    gen = torch.Generator().manual_seed(1)
    pos = torch.tensor([[0, 0, 1], [2, 1, 3], [4, 0, 5]])
    neg = kge_math.corrupt(pos, 3, 8, gen)  # 9 negatives: the split falls within the second positive
    rep, flat = kge_math.replaced(neg), neg.view(-1, 3)
    assert torch.equal(rep.reshape(-1)[:5], flat[:5, 0]) and torch.equal(rep.reshape(-1)[5:], flat[5:, 2])


@pytest.mark.parametrize("kind", ["dot", "distmult", "mlp"])
@pytest.mark.parametrize(("b", "k"), [(6, 4), (5, 3), (1, 5)])
def test_sided_scores_of_link_prediction_decoders(kind: str, b: int, k: int) -> None:
    """Link prediction's decoders through sided_scores: dot (no relation rows) and distmult give the
    gathered scores bit for bit; the mlp's linear maps see one row per positive instead of k, so its
    scores agree to the last bits."""
    from graphtrain.runtime.models.decoders import Decoder

    torch.manual_seed(0)
    n, d = 11, 64
    dec = Decoder(kind, d, 3)
    gen = torch.Generator().manual_seed(b * 10 + k)
    pos = torch.stack([torch.randint(n, (b,), generator=gen), torch.randint(3, (b,), generator=gen)], 1)
    pos = torch.cat([pos, torch.randint(n, (b, 1), generator=gen)], 1)
    neg = kge_math.corrupt(pos, k, n, gen)
    e = torch.randn(n, d, generator=gen)
    r = dec.relation(pos[:, 1])
    old = dec.score(e[neg[..., 0]], None if r is None else r.unsqueeze(1), e[neg[..., 2]])
    new = kge_math.sided_scores(dec.score, (e[pos[:, 0]], r, e[pos[:, 2]]), e[kge_math.replaced(neg)])
    if kind == "mlp":
        torch.testing.assert_close(new, old, rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(new, old)


def reference_corrupt(
    pos: torch.Tensor, k: int, n: int, gen: torch.Generator, tails_only: bool
) -> torch.Tensor:
    """corrupt as it drew before corrupt_ids (2026-12-04): the draws a checkpoint's resume replays."""
    neg = pos.repeat_interleave(k, dim=0)
    half = 0 if tails_only else (len(neg) + 1) // 2
    for column, rows in ((0, slice(0, half)), (2, slice(half, len(neg)))):
        original = neg[rows, column]
        draw = torch.randint(max(n - 1, 1), (len(original),), generator=gen)
        if n > 1:
            draw += (draw >= original).to(draw.dtype)
        neg[rows, column] = draw
    return neg.view(-1, k, 3)


@pytest.mark.parametrize("tails_only", [False, True])
@pytest.mark.parametrize(("b", "k", "n"), [(1, 1, 1), (3, 2, 2), (7, 3, 50), (64, 5, 3), (1023, 32, 877_450)])
def test_corrupt_ids_are_the_entities_corrupt_puts_in_from_the_same_draws(
    b: int, k: int, n: int, tails_only: bool
) -> None:
    pos = torch.randint(0, n, (b, 3), generator=torch.Generator().manual_seed(b * k))
    whole, ids = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    neg = reference_corrupt(pos, k, n, whole, tails_only)
    assert torch.equal(kge_math.corrupt(pos, k, n, torch.Generator().manual_seed(5), tails_only), neg)
    want = neg[..., 2] if tails_only else kge_math.replaced(neg)
    assert torch.equal(kge_math.corrupt_ids(pos, k, n, ids, tails_only), want)
    assert torch.equal(torch.randint(10**9, (4,), generator=whole), torch.randint(10**9, (4,), generator=ids))
    if n > 1:  # never the positive's own entity
        own = (
            pos[:, 2:]
            if tails_only
            else torch.where(torch.arange(b * k).view(b, k) < (b * k + 1) // 2, pos[:, :1], pos[:, 2:])
        )
        assert not (want == own).any()
