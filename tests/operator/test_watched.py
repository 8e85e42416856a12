"""The trainings as their watch showed them (operator/watched.py): a copy is used only when it holds
the operator's own last status write; literal bodies."""

from __future__ import annotations

from graphtrain.operator.watched import Watched

KEY = ("ns", "t")


def body(rv: str, phase: str = "Starting") -> dict:
    return {"metadata": {"name": "t", "resourceVersion": rv}, "status": {"phase": phase}}


def test_a_copy_is_used_once_the_watch_showed_the_operators_last_write() -> None:
    w = Watched()
    assert w.current(KEY) is None  # never watched: GET
    w.seen(KEY, body("1"))
    got = w.current(KEY)
    assert got == body("1")
    got["status"]["phase"] = "changed by a plan"
    assert w.current(KEY) == body("1")  # a copy: the kept body is not changed
    w.wrote(KEY, "2")  # the operator's status write: GET until the watch shows version 2
    assert w.current(KEY) is None
    w.seen(KEY, body("3"))  # some other version (its own or kopf's write): still not known to hold ours
    assert w.current(KEY) is None
    w.seen(KEY, body("2", "Training"))
    assert w.current(KEY) == body("2", "Training")


def test_a_write_whose_event_came_first_is_current_at_once() -> None:
    w = Watched()
    w.seen(KEY, body("5"))
    w.wrote(KEY, "5")  # the watch was faster than the patch's answer
    assert w.current(KEY) == body("5")
    w.wrote(KEY, None)  # a write whose version is not known: GET, until a GET and the watch agree
    assert w.current(KEY) is None
    w.seen(KEY, body("6"))  # maybe older than that write, delivered late: not used
    assert w.current(KEY) is None
    w.read(KEY, "7")  # a GET read version 7: the copy is current once the watch shows it
    assert w.current(KEY) is None
    w.seen(KEY, body("7"))
    assert w.current(KEY) == body("7")


def test_a_failed_reconcile_distrusts_the_copy_until_a_get_and_the_watch_agree() -> None:
    w = Watched()
    w.seen(KEY, body("1"))
    w.wrote(KEY, "2")  # then the reconcile failed: the copy was forgotten, and the next event (an
    w.distrust(KEY)  # older one, late) was used: its plan took the written transition again
    w.seen(KEY, body("1"))
    assert w.current(KEY) is None
    w.read(KEY, "2")  # the next tick's GET read version 2, which the watch then shows
    w.seen(KEY, body("2", "Training"))
    assert w.current(KEY) == body("2", "Training")


def test_a_version_the_watch_never_showed_is_pending_until_a_get() -> None:
    """kopf shows the last event of a burst: the operator's write (2) and kopf's annotations (3)
    together showed 3 alone, and every tick after GETed the training until its next status write."""
    w = Watched()
    w.seen(KEY, body("1"))
    w.wrote(KEY, "2")
    w.seen(KEY, body("3"))
    assert w.current(KEY) is None
    w.read(KEY, "3")  # the tick's GET: version 3, which the watch already showed
    assert w.current(KEY) == body("3")


def test_the_sweep_and_a_deletion_read_with_a_get() -> None:
    w = Watched()
    w.seen(KEY, body("1"))
    w.verify_all()
    assert w.current(KEY) is None  # once: the sweep's reconcile finds a training deleted in a gap
    assert w.current(KEY) == body("1")
    w.forget(KEY)
    assert w.current(KEY) is None


def test_the_sweep_gets_only_what_its_list_shows_at_another_version_or_not_at_all() -> None:
    w = Watched()
    for name, rv in (("same", "1"), ("moved", "2"), ("gone", "3")):
        w.seen(("ns", name), body(rv))
    w.swept({("ns", "same"): "1", ("ns", "moved"): "5", ("ns", "new"): "4"})
    assert w.current(("ns", "same")) == body("1")  # the list agrees with the copy: no GET
    assert w.current(("ns", "moved")) is None and w.current(("ns", "gone")) is None  # GET, once
    assert w.current(("ns", "moved")) == body("2")
    w.swept(None)  # the list failed: every one GETs, as before
    assert w.current(("ns", "same")) is None
