"""The native key map of dynamic vocabularies (cuda/src/keymap_cpu.cpp) against a Python model: rows on
first sight, lookups that insert nothing, all-or-nothing refusals when full, least-recently-used eviction
that spares the batch's own rows, and backward-shift deletion that keeps every key findable."""

from __future__ import annotations

import numpy as np
import pytest

from graphtrain.runtime.native.keymap import KeyMap, KeyMapFull


def test_rows_in_first_sight_order_and_find_inserts_nothing() -> None:
    m = KeyMap(4)
    got = m.insert(np.array([10, -5, 10, 2**62]), evict=False)
    assert got.rows.tolist() == [0, 1, 0, 2] and len(got.evicted_keys) == 0
    assert m.find(np.array([2**62, 8, -5])).tolist() == [2, -1, 1]
    assert len(m) == 3 and m.keys().tolist() == [10, -5, 2**62]


def test_a_full_map_refuses_the_whole_batch() -> None:
    m = KeyMap(3)
    m.insert(np.array([1, 2]), evict=False)
    with pytest.raises(KeyMapFull, match="table 't' shard 0 of 2 is full: capacity 3 rows, all in use"):
        m.insert(np.array([3, 4]), evict=False, what="table 't' shard 0 of 2")
    assert len(m) == 2 and m.find(np.array([3, 4])).tolist() == [-1, -1]  # nothing of it went in
    with pytest.raises(KeyMapFull, match="one batch holds more distinct keys than its capacity of 3"):
        m.insert(np.array([5, 6, 7, 8]), evict=True)


def test_eviction_takes_the_least_recently_used_rows_outside_the_batch() -> None:
    m = KeyMap(3)
    m.insert(np.array([1]), evict=True)  # tick 1
    m.insert(np.array([2]), evict=True)  # tick 2
    m.insert(np.array([3]), evict=True)  # tick 3
    m.insert(np.array([1]), evict=True)  # tick 4: 1 is the newest now
    got = m.insert(np.array([2, 9]), evict=True)  # 2 is in the batch: 3 is the oldest outside it
    assert got.evicted_keys.tolist() == [3] and got.evicted_rows.tolist() == [2]
    assert got.rows.tolist() == [1, 2]
    assert m.find(np.array([1, 2, 3, 9])).tolist() == [0, 1, -1, 2]


def test_against_a_dict_under_churn() -> None:
    rng = np.random.default_rng(0)
    m, held = KeyMap(1000), set()
    for it in range(300):
        keys = rng.integers(-(10**15), 10**15, 64) if it % 3 else rng.integers(0, 100, 64)
        got = m.insert(keys, evict=True)
        held -= set(got.evicted_keys.tolist())
        held |= set(keys.tolist())
        assert (m.find(keys) == got.rows).all()
    keys = m.keys()
    assert set(keys.tolist()) == held and len(keys) == len(m) == 1000
    assert (m.find(keys) == np.arange(1000)).all()  # every key findable after ~20,000 evictions


@pytest.mark.parametrize("capacity", [1, 4, 8, 9, 1000])
def test_the_size_estimate_follows_the_slot_rule(capacity: int) -> None:
    slots = 16
    while slots < 2 * capacity:
        slots *= 2
    assert KeyMap.bytes_for(capacity) == slots * 16 + capacity * 16
