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
k8s.apply asks the one pod first, then each alone until one is refused (only the first when the one
pod is over quota): a gang that waits is tried again at every reconcile (each timer period) for 2 dry
runs, not N+1; an admitted one costs N+1, once.
What remains: a quota's `pods` count (the one pod counts one); a quota taken by someone else between
the dry runs and the creates (then as before: the creates after the first refused wait, the pods
made wait for their peers until the trainers' timeout or the quota frees); a webhook that answers no
dry run (400: the dry run says nothing, the creates go on); a LimitRange's per-pod max below the
gang's sum (admission's LimitRanger refuses the one pod before the quota plugin sees it, so the
quota's answer is not known: the creates go on as before); sidecar init containers, counted once.
"""

from __future__ import annotations

import copy
from typing import Any

from graphtrain.operator.context import Action
from graphtrain.operator.refusals import admission_forbidden, judge

Obj = dict[str, Any]
Answer = tuple[int, str | None, str] | None  # a dry run's refusal: (status, body, message); None: admitted
_PER_CONTAINER = ("ports", "livenessProbe", "readinessProbe", "startupProbe")  # not unique in one pod


def members(actions: list[Action]) -> list[Action]:
    """The plan's pod creates, when it makes two or more: they start together or wait for each other."""
    pods = [a for a in actions if a.verb == "create" and a.obj.get("kind") == "Pod"]
    return pods if len(pods) > 1 else []


def as_one(pods: list[Obj]) -> Obj:
    """One pod whose containers are every pod's (renamed unique; ports and probes left out, as they
    must be unique in a pod and no quota counts them) and whose volumes are their union: a quota sees
    the gang's summed requests and limits, in the pods' scope (the first pod's priority class,
    deadline and labels)."""
    one = copy.deepcopy(pods[0])
    one["metadata"] = {**one["metadata"], "name": f"{pods[0]['metadata']['name']}-gang"}
    one["metadata"].pop("generateName", None)
    containers, volumes = [], {}
    for i, pod in enumerate(pods):
        for c in pod["spec"].get("containers") or []:
            c = {k: v for k, v in c.items() if k not in _PER_CONTAINER}
            containers.append({**c, "name": f"{c['name']}-{i}"[:63]})
        volumes.update({v["name"]: v for v in pod["spec"].get("volumes") or []})
    one["spec"] = {**one["spec"], "containers": containers}
    if volumes:
        one["spec"]["volumes"] = list(volumes.values())
    return one


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


def refused(pods: list[Action], alone: list[Answer], together: Answer) -> tuple[str, str] | None:
    """(the first pod's key, the one-line reason) when the gang must wait, from the dry runs' answers
    (the first pods', in order: those asked, k8s.apply stops at the first refused; and the one pod's);
    None when they admit it all. A pod refused alone is said before the one pod's quota."""
    n = len(pods)
    for action, answer in zip(pods, alone, strict=False):
        judged = None if answer is None else judge(action.obj, *answer)
        if judged is not None and judged.waits:
            others = f"; none of the {n} pods of the gang is made until all are admitted (a dry run)"
            return action.key, judged.message + others
    if together is not None and over_quota(together):
        return pods[0].key, (
            f"the {n} pods of the gang exceed a ResourceQuota together, though each fits alone (a dry run "
            f"of them as one pod): {together[2]}; none is made until the quota has room for all"
        )
    return None
