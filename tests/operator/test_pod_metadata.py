"""spec.podMetadata on every pod the operator makes: the partition Job's template, the shard servers'
StatefulSet template, the trainer pods and the worker pods, under the operator's own labels and
annotations (which win, and which the spec may not name); a change once the training runs is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graphtrain.contract.spec import GraphTraining, PodMetadata, parse
from graphtrain.contract.spec.pod_metadata import own_key
from graphtrain.operator import manifests, workers
from graphtrain.operator.config import built_in
from tests.operator.reconcile_cluster import Cluster, cond, to_training, training

USER = {
    "labels": {"team": "graph", "cost-center": "c-42"},
    "annotations": {"sidecar.istio.io/inject": "false", "example.com/note": "batch"},
}
Meta = dict[str, dict[str, str]]


def _pods(body: dict) -> dict[str, Meta]:
    """The metadata of every pod (or pod template) the builders make for `body`, by what it is."""
    gt, config = parse(body), built_in()
    job = manifests.partition_job(body, gt, config)["spec"]["template"]["metadata"]
    out = {"partition": job}
    if body["spec"]["placement"]["locality"] == "partition":
        out["worker"] = workers.worker_pod(body, gt, config, 0, 0)["metadata"]
    else:
        out["shards"] = manifests.shard_statefulset(body, gt, config)["spec"]["template"]["metadata"]
        out["trainer"] = manifests.trainer_pod(body, gt, config, 1, 0)["metadata"]
    return out


LAYOUTS: dict[str, Callable[..., dict]] = {
    "statefulset": lambda **s: training(**s),
    "worker-pods": lambda **s: training(**{"placement.locality": "partition", **s}),
}
GROUPS = {
    "none": {},
    "kueue": {"scheduling": {"queue": "team-q"}},
    "volcano": {"scheduling": {"gang": True, "schedulerName": "volcano"}},
    "coscheduling": {"scheduling": {"gang": True, "schedulerName": "scheduler-plugins-scheduler"}},
}


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_pod_carries_the_spec_metadata_beside_the_operators(layout: str, group: str) -> None:
    bare = _pods(LAYOUTS[layout](**GROUPS[group]))
    dressed = _pods(LAYOUTS[layout](podMetadata=USER, **GROUPS[group]))
    assert set(dressed) == set(bare) and len(dressed) >= 2
    for role, meta in dressed.items():
        own = bare[role]
        assert meta["labels"] == {**USER["labels"], **own["labels"]}, role
        assert meta["annotations"] == {**USER["annotations"], **(own.get("annotations") or {})}, role


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_spec_may_name_none_of_the_keys_the_operator_sets(layout: str, group: str) -> None:
    """OWN_KEYS and graphtrain.io/ cover every key the builders put on a pod: were one added without
    them, the spec could set it and the operator's value would silently replace the user's."""
    for role, meta in _pods(LAYOUTS[layout](**GROUPS[group])).items():
        for key in [*meta["labels"], *(meta.get("annotations") or {})]:
            assert own_key(key), f"{role}: {key} is set by the operator and not refused in spec.podMetadata"


def test_the_operators_own_keys_win_over_a_spec_that_got_past_the_rules() -> None:
    body = training(**GROUPS["kueue"])
    gt = parse(body)
    forged = PodMetadata.model_construct(
        labels={"graphtrain.io/role": "x", "kueue.x-k8s.io/queue-name": "other", "team": "a"},
        annotations={"kueue.x-k8s.io/pod-group-total-count": "99"},
    )
    gt = GraphTraining.model_construct(
        **{**gt.__dict__, "spec": gt.spec.model_copy(update={"pod_metadata": forged})}
    )
    pod = manifests.trainer_pod(body, gt, built_in(), 0, 0)["metadata"]
    assert pod["labels"]["graphtrain.io/role"] == "trainer" and pod["labels"]["team"] == "a"
    assert pod["labels"]["kueue.x-k8s.io/queue-name"] == "team-q"
    assert pod["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"


@pytest.mark.parametrize(
    ("meta", "needle"),
    [
        ({"labels": {"graphtrain.io/rank": "0"}}, "label key 'graphtrain.io/rank' is the operator's own"),
        (
            {"labels": {"app.kubernetes.io/managed-by": "me"}},
            "'app.kubernetes.io/managed-by' is the operator's",
        ),
        ({"annotations": {"scheduling.k8s.io/group-name": "g"}}, "spec.scheduling sets the group keys"),
        ({"labels": {"-team": "a"}}, "label key '-team' is not a qualified name"),
        ({"labels": {"team\n": "a"}}, "is not a qualified name"),
        ({"annotations": {"team\n": "a"}}, "is not a qualified name"),
        ({"labels": {"Example.com/team": "a"}}, "label key 'Example.com/team' is not a qualified name"),
        ({"annotations": {"x/" + "a" * 64: "v"}}, "is not a qualified name"),
        ({"labels": {"team": "a" * 64}}, "spec.podMetadata.labels.team"),
        ({"labels": {"team": "a b"}}, "spec.podMetadata.labels.team"),
        ({"annotations": {"big": "x" * 131_070}}, "are 131073 bytes, above 131072"),
        ({"annotations": {"big": "\u00e9" * 65_535}}, "are 131073 bytes, above 131072"),
    ],
)
def test_a_wrong_pod_metadata_is_refused_naming_the_key(meta: dict, needle: str) -> None:
    from graphtrain.contract.spec import check

    problems = check(training(podMetadata=meta))[1]
    assert len(problems) == 1 and needle in str(problems[0]), problems


def test_valid_keys_as_policies_use_them_are_taken() -> None:
    meta = {
        "labels": {"team": "", "a.b-c.example/x_y.z": "A-1_b.c", "k" * 63: "v" * 63},
        "annotations": {"sidecar.istio.io/inject": "false", "prometheus.io/scrape": "true" * 1000},
    }
    assert parse(training(podMetadata=meta)).spec.pod_metadata == PodMetadata.model_validate(meta)


def test_a_pod_metadata_change_on_a_running_training_is_refused_as_placement_is() -> None:
    c = Cluster(training(podMetadata=USER))
    to_training(c)
    c.trainers("Running")
    c.body["spec"]["podMetadata"] = {"labels": {"team": "other"}}
    c.body["metadata"]["generation"] = 2
    p = c.step()
    refused = cond(p, "SpecValid")
    assert refused["reason"] == "UpdateRefused" and "spec.podMetadata" in refused["message"]
    assert p.actions == [] and p.status["observedGeneration"] == 1


@pytest.mark.parametrize("empty", [{}, {"labels": {}, "annotations": {}}, {"labels": {}}])
def test_an_empty_pod_metadata_added_to_a_running_training_is_no_change(empty: dict) -> None:
    """The CRD's defaults fill `podMetadata: {}` in with empty maps: the same pods as none, so no change
    to refuse (it was refused as a change of spec.podMetadata); and back to none, the same."""
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    for generation, meta in ((2, empty), (3, None)):
        if meta is None:
            del c.body["spec"]["podMetadata"]
        else:
            c.body["spec"]["podMetadata"] = meta
        c.body["metadata"]["generation"] = generation
        p = c.step()
        said = cond(p, "SpecValid")
        assert said["status"] == "True", said
        assert p.actions == [] and p.status["observedGeneration"] == generation


def test_empty_pod_metadata_forms_then_a_real_change_then_back() -> None:
    """Every empty form (the CRD's defaults fill in either map; JSON null) is no change; a label added
    after one is refused as any change; back to empty, taken again. Started with labels, an empty one
    is a change (the labels would go from the pods): refused."""
    c = Cluster(training())
    to_training(c)
    c.trainers("Running")
    steps = [({"annotations": {}}, True), (None, True), ({"labels": {"team": "a"}}, False), ({}, True)]
    for generation, (meta, taken) in enumerate(steps, start=2):
        c.body["spec"]["podMetadata"] = meta
        c.body["metadata"]["generation"] = generation
        p = c.step()
        said = cond(p, "SpecValid")
        assert (said["status"] == "True") is taken, (meta, said)
        assert p.actions == [] and (p.status["observedGeneration"] == generation) is taken
    c = Cluster(training(podMetadata=USER))
    to_training(c)
    c.trainers("Running")
    c.body["spec"]["podMetadata"] = {"labels": {}, "annotations": {}}
    c.body["metadata"]["generation"] = 2
    refused = cond(c.step(), "SpecValid")
    assert refused["reason"] == "UpdateRefused" and "spec.podMetadata" in refused["message"]
