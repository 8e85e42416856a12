"""Rows of a delimited text file (edge lists with string ids, triples), with their line numbers.

One reader for every text input, so every format rule is the same everywhere: UTF-8, `#` comment lines
and blank lines skipped, fields stripped. CSV is read by the csv module (a quoted field may hold a
comma); TSV splits on tabs when the first data line holds a tab (names may then contain spaces),
otherwise on any whitespace (space-separated `.txt` edge lists). The line numbers let every error name
`file:line`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from graphtrain.runtime.data.cache import read_text
from graphtrain.runtime.errors import DataError


@dataclass(frozen=True)
class Rows:
    """The data rows of a text file: fields per row and the 1-based line of each row."""

    path: Path
    fields: list[list[str]]
    lines: list[int]

    def line(self, row: int) -> int:
        return self.lines[row]

    def where(self, row: int) -> str:
        """`path:line` of data row `row`, the prefix of an error about it."""
        return f"{self.path}:{self.lines[row]}"


def is_row(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def read_rows(path: Path, kind: str) -> Rows:
    """The rows of `path` read as `kind` ("csv" or "tsv").

    Raises:
        DataError: the file cannot be read or is not UTF-8 (named by read_text), or a CSV line is malformed.
    """
    numbered = [(i, ln) for i, ln in enumerate(read_text(path).split("\n"), 1) if is_row(ln)]
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
    return Rows(path, fields, [i for i, _ in numbered])
