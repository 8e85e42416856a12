"""WordNet GraphSAGE on 1, 2 and 4 simulated hosts (runtime/launch/hosts.py): network namespaces on a
bridge, each host's link shaped (default 1 Gbit/s each way), N shard servers and N trainers, shard i
and trainer i on host i, tcp between hosts and shared memory only within one, as pods would run.

For each host count: samples/s (median of the epochs after the first, all trainers together), the test
accuracy, the bytes the hosts sent over their links per training step (startup and evaluation
included: the links are counted from the launch to the end), and the wall time. Root only (namespaces,
tc). Every run is bounded by --timeout; the namespaces are removed however a run ends.

    sudo python bench/hosts.py [--hosts 1 2 4] [--epochs 3] [--rate 1gbit] [--delay 0.5ms]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.launch.hosts import HostLayout, Link, link_bytes, simulated_hosts
from graphtrain.runtime.launch.local import LocalRun

ROOT = Path(__file__).resolve().parents[1]


def spec_for(hosts: int, epochs: int) -> str:
    """examples/wordnet-sage.yaml with `hosts` partitions (shard servers) and trainers, `epochs` epochs."""
    doc = yaml.safe_load((ROOT / "examples" / "wordnet-sage.yaml").read_text())
    spec = doc["spec"]
    spec["partition"]["parts"] = hosts
    spec["trainers"]["replicas"] = hosts
    spec["training"]["epochs"] = epochs
    doc["metadata"]["name"] = f"wordnet-sage-hosts-{hosts}"
    return yaml.safe_dump(doc, sort_keys=False)


def measure(hosts: int, epochs: int, link: Link | None, workdir: Path, timeout: float) -> dict[str, Any]:
    spec_path = workdir / f"hosts-{hosts}.yaml"
    spec_path.write_text(spec_for(hosts, epochs))
    run_dir = workdir / f"run-{hosts}"
    with simulated_hosts(hosts, link) as layout:
        gt = load_yaml(spec_path.read_text())
        launch = LocalRun(gt, spec_path, run_dir, echo=False, overwrite=True, hosts=layout)
        before = link_bytes(layout)
        start = time.monotonic()
        result = _bounded(launch, timeout)
        wall = time.monotonic() - start
        sent = _sent(layout, before)
    history = json.loads((run_dir / "progress-history.json").read_text())
    rates = [float(h["samplesPerSecond"]) for h in history[1:] if h.get("samplesPerSecond")]
    steps = max(int(h.get("step", 0)) for h in history)
    return {
        "hosts": hosts,
        "samples_per_second": statistics.median(rates) if rates else float("nan"),
        "test_accuracy": float(result["test_accuracy"]),
        "bytes_per_step": sent / max(steps, 1),
        "steps": steps,
        "wall_s": wall,
    }


def _bounded(launch: LocalRun, timeout: float) -> dict:
    """The run's result, or TimeoutError after `timeout` seconds (its processes are stopped then)."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["result"] = launch.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=go, name="bench-hosts-run")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        launch.stop_all(grace=5)
        worker.join(30)
        raise TimeoutError(f"the run took over {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _sent(layout: HostLayout, before: dict[int, tuple[int, int]]) -> int:
    after = link_bytes(layout)
    return sum(after[k][0] - before[k][0] for k in after)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rate", default="1gbit", help="each host's link, each way (tc units); 'none': unshaped")
    ap.add_argument("--delay", default=None, help="one-way delay (tc netem; this VM's kernel has none)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/hosts.py: needs root (network namespaces, tc)", file=sys.stderr)
        return 1
    link = None if args.rate == "none" else Link(args.rate, args.delay)
    print(
        f"# bench/hosts.py, {time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores, "
        f"WordNet GraphSAGE, {args.epochs} epochs, link {link or 'unshaped'}"
    )
    cols = ["hosts", "shard servers", "trainers", "samples/s", "test accuracy", "bytes sent per step"]
    print("| " + " | ".join([*cols, "steps", "wall s"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp:
        for n in args.hosts:
            m = measure(n, args.epochs, link, Path(tmp), args.timeout)
            print(
                f"| {n} | {n} | {n} | {m['samples_per_second']:,.0f} | {m['test_accuracy']:.4f} | "
                f"{m['bytes_per_step'] / 1e6:.2f} MB | {m['steps']} | {m['wall_s']:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
