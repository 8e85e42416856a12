"""Rank 0's progress history (spec.reporting): bounded, one schema with the latest report, and a reader
that keeps what it can of a damaged file."""

from __future__ import annotations

import json

import pytest

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress


def entry(epoch: int, **kw: object) -> Progress:
    fields: dict[str, object] = {"epoch": epoch, "epochs": 10, "step": epoch * 20, "loss": 1.0 / (epoch + 1)}
    return Progress.model_validate({**fields, **kw})


def test_append_keeps_the_latest_entries_within_the_limit() -> None:
    history: list[Progress] = []
    for epoch in range(1, 8):
        before = list(history)
        history = reporting.append_history(history, entry(epoch), limit=3)
        assert len(before) == min(epoch - 1, 3)  # the list given is left as it was
    assert [p.epoch for p in history] == [5, 6, 7]


def test_the_default_limit_is_the_contracts() -> None:
    history: list[Progress] = []
    for epoch in range(reporting.HISTORY_LIMIT + 5):
        history = reporting.append_history(history, entry(epoch))
    assert len(history) == reporting.HISTORY_LIMIT == 500
    assert history[0].epoch == 5 and history[-1].epoch == reporting.HISTORY_LIMIT + 4


def test_a_history_round_trips_in_the_wire_form() -> None:
    history = [entry(1, eval_metric="val_mrr", eval_value=0.25, samples_per_second=100.0), entry(2)]
    text = reporting.encode_history(history)
    wire = json.loads(text)
    assert wire[0]["evalMetric"] == "val_mrr" and wire[0]["samplesPerSecond"] == 100.0  # camelCase
    assert wire[0] == reporting.to_wire(history[0])
    assert reporting.decode_history(text) == history
    assert reporting.decode_history(text.encode()) == history


@pytest.mark.parametrize("text", [None, "", b"", "{", '{"epoch": 1}', "3", '"x"', "null"])
def test_no_history_or_not_a_list_reads_as_empty(text: str | bytes | None) -> None:
    assert reporting.decode_history(text) == []


def test_bad_entries_are_skipped_and_the_others_kept() -> None:
    good = reporting.to_wire(entry(2))
    text = json.dumps([{"epoch": -1}, good, 7, "x", None, {"epoch": "three"}, {"epoch": 3}])
    assert [p.epoch for p in reporting.decode_history(text)] == [2, 3]


def test_a_rank_file_is_relative_to_the_run_directory() -> None:
    assert rundir.rank_file(0) == "trainers/rank-0.json"
    assert rundir.rank_file(12) == "trainers/rank-12.json"


def test_epochs_trained_again_after_a_resume_replace_their_entries() -> None:
    history = [entry(e) for e in (1, 2, 3, 4)]
    resumed = reporting.append_history(history, entry(3, loss=0.5))
    assert [(p.epoch, p.loss) for p in resumed] == [(1, 1 / 2), (2, 1 / 3), (3, 0.5)]


def test_documents_nested_deeper_than_python_recurses_read_as_absent() -> None:
    """'[' * 200000 in a progress ConfigMap or file raised RecursionError through every reader (the
    operator's reconcile, the API): unreadable, like any other bad report."""
    deep = "[" * 200_000 + "]" * 200_000
    assert reporting.decode(deep) is None
    assert reporting.decode_history(deep) == []
    assert reporting.training_progress({reporting.PROGRESS_KEY: deep}) is None
