"""The runtime's commands of `graphtrain` (cli/ mounts them with the other roles' commands).

`python -m graphtrain.runtime.cli` runs them alone: the local launcher starts its processes so. Each
command is a thin shell over a Python API: it parses options, calls the runtime and prints. Errors the
user can act on (GraphtrainError, SpecError) are printed as one clear message with exit code 1, never
as a traceback.

The role commands (partition, shard-server, train) are generated from the roles' descriptions
(graphtrain.contract.roles, by runtime/roles/options.py) and dispatch to their entry points in
runtime/roles/: this module spells none of their options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from graphtrain.contract.roles import ENV_TOKEN, PartitionParams, ShardServerParams, TrainParams
from graphtrain.contract.spec import (
    GraphTrainingSpec,
    SpecError,
    load_yaml,
    old_form_notes,
    yaml_document,
)
from graphtrain.runtime.cli_common import (
    Checkpoint,
    DataDir,
    TrainedSpec,
    console,
    err,
    friendly,
    out,
    shown_warnings,
    warn,
)
from graphtrain.runtime.cli_common import read as _read
from graphtrain.runtime.cli_data import data_app
from graphtrain.runtime.cli_launch import infer, run
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.roles.options import bounded, role_command
from graphtrain.runtime.roles.shard_server import serve
from graphtrain.runtime.roles.train import train

app = typer.Typer(
    help="graphtrain: train graph models with huge, sharded, learnable embedding tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data")

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
    from graphtrain.runtime.data.cache import atomic_file, make_dirs
    from graphtrain.runtime.targets import check_target

    if output is not None:  # one line naming --output, never an OSError's traceback
        check_target(output, (), "crd.yaml", "--output")
    text = crd_yaml()
    if output is None:
        sys.stdout.write(text)
        return
    make_dirs(output.parent)
    with atomic_file(output) as f:
        f.write(text.encode())


@app.command()
@friendly
def validate(
    specs: Annotated[list[Path], typer.Argument(help="GraphTraining YAML file(s)", metavar="SPEC")],
    no_data: Annotated[
        bool, typer.Option("--no-data", help="check the spec only, not what the model needs from its data")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Validate GraphTraining specs and report every problem in each (exit 1 if any is invalid).

    After the schema, the spec's inputs are loaded (paths relative to the spec's directory) and checked
    against what the model needs (labels, features, triples, sizes), unless --no-data. A spec in the old
    form (no spec.task: the model kind stood for the task) is valid, and the lines after it say how to
    write it in the new form."""
    bad = 0
    for path in specs:
        rewrite: list[str] = []
        try:
            text = _read(path)
            gt = load_yaml(text)
            rewrite = old_form_notes((yaml_document(text) or {}).get("spec"))
            found, note = ([], "") if no_data else _data_problems(gt.spec, path.parent, data_dir)
        except SpecError as exc:
            found, note = list(exc.problems), ""
        except GraphtrainError as exc:  # unreadable spec or data: names the file
            bad += 1
            said = str(exc)  # a read error names the spec itself already
            err.print(
                said if said.startswith(f"{path}:") else f"{path}: {said}", highlight=False, markup=False
            )
            continue
        if not found:
            old = " (old form; in the new form:)" if rewrite else ""
            out.print(f"{path}: valid{note}{old}", markup=False)
            for line in rewrite:
                out.print(f"  - {line}", markup=False)
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
    """planning.data_problems, and its notes as warning lines; a control-plane install without the
    runtime's numpy and scipy (the operator's image) checks the spec alone, saying so."""
    try:
        from graphtrain.runtime.planning import data_problems
    except ModuleNotFoundError as exc:
        return [], f" (data not checked: {exc.name} is not installed: pip install 'graphtrain[runtime]')"
    with shown_warnings():
        found, notes, unchecked = data_problems(spec, base_dir, data_dir)
    for note in notes:
        warn(note)
    return found, unchecked


# ------------------------------------------------------------------------------------------ partition


def partition(p: PartitionParams) -> None:
    """Partition a graph into contiguous-ID partitions and write the on-disk format with a report.

    Settings come from --spec (its graph and partition sections) and are overridden by options. Relative
    file paths in the spec are read from the spec's directory (or --base-dir).
    """
    import signal

    from graphtrain.runtime.report import partition_table
    from graphtrain.runtime.roles.partition import partition as partition_role
    from graphtrain.runtime.stopping import STOP_SIGNALS, Terminated, stop_on_signals

    # SIGTERM (the partition Job's pod stopped, a plain `kill`) unwinds as Ctrl-C does, so the output's
    # temporary directory and the streaming partitioner's scratch files (the size of the edge list)
    # are removed; Python's default ended the process where it stood and left them beside --out
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    stop_on_signals()
    try:
        config = partition_role(p, warn)
    except Terminated as exc:
        err.print(f"{exc}: nothing written to {p.out_dir}", highlight=False, markup=False)
        raise typer.Exit(143) from None
    finally:
        for sig, handler in before.items():  # the caller's own (a test's CliRunner: pytest's)
            signal.signal(sig, handler)
    if p.as_json:
        sys.stdout.write(json.dumps({k: v for k, v in config.data.items() if k != "files"}, indent=2) + "\n")
    else:
        out.print(partition_table(config.data))
        out.print(f"written to {config.path}", markup=False)


app.command("partition")(friendly(role_command(PartitionParams, partition)))


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


@app.command()
@friendly
def health(
    addresses: Annotated[
        list[str], typer.Argument(help="shard-server addresses (tcp://host:port, ipc://path)")
    ],
    token_file: Annotated[Path | None, typer.Option(help=f"shared token file (else ${ENV_TOKEN})")] = None,
    timeout: Annotated[
        float, typer.Option(**bounded(0.001, 3600.0, float), help="seconds to wait for each answer")
    ] = 5.0,
) -> None:
    """Ask shard servers for their health (the readiness probe); exit 1 naming any that does not answer,
    refuses the token, or reports itself not live (a thread stopped, or requests wait while no worker
    finishes any)."""
    from graphtrain.runtime import kvstore
    from graphtrain.runtime.kvstore.wire.auth import read_token

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


app.command("shard-server")(friendly(role_command(ShardServerParams, serve)))


def ckpt_file(root: Path, out: Path) -> str | None:
    """The name of the checkpoint beside `root` (or `root` itself) that path `out` lies inside, or the
    marker file it is (LATEST, BEST, validation.json); None when it is neither."""
    checkpoints = root.resolve().parent
    target = out.parent.resolve() / out.name
    if not target.is_relative_to(checkpoints):
        return None
    parts = target.relative_to(checkpoints).parts
    if len(parts) == 1:
        return parts[0] if parts[0] in ("LATEST", "BEST", "validation.json") else None
    first = checkpoints / parts[0]
    is_checkpoint = (
        first == root.resolve() or (first / "checkpoint.json").exists() or parts[0].startswith("step-")
    )
    return parts[0] if is_checkpoint else None


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
    """Write one table of a checkpoint in your node order, to .npy, .csv or .parquet.

    Node rows in original node order (relation rows in relation order, feature rows in column order):
    .npy holds the rows alone, .csv/.parquet an `id` column first (the user's ids or labels; the feature
    names, e.g. words, where the graph has them).

    The file is written under a temporary name and renamed into place; an existing file is replaced.
    """
    from graphtrain.runtime import checkpoint as ckpt
    from graphtrain.runtime import outputs
    from graphtrain.runtime.targets import check_target

    check_target(out, outputs.SUFFIXES)  # before reading the checkpoint
    root = ckpt.resolve_checkpoint(checkpoint)
    if into := ckpt_file(root, out):  # data.npy of a piece, say: replaced, the checkpoint was lost
        raise GraphtrainError(
            f"{out}: a file of checkpoint {into}, which it would replace: write it elsewhere"
        )
    if name is None:
        tables = sorted(ckpt.read_top(root)["tensors"])
        if not tables:  # a model of dense layers alone (an edge task on features): `predict` answers
            raise GraphtrainError(f"{root}: holds no table to export (its model learns no embedding)")
        if len(tables) != 1:
            raise GraphtrainError(f"{root}: holds tables {', '.join(tables)}: pick one with --name")
        name = tables[0]
    cfg = outputs.checkpoint_partition(root, partition, warn)
    rows = outputs.original_order(root, name, cfg)
    outputs.write_rows(out, rows)
    order = {
        "nodes": "original node order",
        "relations": "relation order",
        "features": "feature column order",
        "rows": "stored order",
    }
    err.print(
        f"{name}: {rows.values.shape[0]:,} x {rows.values.shape[1:] or 1} from {root.name}, "
        f"{order[rows.keying]}, written to {out}",
        highlight=False,
        markup=False,
    )


TOP_DEFAULT = 10  # predict -k: how many answers unless asked


@app.command()
@friendly
def predict(
    checkpoint: Checkpoint,
    spec_path: TrainedSpec,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="write the predictions here: .parquet or .csv (needed but for kge and linkPrediction)",
        ),
    ] = None,
    partition: Annotated[
        Path | None,
        typer.Option(help="partition config the run trained on (default: the one the checkpoint names)"),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="nodeClassification: node ids, comma-separated or a file of one per line (default: all); "
            "one row per node, in the order first named"
        ),
    ] = None,
    embeddings: Annotated[
        bool,
        typer.Option(
            help="nodeClassification: write the last hidden layer's output instead of probabilities"
        ),
    ] = False,
    head: Annotated[
        str | None, typer.Option(help="kge, linkPrediction: the head label of (head, relation, ?)")
    ] = None,
    relation: Annotated[
        str | None, typer.Option(help="kge, linkPrediction: the relation label of the query")
    ] = None,
    tail: Annotated[
        str | None, typer.Option(help="kge, linkPrediction: the tail label of (?, relation, tail)")
    ] = None,
    top: Annotated[
        int, typer.Option("-k", "--top", min=1, help="kge, linkPrediction: how many answers")
    ] = TOP_DEFAULT,
) -> None:
    """Predict from a checkpoint in this process (no servers), with the user's own ids and labels.

    nodeClassification: per node its id, predicted class and p_<class> probabilities (dim_<j> with
    --embeddings), for every node or --nodes. kge and linkPrediction: the top -k tails of
    --head/--relation (or heads of --tail/--relation) with their scores and the split already holding
    each triple ('' if none), printed as a table and written to -o if given. edgeClassification and
    edgeRegression: every edge of the labelled edge types with its predicted class (and p_<class>) or
    number, and its split and label where it has one, written to -o.
    """
    from graphtrain.runtime import checkpoint as ckpt
    from graphtrain.runtime import outputs
    from graphtrain.runtime.launch.inference import graph_changes, refuse_changes
    from graphtrain.runtime.predict_options import foreign_options, served_task
    from graphtrain.runtime.report import answer_table
    from graphtrain.runtime.targets import check_target

    gt = load_yaml(_read(spec_path))
    served = served_task(gt)
    given = {"--nodes": nodes is not None, "--embeddings": embeddings, "--head": head is not None}
    given |= {"--relation": relation is not None, "--tail": tail is not None, "-k": top != TOP_DEFAULT}
    foreign = foreign_options(gt, given)
    if foreign is not None:
        raise GraphtrainError(foreign)
    if output is not None:
        check_target(output, (".parquet", ".csv"), "predictions", "--out")
    if served == "pairs" and relation is None:
        raise GraphtrainError(f"task {gt.spec.task_kind}: ask with --relation and --head (or --tail)")
    if served != "pairs" and output is None:
        raise GraphtrainError(
            f"task {gt.spec.task_kind}: predictions are per {served[:-1]}: give -o OUT.parquet or OUT.csv"
        )
    root = ckpt.resolve_checkpoint(checkpoint)
    cfg = outputs.checkpoint_partition(root, partition, warn)
    changed = graph_changes(gt, spec_path.parent, cfg, root=root)  # its partition.parts: not one process
    refuse_changes([c for c in changed if c.startswith("graph")], root, cfg, gt)
    # here, after the checks above: the predictions import torch (2 s of CPU), the refusals need none
    from graphtrain.runtime import predict as prediction

    if served == "pairs":
        assert relation is not None
        cols = prediction.pair_answer(gt, root, cfg, relation, head=head, tail=tail, k=top).columns
        out.print(answer_table(cols, f"({head or '?'}, {relation}, {tail or '?'})"))
        if output is not None:
            outputs.write_columns(output, cols)
            err.print(f"{len(cols['rank'])} answers written to {output}", highlight=False, markup=False)
        return
    assert output is not None
    if served == "edges":
        cols = prediction.edge_predictions(gt, root, cfg)
        outputs.write_columns(output, cols)
        what = f"{len(cols['source']):,} edge(s) of the labelled edge types"
        err.print(
            f"predictions of {what} from {root.name} written to {output}", highlight=False, markup=False
        )
        return
    wanted, repeated = None, 0
    if nodes is not None:  # one row per node: a node named twice is written once, where first named
        wanted, repeated = prediction.distinct(prediction.requested_nodes(cfg, nodes))
    result = prediction.node_outputs(gt, root, cfg, wanted, embeddings=embeddings)
    outputs.write_columns(output, {"id": result.ids, **result.columns})
    what = "output embeddings" if embeddings else "class probabilities"
    once = f" ({repeated:,} repeated id(s) written once)" if repeated else ""
    err.print(
        f"{what} of {len(result.ids):,} node(s) from {root.name} written to {output}{once}",
        highlight=False,
        markup=False,
    )


# -------------------------------------------------------------------------------------- training


app.command("train")(friendly(role_command(TrainParams, train)))
app.command("run")(run)
app.command("infer")(infer)


@app.command()
@friendly
def plan(
    spec_path: Annotated[Path, typer.Argument(help="GraphTraining YAML")],
    partition: Annotated[Path | None, typer.Option(help="its partition's config (default: made now)")] = None,
    hosts: Annotated[
        int, typer.Option(min=1, max=4096, help="hosts the shards and trainers are spread over")
    ] = 1,
    bandwidth: Annotated[str | None, typer.Option(help="each host's link, e.g. 1gbit")] = None,
    memory: Annotated[str | None, typer.Option(help="memory per shard pod, e.g. 16Gi")] = None,
    cores: Annotated[
        float | None, typer.Option(help="each host's cores (default: this machine's, shared by every host)")
    ] = None,
    calibrate: Annotated[bool, typer.Option(help="measure this build's unit costs here first")] = False,
    costs: Annotated[Path | None, typer.Option(help="unit costs from --calibrate --out")] = None,
    costs_out: Annotated[Path | None, typer.Option("--out", help="--calibrate's costs file")] = None,
    data_dir: DataDir = None,
) -> None:
    """What a training needs before it runs: memory per role, bytes per step, shard count, step time.

    Each role's memory, the bytes each trainer moves across hosts per step (its data path replayed on
    sampled batches), the shard count that fits --memory, and with --calibrate or --costs the predicted
    step time (runtime/steptime.py) on hosts of --cores cores each, or sharing this machine's."""
    from graphtrain.runtime.planning import plan_command, plan_request

    gt = load_yaml(_read(spec_path))
    req = plan_request(hosts, bandwidth, memory, cores, calibrate, costs, costs_out)
    say = lambda text: err.print(text, highlight=False, markup=False)  # noqa: E731
    for line in plan_command(gt, spec_path, partition, data_dir, req, say):
        out.print(line, highlight=False, markup=False)


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
    console(app)


if __name__ == "__main__":  # pragma: no cover
    main()
