"""The restricted Pod Security Standard, plus what graphtrain asks of every pod, as a pure function.

`violations(pod_spec)` lists every way a pod spec falls short, one line each, naming the container;
`pod_specs(obj)` finds the pod spec in a Pod or in a workload's template (Deployment, StatefulSet, Job,
CronJob, DaemonSet, ReplicaSet). Used on every pod the chart renders (tests/chart/) and meant for every
child the operator creates.

Checked, after https://kubernetes.io/docs/concepts/security/pod-security-standards/ (restricted):
- no hostNetwork, hostPID, hostIPC, hostPort; only the restricted profile's volume types (no hostPath)
- runAsNonRoot true (on the pod, or on every container) and no container sets it false; no runAsUser 0
- seccomp RuntimeDefault or Localhost (on the pod, or on every container); Unconfined nowhere
- every container: allowPrivilegeEscalation false, not privileged, capabilities drop ALL and add
  nothing (restricted allows NET_BIND_SERVICE; graphtrain needs none)
and beyond the standard:
- every container: readOnlyRootFilesystem true, and requests and limits for both cpu and memory
Init containers count as containers everywhere.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def pod_specs(obj: Obj) -> list[tuple[str, Obj]]:
    """(kind/name, pod spec) of a Pod or of the pod template of a workload; [] for other kinds."""
    kind, name = obj.get("kind", ""), (obj.get("metadata") or {}).get("name", "")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return [(f"{kind}/{name}", spec)]
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template")
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob") and template:
        return [(f"{kind}/{name}", template.get("spec") or {})]
    return []


def _containers(pod: Obj) -> list[tuple[str, Obj]]:
    return [(f"init container {c.get('name')!r}", c) for c in pod.get("initContainers") or []] + [
        (f"container {c.get('name')!r}", c) for c in pod.get("containers") or []
    ]


def violations(pod: Obj) -> list[str]:
    """Every violation in a pod spec (the `spec` of a Pod, or a template's `spec`); [] when it passes."""
    found: list[str] = []
    pod_sc = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"pod: {field} is true")
    for vol in pod.get("volumes") or []:
        other = sorted(set(vol) - {"name"} - RESTRICTED_VOLUMES)
        if other:
            found.append(f"volume {vol.get('name')!r}: {', '.join(other)} is not a restricted volume type")
    if pod_sc.get("runAsUser") == 0:
        found.append("pod: runAsUser is 0 (root)")
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append("pod: seccompProfile is Unconfined")

    containers = _containers(pod)
    if not containers:
        found.append("pod: no containers")
    for where, c in containers:
        sc = c.get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{where}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser") == 0:
            found.append(f"{where}: runAsUser is 0 (root)")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_OK:
            found.append(f"{where}: seccompProfile is {seccomp or 'unset'}, not RuntimeDefault")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            found.append(f"{where}: privileged")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{where}: capabilities do not drop ALL")
        if caps.get("add"):
            found.append(f"{where}: capabilities add {', '.join(caps['add'])}")
        if sc.get("readOnlyRootFilesystem") is not True:
            found.append(f"{where}: readOnlyRootFilesystem is not true")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{where}: hostPort {port['hostPort']}")
        res = c.get("resources") or {}
        for section in ("requests", "limits"):
            missing = [r for r in ("cpu", "memory") if r not in (res.get(section) or {})]
            if missing:
                found.append(f"{where}: no {section} for {', '.join(missing)}")
    return found
