"""Rows of a delimited text file (edge lists with string ids, triples), with their line numbers.

One reader for every text input, so every format rule is the same everywhere: UTF-8 (a leading byte
order mark dropped), blank lines skipped, fields stripped. A line whose first character is `#` is a
comment and skipped, with a DataWarning counting such lines: a label that begins with `#` must not start
a line (PyKEEN has no comments; a `#` elsewhere, or after leading spaces, is data). CSV is read by the
csv module (a quoted field may hold a comma); TSV splits on tabs when the first data line holds a tab
(names may then contain spaces), otherwise on any whitespace (space-separated `.txt` edge lists). The
line numbers let every error name `file:line`.
"""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass
from pathlib import Path

from graphtrain.runtime.data.cache import read_text
from graphtrain.runtime.errors import DataError, DataWarning


@dataclass(frozen=True)
class TextRows:
    """The data rows of a text file: fields per row and the 1-based line of each row."""

    path: Path
    fields: list[list[str]]
    lines: list[int]

    def line(self, row: int) -> int:
        return self.lines[row]

    def where(self, row: int) -> str:
        """`path:line` of data row `row`, the prefix of an error about it."""
        return f"{self.path}:{self.lines[row]}"


def is_comment(line: str) -> bool:
    return line.startswith("#")


def numbered_lines(path: Path) -> list[tuple[int, str]]:
    """The data lines of `path` with their 1-based line numbers: blank and comment lines left out, and a
    DataWarning when there were comments (a row whose first label begins with `#` would vanish silently).

    Raises:
        DataError: the file cannot be read or is not UTF-8 (named by read_text).
    """
    out, comments = [], []
    for i, line in enumerate(read_text(path).split("\n"), 1):
        if is_comment(line):
            comments.append(i)
        elif line.strip():
            out.append((i, line))
    if comments:
        warnings.warn(
            f"{path}: {len(comments):,} line(s) starting with '#' skipped as comments (line "
            f"{', '.join(map(str, comments[:3]))}{', ...' if len(comments) > 3 else ''}); a label "
            "beginning with '#' cannot start a line",
            DataWarning,
            stacklevel=3,
        )
    return out


def read_rows(path: Path, kind: str) -> TextRows:
    """The rows of `path` read as `kind` ("csv" or "tsv").

    Raises:
        DataError: the file cannot be read or is not UTF-8 (named by read_text), or a CSV line is malformed.
    """
    return split_rows(path, numbered_lines(path), kind)


def split_rows(path: Path, numbered: list[tuple[int, str]], kind: str) -> TextRows:
    """The fields of `numbered` (from numbered_lines) read as `kind` ("csv" or "tsv")."""
    fields: list[list[str]] = []
    if kind == "csv":
        for lineno, line in numbered:
            try:
                row = next(csv.reader([line], skipinitialspace=True))
            except csv.Error as exc:
                raise DataError(f"{path}:{lineno}: not a CSV line ({exc})") from None
            fields.append([f.strip() for f in row])
    else:
        tabs = bool(numbered) and "\t" in numbered[0][1]
        for _, line in numbered:
            fields.append([f.strip() for f in line.split("\t")] if tabs else line.split())
    return TextRows(path, fields, [i for i, _ in numbered])
