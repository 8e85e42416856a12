"""What the `graphtrain` commands share: the consoles, the error wrapper that turns what a user can act
on into one line and exit code 1, the --data-dir option and reading a spec file."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from graphtrain.contract.spec import SpecError
from graphtrain.runtime.errors import GraphtrainError, data_warnings, user_message

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])


def _flags_without_a_type(display: Callable[..., str | None]) -> Callable[..., str | None]:
    """typer (0.29) prints a type for every option in --help, "<bool>" for a flag too, which takes no value
    (`--no-data <bool>` read as asking for one, and `--no-data true FILE` then took "true" for the file)."""

    @functools.wraps(display)
    def shown(self: Any, ctx: Any) -> str | None:
        return None if getattr(self, "is_flag", False) else display(self, ctx)

    return shown


typer.core.TyperOption.display_type_rich = _flags_without_a_type(  # type: ignore[method-assign]
    typer.core.TyperOption.display_type_rich
)


def _a_directory(path: Path | None) -> Path | None:
    """--data-dir names a directory, or one still to be made: a file there is refused before any work
    (`data list` would otherwise list nothing fetched, and `validate` would look for data under it)."""
    if path is not None and path.exists() and not path.is_dir():
        err.print(f"[red]error:[/red] --data-dir {escape(str(path))}: not a directory", highlight=False)
        raise typer.Exit(1)
    return path


DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="dataset cache (default: $GRAPHTRAIN_DATA or ~/.cache/graphtrain)",
        callback=_a_directory,
    ),
]

# a command's checkpoint argument and the spec it was trained with (predict, infer)
Checkpoint = Annotated[
    Path, typer.Argument(help="a checkpoint directory, its LATEST/BEST file, or the checkpoints directory")
]
TrainedSpec = Annotated[Path, typer.Option("--spec", help="the GraphTraining YAML the run trained with")]


def friendly(fn: F) -> F:
    """Turn the errors a user can act on into a message and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (SpecError, GraphtrainError, MemoryError) as exc:  # escaped: a file "a[/b]" is no markup
            err.print(f"[red]error:[/red] {escape(user_message(exc) or str(exc))}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def read(path: Path) -> str:
    """A spec file's text (one line naming the file when it cannot be read)."""
    from graphtrain.runtime.data.cache import read_text

    return read_text(path)


def console(app: typer.Typer) -> None:
    """Run `app` as the console command. A usage error (an unknown option or command, a value out of
    range, a missing argument) is one line naming it and exit code 1, as every other bad input is;
    click's boxed usage and its exit code 2 stay for CliRunner, which calls `app` itself. --help and a
    bare command print their help. A closed standard output (`>&-`: Python's sys.stdout is None) or one
    whose reader went away (`| head`) is one line too, not a traceback. (typer vendors click: its
    exceptions are typer.TyperException's.)"""
    import os
    import sys

    if sys.stderr is None:  # `2>&-`: nowhere to say anything
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:
        sys.stderr.write("error: standard output is closed; graphtrain writes its output there\n")
        sys.exit(1)
    try:
        code = app(standalone_mode=False)
    except BrokenPipeError:  # the reader stopped reading: what is left to write goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        code = 1
    except _click_errors() as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            if exc.format_message().strip():  # type: ignore[attr-defined]  # (typer's rich help printed it)
                exc.show(file=sys.stdout)  # type: ignore[attr-defined]
            code = 0
        elif hasattr(exc, "ctx"):  # a UsageError: BadParameter, NoSuchOption, MissingParameter, ...
            ctx = exc.ctx
            command = ctx.command_path if ctx is not None else _command_of(sys.argv)
            sys.stderr.write(f"{command}: {exc.format_message()} (see {command} --help)\n")  # type: ignore[attr-defined]
            code = 1
        else:
            sys.stderr.write(f"{exc.format_message()}\n")  # type: ignore[attr-defined]
            code = getattr(exc, "exit_code", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _command_of(argv: list[str]) -> str:
    """The command a usage error without its context was in (an option missing its value, say): the
    first word, when it comes before any option."""
    first = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else ""
    return f"graphtrain {first}".strip()


def _click_errors() -> tuple[type[Exception], ...]:
    """The base classes of click's errors: typer's own (it vendors click from 0.2x) and click's."""
    bases: list[type[Exception]] = []
    if hasattr(typer, "TyperException"):
        bases.append(typer.TyperException)
    try:
        import click

        bases.append(click.ClickException)
    except ImportError:
        pass
    return tuple(bases)


def warn(message: str) -> None:
    """One `warning: ...` line on stderr (a DataWarning's message, a note on the data)."""
    err.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)


@contextlib.contextmanager
def shown_warnings() -> Iterator[None]:
    """Print the DataWarnings raised inside as `warning: ...` lines (a word, never silent)."""
    with data_warnings(warn):
        yield
