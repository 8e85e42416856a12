"""The runner's own names and addresses (podnames.py): a block per runner, a new number per pod, and
podman names that a re-created pod can never share with the one still stopping."""

from __future__ import annotations

import ipaddress

import pytest

from tests.podrunner import podnames


def test_pod_addresses_stay_in_the_runners_block_and_never_repeat() -> None:
    block = podnames.BLOCKS[0]
    net = ipaddress.ip_network(f"10.{block}.0.0/16")
    hub = ipaddress.ip_address(podnames.hub_address(block))
    last = 256 * 254 - 2  # 10.<block>.255.254
    numbers = [*range(600), *range(last - 600, last + 1)]
    addresses = [ipaddress.ip_address(podnames.pod_address(block, n)) for n in numbers]
    assert len(set(addresses)) == len(addresses)
    assert all(a in net and a != hub and a.packed[3] not in (0, 255) for a in addresses)
    assert [podnames.pod_address(block, n) for n in (0, 252, 253)] == [
        f"10.{block}.0.2",
        f"10.{block}.0.254",
        f"10.{block}.1.1",
    ]
    assert podnames.pod_address(block, last) == f"10.{block}.255.254"
    with pytest.raises(ValueError, match="outside"):
        podnames.pod_address(block, last + 1)
    with pytest.raises(ValueError, match="outside"):
        podnames.pod_address(block, -1)


def test_two_blocks_never_share_an_address_or_a_namespace() -> None:
    a, b = podnames.BLOCKS[0], podnames.BLOCKS[1]
    assert {podnames.pod_address(a, n) for n in range(300)}.isdisjoint(
        podnames.pod_address(b, n) for n in range(300)
    )
    assert podnames.pod_netns(a, 1) != podnames.pod_netns(b, 1) and podnames.hub_netns(
        a
    ) != podnames.hub_netns(b)
    assert all(0 < blk < 256 for blk in podnames.BLOCKS)


@pytest.mark.parametrize(
    ("name", "block"),
    [("gtpr100-hub", 100), ("gtpr157-0", 157), ("gtpr157-65022", 157), ("gtpr1-x", None), ("other-3", None)],
)
def test_a_namespace_name_says_its_block(name: str, block: int | None) -> None:
    assert podnames.netns_block(name) == block


def test_namespace_names_round_trip_to_their_block() -> None:
    for block in (podnames.BLOCKS[0], podnames.BLOCKS[-1]):
        names = [podnames.hub_netns(block), *(podnames.pod_netns(block, n) for n in (0, 7, 65022))]
        assert [podnames.netns_block(n) for n in names] == [block] * 4
        assert len(set(names)) == 4


def test_a_recreated_pod_never_gets_the_container_name_of_the_one_still_stopping() -> None:
    # trainer-0 of attempt 0 (pod number 4, restarted twice) stops while its successor under the same
    # name (number 9) starts: every name of either is its own, however long the pod's name
    for pod in ("nations-transe-trainer-0", "t" * 200, "a-1"):
        old = {podnames.container_name("ab12cd", 4, pod, n) for n in range(3)}
        new = {podnames.container_name("ab12cd", 9, pod, n) for n in range(3)}
        assert len(old) == len(new) == 3 and old.isdisjoint(new)
        assert all(len(n) <= podnames.NAME_LIMIT for n in old | new)
    assert podnames.container_name("ab12cd", 4, "s-1", 0) == "gtpr-ab12cd-4-s-1-0"
    # no two (number, pod, restart) triples meet, pod names with digits and dashes included
    names = [
        podnames.container_name("r", seq, pod, n)
        for seq in (1, 11, 12)
        for pod in ("1", "1-1", "2", "x-1")
        for n in (1, 11, 21)
    ]
    assert len(set(names)) == len(names)
    # another runner's container of the same pod number is another name too
    assert podnames.container_name("r1", 0, "p", 0) != podnames.container_name("r2", 0, "p", 0)


def test_egress_goes_through_the_pods_proxy_except_for_the_cluster() -> None:
    env = podnames.egress_env(41234, 123)
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:41234"
    bypass = env["NO_PROXY"].split(",")
    assert {"localhost", "127.0.0.1", ".svc", ".cluster.local", "10.123.0.0/16"} <= set(bypass)
