"""base-image.sh's retry of a failed mmdebstrap, with stand-ins for mmdebstrap and podman on PATH (no
image is built): mmdebstrap once failed on `umount ... target is busy` and passed when run again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "base-image.sh"
BUSY = "umount: /tmp/mmdebstrap.x/proc: target is busy."
# mmdebstrap's stand-in: fails (leaving a file in its $TMPDIR, as a failed run leaves its chroot)
# while $FAILS says so, else writes its target tarball (the second-last argument); it first checks
# that no leftover of an earlier run is there
MMDEBSTRAP = f"""#!/bin/sh
n=$(($(cat "$STATE/runs" 2>/dev/null || echo 0) + 1)); echo "$n" > "$STATE/runs"
[ -z "$(ls -A "$TMPDIR")" ] || {{ echo "leftovers in $TMPDIR" >&2; exit 3; }}
target=$(eval echo \\"\\${{$(($# - 1))}}\\")
[ ! -e "$target" ] || {{ echo "leftover $target" >&2; exit 3; }}
if [ "$n" -le "$FAILS" ]; then touch "$TMPDIR/chroot-left"; echo "{BUSY}" >&2; exit 1; fi
echo rootfs > "$target"
"""
PODMAN = """#!/bin/sh
[ "$1" = import ] || exit 2
for last; do :; done
eval "tarball=\\${$(($# - 1))}"
echo "$(cat "$tarball") -> $last" >> "$STATE/imported"
"""


def run_script(tmp_path: Path, fails: int) -> subprocess.CompletedProcess:
    bin_dir, state, tmp = tmp_path / "bin", tmp_path / "state", tmp_path / "tmp"
    for d in (bin_dir, state, tmp):
        d.mkdir()
    for name, text in (("mmdebstrap", MMDEBSTRAP), ("podman", PODMAN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STATE": str(state),
        "FAILS": str(fails),
        "TMPDIR": str(tmp),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), "localhost/base:test"], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("fails", [0, 2])
def test_a_failed_mmdebstrap_is_run_again_after_a_clean_up(tmp_path: Path, fails: int) -> None:
    out = run_script(tmp_path, fails)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "localhost/base:test\n"
    assert (tmp_path / "state" / "runs").read_text().strip() == str(fails + 1)
    assert (tmp_path / "state" / "imported").read_text() == "rootfs -> localhost/base:test\n"
    assert out.stderr.count("running it again") == fails
    assert list((tmp_path / "tmp").iterdir()) == []  # its work directory removed at the end


def test_mmdebstrap_is_run_three_times_at_most_and_nothing_is_imported(tmp_path: Path) -> None:
    out = run_script(tmp_path, fails=5)
    assert out.returncode == 1
    assert "mmdebstrap failed 3 times" in out.stderr and BUSY in out.stderr
    assert (tmp_path / "state" / "runs").read_text().strip() == "3"
    assert not (tmp_path / "state" / "imported").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
