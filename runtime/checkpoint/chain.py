"""Incremental checkpoints, read side: a delta piece holds only the rows of a table changed since a base
checkpoint; reading one reads its chain (a full piece, then each delta in order), every file checked.

A delta piece's directory holds rows.npy (the piece-local rows it holds, ascending), data.npy and
state.<key>.npy of those rows only (a table-wide value, such as the global Adam step, whole), and a
manifest whose "delta" names its base: the checkpoint beside it ("base"), the sha256 of the base's
checkpoint.json ("sha256": a base deleted and taken again, or changed, is not the one the delta was
taken on) and the chain's depth (1 for the first delta after a full piece; it falls by one each step
down the chain, so a chain always ends). The base piece is the same table's piece of the same rows
[lo, hi) in the base checkpoint. checkpoint.json lists a delta piece with its "base" too, so retention
(checkpoint.prune) keeps every checkpoint a kept one reads without opening the pieces.

Its own module, below checkpoint.py (which reads every piece through it), so the format's file names
live here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime.data.cache import Signature, read_json, sha256_file, verify_files
from graphtrain.runtime.data.npz import load_array
from graphtrain.runtime.dtypes import NUMPY, nonfinite_rows
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.storage.keyspace import KEYS, nonfinite_refused

FORMAT = "graphtrain-checkpoint"
FORMAT_VERSION = 1
TOP = "checkpoint.json"
MANIFEST = "manifest.json"
LATEST = "LATEST"
ROWS = "rows.npy"  # a delta piece's rows, local to the piece
SCAN_ROWS = 1 << 12  # rows checked for NaN at a time: a cache-sized slice of a memory-mapped table

Piece = tuple[Path, dict[str, Any], Path]  # (checkpoint directory, piece manifest, piece directory)


def is_whole(manifest: Mapping[str, Any], key: str) -> bool:
    """Whether file `key` ("data", "state.<name>") of a piece is one table-wide value, not a row each
    (snapshot.TableSnapshot writes those whole, a delta too)."""
    if key == "data":
        return False
    shape = manifest["state"][key.removeprefix("state.")]["shape"]
    optimizer = manifest.get("optimizer") or {}
    return len(shape) == 0 or (key == "state.step" and optimizer.get("step_count") == "global")


def held_rows(manifest: Mapping[str, Any]) -> int:
    """Rows a full piece's files hold: its range's, or a dynamic vocabulary's rows in use ("rows": its
    files hold rows 0..rows-1 of its share, the keys.npy ones, not the share's whole capacity)."""
    return int(manifest.get("rows", int(manifest["hi"]) - int(manifest["lo"])))


def files_of(manifest: Mapping[str, Any]) -> list[str]:
    """The arrays of a piece, by file stem: "data", then "state.<name>" for each optimizer state."""
    return ["data", *(f"state.{k}" for k in manifest["state"])]


def base_of(piece: Piece) -> Piece:
    """The piece that delta `piece` was taken on, checked to be the one it names.

    Raises:
        DataError: one line naming the checkpoint, the piece and why its base cannot be read (missing
            or incomplete, changed since, no such piece, another table layout).
    """
    root, manifest, _ = piece
    delta, name, lo, hi = manifest["delta"], manifest["name"], manifest["lo"], manifest["hi"]
    base = root.parent / str(delta["base"])
    where = f"checkpoint {root.name}: its piece of {name!r} rows [{lo}, {hi}) is a delta on {base.name}"
    if base.parent != root.parent or base == root:
        raise DataError(f"{where}, which is not a checkpoint beside it")
    if not (base / TOP).is_file():
        raise DataError(f"{where}, which is missing or incomplete (no {TOP})")
    if sha256_file(base / TOP) != delta["sha256"]:
        raise DataError(f"{where}, which changed since (its {TOP} is not the one the delta was taken on)")
    listed = read_json(base / TOP)["tensors"].get(name, [])
    entry = next((p for p in listed if p["lo"] == lo and p["hi"] == hi), None)
    if entry is None:
        raise DataError(f"{where}, which holds no piece of those rows")
    d = base / entry["dir"]
    found = read_json(d / MANIFEST)
    same = ("num_rows", "row_shape", "dtype", "optimizer", "state")
    depth = found.get("delta", {}).get("depth", 0)
    if any(found.get(k) != manifest.get(k) for k in same) or depth != delta["depth"] - 1:
        raise DataError(f"{where}, whose piece there is of another table or chain")
    return base, found, d


def chain(piece: Piece) -> list[Piece]:
    """The pieces that make `piece` whole: its full piece first, then each delta, `piece` last."""
    out = [piece]
    while "delta" in out[-1][1]:
        out.append(base_of(out[-1]))
    return out[::-1]


def _delta_rows(d: Path, manifest: Mapping[str, Any]) -> np.ndarray:
    """A delta piece's rows.npy, checked: piece-local rows of a table piece of hi - lo rows, int64,
    strictly ascending (the writer's order; a row once). The sha256 proves the file is the one written,
    not that it holds rows: rows past the piece were skipped by load_piece (the base's stale values
    exported and restored, exit 0) and a float array was an IndexError from inside numpy.

    Raises:
        DataError: naming the file and what is wrong with it.
    """
    path = d / ROWS
    rows = np.asarray(load_array(path))
    span = int(manifest["hi"]) - int(manifest["lo"])
    if rows.dtype != np.int64 or rows.ndim != 1:
        raise DataError(
            f"{path}: holds {rows.dtype} {tuple(rows.shape)}, not the int64 rows of a delta piece"
        )
    if len(rows) and (rows[0] < 0 or rows[-1] >= span or bool((np.diff(rows) <= 0).any())):
        raise DataError(f"{path}: not ascending rows within the piece's {span} rows")
    return rows


def verify_piece(
    piece: Piece, seen: dict[str, Signature] | None = None, trusted: Mapping[str, Signature] | None = None
) -> None:
    """Every file of every piece of the chain has its recorded sha256 (ChecksumError, a DataError, names
    the first that does not; a base that cannot be read is one line from base_of), and every array the
    dtype and shape its manifest says (_checked; read from the .npy header alone). `seen` and `trusted`:
    cache.verify_files' (a file hashed before start and unchanged since is not hashed again)."""
    for _, manifest, d in chain(piece):
        verify_files(d, manifest["files"], seen, trusted)
        rows = len(_delta_rows(d, manifest)) if "delta" in manifest else held_rows(manifest)
        for key in files_of(manifest):
            path = d / f"{key}.npy"
            _checked(load_array(path, "r"), manifest, key, path, rows)


def refuse_nonfinite(piece: Piece) -> None:
    """Refuse a piece whose chain holds a row of NaN or infinity. Training never writes one, and every
    restore refuses one (storage/keyed.py refuse_nonfinite), so a checkpoint whose hashes were made to
    match such rows is as damaged as one of a changed byte: verify_checkpoint calls this, so that
    resuming skips it for the checkpoint before it instead of failing in a shard server's restore.

    Raises:
        DataError: naming the file, how many rows, and the first (its table row or key)."""
    for _, manifest, d in chain(piece):
        path = d / "data.npy"
        rows = load_array(path, "r")
        dtype = str(manifest.get("dtype", "float32"))
        bad = np.zeros(len(rows), dtype=bool)
        for i in range(0, len(rows), SCAN_ROWS):
            chunk = np.asarray(rows[i : i + SCAN_ROWS])
            if nonfinite_rows(chunk.reshape(1, -1), dtype)[0]:  # as one row first: ~2.5x faster
                bad[i : i + SCAN_ROWS] = nonfinite_rows(chunk, dtype)
        if not bad.any():
            continue
        first = int(np.argmax(bad))
        if (d / KEYS).exists():
            where = f"key {int(load_array(d / KEYS, 'r')[first])}"
        else:
            local = int(_delta_rows(d, manifest)[first]) if "delta" in manifest else first
            where = f"row {int(manifest['lo']) + local}"
        raise nonfinite_refused(path, int(bad.sum()), where)


def _checked(array: np.ndarray, manifest: Mapping[str, Any], key: str, path: Path, rows: int) -> np.ndarray:
    """`array` (file `key` of a piece holding `rows` rows) if its dtype and shape are what the manifest
    says: the sha256 checks that a file is the one written, not that the manifest describes it (a
    float16 file under a manifest saying bfloat16 would load as other numbers).

    Raises:
        DataError: naming the file, what it holds and what its manifest says.
    """
    if key == "data":
        want = np.dtype(NUMPY.get(str(manifest.get("dtype")), np.dtype("V1")))
        shape: tuple[int, ...] = (rows, *manifest["row_shape"])
    else:
        state = manifest["state"][key.removeprefix("state.")]
        want = np.dtype(NUMPY.get(str(state["dtype"]), np.dtype("V1")))
        shape = tuple(state["shape"]) if is_whole(manifest, key) else (rows, *state["shape"][1:])
    if array.dtype != want or tuple(array.shape) != shape:
        said = manifest.get("dtype") if key == "data" else state["dtype"]
        raise DataError(f"{path}: holds {array.dtype} {tuple(array.shape)}, its manifest says {said} {shape}")
    return array


def load_piece(
    piece: Piece, src: slice = slice(None), keys: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Rows `src` (piece-local) of the arrays `keys` of `piece` (default: files_of, every one; a
    table-wide one whole), through its chain: a full piece's as read-only memory maps, a delta's as a
    copy with each delta applied in turn."""
    pieces = chain(piece)
    _, first, d = pieces[0]
    out: dict[str, np.ndarray] = {}
    for key in files_of(first) if keys is None else keys:
        path = d / f"{key}.npy"
        whole = _checked(load_array(path, "r"), first, key, path, held_rows(first))
        out[key] = whole if is_whole(first, key) else whole[src]
    if len(pieces) == 1:
        return out
    out = {k: np.array(v) for k, v in out.items()}
    start, stop, _ = src.indices(first["hi"] - first["lo"])
    for _, manifest, d in pieces[1:]:
        rows = _delta_rows(d, manifest)
        keep = (rows >= start) & (rows < stop)
        for key in out:
            path = d / f"{key}.npy"
            saved = _checked(load_array(path, "r"), manifest, key, path, len(rows))
            if is_whole(manifest, key):
                out[key] = np.array(saved)
            else:
                out[key][rows[keep] - start] = saved[keep]
    return out


def keep_with_bases(keep: Iterable[str], based_on: Mapping[str, Iterable[str]]) -> set[str]:
    """`keep` and every checkpoint a kept one's chains read (`based_on`: each checkpoint's direct bases),
    so retention never deletes a base a kept delta needs."""
    out: set[str] = set()
    todo = list(keep)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(based_on.get(name, ()))
    return out


def bases_listed(top: Mapping[str, Any]) -> set[str]:
    """The checkpoints a checkpoint.json's delta pieces are taken on."""
    return {str(p["base"]) for ps in top.get("tensors", {}).values() for p in ps if "base" in p}
