"""Mode inference through the operator. Its checkpoint and output must be paths on the training's
volume: one outside it (an absolute path elsewhere, or `..` past storage.mountPath) fails the training
with SpecValid False naming the field, before any child is made (an output written to the pod's own
/tmp is lost with the pod). A finished inference says so."""

from __future__ import annotations

import pytest

from graphtrain.contract.spec import ConditionType, Phase
from tests.operator.reconcile_cluster import NAME, Cluster, cond, running_cluster, training

CKPT = "runs/wn/uid-0/checkpoints/BEST"


CLAIM = {"storage.volumeClaimName": "trained"}  # the claim the trained checkpoint is on


def inference(**inf: str) -> dict:
    return training(mode="inference", inference={"checkpoint": CKPT, **inf}, **CLAIM)


@pytest.mark.parametrize(
    ("inf", "field"),
    [
        ({"output": "/tmp/predictions"}, "spec.inference.output"),
        ({"output": "../../../tmp/predictions"}, "spec.inference.output"),
        ({"checkpoint": "/etc/graphtrain"}, "spec.inference.checkpoint"),
        ({"checkpoint": "runs/../../x/checkpoints"}, "spec.inference.checkpoint"),
    ],
)
def test_an_inference_path_off_the_volume_fails_before_any_child(inf: dict, field: str) -> None:
    c = Cluster(inference(**inf))
    decided = c.step()
    assert decided.actions == [] and decided.status["phase"] == Phase.failed.value
    spec_valid = next(x for x in decided.status["conditions"] if x["type"] == ConditionType.spec_valid)
    assert spec_valid["status"] == "False" and field in spec_valid["message"], spec_valid


@pytest.mark.parametrize(
    "inf",
    [{}, {"output": "out/predictions"}, {"output": "/var/lib/graphtrain/out"}, {"checkpoint": "./" + CKPT}],
)
def test_an_inference_path_on_the_volume_is_taken(inf: dict) -> None:
    c = Cluster(inference(**inf))
    decided = c.step()
    assert decided.status["phase"] == Phase.partitioning.value
    assert any(a.key.startswith("Job/") for a in decided.actions)


def test_a_finished_inference_says_inference() -> None:
    c = running_cluster(mode="inference", **{"inference.checkpoint": CKPT}, **CLAIM)
    c.trainers("Succeeded")
    p = c.step()
    assert p.status["phase"] == Phase.succeeded.value
    assert cond(p, "Succeeded")["message"].startswith("inference finished; ")


@pytest.mark.parametrize("retained", [False, True], ids=["no-claim", "a-retained-claim"])
def test_an_inference_on_no_claim_of_its_own_fails_before_any_child(retained: bool) -> None:
    """Without storage.volumeClaimName the operator would make <name>-data empty, so the checkpoint
    could not be there: said up front, naming the field. A claim a training of the name retained is
    read as it is."""
    c = Cluster(training(mode="inference", inference={"checkpoint": CKPT}))
    if retained:
        c.children[f"PersistentVolumeClaim/{NAME}-data"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{NAME}-data"},
        }
    p = c.step()
    if retained:
        assert p.status["phase"] == Phase.partitioning.value
        return
    assert p.status["phase"] == Phase.failed.value and p.actions == []
    said = cond(p, "Failed")["message"]
    assert "spec.storage.volumeClaimName" in said and f"no claim {NAME}-data" in said, said
