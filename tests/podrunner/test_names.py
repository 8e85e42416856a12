"""The runner's own names (decide.py): podman names that a re-created pod can never share with the one
still stopping."""

from __future__ import annotations

from tests.podrunner import decide


def test_a_recreated_pod_never_gets_the_container_name_of_the_one_still_stopping() -> None:
    # trainer-0 of attempt 0 (pod number 4, restarted twice) stops while its successor under the same
    # name (number 9) starts: every name of either is its own, however long the pod's name
    for pod in ("nations-transe-trainer-0", "t" * 200, "a-1"):
        old = {decide.container_name("ab12cd", 4, pod, n) for n in range(3)}
        new = {decide.container_name("ab12cd", 9, pod, n) for n in range(3)}
        assert len(old) == len(new) == 3 and old.isdisjoint(new)
        assert all(len(n) <= decide.NAME_LIMIT for n in old | new)
    assert decide.container_name("ab12cd", 4, "s-1", 0) == "gtpr-ab12cd-4-s-1-0"
    # no two (number, pod, restart) triples meet, pod names with digits and dashes included
    names = [
        decide.container_name("r", seq, pod, n)
        for seq in (1, 11, 12)
        for pod in ("1", "1-1", "2", "x-1")
        for n in (1, 11, 21)
    ]
    assert len(set(names)) == len(names)
    # another runner's container of the same pod number is another name too
    assert decide.container_name("r1", 0, "p", 0) != decide.container_name("r2", 0, "p", 0)
