"""How a trainer says that a shard server went away, written by the kvstore client and read by both
executors: the local launcher (runtime/launch/processes.py) and the operator (operator/observation.py)
name the server, the cause, before the trainer that lost it. The trainer's only channel to the operator
is its log's tail, which the kubelet keeps as the pod's termination message (FallbackToLogsOnError), so
the wording is the signal: kept here, once, so that writer and readers cannot drift.

Pure and a leaf like the rest of the contract.
"""

from __future__ import annotations

ERROR = "error: "  # how a role's last line begins when it fails with a message for the user
# what follows `shard N (address)` when the server is gone: not answered in time, its connection closed
# with calls waiting (a plain or a shared-memory client), its fast lane broken under a push
NO_ANSWER = " did not answer "
CLOSED = " closed the connection "
CLOSED_ITS = " closed its connection "
LANE_FAILED = ": the fast lane failed "
SHARD_GONE = (NO_ANSWER, CLOSED, CLOSED_ITS, LANE_FAILED)


def shard_gone(shard: int, address: str, how: str, rest: str) -> str:
    """The kvstore client's message for shard `shard` gone (`how`: one of SHARD_GONE), then `rest`."""
    assert how in SHARD_GONE, how
    return f"shard {shard} ({address}){how}{rest}"


def lost_shard(text: str) -> int | None:
    """The shard a failed role's output (`text`: its log's tail) says went away, in the last such
    `error: shard N (address) ...` line; None when no line says so."""
    found = None
    for line in text.splitlines():
        head, _, rest = line.strip().partition(" (")
        if not head.startswith(ERROR + "shard ") or ")" not in rest:
            continue
        index = head.removeprefix(ERROR + "shard ")
        if index.isdigit() and any(rest.partition(")")[2].startswith(how) for how in SHARD_GONE):
            found = int(index)
    return found
