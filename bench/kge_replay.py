"""PyKEEN's TransE steps replayed with graphtrain's math: where the two optimizers part.

PyKEEN 1.11 trains TransE on a dataset by hand for --steps steps in float64 (bench/pykeen_replay.py, in
bench/e2e.py's PyKEEN venv), recording its initial rows, batches, negatives and losses. graphtrain's
score (models/transe.py), loss (train/kge_math.py) and sparse Adam (optim/reference.py, the oracle the
native cores match) with the entity constraint then replay the same batches from the same rows, twice:
stepping the rows a batch touched (optimizer.rows: touched, sparse optimizers' lazy step) and every row
(optimizer.rows: all, torch.optim.Adam's dense step). It prints each mode's largest difference from
PyKEEN in the rows after the first steps and in the losses of the first 50.

    python bench/kge_replay.py [--dataset kinships] [--seed 0] [--steps 100]
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

from graphtrain.contract.spec import TransEModel  # noqa: E402
from graphtrain.runtime.models import transe  # noqa: E402
from graphtrain.runtime.optim import OptimConfig, make_state, reference  # noqa: E402
from graphtrain.runtime.optim.functional import project_rows  # noqa: E402
from graphtrain.runtime.train import kge_math  # noqa: E402


def replay(d: dict[str, np.ndarray], every_row: bool, lr: float) -> tuple[list[float], list[tuple]]:
    """graphtrain's steps over PyKEEN's batches: each step's loss, and the largest row differences from
    PyKEEN's after the first steps (entities, relations)."""
    ent, rel = torch.tensor(d["E0"]), torch.tensor(d["R0"])
    config = OptimConfig(kind="adam", lr=lr, eps=1e-8)
    state = {
        name: {k: v.double() if v.is_floating_point() else v for k, v in make_state(config, *t.shape).items()}
        for name, t in (("ent", ent), ("rel", rel))
    }
    model = TransEModel(entity_embedding="e", relation_embedding="r", norm=1)
    losses, diffs = [], []
    for step in range(len(d["losses"])):
        pos, neg = torch.tensor(d["batches"][step]), torch.tensor(d["negs"][step])
        b, k = neg.shape[0], neg.shape[1]
        ents = torch.cat([pos[:, [0, 2]].reshape(-1), neg[..., [0, 2]].reshape(-1)])
        rows, r = ent[ents].clone().requires_grad_(), rel[pos[:, 1]].clone().requires_grad_()
        pe, ne = rows[: 2 * b].view(b, 2, -1), rows[2 * b :].view(b, k, 2, -1)
        loss = kge_math.loss(
            "crossentropy",
            transe.score(pe[:, 0], r, pe[:, 1], model),
            transe.score(ne[:, :, 0], r.unsqueeze(1), ne[:, :, 1], model),
        )
        loss.backward()
        for t, name, ids, grad in ((ent, "ent", ents, rows.grad), (rel, "rel", pos[:, 1], r.grad)):
            if every_row:  # the whole table, zeros where the batch had no gradient
                grad = torch.zeros_like(t).index_add_(0, ids, grad)
                ids = torch.arange(len(t))
            reference.step(config, t, state[name], ids, grad)
        project_rows(ent, torch.arange(len(ent)) if every_row else ents, 1.0)
        losses.append(loss.item())
        if f"E{step + 1}" in d:
            diffs.append(
                (
                    float((ent - torch.tensor(d[f"E{step + 1}"])).abs().max()),
                    float((rel - torch.tensor(d[f"R{step + 1}"])).abs().max()),
                )
            )
    return losses, diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="kinships")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    lr = 0.005
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pykeen.npz"
        argv = [str(venv("pykeen", PYKEEN)), str(ROOT / "bench" / "pykeen_replay.py")]
        argv += ["--dataset", a.dataset, "--seed", str(a.seed), "--steps", str(a.steps), "--out", str(out)]
        subprocess.run(argv, check=True, cwd=tmp, capture_output=True)
        d = dict(np.load(out))
    present = [len(np.unique(batch[:, 1])) for batch in d["batches"]]
    print(f"# {a.dataset}, seed {a.seed}: {len(d['R0'])} relations, {min(present)}-{max(present)} in a batch")
    rows = []
    for every_row in (False, True):
        losses, diffs = replay(d, every_row, lr)
        gap = np.abs(np.array(losses) - d["losses"])
        row = ["all" if every_row else "touched"]
        row += [f"{e:.1e} / {r:.1e}" for e, r in diffs]
        row += [f"{gap[:50].max():.1e}", f"{gap.max():.1e}"]
        rows.append(row)
    head = ["optimizer.rows"] + [f"rows after step {i + 1} (ent / rel)" for i in range(len(diffs))]
    print(table([*head, "loss, steps 1-50", f"loss, steps 1-{a.steps}"], rows))


if __name__ == "__main__":
    main()
