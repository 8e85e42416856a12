"""Two WordNet trainings through the operator against a pod runner whose scheduler has room for one at a
time (issue 46, gang scheduling): with `scheduling.gang` (the coscheduling plugin's PodGroup, its
published schema installed) they run one after the other and both succeed; without it they end
half-started. What tests/e2e/test_gang.py checks on Nations, on WordNet with its timings.

    sudo python bench/gang.py [--epochs 2] [--capacity 5] [--half-started-seconds 60]

Needs root (the pod runner's process mode) and the test API server (../shared/k8s-testenv).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.cluster import operator_cluster, seed_claim  # noqa: E402
from tests.e2e.test_gang import CRDS, GANG, bound, pods_of  # noqa: E402
from tests.podrunner import PodRunner  # noqa: E402

CONFIG = "storage: {offline: true}\n"  # the claims are pre-seeded: nothing is downloaded


def apply(kube, runner, ns: str, work: Path, epochs: int, scheduling: dict | None) -> list[str]:
    kube("create", "namespace", ns)
    names = ["wordnet-a", "wordnet-b"]
    for name in names:
        seed_claim(runner.root, ns, f"{name}-data", "wordnet")
        doc = yaml.safe_load((ROOT / "examples" / "wordnet-sage.yaml").read_text())
        doc["metadata"]["name"] = name
        doc["spec"]["training"].update(epochs=epochs, threads=1)
        if scheduling is not None:
            doc["spec"]["scheduling"] = scheduling
        path = work / f"{ns}-{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        kube("apply", "-n", ns, "-f", str(path))
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=5)
    ap.add_argument("--half-started-seconds", type=float, default=60)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gang-") as tmp:
        work = Path(tmp)
        with operator_cluster(work, CONFIG) as cluster:
            kube = cluster.kube
            for crd in sorted(CRDS.glob("*.yaml")):
                kube("apply", "-f", str(crd))
            kube("wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s")
            with PodRunner(
                cluster.kubeconfig, mode="process", root=work / "gang", capacity=a.capacity
            ) as runner:
                started = time.monotonic()
                names = apply(kube, runner, "gang", work, a.epochs, GANG)
                first_bound: dict[str, float] = {}
                done: dict[str, tuple[float, str, float]] = {}
                while len(done) < 2 and time.monotonic() - started < 3600:
                    for name in names:
                        if name not in first_bound and any(bound(p) for p in pods_of(kube, "gang", name)):
                            first_bound[name] = time.monotonic() - started
                        st = (
                            json.loads(kube("get", "gtr", name, "-n", "gang", "-o", "json")).get("status")
                            or {}
                        )
                        if st.get("phase") in ("Succeeded", "Failed") and name not in done:
                            acc = ((st.get("progress") or {}).get("evalValue")) or float("nan")
                            done[name] = (time.monotonic() - started, st["phase"], acc)
                    time.sleep(0.5)
            print(f"# gang: 2 WordNet trainings, {a.epochs} epochs, 2x2 each, capacity {a.capacity}")
            print("| training | first pod bound s | ended s | phase | test accuracy |\n|---|---|---|---|---|")
            for name in names:
                end, phase, acc = done.get(name, (float("nan"), "-", float("nan")))
                began = first_bound.get(name, float("nan"))
                print(f"| {name} | {began:.0f} | {end:.0f} | {phase} | {acc:.4f} |")
            with PodRunner(
                cluster.kubeconfig, mode="process", root=work / "plain", capacity=a.capacity
            ) as runner:
                started = time.monotonic()
                names = apply(kube, runner, "plain", work, a.epochs, None)
                held = None
                while time.monotonic() - started < a.half_started_seconds + 600:
                    pods = [p for n in names for p in pods_of(kube, "plain", n)]
                    trainers = [
                        p for p in pods if p["metadata"]["labels"].get("graphtrain.io/role") == "trainer"
                    ]
                    waiting = [p for p in trainers if not bound(p)]
                    phases = [
                        (
                            json.loads(kube("get", "gtr", n, "-n", "plain", "-o", "json")).get("status") or {}
                        ).get("phase")
                        for n in names
                    ]
                    if sum(bound(p) for p in pods) == a.capacity and waiting:
                        held = held or time.monotonic()
                        if time.monotonic() - held > a.half_started_seconds:
                            break
                    else:
                        held = None
                    if "Succeeded" in phases:
                        break
                    time.sleep(1)
            print(
                f"without gang: phases {phases}; {sum(bound(p) for p in pods)}/{a.capacity} places held, "
                f"{len(waiting)} trainer(s) waiting for a place"
                + (f" for {time.monotonic() - held:.0f} s (half-started)" if held else "")
            )


if __name__ == "__main__":
    main()
