"""docs/network.md's egress NetworkPolicies against the pods the operator makes: each policy selects the
roles it is written for, each egress peer the pods that role connects to, on the operator's ports; so
the example cannot drift from operator/manifests.py's labels and ports."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from graphtrain.operator.manifests import FAST_PORT, RENDEZVOUS_PORT, SHARD_PORT
from tests.operator.test_pod_metadata import LAYOUTS, _pods
from tests.selectors import selects

DOC = Path(__file__).resolve().parents[2] / "docs" / "network.md"
Labels = dict[str, str]


def policies() -> dict[str, dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    return {p["metadata"]["name"]: p for p in yaml.safe_load_all(blocks[0])}


def pods() -> dict[str, Labels]:
    """The labels of every pod the operator makes, in both layouts, by role ('worker': partition locality)."""
    out: dict[str, Labels] = {}
    for layout in LAYOUTS.values():
        out |= {role: meta["labels"] for role, meta in _pods(layout()).items()}
    assert set(out) == {"partition", "shards", "trainer", "worker"}
    return out


def selected(selector: dict) -> set[str]:
    return {role for role, labels in pods().items() if selects(selector, labels)}


def ports(rule: dict) -> set[int]:
    return {p["port"] for p in rule.get("ports") or []}


def test_dns_is_open_to_every_pod_of_every_training() -> None:
    dns = policies()["graphtrain-dns"]["spec"]
    assert selected(dns["podSelector"]) == set(pods())
    assert dns["policyTypes"] == ["Egress"] and ports(dns["egress"][0]) == {53}


def test_the_trainers_reach_the_shard_servers_their_peers_and_the_api_server() -> None:
    spec = policies()["graphtrain-trainers"]["spec"]
    # trainer pods and worker pods (partition locality: their trainers and shard-server sidecar)
    assert selected(spec["podSelector"]) == {"trainer", "worker"}
    to_shards, to_peers, to_api = spec["egress"]
    assert selected(to_shards["to"][0]["podSelector"]) == {"shards"}
    assert ports(to_shards) == {SHARD_PORT, FAST_PORT}
    # every port: rank 0's rendezvous, gloo's pair ports (chosen at run time), a worker pod's kvstore
    assert selected(to_peers["to"][0]["podSelector"]) == {"trainer", "worker"} and "ports" not in to_peers
    assert "ipBlock" in to_api["to"][0] and 6443 in ports(to_api)


def test_the_partition_pod_may_download_and_nothing_else_is_said() -> None:
    spec = policies()["graphtrain-partition"]["spec"]
    assert selected(spec["podSelector"]) == {"partition"}
    assert ports(spec["egress"][0]) == {80, 443} and "to" not in spec["egress"][0]


@pytest.mark.parametrize(
    "said",
    [f"TCP {SHARD_PORT} (kvstore)", f"{FAST_PORT} (its fast lane", f"TCP {RENDEZVOUS_PORT} (rank 0"],
)
def test_the_table_names_the_operators_ports(said: str) -> None:
    assert said in DOC.read_text()
