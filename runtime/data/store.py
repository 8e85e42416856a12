"""Save and load a flat set of named arrays as .npy files (mmap-able), with sha256 in a manifest.

Value kinds: numpy arrays (`<key>.npy`), scipy CSR matrices (`<key>.indptr/.indices/.data.npy` plus
the shape in the manifest) and lists of strings (`<key>.txt`, one per line). The manifest records the
kind and shape of each entry and the sha256 of each file; `load` refuses a file that changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graphtrain.runtime.data.cache import hash_tree, read_json, verify_files, write_json
from graphtrain.runtime.errors import DataError

MANIFEST = "manifest.json"
Value = np.ndarray | sp.csr_matrix | list[str]


def save(directory: Path, values: dict[str, Value], meta: dict[str, Any]) -> dict[str, Any]:
    """Write every value under `directory` and a manifest holding `meta`, entries and checksums."""
    entries = write_values(directory, values)
    manifest = {**meta, "entries": entries, "files": hash_tree(directory, exclude=(MANIFEST,))}
    write_json(directory / MANIFEST, manifest)
    return manifest


def write_values(directory: Path, values: dict[str, Value]) -> dict[str, Any]:
    """Write each value as .npy/.txt files under `directory`; return the entries describing them."""
    directory.mkdir(parents=True, exist_ok=True)
    entries: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, sp.csr_matrix):
            for part in ("indptr", "indices", "data"):
                np.save(directory / f"{key}.{part}.npy", getattr(value, part))
            entries[key] = {"kind": "csr", "shape": list(value.shape)}
        elif isinstance(value, np.ndarray):
            np.save(directory / f"{key}.npy", value)
            entries[key] = {"kind": "array", "shape": list(value.shape), "dtype": str(value.dtype)}
        elif isinstance(value, list):
            if any("\n" in s for s in value):
                raise DataError(f"{key}: names must not contain newlines")
            (directory / f"{key}.txt").write_text("\n".join(value) + ("\n" if value else ""))
            entries[key] = {"kind": "strings", "count": len(value)}
        else:
            raise TypeError(f"cannot store {key!r} of type {type(value).__name__}")
    return entries


def read_manifest(directory: Path) -> dict[str, Any]:
    manifest = read_json(directory / MANIFEST)
    if not isinstance(manifest, dict) or "entries" not in manifest or "files" not in manifest:
        raise DataError(f"{directory / MANIFEST}: not a graphtrain manifest")
    return manifest


def load(directory: Path, verify: bool = True, mmap: bool = False) -> tuple[dict[str, Value], dict[str, Any]]:
    """Read back what `save` wrote.

    Raises:
        ChecksumError: a file is missing or changed since it was written (when `verify`).
        DataError: the manifest is missing or malformed.
    """
    manifest = read_manifest(directory)
    if verify:
        verify_files(directory, manifest["files"])
    return read_values(directory, manifest["entries"], mmap), manifest


def read_values(directory: Path, entries: dict[str, Any], mmap: bool = False) -> dict[str, Value]:
    """Read the values `write_values` described by `entries` (arrays memory-mapped if `mmap`)."""
    mode = "r" if mmap else None
    out: dict[str, Value] = {}
    for key, entry in entries.items():
        kind = entry["kind"]
        if kind == "array":
            out[key] = np.load(directory / f"{key}.npy", mmap_mode=mode, allow_pickle=False)
        elif kind == "csr":
            parts = [
                np.load(directory / f"{key}.{p}.npy", allow_pickle=False)
                for p in ("data", "indices", "indptr")
            ]
            out[key] = sp.csr_matrix(tuple(parts), shape=tuple(entry["shape"]))
        elif kind == "strings":
            text = (directory / f"{key}.txt").read_text()
            out[key] = text.split("\n")[: entry["count"]]
        else:
            raise DataError(f"{directory}: unknown entry kind {kind!r} for {key!r}")
    return out
