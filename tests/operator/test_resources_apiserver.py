"""A spec whose resources Kubernetes would refuse in a pod (contract/spec/pods.py: here a GPU request
below its limit, which the CRD takes: the check is Python's) fails on a real API server with SpecValid
False naming the field, and the operator makes no child: the API server would have refused the trainer
pods after the partition Job, the shard servers and the Secret were made. (The test API server does not
validate built-in kinds, so the pod rule itself is checked by tests/contract/test_pods.py, as
Kubernetes' ValidateResourceRequirements words it.)"""

from __future__ import annotations

import pytest
import yaml

from tests.operator.conftest import wait_for
from tests.operator.test_operator_apiserver import SPEC, conditions, names_of, phase

pytestmark = pytest.mark.timeout(240)


def test_a_gpu_request_below_its_limit_fails_with_no_child_made(kube, operator, ns: str) -> None:
    doc = yaml.safe_load(SPEC.format(name="gpus", extra_model=""))
    doc["spec"]["trainers"]["resources"] = {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    kube("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    assert wait_for(lambda: phase(kube, "gpus", ns) == "Failed", what="Failed")
    valid = conditions(kube, "gpus", ns)["SpecValid"]
    assert valid["status"] == "False" and valid["message"].startswith(
        "spec.trainers.resources.requests.nvidia.com/gpu: 1 is below "
        "spec.trainers.resources.limits.nvidia.com/gpu 2: Kubernetes cannot overcommit nvidia.com/gpu"
    ), valid
    for kind in ("job", "statefulset", "pod", "secret", "configmap", "service"):
        assert names_of(kube, kind, ns, "gpus") == [], kind
