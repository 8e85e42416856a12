"""Operator benchmark against a real API server (../shared/k8s-testenv, or $GRAPHTRAIN_TEST_KUBECONFIG).

1. Latency at 100 trainings: GraphTrainings created one at a time (the earlier ones stay, so the
   operator has 1..N trainings to look after, each reconciled by the timer too); for each, the time
   from the create call until its status says Partitioning: the first reconcile created its 8
   Partitioning-phase children (ConfigMaps, Secret, RBAC, claim, partition Job) and wrote the
   status. p50 / p95 / p99 (nearest rank), seen through a watch (no polling load).
2. Burst: 1,000 GraphTrainings created at once (4 client threads); this script plays the Job
   controller (marks every partition Job complete as soon as its watch shows it) and waits until all
   reach Starting (their shard StatefulSet and its Service, NetworkPolicy, PDB created). Reports the
   time until all are Starting, each training's create -> Starting p50 / p95 / p99, trainings that
   never got there, and a final count of every child each one should have.
3. Tick (--tick N, e.g. 300): N GraphTrainings brought to Starting as in 2, then --periods quiet timer
   periods: per tick (the operator's periodic reconcile of every training, handlers.tick()), its wall
   time (the first to the last API request of the tick's cluster in the API server's audit log), its
   API calls by verb and resource, and the operator's CPU seconds; the operator's RSS after. Only on
   the test server this script starts (its audit log); nothing else talks to it meanwhile.
4. Deletion (unless --skip-delete): all deleted at once (the API server has no garbage collector: the
   operator deletes the children when it sees each training go); the time until every GraphTraining
   is gone, and every child of every kind left behind (none but the data claims, kept by
   storage.whenDeleted: Retain).

Errors and throttling are counted throughout: the operator's graphtrain_operator_api_errors_total
and reconciles by result (its /metrics), its log's error lines, kopf retries ("failed temporarily")
and every 429 / "Too Many Requests" it logged, and this script's own failed calls. CPU seconds of the
operator, the API server and etcd are reported per phase (where the time goes), with the load average.

The operator runs as `graphtrain operator` in its own process, as in a pod.

    python bench/operator_scale.py [--latency 100] [--burst 1000] [--skip-delete] [--tick 300]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.dynamic import DynamicClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from graphtrain.operator.k8s import CHILD_KINDS  # noqa: E402
from tests import k8s  # noqa: E402 - the test server and its stand-ins, as the tests start them

GROUP, VERSION, PLURAL = "graphtrain.io", "v1alpha1", "graphtrainings"
TIMER = 5  # the operator's timer period, s
WORKERS = 4  # the operator's reconcile threads (its default)
AUDIT_POLICY = {  # one event per request, as it arrives (tests/chart/test_rbac.py's)
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
    "rules": [{"level": "Metadata"}],
}
CHILDREN = [
    ("v1", "ConfigMap", "config"),
    ("v1", "ConfigMap", "progress"),
    ("v1", "Secret", "token"),
    ("v1", "ServiceAccount", "trainer"),
    ("rbac.authorization.k8s.io/v1", "Role", "trainer"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "trainer"),
    ("v1", "PersistentVolumeClaim", "data"),
    ("batch/v1", "Job", "partition"),
]
STARTING_CHILDREN = CHILDREN + [
    ("v1", "Service", "shards"),
    ("networking.k8s.io/v1", "NetworkPolicy", "shards"),
    ("apps/v1", "StatefulSet", "shards"),
]


def body(name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GraphTraining",
        "metadata": {"name": name},
        "spec": {
            "graph": {"dataset": "wordnet"},
            "partition": {"parts": 2},
            "embeddings": [{"name": "node", "dim": 16}],
            "model": {"nodeEmbedding": "node", "featureProjection": 64},
            "trainers": {"replicas": 2},
        },
    }


def quantiles(xs: list[float]) -> str:
    """p50 / p95 / p99 (nearest rank) and max, in ms."""
    s = sorted(xs)

    def q(p: float) -> float:
        return s[max(0, math.ceil(p * len(s) - 1e-9) - 1)]

    return (
        f"p50 {q(0.50) * 1000:.0f} ms, p95 {q(0.95) * 1000:.0f} ms, p99 {q(0.99) * 1000:.0f} ms, "
        f"max {s[-1] * 1000:.0f} ms (n={len(s)})"
    )


ALL_KINDS = CHILD_KINDS  # every kind the operator makes


def names_by_kind(dyn: DynamicClient, ns: str) -> dict[str, set[str]]:
    """Names of every labelled child present, by kind (one list per kind)."""
    out: dict[str, set[str]] = {}
    for api, kind in ALL_KINDS:
        res = dyn.resources.get(api_version=api, kind=kind)
        items = res.get(namespace=ns, label_selector="graphtrain.io/training").items
        out[kind] = {i.metadata.name for i in items}
    return out


def missing_children(dyn: DynamicClient, ns: str, names: set[str], wanted: list) -> list[str]:
    have = names_by_kind(dyn, ns)
    return [f"{kind}/{n}-{s}" for n in sorted(names) for _, kind, s in wanted if f"{n}-{s}" not in have[kind]]


class PhaseWatch:
    """A watch on the GraphTrainings of a namespace, on its own thread: when each first showed each
    phase (perf_counter). Re-watches from the last resourceVersion; stops at stop() or its deadline."""

    def __init__(self, ns: str, deadline_s: float):
        self.ns, self.seen, self.cond = ns, {}, threading.Condition()
        self.deadline = time.perf_counter() + deadline_s
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _see(self, obj: dict) -> None:
        phase = (obj.get("status") or {}).get("phase")
        if phase:
            with self.cond:
                self.seen.setdefault((obj["metadata"]["name"], phase), time.perf_counter())
                self.cond.notify_all()

    def _list(self, api: Any) -> str:
        """What the list shows (objects made before the watch began count too); its version."""
        listed = api.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        for obj in listed["items"]:
            self._see(obj)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        api = kubernetes.client.CustomObjectsApi()
        rv = self._list(api)
        while not self._stop.is_set() and time.perf_counter() < self.deadline:
            w = kubernetes.watch.Watch()
            try:
                for ev in w.stream(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.ns,
                    PLURAL,
                    resource_version=rv,
                    timeout_seconds=5,
                ):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    self._see(obj)
                    if self._stop.is_set():
                        break
            except kubernetes.client.ApiException as exc:
                if exc.status != 410:
                    raise
                rv = self._list(api)

    def wait(self, pred: Callable[[], bool], timeout: float) -> bool:
        end = time.perf_counter() + timeout
        with self.cond:
            while not pred():
                left = end - time.perf_counter()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)


class JobController:
    """Plays the Job controller for the partition Jobs of a namespace: each completes as soon as a
    watch shows it (status patched by a small pool). Counts the calls it could not make."""

    def __init__(self, dyn: DynamicClient, ns: str, deadline_s: float):
        self.dyn, self.ns, self.errors, self.done = dyn, ns, 0, set()
        self.deadline = time.perf_counter() + deadline_s
        self._stop = threading.Event()
        self.pool = ThreadPoolExecutor(2)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _complete(self, name: str) -> None:
        jobs = self.dyn.resources.get(api_version="batch/v1", kind="Job")
        try:
            jobs.status.patch(
                body={"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
                name=name,
                namespace=self.ns,
                content_type="application/merge-patch+json",
            )
        except (kubernetes.client.ApiException, OSError):
            self.errors += 1
            self.done.discard(name)  # the next list tries again

    def _see(self, job: dict) -> None:
        name = job["metadata"]["name"]
        if name not in self.done and not (job.get("status") or {}).get("succeeded"):
            self.done.add(name)
            self.pool.submit(self._complete, name)

    def _run(self) -> None:
        batch = kubernetes.client.BatchV1Api()
        while not self._stop.is_set() and time.perf_counter() < self.deadline:
            listed = json.loads(batch.list_namespaced_job(self.ns, _preload_content=False).data)
            for job in listed["items"]:  # Jobs made before the watch (re)started count too
                self._see(job)
            rv = listed["metadata"]["resourceVersion"]
            w = kubernetes.watch.Watch()  # then each change, until the server ends this watch
            for ev in w.stream(batch.list_namespaced_job, self.ns, resource_version=rv, timeout_seconds=10):
                if ev["type"] != "DELETED":
                    self._see(ev["raw_object"])
                if self._stop.is_set():
                    break

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        self.pool.shutdown(wait=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its reaped children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU seconds of the operator, the API server and etcd between two marks."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.last = self.now()

    def now(self) -> dict[str, float]:
        return {k: cpu_seconds(p) for k, p in self.pids.items()}

    def lap(self) -> str:
        now = self.now()
        said = ", ".join(f"{k} {now[k] - self.last[k]:.1f}" for k in self.pids)
        self.last = now
        return f"CPU s: {said}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def scrape(url: str | None) -> dict[str, float]:
    """The operator's counters: reconciles by result, API errors by verb (sample line -> value)."""
    if not url:
        return {}
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith(
            (
                "graphtrain_operator_api_errors_total",
                "graphtrain_operator_reconciles_total",
                "graphtrain_operator_reconcile_seconds_sum",
            )
        ):
            sample, value = line.rsplit(" ", 1)
            out[sample] = float(value)
    return out


def log_counts(path: Path, start: int = 0) -> dict[str, int]:
    """Error lines, kopf's retries and 429s in the operator's log from byte `start` on."""
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return {
        "error lines": len(re.findall(r"\bERROR\b|Traceback", text)),
        "kopf retries": text.count("failed temporarily") + text.count("will retry"),
        "429s": len(re.findall(r"TooManyRequests|Too Many Requests|[ (]429[ )]", text)),
    }


def errors_said(before: dict[str, float], after: dict[str, float]) -> str:
    moved = {k: after[k] - before.get(k, 0.0) for k in after if after[k] - before.get(k, 0.0)}
    delta = {k: v for k, v in moved.items() if "_seconds_" not in k}
    return ", ".join(f"{k} +{v:.0f}" for k, v in sorted(delta.items())) or "no counter moved"


def latency(gtr: Any, ns: str, n: int) -> list[float]:
    """Create -> Partitioning, one at a time."""
    watch = PhaseWatch(ns, deadline_s=60 + 30 * n)
    out = []
    try:
        for i in range(n):
            name = f"l{i}"
            t0 = time.perf_counter()
            gtr.create(body=body(name), namespace=ns)
            if not watch.wait(lambda name=name: (name, "Partitioning") in watch.seen, timeout=60):
                raise SystemExit(f"{name} not Partitioning after 60 s")
            out.append(watch.seen[(name, "Partitioning")] - t0)
    finally:
        watch.stop()
    return out


def burst(
    dyn: DynamicClient, gtr: Any, ns: str, n: int, deadline: float, prefix: str = "b"
) -> tuple[dict, float, int, float]:
    """Create n at once; (name -> seconds to Starting, seconds until all, create errors, create time)."""
    names = [f"{prefix}{i}" for i in range(n)]
    watch = PhaseWatch(ns, deadline_s=deadline + 60)
    jobs = JobController(dyn, ns, deadline_s=deadline + 60)
    created: dict[str, float] = {}
    failed = 0

    def make(name: str) -> None:
        nonlocal failed
        t = time.perf_counter()
        try:
            gtr.create(body=body(name), namespace=ns)
            created[name] = t
        except kubernetes.client.ApiException:
            failed += 1

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(make, names))
        create_s = time.perf_counter() - t0
        watch.wait(lambda: all((m, "Starting") in watch.seen for m in created), timeout=deadline)
        total = time.perf_counter() - t0
        seen = {m: watch.seen.get((m, "Starting")) for m in created}
        spans = {m: t - created[m] for m, t in seen.items() if t is not None}
    finally:
        watch.stop()
        jobs.stop()
    return spans, total, failed + jobs.errors, create_s


def deletion(kube: Any, dyn: DynamicClient, gtr: Any, ns: str) -> None:
    t0 = time.perf_counter()
    kube("delete", "gtr", "--all", "-n", ns, "--wait=false")  # one deletecollection request
    deadline = time.perf_counter() + 900
    while gtr.get(namespace=ns).items and time.perf_counter() < deadline:
        time.sleep(1)
    gone = time.perf_counter() - t0
    left_gtr = len(gtr.get(namespace=ns).items)
    time.sleep(10)  # two operator timer periods: a child made again after deletion would show
    left = [f"{k}/{n}" for k, ns_ in names_by_kind(dyn, ns).items() for n in ns_]
    kept = [c for c in left if c.startswith("PersistentVolumeClaim/") and c.endswith("-data")]
    left = [c for c in left if c not in kept]
    print(
        f"delete all at once: GraphTrainings gone after {gone:.1f} s ({left_gtr} left); 10 s later: "
        f"{len(kept)} data claims kept (storage.whenDeleted: Retain, the default), other children left: "
        f"{len(left)}{' ' + str(left[:10]) if left else ''}"
    )


def rss_mib(pid: int) -> float:
    """The process's resident set (VmRSS), MiB."""
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else float("nan")


def audit_events(path: Path, since: float) -> list[tuple[float, str]]:
    """(time received, "verb resource") of every request from `since` (epoch s) on but the API
    server's own, kubectl's and curl's (testenv.sh's probe): the operator's, in the quiet window."""
    out = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        agent = event.get("userAgent", "")
        if event["user"]["username"] == "system:apiserver" or agent.startswith(("kubectl/", "curl/")):
            continue
        at = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        ref = event.get("objectRef") or {}
        what = ref.get("resource", event["requestURI"].split("?")[0]) + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        if at >= since:
            out.append((at, f"{event['verb']} {what}"))
    return sorted(out)


def ticks(events: list[tuple[float, str]], gap: float = 1.0) -> list[list[tuple[float, str]]]:
    """The requests in clusters, each begun after `gap` s without one: a tick's reconciles each."""
    out: list[list[tuple[float, str]]] = []
    for event in events:
        if not out or event[0] - out[-1][-1][0] > gap:
            out.append([])
        out[-1].append(event)
    return out


def tick_phase(ns: str, n: int, periods: int, timer: float, op: int, audit: Path, url: str | None) -> None:
    """Quiet periods with n trainings Starting: each tick's wall time, API calls, the operator's CPU."""
    time.sleep(3 * timer)  # the burst's last reconciles and requeues done
    t0, cpu0, count0 = time.time(), cpu_seconds(op), scrape(url)
    time.sleep(periods * timer)
    cpu1, count1 = cpu_seconds(op), scrape(url)
    clusters = [c for c in ticks(audit_events(audit, t0)) if c[-1][0] < t0 + periods * timer - 1]
    print(f"tick, {n} trainings Starting, {len(clusters)} ticks in {periods} periods of {timer:.0f} s:")
    if not clusters:
        return
    walls = sorted(c[-1][0] - c[0][0] for c in clusters)
    calls = sorted(len(c) for c in clusters)
    by: dict[str, int] = {}
    for c in clusters:
        for _, what in c:
            by[what] = by.get(what, 0) + 1
    print(
        f"  wall per tick (first to last API request): median {walls[len(walls) // 2]:.2f} s, "
        f"max {walls[-1]:.2f} s; API calls per tick: median {calls[len(calls) // 2]}, max {calls[-1]}"
    )
    print(
        f"  API calls by kind over the {len(clusters)} ticks: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
    )
    spent = {k: count1.get(k, 0.0) - count0.get(k, 0.0) for k in count1 if "reconcile_seconds" in k}
    done = sum(v for k, v in count1.items() if "reconciles_total" in k) - sum(
        v for k, v in count0.items() if "reconciles_total" in k
    )
    summed = sum(spent.values())
    print(
        f"  reconciles {done:.0f} ({done / periods:.0f} a period), "
        f"{summed / max(done, 1) * 1000:.1f} ms each: "
        f"{summed / periods:.2f} s of reconcile time a period (the tick's wall, WORKERS of them at once: "
        f">= {summed / periods / WORKERS:.2f} s)"
    )
    print(
        f"  operator CPU per period {(cpu1 - cpu0) / periods:.2f} s; RSS {rss_mib(op):.0f} MiB; counters: "
        f"{errors_said(count0, count1)}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def metrics_url(log: Path, timeout: float = 60) -> str | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = re.search(r"metrics endpoint on (http://\S+)", log.read_text(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.2)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=int, default=100, help="trainings created one at a time")
    ap.add_argument("--burst", type=int, default=1000, help="trainings created at once")
    ap.add_argument("--deadline", type=float, default=900, help="seconds the burst may take")
    ap.add_argument("--skip-delete", action="store_true", help="leave out the deletion of the burst")
    ap.add_argument("--tick", type=int, default=0, help="trainings whose periodic tick is measured (0: none)")
    ap.add_argument("--periods", type=int, default=12, help="timer periods the tick is measured over")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gt-opbench-"))
    kubeconfig = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
    started = not kubeconfig
    audit = tmp / "audit.log"
    if not kubeconfig:  # the test server, started as the tests start it (with an audit log for --tick)
        policy = tmp / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        logged = ("--audit-policy-file", str(policy), "--audit-log-path", str(audit)) if a.tick else ()
        kubeconfig = k8s.start(tmp, k8s.testenv_bin(), logged)
    elif a.tick:
        raise SystemExit(
            "--tick needs the test server this script starts (its audit log): unset "
            "GRAPHTRAIN_TEST_KUBECONFIG"
        )
    env = {**os.environ, "KUBECONFIG": kubeconfig, "GRAPHTRAIN_OPERATOR_TIMER": str(TIMER)}
    kube = k8s.kubectl(kubeconfig)
    k8s.install_crd(kube)
    k8s.serve_stand_ins(kube, k8s.NETWORK_POLICY)  # the operator makes NetworkPolicies for shard servers
    log = tmp / "operator.log"
    op = subprocess.Popen(
        [sys.executable, "-m", "graphtrain.cli", "operator"]
        + ["--health-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"],
        env=env,
        stdout=open(log, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    print(f"operator log: {log}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        pids = {"operator": op.pid}
        if started:
            pids.update({p: int((tmp / f"{p}.pid").read_text()) for p in ("apiserver", "etcd")})
        url = metrics_url(log)
        kubernetes.config.load_kube_config(config_file=kubeconfig)
        dyn = DynamicClient(kubernetes.client.ApiClient())
        gtr = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="GraphTraining")
        core = kubernetes.client.CoreV1Api()
        for ns in ("lat", "burst", "tick"):
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        time.sleep(3)  # the operator's watches start
        cpu, counters, mark = Cpu(pids), scrape(url), log.stat().st_size
        print(f"  operator log while starting (before any training): {log_counts(log)}")

        if a.latency:
            lat = latency(gtr, "lat", a.latency)
            print(f"latency, {a.latency} trainings one at a time, create -> Partitioning: {quantiles(lat)}")
            gone = missing_children(dyn, "lat", {f"l{i}" for i in range(a.latency)}, CHILDREN)
            print(f"  children missing: {len(gone)} {gone[:5]}; {cpu.lap()}")
            now = scrape(url)
            print(f"  operator counters: {errors_said(counters, now)}; log: {log_counts(log, mark)}")
            counters, mark = now, log.stat().st_size

        if a.burst:
            spans, total, failed, create_s = burst(dyn, gtr, "burst", a.burst, a.deadline)
            names = {f"b{i}" for i in range(a.burst)}
            missed = sorted(names - spans.keys())
            print(
                f"burst: {a.burst} created in {create_s:.1f} s ({failed} failed calls of this script); "
                f"Starting: {len(spans)}/{a.burst} after {total:.1f} s; missed: {missed[:10] or 'none'}"
            )
            if spans:
                print(f"  create -> Starting: {quantiles(list(spans.values()))}")
            gone = missing_children(dyn, "burst", names, STARTING_CHILDREN)
            print(f"  children missing: {len(gone)} {gone[:5]}; {cpu.lap()}")
            now = scrape(url)
            print(f"  operator counters: {errors_said(counters, now)}; log: {log_counts(log, mark)}")
            counters, mark = now, log.stat().st_size
            if not a.skip_delete:
                deletion(kube, dyn, gtr, "burst")
                print(f"  {cpu.lap()}; log: {log_counts(log, mark)}")
        if a.tick:
            spans, total, failed, _ = burst(dyn, gtr, "tick", a.tick, a.deadline, prefix="t")
            print(
                f"tick: {len(spans)}/{a.tick} Starting after {total:.1f} s ({failed} failed calls); "
                f"{cpu.lap()}"
            )
            tick_phase("tick", a.tick, a.periods, TIMER, op.pid, audit, url)
    finally:
        try:
            op.terminate()
            op.wait(timeout=60)
        except subprocess.TimeoutExpired:  # main's operator, busy with 1,000 trainings, ignored SIGTERM
            print("the operator did not stop within 60 s of SIGTERM: killed")
            op.kill()
            op.wait(timeout=60)
        finally:
            if started:
                k8s.stop(tmp)


if __name__ == "__main__":
    main()
