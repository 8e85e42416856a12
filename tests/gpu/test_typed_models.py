"""The GNNs on a GPU: every model's forward and backward on cuda:0 equal the host's (the host runs the CPU
core's attention kernels, the GPU torch's sparse products: the same sums), and a typed training on a GPU
trainer learns what the CPU trainer learns (its typed blocks sampled on the GPU: training.sampler auto)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch.nn import functional

from tests.runtime.launch.test_own_data import EXAMPLES, graphtrain
from tests.runtime.models.test_gradsync import SHAPE, VARIANTS, _build, _data

GPU = torch.device("cuda", 0)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_gnn_computes_on_the_gpu_what_it_computes_on_the_host(name: str) -> None:
    host = _build(name)
    device = copy.deepcopy(host).to(GPU)
    blocks, x, y = _data(0)
    loss = functional.cross_entropy(host(blocks, x), y)
    loss.backward()
    on_gpu = [b.to(GPU) for b in blocks]
    gpu_loss = functional.cross_entropy(device(on_gpu, x.to(GPU)), y.to(GPU))
    gpu_loss.backward()
    torch.testing.assert_close(gpu_loss.cpu(), loss, rtol=1e-4, atol=1e-5)
    for (key, p), q in zip(host.named_parameters(), device.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-5, msg=f"{name} {key}")
    assert SHAPE.num_relations == 3


def test_a_typed_gat_on_a_gpu_trainer_learns_what_the_cpu_trainer_learns(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_data.py"), str(tmp_path / "data")], check=True, timeout=120
    )
    shutil.copy(EXAMPLES / "shop-gat.yaml", tmp_path)
    accuracy = {}
    for device in ("cpu", "cuda"):
        doc = yaml.safe_load((tmp_path / "shop-gat.yaml").read_text())
        doc["metadata"]["name"] = f"shop-{device}"
        doc["spec"]["trainers"] = {"replicas": 1, "device": device}
        spec = tmp_path / f"{device}.yaml"
        spec.write_text(yaml.safe_dump(doc))
        run = tmp_path / "runs" / device
        res = graphtrain("run", str(spec), "--standalone", "--run-dir", str(run), cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        accuracy[device] = json.loads((run / "result.json").read_text())["test_accuracy"]
        on_gpu = "[trainer] sampling on cuda:0" in (run / "logs" / "trainer-0.log").read_text()
        assert on_gpu is (device == "cuda")
    assert accuracy["cuda"] >= 0.95 and abs(accuracy["cuda"] - accuracy["cpu"]) <= 0.02, accuracy
