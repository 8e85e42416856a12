"""Package discovery and the native core build for the one-distribution, folders-by-role layout.

`graphtrain.contract` lives in contract/, `graphtrain.runtime` in runtime/, `graphtrain.operator` in
operator/, `graphtrain.api` in api/, `graphtrain.cli` in cli/.
`operator/` must never become a top-level `operator` package (the standard library owns that name),
so every package is listed here under its `graphtrain.` name with an explicit folder, and operator/ has
no __init__.py: a folder without one is only a namespace portion, which never shadows the standard
library's module when the repository root is first on sys.path (`python -c ...` or `python -m pip` run
there died in `import collections` while operator/__init__.py existed). `graphtrain`
itself is an implicit namespace package: there is no folder for it.

The native core (cuda/src/*.cpp) is a plain C-ABI shared library, `graphtrain.runtime.native._core`,
loaded with ctypes: it needs no Python or torch headers at build time, arrays cross as raw pointers,
and ctypes releases the GIL during each call. GRAPHTRAIN_NATIVE_ARCH=native adds -march=native.
GRAPHTRAIN_BUILD_CUDA=1 also builds the CUDA core (cuda/src/*.cu, nvcc) as `_core_cuda`, for the
architectures in GRAPHTRAIN_CUDA_ARCHS (default "80 90", plus PTX of the newest), from a toolkit of the
CUDA major version in GRAPHTRAIN_TORCH_CUDA (torch.version.cuda; `make cuda` sets it).
GRAPHTRAIN_NATIVE=0 builds no native code at all: the control plane (`pip install .[operator]`) needs
no compiler; a runtime without its core says so when a sparse optimizer is made.
"""

import importlib.util
import os
import shlex
import subprocess
from pathlib import Path

import setuptools
from setuptools import Extension, setup

if int(setuptools.__version__.split(".")[0]) < 77:  # pyproject's SPDX `license` string needs 77
    raise SystemExit(
        f"graphtrain builds with setuptools >= 77 (this Python has {setuptools.__version__}): "
        "pip install ... fetches it; to run setup.py directly, pip install -U 'setuptools>=77' first"
    )
from setuptools.command.build_ext import build_ext

ROLES = {
    "contract": "graphtrain.contract",
    "runtime": "graphtrain.runtime",
    "operator": "graphtrain.operator",
    "api": "graphtrain.api",
    "cli": "graphtrain.cli",
}


def discover() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for folder, name in ROLES.items():
        # the role folder itself may have no __init__.py (operator/ must not: see below)
        dirs = {Path(folder), *(init.parent for init in Path(folder).rglob("__init__.py"))}
        for d in sorted(dirs):
            pkg = ".".join([name, *d.relative_to(folder).parts])
            packages.append(pkg)
            package_dir[pkg] = d.as_posix()
    return packages, package_dir


def nvcc_module():  # noqa: ANN201
    """cuda/nvcc.py, loaded by path (the build backend does not put this folder on sys.path)."""
    spec = importlib.util.spec_from_file_location(
        "graphtrain_nvcc", Path(__file__).parent / "cuda" / "nvcc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildCLibrary(build_ext):
    """Build the core as a shared library (ctypes loads it, so no PyInit symbol is needed), and the
    CUDA core when asked."""

    def get_export_symbols(self, ext):  # noqa: ANN001, ANN201
        return []

    def run(self) -> None:
        super().run()
        if os.environ.get("GRAPHTRAIN_BUILD_CUDA") == "1":
            target = Path(self.get_ext_fullpath("graphtrain.runtime.native._core")).with_name("_core_cuda.so")
            if self.inplace:
                target = Path("runtime/native/_core_cuda.so")
            target.parent.mkdir(parents=True, exist_ok=True)
            nvcc = nvcc_module()
            # the CUDA version torch was built with (`make cuda` passes it: the isolated build has no
            # torch); the core must come from a toolkit of the same major version
            refused = nvcc.check_toolkit(nvcc.toolkit_version(), os.environ.get("GRAPHTRAIN_TORCH_CUDA"))
            if refused:
                raise SystemExit(f"not building the CUDA core: {refused}")
            archs = os.environ.get("GRAPHTRAIN_CUDA_ARCHS", " ".join(nvcc.DEFAULT_ARCHS)).split()
            cmd = nvcc.nvcc_command(str(target), archs)
            print("building the CUDA core:", shlex.join(cmd))
            subprocess.run(cmd, check=True)


# -fno-math-errno: sqrtf may then vectorise (we never read errno); without it gcc keeps a scalar
# call path per element in Adagrad and Adam. -fno-trapping-math: a select between two computed floats
# (ELU's x or expm1(x)) may then vectorise; we never unmask floating-point exceptions.
flags = ["-O3", "-std=c++17", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fvisibility=hidden"]
flags += ["-Wall", "-Wextra"]
if os.environ.get("GRAPHTRAIN_NATIVE_ARCH"):
    flags.append(f"-march={os.environ['GRAPHTRAIN_NATIVE_ARCH']}")
core = Extension(
    "graphtrain.runtime.native._core",
    sources=sorted(str(p) for p in Path("cuda/src").glob("*.cpp")),
    include_dirs=["cuda/include"],
    # Rebuild when a header changes too (setuptools only tracks sources by default): a stale library
    # with an older OptimParams layout would read garbage hyper-parameters.
    depends=sorted(str(p) for p in [*Path("cuda/include").rglob("*.h"), *Path("cuda/src").glob("*.h")]),
    extra_compile_args=flags,
    extra_link_args=["-fopenmp"],
    language="c++",
)

packages, package_dir = discover()
setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=[] if os.environ.get("GRAPHTRAIN_NATIVE") == "0" else [core],
    cmdclass={"build_ext": BuildCLibrary},
    include_package_data=True,
)
