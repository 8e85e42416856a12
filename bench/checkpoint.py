"""What per-epoch checkpoints cost a run: WordNet GraphSAGE (examples/wordnet-sage.yaml: 2 shard servers x
2 trainers, 10 epochs, a checkpoint at the end of every epoch and at every best validation pass) run
with its checkpoints and, side by side in the same command, without them (the named baseline: the
trainers get no checkpoint root, so they take none; everything else is the same launch).

Runs alternate off/on `--repeats` times in one run directory, so the partition is made once (the first,
untimed warm-up launch) and reused by every timed one. Reported per run: wall time of the launch
(`graphtrain run` from start to result), the shard servers' peak resident memory (sampled), and for the
runs with checkpoints the time the trainers were paused in each checkpoint call (rank 0's log) and the
background writes the servers reported (their logs, where they write in the background: seconds, bytes
of rows written, tables written incrementally).

`--full-every N` (repeatable) adds runs with checkpoints whose servers get --checkpoint-full-every N,
in the same alternation: `--full-every 1 --full-every 5` compares every checkpoint full against
incremental ones (5 is the default). bench/checkpoint_rows.py measures a job that touches few rows.

    python bench/checkpoint.py [--repeats 2] [--epochs 10] [--work DIR] [--full-every N ...]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import platform
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PAUSED = re.compile(r"checkpoint (\S+): training paused ([0-9.]+) ms")
WRITTEN = re.compile(
    r"checkpoint (\S+) written in the background: ([0-9.]+) s, staged peak ([0-9]+) bytes"
    r"(?:, ([0-9]+) bytes of rows, ([0-9]+) of ([0-9]+) tables incremental)?"
)


def spec_doc(epochs: int) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "wordnet-sage.yaml").read_text())
    doc["spec"]["training"]["epochs"] = epochs
    return doc


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def launch(
    spec_path: Path, run_dir: Path, checkpoints: bool, full_every: int | None = None
) -> dict[str, Any]:
    """One `graphtrain run` of the spec in this process; without `checkpoints` the trainers' argv loses
    --checkpoint-root (Checkpoints(None) takes none); `full_every` goes to the shard servers. Returns
    wall seconds, peak shard RSS and the logs' checkpoint lines."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.launch import local, plan

    original, original_server = plan.trainer, plan.shard_server

    def shard_server(*args: Any, **kwargs: Any) -> plan.ProcessPlan:
        p = original_server(*args, **kwargs)
        extra = [] if full_every is None else ["--checkpoint-full-every", str(full_every)]
        return dataclasses.replace(p, argv=[*p.argv, *extra])

    def trainer(*args: Any, **kwargs: Any) -> plan.ProcessPlan:
        p = original(*args, **kwargs)
        if checkpoints:
            return p
        argv = list(p.argv)
        i = argv.index("--checkpoint-root")
        del argv[i : i + 2]
        return plan.ProcessPlan(p.name, argv, p.port_file)

    run = local.LocalRun(load_yaml(spec_path.read_text()), spec_path, run_dir, echo=False, overwrite=True)
    peak: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for c in list(run.servers):
                if c.proc.poll() is None:
                    peak[c.proc.pid] = max(peak.get(c.proc.pid, 0), rss_kib(c.proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    plan.trainer, plan.shard_server = (
        trainer,
        shard_server,
    )  # what local.LocalRun calls (it imports the module)
    try:
        sampler.start()
        start = time.perf_counter()
        result = run.run()
        wall = time.perf_counter() - start
    finally:
        done.set()
        plan.trainer, plan.shard_server = original, original_server
    logs = run_dir / "logs"
    paused = [float(m.group(2)) for m in PAUSED.finditer((logs / "trainer-0.log").read_text())]
    written = []
    for log in sorted(logs.glob("shard-*.log")):
        written += [
            (float(m.group(2)), int(m.group(3)), int(m.group(4) or 0), int(m.group(5) or 0))
            for m in WRITTEN.finditer(log.read_text())
        ]
    return {
        "wall": wall,
        "accuracy": result["test_accuracy"],
        "shard_peak_mib": sum(peak.values()) / 1024,
        "paused_ms": paused,
        "written": written,
    }


def summary(label: str, r: dict[str, Any]) -> str:
    paused = r["paused_ms"]
    text = f"{label}: {r['wall']:.1f} s, test acc {r['accuracy']:.4f}"
    text += f", shards' peak RSS {r['shard_peak_mib']:.0f} MiB"
    if paused:
        text += (
            f", {len(paused)} checkpoints paused training {sum(paused) / 1000:.2f} s in all "
            f"(median {statistics.median(paused):.0f} ms, max {max(paused):.0f} ms)"
        )
    if r["written"]:
        secs = [w[0] for w in r["written"]]
        text += (
            f"; background writes (per shard) median {statistics.median(secs):.2f} s, "
            f"staged peak {max(w[1] for w in r['written']) / 2**20:.1f} MiB, "
            f"rows written {sum(w[2] for w in r['written']) / 2**20:.0f} MiB in all "
            f"(per shard per checkpoint: {', '.join(f'{w[2] / 2**20:.0f}' for w in r['written'])}), "
            f"{sum(w[3] for w in r['written'])} of {len(r['written'])} shard pieces incremental"
        )
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--full-every", type=int, action="append", default=[], help="add runs with this flag")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / "wordnet-sage.yaml"
    spec_path.write_text(yaml.safe_dump(spec_doc(a.epochs)))
    run_dir = work / "run"
    print(
        f"[bench] {dt.datetime.now().isoformat(timespec='minutes')} {platform.node()} "
        f"{os.cpu_count()} CPUs; work {work}",
        flush=True,
    )
    launch(spec_path, run_dir, checkpoints=False)  # warm-up: makes the partition every timed run reuses
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(a.repeats):
        for on in (False, True):
            r = launch(spec_path, run_dir, checkpoints=on)
            runs[on].append(r)
            print(f"[bench] run {i + 1} " + summary("checkpoints " + ("on " if on else "off"), r), flush=True)
        for n in a.full_every:
            r = launch(spec_path, run_dir, checkpoints=True, full_every=n)
            print(f"[bench] run {i + 1} " + summary(f"checkpoints on, full every {n}", r), flush=True)
    off = statistics.median(r["wall"] for r in runs[False])
    on = statistics.median(r["wall"] for r in runs[True])
    paused = [p for r in runs[True] for p in r["paused_ms"]]
    share = statistics.median(sum(r["paused_ms"]) / 1000 / r["wall"] for r in runs[True])
    print(
        "| runs | wall off (baseline) | wall on | on/off | (on - off) / on | paused / wall on "
        "| paused per checkpoint |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {a.repeats} each, {a.epochs} epochs | {off:.1f} s | {on:.1f} s | {on / off:.3f}x | "
        f"{100 * (on - off) / on:+.1f} % | {100 * share:.1f} % | median {statistics.median(paused):.0f} ms, "
        f"max {max(paused):.0f} ms ({len(paused) // max(1, a.repeats)} per run) |"
    )


if __name__ == "__main__":
    main()
