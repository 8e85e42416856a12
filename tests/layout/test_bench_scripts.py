"""Every benchmark still starts. A bench is run by hand, a session or two apart, so a rename in the runtime
breaks it silently: bench/fuzz.py patched `state.fits` for weeks after it had moved, and failed at import
with an AttributeError. Here each bench/*.py is run with --help, all in one interpreter (torch is
imported once: a few seconds, not one interpreter's start per script), as `python bench/NAME.py` would
run it: the bench folder first on sys.path, the script as __main__."""

from __future__ import annotations

import subprocess
import sys

from tests.tree import ROOT, files_under

DRIVER = """
import contextlib, io, runpy, sys
bench, scripts = sys.argv[1], sys.argv[2:]
sys.path.insert(0, bench)
failed = []
for script in scripts:
    sys.argv = [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    except BaseException as exc:  # the failure to report: an import or a name that moved
        code = f"{type(exc).__name__}: {exc}"
    if code != 0 or "usage:" not in out.getvalue():
        failed.append(f"{script}: {code!r} {out.getvalue()[:200]!r}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_bench_script_answers_help() -> None:
    scripts = [p for p in files_under("bench", suffixes=(".py",)) if p.parent == ROOT / "bench"]
    helped = [str(p) for p in scripts if "argparse" in p.read_text()]  # servers.py is a helper module
    assert len(helped) >= 30, helped
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, str(ROOT / "bench"), *helped],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
