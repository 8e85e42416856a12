"""The step-time model (runtime/steptime.py): a pure function of unit costs and a trainer's work per step,
checked on hand-made costs; and a costs file's fields read back or refused naming the field."""

from __future__ import annotations

import pytest

from graphtrain.runtime import steptime
from graphtrain.runtime.steptime import Costs, Load, UnitCost


def costs(background: float = 0.0, cores: float = 2.0, **ops: UnitCost) -> Costs:
    units = {name: UnitCost(0.0, 0.0) for name in steptime.ALL_OPS}
    units.update(ops)
    return Costs(units, cores, background)


def load(**kw: float) -> Load:
    base = dict(
        edges=0.0,
        feature_bytes=0.0,
        row_bytes=0.0,
        remote=0.0,
        macs=0.0,
        allreduce_bytes=0.0,
        wire_bytes=0.0,
        path_bytes=0.0,
    )
    return Load(**{**base, **kw})  # type: ignore[arg-type]


def test_local_and_remote_units_take_their_own_costs() -> None:
    c = costs(pull_shm=UnitCost(1.0, 1.0), pull_tcp=UnitCost(3.0, 2.0, 0.5))
    parts = steptime.trainer_parts(c, load(row_bytes=10, remote=0.25))
    assert parts["pull"] == UnitCost(7.5 * 1.0 + 2.5 * 3.0, 7.5 + 2.5 * 2.0, 2.5 * 0.5)


def test_one_unshared_trainer_is_set_by_its_own_path_sampling_overlapping() -> None:
    c = costs(cores=8, sample_shm=UnitCost(1.0, 1.0), dense=UnitCost(1.0, 1.0))
    step = steptime.predict(c, [load(edges=0.5, macs=0.2)], hosts=1)
    assert step.bound == "trainer path"
    assert step.seconds == pytest.approx(0.5)  # max(loader 0.5, main 0.2): sampling runs beside the step
    # on one core the two threads take turns
    assert steptime.predict(
        costs(cores=1, sample_shm=UnitCost(1.0, 1.0), dense=UnitCost(1.0, 1.0)),
        [load(edges=0.5, macs=0.2)],
        hosts=1,
    ).seconds == pytest.approx(0.7)


def test_the_wire_adds_to_a_trainers_path_and_bounds_the_links() -> None:
    c = costs(cores=8, dense=UnitCost(1.0, 1.0))
    step = steptime.predict(
        c, [load(macs=0.1, path_bytes=100.0, wire_bytes=150.0)] * 2, hosts=2, bandwidth=1000
    )
    assert step.parts["bound trainer path"] == pytest.approx(0.1 + 0.1)
    assert step.parts["bound link"] == pytest.approx(2 * 150 / 2 / 1000)
    assert (
        steptime.predict(c, [load(macs=0.1, path_bytes=1e6, wire_bytes=1e6)], 1, 1000).bound == "trainer path"
    )
    assert steptime.predict(c, [load(macs=0.1, wire_bytes=1e6)] * 4, 2, 1000).bound == "link"


def test_groups_share_the_cores_with_other_load() -> None:
    assert steptime.cpu_share(2, 0, 1) == 2  # alone: every core (a trainer's two threads can use them)
    assert steptime.cpu_share(2, 0, 8) == 2
    assert steptime.cpu_share(2, 6, 2) == pytest.approx(2 * 2 / 8)  # an even share of 8 groups
    c = costs(background=4, dense=UnitCost(0.1, 0.1), push_shm=UnitCost(0.0, 0.0, 1.0))
    step = steptime.predict(c, [load(macs=1.0, row_bytes=0.05)] * 4, hosts=4)
    # 4 trainers of 0.1 s CPU each (idle loaders), servers 4 x 0.05 s = 2 trainers' worth: 6 busy
    assert step.parts["busy processes"] == pytest.approx(6)
    share = 2 * 6 / 10  # 6 busy beside 4 others on 2 cores
    assert step.parts["cpu total"] == pytest.approx(0.4 + 0.2)
    assert step.parts["bound cpu"] == pytest.approx((0.4 + 0.2) / share)
    # a trainer's path: its CPU and the server CPU it waits for, at the rate one group gets beside 4 others
    assert step.parts["bound trainer path"] == pytest.approx((0.1 + 0.05) / (2 / 5))
    # our 6 groups contend with each other in the CPU bound: a waiting trainer leaves its core to a server
    assert step.bound == "cpu"
    assert (
        steptime.predict(costs(dense=UnitCost(0.1, 0.1)), [load(macs=1.0)], hosts=1).bound == "trainer path"
    )


def test_the_all_reduce_across_hosts_is_a_barrier_on_top_of_the_cpu_bound() -> None:
    c = costs(cores=2, dense=UnitCost(0.1, 0.1))
    four = [load(macs=1.0, allreduce_bytes=50.0)] * 4
    assert steptime.predict(c, four, hosts=4, bandwidth=1000).parts["bound cpu"] == pytest.approx(0.2 + 0.05)
    assert steptime.predict(c, four, hosts=1, bandwidth=1000).parts["bound cpu"] == pytest.approx(0.2)


def test_costs_round_trip_and_a_bad_field_is_named() -> None:
    c = costs(background=1.5, dense=UnitCost(1e-10, 9e-11))
    assert steptime.costs_from_dict(c.to_dict()) == c
    doc = c.to_dict()
    doc["ops"]["pull_tcp"]["wall"] = "fast"
    with pytest.raises(
        ValueError, match="field 'ops.pull_tcp.wall' must be a finite non-negative number, got 'fast'"
    ):
        steptime.costs_from_dict(doc)
    # JSON's Infinity (json.loads reads it): every process given infinite cores, or a step of no end
    doc = c.to_dict()
    for field, where in (("cores", doc), ("wall", doc["ops"]["dense"])):
        where[field] = float("inf")
        with pytest.raises(
            ValueError, match=f"field '.*{field}' must be a finite non-negative number, got inf"
        ):
            steptime.costs_from_dict(doc)
        where[field] = 1.0
    doc = c.to_dict()
    del doc["ops"]["dense"]
    with pytest.raises(ValueError, match="field 'ops.dense' is missing"):
        steptime.costs_from_dict(doc)
    with pytest.raises(ValueError, match="field 'cores' must be above 0"):
        steptime.costs_from_dict({**c.to_dict(), "cores": 0})


def test_each_shard_a_call_touches_pays_its_fixed_cost_on_its_way() -> None:
    c = costs(
        pull_shm=UnitCost(1.0, 1.0, 0.0, 0.5, 0.25, 0.0), pull_tcp=UnitCost(2.0, 2.0, 1.0, 3.0, 1.0, 4.0)
    )
    parts = steptime.trainer_parts(c, load(row_bytes=10, remote=0.5, touches={"pull": (1.0, 3.0)}))
    assert parts["pull"] == UnitCost(5 + 10 + 0.5 + 9, 5 + 10 + 0.25 + 3, 5 + 12)
    # every call touches every shard: sampling once a layer, features and labels once a table
    assert steptime.touch_counts(2, 2, True, 1, 3) == {
        "sample": (2.0, 6.0),
        "fetch": (2.0, 6.0),
        "pull": (1.0, 3.0),
        "push": (1.0, 3.0),
    }
    assert steptime.touch_counts(2, 1, False, 2, 0)["pull"] == (0.0, 0.0)
    # features, labels and embedding rows in one call (inline batches): one fetch touch, no pull
    together = steptime.touch_counts(2, 2, True, 1, 3, together=True)
    assert (
        together["fetch"] == (1.0, 3.0) and together["pull"] == (0.0, 0.0) and together["push"] == (1.0, 3.0)
    )


def test_the_all_reduce_pays_each_step_of_its_ring() -> None:
    c = costs(allreduce=UnitCost(1.0, 0.5, 0.0, 2.0, 1.0))
    parts = steptime.trainer_parts(c, load(allreduce_bytes=3.0, ring_steps=6))
    assert parts["allreduce"] == UnitCost(3 + 12, 1.5 + 6)


def test_inline_sampling_adds_to_the_step_instead_of_overlapping_it() -> None:
    c = costs(cores=8, sample_shm=UnitCost(1.0, 1.0), dense=UnitCost(1.0, 1.0))
    step = steptime.predict(c, [load(edges=0.5, macs=0.2, inline=True)], hosts=1)
    assert step.seconds == pytest.approx(0.7)


def test_a_costs_file_without_touch_costs_reads_them_as_none() -> None:
    doc = costs(dense=UnitCost(1e-10, 9e-11)).to_dict()
    for unit in doc["ops"].values():
        for k in ("wall_touch", "cpu_touch", "server_touch"):
            del unit[k]
    assert steptime.costs_from_dict(doc).ops["dense"] == UnitCost(1e-10, 9e-11)


def test_the_dense_step_has_a_fixed_part_a_smaller_batch_pays_as_much_of() -> None:
    c = costs(dense=UnitCost(1e-9, 1e-9, 0.0, 0.002, 0.003))
    assert steptime.trainer_parts(c, load(macs=1e6))["forward_backward"] == UnitCost(
        0.001 + 0.002, 0.001 + 0.003
    )


def test_hosts_with_cores_of_their_own_share_none_and_ignore_this_machines_load() -> None:
    c = costs(cores=2, background=6, dense=UnitCost(0.1, 0.1))
    four = [load(macs=1.0)] * 4
    shared = steptime.predict(c, four, hosts=4)
    own = steptime.predict(c, four, hosts=4, host_cores=8)
    assert own.parts["cpu share"] == pytest.approx(32) and own.seconds == pytest.approx(0.1)
    assert shared.seconds > own.seconds
    # half a core each: a trainer's thread runs at half speed
    assert steptime.predict(c, four, hosts=4, host_cores=0.5).seconds == pytest.approx(0.2)


def test_threads_on_hosts_of_their_own_cores_cost_no_more_than_one_thread() -> None:
    # measured spinning beside other load on the calibration machine, threads were slower than one
    c = costs(cores=2, dense=UnitCost(1.0, 1.0), dense_threaded=UnitCost(1.5, 3.0))
    threaded = load(macs=0.1, threads=4)
    shared = steptime.predict(c, [threaded], hosts=1)
    assert shared.parts["forward_backward"] == pytest.approx(0.15)  # where they share the cores: as measured
    own = steptime.predict(c, [threaded], hosts=1, host_cores=64)
    assert own.parts["forward_backward"] == pytest.approx(0.1)  # alone on a host: no worse than one thread
    faster = costs(cores=2, dense=UnitCost(1.0, 1.0), dense_threaded=UnitCost(0.5, 2.0))
    assert steptime.predict(faster, [threaded], hosts=1, host_cores=64).parts[
        "forward_backward"
    ] == pytest.approx(0.05)
