"""WordNet GraphSAGE through the operator with real pods (the pod runner's process mode), 2 partitions
with 1 trainer each, partition locality on (worker pods: a trainer beside its shard server, /dev/shm
shared) and off (a StatefulSet of shard servers, a pod per trainer, every request over TCP), beside
`graphtrain run` of the same spec on the same machine, in one run (issue 46, partition locality).

For each: samples/s (median of the epochs after the first, from the history rank 0 writes), rank 0's
pull time per step (median of its epoch lines after the first: `per step: ... pull X ms`), where its
reads of each shard went (graphtrain_trainer_rows_read_total, the same epoch line), test accuracy,
wall time, and for the operator's runs the CPU the test cluster itself took meanwhile (etcd, the API
server, the operator, the pod runner: load `graphtrain run` does not carry on the same cores). The
pods' network is the pod runner's (a namespace per pod on a bridge, unshaped);
`graphtrain run` talks over ipc:// sockets and maps both shards (one host); `graphtrain run` on 2
simulated hosts (network namespaces, unshaped) has the worker pods' layout.

    sudo python bench/locality.py [--epochs 4] [--modes run hosts partition none]

Needs root (the pod runner) and the test API server (../shared/k8s-testenv).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.cluster import operator_cluster, seed_claim  # noqa: E402
from tests.podrunner import PodRunner  # noqa: E402
from tests.podrunner import runner as pod_runner  # noqa: E402

CONFIG = "storage: {offline: true}\n"  # the claims are pre-seeded: nothing is downloaded
NAME = "wordnet"
STAGES = re.compile(r"per step: (.*?); reads: (.*)$")


SERVER_THREADS: int | None = None  # spec.shardServers.threads (--server-threads)


def spec(work: Path, epochs: int, locality: str | None) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "wordnet-sage.yaml").read_text())
    doc["metadata"]["name"] = NAME
    doc["spec"]["training"].update(epochs=epochs, threads=1)  # graphtrain run's share of 2 cores
    doc["spec"]["trainers"]["replicas"] = 2
    doc["spec"]["partition"]["parts"] = 2
    if locality is not None:
        doc["spec"]["placement"] = {"locality": locality}
    if SERVER_THREADS is not None:
        doc["spec"].setdefault("shardServers", {})["threads"] = SERVER_THREADS
    path = work / f"{locality or 'run'}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def epoch_lines(log: str) -> list[tuple[float, str, str]]:
    """(pull ms, reads, every stage) of each epoch line of rank 0's log."""
    out = []
    for line in log.splitlines():
        if "[trainer] epoch" not in line or (m := STAGES.search(line)) is None:
            continue
        stages = dict(part.rsplit(" ", 2)[:2] for part in m.group(1).split(", "))
        out.append((float(stages.get("pull", "nan")), m.group(2), m.group(1)))
    return out


def summary(history: list[dict[str, Any]], log: str, accuracy: float, wall: float) -> dict[str, Any]:
    rates = [float(h["samplesPerSecond"]) for h in history[1:] if h.get("samplesPerSecond")]
    lines = epoch_lines(log)
    pulls = [p for p, _, _ in lines[1:]] or [p for p, _, _ in lines]
    return {
        "samples_per_second": statistics.median(rates) if rates else float("nan"),
        "pull_ms": statistics.median(pulls) if pulls else float("nan"),
        "reads": lines[-1][1] if lines else "",
        "stages": lines[-1][2] if lines else "",
        "accuracy": accuracy,
        "wall_s": wall,
        "epochs_counted": len(rates),
    }


def local_run(work: Path, epochs: int) -> dict[str, Any]:
    run_dir = work / "run"
    started = time.monotonic()
    res = subprocess.run(
        [str(Path(sys.executable).parent / "graphtrain"), "run", str(spec(work, epochs, None))]
        + ["--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.monotonic() - started
    if res.returncode != 0:
        raise SystemExit(f"graphtrain run failed: {res.stderr[-2000:]}")
    history = json.loads((run_dir / "progress-history.json").read_text())
    log = (run_dir / "logs" / "trainer-0.log").read_text()
    result = json.loads((run_dir / "result.json").read_text())
    return summary(history, log, float(result.get("test_accuracy", float("nan"))), wall)


def hosts_run(work: Path, epochs: int) -> dict[str, Any]:
    """`graphtrain run` on 2 simulated hosts (runtime/launch/hosts.py, links unshaped as the pod runner's
    are): shard i and trainer i on host i, shared memory within a host and TCP between, the layout the
    worker pods have."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.launch.hosts import simulated_hosts
    from graphtrain.runtime.launch.local import LocalRun

    path = spec(work, epochs, None)
    gt = load_yaml(path.read_text())
    run_dir = work / "hosts-run"
    started = time.monotonic()
    with simulated_hosts(2, None) as layout:
        result = LocalRun(gt, path, run_dir, echo=False, overwrite=True, hosts=layout).run()
    wall = time.monotonic() - started
    history = json.loads((run_dir / "progress-history.json").read_text())
    log = (run_dir / "logs" / "trainer-0.log").read_text()
    return summary(history, log, float(result.get("test_accuracy", float("nan"))), wall)


class HarnessCpu:
    """The CPU the test cluster itself takes while a training runs (etcd, the API server, the operator,
    this process with the pod runner's threads): every process of this tree but the pods' graphtrain
    roles, and the test API server's binaries, sampled each second, per pid from when it was first
    seen. What `graphtrain run` does not pay on the same 2 cores."""

    ROLES = ("shard-server", "train")

    def __init__(self, since: float) -> None:
        import psutil

        self.me = psutil.Process()
        self.since = since  # when this run's cluster started (time.time())
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        import psutil

        while not self.stop.wait(1.0):
            # the test API server and etcd detach (parent 1): found as testenv binaries started since
            servers = [
                p
                for p in psutil.process_iter(["cmdline", "create_time"])
                if p.info["create_time"] >= self.since
                and any("graphtrain-testenv" in arg for arg in (p.info["cmdline"] or [])[:1])
            ]
            for p in [self.me, *self.me.children(recursive=True), *servers]:
                try:
                    argv = p.cmdline()
                    if any(arg in self.ROLES for arg in argv[1:3]) and "graphtrain" in " ".join(argv[:2]):
                        continue
                    t = p.cpu_times()
                    used = t.user + t.system
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                self.first.setdefault(p.pid, used)
                self.last[p.pid] = used

    def __enter__(self) -> HarnessCpu:
        self.started = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.cores = sum(self.last[p] - self.first[p] for p in self.last) / (time.monotonic() - self.started)


def operator_run(work: Path, epochs: int, locality: str) -> dict[str, Any]:
    since = time.time()
    # the operator's default reconcile timer (15 s) and a kubelet's status pace (its PLEG relists each
    # second), not the tests' 1 s and 0.3 s: the test cluster runs on the training's 2 cores here
    pod_runner.POLL = 1.0
    with operator_cluster(work / locality, CONFIG, timer=15) as cluster:
        kube = cluster.kube
        with PodRunner(cluster.kubeconfig, mode="process", root=work / locality / "runner") as runner:
            ns = f"bench-{locality}"
            kube("create", "namespace", ns)
            seed_claim(runner.root, ns, f"{NAME}-data", "wordnet")
            started = time.monotonic()
            kube("apply", "-n", ns, "-f", str(spec(work, epochs, locality)))
            status: dict[str, Any] = {}
            with HarnessCpu(since) as harness:
                while time.monotonic() - started < 3600:
                    body = json.loads(kube("get", "gtr", NAME, "-n", ns, "-o", "json"))
                    status = body.get("status") or {}
                    if status.get("phase") in ("Succeeded", "Failed"):
                        break
                    time.sleep(1)
            wall = time.monotonic() - started
            if status.get("phase") != "Succeeded":
                raise SystemExit(f"{locality}: {json.dumps(status)[:2000]}")
            time.sleep(3)  # rank 0's last report (the test accuracy) may follow the phase
            status = json.loads(kube("get", "gtr", NAME, "-n", ns, "-o", "json"))["status"]
            cm = json.loads(kube("get", "configmap", f"{NAME}-progress", "-n", ns, "-o", "json"))
            history = json.loads((cm.get("data") or {}).get("history") or "[]")
            rank0 = f"{NAME}-worker-0" if locality == "partition" else f"{NAME}-trainer-0"
            log = runner.logs(ns, rank0, tail=None)
            if locality == "partition":  # the worker's log holds its sidecar's too: the trainer's lines
                log = "\n".join(line for line in log.splitlines() if "[trainer]" in line)
            accuracy = float((status.get("progress") or {}).get("evalValue") or float("nan"))
            return {**summary(history, log, accuracy, wall), "harness_cores": harness.cores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=["run", "hosts", "partition", "none"])
    ap.add_argument(
        "--server-threads",
        type=int,
        default=None,
        help="spec.shardServers.threads (the native optimizer's threads per server; unset: torch's, "
        "1 in `graphtrain run`, whose children get OMP_NUM_THREADS=1, the pod's cores in a pod)",
    )
    a = ap.parse_args()
    global SERVER_THREADS
    SERVER_THREADS = a.server_threads
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-locality-") as tmp:
        work = Path(tmp)
        for mode in a.modes:
            if mode == "run":
                results[mode] = local_run(work, a.epochs)
            elif mode == "hosts":
                results[mode] = hosts_run(work, a.epochs)
            else:
                results[mode] = operator_run(work, a.epochs, mode)
            print(f"# {mode}: {json.dumps(results[mode])}", flush=True)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {when}, {platform.node()}, {a.epochs} epochs, WordNet GraphSAGE, 2 partitions x 1 trainer")
    print(
        "| executor | samples/s | vs run | rank 0 pull ms/step | vs run | rank 0 reads | test acc | wall s "
        "| test cluster's CPU (cores) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base = results.get("run")
    label = {
        "run": "`graphtrain run`",
        "hosts": "`graphtrain run`, 2 simulated hosts",
        "partition": "operator, locality partition",
        "none": "operator, locality none",
    }
    for mode, r in results.items():
        rate = f"{r['samples_per_second'] / base['samples_per_second']:.2f}x" if base else ""
        pull = f"{r['pull_ms'] / base['pull_ms']:.2f}x" if base else ""
        harness = f"{r['harness_cores']:.2f}" if "harness_cores" in r else "-"
        print(
            f"| {label.get(mode, mode)} | {r['samples_per_second']:,.0f} | {rate} | {r['pull_ms']:.2f} | "
            f"{pull} | {r['reads']} | {r['accuracy']:.4f} | {r['wall_s']:.0f} | {harness} |"
        )


if __name__ == "__main__":
    main()
