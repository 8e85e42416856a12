"""Trainer ranks for the collective-table tests, each a fresh process (forked from tests/forked.py's
server, which imported torch once): a gloo group over a FileStore (no ports), one scenario function per
test, results written as .npz files (never pickled) that the test compares with a single-process
reference."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tests import forked

TIMEOUT_S = 90


def _main(scenario: str, rank: int, world: int, tmp: str, params: str) -> None:
    out = Path(tmp)
    try:
        torch.set_num_threads(1)
        store = dist.FileStore(str(out / "store"), world)
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world, timeout=dt.timedelta(seconds=TIMEOUT_S)
        )
        module, _, name = scenario.rpartition(".")
        where = module if module.startswith("tests.") else f"tests.runtime.collective.{module or 'scenarios'}"
        scenarios = importlib.import_module(where)
        fn: Callable[..., dict[str, Any]] = getattr(scenarios, name)
        result = fn(rank, world, out, **json.loads(params))
        np.savez(out / f"rank{rank}.npz", **{k: np.asarray(v) for k, v in result.items()})
        dist.destroy_process_group()
    except BaseException:
        (out / f"rank{rank}.err").write_text(traceback.format_exc())
        raise SystemExit(1) from None


def run(scenario: str, world: int, tmp: Path, **params: Any) -> list[dict[str, np.ndarray]]:
    """Run `scenario` ("fn" of scenarios.py, "module.fn" of this package, or "tests.x.y.fn") on `world`
    new rank processes; the results of each rank, in rank order."""
    tmp.mkdir(parents=True, exist_ok=True)
    ctx = forked.context()
    procs = [
        ctx.Process(target=_main, args=(scenario, r, world, str(tmp), json.dumps(params)))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S + 30)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)
    errors = [(tmp / f"rank{r}.err").read_text() for r in range(world) if (tmp / f"rank{r}.err").exists()]
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    results = []
    for r in range(world):
        with np.load(tmp / f"rank{r}.npz", allow_pickle=False) as f:
            results.append({k: f[k] for k in f.files})
    return results
