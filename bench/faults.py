"""Network faults on simulated hosts (issue 47): WordNet GraphSAGE on 2 hosts (runtime/launch/hosts.py:
shard i and trainer i on host i, tcp between them, links shaped to 1 Gbit/s each way), run clean, with
packet loss on every link for the whole run, and with a partition between the two hosts in mid-epoch,
one after the other in one call.

The faults are iptables rules in the hosts' namespaces (HostLayout.lossy, HostLayout.cut): this VM's
kernel has no netem. A cut drops everything between the two hosts (trainer 0 and shard 0 on one,
trainer 1 and shard 1 on the other: each trainer loses half its shards and its peer), starting 3 s
after trainer 0's first epoch report, then heals. runPolicy.stallTimeoutSeconds is 10 (the least the
spec allows), so a stall that long shows as Stalled in status.json.

For each run: the test accuracy and its difference from the clean run, the wall time, the restarts
(0: no work lost, nothing resumed from a checkpoint), the Stalled transitions status.json showed, and
what the trainers' logs said of their waits (`[kvstore] waiting ...`, the longest `answered after`).
Root only. Every run is bounded by --timeout; the namespaces are removed however a run ends.

    sudo python bench/faults.py [--epochs 4] [--loss 0.01] [--cut 10] [--runs clean loss cut]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.launch import hosts
from graphtrain.runtime.launch.hosts import Link, simulated_hosts
from graphtrain.runtime.launch.local import LocalRun
from graphtrain.runtime.stopping import stop_on_signals

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hosts import spec_for  # noqa: E402 - bench/hosts.py, beside this file

HOSTS = 2


def spec_text(epochs: int) -> str:
    """bench/hosts.py's 2-host WordNet spec, Stalled after 10 s without progress."""
    doc = yaml.safe_load(spec_for(HOSTS, epochs))
    doc["spec"]["runPolicy"] = {"stallTimeoutSeconds": 10, "backoffLimit": 2}
    return yaml.safe_dump(doc)


def stalled(run_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):  # replaced while read: the next poll reads it
        return None
    return next((c for c in doc.get("conditions", []) if c["type"] == "Stalled"), None)


def measure(
    kind: str, epochs: int, loss: float, cut_s: float, workdir: Path, timeout: float
) -> dict[str, Any]:
    """One run with fault `kind` (clean, loss, cut): its figures."""
    spec_path = workdir / f"{kind}.yaml"
    spec_path.write_text(spec_text(epochs))
    run_dir = workdir / kind
    gt = load_yaml(spec_path.read_text())
    seen: list[tuple[float, str, str]] = []  # (seconds into the run, Stalled status, message)
    cut_at: list[float] = []
    with simulated_hosts(HOSTS, Link("1gbit")) as layout:
        if kind == "loss":
            hosts.apply([c for k in range(HOSTS) for c in layout.lossy(k, loss)])
        launch = LocalRun(gt, spec_path, run_dir, echo=False, overwrite=True, hosts=layout)
        box: dict[str, Any] = {}

        def go() -> None:
            try:
                box["result"] = launch.run()
            except BaseException as exc:  # noqa: BLE001 - reported below
                box["error"] = exc

        worker = threading.Thread(target=go, name="bench-faults-run")
        start = time.monotonic()
        worker.start()
        healed = kind != "cut"
        try:
            while worker.is_alive() and time.monotonic() - start < timeout:
                now = time.monotonic() - start
                c = stalled(run_dir)
                if c is not None and (not seen or seen[-1][1] != c["status"]):
                    seen.append((now, c["status"], c.get("message", "")))
                history = run_dir / "progress-history.json"
                if (
                    kind == "cut"
                    and not cut_at
                    and history.exists()
                    and json.loads(history.read_text() or "[]")
                ):
                    time.sleep(3.0)  # mid-epoch 2
                    hosts.apply(layout.cut(0, 1))
                    cut_at.append(time.monotonic() - start)
                if cut_at and not healed and time.monotonic() - start >= cut_at[0] + cut_s:
                    hosts.apply(layout.cut(0, 1, on=False))
                    healed = True
                time.sleep(0.2)
        except KeyboardInterrupt as exc:  # Ctrl-C, or a kill (stop_on_signals): the run's processes go first
            launch.cancel(str(exc) or "interrupted (Ctrl-C)")  # then the hosts, with simulated_hosts
            worker.join(60)
            raise
        if worker.is_alive():  # stopped in its own thread: stop_all from here was taken for a failure
            launch.cancel(f"{kind}: the run took over {timeout:.0f} s")
            worker.join(60)
            raise TimeoutError(f"{kind}: the run took over {timeout:.0f} s")
        wall = time.monotonic() - start
    if "error" in box:
        raise RuntimeError(f"{kind}: {box['error']}")
    doc = json.loads((run_dir / "status.json").read_text())
    logs = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("trainer-*.log")))
    waits = [float(x) for x in re.findall(r"\[kvstore\] answered after ([0-9.]+) s", logs)]
    return {
        "kind": kind,
        "test_accuracy": float(box["result"]["test_accuracy"]),
        "wall_s": wall,
        "restarts": int(doc.get("restarts", 0)),
        "phase": doc["phase"],
        "stalled": seen,
        "cut_at": cut_at[0] if cut_at else None,
        "waiting_lines": logs.count("[kvstore] waiting"),
        "longest_wait_s": max(waits, default=0.0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--loss", type=float, default=0.01, help="each packet's chance to be dropped, per host")
    ap.add_argument("--cut", type=float, default=10.0, help="seconds the two hosts are cut apart")
    ap.add_argument("--runs", nargs="+", choices=["clean", "loss", "cut"], default=["clean", "loss", "cut"])
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/faults.py: needs root (network namespaces, iptables)", file=sys.stderr)
        return 1
    stop_on_signals()  # a kill unwinds as Ctrl-C does: the run's processes, the hosts and the temp dir go
    print(
        f"# bench/faults.py, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} cores, "
        f"WordNet GraphSAGE on {HOSTS} hosts, {args.epochs} epochs, links 1gbit, loss {args.loss:g}, "
        f"cut {args.cut:g} s"
    )
    cols = ["run", "test accuracy", "vs clean", "wall s", "restarts", "Stalled (s into the run)"]
    cols += ["waits logged", "longest wait s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    clean = None
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        for kind in args.runs:
            m = measure(kind, args.epochs, args.loss, args.cut, Path(tmp), args.timeout)
            clean = m["test_accuracy"] if kind == "clean" else clean
            diff = "" if clean is None or kind == "clean" else f"{m['test_accuracy'] - clean:+.4f}"
            said = ", ".join(f"{s} at {t:.0f}" for t, s, _ in m["stalled"]) or "-"
            what = kind if m["cut_at"] is None else f"cut {args.cut:g} s at {m['cut_at']:.0f} s"
            print(
                f"| {what} | {m['test_accuracy']:.4f} | {diff} | {m['wall_s']:.0f} | {m['restarts']} | "
                f"{said} | {m['waiting_lines']} | {m['longest_wait_s']:.1f} |",
                flush=True,
            )
            for t, s, message in m["stalled"]:
                if s == "True":
                    print(f"#   {kind}: Stalled True at {t:.0f} s: {message}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # its hosts, processes and temp dir are gone by now
        print(f"bench/faults.py: stopped ({exc or 'interrupted'})", file=sys.stderr)
        sys.exit(130)
