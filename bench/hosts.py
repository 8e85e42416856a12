"""WordNet GraphSAGE on 1, 2 and 4 simulated hosts (runtime/launch/hosts.py): network namespaces on a
bridge, each host's link shaped (default 1 Gbit/s each way), N shard servers and N trainers, shard i
and trainer i on host i, tcp between hosts and shared memory only within one, as pods would run.

First this build's unit costs are measured on this machine (runtime/calibrate.py, on the 2-host
partition). For each host count: samples/s (median of the epochs after the first, all trainers
together) and the step time it means, beside the step time `graphtrain plan` predicts from those
costs (runtime/steptime.py; the machine's other load sampled through the run, their mean used, and
this process' own CPU share added to it), the test accuracy, the bytes the hosts sent over their
links per training step, beside what the plan predicts for the same partition
(runtime/capacity.py), and the wall time. The links are read every 0.2 s; a step's bytes are those
between the end of epoch 1 and the end of epoch E-1 (evaluation runs only after epoch E, so neither
startup nor evaluation is counted) over the steps between them. Root only (namespaces, tc). Every
run is bounded by --timeout; the namespaces are removed however a run ends.

    sudo python bench/hosts.py [--hosts 1 2 4] [--epochs 3] [--rate 1gbit] [--delay 0.5ms] [--other-load 2]
        [--fast-lane on off] [--dtype float32 bfloat16 float16] [--mixed-precision none bfloat16]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.contract.spec.loading import SpecError
from graphtrain.runtime import capacity, planning
from graphtrain.runtime.calibrate import calibrate, runnable_others
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.hosts import HostLayout, Link, link_bytes, simulated_hosts
from graphtrain.runtime.launch.local import LocalRun
from graphtrain.runtime.partition.format import load_config
from graphtrain.runtime.steptime import Costs
from graphtrain.runtime.stopping import stop_on_signals

ROOT = Path(__file__).resolve().parents[1]


def spec_for(
    hosts: int, epochs: int, fast_lane: bool = True, dtype: str = "float32", mixed: str = "none"
) -> str:
    """examples/wordnet-sage.yaml with `hosts` partitions (shard servers) and trainers, `epochs` epochs,
    the shard servers' fast lane on or off, its node table's rows of `dtype`, the model's products in
    `mixed` (training.mixedPrecision)."""
    doc = yaml.safe_load((ROOT / "examples" / "wordnet-sage.yaml").read_text())
    spec = doc["spec"]
    spec.setdefault("shardServers", {})["fastLane"] = fast_lane
    for table in spec.get("embeddings", []):
        table["dtype"] = dtype
    spec["partition"]["parts"] = hosts
    spec["trainers"]["replicas"] = hosts
    spec["training"]["epochs"] = epochs
    spec["training"]["mixedPrecision"] = mixed
    spec["training"]["evalEvery"] = epochs  # training traffic alone until the last epoch's end
    doc["metadata"]["name"] = f"wordnet-sage-hosts-{hosts}"
    return yaml.safe_dump(doc, sort_keys=False)


def costs_here(workdir: Path, mixed: str = "none") -> Costs:
    """This build's unit costs on this machine, measured on the 2-host spec's partition (the dense
    model timed in `mixed`, as `graphtrain plan --calibrate` times it)."""
    spec_path = workdir / f"calibrate-{mixed}.yaml"
    spec_path.write_text(spec_for(2, 3, mixed=mixed))
    gt = load_yaml(spec_path.read_text())
    cfg = load_config(planning.partition_for(gt, spec_path, None, workdir / "calibrate-partition"))
    fanouts = list(gt.spec.training.fanouts)
    return calibrate(cfg, *planning.gnn_of(gt.spec, cfg), fanouts, mixed_precision=mixed)


SPIN = (
    "import os, sys, time\nparent, end = os.getppid(), time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end and os.getppid() == parent:\n    pass\n"
)


@contextlib.contextmanager
def other_load(count: int, seconds: float) -> Iterator[set[int]]:
    """`count` busy loops, each a session of its own (as another user's process would be), for at most
    `seconds` and no longer than this process, killed when the block ends: other load the plan must
    account for."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN, str(seconds)], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield {p.pid for p in spinners}
    finally:
        for p in spinners:
            p.kill()
            p.wait(timeout=10)


def measure(
    hosts: int,
    epochs: int,
    link: Link | None,
    workdir: Path,
    timeout: float,
    costs: Costs,
    load_count: int = 0,
    fast_lane: bool = True,
    dtype: str = "float32",
    mixed: str = "none",
) -> dict[str, Any]:
    spec_path = workdir / f"hosts-{hosts}.yaml"
    spec_path.write_text(spec_for(hosts, epochs, fast_lane, dtype, mixed))
    run_dir = workdir / f"run-{hosts}"
    gt = load_yaml(spec_path.read_text())
    with simulated_hosts(hosts, link) as layout, other_load(load_count, timeout) as spinners:
        launch = LocalRun(gt, spec_path, run_dir, echo=False, overwrite=True, hosts=layout)
        samples: list[tuple[float, int]] = []
        peaks: dict[str, int] = {}
        others: list[float] = []
        cpu: list[tuple[float, int]] = []
        trainer_cpu: list[tuple[float, int]] = []
        stop = threading.Event()
        args = (layout, launch, samples, peaks, others, cpu, trainer_cpu, spinners, stop)
        poller = threading.Thread(target=_poll, args=args, daemon=True)
        poller.start()
        start, mine = time.monotonic(), time.process_time()
        try:
            result = _bounded(launch, timeout)
        finally:
            stop.set()
            poller.join(5)
        wall = time.monotonic() - start
        mine = (time.process_time() - mine) / wall  # this process (the launcher, the poller) competes too
    history = json.loads((run_dir / "progress-history.json").read_text())
    rates = [float(h["samplesPerSecond"]) for h in history[1:] if h.get("samplesPerSecond")]
    first, last = history[0], history[-2]
    steps = int(last["step"]) - int(first["step"])
    sent = _at(samples, _when(last)) - _at(samples, _when(first))
    used = _at(cpu, _when(last)) - _at(cpu, _when(first))
    by_trainers = _at(trainer_cpu, _when(last)) - _at(trainer_cpu, _when(first))
    config = next((run_dir / "partition").glob("*.json"))
    cfg = load_config(config)
    plan = capacity.make_plan(gt.spec, cfg, hosts)
    rate = capacity.bandwidth_bytes(link.rate) if link else None
    load = (statistics.mean(others) if others else costs.background) + mine
    step = planning.predicted(gt.spec, cfg, plan, dataclasses.replace(costs, background=load), rate)
    samples_per_second = statistics.median(rates) if rates else float("nan")
    shard_rss = max(v for k, v in peaks.items() if k.startswith("shard"))
    trainer_rss = max(v for k, v in peaks.items() if k.startswith("trainer"))
    return {
        "hosts": hosts,
        "samples_per_second": samples_per_second,
        "step_s": gt.spec.training.batch_size / samples_per_second,
        "predicted_step_s": step.seconds,
        "bound": step.bound,
        "background": load,
        "test_accuracy": float(result["test_accuracy"]),
        "bytes_per_step": sent / max(steps, 1),
        "predicted_bytes_per_step": plan.bytes_per_step,
        "shard_rss": shard_rss,
        "predicted_shard": max(r.total for r in plan.role("shard-")),
        "trainer_rss": trainer_rss,
        "predicted_trainer": max(r.total for r in plan.role("trainer-")),
        "steps": steps,
        "cpu_per_step": used / 1e6 / max(steps, 1),
        "predicted_cpu_per_step": step.parts.get("cpu total", 0.0),
        "trainer_cpu_per_step": by_trainers / 1e6 / max(steps, 1),
        "predicted_trainer_cpu_per_step": step.parts.get("cpu trainers", 0.0),
        "stages": _stages(run_dir),
        "predicted_stages": {
            k: v
            for k, v in step.parts.items()
            if k in ("sample", "fetch", "pull", "push", "forward_backward", "allreduce")
        },
        "wall_s": wall,
    }


def _poll(
    layout: HostLayout,
    launch: LocalRun,
    samples: list[tuple[float, int]],
    peaks: dict[str, int],
    others: list[float],
    cpu: list[tuple[float, int]],
    trainer_cpu: list[tuple[float, int]],
    spinners: set[int],
    stop: threading.Event,
) -> None:
    """Every 0.2 s until `stop`: (Unix time, bytes every host has sent so far), each process' peak
    RSS (`peaks`, by its name: shard-0, trainer-1, ...; a trainer's without the shard servers' shared
    memory it reads), and the other load's runnable threads (`others`: the machine's, less this
    process and its children), and the CPU microseconds the run's processes have used so far (`cpu`;
    its trainers', `trainer_cpu`)."""
    while not stop.wait(0.2):
        samples.append((time.time(), sum(sent for sent, _ in link_bytes(layout).values())))
        with contextlib.suppress(psutil.Error, OSError):
            ours = {c.pid for c in psutil.Process().children(recursive=True)} - spinners
            others.append(runnable_others(ours))
        used = {"shard": 0.0, "trainer": 0.0}
        for child in [*launch.servers, *launch.trainers]:
            with contextlib.suppress(psutil.Error, OSError):
                role = "trainer" if child.plan.name.startswith("trainer") else "shard"
                used[role] += sum(psutil.Process(child.proc.pid).cpu_times()[:2])
        cpu.append((time.time(), int(sum(used.values()) * 1e6)))
        trainer_cpu.append((time.time(), int(used["trainer"] * 1e6)))
        for child in [*launch.servers, *launch.trainers]:
            with contextlib.suppress(psutil.Error, OSError):
                if child.plan.name.startswith("trainer"):
                    rss = _rss_without_shm(child.proc.pid)
                else:
                    rss = psutil.Process(child.proc.pid).memory_info().rss
                peaks[child.plan.name] = max(peaks.get(child.plan.name, 0), rss)


def _rss_without_shm(pid: int) -> int:
    """Bytes of a process' RSS outside /dev/shm mappings (a trainer's view of its host's shard servers'
    tables, which their pods are charged for: a trainer pod maps none of them), both read in one pass
    over smaps: RSS and the shm part read apart can straddle a mapping's change."""
    total, shm_total, shm = 0, 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header: range perms ... [path]
                shm = "/dev/shm/" in line
            elif first == "Rss:":
                kib = int(line.split()[1]) * 1024
                total += kib
                shm_total += kib if shm else 0
    return total - shm_total


def _stages(run_dir: Path) -> str:
    """Trainer 0's per-step stage line of the last epoch before the last (its log)."""
    lines = [
        line for line in (run_dir / "logs" / "trainer-0.log").read_text().splitlines() if "per step:" in line
    ]
    return lines[-2].split("per step:", 1)[1].strip() if len(lines) > 1 else ""


def _when(entry: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(entry["updatedAt"]).timestamp()


def _at(samples: list[tuple[float, int]], t: float) -> int:
    """A running total (bytes sent, CPU microseconds) at time `t`: the last sample at or before it."""
    before = [b for when, b in samples if when <= t]
    return before[-1] if before else 0


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
    try:
        worker.join(timeout)
    except KeyboardInterrupt as exc:  # Ctrl-C, or a kill (stop_on_signals): the run's processes go first
        launch.cancel(str(exc) or "interrupted (Ctrl-C)")  # stop_all from here: taken for failures
        worker.join(60)
        raise
    if worker.is_alive():
        launch.cancel(f"the run took over {timeout:.0f} s")
        worker.join(60)
        raise TimeoutError(f"the run took over {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--epochs", type=int, default=4, help="at least 3: bytes are counted over epochs 2..E-1")
    ap.add_argument("--rate", default="1gbit", help="each host's link, each way (tc units); 'none': unshaped")
    ap.add_argument("--delay", default=None, help="one-way delay (tc netem; this VM's kernel has none)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--other-load", type=int, default=0, help="busy loops beside each run (other users)")
    side_by_side = [  # each: one run per value given, side by side
        ("--fast-lane", ["on", "off"], "the shard servers' fast lane (shardServers.fastLane)"),
        ("--dtype", ["float32", "float16", "bfloat16"], "the node table's rows (embeddings[].dtype)"),
        ("--mixed-precision", ["none", "bfloat16"], "the model's products (training.mixedPrecision)"),
    ]
    for flag, choices, what in side_by_side:
        ap.add_argument(flag, nargs="+", choices=choices, default=choices[:1], help=f"{what}: one run each")
    args = ap.parse_args()
    if min(args.hosts) < 1 or args.epochs < 3:
        print("bench/hosts.py: --hosts: each at least 1; --epochs: at least 3", file=sys.stderr)
        return 1
    try:  # read by the plan's prediction after each run: a typo is said now, not after the calibration
        if args.rate != "none":
            capacity.bandwidth_bytes(args.rate)
    except ValueError:
        print(
            f"bench/hosts.py: --rate {args.rate!r} is not a rate such as '1gbit' or '100mbit'",
            file=sys.stderr,
        )
        return 1
    for flag, _, _ in side_by_side:  # a value given twice is one run
        name = flag.removeprefix("--").replace("-", "_")
        setattr(args, name, list(dict.fromkeys(getattr(args, name))))
    if os.geteuid() != 0:
        print("bench/hosts.py: needs root (network namespaces, tc)", file=sys.stderr)
        return 1
    link = None if args.rate == "none" else Link(args.rate, args.delay)
    stop_on_signals()  # a kill unwinds as Ctrl-C does: the hosts, the run's processes and the temp dir go
    print(
        f"# bench/hosts.py, {time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores, "
        f"WordNet GraphSAGE, {args.epochs} epochs, link {link or 'unshaped'}"
    )
    cols = [
        "hosts (= shards = trainers)",
        "fast lane",
        "table",
        "samples/s",
        "step ms (plan)",
        "error",
        "set by",
        "other load",
    ]
    cols += ["test accuracy", "bytes sent per step (plan)", "shard peak RSS (plan)"]
    cols += ["trainer peak RSS without shm (plan)", "CPU ms per step (plan)", "steps counted", "wall s"]
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp:
        costs_of = {mp: costs_here(Path(tmp), mp) for mp in args.mixed_precision}
        for mp, c in costs_of.items():
            print(f"# calibrated ({mp}): {json.dumps(c.to_dict())}", flush=True)
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        runs = [
            (n, lane, d, mp)
            for n in args.hosts
            for lane in args.fast_lane
            for d in args.dtype
            for mp in args.mixed_precision
        ]
        for n, lane, dtype, mp in runs:
            on, costs = lane == "on", costs_of[mp]
            m = measure(n, args.epochs, link, Path(tmp), args.timeout, costs, args.other_load, on, dtype, mp)
            table = dtype if mp == "none" else f"{dtype}, {mp} products"
            mib = 2**20
            error = m["predicted_step_s"] / m["step_s"] - 1
            print(
                f"| {n} | {lane} | {table} | {m['samples_per_second']:,.0f} | {1000 * m['step_s']:,.0f} "
                f"({1000 * m['predicted_step_s']:,.0f}) | {100 * error:+.0f} % | {m['bound']} | "
                f"{m['background']:.1f} | {m['test_accuracy']:.4f} | "
                f"{m['bytes_per_step'] / 1e6:.2f} MB ({m['predicted_bytes_per_step'] / 1e6:.2f}) | "
                f"{m['shard_rss'] / mib:,.0f} MiB ({m['predicted_shard'] / mib:,.0f}) | "
                f"{m['trainer_rss'] / mib:,.0f} MiB ({m['predicted_trainer'] / mib:,.0f}) | "
                f"{1000 * m['cpu_per_step']:,.0f} ({1000 * m['predicted_cpu_per_step']:,.0f}) | "
                f"{m['steps']} | {m['wall_s']:.0f} |",
                flush=True,
            )
            print(
                f"#   {n} hosts, fast lane {lane}: trainers' CPU ms per step "
                f"{1000 * m['trainer_cpu_per_step']:,.0f} "
                f"(plan {1000 * m['predicted_trainer_cpu_per_step']:,.0f}); "
                f"trainer 0's stages: {m['stages']}; "
                "plan's wall ms: "
                + ", ".join(f"{k} {1000 * v:.1f}" for k, v in m["predicted_stages"].items()),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # its hosts, processes and temp dir are gone by now
        print(f"bench/hosts.py: stopped ({exc or 'interrupted'})", file=sys.stderr)
        sys.exit(130)
    except (GraphtrainError, SpecError) as exc:  # a bad --rate or --delay (tc refused it), and the like
        print(f"bench/hosts.py: {exc}", file=sys.stderr)
        sys.exit(1)
