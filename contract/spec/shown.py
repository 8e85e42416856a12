"""A user's value as a problem line shows it: short, on one line, and never a secret's.

Every message that echoes what the user wrote (`spec.training.epochs: Input should be greater than or
equal to 1, got -3`) renders it here, so a 10 KB string, a newline that would forge a second problem
line, a NUL, a U+2028 or a whole mapping cannot reach a terminal, a log line or a condition's message
as they are: text is quoted with every unprintable character escaped and cut at SHOWN_CHARS, a
collection is named by its kind and size, and a value under a field whose name says it holds a secret
(token, password, ...) is not shown at all.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

SHOWN_CHARS: Final = 60  # of a value's text, escapes included; the rest is cut with an ellipsis
NOT_SHOWN: Final = "value not shown"  # said instead of a secret's value
# Words of a field's or key's name (camelCase, snake_case, kebab-case or dotted) that say its value may
# be a secret. Whole words: `author` (a node type) is not `auth`.
SECRET_WORDS: Final = frozenset(
    {
        "token",
        "tokens",
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "apikey",
        "bearer",
        "cookie",
        "privatekey",
        "signature",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _escaped(char: str) -> str:
    """`char` as it stands between single quotes on one line: printable as is, else its escape."""
    if char in "'\\":
        return "\\" + char
    if char.isprintable():  # not \n, \r, NUL, U+2028/2029, U+0085, bidi overrides, zero widths
        return char
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


def _byte(byte: int) -> str:
    """One byte as Python's bytes literal writes it: printable ASCII as is, else \\xNN."""
    return _escaped(chr(byte)) if 0x20 <= byte < 0x7F else f"\\x{byte:02x}"


def _quoted(pieces: Iterable[str], count: int, unit: str, prefix: str = "") -> str:
    """The escaped `pieces` (one per character or byte, `count` in all) quoted, cut so that what is
    shown stays within SHOWN_CHARS; only as many pieces as are shown are made."""
    out: list[str] = []
    used = 0
    for piece in pieces:
        used += len(piece)
        if used > SHOWN_CHARS:
            return f"{prefix}'{''.join(out)}…' ({count:,} {unit})"
        out.append(piece)
    return f"{prefix}'{''.join(out)}'"


def _integer(value: int) -> str:
    if abs(value).bit_length() <= 196:  # at most 59 digits: str() is cheap and within Python's limit
        return str(value)
    digits = int(abs(value).bit_length() * 0.30103) + 1  # log10(2): str() refuses past 4,300 digits
    return f"an integer of about {digits:,} digits"


def _counted(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def shown(value: Any) -> str:
    """`value` as a problem line shows it: a number or YAML's true/false/null as written, text quoted
    and escaped (at most SHOWN_CHARS of it), a collection by its kind and size, never its items."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _quoted(map(_escaped, value), len(value), "characters")
    if isinstance(value, bytes | bytearray):  # not UTF-8 perhaps: each byte shown, as b'...' writes it
        return _quoted(map(_byte, value), len(value), "bytes", prefix="b")
    if isinstance(value, Mapping):
        return f"a mapping of {_counted(len(value), 'key', 'keys')}"
    if isinstance(value, list | tuple | set | frozenset):
        kind = "list" if isinstance(value, list | tuple) else "set"
        return f"a {kind} of {_counted(len(value), 'item', 'items')}"
    if isinstance(value, datetime.date | datetime.time):  # YAML reads 2024-01-01 as a date
        return value.isoformat()
    return f"a {type(value).__name__}"


def printable(text: str) -> str:
    """`text` with only its unprintable characters escaped (`\\n`, `\\u2028`): for a message that must
    stay as another renders it (a rule's, the same as its CEL twin's) where that other is printable."""
    return text if text.isprintable() else "".join(c if c.isprintable() else _escaped(c) for c in text)


def name_in_path(name: str) -> str:
    """A field's or mapping key's name in a problem's path: as written, unless it could break the line
    or run long (a key is the user's text too: `zone\n`, 10 KB of it), then as shown() writes text."""
    return name if name.isprintable() and len(name) <= SHOWN_CHARS else shown(name)


def secret_name(name: str) -> bool:
    """Whether a field or key called `name` may hold a secret (a word of it is in SECRET_WORDS; `apiKey`
    and `private_key` read as one word)."""
    words = [w.lower() for w in _WORD.findall(name)]
    pairs = [a + b for a, b in zip(words, words[1:], strict=False)]
    return any(w in SECRET_WORDS for w in words + pairs)


def secret_path(loc: Iterable[Any]) -> bool:
    """Whether any name on the way to a value (a pydantic error's `loc`) says it may be a secret: a
    token's mapping hides its items too."""
    return any(isinstance(part, str) and secret_name(part) for part in loc)


def with_value(message: str, value: Any, loc: Iterable[Any]) -> str:
    """`message`, followed by the value it is about (`, got -3`) unless it already shows it; a secret's
    value, shown or not, becomes NOT_SHOWN."""
    text = shown(value)
    # a number's digits may be the bound's ("greater than or equal to 10, got 1"): only text, quoted, or
    # a closing "got ..." counts as shown
    said = text.startswith(("'", "b'")) and text in message or message.endswith(f"got {text}")
    if secret_path(loc):
        return message.replace(text, "the value (not shown)") if said else f"{message} ({NOT_SHOWN})"
    return message if said else f"{message}, got {text}"


# pydantic errors whose input is not the value they are about: an unknown field's (its name is the path,
# its value no field's), a missing one's and a union tag's (the mapping around it; the tag is said)
_ABOUT_ANOTHER: Final = frozenset({"extra_forbidden", "missing", "union_tag_invalid", "union_tag_not_found"})


def error_message(error: Mapping[str, Any]) -> str:
    """The message of one of pydantic's errors (`ValidationError.errors()`), naming the value written
    (with_value). Not where the input is no value of the field, nor a model's own check (a ValueError
    about a mapping or list, which names what is wrong in it)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    kind = error["type"]
    if kind in _ABOUT_ANOTHER or kind == "value_error" and isinstance(value, Mapping | list):
        return message
    return with_value(message, value, error["loc"])
