"""A GraphSAGE input layer's features read in place (loader.MeanInput, GNNEncoder.mean_input): where every
shard lies in this process, a batch's fetch sums each destination's sampled in-neighbours' feature rows
from the shards' tables and copies out only the destinations' rows, instead of every input row.

Trained on in-process shards (a planted graph: features alone, features beside a node embedding, and
bfloat16 on padded blocks), a run that reads the features so takes the very steps of one that pulls
every row: the same batches, the same losses and the same learnt values, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.graph.loader import Block, MeanInput
from graphtrain.runtime.models.graphsage import SAGEConv
from graphtrain.runtime.train.encoder import GNNEncoder
from tests.runtime.train.test_resume import one_thread, partitions, train  # noqa: F401

REAL = GNNEncoder.mean_input


def run(partition: Path, doc: dict, run_dir: Path, means: bool, monkeypatch: pytest.MonkeyPatch):
    """One standalone trainer's steps, its final learnt values and how many batches came as means."""
    made: list[bool] = []

    def counted(self: GNNEncoder, mb: Any, feat: Any) -> MeanInput | None:
        got = REAL(self, mb, feat) if means else None
        made.append(got is not None)
        return got

    monkeypatch.setattr(GNNEncoder, "mean_input", counted)
    recorded, _ = train("graphsage", load_yaml(yaml.safe_dump(doc)), partition, run_dir)
    task = recorded.task
    learnt = {k: v.clone() for k, v in task.model.state_dict().items()}
    if task.emb is not None:
        learnt["emb"] = task.emb.rows(torch.arange(task.emb.num_embeddings))
    return recorded.steps, learnt, made


@pytest.mark.timeout(240)
@pytest.mark.parametrize("inputs", ["features", "features+embedding", "bfloat16"])
def test_a_run_reading_the_features_in_place_takes_the_same_steps_bit_for_bit(
    inputs: str,
    partitions: dict,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions["graphsage"]
    doc = gt.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["model"]["useFeatures"] = True
    doc["spec"]["training"]["epochs"] = 2
    if inputs != "features+embedding":
        doc["spec"]["model"].pop("nodeEmbedding")
        doc["spec"].pop("embeddings")
    if inputs == "bfloat16":  # float32 GEMMs done in bfloat16 on padded blocks (padding.py)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
        doc["spec"]["training"]["mixedPrecision"] = "bfloat16"
    pulled, pulled_state, none = run(partition, doc, tmp_path / "pulled", False, monkeypatch)
    read, read_state, made = run(partition, doc, tmp_path / "read", True, monkeypatch)
    assert made and all(made), "every batch's features were read in place"
    assert not any(none)
    assert read == pulled  # the same batches and the same losses, bit for bit
    assert read_state.keys() == pulled_state.keys()
    for key, value in pulled_state.items():
        assert torch.equal(read_state[key], value), key


def _block(rng: torch.Generator, num_dst: int, num_src: int) -> Block:
    from graphtrain.runtime.graph.loader import mean_matrices

    counts = torch.randint(0, 6, (num_dst,), generator=rng).numpy()
    src = torch.randint(0, num_src, (int(counts.sum()),), generator=rng).numpy()
    mean, mean_t, order = mean_matrices(counts, src, num_src)
    dst = torch.repeat_interleave(torch.arange(num_dst), torch.from_numpy(counts))
    return Block(num_src, num_dst, torch.from_numpy(src), dst, mean, mean_t, order=order)


def test_a_layer_reads_a_mean_input_as_the_rows_it_stands_for_and_refuses_a_wrong_count() -> None:
    """SAGEConv over a MeanInput: the output and every weight's gradient of the rows it stands for, as
    the whole input and as frozen columns beside a learnable one; a count that is not the block's
    destinations' is refused by name."""
    rng = torch.Generator().manual_seed(0)
    block = _block(rng, 40, 150)
    x = torch.randn(150, 12, generator=rng)
    e = torch.randn(150, 4, generator=rng, requires_grad=True)
    given = MeanInput(x[:40].clone(), torch.sparse.mm(block.mean, x))
    for frozen in (False, True):
        torch.manual_seed(1)
        layer = SAGEConv(16 if frozen else 12, 8, frozen=12 if frozen else 0)
        outs, grads = [], []
        for h in (x, given):
            layer.zero_grad()
            out = layer(block, e, h) if frozen else layer(block, h)
            out.square().sum().backward()
            outs.append(out.detach())
            grads.append([p.grad.clone() for p in layer.parameters()])
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(grads[1], grads[0], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    short = MeanInput(x[:39], given.mean[:39])
    with pytest.raises(ValueError, match="a mean input of 39 rows for 40 destinations"):
        SAGEConv(12, 8)(block, short)


def test_a_learnable_mean_input_gives_its_stand_in_the_rows_gradient() -> None:
    """A learnable input as its mean and destination rows (the embedding read where it lies): the layer's
    output, its weights' gradients and the gradient its stand-in leaf receives are those of the whole
    rows, beside frozen columns or alone; the stand-in's values are never read."""
    rng = torch.Generator().manual_seed(2)
    block = _block(rng, 40, 150)
    x = torch.randn(150, 12, generator=rng)
    rows = torch.randn(150, 4, generator=rng)
    frozen = MeanInput(x[:40].clone(), torch.sparse.mm(block.mean, x))
    for with_frozen in (False, True):
        torch.manual_seed(3)
        layer = SAGEConv(16 if with_frozen else 4, 8, frozen=12 if with_frozen else 0)
        outs, grads, src_grads = [], [], []
        for given in (False, True):
            layer.zero_grad()
            if given:
                src = torch.full((1, 4), float("nan")).expand(150, 4).requires_grad_()  # never read
                e: torch.Tensor | MeanInput = MeanInput(
                    rows[:40].clone(), torch.sparse.mm(block.mean, rows), src
                )
            else:
                src = rows.clone().requires_grad_()
                e = src
            out = layer(block, e, frozen) if with_frozen else layer(block, e)
            out.square().sum().backward()
            outs.append(out.detach())
            grads.append([p.grad.clone() for p in layer.parameters() if p.grad is not None])
            src_grads.append(src.grad)
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(grads[1], grads[0], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(src_grads[1], src_grads[0], rtol=1e-5, atol=1e-5)
    wrong = MeanInput(rows[:40], torch.sparse.mm(block.mean, rows), torch.zeros(149, 4, requires_grad=True))
    with pytest.raises(ValueError, match="learnable mean input"):
        SAGEConv(4, 8)(block, wrong)
