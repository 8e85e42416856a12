"""A sparse step bound for the CUDA core is checked once, by the binding (runtime/native/cuda.py), not also
by functional.sparse_step (its Python was 15-25 us a call, issue 45 item 7's bar 15: bench/core_call.py).
So every malformed tensor must still be refused before the library is called. Run here without a GPU: the
checks see host tensors described as cuda:0 ones, and the library is a recorder."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.optim import OptimConfig, functional, make_state

GPU = torch.device("cuda", 0)
ROWS, DIM, N = 50, 8, 6


class Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def gt_cuda_sparse_step(self, *args: object) -> int:
        self.calls += 1
        return N  # unique rows


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    elsewhere: set[int] = set()  # ids of tensors described as on the host

    def describe(t: torch.Tensor) -> cuda.Desc:
        device = torch.device("cpu") if id(t) in elsewhere else GPU
        return cuda.Desc(device, t.dtype, tuple(t.shape), t.is_contiguous())

    monkeypatch.setattr(cuda, "describe", describe)
    monkeypatch.setattr(cuda, "_ready", lambda table: (rec, 0, 0))
    monkeypatch.setattr(cuda, "_workspace", lambda *a: torch.empty(1, dtype=torch.uint8))
    monkeypatch.setattr(functional, "choose_backend", lambda device, requested=None: CoreBackend.CUDA)
    rec.elsewhere = elsewhere  # type: ignore[attr-defined]
    return rec


def inputs(kind: str = "adam") -> tuple[OptimConfig, torch.Tensor, dict, torch.Tensor, torch.Tensor]:
    config = OptimConfig(kind, 0.1)
    return config, torch.zeros(ROWS, DIM), make_state(config, ROWS, DIM), torch.arange(N), torch.ones(N, DIM)


def test_a_well_formed_step_reaches_the_library_once(lib: Recorder) -> None:
    config, table, state, ids, grads = inputs()
    assert functional.sparse_step(config, table, state, ids, grads) == N
    assert lib.calls == 1


BREAKS = {
    "table int64": lambda t, s, i, g: (t.long(), s, i, g),
    "table 1-D": lambda t, s, i, g: (t[:, 0].contiguous(), s, i, g),
    "table not contiguous": lambda t, s, i, g: (t.t(), s, i, g),
    "ids int32": lambda t, s, i, g: (t, s, i.int(), g),
    "ids 2-D": lambda t, s, i, g: (t, s, i.view(2, 3), g),
    "grads float64": lambda t, s, i, g: (t, s, i, g.double()),
    "grads one row short": lambda t, s, i, g: (t, s, i, g[1:]),
    "grads too wide": lambda t, s, i, g: (t, s, i, torch.ones(N, DIM + 1)),
    "state missing exp_avg_sq": lambda t, s, i, g: (
        t,
        {k: v for k, v in s.items() if k != "exp_avg_sq"},
        i,
        g,
    ),
    "state exp_avg short": lambda t, s, i, g: (t, {**s, "exp_avg": s["exp_avg"][1:]}, i, g),
    "state exp_avg float64": lambda t, s, i, g: (t, {**s, "exp_avg": s["exp_avg"].double()}, i, g),
    "state step float32": lambda t, s, i, g: (t, {**s, "step": s["step"].float()}, i, g),
    "state not contiguous": lambda t, s, i, g: (
        t,
        {**s, "exp_avg": torch.zeros(DIM, ROWS).t()},
        i,
        g,
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_every_malformed_tensor_is_refused_before_the_library(lib: Recorder, case: str) -> None:
    config, table, state, ids, grads = inputs()
    table, state, ids, grads = BREAKS[case](table, state, ids, grads)
    with pytest.raises(SparseInputError):
        functional.sparse_step(config, table, state, ids, grads)
    assert lib.calls == 0


@pytest.mark.parametrize("which", ["ids", "grads", "exp_avg"])
def test_a_tensor_on_another_device_is_refused_before_the_library(lib: Recorder, which: str) -> None:
    config, table, state, ids, grads = inputs()
    moved = {"ids": ids, "grads": grads, "exp_avg": state["exp_avg"]}[which]
    lib.elsewhere.add(id(moved))  # type: ignore[attr-defined]
    with pytest.raises(SparseInputError, match="move it there first"):
        functional.sparse_step(config, table, state, ids, grads)
    assert lib.calls == 0


def test_gradients_in_blocks_are_joined_and_checked_whole(lib: Recorder) -> None:
    config, table, state, ids, grads = inputs("rowwise_adagrad")
    assert functional.sparse_step(config, table, state, ids, [grads[:2], grads[2:]]) == N
    with pytest.raises(SparseInputError):
        functional.sparse_step(config, table, state, ids, [grads[:2], grads[3:]])
    with pytest.raises(SparseInputError):  # a block of another width: refused, not a failed join
        functional.sparse_step(config, table, state, ids, [grads[:2], torch.ones(N - 2, DIM + 1)])
    assert lib.calls == 1


def test_a_deferred_step_of_a_half_table_is_still_refused(lib: Recorder) -> None:
    config, table, state, ids, grads = inputs()
    flags = torch.full((3,), -1, dtype=torch.int64)
    with pytest.raises(SparseInputError, match="deferred step takes a float32 table"):
        functional.sparse_step(
            config,
            table.bfloat16(),
            state,
            ids,
            grads,
            flags=flags,
            workspace=torch.empty(1, dtype=torch.uint8),
        )
    unit = dataclasses.replace(config, unit_complex=True)
    with pytest.raises(SparseInputError, match="deferred step"):
        functional.sparse_step(unit, table, state, ids, grads, flags=flags, workspace=torch.empty(1))
    assert lib.calls == 0
