"""How a training runs: spec.shardServers, spec.trainers, spec.runPolicy and spec.storage."""

from __future__ import annotations

from pydantic import (
    Field,
    model_validator,
)

from graphtrain.contract.spec.base import Quantity, SpecModel
from graphtrain.contract.spec.enums import Backend, ClaimRetention, CleanPodPolicy, Device, StallPolicy
from graphtrain.contract.spec.placement import DNS1123_SUBDOMAIN_OR_EMPTY, AccessMode, Placement


class ShardServers(Placement):
    """The shard servers: one per partition, each holding its rows, graph structure and features."""

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Number of shard servers; must equal partition.parts. Unset: partition.parts.",
    )
    device: Device = Field(
        default=Device.cpu, description="Where the servers keep their tables: cpu or cuda."
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Threads of the native sparse optimizer per server. Unset: torch's intra-op setting.",
    )
    fast_lane: bool = Field(
        default=True,
        description="Answer small pulls and neighbour samples on a second port with a native thread (the "
        "fast lane: 7001 in pods); false: every request over the ZMQ port.",
    )


class Trainers(Placement):
    """The trainer processes (data parallel, torch.distributed)."""

    replicas: int = Field(default=1, ge=1, le=4096, description="Number of trainers.")
    device: Device = Field(
        default=Device.cpu,
        description="Where each trainer computes: cpu, or cuda (one GPU per trainer: cuda:0 in its pod, "
        "rank mod the visible GPUs on one machine).",
    )
    backend: Backend | None = Field(
        default=None,
        description="torch.distributed backend of the dense all-reduce: gloo, or nccl (GPU trainers). "
        "Unset: nccl with device cuda, else gloo.",
    )

    @model_validator(mode="after")
    def _backend_follows_the_device(self) -> Trainers:
        """An unset backend is the device's: the spec that reaches every role names one (no role decides
        it again); the CRD leaves it unset, so the API server does not fill gloo in for GPU trainers."""
        if self.backend is None:
            self.backend = self.dist_backend
        return self

    @property
    def dist_backend(self) -> Backend:
        """The backend: the one named, else the device's (nccl on cuda, gloo on cpu)."""
        return Backend(self.backend or (Backend.nccl if self.device == Device.cuda else Backend.gloo))


# The longest duration a runPolicy field takes: ten years. Beyond it a timer or a date computed from the
# field overflows (1e20 validated before, and the CRD's int64 took what Python's timedelta cannot).
MAX_SECONDS = 10 * 365 * 24 * 3600


class RunPolicy(SpecModel):
    """When a run is restarted, stalled, stuck or out of time, and what is left once it ended. Every
    field may change while the training runs (the operator takes the new value at once)."""

    backoff_limit: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Trainer failures restarted from the last checkpoint before the run fails.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SECONDS,
        description="Seconds the run may take in all, counted from its start; then it fails. Unset: "
        "no deadline.",
    )
    stall_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=MAX_SECONDS,
        description="Seconds without training progress after which the run is marked Stalled.",
    )
    stall_policy: StallPolicy = Field(
        default=StallPolicy.report,
        description="What a stall does: Report (default) sets Stalled True (in Kubernetes with a "
        "Warning event naming the silent rank; in `graphtrain run` in status.json and a line) and leaves "
        "the trainers as they are; Restart also restarts every trainer from the last checkpoint, which "
        "counts as one of runPolicy.backoffLimit's retries (with none left the training fails).",
    )
    start_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=MAX_SECONDS,
        description="Seconds a pod may be unable to start before the training fails with StartTimeout "
        "(Kubernetes only; as a Deployment's progressDeadlineSeconds). Unable to start: unschedulable, "
        "or a container waiting in ImagePullBackOff, ErrImagePull, CrashLoopBackOff, "
        "CreateContainerConfigError or a like error; counted from when the pod was last ready (else "
        "scheduled, else created). A slow image pull or a long load is not counted. Until then the "
        "condition of the pod's stage (PartitionReady, ShardsReady or TrainersReady) says PodsNotStarting "
        "with each pod, its reason and its message.",
    )
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.running,
        description="Which pods are stopped once the training Succeeded or Failed (Kubernetes only; "
        "Kubeflow's names): Running (default) deletes every pod still running or pending (the shard "
        "servers' StatefulSet, running trainers, a running partition Job) and keeps finished pods for "
        "their logs; All deletes the finished ones too (the partition Job and every trainer pod); None "
        "deletes nothing, even at a deadline, so the shard servers keep serving (and holding their "
        "resources) until the GraphTraining is deleted. The data claim is never touched: see "
        "storage.whenDeleted.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="Seconds after completionTime (Succeeded or Failed) at which the operator deletes "
        "the GraphTraining, and with it its children (Kubernetes only; as a Job's). The data claim goes "
        "only if storage.whenDeleted is Delete. Unset: kept until deleted.",
    )


class Storage(SpecModel):
    """The volume for the dataset cache, the partition and checkpoints (shared by all pods)."""

    volume_claim_name: str | None = Field(
        default=None,
        max_length=253,
        description="An existing PersistentVolumeClaim to use, which every pod of the training can mount "
        "(ReadWriteMany across nodes); datasets pre-seeded on it under <mountPath>/data are not "
        "downloaded again. Unset: the operator creates one.",
    )
    storage_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_OR_EMPTY,
        description="Storage class of the claim the operator creates. Unset: the operator's default "
        "(whose default is the cluster's default class).",
    )
    access_modes: list[AccessMode] | None = Field(
        default=None,
        min_length=1,
        max_length=len(AccessMode),
        description="Access modes of the claim the operator creates: ReadWriteOnce, ReadOnlyMany, "
        "ReadWriteMany, ReadWriteOncePod. Unset: the operator's default (ReadWriteMany, unless its "
        "configuration says otherwise).",
    )
    size: Quantity | None = Field(
        default=None,
        description="Size of the claim the operator creates, in bytes (e.g. 10Gi). Unset: the "
        "operator's default (10Gi, unless its configuration says otherwise).",
    )
    mount_path: str = Field(
        default="/var/lib/graphtrain",
        pattern=r"^/",
        max_length=4096,
        description="Where the volume is mounted in every pod (an absolute path).",
    )
    when_deleted: ClaimRetention = Field(
        default=ClaimRetention.retain,
        description="What deleting the GraphTraining does to the claim the operator made for it "
        "(StatefulSet's names): Retain (default) keeps it, with its datasets, partition, checkpoints "
        "and trained tables (it has no ownerReference; delete it with kubectl when done); Delete deletes "
        "it with the training. A claim named by volumeClaimName is never deleted. A retained claim is "
        "reused by a GraphTraining later created with the same name (its datasets are not fetched "
        "again) and then stays theirs: Delete on the later training does not delete a claim an earlier "
        "one chose to keep. Each training still starts afresh in its own directory, "
        "<mountPath>/runs/<name>/<uid>.",
    )
