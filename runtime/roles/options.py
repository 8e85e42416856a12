"""A role's CLI options, generated from its description (graphtrain.contract.roles): each field becomes
one option with the field's type, default, help, flags and bound, so the CLI cannot list a parameter
the command lines do not (or word it otherwise). tests/contract/test_roles.py checks the result flag for
flag against the description."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from graphtrain.contract.roles import RoleParams, params

P = TypeVar("P", bound=RoleParams)


def bounded(min: float | None, max: float | None, tp: Any) -> dict[str, Any]:
    """typer.Option's arguments for a number within [min, max] (shown in --help); a float's are parsed
    by finite_within, which typer's own check of a float's range does not replace: given a parser, typer
    checks no range, and without one it refuses NaN by its bound ("less than or equal to 3600"), which
    reads as if the value were too big."""
    if (min is not None or max is not None) and float in (tp, *getattr(tp, "__args__", ())):
        return {"min": min, "max": max, "parser": finite_within(min, max)}
    return {"min": min, "max": max}


def finite_within(min: float | None, max: float | None) -> Callable[[str], float]:
    """A parser of a finite float in [min, max] whose refusal names the value and the bound it breaks."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text} is not a number") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"{text} is not a finite number")
        if (min is not None and value < min) or (max is not None and value > max):
            if min is not None and max is not None:
                raise typer.BadParameter(f"{text} is not between {min:g} and {max:g}")
            side, bound = ("below", min) if min is not None else ("above", max)
            raise typer.BadParameter(f"{text} is {side} {bound:g}")
        return value

    return parse


def role_command(cls: type[P], entry: Callable[[P], None]) -> Callable[..., None]:
    """A function typer reads as the command of `cls`: keyword parameters (the fields, with typer
    Options) that it gathers into a `cls` for `entry`. Its help is `entry`'s docstring."""

    @functools.wraps(entry)
    def command(**values: Any) -> None:
        entry(cls(**values))

    parameters = []
    for p in params(cls):
        bounds = bounded(p.option.min, p.option.max, p.type)
        option = typer.Option(*p.option.flags, help=p.option.help, **bounds)
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
