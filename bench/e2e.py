"""End-to-end benchmark: graphtrain beside DGL 2.1 and PyKEEN 1.11, measured in the same run.

1. Throughput (seeds/s, triples/s), standalone and 2 shard servers x 2 trainers, against DGL 2.1
   (torch 2.2.1, single process; its own venv) running the same model on the same exported inputs:
   - GraphSAGE on WordNet, features only and with a learnable 128-dim node embedding (SparseAdam);
   - TransE on gene-kg (entity + relation tables, SparseAdam, 32 negatives per positive).
   graphtrain's rate is read from the runs' progress reports after a warm-up, training steps only: for
   GraphSAGE over epochs 2 and 3 (the first warms up), as DGL's side times them; for TransE from step 20.
2. Accuracy of the WordNet runs (test, every neighbour): graphtrain standalone and 2x2, and DGL.
3. Restarts: WordNet 2x2 with backoffLimit 1, a trainer and then a shard server killed after epoch 4;
   the test accuracy beside the uninterrupted run's.
4. KGE parity: filtered MRR of TransE, DistMult, ComplEx and RotatE on Nations, Kinships and UMLS,
   graphtrain against PyKEEN 1.11 (its own venv) with the same settings, over --seeds seeds each.

With --mixed-precision bfloat16, the two GraphSAGE cases of 1 and 2 run again with training.mixedPrecision
(their products in bfloat16), beside the float32 rows and against the same DGL figures (float32: DGL 2.1's
CPU gspmm crashes under autocast to bfloat16).

    python bench/e2e.py [--seeds 3] [--first-seed 0] [--threads 2] [--mixed-precision bfloat16]
                        [--skip dgl,pykeen,throughput,accuracy,restart,kge]
                        [--kge-models transe,distmult,complex,rotate] [--kge-datasets nations,kinships,umls]
                        [--cases sage-features,sage-embedding,transe] [--layouts standalone,2x2] [--repeat 1]

--cases, --layouts and --repeat choose the throughput runs: e.g. the features-only GraphSAGE case alone,
standalone, 5 rounds each beside DGL (`--skip accuracy,restart,kge --cases sage-features --layouts
standalone --repeat 5`); a row gives the rounds' median rates with their range and the median of the
rounds' ratios, and each round prints its rates with the load average it started at.

The venvs are made once under bench/.venvs (DGL: about 5 GB with torch 2.2.1's CUDA libraries).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
DGL = (
    ["torch==2.2.1", "dgl==2.1.0", "pandas<3", "pyyaml", "pydantic", "numpy<2", "scipy"],
    ["torchdata==0.7.1"],
)
PYKEEN = (["torch==2.13.0", "pykeen==1.11.1"], [])
KG_SETTINGS = {"dim": 128, "epochs": 100, "batch": 256, "lr": 0.005, "negatives": 32, "loss": "crossentropy"}


def venv(name: str, packages: tuple[list[str], list[str]]) -> Path:
    """A venv with `packages` (the second list installed without dependencies), made once."""
    path = VENVS / name
    stamp = path / ".installed"
    want = json.dumps(packages)
    if not (stamp.exists() and stamp.read_text() == want):
        print(f"[bench] making the {name} venv (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
        pip = [str(path / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, *packages[0]], check=True)
        if packages[1]:
            subprocess.run([*pip, "--no-deps", *packages[1]], check=True)
        stamp.write_text(want)
    return path / "bin" / "python"


def run_json(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a side script in /tmp (so a repo folder never shadows a stdlib module) and parse its last line."""
    res = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ graphtrain runs


def spec(example: str, **overrides: Any) -> dict[str, Any]:
    """An example spec with `section.key` overrides."""
    doc = yaml.safe_load((ROOT / "examples" / example).read_text())
    for dotted, value in overrides.items():
        node = doc["spec"]
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return doc


def graphtrain_run(
    doc: dict[str, Any], work: Path, standalone: bool, measure: bool = False, warm_epochs: int = 0
) -> dict[str, Any]:
    """Run a spec with `graphtrain run`. measure: stop after a timed window and return the training rate
    (samples/s from step counts between progress reports, warm-up and evaluation excluded): the window
    opens at the first report past step 20 and past `warm_epochs` epochs, and closes before the last
    epoch (its evaluation) or after 40 s."""
    name = doc["metadata"]["name"] + ("-standalone" if standalone else "-2x2")
    run_dir = work / name
    spec_path = work / f"{name}.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    argv = [sys.executable, "-m", "graphtrain.runtime.cli", "run", str(spec_path), "--run-dir", str(run_dir)]
    argv.append("--overwrite")  # the same spec runs again in `work` (seeds, sections): start afresh
    (run_dir / "progress.json").unlink(missing_ok=True)  # a timed window must not start on the last run's
    proc = subprocess.Popen(
        [*argv, *(["--standalone"] if standalone else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    tr = doc["spec"]["training"]
    world = 1 if standalone else doc["spec"]["trainers"]["replicas"]
    seen: list[tuple[float, int]] = []
    progress = run_dir / "progress.json"
    try:
        while measure and proc.poll() is None:
            with contextlib.suppress(OSError, json.JSONDecodeError, KeyError):
                p = json.loads(progress.read_text())
                fresh = not seen or p["step"] != seen[-1][1]
                if warm_epochs < p["epoch"] < tr["epochs"] and p["step"] >= 20 and fresh:
                    seen.append((time.perf_counter(), p["step"]))
            if len(seen) >= 2 and seen[-1][0] - seen[0][0] > 40:
                proc.send_signal(signal.SIGTERM)  # stops every process (SIGINT may be inherited ignored)
                break
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=3600)
    except BaseException:  # Ctrl-C, a SIGTERM (stop_on_signals) or a timeout: the run goes with us
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    if measure:
        if len(seen) < 2:
            raise RuntimeError(f"{name}: too few progress reports to time\n{out[-3000:]}")
        (t0, s0), (t1, s1) = seen[0], seen[-1]
        per_trainer = max(1, tr["batchSize"] // world)  # batchSize is global (train/dist.py: Dist.share)
        return {"samples_per_second": (s1 - s0) * per_trainer * world / (t1 - t0)}
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out[-3000:]}")
    return json.loads((run_dir / "result.json").read_text())


# -------------------------------------------------------------------------------------------- exports


def export_wordnet(path: Path) -> None:
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.data.transform import project_graph_features

    gt = load_yaml((ROOT / "examples" / "wordnet-sage.yaml").read_text())
    g = project_graph_features(
        datasets.load_source(gt.spec.graph), gt.spec.model.feature_projection or 256, seed=0
    )
    src = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    np.savez(
        path,
        src=src,
        dst=np.asarray(g.indices, np.int64),
        num_nodes=g.num_nodes,
        feat=g.feat,
        label=g.label,
        **{f"{k}_mask": v for k, v in g.masks.items()},
    )


def export_kg(name: str, path: Path) -> None:
    from graphtrain.runtime.data import datasets

    kg = datasets.load(name)
    np.savez(path, train=kg.train, num_entities=kg.num_entities, num_relations=kg.num_relations)


# ---------------------------------------------------------------------------------------------- parts


def dgl_cmd(python: Path, mode: str, data: Path, *args: str) -> list[str]:
    return [str(python), str(ROOT / "bench" / "dgl_e2e.py"), mode, "--data", str(data), *args]


def precisions(example: str, mixed: str) -> list[tuple[str, dict[str, Any]]]:
    """(title suffix, overrides) of each precision a case runs in: float32, and with --mixed-precision
    bfloat16 the GraphSAGE cases again with training.mixedPrecision (DGL 2.1 stays float32: its CPU
    gspmm crashes under autocast to bfloat16, 2026-12-01)."""
    runs: list[tuple[str, dict[str, Any]]] = [("", {})]
    if mixed != "none" and "sage" in example:
        runs.append((f", {mixed} products", {"training.mixedPrecision": mixed}))
    return runs


# name: (title, example, DGL's arguments (None: TransE's own), unit)
CASES: dict[str, tuple[str, str, list[str] | None, str]] = {
    "sage-features": ("GraphSAGE WordNet, features", "wordnet-sage-features.yaml", ["--features"], "seeds/s"),
    "sage-embedding": (
        "GraphSAGE WordNet, + embedding (Adam)",
        "wordnet-sage.yaml",
        ["--features", "--embedding", "128"],
        "seeds/s",
    ),
    "transe": ("TransE gene-kg", "gene-kg-transe.yaml", None, "triples/s"),
}
LAYOUTS = ("standalone", "2x2")


def spread(values: list[float]) -> str:
    """The median of a case's rounds, with their range when there are several ("50,480 (49.9-53.4k)")."""
    mid = f"{statistics.median(values):,.0f}"
    if len(values) < 2:
        return mid
    return f"{mid} ({min(values) / 1e3:.1f}-{max(values) / 1e3:.1f}k)"


def dgl_rate(dgl: Path, work: Path, doc: dict[str, Any], dgl_args: list[str] | None, threads: int) -> float:
    """DGL 2.1's rate on the case of `doc` (with `dgl_args`; None: TransE, its settings from `doc`)."""
    if dgl_args is not None:
        argv = dgl_cmd(dgl, "sage", work / "wordnet.npz", *dgl_args, "--epochs", "3")
        return float(run_json([*argv, "--threads", str(threads)])["seeds_per_second"])
    t = doc["spec"]
    argv = dgl_cmd(dgl, "transe", work / "gene-kg.npz", "--dim", str(t["embeddings"][0]["dim"]))
    argv += ["--negatives", str(t["task"]["negatives"]), "--steps", "60"]
    argv += ["--batch-size", str(t["training"]["batchSize"]), "--threads", str(threads)]
    return float(run_json(argv)["triples_per_second"])


def throughput(
    work: Path,
    threads: int,
    with_dgl: bool,
    rows: list[list[str]],
    mixed: str = "none",
    cases: tuple[str, ...] = tuple(CASES),
    repeat: int = 1,
    layouts: tuple[str, ...] = LAYOUTS,
) -> None:
    """Each case's rate in each layout, and DGL's in the same round, `repeat` rounds: the rows give the
    medians (and ranges) of the rates, and the median of the rounds' ratios (a shared machine's load
    moves both sides of a round together, and rounds apart)."""
    if with_dgl:
        dgl = venv("dgl", DGL)
        if {"sage-features", "sage-embedding"} & set(cases):
            export_wordnet(work / "wordnet.npz")
        if "transe" in cases:
            export_kg("gene-kg", work / "gene-kg.npz")
    for case in cases:
        title, example, dgl_args, unit = CASES[case]
        # GraphSAGE: epochs 2 and 3 timed, the first a warm-up, as DGL's side times them (dgl_e2e.py);
        # TransE: one long epoch from step 20 on (DGL's: from step 5)
        warm = 1 if dgl_args is not None else 0
        big = {"training.epochs": 3 + warm, "training.evalEvery": 1000, "training.checkpointInterval": 10**9}
        runs = precisions(example, mixed)
        ours: dict[tuple[str, str], list[float]] = {(s, lay): [] for s, _ in runs for lay in layouts}
        base: list[float] = []
        for r in range(repeat):
            load = os.getloadavg()[0]
            for suffix, overrides in runs:
                doc = spec(example, **big, **overrides)
                for lay in layouts:
                    rate = graphtrain_run(
                        doc, work, standalone=lay == "standalone", measure=True, warm_epochs=warm
                    )
                    ours[(suffix, lay)].append(rate["samples_per_second"])
            if with_dgl:
                base.append(dgl_rate(dgl, work, spec(example, **big), dgl_args, threads))
            said = ", ".join(
                f"{s.removeprefix(', ') or 'float32'} {lay} {v[-1]:,.0f}" for (s, lay), v in ours.items()
            )
            theirs = f", DGL {base[-1]:,.0f}" if base else ""
            print(f"[bench] {title} round {r + 1}/{repeat} (load {load:.1f}): {said}{theirs}", flush=True)
        for suffix, _ in runs:
            row = [title + suffix, unit]
            for lay in LAYOUTS:
                got = ours.get((suffix, lay), [])
                ratios = [a / b for a, b in zip(got, base, strict=False)]
                row += [spread(got) if got else "-", f"{statistics.median(ratios):.2f}x" if ratios else "-"]
            rows.append([*row, spread(base) if base else "-"])
            print(f"[bench] {' | '.join(rows[-1])}", flush=True)


def accuracy(
    work: Path, threads: int, with_dgl: bool, seeds: int, rows: list[list[str]], mixed: str = "none"
) -> None:
    for title, example, dgl_args in (
        ("features", "wordnet-sage-features.yaml", ["--features"]),
        ("+ embedding (SparseAdam)", "wordnet-sage.yaml", ["--features", "--embedding", "128"]),
    ):
        runs = precisions(example, mixed)
        ours: dict[str, list[float]] = {
            f"{layout}{suffix}": [] for suffix, _ in runs for layout in ("1", "2")
        }
        base = []
        for seed in range(seeds):
            for suffix, overrides in runs:
                doc = spec(
                    example, **{"training.seed": seed, "training.checkpointInterval": 10**9}, **overrides
                )
                ours[f"1{suffix}"].append(graphtrain_run(doc, work, True)["test_accuracy"])
                ours[f"2{suffix}"].append(graphtrain_run(doc, work, False)["test_accuracy"])
            if with_dgl:
                argv = dgl_cmd(venv("dgl", DGL), "sage", work / "wordnet.npz", *dgl_args)
                argv += ["--threads", str(threads), "--seed", str(seed)]
                if not (work / "wordnet.npz").exists():
                    export_wordnet(work / "wordnet.npz")
                base.append(run_json(argv)["test_accuracy"])
        fmt = lambda v: f"{statistics.mean(v):.4f}" if v else "-"  # noqa: E731
        for suffix, _ in runs:
            rows.append(
                [f"WordNet {title}{suffix}", fmt(ours[f"1{suffix}"]), fmt(ours[f"2{suffix}"]), fmt(base)]
            )
            print(f"[bench] WordNet {title}{suffix}: {rows[-1][1:]}", flush=True)


def kg_spec(dataset: str, model: str, seed: int, **overrides: Any) -> dict[str, Any]:
    """The Nations example of `model` on `dataset` at KG_SETTINGS (PyKEEN's comparison), with `overrides`;
    both tables step every row at every step (optimizer.rows: all), as PyKEEN's Adam does."""
    s = KG_SETTINGS
    doc = spec(
        f"nations-{model}.yaml",
        **{
            "graph.dataset": dataset,
            "training.seed": seed,
            "training.epochs": s["epochs"],
            "training.batchSize": s["batch"],
            "training.evalEvery": 1000,
            "training.checkpointInterval": 10**9,
            "task.negatives": s["negatives"],
            "task.loss": s["loss"],
            **overrides,
        },
    )
    doc["metadata"]["name"] = f"{dataset}-{model}"
    for table in doc["spec"]["embeddings"]:
        table["dim"] = s["dim"]
        table["optimizer"]["lr"] = s["lr"]
        table["optimizer"]["rows"] = "all"  # every row stepped every step: PyKEEN's dense torch.optim.Adam
    return doc


KG_MODELS = ("transe", "distmult", "complex", "rotate")  # each with its examples/nations-<model>.yaml
KG_DATASETS = ("nations", "kinships", "umls")


def kge(
    work: Path,
    threads: int,
    with_pykeen: bool,
    seeds: int,
    rows: list[list[str]],
    models: tuple[str, ...] = KG_MODELS,
    datasets: tuple[str, ...] = KG_DATASETS,
    first_seed: int = 0,
) -> None:
    py = venv("pykeen", PYKEEN) if with_pykeen else None
    s = KG_SETTINGS
    for dataset in datasets:
        for model in models:
            ours, base = [], []
            for seed in range(first_seed, first_seed + seeds):
                doc = kg_spec(dataset, model, seed)
                ours.append(graphtrain_run(doc, work, standalone=True)["test_mrr"])
                if py is not None:
                    argv = [
                        str(py),
                        str(ROOT / "bench" / "pykeen_kge.py"),
                        "--dataset",
                        dataset,
                        "--model",
                        model,
                    ]
                    argv += [
                        "--dim",
                        str(s["dim"]),
                        "--epochs",
                        str(s["epochs"]),
                        "--batch-size",
                        str(s["batch"]),
                    ]
                    argv += ["--lr", str(s["lr"]), "--negatives", str(s["negatives"]), "--loss", s["loss"]]
                    argv += ["--seed", str(seed), "--threads", str(threads)]
                    base.append(run_json(argv)["test_mrr"])
                theirs = f", pykeen {base[-1]:.4f}" if base else ""
                print(f"[bench] {dataset} {model} seed {seed}: ours {ours[-1]:.4f}{theirs}", flush=True)
            m_ours = statistics.mean(ours)
            m_base = statistics.mean(base) if base else float("nan")
            verdict = "ok" if base and abs(m_ours - m_base) <= 0.03 else ("MISS" if base else "-")
            rows.append(
                [dataset, model, f"{m_ours:.4f}", f"{m_base:.4f}", f"{m_ours - m_base:+.4f}", verdict]
            )
            print(f"[bench] {dataset} {model}: ours {ours} pykeen {base}", flush=True)


def restart(work: Path, rows: list[list[str]]) -> None:
    """WordNet with the embedding, 2x2, backoffLimit 1: kill `victim` once the 4th epoch's checkpoint is
    written; the run restarts from it and finishes. Compared with the same run uninterrupted."""
    import threading

    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.launch.local import LocalRun

    clean = graphtrain_run(spec("wordnet-sage.yaml"), work, False)["test_accuracy"]
    for victim in ("trainer-1", "shard-0"):
        doc = spec("wordnet-sage.yaml", **{"runPolicy.backoffLimit": 1})
        doc["metadata"]["name"] = f"wordnet-restart-{victim}"
        path = work / f"{doc['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        run = LocalRun(load_yaml(path.read_text()), path, work / doc["metadata"]["name"], echo=False)
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda r=run, o=out: o.update(result=r.run()))
        thread.start()
        latest = run.run_dir / "checkpoints" / "LATEST"
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline and thread.is_alive():
            epoch = None
            with contextlib.suppress(OSError, ValueError, KeyError):
                epoch = json.loads((latest.parent / latest.read_text().strip() / "trainer.json").read_text())[
                    "epoch"
                ]
            procs = {c.plan.name: c for c in [*run.trainers, *run.servers]}
            if epoch is not None and epoch >= 4 and victim in procs:
                procs[victim].proc.kill()
                break
            time.sleep(0.2)
        thread.join()
        acc = out["result"]["test_accuracy"]
        st = json.loads((run.run_dir / "status.json").read_text())
        rows.append([victim, str(st["restarts"]), f"{clean:.4f}", f"{acc:.4f}", f"{acc - clean:+.4f}"])
        print(f"[bench] killed {victim}: {rows[-1]}", flush=True)


def names(given: str, known: Any, flag: str) -> tuple[str, ...]:
    """The comma-separated names of `given`, each one of `known`; one line and exit 1 otherwise."""
    chosen = tuple(n for n in given.split(",") if n)
    bad = [n for n in chosen if n not in known]
    if bad or not chosen:
        sys.exit(f"{flag}: {bad[0] if bad else 'none given'} is not one of {', '.join(known)}")
    return chosen


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the KGE pairs run seeds first..first+seeds-1 (more seeds later)",
    )
    ap.add_argument(
        "--skip", default="", help="comma-separated: dgl, pykeen, throughput, accuracy, restart, kge"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default=",".join(CASES), help=f"throughput cases, of {', '.join(CASES)}")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="throughput layouts: standalone, 2x2")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="throughput rounds per case (medians, and each round beside DGL)",
    )
    ap.add_argument(
        "--mixed-precision",
        choices=["none", "bfloat16"],
        default="none",
        help="bfloat16: the GraphSAGE cases also with training.mixedPrecision, beside float32 (DGL: float32)",
    )
    ap.add_argument(
        "--kge-models", default=",".join(KG_MODELS), help=f"comma-separated, of {', '.join(KG_MODELS)}"
    )
    ap.add_argument(
        "--kge-datasets", default=",".join(KG_DATASETS), help=f"comma-separated, of {', '.join(KG_DATASETS)}"
    )
    a = ap.parse_args()
    if a.repeat < 1:
        sys.exit(f"--repeat: {a.repeat} is not a count of rounds (1 or more)")
    cases, layouts = names(a.cases, CASES, "--cases"), names(a.layouts, LAYOUTS, "--layouts")
    skip = set(filter(None, a.skip.split(",")))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(
        f"# e2e benchmark, {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gt-e2e-") as tmp:
        work = Path(tmp)
        if "throughput" not in skip:
            rows: list[list[str]] = []
            throughput(work, a.threads, "dgl" not in skip, rows, a.mixed_precision, cases, a.repeat, layouts)
            print(
                table(
                    ["run", "unit", "standalone", "vs DGL", "2 servers x 2 trainers", "vs DGL", "DGL 2.1"],
                    rows,
                )
            )
        if "accuracy" not in skip:
            rows = []
            accuracy(work, a.threads, "dgl" not in skip, a.seeds, rows, a.mixed_precision)
            print(table(["test accuracy", "standalone", "2x2", "DGL 2.1"], rows))
        if "restart" not in skip:
            rows = []
            restart(work, rows)
            print(table(["killed at epoch 4", "restarts", "uninterrupted", "with restart", "diff"], rows))
        if "kge" not in skip:
            rows = []
            models = tuple(m for m in a.kge_models.split(",") if m)
            datasets = tuple(d for d in a.kge_datasets.split(",") if d)
            kge(work, a.threads, "pykeen" not in skip, a.seeds, rows, models, datasets, a.first_seed)
            print(table(["dataset", "model", "graphtrain MRR", "PyKEEN MRR", "diff", "within 0.03"], rows))


if __name__ == "__main__":
    main()
