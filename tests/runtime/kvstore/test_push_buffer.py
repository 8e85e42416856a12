"""A trainer's push buffers (kvstore/tables/shm.py) are unlinked when it leaves with os._exit, not left to the
resource tracker (which removes them, warning of leaked shared_memory objects in the trainer's log)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphtrain.runtime.kvstore.tables.shm import attach

CHILD = r"""
import os, sys
from graphtrain.runtime.kvstore.tables.shm import PushBuffer, close_push_buffers
buffer = PushBuffer("gt-test-{tag}")
print(buffer.take(1000).name, flush=True)
if sys.argv[1] == "close":
    close_push_buffers()
sys.stderr.flush()
os._exit(0)
"""


@pytest.mark.parametrize("close", [True, False], ids=["closed", "left-to-the-tracker"])
def test_push_buffers_are_unlinked_before_os_exit(close: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("{tag}", str(close)), "close" if close else "leave"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    name = done.stdout.strip()
    with pytest.raises(FileNotFoundError):  # gone either way: by us, or by the tracker at exit
        attach(name)
    assert ("leaked shared_memory" in done.stderr) is not close, done.stderr
