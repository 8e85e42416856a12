"""Knowledge-graph embedding math (pure torch/numpy): negatives, losses and filtered ranks (the scores are
the models', runtime/models/).

The conventions are PyKEEN's, so a run can be compared with it setting for setting: negatives corrupt
the head (first half of a batch) or the tail (the rest) with another entity drawn uniformly (PyKEEN's
BasicNegativeSampler); losses are reduced by the mean as PyKEEN's sLCWA losses are; ranks are
"realistic" (ties counted half) and filtered by every known triple of train, valid and test. Joint
negatives (DGL-KE's chunked sampling) keep the sides and the losses: only the draw is shared by a chunk.
Link prediction with a GNN replaces tails only by default (tails_only, heads=0: task.negativeSide tail),
as DGL's and GraphStorm's samplers do; which side trains better depends on the data (bench/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional

from graphtrain.runtime import arrays


def corrupt(
    pos: torch.Tensor, k: int, num_entities: int, gen: torch.Generator, tails_only: bool = False
) -> torch.Tensor:
    """k negatives per positive, (B, k, 3). As PyKEEN's BasicNegativeSampler: the negatives of the first
    half of the (shuffled) batch replace the head, the rest the tail, so each softmax of the
    cross-entropy loss compares one side; the replacement is uniform over the other entities.
    tails_only: every negative replaces the tail (link prediction's destination, as DGL's samplers).
    The draws are corrupt_ids'."""
    ids = corrupt_ids(pos, k, num_entities, gen, tails_only).reshape(-1)
    neg = pos.repeat_interleave(k, dim=0)
    half = 0 if tails_only else (len(neg) + 1) // 2
    neg[:half, 0] = ids[:half]
    neg[half:, 2] = ids[half:]
    return neg.view(-1, k, 3)


def corrupt_ids(
    pos: torch.Tensor, k: int, num_entities: int, gen: torch.Generator, tails_only: bool = False
) -> torch.Tensor:
    """(B, k): the entity each of corrupt's negatives puts in its positive's place, from the same draws
    (replaced(corrupt(...)) with nothing else built: a KGE step reads only these, and a trainer drew and
    copied the (B, k, 3) triples around them every step)."""
    n = len(pos) * k
    half = 0 if tails_only else (n + 1) // 2
    out = torch.empty(n, dtype=torch.int64)
    for column, rows in ((0, slice(0, half)), (2, slice(half, n))):
        draw = torch.randint(max(num_entities - 1, 1), (rows.stop - rows.start,), generator=gen)
        if num_entities > 1:  # past the positive's own entity: uniform over the others
            draw += (draw >= pos[:, column].repeat_interleave(k)[rows]).to(draw.dtype)
        out[rows] = draw
    return out.view(-1, k)


def replaced(neg: torch.Tensor) -> torch.Tensor:
    """(B, k) the entity each of corrupt's negatives puts in its positive's place: the head in the
    first half of the flattened negatives, the tail in the rest (its other entity is the positive's)."""
    b, k = neg.shape[:2]
    flat = neg.reshape(-1, 3)
    half = (len(flat) + 1) // 2
    return torch.cat([flat[:half, 0], flat[half:, 2]]).view(b, k)


def sided_scores(
    score: Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], torch.Tensor],
    triples: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor],
    rows: torch.Tensor,
) -> torch.Tensor:
    """(B, k) scores of corrupt's negatives from the rows (B, k, d) of their replaced entities
    (`replaced`) and the positives' rows (h, r, t), each (B, d) (r may be None: a relation-free
    decoder). The kept entity is the positive's own row broadcast over k, not gathered k times: half
    the rows a (B, k, 2, d) gather moves, and its gradient summed once per positive. score(h, r, t)
    broadcasts over leading dims. An elementwise score (the KGE models, the dot and distmult decoders)
    gives the gathered form's scores bit for bit; the mlp decoder's linear maps then see one row per
    positive rather than k, so its products may differ in the last bit."""
    h, r, t = triples
    b, k = rows.shape[:2]
    half = (b * k + 1) // 2  # corrupt's split of the flattened negatives
    whole, some = half // k, -(-half // k)  # positives all of whose (some of whose) negatives are heads
    side = lambda x, lo, hi: None if x is None else x[lo:hi].unsqueeze(1)  # noqa: E731
    if whole == some:  # the split falls between positives: split, whose gradient is a cat, not a fill
        ends = [whole, b - whole]
        head_rows, tail_rows = rows.split(ends)
        hr, tr = (None, None) if r is None else r.split(ends)
        ht, th = t.split(ends)[0], h.split(ends)[1]
        heads = score(head_rows, None if hr is None else hr.unsqueeze(1), ht.unsqueeze(1))
        tails = score(th.unsqueeze(1), None if tr is None else tr.unsqueeze(1), tail_rows)
        return torch.cat([heads, tails])
    # one positive has negatives on both sides: score it both ways and keep each slot's own side
    heads = score(rows[:some], side(r, 0, some), t[:some].unsqueeze(1))
    tails = score(h[whole:].unsqueeze(1), side(r, whole, b), rows[whole:])
    on_head = torch.arange(k, device=rows.device) < half - whole * k
    mixed = torch.where(on_head, heads[whole], tails[0])
    return torch.cat([heads[:whole], mixed.unsqueeze(0), tails[1:]])


def head_side(batch: int) -> int:
    """How many of a batch's positives (the first ones) have their head replaced; the rest their tail."""
    return (batch + 1) // 2


def chunks(n: int, chunk: int) -> int:
    """Chunks of up to `chunk` positives that n positives make."""
    return -(-n // chunk)


def joint_draw(
    batch: int, k: int, chunk: int, num_entities: int, gen: torch.Generator, heads: int | None = None
) -> torch.Tensor:
    """Joint negatives (DGL-KE's chunked sampling): (chunks, k) entity ids, uniform over every entity, one
    row per chunk of `chunk` positives: the head side's chunks first, then the tail side's. An entity drawn
    that is a positive's own true one is left out of its loss (joint_scores). `heads`: the positives on
    the head side (head_side(batch) unless given; 0: every negative a tail)."""
    half = head_side(batch) if heads is None else heads
    rows = chunks(half, chunk) + chunks(batch - half, chunk)
    return torch.randint(num_entities, (rows, k), generator=gen)


def in_chunks(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """(n, ...) -> (chunks, chunk, ...): the last chunk padded with zeros (its padded rows' scores are
    cut off again, so they touch no loss and no gradient)."""
    n = x.shape[0]
    pad = chunks(n, chunk) * chunk - n
    if pad:
        x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
    return x.view(-1, chunk, *x.shape[1:])


def per_positive(shared: torch.Tensor, n: int, chunk: int) -> torch.Tensor:
    """The shared ids (chunks, k) of a side, one row per positive (n, k): each its chunk's."""
    return shared.repeat_interleave(chunk, dim=0)[:n]


def joint_scores(
    score_heads: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    score_tails: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    triples: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    shared_rows: torch.Tensor,
    chunk: int,
    heads: int | None = None,
) -> torch.Tensor:
    """(B, k) negative scores of a batch against its chunks' shared entities: the head side's positives
    as (?, r, t) against theirs, the tail side's as (h, r, ?), each chunk one batched product.
    `triples`: the rows (h, r, t), each (B, d); `shared_rows` (chunks, k, d) in joint_draw's order;
    score_heads(r, t, ents) and score_tails(h, r, ents) batch over a leading chunk dimension; `heads` as
    joint_draw's."""
    h, r, t = triples
    b = len(h)
    half, k = head_side(b) if heads is None else heads, shared_rows.shape[1]
    nh = chunks(half, chunk)
    if half == 0:
        return score_tails(in_chunks(h, chunk), in_chunks(r, chunk), shared_rows).reshape(-1, k)[:b]
    heads = score_heads(in_chunks(r[:half], chunk), in_chunks(t[:half], chunk), shared_rows[:nh])
    tails = score_tails(in_chunks(h[half:], chunk), in_chunks(r[half:], chunk), shared_rows[nh:])
    return torch.cat([heads.reshape(-1, k)[:half], tails.reshape(-1, k)[: b - half]])


def own_entity(pos: torch.Tensor, shared: torch.Tensor, chunk: int, heads: int | None = None) -> torch.Tensor:
    """(B, k) bool: where a chunk's shared negative is the positive's own replaced entity (its head on
    the head side, its tail on the other): a true triple, left out of the loss. `heads` as joint_draw's."""
    b = len(pos)
    half = head_side(b) if heads is None else heads
    nh = chunks(half, chunk)
    heads = per_positive(shared[:nh], half, chunk) == pos[:half, :1]
    tails = per_positive(shared[nh:], b - half, chunk) == pos[half:, 2:]
    return torch.cat([heads, tails])


def loss(kind: str, pos: torch.Tensor, neg: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """pos (B,), neg (B, k) scores -> the mean loss.

    margin: mean of relu(margin - pos + neg) over every (positive, negative) pair;
    softplus: mean of softplus(-pos) and softplus(neg) over all B + B*k scores;
    crossentropy: softmax cross-entropy of each positive against its negatives."""
    if kind == "margin":
        return functional.relu(margin - pos.unsqueeze(1) + neg).mean()
    if kind == "softplus":
        return torch.cat([functional.softplus(-pos), functional.softplus(neg).reshape(-1)]).mean()
    if kind == "crossentropy":
        logits = torch.cat([pos.unsqueeze(1), neg], 1)
        return functional.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long, device=pos.device))
    raise ValueError(f"unknown KGE loss {kind!r}")


class FilterIndex:
    """Every known (key, entity) pair of one side, for filtered ranking: tails by (head, relation)
    and heads by (relation, tail), each as a sorted key array with the entities alongside."""

    def __init__(self, known: np.ndarray, num_entities: int, num_relations: int):
        h, r, t = (known[:, i].astype(np.int64) for i in range(3))
        self.n, self.nr = num_entities, num_relations
        self.tails = self._index(h * num_relations + r, t)
        self.heads = self._index(t * num_relations + r, h)

    @staticmethod
    def _index(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(keys, kind="stable")
        return keys[order], values[order]

    def known(self, side: str, anchor: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, entity) pairs to filter for a batch of queries: side "tail" asks (anchor=h, r, ?),
        "head" asks (?, r, anchor=t)."""
        keys, values = self.tails if side == "tail" else self.heads
        q = anchor.astype(np.int64) * self.nr + rel.astype(np.int64)
        lo, hi = np.searchsorted(keys, q, "left"), np.searchsorted(keys, q, "right")
        counts = hi - lo
        rows = np.repeat(np.arange(len(q)), counts)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return rows, values[np.arange(int(counts.sum())) + starts]


def filtered_ranks(
    scores: torch.Tensor, true: torch.Tensor, rows: np.ndarray, cols: np.ndarray
) -> torch.Tensor:
    """Realistic ranks (1 + #better + #tied / 2, PyKEEN's default) of the true entities among the
    candidates left after removing the known ones (`rows`, `cols`) and the true one itself. A score that
    cannot be ordered counts against the model: a NaN rival as better, a NaN true score as the last
    rank (NaN compares false with everything, so a diverged model ranked every query first: MRR 1).
    Counted over every candidate in two passes (no copy of the scores), then the removed ones, few,
    taken back out: no -inf sentinel, which a true score of -inf tied with."""
    n, device = scores.shape[1], scores.device
    target = scores.gather(1, true.view(-1, 1))
    above = (~(scores <= target)).sum(1)  # better, and those with no order (NaN)
    tied = (scores == target).sum(1)
    queries = np.concatenate([rows, np.arange(len(true))]).astype(np.int64)
    flat = arrays.unique(queries * n + np.concatenate([cols, true.cpu().numpy()]).astype(np.int64))
    rr, cc = torch.from_numpy(flat // n).to(device), torch.from_numpy(flat % n).to(device)
    s, t = scores[rr, cc], target.view(-1)[rr]
    above -= torch.zeros_like(above).index_add_(0, rr, (~(s <= t)).to(above.dtype))
    tied -= torch.zeros_like(tied).index_add_(0, rr, (s == t).to(tied.dtype))
    left = n - torch.bincount(rr, minlength=len(true))
    ranks = 1.0 + above.double() + tied.double() / 2
    return torch.where(torch.isnan(target.view(-1)), 1.0 + left.double(), ranks)


@dataclass
class RankSums:
    """Sums over ranked queries (both sides), summable across trainers."""

    rr: float = 0.0
    hits1: float = 0.0
    hits3: float = 0.0
    hits10: float = 0.0
    count: float = 0.0

    def add(self, ranks: torch.Tensor) -> None:
        self.rr += float((1.0 / ranks).sum())
        self.hits1 += float((ranks <= 1).sum())
        self.hits3 += float((ranks <= 3).sum())
        self.hits10 += float((ranks <= 10).sum())
        self.count += len(ranks)

    def as_list(self) -> list[float]:
        return [self.rr, self.hits1, self.hits3, self.hits10, self.count]

    @staticmethod
    def metrics(values: list[float]) -> dict[str, float]:
        rr, h1, h3, h10, n = values
        n = max(n, 1.0)
        return {"mrr": rr / n, "hits@1": h1 / n, "hits@3": h3 / n, "hits@10": h10 / n}
