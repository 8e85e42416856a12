"""The dense optimizer of every kind steps a CUDA trainer's model (runtime/train/dense.dense_optimizer):
Adagrad's fused kernel is CPU-only in torch releases before its CUDA one, which refuse a CUDA parameter
at the first step (the GPU image's torch may be one), so there it takes torch's default; Adam and SGD are
fused. Each step equals the same optimizer's on the CPU."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime.train.dense import dense_optimizer


@pytest.mark.parametrize("kind", ["adam", "sgd", "adagrad"])
def test_every_dense_optimizer_steps_on_cuda_as_on_the_cpu(kind: str) -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Linear(16, 8)
    gpu = torch.nn.Linear(16, 8).cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(32, 16)
    opts = [dense_optimizer(kind, m.parameters(), 0.01) for m in (cpu, gpu)]
    for _ in range(3):
        for model, opt, inputs in zip((cpu, gpu), opts, (x, x.cuda()), strict=True):
            opt.zero_grad()
            model(inputs).square().sum().backward()
            opt.step()
    for a, b in zip(cpu.parameters(), gpu.parameters(), strict=True):
        torch.testing.assert_close(a, b.cpu(), rtol=1e-5, atol=1e-6)
