"""Whether the namespace admits every pod a plan makes at once (its trainers, or its worker pods), asked
before any is made: pure, k8s.apply() sends the server-side dry runs (dryRun=All: through admission,
ResourceQuota included, nothing persisted) and this module says what their answers mean.

Why: a ResourceQuota that admitted some trainer pods and refused the rest left those made waiting in
rendezvous for their peers up to the trainers' own timeout (600 s), holding the quota's resources,
then failing. Two checks, both before any create:
- each pod alone (its own dry run): a refusal that waits (an admission plugin's 403: Pod Security, a
  LimitRange, a quota that has no room for one more pod, a webhook; or the authorizer's) refuses the
  whole gang, said once in the operator's words for the first pod refused;
- all of them as one pod (as_one(): every pod's containers in one pod, so its requests and limits are
  the gang's sums): a quota's refusal of it ("exceeded quota") is the gang's, though each pod alone
  fits. Any other refusal of that pod (a LimitRange's or a webhook's bound on one pod) says nothing.
  Its containers are every pod's running ones, and what an init container asks beyond them: each pod
  counted as Kubernetes counts it (pod_resources.py), sidecars once per pod.
k8s.apply asks the one pod first, then each alone until one is refused (only the first when the one
pod is over quota): a gang that waits is tried again at every reconcile (each timer period) for 2 dry
runs, not N+1; an admitted one costs N+1, once.
A create refused after the dry runs said yes (the quota taken by another client's pod in between;
or a LimitRange's per-pod max below the gang's sum, which refuses the one pod before the quota plugin
sees it, so its answer is not known until the creates): the gang's pods this apply made are deleted
(k8s._undo: only this training's, by ownership and uid; so are they when a later pod's name holds
someone else's pod, 409: k8s.NameTaken holds the training) and the gang waits whole, said in the
condition and an event (undone()), tried again after a pause (gang_holds.py: 5 s doubling to 1 min;
its own made and deleted pods' events asked for the next reconcile at once, and the dry runs that
could not see the refusal said yes again). A gang found made in part (made_before(): an apply cut
short, a pod deleted before the trainers ran) is the rest with the pods made before: when the rest
cannot be made, those are deleted too (partial_undone()). Not read as the quota's "no":
a LimitRange's refusal of the one pod says nothing of the quota, and the namespace may have none.
What remains: a quota's `pods` count (the one pod counts one); a webhook that answers no dry run
(400: the dry run says nothing, the creates go on); with a LimitRange hiding a full quota, each
try (after its pause) makes the first pods and deletes them again (the quota's answer is read only
on a create: reading the ResourceQuotas would need a grant the chart does not give); a pod's overhead.
"""

from __future__ import annotations

import copy
from typing import Any

from graphtrain.operator import pod_resources
from graphtrain.operator.context import Action
from graphtrain.operator.observation import FINISHED, pod_phase
from graphtrain.operator.refusals import admission_forbidden, judge

Obj = dict[str, Any]
Answer = tuple[int, str | None, str] | None  # a dry run's refusal: (status, body, message); None: admitted
_PER_CONTAINER = ("ports", "livenessProbe", "readinessProbe", "startupProbe", "restartPolicy")
# ^ per container: not unique in one pod (ports, probes), or not allowed on a container (restartPolicy)


def members(actions: list[Action], made: list[Obj] | None = None) -> list[Action]:
    """The plan's pod creates, when it makes two or more, or the rest of a gang `made` in part: they
    start together or wait for each other."""
    pods = [a for a in actions if a.verb == "create" and a.obj.get("kind") == "Pod"]
    return pods if len(pods) > 1 or (pods and made) else []


def made_before(actions: list[Action], pods: list[Obj]) -> list[Obj]:
    """The gang's pods (`pods`: the trainer or worker pods observed) that an earlier apply made, when
    this plan makes the rest: an apply cut short (the operator restarted between its creates), or a
    pod deleted before the trainers ran. Were the rest refused, they waited in rendezvous for it up to
    the trainers' timeout (600 s), holding their share of the quota, then failed the attempt; so
    k8s.apply deletes them too when the rest cannot be made, as Volcano and Kueue hold no part of a
    gang that cannot be whole. [] when no pod is made, or one of them ended or is leaving (a failure
    or a suspension: the trainers stage decides those). After every rank ran (TrainersReady True) no
    pod is made: a lost rank fails the attempt and every rank restarts (stages._lost)."""
    if not any(a.verb == "create" and a.obj.get("kind") == "Pod" for a in actions):
        return []
    if any(pod_phase(p) in FINISHED or p["metadata"].get("deletionTimestamp") for p in pods):
        return []
    return pods


def as_one(pods: list[Obj]) -> Obj:
    """One pod whose containers are every pod's running ones (its containers and sidecars, renamed
    unique; ports, probes and restartPolicy left out, as they must be unique in a pod and no quota
    counts them) and whose volumes are their union: a quota sees the gang's summed requests and limits,
    in the pods' scope (the first pod's priority class, deadline and labels). A pod whose init container
    asks more than its running containers (Kubernetes counts the larger: pod_resources.py) adds a
    container of the difference; the one pod has no init containers (its own would count once, as the
    first pod's sidecars did: the quota saw one shard-server sidecar for a gang of worker pods)."""
    one = copy.deepcopy(pods[0])
    one["metadata"] = {**one["metadata"], "name": f"{pods[0]['metadata']['name']}-gang"}
    one["metadata"].pop("generateName", None)
    containers, volumes = [], {}
    for i, pod in enumerate(pods):
        for c in pod_resources.running(pod["spec"]):
            c = {k: v for k, v in c.items() if k not in _PER_CONTAINER}
            containers.append({**c, "name": f"{c['name']}-{i}"[:63]})
        containers += _padding(pod["spec"], f"init-{i}")
        volumes.update({v["name"]: v for v in pod["spec"].get("volumes") or []})
    one["spec"] = {**one["spec"], "containers": containers}
    one["spec"].pop("initContainers", None)
    if volumes:
        one["spec"]["volumes"] = list(volumes.values())
    return one


def _padding(spec: Obj, name: str) -> list[Obj]:
    """Containers that add what the pod's running containers lack of its effective requests and limits
    (pod_resources.shortfall): one of requests, one of limits (requests 0, which the API server would
    otherwise default to the limits), so neither has a request above its limit."""
    image = ((spec.get("containers") or [{}])[0]).get("image", "pause")
    out = []
    requests = pod_resources.shortfall(spec, "requests")
    limits = pod_resources.shortfall(spec, "limits")
    if requests:
        resources = {"requests": {k: pod_resources.quantity(v) for k, v in requests.items()}}
        out.append({"name": f"{name}-requests"[:63], "image": image, "resources": resources})
    if limits:
        resources = {
            "requests": {k: "0" for k in limits},
            "limits": {k: pod_resources.quantity(v) for k, v in limits.items()},
        }
        out.append({"name": f"{name}-limits"[:63], "image": image, "resources": resources})
    return out


def waits(action: Action, answer: Answer) -> bool:
    """Whether a pod's own dry-run answer refuses the gang (a refusal that waits: admission's or the
    authorizer's 403)."""
    judged = None if answer is None else judge(action.obj, *answer)
    return judged is not None and judged.waits


def over_quota(together: Answer) -> bool:
    """Whether the one pod's dry run was a ResourceQuota's refusal."""
    if together is None:
        return False
    return admission_forbidden(together[0], together[1]) and "exceeded quota" in together[2]


def refused(
    pods: list[Action], alone: list[Answer], together: Answer, made: int = 0
) -> tuple[str, str] | None:
    """(the first pod's key, the one-line reason) when the gang must wait, from the dry runs' answers
    (the first pods', in order: those asked, k8s.apply stops at the first refused; and the one pod's);
    None when they admit it all. A pod refused alone is said before the one pod's quota. `made`: the
    gang's pods made before (made_before()), counted in the gang."""
    n = len(pods) + made
    for action, answer in zip(pods, alone, strict=False):
        judged = None if answer is None else judge(action.obj, *answer)
        if judged is not None and judged.waits:
            others = f"; none of the {n} pods of the gang is made until all are admitted (a dry run)"
            return action.key, judged.message + others
    if together is not None and over_quota(together):
        return pods[0].key, (
            f"the {len(pods)} pods of the gang{' still to make' if made else ''} exceed a ResourceQuota "
            "together, though each fits alone (a dry run "
            f"of them as one pod): {together[2]}; none is made until the quota has room for all"
        )
    return None


def undone(message: str, n: int, deleted: list[str]) -> str:
    """A gang pod's refusal, after the pods of the gang made before it were deleted (k8s._undo)."""
    if not deleted:
        return message
    made = ", ".join(deleted)
    return (
        f"{message}; the pods of the gang made before it ({made}) were deleted: none of the {n} pods of "
        "the gang is made until all are admitted, tried again in 5 s to 1 min"
    )


def partial_undone(message: str, deleted: list[str]) -> str:
    """The refusal of a gang's missing pods, after the pods an earlier apply made were deleted."""
    if not deleted:
        return message
    return (
        f"{message}; the gang was partial (made before: {', '.join(deleted)}; an apply cut short, or a "
        "pod deleted before the trainers ran) and cannot be whole: its pods made before were deleted"
    )
