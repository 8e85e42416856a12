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
    elif command == "fds":  # what each open descriptor is
        fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        targets = {}
        for fd in fds:
            try:
                targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue  # the listing's own descriptor, closed again
        print(json.dumps(targets))
    elif command == "imported":  # which of the named modules this process has without importing them
        print(json.dumps({name: name in sys.modules for name in rest}))
    elif command == "exit":
        sys.exit(int(rest[0]))
    elif command == "raise":
        raise RuntimeError("the probe failed")
    elif command == "interrupt":
        raise KeyboardInterrupt
    elif command == "sleep":
        print("up", flush=True)
        time.sleep(float(rest[0]))
