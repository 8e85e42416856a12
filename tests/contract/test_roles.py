"""Every command line either executor builds parses with the real CLI, and means the same thing.

The argv of each role (`partition`, `shard-server`, `train`, the `health` probe) comes from one builder
(graphtrain.contract.roles), called by the local launcher (runtime/launch/plan.py) and the operator
(operator/manifests.py) with their own values. Here each argv, for every example spec and variants of
it, goes through the click command typer builds from graphtrain.runtime.cli.app, with full parsing: an
unknown option, a missing required one or a value of the wrong type fails the test, as it would fail a
pod or a process."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import subprocess
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer.main
import yaml

from graphtrain.contract import roles
from graphtrain.contract.children import names
from graphtrain.contract.spec import Device, GraphTraining
from graphtrain.contract.spec import parse as parse_spec
from graphtrain.operator import manifests
from graphtrain.operator.config import built_in
from graphtrain.runtime import cli
from graphtrain.runtime.launch import plan
from graphtrain.runtime.roles.partition import partition as partition_entry
from graphtrain.runtime.roles.shard_server import serve
from graphtrain.runtime.roles.train import train

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
COMMAND: Any = typer.main.get_command(cli.app)  # a click group (typer vendors its own click)
# click's UsageError (unknown or missing option, bad value), reached through typer's public BadParameter
# because typer 0.29 ships click as a private module
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

VARIANTS: dict[str, dict[str, Any]] = {
    "as-is": {},
    "one-trainer-one-part": {"trainers": {"replicas": 1}, "partition": {"parts": 1}},
    "more-shards-than-trainers": {"trainers": {"replicas": 3}, "partition": {"parts": 4}},
    "gpu": {
        "trainers": {"replicas": 2, "device": "cuda"},
        "shardServers": {"device": "cuda", "threads": 4, "replicas": 2},
    },
    "odd-storage": {"storage": {"mountPath": "/mnt/with space/", "volumeClaimName": "shared"}},
}


def specs() -> list[Any]:
    out = []
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        for variant, override in VARIANTS.items():
            d = copy.deepcopy(doc)
            for section, values in override.items():
                d["spec"].setdefault(section, {}).update(values)
            out.append(pytest.param(d, id=f"{path.stem}-{variant}"))
    return out


def parse(argv: list[str]) -> dict[str, Any]:
    """The parameters the CLI gives the role's command for `argv` (role first), as a run would get them.

    Raises:
        UsageError: an unknown option, a missing required one, a bad value.
    """
    role, *rest = argv
    command = COMMAND.commands.get(role)
    if command is None:
        raise UsageError(f"no command {role!r}")
    with command.make_context(role, list(rest), resilient_parsing=False) as ctx:
        return dict(ctx.params)


def operator_argvs(gt: GraphTraining) -> dict[str, list[str]]:
    """Every command line of the operator's children: container args and the readiness probe."""
    owner = {"metadata": {"name": gt.metadata.name, "namespace": "ml", "uid": "u1"}}
    objs = {
        "partition": manifests.partition_job(owner, gt, built_in()),
        "shard-server": manifests.shard_statefulset(owner, gt, built_in()),
        **{
            f"trainer-{r}": manifests.trainer_pod(owner, gt, built_in(), r, 0)
            for r in range(gt.spec.trainers.replicas)
        },
    }
    out = {}
    for name, obj in objs.items():
        pod = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
        (container,) = pod["containers"]
        assert container["command"] == [roles.PROGRAM]
        out[name] = container["args"]
        probe = container.get("readinessProbe", {}).get("exec")
        if probe:
            assert probe["command"][0] == roles.PROGRAM
            out[f"{name}-probe"] = probe["command"][1:]
    return out


def local_argvs(gt: GraphTraining, tmp: Path) -> dict[str, list[str]]:
    """Every command line of a local run's processes, distributed and standalone."""
    run_dir = tmp / "run dir"
    where = plan.files(run_dir, tmp / "spec.yaml", run_dir / "partition" / "g.json")
    servers = [f"ipc://{run_dir}/shard-{i}.sock" for i in range(gt.spec.num_shards)]
    world = gt.spec.trainers.replicas
    device = Device(gt.spec.shard_servers.device).value
    plans = [plan.shard_server(i, where, run_dir, device) for i in range(gt.spec.num_shards)]
    init = "tcp://127.0.0.1:29500"
    plans += [plan.trainer(r, world, where, run_dir, servers, init, threads=r + 1) for r in range(world)]
    out = {}
    for p in plans:
        assert p.argv[: len(plan.entry())] == plan.entry()
        out[p.name] = p.argv[len(plan.entry()) :]
    out["standalone"] = plan.standalone_trainer(where, run_dir).argv[len(plan.entry()) :]
    return out


@pytest.mark.parametrize("doc", specs())
def test_every_operator_argv_parses_with_the_cli(doc: dict) -> None:
    gt = parse_spec(doc)
    argvs = operator_argvs(gt)
    params = {name: parse(argv) for name, argv in argvs.items()}
    lay = manifests.Layout(gt)
    assert params["partition"]["out_dir"] == Path(lay.partition)
    assert params["shard-server"]["shard_from_hostname"] is True and params["shard-server"]["shm"] is False
    # each server binds its own pod IP (the pod runner's servers share one host's loopback)
    assert params["shard-server"]["bind"] == f"tcp://$(POD_IP):{manifests.SHARD_PORT}"
    assert params["shard-server"]["metrics_host"] == "$(POD_IP)"
    assert params["shard-server"]["device"] == Device(gt.spec.shard_servers.device).value
    assert "shard-server-probe" not in params  # readiness is GET /readyz, no exec of a process
    world = gt.spec.trainers.replicas
    for r in range(world):
        t = params[f"trainer-{r}"]
        assert (t["rank"], t["world"], t["shm"]) == (r, world, False)
        assert len(t["servers"].split(",")) == gt.spec.num_shards
        assert t["progress_configmap"] == names(gt.metadata.name)["progress"]
        # one partition and one checkpoint root for every role of the training
        assert t["partition"] == params["shard-server"]["partition"] == params["partition"]["out_dir"]
        assert t["checkpoint_root"] == params["shard-server"]["checkpoint_root"]
        assert t["token_file"] == params["shard-server"]["token_file"]
        # metrics on the pod's own IP, as the shard servers' (the PodMonitor scrapes port `metrics`)
        assert (t["metrics_port"], t["metrics_host"]) == (manifests.METRICS_PORT, "$(POD_IP)")
        assert t["metrics_port_file"] is None


@pytest.mark.parametrize("doc", specs())
def test_every_local_argv_parses_with_the_cli(doc: dict, tmp_path: Path) -> None:
    gt = parse_spec(doc)
    params = {name: parse(argv) for name, argv in local_argvs(gt, tmp_path).items()}
    world = gt.spec.trainers.replicas
    device = Device(gt.spec.shard_servers.device).value
    shm = True  # host tables in shared memory on a GPU server too (only learnable ones are on the GPU)
    for i in range(gt.spec.num_shards):
        s = params[f"shard-{i}"]
        assert (s["shard"], s["shm"], s["restore"], s["device"]) == (i, shm, "latest", device)
        assert (s["metrics_port"], s["metrics_host"]) == (0, "127.0.0.1")  # announced in its ready line
        assert s["bind"] == f"ipc://{tmp_path / 'run dir'}/shard-{i}.sock"
    for r in range(world):
        t = params[f"trainer-{r}"]
        assert (t["rank"], t["world"], t["shm"], t["standalone"]) == (r, world, shm, False)
        assert t["threads"] == r + 1  # the launcher's share of the machine's cores (runtime/cpus.py)
        assert t["run_dir"] == tmp_path / "run dir" and t["progress_configmap"] is None
        assert t["partition"] == params["shard-0"]["partition"]
        assert (t["metrics_port"], t["metrics_host"]) == (0, "127.0.0.1")
        assert t["metrics_port_file"] == plan.port_file(tmp_path / "run dir", r)
    alone = params["standalone"]
    assert alone["metrics_port"] == 0 and alone["metrics_port_file"] == plan.port_file(
        tmp_path / "run dir", 0
    )
    assert alone["standalone"] is True and alone["servers"] is None and alone["world"] == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--partition", "p"],  # --spec is required
        ["train", "--spec", "s", "--partition", "p", "--no-such-option"],
        ["train", "--spec", "s", "--partition", "p", "--threads", "0"],  # torch refuses it with a traceback
        ["shard-server", "--shard", "one"],
        ["partition", "--spec", "s"],  # --out is required
        ["no-such-role"],
    ],
)
def test_the_parser_used_here_refuses_what_a_run_would(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse(argv)


def test_a_standalone_trainer_is_one_trainer() -> None:
    files = roles.Files(spec="s", partition="p", token="t", checkpoints="c")
    with pytest.raises(ValueError, match="one trainer"):
        roles.train(files, servers=None, world=2)
    with pytest.raises(ValueError, match="rendezvous"):
        roles.train(files, servers=["tcp://a:1"], world=2)


def test_a_runs_processes_never_import_graphtrain_from_the_working_directory(tmp_path: Path) -> None:
    """`python -m` puts the working directory first on sys.path: a `graphtrain/` folder where the user
    runs (planted in a shared /tmp, or an old checkout) would be what the servers and trainers run."""
    planted = tmp_path / "graphtrain" / "runtime"
    planted.mkdir(parents=True)
    (tmp_path / "graphtrain" / "__init__.py").write_text("")
    (planted / "__init__.py").write_text("")
    (planted / "cli.py").write_text(f"open({str(tmp_path / 'PWNED')!r}, 'w').write('ran')\n")
    out = subprocess.run([*plan.entry(), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "shard-server" in out.stdout, out.stderr[-2000:]
    assert not (tmp_path / "PWNED").exists()


# ------------------------------------------------------------- the description, the CLI and the entry


def base_type(tp: Any) -> Any:
    """`X` of `X | None`."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if args else tp


def mismatches(role: type[roles.RoleParams], command: Any) -> list[str]:
    """Where a click command's options differ from `role`'s description, one line each."""
    described = {p.name: p for p in roles.params(role)}
    options = {o.name: o for o in command.params}
    found = [f"{n}: an option the description lacks" for n in sorted(set(options) - set(described))]
    found += [f"{n}: described, not an option" for n in sorted(set(described) - set(options))]
    for name in sorted(set(options) & set(described)):
        p, o = described[name], options[name]
        want = {
            "flags": list(p.flags),
            "negative": [p.negative] if p.negative else [],
            "required": p.required,
            "default": None if p.required else p.default,
            "help": p.option.help,
            "type": base_type(p.type),
            "min": p.option.min,
            "max": p.option.max,
        }
        got = {
            "flags": list(o.opts),
            "negative": list(o.secondary_opts),
            "required": o.required,
            "default": None if o.required else o.default,
            "help": o.help,
            # typer 0.29 makes the click type when parsing; the annotation it will make it from is kept
            "type": base_type(o.type_descriptor.annotation),
            "min": o.min,
            "max": o.max,
        }
        found += [f"{name}: {k} {got[k]!r}, described {want[k]!r}" for k in want if got[k] != want[k]]
    return found


@pytest.mark.parametrize("role", roles.ROLES, ids=[r.COMMAND for r in roles.ROLES])
def test_each_role_command_has_the_options_its_description_lists(role: type[roles.RoleParams]) -> None:
    assert mismatches(role, COMMAND.commands[role.COMMAND]) == []


def test_a_command_that_drifts_from_its_description_is_caught() -> None:
    """A hand-written shard-server command with one default changed, one help reworded, one flag renamed
    and one option missing: each is named."""
    wrong = typer.Typer()

    @wrong.command()
    def shard_server(
        bind: Annotated[str, typer.Option(help="tcp://host:port or ipc://path (port 0: any free port)")] = (
            "tcp://0.0.0.0:0"
        ),
        shard: Annotated[int, typer.Option(help="which shard")] = 0,
        worker_threads: Annotated[int, typer.Option(help="request worker threads")] = 4,
    ) -> None:
        pass

    found = mismatches(roles.ShardServerParams, typer.main.get_command(wrong))
    assert "bind: default 'tcp://0.0.0.0:0', described 'tcp://127.0.0.1:0'" in found
    assert "shard: help 'which shard', described \"this server's shard index\"" in found
    assert "worker_threads: an option the description lacks" in found
    assert "workers: described, not an option" in found and "shm: described, not an option" in found


def other_value(p: roles.Param) -> Any:
    """A value of `p`'s type that is not its default (and within its bound)."""
    tp = base_type(p.type)
    if tp is bool:
        return not p.default if p.negative or p.default is not False else True
    low = p.option.min or 0
    return {int: int(low) + 3, float: float(low) + 2.5, str: f"x-{p.name}", Path: Path(f"/p/{p.name}")}[tp]


@pytest.mark.parametrize("role", roles.ROLES, ids=[r.COMMAND for r in roles.ROLES])
def test_every_parameter_set_otherwise_reaches_the_command_as_set(role: type[roles.RoleParams]) -> None:
    """argv() of a description with every field off its default parses back to the same values."""
    given = role(**{p.name: other_value(p) for p in roles.params(role)})
    assert parse(roles.argv(given)) == {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}


@pytest.mark.parametrize(
    ("entry", "role"),
    [(partition_entry, roles.PartitionParams), (serve, roles.ShardServerParams), (train, roles.TrainParams)],
)
def test_each_entry_point_takes_its_roles_description(entry: Any, role: type[roles.RoleParams]) -> None:
    first = next(iter(inspect.signature(entry).parameters.values()))
    assert first.annotation in (role, role.__name__)  # a string under `from __future__ import annotations`


def test_the_process_settings_fill_what_the_user_left_unset() -> None:
    """Every role's process gets a short OpenMP spin; a user's own GOMP_SPINCOUNT wins."""
    assert roles.process_env({}) == {"GOMP_SPINCOUNT": "30000"}
    assert roles.process_env({"GOMP_SPINCOUNT": "0", "OMP_NUM_THREADS": "2"}) == {}
