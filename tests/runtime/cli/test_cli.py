"""The command line: exit codes, messages without tracebacks, and the partition command end to end."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from graphtrain.cli.app import app
from graphtrain.contract.crd import crd_yaml
from graphtrain.runtime import partition
from tests import forked
from tests.contract.spec_cases import FIELD_BREAKS, LIFECYCLE_FIELDS

runner = CliRunner()


def write_edges(tmp_path: Path, n: int = 400) -> Path:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, n, 2000), rng.integers(0, n, 2000)
    path = tmp_path / "edges.tsv"
    path.write_text("src\tdst\n" + "".join(f"{a}\t{b}\n" for a, b in zip(src, dst, strict=True)))
    return path


def test_help_on_every_command() -> None:
    for cmd in (
        [],
        ["data"],
        ["data", "fetch"],
        ["data", "list"],
        ["data", "info"],
        ["partition"],
        ["validate"],
        ["crd"],
        ["inspect"],
        ["run"],
        ["train"],
        ["health"],
        ["shard-server"],
        ["operator"],
    ):
        result = runner.invoke(app, [*cmd, "--help"])
        assert result.exit_code == 0, cmd
        assert "Usage" in result.output


def test_the_command_lists_join_a_docstrings_wrapped_lines() -> None:
    """typer's rich command list kept the docstrings' line breaks, cutting sentences mid-way."""
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert out.returncode == 0 and "the strategy in words, and the graph it holds (directedness" in out.stdout
    data = runner.invoke(app, ["data", "--help"], env={"COLUMNS": "300"})
    lines = [line for line in data.output.splitlines() if line.startswith("│ ")]
    assert lines and all(line.split("│")[1].strip() for line in lines), data.output  # no continuation lines


def test_a_commands_help_joins_its_docstrings_wrapped_lines() -> None:
    """typer 0.29 keeps the line breaks of a docstring's later paragraphs: `infer --help` cut "and
    each layer runs" from "over every node" at every width but the source's."""
    wide = runner.invoke(app, ["infer", "--help"], env={"COLUMNS": "300"})
    assert wide.exit_code == 0 and "and each layer runs over every node with every neighbour" in wide.output
    narrow = runner.invoke(app, ["validate", "--help"], env={"COLUMNS": "60"})
    body = [line.strip() for line in narrow.output.splitlines() if line.strip() and "│" not in line]
    assert body and max(len(line) for line in body) <= 60, narrow.output  # rewrapped to the width
    assert "checked against what the model needs" in " ".join(body), narrow.output


def test_version_is_the_packages() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    expected = f"graphtrain {pyproject['project']['version']}\n"
    # the console script (the images run it so) and the in-process command print the same line
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, expected, "")
    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, expected)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["predict", "ck", "-k", "0"],
            " predict: Invalid value for '-k' / '--top': Input should be ",
        ),
        (["run", "--bogus"], " run: No such option: --bogus"),
        (["run"], " run: Missing argument 'spec_path'."),
        (["nosuch"], "cli: No such command 'nosuch'."),
        (["plan", "x.yaml", "--hosts", "9223372036854775808"], " plan: Invalid value for '--hosts'"),
        (["shard-server", "--fast-port", "99999"], " shard-server: Invalid value for '--fast-port'"),
        (["shard-server", "--stall-seconds", "inf"], " shard-server: Invalid value for '--stall-seconds'"),
        (["train", "--spec", "x", "--threads", "9" * 30], " train: Invalid value for '--threads'"),
        (["health", "--timeout", "nan", "tcp://127.0.0.1:1"], " health: Invalid value for '--timeout'"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_code_1(argv: list[str], line: str) -> None:
    """The console command says what is wrong in one line, as for any other bad input (click's boxed
    usage and its exit code 2 are only CliRunner's)."""
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert line in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_the_bare_command_prints_its_help() -> None:
    out = subprocess.run([sys.executable, "-m", "graphtrain.cli"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Usage" in out.stdout and out.stderr == ""


@pytest.mark.parametrize(
    ("module", "command", "extra"),
    [
        ("prometheus_client", "operator", "operator"),  # the operator's first import: not the runtime's
        ("kubernetes", "operator", "operator"),
        ("fastapi", "api", "api"),
        ("prometheus_client", "shard-server", "runtime"),
        ("numpy", "run", "runtime"),
    ],
)
def test_a_missing_dependency_names_the_extra_of_the_command(module: str, command: str, extra: str) -> None:
    from graphtrain.cli.app import missing_extra

    said = missing_extra(ModuleNotFoundError(name=module), command)
    assert (
        said
        == f"error: this command needs {module}, which is not installed: pip install 'graphtrain[{extra}]'"
    )


def test_version_without_package_metadata_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 1
    assert result.output == "error: graphtrain's package metadata is not installed: pip install -e .\n"


def test_a_closed_or_abandoned_standard_output_is_one_line_not_a_traceback() -> None:
    cmd = [sys.executable, "-m", "graphtrain.cli", "crd"]
    closed = subprocess.run(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )  # `graphtrain crd >&-`
    assert closed.returncode == 1
    assert closed.stderr == "error: standard output is closed; graphtrain writes its output there\n"
    reader = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # `| head -c 0`: the reader is gone before anything is written
    assert reader.wait(timeout=60) == 1
    assert "Traceback" not in reader.stderr.read()


def test_crd_command_prints_the_generated_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0 and result.output == crd_yaml()


@pytest.mark.parametrize("case", sorted(LIFECYCLE_FIELDS))
def test_validate_names_a_bad_lifecycle_field(tmp_path: Path, case: str) -> None:
    """runPolicy.cleanPodPolicy, ttlSecondsAfterFinished, startTimeoutSeconds, stallPolicy,
    storage.whenDeleted, suspend: a wrong value is one problem naming its field, exit 1."""
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(FIELD_BREAKS[case][0]))
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1, result.output
    assert f"bad.yaml: {LIFECYCLE_FIELDS[case]}: " in result.output


def test_validate_reports_every_problem(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "graphtrain.io/v1alpha1",
                "kind": "GraphTraining",
                "metadata": {"name": "x"},
                "spec": {"graph": {"dataset": "cora"}, "training": {"epochs": 0}},
            }
        )
    )
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 1
    assert "2 problem(s)" in result.output
    assert "spec.graph.dataset" in result.output and "spec.training.epochs" in result.output
    assert "Traceback" not in result.output
    missing = runner.invoke(app, ["validate", str(tmp_path / "missing.yaml")])
    assert missing.exit_code == 1 and "No such file" in missing.output


def test_partition_an_edge_list(tmp_path: Path) -> None:
    edges = write_edges(tmp_path)
    result = runner.invoke(
        app,
        [
            "partition",
            "--input",
            str(edges),
            "-k",
            "3",
            "--balance",
            "nodes,degree",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "edge cut" in result.output
    cfg = partition.load_config(tmp_path / "out")
    assert cfg.num_parts == 3 and cfg.data["balance"] == ["nodes", "degree"]
    inspected = runner.invoke(app, ["inspect", str(tmp_path / "out")])
    assert inspected.exit_code == 0 and "files verified" in inspected.output


def test_partition_errors_name_the_problem(tmp_path: Path) -> None:
    edges = write_edges(tmp_path, n=50)
    cases = [
        (["--input", str(edges), "-k", "0"], "partition.parts"),
        (["--input", str(edges), "-k", "2", "--balance", "nodes,colour"], "partition.balance[1]"),
        (["--input", str(tmp_path / "none.tsv"), "-k", "2"], "file not found"),
        (["--input", str(edges), "-k", "51"], "between 1 and the node count 50"),
        (["--input", str(edges), "-k", "2", "--memory-limit", "1Ki"], "above the memory limit"),
        (["-k", "2"], "exactly one of graph.dataset, graph.path, graph.triples and graph.nodes"),
    ]
    for args, needle in cases:
        result = runner.invoke(app, ["partition", *args, "--out", str(tmp_path / "o")])
        assert result.exit_code == 1, (args, result.output)
        assert needle in " ".join(result.output.split()), (args, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_partition_refuses_to_overwrite(tmp_path: Path) -> None:
    edges = write_edges(tmp_path)
    args = ["partition", "--input", str(edges), "-k", "2", "--out", str(tmp_path / "o")]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 1 and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_data_commands_on_an_empty_cache(data_root: Path) -> None:
    listed = runner.invoke(app, ["data", "list"])
    assert listed.exit_code == 0 and "gene-pubmed" in listed.output
    info = runner.invoke(app, ["data", "info", "wordnet"])
    assert info.exit_code == 1 and "graphtrain data fetch wordnet" in info.output
    bad = runner.invoke(app, ["data", "fetch", "cora"])
    assert bad.exit_code == 1 and "unknown dataset 'cora'" in bad.output


def test_partition_report_file_is_a_partition_status(tmp_path: Path) -> None:
    """What the partition Job leaves in its termination message for the operator (< 4 KiB)."""
    from graphtrain.contract.spec import PartitionStatus

    report = tmp_path / "termination-log"
    args = ["partition", "--input", str(write_edges(tmp_path)), "-k", "2", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, "--report-file", str(report)])
    assert result.exit_code == 0, result.output
    text = report.read_text()
    status = PartitionStatus.model_validate_json(text)
    assert status.parts == 2 and status.num_nodes == 400 and len(text) < 4096


def test_hostname_ordinal() -> None:
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.roles.shard_server import hostname_ordinal

    assert hostname_ordinal("wn-shards-12") == 12
    for bad in ("wn-shards", "shards-x", "7"):
        with pytest.raises(GraphtrainError, match="ordinal"):
            hostname_ordinal(bad)


def test_the_operator_without_credentials_says_so_once_and_exits(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG=str(tmp_path / "missing"), HOME=str(tmp_path))
    cmd = [sys.executable, "-m", "graphtrain.cli", "operator"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: no Kubernetes credentials (kubeconfig): Invalid kube-config file. No configuration found."
    ]


def test_an_option_missing_its_value_names_its_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", "crd", "-o"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert out.stderr == "graphtrain crd: Option '-o' requires an argument. (see graphtrain crd --help)\n"


def test_health_of_an_address_that_is_no_endpoint_names_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    out = subprocess.run(
        [sys.executable, "-m", "graphtrain.cli", "health", "--token-file", str(token), "bogus-address"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("error: shard-server address 'bogus-address': Invalid argument")
    assert out.stderr.count("\n") == 1


def test_a_bind_port_past_65535_is_refused_not_wrapped_round() -> None:
    result = runner.invoke(app, ["shard-server", "--bind", "tcp://127.0.0.1:99999"])
    assert result.exit_code == 1 and "--bind tcp://127.0.0.1:99999: port 99999 is past 65535" in result.output


def _shard_server(*args: str) -> subprocess.CompletedProcess[str]:
    """`graphtrain shard-server *args` as its own process, forked with torch imported (tests/forked.py):
    these refuse before serving, in a fraction of the import's ~2.5 s of CPU."""
    env = {"GRAPHTRAIN_TOKEN": "x" * 32}
    return forked.complete_cli("graphtrain.cli", ["shard-server", *args], env=env, timeout=60)


@pytest.mark.parametrize(
    ("bind", "says"),
    [
        ("foo", "--bind foo: cannot listen there (Invalid argument"),
        ("ipc:///nonexistent/dir/s", "--bind ipc:///nonexistent/dir/s: cannot listen there (No such file"),
        ("tcp://999.0.0.1:0", "--bind tcp://999.0.0.1:0: cannot listen there ("),
    ],
)
def test_a_bind_address_the_server_cannot_listen_on_is_one_line(bind: str, says: str) -> None:
    out = _shard_server("--bind", bind)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"error: {says}") and out.stderr.count("\n") == 1, out.stderr


def test_a_taken_port_is_one_line_naming_it() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _shard_server("--bind", f"tcp://127.0.0.1:{port}")
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"error: --bind tcp://127.0.0.1:{port}: cannot listen there (Address")
        out = _shard_server("--bind", "tcp://127.0.0.1:0", "--metrics-port", str(port))
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"error: metrics endpoint 127.0.0.1:{port}: ")
        assert "address already in use" in out.stderr.lower()
        assert out.stderr.count("\n") == 1 and "ready" not in out.stdout, (out.stdout, out.stderr)


def test_validate_names_a_missing_spec_once() -> None:
    result = runner.invoke(app, ["validate", "/nonexistent/spec.yaml"])
    assert result.exit_code == 1
    assert result.output.count("/nonexistent/spec.yaml") == 1


def test_a_ctrl_c_while_the_command_imports_is_one_line() -> None:
    """Ctrl-C in the first half second (typer, pydantic and the roles' commands importing) was a
    KeyboardInterrupt traceback: the console script's entry point now catches it. The interrupt is
    raised deterministically, by a finder that meets the command's module."""
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'graphtrain.cli.app':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['graphtrain', 'run', 'spec.yaml']\n"
        "from graphtrain.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert out.stderr.strip() == "Aborted!", out.stderr


def test_a_shard_server_stopped_before_it_serves_ends_at_once(tmp_path: Path) -> None:
    """SIGTERM while a server loads (here: waiting on its token file, a FIFO nobody writes) ended it only
    by the default action, and as a container's PID 1 (no handler: the kernel drops the signal) not at
    all until the grace period's SIGKILL. It ends at once, with 143 and a line."""
    import signal
    import time

    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "graphtrain.cli", "shard-server", "--bind", "tcp://127.0.0.1:0"]
    proc = subprocess.Popen([*argv, "--token-file", str(fifo)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        wchan = Path(f"/proc/{proc.pid}/wchan")
        while wchan.read_text() != "wait_for_partner" and time.monotonic() < deadline:
            time.sleep(0.05)  # until it waits in the FIFO's open (its handlers are in place by then)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err == "[shard-server] SIGTERM before it served: stopping now\n", err


def test_data_info_help_names_every_node_file_type_it_reads() -> None:
    """It named .csv alone for features and left .tsv out of both, which the readers take."""
    result = runner.invoke(app, ["data", "info", "--help"], env={"COLUMNS": "300"})
    lines = {
        w: next(line for line in result.output.splitlines() if f"--{w} " in line)
        for w in ("features", "labels")
    }
    for suffix in (".npy", ".npz", ".csv", ".tsv", ".parquet"):
        assert suffix in lines["features"], (suffix, lines)
    for suffix in (".npy", ".csv", ".tsv", ".parquet"):
        assert suffix in lines["labels"], (suffix, lines)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["health", "tcp://127.0.0.1:1", "--timeout", "nan"], "'--timeout': nan is not a finite number"),
        (["health", "tcp://127.0.0.1:1", "--timeout", "-inf"], "'--timeout': -inf is not a finite number"),
        (
            ["health", "tcp://127.0.0.1:1", "--timeout", "5000"],
            "'--timeout': 5000 is not between 0.001 and 3600",
        ),
        (["health", "tcp://127.0.0.1:1", "--timeout", "0"], "'--timeout': 0 is not between 0.001 and 3600"),
        (["shard-server", "--stall-seconds", "nan"], "'--stall-seconds': nan is not a finite number"),
        (["shard-server", "--stall-seconds", "a"], "'--stall-seconds': a is not a number"),
    ],
)
def test_a_seconds_option_names_a_nan_as_such_in_one_line(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN compares with no bound, so a range check alone refused `--timeout nan` as "less than or
    equal to 3600", as if it were too big: the float options with a range name a NaN or an infinity."""
    from graphtrain.runtime.cli_common import console

    monkeypatch.setattr(sys, "argv", ["graphtrain", *argv])
    with pytest.raises(SystemExit) as exited:
        console(app)
    assert exited.value.code == 1
    err = capsys.readouterr().err  # "<prog> health: Invalid value for ... (see <prog> health --help)"
    assert err.count("\n") == 1 and f"{argv[0]}: Invalid value for {message} (see " in err, err
