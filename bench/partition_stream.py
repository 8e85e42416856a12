"""Streaming (Fennel) against METIS, each as the partition step runs it (`graphtrain partition`, a child
process), issue 33 item 3's acceptance:

1. METIS uncapped: its cut, balance, peak RSS and peak address space (psutil, polled every 20 ms);
2. the cap: `ulimit -v` (RLIMIT_AS) below METIS's peak address space (default 80 % of it);
3. METIS under the cap (it should fail), Fennel under the cap (it should complete), `auto` under the
   cap (it should choose Fennel) and `auto` uncapped (it should choose METIS).
Both partition the graph as stored (gene-pubmed: gene -> paper, one direction; the cut counts node pairs,
so the undirected structure METIS sees is the same), balancing nodes within --max-imbalance.

    python bench/partition_stream.py [--dataset gene-pubmed] [--parts 4] [--cap-mib N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

CLI = [sys.executable, "-m", "graphtrain.cli", "partition"]


@dataclass
class Outcome:
    label: str
    rc: int
    seconds: float
    rss: int
    vms: int
    config: dict | None
    said: str


def run(label: str, args: list[str], out: Path, cap: int | None) -> Outcome:
    """One partition command, its peaks polled; `cap`: RLIMIT_AS in bytes for the child."""

    def limit() -> None:
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "GRAPHTRAIN_QUIET": "1"}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [*CLI, *args, "--out", str(out), "--overwrite"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=limit,
    )
    ps = psutil.Process(proc.pid)
    rss = vms = 0
    while proc.poll() is None:
        try:
            info = ps.memory_info()
            rss, vms = max(rss, info.rss), max(vms, info.vms)
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - t
    said = proc.stdout.read() if proc.stdout else ""
    config = None
    found = sorted(out.glob("*.json")) if out.is_dir() else []
    if proc.returncode == 0 and found:
        config = json.loads(found[0].read_text())
    lines = [line for line in said.splitlines() if line.startswith(("error", "warning"))]
    if proc.returncode != 0 and said.strip():
        lines.append(said.strip().splitlines()[-1])  # the failure's last line (METIS: a traceback's)
    return Outcome(label, proc.returncode, seconds, rss, vms, config, " | ".join(lines)[-160:])


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def row(o: Outcome, cap: int | None) -> str:
    c = o.config
    capped = "-" if cap is None else mib(cap)
    if c is None:
        blank = f"{'':>7} {'':>7}"
        return (
            f"{o.label:<14} {capped:>8} {o.rc:>3} {'failed':>8} {blank} {mib(o.rss):>8} {mib(o.vms):>8} "
            f"{o.seconds:>7.1f}"
        )
    st = c["stats"]
    return (
        f"{o.label:<14} {capped:>8} {o.rc:>3} {st['edge_cut_fraction']:>8.4f} {st['balance']['nodes']:>7.3f} "
        f"{st['balance']['edges']:>7.3f} {mib(o.rss):>8} {mib(o.vms):>8} {o.seconds:>7.1f}  {c['algorithm']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="gene-pubmed")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--max-imbalance", type=float, default=0.05)
    ap.add_argument(
        "--cap-mib",
        type=int,
        default=None,
        help="RLIMIT_AS of the capped runs (default: 80%% of METIS' peak)",
    )
    a = ap.parse_args()
    base = [
        "--dataset",
        a.dataset,
        "-k",
        str(a.parts),
        "--balance",
        "nodes",
        "--max-imbalance",
        str(a.max_imbalance),
    ]
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB; "
        f"{a.dataset}, {a.parts} parts, balance nodes within {a.max_imbalance}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        root = Path(tmp)
        metis = run("metis", [*base, "--algorithm", "metis"], root / "metis", None)
        cap = a.cap_mib * 2**20 if a.cap_mib else int(0.8 * metis.vms)
        rows = [
            (metis, None),
            (run("metis capped", [*base, "--algorithm", "metis"], root / "metis-capped", cap), cap),
            (run("fennel capped", [*base, "--algorithm", "fennel"], root / "fennel-capped", cap), cap),
            (run("fennel", [*base, "--algorithm", "fennel"], root / "fennel", None), None),
            (run("auto capped", [*base, "--algorithm", "auto"], root / "auto-capped", cap), cap),
            (run("auto", [*base, "--algorithm", "auto"], root / "auto", None), None),
        ]
    print(
        f"{'run':<14} {'cap MiB':>8} {'rc':>3} {'cut':>8} {'nodes':>7} {'edges':>7} {'RSS MiB':>8} "
        f"{'VM MiB':>8} {'s':>7}  chose"
    )
    for o, c in rows:
        print(row(o, c))
    for o, _ in rows:
        if o.said:
            print(f"  {o.label}: {o.said}")
    fennel = rows[2][0]
    if metis.config and fennel.config:
        ratio = fennel.config["stats"]["edge_cut_fraction"] / metis.config["stats"]["edge_cut_fraction"]
        print(f"fennel cut / metis cut: {ratio:.2f} (acceptance: <= 1.5)")


if __name__ == "__main__":
    main()
