"""Each import contract of .importlinter holds on this tree and breaks on a planted violation.

A contract that cannot fail is no contract: each case copies the packages into a temporary view (as
build/view lays them out for `make lint`), adds one module that breaks exactly what the contract
forbids, and runs that contract alone on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "contract", "runtime", "operator", "api")
LINT = Path(sys.executable).parent / "lint-imports"

# (contract, planted module path inside the view, its source): one import the contract forbids
PLANTED = [
    ("roles", "api/planted.py", "import graphtrain.operator.manifests\n"),
    ("roles", "runtime/planted_role.py", "import graphtrain.api.app\n"),
    ("roles", "contract/planted.py", "import graphtrain.runtime.errors\n"),
    ("roles", "operator/planted.py", "import graphtrain.cli\n"),
    ("runtime-layers", "runtime/kvstore/planted.py", "import graphtrain.runtime.models.graphsage\n"),
    ("runtime-layers", "runtime/native/planted.py", "import graphtrain.runtime.partition\n"),
    ("runtime-layers", "runtime/roles/planted.py", "import graphtrain.runtime.cli\n"),  # over its shell
    ("runtime-layers", "runtime/launch/planted.py", "import graphtrain.runtime.roles.train\n"),
    ("runtime-layers", "runtime/planted_floor.py", "import graphtrain.runtime.errors\n"),  # on no floor
    ("runtime-layers", "runtime/storage/planted.py", "import graphtrain.runtime.checkpoint\n"),
    ("runtime-layers", "runtime/checkpoint/planted.py", "import graphtrain.runtime.kvstore.wire.protocol\n"),
    ("kvstore-rooms", "runtime/kvstore/wire/planted.py", "import graphtrain.runtime.kvstore.tables.state\n"),
    (
        "kvstore-rooms",
        "runtime/kvstore/tables/planted.py",
        "import graphtrain.runtime.kvstore.serving.dispatch\n",
    ),
    (
        "kvstore-rooms",
        "runtime/kvstore/serving/planted.py",
        "import graphtrain.runtime.kvstore.client.kvclient\n",
    ),
    ("kvstore-rooms", "runtime/kvstore/planted_room.py", "import graphtrain.runtime.errors\n"),  # in no room
    ("contract-light", "contract/spec/planted.py", "import numpy\n"),
    ("control-plane-light", "operator/planted.py", "import torch\n"),
    ("control-plane-light", "api/planted.py", "import zmq\n"),
    ("kubernetes", "runtime/kvstore/planted.py", "import kubernetes\n"),
    ("kopf", "api/planted.py", "import kopf\n"),
    ("crd-light", "runtime/targets.py", "import numpy\n"),  # replaces the module for the one run
    ("checkpoint-choice-light", "runtime/checkpoint/layout.py", "import graphtrain.runtime.storage.keyed\n"),
    ("acyclic", "runtime/data/planted_a.py", "from graphtrain.runtime.data import planted_b\n"),
]
CYCLE_PARTNER = ("runtime/data/planted_b.py", "from graphtrain.runtime.data import planted_a\n")


def contracts() -> list[str]:
    text = (ROOT / ".importlinter").read_text()
    return [
        line[len("[importlinter:contract:") : -1]
        for line in text.splitlines()
        if line.startswith("[importlinter:contract:")
    ]


def lint(view: Path, contract: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(view)}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(ROOT / ".importlinter"), "--contract", contract],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=view,
    )


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """graphtrain/<package> copies of the Python sources (no build products)."""
    root = tmp_path_factory.mktemp("view")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package,
            root / "graphtrain" / package,
            ignore=lambda _d, names: [n for n in names if not (n.endswith(".py") or "." not in n)],
        )
    return root


def test_every_contract_is_planted_here() -> None:
    assert sorted({c for c, _, _ in PLANTED}) == sorted(contracts())


@pytest.mark.parametrize("contract", contracts())
def test_the_tree_keeps_the_contract(view: Path, contract: str) -> None:
    out = lint(view, contract)
    assert out.returncode == 0 and " KEPT" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize(("contract", "module", "source"), PLANTED, ids=[f"{c}:{m}" for c, m, _ in PLANTED])
def test_a_planted_violation_breaks_the_contract(view: Path, contract: str, module: str, source: str) -> None:
    planted = [(module, source)] + ([CYCLE_PARTNER] if contract == "acyclic" else [])
    kept = {
        p: (view / "graphtrain" / p).read_text() for p, _ in planted if (view / "graphtrain" / p).exists()
    }
    try:
        for path, text in planted:
            (view / "graphtrain" / path).write_text(text)
        out = lint(view, contract)
    finally:  # a module of the tree planted over is put back, a new one removed
        for path, _ in planted:
            if path in kept:
                (view / "graphtrain" / path).write_text(kept[path])
            else:
                (view / "graphtrain" / path).unlink(missing_ok=True)
    assert out.returncode == 1 and " BROKEN" in out.stdout, out.stdout + out.stderr
