"""A trainer's stage clock: each stage a step had observed once (its pieces summed), the whole step once,
and the counters pre-initialised."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from graphtrain.runtime.train.metrics import STAGES, TrainerMetrics


def value(m: TrainerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"rank": "3", **labels})


def test_a_stage_in_two_pieces_is_observed_once_and_a_missing_stage_not_at_all() -> None:
    m = TrainerMetrics(3, CollectorRegistry())
    assert value(m, "graphtrain_trainer_steps_total") == 0  # pre-initialised
    assert value(m, "graphtrain_trainer_samples_total") == 0
    clock = m.clock()
    for _ in range(2):
        clock.start()
        time.sleep(0.01)
        clock.lap("sample")
        clock.lap("forward_backward")
        time.sleep(0.01)
        clock.lap("forward_backward")  # the dense step, after the push
        clock.done()
        m.stepped(32)
    count = {s: value(m, "graphtrain_trainer_stage_seconds_count", stage=s) for s in STAGES}
    assert count == {"sample": 2, "pull": 0, "forward_backward": 2, "push": 0}
    fb = value(m, "graphtrain_trainer_stage_seconds_sum", stage="forward_backward")
    assert fb is not None and fb >= 0.02
    step = value(m, "graphtrain_trainer_step_seconds_sum")
    assert value(m, "graphtrain_trainer_step_seconds_count") == 2 and step is not None and step >= 0.04
    assert (
        value(m, "graphtrain_trainer_steps_total") == 2 and value(m, "graphtrain_trainer_samples_total") == 64
    )


def test_the_epoch_line_gives_each_stage_mean_and_starts_over() -> None:
    m = TrainerMetrics(3, CollectorRegistry())
    assert m.epoch_stages() == ""  # an epoch without steps says nothing
    clock = m.clock()
    clock.spent = {"sample": 0.004, "forward_backward": 0.010}
    clock.done()
    clock.spent = {"sample": 0.002, "forward_backward": 0.006}
    clock.done()
    assert m.epoch_stages() == "sample 3.0 ms, forward_backward 8.0 ms"  # in STAGES order, no pull/push
    assert m.epoch_stages() == ""
