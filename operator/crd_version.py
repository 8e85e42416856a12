"""Is the served GraphTraining CRD the one this operator was built with?

helm installs a chart's crds/ on the first install and never upgrades them (helm's documented
limit), so `helm upgrade` to a newer chart runs a newer operator over the older CRD: the API server
then prunes, without a word, every spec and status field the old schema lacks (a status condition
the operator writes is dropped; kubectl refuses a spec field the old schema lacks, other clients
lose it). The operator says so at its start, in one warning line naming the fix, and in a gauge the
chart's PrometheusRule alerts on. It still runs: the trainings the older schema can hold keep going.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from graphtrain.contract.crd import DIGEST_ANNOTATION, crd
from graphtrain.contract.spec import GROUP, PLURAL
from graphtrain.operator import k8s

log = logging.getLogger(__name__)

CRD_NAME = f"{PLURAL}.{GROUP}"
UNKNOWN = object()  # no answer from the API server: nothing is said


def own_digest() -> str:
    """The digest this operator's CRD carries (contract/crd.py computes it from the spec models)."""
    return str(crd()["metadata"]["annotations"][DIGEST_ANNOTATION])


def served_digest() -> str | None | object:
    """The served CRD's digest annotation; None when it has none (a chart older than the annotation),
    UNKNOWN when the API server gave no answer or serves no CRD (the start's k8s.crd_unserved says so)."""
    annotations = k8s.crd_annotations()
    return UNKNOWN if annotations is None else annotations.get(DIGEST_ANNOTATION)


def skew(served: str | None | object, own: str) -> str | None:
    """The warning for a served CRD that is not this operator's, or None (the same, or not known)."""
    if served is UNKNOWN or served == own:
        return None
    which = "one without a schema digest (older)" if served is None else f"schema digest {str(served)[:12]}"
    return (
        f"the served CRD {CRD_NAME} is not this operator's ({which}; this operator's is {own[:12]}): "
        "the API server drops the fields its schema lacks; helm never upgrades a chart's CRD, so "
        "apply this version's: kubectl apply -f charts/graphtrain/crds/"
    )


def report(set_gauge: Callable[[float], None]) -> None:
    """Compare the served CRD with this operator's once, log the skew at WARNING, and set the gauge
    (`set_gauge(1)` the same, `set_gauge(0)` another; not set when the API server gave no answer)."""
    served = served_digest()
    if served is UNKNOWN:
        return
    own = own_digest()
    warning = skew(served, own)
    if warning is not None:
        log.warning(warning)
    set_gauge(0 if warning else 1)
