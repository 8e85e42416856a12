"""The dense Adam step and zero_grad without torch.optim's per-call work around its one kernel.

torch.optim.Adam(fused=True).step() runs one fused kernel over the parameters, and around it a profiler
range, the optimizer hooks, a walk over every parameter's state and a grouping of the tensors by device,
every step. In WordNet's 2x2 GraphSAGE (9 dense parameters, 220k floats) a trainer spent 0.50 ms of CPU
a step in step() and 0.14 ms in zero_grad(), 3 % of its step, against ~0.3 ms in the kernel itself.
Here the same kernel (torch._fused_adam_) is called on lists kept from the last step, so the update is
the same bits (tests/runtime/train/test_lean_step.py), and the optimizer object keeps its state for
checkpoints. Anything off that narrow path (another optimizer, hooks, several groups, a GPU capture, a
parameter without a gradient, state not yet made or replaced by load_state_dict) is torch's own step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import optimizer as optimizer_module


class LeanStep:
    """step() and zero_grad() of `opt`, as torch's but lean where it can be (module docstring)."""

    def __init__(self, opt: torch.optim.Optimizer):
        self.opt = opt
        self.params: list[torch.Tensor] = [p for g in opt.param_groups for p in g["params"]]
        self._lists: tuple[list[torch.Tensor], ...] | None = None
        self._state: Any = None  # the state dict the lists were taken from (load_state_dict replaces it)

    def zero_grad(self) -> None:
        """The gradients set to None (torch's default), without its profiler range."""
        if not _bare(self.opt):
            self.opt.zero_grad(set_to_none=True)
            return
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        group = self._group()
        if group is None or any(p.grad is None for p in self.params) or not self._ready():
            self.opt.step()
            return
        assert self._lists is not None
        params, exp_avgs, exp_avg_sqs, max_sqs, steps = self._lists
        grads = [p.grad for p in params]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        fused = torch._fused_adamw_ if group.get("decoupled_weight_decay") else torch._fused_adam_
        fused(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            max_sqs,
            steps,
            amsgrad=group["amsgrad"],
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
            grad_scale=None,
            found_inf=None,
        )

    def _group(self) -> dict[str, Any] | None:
        """The one parameter group when the lean path applies to it, else None."""
        opt = self.opt
        if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1 or not _bare(opt):
            return None
        group = opt.param_groups[0]
        if not group.get("fused") or group.get("capturable") or group.get("differentiable"):
            return None
        if isinstance(group["lr"], torch.Tensor) or any(isinstance(b, torch.Tensor) for b in group["betas"]):
            return None
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in self.params):
            return None
        return group

    def _ready(self) -> bool:
        """Whether the kept lists hold the optimizer's current state tensors (made by torch's first
        step, and made anew by load_state_dict)."""
        state = self.opt.state
        if self._lists is not None and state is self._state:
            return True
        if any(p not in state for p in self.params):
            return False
        amsgrad = self.opt.param_groups[0]["amsgrad"]
        per = [state[p] for p in self.params]
        if any(not torch.is_tensor(s.get("step")) or s["step"].device.type != "cpu" for s in per):
            return False
        self._lists = (
            list(self.params),
            [s["exp_avg"] for s in per],
            [s["exp_avg_sq"] for s in per],
            [s["max_exp_avg_sq"] for s in per] if amsgrad else [],
            [s["step"] for s in per],
        )
        self._state = state
        return True


def _bare(opt: torch.optim.Optimizer) -> bool:
    """No optimizer hooks, the optimizer's own or global, that torch's step and zero_grad would run."""
    own = (opt._optimizer_step_pre_hooks, opt._optimizer_step_post_hooks)
    everyone = (optimizer_module._global_optimizer_pre_hooks, optimizer_module._global_optimizer_post_hooks)
    return not any(own) and not any(everyone)
