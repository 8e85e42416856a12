"""The CUDA core must compile wherever nvcc is installed (CI has it), so a broken kernel cannot land: for
sm_80 and sm_90 with PTX of the newest (a later GPU's driver compiles it; without it the first kernel
there has no image), without a warning under -Wall -Wextra, exporting every entry point of the ABI and
passing the bindings' load-time check, which runs no kernel. No GPU runs it on the build machines; its
CPU twin is tested numerically, its failures without a driver in test_cuda_core.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from graphtrain.runtime.native import abi
from tests.native import conftest
from tests.native.conftest import ROOT, nvcc_module
from tests.tree import files_under


def test_cuda_core_compiles_without_warnings(cuda_build: tuple[Path, str]) -> None:
    _, output = cuda_build
    assert "warning" not in output.lower(), output[-4000:]


def test_cuda_core_exports_the_abi_and_loads_without_a_gpu(cuda_build: tuple[Path, str]) -> None:
    out, _ = cuda_build
    symbols = subprocess.run(["nm", "-D", str(out)], capture_output=True, text=True).stdout
    exported = [name for name, sig in abi.SIGNATURES.items() if abi.CUDA in sig.libraries]
    assert {"gt_cuda_sparse_step", "gt_cuda_probe", "gt_cuda_last_error", "gt_abi_version"} <= set(exported)
    for name in exported:
        assert f" T {name}" in symbols, name
    lib = abi.load(out, abi.CUDA)  # opening it needs no GPU: the version, sizeof and entry points
    assert lib.gt_abi_version() == abi.ABI_VERSION


def test_cuda_core_embeds_machine_code_for_each_arch_and_ptx_for_the_newest(
    cuda_build: tuple[Path, str],
) -> None:
    out, _ = cuda_build
    images = set(nvcc_module().fatbin_images(out))
    assert {("sm", 80), ("sm", 90), ("ptx", 90)} <= images, images


def test_nvcc_command_asks_for_ptx_of_the_newest_arch_and_warnings() -> None:
    cmd = nvcc_module().nvcc_command("out.so", ["90", "80"])
    assert "-gencode=arch=compute_80,code=sm_80" in cmd
    assert "-gencode=arch=compute_90,code=compute_90" in cmd
    assert "-gencode=arch=compute_80,code=compute_80" not in cmd
    assert any("-Wall" in a and "-Wextra" in a for a in cmd)


def test_toolkit_of_another_major_than_torch_is_refused() -> None:
    nvcc = nvcc_module()
    assert nvcc.check_toolkit((13, 0), None) is None  # a CPU-only torch: no constraint
    assert nvcc.check_toolkit((13, 0), "13.0") is None
    assert nvcc.check_toolkit((12, 4), "12.8") is None
    refused = nvcc.check_toolkit((13, 0), "12.8")
    assert refused is not None and "CUDA 13.0" in refused and "12.8" in refused
    assert "nvcc not found" in (nvcc.check_toolkit(None, "12.8") or "")


def test_the_cached_build_is_keyed_by_every_source_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuda_build reuses a build only for the same inputs: a changed byte in any file under cuda/ (here a
    copy of them) or another command is another key, so a stale library is never tested."""
    copies = []
    for path in files_under("cuda"):
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    monkeypatch.setattr(conftest, "ROOT", tmp_path)
    monkeypatch.setattr(conftest, "files_under", lambda *_: copies)
    command = nvcc_module().nvcc_command("core_cuda.so", nvcc_module().DEFAULT_ARCHS)
    key = conftest.cuda_build_key(command)
    assert conftest.cuda_build_key(command) == key
    assert conftest.cuda_build_key([*command, "-G"]) != key
    for copy in (copies[0], copies[-1]):
        original = copy.read_bytes()
        copy.write_bytes(original + b" ")
        assert conftest.cuda_build_key(command) != key, copy
        copy.write_bytes(original)
