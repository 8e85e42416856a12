"""The files of a local run's directory that readers outside the runtime rely on (the REST API's local
source): named once here, in the spec package, because the API may import the spec but not the
launcher (.importlinter). What the trainers write there is named in reporting.py."""

from __future__ import annotations

STATUS_FILE = "status.json"  # the GraphTraining status schema, rewritten by the launcher
SPEC_FILE = "graphtraining.json"  # the validated GraphTraining document the run executes (wire form)
LOGS_DIR = "logs"  # <name>.log of each process
