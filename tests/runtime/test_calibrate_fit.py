"""runtime/calibrate.py's fit: a line through two batch sizes' rounds, a fixed part per touched shard
and a part per unit (pure; the calibration itself runs in tests/runtime/test_plan_costs.py)."""

from __future__ import annotations

import pytest

from graphtrain.runtime import calibrate
from graphtrain.runtime.steptime import UnitCost


def rounds(units: float, fixed: float, per_unit: float, server: float, disturbed: float = 0.0) -> list:
    cost = fixed + per_unit * units
    warm = (units, 10 * cost, 10 * cost, server)  # the first round is dropped
    return [warm, (units, cost + disturbed, cost + disturbed, server), (units, cost, cost, server)]


def test_a_line_through_two_sizes_splits_the_fixed_part_from_the_per_unit_one() -> None:
    big, small = rounds(1000, 0.004, 1e-6, 0.006), rounds(250, 0.004, 1e-6, 0.0045)
    got = calibrate.fit(big, small, touches=4, server_scale=2.0)
    assert got.wall == pytest.approx(1e-6) and got.cpu == pytest.approx(1e-6)
    assert got.wall_touch == pytest.approx(0.001) and got.cpu_touch == pytest.approx(0.001)
    # servers: 0.006 at 1000, 0.0045 at 250 -> 2e-6 per unit and 0.004 fixed, twice that with the gaps
    assert got.server_cpu == pytest.approx(4e-6) and got.server_touch == pytest.approx(0.002)


def test_the_least_disturbed_round_of_each_size_is_taken() -> None:
    big, small = rounds(1000, 0.0, 1e-6, 0.0, disturbed=0.5), rounds(250, 0.0, 1e-6, 0.0, disturbed=0.5)
    got = calibrate.fit(big, small, touches=1)
    assert got.cpu == pytest.approx(1e-6) and got.cpu_touch == pytest.approx(0.0, abs=1e-12)


def test_noise_never_makes_a_negative_cost() -> None:
    # the small size costs more per call than the large one: all fixed
    assert calibrate._line((1000, 0.001), (250, 0.002)) == (0.001, 0.0)
    # a line crossing zero above zero units: all per unit, at the large size's rate
    assert calibrate._line((1000, 0.002), (250, 0.0001)) == (0.0, pytest.approx(2e-6))
    assert calibrate._line((0, 1.0), (0, 1.0)) == (0.0, 0.0)
    assert calibrate.fit([], [], touches=2) == UnitCost(0.0, 0.0, 0.0)


def test_a_threads_cpu_time_is_read_in_nanoseconds() -> None:
    import os

    assert calibrate.task_cpu(os.getpid()) > 0
    assert calibrate.task_cpu(2**22 + 7) == 0  # no such process: nothing
