"""What the REST API's cached Kubernetes source costs the API server and itself at scale: LIST pages,
WATCH requests and RSS while requests come, at N GraphTrainings.

`setup` starts the test API server (../shared/k8s-testenv; its kubeconfig path is printed) and makes
N GraphTrainings in 6 namespaces as the operator and trainers leave them (tests/api/cluster.py): status,
a progress ConfigMap with a 500-epoch history (~100 KB), two trainer pods, and events (EVENTS in all).
`poll` builds the source (cache_ttl 2 s, the default) over a client that counts every request by verb
and resource, and has 8 threads ask it for SECONDS: 20 % a list page, 40 % one training, 20 % its
history, 20 % its events (`--mix`), trainings at random (`--hot 12,80`: 80 % of asks on 12 of them, a
dashboard's pattern); `--changes` status patches and `--heartbeats` rank reports (into the progress
ConfigMaps, their histories unchanged) a second go on meanwhile. A history counts once its
answer's bytes are made (a source older than the answer-bytes interface: encoded as its route did). It
prints the counts, the RSS before and after, and the histories' answers kept. Run `poll` with
PYTHONPATH naming an older checkout's view (graphtrain/{api,contract,...} -> its folders) to compare.

    python bench/api_watch.py setup --trainings 300 --events 10000 --run /tmp/bench-apiserver
    python bench/api_watch.py poll --kubeconfig /tmp/bench-apiserver/kubeconfig --seconds 30
    python bench/api_watch.py stop --run /tmp/bench-apiserver
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests/ (appended: an older checkout's graphtrain on PYTHONPATH goes first)

NAMESPACES = [f"bench-w{i}" for i in range(6)]
KINDS = ["list", "one", "history", "events"]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def setup(args: argparse.Namespace) -> None:
    from graphtrain.contract.conditions import Severity
    from graphtrain.contract.spec import Phase
    from tests import k8s
    from tests.api import cluster

    kubeconfig = k8s.start(Path(args.run), k8s.testenv_bin())
    k8s.install_crd(k8s.kubectl(kubeconfig))
    api = cluster.client(kubeconfig)
    for ns in NAMESPACES:
        cluster.ensure_namespace(api, ns)
    start, made = time.monotonic(), []
    per = max(0, args.events // args.trainings - 1)  # create_training posts one
    for i in range(args.trainings):
        ns = NAMESPACES[i % len(NAMESPACES)]
        gt = cluster.create_training(api, ns, f"t-{i:04d}", Phase.training, epochs_done=500)
        for j in range(per):
            cluster.post_event(gt, Severity.normal, f"Step{j}", f"event {j} of t-{i:04d}")
        made.append(gt)
    print(f"made {args.trainings} trainings, {args.events} events in {time.monotonic() - start:.0f} s")
    print(f"KUBECONFIG={kubeconfig}")


def counting_client(kubeconfig: str, counts: collections.Counter) -> Any:
    """The API client, counting each request: (verb, resource); verb LIST, WATCH or GET."""
    import kubernetes

    kubernetes.config.load_kube_config(config_file=kubeconfig)
    lock = threading.Lock()

    class Counting(kubernetes.client.ApiClient):
        def call_api(self, method: str, url: str, *a: Any, **kw: Any) -> Any:
            where = urllib.parse.urlsplit(url)
            path = where.path.rstrip("/").split("/")
            kinds = ("graphtrainings", "configmaps", "pods", "events")
            collection = path[-1] in kinds
            verb = "WATCH" if "watch=true" in where.query.lower() else ("LIST" if collection else method)
            resource = next((p for p in reversed(path) if p in kinds), path[-1])
            with lock:
                counts[(verb, resource)] += 1
            return super().call_api(method, url, *a, **kw)

    return Counting()


def history_answer(got: Any) -> bytes:
    """/history's bytes: what the source answers, or (a source of decoded entries) what the route made."""
    if isinstance(got, bytes):
        return got
    from graphtrain.api import models
    from graphtrain.contract import reporting

    return models.History(items=got, limit=reporting.HISTORY_LIMIT).model_dump_json(by_alias=True).encode()


def poll(args: argparse.Namespace) -> None:
    import kubernetes

    from graphtrain.api.sources.base import ListQuery, SourceUnavailable
    from graphtrain.api.sources.kubernetes import KubernetesSource

    counts: collections.Counter = collections.Counter()
    client = counting_client(args.kubeconfig, counts)
    custom = kubernetes.client.CustomObjectsApi(client)
    listed = custom.list_cluster_custom_object("graphtrain.io", "v1alpha1", "graphtrainings")
    names = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed["items"]]
    counts.clear()
    rss0 = rss_mb()
    source = KubernetesSource(cache_ttl=args.cache_ttl, timeout=5.0, client=client)
    weights = [float(w) for w in args.mix.split(",")]
    hot_count, hot_share = (int(v) for v in args.hot.split(",")) if args.hot else (0, 0)
    hot = names[:hot_count]
    until = time.monotonic() + args.seconds
    answered, failed, peak = collections.Counter(), collections.Counter(), [rss0]

    def ask(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < until:
            ns, name = rng.choice(hot if hot and rng.random() * 100 < hot_share else names)
            kind = rng.choices(KINDS, weights)[0]
            try:
                if kind == "list":
                    source.list_trainings(ListQuery(limit=50))
                elif kind == "one":
                    source.get_training(ns, name)
                elif kind == "history":
                    history_answer(source.history(ns, name))
                else:
                    source.events(ns, name)
                answered[kind] += 1
            except SourceUnavailable:
                failed[kind] += 1

    def change() -> None:
        rng = random.Random(7)
        while time.monotonic() < until:
            ns, name = rng.choice(names)
            patch = {"status": {"progress": {"step": rng.randrange(10**6)}}}
            custom.patch_namespaced_custom_object_status(
                "graphtrain.io", "v1alpha1", ns, "graphtrainings", name, patch
            )
            time.sleep(1.0 / args.changes)

    def heartbeat() -> None:
        """A rank's report patched into a progress ConfigMap (each rank does every 5 s): the map
        changes, its history does not."""
        from graphtrain.contract.children import names as child_names

        rng, core = random.Random(11), kubernetes.client.CoreV1Api(client)
        while time.monotonic() < until:
            ns, name = rng.choice(hot if hot and rng.random() * 100 < hot_share else names)
            body = {"data": {"rank-0": json.dumps({"step": rng.randrange(10**6)})}}
            core.patch_namespaced_config_map(child_names(name)["progress"], ns, body)
            time.sleep(1.0 / args.heartbeats)

    def sample() -> None:
        while time.monotonic() < until:
            peak.append(rss_mb())
            time.sleep(0.5)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(args.clients)] + [
        threading.Thread(target=sample)
    ]
    if args.changes:
        threads.append(threading.Thread(target=change))
    if args.heartbeats:
        threads.append(threading.Thread(target=heartbeat))
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.seconds + 120)
    rss1 = rss_mb()
    kept = getattr(source.cache, "histories", None)  # answers.Answers; older checkouts: none
    histories = {"answers": len(kept), "mb": round(kept.nbytes / 2**20, 1)} if kept is not None else None
    if hasattr(source, "close"):
        source.close()
    by_verb = collections.Counter()
    for (verb, _), n in counts.items():
        by_verb[verb] += n
    print(
        json.dumps(
            {
                "trainings": len(names),
                "seconds": args.seconds,
                "answered": dict(answered),
                "failed": dict(failed),
                "requests_to_api_server": {f"{v} {r}": n for (v, r), n in sorted(counts.items())},
                "by_verb": dict(by_verb),
                "rss_mb": {"start": round(rss0), "end": round(rss1), "peak": round(max(peak))},
                "histories_kept": histories,
            },
            indent=1,
        )
    )


def stop(args: argparse.Namespace) -> None:
    from tests import k8s

    k8s.stop(Path(args.run))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--trainings", type=int, default=300)
    s.add_argument("--events", type=int, default=10_000)
    s.add_argument("--run", required=True)
    p = sub.add_parser("poll")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--cache-ttl", type=float, default=2.0)
    p.add_argument("--mix", default="20,40,20,20", help="weights of list, one, history, events")
    p.add_argument("--hot", default="", help="N,P: P %% of asks on the first N trainings (else at random)")
    p.add_argument("--changes", type=float, default=0.0, help="status patches a second meanwhile")
    p.add_argument(
        "--heartbeats", type=float, default=0.0, help="rank reports patched into progress maps a second"
    )
    t = sub.add_parser("stop")
    t.add_argument("--run", required=True)
    args = parser.parse_args()
    {"setup": setup, "poll": poll, "stop": stop}[args.command](args)


if __name__ == "__main__":
    main()
