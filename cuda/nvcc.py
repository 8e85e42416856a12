"""The nvcc command line of the CUDA core, shared by setup.py (GRAPHTRAIN_BUILD_CUDA=1), the CI compile
check (tests/native/test_cuda_build.py) and scripts/gpu-check. Paths are relative to the repository root.

Machine code for each architecture asked for (default sm_80 and sm_90), and PTX of the newest, which the
driver compiles for any later GPU (without it, the first kernel on another architecture has no image).
Host code is built with -Wall -Wextra; the build must print no warning. The CUDA runtime is linked
statically: it needs a driver at least as new as the toolkit, which the core probes when it loads
(runtime/native/cuda.py), and `check_toolkit` refuses a toolkit of another CUDA major version than the
one torch was built with."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARCHS = ["80", "90"]
FATBIN_MAGIC = 0xBA55ED50


def nvcc_command(output: str, archs: list[str], extra: list[str] | None = None) -> list[str]:
    archs = sorted(set(archs), key=int)
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    newest = archs[-1]
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cuda/src").glob("*.cu"))
    return [
        "nvcc",
        "-O3",
        "-std=c++17",
        "-Xcompiler",
        "-fPIC,-fvisibility=hidden,-fno-math-errno,-Wall,-Wextra",
        "-Icuda/include",
        *gencode,
        f"-gencode=arch=compute_{newest},code=compute_{newest}",
        *(extra or ["-shared"]),
        "-o",
        output,
        *sources,
    ]


def toolkit_version(nvcc: str = "nvcc") -> tuple[int, int] | None:
    """(major, minor) of the CUDA toolkit `nvcc` belongs to, or None when there is no nvcc."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    found = re.search(r"release (\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_toolkit(toolkit: tuple[int, int] | None, torch_cuda: str | None) -> str | None:
    """Why the core must not be built with this toolkit for a torch built with CUDA `torch_cuda`
    ("12.8"; None or "" for a CPU-only torch, which sets no constraint), or None when it may."""
    if toolkit is None:
        return "nvcc not found: install the CUDA toolkit (or put its bin/ on PATH)"
    if not torch_cuda:
        return None
    major = int(torch_cuda.split(".")[0])
    if toolkit[0] != major:
        return (
            f"nvcc is CUDA {toolkit[0]}.{toolkit[1]} but torch was built with CUDA {torch_cuda}: build with "
            f"a CUDA {major} toolkit (PATH or CUDA_HOME), so that the core needs no newer driver than torch"
        )
    return None


def fatbin_images(library: Path) -> list[tuple[str, int]]:
    """The device images a built library embeds, as ("sm", 80) for machine code and ("ptx", 90) for PTX:
    read from its .nv_fatbin ELF section (what `cuobjdump --list-elf --list-ptx` lists; the toolkit on
    the build machines has no cuobjdump)."""
    data = library.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = section(shstrndx)
    fatbin = b""
    for i in range(shnum):
        name, offset, size = section(i)
        if data[names_at + name : data.index(b"\0", names_at + name)] == b".nv_fatbin":
            fatbin = data[offset : offset + size]
    images, pos = [], 0
    while pos + 16 <= len(fatbin):
        magic, _version, header, size = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != FATBIN_MAGIC:
            break
        entry, end = pos + header, pos + header + size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", fatbin, entry)
            (arch,) = struct.unpack_from("<I", fatbin, entry + 28)
            images.append(({1: "ptx", 2: "sm"}.get(kind, f"kind{kind}"), arch))
            entry += entry_header + payload
        pos = end
    return images
