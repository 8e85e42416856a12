"""Package discovery and the native core build for the one-distribution, folders-by-role layout.

`graphtrain.runtime` lives in runtime/, `graphtrain.operator` in operator/, `graphtrain.api` in api/.
`operator/` must never become a top-level `operator` package (the standard library owns that name),
so every package is listed here under its `graphtrain.` name with an explicit folder. `graphtrain`
itself is an implicit namespace package: there is no folder for it.

The native core (cuda/src/*.cpp) is a plain C-ABI shared library, `graphtrain.runtime.native._core`,
loaded with ctypes: it needs no Python or torch headers at build time, arrays cross as raw pointers,
and ctypes releases the GIL during each call. GRAPHTRAIN_NATIVE_ARCH=native adds -march=native.
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROLES = {"runtime": "graphtrain.runtime", "operator": "graphtrain.operator", "api": "graphtrain.api"}


def discover() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for folder, name in ROLES.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            rel = init.parent.relative_to(folder)
            pkg = ".".join([name, *rel.parts])
            packages.append(pkg)
            package_dir[pkg] = init.parent.as_posix()
    return packages, package_dir


class BuildCLibrary(build_ext):
    """Build the core as a shared library: no PyInit symbol is needed since ctypes loads it."""

    def get_export_symbols(self, ext):  # noqa: ANN001, ANN201
        return []


flags = ["-O3", "-std=c++17", "-fopenmp", "-fvisibility=hidden", "-Wall", "-Wextra"]
if os.environ.get("GRAPHTRAIN_NATIVE_ARCH"):
    flags.append(f"-march={os.environ['GRAPHTRAIN_NATIVE_ARCH']}")
core = Extension(
    "graphtrain.runtime.native._core",
    sources=sorted(str(p) for p in Path("cuda/src").glob("*.cpp")),
    include_dirs=["cuda/include"],
    extra_compile_args=flags,
    extra_link_args=["-fopenmp"],
    language="c++",
)

packages, package_dir = discover()
setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=[core],
    cmdclass={"build_ext": BuildCLibrary},
    include_package_data=True,
)
