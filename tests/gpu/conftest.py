"""The GPU test suite: the CUDA core on a real device. Every test here carries the `gpu` marker, which the
default pytest run deselects (pyproject.toml); `scripts/gpu-check` runs them with `-m gpu`, also under
compute-sanitizer. Where no GPU is present they fail saying so (a skip would let `pytest -m gpu` on the
wrong machine end without a red line); where one is present and the core does not run on it, they fail
with the core's reason (a green run must mean the core ran).
Nothing is tested only here: the checks before any CUDA call and the no-abort contract run everywhere
(tests/native/test_cuda_core.py), the shared math through the CPU core (tests/native)."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.native import cuda

NO_GPU = "no GPU here (torch.cuda.is_available() is False): run scripts/gpu-check on a machine with one"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _gpu() -> None:
    if not torch.cuda.is_available():
        pytest.fail(NO_GPU, pytrace=False)
    if not cuda.available():
        pytest.fail(
            f"a GPU is here but the CUDA core does not run on it: {cuda.unavailable_reason()}", pytrace=False
        )
