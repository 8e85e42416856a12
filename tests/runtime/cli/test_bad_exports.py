"""Bad export targets and damaged checkpoints through the real command line: one line naming the field,
file or value, exit code 1, never a traceback; a full disk keeps the old output (test_bad_inputs.py's
rules, for what reads a checkpoint)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphtrain.cli.app import app
from tests.runtime.cli.test_bad_inputs import (
    Case,
    E,
    a_dir,
    a_fifo,
    check_nothing_lost,
    check_one_line,
    edges,
    snapshot,
    text,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from graphtrain.runtime import kvstore
    from graphtrain.runtime import partition as partitioning
    from graphtrain.runtime.checkpoint import partition_record
    from graphtrain.runtime.data.graph import Graph
    from graphtrain.runtime.tensor import DistEmbedding

    root = tmp_path_factory.mktemp("ckpt")
    ring = np.arange(10, dtype=np.int64)
    g = Graph.from_edges("ring", 10, ring, (ring + 1) % 10)
    cfg = partitioning.load_config(
        partitioning.write(g, partitioning.partition_graph(g, 1), root / "partition")
    )
    client = kvstore.standalone(1, checkpoint_root=root)
    DistEmbedding(10, 3, "emb", client=client)
    client.checkpoint("ck", extra={"partition": partition_record(cfg, root / "ck")}, root=root)
    return root / "ck"


EXPORT_CASES = [
    Case("export-under-a-file", lambda t: ["-o", text(t, "somefile", "x") + "/t.npy"], "somefile"),
    Case("export-to-a-directory", lambda t: ["-o", a_dir(t, "adir")], "adir: is a directory"),
    Case("export-to-a-fifo", lambda t: ["-o", a_fifo(t)], "fifo: exists and is not a regular file"),
    Case(
        "export-to-proc", lambda t: ["-o", "/proc/x.csv"], "--out /proc/x.csv: cannot write a file in /proc ("
    ),
]


@pytest.mark.parametrize("case", EXPORT_CASES, ids=[c.id for c in EXPORT_CASES])
def test_bad_export_target_gives_one_line(case: Case, checkpoint: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    result = runner.invoke(app, ["export", str(checkpoint), "--name", "emb", *case.build(tmp_path)])
    check_one_line(result, case.needle)
    check_nothing_lost(tmp_path, before)


def test_export_into_the_checkpoints_directory_is_refused_and_changes_nothing(
    checkpoint: Path, tmp_path: Path
) -> None:
    """`-o` naming a file of the checkpoint it reads (its data.npy, say) replaced it atomically with exit
    0: the checkpoint then failed its sha256 and was lost to export, predict and --resume."""
    import shutil

    copy = tmp_path / "root"
    shutil.copytree(checkpoint.parent, copy)
    data = next((copy / checkpoint.name / "emb").glob("*/data.npy"))
    before = snapshot(copy)
    result = runner.invoke(app, ["export", str(copy / checkpoint.name), "--name", "emb", "-o", str(data)])
    check_one_line(result, f"a file of checkpoint {checkpoint.name}, which it would replace")
    check_nothing_lost(copy, before)


MALFORMED_TOPS = {
    "tensors-a-number": (lambda d: d.update(tensors=5), "tensors is not a map of tables"),
    "piece-a-number": (
        lambda d: d["tensors"]["emb"].__setitem__(0, 5),
        "tensors.emb is not a list of pieces",
    ),
    "partition-a-number": (lambda d: d.update(partition=5), "partition is not a map"),
    "partition-config-a-number": (lambda d: d["partition"].update(config=5), "partition.config is not a"),
    "partition-without-relative": (lambda d: d["partition"].pop("relative"), "partition.relative is not a"),
    "partition-empty": (lambda d: d.update(partition={}), "partition.config is not a string"),
    "partition-keys-a-list": (lambda d: d["partition"].update(table_keys=[1]), "partition.table_keys is not"),
    "piece-dir-up": (
        lambda d: d["tensors"]["emb"][0].update(dir="../../../etc"),
        "tensors.emb: piece dir '../../../etc' is outside the checkpoint",
    ),
    "piece-dir-absolute": (lambda d: d["tensors"]["emb"][0].update(dir="/etc"), "'/etc' is outside"),
    "model-a-list": (lambda d: d.update(trainer={"model": [1]}), "trainer.model is not a map"),
    "no-tables": (lambda d: d.update(tensors={}), "holds no table to export"),
}


@pytest.mark.parametrize("edit", sorted(MALFORMED_TOPS))
def test_a_checkpoint_json_of_the_wrong_shape_gives_one_line(
    edit: str, checkpoint: Path, tmp_path: Path
) -> None:
    """Valid JSON of the right format with a level of the wrong type (a hand edit: no hash covers the
    file) is refused naming it, not a TypeError where a reader indexes it."""
    import shutil

    from graphtrain.runtime.checkpoint import TOP

    copy = tmp_path / "ck"
    shutil.copytree(checkpoint, copy)
    top = json.loads((copy / TOP).read_text())
    change, said = MALFORMED_TOPS[edit]
    change(top)
    (copy / TOP).write_text(json.dumps(top))
    named = [] if edit == "no-tables" else ["--name", "emb"]
    result = runner.invoke(app, ["export", str(copy), *named, "-o", str(tmp_path / "t.npy")])
    check_one_line(result, said)


def full_disk_save(file, arr, *args, **kwargs) -> None:  # noqa: ANN001 - np.save's signature
    """np.save that writes a few bytes, then finds the disk full."""
    if isinstance(file, str | os.PathLike):
        with open(file, "wb") as f:
            f.write(b"\x93NUMPY")
    else:
        file.write(b"\x93NUMPY")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("command", ["export", "partition"])
def test_a_full_disk_gives_one_line_and_keeps_the_old_output(
    command: str, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if command == "export":
        target = tmp_path / "t.npy"
        target.write_bytes(b"the previous export")
        args = ["export", str(checkpoint), "--name", "emb", "-o", str(target)]
    else:
        target = tmp_path / "out"
        args = [*edges(tmp_path, E), "--overwrite"]
        assert runner.invoke(app, args).exit_code == 0  # the previous partition
    before = snapshot(tmp_path)
    monkeypatch.setattr(np, "save", full_disk_save)
    result = runner.invoke(app, args)
    check_one_line(result, f"{target.name}: cannot write (No space left on device)")
    check_nothing_lost(tmp_path, before)
