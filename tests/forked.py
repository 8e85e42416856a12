"""Fresh worker processes without paying torch's import each time: a multiprocessing "forkserver"
context whose server imports torch, numpy and the given test modules once (~2.5 s of CPU), then forks
every process a test starts from that clean state (milliseconds).

Each process is still new (nothing any earlier test did is in it: the server itself runs no test code,
it only imported modules), as the "spawn" context's are; what differs is that the modules are already
imported, and that the environment is the server's, taken when it started. Tests that change
os.environ for their workers must pass it as an argument instead (none of the users below does).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.context import BaseContext

# what every user's workers import: the server loads them once, so no forked process imports them again
PRELOAD = [
    "numpy",
    "torch",
    "torch.distributed",
    "graphtrain.runtime.collective",
    "graphtrain.runtime.kvstore",
    "graphtrain.runtime.optim",
    "graphtrain.runtime.tensor",
    "tests.runtime.collective.ranks",
    "tests.runtime.collective.scenarios",
    "tests.runtime.collective.scenarios_dynamic",
    "tests.runtime.kvstore.workers",
]

_context: BaseContext | None = None


def context() -> BaseContext:
    """The forkserver context of this test process (its server starts at the first Process.start())."""
    global _context
    if _context is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _context = ctx
    return _context
