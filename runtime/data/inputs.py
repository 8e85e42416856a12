"""The files a spec's `graph:` section reads: where they are and what they hold.

Relative paths in a spec (graph.path, features, labels, triples.*, nodes[].files, edges[].files) mean
"beside the spec": they are resolved
from the spec's directory (the local launcher, `validate`, `partition --spec`) or from a base directory the
caller names (`partition --base-dir`: the operator's pods resolve from storage.mountPath, since their spec
is a mounted ConfigMap). Absolute paths stay as they are.

A partition is reused only while its inputs are the same bytes: `fingerprint` is the sha256 of every input
file (a bundled dataset: its manifest, which records the sha256 of each processed file), so a rewritten
file with the same name, size or even mtime is noticed and the graph partitioned again.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from graphtrain.contract.spec import GraphSource
from graphtrain.runtime.data import files
from graphtrain.runtime.data.cache import reason
from graphtrain.runtime.errors import DataError

_PATH_FIELDS = ("path", "features", "labels")
_TRIPLE_FIELDS = ("path", "valid", "test")


def _absolute(value: str | None, base: Path) -> str | None:
    return None if value is None else str(files.resolve(value, base))


def resolve(source: GraphSource, base: Path) -> GraphSource:
    """`source` with every relative file path made absolute from `base` (the spec's directory)."""
    base = Path(base).absolute()
    update: dict[str, Any] = {f: _absolute(getattr(source, f), base) for f in _PATH_FIELDS}
    if source.triples is not None:
        update["triples"] = source.triples.model_copy(
            update={f: _absolute(getattr(source.triples, f), base) for f in _TRIPLE_FIELDS}
        )
    for key in ("nodes", "edges"):
        entries = getattr(source, key)
        if entries is not None:
            update[key] = [
                e.model_copy(update={"files": [_absolute(f, base) for f in e.files]}) for e in entries
            ]
    return source.model_copy(update=update)


def input_files(source: GraphSource) -> dict[str, Path]:
    """The input files of a (resolved) source, keyed by the spec field naming each."""
    out = {f"graph.{f}": Path(v) for f in _PATH_FIELDS if (v := getattr(source, f)) is not None}
    if source.triples is not None:
        out |= {
            f"graph.triples.{f}": Path(v)
            for f in _TRIPLE_FIELDS
            if (v := getattr(source.triples, f)) is not None
        }
    for key in ("nodes", "edges"):
        for i, entry in enumerate(getattr(source, key) or []):
            out |= {f"graph.{key}[{i}].files[{j}]": Path(f) for j, f in enumerate(entry.files)}
    return out


def require_files(source: GraphSource, base_dir: Path | None) -> None:
    """DataError naming the spec field of the first of graph.path, features, labels and triples.* that is
    missing or not a regular file. A user's first mistake is often a path, and the readers below name
    only the file; typed files' readers (graph.nodes, graph.edges) name their field themselves."""
    for field, path in input_files(source).items():
        if field.startswith(("graph.nodes", "graph.edges")):
            continue
        what = "graph" if field == "graph.path" else field.rsplit(".", 1)[1]
        try:
            files.regular_file(files.resolve(str(path), base_dir), what)
        except DataError as exc:
            raise DataError(f"spec.{field}: {exc}") from None


def _open_regular(path: Path, field: str) -> int:
    """A descriptor of input file `path` for reading; a missing, unreadable or not regular one (a FIFO
    would block the run forever) is a DataError naming the field. Opened without blocking, then checked
    by fstat, so what is read is what was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DataError(f"spec.{field}: {path}: file not found") from None
    except OSError as exc:
        raise DataError(f"spec.{field}: {path}: {reason(exc)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # checked before fdopen, which raises IsADirectoryError on a directory
        os.close(fd)
        kind = "a directory, not a file" if stat.S_ISDIR(mode) else "not a regular file"
        raise DataError(f"spec.{field}: {path} is {kind}")
    return fd


def require_readable(source: GraphSource) -> None:
    """Every input file of a (resolved) source can be opened for reading, else a DataError naming the
    field of the first that cannot: `graphtrain run` checks before it makes or changes its run
    directory, so a path's typo leaves nothing behind (a new directory holding a Failed status, which
    the corrected run then had to take over) and changes nothing of a run it resumes."""
    for field, path in input_files(source).items():
        os.close(_open_regular(path, field))


def sha256_of(path: Path, field: str) -> str:
    """sha256 of one input file (_open_regular's refusals, naming the field)."""
    fd = _open_regular(path, field)
    with os.fdopen(fd, "rb") as f:
        try:
            return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as exc:
            raise DataError(f"spec.{field}: {path}: {reason(exc)}") from None


def fingerprint(source: GraphSource, dataset_dir: Path | None = None) -> dict[str, str]:
    """What the graph is made of, as content hashes: {spec field: sha256} of a (resolved) source's files,
    or {"graph.dataset": sha256 of the dataset's manifest} (`dataset_dir`: where it is cached; a dataset
    not fetched yet has no manifest and fingerprints as "unfetched")."""
    if source.dataset is not None:
        manifest = None if dataset_dir is None else dataset_dir / "manifest.json"
        if manifest is None or not manifest.is_file():
            return {"graph.dataset": "unfetched"}
        return {"graph.dataset": sha256_of(manifest, "graph.dataset")}
    return {field: sha256_of(path, field) for field, path in input_files(source).items()}
