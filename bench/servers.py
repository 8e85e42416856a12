"""Shard-server processes for the benchmarks (`python bench/<name>.py` puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def start_server(bind: str, token: str, root: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """A shard-server process (2 workers unless `extra` says otherwise) and its bound address; its log
    goes to <root>/server.log. It dies with the calling thread (PR_SET_PDEATHSIG): a benchmark that is
    killed or fails leaves no server behind holding its table."""
    from graphtrain.runtime.launch.processes import die_with_this_process

    env = {**os.environ, "GRAPHTRAIN_TOKEN": token, "GRAPHTRAIN_QUIET": "1"}
    workers = [] if "--workers" in extra else ["--workers", "2"]
    with open(os.path.join(root, "server.log"), "a") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "graphtrain.runtime.cli",
                "shard-server",
                "--bind",
                bind,
                "--checkpoint-root",
                root,
                *workers,
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            preexec_fn=die_with_this_process(),  # the child runs only a prctl call and getppid
        )
    line = json.loads(proc.stdout.readline())
    return proc, line["address"]
