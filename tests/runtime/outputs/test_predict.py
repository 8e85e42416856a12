"""`graphtrain predict`: GraphSAGE class probabilities and output embeddings per node, KGE top-k answers,
all under the user's own ids and labels, from a checkpoint and its partition (no servers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from graphtrain.contract.spec import GraphTraining, load_yaml
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import kvstore, partition
from graphtrain.runtime import predict as prediction
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph, random_masks
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.models.graphsage import GraphSAGE
from graphtrain.runtime.tensor import DistEmbedding, PartitionBook
from graphtrain.runtime.train.dense import save_dense
from graphtrain.runtime.train.resumable import model_record
from tests.conftest import planted_graph
from tests.runtime.outputs.test_export import fails, ok

N, CLASSES, FEAT, EMB, HIDDEN = 200, ["blue", "green", "red"], 6, 4, 8


def sage_doc(hidden: int = HIDDEN) -> dict:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "named"},
        "spec": {
            "graph": {"path": "named.npz"},
            "embeddings": [{"name": "node", "dim": EMB}],
            "model": {"hiddenDim": hidden, "nodeEmbedding": "node", "useFeatures": True},
            "training": {"fanouts": [5, 5]},
        },
    }


def named_graph() -> Graph:
    g = planted_graph(n=N, k=3)
    rng = np.random.default_rng(2)
    return Graph.from_edges(
        "named",
        N,
        *g.edges(),
        feat=rng.standard_normal((N, FEAT)).astype(np.float32),
        label=g.label,
        masks=random_masks(N, 0.6, 0.2, 0),
        node_ids=np.array([f"u{i:03d}" for i in range(N)]),
        class_names=np.array(CLASSES),
    )


def sage_checkpoint(run: Path, parts: int, trainer: dict | None = None) -> Path:
    """The same trained state (dense model, node table in original order) in a partition of `parts`."""
    g = named_graph()
    cfg = partition.load_config(partition.write(g, partition.partition_graph(g, parts), run / "partition"))
    root = run / "checkpoints"
    client = kvstore.standalone(parts, checkpoint_root=root)
    emb = DistEmbedding(N, EMB, "node", book=PartitionBook(cfg.node_bounds), client=client)
    rows = torch.from_numpy(np.random.default_rng(3).standard_normal((N, EMB)).astype(np.float32))
    emb.table[np.arange(N)] = rows[
        torch.from_numpy(partition.load_maps(cfg)["node_map"])
    ]  # new id -> its row
    torch.manual_seed(0)
    model = GraphSAGE(FEAT + EMB, HIDDEN, 3, 2, 0.5, frozen=FEAT)
    tag = "step-000000003"
    save_dense(root / tag / "dense.pt", model, torch.optim.Adam(model.parameters()))
    extra = {"partition": ckpt.partition_record(cfg, root / tag), **({"trainer": trainer} if trainer else {})}
    client.checkpoint(tag, extra=extra, root=root)
    ckpt.mark_latest(root, tag)
    return root / tag


@pytest.fixture(scope="module")
def sage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("sage")
    spec = base / "spec.yaml"
    spec.write_text(yaml.safe_dump(sage_doc()))
    return spec, sage_checkpoint(base / "one", 1), sage_checkpoint(base / "three", 3)


def predict(*args: str) -> str:
    return ok("predict", *args)


def one_line_error(args: list[str], needle: str) -> str:
    return fails(["predict", *args], needle)


def test_class_probabilities_are_named_by_the_users_ids_whatever_the_partition(
    sage: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    spec, one, three = sage
    tables = []
    for ck, name in ((one, "one.parquet"), (three, "three.parquet")):
        predict(str(ck.parent / "LATEST"), "--spec", str(spec), "-o", str(tmp_path / name))
        tables.append(pq.read_table(tmp_path / name).to_pydict())
    a, b = tables
    assert list(a) == ["id", "predicted", "p_blue", "p_green", "p_red"]
    assert a["id"] == [f"u{i:03d}" for i in range(N)] == b["id"]
    probs = np.array([a[f"p_{c}"] for c in CLASSES]).T
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    assert a["predicted"] == [CLASSES[j] for j in probs.argmax(1)]
    # one partition or three: the same node gets the same answer (no relabeled id leaks through)
    np.testing.assert_allclose(probs, np.array([b[f"p_{c}"] for c in CLASSES]).T, rtol=1e-4, atol=1e-6)


def test_nodes_from_a_list_or_a_file_give_the_same_rows(
    sage: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    spec, _, three = sage
    predict(str(three), "--spec", str(spec), "-o", str(tmp_path / "all.csv"))
    full = pcsv.read_csv(tmp_path / "all.csv").to_pydict()
    said = predict(
        str(three), "--spec", str(spec), "-o", str(tmp_path / "some.csv"), "--nodes", "u150,u007,u150"
    )
    assert "of 2 node(s)" in said and "(1 repeated id(s) written once)" in said
    (tmp_path / "ids.txt").write_text("id\nu150\nu007\nu150\n")
    predict(
        str(three),
        "--spec",
        str(spec),
        "-o",
        str(tmp_path / "file.csv"),
        "--nodes",
        str(tmp_path / "ids.txt"),
    )
    for name in ("some.csv", "file.csv"):
        some = pcsv.read_csv(tmp_path / name).to_pydict()
        assert some["id"] == ["u150", "u007"]  # one row per node, in the order first named
        for col in ("p_blue", "p_red"):
            assert some[col] == pytest.approx([full[col][150], full[col][7]], rel=1e-5)


def test_embeddings_are_the_last_hidden_layer(sage: tuple[Path, Path, Path], tmp_path: Path) -> None:
    spec, one, three = sage
    for ck, name in ((one, "e1.parquet"), (three, "e3.parquet")):
        predict(str(ck), "--spec", str(spec), "-o", str(tmp_path / name), "--embeddings")
    a, b = (pq.read_table(tmp_path / n).to_pydict() for n in ("e1.parquet", "e3.parquet"))
    assert list(a) == ["id", *(f"dim_{j}" for j in range(HIDDEN))]
    ea, eb = (np.array([t[f"dim_{j}"] for j in range(HIDDEN)]).T for t in (a, b))
    assert (ea >= 0).all() and ea.any()  # after the ReLU
    np.testing.assert_allclose(ea, eb, rtol=1e-4, atol=1e-6)


def test_sage_errors_are_one_line(sage: tuple[Path, Path, Path], tmp_path: Path) -> None:
    spec, one, _ = sage
    one_line_error(
        [str(one), "--spec", str(spec), "-o", str(tmp_path / "x.csv"), "--nodes", "u1500"],
        "node 'u1500': not in the graph (did you mean 'u150'?)",
    )
    one_line_error([str(one), "--spec", str(spec)], "give -o OUT.parquet or OUT.csv")
    missing = tmp_path / "ids.txt"  # a mistyped file of ids: it read as a node the graph lacks, alone
    one_line_error(
        [str(one), "--spec", str(spec), "-o", str(tmp_path / "x.csv"), "--nodes", str(missing)],
        f"node '{missing}': not in the graph; as a file of ids: {missing}: no such file",
    )
    one_line_error([str(one), "--spec", str(spec), "-o", str(tmp_path / "x.npy")], "unknown output format")
    wider = tmp_path / "wider.yaml"
    wider.write_text(yaml.safe_dump(sage_doc(hidden=16)))
    one_line_error([str(one), "--spec", str(wider), "-o", str(tmp_path / "x.csv")], "model.hiddenDim")
    assert not (tmp_path / "x.csv").exists()


# --------------------------------------------------------------------------------------------- KGE

ENTS = ["ann", "bob", "cy", "dee", "eve"]
RELS = ["likes", "parent_of"]


def kge_doc(kind: str) -> dict:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "fam"},
        "spec": {
            "graph": {"dataset": "nations"},
            "embeddings": [
                {"name": "entity", "keys": "nodes", "dim": 5},
                {"name": "relation", "keys": "relations", "dim": 5},
            ],
            "model": {"kind": kind, "entityEmbedding": "entity", "relationEmbedding": "relation"},
        },
    }


def kge_checkpoint(base: Path, kind: str) -> tuple[Path, Path]:
    """Entities one-hot: TransE with likes = cy - ann ranks (ann, likes, cy) first (score 0, the rest
    negative); DistMult with likes = e_cy + e_ann scores <ann, likes, t> highest for t = ann."""
    t = np.array([[0, 0, 1], [1, 1, 2], [3, 0, 4], [2, 1, 3], [0, 0, 2]], dtype=np.int64)
    kg = KnowledgeGraph("fam", 5, 2, t[:3], t[3:4], t[4:], np.array(ENTS), np.array(RELS))
    g = kg.to_graph()
    cfg = partition.load_config(
        partition.write(g, partition.partition_graph(g, 2, algorithm="random"), base / "partition")
    )
    root = base / "checkpoints"
    client = kvstore.standalone(2, checkpoint_root=root)
    ent = DistEmbedding(5, 5, "entity", book=PartitionBook(cfg.node_bounds), client=client)
    rel = DistEmbedding(2, 5, "relation", book=PartitionBook.even(2, 2), client=client)
    eye = np.eye(5, dtype=np.float32)
    ent.table[np.arange(5)] = eye[partition.load_maps(cfg)["node_map"]]
    likes = eye[2] - eye[0] if kind == "transe" else eye[2] + 2 * eye[0]
    rel.table[np.arange(2)] = np.stack([likes, eye[1]])
    keys = {"entity": "nodes", "relation": "relations"}
    client.checkpoint("s", extra={"partition": ckpt.partition_record(cfg, root / "s", keys)}, root=root)
    spec = base / "spec.yaml"
    spec.write_text(yaml.safe_dump(kge_doc(kind)))
    return spec, root / "s"


def test_transe_answers_head_relation_query_with_tail_labels(tmp_path: Path) -> None:
    spec, ck = kge_checkpoint(tmp_path, "transe")
    out = tmp_path / "answers.csv"
    printed = predict(
        str(ck), "--spec", str(spec), "--head", "ann", "--relation", "likes", "-k", "3", "-o", str(out)
    )
    rows = pcsv.read_csv(out).to_pydict()
    assert list(rows) == ["rank", "head", "relation", "tail", "score", "known"]
    assert rows["rank"] == [1, 2, 3] and rows["head"] == ["ann"] * 3 and rows["relation"] == ["likes"] * 3
    assert rows["tail"][0] == "cy" and rows["score"][0] == pytest.approx(0.0)
    assert rows["score"] == sorted(rows["score"], reverse=True)
    assert rows["known"][0] == "test"  # (ann, likes, cy) is the test triple
    assert "cy" in printed and "(ann, likes, ?)" in printed
    heads = prediction.pair_answer(
        load_yaml(spec.read_text()),
        ck,
        partition.load_config(tmp_path / "partition"),
        "likes",
        tail="cy",
        k=1,
    )
    assert list(heads.columns["head"]) == ["ann"]


def test_distmult_answers_and_unknown_labels_are_one_line(tmp_path: Path) -> None:
    spec, ck = kge_checkpoint(tmp_path, "distmult")
    printed = predict(str(ck), "--spec", str(spec), "--head", "ann", "--relation", "likes", "-k", "2")
    assert "(ann, likes, ?)" in printed
    cfg = partition.load_config(tmp_path / "partition")
    ans = prediction.pair_answer(load_yaml(spec.read_text()), ck, cfg, "likes", "ann")
    assert ans.columns["tail"][0] == "ann" and ans.columns["score"][0] == pytest.approx(2.0)
    one_line_error(
        [str(ck), "--spec", str(spec), "--head", "ann", "--relation", "like"], "(did you mean 'likes'?)"
    )
    one_line_error([str(ck), "--spec", str(spec), "--head", "anne", "--relation", "likes"], "entity 'anne'")
    one_line_error([str(ck), "--spec", str(spec), "--relation", "likes"], "give one of --head and --tail")
    one_line_error([str(ck), "--spec", str(spec), "--head", "ann"], "--relation")


def test_a_relation_outside_target_relations_is_refused_in_one_line(tmp_path: Path) -> None:
    """A linkPrediction checkpoint with task.targetRelations learnt to score those relations only:
    (ann, parent_of, ?) from one trained on likes was answered from an untrained decoder row."""
    _, ck = kge_checkpoint(tmp_path, "distmult")
    doc = kge_doc("distmult")
    doc["spec"]["embeddings"] = doc["spec"]["embeddings"][:1]
    doc["spec"]["task"] = {"kind": "linkPrediction", "targetRelations": ["likes"]}
    doc["spec"]["model"] = {"kind": "graphsage", "useFeatures": False, "nodeEmbedding": "entity"}
    gt = load_yaml(yaml.safe_dump(doc))
    cfg = partition.load_config(tmp_path / "partition")
    with pytest.raises(GraphtrainError) as info:
        prediction.pair_answer(gt, ck, cfg, "parent_of", "ann")
    assert str(info.value) == (
        "--relation 'parent_of': not in task.targetRelations (likes), the only relations the checkpoint's "
        "decoder learnt to score (the others were the encoder's context)"
    )
    assert prediction.untargeted(gt, "likes") is None
    assert prediction.untargeted(load_yaml(yaml.safe_dump(kge_doc("distmult"))), "parent_of") is None


def test_lookup_is_pure_and_reads_integer_ids() -> None:
    assert prediction.lookup(["3", " 1"], np.array([1, 3, 5]), "node").tolist() == [1, 0]
    with pytest.raises(GraphtrainError, match="node 'x': not in the graph"):
        prediction.lookup(["x"], np.array([1, 3, 5]), "node")
    assert prediction.model_mismatch({"a": (2,)}, {"a": (2,)}) is None
    assert "has no b" in str(prediction.model_mismatch({"a": (2,), "b": (1,)}, {"a": (2,)}))
    assert prediction.distinct(np.array([5, 5, 2, 7, 2])) == (pytest.approx([5, 2, 7]), 2)


def test_a_different_num_layers_is_named_not_hidden_dim(tmp_path: Path) -> None:
    """The checkpoint records the model fields it was trained with: the one that differs is named, not
    the first parameter whose shape differs (layers.1.bias, which suggested hiddenDim)."""
    spec = GraphTraining.model_validate(sage_doc()).spec
    trained = sage_checkpoint(tmp_path / "run", 1, {"epoch": 1, "step": 3, "model": model_record(spec)})
    deeper = sage_doc()
    deeper["spec"]["model"]["numLayers"] = 3
    deeper["spec"]["training"]["fanouts"] = [5, 5, 5]
    (tmp_path / "deeper.yaml").write_text(yaml.safe_dump(deeper))
    said = one_line_error(
        [str(trained), "--spec", str(tmp_path / "deeper.yaml"), "-o", str(tmp_path / "x.csv")],
        "the checkpoint was trained with model.numLayers 2, the spec says 3",
    )
    assert "hiddenDim" not in said and "layers.1" not in said
    # without a record (an older checkpoint): the shape, with every field that could explain it
    old = sage_checkpoint(tmp_path / "old", 1)
    said = one_line_error(
        [str(old), "--spec", str(tmp_path / "deeper.yaml"), "-o", str(tmp_path / "x.csv")], "model.numLayers"
    )
    assert "the checkpoint's" in said or "the checkpoint has" in said


def test_a_tampered_names_file_is_one_line(tmp_path: Path) -> None:
    """class_names.npy replaced by an object array, its sha256 updated to match: never unpickled, and
    one line naming the file (was: numpy's ValueError traceback)."""
    import hashlib
    import json

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(sage_doc()))
    trained = sage_checkpoint(tmp_path / "run", 1)
    cfg = partition.load_config(tmp_path / "run" / "partition")
    np.save(cfg.root / "class_names.npy", np.array([{"x": 1}, None], dtype=object), allow_pickle=True)
    cfg.data["files"]["class_names.npy"] = hashlib.sha256(
        (cfg.root / "class_names.npy").read_bytes()
    ).hexdigest()
    cfg.path.write_text(json.dumps(cfg.data))
    one_line_error(
        [str(trained), "--spec", str(spec), "-o", str(tmp_path / "x.csv")],
        "class_names.npy: holds Python objects: not a graphtrain partition file",
    )
    fails(["inspect", str(cfg.root)], "class_names.npy: holds Python objects")


def test_options_of_another_task_are_refused_not_ignored() -> None:
    """predict --head/--relation on a node-classification checkpoint (or --nodes on a KGE one) answered
    another question than the one asked, exit 0: now one line naming them and what the task reads."""
    import yaml

    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.predict_options import foreign_options

    examples = Path(__file__).parents[3] / "examples"
    sage = load_yaml((examples / "wordnet-sage.yaml").read_text())
    transe = load_yaml(yaml.safe_dump(yaml.safe_load((examples / "nations-transe.yaml").read_text())))
    assert foreign_options(sage, {"--nodes": True, "--embeddings": True, "--head": False}) is None
    assert foreign_options(sage, {"--head": True, "--relation": True}) == (
        "task nodeClassification does not read --head, --relation (it reads --embeddings, --nodes)"
    )
    assert foreign_options(transe, {"--head": True, "--relation": True, "-k": True}) is None
    said = foreign_options(transe, {"--nodes": True, "--relation": True})
    assert said is not None and said.startswith("task kge does not read --nodes (it reads")
