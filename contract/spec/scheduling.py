"""spec.scheduling: how a training's pods are admitted and scheduled as one group on Kubernetes, so a
half-started training never holds GPUs while it waits for the rest of its pods, and two half-started
trainings never deadlock each other (the gang: every shard server and every trainer).

- `queue`: Kueue's pod integration. Every pod carries `kueue.x-k8s.io/queue-name` and one pod group
  (`kueue.x-k8s.io/pod-group-name`, annotation `kueue.x-k8s.io/pod-group-total-count`), which Kueue
  admits whole (it gates the pods until then). Kueue's Job-style admission is spec.suspend instead.
- `gang`: a PodGroup with minMember equal to every pod of the training, for the scheduler named by
  `schedulerName`: Volcano's (scheduling.volcano.sh/v1beta1, pods annotated
  `scheduling.k8s.io/group-name`) when it is `volcano`, else the scheduler-plugins coscheduling
  plugin's (scheduling.x-k8s.io/v1alpha1, pods labelled `scheduling.x-k8s.io/pod-group`).

Grouped pods are made together: the trainers with the shard servers, not after them (a group waits
for every member to exist), and the trainers wait for the servers to answer. The names and the keys are
here; the operator builds the objects and the pods' labels and annotations (operator/gang.py).
"""

from __future__ import annotations

from pydantic import Field

from graphtrain.contract.spec.base import SpecModel

VOLCANO = "volcano"  # the scheduler name that means Volcano's PodGroup
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"  # Volcano's pod annotation naming its PodGroup
COSCHEDULING_GROUP = "scheduling.x-k8s.io/pod-group"  # the coscheduling plugin's pod label
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Scheduling(SpecModel):
    """Admission and scheduling of every pod of the training as one group (Kubernetes only)."""

    queue: str | None = Field(
        default=None,
        max_length=63,
        pattern=_DNS_LABEL,
        description="Kueue LocalQueue of the training: every shard-server and trainer pod carries "
        "kueue.x-k8s.io/queue-name and one Kueue pod group (pod-group-name, pod-group-total-count), "
        "which Kueue admits whole. Unset: no Kueue labels (spec.suspend is Kueue's Job-style admission).",
    )
    gang: bool = Field(
        default=False,
        description="Schedule every shard-server and trainer pod together: a PodGroup of minMember equal "
        "to all of them, so none is bound until all can be. Volcano's (scheduling.volcano.sh/v1beta1) "
        "when schedulerName is volcano, else the scheduler-plugins coscheduling plugin's "
        "(scheduling.x-k8s.io/v1alpha1); needs schedulerName.",
    )
    scheduler_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="The scheduler of every shard-server and trainer pod (pod spec schedulerName): "
        "volcano, or the one running the coscheduling plugin (scheduler-plugins installs "
        "scheduler-plugins-scheduler). Unset: the cluster's default scheduler.",
    )


def group_name(training: str) -> str:
    """The PodGroup (and Kueue pod group) of the training `training`."""
    return f"{training}-gang"


def pod_group_api(s: Scheduling) -> str:
    """The apiVersion of the gang's PodGroup: Volcano's or the coscheduling plugin's."""
    return VOLCANO_API if s.scheduler_name == VOLCANO else COSCHEDULING_API
