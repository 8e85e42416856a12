"""Human-readable tables and lines for the CLI (rich). Rendering only: every number comes from the caller."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from graphtrain.runtime.partition.memory import human
from graphtrain.runtime.partition.summary import PartitionSummary

STRATEGIES = {
    "single": "one partition: nothing to cut",
    "random": "random: nodes dealt to partitions by a seeded shuffle (the cut baseline)",
    "metis": "metis: METIS minimised the edge cut under the one balance constraint",
    "metis-multi": "metis-multi: METIS minimised the edge cut under all balance constraints at once, "
    "and its result was within bounds",
    "fennel": "fennel: Fennel streaming over the edge files, restreamed, then refined with each node's "
    "edges per part (nodes kept within bounds, the other constraints reported, not balanced)",
    "fennel+types": "fennel+types: Fennel (streamed, restreamed, refined) placed the nodes for the cut, then "
    "each node type's excess left its over-full partitions, least loss first (every type's nodes within "
    "bounds, the other constraints reported, not balanced)",
}


def strategy_words(strategy: str) -> str:
    """What a partition config's `strategy` means, in a sentence."""
    if strategy.startswith("metis(") and strategy.endswith(")+balance"):
        first = strategy[len("metis(") : -len(")+balance")]
        return (
            f"{strategy}: METIS' multi-constraint result was out of bounds, so METIS cut balancing {first} "
            "alone, then nodes were moved between partitions until every constraint was within bounds"
        )
    return STRATEGIES.get(strategy, strategy)


def edge_words(directed: float | None) -> str:
    """How the edge cut's unit reads: undirected edges only when the edge list is symmetric."""
    if directed is None or directed > 0:
        return "node pairs joined by an edge (either direction)"
    return "undirected edges"


def partition_table(config: dict[str, Any], summary: PartitionSummary | None = None) -> Table:
    """Per-partition nodes, stored edges, halo (and bytes on disk with a summary), with the totals,
    balance and the strategy in words in the caption."""
    stats = config["stats"]
    table = Table(title=f"{config['graph_name']}: {config['num_parts']} partition(s), {config['algorithm']}")
    cols = ("part", "node range", "nodes", "edges", "halo") + (("disk",) if summary else ())
    for col in cols:
        table.add_column(col, justify="right")
    bounds = config["node_bounds"]
    for p in range(config["num_parts"]):
        table.add_row(
            str(p),
            f"[{bounds[p]:,}, {bounds[p + 1]:,})",
            f"{stats['nodes_per_part'][p]:,}",
            f"{stats['edges_per_part'][p]:,}",
            f"{stats['halo_per_part'][p]:,}",
            *((human(summary.bytes_per_part[p]),) if summary else ()),
        )
    balance = ", ".join(f"{k} {v:.3f}" for k, v in stats["balance"].items())
    seconds = stats.get("seconds", {})
    table.caption = (
        f"edge cut {stats['cut_edges']:,} of {stats['num_undirected_edges']:,} "
        f"{edge_words(summary.directed if summary else stats.get('directed'))} "
        f"({100 * stats['edge_cut_fraction']:.2f} %), "
        f"remote in-edges {100 * stats['remote_edge_fraction']:.2f} %\n"
        f"balance (max/mean): {balance}\n"
        f"strategy {strategy_words(config.get('strategy', '?'))}; {seconds.get('total', 0):.2f} s\n"
        "halo: nodes of other partitions with an edge to this partition's nodes (sampling reads them "
        "remotely)"
        + (f"; skipped constraints: {config['balance_skipped']}" if config.get("balance_skipped") else "")
    )
    return table


def summary_lines(s: PartitionSummary, most: int = 12) -> list[str]:
    """The graph a partition holds, one fact a line (the most common `most` edge types)."""
    if s.directed is None:
        direction = "directedness not measured (more than 20M edges)"
    elif s.directed == 0:
        direction = "undirected: every edge is stored both ways"
    else:
        direction = f"directed: {100 * s.directed:.1f} % of edges have no reverse edge"
    d = s.degree
    lines = [
        f"nodes {s.num_nodes:,}, edges {s.num_edges:,} ({direction})",
        f"degree (in + out) min {d['min']:g}, mean {d['mean']:.2f}, median {d['median']:g}, "
        f"max {d['max']:g}; isolated nodes {s.isolated:,}",
        "features: none"
        if s.feat_dims is None
        else f"features: {s.feat_dims:,} dims" + (" (sparse)" if s.feat_sparse else ""),
    ]
    if s.num_classes is not None:
        named = (
            f" ({', '.join(s.class_names[:most])}{', ...' if len(s.class_names) > most else ''})"
            if s.class_names
            else ""
        )
        labelled = f", {s.labelled:,} labelled nodes" if s.labelled is not None else ""
        lines.append(f"classes: {s.num_classes}{named}{labelled}")
    if s.masks:
        lines.append("masks: " + ", ".join(f"{k} {v:,}" for k, v in s.masks.items()))
    if s.edge_types:
        top = sorted(s.edge_types.items(), key=lambda kv: -kv[1])[:most]
        more = f", ... ({len(s.edge_types)} in all)" if len(s.edge_types) > most else ""
        lines.append("edge types: " + ", ".join(f"{k} {v:,}" for k, v in top) + more)
    if s.kg:
        lines.append("knowledge graph triples: " + ", ".join(f"{k} {v:,}" for k, v in s.kg.items()))
    if s.labelled_edges:
        counts = ", ".join(f"{k} {v:,}" for k, v in s.labelled_edges.items())
        lines.append(f"labelled edges: {counts} ({s.edge_classes} classes)")
    lines.append(f"on disk: {human(s.bytes_total)}")
    return lines


def datasets_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="datasets")
    for col in ("name", "kind", "fetched", "size", "description", "licence"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["name"],
            r["kind"],
            "yes" if r["fetched"] else "no",
            human(r["bytes"]) if r["fetched"] else "",
            r["description"],
            r["licence"],
        )
    return table


def answer_table(cols: dict[str, Any], title: str) -> Table:
    """`graphtrain predict`'s KGE answers: rank, the label, score (4 decimals), the split holding it."""
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="right" if col in ("rank", "score") else "left")
    for i in range(len(cols["rank"])):
        table.add_row(*(f"{cols[c][i]:.4f}" if c == "score" else escape(str(cols[c][i])) for c in cols))
    return table


def resume_command(
    spec_path: Path, run_dir: Path, explicit_run_dir: bool, standalone: bool, data_dir: Path | None
) -> str:
    """The command that continues an interrupted `graphtrain run` from its last checkpoint (the same
    options, --resume instead of --overwrite)."""
    words = ["graphtrain", "run", str(spec_path)]
    if explicit_run_dir:
        words += ["--run-dir", str(run_dir)]
    if standalone:
        words.append("--standalone")
    if data_dir is not None:
        words += ["--data-dir", str(data_dir)]
    return shlex.join([*words, "--resume"])


COUNTS = ("_triples",)  # result entries that count things (KGE: the triples evaluated), not metrics


def result_value(key: str, value: Any) -> str:
    """A result's value as printed: a count as a whole number, a metric with 4 decimals."""
    if isinstance(value, int | float) and key.endswith(COUNTS) and float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}"


def result_lines(name: str, result: dict[str, Any], run_dir: Path) -> list[str]:
    """What `run` prints at the end: the metrics (of the last model, at the epoch training ended) and
    the best validation pass with its checkpoint."""
    metrics = ", ".join(f"{k} {result_value(k, v)}" for k, v in result.items() if k[:4] in ("test", "val_"))
    epoch = result.get("last_epoch")
    lines = [f"{name}: {metrics}" + (f" (the last model, epoch {epoch})" if epoch is not None else "")]
    best = next((k for k in result if k.startswith("best_val_")), None)
    if best is not None:
        where = ""
        if result.get("best_checkpoint"):
            where = f": {run_dir / 'checkpoints' / result['best_checkpoint']} (checkpoints/BEST)"
        lines.append(
            f"best: {best.removeprefix('best_')} {result[best]:.4f} at epoch {result['best_epoch']}{where}"
        )
    return lines
