"""The token file's lines and what each token may see: pure parsing, no I/O (auth.TokenFile reads the
file, access.py applies a grant to a request).

A line is a token alone (it sees every namespace the API serves, as before namespaces existed), or a
token and the namespaces it may see:

    kH3x...                                   every namespace
    Qa9d...  namespaces=team-a,team-b         team-a and team-b only

Lines end at `\n` (a `\r` before it is dropped) and nowhere else: Python's splitlines also ends one at a
form feed, vertical tab, lone `\r`, NEL or U+2028, which would cut `TOKEN<U+2028>namespaces=team-a` into
a bare token for every namespace and a refused line. Such a character inside a line separates words, as
any whitespace does, and is noted. A line that is not UTF-8 is refused (its bytes are never logged).
Blank lines and lines starting with `#` are ignored. A line that breaks these rules is refused (its
token is not accepted) with a message naming its line number, never its text: a token misspelt into the
namespaces part, or a typo such as `namespace=`, must neither show in a log nor fall back to every
namespace. The other lines still count, so one team's typo does not lock out every other team.
A token is printable ASCII (a BOM opening the file is dropped; a non-breaking or zero-width space,
which a copy from a web page brings, is refused) and never holds `namespaces=`: a line whose token was
left out (`namespaces=team-a`) or whose space before it was (`TOKENnamespaces=team-a`) would otherwise be
one bare word, a token for every namespace, the first one guessable.
A token on several lines: if they grant the same namespaces it is kept (noted); if they differ, every
line of it is refused, since neither the union nor the last line is safely what the writer meant.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

MIN_TOKEN = 16  # characters: a shorter token is refused when the file is read
KEY = "namespaces"
TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII: what an Authorization header carries
HOLDS_KEY = re.compile(r"namespaces?=", re.IGNORECASE)  # `namespace=` too: the typo of KEY
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # as models.DNS_LABEL: a namespace
K = TypeVar("K", bound=Hashable)
GRANT = "graphtrain.grant"  # the request's Grant in its ASGI scope's state, set by auth.BearerAuth


@dataclass(frozen=True)
class Grant:
    """The namespaces a token may see; None: every namespace the API serves."""

    namespaces: frozenset[str] | None = None

    def sees(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def meet(self, other: Grant) -> Grant:
        """What both grant."""
        if self.namespaces is None or other.namespaces is None:
            return other if self.namespaces is None else self
        return Grant(self.namespaces & other.namespaces)


EVERY = Grant()
NOTHING = Grant(frozenset())


@dataclass
class Parsed:
    """The usable tokens and one message per refused or repeated line (line numbers, never tokens)."""

    grants: dict[str, Grant] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def token_problem(word: str) -> str | None:
    """Why `word` cannot be a token, or None."""
    if len(word) < MIN_TOKEN:
        return f"a token is one word of at least {MIN_TOKEN} characters"
    if not TOKEN_CHARS.fullmatch(word):
        return "a token is printable ASCII (no non-breaking or zero-width space)"
    if HOLDS_KEY.search(word):
        return f"a token cannot hold {KEY}= (is the token, or the space before {KEY}=, missing?)"
    return None


def parse_line(words: list[str]) -> Grant | str:
    """The grant of one line's words after its token, or why the line is refused."""
    if not words:
        return EVERY
    key, sep, value = words[0].partition("=")
    if len(words) > 1 or key != KEY or not sep:
        return f"after the token, only {KEY}=NS[,NS...] may follow (one word, no spaces)"
    names = value.split(",")
    if not all(DNS_LABEL.match(n) for n in names):
        return f"{KEY}= takes namespace names (lowercase letters, digits and '-') separated by commas"
    return Grant(frozenset(names))


BREAKS = re.compile(r"[\r\v\f\x1c-\x1e\x85\u2028\u2029]")  # what splitlines ends a line at, but \n
NOT_UTF8 = re.compile(r"[\udc80-\udcff]")  # bytes.decode(errors="surrogateescape")'s stand-ins


def split_lines(text: str) -> list[str]:
    """The file's lines: ended by `\n` alone, one `\r` before it dropped, a leading BOM dropped."""
    out = text.removeprefix("\ufeff").split("\n")
    if out[-1] == "":
        out.pop()  # the last line's end
    return [line.removesuffix("\r") for line in out]


def cut_short(text: str) -> bool:
    """Whether `text` may be a file cut mid-write: its last line holds a token and no line end follows
    it (`TOKEN` of `TOKEN namespaces=team-a`, or `team-a,te` of `team-a,team-b`). A cut anywhere else
    leaves whole lines only, whose tokens are a file's own (a line missing grants nothing)."""
    if not text.removeprefix("\ufeff") or text.endswith("\n"):
        return False
    words = split_lines(text)[-1].split()
    return bool(words) and not words[0].startswith("#")


def narrowest(held: Mapping[K, Grant], read: Mapping[K, Grant]) -> dict[K, Grant]:
    """Each token of both with what both grant (one they grant no namespace in common is left out): a
    file's new text applied before it is known whole, so that a read caught mid-write (a truncated and
    rewritten file: `TOKEN` without its `namespaces=`, `a,te` of `a,team-b`) never widens a grant."""
    out = {}
    for token in held.keys() & read.keys():
        grant = held[token].meet(read[token])
        if grant.namespaces != frozenset():
            out[token] = grant
    return out


def _lines(numbers: Iterable[int]) -> str:
    listed = list(numbers)
    return ("line " if len(listed) == 1 else "lines ") + ", ".join(map(str, listed))


def parse(text: str) -> Parsed:
    """The tokens of a token file's text (decoded with errors="surrogateescape", so that a line that is
    not UTF-8 is refused alone) and their grants; refused lines are left out and said why."""
    found: dict[str, list[tuple[int, Grant]]] = {}
    out = Parsed()
    for number, line in enumerate(split_lines(text), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if NOT_UTF8.search(line):
            out.problems.append(f"line {number}: not UTF-8; refused")
            continue
        if BREAKS.search(line):
            out.problems.append(
                f"line {number}: a form feed, vertical tab, lone CR or Unicode line break inside it"
                " separates words; lines end at LF only"
            )
        refused = token_problem(words[0])
        if refused is not None:
            out.problems.append(f"line {number}: {refused}")
            continue
        grant = parse_line(words[1:])
        if isinstance(grant, str):
            out.problems.append(f"line {number}: {grant}")
            continue
        found.setdefault(words[0], []).append((number, grant))
    for token, lines in found.items():
        numbers = [n for n, _ in lines]
        if len({g for _, g in lines}) > 1:
            out.problems.append(f"{_lines(numbers)}: one token with different namespaces; all refused")
            continue
        if len(lines) > 1:
            out.problems.append(f"{_lines(numbers)}: one token repeated with the same namespaces; kept")
        out.grants[token] = lines[0][1]
    return out
