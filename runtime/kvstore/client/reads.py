"""What a process read from the shard servers, by shard and path: the counts behind a trainer's
graphtrain_trainer_rows_read_total, which show its own partition's rows and seeds read through shared
memory (partition locality) and the others' through requests; and the messages it sent them, by path
(a trainer's log gives them per step)."""

from __future__ import annotations

import threading
from collections import Counter

# Rows and seeds this process read, by (shard, path): "shared_memory" (a same-host server's segments),
# "in_process" (standalone shards), "socket" (a ZMQ request) or "fast_lane" (a request the server's fast
# lane answered). What a trainer's metrics show of locality.
_READS: Counter[tuple[int, str]] = Counter()
_READS_LOCK = threading.Lock()
# Messages this process sent to shard servers, by path: "zmq" (a request, or one chunk of a large one)
# or "fast_lane" (a request, or a batch of several: one round trip). What a step's round trips are.
_SENT: Counter[str] = Counter()


def reads() -> dict[tuple[int, str], int]:
    """A copy of the process' read counts by (shard, path)."""
    with _READS_LOCK:
        return dict(_READS)


def sent(path: str) -> None:
    with _READS_LOCK:
        _SENT[path] += 1


def messages() -> dict[str, int]:
    """A copy of the process' message counts by path."""
    with _READS_LOCK:
        return dict(_SENT)


def count(shard: int, path: str, n: int) -> None:
    with _READS_LOCK:
        _READS[(shard, path)] += n


def moved(shard: int, source: str, path: str, n: int) -> None:
    """`n` reads counted under `source` went by `path` (the transport knows it only once answered)."""
    with _READS_LOCK:
        _READS[(shard, source)] -= n
        _READS[(shard, path)] += n
