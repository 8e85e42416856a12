"""Kubernetes label selectors, parsed and matched here (pure), so that a bad one is refused as a 400
naming `labelSelector` before any source sees it, the local source filters with the same semantics as
the API server, and the Kubernetes source passes the server only a selector it rebuilt from parsed,
validated parts (never the client's raw text).

Grammar (k8s.io/apimachinery labels.Parse): requirements separated by commas, each one of
`key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_SELECTOR = 4096  # characters: far above any real selector, and a bound on parsing work
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"^({_PREFIX}/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_REQUIREMENT = re.compile(
    r"^\s*(?:(?P<absent>!)\s*(?P<akey>[^\s!=(),]+)"
    r"|(?P<key>[^\s!=(),]+)(?:\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?)\s*$"
)


class SelectorError(ValueError):
    """The selector does not parse; the message says where."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists | !exists | in | notin (= is in with one value, != notin)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # notin: a missing key matches, as in Kubernetes

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!exists":
            return f"!{self.key}"
        if len(self.values) == 1:
            return f"{self.key}{'=' if self.op == 'in' else '!='}{self.values[0]}"
        return f"{self.key} {self.op} ({','.join(self.values)})"


def _split(text: str) -> list[str]:
    """Requirements split on the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' at character {i + 1}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError("unbalanced '('")
    parts.append(text[start:])
    return parts


def _key(key: str) -> str:
    if not _KEY.match(key) or len(key) > 317:
        raise SelectorError(f"{key!r} is not a label key")
    return key


def _value(value: str) -> str:
    if not _VALUE.match(value):
        raise SelectorError(f"{value!r} is not a label value")
    return value


def parse(text: str) -> tuple[Requirement, ...]:
    """The requirements of a selector; () for an empty one (everything matches).

    Raises:
        SelectorError: it does not parse, or a key or value is not a valid label key or value.
    """
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"longer than {MAX_SELECTOR} characters")
    if not text.strip():
        return ()
    requirements = []
    for part in _split(text):
        m = _REQUIREMENT.match(part)
        if not m or not (m["akey"] or m["key"]):
            raise SelectorError(f"cannot parse {part.strip()!r}")
        if m["absent"]:
            requirements.append(Requirement(_key(m["akey"]), "!exists"))
        elif m["op"]:
            op = "notin" if m["op"] == "!=" else "in"
            requirements.append(Requirement(_key(m["key"]), op, (_value(m["value"]),)))
        elif m["setop"]:
            if not m["values"].strip():
                raise SelectorError(f"{m['setop']} needs at least one value: {part.strip()!r}")
            values = tuple(_value(v.strip()) for v in m["values"].split(","))
            requirements.append(Requirement(_key(m["key"]), m["setop"], values))
        else:
            requirements.append(Requirement(_key(m["key"]), "exists"))
    return tuple(requirements)


def matches(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


def render(requirements: tuple[Requirement, ...]) -> str:
    """The selector as the API server reads it, rebuilt from validated parts."""
    return ",".join(str(r) for r in requirements)
