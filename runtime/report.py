"""Human-readable tables for the CLI (rich). Rendering only: every number comes from the caller."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from graphtrain.runtime.partition.memory import human


def partition_table(config: dict[str, Any]) -> Table:
    """Per-partition nodes, stored edges and halo, with the totals and balance in the caption."""
    stats = config["stats"]
    table = Table(title=f"{config['graph_name']}: {config['num_parts']} partition(s), {config['algorithm']}")
    for col in ("part", "node range", "nodes", "edges", "halo"):
        table.add_column(col, justify="right")
    bounds = config["node_bounds"]
    for p in range(config["num_parts"]):
        table.add_row(
            str(p),
            f"[{bounds[p]:,}, {bounds[p + 1]:,})",
            f"{stats['nodes_per_part'][p]:,}",
            f"{stats['edges_per_part'][p]:,}",
            f"{stats['halo_per_part'][p]:,}",
        )
    balance = ", ".join(f"{k} {v:.3f}" for k, v in stats["balance"].items())
    seconds = stats.get("seconds", {})
    table.caption = (
        f"edge cut {stats['cut_edges']:,} of {stats['num_undirected_edges']:,} undirected edges "
        f"({100 * stats['edge_cut_fraction']:.2f} %), "
        f"remote in-edges {100 * stats['remote_edge_fraction']:.2f} %\n"
        f"balance (max/mean): {balance}\n"
        f"strategy {config.get('strategy', '?')}, {seconds.get('total', 0):.2f} s"
        + (f"; skipped constraints: {config['balance_skipped']}" if config.get("balance_skipped") else "")
    )
    return table


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
