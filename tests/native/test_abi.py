"""The native boundary is checked once, at load: the built core reports the bindings' ABI version and
OptimParams layout, and libraries built from other sources (compiled here, in tmp) are refused with a
message saying how to rebuild, never used with garbage hyper-parameters nor silently replaced by the
torch reference."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import graphtrain.runtime.native as native
from graphtrain.runtime.native import abi
from graphtrain.runtime.native.backend import CoreBackend, choose, choose_for_optimizer

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "cuda" / "include"
pytestmark = pytest.mark.usefixtures("cpu_core")


def compile_lib(tmp_path: Path, name: str, source: str) -> Path:
    """A shared library built from `source` with the project's headers on the include path."""
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "no C++ compiler: the native core needs one too"
    src, out = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    src.write_text(source)
    cmd = [cxx, "-std=c++17", "-shared", "-fPIC", f"-I{INCLUDE}", "-o", str(out), str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def test_header_and_bindings_agree_on_the_version() -> None:
    header = (INCLUDE / "graphtrain" / "abi.h").read_text()
    found = re.search(r"kAbiVersion = (\d+);", header)
    assert found, "kAbiVersion not found in abi.h"
    assert int(found.group(1)) == abi.ABI_VERSION


def test_built_core_reports_this_abi() -> None:
    lib = native.core()
    assert lib.gt_abi_version() == abi.ABI_VERSION
    assert lib.gt_optim_params_size() == ctypes.sizeof(abi.OptimParams)


def test_optim_params_mirror_matches_the_header_field_by_field(tmp_path: Path) -> None:
    """sizeof alone misses two fields swapped: compare every offset with the C++ compiler's."""
    fields = [name for name, _ in abi.OptimParams._fields_]
    offsets = ", ".join(f"(int64_t)offsetof(graphtrain::OptimParams, {f})" for f in fields)
    lib = ctypes.CDLL(
        str(
            compile_lib(
                tmp_path,
                "offsets",
                '#include <cstddef>\n#include "graphtrain/optim_math.h"\n'
                f'extern "C" void offsets(int64_t* out) {{ const int64_t o[] = {{{offsets}}};'
                f" for (int i = 0; i < {len(fields)}; ++i) out[i] = o[i]; }}\n",
            )
        )
    )
    got = (ctypes.c_int64 * len(fields))()
    lib.offsets(got)
    assert list(got) == [getattr(abi.OptimParams, f).offset for f in fields]


# A library built before the check existed, one of an older ABI, one whose OptimParams has another
# layout (the doubles of the bias corrections missing), one that passes the check but lacks an entry point.
OLD_PARAMS = "struct OldParams { float lr, eps, beta1, beta2, omb1, omb2, wd; int32_t eps_inside_sqrt; };"
STALE = {
    "unversioned": (
        '#include "graphtrain/api.h"\n#include <cstdint>\nGT_API int64_t gt_sparse_step() { return 0; }\n',
        "it has no gt_abi_version()",
    ),
    "older-abi": (
        '#include "graphtrain/api.h"\n#include "graphtrain/optim_math.h"\n'
        "GT_API int32_t gt_abi_version() { return 1; }\n"
        "GT_API int64_t gt_optim_params_size() { return sizeof(graphtrain::OptimParams); }\n",
        "it reports ABI version 1 with a 56-byte OptimParams",
    ),
    "other-params": (
        f'#include "graphtrain/abi.h"\n{OLD_PARAMS}\n'
        "GT_API int32_t gt_abi_version() { return graphtrain::kAbiVersion; }\n"
        "GT_API int64_t gt_optim_params_size() { return sizeof(OldParams); }\n",
        f"it reports ABI version {abi.ABI_VERSION} with a 32-byte OptimParams",
    ),
    "missing-entry": ('#include "graphtrain/abi.h"\nGT_DEFINE_ABI_EXPORTS()\n', "it has no gt_"),
}


@pytest.mark.parametrize("library", [abi.CPU, abi.CUDA])
@pytest.mark.parametrize("case", list(STALE))
def test_stale_library_is_refused_with_how_to_rebuild(tmp_path: Path, case: str, library: str) -> None:
    source, what = STALE[case]
    path = compile_lib(tmp_path, case, source)
    with pytest.raises(abi.StaleNativeCore) as info:
        abi.load(path, library)
    message = str(info.value)
    assert what in message and str(path) in message
    assert f"expect ABI version {abi.ABI_VERSION} with a 56-byte OptimParams" in message
    assert ("make cuda" if library == abi.CUDA else "pip install -e .") in message


@pytest.fixture
def stale_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package's CPU core location pointing at a library of an older ABI, for this test only."""
    path = compile_lib(tmp_path, "older", STALE["older-abi"][0])
    monkeypatch.setattr(native, "_core_path", lambda: path)
    native.core.cache_clear()
    yield path
    native.core.cache_clear()


def test_stale_core_is_never_a_silent_fallback(stale_core: Path) -> None:
    """Every call site asks the chooser, which raises for a stale core instead of picking torch."""
    asks = (choose, lambda: choose(torch.device("cpu"), "cpu"), lambda: choose_for_optimizer("cpu"))
    for ask in (*asks, native.available):
        with pytest.raises(abi.StaleNativeCore, match="rebuild it with `pip install -e .`"):
            ask()


def test_every_entry_point_is_declared_once() -> None:
    """The built core exports each CPU entry point of the table, with the table's types."""
    lib = native.core()
    for name, sig in abi.SIGNATURES.items():
        if abi.CPU in sig.libraries:
            assert list(getattr(lib, name).argtypes) == sig.argtypes, name
    assert choose() is CoreBackend.CPU


def test_a_missing_core_is_said_once_not_silently_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the core the reference serves (correct, slower, other sampling draws): one warning per
    process, so a run without its core does not pass unnoticed, and no flood of them."""
    from graphtrain.runtime.native import backend

    monkeypatch.setattr(backend, "available", lambda: False)
    backend._core_missing.cache_clear()
    with pytest.warns(RuntimeWarning, match="native CPU core is not built") as seen:
        assert backend.choose("cpu") is backend.CoreBackend.TORCH
        assert backend.choose("cpu") is backend.CoreBackend.TORCH
    assert len(seen) == 1
    backend._core_missing.cache_clear()
