"""The pod runner's own names and addresses, as pure functions: a pod's network namespace, its address
in the runner's block, its podman containers, its Memory emptyDirs and the proxy settings of its
downloads. Chosen so that a re-created pod provably never meets the one still stopping under its name
(tests/podrunner/test_names.py; net.py and runner.py use them)."""

from __future__ import annotations

import re

PREFIX = "gtpr"  # podman containers gtpr-<runner>-<seq>-<pod>-<restarts>; namespaces gtpr<block>-...
BLOCKS = range(100, 200)  # a runner's addresses are 10.<block>.0.0/16, one block per live runner
NAME_LIMIT = 120  # characters of a podman container name
_NETNS = re.compile(rf"{PREFIX}(\d+)-(hub|\d+)$")


def hub_address(block: int) -> str:
    """The hub's address in a runner's block (its bridge: where the runner's probes come from)."""
    return f"10.{block}.0.1"


def pod_address(block: int, seq: int) -> str:
    """The address of a runner's pod number `seq` (0, 1, ...: every admitted pod a new number, never
    reused): 10.<block>.x.y from 10.<block>.0.2 on (.0.1 is the hub), y from 1 to 254 only, as some
    tools take .0 or .255 for a network or broadcast address. 65023 pods per runner."""
    x, y = divmod(seq + 1, 254)
    if seq < 0 or x > 255:
        raise ValueError(f"pod number {seq} is outside a runner's block (0 to 65022)")
    return f"10.{block}.{x}.{y + 1}"


def hub_netns(block: int) -> str:
    return f"{PREFIX}{block}-hub"


def pod_netns(block: int, seq: int) -> str:
    """The network namespace of a runner's pod number `seq`: a new one for a re-created pod."""
    return f"{PREFIX}{block}-{seq}"


def netns_block(name: str) -> int | None:
    """The block of a pod runner's network namespace (hub or pod), None for any other name."""
    found = _NETNS.match(name)
    return int(found.group(1)) if found else None


def container_name(runner: str, seq: int, pod: str, restarts: int, index: int = 0) -> str:
    """The podman name of a container: unique per (runner, pod number, container, restart), so a
    re-created pod (a new number) never asks for the name of its predecessor's container while that one
    stops. Once a name had only the pod's name and the restart count: a trainer re-created under its
    name found the name in use (podman exit 125) and failed, which cost the training a restart.
    `index`: the container's place among the pod's sidecars then main containers (0, the first, has
    none in its name). The pod's name is cut to fit NAME_LIMIT, never the numbers."""
    head, tail = f"{PREFIX}-{runner}-{seq}-", f"-{index}-{restarts}" if index else f"-{restarts}"
    return head + pod[: NAME_LIMIT - len(head) - len(tail)] + tail


def memory_dir(block: int) -> str:
    """Where a runner of `block` keeps its pods' emptyDirs of medium Memory: tmpfs, the host's /dev/shm
    (a dead runner's is removed by the next of its block)."""
    return f"/dev/shm/{PREFIX}{block}"


def egress_env(proxy_port: int, block: int) -> dict[str, str]:
    """What sends a pod's own HTTP(S) downloads through the runner's egress proxy on the pod's
    127.0.0.1:`proxy_port` (a namespace has no route out) and everything of the cluster around it:
    the loopback (the API server's relay), the runner's pods and the cluster's names."""
    url = f"http://127.0.0.1:{proxy_port}"
    bypass = f"localhost,127.0.0.1,::1,.svc,.cluster.local,10.{block}.0.0/16"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": bypass,
        "no_proxy": bypass,
    }
