"""scripts/gpu-check and its logic (scripts/gpu_check_lib.py) as modules for the tests: the scripts folder
is no package, and the script has no .py suffix."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check"

FAKE_SANITIZER = """#!{python}
# compute-sanitizer for the tests: options first (--tool and --error-exitcode take a value, any other is a
# bare flag, as --track-unused-memory is in CUDA 13), then the program; FAKE_ERRORS errors in its summary
import os, shutil, subprocess, sys
args, tool, exitcode = sys.argv[1:], "memcheck", 0
while args and args[0].startswith("--"):
    flag = args.pop(0)
    if flag in ("--tool", "--error-exitcode"):
        value = args.pop(0)
        tool, exitcode = (value, exitcode) if flag == "--tool" else (tool, int(value))
print("========= COMPUTE-SANITIZER", flush=True)
if not args or shutil.which(args[0]) is None:
    print("========= Error: Target application doesn't exist", flush=True)
    sys.exit(1)
code = subprocess.call(args)
errors = int(os.environ.get("FAKE_ERRORS", "0"))
if tool == "racecheck":
    print(f"========= RACECHECK SUMMARY: {{errors}} hazards displayed ({{errors}} errors, 0 warnings)")
else:
    print(f"========= ERROR SUMMARY: {{errors}} errors")
sys.exit(exitcode if errors else code)
"""


def load(name: str, path: Path) -> ModuleType:
    """The module at `path` under `name`, once (registered first: dataclasses look their module up)."""
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


lib = load("gpu_check_lib", ROOT / "scripts" / "gpu_check_lib.py")
script = load("gpu_check_script", SCRIPT)
