"""The local source on a real `graphtrain run` (2 shard servers x 2 trainers on the planted graph of
tests/runtime/launch/test_run.py), once for the module: `graphtrain run --api 0` serves the run while it
goes, and afterwards the source reads the finished run directory beside a decoy. Plus the source's own
rules on literal run directories: identity from the spec, files re-read when replaced, no path from a
request."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from graphtrain.api.sources.answers import ENTRY_BYTES
from graphtrain.api.sources.base import ListQuery, NotFound
from graphtrain.api.sources.local import FileCache, LocalSource
from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import API_VERSION, KIND
from tests.api.fake import epochs
from tests.runtime.launch.test_run import ONE_THREAD, graph_file, sage_spec  # noqa: F401 - graph_file: a fixture

CLI = [sys.executable, "-m", "graphtrain.cli"]
EPOCHS = 4


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - a loopback URL of the test's
        return json.loads(resp.read())


def poll(fn, what: str, proc: subprocess.Popen, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        assert proc.poll() is None, f"graphtrain run ended ({proc.returncode}) before {what}"
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout:g} s")


class Run:
    def __init__(self, root: Path, run_dir: Path, seen_live: dict):
        self.root, self.run_dir, self.seen_live = root, run_dir, seen_live


@pytest.fixture(scope="module")
def run(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:  # noqa: F811
    """One real run with --api 0; what its API answered while it trained; then the finished directory."""
    root = tmp_path_factory.mktemp("runs")
    run_dir = root / "planted"
    spec = root.parent / "planted.yaml"
    spec.write_text(yaml.safe_dump(sage_spec(graph_file, epochs=EPOCHS, batch=64)))
    out = root.parent / "run.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [*CLI, "run", str(spec), "--run-dir", str(run_dir), "--api", "0", "--api-no-auth"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=ONE_THREAD,
        )
    try:
        base = poll(
            lambda: (m := re.search(r"status API on (http://127\.0\.0\.1:\d+)", out.read_text())) and m[1],
            "the API's address",
            proc,
            timeout=60,
        )
        one = f"{base}/api/v1/trainings/default/planted"
        training = poll(
            lambda: (
                (t := get(one))["status"]["phase"] == "Training" and t["trainers"][0]["lastHeartbeat"] and t
            ),
            "a training trainer 0 reported on",
            proc,
        )
        targets = json.loads((run_dir / "prometheus" / "targets.json").read_text())
        seen = {
            "training": training,
            "list": get(f"{base}/api/v1/trainings"),
            "base": base,
            "targets": targets,
        }
        assert proc.wait(timeout=240) == 0, out.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    (root / "decoy").mkdir()  # no status, no spec: not a run
    (root / "decoy" / "notes.txt").write_text("nothing")
    yield Run(root, run_dir, seen)


def test_api_serves_the_run_while_it_trains(run: Run) -> None:
    live = run.seen_live["training"]
    assert live["metadata"]["namespace"] == "default" and live["metadata"]["name"] == "planted"
    assert live["spec"]["trainers"] == 2 and live["spec"]["partitions"] == 2
    assert live["spec"]["embeddings"] == [
        {"name": "node", "dim": 8, "optimizer": "adam", "sharding": "server"}
    ]
    assert [(s["index"], s["state"]) for s in live["status"]["shards"]] == [(0, "Ready"), (1, "Ready")]
    assert live["status"]["partition"]["parts"] == 2
    assert live["trainers"][0]["state"] == "Running" and live["trainers"][0]["progress"]["epochs"] == EPOCHS
    listed = run.seen_live["list"]["items"]
    assert [(i["metadata"]["name"], i["phase"]) for i in listed] == [("planted", "Training")]


def test_the_api_is_a_scrape_target_of_the_run(run: Run) -> None:
    port = run.seen_live["base"].rsplit(":", 1)[1]
    api = [t for t in run.seen_live["targets"] if t["labels"]["job"] == "graphtrain-api"]
    assert [(t["targets"], t["labels"]["training"]) for t in api] == [([f"127.0.0.1:{port}"], "planted")]


def test_api_stops_with_the_run(run: Run) -> None:
    with pytest.raises(OSError):
        get(run.seen_live["base"] + "/healthz")


def test_finished_run_from_the_runs_directory(run: Run) -> None:
    client = TestClient(create_app(LocalSource(run.root), Settings()))
    listed = client.get("/api/v1/trainings").json()["items"]
    assert [(i["metadata"]["name"], i["phase"]) for i in listed] == [("planted", "Succeeded")]
    one = client.get("/api/v1/trainings/default/planted").json()
    assert one["status"]["progress"]["epoch"] == EPOCHS
    assert [t["state"] for t in one["trainers"]] == ["Succeeded", "Succeeded"]
    reasons = [e["reason"] for e in client.get("/api/v1/trainings/default/planted/events").json()["items"]]
    assert "Succeeded" in {c["type"] for c in one["status"]["conditions"]}
    assert sorted(reasons) == sorted(c["reason"] for c in one["status"]["conditions"])  # one per condition
    history = client.get("/api/v1/trainings/default/planted/history").json()["items"]
    written = reporting.decode_history((run.run_dir / rundir.HISTORY_FILE).read_bytes())
    assert [h["epoch"] for h in history] == [p.epoch for p in written] == list(range(1, EPOCHS + 1))
    assert client.get("/api/v1/trainings/default/decoy").status_code == 404
    assert client.get("/api/v1/trainings/default/%2E%2E").status_code == 422


def test_a_request_never_names_a_path(run: Run) -> None:
    source = LocalSource(run.root)
    for name in ("..", "../planted", "planted/../planted", "/etc", "decoy"):
        with pytest.raises(NotFound):
            source.get_training("default", name)
    assert source.get_training("default", "planted").metadata.name == "planted"


def write_run(path: Path, name: str, phase: str, namespace: str | None = None) -> None:
    path.mkdir(parents=True)
    doc = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": {
            "graph": {"dataset": "wordnet"},
            "embeddings": [{"name": "n", "dim": 4}],
            "model": {"nodeEmbedding": "n"},
        },
    }
    (path / rundir.SPEC_FILE).write_text(json.dumps(doc))
    (path / rundir.STATUS_FILE).write_text(json.dumps({"phase": phase}))


def test_identity_comes_from_the_spec_and_replacements_are_seen(tmp_path: Path) -> None:
    write_run(tmp_path / "dir-a", "alpha", "Training", namespace="team")
    write_run(tmp_path / "dir-b", "beta", "Pending")
    (tmp_path / "dir-c").mkdir()
    (tmp_path / "dir-c" / rundir.STATUS_FILE).write_text("{not json")  # a status mid-write: Pending
    source = LocalSource(tmp_path)
    page = source.list_trainings(ListQuery())
    assert [(s.metadata.namespace, s.metadata.name, s.phase) for s in page.items] == [
        ("default", "beta", "Pending"),
        ("default", "dir-c", "Pending"),
        ("team", "alpha", "Training"),
    ]
    replacement = tmp_path / "dir-a" / "status.new"
    replacement.write_text(json.dumps({"phase": "Succeeded"}))
    replacement.replace(tmp_path / "dir-a" / rundir.STATUS_FILE)  # the launcher's atomic replace
    assert source.get_training("team", "alpha").status.phase == "Succeeded"
    assert epochs(source.history("team", "alpha")) == []


def test_hostile_files_in_a_run_directory_cost_that_run_only(tmp_path: Path) -> None:
    """A status nested deeper than Python recurses (RecursionError: every list a 500, and never
    cached), a FIFO (a read that blocks every request behind it, the probes' too), a link to a file
    elsewhere, a history or heartbeat that is a directory: each reads as absent, the others are served."""
    root = tmp_path / "runs"
    write_run(root / "good", "good", "Training")
    (root / "good" / rundir.HISTORY_FILE).write_text("[" * 200_000 + "]" * 200_000)
    write_run(root / "deep", "deep", "Training")
    (root / "deep" / rundir.STATUS_FILE).write_text("[" * 200_000 + "]" * 200_000)
    write_run(root / "fifo", "fifo", "Training")
    (root / "fifo" / rundir.STATUS_FILE).unlink()
    os.mkfifo(root / "fifo" / rundir.STATUS_FILE)
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"phase": "Failed"}))
    write_run(root / "link", "link", "Training")
    (root / "link" / rundir.STATUS_FILE).unlink()
    (root / "link" / rundir.STATUS_FILE).symlink_to(secret)
    (root / "good" / "trainers" / "rank-0.json").mkdir(parents=True)
    (root / "Bad_Dir").mkdir()  # no spec, and named like no training: listed, it could not be fetched
    (root / "Bad_Dir" / rundir.STATUS_FILE).write_text(json.dumps({"phase": "Training"}))
    client = TestClient(create_app(LocalSource(root), Settings()))
    listed = client.get("/api/v1/trainings")
    assert listed.status_code == 200, listed.text
    phases = {i["metadata"]["name"]: i["phase"] for i in listed.json()["items"]}
    assert phases == {"good": "Training", "deep": "Pending", "fifo": "Pending", "link": "Pending"}
    assert client.get("/api/v1/trainings/default/good/history").json()["items"] == []
    assert client.get("/api/v1/trainings/default/good").status_code == 200
    assert client.get("/healthz").status_code == 200


def test_the_parsed_files_kept_are_bounded_in_bytes_too(tmp_path: Path) -> None:
    """Counted only, 8192 histories of up to 16 MB each could be kept (a runs directory anyone may write
    runs into): the files' bytes are bounded too, the least recently read dropped, each read again."""
    files = FileCache(entries=100, max_bytes=3 * (1000 + ENTRY_BYTES))
    paths = [tmp_path / f"history-{i}.json" for i in range(5)]
    for i, path in enumerate(paths):
        path.write_bytes(bytes([65 + i]) * 1000)
    for path in paths:
        files.load(path, bytes)
        assert files.nbytes <= files.max_bytes
    assert files.nbytes == 3 * (1000 + ENTRY_BYTES)  # the last three
    assert files.load(paths[0], bytes) == paths[0].read_bytes()  # read again after it was dropped


def test_concurrent_misses_of_one_file_version_read_it_once(tmp_path: Path) -> None:
    """32 clients opening 300 cold histories in the same order read 1,333 files, up to 16 per history:
    each miss read and parsed the file again. Now the callers that come while one reads it wait for it."""
    files, path, callers = FileCache(), tmp_path / "history.json", 8
    path.write_bytes(b"[]")
    parsed, release = [], threading.Event()

    def parse(data: bytes) -> bytes:
        parsed.append(data)
        release.wait(10)
        return data

    threads = [
        threading.Thread(target=lambda: results.append(files.load(path, parse))) for _ in range(callers)
    ]
    results: list[bytes | None] = []
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(parsed) < callers and time.monotonic() < deadline:  # all in parse, or one and its waiters
        if len(parsed) == 1 and getattr(files, "reads", None) and files.reads.waiting == callers - 1:
            break
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(10)
    assert results == [b"[]"] * callers and len(parsed) == 1
    path.write_bytes(b"[1]")  # a new version: read again, then kept
    assert files.load(path, parse) == b"[1]" == files.load(path, parse) and len(parsed) == 2
