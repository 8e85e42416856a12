"""training.cudaGraph on a CPU (train/graphed.py, optim/late.py): the captured step's own code, run eagerly
over its fixed buffers with the CPU twin of the CUDA core's deferred checks. It trains bit for bit as the
eager step over every occurrence does; it reads nothing back inside the step but the twin's own checks
(on a GPU those are the core's device flags); a bad id or a NaN gradient is reported at the next step,
naming its step, which changed nothing. The capture and replay themselves run in tests/gpu."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphtrain.contract.spec import GraphTraining, Sharding
from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.errors import GraphtrainError, NonFiniteGradient, SparseInputError
from graphtrain.runtime.optim import OptimConfig, SparseOptimizer
from graphtrain.runtime.optim.late import LateFlags, first_bad
from graphtrain.runtime.train.graphed import GraphedStep
from graphtrain.runtime.train.kge import LinkPrediction
from tests.runtime.train.test_resume import final_state, one_thread, partitions, train  # noqa: F401

# ops whose result the host must read (a wait for the device, which no CUDA graph can hold)
HOST_READS = {
    "_local_scalar_dense",
    "nonzero",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "masked_select",
}


def collective(gt: GraphTraining, graph: bool) -> GraphTraining:
    spec = gt.model_copy(deep=True)
    spec.spec.training.checkpoint_interval = 0
    spec.spec.training.cuda_graph = graph
    for table in spec.spec.embeddings:
        table.sharding = Sharding.collective
    return spec


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["transe", "transe-joint"])
def test_the_graphed_step_trains_bit_for_bit_as_the_eager_one(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions[kind]
    monkeypatch.setattr(LinkPrediction, "_where_they_lie", lambda self: True)  # the GPU's eager path
    eager, eager_result = train(kind, collective(gt, False), partition, tmp_path / "eager")
    assert eager.task.graphed is None
    graphed, graphed_result = train(kind, collective(gt, True), partition, tmp_path / "graphed")
    step = graphed.task.graphed
    full = len(graphed.task.triples) // graphed.task.batch_size
    assert step is not None and step.runs == full * gt.spec.training.epochs  # every full batch went there
    assert graphed.steps == eager.steps  # the same batches, the same losses to the last bit
    a, b = final_state(eager.task), final_state(graphed.task)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert graphed.task.ent.steps == eager.task.ent.steps  # the count a checkpoint keeps
    assert eager_result is not None and graphed_result == eager_result


class HostReads(TorchDispatchMode):
    """Every op whose result the host reads, with whether the CPU twin's checks made it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            twin = any(f.name == "_deferred_twin" for f in traceback.extract_stack())
            self.seen.append((name, twin))
        return func(*args, **(kwargs or {}))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["transe", "transe-joint"])
def test_the_graphed_step_reads_nothing_back_but_the_twins_checks(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions[kind]
    reads = HostReads()
    original = LinkPrediction._graph_step

    def watched(self: LinkPrediction, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        with reads:
            return original(self, pos, neg)

    monkeypatch.setattr(LinkPrediction, "_graph_step", watched)
    spec = collective(gt, True)
    spec.spec.training.epochs = 1
    recorded, _ = train(kind, spec, partition, tmp_path / "graphed")
    assert recorded.task.graphed is not None and recorded.task.graphed.runs > 0
    assert reads.seen and all(twin for _, twin in reads.seen), reads.seen
    # and the eager step does read (the check above can see a read)
    monkeypatch.setattr(LinkPrediction, "_graph_step", original)
    eager = HostReads()
    with eager:
        train(kind, collective(gt, False), partition, tmp_path / "eager")
    assert any(not twin for _, twin in eager.seen)


def table_step(
    late: LateFlags, rows: int = 50, dim: int = 4, n: int = 8, kind: str = "adam"
) -> tuple[GraphedStep, CollectiveEmbedding]:
    """A captured step over one rows x dim table (on late's device): the rows of n ids, scaled, squared
    and summed, then the table's sparse step (tests/gpu runs it on a GPU)."""
    device = late.device
    init = {"kind": "uniform", "low": -1.0, "high": 1.0, "seed": 3}
    table = CollectiveEmbedding(rows, dim, "e", init, device=device)
    opt = SparseOptimizer([table], OptimConfig(kind, 0.1))  # type: ignore[arg-type]
    ids = torch.zeros(n, dtype=torch.int64, device=device)
    scale = torch.ones(1, device=device)

    def step() -> torch.Tensor:
        late.begin()
        table.late = late
        try:
            loss = (table(ids) * scale).pow(2).sum()
            loss.backward()
            opt.step()
        finally:
            table.late = None
        return loss.detach()

    return GraphedStep(step, [ids, scale], late), table


def test_a_bad_id_is_reported_at_the_next_step_and_its_step_changed_nothing() -> None:
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 50, (8,), generator=gen) for _ in range(4)]
    batches[1][5] = 50  # past the last row
    one = torch.ones(1)
    step, table = table_step(LateFlags("cpu"))
    step([batches[0], one], 1)
    after_first = table.weight.clone()
    step([batches[1], one], 2)  # flagged on the "device": nothing raised yet, nothing touched
    assert torch.equal(table.weight, after_first)
    with pytest.raises(SparseInputError, match=r"step 2: lookup of 'e': ids\[5\] is outside .*\[0, 50\)"):
        step([batches[2], one], 3)
    # the twin that never saw batch 2: steps 1 and 3 give the same rows
    twin, twin_table = table_step(LateFlags("cpu"))
    twin([batches[0], one], 1)
    twin([batches[2], one], 3)
    assert torch.equal(table.weight, twin_table.weight)
    assert torch.equal(table.state["exp_avg"], twin_table.state["exp_avg"])


def test_a_non_finite_gradient_is_reported_at_the_next_step_or_when_settled() -> None:
    ids = torch.arange(8)
    step, table = table_step(LateFlags("cpu"))
    step([ids, torch.ones(1)], 1)
    before = table.weight.clone()
    step([ids, torch.tensor([float("nan")])], 2)
    assert torch.equal(table.weight, before)
    with pytest.raises(NonFiniteGradient, match=r"step 2: gradients of 'e': gradient row 0 holds NaN") as got:
        step.settle()
    assert got.value.row == 0
    step.settle()  # read once
    step([ids, torch.ones(1)], 3)
    assert not torch.equal(table.weight, before)


def test_a_non_finite_gradient_of_one_table_steps_neither() -> None:
    """Two tables stepped in turn, the second's gradient NaN: both are screened before either steps, and
    the first table's step is gated by the second's screen, so neither changes."""
    late = LateFlags("cpu")
    init = {"kind": "uniform", "low": -1.0, "high": 1.0, "seed": 3}
    a, b = (CollectiveEmbedding(20, 4, name, init) for name in ("a", "b"))
    opts = [SparseOptimizer([t], OptimConfig("adam", 0.1)) for t in (a, b)]
    ids, scale = torch.zeros(6, dtype=torch.int64), torch.ones(1)

    def step() -> torch.Tensor:
        late.begin()
        a.late = b.late = late
        try:
            loss = a(ids).pow(2).sum() + (b(ids) * scale).pow(2).sum()
            loss.backward()
            for t in (a, b):
                late.screen(f"gradients of {t.name!r}", t.pending()[1])
            for opt in opts:
                opt.step()
        finally:
            a.late = b.late = None
        return loss.detach()

    graphed = GraphedStep(step, [ids, scale], late)
    graphed([torch.arange(6), torch.ones(1)], 1)
    before = a.weight.clone(), b.weight.clone()
    graphed([torch.arange(6), torch.tensor([float("nan")])], 2)
    with pytest.raises(
        NonFiniteGradient, match=r"step 2: gradients of 'b' \(before any step\): gradient row 0"
    ):
        graphed.settle()
    assert torch.equal(a.weight, before[0]) and torch.equal(b.weight, before[1])


def test_inputs_of_another_shape_are_refused_before_anything_runs() -> None:
    step, table = table_step(LateFlags("cpu"))
    before = table.weight.clone()
    with pytest.raises(ValueError, match=r"inputs of shapes \[\(8,\), \(1,\)\], got \(7,\)"):
        step([torch.arange(7), torch.ones(1)], 1)
    assert torch.equal(table.weight, before) and step.runs == 0


def test_first_bad_is_the_first_position_out_of_range() -> None:
    assert int(first_bad(torch.tensor([3, 9, -1, 10, 2]), 10)) == 2
    assert int(first_bad(torch.tensor([3, 10, -1]), 10)) == 1
    assert int(first_bad(torch.tensor([-1, 0]), 10)) == 0
    assert int(first_bad(torch.tensor([0, 9]), 10)) == -1
    assert int(first_bad(torch.empty(0, dtype=torch.int64), 10)) == -1


def test_checks_asked_in_another_order_are_refused() -> None:
    late = LateFlags("cpu")
    late.begin()
    late.slot("lookup of 'a'", 5)
    late.slot("gradients of 'a'", 5)
    late.begin()
    with pytest.raises(RuntimeError, match="changed order"):
        late.slot("gradients of 'a'", 5)


@pytest.mark.timeout(120)
def test_a_run_that_cannot_be_captured_is_refused_in_one_line(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    gt, partition = partitions["transe"]
    spec = gt.model_copy(deep=True)
    spec.spec.training.cuda_graph = True  # server tables: bypasses the spec's rule, as a stale CR might
    with pytest.raises(GraphtrainError, match=r"training.cudaGraph: embeddings\[\w+\] must have sharding"):
        train("transe", spec, partition, tmp_path / "refused")


def test_the_spec_takes_cuda_graph_on_a_kge_model_with_collective_float32_tables() -> None:
    from graphtrain.contract.spec import check
    from tests.contract.spec_cases import TRANSE, edit

    def capturable(s: dict) -> None:
        s.setdefault("training", {}).update(cudaGraph=True)
        for t in s["embeddings"]:
            t["sharding"] = "collective"

    assert check(edit(TRANSE, capturable))[1] == []
    half = edit(TRANSE, lambda s: (capturable(s), s["embeddings"][0].update(dtype="bfloat16")))
    assert [p.path for p in check(half)[1]] == ["spec.training.cudaGraph"]
    rotate = edit(
        TRANSE, lambda s: (capturable(s), s["model"].update(kind="rotate"), s["model"].pop("norm", None))
    )
    assert "spec.training.cudaGraph" in [p.path for p in check(rotate)[1]]
    two = edit(TRANSE, lambda s: (capturable(s), s.update(trainers={"replicas": 2})))
    assert [p.path for p in check(two)[1]] == ["spec.training.cudaGraph"]
    skip = edit(TRANSE, lambda s: (capturable(s), s["embeddings"][1].update(nonFiniteGrads="skip")))
    assert [p.path for p in check(skip)[1]] == ["spec.training.cudaGraph"]


def test_the_capture_holds_only_its_own_thread_to_the_capture_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GraphSAGE trainer's loader thread (training.prefetch) pins, copies and samples on the GPU while
    the step is captured: under torch's default mode ("global") any of its unsafe calls fails in that
    thread and invalidates the capture. Captured as on a GPU, with torch.cuda's graph recorded."""
    modes: list[str] = []

    @contextlib.contextmanager
    def graph(g: Any, capture_error_mode: str = "global", **_: Any) -> Any:
        modes.append(capture_error_mode)
        yield

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", graph)
    step = GraphedStep(lambda: torch.zeros(()), [torch.zeros(2)], LateFlags("cpu"))
    step._capture()
    assert step.captured and modes == ["thread_local"]
