"""WordNet GraphSAGE through the operator beside `graphtrain run` of the same spec (issue 17 point 2).

1. `graphtrain run SPEC`: partition, 2 shard servers and 2 trainers as processes of this machine.
2. The same spec applied to a private API server with `graphtrain operator` running against it (as the
   chart runs it) and the pod runner (tests/podrunner, process mode) playing the kubelet and the Job and
   StatefulSet controllers: the partition Job, the shard servers' StatefulSet and the trainer pods run
   as host processes, each pod in its own network namespace. The operator is offline and the claim is
   pre-seeded with the dataset from this machine's cache, so neither side downloads.

For each: the wall time (launch to the final status; the operator's from `kubectl apply` to
Succeeded), the test accuracy, and the seeds/s the trainers themselves report (rank 0's per-epoch
rate, all trainers; the median over epochs 2 to the last, the first carrying the warm-up).

    python bench/operator_wordnet.py [--spec examples/wordnet-sage.yaml] [--epochs N] [--repeat N] [--infer]

--infer: after the operator's training, a GraphTraining of mode inference from its LATEST checkpoint on
its claim (issue 48 item 3: the inferred test accuracy must be the training's).

Needs root (the runner's process mode mounts each pod's volumes in a mount namespace) and the test API
server (../shared/k8s-testenv, as the tests use).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.cluster import final_progress, operator_cluster, seed_claim  # noqa: E402 - the server and operator the e2e tests run
from tests.podrunner import PodRunner  # noqa: E402

GRAPHTRAIN = str(Path(sys.executable).parent / "graphtrain")
OPERATOR_CONFIG = "storage: {offline: true}\n"  # the claim is pre-seeded: nothing is downloaded
TIMEOUT = 3600.0  # seconds either side may take
POLL = 0.5


class Rates:
    """Rank 0's reported seeds/s, one per completed epoch (the first report of each epoch count)."""

    def __init__(self) -> None:
        self.by_epoch: dict[int, float] = {}

    def see(self, progress: dict | None) -> None:
        if not progress:
            return
        epoch, rate = progress.get("epoch"), progress.get("samplesPerSecond")
        if isinstance(epoch, int) and epoch >= 1 and rate and epoch not in self.by_epoch:
            self.by_epoch[epoch] = float(rate)

    def median(self) -> float:
        later = [r for e, r in sorted(self.by_epoch.items()) if e >= 2] or list(self.by_epoch.values())
        return statistics.median(later) if later else float("nan")


def poll(what: str, step: Callable[[], bool]) -> None:
    """step() every POLL seconds until it returns True, at most TIMEOUT seconds."""
    deadline = time.monotonic() + TIMEOUT
    while not step():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not finished after {TIMEOUT:.0f} s")
        time.sleep(POLL)


def accuracy(progress: dict) -> float:
    metrics = progress.get("metrics") or {}
    value = metrics.get("test_accuracy", progress.get("evalValue"))
    return float(value) if value is not None else float("nan")


def local_run(spec: Path, work: Path) -> dict:
    """`graphtrain run` of the spec, its progress read from the run directory as it goes."""
    run_dir = work / "run"
    rates = Rates()
    started = time.monotonic()
    log = (work / "run.log").open("w")
    proc = subprocess.Popen(
        [GRAPHTRAIN, "run", str(spec), "--run-dir", str(run_dir), "--overwrite"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def step() -> bool:
        with contextlib.suppress(OSError, ValueError):
            rates.see(json.loads((run_dir / "progress.json").read_text()))
        return proc.poll() is not None

    try:
        poll("graphtrain run", step)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"graphtrain run failed ({proc.returncode}): {(work / 'run.log').read_text()[-3000:]}"
        )
    progress = json.loads((run_dir / "status.json").read_text())["progress"]
    return {"seconds": elapsed, "accuracy": accuracy(progress), "seeds_per_second": rates.median()}


def operator_run(spec: Path, work: Path, name: str, dataset: str, infer: bool = False) -> dict:
    """The spec through `graphtrain operator` and the process-mode pod runner; with `infer`, then a
    GraphTraining of mode inference from its LATEST checkpoint on its claim (`inference` in the result:
    wall s from apply to Succeeded, the inferred test accuracy, rows/s of the inference pass)."""
    with (
        operator_cluster(work, OPERATOR_CONFIG) as cluster,
        PodRunner(cluster.kubeconfig, mode="process", root=work / "runner") as runner,
    ):
        kube, ns = cluster.kube, "bench"
        kube("create", "namespace", ns)
        seed_claim(runner.root, ns, f"{name}-data", dataset)
        rates = Rates()
        status: dict = {}
        started = time.monotonic()
        kube("apply", "-n", ns, "-f", str(spec))

        def step() -> bool:
            nonlocal status
            if runner.errors:
                raise RuntimeError(f"pod runner: {runner.errors[-3:]}")
            status = json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json")).get("status") or {}
            rates.see(status.get("progress"))
            return status.get("phase") in ("Succeeded", "Failed")

        poll("through the operator", step)
        elapsed = time.monotonic() - started
        if status["phase"] != "Succeeded":
            pods = json.loads(kube("get", "pods", "-n", ns, "-o", "json"))["items"]
            logs = "\n".join(runner.logs(ns, p["metadata"]["name"]) for p in pods)
            raise RuntimeError(f"through the operator: {json.dumps(status)[:2000]}\n{logs[-4000:]}")
        final = final_progress(kube, ns, name, "test_accuracy")  # rank 0's last report may come after
        out = {"seconds": elapsed, "accuracy": accuracy(final), "seeds_per_second": rates.median()}
        if infer:
            out["inference"] = operator_inference(kube, ns, spec, name, runner)
    return out


def operator_inference(kube: Any, ns: str, spec: Path, name: str, runner: Any) -> dict:
    """A GraphTraining of mode inference from `name`'s LATEST checkpoint, on its claim, to Succeeded."""
    uid = json.loads(kube("get", "gtr", name, "-n", ns, "-o", "json"))["metadata"]["uid"]
    doc = yaml.safe_load(spec.read_text())
    doc["metadata"]["name"] = f"{name}-infer"
    doc["spec"]["mode"] = "inference"
    doc["spec"]["inference"] = {"checkpoint": f"runs/{name}/{uid}/checkpoints/LATEST"}
    doc["spec"]["storage"] = {"volumeClaimName": f"{name}-data"}
    path = spec.with_name("infer.yaml")
    path.write_text(yaml.safe_dump(doc))
    started = time.monotonic()
    kube("apply", "-n", ns, "-f", str(path))
    status: dict = {}

    def step() -> bool:
        nonlocal status
        if runner.errors:
            raise RuntimeError(f"pod runner: {runner.errors[-3:]}")
        status = json.loads(kube("get", "gtr", f"{name}-infer", "-n", ns, "-o", "json")).get("status") or {}
        return status.get("phase") in ("Succeeded", "Failed")

    poll("inference through the operator", step)
    elapsed = time.monotonic() - started
    if status["phase"] != "Succeeded":
        raise RuntimeError(f"inference through the operator: {json.dumps(status)[:2000]}")
    final = final_progress(kube, ns, f"{name}-infer", "test_accuracy")
    rate = (final.get("metrics") or {}).get("rows_per_second", float("nan"))
    return {"seconds": elapsed, "accuracy": accuracy(final), "rows_per_second": rate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "wordnet-sage.yaml")
    ap.add_argument("--epochs", type=int, default=None, help="override training.epochs")
    ap.add_argument("--repeat", type=int, default=1, help="pairs to run, alternating")
    ap.add_argument("--infer", action="store_true", help="then infer from the operator run's checkpoint")
    args = ap.parse_args()
    doc = yaml.safe_load(args.spec.read_text())
    if args.epochs is not None:
        doc["spec"]["training"]["epochs"] = args.epochs
    name, dataset = doc["metadata"]["name"], doc["spec"]["graph"]["dataset"]
    res = subprocess.run([GRAPHTRAIN, "data", "fetch", dataset], capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(res.stderr.strip())
    rows: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="bench-operator-wordnet-") as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(yaml.safe_dump(doc, sort_keys=False))
        for i in range(args.repeat):
            work = Path(tmp) / f"pair{i}"
            (work / "run").mkdir(parents=True)
            (work / "operator").mkdir()
            rows.append(("graphtrain run", local_run(spec, work / "run")))
            print(f"graphtrain run: {rows[-1][1]}", flush=True)
            rows.append(
                ("operator + pod runner", operator_run(spec, work / "operator", name, dataset, args.infer))
            )
            print(f"operator + pod runner: {rows[-1][1]}", flush=True)
    epochs = doc["spec"]["training"]["epochs"]
    print(f"\n{name}: {epochs} epochs, 2 shard servers x {doc['spec']['trainers']['replicas']} trainers")
    print(f"{'executor':<24} {'wall s':>8} {'test acc':>9} {'seeds/s':>9}")
    for label, r in rows:
        print(f"{label:<24} {r['seconds']:>8.0f} {r['accuracy']:>9.4f} {r['seeds_per_second']:>9,.0f}")
        if "inference" in r:
            i = r["inference"]
            head = f"{'  then mode inference':<24} {i['seconds']:>8.0f} {i['accuracy']:>9.4f}"
            print(f"{head} rows/s {i['rows_per_second']:,.0f}")


if __name__ == "__main__":
    main()
