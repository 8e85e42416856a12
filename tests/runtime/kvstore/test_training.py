"""2 shard servers + 2 client processes train an embedding with each optimizer; the final rows and
optimizer state equal a single-process reference that applies the same updates in the same order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from graphtrain.runtime.checkpoint import export_state, export_table
from graphtrain.runtime.optim import OptimConfig, make_state, sparse_step
from graphtrain.runtime.storage.inits import init_rows
from tests import forked
from tests.runtime.conftest import TOKEN, servers
from tests.runtime.kvstore import workers as kv_worker

CONFIGS = [
    OptimConfig("sgd", 0.1),
    OptimConfig("adagrad", 0.1, eps=1e-8, initial_accumulator=0.1),
    OptimConfig("rowwise_adagrad", 0.1, eps=1e-8, duplicate="mean"),
    OptimConfig("adam", 0.01, eps=1e-8, step_count="row"),
    OptimConfig("adam", 0.01, eps=1e-8, step_count="global", duplicate="mean", weight_decay=0.01),
]


def reference(config: OptimConfig, world: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    table = torch.empty(kv_worker.NUM_ROWS, kv_worker.DIM)
    init_rows(kv_worker.INIT, 0, kv_worker.NUM_ROWS, (kv_worker.DIM,), table)
    state = make_state(config, kv_worker.NUM_ROWS, kv_worker.DIM)
    for step in range(kv_worker.STEPS):
        for rank in range(world):
            ids, grads = kv_worker.batch(rank, step)
            if config.kind == "adam" and config.step_count == "global":
                state["step"][0] = step  # each trainer's push is its step number step + 1
            sparse_step(config, table, state, ids, grads, backend="torch")
    return table, state


def replay(config: OptimConfig, order: list[tuple[int, int, int]]) -> torch.Tensor:
    """The table after the pushes of `order`, each (rank, step, shard): a batch's rows of one shard."""
    table = torch.empty(kv_worker.NUM_ROWS, kv_worker.DIM)
    init_rows(kv_worker.INIT, 0, kv_worker.NUM_ROWS, (kv_worker.DIM,), table)
    state = make_state(config, kv_worker.NUM_ROWS, kv_worker.DIM)
    half = kv_worker.NUM_ROWS // 2  # the two servers' even split
    for rank, step, shard in order:
        ids, grads = kv_worker.batch(rank, step)
        mine = (ids >= half) == bool(shard)
        if config.kind == "adam" and config.step_count == "global":
            state["step"][0] = step
        sparse_step(config, table, state, ids[mine], grads[mine], backend="torch")
    return table


def rows_off(got: torch.Tensor, want: torch.Tensor) -> str:
    """The rows off the reference, by shard, and the pushes (rank, step) that touched every one of them:
    one push computed another way shows as the only one they share."""
    off = ((got - want).abs() > 1e-6 + 1e-5 * want.abs()).any(dim=1).nonzero().flatten().tolist()
    pushes = {
        (r, s): set(kv_worker.batch(r, s)[0].tolist()) for r in range(2) for s in range(kv_worker.STEPS)
    }
    common = [p for p, ids in pushes.items() if all(row in ids for row in off)]
    upper = sum(row >= kv_worker.NUM_ROWS // 2 for row in off)
    return f"{len(off)} rows off (shard 0: {len(off) - upper}, shard 1: {upper}), all in the pushes {common}"


def closest_orders(config: OptimConfig, got: torch.Tensor) -> str:
    """For a table that differs from the reference: the single changes of the clients' turns (a push
    dropped, applied twice, or swapped with another) whose replay comes closest to it, to name what
    happened (a rare failure under load, seen three times by 2026-12-04, cause not found)."""
    turns = [(r, s, shard) for s in range(kv_worker.STEPS) for r in range(2) for shard in (0, 1)]
    orders = {"the turns": turns}
    for i, push in enumerate(turns):
        orders[f"{push} dropped"] = turns[:i] + turns[i + 1 :]
        orders[f"{push} twice"] = turns[: i + 1] + turns[i:]
        for j in range(i + 1, len(turns)):
            swapped = list(turns)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            orders[f"{push} and {turns[j]} swapped"] = swapped
    scored = sorted((float((got - replay(config, o)).abs().max()), name) for name, o in orders.items())
    return "; ".join(f"{name}: {d:.2g}" for d, name in scored[:4])


def state_off(got: dict, want: dict[str, torch.Tensor], keep: Path, table: torch.Tensor) -> str:
    """How far each state entry is off the reference (the rows off in it, as rows_off counts them), with
    the served table and state kept beside the checkpoint to replay: any summation order of a push is
    within 1.2e-7 of the reference (2026-12-05), so a table off by more is one computed another way,
    and whether its optimizer state is off too tells the step's arithmetic from its inputs."""
    import numpy as np

    np.savez(keep / "served.npz", table=table.numpy(), **got)
    parts = []
    for key, value in want.items():
        served = torch.from_numpy(got[key]) if key in got else None
        if served is None or served.shape != value.shape:
            parts.append(f"{key}: not comparable")
            continue
        diff = (served.double() - value.double()).abs()
        off = diff > 1e-6 + 1e-5 * value.double().abs()
        rows = int((off.reshape(len(off), -1).any(dim=1) if off.dim() else off).sum())
        parts.append(f"{key} up to {float(diff.max()):.2g} off ({rows} rows)")
    return f"state: {', '.join(parts) or 'none'}; served table and state in {keep / 'served.npz'}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.kind}-{c.step_count}-{c.duplicate}")
def test_two_servers_two_clients_match_single_process(config: OptimConfig, ckroot: Path) -> None:
    with servers(2, ckroot) as srv:
        addresses = [s.address for s in srv]
        ctx = forked.context()  # new processes, torch already imported
        procs = [
            ctx.Process(
                target=kv_worker.train, args=(addresses, TOKEN, r, 2, dataclasses.asdict(config), str(ckroot))
            )
            for r in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=180)
            assert p.exitcode == 0, f"client exited with {p.exitcode}"
    table, state = reference(config, 2)
    got = torch.from_numpy(export_table(ckroot / "final", "emb"))
    got_state = export_state(ckroot / "final", "emb")
    if not torch.allclose(got, table, rtol=1e-5, atol=1e-6):
        off = float((got - table).abs().max())
        pytest.fail(
            f"the served table is up to {off:.2g} off the reference; {rows_off(got, table)}; "
            f"closest: {closest_orders(config, got)}; {state_off(got_state, state, ckroot, got)}"
        )
    assert set(got_state) == set(state)
    for key, value in state.items():
        torch.testing.assert_close(torch.from_numpy(got_state[key]), value, rtol=1e-5, atol=1e-6)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("config", CONFIGS[2:], ids=lambda c: f"{c.kind}-{c.step_count}")
def test_push_larger_than_a_chunk_matches_single_process(config: OptimConfig, ckroot: Path) -> None:
    """A push of 12.8 MB per shard goes as several chunk requests that the server applies while the
    rest arrive: the result is one optimizer step, as a single request's would be."""
    import numpy as np

    from graphtrain.runtime import kvstore
    from graphtrain.runtime.kvstore.wire.protocol import CHUNK_BYTES

    rows, dim, n = 300_000, 32, 200_000
    assert n // 2 * dim * 4 > 2 * CHUNK_BYTES
    bounds = np.array([0, rows // 2, rows])
    init = {"kind": "uniform", "seed": 3}
    table = torch.empty(rows, dim)
    init_rows(init, 0, rows, (dim,), table)
    state = make_state(config, rows, dim)
    g = torch.Generator().manual_seed(0)
    with servers(2, ckroot) as srv:
        client = kvstore.connect([s.address for s in srv], TOKEN)
        client.create("big", rows, (dim,), "float32", bounds, init)
        client.set_optimizer("big", dataclasses.asdict(config))
        for step in range(2):
            ids = torch.randint(0, rows, (n,), generator=g)
            grads = torch.randn(n, dim, generator=g)
            client.push_grad("big", ids.numpy(), grads.numpy(), bounds, config.duplicate == "mean", step + 1)
            if config.step_count == "global":
                state["step"][0] = step
            sparse_step(config, table, state, ids, grads, backend="torch")
        got = client.pull("big", np.arange(rows), bounds, (dim,), np.float32)
        client.close()
    torch.testing.assert_close(torch.from_numpy(got), table, rtol=1e-5, atol=1e-6)
