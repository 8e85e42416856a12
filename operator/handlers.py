"""kopf handlers: thin. Every trigger (the GraphTraining created, resumed or changed; any labelled child
changed; a periodic timer for stall detection) runs the same reconcile: observe, plan, apply.

Run with `graphtrain operator` (or `kopf run -m graphtrain.operator.handlers`). Watches have server
and client timeouts (a silent watch is a known kopf pitfall), peering is off by default (one replica),
and kopf keeps its bookkeeping in annotations so the status holds only fields the CRD declares.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections import defaultdict
from typing import Any

import kopf

from graphtrain.operator import k8s
from graphtrain.operator import manifests as M
from graphtrain.operator.reconcile import plan

GROUP, VERSION, PLURAL = k8s.GROUP, k8s.VERSION, k8s.PLURAL
TIMER_SECONDS = float(os.environ.get("GRAPHTRAIN_OPERATOR_TIMER", "15"))
_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 30
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="operator.graphtrain.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="operator.graphtrain.io")
    settings.posting.enabled = False  # our own events, one per transition (k8s.post_event)
    k8s.load_config()


def reconcile(namespace: str, name: str) -> None:
    with _locks[(namespace, name)]:
        observed = k8s.observe(namespace, name)
        if observed is None:
            return
        image = os.environ.get("GRAPHTRAIN_IMAGE", M.DEFAULT_IMAGE)
        k8s.apply(plan(observed, image=image, token=secrets.token_hex(24)), observed)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_training(name: str, namespace: str, **_: Any) -> None:
    reconcile(namespace, name)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_delete(name: str, namespace: str, uid: str, logger: Any, **_: Any) -> None:
    """Children go with their GraphTraining (a finalizer holds it until they are deleted)."""
    with _locks[(namespace, name)]:
        logger.info(f"deleted {k8s.delete_children(namespace, name, uid)} children")


@kopf.timer(GROUP, VERSION, PLURAL, interval=TIMER_SECONDS, initial_delay=TIMER_SECONDS)
def on_timer(name: str, namespace: str, status: dict[str, Any], **_: Any) -> None:
    if status.get("phase") not in ("Succeeded", "Failed"):
        reconcile(namespace, name)


def _child(meta: dict[str, Any], namespace: str, **_: Any) -> None:
    training = (meta.get("labels") or {}).get(M.LABEL_TRAINING)
    if training and namespace:
        reconcile(namespace, training)


_LABELLED = {M.LABEL_TRAINING: kopf.PRESENT}
for _resource in (("v1", "pods"), ("batch/v1", "jobs"), ("apps/v1", "statefulsets"), ("v1", "configmaps")):
    kopf.on.event(*_resource, labels=_LABELLED)(_child)
