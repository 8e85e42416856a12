"""A Kubernetes watch as both control-plane roles read it (the operator's child watches,
operator/child_watch.py; the API's collections, api/sources/watched.py): how its stream is read, what
ends it, and the pause before trying again, as client-go's reflector does.

- A stream that breaks once begun (a connection cut or reset, a read timed out, a torn line) is
  Broken: watch again from its last event's resourceVersion, keeping what was listed and watched. A
  LIST of a large collection is what a loaded API server can least afford, and a broken stream is what
  load brings.
- Gone (410: the resourceVersion left the server's watch window, as an ERROR event or the answer's
  status) is the one reason to list again at once; any other failure lists again after a pause.
- A stream left before its end has its connection closed before it goes back to urllib3's pool:
  released open, the pool handed the next LIST a connection still carrying the watch, and that LIST
  waited out its read timeout (5 s) behind it.

No `kubernetes` import (.importlinter: only the roles' API modules call it): the caller makes the
request and splits its lines (kubernetes.watch.iter_resp_lines). Imported by the operator and the API
only: urllib3, not in the base install, comes with their Kubernetes client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator
from typing import Any, Protocol

import urllib3

Event = dict[str, Any]
PAUSE, LONGEST_PAUSE = 0.5, 30.0  # after a failure: the first pause, doubling up to the longest
GONE = 410


class Gone(Exception):
    """The watch's resourceVersion is too old (410 Gone, expired): list again, at once."""


class Broken(Exception):
    """The watch's stream broke after it began (a connection cut or reset, a read timed out, a torn
    line): watch again from the last event's resourceVersion after a pause, keeping the store, which
    holds every change up to it (client-go's reflector does the same: only 410 makes it list again)."""


class Failed(RuntimeError):
    """The server ended the watch with an ERROR event other than 410: list again after a pause."""


class Response(Protocol):
    """What is used of a urllib3 response of a watch (read with preload_content=False)."""

    def close(self) -> None: ...

    def release_conn(self) -> None: ...


def next_pause(pause: float, watched: bool) -> float:
    """The pause before trying again after a failure, `pause` the last one: PAUSE if a watch had worked
    since (an event, or its normal end), else double the last, up to LONGEST_PAUSE. Not reset by a list
    alone: a server that lists but refuses every watch (403 to a role without the watch verb) would be
    listed whole every PAUSE, forever."""
    return PAUSE if watched else min(LONGEST_PAUSE, max(PAUSE, pause * 2))


def check(event: Event) -> Event:
    """`event`, unless it is an ERROR event: Gone for 410, else Failed with the server's words."""
    if event.get("type") != "ERROR":
        return event
    status = event.get("object") or {}
    if status.get("code") == GONE:
        raise Gone()
    raise Failed(f"{status.get('code')} {status.get('reason')}: {status.get('message')}")


def events(resp: Response, lines: Iterator[str], until: float) -> Generator[Event, None, None]:
    """The events of a watch's response `resp`, its `lines` parsed, until the server ends it (ERROR
    events checked: check()), or at the latest at `until` (time.monotonic(): past the end the server
    was asked for, the stream is left as if ended there). However it ends, the connection goes back to
    the pool, closed first unless the stream was read to its end.

    Raises:
        Broken: the stream broke once it had begun.
        Gone, Failed: an ERROR event.
    """
    ended = False
    try:
        while time.monotonic() < until:
            try:
                line = next(lines, None)
                if line is None:
                    ended = True
                    return
                event = json.loads(line) if line else None
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                raise Broken(type(exc).__name__) from None
            if event is not None:
                yield check(event)
    finally:
        # left before its end (broken, failed, or its reader stopped): urllib3's stream closes the
        # connection when its generator is closed mid-read; close the response too, so that a
        # connection still carrying this watch never goes back to the pool open
        close = getattr(lines, "close", None)
        if close is not None:
            close()
        if not ended:
            resp.close()
        resp.release_conn()
