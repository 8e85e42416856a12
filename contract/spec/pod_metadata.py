"""spec.podMetadata: labels and annotations the user adds to every pod of the training (Kubernetes).

What namespaces with admission policies need: `sidecar.istio.io/inject: "false"` where Istio injects
sidecars (an injected sidecar that is no native one keeps a finished pod Running, so the training never
completes), the labels a Kyverno or Gatekeeper "require label" policy asks for (team, cost-center).
As KubeRay's and Kubeflow Trainer's pod template metadata, but one field for every pod of the training
(the partition Job's, the shard servers', the trainers' and the worker pods): a policy asks it of
every pod alike.

Checked as the API server checks a pod's metadata (ValidateLabels, ValidateAnnotations): keys are
qualified names, label values at most 63 characters of A-Z a-z 0-9 - _ ., the annotations' keys and
values together at most MAX_ANNOTATION_BYTES (UTF-8 bytes, as the API server counts them). The
operator's own keys are refused, not overridden: its labels select the pods (Services,
NetworkPolicies, the REST API), and the group keys of spec.scheduling (Kueue, gangs) set here alone
would admit the pods one by one.

Why a change is refused once the training started, as any placement field is (updates.py
UPDATES): a new template on the shard servers' StatefulSet rolls them, each restart losing the updates
since the last checkpoint, and a restart of the trainers would run pods of two metadata side by side.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Final

from pydantic import AfterValidator, Field

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.placement import LabelValue
from graphtrain.contract.spec.rules import Rule, add_rules

MAX_KEYS: Final = 64  # labels, annotations: a bound for the CRD's CEL cost, far above what policies ask
MAX_ANNOTATION_BYTES: Final = 128 * 1024
"""Half the API server's 256 KiB of a pod's annotations: the rest is left to the operator's own and to
what admission adds (Istio's sidecar.istio.io/status, Kueue's)."""

OWN_PREFIX: Final = "graphtrain.io/"
# The keys the operator sets on pods besides its graphtrain.io/ ones: contract/children.py's MANAGED_BY,
# and spec.scheduling's group keys (scheduling.py); tests/contract/test_pod_metadata.py holds them equal.
OWN_KEYS: Final = (
    "app.kubernetes.io/managed-by",
    "kueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io/pod-group-name",
    "kueue.x-k8s.io/pod-group-total-count",
    "scheduling.k8s.io/group-name",
    "scheduling.x-k8s.io/pod-group",
)
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
KEY: Final = rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$"
LONG_PREFIX: Final = "^[^/]{254,}/"  # a key's DNS prefix is at most 253 characters


def bad_key(key: str) -> bool:
    """Whether `key` is no qualified name (the API server's rule for label and annotation keys)."""
    # fullmatch, not match: Python's `$` also matches before a final newline, RE2's (CEL's) does not
    return re.fullmatch(KEY, key) is None or re.match(LONG_PREFIX, key) is not None


def own_key(key: str) -> bool:
    """Whether the operator sets `key` on pods itself."""
    return key.startswith(OWN_PREFIX) or key in OWN_KEYS


def annotation_bytes(annotations: dict[str, str]) -> int:
    """Their size as the API server counts it (UTF-8 bytes): 'é' is 2, an emoji 4, not 1 character.
    The keys' characters (a valid key is ASCII), as _BYTES counts them."""
    return sum(len(k) + len(v.encode()) for k, v in annotations.items())


class PodMetadata(SpecModel):
    """Labels and annotations added to every pod of the training (Kubernetes only)."""

    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_KEYS,
        description="Labels of every pod: keys [prefix/]name (name 1-63 of A-Z a-z 0-9 - _ ., prefix a DNS "
        "subdomain), values at most 63 such characters.",
    )
    annotations: dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_BYTES)]] = Field(
        default_factory=dict,
        max_length=MAX_KEYS,
        description=f"Annotations of every pod: keys as labels', keys and values together at most "
        f"{MAX_ANNOTATION_BYTES} bytes (UTF-8).",
    )


def _empty_is_absent(value: PodMetadata | None) -> PodMetadata | None:
    """None for no label and no annotation: the CRD's defaults fill in empty maps, so a `podMetadata: {}`
    added to a running training read as a change of podMetadata, which is refused once it started."""
    return None if value is not None and not value.labels and not value.annotations else value


OptionalPodMetadata = Annotated[PodMetadata | None, AfterValidator(_empty_is_absent)]
"""spec.podMetadata's type: an empty one is the absent one (the same pods), in every comparison."""


DESCRIPTION: Final = (
    "Labels and annotations added to every pod of the training: the partition Job's, the shard servers', "
    "the trainers' and the worker pods (e.g. sidecar.istio.io/inject: 'false' where Istio injects "
    "sidecars, or the team label a policy requires). Keys the operator sets itself (graphtrain.io/..., "
    f"{', '.join(OWN_KEYS)}: use spec.scheduling for the group keys) are refused. Cannot change once the "
    "training started, as the pods' placement. Unset: none. Kubernetes only."
)


def _no_key_rule(field: str, name: str, bad: Callable[[str], bool], cel_bad: str, message: str) -> Rule:
    """A rule that no key of map `field` is `bad` (`cel_bad`: the same test of `k` in CEL), naming the
    first that is in `message`'s %s."""
    return Rule(
        name,
        field,
        lambda m: not any(bad(k) for k in getattr(m, field)),
        cel=f"self.{field}.all(k, !({cel_bad}))",
        message=message,
        args=(
            (f"self.{field}.filter(k, {cel_bad})[0]", lambda m: next(k for k in getattr(m, field) if bad(k))),
        ),
    )


def _keys_rules(field: str, what: str) -> tuple[Rule, Rule]:
    """The rules on the keys of map `field`: qualified names, none of the operator's."""
    own = " || ".join([f"k.startsWith('{OWN_PREFIX}')", *(f"k == '{k}'" for k in OWN_KEYS)])
    return (
        _no_key_rule(
            field,
            f"pod-{what}-keys",
            bad_key,
            f"!k.matches('{KEY}') || k.matches('{LONG_PREFIX}')",
            f"{what} key '%s' is not a qualified name: an optional DNS prefix of at most 253 characters and "
            "'/', then 1-63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric",
        ),
        _no_key_rule(
            field,
            f"pod-{what}-own-keys",
            own_key,
            own,
            f"{what} key '%s' is the operator's own (graphtrain.io/ keys, {', '.join(OWN_KEYS)}): it sets it "
            "on every pod itself; spec.scheduling sets the group keys",
        ),
    )


# CEL's size() of a string counts code points; bytes() of an unbounded string is over the CRD's cost
# budget, hence the values' maxLength (a key's size is unbounded, but a valid one is ASCII)
_BYTES = "size(k) + size(bytes(self.annotations[k]))"

add_rules(
    PodMetadata,
    *_keys_rules("labels", "label"),
    *_keys_rules("annotations", "annotation"),
    Rule(
        "pod-annotations-size",
        "annotations",
        lambda m: annotation_bytes(m.annotations) <= MAX_ANNOTATION_BYTES,
        cel=f"self.annotations.map(k, {_BYTES}).sum() <= {MAX_ANNOTATION_BYTES}",
        message=f"keys and values together are %d bytes, above {MAX_ANNOTATION_BYTES} (the API server "
        "takes 256 KiB of a pod's annotations, the operator's and admission's included)",
        args=(
            (
                f"self.annotations.map(k, {_BYTES}).sum()",
                lambda m: annotation_bytes(m.annotations),
            ),
        ),
    ),
)
