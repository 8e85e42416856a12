"""LeanStep: the dense Adam step as torch.optim.Adam(fused=True) takes it, the same bits, across a
checkpoint's load_state_dict; torch's own step wherever the lean path does not apply."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from graphtrain.runtime.train.lean_step import LeanStep

SHAPES = [(7, 5), (5,), (3, 7), (11,)]


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in SHAPES]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(*s, generator=g) * 10.0 ** (step % 3 - 1) for s in SHAPES]


def _run(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: range, lean: bool) -> None:
    stepper = LeanStep(opt)
    for k in steps:
        (stepper.zero_grad if lean else opt.zero_grad)()
        for p, grad in zip(params, _grads(k), strict=True):
            p.grad = grad.clone()
        (stepper.step if lean else opt.step)()


OPTIONS: list[dict[str, Any]] = [
    {},
    {"amsgrad": True},
    {"weight_decay": 0.01},
    {"maximize": True, "betas": (0.8, 0.95), "eps": 1e-6},
    {"weight_decay": 0.01, "decoupled_weight_decay": True},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_the_same_bits_as_torch_adam(options: dict[str, Any]) -> None:
    ref, mine = _params(0), _params(0)
    opt_ref = torch.optim.Adam(ref, lr=0.01, fused=True, **options)
    opt_mine = torch.optim.Adam(mine, lr=0.01, fused=True, **options)
    _run(opt_ref, ref, range(6), lean=False)
    _run(opt_mine, mine, range(6), lean=True)
    for a, b in zip(ref, mine, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ref, mine, strict=True):
        for key, value in opt_ref.state[a].items():
            assert torch.equal(value, opt_mine.state[b][key]), key


def test_a_loaded_state_is_the_one_stepped() -> None:
    """load_state_dict (a checkpoint's resume) replaces the state tensors: the next lean step reads the
    new ones, not the lists it kept, and a changed learning rate is read at each step."""
    ref, mine = _params(1), _params(1)
    opt_ref = torch.optim.Adam(ref, lr=0.01, fused=True)
    opt_mine = torch.optim.Adam(mine, lr=0.01, fused=True)
    stepper = LeanStep(opt_mine)
    _run(opt_ref, ref, range(3), lean=False)
    for k in range(3):
        for p, grad in zip(mine, _grads(k), strict=True):
            p.grad = grad
        stepper.step()
    saved = copy.deepcopy(opt_ref.state_dict())  # as read from a file: tensors of its own
    opt_mine.load_state_dict(saved)
    with torch.no_grad():
        for a, b in zip(ref, mine, strict=True):
            b.copy_(a)
    for opt in (opt_ref, opt_mine):
        opt.param_groups[0]["lr"] = 0.003
    for k in range(3, 6):
        for p, q, grad in zip(ref, mine, _grads(k), strict=True):
            p.grad, q.grad = grad.clone(), grad.clone()
        opt_ref.step()
        stepper.step()
    for a, b in zip(ref, mine, strict=True):
        assert torch.equal(a, b)
    assert float(opt_mine.state[mine[0]]["step"]) == 6.0


def test_a_parameter_without_a_gradient_takes_torchs_step() -> None:
    ref, mine = _params(2), _params(2)
    opt_ref, opt_mine = (torch.optim.Adam(ps, lr=0.01, fused=True) for ps in (ref, mine))
    stepper = LeanStep(opt_mine)
    for k in range(4):
        for i, (p, q, grad) in enumerate(zip(ref, mine, _grads(k), strict=True)):
            skip = k == 2 and i == 1
            p.grad = None if skip else grad.clone()
            q.grad = None if skip else grad.clone()
        opt_ref.step()
        stepper.step()
    for a, b in zip(ref, mine, strict=True):
        assert torch.equal(a, b)
    assert float(opt_mine.state[mine[1]]["step"]) == 3.0  # skipped once, as torch does


def test_hooks_and_other_optimizers_go_through_torch() -> None:
    params = _params(3)
    opt = torch.optim.Adam(params, lr=0.01, fused=True)
    seen: list[str] = []
    opt.register_step_pre_hook(lambda *_: seen.append("pre"))
    stepper = LeanStep(opt)
    for p, grad in zip(params, _grads(0), strict=True):
        p.grad = grad
    stepper.step()
    stepper.step()
    assert seen == ["pre", "pre"]

    sgd_params, ref = _params(4), _params(4)
    sgd, sgd_ref = (torch.optim.SGD(ps, lr=0.1, momentum=0.9) for ps in (sgd_params, ref))
    _run(sgd, sgd_params, range(3), lean=True)
    _run(sgd_ref, ref, range(3), lean=False)
    for a, b in zip(ref, sgd_params, strict=True):
        assert torch.equal(a, b)


def test_zero_grad_leaves_none() -> None:
    params = _params(5)
    stepper = LeanStep(torch.optim.Adam(params, lr=0.01, fused=True))
    for p, grad in zip(params, _grads(0), strict=True):
        p.grad = grad
    stepper.zero_grad()
    assert all(p.grad is None for p in params)
