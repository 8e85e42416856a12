"""Is the served GraphTraining CRD the one this operator was built with?

helm installs a chart's crds/ on the first install and never upgrades them (helm's documented
limit), so `helm upgrade` to a newer chart runs a newer operator over the older CRD: the API server
then prunes, without a word, every spec and status field the old schema lacks (a status condition
the operator writes is dropped; kubectl refuses a spec field the old schema lacks, other clients
lose it). The operator says so, in one warning line naming the fix, and in a gauge the chart's
PrometheusRule alerts on. It still runs: the trainings the older schema can hold keep going.

The check runs beside the operator, never before it: an API server that does not answer at the start
held the operator there (no probe answered) until it did. It asks again until it has an answer, each
wait longer (RETRY_SECONDS), and says in one line that it could not yet. The gauge stays NaN while it
does not know, and for good when the operator may not read CRDs (a ClusterRole without
customresourcedefinitions: one line saying so); it never reads 0 without a served digest to compare.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphtrain.contract.crd import DIGEST_ANNOTATION, crd
from graphtrain.contract.spec import GROUP, PLURAL
from graphtrain.operator import k8s

log = logging.getLogger(__name__)

CRD_NAME = f"{PLURAL}.{GROUP}"
UNKNOWN = object()  # no answer from the API server (or no CRD served): nothing is said
RETRY_SECONDS = (5.0, 15.0, 60.0, 300.0)  # the waits between attempts; the last repeats
ATTEMPTS = 100_000  # a bound: at the last wait, about a year of asking
DIGEST = re.compile(r"[0-9a-f]{64}")  # what contract/crd.py writes: anything else is shown as such


def own_digest() -> str:
    """The digest this operator's CRD carries (contract/crd.py computes it from the spec models)."""
    return str(crd()["metadata"]["annotations"][DIGEST_ANNOTATION])


def served_digest() -> str | None | int | object:
    """The served CRD's digest annotation; None when it has none (a chart older than the annotation),
    the status of a refusal (401, 403), UNKNOWN when the API server gave no answer or serves no CRD
    (the start's k8s.crd_unserved says so)."""
    found = k8s.crd_object()
    if isinstance(found, int):
        return found
    return UNKNOWN if not found else (found["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION)


def lagging(found: dict[str, Any] | int | None) -> bool:
    """Whether discovery's word that no GraphTraining is served is its lag, not the CRD's state: the CRD
    is there, Established and not being deleted (`found`: k8s.crd_object()'s). Discovery is rebuilt
    after the CRD (an API server restarted, one of several not synced yet): stopping the operator on
    it cost a restart. Not when the CRD could not be read: discovery's word stands."""
    if not isinstance(found, dict) or not found or found["metadata"].get("deletionTimestamp"):
        return False
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def skew(served: str | None | object, own: str) -> str | None:
    """The warning for a served CRD that is not this operator's, or None (the same, or not known). A
    served value is shown only as a digest (its first 12 characters): an annotation anyone with edit
    rights on the CRD wrote could otherwise put a line break, and a forged line, in the log."""
    if served is UNKNOWN or served == own:
        return None
    if served is None:
        which = "one without a schema digest (older)"
    elif isinstance(served, str) and DIGEST.fullmatch(served):
        which = f"schema digest {served[:12]}"
    else:
        which = "a schema digest not of this project's form (edited?)"
    return (
        f"the served CRD {CRD_NAME} is not this operator's ({which}; this operator's is {own[:12]}): "
        "the API server drops the fields its schema lacks; helm never upgrades a chart's CRD, so "
        "apply this version's: kubectl apply -f charts/graphtrain/crds/"
    )


@dataclass(frozen=True)
class Outcome:
    """What one attempt decides: the gauge's value (None: leave it NaN), the line to log (and its
    level), and whether to ask again later."""

    gauge: float | None
    line: str | None = None
    level: int = logging.WARNING
    again: bool = False


def decide(served: str | None | int | object, own: str, attempt: int) -> Outcome:
    """The outcome of the served digest (served_digest's answer) at the `attempt`-th try (0 first)."""
    if isinstance(served, int) and not isinstance(served, bool):
        return Outcome(
            None,
            f"cannot read the CRD {CRD_NAME} (the API server answered {served}): its version is not "
            "checked and graphtrain_operator_crd_current stays NaN; the chart's ClusterRole grants list "
            "on customresourcedefinitions",
        )
    if served is UNKNOWN:
        line = None
        if attempt == 0:
            line = (
                f"no answer about the CRD {CRD_NAME} (the API server silent, or serving none): its "
                "version is checked later"
            )
        return Outcome(None, line, logging.INFO, again=True)
    warning = skew(served, own)
    return Outcome(0.0 if warning else 1.0, warning)


def report(
    set_gauge: Callable[[float], None],
    wait: Callable[[float], bool],
    read: Callable[[], str | None | int | object] = served_digest,
) -> None:
    """Compare the served CRD with this operator's until the API server answers: each line logged
    once, the gauge set once known. wait(seconds) -> True stops it (the operator stopping)."""
    own = own_digest()
    for attempt in range(ATTEMPTS):
        try:
            served = read()
        except Exception as exc:  # noqa: BLE001 - a check that fails must not stop the operator
            log.warning("cannot check the CRD %s's version: %s: %s", CRD_NAME, type(exc).__name__, exc)
            return
        outcome = decide(served, own, attempt)
        if outcome.line is not None:
            log.log(outcome.level, outcome.line)
        if outcome.gauge is not None:
            set_gauge(outcome.gauge)
        if not outcome.again or wait(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)]):
            return


def start(set_gauge: Callable[[float], None], stopping: threading.Event) -> threading.Thread:
    """report() in a daemon thread, ended by `stopping` (the operator's stop flag)."""
    thread = threading.Thread(target=report, args=(set_gauge, stopping.wait), name="crd-version", daemon=True)
    thread.start()
    return thread
