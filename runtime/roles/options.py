"""A role's CLI options, generated from its description (graphtrain.contract.roles): each field becomes
one option with the field's type, default, help, flags and bound, so the CLI cannot list a parameter
the command lines do not (or word it otherwise). tests/contract/test_roles.py checks the result flag for
flag against the description."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from graphtrain.contract.roles import RoleParams, params

P = TypeVar("P", bound=RoleParams)


def role_command(cls: type[P], entry: Callable[[P], None]) -> Callable[..., None]:
    """A function typer reads as the command of `cls`: keyword parameters (the fields, with typer
    Options) that it gathers into a `cls` for `entry`. Its help is `entry`'s docstring."""

    @functools.wraps(entry)
    def command(**values: Any) -> None:
        entry(cls(**values))

    parameters = []
    for p in params(cls):
        option = typer.Option(*p.option.flags, help=p.option.help, min=p.option.min, max=p.option.max)
        parameters.append(
            inspect.Parameter(
                p.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if p.required else p.default,
                annotation=Annotated[p.type, option],
            )
        )
    del command.__wrapped__  # typer reads this signature, not entry's
    command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {q.name: q.annotation for q in parameters}
    return command
