"""Where `graphtrain infer` writes: a staging directory it did not make is refused, never deleted, and a
symlink planted at the output path is refused rather than followed (its target replaced)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.train.inference_output import (
    KIND,
    MANIFEST,
    check_output,
    check_outside,
    clear_staging,
    output_path,
    publish,
    staging_of,
)


def earlier_output(d: Path) -> Path:
    d.mkdir()
    (d / MANIFEST).write_text(json.dumps({"kind": KIND, "parts": ["part-00000.parquet"]}))
    (d / "part-00000.parquet").write_bytes(b"x")
    return d


def test_a_users_directory_at_the_staging_path_is_refused_not_deleted(tmp_path: Path) -> None:
    staging = staging_of(tmp_path / "res")
    staging.mkdir()
    (staging / "notes.txt").write_text("mine")
    with pytest.raises(GraphtrainError, match="notes.txt"):
        clear_staging(staging)
    assert (staging / "notes.txt").read_text() == "mine"


def test_a_symlink_at_the_staging_path_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    staging = staging_of(tmp_path / "res")
    staging.symlink_to(victim)
    with pytest.raises(GraphtrainError, match="not an inference's staging"):
        clear_staging(staging)
    assert staging.is_symlink() and victim.is_dir()


def test_a_failed_inferences_staging_is_cleared(tmp_path: Path) -> None:
    staging = staging_of(tmp_path / "res")
    staging.mkdir()
    (staging / "part-00001.parquet").write_bytes(b"x")
    (staging / "edges-part-00000.parquet").write_bytes(b"x")
    clear_staging(staging)
    assert not staging.exists()


def test_a_symlink_at_the_output_path_is_not_followed(tmp_path: Path) -> None:
    target = earlier_output(tmp_path / "someone-elses")
    link = tmp_path / "out"
    link.symlink_to(target)
    out = output_path(link)
    assert out == tmp_path.resolve() / "out"
    with pytest.raises(GraphtrainError, match="not an earlier inference's output"):
        check_output(out)
    check_output(output_path(target))  # the earlier output itself may be replaced


class _Client:
    def __init__(self, restored: list[str]):
        self.restored = restored

    def restore(self, name: str) -> list[str]:
        return self.restored


@pytest.mark.parametrize(
    ("restored", "missing"), [(["entity", "relation"], None), (["relation"], "'entity'")]
)
def test_a_checkpoint_without_a_server_tables_rows_is_refused(
    tmp_path: Path, restored: list[str], missing: str | None
) -> None:
    """Restoring a checkpoint that holds no rows of a shard-server table left it at its initial values,
    and predict and infer answered from those (a hand-edited checkpoint.json listing no pieces)."""
    from types import SimpleNamespace

    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.train.dist import Dist
    from graphtrain.runtime.train.inference import restore

    spec = load_yaml((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text()).spec
    task = SimpleNamespace(spec=spec, load_state=lambda d: None, collective_tables=[])
    graph = SimpleNamespace(client=_Client(restored))
    if missing is None:
        restore(task, graph, Dist(), tmp_path / "step-1")
        return
    with pytest.raises(GraphtrainError, match=f"checkpoint step-1 holds no rows of table {missing}"):
        restore(task, graph, Dist(), tmp_path / "step-1")


def test_a_second_inference_into_the_same_output_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    """Two inferences from different run directories into one output: the second's rank 0 would clear
    the first's staging directory while its trainers write there. The output's lock refuses it."""
    from graphtrain.runtime.train.inference_output import lock_output

    out = tmp_path / "deep" / "res"
    first = lock_output(out)
    try:
        with pytest.raises(GraphtrainError, match="another inference is writing"):
            lock_output(out)
    finally:
        os.close(first)
    os.close(lock_output(out))  # released with its descriptor
    (tmp_path / "deep" / ".other.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(GraphtrainError, match="cannot open"):
        lock_output(tmp_path / "deep" / "other")
    assert not (tmp_path / "elsewhere").exists()


def test_the_launchers_check_of_the_staging_path_removes_nothing(tmp_path: Path) -> None:
    """The launcher checks before any process starts, without the lock: the staging directory there
    may be a running inference's, so only rank 0 (holding the lock) clears it."""
    staging = staging_of(tmp_path / "res")
    staging.mkdir()
    (staging / "part-00000.parquet").write_bytes(b"x")
    clear_staging(staging, remove=False)
    assert (staging / "part-00000.parquet").exists()


def test_the_partition_job_names_the_field_of_a_missing_checkpoint(tmp_path: Path) -> None:
    """In a pod the path is the volume's (/var/lib/graphtrain/...), not what the user wrote: the
    operator's partition Job of mode inference says which field and value it came from."""
    import yaml

    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.errors import DataError
    from graphtrain.runtime.launch.inference import link_partition

    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "wordnet-sage.yaml").read_text())
    doc["spec"].update(mode="inference", inference={"checkpoint": "runs/nope/checkpoints"})
    gt = load_yaml(yaml.safe_dump(doc))
    with pytest.raises(
        DataError, match=r"^spec.inference.checkpoint 'runs/nope/checkpoints': .*no such checkpoint"
    ):
        link_partition(gt, tmp_path, tmp_path / "w" / "partition", overwrite=False)


@pytest.mark.parametrize("name", ["notes", "part-00001.parquet", "../escape", 7])
def test_a_manifest_claims_only_part_files(tmp_path: Path, name: object) -> None:
    """The whole output is replaced: a manifest (hand-written, copied) listing a user's directory or a
    name not of a part's pattern made check_output pass and the user's files go with the output."""
    out = earlier_output(tmp_path / "res")
    (out / MANIFEST).write_text(json.dumps({"kind": KIND, "parts": ["part-00000.parquet", name]}))
    if name == "notes":
        (out / "notes").write_text("mine")
    else:
        (out / "part-00001.parquet").mkdir()  # a directory at a part's name is not a part
        (out / "part-00001.parquet" / "mine.txt").write_text("mine")
    with pytest.raises(GraphtrainError, match="holds files an inference did not write"):
        check_output(out)


@pytest.mark.parametrize("where", ["checkpoints", "checkpoints/res", "checkpoints/step-000000009/res"])
def test_an_output_inside_the_checkpoints_directory_is_refused(tmp_path: Path, where: str) -> None:
    """`--out runs/x/checkpoints/res` succeeded, and a resumed training's retention (prune) deletes
    every entry sorting before LATEST there: the inference's output with it."""
    checkpoint = tmp_path / "checkpoints" / "step-000000009"
    checkpoint.mkdir(parents=True)
    with pytest.raises(GraphtrainError, match="inside the checkpoints directory"):
        check_outside(output_path(tmp_path / where), checkpoint)
    check_outside(output_path(tmp_path / "res"), checkpoint)  # beside it is fine


def test_every_trainer_infers_from_the_checkpoint_rank_0_resolved(tmp_path: Path) -> None:
    """A training still writing the checkpoints directory moves LATEST while the inference's trainers
    start: each resolved it alone, and one could load step-2's dense model beside step-1's tables."""
    from graphtrain.runtime.checkpoint import LATEST, TOP
    from graphtrain.runtime.train.inference import agreed_checkpoint

    for step in ("step-1", "step-2"):
        (tmp_path / step).mkdir()
        (tmp_path / step / TOP).write_text("{}")
    (tmp_path / LATEST).write_text("step-2\n")  # moved on since rank 0 read step-1

    class Rank1:
        def broadcast_text(self, text: str) -> str:
            assert text == "step-2"
            return "step-1"  # rank 0's

    assert agreed_checkpoint(tmp_path / LATEST, Rank1()) == (tmp_path / "step-1").resolve()  # type: ignore[arg-type]


def test_an_output_under_a_file_is_refused_by_the_check(tmp_path: Path) -> None:
    """`--out afile/sub` started every process, then a trainer failed with "FileExistsError: [Errno 17]
    File exists": the launcher's check names the output and the file in the way."""
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(
        GraphtrainError, match=r"inference.output .*afile/sub: .*afile: exists and is not a directory"
    ):
        check_output(output_path(tmp_path / "afile" / "sub"))
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.timeout(30)
def test_a_fifo_at_an_earlier_outputs_manifest_is_refused_not_waited_on(tmp_path: Path) -> None:
    """`--out fo` where fo/manifest.json was a FIFO: the launcher's check waited forever for a writer."""
    out = tmp_path / "fo"
    out.mkdir()
    os.mkfifo(out / MANIFEST)
    with pytest.raises(GraphtrainError, match="not an earlier inference's output"):
        check_output(output_path(out))


def _output(d: Path, text: str) -> Path:
    d.mkdir()
    (d / MANIFEST).write_text(json.dumps({"kind": KIND, "parts": ["part-00000.parquet"]}))
    (d / "part-00000.parquet").write_text(text)
    return d


@pytest.mark.parametrize("swaps", [True, False])
def test_publishing_replaces_an_earlier_output_whole(
    tmp_path: Path, swaps: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphtrain.runtime.train import inference_output

    out = _output(tmp_path / "res", "earlier")
    staging = _output(staging_of(out), "new")
    if not swaps:  # a file system without renameat2's exchange: delete, then rename
        monkeypatch.setattr(inference_output, "exchange", lambda a, b: False)
    publish(staging, out)
    assert (out / "part-00000.parquet").read_text() == "new" and not staging.exists()


def test_a_kill_while_publishing_leaves_an_output_and_a_staging_the_next_run_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The earlier output was deleted before the new one was renamed into place: killed in between, no
    output was left at all. Swapped in one step, the output is whole at every moment."""
    from graphtrain.runtime.train import inference_output

    if not inference_output.exchange(tmp_path, tmp_path):  # this file system has no atomic swap
        pytest.fail("renameat2 RENAME_EXCHANGE unavailable on the test's file system")
    out = _output(tmp_path / "res", "earlier")
    staging = _output(staging_of(out), "new")

    def killed(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(inference_output.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        publish(staging, out)
    monkeypatch.undo()
    assert (out / "part-00000.parquet").read_text() == "new"
    assert (staging / "part-00000.parquet").read_text() == "earlier"
    clear_staging(staging)  # the next inference's first step
    assert not staging.exists()
