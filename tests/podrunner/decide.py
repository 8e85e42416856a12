"""The pod runner's decisions, as pure functions of literal Kubernetes objects (dicts in, dicts out).

What the test API server lacks (tests/k8s.py: no controllers, no kubelet) is played by runner.py; every
choice it makes is made here, so a unit test can pin it with literal objects (tests/podrunner/
test_decide.py): the Job controller (pods from the template, backoffLimit, conditions), the StatefulSet
controller (Parallel: every ordinal at once, deleted or finished pods recreated, readyReplicas), the
garbage collector (background propagation: an object all of whose owners are gone), the kubelet's
$(VAR) expansion and downward API, probe bookkeeping, restart backoff, native sidecars (init
containers with restartPolicy Always: started first, restarted whatever the pod's policy, stopped once
the main containers are done, no say in the phase) and the pod status it reports, and cluster DNS as a
hosts file. Where the real controllers do more (rolling updates, Job parallelism or
activeDeadlineSeconds, plain init containers), the runner refuses or ignores (unplayed() says what
is refused at creation), and says which in runner.py's docstring. The runner's own names and addresses
(a pod's network namespace, its address in the runner's block, its podman container, its Memory
emptyDirs) are chosen in names.py, so that a re-created pod provably never meets the one still stopping
under its name (net.py says how they are used).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

Obj = dict[str, Any]

LABEL_JOB = "batch.kubernetes.io/job-name"
LABEL_STS_POD = "statefulset.kubernetes.io/pod-name"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
TERMINATION_MESSAGE_BYTES = 4096  # the kubelet's cap of a termination message
LOG_TAIL_LINES = 80  # FallbackToLogsOnError takes at most this many lines of the log (and 2048 bytes)
LOG_TAIL_BYTES = 2048
BACKOFF_FIRST, BACKOFF_CAP = 1.0, 10.0  # the kubelet's restart backoff is 10 s doubling to 300 s


# --------------------------------------------------------------------------- objects and owners


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def owner_ref(owner: Obj) -> Obj:
    m = meta(owner)
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: Obj, owner: Obj) -> bool:
    uid = meta(owner).get("uid")
    return any(r.get("uid") == uid for r in meta(obj).get("ownerReferences") or [])


def gc_victims(objects: Iterable[Obj], live_uids: set[str]) -> list[Obj]:
    """What the garbage collector deletes (background propagation): objects with ownerReferences none
    of whose owners exists any more (an object with one live owner left stays)."""
    out = []
    for obj in objects:
        refs = meta(obj).get("ownerReferences") or []
        if refs and not any(r.get("uid") in live_uids for r in refs):
            out.append(obj)
    return out


def pod_from_template(owner: Obj, name: str, labels: Mapping[str, str], **spec_extra: Any) -> Obj:
    """A pod of a Job's or StatefulSet's template: its labels plus the controller's, owned by it."""
    template = owner["spec"]["template"]
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta(owner)["namespace"],
            "labels": {**(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": {**template["spec"], **spec_extra},
    }


# ----------------------------------------------------------------------------------------- pods


def phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def terminal(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def exit_reason(exit_code: int) -> str:
    """The terminated state's reason, as the kubelet gives it (no OOM killer here to say OOMKilled)."""
    return "Completed" if exit_code == 0 else "Error"


def exit_code_of(returncode: int) -> int:
    """A process' return code as a container's exit code: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def termination_message(policy: str | None, written: str, log: str, exit_code: int) -> str:
    """What a terminated container reports: the file it wrote, else (FallbackToLogsOnError, on failure
    only) the tail of its log, capped as the kubelet caps them."""
    if written:
        return written[-TERMINATION_MESSAGE_BYTES:]
    if policy == "FallbackToLogsOnError" and exit_code != 0:
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        return tail[-LOG_TAIL_BYTES:]
    return ""


def restart_delay(restarts: int) -> float:
    """Seconds before restart number `restarts` + 1 (the kubelet's doubling backoff, shortened)."""
    return min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** max(0, restarts))


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


NOT_STARTED = ("ContainerCreating", "PodInitializing")  # waiting reasons of a pod still Pending


def pod_phase(policy: str, states: list[Obj], sidecars: list[Obj] | None = None) -> str:
    """A pod's phase from its main containers' states (`{"running": ...}` etc.) under its
    restartPolicy: Pending until they all started (PodInitializing: its sidecars start first); Running
    while one runs or will be restarted; Succeeded when all ended 0, Failed when one failed and none
    will restart. Sidecars' states (`sidecars`) have no say in which: their exit codes (143 after the
    SIGTERM that stops them) never fail a pod; but a finished pod stays Running while one of them still
    runs, so that Succeeded or Failed is reported once they are stopped, as the kubelet does."""
    if not states or any("waiting" in s and s["waiting"].get("reason") in NOT_STARTED for s in states):
        return "Pending"
    if any("running" in s or "waiting" in s for s in states):
        return "Running"
    codes = [s["terminated"]["exitCode"] for s in states]
    if policy == "Always":
        return "Running"
    if all(c == 0 for c in codes):
        done = "Succeeded"
    elif policy == "OnFailure":
        return "Running"
    else:
        done = "Failed"
    return "Running" if any("running" in s for s in sidecars or []) else done


def pod_ready(phase: str, statuses: list[Obj]) -> bool:
    """Ready and ContainersReady: a Running pod whose containers, main and sidecar, are all ready."""
    return phase == "Running" and all(s["ready"] for s in statuses)


def pod_conditions(
    scheduled: bool, ready: bool, now: str, old: list[Obj] | None = None, initialized: bool | None = None
) -> list[Obj]:
    """PodScheduled, Initialized (`initialized`, default `scheduled`: every sidecar started once),
    ContainersReady and Ready; lastTransitionTime kept while unchanged."""
    before = {c["type"]: c for c in old or []}
    out = []
    for kind, ok in (
        ("PodScheduled", scheduled),
        ("Initialized", scheduled if initialized is None else initialized),
        ("ContainersReady", ready),
        ("Ready", ready),
    ):
        status = "True" if ok else "False"
        prev = before.get(kind)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == status else now
        out.append({"type": kind, "status": status, "lastTransitionTime": since})
    return out


# ------------------------------------------------------------------------------- native sidecars


def is_sidecar(container: Obj) -> bool:
    """An init container with restartPolicy Always: a native sidecar (Kubernetes >= 1.29)."""
    return container.get("restartPolicy") == "Always"


def unplayed(spec: Obj) -> str | None:
    """Why the runner refuses a pod spec at creation (None: it plays it): plain init containers (run to
    completion before the others) and sidecars' startup probes are not played, nor subPath mounts; a
    pod that needs them fails visibly rather than runs differently."""
    for c in spec.get("initContainers") or []:
        if not is_sidecar(c):
            return (
                f"init container {c.get('name')}: initContainers are not played by the pod runner, "
                "only native sidecars (restartPolicy: Always)"
            )
        if "startupProbe" in c:
            return f"sidecar {c.get('name')}: startupProbe is not played by the pod runner"
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if any(m.get("subPath") for m in c.get("volumeMounts") or []):
            return f"container {c.get('name')}: subPath mounts are not played by the pod runner"
    return None


def start_gate(initialized: bool, sidecars_running: list[bool]) -> tuple[int, bool]:
    """(how many sidecars, from the first, may be started or restarted now; whether the main containers
    may start), as the kubelet initialises a pod: each sidecar once the one before it has started (no
    startup probe: once it runs), the main containers once every sidecar has; a pod `initialized`
    already (its main containers started) restarts any of them at any time."""
    n = len(sidecars_running)
    if initialized:
        return n, True
    first_down = next((i for i, up in enumerate(sidecars_running) if not up), n)
    return min(first_down + 1, n), first_down == n


def mains_done(states: list[Obj]) -> bool:
    """Whether every main container has ended for good (the runner marks a container terminated only
    once it will not be restarted): the sidecars are then stopped."""
    return bool(states) and all("terminated" in s for s in states)


def restarts(policy: str, exit_code: int, sidecar: bool, done: bool) -> bool:
    """Whether a container that exited is restarted: a sidecar whatever its exit code and the pod's
    restartPolicy, as long as the main containers are not `done`; a main container by the policy."""
    return not done if sidecar else should_restart(policy, exit_code)


def settled_sidecar(state: Obj, last: Obj | None, restarts: int) -> tuple[Obj, Obj | None, int]:
    """(state, lastState, restartCount) of a sidecar once the main containers are done: one waiting
    for its restart (back-off) is not restarted, so its last run's end is its state and the restart it
    waited for is not counted (a running one is stopped, and reports its own end)."""
    if "waiting" in state and last and "terminated" in last:
        return last, None, max(0, restarts - 1)
    return state, last, restarts


# --------------------------------------------------------------------- environment and expansion

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable is replaced, an undefined reference stays as
    written, and $$ is a literal $ ($$(VAR) is the text $(VAR))."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


_LABEL_PATH = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]$")


def field_ref(pod: Obj, path: str) -> str:
    """The downward API's value of a fieldRef path (what the kubelet supports for env)."""
    m, st, spec = meta(pod), pod.get("status") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": m.get("name"),
        "metadata.namespace": m.get("namespace"),
        "metadata.uid": m.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": st.get("podIP"),
        "status.hostIP": st.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    found = _LABEL_PATH.match(path)
    if found:
        return str((m.get(found.group(1)) or {}).get(found.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path!r}")


def container_env(
    pod: Obj, container: Obj, configmaps: Mapping[str, Obj], secrets: Mapping[str, Obj]
) -> dict[str, str]:
    """A container's environment: values (expanded from the variables before them), the downward API,
    ConfigMap and Secret keys (Secrets as stringData or base64 data). Raises KeyError naming a missing
    ConfigMap, Secret or key (CreateContainerConfigError) unless the reference is optional."""
    import base64

    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        src = item.get("valueFrom") or {}
        if "fieldRef" in src:
            env[name] = field_ref(pod, src["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in src or "secretKeyRef" in src:
            is_cm = "configMapKeyRef" in src
            ref = src["configMapKeyRef" if is_cm else "secretKeyRef"]
            obj = (configmaps if is_cm else secrets).get(ref["name"])
            data = {}
            if obj is not None:
                data = dict(obj.get("data") or {})
                if not is_cm:
                    data = {k: base64.b64decode(v).decode() for k, v in data.items()}
                    data.update(obj.get("stringData") or {})
            if ref["key"] in data:
                env[name] = data[ref["key"]]
            elif not ref.get("optional"):
                kind = "configmap" if is_cm else "secret"
                raise KeyError(f'{kind} "{ref["name"]}" has no key "{ref["key"]}"')
        else:
            raise ValueError(f"unsupported valueFrom of {name}: {sorted(src)}")
    return env


def command_line(container: Obj, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(command, args) with $(VAR) expanded from the container's environment."""
    return (
        [expand(str(a), env) for a in container.get("command") or []],
        [expand(str(a), env) for a in container.get("args") or []],
    )


def port_number(container: Obj, port: int | str) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')} has no port named {port!r}")


# -------------------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class ProbeTrack:
    """One probe's outcomes so far: consecutive successes and failures, and its verdict (a readiness
    probe starts failed, a liveness probe passed; thresholds flip them)."""

    passing: bool
    successes: int = 0
    failures: int = 0

    def record(self, ok: bool, probe: Obj) -> ProbeTrack:
        if ok:
            n = self.successes + 1
            flip = n >= int(probe.get("successThreshold", 1))
            return replace(self, successes=n, failures=0, passing=self.passing or flip)
        n = self.failures + 1
        flip = n >= int(probe.get("failureThreshold", 3))
        return replace(self, successes=0, failures=n, passing=self.passing and not flip)


def probe_timing(probe: Obj) -> tuple[float, float, float]:
    """(initial delay, period, timeout) in seconds, with Kubernetes' defaults."""
    return (
        float(probe.get("initialDelaySeconds", 0)),
        float(probe.get("periodSeconds", 10)),
        float(probe.get("timeoutSeconds", 1)),
    )


# ------------------------------------------------------------------------------------------ Jobs


def job_counts(job: Obj, pods: list[Obj]) -> tuple[int, int, int]:
    """(active, succeeded, failed) pods of a Job."""
    mine = [p for p in pods if owned_by(p, job)]
    return (
        sum(1 for p in mine if not terminal(p)),
        sum(1 for p in mine if phase(p) == "Succeeded"),
        sum(1 for p in mine if phase(p) == "Failed"),
    )


def job_decision(job: Obj, pods: list[Obj]) -> tuple[int, Obj]:
    """(pods to create, status) of a Job of one completion at a time: a new pod while none runs, none
    succeeded and the failures are within backoffLimit (default 6); Complete once one succeeded,
    Failed (BackoffLimitExceeded) once more than backoffLimit failed. A finished Job stays finished."""
    st = job.get("status") or {}
    conditions = st.get("conditions") or []
    finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)
    active, succeeded, failed = job_counts(job, pods)
    limit = int((job.get("spec") or {}).get("backoffLimit", 6))
    completions = int((job.get("spec") or {}).get("completions") or 1)
    status: Obj = {"active": active, "succeeded": succeeded, "failed": failed}
    if finished:
        return 0, {**status, "conditions": conditions}
    if succeeded >= completions:
        done = [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached"},
        ]
        return 0, {**status, "conditions": done}
    if failed > limit:
        why = {
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
        fail = [
            {"type": "FailureTarget", "status": "True", **why},
            {"type": "Failed", "status": "True", **why},
        ]
        return 0, {**status, "conditions": fail}
    return (1 if active == 0 else 0), status


# ---------------------------------------------------------------------------------- StatefulSets


def sts_pod_name(sts: Obj, ordinal: int) -> str:
    return f"{meta(sts)['name']}-{ordinal}"


def sts_decision(sts: Obj, pods: list[Obj]) -> tuple[list[int], list[str], Obj]:
    """(ordinals to create, pod names to delete, status) of a StatefulSet: every missing ordinal at once
    (podManagementPolicy Parallel; OrderedReady is not played), a finished pod deleted to be recreated
    (a StatefulSet's pods always run), ordinals at or above replicas deleted."""
    replicas = int((sts.get("spec") or {}).get("replicas", 1))
    mine = {meta(p)["name"]: p for p in pods if owned_by(p, sts)}
    create = [i for i in range(replicas) if sts_pod_name(sts, i) not in mine]
    delete = sorted(
        name
        for name, p in mine.items()
        if terminal(p) or not name.rsplit("-", 1)[-1].isdigit() or int(name.rsplit("-", 1)[-1]) >= replicas
    )
    live = [p for n, p in mine.items() if n not in delete]
    ready = sum(1 for p in live if is_ready(p))
    status = {
        "observedGeneration": meta(sts).get("generation", 1),
        "replicas": len(live),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": len(live),
        "updatedReplicas": len(live),
    }
    return create, delete, status


def sts_pod(sts: Obj, ordinal: int) -> Obj:
    name = sts_pod_name(sts, ordinal)
    labels = {LABEL_STS_POD: name, LABEL_POD_INDEX: str(ordinal)}
    return pod_from_template(sts, name, labels, hostname=name, subdomain=sts["spec"].get("serviceName"))


# ------------------------------------------------------------------------------------------ DNS


def _selects(selector: Mapping[str, str], pod: Obj) -> bool:
    labels = meta(pod).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def dns_names(pods: list[Obj], services: list[Obj]) -> list[tuple[str, str]]:
    """(IP, name) pairs of cluster DNS for pods with an IP: a pod with hostname and subdomain is
    `<hostname>.<subdomain>.<ns>.svc[.cluster.local]`; a Service is its selected pods' IPs (ready ones,
    or all of them for a headless Service that publishes not-ready addresses)."""
    out: list[tuple[str, str]] = []
    for pod in pods:
        ip, spec, m = (pod.get("status") or {}).get("podIP"), pod.get("spec") or {}, meta(pod)
        if not ip or terminal(pod):
            continue
        if spec.get("hostname") and spec.get("subdomain"):
            base = f"{spec['hostname']}.{spec['subdomain']}.{m['namespace']}.svc"
            out += [(ip, base), (ip, f"{base}.cluster.local")]
    for svc in services:
        m, spec = meta(svc), svc.get("spec") or {}
        everyone = spec.get("clusterIP") == "None" and spec.get("publishNotReadyAddresses")
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if (
                not ip
                or terminal(pod)
                or meta(pod).get("namespace") != m["namespace"]
                or not _selects(spec.get("selector") or {}, pod)
                or not (everyone or is_ready(pod))
            ):
                continue
            base = f"{m['name']}.{m['namespace']}.svc"
            out += [(ip, base), (ip, f"{base}.cluster.local")]
    return out


def hosts_file(own_ip: str, hostname: str, names: list[tuple[str, str]]) -> str:
    """A pod's /etc/hosts: localhost, its own host name on its own address, then cluster DNS."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", f"{own_ip}\t{hostname}"]
    lines += [f"{ip}\t{name}" for ip, name in names]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- scheduling

GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name")
GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name",)
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def pod_group(pod: Obj) -> str | None:
    """The group a pod belongs to (the coscheduling plugin's label, Kueue's, or Volcano's annotation)."""
    m = meta(pod)
    for key in GROUP_LABELS:
        if (m.get("labels") or {}).get(key):
            return str(m["labels"][key])
    for key in GROUP_ANNOTATIONS:
        if (m.get("annotations") or {}).get(key):
            return str(m["annotations"][key])
    return None


def min_members(pod: Obj, pod_groups: Mapping[tuple[str, str], int]) -> int | None:
    """The members a pod's group needs at once: its PodGroup's minMember, else Kueue's total count."""
    group = pod_group(pod)
    if group is None:
        return None
    found = pod_groups.get((meta(pod)["namespace"], group))
    if found is not None:
        return found
    total = (meta(pod).get("annotations") or {}).get(KUEUE_TOTAL)
    return int(total) if total and str(total).isdigit() else None


def unschedulable(
    pod: Obj,
    pods: list[Obj],
    admitted: set[tuple[str, str]],
    in_use: int,
    capacity: int | None,
    pod_groups: Mapping[tuple[str, str], int],
) -> str | None:
    """Why `pod` cannot be bound now (None: it can), as a scheduler with room for `capacity` running pods
    (None: no limit) that `in_use` admitted pods fill: a pod alone needs one free place; a pod of a
    group (gang) needs every member to exist and room for all the members not admitted yet at once, so
    a group starts whole or not at all. `admitted`: (namespace, name) of the pods already bound."""
    free = None if capacity is None else capacity - in_use
    group = pod_group(pod)
    need = min_members(pod, pod_groups)
    if group is None or need is None:
        if free is not None and free < 1:
            return f"0/1 nodes are available: {in_use}/{capacity} pods running"
        return None
    ns = meta(pod)["namespace"]
    members = [p for p in pods if meta(p)["namespace"] == ns and pod_group(p) == group and not terminal(p)]
    if len(members) < need:
        return f"pod group {group}: {len(members)} of {need} members exist"
    waiting = [p for p in members if (ns, meta(p)["name"]) not in admitted]
    if free is not None and len(waiting) > free:
        return f"pod group {group}: {len(waiting)} members to bind, {free} of {capacity} places free"
    return None
