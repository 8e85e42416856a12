"""A trainer's stage clock: each stage a step had observed once (its pieces summed), the whole step once,
and the counters pre-initialised."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from graphtrain.runtime.kvstore.client import reads
from graphtrain.runtime.train.metrics import STAGES, StageClock, TrainerMetrics


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


class At:
    """A mark at a fixed time (ms), reached once `reached` says so: a device's event, deterministic."""

    reached = True

    def __init__(self, ms: float):
        self.ms = ms

    def query(self) -> bool:
        return At.reached

    def synchronize(self) -> None:
        At.reached = True

    def elapsed_time(self, end: At) -> float:
        return end.ms - self.ms


def clock_at(m: TrainerMetrics, times: list[float]) -> StageClock:
    it = iter(times)
    return StageClock(m, lambda: At(next(it)))


def test_the_epoch_line_gives_each_stage_mean_and_starts_over() -> None:
    m = TrainerMetrics(3, CollectorRegistry())
    assert m.epoch_stages() == ""  # an epoch without steps says nothing
    clock = clock_at(m, [0.0, 4.0, 14.0, 20.0, 22.0, 28.0])
    clock.lap("sample")
    clock.lap("forward_backward")
    clock.done()
    clock.start()
    clock.lap("sample")
    clock.lap("forward_backward")
    clock.done()
    assert m.epoch_stages() == "sample 3.0 ms, forward_backward 8.0 ms"  # in STAGES order, no pull/push
    assert m.epoch_stages() == ""


def test_the_epoch_line_gives_the_messages_its_steps_sent_per_step_and_not_the_evaluations() -> None:
    m = TrainerMetrics(0, CollectorRegistry())
    m.steps_begin()
    clock = clock_at(m, [float(t) for t in range(10)])
    for _ in range(2):
        for _ in range(3):  # a step's three messages: two over the fast lane, one over ZMQ
            reads.sent("fast_lane")
        reads.sent("zmq")
        clock.lap("sample")
        clock.lap("forward_backward")
        clock.done()
        clock.start()
    m.steps_end()
    reads.sent("zmq")  # the evaluation's, after the steps
    assert m.epoch_stages().endswith("; messages: fast_lane 3.0, zmq 1.0")


def test_a_step_the_device_has_not_reached_is_observed_later_and_at_the_latest_when_flushed() -> None:
    m = TrainerMetrics(3, CollectorRegistry())
    clock = clock_at(m, [0.0, 1.0, 5.0, 10.0, 11.0, 13.0, 20.0, 21.0, 30.0, 40.0, 42.0])
    At.reached = False
    try:
        for _ in range(2):
            clock.lap("sample")
            clock.lap("forward_backward")
            clock.done()
            clock.start()
        assert value(m, "graphtrain_trainer_step_seconds_count") == 0  # neither reached: not yet
        At.reached = True
        clock.lap("sample")
        clock.lap("forward_backward")
        clock.done()  # the device got this far: every step before it too
        assert value(m, "graphtrain_trainer_step_seconds_count") == 3
        assert m.epoch_stages() == "sample 1.0 ms, forward_backward 5.0 ms"
        At.reached = False
        clock.start()
        clock.lap("sample")
        clock.done()
        assert value(m, "graphtrain_trainer_step_seconds_count") == 3
        clock.flush()  # an epoch's end waits for its last step
        assert value(m, "graphtrain_trainer_step_seconds_count") == 4
    finally:
        At.reached = True


def test_the_collective_bytes_are_the_exchanges_counters() -> None:
    """graphtrain_trainer_collective_bytes_total reads what every Exchange of the process moved."""
    from graphtrain.runtime.collective import exchange

    metrics = TrainerMetrics(3)
    before = exchange.moved()
    exchange.MOVED["sent"] += 1000
    exchange.MOVED["received"] += 24
    try:
        sample = metrics.registry.get_sample_value
        labels = {"rank": "3"}
        sent = sample("graphtrain_trainer_collective_bytes_total", {**labels, "direction": "sent"})
        received = sample("graphtrain_trainer_collective_bytes_total", {**labels, "direction": "received"})
        assert (sent, received) == (before["sent"] + 1000, before["received"] + 24)
    finally:
        exchange.MOVED.update(before)
