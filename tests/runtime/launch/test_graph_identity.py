"""A partition carries its graph's identity (partition/identity.py) and a checkpoint records it:
`infer`, `predict` and `export` refuse a partition, or a spec, of another graph in one line, exit 1,
however the partition was made (the operator's partition Job's argv, contract/roles.py) or moved (a
copied run directory leaves partition.settings behind); and `infer` refuses a damaged checkpoint before
it starts any process."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from graphtrain.contract import roles
from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.launch.inference import graph_changes
from graphtrain.runtime.partition import load_config
from tests import forked
from tests.runtime.launch.test_run import launch, planted_npz, sage_spec

CLI = [sys.executable, "-m", "graphtrain.runtime.cli"]


def cli(*argv: str) -> tuple[int, str]:
    done = forked.complete_argv([*CLI, *argv], timeout=240)
    return done.returncode, done.stderr


def operator_partition(spec: Path, out: Path, base: Path) -> tuple[int, str]:
    """The operator's partition Job: its argv as contract/roles.py builds it."""
    files = roles.Files(spec=str(spec), partition=str(out), token="t", checkpoints="c")
    return cli(*roles.partition(files, base_dir=str(base)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A one-epoch standalone training on the planted graph (with node ids: its two digest forms
    differ), beside `other`: the same graph with other node ids (so the same partition settings give the
    same node map: only the identity tells them apart)."""
    root = tmp_path_factory.mktemp("identity")
    graph = planted_npz(root / "planted.npz")
    data = dict(np.load(graph))
    np.savez(graph, **data, node_ids=np.arange(len(data["label"])) * 3)
    np.savez(root / "other.npz", **data, node_ids=np.arange(len(data["label"])) + 10_000)
    doc = sage_spec(Path("planted.npz"), epochs=1)
    doc["spec"]["trainers"]["replicas"] = 1
    run_dir = root / "train"
    launch(doc, run_dir, standalone=True).run()
    doc["spec"]["graph"]["path"] = "other.npz"
    (root / "other.yaml").write_text(yaml.safe_dump(doc))
    return {"root": root, "spec": root / "train.yaml", "other": root / "other.yaml", "run": run_dir}


def checkpoint_of(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / (run_dir / "checkpoints" / "LATEST").read_text().strip()


def config_of(partition: Path) -> dict:
    return json.loads(next(partition.glob("*.json")).read_text())


def test_the_partition_carries_its_graph_and_the_checkpoint_records_it(trained: dict[str, Path]) -> None:
    cfg = config_of(trained["run"] / "partition")
    top = json.loads((checkpoint_of(trained["run"]) / "checkpoint.json").read_text())
    assert top["partition"]["graph_identity"] == cfg["graph_identity"]
    assert cfg["graph_identity"]["num_nodes"] == 2000 and len(cfg["graph_identity"]["digest"]) == 64
    assert json.loads(cfg["made_for"])["inputs"]["graph.path"]  # the input's sha256, not its name


def test_the_operators_partition_is_checked_as_a_local_one(trained: dict[str, Path], tmp_path: Path) -> None:
    """The partition Job's partition of the same spec carries the same identity; a checkpoint's infer
    through the Job (mode inference: it links the checkpoint's partition) refuses another graph's spec
    and links for the training's own."""
    root = trained["root"]
    code, err = operator_partition(trained["spec"], tmp_path / "job", root)
    assert code == 0, err
    local = config_of(trained["run"] / "partition")
    assert config_of(tmp_path / "job")["graph_identity"] == local["graph_identity"]
    # what the Job's partition was made for is the training spec's, field by field, and not the other's
    job = load_config(tmp_path / "job")
    for spec, changed in ((trained["spec"], []), (trained["other"], ["graph.path (contents)"])):
        assert graph_changes(load_yaml(spec.read_text()), root, job) == changed
    inference = {"checkpoint": str(trained["run"] / "checkpoints")}
    for name, spec in (("other", trained["other"]), ("same", trained["spec"])):
        doc = yaml.safe_load(spec.read_text())
        doc["spec"].update(mode="inference", inference=inference)
        (root / f"infer-{name}.yaml").write_text(yaml.safe_dump(doc))
    code, err = operator_partition(root / "infer-other.yaml", tmp_path / "o" / "partition", root)
    assert code == 1 and "spec graph.path (contents): not what checkpoint" in err, err
    assert "2,000 nodes" in err  # the checkpoint's graph named by its digest and counts
    assert "Traceback" not in err and not (tmp_path / "o" / "partition").exists()
    code, err = operator_partition(root / "infer-same.yaml", tmp_path / "s" / "partition", root)
    assert code == 0 and (tmp_path / "s" / "partition").is_symlink(), err


def copied_run(trained: dict[str, Path], to: Path) -> Path:
    """The training's checkpoints and partition copied elsewhere, without partition.settings."""
    for part in ("checkpoints", "partition"):
        shutil.copytree(trained["run"] / part, to / part, symlinks=True)
    return to


def test_a_copied_run_refuses_another_graphs_spec(trained: dict[str, Path], tmp_path: Path) -> None:
    run = copied_run(trained, tmp_path / "copy")
    argv = ["infer", str(run / "checkpoints"), "--spec", str(trained["other"]), "--run-dir"]
    code, err = cli(*argv, str(tmp_path / "i"))
    assert code == 1 and "spec graph.path (contents): not what checkpoint" in err, err
    assert "2,000 nodes" in err, err
    assert not (tmp_path / "i" / "logs").exists()  # refused before any process started
    out = tmp_path / "p.csv"
    code, err = cli("predict", str(run / "checkpoints"), "-o", str(out), "--spec", str(trained["other"]))
    assert code == 1 and "spec graph.path (contents): not what checkpoint" in err and not out.exists(), err
    # the partition's made_for rewritten to the other graph's: the checkpoint's record is what counts
    config = next((run / "partition").glob("*.json"))
    doc = json.loads(config.read_text())
    other = json.loads(doc["made_for"])
    other["inputs"] = {"graph.path": hashlib.sha256((trained["root"] / "other.npz").read_bytes()).hexdigest()}
    config.write_text(json.dumps({**doc, "made_for": json.dumps(other)}))
    code, err = cli(*argv, str(tmp_path / "j"))
    assert code == 1 and "spec graph.path (contents): not what checkpoint" in err, err


def test_a_partition_of_another_graph_swapped_in_is_refused(trained: dict[str, Path], tmp_path: Path) -> None:
    """The other graph partitioned the Job's way has the training's node map (same structure, same
    settings): the node-map check passes, the identity refuses it, in its place, as a symlink, and by
    --partition."""
    root = trained["root"]
    code, err = operator_partition(trained["other"], tmp_path / "otherpart", root)
    assert code == 0, err
    mine = config_of(trained["run"] / "partition")
    theirs = config_of(tmp_path / "otherpart")
    assert theirs["files"]["node_map.npy"] == mine["files"]["node_map.npy"]
    assert theirs["graph_identity"]["digest"] != mine["graph_identity"]["digest"]
    run = copied_run(trained, tmp_path / "swapped")
    said = "but checkpoint {} was trained on graph {}".format(
        checkpoint_of(run).name, mine["graph_identity"]["digest"][:12]
    )
    out = tmp_path / "emb.npy"
    code, err = cli(
        "export", str(run / "checkpoints"), "-o", str(out), "--partition", str(tmp_path / "otherpart")
    )
    assert code == 1 and said in err and not out.exists(), err
    disguised = tmp_path / "disguised"  # under the training's config name, which the checkpoint names
    shutil.copytree(tmp_path / "otherpart", disguised)
    (disguised / "other.json").rename(disguised / "planted.json")
    for how in ("copied", "symlink"):
        shutil.rmtree(run / "partition", ignore_errors=True)
        (run / "partition").unlink(missing_ok=True)
        if how == "copied":
            shutil.copytree(disguised, run / "partition")
        else:
            (run / "partition").symlink_to(disguised)
        code, err = cli("export", str(run / "checkpoints"), "-o", str(out))
        assert code == 1 and said in err and "a partition of graph" in err and not out.exists(), (how, err)
        code, err = cli(
            "infer",
            str(run / "checkpoints"),
            "--spec",
            str(trained["spec"]),
            "--run-dir",
            str(tmp_path / how),
        )
        assert code == 1 and said in err and "Traceback" not in err, (how, err)


def test_a_checkpoint_from_before_identities_is_read_with_one_warning(
    trained: dict[str, Path], tmp_path: Path
) -> None:
    run = copied_run(trained, tmp_path / "old")
    top_path = checkpoint_of(run) / "checkpoint.json"
    top = json.loads(top_path.read_text())
    del top["partition"]["graph_identity"]
    top_path.write_text(json.dumps(top))
    code, err = cli("export", str(run / "checkpoints"), "-o", str(tmp_path / "emb.npy"))
    assert code == 0, err
    assert err.count("warning:") == 1 and "written before graph identities" in err, err


def ids_as_int32(run: Path) -> None:
    """The copied partition's id map stored as int32 (its sha256 in the config too), as a loader that
    stores them so would have written it: its legacy digest is then not the normalised one."""
    path = run / "partition" / "external_ids.npy"
    np.save(path, np.load(path).astype(np.int32))
    config = next((run / "partition").glob("*.json"))
    doc = json.loads(config.read_text())
    doc["files"]["external_ids.npy"] = hashlib.sha256(path.read_bytes()).hexdigest()
    config.write_text(json.dumps(doc))


@pytest.mark.parametrize("legacy", ["checkpoint", "partition", "both"])
def test_a_checkpoint_or_partition_carrying_the_legacy_digest_is_read_without_a_word(
    trained: dict[str, Path], tmp_path: Path, legacy: str
) -> None:
    """Written before the digest was normalised, of ids stored as int32: its digest is the legacy form
    (the id array's dtype and bytes), which the partition's files give again; the same ids' normalised
    digest (the int64 training's) matches too; another graph's partition is still refused."""
    from graphtrain.runtime.outputs import partition_forms

    run = copied_run(trained, tmp_path / "old")
    ids_as_int32(run)
    normalised, old = partition_forms(load_config(run / "partition"))
    assert normalised == config_of(run / "partition")["graph_identity"]["digest"] != old
    for where in ("top", "config") if legacy == "both" else ("top" if legacy == "checkpoint" else "config",):
        hand_edit(
            run, where, "graph_identity", {**config_of(run / "partition")["graph_identity"], "digest": old}
        )
    out = tmp_path / "emb.npy"
    code, err = cli("export", str(run / "checkpoints"), "-o", str(out))
    assert code == 0 and "warning" not in err, err
    if legacy == "checkpoint":
        code, err = operator_partition(trained["other"], tmp_path / "otherpart", trained["root"])
        assert code == 0, err
        argv = ["export", str(run / "checkpoints"), "-o", str(tmp_path / "x.npy"), "--partition"]
        code, err = cli(*argv, str(tmp_path / "otherpart"))
        assert code == 1 and f"was trained on graph {old[:12]}" in err, err


def damage(checkpoint: Path, how: str) -> str:
    """Damage `checkpoint` as `how` says; returns what the refusal names."""
    piece = next(p.parent for p in sorted(checkpoint.rglob("manifest.json")))
    data = piece / "data.npy"
    if how == "flipped byte":
        raw = bytearray(data.read_bytes())
        raw[-1] ^= 0xFF
        data.write_bytes(bytes(raw))
        return "does not match the recorded"
    if how == "truncated part":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
        return "does not match the recorded"
    manifest = json.loads((piece / "manifest.json").read_text())
    manifest["files"]["gone.npy"] = "0" * 64
    (piece / "manifest.json").write_text(json.dumps(manifest))
    return "gone.npy: missing"


@pytest.mark.parametrize("how", ["flipped byte", "truncated part", "missing file"])
def test_a_damaged_checkpoint_is_refused_before_any_process_starts(
    trained: dict[str, Path], tmp_path: Path, how: str
) -> None:
    run = copied_run(trained, tmp_path / "run")
    named = damage(checkpoint_of(run), how)
    code, err = cli(
        "infer", str(run / "checkpoints"), "--spec", str(trained["spec"]), "--run-dir", str(tmp_path / "i")
    )
    assert code == 1 and "does not check out" in err and named in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "i" / "logs").exists()  # no shard server, trainer or zygote started


def hand_edit(run: Path, where: str, key: str, value: object) -> None:
    """Set `key` of checkpoint.json's partition record ("top") or of the partition config ("config")."""
    path = (
        checkpoint_of(run) / "checkpoint.json" if where == "top" else next((run / "partition").glob("*.json"))
    )
    doc = json.loads(path.read_text())
    (doc["partition"] if where == "top" else doc)[key] = value
    path.write_text(json.dumps(doc))


HAND_EDITS = {  # a traceback (TypeError, RecursionError), or taken without a word, before
    "made_for's inputs a number": (
        "top",
        "made_for",
        '{"inputs": 5}',
        "partition.made_for is not a partition",
    ),
    "made_for nested deep": ("top", "made_for", "[" * 100_000, "partition.made_for is not a partition key"),
    "the config's made_for a number": ("config", "made_for", 5, "made_for is not a string"),
    "digest a number": ("top", "graph_identity", {"digest": 5}, "partition.graph_identity.digest is not"),
    "digest with a line break": ("top", "graph_identity", {"digest": "a\nb"}, "graph_identity.digest is not"),
    "the config's identity a string": ("config", "graph_identity", "x", "graph_identity is not a map"),
}


@pytest.mark.parametrize("what", sorted(HAND_EDITS))
def test_a_hand_edited_identity_or_made_for_is_one_line(
    trained: dict[str, Path], tmp_path: Path, what: str
) -> None:
    where, key, value, said = HAND_EDITS[what]
    run = copied_run(trained, tmp_path / "run")
    hand_edit(run, where, key, value)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, err = cli(
        "infer", str(run / "checkpoints"), "--spec", str(trained["spec"]), "--run-dir", str(tmp_path / "i")
    )
    assert code == 1 and said in err and len(err.strip().splitlines()) == 1, err
    out = tmp_path / "p.csv"
    code, err = cli("predict", str(run / "checkpoints"), "-o", str(out), "--spec", str(trained["spec"]))
    assert code == 1 and said in err and len(err.strip().splitlines()) == 1 and not out.exists(), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing stored changed


def test_a_fifo_in_the_partition_is_refused_before_any_process_starts(
    trained: dict[str, Path], tmp_path: Path
) -> None:
    """A trainer's np.load of it waited for a writer for good: `infer` hung (the checkpoint verified,
    the partition's files never looked at before the processes started)."""
    import os

    run = copied_run(trained, tmp_path / "run")
    (run / "partition" / "node_map.npy").unlink()
    os.mkfifo(run / "partition" / "node_map.npy")
    code, err = cli(
        "infer", str(run / "checkpoints"), "--spec", str(trained["spec"]), "--run-dir", str(tmp_path / "i")
    )
    assert code == 1 and "node_map.npy is missing or not a regular file" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "i" / "logs").exists(), err
