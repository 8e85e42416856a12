"""Where a trainer computes (train/device.py): the device a rank takes, the process group's backend, where
standalone shards keep their tables, and moves that leave CPU training exactly as it was."""

from __future__ import annotations

import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph.loader import Block
from graphtrain.runtime.train.device import (
    process_group_backend,
    standalone_shard_device,
    to_device,
    trainer_device,
)


@pytest.mark.parametrize(
    ("kind", "rank", "visible", "want"),
    [
        ("cpu", 3, 0, "cpu"),
        ("cpu", 3, 8, "cpu"),
        ("cuda", 0, 1, "cuda:0"),  # a pod: its one GPU, whatever its rank
        ("cuda", 5, 1, "cuda:0"),
        ("cuda", 5, 4, "cuda:1"),  # one machine: ranks spread over the GPUs it sees
        ("cuda", 3, 4, "cuda:3"),
    ],
)
def test_a_rank_takes_its_device(kind: str, rank: int, visible: int, want: str) -> None:
    assert trainer_device(kind, rank, visible) == torch.device(want)


def test_a_gpu_trainer_without_a_gpu_says_so() -> None:
    with pytest.raises(GraphtrainError, match="trainers.device is cuda but this trainer sees no GPU"):
        trainer_device("cuda", 0, 0)


def test_nccl_gradients_beside_gloo_helpers() -> None:
    assert process_group_backend("nccl") == "cpu:gloo,cuda:nccl"
    assert process_group_backend("gloo") == "gloo"


def test_on_the_cpu_nothing_is_copied() -> None:
    cpu = torch.device("cpu")
    t = torch.arange(4)
    block = Block(3, 2, torch.tensor([0, 1, 2]), torch.tensor([0, 1]))
    assert to_device(t, cpu) is t and to_device(None, cpu) is None
    blocks = [block]
    assert to_device(blocks, cpu) is blocks


def test_a_block_moves_whole() -> None:
    mean = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([1, 2]), torch.ones(2), (2, 3))
    block = Block(3, 2, torch.tensor([0, 1, 2]), torch.tensor([0, 1]), mean, None)
    moved = block.to(torch.device("cpu"))
    assert (moved.num_src, moved.num_dst, moved.mean_t) == (3, 2, None)
    assert torch.equal(moved.src, block.src) and torch.equal(moved.mean.to_dense(), mean.to_dense())
    with pytest.raises(TypeError, match="cannot move a str"):
        to_device("x", torch.device("meta"))


@pytest.mark.parametrize(
    ("trainer", "shard_servers", "want"),
    [
        ("cpu", "cpu", "cpu"),
        ("cuda:1", "cpu", "cuda:1"),  # beside the model: the trainer's own GPU
        ("cuda:1", "cuda", "cuda:1"),
        ("cpu", "cuda", "cuda:0"),  # the spec put the shards on a GPU
    ],
)
def test_standalone_shards_go_where_the_spec_says(trainer: str, shard_servers: str, want: str) -> None:
    assert standalone_shard_device(torch.device(trainer), shard_servers) == want


def test_a_standalone_client_gathers_host_tables_itself_and_leaves_device_ones_to_the_dispatcher() -> None:
    client = kvstore.standalone(1)
    transport = client.transport
    transport.states[0].create("host", 4, (2,), "float32", 0, 4, {"kind": "zeros"})
    assert transport.local_view(0, "host") is not None
    t = transport.states[0].create("dev", 4, (2,), "float32", 0, 4, {"kind": "zeros"})
    t.data = torch.empty((4, 2), device="meta")  # a table that is not in host memory (a GPU's)
    assert transport.local_view(0, "dev") is None


def test_a_cpu_model_has_no_device_generator_to_seed() -> None:
    from graphtrain.runtime.train.device import device_generator

    assert device_generator(torch.device("cpu")) is None
