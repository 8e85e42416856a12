"""`graphtrain plan` (runtime/capacity.py): each role's memory from the partition's files and the spec's
tables, the bytes a trainer's data path moves across hosts (replayed on real sampled batches), the
shard count that fits a pod, and one clear line for a bad option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from graphtrain.contract.spec import EmbeddingTable, Sharding, load_yaml
from graphtrain.runtime import capacity, planning
from graphtrain.runtime.kvstore.client.transport import Answer, Call
from graphtrain.runtime.native.keymap import KeyMap
from graphtrain.runtime.partition.format import load_config
from tests import forked
from tests.runtime.launch.test_run import CLI, graph_file, sage_spec

__all__ = ["graph_file"]  # the module's fixture, used here
MiB = 2**20


@pytest.mark.parametrize(
    ("text", "want"), [("1gbit", 125e6), ("100mbit", 12.5e6), ("125mbps", 125e6), ("8kbit", 1e3)]
)
def test_a_bandwidth_is_read_in_tc_units(text: str, want: float) -> None:
    assert capacity.bandwidth_bytes(text) == pytest.approx(want)


def test_a_bad_bandwidth_names_the_option() -> None:
    with pytest.raises(ValueError, match="--bandwidth 'fast'"):
        capacity.bandwidth_bytes("fast")


@pytest.mark.parametrize(
    ("rate", "said"),
    [("10gbit", "1,250 MB/s"), ("1gbit", "125 MB/s"), ("100mbit", "12.5 MB/s"), ("1mbit", "0.125 MB/s")],
)
def test_the_time_on_the_link_names_its_rate(rate: str, said: str) -> None:
    """A link under 1 MB/s read "0 MB/s" beside the seconds it takes."""
    wire = capacity.Wire(sent=1e6, received=2e5, batch_bytes=0, input_nodes=1.0)
    (line,) = capacity.plan_lines(capacity.CapacityPlan([], [wire], 2), capacity.bandwidth_bytes(rate))[:1]
    ms = 1000 * 1e6 / capacity.bandwidth_bytes(rate)
    assert line.endswith(f"; {ms:.1f} ms at {said}"), line


def test_the_shard_count_that_fits_splits_the_data_and_keeps_a_process_each() -> None:
    base = capacity.SHARD_BASE
    needs = [capacity.RoleNeed(f"shard-{i}", {"process": base, "data": 300 * MiB}) for i in range(2)]
    assert capacity.shards_that_fit(needs, base + 600 * MiB) == 1
    assert capacity.shards_that_fit(needs, base + 100 * MiB) == 6
    assert capacity.shards_that_fit(needs, base) is None  # the process alone fills the pod


class _Inner:
    num_shards = 2

    def call_many(self, calls: list[Call], timeout: float | None = None) -> list[Answer]:
        return [Answer({}, [np.zeros(3, np.int64)]) for _ in calls]

    def local_view(self, shard: int, name: str) -> str:
        return "view"

    def local_graph(self, shard: int) -> str:
        return "graph"


def test_only_calls_to_another_hosts_shards_are_counted_and_local_ones_read_in_place() -> None:
    t = capacity.CountingTransport(_Inner(), host_of_shard=[0, 1], here=0)
    out = np.empty((4, 8), np.float32)
    t.call_many(
        [Call(0, "pull", "x", [np.arange(4)], out=out), Call(1, "pull", "x", [np.arange(4)], out=out)]
    )
    assert t.sent == 4 * 8  # the ids to shard 1
    assert t.received == 4 * 8 * 4 + 3 * 8  # its rows (into `out`) and its answer's arrays
    assert t.local_view(0, "x") == "view" and t.local_view(1, "x") is None
    assert t.local_graph(0) == "graph" and t.local_graph(1) is None


@pytest.fixture(scope="module")
def planted(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    spec_path = tmp_path_factory.mktemp("plan") / "planted.yaml"
    spec_path.write_text(yaml.safe_dump(sage_spec(graph_file)))
    config = planning.partition_for(load_yaml(spec_path.read_text()), spec_path, None, spec_path.parent / "p")
    return spec_path, config


@pytest.mark.timeout(300)
def test_memory_is_the_files_and_tables_and_the_wire_is_empty_on_one_host(planted: tuple[Path, Path]) -> None:
    spec_path, config = planted
    gt, cfg = load_yaml(spec_path.read_text()), load_config(config)
    plan = capacity.make_plan(gt.spec, cfg, hosts=1)
    shard = plan.role("shard-1")[0]
    part = cfg.root / "part-1"
    assert shard.items["graph"] == sum(f.stat().st_size for f in part.glob("*.npy"))
    assert shard.items["node data"] == sum(f.stat().st_size for f in (part / "ndata").glob("*"))
    rows = int(cfg.node_bounds[2] - cfg.node_bounds[1])
    assert shard.items["table node"] == rows * 8 * 4
    assert shard.items["table node optimizer"] == rows * 8 * 8 + rows * 8  # Adam: 2 moments, a count a row
    # every node's layer outputs for evaluation: hidden 32, then the 4 classes
    assert shard.items["layer outputs (evaluation, inference)"] == rows * 4 * (32 + 4)
    assert [w.sent + w.received for w in plan.wires] == [0, 0]  # both shards are on the one host
    assert all(t.items["batch"] > 0 for t in plan.role("trainer-"))


@pytest.mark.timeout(300)
def test_on_two_hosts_each_trainer_moves_bytes_and_the_cli_says_so(planted: tuple[Path, Path]) -> None:
    spec_path, config = planted
    plan = capacity.make_plan(load_yaml(spec_path.read_text()).spec, load_config(config), hosts=2)
    assert all(w.sent > 0 and w.received > w.sent for w in plan.wires)  # ids out, rows and edges back
    argv = [*CLI, "plan", str(spec_path), "--partition", str(config), "--hosts", "2"]
    done = subprocess.run([*argv, "--bandwidth", "1gbit", "--memory", "1Gi"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "trainer-1 per step across hosts (2 host(s))" in done.stdout
    assert "shard servers that fit 1.0 GiB each: 1" in done.stdout
    bad = forked.complete_argv([*argv, "--memory", "lots"])  # torch imported: a refusal, not ~2.5 s
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "error: --memory: 'lots' is not a memory quantity such as '4Gi' or '512Mi'"


def test_validate_refuses_a_shard_memory_limit_below_its_share(graph_file: Path, tmp_path: Path) -> None:
    doc = sage_spec(graph_file)
    doc["spec"]["shardServers"] = {"resources": {"limits": {"memory": "100Mi"}}}
    spec_path = tmp_path / "small.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    done = forked.complete_argv([*CLI, "validate", str(spec_path)])  # forked with torch imported
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        "spec.shardServers.resources.limits.memory: 100Mi cannot hold a shard server's share" in done.stderr
    )
    need = capacity.shard_estimate(load_yaml(spec_path.read_text()).spec, _graph(graph_file))
    assert f"each of its 2 shard servers needs about {capacity.human(need)}" in done.stderr
    doc["spec"]["shardServers"]["resources"]["limits"]["memory"] = "2Gi"
    spec_path.write_text(yaml.safe_dump(doc))
    assert forked.complete_argv([*CLI, "validate", str(spec_path)]).returncode == 0


def _graph(path: Path) -> object:
    from graphtrain.runtime.data import datasets

    return datasets.load_source(load_yaml(yaml.safe_dump(sage_spec(path))).spec.graph, None)


def test_a_feature_table_has_a_row_per_feature_column(planted: tuple[Path, Path]) -> None:
    cfg = load_config(planted[1])
    words = EmbeddingTable.model_validate({"name": "word", "dim": 8, "keys": "features"})
    assert capacity.table_rows(words, cfg) == 16  # the planted graph's feature columns
    assert capacity.shard_rows(words, cfg, 1) == 8  # an even share of 2 shards


def test_a_table_over_node_types_has_a_row_per_node_of_them_where_they_are() -> None:
    # 2 parts: part 0 holds 4 users and 6 items, part 1 one user, 3 shops and 3 items
    data = {
        "node_bounds": [0, 10, 17],
        "type_bounds": [[0, 4, 4, 10], [10, 11, 14, 17]],
        "ntype_names": ["user", "shop", "item"],
    }
    cfg = SimpleNamespace(data=data, num_parts=2)
    shops = EmbeddingTable.model_validate({"name": "shop_emb", "dim": 4, "nodeTypes": ["shop"]})
    assert capacity.table_rows(shops, cfg) == 3
    assert [capacity.shard_rows(shops, cfg, p) for p in (0, 1)] == [0, 3]
    every = EmbeddingTable.model_validate({"name": "node", "dim": 4})
    assert [capacity.shard_rows(every, cfg, p) for p in (0, 1)] == [10, 7]
    graph = SimpleNamespace(
        feat=None,
        num_nodes=17,
        ntype=np.array([0] * 5 + [1] * 3 + [2] * 9),
        ntype_names=np.array(data["ntype_names"]),
    )
    assert capacity._graph_rows(shops, graph) == 3 and capacity._graph_rows(every, graph) == 17


def test_a_dynamic_table_needs_its_share_of_the_capacity_and_a_key_map(planted: tuple[Path, Path]) -> None:
    spec_path, config = planted
    doc = load_yaml(spec_path.read_text()).model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 101}
    spec = load_yaml(yaml.safe_dump(doc)).spec
    cfg = load_config(config)
    shard = capacity.shard_need(spec, cfg, 1)
    assert shard.items["table node"] == 50 * 8 * 4  # keys k mod 2 = 1 of 101 rows: 50
    assert shard.items["key map of node"] == KeyMap.bytes_for(50)
    doc["spec"]["embeddings"][0]["sharding"] = "collective"
    spec = load_yaml(yaml.safe_dump(doc)).spec
    trainer = capacity.trainer_need(spec, cfg, 0, 0)
    assert trainer.items["table node (share)"] == 51 * 8 * 4  # rank 0 of 2 holds 51 of 101
    assert "table node" not in capacity.shard_need(spec, cfg, 0).items


def collective(graph_file: Path, tmp_path: Path, **trainers: object) -> Path:
    """The planted spec with its node table on the trainers: a dynamic vocabulary of 20M rows (10M a
    trainer: 320 MB of rows, 720 MB of Adam state), and `trainers` in its trainers section."""
    doc = sage_spec(graph_file)
    table = doc["spec"]["embeddings"][0]
    table.update(sharding="collective", vocabulary={"kind": "dynamic", "capacity": 20_000_000})
    doc["spec"]["trainers"].update(trainers)
    spec_path = tmp_path / "collective.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    return spec_path


def test_validate_refuses_a_trainer_memory_limit_below_its_collective_share(
    graph_file: Path, tmp_path: Path
) -> None:
    spec_path = collective(graph_file, tmp_path, resources={"limits": {"memory": "1Gi"}})
    done = forked.complete_argv([*CLI, "validate", str(spec_path)])  # forked with torch imported
    assert done.returncode == 1 and "Traceback" not in done.stderr
    share = 10_000_000 * 8 * 4 + 10_000_000 * (8 * 8 + 8)  # rows, Adam's moments and step counts
    share += KeyMap.bytes_for(10_000_000)  # and the key map of its share
    need = -(-(capacity.TRAINER_BASE + share) // MiB)
    said = (
        f"spec.trainers.resources.limits.memory: 1Gi is below the {need}Mi a trainer needs (its process, and"
    )
    assert said in done.stderr
    # 3Gi holds it; on its GPU the rows and state leave host memory, the key map (0.65 GiB) stays
    for fits in (
        {"resources": {"limits": {"memory": "3Gi"}}},
        {"device": "cuda", "resources": {"limits": {"memory": "2Gi"}}},
    ):
        spec_path = collective(graph_file, tmp_path, **{"resources": {"limits": {"memory": "1Gi"}}, **fits})
        assert forked.complete_argv([*CLI, "validate", str(spec_path)]).returncode == 0


def test_the_partition_job_reports_what_each_role_needs(graph_file: Path, tmp_path: Path) -> None:
    """The operator's partition Job (--spec, --report-file): its termination message says the largest
    shard server's need and a trainer's (status.partition.memory)."""
    from graphtrain.contract.spec import PartitionStatus

    spec_path, report, out = collective(graph_file, tmp_path), tmp_path / "termination-log", tmp_path / "p"
    argv = [*CLI, "partition", "--spec", str(spec_path), "--out", str(out), "--report-file", str(report)]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    status = PartitionStatus.model_validate_json(report.read_text())
    gt, cfg = load_yaml(spec_path.read_text()), load_config(out)
    assert status.memory is not None
    assert status.memory.shard_server == max(capacity.shard_need(gt.spec, cfg, s).total for s in range(2))
    keymap = KeyMap.bytes_for(10_000_000)
    assert status.memory.trainer == capacity.TRAINER_BASE + 10_000_000 * (8 * 4 + 8 * 8 + 8) + keymap
    assert len(report.read_text()) < 4096


def test_the_partition_job_measures_memory_without_importing_torch() -> None:
    """The partition Job never imports torch (seconds of start and 224 MiB beside METIS' graph)."""
    code = "import sys; from graphtrain.runtime import capacity; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_what_lives_on_a_gpu_is_not_host_memory(planted: tuple[Path, Path]) -> None:
    """With shardServers.device cuda a shard server's tables and their state are on its GPU: its host
    need is its process, graph and node data."""
    from graphtrain.contract.spec import Device

    gt, cfg = load_yaml(planted[0].read_text()), load_config(planted[1])
    servers = gt.spec.shard_servers.model_copy(update={"device": Device.cuda})
    cuda = gt.spec.model_copy(update={"shard_servers": servers})
    host = max(
        sum(v for k, v in capacity.shard_need(gt.spec, cfg, s).items.items() if not k.startswith("table "))
        for s in range(2)
    )
    assert (
        capacity.memory_need(cuda, cfg).shard_server == host < capacity.memory_need(gt.spec, cfg).shard_server
    )


@pytest.mark.timeout(300)
def test_the_replay_pulls_a_node_type_tables_rows_only_for_its_types(tmp_path: Path) -> None:
    """users carry a table, items do not: the replayed step pulls (and pushes) fewer row bytes than the same
    table over every node, and the plan runs (it pulled every input node's row from a table of users)."""
    from tests.runtime.launch.test_run_node_type_embedding import spec as typed_spec
    from tests.runtime.launch.test_run_node_type_embedding import write_data

    write_data(tmp_path)
    row_bytes = []
    for name, table in (("users", {}), ("every", {"nodeTypes": None})):
        path = typed_spec(tmp_path, name, 1, **table)
        doc = load_yaml(path.read_text())
        cfg = load_config(planning.partition_for(doc, path, None, tmp_path / f"p-{name}"))
        plan = capacity.make_plan(doc.spec, cfg, hosts=2)
        row_bytes.append(sum(w.work.row_bytes for w in plan.wires if w.work is not None))
    assert 0 < row_bytes[0] < row_bytes[1]


@pytest.mark.timeout(300)
def test_a_collective_node_tables_lookups_cross_hosts_all_to_all_in_its_dtype(
    planted: tuple[Path, Path],
) -> None:
    """The node table sharded over the trainers: its rows move all-to-all between trainers (counted by
    exchange.step_bytes), not to and from the shard servers; in bfloat16 each key moves 24 + 28 bytes
    (ids, rows; ids, gradients and counts) where float32 moves 40 + 44."""
    spec_path, config = planted
    gt, cfg = load_yaml(spec_path.read_text()), load_config(config)
    server = capacity.make_plan(gt.spec, cfg, hosts=2).wires
    wires = {}
    for dtype in ("float32", "bfloat16"):
        table = gt.spec.embeddings[0].model_copy(update={"sharding": Sharding.collective, "dtype": dtype})
        spec = gt.spec.model_copy(update={"embeddings": [table]})
        wires[dtype] = capacity.make_plan(spec, cfg, hosts=2).wires
    for r in range(2):
        assert server[r].alltoall == 0 and wires["float32"][r].alltoall > 0
        assert wires["float32"][r].sent - wires["float32"][r].alltoall < server[r].sent  # no row pulls
        assert wires["bfloat16"][r].alltoall == pytest.approx(wires["float32"][r].alltoall * 52 / 84)
        # and the step-time model prices no shard pull or push of its rows
        work, served = wires["float32"][r].work, server[r].work
        assert work is not None and served is not None and work.row_bytes == 0 < served.row_bytes


def test_the_partition_steps_need_is_the_algorithms_that_made_it(tmp_path: Path) -> None:
    """A partition fennel made is planned at fennel's estimate, which grows with the parts (its
    refinement's counters), not at METIS': at 40 parts of a small graph, more."""
    from graphtrain.runtime.partition import memory, streaming
    from tests.conftest import planted_graph
    from tests.runtime.partition.test_fennel import node_only, save_edges

    g = planted_graph(n=3000, seed=1)
    path, _ = streaming.partition_stream(
        node_only(g),
        save_edges(g, tmp_path / "edges"),
        40,
        tmp_path / "p",
        balance=["nodes"],
        max_imbalance=0.05,
        seed=0,
    )
    cfg = load_config(path)
    need = capacity.partition_need(cfg, 0).items["partitioning"]
    assert need == memory.streaming_need(g.num_nodes, g.num_edges, 40, streaming.CHUNK_EDGES, 0)
    assert need > memory.estimate(g.num_nodes, g.num_edges)
