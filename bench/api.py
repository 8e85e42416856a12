"""REST status API under load: 100 concurrent clients for 30 s against 100 trainings, per source.

Sources: the local source over 100 run directories (the files `graphtrain run` writes, made from the
same models), and the Kubernetes source on the test API server (../shared/k8s-testenv, or
$GRAPHTRAIN_TEST_KUBECONFIG) holding 100 GraphTrainings with status, progress ConfigMaps, trainer pods
and events (tests/api/cluster.py), both direct (each request makes its own API calls) and from the
snapshot (cache_ttl 2 s: kept by watches since 2026-12-02, refreshed whole in the background before).

The API runs in this process (uvicorn on a thread, authentication on, as deployed); the clients run
in another process: one asyncio loop, 100 keep-alive HTTP/1.1 connections, each sending its next
request when the last answer arrived (closed loop, no think time). The mix per request: 20 % a list
page (limit 50), 40 % one training, 20 % its history, 20 % its events, each training at random.
Latency is from sending a request to reading its whole answer; an error is any answer but 200 or any
failed connection.

    python bench/api.py [--clients 100] [--seconds 30] [--trainings 100] [--only local,direct,snapshot]
                        [--namespaces default,bench]

--namespaces: the bench's token sees these namespaces only (`TOKEN namespaces=...`: the scoped path,
api/access.py); the trainings are in `bench` (Kubernetes) and `default` (local runs), so name those to
get the same answers as the unscoped token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "bench-token-0123456789abcdef"
NAMESPACE = "bench"


# ------------------------------------------------------------------------------------------ clients


async def client_loop(
    host: str, port: int, paths: list[str], until: float, out: list, seed: int, think: float
) -> None:
    rng = random.Random(seed)
    reader = writer = None
    if think:
        await asyncio.sleep(rng.random() * think)  # paced clients start spread over one period
    while time.monotonic() < until:
        path = rng.choice(paths)
        start = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            assert reader is not None
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await asyncio.wait_for(reader.readexactly(length), 30)
            if b"connection: close" in head.lower():
                writer.close()
                reader = writer = None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            status = 0
            if writer is not None:
                writer.close()
            reader = writer = None
        out.append((path.split("?")[0].rsplit("/", 1)[-1], time.perf_counter() - start, status))
        if think:
            await asyncio.sleep(think)
    if writer is not None:
        writer.close()


async def load(host: str, port: int, paths: list[str], clients: int, seconds: float, think: float) -> list:
    until = time.monotonic() + seconds
    out: list = []
    await asyncio.gather(*(client_loop(host, port, paths, until, out, i, think) for i in range(clients)))
    return out


def run_clients(args: argparse.Namespace) -> None:
    """The load generator's process: prints its samples as JSON."""
    paths = json.loads(Path(args.paths).read_text())
    samples = asyncio.run(load("127.0.0.1", args.port, paths, args.clients, args.seconds, args.think))
    json.dump(samples, sys.stdout)


def paths_for(names: list[tuple[str, str]]) -> list[str]:
    """The request mix: 20 % list, 40 % one training, 20 % history, 20 % events (weights by repetition)."""
    out = ["/api/v1/trainings?limit=50"] * len(names)
    for ns, name in names:
        one = f"/api/v1/trainings/{ns}/{name}"
        out += [one, one, f"{one}/history", f"{one}/events"]
    return out


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def measure(app, names: list[tuple[str, str]], clients: int, seconds: float, think: float) -> dict:
    from graphtrain.api.server import BackgroundServer

    server = BackgroundServer(app, "127.0.0.1", 0).start()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(paths_for(names), f)
        for path in ("/readyz", f"/api/v1/trainings/{names[0][0]}/{names[0][1]}"):  # warm: snapshot, caches
            subprocess.run(
                [
                    "curl",
                    "-sf",
                    "-o",
                    "/dev/null",
                    "-H",
                    f"Authorization: Bearer {TOKEN}",
                    f"http://127.0.0.1:{server.port}{path}",
                ],
                timeout=60,
                check=False,
            )
        cmd = [
            sys.executable,
            __file__,
            "--clients-only",
            "--port",
            str(server.port),
            "--paths",
            f.name,
            "--clients",
            str(clients),
            "--seconds",
            str(seconds),
            "--think",
            str(think),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120, check=True)
        samples = json.loads(res.stdout)
    finally:
        server.stop()
        os.unlink(f.name)
    latencies = [s[1] for s in samples]
    errors = [s for s in samples if s[2] != 200]
    kinds: dict[str, list[float]] = {}
    for kind, seconds_taken, _ in samples:
        key = kind if kind in ("history", "events") else ("list" if kind.startswith("trainings") else "one")
        kinds.setdefault(key, []).append(seconds_taken)
    return {
        "requests": len(samples),
        "rate": len(samples) / seconds,
        "p50": percentile(latencies, 0.5) * 1e3,
        "p99": percentile(latencies, 0.99) * 1e3,
        "errors": len(errors),
        "error_statuses": sorted({s[2] for s in errors}),
        "by_kind": {
            k: (percentile(v, 0.5) * 1e3, percentile(v, 0.99) * 1e3) for k, v in sorted(kinds.items())
        },
    }


# ------------------------------------------------------------------------------------------ sources


def local_runs(root: Path, count: int) -> list[tuple[str, str]]:
    """`count` run directories as `graphtrain run` leaves them mid-training."""
    from graphtrain.contract import reporting, rundir
    from graphtrain.contract.spec import (
        API_VERSION,
        KIND,
        GraphTrainingStatus,
        Phase,
        ShardState,
        ShardStatus,
    )
    from tests.api.cluster import report
    from tests.api.fake import SPEC

    names = []
    for i in range(count):
        name = f"run-{i:03d}"
        d = root / name
        (d / "trainers").mkdir(parents=True)
        doc = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "labels": {"i": str(i)}},
            "spec": SPEC,
        }
        (d / rundir.SPEC_FILE).write_text(json.dumps(doc))
        status = GraphTrainingStatus(
            phase=Phase.training,
            progress=report(5),
            shards=[ShardStatus(index=s, state=ShardState.ready) for s in range(2)],
            start_time="2025-01-02T03:04:05Z",
        )
        (d / rundir.STATUS_FILE).write_text(
            json.dumps(status.model_dump(by_alias=True, exclude_none=True, mode="json"))
        )
        (d / rundir.PROGRESS_FILE).write_text(reporting.encode(report(5)))
        (d / rundir.HISTORY_FILE).write_text(reporting.encode_history([report(e) for e in range(1, 51)]))
        for rank in range(2):
            (d / rundir.rank_file(rank)).write_text(reporting.encode(report(5, rank)))
        names.append(("default", name))
    return names


def cluster_trainings(kubeconfig: str, count: int):
    from tests.api import cluster

    api = cluster.client(kubeconfig)
    cluster.ensure_namespace(api, NAMESPACE)
    start = time.monotonic()
    for i in range(count):
        cluster.create_training(api, NAMESPACE, f"gt-{i:03d}", labels={"i": str(i)}, epochs_done=5)
    took = time.monotonic() - start
    print(f"[bench] {count} GraphTrainings (ConfigMap, 2 pods, 1 event each) in {took:.0f} s")
    return api, [(NAMESPACE, f"gt-{i:03d}") for i in range(count)]


COLUMNS = ("requests", 9), ("req/s", 6), ("p50 ms", 7), ("p99 ms", 7), ("errors", 7)
HEADER = f"{'source':36} " + " ".join(f"{n:>{w}}" for n, w in COLUMNS) + "  p50/p99 ms by kind"


def row(label: str, r: dict) -> str:
    kinds = ", ".join(f"{k} {a:.0f}/{b:.0f}" for k, (a, b) in r["by_kind"].items())
    errs = f"{r['errors']}" + (f" {r['error_statuses']}" if r["errors"] else "")
    numbers = f"{r['requests']:>9} {r['rate']:>6.0f} {r['p50']:>7.1f} {r['p99']:>7.1f}"
    return f"{label:36} {numbers} {errs:>7}  {kinds}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--trainings", type=int, default=100)
    parser.add_argument("--only", default="local,direct,snapshot")
    parser.add_argument(
        "--think", type=float, nargs="+", default=[0.0, 0.5], help="each client's pause between requests (s)"
    )
    parser.add_argument("--namespaces", help="the token sees these namespaces only (comma-separated)")
    parser.add_argument("--clients-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clients_only:
        args.think = args.think[0]
        run_clients(args)
        return

    from graphtrain.api.app import create_app
    from graphtrain.api.auth import TokenFile
    from graphtrain.api.settings import Settings

    only = set(args.only.split(","))
    print(
        f"{args.clients} clients x {args.seconds:g} s, {args.trainings} trainings, snapshot cache_ttl 2 s, "
        f"{platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}, token for "
        f"{'namespaces ' + args.namespaces if args.namespaces else 'every namespace'}\n{HEADER}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(TOKEN + (f" namespaces={args.namespaces}" if args.namespaces else "") + "\n")

        def settings() -> Settings:
            return Settings(tokens=TokenFile(tokens))

        if "local" in only:
            from graphtrain.api.sources.local import LocalSource

            names = local_runs(Path(tmp) / "runs", args.trainings)
            app = create_app(LocalSource(Path(tmp) / "runs"), settings())
            for think in args.think:
                result = measure(app, names, args.clients, args.seconds, think)
                print(row(f"local, think {think:g} s", result), flush=True)
        if only & {"direct", "snapshot"}:
            from graphtrain.api.sources.kubernetes import KubernetesSource
            from tests import k8s

            kubeconfig = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
            run = Path(tmp) / "apiserver"
            if not kubeconfig:
                kubeconfig = k8s.start(run, k8s.testenv_bin())
            try:
                k8s.install_crd(k8s.kubectl(kubeconfig))
                api, names = cluster_trainings(kubeconfig, args.trainings)
                for mode, ttl in (("direct", 0.0), ("snapshot", 2.0)):
                    if mode in only:
                        app = create_app(KubernetesSource(NAMESPACE, cache_ttl=ttl, client=api), settings())
                        for think in args.think:
                            label = f"kubernetes {mode}, think {think:g} s"
                            result = measure(app, names, args.clients, args.seconds, think)
                            print(row(label, result), flush=True)
            finally:
                if not os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG"):
                    k8s.stop(run)


if __name__ == "__main__":
    main()
