"""A GPU trainer's stage clock (train/metrics.py): CUDA events, so a stage's kernels are timed in that stage
without a wait per stage, and a step is observed once the device has passed it; and the step seed that
fixes a GPU model's dropout (a resumed run draws the uninterrupted one's masks)."""

from __future__ import annotations

import torch
from prometheus_client import CollectorRegistry

from graphtrain.runtime.train.metrics import TrainerMetrics


def _seconds(m: TrainerMetrics, stage: str) -> float:
    got = m.registry.get_sample_value("graphtrain_trainer_stage_seconds_sum", {"rank": "0", "stage": stage})
    assert got is not None
    return got


def test_kernels_count_in_the_stage_that_launched_them() -> None:
    device = torch.device("cuda", 0)
    m = TrainerMetrics(0, CollectorRegistry())
    a = torch.randn(4096, 4096, device=device)
    torch.cuda.synchronize(device)
    clock = m.clock(device)
    for _ in range(3):
        clock.lap("sample")  # nothing queued: the device is there at once
        for _ in range(20):  # tens of milliseconds of device work, launched in microseconds
            a = torch.tanh(a @ a)
        clock.lap("forward_backward")
        clock.lap("push")  # launched right after: the device reaches it after the matmuls only
        clock.done()
        clock.start()
    clock.flush()
    fb, push, sample = _seconds(m, "forward_backward"), _seconds(m, "push"), _seconds(m, "sample")
    assert fb > 0.005 and fb > 20 * push and fb > 20 * sample  # the host timer gave it all to the next wait
    steps = m.registry.get_sample_value("graphtrain_trainer_step_seconds_count", {"rank": "0"})
    assert steps == 3 and "forward_backward" in m.epoch_stages()


def test_the_step_seed_fixes_a_gpu_models_dropout() -> None:
    """The epoch loop seeds device_generator with each step's seed: the same seed, the same masks."""
    from graphtrain.runtime.train.device import device_generator

    device = torch.device("cuda", 0)
    gen = device_generator(device)
    assert gen is not None
    masks = []
    for _ in range(2):
        gen.manual_seed(1234)
        masks.append(torch.nn.functional.dropout(torch.ones(1000, device=device), 0.5))
    assert torch.equal(masks[0], masks[1])
