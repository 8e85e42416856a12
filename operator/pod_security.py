"""Who a training's pods run as, and what they may do: the restricted Pod Security Standard.

Non-root (the configured uid, 10001 by default, or none stated where the cluster assigns one, as
OpenShift's restricted SCC does: config.py PodSecurity), seccomp RuntimeDefault, every capability
dropped, no privilege escalation, a read-only root filesystem (/tmp is an emptyDir).
"""

from __future__ import annotations

from typing import Any

from graphtrain.operator.config import OperatorConfig

Obj = dict[str, Any]


def _ids(config: OperatorConfig, *keys: str) -> Obj:
    """`keys` (runAsUser, runAsGroup, fsGroup) at the configured uid; none where the cluster assigns it."""
    uid = config.pod_security.run_as_user
    return {} if uid is None else dict.fromkeys(keys, uid)


def container(config: OperatorConfig) -> Obj:
    """A container's securityContext."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        **_ids(config, "runAsUser"),
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod(config: OperatorConfig) -> Obj:
    """A pod's securityContext."""
    return {
        "runAsNonRoot": True,
        **_ids(config, "runAsUser", "runAsGroup", "fsGroup"),
        # the kubelet chowns the volume to fsGroup at every pod start, by default walking every file:
        # on a data claim of datasets, partitions and checkpoints that delays each shard and trainer pod
        # (each restart) by minutes; only when its root is not the group's
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
