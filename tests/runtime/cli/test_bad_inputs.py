"""Bad input through the real command line: one line naming the field, file or value, exit code 1, never a
traceback; nothing already stored is lost or changed and no temporary file is left behind.

Each case writes its input under tmp_path and returns the command's arguments. The node counts that
could never fit in memory must be refused before anything is allocated, so every case is fast.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from graphtrain.cli.app import app

runner = CliRunner()
EXAMPLE = Path(__file__).parents[3] / "examples" / "nations-transe.yaml"


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], list[str]]  # writes the input under the directory, returns the arguments
    needle: str  # what the message must name


def infer_into(t: Path, run_dir: str) -> list[str]:
    """`graphtrain infer` of a stand-in checkpoint with WordNet's spec into `run_dir`."""
    return [
        "infer",
        text(t, "ck", "x"),
        "--spec",
        str(EXAMPLE.parent / "wordnet-sage.yaml"),
        "--run-dir",
        run_dir,
    ]


def text(tmp: Path, name: str, content: str | bytes) -> str:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def npz(tmp: Path, name: str = "g.npz", **arrays: object) -> str:
    path = tmp / name
    np.savez(path, **arrays)
    return str(path)


def zipped(tmp: Path, members: dict[str, bytes], name: str = "g.npz") -> str:
    with zipfile.ZipFile(tmp / name, "w") as z:
        for member, data in members.items():
            z.writestr(member, data)
    return str(tmp / name)


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def lying_npy(shape: tuple[int, ...]) -> bytes:
    """A .npy header promising `shape` int64 and no data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def deep_flow(levels: int = 5000) -> str:
    return "a: " + "[" * levels + "]" * levels + "\n"


def deep_block(levels: int = 1000) -> str:
    """Deep enough to overflow a recursive loader, small enough (~0.5 MB) to reach the depth check."""
    return "a:\n" + "".join(" " * i + "b:\n" for i in range(1, levels))


def node_files(tmp: Path, features: str, labels: str) -> list[str]:
    """`graphtrain validate` of a GraphSAGE spec over an edge list with these features and labels files."""
    text(tmp, "e.tsv", "0\t1\n1\t2\n2\t0\n")
    spec = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "files"},
        "spec": {
            "graph": {
                "path": "e.tsv",
                "features": text(tmp, "f.csv", features),
                "labels": text(tmp, "l.csv", labels),
            },
            "model": {"kind": "graphsage", "useFeatures": True},
            "training": {"epochs": 1, "fanouts": [2, 2]},
        },
    }
    return ["validate", text(tmp, "s.yaml", yaml.safe_dump(spec))]


def partition(tmp: Path, *args: str) -> list[str]:
    return ["partition", *args, "--out", str(tmp / "out")]


def edges(tmp: Path, content: str | bytes, *args: str, name: str = "e.tsv") -> list[str]:
    return partition(tmp, "--input", text(tmp, name, content), *args)


def int_edges(tmp: Path, content: str) -> list[str]:
    """An edge list read with integer ids (graph.nodeIds: integer), where a non-integer id is an error."""
    return edges(tmp, content, "--node-ids", "integer")


def npz_input(tmp: Path, **arrays: object) -> list[str]:
    return partition(tmp, "--input", npz(tmp, **arrays))


def zip_input(tmp: Path, members: dict[str, bytes]) -> list[str]:
    return partition(tmp, "--input", zipped(tmp, members))


def symlink_loop(tmp: Path) -> str:
    loop = tmp / "loop.tsv"
    loop.symlink_to(loop)
    return str(loop)


def other_files(tmp: Path) -> str:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("precious")
    return str(tmp / "mine")


def a_dir(tmp: Path, name: str) -> str:
    (tmp / name).mkdir()
    return str(tmp / name)


def a_fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo")


def example_with(tmp: Path, old: str, new: str) -> str:
    """The nations example, valid but for one changed line."""
    spec = EXAMPLE.read_text()
    assert old in spec
    return text(tmp, "s.yaml", spec.replace(old, new))


E = "0\t1\n1\t2\n"
SRC, DST = np.array([0]), np.array([1])
CASES = [
    # issue 14, finding 8: the tracebacks
    Case("validate-deep-flow-yaml", lambda t: ["validate", text(t, "s.yaml", deep_flow())], "nested deeper"),
    Case("validate-deep-block-yaml", lambda t: ["validate", text(t, "s.yaml", deep_block())], "line 65"),
    Case(
        "partition-spec-deep-yaml",
        lambda t: partition(t, "--spec", text(t, "s.yaml", deep_flow())),
        "nested deeper",
    ),
    Case("run-deep-yaml", lambda t: ["run", text(t, "s.yaml", deep_flow())], "nested deeper"),
    Case("validate-not-utf8", lambda t: ["validate", text(t, "s.yaml", b"kind: \xff\n")], "s.yaml:1: not"),
    Case(
        "partition-spec-not-utf8",
        lambda t: partition(t, "--spec", text(t, "s.yaml", b"kind: \xff\n")),
        "s.yaml:1: not UTF-8",
    ),
    Case("edge-list-not-utf8", lambda t: edges(t, b"0\t1\n\xff\t2\n"), "e.tsv:2: not UTF-8 text (byte 0xff)"),
    Case("num-nodes-1e13", lambda t: edges(t, E, "--num-nodes", "10000000000000"), "10,000,000,000,000"),
    Case(
        "num-nodes-1e13-memory-limit",
        lambda t: edges(t, E, "--num-nodes", "10000000000000", "--memory-limit", "1Gi"),
        "above the memory limit of 1.0 GiB",
    ),
    Case("num-nodes-2^63", lambda t: edges(t, E, "--num-nodes", str(2**63)), "9,223,372,036,854,775,808"),
    Case(
        "npz-num-nodes-array",
        lambda t: npz_input(t, src=SRC, dst=DST, num_nodes=np.array([2, 3])),
        "num_nodes must be one integer",
    ),
    Case(
        "npz-num-nodes-1e13",
        lambda t: npz_input(t, src=SRC, dst=DST, num_nodes=np.array(10**13)),
        "num_nodes=10,000,000,000,000",
    ),
    Case(
        "npz-num-nodes-float",
        lambda t: npz_input(t, src=SRC, dst=DST, num_nodes=np.array(2.5)),
        "num_nodes must be one integer",
    ),
    Case(
        "npz-id-1e13-without-num-nodes",
        lambda t: npz_input(t, src=SRC, dst=np.array([10**13])),
        "num_nodes=10,000,000,000,001",
    ),
    Case(
        "npz-string-indptr",
        lambda t: npz_input(t, indptr=np.array(["0", "x", "2"]), indices=np.array([1, 0])),
        "indptr must be a 1-D integer array",
    ),
    Case(
        "npz-uint64-above-2^63",
        lambda t: npz_input(t, src=np.array([0], np.uint64), dst=np.array([2**63 + 5], np.uint64)),
        "dst holds 9223372036854775813",
    ),
    Case(
        "npz-member-not-npy",
        lambda t: zip_input(t, {"src.npy": npy(np.array([0, 1])), "dst": b"hello"}),
        "member 'dst' is not a .npy array",
    ),
    Case(
        "npz-header-promises-7TiB",
        lambda t: zip_input(t, {"src.npy": lying_npy((10**12,)), "dst.npy": npy(np.array([1]))}),
        "src.npy declares shape (1000000000000,)",
    ),
    Case(
        "partition-out-under-a-file",
        lambda t: edges(t, E) + ["--out", text(t, "somefile", "x") + "/sub"],
        "--out ",
    ),
    # finding 9: a first line that is not a header is an error naming it (ids read as integers; auto
    # would read a file with such ids as string ids)
    Case("edge-list-float-line-1", lambda t: int_edges(t, "0.5\t1\n1\t2\n"), "e.tsv:1: '0.5' is not an"),
    Case("edge-list-hex-line-1", lambda t: int_edges(t, "0x10\t1\n1\t2\n"), "e.tsv:1: '0x10' is not an"),
    Case("edge-list-nan-line-1", lambda t: int_edges(t, "nan\t1\n1\t2\n"), "e.tsv:1: 'nan' is not an"),
    Case("edge-list-underscore-id", lambda t: int_edges(t, "1_000\t1\n1\t2\n"), "e.tsv:1: '1_000'"),
    Case("edge-list-arabic-digit", lambda t: int_edges(t, "\u0661\t1\n1\t2\n"), "e.tsv:1: '\u0661'"),
    Case("edge-list-negative-id-line", lambda t: edges(t, "src\tdst\n0\t1\n1\t-2\n"), "e.tsv:3: negative id"),
    Case(
        "csv-negative-type-line",
        lambda t: edges(t, "source,target,type\n0,1,0\n1,2,-1\n", name="e.csv"),
        "e.csv:3: negative edge type",
    ),
    # the same families, as an attacker would try them
    Case("input-is-a-directory", lambda t: partition(t, "--input", a_dir(t, "d.tsv")), "d.tsv: is a dir"),
    Case("input-symlink-loop", lambda t: partition(t, "--input", symlink_loop(t)), "Too many levels"),
    Case("input-name-is-markup", lambda t: partition(t, "--input", str(t / "a[/b].tsv")), "a[/b].tsv"),
    Case(
        "npz-nan-feature",
        lambda t: npz_input(t, src=SRC, dst=DST, feat=np.array([[1.0], [np.nan]])),
        "feat[1, 0] is nan",
    ),
    Case(
        "npz-string-feature",
        lambda t: npz_input(t, src=SRC, dst=DST, feat=np.array([["a"], ["b"]])),
        "feat must hold numbers",
    ),
    Case(
        "npz-etype-length",
        lambda t: npz_input(t, src=SRC, dst=DST, etype=np.array([1, 2])),
        "etype has 2 entries, edges 1",
    ),
    Case(
        "npz-negative-etype",
        lambda t: npz_input(t, src=SRC, dst=DST, etype=np.array([-3])),
        "etype holds a negative edge type -3",
    ),
    Case(
        "npz-float-mask",
        lambda t: npz_input(t, src=SRC, dst=DST, train_mask=np.array([0.5, 1.0])),
        "train_mask must be bool",
    ),
    Case(
        "npz-string-node-ids",
        lambda t: npz_input(t, src=SRC, dst=DST, node_ids=np.array(["a", "b"])),
        "node_ids must be a 1-D integer array",
    ),
    # a setting given as an option is named by the option (and the spec field it stands for)
    Case("parts-0", lambda t: edges(t, E, "-k", "0"), "--parts (partition.parts): Input should be greater"),
    Case("parts-huge", lambda t: edges(t, E, "-k", str(10**20)), "partition.parts"),
    Case("input-missing", lambda t: partition(t, "--input", str(t / "no.tsv")), "--input: "),
    # a file reader's refusal names the spec field that gave the file
    Case(
        "features-of-strings",
        lambda t: node_files(t, "id,x\n0,a\n1,b\n2,c\n", "id,label\n0,0\n1,1\n2,1\n"),
        "spec.graph.features: ",
    ),
    Case(
        "info-features-missing",
        lambda t: ["data", "info", text(t, "e.tsv", "0\t1\n1\t2\n"), "--features", str(t / "no.npy")],
        "--features: ",
    ),
    Case(
        "labels-bad-id",
        lambda t: node_files(t, "id,x\n0,1\n1,2\n2,3\n", "id,label\n0,0\nzz,1\n2,1\n"),
        "spec.graph.labels: ",
    ),
    Case("algorithm-typo", lambda t: edges(t, E, "--algorithm", "metsi"), "--algorithm (partition.algorithm"),
    Case("seed-2^70", lambda t: edges(t, E, "-k", "2", "--seed", str(2**70)), "seed must be between 0 and"),
    Case("memory-limit-1e400", lambda t: edges(t, E, "--memory-limit", "1e400"), "'1e400' is too large"),
    Case("memory-limit-millis", lambda t: edges(t, E, "--memory-limit", "500m"), "'500m' is not a memory"),
    Case(
        "validate-memory-limit-millis",
        lambda t: ["validate", example_with(t, "parts: 2\n", "parts: 2\n    memoryLimit: 500m\n")],
        "partition.memoryLimit",
    ),
    Case(
        "validate-request-above-limit",
        lambda t: [
            "validate",
            example_with(
                t,
                "replicas: 2\n",
                "replicas: 2\n    resources: {requests: {memory: 8Gi}, limits: {memory: 4Gi}}\n",
            ),
        ],
        "spec.trainers.resources.requests.memory: 8Gi is above spec.trainers.resources.limits.memory 4Gi",
    ),
    Case(
        "validate-dynamic-vocabulary-beyond-any-pod",
        lambda t: [
            "validate",
            example_with(
                t,
                "keys: nodes\n",
                "keys: nodes\n      vocabulary: {kind: dynamic, capacity: 1000000000000}\n",
            ),
        ],
        "spec.embeddings[0].vocabulary.capacity: dynamic vocabulary of entity needs at least 240.1Ti per "
        "shard server",
    ),
    Case(
        "report-file-under-a-file",
        lambda t: edges(t, E, "--report-file", text(t, "rf", "x") + "/r.json"),
        "r.json: cannot write the report",
    ),
    Case(
        "overwrite-a-directory-of-other-files",
        lambda t: edges(t, E)[:-2] + ["--out", other_files(t), "--overwrite"],
        "mine: holds no graphtrain partition",
    ),
    Case(
        "overwrite-a-regular-file",
        lambda t: edges(t, E)[:-2] + ["--out", text(t, "f", "x"), "--overwrite"],
        "f: exists and is not a directory",
    ),
    Case(
        "data-dir-is-a-file",
        lambda t: partition(t, "--dataset", "nations", "--data-dir", text(t, "f", "x")),
        "f is not a directory",
    ),
    Case(
        "data-list-data-dir-is-a-file",
        lambda t: ["data", "list", "--data-dir", text(t, "f", "x")],
        "f: not a directory",
    ),
    Case(
        "validate-data-dir-is-a-file",
        lambda t: ["validate", str(EXAMPLE), "--data-dir", text(t, "f", "x")],
        "f: not a directory",
    ),
    Case(
        "fetch-into-proc",
        lambda t: ["data", "fetch", "nations", "--data-dir", "/proc/graphtrain-x"],
        "--data-dir: /proc/graphtrain-x: cannot create the directory",
    ),
    Case(
        "run-dir-is-a-file",
        lambda t: ["run", str(EXAMPLE), "--run-dir", text(t, "f", "x")],
        "f: cannot be made a run directory (File exists)",
    ),
    Case(
        "run-dir-under-a-file",
        lambda t: ["run", str(EXAMPLE), "--run-dir", str(Path(text(t, "f", "x")) / "run")],
        "cannot be made a run directory (Not a directory)",
    ),
    Case(  # a launch deleted tensorboard/ and replaced metrics.csv there before any other check
        "run-dir-of-other-files",
        lambda t: ["run", str(EXAMPLE), "--run-dir", str(Path(text(t, "metrics.csv", "mine")).parent)],
        "holds files that are not a graphtrain run's (metrics.csv",
    ),
    Case(
        "infer-run-dir-of-other-files",
        lambda t: infer_into(t, str(Path(text(t, "n.txt", "mine")).parent)),
        "holds files that are not a graphtrain run's (",
    ),
    Case(
        "infer-run-dir-under-a-file",
        lambda t: infer_into(t, text(t, "f", "x") + "/r"),
        "f/r: cannot be made a run directory (Not a directory)",
    ),
    Case("inspect-not-utf8", lambda t: ["inspect", text(t, "p.json", b"\xff")], "p.json:1: not UTF-8"),
    Case(
        "plan-bandwidth-zero", lambda t: ["plan", str(EXAMPLE), "--bandwidth", "0gbit"], "--bandwidth '0gbit'"
    ),
    Case(
        "plan-memory-zero", lambda t: ["plan", str(EXAMPLE), "--memory", "0"], "--memory '0': not a positive"
    ),
    Case(
        "data-info-num-nodes-negative",
        lambda t: ["data", "info", text(t, "e.tsv", E), "--num-nodes", "-5"],
        "--num-nodes -5: not a node count",
    ),
    Case("plot-a-file", lambda t: ["plot", text(t, "f", "x")], "f: not a run directory"),
    Case(
        "run-dir-in-proc",
        lambda t: ["run", str(EXAMPLE), "--run-dir", "/proc/run"],
        "--run-dir /proc/run: cannot be made a run directory (the file system there makes no new files)",
    ),
    Case(
        "infer-run-dir-in-proc",
        lambda t: infer_into(t, "/proc/run"),
        "--run-dir /proc/run: cannot be made a run directory (the file system there makes no new files)",
    ),
    Case(
        "crd-to-proc",
        lambda t: ["crd", "-o", "/proc/x.yaml"],
        "--output /proc/x.yaml: cannot write a file in /proc",
    ),
    Case("crd-to-a-directory", lambda t: ["crd", "-o", a_dir(t, "adir")], "adir: is a directory"),
    Case("crd-under-a-file", lambda t: ["crd", "-o", text(t, "f", "x") + "/c.yaml"], "--output "),
    Case(
        "plot-to-proc",
        lambda t: ["plot", str(t), "-o", "/proc/x.png"],
        "--output /proc/x.png: cannot write a file",
    ),
    Case(
        "predict-to-proc",
        lambda t: [
            "predict",
            str(t / "ck"),
            "--spec",
            str(EXAMPLE.parent / "wordnet-sage.yaml"),
            "-o",
            "/proc/x.csv",
        ],
        "--out /proc/x.csv: cannot write a file in /proc",
    ),
    Case(
        "infer-data-dir-missing",
        lambda t: infer_into(t, str(t / "run")) + ["--data-dir", str(t / "nowhere")],
        "nowhere: no such directory",
    ),
    Case(
        "infer-data-dir-is-a-file",
        lambda t: infer_into(t, str(t / "run")) + ["--data-dir", text(t, "f", "x")],
        "f: not a directory",
    ),
    Case(
        "infer-out-to-proc",
        lambda t: infer_into(t, str(t / "run")) + ["--out", "/proc/inferred"],
        "--out /proc/inferred: cannot",
    ),
    Case(
        "partition-out-to-proc",
        lambda t: edges(t, E)[:-2] + ["--out", "/proc/p"],
        "--out /proc/p: cannot",
    ),
    Case(
        "inspect-deep-json",
        lambda t: ["inspect", text(t, "p.json", "[" * 100_000 + "]" * 100_000)],
        "nested too deeply",
    ),
]


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def check_one_line(result, needle: str) -> None:  # noqa: ANN001 - click's Result
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    message = result.output.rstrip("\n")
    assert message and "\n" not in message, f"not one line:\n{result.output}"
    assert needle in message, message


def test_a_run_directory_may_hold_the_spec_it_runs_and_nothing_else_foreign(tmp_path: Path) -> None:
    """A directory made for a run, its spec copied in, is not someone else's files; one more file is."""
    from graphtrain.runtime.launch.reuse import foreign_run_dir

    spec = Path(text(tmp_path, "spec.yaml", EXAMPLE.read_text()))
    assert foreign_run_dir(tmp_path, spec) is None
    assert foreign_run_dir(tmp_path / "new", spec) is None and foreign_run_dir(tmp_path / "spec.yaml") is None
    text(tmp_path, "notes.txt", "mine")
    assert "(notes.txt)" in (foreign_run_dir(tmp_path, spec) or "")
    (tmp_path / "launch.lock").write_text("")  # an earlier launch's
    assert foreign_run_dir(tmp_path, spec) is None


def check_nothing_lost(root: Path, before: dict[Path, bytes]) -> None:
    after = snapshot(root)
    changed = [str(p) for p, data in before.items() if after.get(p) != data]
    assert not changed, f"changed or gone: {changed}"
    left = [p.name for p in root.rglob("*") if ".tmp" in p.name or ".old-" in p.name]
    assert not left, f"left behind: {left}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_line(case: Case, tmp_path: Path) -> None:
    args = case.build(tmp_path)
    before = snapshot(tmp_path)
    result = runner.invoke(app, args)
    check_one_line(result, case.needle)
    check_nothing_lost(tmp_path, before)


def test_the_installed_command_prints_one_line(tmp_path: Path) -> None:
    """The same through a real process (its own stack depth, its own stderr)."""
    spec = text(tmp_path, "s.yaml", deep_flow())
    result = subprocess.run(
        [sys.executable, "-m", "graphtrain.runtime.cli", "validate", spec],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert "nested deeper than 64 levels" in result.stderr


def test_running_out_of_memory_gives_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a ulimit or a pod's limit (below the machine memory check_fits compares with), numpy's
    MemoryError for `--num-nodes 300000000` was a traceback."""
    from graphtrain.runtime.data import datasets

    def allocate(*_: object, **__: object) -> None:
        raise MemoryError(
            "Unable to allocate 2.24 GiB for an array with shape (300000000,) and data type int64"
        )

    monkeypatch.setattr(datasets, "load_source", allocate)
    result = runner.invoke(app, edges(tmp_path, E, "--num-nodes", "300000000"))
    check_one_line(result, "error: out of memory (Unable to allocate 2.24 GiB for an array")
    assert not (tmp_path / "out").exists()
