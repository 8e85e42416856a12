"""The trainers' Kubernetes progress adapter: the one runtime module that talks to the Kubernetes API
(import-linter's `kubernetes` contract names it, beside operator/k8s.py).

In a pod (`graphtrain train --progress-configmap <name>`), each rank patches its report into the
training's progress ConfigMap, in the schema of spec.reporting; the operator reads it from there.
Why a ConfigMap and not the GraphTraining's status: see operator/manifests.py.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

import kubernetes

from graphtrain.contract import reporting
from graphtrain.contract.spec import Progress

_configured = False
_configure_lock = threading.Lock()


def load_config() -> None:
    """In-cluster credentials in a pod, else $KUBECONFIG (a trainer outside the cluster, e.g. in tests);
    once per process."""
    global _configured
    with _configure_lock:
        if _configured:
            return
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config()
        else:
            kubernetes.config.load_kube_config()
        _configured = True


class ConfigMapSink:
    """Patches this rank's reports into the progress ConfigMap, at most every HEARTBEAT_SECONDS (a final
    report always): heartbeats often enough for stall detection, few enough API calls. Rank 0's history,
    given at the end of an epoch, goes with the next patch that is sent (so epochs shorter than a
    heartbeat cost no extra call, and the final report carries the whole history). Best effort: a failed
    patch costs one heartbeat, never the training."""

    HEARTBEAT_SECONDS = 5.0
    TIMEOUT = (5.0, 10.0)  # seconds to connect, to answer: a hung API server delays the final report only
    ATTEMPTS = 5  # a patch refused for a conflict (409) is sent again, up to this many times in all

    def __init__(
        self,
        name: str,
        rank: int,
        namespace: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.name, self.rank = name, rank
        self.namespace = namespace or os.environ.get("POD_NAMESPACE", "default")  # set by the pod spec
        self.clock = clock
        self._last: float | None = None
        self._history: str | None = None  # the history not sent yet

    def write(self, progress: Progress, final: bool, history: list[Progress] | None = None) -> None:
        if history is not None:
            self._history = reporting.encode_history(history)
        now = self.clock()
        if not final and self._last is not None and now - self._last < self.HEARTBEAT_SECONDS:
            return
        self._last = now
        data = reporting.configmap_data(progress, self.rank)
        if self._history is not None:
            data[reporting.HISTORY_KEY] = self._history
        if self._patch({"data": data}):
            self._history = None

    def load_history(self) -> list[Progress]:
        """The history in the ConfigMap (a restarted rank 0 continues it); [] if it cannot be read."""
        try:
            load_config()
            cm = kubernetes.client.CoreV1Api().read_namespaced_config_map(self.name, self.namespace)
        except Exception as exc:  # noqa: BLE001 - best effort, see the class docstring
            print(f"[trainer] progress ConfigMap {self.name}: history not read ({exc})", file=sys.stderr)
            return []
        return reporting.decode_history((cm.data or {}).get(reporting.HISTORY_KEY))

    def _patch(self, body: dict[str, dict[str, str]]) -> bool:
        """Send one patch (again after a conflict); whether it went through."""
        for attempt in range(self.ATTEMPTS):
            try:
                load_config()
                kubernetes.client.CoreV1Api().patch_namespaced_config_map(
                    self.name, self.namespace, body, _request_timeout=self.TIMEOUT
                )
                return True
            except kubernetes.client.ApiException as exc:
                # 409: another rank's patch won a race the server did not retry itself (a real API
                # server retries a patch's conflicts; a stand-in may not): this rank's keys are its own
                if exc.status == 409 and attempt + 1 < self.ATTEMPTS:
                    time.sleep(0.05 * 2**attempt)
                    continue
                print(f"[trainer] progress ConfigMap {self.name}: {exc.status} {exc.reason}", file=sys.stderr)
                return False
            except Exception as exc:  # noqa: BLE001 - best effort, see the class docstring
                print(f"[trainer] progress ConfigMap {self.name}: {exc}", file=sys.stderr, flush=True)
                return False
        return False
