"""The Kubernetes source on the test API server (tests/conftest.py's `kube`), direct and from its
snapshot: GraphTrainings with status, progress ConfigMaps, trainer pods and events made directly, as
the operator and the trainers leave them (tests/api/cluster.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import kubernetes
import pytest
from fastapi.testclient import TestClient

from graphtrain.api import selectors
from graphtrain.api.app import create_app
from graphtrain.api.settings import Settings
from graphtrain.api.sources.base import InvalidParameter, ListQuery, NotFound, SourceUnavailable
from graphtrain.api.sources.kubernetes import Api, KubernetesSource
from graphtrain.contract.conditions import Severity
from graphtrain.contract.spec import Phase
from tests.api import cluster
from tests.api.fake import epochs

NS, OTHER = "api-a", "api-b"
LAST = "api-z"  # after NS and OTHER in every list of all namespaces
PHASES = [Phase.training, Phase.succeeded, Phase.failed, Phase.training, Phase.pending]


@pytest.fixture(scope="module")
def api(kube, kubeconfig: str) -> Iterator[kubernetes.client.ApiClient]:
    """Five trainings in NS (labelled team=a for the even ones), one of the same name in OTHER, and
    events of an earlier training of the same name (another uid) that must not show."""
    client = cluster.client(kubeconfig)
    for ns in (NS, OTHER):
        cluster.ensure_namespace(client, ns)
    for i, phase in enumerate(PHASES):
        labels = {"team": "a" if i % 2 == 0 else "b"}
        cluster.create_training(
            client, NS, f"t-{i}", phase, labels, epochs_done=i + 1, attempt=i % 2, pods=i != 4
        )
    other = cluster.create_training(client, OTHER, "t-0", Phase.failed)
    earlier = {**other, "metadata": {**other["metadata"], "namespace": NS, "uid": "an-earlier-uid"}}
    cluster.post_event(earlier, Severity.warning, "Earlier", "of a training deleted since")
    yield client
    client.close()


@pytest.fixture(params=[0.0, 30.0], ids=["direct", "snapshot"])
def source(api: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[KubernetesSource]:
    made = KubernetesSource(cache_ttl=request.param, timeout=5.0, client=api)
    yield made
    made.close()


def names(page) -> list[str]:
    return [f"{s.metadata.namespace}/{s.metadata.name}" for s in page.items]


def test_list_filters(source: KubernetesSource) -> None:
    assert names(source.list_trainings(ListQuery(namespace=NS))) == [f"{NS}/t-{i}" for i in range(5)]
    assert names(source.list_trainings(ListQuery(namespace=OTHER))) == [f"{OTHER}/t-0"]
    team_a = ListQuery(namespace=NS, selector=selectors.parse("team in (a)"))
    assert names(source.list_trainings(team_a)) == [f"{NS}/t-0", f"{NS}/t-2", f"{NS}/t-4"]
    training = ListQuery(namespace=NS, phase=Phase.training)
    assert names(source.list_trainings(training)) == [f"{NS}/t-0", f"{NS}/t-3"]
    unlabelled = names(source.list_trainings(ListQuery(selector=selectors.parse("!team"))))  # all namespaces
    assert f"{OTHER}/t-0" in unlabelled and not any(n.startswith(f"{NS}/t-") for n in unlabelled)


def test_pages_cover_the_list_once(source: KubernetesSource) -> None:
    seen, token = [], None
    for _ in range(10):
        page = source.list_trainings(ListQuery(namespace=NS, limit=2, continue_token=token))
        assert len(page.items) <= 2
        seen += names(page)
        token = page.continue_
        if token is None:
            break
    assert seen == [f"{NS}/t-{i}" for i in range(5)]


def test_a_tokens_namespaces_are_listed_alone_page_by_page(source: KubernetesSource) -> None:
    """A token's namespaces (access.py): directly, one of them is the API server's list of it, several
    are each listed and paged here; from the cache, filtered. Either way no other namespace shows."""
    both = [f"{NS}/t-{i}" for i in range(5)] + [f"{OTHER}/t-0"]
    for namespaces, expected in (({NS, OTHER}, both), ({OTHER}, [f"{OTHER}/t-0"]), ({"api-none"}, [])):
        seen, token = [], None
        for _ in range(10):
            query = ListQuery(limit=2, continue_token=token, namespaces=frozenset(namespaces))
            page = source.list_trainings(query)
            seen += names(page)
            token = page.continue_
            if token is None:
                break
        assert seen == expected
    failed = ListQuery(phase=Phase.failed, namespaces=frozenset({NS, OTHER}))
    assert names(source.list_trainings(failed)) == [f"{NS}/t-2", f"{OTHER}/t-0"]
    outside = ListQuery(namespace=NS, namespaces=frozenset({OTHER}))
    assert names(source.list_trainings(outside)) == []


def test_a_bad_continue_token_names_the_parameter(source: KubernetesSource) -> None:
    with pytest.raises(InvalidParameter) as raised:
        source.list_trainings(ListQuery(namespace=NS, continue_token="bm90LWEtdG9rZW4"))
    assert raised.value.parameter == "continue"


def test_one_training(source: KubernetesSource) -> None:
    t = source.get_training(NS, "t-3")
    assert t.metadata.uid and t.metadata.labels == {"team": "b"}
    assert t.spec is not None and t.spec.graph == "wordnet" and t.spec.trainers == 2
    assert t.status.phase == "Training" and t.status.progress and t.status.progress.epoch == 4
    assert [(s.index, s.state) for s in t.status.shards] == [(0, "Ready"), (1, "Ready")]
    assert [(r.rank, r.state, r.restarts, r.pod) for r in t.trainers] == [
        (0, "Running", 1, "t-3-trainer-0"),  # attempt 1, no container restart
        (1, "Running", 2, "t-3-trainer-1"),  # attempt 1, one container restart
    ]
    assert [r.last_heartbeat for r in t.trainers] == ["2025-01-02T03:04:00Z"] * 2
    assert t.trainers[1].progress and t.trainers[1].progress.samples_per_second == 1000.0
    waiting = source.get_training(NS, "t-4")  # no pods yet
    assert [(r.rank, r.state, r.pod) for r in waiting.trainers] == [
        (0, "Pending", None),
        (1, "Pending", None),
    ]


def test_history_and_events(source: KubernetesSource) -> None:
    assert epochs(source.history(NS, "t-2")) == [1, 2, 3]
    events = source.events(NS, "t-0")
    assert [(e.type, e.reason, e.source) for e in events] == [("Normal", "Started", "graphtrain-operator")]


def test_unknown_training_and_namespace_scope(
    api: kubernetes.client.ApiClient, source: KubernetesSource
) -> None:
    for call in (source.get_training, source.events, source.history):
        with pytest.raises(NotFound):
            call(NS, "missing")
    scoped = KubernetesSource(OTHER, client=api, cache_ttl=source.cache_ttl)
    with pytest.raises(NotFound):
        scoped.get_training(NS, "t-0")
    assert names(scoped.list_trainings(ListQuery())) == [f"{OTHER}/t-0"]
    scoped.close()


def test_a_snapshot_cut_at_its_bound_still_answers_every_training(api: kubernetes.client.ApiClient) -> None:
    """max_objects bounds each collection a snapshot lists. Past it, the trainings it left out were
    answered as if they had nothing: 404 for a training that exists, no events, no history, trainers
    without pods (10,000 events in a cluster: a training's /events answered [] while it had three).
    A collection cut at the bound is now read directly for the training asked about. Here every
    collection of every namespace is cut within NS's objects, before those of LAST."""
    cluster.ensure_namespace(api, LAST)
    cluster.create_training(api, LAST, "t-0", Phase.training, epochs_done=2)
    bounded = KubernetesSource(client=api, cache_ttl=30.0, max_objects=3)
    direct = KubernetesSource(client=api)
    assert bounded.get_training(LAST, "t-0") == direct.get_training(LAST, "t-0")
    assert [e.reason for e in bounded.events(LAST, "t-0")] == ["Started"]
    assert epochs(bounded.history(LAST, "t-0")) == [1, 2]
    # at least these (the session's API server may hold other tests' training ConfigMaps: "configs" too)
    assert {"trainings", "progress", "pods", "events"} <= bounded.truncated()
    with pytest.raises(NotFound):
        bounded.get_training(LAST, "missing")
    # the list too: paged over the API server, not the snapshot's first three as the whole
    listed, token = [], None
    for _ in range(100):
        got = bounded.list_trainings(ListQuery(limit=2, continue_token=token))
        listed += names(got)
        token = got.continue_
        if token is None:
            break
    assert listed == names(direct.list_trainings(ListQuery(limit=500))) and f"{LAST}/t-0" in listed
    bounded.close()


def test_snapshot_refreshes_in_the_background(api: kubernetes.client.ApiClient) -> None:
    source = KubernetesSource(NS, client=api, cache_ttl=0.5)
    before = names(source.list_trainings(ListQuery()))
    cluster.create_training(api, NS, "late", Phase.pending, pods=False)
    deadline = time.monotonic() + 30
    while f"{NS}/late" not in names(source.list_trainings(ListQuery())):
        assert time.monotonic() < deadline, "the snapshot never showed the new training"
        time.sleep(0.2)
    assert f"{NS}/late" not in before
    source.close()


def test_the_app_over_kubernetes(source: KubernetesSource) -> None:
    client = TestClient(create_app(source, Settings()))
    assert client.get("/readyz").status_code == 200
    body = client.get(f"/api/v1/trainings/{NS}/t-1/trainers").json()
    assert [t["state"] for t in body["items"]] == ["Running", "Running"]
    assert client.get(f"/api/v1/trainings/{NS}/nope").status_code == 404
    assert client.get("/api/v1/trainings", params={"namespace": NS, "continue": "garbage"}).status_code == 400


def test_an_api_server_that_does_not_answer_is_503() -> None:
    config = kubernetes.client.Configuration()
    config.host = "https://127.0.0.1:1"  # nothing listens there
    source = KubernetesSource(client=kubernetes.client.ApiClient(config), timeout=2.0)
    with pytest.raises(SourceUnavailable):
        source.check()
    client = TestClient(create_app(source, Settings()))
    assert client.get("/readyz").status_code == 503
    resp = client.get("/api/v1/trainings/a/b")
    assert resp.status_code == 503 and resp.headers["retry-after"] == "5"


class Unserved:
    """The CustomObjectsApi of an API server without the GraphTraining CRD: every call answers 404."""

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            exc = kubernetes.client.ApiException(status=404, reason="Not Found")
            exc.body = '{"kind":"Status","message":"the server could not find the requested resource"}'
            raise exc

        return call


def test_an_api_server_without_the_crd_is_503_saying_so() -> None:
    """The CRD not installed yet, or deleted (a platform removing graphtrain): /readyz and the lists
    answered 404 "not found", the status of a route that does not exist."""
    source = KubernetesSource(client=kubernetes.client.ApiClient(kubernetes.client.Configuration()))
    source.api.custom = Unserved()  # type: ignore[assignment]
    with pytest.raises(SourceUnavailable, match="GraphTraining CRD is not installed"):
        source.check()
    client = TestClient(create_app(source, Settings()))
    ready = client.get("/readyz")
    assert ready.status_code == 503 and "graphtrainings.graphtrain.io/v1alpha1" in ready.json()["detail"]
    assert client.get("/api/v1/trainings").status_code == 503


class Trickle:
    """An API server (or a proxy before it) that sends a whole 200 answer, its body a byte every 0.1 s
    (6 s in all; it stops once the client has gone)."""

    BODY = b'{"data": {}}'.ljust(60)

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.9", 0))
        self.host = f"http://127.0.0.9:{self.server.getsockname()[1]}"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            conn.recv(65536)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(self.BODY)}"
            conn.sendall(head.encode() + b"\r\n\r\n")
            for byte in self.BODY:
                time.sleep(0.1)
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self.thread.join(10)
        self.server.close()


def test_a_body_sent_a_little_at_a_time_is_cut_at_the_calls_timeout() -> None:
    """urllib3's timeout bounds each socket read, not the whole answer: a server sending a byte at a
    time held a GET as long as it kept sending (timeout 0.5 s: the 6 s of the whole body), and with a
    /history read, its flight and every caller waiting on it (flights.py)."""
    trickle = Trickle()
    config = kubernetes.client.Configuration()
    config.host = trickle.host
    api = Api(0.5, kubernetes.client.ApiClient(config))
    try:
        with pytest.raises(SourceUnavailable, match="did not answer within 0.5 s"):
            api.config_map("ns", "t-progress")
    finally:
        trickle.close()
