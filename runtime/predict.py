"""Predictions from a checkpoint, in this process (no servers): GraphSAGE class probabilities or output
embeddings per node, and KGE answers to (head, relation, ?) and (?, relation, tail), all named with the
user's own ids and labels.

Everything a prediction needs is on disk: the partition (graph, features, id maps, names, KG splits),
the checkpoint's tables (checkpoint.export_table) and its dense model (dense.pt, read with
torch.load(weights_only=True): tensors only, never an arbitrary object). The partition is the one the
checkpoint names (outputs.checkpoint_partition), so ids are mapped with the node order the tables were
trained in. Label lookups are pure (`lookup`): an unknown label is one line naming it, with the closest
known label when there is one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from graphtrain.contract.spec import (
    GNN_KINDS,
    KGE,
    KGE_KINDS,
    LINK_PREDICTION,
    GNNModel,
    GraphTraining,
    KGEModel,
)
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.partition.format import PartitionConfig, load_maps, load_names, load_triples
from graphtrain.runtime.train.resumable import TRAINING_ONLY, model_changes
from graphtrain.runtime.train.tables import checkpoint_rows

if TYPE_CHECKING:
    from graphtrain.runtime.graph import FeatureBags
    from graphtrain.runtime.train.inputs import FixedRows

BATCH = 4096
SAME_SPEC = "predict needs the spec the run trained with"
SUGGEST_MAX = 50_000  # labels to compare an unknown one with (difflib is linear in them)


# ------------------------------------------------------------------------------------------ labels


def lookup(tokens: list[str], known: np.ndarray, what: str) -> np.ndarray:
    """Positions in `known` (labels: unicode, or int64 ids) of the user's `tokens`.

    Raises:
        GraphtrainError: naming the first token that is not a known label (and a close match, if any).
    """
    integer = known.dtype.kind in "iu"
    index = {str(v): i for i, v in enumerate(known.tolist())}
    out = np.empty(len(tokens), dtype=np.int64)
    for j, token in enumerate(tokens):
        key = token.strip()
        if integer and key.lstrip("-").isdigit():
            key = str(int(key))
        pos = index.get(key)
        if pos is None:
            raise GraphtrainError(f"{what} {token!r}: not in the graph{_suggest(key, index)}")
        out[j] = pos
    return out


def _suggest(token: str, index: dict[str, int]) -> str:
    if len(index) > SUGGEST_MAX:
        return ""
    close = difflib.get_close_matches(token, list(index), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def node_ids(cfg: PartitionConfig, tokens: list[str]) -> np.ndarray:
    """Original node ids of the user's node ids (their own, or 0..n-1 when the graph has none).

    Raises:
        GraphtrainError: naming an id the graph does not have.
    """
    known = load_names(cfg).get("node_ids")
    if known is None:
        known = np.arange(int(cfg.data["num_nodes"]), dtype=np.int64)
    return lookup(tokens, known, "node")


def requested_nodes(cfg: PartitionConfig, value: str) -> np.ndarray:
    """`--nodes`' original node ids. A value that is neither known ids nor an existing file, and reads as
    a path (a `/` or an extension), says both: a mistyped file name was reported as a missing node.

    Raises:
        GraphtrainError: naming the id the graph lacks (and the missing file).
    """
    try:
        return node_ids(cfg, read_tokens(value))
    except GraphtrainError as exc:
        path = Path(value)
        if "," in value or path.exists() or not ("/" in value or path.suffix):
            raise
        raise GraphtrainError(f"{exc}; as a file of ids: {value}: no such file") from None


def distinct(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """`ids` with each repeated one kept at its first place only (one output row per node), and how
    many repeats were dropped (pure)."""
    _, first = np.unique(ids, return_index=True)
    kept = ids[np.sort(first)]
    return kept, len(ids) - len(kept)


def read_tokens(value: str) -> list[str]:
    """`--nodes`: a file with one id per line (a first line `id` is a header) or a comma-separated list."""
    path = Path(value)
    if path.is_file():
        from graphtrain.runtime.data.cache import read_text

        lines = [line.strip() for line in read_text(path).splitlines() if line.strip()]
        return lines[1:] if lines and lines[0].lower() == "id" else lines
    tokens = [t.strip() for t in value.split(",") if t.strip()]
    if not tokens:
        raise GraphtrainError(f"--nodes {value!r}: neither a file nor a comma-separated list of ids")
    return tokens


# ------------------------------------------------------------------------------------- GraphSAGE


@dataclass
class NodeOutput:
    """Per requested node (original ids `nodes`): `values` rows, named by `columns` (after `id`)."""

    ids: np.ndarray
    columns: dict[str, np.ndarray]


def _dense_state(root: Path) -> dict[str, torch.Tensor]:
    from graphtrain.runtime.train.dense import read_dense

    return dict(read_dense(root / "dense.pt")["model"])


SHAPE_FIELDS = "model.hiddenDim, model.numLayers, model.useFeatures or an embedding's dim"


def model_mismatch(
    expected: dict[str, tuple[int, ...]],
    saved: dict[str, tuple[int, ...]],
    recorded: dict[str, Any] | None = None,
    spec: Any = None,
) -> str | None:
    """The difference between the model the spec builds and the one saved, in words (pure). The fields
    the checkpoint records it was trained with (its trainer record's model, resumable.model_record) name
    what differs; a checkpoint without a record is told by the first parameter whose shape differs."""
    changes = model_changes(recorded, spec, TRAINING_ONLY) if spec is not None else []
    if changes:  # a field that changes no shape (model.edgeWeight) changes the outputs all the same
        return f"the checkpoint was trained with {'; '.join(changes)}"
    if expected.keys() == saved.keys() and all(expected[k] == saved[k] for k in expected):
        return None
    for key in sorted(expected.keys() | saved.keys()):
        if key not in saved:
            return f"the checkpoint has no {key} ({SHAPE_FIELDS}?)"
        if key not in expected:
            return f"the checkpoint has {key}, which the spec's model lacks ({SHAPE_FIELDS}?)"
        if expected[key] != saved[key]:
            return (
                f"the checkpoint's {key} is {tuple(saved[key])}, the spec's model needs "
                f"{tuple(expected[key])} ({SHAPE_FIELDS}?)"
            )
    return None


def _same_model(gt: GraphTraining, root: Path) -> None:
    """Refuse a spec whose model differs from the one checkpoint `root` records it was trained with.

    Raises:
        GraphtrainError: naming every changed field with both values."""
    changes = model_changes(_recorded_model(root), gt.spec, TRAINING_ONLY)
    if changes:
        raise GraphtrainError(f"{root}: the checkpoint was trained with {'; '.join(changes)}: {SAME_SPEC}")


def _recorded_model(root: Path) -> dict[str, Any] | None:
    """The model fields checkpoint `root` was trained with (its trainer record), None if it has none."""
    trainer = ckpt.read_top(root).get("trainer")
    model = trainer.get("model") if isinstance(trainer, dict) else None
    return model if isinstance(model, dict) else None


def node_outputs(
    gt: GraphTraining,
    root: Path,
    cfg: PartitionConfig,
    nodes: np.ndarray | None = None,
    embeddings: bool = False,
) -> NodeOutput:
    """GraphSAGE on original node ids `nodes` (all when None), every neighbour used as in evaluation:
    class probabilities (`predicted` and p_<class> columns) or, with `embeddings`, the last hidden
    layer (`dim_<j>` columns).

    Raises:
        GraphtrainError: the checkpoint does not fit the spec (named field) or the partition lacks data.
    """
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.graph.loader import sample_blocks
    from graphtrain.runtime.models import GNNShape, gnn_entry
    from graphtrain.runtime.partition.typed_ids import NodeRows
    from graphtrain.runtime.train.inputs import FixedRows, bag_input, node_input

    if not isinstance(gt.spec.model.variant, GNNModel):
        kinds = ", ".join(GNN_KINDS)
        raise GraphtrainError(f"model.kind is {gt.spec.model.kind}: class predictions need a GNN ({kinds})")
    m = gt.spec.model.variant
    num_classes = cfg.data.get("num_classes")
    if not num_classes:
        raise GraphtrainError(f"{cfg.path}: the partition holds no labels (num_classes)")
    graph = DistGraph(cfg, standalone_client(cfg.path))
    feat = graph.ndata.get("feat") if m.use_features and m.feature_bag is None else None
    if m.use_features and m.feature_bag is None and feat is None:
        raise GraphtrainError(
            f"{cfg.path}: model.useFeatures is set but the partition holds no dense features"
        )
    emb = None
    if m.node_embedding:
        table = next(t for t in gt.spec.embeddings if t.name == m.node_embedding)
        rows = NodeRows.of(cfg.data, table.name, table.node_types)
        emb = torch.from_numpy(checkpoint_rows(root, gt.spec, m.node_embedding, rows.num_rows))
        if len(emb) != rows.num_rows:
            whose = "nodes" if table.node_types is None else f"nodes of type {', '.join(table.node_types)}"
            raise GraphtrainError(
                f"table {m.node_embedding!r} has {len(emb)} rows, the partition {rows.num_rows} {whose}"
            )
    bags = _feature_bags(m, root, cfg, gt.spec)
    feat_dim = int(feat.shape[1]) if feat is not None else 0
    split = emb is not None and feat is not None
    learned = [int(t.shape[1]) for t in (emb, bags[0].weight if bags else None) if t is not None]
    in_dim = feat_dim + sum(learned)
    shape = GNNShape(
        in_dim,
        int(num_classes),
        frozen=feat_dim if split else 0,
        num_relations=max(1, len(graph.canonical_etypes)),
        edge_dim=graph.edge_dim(),
    )
    model = gnn_entry(m.KIND).build(m, shape)
    state = _dense_state(root)
    why = model_mismatch(
        {k: tuple(v.shape) for k, v in model.state_dict().items()},
        {k: tuple(v.shape) for k, v in state.items()},
        _recorded_model(root),
        gt.spec,
    )
    if why:
        raise GraphtrainError(f"{root / 'dense.pt'}: {why}: {SAME_SPEC}")
    model.load_state_dict(state)
    model.eval()

    maps = load_maps(cfg)
    orig = np.arange(graph.num_nodes, dtype=np.int64) if nodes is None else nodes
    uniq, back = np.unique(maps["node_map_inverse"][orig], return_inverse=True)  # seeds must be distinct
    layers = m.num_layers if not embeddings else m.num_layers - 1
    chunks = []
    with torch.no_grad():
        for i in range(0, len(uniq), BATCH):
            mb = sample_blocks(graph, uniq[i : i + BATCH], [-1] * layers)
            x = (
                None
                if feat is None
                else torch.as_tensor(np.asarray(feat[mb.input_nodes]), dtype=torch.float32)
            )
            e = None if emb is None else node_input(FixedRows(emb), rows, mb.input_nodes, torch.device("cpu"))
            if bags:  # training's order: the bag, then the node embedding
                b = bag_input(bags[0], bags[1], mb.input_nodes, bags[2], torch.device("cpu"))
                e = b if e is None else torch.cat([b, e], dim=1)
            learn, frozen = (e, x) if split else ((e if e is not None else x), None)
            assert learn is not None
            if embeddings:
                chunks.append(model.hidden(mb.blocks, learn, frozen))
            else:
                chunks.append(torch.softmax(model(mb.blocks, learn, frozen), dim=1))
    values = torch.cat(chunks).numpy()[back]
    names = load_names(cfg)
    ids = names["node_ids"][orig] if "node_ids" in names else orig
    if embeddings:
        return NodeOutput(ids, {f"dim_{j}": values[:, j] for j in range(values.shape[1])})
    classes = names.get("class_names", np.arange(int(num_classes)))
    cols: dict[str, np.ndarray] = {"predicted": classes[values.argmax(1)]}
    cols.update({f"p_{c}": values[:, j] for j, c in enumerate(classes.tolist())})
    return NodeOutput(ids, cols)


def _feature_bags(
    m: Any, root: Path, cfg: PartitionConfig, spec: Any
) -> tuple[FixedRows, FeatureBags, str] | None:
    """model.featureBag's trained rows in feature column order (a dynamic vocabulary's through the
    checkpoint's keys, a column never seen reading its initial row, as training's lookups did), the
    partition's bags and the combiner (None without a bag).

    Raises:
        GraphtrainError: the table's rows do not match the partition's feature columns.
    """
    from graphtrain.runtime.graph import FeatureBags
    from graphtrain.runtime.train.inputs import FixedRows

    if m.feature_bag is None:
        return None
    name = m.feature_bag.embedding
    bags = FeatureBags(cfg)
    words = FixedRows(torch.from_numpy(checkpoint_rows(root, spec, name, bags.num_columns)))
    if words.num_embeddings != bags.num_columns:
        raise GraphtrainError(
            f"table {name!r} has {words.num_embeddings} rows, the partition {bags.num_columns} feature "
            "columns"
        )
    return words, bags, str(m.feature_bag.combiner)


# ------------------------------------------------------------------------------------------- KGE


@dataclass
class KGEAnswer:
    """The top-k of a (head, relation, ?) query, best first: triples as labels, scores, and the split
    that holds the triple ('' when it is new, which is what a prediction is for)."""

    columns: dict[str, np.ndarray]


def pair_answer(
    gt: GraphTraining,
    root: Path,
    cfg: PartitionConfig,
    relation: str,
    head: str | None = None,
    tail: str | None = None,
    k: int = 10,
) -> KGEAnswer:
    """Top-k tails of (head, relation, ?) or heads of (?, relation, tail), by the trained model's score
    (higher is more plausible: -||h + r - t|| for TransE, <h, r, t> for DistMult; a linkPrediction
    checkpoint's decoder on its encoder's embeddings), every node a candidate, as evaluation ranks.

    Raises:
        GraphtrainError: a label not in the graph (named), both or neither of head and tail, a spec
        whose task answers no such query.
    """
    if gt.spec.task_kind not in (KGE, LINK_PREDICTION):
        raise GraphtrainError(
            f"task {gt.spec.task_kind}: (head, relation, ?) queries need task kge or linkPrediction"
        )
    if (head is None) == (tail is None):
        raise GraphtrainError("give one of --head and --tail (with --relation): the other is what is asked")
    if "kg" not in cfg.data:
        raise GraphtrainError(
            f"{cfg.path}: the checkpoint's partition holds no knowledge-graph triples: it is not a kge or "
            f"linkPrediction checkpoint (task {gt.spec.task_kind} in the spec; {SAME_SPEC})"
        )
    names = load_names(cfg)
    num_nodes = len(load_maps(cfg)["node_map_inverse"])
    ent_names = names.get("node_ids", np.arange(num_nodes, dtype=np.int64))
    num_relations = int(cfg.data["kg"]["num_relations"])
    rel_names = names.get("relation_names", np.arange(num_relations, dtype=np.int64))
    r = int(lookup([relation], rel_names, "relation")[0])
    untrained = untargeted(gt, str(rel_names[r]))
    if untrained is not None:
        raise GraphtrainError(untrained)
    given = int(lookup([head if head is not None else str(tail)], ent_names, "entity")[0])
    scorer = _link_scores if gt.spec.task_kind == LINK_PREDICTION else _kge_scores
    scores = scorer(gt, root, cfg, r, given, head is not None)
    return top_answers(cfg, scores, given, r, head is not None, k)


def untargeted(gt: GraphTraining, relation: str) -> str | None:
    """Why a linkPrediction checkpoint cannot answer queries of `relation`, or None: with
    task.targetRelations its decoder learnt (and its evaluation ranked) those relations only; another's
    scores would come from an untrained relation row (distmult) or be a target relation's (dot, mlp)."""
    targets = getattr(gt.spec.task.variant if gt.spec.task is not None else None, "target_relations", None)
    if gt.spec.task_kind != LINK_PREDICTION or not targets or relation in targets:
        return None
    return (
        f"--relation {relation!r}: not in task.targetRelations ({', '.join(targets)}), the only relations "
        f"the checkpoint's decoder learnt to score (the others were the encoder's context)"
    )


@torch.no_grad()
def _kge_scores(
    gt: GraphTraining, root: Path, cfg: PartitionConfig, r: int, given: int, tails: bool
) -> torch.Tensor:
    """Every entity's score (original ids) as the tail of (given, r, ?) when `tails`, else as the head
    of (?, r, given), by a KGE checkpoint's tables."""
    from graphtrain.runtime.models import kge_entry

    if not isinstance(gt.spec.model.variant, KGEModel):
        kinds = ", ".join(KGE_KINDS)
        raise GraphtrainError(f"model.kind is {gt.spec.model.kind}: task kge needs {kinds}")
    m = gt.spec.model.variant
    entry = kge_entry(m.KIND)
    _same_model(gt, root)
    assert m.entity_embedding and m.relation_embedding
    maps = load_maps(cfg)
    num_nodes, num_relations = len(maps["node_map_inverse"]), int(cfg.data["kg"]["num_relations"])
    ents = checkpoint_rows(root, gt.spec, m.entity_embedding, num_nodes)[maps["node_map_inverse"]]
    ents = torch.from_numpy(np.ascontiguousarray(ents))
    rels = torch.from_numpy(checkpoint_rows(root, gt.spec, m.relation_embedding, num_relations))
    if tails:
        return entry.tails(ents[given][None], rels[r][None], ents, m)[0]
    return entry.heads(rels[r][None], ents[given][None], ents, m)[0]


def top_answers(
    cfg: PartitionConfig, scores: torch.Tensor, given: int, r: int, tails: bool, k: int
) -> KGEAnswer:
    """The k best of `scores` (one per entity, original ids) as a query's answers: the asked tails of
    (given, r, ?) when `tails`, else the heads of (?, r, given), with the split already holding each."""
    names = load_names(cfg)
    ent_names = names.get("node_ids", np.arange(len(scores), dtype=np.int64))
    rel_names = names.get("relation_names", np.arange(r + 1, dtype=np.int64))
    top = torch.topk(scores, min(k, len(scores)))
    found = top.indices.numpy()
    heads = np.full(len(found), given) if tails else found
    ends = found if tails else np.full(len(found), given)
    known = known_splits(load_triples(cfg), heads, r, ends)
    return KGEAnswer(
        {
            "rank": np.arange(1, len(found) + 1),
            "head": ent_names[heads],
            "relation": np.repeat(rel_names[r : r + 1], len(found)),
            "tail": ent_names[ends],
            "score": top.values.numpy().astype(np.float64),
            "known": known,
        }
    )


def known_splits(triples: dict[str, np.ndarray], heads: np.ndarray, r: int, tails: np.ndarray) -> np.ndarray:
    """For each (heads[i], r, tails[i]): the first split holding it ('' if none)."""
    out = np.full(len(heads), "", dtype=object)
    for split in ("train", "valid", "test"):
        t = triples.get(split)
        if t is None or not len(t):
            continue
        have = {(int(a), int(b)) for a, b in t[t[:, 1] == r][:, [0, 2]]}
        for i, (h, tl) in enumerate(zip(heads.tolist(), tails.tolist(), strict=True)):
            if not out[i] and (h, tl) in have:
                out[i] = split
    return out.astype(str)


# ---------------------------------------------------------------------- link and edge tasks


def task_layers(gt: GraphTraining, root: Path, cfg: PartitionConfig) -> tuple[Any, Any]:
    """The checkpoint's GNN task in this process and every node's layer-wise outputs: in-process shards
    over the partition, the checkpoint's tables restored into them and its dense model into the task
    (train/inference.py's restore), then the task's encoded(), the code of its evaluation and of
    `graphtrain infer`, so the answers here score as those do.

    Raises:
        GraphtrainError: the checkpoint's model does not fit the spec's (the differing field named).
    """
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.train.dist import Dist
    from graphtrain.runtime.train.inference import restore
    from graphtrain.runtime.train.tasks import make_task

    ckpt.verify_checkpoint(root)  # a changed byte is one line naming the file, before anything is read
    _same_model(gt, root)
    graph = DistGraph(cfg, standalone_client(cfg.path, checkpoint_root=root.parent))
    dist = Dist()  # one process: every collective is the identity
    task = make_task(gt, graph, dist, torch.device("cpu"))
    why = model_mismatch(
        {k: tuple(v.shape) for k, v in task.model.state_dict().items()},
        {k: tuple(v.shape) for k, v in _dense_state(root).items()},
        _recorded_model(root),
        gt.spec,
    )
    if why:
        raise GraphtrainError(f"{root / 'dense.pt'}: {why}: {SAME_SPEC}")
    restore(task, graph, dist, root)
    return task, task.encoded()


@torch.no_grad()
def _link_scores(
    gt: GraphTraining, root: Path, cfg: PartitionConfig, r: int, given: int, tails: bool
) -> torch.Tensor:
    """As _kge_scores, by a linkPrediction checkpoint: its decoder's scores on its encoder's layer-wise
    embedding of every node (task_layers)."""
    task, layers = task_layers(gt, root, cfg)
    ents = layers.everything()[torch.from_numpy(load_maps(cfg)["node_map_inverse"])]  # by original id
    dec = task.decoder
    rel = dec.relation(torch.tensor([r]))
    if tails:
        return dec.tails(ents[given][None], rel, ents)[0]
    return dec.heads(rel, ents[given][None], ents)[0]


def edge_predictions(gt: GraphTraining, root: Path, cfg: PartitionConfig) -> dict[str, np.ndarray]:
    """An edgeClassification or edgeRegression checkpoint's predictions for every edge of the
    labelled edge types (train/edge_outputs.py: what `graphtrain infer` writes for them)."""
    task, layers = task_layers(gt, root, cfg)
    return dict(task.edge_outputs(layers))
