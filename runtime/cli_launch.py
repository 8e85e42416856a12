"""`graphtrain run` and `graphtrain infer`: a whole GraphTraining on this machine (launch/local.py),
training or inferring from a checkpoint."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.cli_common import Checkpoint, DataDir, TrainedSpec, err, friendly, out, read
from graphtrain.runtime.errors import GraphtrainError


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

    A run directory with checkpoints needs --resume or --overwrite; one of others' files is refused.

    One launcher at a time owns a run directory; its servers and trainers end with it, even on kill -9.

    The run directory and everything in it are private to you (mode 0700/0600).
    """
    from graphtrain.runtime.launch.local import LocalRun
    from graphtrain.runtime.report import result_lines, resume_command
    from graphtrain.runtime.stopping import Terminated, stop_on_signals

    gt = load_yaml(read(spec_path))
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


def inference_spec(text: str, checkpoint: Path, output: Path | None, base: Path) -> str:
    """The YAML of the spec in `text` with mode inference from `checkpoint` into `output` and its graph's
    input paths made absolute from `base`, the spec's directory (the written spec lives elsewhere, and
    the launcher compares those inputs with the ones the checkpoint was trained on), read back
    through the spec's rules.

    Raises:
        SpecError: the spec, or inference from it, is invalid (a kge task: nothing to infer)."""
    import yaml

    from graphtrain.runtime.data.inputs import resolve

    gt = load_yaml(text)
    doc = gt.model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["graph"] = resolve(gt.spec.graph, base).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    doc.pop("status", None)
    doc["spec"]["mode"] = "inference"
    doc["spec"]["inference"] = {"checkpoint": str(checkpoint)} | ({"output": str(output)} if output else {})
    written = yaml.safe_dump(doc, sort_keys=False)
    load_yaml(written)
    return written


def inference_name(trained: str, run_dir_name: str) -> str:
    """The name an inference run goes by: its run directory's (`<name>-inference` by default) when that
    is a valid training name, else the trained one's. With the trained name, the local REST API, which
    knows a run by its document's name, served one of the two directories, the last written, and the
    other vanished; so did their Prometheus targets' labels."""
    from graphtrain.contract.spec import MAX_NAME_LENGTH
    from graphtrain.contract.spec.base import DNS1035

    ok = len(run_dir_name) <= MAX_NAME_LENGTH and re.match(DNS1035, run_dir_name) is not None
    return run_dir_name if ok else trained


def renamed(text: str, name: str) -> str:
    """The YAML of inference_spec's `text` with metadata.name `name`."""
    import yaml

    doc = yaml.safe_load(text)
    doc["metadata"]["name"] = name
    return yaml.safe_dump(doc, sort_keys=False)


def check_data_dir(data_dir: Path | None) -> None:
    """`infer --data-dir`: the dataset cache an inference reads (a spec's dataset is compared with its
    cached manifest) and never writes (it fetches nothing), so it must be a directory that is there: a
    misspelt one was taken in silence and read as no dataset at all. (A spec of files reads none, and
    a --data-dir given with it is held to the same rule: the user meant one that is there.)

    Raises:
        GraphtrainError: naming --data-dir and the path."""
    if data_dir is None:
        return
    if not data_dir.exists():
        raise GraphtrainError(
            f"--data-dir {data_dir}: no such directory (infer reads the dataset cache, "
            "fetching nothing: give the one the training used)"
        )
    if not data_dir.is_dir():
        raise GraphtrainError(f"--data-dir {data_dir}: not a directory")


@friendly
def infer(
    checkpoint: Checkpoint,
    spec_path: TrainedSpec,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="output directory (default: <run-dir>/inference); an earlier one is replaced"
        ),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            help="run directory (default: runs/<name>-inference); the run goes by its name if a valid one"
        ),
    ] = None,
    standalone: Annotated[bool, typer.Option(help="one trainer, shards in its process (no servers)")] = False,
    data_dir: DataDir = None,
) -> None:
    """Every node's outputs from a trained checkpoint, over the whole graph, as parquet keyed by your ids.

    Shard servers restore the checkpoint's tables, the spec's trainers its model, and each layer runs
    over every node with every neighbour (each trainer a share, each layer's rows written to the shard
    servers before the next reads them), as the training's evaluation computes them. Writes
    part-<trainer>.parquet files keyed by your node ids (embedding; for node classification also
    predicted and p_<class>), for an edge task also edges-part-<trainer>.parquet (every edge of the
    labelled edge types, predicted), and manifest.json; prints the rows per second and the test metric
    of the inferred outputs. Nodes are read in the order the checkpoint was trained in: its partition
    is the one its checkpoint.json names, and a spec of another graph or partition, a partition of
    another graph, or a checkpoint whose files do not check out is refused before anything starts."""
    from graphtrain.runtime.data.cache import atomic_file, refusal
    from graphtrain.runtime.launch.local import LocalRun
    from graphtrain.runtime.launch.reuse import foreign_run_dir
    from graphtrain.runtime.stopping import Terminated, stop_on_signals
    from graphtrain.runtime.targets import check_writable

    check_data_dir(data_dir)
    if output is not None:  # before the checkpoint is read: one line naming the option
        check_writable(output, f"--out {output}")
    text = inference_spec(
        read(spec_path),
        checkpoint.resolve(),
        Path(os.path.abspath(output)) if output else None,
        spec_path.parent,
    )
    gt = load_yaml(text)
    trained = gt.metadata.name
    run_dir = run_dir or Path("runs") / f"{trained}-inference"
    if (name := inference_name(trained, run_dir.name)) != trained:
        text = renamed(text, name)
        gt = load_yaml(text)
    held = run_dir / "checkpoints"
    if held.is_dir() and any(held.iterdir()):  # refused before anything is written there
        raise GraphtrainError(
            f"--run-dir {run_dir}: holds a training's checkpoints; give the inference a run directory of "
            f"its own (default: runs/{trained}-inference)"
        )
    if why := foreign_run_dir(run_dir):  # before inference.yaml is written there
        raise GraphtrainError(why)
    try:
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # a file there or above it: one line, as `run` says it, not a traceback
        raise GraphtrainError(
            f"--run-dir {run_dir}: cannot be made a run directory ({refusal(exc)})"
        ) from None
    path = run_dir.resolve() / "inference.yaml"
    with atomic_file(path, mode=0o600) as f:
        f.write(text.encode())
    stop_on_signals()
    launch = LocalRun(gt, path, run_dir, standalone=standalone, data_dir=data_dir)
    try:
        result = launch.run()
    except KeyboardInterrupt as exc:
        err.print(str(exc) if isinstance(exc, Terminated) else "interrupted", highlight=False, markup=False)
        raise typer.Exit(130 if not isinstance(exc, Terminated) else 143) from None
    metrics = ", ".join(
        f"{k} {v:,.0f}" if float(v).is_integer() and abs(v) > 1 else f"{k} {v:.4f}"  # test_triples: a count
        for k, v in result.items()
        if k.startswith("test_")
    )
    out.print(
        f"{gt.metadata.name}: inferred {result['rows']:,} nodes in {result['seconds']:.2f} s "
        f"({result['rows_per_second']:,.0f} rows/s); {metrics}",
        highlight=False,
        markup=False,
    )
    out.print(f"output: {result['output']}", highlight=False, markup=False)
