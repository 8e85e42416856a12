"""What tests/runtime/launch/test_zygote.py's zygotes run in their children: main() does what argv says."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    command, *rest = sys.argv[1:]
    if command == "say":
        mask = os.umask(0)
        print(
            json.dumps(
                {
                    "args": sys.argv[1:],
                    "probe": os.environ.get("PROBE"),
                    "cwd": os.getcwd(),
                    "umask": mask,
                    "session_leader": os.getsid(0) == os.getpid(),
                }
            )
        )
        sys.stderr.write("said it\n")
    elif command == "exit":
        sys.exit(int(rest[0]))
    elif command == "raise":
        raise RuntimeError("the probe failed")
    elif command == "interrupt":
        raise KeyboardInterrupt
    elif command == "sleep":
        print("up", flush=True)
        time.sleep(float(rest[0]))
