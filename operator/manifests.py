"""Pure builders of every child of a GraphTraining: dicts in, dicts out, no API calls.

Children of `<name>` (docs/architecture.md §2; names and labels from contract/children.py), all with an
ownerReference to the GraphTraining and the labels graphtrain.io/training and graphtrain.io/role:
  <name>-config     ConfigMap: the applied spec (spec.yaml), read by every container
  <name>-token      Secret: the shard servers' shared token
  <name>-progress   ConfigMap: progress and per-rank heartbeats written by the trainers
  <name>-trainer    ServiceAccount + Role + RoleBinding: get/patch of <name>-progress only
  <name>-data       PersistentVolumeClaim (unless storage.volumeClaimName names one); owned only with
                    storage.whenDeleted Delete, else retained (and reused by a later training of the name)
  <name>-partition  Job: `graphtrain partition`, stats in its termination message
  <name>-shards     headless Service + StatefulSet: `graphtrain shard-server`, one per partition;
                    NetworkPolicy: the kvstore port open to this training's trainers and partition pod
                    only, the metrics port to its pods and the configured scrapers;
                    PodDisruptionBudget: no voluntary eviction of a shard server (maxUnavailable 0)
  <name>-trainers   headless Service for the trainers' rendezvous
  <name>-trainer-i  Pods: `graphtrain train --rank i`, restartPolicy Never (the operator restarts them);
                    Prometheus metrics on their pod IP's METRICS_PORT (named `metrics`, as the shards')
  <name>-worker-p   with partition locality, in place of the StatefulSet and trainer pods: partition
                    p's shard server and trainers in one pod (operator/workers.py)

Why trainers report through a ConfigMap and not the GraphTraining's status: the operator stays the
only writer of status (no races, no status field a trainer could forge), heartbeats every few seconds
do not bump the custom resource's resourceVersion or wake its handlers, and the Role can name exactly
one object (resourceNames), which a status patch permission on graphtrainings/status cannot.

Every pod meets the restricted Pod Security Standard (pod_security.py: non-root, seccomp RuntimeDefault,
every capability dropped, no privilege escalation, a read-only root filesystem with /tmp an emptyDir)
and has requests and limits. Its image, resources and scheduling fields come from placement.py: the
spec's own when set, else the operator configuration's defaults for the role.

Why a PodDisruptionBudget of maxUnavailable 0: a shard server holds its partition's rows and their
optimizer state; evicting it (a node drain) loses the updates since the last checkpoint and stalls every
trainer. The budget makes a drain wait, and the cluster administrator decide, while a training runs.
"""

from __future__ import annotations

from typing import Any

import yaml

from graphtrain.contract import roles
from graphtrain.contract.children import (
    LABEL_ATTEMPT,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_TRAINING,
    SHARD_CONTAINER,
    labels,
    names,
    owner_reference,
    trainer_name,
    worker_name,
)
from graphtrain.contract.spec import (
    API_VERSION,
    KIND,
    ClaimRetention,
    Device,
    GraphTraining,
    MemoryNeed,
    colocated,
)
from graphtrain.contract.spec.locality import resolved
from graphtrain.operator import gang, placement, pod_metadata, pod_security
from graphtrain.operator.config import OperatorConfig
from graphtrain.operator.volume import CONFIG_DIR, TOKEN_DIR, Layout

SHARD_PORT = 7000
FAST_PORT = 7001  # the shard server's fast lane (small pulls; its health reply names it to clients)
METRICS_PORT = 9090
RENDEZVOUS_PORT = 29500
TERMINATION_LOG = "/dev/termination-log"  # the partition pod's stats, read back from its status
POD_IP_ENV = "POD_IP"  # a pod's own address (downward API status.podIP): what its servers bind

Obj = dict[str, Any]


def _meta(owner: Obj, name: str, role: str, **extra: str) -> Obj:
    training = owner["metadata"]["name"]
    return {
        "name": name,
        "namespace": owner["metadata"]["namespace"],
        "labels": labels(training, role, **extra),
        "ownerReferences": [owner_reference(owner)],
    }


# ------------------------------------------------------------------------------------ pod pieces


def _volumes(gt: GraphTraining, token: bool) -> list[Obj]:
    n = names(gt.metadata.name)
    claim = gt.spec.storage.volume_claim_name or n["data"]
    vols = [
        {"name": "config", "configMap": {"name": n["config"]}},
        {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if token:
        vols.append({"name": "token", "secret": {"secretName": n["token"], "defaultMode": 0o400}})
    return vols


def _mounts(gt: GraphTraining, token: bool) -> list[Obj]:
    mounts: list[Obj] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "data", "mountPath": Layout(gt).mount},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if token:
        mounts.append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
    return mounts


def _container(
    gt: GraphTraining,
    config: OperatorConfig,
    pod: placement.PodSettings,
    name: str,
    args: list[str],
    token: bool,
    **extra: Any,
) -> Obj:
    env = [{"name": "GRAPHTRAIN_DATA", "value": Layout(gt).data}, {"name": "GRAPHTRAIN_QUIET", "value": "1"}]
    env += [{"name": k, "value": v} for k, v in roles.process_env({}).items()]
    if config.storage.offline:  # datasets come pre-seeded on the claim; a missing one fails, naming it
        env.append({"name": roles.ENV_OFFLINE, "value": "1"})
    return {
        "name": name,
        "image": pod.image,
        "imagePullPolicy": pod.pull_policy,
        "command": [roles.PROGRAM],
        "args": args,
        "env": env,
        "volumeMounts": _mounts(gt, token),
        "securityContext": pod_security.container(config),
        "resources": pod.resources,
        # a role's error is the last line of its log, which a failed container's status then carries
        # (the partition's report file, when written, comes first): the operator's conditions name it
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **extra,
    }


def _pod_spec(
    gt: GraphTraining,
    config: OperatorConfig,
    pod: placement.PodSettings,
    containers: list[Obj],
    token: bool,
    **extra: Any,
) -> Obj:
    return {
        "containers": containers,
        "volumes": _volumes(gt, token),
        "securityContext": pod_security.pod(config),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        **pod.pod_spec,
        **extra,
    }


# -------------------------------------------------------------------------------------- children


def config_map(owner: Obj, gt: GraphTraining) -> Obj:
    """The applied spec: what every container runs, and what the operator compares updates against."""
    meta = {"name": gt.metadata.name, "namespace": owner["metadata"]["namespace"]}
    if owner["metadata"].get("uid"):  # the work directory's name (Layout), fixed with the applied spec
        meta["uid"] = owner["metadata"]["uid"]
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        # the default locality decided once: what it means may not change under a running training
        "spec": resolved(gt.spec).model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    n = names(gt.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, n["config"], "config"),
        "data": {"spec.yaml": yaml.safe_dump(body, sort_keys=False)},
    }


def token_secret(owner: Obj, gt: GraphTraining, token: str) -> Obj:
    n = names(gt.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(owner, n["token"], "token"),
        "type": "Opaque",
        "stringData": {"token": token},
    }


def progress_map(owner: Obj, gt: GraphTraining) -> Obj:
    n = names(gt.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, n["progress"], "progress"),
        "data": {},
    }


def trainer_rbac(owner: Obj, gt: GraphTraining) -> list[Obj]:
    """ServiceAccount, Role, RoleBinding: trainers may read and patch their progress map, nothing else."""
    n = names(gt.metadata.name)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(owner, n["account"], "rbac"),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(owner, n["account"], "rbac"),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [n["progress"]],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(owner, n["account"], "rbac"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n["account"]},
            "subjects": [
                {"kind": "ServiceAccount", "name": n["account"], "namespace": owner["metadata"]["namespace"]}
            ],
        },
    ]


def data_claim(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj | None:
    """The shared volume for data, partitions and checkpoints, unless the spec names an existing claim.
    Owned by the training (deleted with it) only with storage.whenDeleted Delete: a retained claim has
    no ownerReference, so neither the garbage collector nor the operator's delete handler takes it."""
    if gt.spec.storage.volume_claim_name:
        return None
    claim = placement.claim_settings(gt.spec.storage, config)
    spec: Obj = {"accessModes": claim.access_modes, "resources": {"requests": {"storage": claim.size}}}
    if claim.storage_class_name is not None:
        spec["storageClassName"] = claim.storage_class_name
    n = names(gt.metadata.name)
    meta = _meta(owner, n["data"], "data")
    if gt.spec.storage.when_deleted != ClaimRetention.delete:
        del meta["ownerReferences"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def retained_claim(claim: Obj, training: str) -> bool:
    """`claim` (a PersistentVolumeClaim) is the data claim of the training named `training` kept with
    storage.whenDeleted Retain (no ownerReference): the training of that name uses it, like a
    StatefulSet's retained claims, whichever training made it; its own work directory keeps it from
    resuming another's checkpoints (Layout)."""
    meta = claim.get("metadata") or {}
    return (
        meta.get("name") == names(training)["data"]
        and (meta.get("labels") or {}).get(LABEL_TRAINING) == training
        and not meta.get("ownerReferences")
    )


def partition_job(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj:
    """Partitions the graph onto the shared volume; its compact stats end in the termination message."""
    n, lay = names(gt.metadata.name), Layout(gt)
    pod = placement.pod_settings(gt.spec, config, "partition")
    args = roles.partition(lay.files, data_dir=lay.data, report_file=TERMINATION_LOG, base_dir=lay.mount)
    container = _container(gt, config, pod, "partition", args, token=False)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(owner, n["partition"], "partition"),
        "spec": {
            "backoffLimit": 1,
            "template": {
                "metadata": pod_metadata.dress(gt, {"labels": labels(gt.metadata.name, "partition")}),
                "spec": _pod_spec(gt, config, pod, [container], token=False, restartPolicy="Never"),
            },
        },
    }


def _headless(owner: Obj, gt: GraphTraining, name: str, role: str, ports: dict[str, int]) -> Obj:
    """A headless Service: stable DNS names per pod, published before the pods are ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(owner, name, role),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_TRAINING: gt.metadata.name, LABEL_ROLE: role},
            "ports": [{"name": k, "port": v, "targetPort": v} for k, v in ports.items()],
        },
    }


def shard_service(owner: Obj, gt: GraphTraining) -> Obj:
    n = names(gt.metadata.name)
    return _headless(
        owner,
        gt,
        n["shards"],
        "shards",
        {"kvstore": SHARD_PORT, "kvstore-fast": FAST_PORT, "metrics": METRICS_PORT},
    )


def shard_addresses(gt: GraphTraining, namespace: str) -> list[str]:
    """Each shard server's kvstore address: its StatefulSet pod's, or with partition locality its
    worker pod's (operator/workers.py)."""
    n = names(gt.metadata.name)
    if colocated(gt.spec):
        hosts = [f"{worker_name(gt.metadata.name, i)}.{n['trainers']}" for i in range(gt.spec.num_shards)]
    else:
        hosts = [f"{n['shards']}-{i}.{n['shards']}" for i in range(gt.spec.num_shards)]
    return [f"tcp://{h}.{namespace}.svc:{SHARD_PORT}" for h in hosts]


def shard_container(
    gt: GraphTraining, config: OperatorConfig, pod: placement.PodSettings, args: list[str], **extra: Any
) -> Obj:
    """A shard server's container (its StatefulSet pod's, or a worker pod's sidecar): its ports, its
    readiness (GET /readyz on the metrics port) and liveness (GET /livez) probes, its pod IP to bind."""
    readiness = {
        "httpGet": {"path": "/readyz", "port": "metrics"},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    liveness = {
        "httpGet": {"path": "/livez", "port": "metrics"},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 6,
    }
    container = _container(
        gt,
        config,
        pod,
        SHARD_CONTAINER,
        args,
        token=True,
        ports=[
            {"name": "kvstore", "containerPort": SHARD_PORT},
            {"name": "kvstore-fast", "containerPort": FAST_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        readinessProbe=readiness,
        livenessProbe=liveness,
        **extra,
    )
    container["env"].append({"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if gt.spec.shard_servers.threads:  # the optimizer's threads and torch's (its OpenMP pool): one count
        threads = str(gt.spec.shard_servers.threads)
        container["env"] += [
            {"name": "GRAPHTRAIN_OPTIM_THREADS", "value": threads},
            {"name": "OMP_NUM_THREADS", "value": threads},
        ]
    return container


def shard_statefulset(
    owner: Obj, gt: GraphTraining, config: OperatorConfig, need: MemoryNeed | None = None
) -> Obj:
    """One shard server per partition. It binds its kvstore and metrics ports on its own pod IP
    ($(POD_IP), from the downward API), not 0.0.0.0: nothing of the pod's listens on an address the
    pod does not own, and servers of pods that share a host's network (hostNetwork) each keep port
    7000. Ready when GET
    /readyz on the metrics port answers (its rows loaded and its request loop turning: a cheap probe
    where an exec of `graphtrain health` cost a 1.9 s, 256 MB process every 10 s); restarted when
    /livez says it can no longer answer (a thread stopped, or requests waiting while no worker
    finishes any), which a busy server does not. `need`: what the partition measured (memory sized to
    it unless the spec states it)."""
    n, lay = names(gt.metadata.name), Layout(gt)
    ss = gt.spec.shard_servers
    args = roles.shard_server(
        lay.files,
        bind=f"tcp://$({POD_IP_ENV}):{SHARD_PORT}",
        fast_port=FAST_PORT if ss.fast_lane else -1,
        shard=None,  # the StatefulSet pod's ordinal
        shm=False,  # trainers run in other pods
        metrics_port=METRICS_PORT,
        metrics_host=f"$({POD_IP_ENV})",
        device=Device(ss.device).value,
    )
    pod = placement.pod_settings(gt.spec, config, "shards", need.shard_server if need else None)
    container = shard_container(gt, config, pod, args)
    template = {
        "metadata": {"labels": labels(gt.metadata.name, "shards")},
        "spec": _pod_spec(gt, config, pod, [container], token=True),
    }
    gang.join(gt, template["metadata"], template["spec"])
    pod_metadata.dress(gt, template["metadata"])
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(owner, n["shards"], "shards"),
        "spec": {
            "serviceName": n["shards"],
            "replicas": gt.spec.num_shards,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {LABEL_TRAINING: gt.metadata.name, LABEL_ROLE: "shards"}},
            "template": template,
        },
    }


def trainer_service(owner: Obj, gt: GraphTraining) -> Obj:
    n = names(gt.metadata.name)
    return _headless(owner, gt, n["trainers"], "trainer", {"rendezvous": RENDEZVOUS_PORT})


def trainer_pod(
    owner: Obj,
    gt: GraphTraining,
    config: OperatorConfig,
    rank: int,
    attempt: int,
    need: MemoryNeed | None = None,
) -> Obj:
    """Rank `rank` of attempt `attempt` (restarts recreate every rank with the next attempt number);
    `need`: what the partition measured (memory sized to it unless the spec states it)."""
    n, lay = names(gt.metadata.name), Layout(gt)
    ns = owner["metadata"]["namespace"]
    world = gt.spec.trainers.replicas
    rank0 = f"{trainer_name(gt.metadata.name, 0)}.{n['trainers']}.{ns}.svc"
    pod = placement.pod_settings(gt.spec, config, "trainer", need.trainer if need else None)
    args = roles.train(
        lay.files,
        servers=shard_addresses(gt, ns),
        rank=rank,
        world=world,
        threads=placement.requested_threads(pod.resources),
        init=f"tcp://{rank0}:{RENDEZVOUS_PORT}",
        shm=False,  # the shard servers run in other pods
        progress_configmap=n["progress"],
        metrics_port=METRICS_PORT,
        metrics_host=f"$({POD_IP_ENV})",  # its own pod IP, as the shard servers bind theirs
    )
    container = _container(
        gt,
        config,
        pod,
        "trainer",
        args,
        token=True,
        ports=[
            {"name": "rendezvous", "containerPort": RENDEZVOUS_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},  # what the chart's PodMonitor scrapes
        ],
    )
    container["env"] += [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    meta = _meta(owner, trainer_name(gt.metadata.name, rank), "trainer")
    meta["labels"].update({LABEL_RANK: str(rank), LABEL_ATTEMPT: str(attempt)})
    spec = _pod_spec(
        gt,
        config,
        pod,
        [container],
        token=True,
        restartPolicy="Never",
        hostname=trainer_name(gt.metadata.name, rank),
        subdomain=n["trainers"],
        serviceAccountName=n["account"],
        automountServiceAccountToken=True,
    )
    gang.join(gt, meta, spec)
    pod_metadata.dress(gt, meta)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _selector(gt: GraphTraining, role: str | None = None) -> Obj:
    """A label selector of this training's pods (of one role)."""
    match = {LABEL_TRAINING: gt.metadata.name}
    if role is not None:
        match[LABEL_ROLE] = role
    return {"matchLabels": match}


def shard_network_policy(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj | None:
    """Ingress of the training's shard servers: the kvstore port from its trainers and partition pod
    only, the fast lane's (unless shardServers.fastLane is off) from its trainers, the metrics port from
    its own pods and the configured scrapers (networkPolicy.metricsFrom); nothing else. Egress is left
    alone (docs/network.md: what a namespace denying it must allow). The kubelet's probes of the metrics
    port (/readyz, /livez) come from the node, which the common network plugins (Calico, Cilium) admit
    to its own pods whatever the policy. None when the configuration disables NetworkPolicies."""
    if not config.network_policy.enabled:
        return None
    n = names(gt.metadata.name)
    ingress = [
        {
            "from": [{"podSelector": _selector(gt, r)} for r in ("trainer", "partition")],
            "ports": [{"protocol": "TCP", "port": SHARD_PORT}],
        },
        {
            "from": [{"podSelector": _selector(gt)}, *config.network_policy.metrics_from],
            "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
        },
    ]
    if gt.spec.shard_servers.fast_lane:  # the fast lane: the trainers' small pulls and samples
        lane = {
            "from": [{"podSelector": _selector(gt, "trainer")}],
            "ports": [{"protocol": "TCP", "port": FAST_PORT}],
        }
        ingress.insert(1, lane)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(owner, n["shards"], "network"),
        "spec": {"podSelector": _selector(gt, "shards"), "policyTypes": ["Ingress"], "ingress": ingress},
    }


def trainer_network_policy(
    owner: Obj,
    gt: GraphTraining,
    config: OperatorConfig,
    also: tuple[Obj, ...] = (),
    metrics_to: int | None = None,
) -> Obj | None:
    """Ingress of the training's trainer pods: every port from its own trainers (the rendezvous store on
    rank 0 and gloo's pair ports, chosen at run time), the rules `also` (the worker pods': the kvstore
    port from the partition pod), and the metrics ports (METRICS_PORT up to `metrics_to`) from its pods
    and the configured scrapers; nothing else. None when the configuration disables NetworkPolicies."""
    if not config.network_policy.enabled:
        return None
    metrics: Obj = {"protocol": "TCP", "port": METRICS_PORT}
    if metrics_to is not None:
        metrics["endPort"] = metrics_to
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(owner, names(gt.metadata.name)["trainers"], "network"),
        "spec": {
            "podSelector": _selector(gt, "trainer"),
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": _selector(gt, "trainer")}]},
                *also,
                {
                    "from": [{"podSelector": _selector(gt)}, *config.network_policy.metrics_from],
                    "ports": [metrics],
                },
            ],
        },
    }


def shard_disruption_budget(owner: Obj, gt: GraphTraining, config: OperatorConfig) -> Obj | None:
    """No voluntary eviction (a node drain) of the training's shard servers: each holds rows no other
    has. None when the configuration disables PodDisruptionBudgets."""
    if not config.pod_disruption_budget.enabled:
        return None
    n = names(gt.metadata.name)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner, n["shards"], "shards"),
        "spec": {"maxUnavailable": 0, "selector": _selector(gt, "shards")},
    }
