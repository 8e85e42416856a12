"""Numerical parity of graphtrain's GNN layers with DGL 2.1's: forward outputs, the input's gradient and
every weight's gradient, on small random blocks.

One command, from graphtrain's venv; DGL (2.1, torch 2.2) lives in another venv, so this same file is
run there by its interpreter (--dgl-side) and the two exchange plain .npz files (no pickle):

  1. here: each case's random blocks (seeded; destinations of in-degree 0, 1 and many, self loops,
     repeated edges, several sizes), inputs, weights and an upstream gradient, saved as <case>.npz; then
     graphtrain's layer forward and backward on them, for each block form (the loader's, with its mean
     matrices and source order; a bare one, edges only) and each CPU backend (the native core's kernels;
     the torch reference, layers.native_cpu patched off);
  2. DGL's interpreter: dgl.create_block over the same edges, DGL's layer with the same weights,
     forward and backward with the same upstream gradient, saved as <case>.dgl.npz;
  3. here: max abs and relative difference (max |a - b| / max |b|) of the output and each gradient.

Layers and what DGL runs against them:
  sage  graphsage.SAGEConv           dgl.nn.SAGEConv('mean'); frozen columns: the leading input columns of
                                     one weight (their inputs take no gradient in graphtrain)
  gat   gat.GATConv                  dgl.nn.GATConv(residual=True, allow_zero_in_degree=True, bias=True);
                                     graphtrain's bias is DGL's res_fc.bias (a linear residual) or its bias
                                     (in == heads x width: DGL's residual is then the identity, which
                                     graphtrain's res weight is set to)
  rgcn  relational.RelGraphConv      dgl.nn.RelGraphConv(regularizer basis/None, self_loop), norm per edge
                                     = the edge's share of its (destination, relation) pair (1/count, or
                                     w_e / sum w over the pair with edge weights)
  rgat  rgat.RGATConv                HeteroGraphConv({rel: GATConv(bias=False, residual=False)}, 'sum') +
                                     h_dst @ loop + bias (GraphStorm's RelationalAttLayer)

Each quantity is also checked against DGL run in float64 (DGL's float32 run beside it): a case fails when
graphtrain's relative error from that reference exceeds --tol (1e-5) and is more than 10x DGL float32's
own error of the same quantity. The second clause keeps quantities that cancel to ~0 from failing on
rounding noise: GAT's attn_r gradient is exactly 0 at a destination whose scores all lie on one side of
the LeakyReLU (a shift of every score of a destination leaves its softmax unchanged), so its relative
difference from DGL float32 can read 1e+0 while both sides are 1e-6 from float64. Exits 1 naming every
failing case.

    python bench/parity_dgl.py [--dgl-python PATH] [--out DIR] [--tol 1e-5] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

DGL_PYTHON = os.environ.get("DGL_PYTHON", "/work/main/bench/.venvs/dgl/bin/python")

# (num_dst, num_src, max in-degree): destinations of in-degree 0, 1 and up to the max (the last: hubs)
GRAPHS = [(5, 9, 4), (12, 30, 7), (40, 120, 12), (30, 200, 60)]


def case(name: str, layer: str, din: int, **kw: object) -> dict:
    return {"name": name, "layer": layer, "in": din, **kw}


CASES: list[dict] = [
    case("sage in6-out4", "sage", 6, out=4),
    case("sage in3-out9", "sage", 3, out=9),
    case("sage in12-out2 (transform first)", "sage", 12, out=2),
    case("sage in12-out2 frozen4", "sage", 12, out=2, frozen=4),
    case("sage in8-out5 frozen3", "sage", 8, out=5, frozen=3),
    case("sage in4-out12 frozen1", "sage", 4, out=12, frozen=1),
    case("gat h2x3 in7 slope.2", "gat", 7, width=3, heads=2, slope=0.2),
    case("gat h1x4 in5 slope.1", "gat", 5, width=4, heads=1, slope=0.1),
    case("gat h3x2 in7 frozen2", "gat", 7, width=2, heads=3, slope=0.2, frozen=2),
    case("gat h2x3 in6 identity-res", "gat", 6, width=3, heads=2, slope=0.2),
    case("gat h2x3 in5 large scores", "gat", 5, width=3, heads=2, slope=0.2, scale=8.0),
    case("rgcn r3 full loop", "rgcn", 6, out=4, rels=3, bases=None, loop=True),
    case("rgcn r3 bases2 loop", "rgcn", 6, out=4, rels=3, bases=2, loop=True),
    case("rgcn r3 bases2 noloop", "rgcn", 5, out=7, rels=3, bases=2, loop=False),
    case("rgcn r4 full frozen2", "rgcn", 6, out=4, rels=4, bases=None, loop=True, frozen=2),
    case("rgcn r3 bases2 edgeweight", "rgcn", 6, out=4, rels=3, bases=2, loop=True, ew=True),
    case("rgcn r1 edgeweight (sage)", "rgcn", 6, out=4, rels=1, bases=None, loop=True, ew=True),
    case("rgat r3 h2x3 in6", "rgat", 6, width=3, heads=2, rels=3, slope=0.2),
    case("rgat r2 h1x4 in5 slope.1", "rgat", 5, width=4, heads=1, rels=2, slope=0.1),
    case("rgat r3 h2x2 in4 large scores", "rgat", 4, width=2, heads=2, rels=3, slope=0.2, scale=6.0),
]


def slug(case: dict, g: int) -> str:
    return case["name"].replace(" ", "_").replace(".", "p").replace("(", "").replace(")", "") + f"_g{g}"


# ------------------------------------------------------------------------------------------------------
# the data: random blocks, inputs, weights (graphtrain's parameter names and layouts), upstream gradient


def make_graph(rng: np.random.Generator, num_dst: int, num_src: int, max_deg: int, rels: int) -> dict:
    """Edges grouped by destination (as sampling lists them): destination 0 has none, 1 one, 2 a self loop
    and a repeated edge, the rest 0..max_deg random in-edges (with repeats and self loops as drawn)."""
    src, dst = [], []
    for v in range(num_dst):
        if v == 0:
            us = []
        elif v == 1:
            us = [int(rng.integers(num_src))]
        elif v == 2:
            u = int(rng.integers(num_src))
            us = [v, u, u, int(rng.integers(num_src))]
        else:
            us = list(rng.integers(0, num_src, int(rng.integers(0, max_deg + 1))))
            if us and rng.random() < 0.3:
                us.append(v)  # self loop
            if us and rng.random() < 0.3:
                us.append(us[0])  # repeated edge
        src += us
        dst += [v] * len(us)
    e = len(src)
    etype = rng.integers(0, rels, e)
    if e > 3:  # a repeated edge of the same type, so a (destination, relation) pair holds it twice
        etype[dst.index(2) + 2] = etype[dst.index(2) + 1]
    return {
        "src": np.asarray(src, np.int64),
        "dst": np.asarray(dst, np.int64),
        "etype": etype.astype(np.int64),
        "num_src": np.int64(num_src),
        "num_dst": np.int64(num_dst),
    }


def make_params(case: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5 * case.get("scale", 1.0)).astype(np.float32)

    k, f = case["layer"], case.get("frozen", 0)
    if k == "sage":
        i, o = case["in"], case["out"]
        p = {"w_self": r(o, i - f), "w_neigh": r(o, i - f), "bias": r(o)}
        if f:
            p |= {"w_self_frozen": r(o, f), "w_neigh_frozen": r(o, f)}
        return p
    if k == "gat":
        i, w, h = case["in"], case["width"], case["heads"]
        p = {"fc.weight": r(h * w, i), "attn_l": r(1, h, w), "attn_r": r(1, h, w), "bias": r(h * w)}
        p["res.weight"] = np.eye(i, dtype=np.float32) if i == h * w else r(h * w, i)
        return p
    if k == "rgcn":
        i, o, n, b = case["in"], case["out"], case["rels"], case["bases"]
        p = {"weight": r(b or n, i, o), "bias": r(o)}
        if b:
            p["coeff"] = r(n, b)
        if case["loop"]:
            p["loop"] = r(i, o)
        return p
    if k == "rgat":
        i, w, h, n = case["in"], case["width"], case["heads"], case["rels"]
        return {
            "weight": r(n, i, h * w),
            "attn_l": r(n, h, w),
            "attn_r": r(n, h, w),
            "res.weight": r(h * w, i),
            "bias": r(h * w),
        }
    raise ValueError(k)


def out_shape(case: dict, num_dst: int) -> tuple[int, ...]:
    if case["layer"] in ("gat", "rgat"):
        return (num_dst, case["heads"], case["width"])
    return (num_dst, case["out"])


def make_case(case: dict, g: int, seed: int, path: Path) -> None:
    rng = np.random.default_rng([seed, CASES.index(case), g])
    nd, ns, md = GRAPHS[g]
    graph = make_graph(rng, nd, ns, md, case.get("rels", 1))
    f = case.get("frozen", 0)
    arrays = dict(graph)
    arrays["h"] = rng.standard_normal((ns, case["in"] - f)).astype(np.float32)
    if f:
        arrays["frozen"] = rng.standard_normal((ns, f)).astype(np.float32)
    if case.get("ew"):
        w = rng.random(len(graph["src"])).astype(np.float32)
        w[rng.random(len(w)) < 0.2] = 0.0  # some zero weights (a pair may weigh nothing)
        arrays["edge_weight"] = w
    arrays["upstream"] = rng.standard_normal(out_shape(case, nd)).astype(np.float32)
    for name, v in make_params(case, rng).items():
        arrays["p." + name] = v
    np.savez(path, **arrays)


# ------------------------------------------------------------------------------------------------------
# graphtrain's side


def graphtrain_run(case: dict, data: dict[str, np.ndarray], form: str, backend: str) -> dict[str, np.ndarray]:
    import torch

    from graphtrain.runtime.graph.loader import Block, mean_matrices
    from graphtrain.runtime.models import layers, thin
    from graphtrain.runtime.models.gat import GATConv
    from graphtrain.runtime.models.graphsage import SAGEConv
    from graphtrain.runtime.models.relational import RelGraphConv
    from graphtrain.runtime.models.rgat import RGATConv

    src, dst = torch.from_numpy(data["src"]), torch.from_numpy(data["dst"])
    ns, nd = int(data["num_src"]), int(data["num_dst"])
    etype = torch.from_numpy(data["etype"])
    if form == "loader":
        counts = np.bincount(data["dst"], minlength=nd)
        mean, mean_t, order = mean_matrices(counts, data["src"], ns)
        block = Block(ns, nd, src, dst, mean, mean_t, etype, None, None, order)
    else:
        block = Block(ns, nd, src, dst, etype=etype)
    k, f = case["layer"], case.get("frozen", 0)
    if k == "sage":
        layer = SAGEConv(case["in"], case["out"], f)
    elif k == "gat":
        layer = GATConv(case["in"], case["width"], case["heads"], case["slope"])
    elif k == "rgcn":
        layer = RelGraphConv(case["in"], case["out"], case["rels"], case["bases"], case["loop"], f)
    else:
        layer = RGATConv(case["in"], case["width"], case["heads"], case["rels"], case["slope"])
    layer.eval()
    params = dict(layer.named_parameters())
    want = {n[2:] for n in data if n.startswith("p.")}
    if set(params) != want:
        raise RuntimeError(f"{case['name']}: parameters {sorted(params)} != {sorted(want)}")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(torch.from_numpy(data["p." + n]))
    h = torch.from_numpy(data["h"]).requires_grad_()
    frozen = torch.from_numpy(data["frozen"]) if "frozen" in data else None
    saved = layers.native_cpu, thin.native_cpu
    if backend == "torch":
        layers.native_cpu = thin.native_cpu = lambda *t: False
    try:
        if k == "rgcn":
            ew = torch.from_numpy(data["edge_weight"]) if "edge_weight" in data else None
            out = layer(block, h, frozen, ew)
        elif k == "rgat":
            out = layer(block, h)
        else:
            out = layer(block, h, frozen)
        out.backward(torch.from_numpy(data["upstream"]))
    finally:
        layers.native_cpu, thin.native_cpu = saved
    res = {"out": out.detach().numpy(), "grad.h": h.grad.numpy()}
    for n, p in params.items():
        res["grad.p." + n] = (p.grad if p.grad is not None else torch.zeros_like(p)).numpy()
    return res


# ------------------------------------------------------------------------------------------------------
# DGL's side (run by the DGL venv's interpreter: imports nothing of graphtrain)


def dgl_run(case: dict, data: dict[str, np.ndarray], dtype: str = "float32") -> dict[str, np.ndarray]:
    import dgl
    import torch
    from dgl.nn import GATConv, HeteroGraphConv, RelGraphConv, SAGEConv

    torch.set_num_threads(1)
    data = {n: v.astype(dtype) if v.dtype == np.float32 else v for n, v in data.items()}
    torch.set_default_dtype(getattr(torch, dtype))  # the layers' parameters are made in it
    src, dst, et = (torch.from_numpy(data[n]) for n in ("src", "dst", "etype"))
    ns, nd = int(data["num_src"]), int(data["num_dst"])
    P = {n[2:]: torch.from_numpy(data[n]) for n in data if n.startswith("p.")}
    k, f = case["layer"], case.get("frozen", 0)
    h = torch.from_numpy(data["h"]).requires_grad_()
    feat = torch.cat([torch.from_numpy(data["frozen"]), h], 1) if f else h
    up = torch.from_numpy(data["upstream"])
    block = dgl.create_block((src, dst), num_src_nodes=ns, num_dst_nodes=nd)
    grads: dict[str, callable] = {}  # graphtrain's parameter name -> its gradient from DGL's

    def set_(p: torch.nn.Parameter, v: torch.Tensor) -> None:
        with torch.no_grad():
            p.copy_(v)

    if k == "sage":
        m = SAGEConv(case["in"], case["out"], "mean")
        for side in ("self", "neigh"):
            fc = getattr(m, f"fc_{side}")
            w = torch.cat([P[f"w_{side}_frozen"], P[f"w_{side}"]], 1) if f else P[f"w_{side}"]
            set_(fc.weight, w)
            grads[f"w_{side}"] = lambda fc=fc: fc.weight.grad[:, f:]
            if f:
                grads[f"w_{side}_frozen"] = lambda fc=fc: fc.weight.grad[:, :f]
        set_(m.fc_self.bias, P["bias"])  # DGL 2.1 keeps the mean aggregator's bias in fc_self
        grads["bias"] = lambda: m.fc_self.bias.grad
        out = m(block, feat)
    elif k == "gat":
        m = GATConv(
            case["in"], case["width"], case["heads"], negative_slope=case["slope"], residual=True,
            allow_zero_in_degree=True, bias=True,
        )  # fmt: skip
        set_(m.fc.weight, P["fc.weight"])
        set_(m.attn_l, P["attn_l"])
        set_(m.attn_r, P["attn_r"])
        grads |= {"fc.weight": lambda: m.fc.weight.grad, "attn_l": lambda: m.attn_l.grad}
        grads["attn_r"] = lambda: m.attn_r.grad
        if m.has_linear_res:
            set_(m.res_fc.weight, P["res.weight"])
            set_(m.res_fc.bias, P["bias"])
            grads["res.weight"] = lambda: m.res_fc.weight.grad
            grads["bias"] = lambda: m.res_fc.bias.grad
        else:  # DGL's identity residual: graphtrain's res weight is the identity here, its gradient not DGL's
            set_(m.bias, P["bias"])
            grads["bias"] = lambda: m.bias.grad
        out = m(block, feat)
    elif k == "rgcn":
        n, b = case["rels"], case["bases"]
        m = RelGraphConv(
            case["in"], case["out"], n, regularizer="basis" if b else None, num_bases=b,
            self_loop=case["loop"],
        )  # fmt: skip
        set_(m.linear_r.W, P["weight"])
        grads["weight"] = lambda: m.linear_r.W.grad
        if b:
            set_(m.linear_r.coeff, P["coeff"])
            grads["coeff"] = lambda: m.linear_r.coeff.grad
        if case["loop"]:
            set_(m.loop_weight, P["loop"])
            grads["loop"] = lambda: m.loop_weight.grad
        set_(m.h_bias, P["bias"])
        grads["bias"] = lambda: m.h_bias.grad
        # the norm per edge: its share of its (destination, relation) pair
        key = et * nd + dst
        _, inv = torch.unique(key, return_inverse=True)
        w = torch.from_numpy(data["edge_weight"]) if "edge_weight" in data else torch.ones(len(src))
        total = torch.zeros(int(inv.max()) + 1 if len(inv) else 0, dtype=w.dtype).index_add_(0, inv, w)
        norm = (w / total.clamp_min(1e-12)[inv]).unsqueeze(1)
        out = m(block, feat, et, norm)
    elif k == "rgat":
        n, hd, wd = case["rels"], case["heads"], case["width"]
        rels = [str(r) for r in range(n)]
        g = dgl.create_block(
            {("_N", r, "_N"): (src[et == i], dst[et == i]) for i, r in enumerate(rels)},
            num_src_nodes={"_N": ns},
            num_dst_nodes={"_N": nd},
        )
        conv = HeteroGraphConv(
            {
                r: GATConv(
                    case["in"],
                    wd,
                    hd,
                    negative_slope=case["slope"],
                    residual=False,
                    allow_zero_in_degree=True,
                    bias=False,
                )  # fmt: skip
                for r in rels
            },
            aggregate="sum",
        )
        for i, r in enumerate(rels):
            c = conv.mods[r]
            set_(c.fc.weight, P["weight"][i].t())
            set_(c.attn_l, P["attn_l"][i : i + 1])
            set_(c.attn_r, P["attn_r"][i : i + 1])
        loop = torch.nn.Parameter(P["res.weight"].t().clone())
        bias = torch.nn.Parameter(P["bias"].clone())

        def stack(get: callable) -> torch.Tensor:
            """Each relation's gradient (zeros where HeteroGraphConv skipped a relation without edges)."""
            out = []
            for r in rels:
                p = get(conv.mods[r])
                out.append(p.grad if p.grad is not None else torch.zeros_like(p))
            return torch.stack(out)

        grads["weight"] = lambda: stack(lambda c: c.fc.weight).transpose(1, 2)
        grads["attn_l"] = lambda: stack(lambda c: c.attn_l)[:, 0]
        grads["attn_r"] = lambda: stack(lambda c: c.attn_r)[:, 0]
        grads["res.weight"] = lambda: loop.grad.t()
        grads["bias"] = lambda: bias.grad
        hs = conv(g, {"_N": feat})
        out = hs["_N"] if "_N" in hs else torch.zeros(nd, hd, wd)
        out = out + (feat[:nd] @ loop).view(nd, hd, wd) + bias.view(1, hd, wd)
    else:
        raise ValueError(k)
    out.backward(up)
    res = {"out": out.detach().numpy(), "grad.h": h.grad.numpy()}
    for name, get in grads.items():
        res["grad.p." + name] = get().detach().numpy()
    return res


def dgl_side(work: Path) -> None:
    manifest = json.loads((work / "manifest.json").read_text())
    for item in manifest:
        case = item["case"]
        with np.load(work / item["file"], allow_pickle=False) as z:
            data = dict(z)
        for dtype in ("float32", "float64"):  # float64: the reference each side's rounding is measured from
            res = dgl_run(case, data, dtype)
            np.savez(work / item["file"].replace(".npz", f".dgl_{dtype}.npz"), **res)


# ------------------------------------------------------------------------------------------------------
# comparison


def maxabs(a: np.ndarray) -> float:
    return float(np.abs(a).max()) if a.size else 0.0


def compare(
    ours: dict[str, np.ndarray], ref32: dict[str, np.ndarray], ref64: dict[str, np.ndarray], tol: float
) -> dict[str, list[float]]:
    """Per quantity DGL gives: [max abs and relative difference from DGL's float32 run, graphtrain's
    relative and abs error from DGL's float64 run, DGL float32's abs error from it, 0/1 over tolerance].
    Relative: max |a - b| / max |b|. A quantity that cancels to ~0 (GAT's attn_r gradient where every
    score of a destination lies on one side of the LeakyReLU: its gradient is then exactly 0) has a
    relative difference of rounding noise over nothing, so the verdict is graphtrain's error from float64
    within `tol` relative, or within 10x DGL's own float32 error of the same quantity."""
    diffs = {}
    for name, b64 in ref64.items():
        a, b32 = ours[name].astype(np.float64), ref32[name].astype(np.float64)
        if a.shape != b64.shape:
            diffs[name] = [float("inf")] * 5 + [1.0]
            continue
        d32, d64, dgl64 = maxabs(a - b32), maxabs(a - b64), maxabs(b32 - b64)
        s32, s64 = maxabs(b32), maxabs(b64)
        r32 = d32 / s32 if s32 > 0 else (0.0 if d32 == 0 else float("inf"))
        r64 = d64 / s64 if s64 > 0 else (0.0 if d64 == 0 else float("inf"))
        bad = r64 > tol and d64 > 10 * dgl64 + 1e-30
        diffs[name] = [d32, r32, r64, d64, dgl64, float(bad)]
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dgl-python", default=DGL_PYTHON, help="DGL 2.1's interpreter (env DGL_PYTHON)")
    ap.add_argument(
        "--out", type=Path, help="keep the .npz files and results.json here (default: a temp dir)"
    )
    ap.add_argument("--tol", type=float, default=1e-5, help="largest relative difference allowed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on both sides")
    ap.add_argument("--dgl-side", type=Path, help=argparse.SUPPRESS)  # internal: run DGL's side in DIR
    a = ap.parse_args()
    if a.dgl_side is not None:
        dgl_side(a.dgl_side)
        return

    if not Path(a.dgl_python).exists():
        raise SystemExit(f"no DGL interpreter at {a.dgl_python} (--dgl-python, or env DGL_PYTHON)")
    import torch

    torch.set_num_threads(a.threads)
    tmp = None
    if a.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="parity_dgl_")
        work = Path(tmp.name)
    else:
        work = a.out
        work.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if a.only in c["name"]]
    manifest = []
    for case in cases:
        for g in range(len(GRAPHS)):
            file = slug(case, g) + ".npz"
            make_case(case, g, a.seed, work / file)
            manifest.append({"case": case, "graph": g, "file": file})
    (work / "manifest.json").write_text(json.dumps(manifest))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), PYTHONPATH="")
    proc = subprocess.run(
        [a.dgl_python, os.path.abspath(__file__), "--dgl-side", str(work)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"DGL's side failed ({a.dgl_python})")

    rows: dict[str, dict[str, list[float]]] = {}  # case -> quantity -> compare's list, max over runs
    for item in manifest:
        data = dict(np.load(work / item["file"], allow_pickle=False))
        ref32, ref64 = (
            dict(np.load(work / item["file"].replace(".npz", f".dgl_{t}.npz"), allow_pickle=False))
            for t in ("float32", "float64")
        )
        for form in ("loader", "bare"):
            for backend in ("native", "torch"):
                ours = graphtrain_run(item["case"], data, form, backend)
                for q, vals in compare(ours, ref32, ref64, a.tol).items():
                    cur = rows.setdefault(item["case"]["name"], {}).setdefault(q, [0.0] * 6)
                    cur[:] = [max(x, y) for x, y in zip(cur, vals, strict=True)]
    failed = []
    width = max(len(c) for c in rows)
    print(
        f"{'case':<{width}}  {'quantity':<22} {'abs vs dgl':>10} {'rel vs dgl':>10} "
        f"{'rel f64':>10} {'abs f64':>10} {'dgl abs f64':>11}"
    )
    for name, qs in rows.items():
        for q, (d, r, r64, d64, dgl64, bad) in qs.items():
            flag = "  FAIL" if bad else ""
            print(f"{name:<{width}}  {q:<22} {d:10.3e} {r:10.3e} {r64:10.3e} {d64:10.3e} {dgl64:11.3e}{flag}")
        if any(v[5] for v in qs.values()):
            failed.append(name)
    print(
        f"\n{len(rows)} cases x {len(GRAPHS)} blocks x 2 block forms (loader, bare) x 2 backends"
        " (native, torch), each the max over them.\n"
        "abs/rel vs dgl: graphtrain (float32) against DGL (float32); relative = max |a-b| / max |dgl|.\n"
        "rel/abs f64: graphtrain's error from DGL run in float64; dgl abs f64: DGL float32's own error.\n"
        f"FAIL: rel f64 > {a.tol:g} and graphtrain's error > 10x DGL's own float32 error."
    )
    (work / "results.json").write_text(json.dumps(rows, indent=1))
    if tmp is not None:
        tmp.cleanup()
    if failed:
        print("above tolerance: " + ", ".join(failed))
        raise SystemExit(1)
    print("all within tolerance")


if __name__ == "__main__":
    main()
