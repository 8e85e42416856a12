"""`graphtrain plan --calibrate` and `--costs` (runtime/calibrate.py, runtime/planning.py): a real
calibration on the planted graph's partition writes a well-formed costs file, which `--costs` reads to
predict the step; a bad costs file is one line naming it and the field, exit 1."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from graphtrain.runtime import steptime
from tests import forked
from tests.runtime.launch.test_run import CLI
from tests.runtime.test_capacity import graph_file, planted

__all__ = ["graph_file", "planted"]  # the fixtures, used here


@pytest.mark.timeout(300)
def test_calibrate_writes_costs_that_predict_the_step(planted: tuple[Path, Path], tmp_path: Path) -> None:
    spec_path, config = planted
    costs_file = tmp_path / "costs.json"
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--hosts", "2", "--bandwidth", "1gbit"]
    done = subprocess.run([*argv, "--calibrate", "--out", str(costs_file)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    costs = steptime.costs_from_dict(json.loads(costs_file.read_text()))
    assert set(costs.ops) == set(steptime.ALL_OPS)
    for name in ("sample_shm", "sample_tcp", "pull_shm", "pull_tcp", "push_tcp", "dense", "allreduce"):
        # each measured on real work: a per-unit or a per-call cost (under load the small batch can take
        # longer than the big one; calibrate._line then keeps the whole cost fixed, per call: seen in CI)
        op = costs.ops[name]
        assert op.wall > 0 or op.wall_touch > 0, (name, op)
    assert costs.cores >= 1 and costs.background >= 0
    assert "predicted step:" in done.stdout and "samples/s" in done.stdout
    again = subprocess.run([*argv, "--costs", str(costs_file)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "predicted step:" in again.stdout
    # hosts of 64 cores each: no step is slower than on this machine's cores shared by both hosts
    big = subprocess.run([*argv, "--costs", str(costs_file), "--cores", "64"], capture_output=True, text=True)
    assert big.returncode == 0, big.stderr

    def ms(text: str) -> float:
        return float(text.split("predicted step: ", 1)[1].split(" ms", 1)[0])

    assert ms(big.stdout) <= ms(again.stdout)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot be read"),
        ("{not json", "not JSON (Expecting property name enclosed in double quotes, line 1)"),
        ('{"ops": {}}', "field 'ops.sample_shm' is missing or not an object"),
    ],
)
def test_a_bad_costs_file_is_one_line_naming_it(
    planted: tuple[Path, Path], tmp_path: Path, content: str | None, says: str
) -> None:
    spec_path, config = planted
    costs_file = tmp_path / "costs.json"
    if content is not None:
        costs_file.write_text(content)
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--costs", str(costs_file)]
    assert one_error_line(argv).startswith(f"error: --costs {costs_file}: {says}")


def refused(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv)'s result for a `[*CLI, ...]` command that refuses, forked with torch imported
    (tests/forked.py): its line and exit code without ~2.5 s of CPU importing torch each time."""
    assert argv[: len(CLI)] == CLI, argv
    return forked.complete_cli("graphtrain.runtime.cli", argv[len(CLI) :])


def one_error_line(argv: list[str]) -> str:
    """The one line a refused command prints (exit 1, no traceback)."""
    done = refused(argv)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_out_without_calibrate_is_refused(planted: tuple[Path, Path], tmp_path: Path) -> None:
    spec_path, config = planted
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--out", str(tmp_path / "c.json")]
    done = refused(argv)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: --out: only with --calibrate (it writes the measured costs)"


def test_calibrate_with_costs_is_refused(planted: tuple[Path, Path], tmp_path: Path) -> None:
    """Both sources of costs at once: refused before anything is measured, not one silently ignored."""
    spec_path, config = planted
    costs = tmp_path / "c.json"
    costs.write_text(json.dumps(_costs("none")))
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--calibrate", "--costs", str(costs)]
    assert one_error_line(argv) == (
        "error: --calibrate measures the costs, --costs reads them from a file: pick one"
    )


@pytest.mark.parametrize(
    ("example", "task"),
    [
        ("nations-transe.yaml", "kge with model.kind transe"),
        ("nations-rgcn-lp.yaml", "linkPrediction with model.kind rgcn"),
    ],
)
def test_calibrate_of_a_task_without_a_step_model_is_one_line(example: str, task: str) -> None:
    """`--calibrate` replays node classification's batches: on a knowledge graph (no train_mask) it
    ended in a KeyError's traceback after partitioning; now one line before anything is made."""
    spec = Path(__file__).resolve().parents[2] / "examples" / example
    assert one_error_line([*CLI, "plan", str(spec), "--calibrate"]) == (
        f"error: --calibrate: the step time is predicted for GNN node classification only, not task.kind "
        f"{task} (plan without it: each role's memory)"
    )


def test_a_partition_of_another_graph_or_part_count_is_refused(
    planted: tuple[Path, Path], tmp_path: Path
) -> None:
    """`plan --partition` of a partition the spec cannot train on: one line, not a KeyError deep in the
    replay (wordnet's spec, nations' partition) nor a plan of the wrong graph (the other way round)."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.partition.format import PartitionConfig
    from graphtrain.runtime.planning import given_partition_fits

    wordnet = load_yaml(Path("examples/wordnet-sage.yaml").read_text()).spec
    nations = PartitionConfig(Path("p/nations.json"), {"graph_name": "nations", "num_parts": 2})
    with pytest.raises(
        GraphtrainError, match="a partition of 'nations', the spec trains on graph.dataset 'wordnet'"
    ):
        given_partition_fits(wordnet, nations)
    spec_path, config = planted
    doc = yaml.safe_load(spec_path.read_text())
    doc["spec"]["partition"]["parts"] += 1
    other = tmp_path / "more-parts.yaml"
    other.write_text(yaml.safe_dump(doc))
    said = one_error_line([*CLI, "plan", str(other), "--partition", str(config)])
    parts = doc["spec"]["partition"]["parts"]
    assert said == f"error: --partition {config}: {parts - 1} part(s), the spec has {parts} shard server(s)"


def test_a_partition_of_another_graph_is_refused_for_a_spec_of_files() -> None:
    """A spec of files names no dataset to compare the partition's with: a KG's partition in as many
    parts ran into the replay's KeyError (`the partition has no 'train_mask'`), a traceback."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.partition.format import PartitionConfig
    from graphtrain.runtime.planning import given_partition_fits

    sbm = load_yaml(Path("examples/own-data/sbm-sage.yaml").read_text()).spec
    kg = {"graph_name": "nations", "num_parts": 2, "ndata": {"ntype": {}}}
    with pytest.raises(
        GraphtrainError,
        match=r"p/nations.json: no node label or train_mask \(its node data: ntype\), which task "
        "nodeClassification trains on",
    ):
        given_partition_fits(sbm, PartitionConfig(Path("p/nations.json"), kg))
    labelled = {**kg, "ndata": {"label": {}, "train_mask": {}}}
    given_partition_fits(sbm, PartitionConfig(Path("p/other.json"), labelled))  # one it can replay


@pytest.mark.parametrize("cores", ["0", "-2", "nan"])
def test_cores_that_are_no_cores_are_refused(planted: tuple[Path, Path], cores: str) -> None:
    spec_path, config = planted
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--cores", cores]
    done = refused(argv)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"error: --cores: {float(cores)} is not a positive number of cores"


def _costs(mixed: str) -> dict:
    """A well-formed costs file's content, its dense model timed in `mixed`."""
    units = {name: steptime.UnitCost(1e-6, 1e-6) for name in steptime.ALL_OPS}
    return {**steptime.Costs(units, 2.0, 0.0).to_dict(), "mixed_precision": mixed}


@pytest.mark.parametrize(
    ("costs", "spec_mixed", "says"),
    [
        (
            "none",
            "bfloat16",
            "its dense model was timed with training.mixedPrecision none, the spec asks bfloat16",
        ),
        (
            "bfloat16",
            "none",
            "its dense model was timed with training.mixedPrecision bfloat16, the spec asks none",
        ),
        ("fp8", "none", "field 'mixed_precision' must be one of none, bfloat16, got 'fp8'"),
    ],
)
def test_costs_of_another_precision_are_refused_naming_both(
    planted: tuple[Path, Path], tmp_path: Path, costs: str, spec_mixed: str, says: str
) -> None:
    """training.mixedPrecision changes the dense step: costs timed in one precision do not predict
    the other."""
    spec_path, config = planted
    doc = yaml.safe_load(spec_path.read_text())
    doc["spec"].setdefault("training", {})["mixedPrecision"] = spec_mixed
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    costs_file = tmp_path / "costs.json"
    costs_file.write_text(json.dumps(_costs(costs)))
    argv = [*CLI, "plan", str(spec), "--partition", str(config), "--costs", str(costs_file)]
    assert one_error_line(argv).startswith(f"error: --costs {costs_file}: {says}")


def test_costs_of_the_specs_precision_predict_the_step(planted: tuple[Path, Path], tmp_path: Path) -> None:
    spec_path, config = planted
    doc = yaml.safe_load(spec_path.read_text())
    doc["spec"].setdefault("training", {})["mixedPrecision"] = "bfloat16"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    costs_file = tmp_path / "costs.json"
    costs_file.write_text(json.dumps(_costs("bfloat16")))
    argv = [*CLI, "plan", str(spec), "--partition", str(config), "--hosts", "2", "--costs", str(costs_file)]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "predicted step:" in done.stdout


@pytest.mark.parametrize(("hosts", "cores"), [(2, None), (2, 4.0)])
def test_hosts_beyond_the_processes_add_no_link_and_no_cores(
    planted: tuple[Path, Path], hosts: int, cores: float | None
) -> None:
    """2 shards and 2 trainers use 2 hosts however many are asked: `--hosts 8` spread their link bytes
    over 8 links and their CPU over 8 hosts' cores, predicting a step the 2 hosts cannot make."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime import capacity, planning
    from graphtrain.runtime.partition.format import load_config

    spec_path, config = planted
    spec, cfg = load_yaml(spec_path.read_text()).spec, load_config(config)
    costs = steptime.costs_from_dict(_costs("none"))
    step = {
        n: planning.predicted(spec, cfg, capacity.make_plan(spec, cfg, n), costs, 1e5, cores)
        for n in (hosts, 8)
    }
    for part in ("bound link", "cpu share", "bound cpu"):
        assert step[8].parts[part] == pytest.approx(step[hosts].parts[part]), part
    assert [planning.hosts_in_use(h, 2, 3) for h in (1, 2, 3, 8)] == [1, 2, 3, 3]
