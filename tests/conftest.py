"""Shared fixtures: small deterministic graphs with every kind of node data, and a real Kubernetes API
server with kubectl against it (tests/k8s.py), one per test process, for the operator and chart tests;
and how `make test`'s three pytest-xdist workers share the suite out."""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning (libgomp reads this when torch loads it, so it is set
# before anything here imports torch; the processes the tests start inherit it). The suite runs two
# workers on two cores, and the trainers and shard servers they start have torch threads of their own:
# spinning threads took the cores the other processes needed (Nations TransE standalone, 20 epochs, 22-36
# s beside a busy worker, 9 s with passive waits). How threads wait changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from graphtrain.runtime.data.graph import Graph, random_masks
from tests import k8s

# `make test` runs three pytest-xdist workers: a test file is the unit of work (its module fixtures are
# built once), and these folders go whole to one worker, in their serial order: the API-server tests
# share one API server and one in-process operator (tests/api's cluster must run before
# tests/operator's session operator watches every namespace), and the pod tests share one podman
# image store and the images their session fixtures build. tests/e2e stays whole there, process mode
# included: two pod runners at once share the host's mount points (the service-account directory
# /var/run/secrets/...), and the first to stop removes them, which detaches them from the other's
# running pods (their progress reports then failed: seen once, with tests/e2e split across workers).
WHOLE_FOLDERS = {"api": "apiserver", "chart": "apiserver", "operator": "apiserver"}
WHOLE_FOLDERS |= {"e2e": "pods", "images": "pods", "podrunner": "pods"}


def work_unit(nodeid: str) -> str:
    """The unit of work of the test `nodeid` ("tests/<folder>/.../test_x.py::test_y[...]")."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return WHOLE_FOLDERS.get(parts[1], path) if len(parts) > 2 and parts[0] == "tests" else path


# Units that take minutes whatever their test count: dealt first, so that the small units even out the
# workers' ends (xdist deals the most tests first: the pod folders came last and one worker ran alone for
# their last minutes). The shard-server files come after the packaging ones since their servers fork
# from tests/forked.py's forkserver (tests/runtime/kvstore: ~6 min -> ~3 min on one process).
LONG_FIRST = (
    "pods",
    "apiserver",
    "tests/runtime/launch/",
    "tests/packaging/",
    "tests/runtime/kvstore/",
)


def first_by(unit: str, tests: int) -> tuple[int, int]:
    """The order in which units are dealt to the workers: LONG_FIRST's in its order, then by tests."""
    rank = next((i for i, p in enumerate(LONG_FIRST) if unit.startswith(p)), len(LONG_FIRST))
    return rank, -tests


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown, and unused, without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling over work_unit() (its loadgroup marks are lost on pytest 9's node
    ids: xdist 3.8 rewrites `_nodeid`, which pytest 9.2 no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first assignment: the whole queue is known
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda u: first_by(u[0], len(u[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return ByWorkUnit(config, log)


def planted_graph(
    n: int = 2000, k: int = 4, avg_degree: int = 8, p_in: float = 0.9, seed: int = 0, hubs: int = 5
) -> Graph:
    """k planted blocks (a fraction p_in of edges inside a block), a few hubs and 50 leaves, with labels,
    masks, sparse features, edge types and external ids: every kind of data a partition must carry."""
    rng = np.random.default_rng(seed)
    block = rng.integers(0, k, n)
    members = [np.flatnonzero(block == b) for b in range(k)]
    m = n * avg_degree // 2
    src = rng.integers(0, n - 50, m)
    inside = rng.random(m) < p_in
    dst = rng.integers(0, n - 50, m)
    for b in range(k):
        sel = inside & (block[src] == b)
        dst[sel] = rng.choice(members[b], int(sel.sum()))
    hub_ids = rng.choice(n - 50, hubs, replace=False)
    src = np.concatenate([src, np.repeat(hub_ids, 100), np.arange(n - 50, n)])
    dst = np.concatenate([dst, rng.integers(0, n - 50, hubs * 100), rng.integers(0, n - 50, 50)])
    feat = sp.random(n, 64, density=0.05, format="csr", dtype=np.float32, random_state=seed)
    return Graph.from_edges(
        "planted",
        n,
        src,
        dst,
        etype=rng.integers(0, 3, len(src)),
        feat=feat,
        label=block.astype(np.int64),
        masks=random_masks(n, 0.6, 0.2, seed),
        node_ids=np.arange(n, dtype=np.int64) * 7 + 1000,
        num_classes=k,
    )


@pytest.fixture(scope="session")
def planted() -> Graph:
    return planted_graph()


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """An empty, private dataset cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("GRAPHTRAIN_DATA", str(root))
    return root


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory) -> Iterator[str]:
    user = os.environ.get("GRAPHTRAIN_TEST_KUBECONFIG")
    if user:
        yield user
        return
    bin_dir = k8s.testenv_bin()
    run = tmp_path_factory.mktemp("apiserver")
    try:
        yield k8s.start(run, bin_dir)
    finally:
        k8s.stop(run)


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> k8s.Kubectl:
    """kubectl against the test server, with the CRD installed; raises with kubectl's message on failure.
    $KUBECONFIG names the server too, for what runs in this process (the operator, the trainers' adapter)."""
    os.environ["KUBECONFIG"] = kubeconfig
    loaded = sys.modules.get("kubernetes.config.kube_config")
    if loaded is not None:  # imported by a test module already: it read $KUBECONFIG then, not now
        loaded.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig
    run = k8s.kubectl(kubeconfig)
    k8s.install_crd(run)
    k8s.serve_stand_ins(run, k8s.NETWORK_POLICY)  # the test server has none; the chart and operator make them
    return run
