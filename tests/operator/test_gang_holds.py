"""gang_holds.GangHolds: how long an undone gang waits, and what ends the wait (literal clock)."""

from __future__ import annotations

from graphtrain.operator.gang_holds import GangHolds, fingerprint
from tests.operator.test_gang_admission import pod


def test_an_undone_gang_is_held_doubling_and_a_changed_gang_is_not() -> None:
    now = [0.0]
    holds = GangHolds(first=5, most=12, clock=lambda: now[0])
    gang = fingerprint([pod("t-0"), pod("t-1")])
    assert holds.held("u", gang) is None
    assert holds.undone("u", gang, "Pod/t-1", "refused") == 5
    assert holds.held("u", gang) == ("Pod/t-1", "refused") and holds.held("other", gang) is None
    assert holds.held("u", fingerprint([pod("t-0"), pod("t-1", "500m")])) is None  # a spec edit: at once
    now[0] = 5.0
    assert holds.held("u", gang) is None  # tried again
    assert holds.undone("u", gang, "Pod/t-1", "refused") == 10
    assert holds.undone("u", gang, "Pod/t-1", "refused") == 12  # at most `most`
    holds.made("u")
    assert holds.held("u", gang) is None and holds.undone("u", gang, "Pod/t-1", "refused") == 5
