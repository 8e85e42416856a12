"""scripts/gpu-accept without a GPU: every run it would start on a GPU machine is a valid spec with the
variant asked for, and every step can be picked alone with --only (a lease's minutes are too few to find
a broken spec there)."""

from __future__ import annotations

import pytest
import yaml

from graphtrain.contract.spec.loading import load_yaml
from tests.native.gpu_check_modules import ROOT, load

accept = load("gpu_accept_script", ROOT / "scripts" / "gpu-accept")
RUNS = [s.run for s in accept.steps() if s.run is not None]


def names() -> list[str]:
    return [s.name or s.run.name for s in accept.steps()]


def test_step_names_are_unique() -> None:
    assert len(set(names())) == len(names())


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_run_is_a_valid_spec_with_its_variant(run) -> None:  # noqa: ANN001
    text = run.spec()
    gt = load_yaml(text)  # the spec rules `graphtrain validate` applies
    spec = gt.spec
    assert str(spec.shard_servers.device) == run.shards and str(spec.trainers.device) == run.trainers
    if run.replicas:
        assert spec.trainers.replicas == run.replicas
    if run.collective:
        assert all(str(t.sharding) == "collective" for t in spec.embeddings)
    if run.prefetch is not None:
        assert spec.training.prefetch == run.prefetch
    assert spec.training.cuda_graph == run.graph
    # a GPU run is profiled (where its step's time goes); the CPU baselines are not slowed by it
    assert spec.training.profile_steps == (20 if "cuda" in (run.shards, run.trainers) else 0)
    assert yaml.safe_load(text)["spec"]["graph"]["dataset"]  # an example's own dataset


def test_the_next_leases_runs_are_there() -> None:
    """The runs the third lease left for the next (bench/RESULTS.md): collective WordNet with prefetch,
    gene-kg on collective tables and standalone (its tables used on the GPU in process), and the
    sampling bench."""
    have = set(names())
    assert "wordnet-sage shards-cuda trainers-cuda x1 nccl collective prefetch 1" in have
    assert "gene-kg-transe shards-cuda trainers-cuda x1 nccl collective" in have
    assert "gene-kg-transe standalone trainers-cuda" in have
    assert "bench sampling" in have
    assert {"bench gpu b1 features", "bench gpu b1 table"} <= have


def test_only_runs_the_steps_it_names_in_the_order_of_its_words() -> None:
    """A lease's few minutes go to what matters most first: the words' order is the run order, and a step
    keeps its number (its log and spec files' names)."""
    all_steps = accept.steps()
    number = {accept.step_name(s): i for i, s in enumerate(all_steps, 1)}
    words = [
        "gene-kg-transe standalone trainers-cuda",  # a whole name: not its dtype variant
        "gene-kg-transe shards-cpu trainers-cpu x2",
        "tests/gpu",
        "prefetch 1",
    ]
    picked = [(i, accept.step_name(s)) for i, s in accept.chosen(all_steps, words)]
    names = [n for _, n in picked]
    assert names[:3] == [
        "gene-kg-transe standalone trainers-cuda",
        "gene-kg-transe shards-cpu trainers-cpu x2",
        "tests/gpu",
    ]
    assert set(names[3:]) == {n for n in number if "prefetch 1" in n} and len(names) == 3 + len(names[3:])
    assert [number[n] for n in names[3:]] == sorted(number[n] for n in names[3:])  # ties: in step order
    assert all(i == number[n] for i, n in picked)
    assert [i for i, _ in accept.chosen(all_steps, None)] == list(range(1, len(all_steps) + 1))


def test_a_word_that_is_a_whole_step_name_picks_that_step_alone() -> None:
    """The GPU-shard-server run's name is a part of its collective variants' names: named whole, it
    comes alone (the lease's seconds go to the runs asked for), while a partial word still picks many."""
    all_steps = accept.steps()
    whole = "wordnet-sage shards-cuda trainers-cuda x1 nccl"
    assert [accept.step_name(s) for _, s in accept.chosen(all_steps, [whole])] == [whole]
    partial = [accept.step_name(s) for _, s in accept.chosen(all_steps, ["trainers-cuda x1 nccl"])]
    assert whole in partial and len(partial) > 1


def test_time_to_accuracy_counts_from_the_partition_to_the_first_epoch_at_the_target() -> None:
    """A bigger batch is judged by when validation reaches the target, from the roles' start (the
    partition ready), not by samples/s alone; a run that never reaches it says so (None)."""
    status = {"conditions": [{"type": "PartitionReady", "lastTransitionTime": "2026-11-28T10:00:00+00:00"}]}
    history = [
        {"evalValue": 0.80, "updatedAt": "2026-11-28T10:00:07+00:00"},
        {"evalValue": None, "updatedAt": "2026-11-28T10:00:09+00:00"},
        {"evalValue": 0.86, "updatedAt": "2026-11-28T10:00:12+00:00"},
        {"evalValue": 0.87, "updatedAt": "2026-11-28T10:00:15+00:00"},
    ]
    assert accept.seconds_to(history, status, 0.85) == 12.0
    assert accept.seconds_to(history, status, 0.9) is None
    assert "wordnet-sage shards-cuda trainers-cuda x1 nccl collective prefetch 1 batch 4096" in set(names())


def test_the_steady_rate_leaves_out_the_epochs_first_quarter() -> None:
    # 100 steps of 1,000 samples: 10 s for the first 25 (a slow start), then 1 s each 25
    lines = [
        "noise 12 samples/s",
        "2026-12-04T13:09:13+00:00 [trainer] epoch 1/1 running  step 25  loss 3.4  2,500 samples/s",
        "2026-12-04T13:09:14+00:00 [trainer] epoch 1/1 running  step 50  loss 3.3  4,545 samples/s",
        "2026-12-04T13:09:15+00:00 [trainer] epoch 1/1 running  step 100  loss 3.3  7,692 samples/s",
        "2026-12-04T13:09:16+00:00 [trainer] epoch 1/1  loss 2.9  val_mrr 0.0063  7,600 samples/s",
    ]
    assert accept.steady_rate("\n".join(lines)) == pytest.approx(25_000, rel=1e-3)


def test_the_steady_rate_is_the_last_epochs_counted_from_its_first_step() -> None:
    """Three epochs of 100 steps of 1,000 samples, each with a slow start (10 steps in 5 s) and then 1 s
    per 10 steps, reported every 10 steps with the run's step and the rate since the epoch began."""
    lines = []
    for epoch in range(3):
        for done in range(10, 101, 10):
            seconds = 5.0 + (done - 10) / 10
            rate = done * 1_000 / seconds
            lines.append(
                f"epoch {epoch + 1}/3 running  step {epoch * 100 + done}  loss 1  {rate:,.0f} samples/s"
            )
    log = "\n".join(lines)
    history = [{"epoch": 1, "step": 100}, {"epoch": 2, "step": 200}, {"epoch": 3, "step": 300}]
    assert accept.steady_rate(log, accept.epoch_starts(history)) == pytest.approx(10_000, rel=1e-3)
    assert accept.steady_rate("\n".join(lines[:10])) == pytest.approx(10_000, rel=1e-3)  # the first epoch


def test_the_steady_rate_is_none_without_two_reports_or_a_positive_rate() -> None:
    def report(step: int, rate: str) -> str:
        return f"epoch 2/2 running  step {step}  loss 1  {rate} samples/s\n"

    assert accept.steady_rate(report(150, "5,000"), {2: 100}) is None
    assert accept.steady_rate(report(150, "5,000") + report(200, "5,000"), {2: 100}) == pytest.approx(5_000)
    assert accept.steady_rate(report(150, "1,000") + report(200, "9,000"), {2: 100}) is None  # time ran back
    assert accept.steady_rate("") is None
