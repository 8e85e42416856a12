"""The error a table's storage raises for a request it refuses (a key of another shard, a table that does
not fit, a bad init spec): its own type, so storage imports nothing of the wire protocol. A shard server
answers it to the client as it answers a ProtocolError; in process it is raised as a RemoteError."""

from __future__ import annotations

from typing import Any

from graphtrain.runtime.errors import GraphtrainError

ECHO = 40  # characters of a caller's value a message may quote


class StorageError(GraphtrainError, ValueError):
    """A refused table operation; the message names the field or value."""


class TableBusy(Exception):  # noqa: N818 - a state, not a failure: the caller goes another way
    """A table's lock is held (a worker steps or checkpoints it) and the caller asked not to wait: the
    shard server's I/O thread, which then hands the request to a worker (serving/inline.py)."""


def echo(value: Any) -> str:
    """A caller-supplied value quoted in an error message, cut to a few dozen characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= ECHO else text[: ECHO - 3] + "..."
