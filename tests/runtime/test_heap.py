"""heap.settle: setup's survivors leave the collector's walks, its garbage does not survive."""

from __future__ import annotations

import gc
import weakref

from graphtrain.runtime import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_settle_collects_garbage_then_freezes_survivors() -> None:
    kept = Node()
    kept.other = Node()
    cycle = Node()
    cycle.other = cycle  # garbage only a collection frees
    gone = weakref.ref(cycle)
    del cycle
    try:
        frozen = heap.settle()
        assert gone() is None  # collected, not frozen
        # at least: a thread an earlier test left running (an in-process server settling) may freeze more
        assert gc.get_freeze_count() >= frozen > 0
        assert not any(o is kept for o in gc.get_objects())  # no collection walks it any more
        later = Node()
        later.other = later
        after = weakref.ref(later)
        del later
        gc.collect()
        assert after() is None  # what the loop makes is still collected
    finally:
        gc.unfreeze()
