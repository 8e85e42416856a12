"""`graphtrain export`: rows always in the user's order (the checkpoint names its partition; a checkpoint
that does not needs --partition), LATEST/BEST marker files accepted, ids and labels in .csv/.parquet."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from graphtrain.cli.app import app
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore, outputs, partition
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph
from graphtrain.runtime.errors import DataError, GraphtrainError
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from tests.conftest import planted_graph

runner = CliRunner()
N = 300


def named_graph() -> Graph:
    g = planted_graph(n=N, k=3)
    return Graph.from_edges(
        "named", N, *g.edges(), label=g.label, node_ids=np.array([f"u{i:03d}" for i in range(N)])
    )


def write_checkpoint(run: Path, graph: Graph, record: bool = True, tag: str = "step-000000007") -> Path:
    """A run directory as `graphtrain run` leaves it: run/partition (2 parts), run/checkpoints/<tag> with a
    node table whose row of original node i holds i, and LATEST naming it."""
    cfg = partition.load_config(
        partition.write(graph, partition.partition_graph(graph, 2), run / "partition")
    )
    root = run / "checkpoints"
    client = kvstore.standalone(2, checkpoint_root=root)
    emb = DistEmbedding(
        N, 2, "node", book=PartitionBook(cfg.node_bounds), client=client, init={"kind": "zeros"}
    )
    node_map = partition.load_maps(cfg)["node_map"]  # new id -> original id
    emb.table[np.arange(N)] = np.repeat(node_map[:, None], 2, axis=1).astype(np.float32)
    extra = {"partition": ckpt.partition_record(cfg, root / tag)} if record else None
    client.checkpoint(tag, extra=extra, root=root)
    ckpt.mark_latest(root, tag)
    return root / tag


def ok(*args: str) -> str:
    """A `graphtrain` command that must succeed; its output."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def fails(args: list[str], needle: str) -> str:
    """A `graphtrain` command that must fail with one line (exit 1, no traceback) containing `needle`."""
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    message = result.output.strip()
    assert "\n" not in message and needle in message, message
    return message


def export(*args: str) -> str:
    return ok("export", *args)


def one_line_error(args: list[str], needle: str) -> str:
    return fails(["export", *args], needle)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    write_checkpoint(run, named_graph())
    return run


def test_export_without_partition_writes_original_order(run: Path, tmp_path: Path) -> None:
    """Item 4: the rows of a node table come out in original node order with no --partition."""
    out = tmp_path / "node.npy"
    said = export(str(run / "checkpoints" / "step-000000007"), "--name", "node", "-o", str(out))
    assert np.array_equal(np.load(out)[:, 0], np.arange(N, dtype=np.float32))
    assert "original node order" in said


@pytest.mark.parametrize("marker", ["checkpoints/LATEST", "checkpoints/BEST", "checkpoints"])
def test_export_takes_a_marker_file_or_the_checkpoints_directory(
    run: Path, tmp_path: Path, marker: str
) -> None:
    """Item 7: `export .../checkpoints/LATEST` (a text file naming the checkpoint) works, so do BEST and
    the checkpoints directory itself."""
    if marker.endswith("BEST"):
        (run / marker).write_text("step-000000007\n")
    out = tmp_path / "node.npy"
    export(str(run / marker), "--name", "node", "-o", str(out))
    assert np.array_equal(np.load(out)[:, 0], np.arange(N, dtype=np.float32))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_csv_and_parquet_carry_the_users_ids(run: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"node{suffix}"
    export(str(run / "checkpoints" / "LATEST"), "-o", str(out))
    table = pq.read_table(out) if suffix == ".parquet" else pcsv.read_csv(out)
    assert table.column_names == ["id", "dim_0", "dim_1"]
    assert table.column("id").to_pylist() == [f"u{i:03d}" for i in range(N)]
    assert table.column("dim_1").to_pylist() == [float(i) for i in range(N)]


def test_a_moved_run_directory_still_finds_its_partition(run: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(run, moved)
    out = tmp_path / "node.npy"
    with pytest.MonkeyPatch.context() as mp:  # the recorded absolute path is gone: the relative one serves
        mp.setattr(
            outputs,
            "_try_config",
            lambda p: None if str(p).startswith(str(run)) else partition.load_config(p),
        )
        export(str(moved / "checkpoints" / "LATEST"), "-o", str(out))
    assert np.array_equal(np.load(out)[:, 0], np.arange(N, dtype=np.float32))


def test_a_checkpoint_that_names_no_partition_needs_one(tmp_path: Path) -> None:
    """Item 4: never partition order in silence: a checkpoint without a record needs --partition."""
    ck = write_checkpoint(tmp_path / "run", named_graph(), record=False)
    out = tmp_path / "node.npy"
    one_line_error([str(ck), "--name", "node", "-o", str(out)], "pass --partition")
    assert not out.exists()
    export(str(ck), "-o", str(out), "--partition", str(tmp_path / "run" / "partition"))
    assert np.array_equal(np.load(out)[:, 0], np.arange(N, dtype=np.float32))


def test_another_partition_is_refused(run: Path, tmp_path: Path) -> None:
    g = named_graph()
    other = partition.write(g, partition.partition_graph(g, 3), tmp_path / "other")
    one_line_error(
        [str(run / "checkpoints" / "LATEST"), "-o", str(tmp_path / "x.npy"), "--partition", str(other)],
        "not the partition step-000000007 was trained on",
    )


def test_a_repartitioned_run_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_checkpoint(run, named_graph())
    g = named_graph()
    partition.write(g, partition.partition_graph(g, 3), run / "partition", overwrite=True)
    one_line_error([str(run / "checkpoints"), "-o", str(tmp_path / "x.npy")], "its node order differs")


def test_a_relation_table_comes_out_in_relation_order_with_its_labels(tmp_path: Path) -> None:
    names = np.array(["ann", "bob", "cy", "dee"])
    t = np.array([[0, 0, 1], [1, 1, 2], [2, 2, 3], [3, 0, 0]], dtype=np.int64)
    kg = KnowledgeGraph("fam", 4, 3, t[:2], t[2:3], t[3:], names, np.array(["a", "b", "c"]))
    g = kg.to_graph()
    cfg = partition.load_config(
        partition.write(g, partition.partition_graph(g, 2, algorithm="random"), tmp_path / "part")
    )
    root = tmp_path / "ck"
    client = kvstore.standalone(2, checkpoint_root=root)
    rel = DistEmbedding(
        3, 2, "relation", book=PartitionBook.even(3, 2), client=client, init={"kind": "zeros"}
    )
    rel.table[np.arange(3)] = np.arange(6, dtype=np.float32).reshape(3, 2)
    client.checkpoint(
        "s", extra={"partition": ckpt.partition_record(cfg, root / "s", {"relation": "relations"})}, root=root
    )
    out = tmp_path / "rel.csv"
    export(str(root / "s"), "-o", str(out))
    table = pcsv.read_csv(out)
    assert table.column("id").to_pylist() == ["a", "b", "c"]
    assert table.column("dim_1").to_pylist() == [1.0, 3.0, 5.0]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("step-000000099\n", "not a complete checkpoint"),
        ("../../etc\n", "outside"),
        ("", "not a checkpoint marker"),
        ("a\nb\n", "not a checkpoint marker"),
    ],
)
def test_a_bad_marker_is_one_line(run: Path, tmp_path: Path, content: str, needle: str) -> None:
    marker = run / "checkpoints" / "BROKEN"
    marker.write_text(content)
    try:
        one_line_error([str(marker), "-o", str(tmp_path / "x.npy")], needle)
    finally:
        marker.unlink()


def test_unknown_suffix_and_ambiguous_table_are_one_line(tmp_path: Path) -> None:
    one_line_error([str(tmp_path), "-o", str(tmp_path / "x.txt")], "unknown output format '.txt'")
    root = tmp_path / "ck"
    client = kvstore.standalone(1, checkpoint_root=root)
    DistEmbedding(5, 2, "a", client=client)
    DistEmbedding(5, 2, "b", client=client)
    client.checkpoint("s", root=root)
    said = one_line_error([str(root / "s"), "-o", str(tmp_path / "x.npy")], "pick one with --name")
    assert said == f"error: {root / 's'}: holds tables a, b: pick one with --name"


def test_a_table_the_checkpoint_lacks_is_named_with_those_it_holds(run: Path, tmp_path: Path) -> None:
    """--name of no table: the tables it could be, in the words of --help (a table, not a tensor)."""
    ck = run / "checkpoints" / "step-000000007"
    said = one_line_error([str(ck), "--name", "nod", "-o", str(tmp_path / "x.npy")], "no table")
    assert said == f"error: {ck}: no table named 'nod' (it holds: node)"


def test_pick_partition_and_keying_are_pure() -> None:
    ck = Path("/runs/r/checkpoints/step-1")
    record = {"node_map_sha256": "aa", "config": "/runs/r/partition/g.json"}
    assert outputs.pick_partition(ck, record, [(Path("x"), None), (Path("y"), "aa")]) == Path("y")
    with pytest.raises(GraphtrainError, match="is gone"):
        outputs.pick_partition(ck, record, [(Path("x"), None)])
    with pytest.raises(GraphtrainError, match="x: not the partition"):
        outputs.pick_partition(ck, record, [(Path("x"), "bb")])
    with pytest.raises(GraphtrainError, match="--partition"):
        outputs.pick_partition(ck, None, [])
    keys = {"rel": "relations", "ent": "nodes", "vocab": "custom", "word": "features"}
    assert outputs.table_keying("word", 10, 10, 10, keys) == "features"
    assert outputs.table_keying("rel", 10, 10, 10, keys) == "relations"
    assert outputs.table_keying("ent", 10, 10, 10, keys) == "nodes"
    assert outputs.table_keying("vocab", 10, 10, 10, keys) == "rows"
    assert outputs.table_keying("x", 3, 10, 3, {}) == "relations"
    assert outputs.table_keying("x", 10, 10, 3, {}) == "nodes"
    assert outputs.table_keying("x", 4, 10, None, {}) == "rows"


def test_resolve_checkpoint_refuses_what_is_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such checkpoint"):
        ckpt.resolve_checkpoint(tmp_path / "nope")
    with pytest.raises(DataError, match="no LATEST file"):
        ckpt.resolve_checkpoint(tmp_path)
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match="not a checkpoint marker"):
        ckpt.resolve_checkpoint(tmp_path / "bin")


def test_a_marker_is_read_at_most_its_limit_plus_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A huge BEST is refused after reading 4 KiB + 1 bytes, not after reading it whole."""
    marker = tmp_path / "BEST"
    with open(marker, "wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB of zeros on no disk
    asked: list[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    def whole(self: Path) -> bytes:
        raise AssertionError(f"{self} read whole")

    monkeypatch.setattr(os, "read", read)
    monkeypatch.setattr(Path, "read_bytes", whole)
    monkeypatch.setattr(Path, "read_text", whole)
    with pytest.raises(DataError, match="BEST: not a checkpoint marker"):
        ckpt.resolve_checkpoint(marker)
    assert asked == [ckpt.MARKER_MAX_BYTES + 1]


def test_a_fifo_or_directory_marker_says_what_it_is(run: Path, tmp_path: Path) -> None:
    """Opened without blocking (no writer needed), and named for what it is, not "no such checkpoint"."""
    marker = run / "checkpoints" / "FIFO"
    os.mkfifo(marker)
    try:
        one_line_error(
            [str(marker), "-o", str(tmp_path / "x.npy")], "FIFO: is a FIFO, not a checkpoint marker"
        )
    finally:
        marker.unlink()
    root = tmp_path / "fifo-root"  # a checkpoint root whose LATEST is a FIFO: --resume waited on it
    root.mkdir()
    os.mkfifo(root / ckpt.LATEST)
    with pytest.raises(DataError, match="LATEST: is a FIFO, not a checkpoint marker"):
        ckpt.resolve_latest(root)
    (root / ckpt.LATEST).unlink()
    (root / ckpt.LATEST).mkdir()
    with pytest.raises(DataError, match="LATEST: is a directory, not a checkpoint marker"):
        ckpt.resolve_latest(root)


def test_a_npy_of_a_dynamic_table_holding_some_keys_is_refused(tmp_path: Path) -> None:
    """A .npy has no id column: the rows of only the keys a dynamic vocabulary holds would be nameless."""
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.outputs import Rows, write_rows

    rows = Rows("entity", "nodes", np.array([3, 9]), np.zeros((2, 4), np.float32), some=True)
    with pytest.raises(GraphtrainError, match="holds rows for 2 of its keys only, which a .npy cannot name"):
        write_rows(tmp_path / "e.npy", rows)
    write_rows(tmp_path / "e.csv", rows)  # an id column names them
    assert (tmp_path / "e.csv").read_text().splitlines()[1].startswith("3,")
