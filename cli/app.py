"""The `graphtrain` command: the composition root that mounts each role's command group (cli/__init__.py
is the console script's light entry point).

The runtime (runtime/cli.py: data, partition, shard-server, train, run, ...) and the operator
(operator/cli.py) each own their commands; only this module sees them all, so the runtime never
imports the operator or the API (.importlinter). Each group imports its heavy dependencies inside its
commands: `graphtrain operator --help` works where torch is not installed.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from graphtrain.api.cli import app as api_app
from graphtrain.api.cli import with_api
from graphtrain.operator.cli import app as operator_app
from graphtrain.runtime.cli import app as runtime_app
from graphtrain.runtime.cli_common import console


class Composed(TyperGroup):
    """The root group: the roles' commands, with `run` given the API's --api options (the runtime's
    command knows nothing of the API; api/cli.py adds them)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            one_line_help(command)
        return with_api(command) if cmd_name == "run" and command is not None else command


def one_line_help(command: Any) -> None:
    """Each paragraph of each command's docstring unwrapped, the first also its line in a group's
    command list: typer's rich help keeps a docstring's line breaks (0.29 no longer joins them past
    the first paragraph), which cut sentences where the source wrapped ("and each layer runs" /
    "over every node") at any width but the source's."""
    for sub in getattr(command, "commands", {}).values():  # a group's (typer's vendored click)
        one_line_help(sub)
    if not command.help:
        return
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(command.help).split("\n\n")]
    command.help = "\n\n".join(paragraphs)
    if not command.short_help:
        command.short_help = paragraphs[0]


app = typer.Typer(
    cls=Composed,
    help="graphtrain: train graph models with huge, sharded, learnable embedding tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(runtime_app)
app.add_typer(operator_app)
app.add_typer(api_app)


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, as recorded in its metadata)."""
    return importlib.metadata.version("graphtrain")


def print_version(value: bool) -> None:
    if not value:
        return
    try:
        version = package_version()
    except importlib.metadata.PackageNotFoundError:
        print("error: graphtrain's package metadata is not installed: pip install -e .", file=sys.stderr)
        raise typer.Exit(1) from None
    print(f"graphtrain {version}")
    raise typer.Exit()


@app.callback()
def options(
    version: Annotated[
        bool,
        typer.Option("--version", help="print the version and exit", is_eager=True, callback=print_version),
    ] = False,
) -> None:
    """Options that come before any command."""


# the extra that brings each optional dependency a command may import
EXTRAS = {
    **dict.fromkeys(
        ["torch", "numpy", "scipy", "pymetis", "zmq", "msgpack", "psutil", "prometheus_client"], "runtime"
    ),
    "kopf": "operator",
    "kubernetes": "all",
    **dict.fromkeys(["fastapi", "starlette", "uvicorn"], "api"),
}


# the commands of the other roles: their own extra brings whatever they import (the operator's
# prometheus_client too, which EXTRAS gives to the runtime)
COMMAND_EXTRAS = {"operator": "operator", "api": "api"}


def missing_extra(exc: ModuleNotFoundError, command: str = "") -> str | None:
    """The one-line message for a command run where its role's dependencies are not installed."""
    root = (exc.name or "").split(".")[0]
    if root not in EXTRAS:
        return None
    extra = COMMAND_EXTRAS.get(command, EXTRAS[root])
    return f"error: this command needs {root}, which is not installed: pip install 'graphtrain[{extra}]'"


def main() -> None:  # pragma: no cover - called by cli/__init__.py's entry point
    try:
        console(app)
    except ModuleNotFoundError as exc:
        message = missing_extra(exc, sys.argv[1] if len(sys.argv) > 1 else "")
        if message is None:
            raise
        print(message, file=sys.stderr)
        sys.exit(1)
