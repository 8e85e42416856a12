"""The sparse optimizer kinds are one table (contract/optimizers.py): its codes are the C enum's
(graphtrain::OptimKind), and the spec's enum, the runtime's config, the state's layout and size and the
native binding all read it."""

from __future__ import annotations

import re
import typing

import pytest
import torch

from graphtrain.contract import optimizers
from graphtrain.contract.spec import OptimizerKind
from graphtrain.runtime.native.optim import KIND_CODE
from graphtrain.runtime.optim.config import KINDS, Kind, OptimConfig
from graphtrain.runtime.optim.state import check_state, make_state
from graphtrain.runtime.storage.sizes import state_bytes
from tests.tree import ROOT


def c_enum() -> dict[str, int]:
    """graphtrain::OptimKind's members as snake-case names (kRowwiseAdagrad: rowwise_adagrad)."""
    header = (ROOT / "cuda" / "include" / "graphtrain" / "optim_math.h").read_text()
    body = re.search(r"enum OptimKind : int32_t \{([^}]*)\}", header)
    assert body, "graphtrain::OptimKind not found in optim_math.h"
    out = {}
    for name, value in re.findall(r"k(\w+)\s*=\s*(\d+)", body.group(1)):
        snake = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()
        out[snake] = int(value)
    return out


def test_the_table_is_the_c_enum() -> None:
    """A kind added, renumbered or renamed on one side only fails here."""
    assert {o.name: o.code for o in optimizers.SPARSE_OPTIMIZERS} == c_enum()


def test_every_python_place_reads_the_table() -> None:
    names = [o.name for o in optimizers.SPARSE_OPTIMIZERS]
    assert [k.value for k in OptimizerKind] == names
    assert list(KINDS) == names and list(typing.get_args(Kind)) == names
    assert {o.name: o.code for o in optimizers.SPARSE_OPTIMIZERS} == KIND_CODE


@pytest.mark.parametrize("kind", [o.name for o in optimizers.SPARSE_OPTIMIZERS])
@pytest.mark.parametrize("step_count", ["row", "global"])
def test_state_layout_and_size_follow_the_table(kind: str, step_count: str) -> None:
    config = OptimConfig(kind, lr=0.1, initial_accumulator=0.5, step_count=step_count)  # type: ignore[arg-type]
    state = make_state(config, 7, 3)
    entries = optimizers.BY_NAME[kind].state
    assert list(state) == [e.name for e in entries]
    check_state(config, state, 7, 3)
    for e in entries:
        assert float(state[e.name].float().mean()) == (0.5 if e.fill == "initial_accumulator" else 0.0)
    assert state_bytes(kind, step_count, 7, 3) == sum(t.numel() * t.element_size() for t in state.values())
    if state:
        name = next(iter(state))
        with pytest.raises(ValueError, match=f"state {name!r} must be a contiguous"):
            check_state(config, {**state, name: torch.zeros(8, 3, dtype=torch.float64)}, 7, 3)
        with pytest.raises(ValueError, match=f"{kind} state needs entries"):
            check_state(config, {}, 7, 3)
