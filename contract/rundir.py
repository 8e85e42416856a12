"""The layout of a local run's directory (`graphtrain run --run-dir`): the files its writers (the
launcher, the trainers) and its readers (the REST API's local source, `graphtrain plot`, the tests)
name, each once here. The ConfigMap keys that carry the same reports in a pod are in reporting.py."""

from __future__ import annotations

STATUS_FILE = "status.json"  # the GraphTraining status schema, rewritten by the launcher
SPEC_FILE = "graphtraining.json"  # the validated GraphTraining document the run executes (wire form)
LOGS_DIR = "logs"  # <name>.log of each process
PROGRESS_FILE = "progress.json"  # trainer 0's latest report (reporting.py's schema)
HISTORY_FILE = "progress-history.json"  # trainer 0's report of each finished epoch
RENDEZVOUS_FILE = "trainers/rendezvous.port"  # trainer 0's rendezvous port (--init portfile:, roles.py)


def rank_file(rank: int) -> str:
    """Where rank `rank` writes its own latest report (its heartbeat), relative to the run directory."""
    return f"trainers/rank-{rank}.json"
