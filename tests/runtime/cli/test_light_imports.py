"""Commands that refuse their arguments, or do no training work, import no torch: torch costs about 2 s
of CPU to import, which `graphtrain validate` in an editor's loop, a pre-commit hook or a pod failing
fast on a bad argument paid for a one-line answer (0.7 s without it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tree import ROOT

EXAMPLES = ROOT / "examples"
# the console entry as `graphtrain` runs it; at exit, the heavy modules it imported (JSON, to argv[1])
PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
heavy = lambda: sorted(m for m in ("torch", "zmq") if m in sys.modules)
atexit.register(lambda: open(out, "w").write(json.dumps(heavy())))
sys.argv[0] = "graphtrain"
from graphtrain.cli import main
main()
"""


def imported(
    tmp_path: Path, *args: str, env: dict[str, str | None] | None = None
) -> tuple[int, str, list[str]]:
    """`graphtrain ARGS`' exit code, stderr and the heavy modules it imported (`env`: set, or unset
    with None)."""
    out = tmp_path / "modules.json"
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=environ,
    )
    return done.returncode, done.stderr, json.loads(out.read_text())


def broken_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "broken.yaml"
    spec.write_text((EXAMPLES / "nations-transe.yaml").read_text().replace("model:", "modl:"))
    return spec


@pytest.fixture(scope="module")
def own_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The own-data examples' specs beside the files make_data.py writes (a fresh clone has none)."""
    root = tmp_path_factory.mktemp("own-data")
    subprocess.run(
        [sys.executable, str(EXAMPLES / "own-data" / "make_data.py"), str(root / "data")],
        check=True,
        timeout=120,
    )
    for spec in (EXAMPLES / "own-data").glob("*.yaml"):
        shutil.copy(spec, root)
    return root


@pytest.mark.parametrize("spec", ["sbm-sage.yaml", "family-transe.yaml"])
def test_validate_checks_a_specs_data_without_torch(tmp_path: Path, own_data: Path, spec: str) -> None:
    code, err, heavy = imported(tmp_path, "validate", str(own_data / spec))
    assert (code, err) == (0, "")
    assert "torch" not in heavy


def test_validate_refuses_a_broken_spec_without_torch(tmp_path: Path) -> None:
    code, err, heavy = imported(tmp_path, "validate", str(broken_spec(tmp_path)))
    assert code == 1 and "spec.modl: unknown field" in err
    assert heavy == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--bandwidth", "lots"], "error: --bandwidth 'lots' is not a rate such as '1gbit' or '100mbit'"),
        (["--out", "costs.json"], "error: --out: only with --calibrate (it writes the measured costs)"),
    ],
)
def test_plan_refuses_its_options_without_torch(tmp_path: Path, args: list[str], said: str) -> None:
    code, err, heavy = imported(tmp_path, "plan", str(EXAMPLES / "nations-transe.yaml"), *args)
    assert (code, err.strip()) == (1, said)
    assert "torch" not in heavy


def test_plan_refuses_a_broken_spec_without_torch(tmp_path: Path) -> None:
    code, err, heavy = imported(tmp_path, "plan", str(broken_spec(tmp_path)))
    assert code == 1 and "spec.modl: unknown field" in err
    assert "torch" not in heavy


TOKEN: dict[str, str | None] = {"GRAPHTRAIN_TOKEN": "t" * 32}


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        ([], {"GRAPHTRAIN_TOKEN": None}, "error: no token: pass --token-file or set GRAPHTRAIN_TOKEN"),
        (
            ["--bind", "tcp://127.0.0.1:70000"],
            TOKEN,
            "error: --bind tcp://127.0.0.1:70000: port 70000 is past 65535",
        ),
        (["--restore", "latest"], TOKEN, "error: --restore needs --checkpoint-root"),
    ],
)
def test_shard_server_refuses_its_arguments_without_torch(
    tmp_path: Path, args: list[str], env: dict[str, str | None], said: str
) -> None:
    # no OMP_NUM_THREADS: the server then sets torch's threads itself, after these checks
    code, err, heavy = imported(tmp_path, "shard-server", *args, env={**env, "OMP_NUM_THREADS": None})
    assert (code, err.strip()) == (1, said)
    assert "torch" not in heavy


@pytest.mark.parametrize(
    ("spec", "args", "said"),
    [
        (
            "nations-transe.yaml",
            ["--head", "brazil", "--nodes", "1"],
            "error: task kge does not read --nodes (it reads --head, --relation, --tail, -k)",
        ),
        (
            "nations-transe.yaml",
            ["--head", "brazil"],
            "error: task kge: ask with --relation and --head (or --tail)",
        ),
        (
            "own-data/sbm-sage.yaml",
            [],
            "error: task nodeClassification: predictions are per node: give -o OUT.parquet or OUT.csv",
        ),
        ("nations-transe.yaml", ["--head", "brazil", "--relation", "x"], "error: nope: no such checkpoint"),
    ],
)
def test_predict_refuses_its_arguments_without_torch(
    tmp_path: Path, spec: str, args: list[str], said: str
) -> None:
    code, err, heavy = imported(tmp_path, "predict", "nope", "--spec", str(EXAMPLES / spec), *args)
    assert (code, err.strip()) == (1, said)
    assert "torch" not in heavy


def test_a_refused_inference_starts_no_process_and_imports_no_torch(tmp_path: Path) -> None:
    """Its launcher started the zygote (launch/zygote.py: torch, ~2.5 s of CPU) before its checks, and
    the checks imported torch too: a missing checkpoint took ~5 s of CPU to say so."""
    run_dir = tmp_path / "run"
    spec = str(EXAMPLES / "own-data" / "sbm-sage.yaml")
    code, err, heavy = imported(
        tmp_path, "infer", str(tmp_path / "nowhere"), "--spec", spec, "--run-dir", str(run_dir)
    )
    assert (code, err.strip()) == (1, f"error: {tmp_path / 'nowhere'}: no such checkpoint")
    assert "torch" not in heavy
    assert not (run_dir / "logs" / "zygote.log").exists()  # the zygote's log: it never started


def test_the_lazy_checkpoint_package_lists_and_serves_every_name() -> None:
    """Its interface is written twice (a literal __all__ for linters, _HOMES for __getattr__): the two
    agree, and each name resolves to its module's object."""
    import importlib

    from graphtrain.runtime import checkpoint

    homes = checkpoint._HOMES  # noqa: SLF001 - the package's own table
    assert sorted(checkpoint.__all__) == sorted(homes)
    assert set(homes) <= set(dir(checkpoint))
    for name, module in homes.items():
        home = importlib.import_module(f"graphtrain.runtime.checkpoint.{module}")
        assert getattr(checkpoint, name) is getattr(home, name), name
