"""/history under concurrent clients: the GETs and builds of cold histories (one per history however
many ask at once: api/sources/flights.py) and the bytes and answers/s of kept ones, gzipped or not
(api/encoding.py).

The API runs in this process (uvicorn on a thread, no authentication) over the cached Kubernetes
source's history path (Cache.history) with TRAININGS histories of 500 epochs (~98 KB of text, a 107 KB
answer); the API server's GET of a progress ConfigMap is simulated by `--get-ms` of sleep (no test API
server needed). The clients run in another process: one asyncio loop, `--clients` keep-alive HTTP/1.1
connections, each sending its next request when the last answer arrived.

- cold, same order: every client asks every history once, all in the same order (a dashboard opened by
  many at once: each history asked by all the clients together); cold, random order: each its own order.
- hot: every history kept; clients ask at random for `--seconds`, with and without Accept-Encoding: gzip.

`--source local`: the local source (api/sources/local.py) over a runs directory of TRAININGS runs, each
with its spec, status and a 500-epoch history file; it counts the history files read (and parsed) in
place of GETs (no `--get-ms`: a read is the file system's).

    python bench/api_history.py [--source cluster|local] [--clients 32] [--trainings 300] [--get-ms 10]
                                [--seconds 10]
                                [--middleware]   # Starlette's GZipMiddleware as well (an older checkout)

Run it with PYTHONPATH naming an older checkout's view (graphtrain/{api,contract,...} -> its folders) to
compare; it counts the GETs itself, so it needs nothing the older source lacks.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests/ (appended: an older checkout's graphtrain on PYTHONPATH goes first)

NAMESPACE = "bench"


# ------------------------------------------------------------------------------------------ clients


async def client(port: int, paths: list[str], gzip: bool, until: float | None, seed: int) -> dict:
    """Asks `paths` in order (until is None) or at random until `until`; counts answers and bytes."""
    rng = random.Random(seed)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    accept = "Accept-Encoding: gzip\r\n" if gzip else ""
    done = nbytes = errors = 0
    todo = iter(paths) if until is None else None
    while True:
        if todo is not None:
            path = next(todo, None)
            if path is None:
                break
        elif time.monotonic() >= until:  # type: ignore[operator]
            break
        else:
            path = rng.choice(paths)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{accept}\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await asyncio.wait_for(reader.readexactly(length), 60)
        errors += int(head.split(b" ", 2)[1]) != 200
        done, nbytes = done + 1, nbytes + length
    writer.close()
    return {"answers": done, "bytes": nbytes, "errors": errors}


async def clients(args: argparse.Namespace) -> dict:
    paths = json.loads(Path(args.paths).read_text())
    until = time.monotonic() + args.seconds if args.mode == "hot" else None
    orders = [
        paths if args.mode != "random" else random.Random(i).sample(paths, len(paths))
        for i in range(args.clients)
    ]
    start = time.perf_counter()
    got = await asyncio.gather(
        *(client(args.port, orders[i], args.gzip, until, i) for i in range(args.clients))
    )
    seconds = time.perf_counter() - start
    total = {k: sum(g[k] for g in got) for k in ("answers", "bytes", "errors")}
    return {**total, "seconds": seconds}


# ------------------------------------------------------------------------------------------ server


class Histories:
    """The StatusSource's /history as the cached Kubernetes source answers it, each GET counted."""

    def __init__(self, trainings: int, get_ms: float):
        from graphtrain.api.sources.cached import Cache, history_version
        from graphtrain.contract import reporting
        from tests.api.cluster import report

        self.cache = Cache({}, bound=10, max_age=1.0, period=1, patience=30.0)
        self.text = reporting.encode_history([report(e) for e in range(1, 501)])
        self.version = history_version(self.text)
        self.names = [f"train-{i:03d}" for i in range(trainings)]
        self.get_s, self.gets = get_ms / 1e3, collections.Counter()
        self._lock = threading.Lock()

    def history(self, namespace: str, name: str) -> bytes:
        def read() -> str:
            with self._lock:
                self.gets[name] += 1
            time.sleep(self.get_s)  # the API server's GET
            return self.text

        answer: bytes = self.cache.history((namespace, f"{name}-progress"), self.version, read)
        return answer

    def check(self) -> None:
        pass


class LocalHistories:
    """A LocalSource over `trainings` run directories under `root`, each history file read counted
    (local.read_regular wrapped: a name the older source has too)."""

    def __init__(self, trainings: int, root: Path):
        from graphtrain.api.sources import local
        from graphtrain.contract import reporting, rundir
        from tests.api.cluster import report
        from tests.api.test_local import write_run

        self.names = [f"train-{i:03d}" for i in range(trainings)]
        if not root.exists():
            text = reporting.encode_history([report(e) for e in range(1, 501)])
            for name in self.names:
                write_run(root / name, name, "Training", namespace=NAMESPACE)
                (root / name / rundir.HISTORY_FILE).write_text(text)
        self.source, self.gets = local.LocalSource(root), collections.Counter()
        self._lock = threading.Lock()
        read = getattr(local.read_regular, "uncounted", local.read_regular)

        def counted(path: Path) -> bytes:
            if path.name == rundir.HISTORY_FILE:
                with self._lock:
                    self.gets[path.parent.name] += 1
            return read(path)

        counted.uncounted = read  # type: ignore[attr-defined]
        local.read_regular = counted  # the newest source counts: the one being measured

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)


def run(source: Any, mode: str, gzip: bool, args: argparse.Namespace) -> dict:
    from graphtrain.api.app import create_app
    from graphtrain.api.server import BackgroundServer

    app: Any = create_app(source)  # type: ignore[arg-type]
    if args.middleware:
        from starlette.middleware.gzip import GZipMiddleware

        app.add_middleware(GZipMiddleware, minimum_size=1024)
    server = BackgroundServer(app, "127.0.0.1", 0).start()
    paths = Path(f"/tmp/bench-history-{server.port}.json")
    paths.write_text(json.dumps([f"/api/v1/trainings/{NAMESPACE}/{n}/history" for n in source.names]))
    try:
        cmd = [sys.executable, __file__, "--clients-only", "--port", str(server.port), "--paths", str(paths)]
        cmd += ["--mode", mode, "--clients", str(args.clients), "--seconds", str(args.seconds)]
        res = subprocess.run(
            cmd + (["--gzip"] if gzip else []), capture_output=True, text=True, timeout=600, check=True
        )
    finally:
        server.stop()
        paths.unlink()
    return json.loads(res.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", choices=("cluster", "local"), default="cluster")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--trainings", type=int, default=300)
    p.add_argument("--get-ms", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--middleware", action="store_true")
    p.add_argument("--clients-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--paths", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="same", help=argparse.SUPPRESS)
    p.add_argument("--gzip", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.clients_only:
        json.dump(asyncio.run(clients(args)), sys.stdout)
        return
    root = Path(f"/tmp/bench-history-runs-{args.trainings}")
    histories = (
        (lambda: LocalHistories(args.trainings, root))
        if args.source == "local"
        else (lambda: Histories(args.trainings, args.get_ms))
    )
    reads = "history files read" if args.source == "local" else "GETs"
    for mode in ("same", "random"):
        source = histories()
        got = run(source, mode, False, args)
        per = source.gets.values()
        print(
            f"cold, {mode} order: {got['answers']} answers ({got['errors']} errors) "
            f"in {got['seconds']:.2f} s = {got['answers'] / got['seconds']:.0f}/s; "
            f"{reads} {sum(per)} for {len(source.names)} histories "
            f"(per history: max {max(per)}, mean {sum(per) / len(source.names):.2f})"
        )
    source = histories()
    run(source, "same", False, argparse.Namespace(**{**vars(args), "clients": 1}))  # every history kept
    for gzip in (False, True):
        got = run(source, "hot", gzip, args)
        print(
            f"hot, {'gzip    ' if gzip else 'identity'}: {got['answers'] / got['seconds']:.0f} answers/s, "
            f"{got['bytes'] / max(got['answers'], 1) / 1e3:.1f} KB an answer ({got['errors']} errors)"
        )


if __name__ == "__main__":
    main()
