"""The operator's decision lines: silent when nothing changes, every action and event otherwise, and
--log-format=json gives one JSON object per line with the fields (a real process, kopf's formatter)."""

from __future__ import annotations

import json
import subprocess
import sys

from graphtrain.contract.conditions import Event, Severity
from graphtrain.operator import logs
from graphtrain.operator.context import Action, Plan

JOB = {"kind": "Job", "metadata": {"name": "wn-partition"}}


def test_a_reconcile_that_changes_nothing_says_nothing() -> None:
    assert logs.decision("ns", "wn", {"phase": "Training"}, Plan([], {"phase": "Training"}, [])) is None


def test_a_decision_names_the_phase_change_the_children_and_the_events() -> None:
    plan = Plan(
        [Action("create", JOB)],
        {"phase": "Partitioning"},
        [Event(Severity.normal, "Partitioning", "job wn-partition is running")],
        requeue_after=12.34,
    )
    message, fields = logs.decision("ns", "wn", {}, plan)  # type: ignore[misc]
    assert message == "ns/wn: new -> Partitioning | create Job/wn-partition | events Partitioning"
    assert fields == {
        "training": "ns/wn",
        "phase": "Partitioning",
        "previous_phase": None,
        "actions": ["create Job/wn-partition"],
        "events": ["Partitioning"],
        "requeue_after_seconds": 12.3,
    }


def test_a_warning_is_quoted_in_the_line_and_a_steady_phase_is_named_once() -> None:
    plan = Plan(
        [Action("delete", JOB)], {"phase": "Failed"}, [Event(Severity.warning, "Failed", "out of time")]
    )
    message, fields = logs.decision("ns", "wn", {"phase": "Failed"}, plan)  # type: ignore[misc]
    assert message == "ns/wn: Failed | delete Job/wn-partition | events Failed | Failed: out of time"
    assert fields["warnings"] == ["Failed: out of time"]


def test_json_format_writes_one_object_per_line_with_the_decision_and_drops_routine_lines() -> None:
    script = """
import logging
import kopf
from graphtrain.operator import logs
from graphtrain.operator.context import Plan
kopf.configure(log_format=kopf.LogFormat.JSON, log_prefix=True)  # as the command does
logs.drop_routine(verbose=False)
logs.decided("ns", "wn", {"phase": "Starting"}, Plan([], {"phase": "Training"}, []))
logging.getLogger("kopf.objects").info("Handler 'on_event' succeeded.")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0]["message"] == "ns/wn: Starting -> Training"
    assert lines[0]["decision"]["phase"] == "Training" and lines[0]["severity"] == "info"


def test_creates_retried_with_nothing_changed_drop_to_debug_until_something_changes(caplog) -> None:
    """A refused create (a quota) and those waiting behind it are planned again at every reconcile: the
    first line says them at INFO (with its refusal event), the repeats at DEBUG; a different decision,
    or one that decides nothing in between, is said at INFO again."""
    pods = [Action("create", {"kind": "Pod", "metadata": {"name": f"wn-trainer-{r}"}}) for r in (0, 1)]
    refused = Event(Severity.warning, "ChildRefused", "pods wn-trainer-0 is forbidden: exceeded quota")
    starting = {"phase": "Starting"}
    caplog.set_level("DEBUG", logger=logs.log.name)
    logs.forget("quota", "wn")
    for plan in (
        Plan(pods, starting, [refused]),
        Plan(pods, starting, []),
        Plan(pods, starting, []),
        Plan([], starting, []),  # the quota raised, nothing to decide: the next create is news
        Plan(pods[1:], starting, []),
        Plan(pods[1:], {"phase": "Training"}, []),
    ):
        logs.decided("quota", "wn", starting, plan)
    levels = [r.levelname for r in caplog.records if r.name == logs.log.name]
    assert levels == ["INFO", "DEBUG", "DEBUG", "INFO", "INFO"], levels
    logs.forget("quota", "wn")
