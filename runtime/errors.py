"""Errors the user can act on. The CLI prints their message and exits non-zero; no traceback."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator


class GraphtrainError(Exception):
    """Base of every error that names a bad input, a missing file or a broken promise."""


def renamed(message: str, names: dict[str, str]) -> str:
    """`message` ("spec.graph.path: ...") led by what `names` calls its leading field instead (the option a
    command's user typed); "" drops the field (a FILE argument: its own name follows)."""
    head, sep, rest = message.partition(": ")
    if not sep or head not in names:
        return message
    return f"{names[head]}: {rest}" if names[head] else rest


def user_message(exc: BaseException) -> str | None:
    """The one line (without its `error: `) a command prints for `exc` when a user can act on it: a
    GraphtrainError's or a spec's message, or memory ran out; None for anything else (a bug: its
    traceback is what helps)."""
    from graphtrain.contract.spec import SpecError  # the spec package, only once something failed

    if isinstance(exc, MemoryError):  # an input beyond this process' memory (a ulimit, a pod's limit)
        detail = f" ({exc})" if str(exc) else ""
        return f"out of memory{detail}: give it more memory or a smaller input"
    if isinstance(exc, (GraphtrainError, SpecError)):
        return str(exc)
    return None


class DataError(GraphtrainError):
    """A dataset or graph file is missing, malformed or inconsistent (names the file and the problem)."""


class DataWarning(UserWarning):
    """The input is usable but probably not what the user meant (isolated nodes dropped, a directed edge
    list): raised through `warnings.warn`, never silent; the CLI prints it as a `warning:` line."""


@contextlib.contextmanager
def data_warnings(say: Callable[[str], None]) -> Iterator[None]:
    """Hand the message of each DataWarning raised inside to `say` (every caller words them alike: one
    `warning:` line each); other warnings are shown as usual."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DataWarning)
            yield
    finally:  # outside the recording: shown inside it, a warning was recorded again, without end
        for w in caught:
            if issubclass(w.category, DataWarning):
                say(str(w.message))
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


class ChecksumError(DataError):
    """A stored file does not match the sha256 recorded when it was written."""


class FetchError(DataError):
    """A package could not be downloaded from its registry."""


class PartitionError(GraphtrainError):
    """Partitioning was asked for something impossible (bad part count, bad constraint, ...)."""


class MemoryEstimateError(PartitionError):
    """The estimated peak memory of a step exceeds the limit the user set."""


class SparseInputError(GraphtrainError, ValueError):
    """Bad ids or tensors given to a sparse operation (named in the message); nothing was modified."""


class NonFiniteGradient(SparseInputError):
    """A gradient row holds a NaN or an infinity; the step was refused before any row changed."""

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row  # batch position of the first such row
