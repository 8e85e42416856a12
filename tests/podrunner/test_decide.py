"""The pod runner's decisions on literal objects: what each controller and the kubelet would do."""

from __future__ import annotations

import pytest

from tests.podrunner import decide, podnames

NS = "ml"


def owner(kind: str, name: str, uid: str, spec: dict, status: dict | None = None) -> dict:
    api = {"Job": "batch/v1", "StatefulSet": "apps/v1"}[kind]
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 2},
        "spec": spec,
        "status": status or {},
    }


TEMPLATE = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]},
}


IPS: dict[str, str] = {}


def pod(name: str, owner_uid: str | None, phase: str = "Running", ready: bool = False, **spec) -> dict:
    meta: dict = {"name": name, "namespace": NS, "uid": f"u-{name}", "labels": {"app": "x"}}
    if owner_uid:
        meta["ownerReferences"] = [{"uid": owner_uid, "kind": "X", "name": "o"}]
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": conds,
            "podIP": IPS.setdefault(name, f"127.0.1.{len(IPS) + 2}"),
        },
    }


# ------------------------------------------------------------------------------------------- Jobs


@pytest.mark.parametrize(
    ("phases", "limit", "create", "outcome"),
    [
        ([], 1, 1, None),  # nothing yet: one pod
        (["Running"], 1, 0, None),  # one runs: wait
        (["Failed"], 1, 1, None),  # one failure within backoffLimit 1: retry
        (["Failed", "Failed"], 1, 0, "Failed"),  # two failures, limit 1: BackoffLimitExceeded
        (["Failed"], 0, 0, "Failed"),
        (["Failed", "Succeeded"], 1, 0, "Complete"),
    ],
)
def test_job_pods_backoff_and_conditions(
    phases: list[str], limit: int, create: int, outcome: str | None
) -> None:
    job = owner("Job", "p", "J", {"backoffLimit": limit, "template": TEMPLATE})
    pods = [pod(f"p-{i}", "J", ph) for i, ph in enumerate(phases)] + [pod("other", "K", "Failed")]
    n, status = decide.job_decision(job, pods)
    assert n == create
    types = {c["type"] for c in status.get("conditions", [])}
    assert (outcome in types) if outcome else not types
    if outcome == "Failed":
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
    assert status["failed"] == phases.count("Failed")  # another Job's pod is not counted


def test_a_finished_job_stays_finished() -> None:
    done = [{"type": "Complete", "status": "True"}]
    job = owner("Job", "p", "J", {"template": TEMPLATE}, {"conditions": done})
    assert decide.job_decision(job, []) == (0, {"active": 0, "succeeded": 0, "failed": 0, "conditions": done})


def test_a_job_pod_comes_from_the_template_owned_by_the_job() -> None:
    job = owner("Job", "p", "J", {"template": TEMPLATE})
    p = decide.pod_from_template(job, "p-abcde", {decide.LABEL_JOB: "p"})
    assert p["metadata"]["labels"] == {"app": "x", decide.LABEL_JOB: "p"}
    assert p["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "p",
        "uid": "J",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert p["spec"]["restartPolicy"] == "Never"


# ---------------------------------------------------------------------------------- StatefulSets


def test_statefulset_creates_every_missing_ordinal_and_recreates_finished_pods() -> None:
    sts = owner("StatefulSet", "s", "S", {"replicas": 3, "serviceName": "svc", "template": TEMPLATE})
    pods = [pod("s-0", "S", ready=True), pod("s-1", "S", "Failed"), pod("s-5", "S"), pod("s-2", "T")]
    create, delete, status = decide.sts_decision(sts, pods)
    assert create == [2]  # s-2 belongs to another owner: this one's ordinal 2 is missing
    assert delete == ["s-1", "s-5"]  # finished: recreated next; above replicas: scaled down
    assert status["readyReplicas"] == 1 and status["replicas"] == 1 and status["observedGeneration"] == 2
    p = decide.sts_pod(sts, 2)
    assert (
        p["metadata"]["name"] == "s-2" and p["spec"]["hostname"] == "s-2" and p["spec"]["subdomain"] == "svc"
    )
    assert p["metadata"]["labels"][decide.LABEL_POD_INDEX] == "2"


# ------------------------------------------------------------------------------------------- GC


def test_gc_deletes_objects_all_of_whose_owners_are_gone() -> None:
    orphan = pod("a", "gone")
    two = pod("b", "gone")
    two["metadata"]["ownerReferences"].append({"uid": "here"})
    free = pod("c", None)
    assert decide.gc_victims([orphan, two, free], {"here"}) == [orphan]


# ------------------------------------------------------------------------------- env and probes


def test_expansion_follows_kubernetes() -> None:
    env = {"POD_IP": "127.0.0.7", "A": "x"}
    assert decide.expand("tcp://$(POD_IP):7000", env) == "tcp://127.0.0.7:7000"
    assert decide.expand("$(MISSING) $$(A) $$ $(A)", env) == "$(MISSING) $(A) $ x"


def test_container_env_downward_api_and_references() -> None:
    p = pod("s-0", None)
    p["metadata"]["labels"]["rank"] = "3"
    container = {
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['rank']"}}},
            {"name": "ADDR", "value": "$(POD_IP):1"},
            {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "c"}}},
        ]
    }
    secrets = {"s": {"data": {"k": "dmFs"}}}  # base64 of "val"
    env = decide.container_env(p, container, {"m": {"data": {"c": "cv"}}}, secrets)
    ip = p["status"]["podIP"]
    assert env == {"POD_IP": ip, "NS": NS, "RANK": "3", "ADDR": f"{ip}:1", "K": "val", "C": "cv"}
    with pytest.raises(KeyError, match='secret "s" has no key "k"'):
        decide.container_env(p, container, {"m": {"data": {"c": "cv"}}}, {})
    assert decide.command_line({"command": ["g"], "args": ["--bind", "$(ADDR)"]}, env) == (
        ["g"],
        ["--bind", f"{ip}:1"],
    )
    assert (
        decide.port_number({"name": "c", "ports": [{"name": "metrics", "containerPort": 9090}]}, "metrics")
        == 9090
    )


def test_probe_thresholds() -> None:
    probe = {"failureThreshold": 2, "successThreshold": 2}
    ready = decide.ProbeTrack(passing=False).record(True, probe)
    assert not ready.passing
    ready = ready.record(True, probe)
    assert ready.passing
    ready = ready.record(False, probe)
    assert ready.passing  # one failure of two allowed
    assert not ready.record(False, probe).passing
    assert decide.probe_timing({}) == (0.0, 10.0, 1.0)


# -------------------------------------------------------------------------- container to pod status


@pytest.mark.parametrize(
    ("policy", "states", "phase"),
    [
        ("Never", [{"running": {}}], "Running"),
        ("Never", [{"terminated": {"exitCode": 0}}], "Succeeded"),
        ("Never", [{"terminated": {"exitCode": 1}}], "Failed"),
        ("OnFailure", [{"terminated": {"exitCode": 0}}], "Succeeded"),
        ("Always", [{"waiting": {"reason": "CrashLoopBackOff"}}], "Running"),
        ("Never", [{"waiting": {"reason": "ContainerCreating"}}], "Pending"),
    ],
)
def test_pod_phase_from_container_states(policy: str, states: list[dict], phase: str) -> None:
    assert decide.pod_phase(policy, states) == phase


def test_exit_codes_reasons_and_termination_messages() -> None:
    assert (decide.exit_code_of(-9), decide.exit_code_of(3)) == (137, 3)
    assert (decide.exit_reason(0), decide.exit_reason(137)) == ("Completed", "Error")
    log = "\n".join(f"line {i}" for i in range(200))
    assert decide.termination_message("FallbackToLogsOnError", "", log, 1).splitlines()[-1] == "line 199"
    assert decide.termination_message("FallbackToLogsOnError", "", log, 0) == ""  # only on error
    assert decide.termination_message("File", "", log, 1) == ""
    assert decide.termination_message("FallbackToLogsOnError", "written", log, 1) == "written"
    assert [decide.restart_delay(n) for n in range(6)] == [1, 2, 4, 8, 10, 10]
    assert decide.should_restart("OnFailure", 1) and not decide.should_restart("OnFailure", 0)


def test_pod_conditions_keep_their_transition_times() -> None:
    old = decide.pod_conditions(True, False, "t0")
    new = decide.pod_conditions(True, True, "t1", old)
    assert {c["type"]: c["lastTransitionTime"] for c in new} == {
        "PodScheduled": "t0",
        "Initialized": "t0",
        "ContainersReady": "t1",
        "Ready": "t1",
    }


# --------------------------------------------------------------------------------- native sidecars

RUN, DONE0, DONE1 = {"running": {}}, {"terminated": {"exitCode": 0}}, {"terminated": {"exitCode": 1}}
STOPPED = {"terminated": {"exitCode": 143}}  # a sidecar after the SIGTERM that stops it
SIDECAR = {"name": "shard-server", "restartPolicy": "Always", "readinessProbe": {}}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"initContainers": [SIDECAR], "containers": [{"name": "t"}]}, None),
        ({"initContainers": [{"name": "setup"}]}, "initContainers are not played"),
        ({"initContainers": [{**SIDECAR, "startupProbe": {}}]}, "startupProbe is not played"),
        (
            {"containers": [{"name": "t", "volumeMounts": [{"name": "v", "subPath": "x"}]}]},
            "subPath mounts are not played",
        ),
    ],
)
def test_only_sidecars_are_played_of_the_init_containers(spec: dict, why: str | None) -> None:
    refused = decide.unplayed(spec)
    assert refused is None if why is None else why in (refused or "")
    assert decide.is_sidecar(SIDECAR) and not decide.is_sidecar({"name": "setup"})


@pytest.mark.parametrize(
    ("initialized", "running", "gate"),
    [
        (False, [], (0, True)),  # no sidecar: the main containers at once
        (False, [False, False], (1, False)),  # the first sidecar, alone
        (False, [True, False], (2, False)),  # the second once the first runs
        (False, [True, True], (2, True)),  # the main containers once all run
        (False, [False, True], (1, False)),  # the first down again before the pod started: it alone
        (True, [False, True], (2, True)),  # a started pod restarts any sidecar, its mains go on
    ],
)
def test_sidecars_start_in_order_before_the_main_containers(
    initialized: bool, running: list[bool], gate: tuple[int, bool]
) -> None:
    assert decide.start_gate(initialized, running) == gate


def test_a_sidecar_restarts_whatever_the_policy_until_the_main_containers_are_done() -> None:
    assert not decide.mains_done([]) and not decide.mains_done([DONE0, RUN])
    assert decide.mains_done([DONE0, DONE1])
    for code in (0, 1, 137):  # restartPolicy Never: the main container is not restarted, the sidecar is
        assert decide.restarts("Always", code, sidecar=True, done=False)
        assert not decide.restarts("Always", code, sidecar=True, done=True)
        assert not decide.restarts("Never", code, sidecar=False, done=False)
    assert decide.restarts("OnFailure", 1, sidecar=False, done=False)


def test_a_sidecar_waiting_for_its_restart_when_the_pod_ends_keeps_its_last_end() -> None:
    last = {"terminated": {"exitCode": 137}}
    backoff = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert decide.settled_sidecar(backoff, last, 2) == (last, None, 1)  # the awaited restart not counted
    assert decide.settled_sidecar(RUN, last, 1) == (RUN, last, 1)  # running: stopped, reports its own end


@pytest.mark.parametrize(
    ("policy", "mains", "sidecars", "phase"),
    [
        ("Never", [{"waiting": {"reason": "PodInitializing"}}], [RUN], "Pending"),
        ("Never", [RUN], [RUN], "Running"),
        ("Never", [DONE0, DONE0], [RUN], "Running"),  # done, its sidecar still stopping: not yet
        ("Never", [DONE0, DONE0], [STOPPED], "Succeeded"),  # a sidecar's 143 fails nothing
        ("Never", [DONE0, DONE1], [STOPPED], "Failed"),
        ("Never", [DONE0, RUN], [{"waiting": {"reason": "CrashLoopBackOff"}}], "Running"),
        ("OnFailure", [DONE0], [{"terminated": {"exitCode": 1}}], "Succeeded"),
    ],
)
def test_the_phase_is_the_main_containers_once_the_sidecars_stopped(
    policy: str, mains: list[dict], sidecars: list[dict], phase: str
) -> None:
    assert decide.pod_phase(policy, mains, sidecars) == phase


def test_ready_needs_every_container_sidecars_included_and_initialized_follows_them() -> None:
    assert decide.pod_ready("Running", [{"ready": True}, {"ready": True}])
    assert not decide.pod_ready("Running", [{"ready": True}, {"ready": False}])  # the sidecar's probe
    assert not decide.pod_ready("Succeeded", [{"ready": True}])
    conditions = decide.pod_conditions(True, False, "t0", initialized=False)
    assert {c["type"]: c["status"] for c in conditions}["Initialized"] == "False"


def test_a_pods_containers_have_podman_names_of_their_own() -> None:
    names = {podnames.container_name("r", 3, "worker-0", n, i) for i in range(3) for n in range(3)}
    assert len(names) == 9
    assert podnames.container_name("r", 3, "worker-0", 1) == podnames.container_name("r", 3, "worker-0", 1, 0)
    assert podnames.memory_dir(123) == "/dev/shm/gtpr123"


# -------------------------------------------------------------------------------------------- DNS


def test_dns_names_of_pods_and_services() -> None:
    shard = pod("s-0", None, ready=False, hostname="s-0", subdomain="s")
    trainer = pod("t-0", None, ready=True)
    done = pod("t-1", None, "Succeeded", ready=True)
    headless = {
        "metadata": {"name": "s", "namespace": NS},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "x"}},
    }
    plain = {"metadata": {"name": "web", "namespace": NS}, "spec": {"selector": {"app": "x"}}}
    names = decide.dns_names([shard, trainer, done], [headless, plain])
    ip_s, ip_t = shard["status"]["podIP"], trainer["status"]["podIP"]
    assert (ip_s, f"s-0.s.{NS}.svc") in names and (ip_s, f"s-0.s.{NS}.svc.cluster.local") in names
    assert (ip_s, f"s.{NS}.svc") in names  # headless, publishing not-ready addresses
    assert (ip_s, f"web.{NS}.svc") not in names and (ip_t, f"web.{NS}.svc") in names  # ready endpoints only
    assert not [n for ip, n in names if ip == done["status"]["podIP"]]  # a finished pod has no name
    hosts = decide.hosts_file("127.0.0.9", "s-0", names)
    assert hosts.startswith("127.0.0.1\tlocalhost\n") and "127.0.0.9\ts-0\n" in hosts


def _grouped(name: str, group: str | None, ns: str = "a", **meta_extra: object) -> dict:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels, **meta_extra}, "status": {}}


def test_a_gang_is_bound_whole_or_not_at_all() -> None:
    groups = {("a", "g"): 3}
    two = [_grouped("p0", "g"), _grouped("p1", "g")]
    assert "2 of 3 members exist" in (decide.unschedulable(two[0], two, set(), 0, 10, groups) or "")
    three = [*two, _grouped("p2", "g")]
    assert decide.unschedulable(three[0], three, set(), 0, 10, groups) is None
    # room for 2 while 3 wait: none is bound (a half-started gang is what it prevents)
    assert "3 members to bind, 2 of 10 places free" in (
        decide.unschedulable(three[0], three, set(), 8, 10, groups) or ""
    )
    # the rest of a gang whose first members are bound already needs room for the rest only
    assert decide.unschedulable(three[2], three, {("a", "p0"), ("a", "p1")}, 9, 10, groups) is None


def test_a_pod_alone_needs_one_place_and_kueue_counts_its_group_by_annotation() -> None:
    alone = _grouped("x", None)
    assert decide.unschedulable(alone, [alone], set(), 2, 3, {}) is None
    assert "3/3 pods running" in (decide.unschedulable(alone, [alone], set(), 3, 3, {}) or "")
    assert decide.unschedulable(alone, [alone], set(), 99, None, {}) is None
    kueue = {
        "labels": {"kueue.x-k8s.io/pod-group-name": "k"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
    }
    k0 = {"metadata": {"name": "k0", "namespace": "a", **kueue}, "status": {}}
    assert "1 of 2 members exist" in (decide.unschedulable(k0, [k0], set(), 0, 5, {}) or "")
    volcano = {
        "metadata": {"name": "v", "namespace": "a", "annotations": {"scheduling.k8s.io/group-name": "vg"}}
    }
    assert decide.pod_group(volcano) == "vg"
