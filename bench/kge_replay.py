"""PyKEEN's KGE steps replayed with graphtrain's math: where the two trainings part, if anywhere.

PyKEEN 1.11 trains TransE, DistMult or ComplEx on a dataset by hand in float64 (bench/pykeen_replay.py,
in bench/e2e.py's PyKEEN venv; its sLCWA loop's order of batches), recording its initial rows, batches,
negatives and losses. graphtrain's score (the model's KGEEntry, runtime/models/), loss
(train/kge_math.py) and sparse Adam (optim/reference.py, the oracle the native cores match) with the
model's entity constraint (functional.project_rows' formula, in float64 here: project_rows rescales in
float32, its tables' width, which a TransE L1 score's signs turn into another trajectory after ~36
steps) then replay the same batches from the same rows, twice: stepping the rows a batch touched
(optimizer.rows: touched, sparse optimizers' lazy step) and every row (optimizer.rows: all,
torch.optim.Adam's dense step, which bench/e2e.py's KGE pairs use). It prints each mode's largest
difference from PyKEEN in the rows after the first steps and in the losses.

optim/reference.py rounds Adam's per-step coefficients (lr / bc1, 1 / sqrt(bc2)) to float32, as the
native cores compute them; torch.optim.Adam in PyKEEN's float64 run keeps them in float64. The 1e-10
relative difference per step is invisible for DistMult and ComplEx, but a TransE L1 score's signs turn
it into another trajectory after ~50 steps: --coefficients float64 takes it away (Kinships TransE then
replays all 3,400 steps to the same test MRR).

With --epochs N both sides train N whole epochs; the table then adds the largest row difference at the
end and the filtered test MRR three ways: PyKEEN's evaluator on its model, graphtrain's ranking code
(kge_math.filtered_ranks, the trainer's) on PyKEEN's final rows, and graphtrain's ranking on the
replay's rows. Equal MRRs there say that, given the same draws, the two trainings and evaluations give
the same score: a gap between bench/e2e.py's means is then the draws' (seed noise), not the method's.

    python bench/kge_replay.py [--model transe|distmult|complex] [--dataset kinships] [--seed 0]
                               [--steps 100 | --epochs 100] [--coefficients float32|float64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import PYKEEN, ROOT, table, venv  # noqa: E402

from graphtrain.contract.spec import ComplExModel, DistMultModel, KGEModel, TransEModel  # noqa: E402
from graphtrain.runtime.models import kge_entry  # noqa: E402
from graphtrain.runtime.optim import OptimConfig, make_state, reference  # noqa: E402
from graphtrain.runtime.train import kge_math  # noqa: E402

MODELS: dict[str, KGEModel] = {
    "transe": TransEModel(entity_embedding="e", relation_embedding="r", norm=1),
    "distmult": DistMultModel(entity_embedding="e", relation_embedding="r"),
    "complex": ComplExModel(entity_embedding="e", relation_embedding="r"),
}


def replay(
    d: dict[str, np.ndarray], kind: str, every_row: bool, lr: float
) -> tuple[list[float], list[tuple[float, float]], torch.Tensor, torch.Tensor]:
    """graphtrain's steps over PyKEEN's batches: each step's loss, the largest row differences from
    PyKEEN's after the first steps (entities, relations), and the final tables."""
    model, entry = MODELS[kind], kge_entry(kind)
    ent, rel = torch.tensor(d["E0"]), torch.tensor(d["R0"])
    config = OptimConfig(kind="adam", lr=lr, eps=1e-8)
    state = {
        name: {k: v.double() if v.is_floating_point() else v for k, v in make_state(config, *t.shape).items()}
        for name, t in (("ent", ent), ("rel", rel))
    }
    ends = np.cumsum(d["batch_len"])
    losses, diffs = [], []
    for step, (lo, hi) in enumerate(zip(ends - d["batch_len"], ends, strict=True)):
        pos, neg = torch.tensor(d["batches"][lo:hi]), torch.tensor(d["negs"][lo:hi])
        b, k = neg.shape[0], neg.shape[1]
        ents = torch.cat([pos[:, [0, 2]].reshape(-1), kge_math.replaced(neg).reshape(-1)])
        rows, r = ent[ents].clone().requires_grad_(), rel[pos[:, 1]].clone().requires_grad_()
        pe, ne = rows.split([2 * b, b * k])
        h, t = pe.view(b, 2, -1).unbind(1)
        score = lambda x, y, z: entry.score(x, y, z, model)  # noqa: E731
        loss = kge_math.loss(
            "crossentropy", score(h, r, t), kge_math.sided_scores(score, (h, r, t), ne.view(b, k, -1))
        )
        loss.backward()
        for tab, name, ids, grad in ((ent, "ent", ents, rows.grad), (rel, "rel", pos[:, 1], r.grad)):
            if every_row:  # the whole table, zeros where the batch had no gradient
                grad = torch.zeros_like(tab).index_add_(0, ids, grad)
                ids = torch.arange(len(tab))
            reference.step(config, tab, state[name], ids, grad)
        if entry.unit_rows:  # project_rows' formula in float64 (it rescales in float32, its tables' width)
            done = torch.unique(torch.arange(len(ent)) if every_row else ents)
            ent[done] = ent[done] * (1.0 / ent[done].norm(dim=1, keepdim=True).clamp_min(1e-12))
        losses.append(loss.item())
        if f"E{step + 1}" in d:
            diffs.append(
                (
                    float((ent - torch.tensor(d[f"E{step + 1}"])).abs().max()),
                    float((rel - torch.tensor(d[f"R{step + 1}"])).abs().max()),
                )
            )
    return losses, diffs, ent, rel


@torch.no_grad()
def test_mrr(d: dict[str, np.ndarray], kind: str, ent: torch.Tensor, rel: torch.Tensor) -> float:
    """The filtered test MRR by the trainer's ranking code (KGETask.evaluate's, every test triple, both
    sides, filtered by train, valid and test)."""
    model, entry = MODELS[kind], kge_entry(kind)
    known = np.concatenate([d["train"], d["valid"], d["test"]])
    index = kge_math.FilterIndex(known, len(ent), len(rel))
    sums, test = kge_math.RankSums(), d["test"]
    h_ids, r_ids, t_ids = (torch.from_numpy(test[:, j]) for j in range(3))
    scores = entry.tails(ent[h_ids], rel[r_ids], ent, model)
    sums.add(kge_math.filtered_ranks(scores, t_ids, *index.known("tail", test[:, 0], test[:, 1])))
    scores = entry.heads(rel[r_ids], ent[t_ids], ent, model)
    sums.add(kge_math.filtered_ranks(scores, h_ids, *index.known("head", test[:, 2], test[:, 1])))
    return kge_math.RankSums.metrics(sums.as_list())["mrr"]


def exact_coefficients(config: OptimConfig, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """optim/reference.py's Adam coefficients kept in float64 (the reference rounds them to float32,
    as the native cores compute them): torch.optim.Adam's, in PyKEEN's float64 run."""
    bc1 = 1.0 - torch.pow(torch.tensor(config.beta1, dtype=torch.float64), t.double())
    inv_sqrt_bc2 = 1.0 / torch.sqrt(
        1.0 - torch.pow(torch.tensor(config.beta2, dtype=torch.float64), t.double())
    )
    eps = config.eps * inv_sqrt_bc2 if config.step_count == "global" else torch.full_like(bc1, config.eps)
    return config.lr / bc1, inv_sqrt_bc2, eps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="transe", choices=sorted(MODELS))
    ap.add_argument("--dataset", default="kinships")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=0, help="whole epochs (then the test MRR three ways)")
    ap.add_argument(
        "--coefficients",
        default="float32",
        choices=["float32", "float64"],
        help="Adam's per-step coefficients as the reference rounds them (float32) or in float64",
    )
    a = ap.parse_args()
    if a.coefficients == "float64":
        reference.adam_coefficients = exact_coefficients  # type: ignore[assignment]
    lr = 0.005
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pykeen.npz"
        argv = [str(venv("pykeen", PYKEEN)), str(ROOT / "bench" / "pykeen_replay.py")]
        argv += ["--dataset", a.dataset, "--model", a.model, "--seed", str(a.seed), "--out", str(out)]
        argv += ["--steps", str(a.steps), "--epochs", str(a.epochs)]
        subprocess.run(argv, check=True, cwd=tmp, capture_output=True)
        d = dict(np.load(out))
    ends = np.cumsum(d["batch_len"])
    present = [
        len(np.unique(d["batches"][lo:hi, 1])) for lo, hi in zip(ends - d["batch_len"], ends, strict=True)
    ]
    print(
        f"# {a.model} on {a.dataset}, seed {a.seed}, {len(ends)} steps: {len(d['R0'])} relations, "
        f"{min(present)}-{max(present)} in a batch"
    )
    rows = []
    for every_row in (False, True):
        losses, diffs, ent, rel = replay(d, a.model, every_row, lr)
        gap = np.abs(np.array(losses) - d["losses"])
        row = ["all" if every_row else "touched"]
        row += [f"{e:.1e} / {r:.1e}" for e, r in diffs]
        row += [f"{gap[:50].max():.1e}", f"{gap.max():.1e}"]
        if a.epochs:
            end = (ent - torch.tensor(d["E_end"])).abs().max(), (rel - torch.tensor(d["R_end"])).abs().max()
            row += [f"{float(end[0]):.1e} / {float(end[1]):.1e}", f"{test_mrr(d, a.model, ent, rel):.6f}"]
        rows.append(row)
    head = ["optimizer.rows"] + [f"rows after step {i + 1} (ent / rel)" for i in range(len(diffs))]
    head += ["loss, steps 1-50", f"loss, steps 1-{len(ends)}"]
    if a.epochs:
        head += ["rows at the end (ent / rel)", "test MRR, graphtrain's ranking of the replay"]
    print(table(head, rows))
    if a.epochs:
        theirs = test_mrr(d, a.model, torch.tensor(d["E_end"]), torch.tensor(d["R_end"]))
        print(
            f"test MRR of PyKEEN's trained rows: PyKEEN's evaluator {float(d['pykeen_mrr']):.6f}, "
            f"graphtrain's ranking {theirs:.6f}"
        )


if __name__ == "__main__":
    main()
