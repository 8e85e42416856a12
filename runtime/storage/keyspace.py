"""A dynamic vocabulary's keys in a checkpoint piece, checked with numpy alone.

Its own module, without torch (keyed.py imports it): a restore (keyed.restore_keyed, export_keyed) and
checkpoint.verify_checkpoint read a piece's keys with the one function here, so the choice of the
checkpoint to resume from (latest_verified: the launcher, the trainers, a shard server's `--restore
latest`) skips a checkpoint whose keys a restore refuses, in the restore's words, and stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.data.npz import load_array
from graphtrain.runtime.errors import DataError

KEYS = "keys.npy"  # a dynamic vocabulary's piece: the key of each row in use, rows 0..len-1


def owners(keys: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each key: key mod shards (non-negative for negative keys too)."""
    return np.remainder(keys, shards)


def read_keys(d: Path, rows: int | None = None) -> np.ndarray:
    """The keys.npy of piece directory `d`, never unpickled: a file numpy cannot read as a plain array
    (an object array, no .npy header) is numpy's ValueError, and a float or 2-D array indexed the keys'
    rows with an IndexError; both end the command in a traceback instead of one line.

    Raises:
        DataError: naming the file and what it holds instead of a 1-D int64 array.
    """
    path = d / KEYS
    keys = load_array(path)
    if keys.dtype != np.int64 or keys.ndim != 1:
        raise DataError(f"{path}: holds {keys.dtype} {tuple(keys.shape)}, not a piece's 1-D int64 keys")
    if rows is not None and len(keys) > rows:
        raise DataError(f"{path}: holds {len(keys):,} keys, more than the piece's {rows:,} rows")
    return keys


def check_keys(keys: np.ndarray, index: int, count: int, where: str) -> None:
    """The keys of piece `index` of `count` (a shard's or rank's, in order) are distinct and its own
    (key mod count): a checkpoint that says otherwise is refused, never loaded as it is.

    Raises:
        DataError: naming the piece and the first wrong key.
    """
    wrong = np.flatnonzero(owners(keys, count) != index) if count > 1 else np.empty(0, np.int64)
    if wrong.size:
        raise DataError(f"{where}: key {int(keys[wrong[0]])} does not belong to piece {index} of {count}")
    if not arrays.distinct(keys):
        raise DataError(f"{where}: a key appears twice")


def piece_keys(manifest: Mapping[str, Any], d: Path, index: int, count: int) -> np.ndarray:
    """The keys of piece `index` of a dynamic table's `count` pieces (manifest and directory `d`), as a
    restore takes them: present, 1-D int64, no more than the piece's rows, distinct and its own.

    Raises:
        DataError: the piece holds no keys (not a dynamic table's), or read_keys' or check_keys' refusal.
    """
    if not (d / KEYS).exists():
        raise DataError(f"{d}: no {KEYS}: the checkpoint's table is not a dynamic vocabulary's")
    keys = read_keys(d, int(manifest.get("rows", int(manifest["hi"]) - int(manifest["lo"]))))
    check_keys(keys, index, count, str(d))
    return keys


def check_pieces(pieces: list[tuple[dict[str, Any], Path]]) -> None:
    """What a restore refuses in a table's keys, for checkpoint.verify_checkpoint: nothing for a table of
    fixed rows (no piece holds keys.npy), else piece_keys of every piece (one without keys too: a restore
    into a dynamic table refuses it, and into a fixed one any piece with keys: keyed.refuse_keyed).

    Raises:
        DataError: piece_keys' refusal of the first piece refused.
    """
    if any((d / KEYS).exists() for _, d in pieces):
        for index, (manifest, d) in enumerate(pieces):
            piece_keys(manifest, d, index, len(pieces))


__all__ = ["KEYS", "check_keys", "check_pieces", "owners", "piece_keys", "read_keys"]


def nonfinite_refused(path: Path, count: int, first: str) -> DataError:
    """The one refusal of a checkpoint file holding `count` rows of NaN or infinity (`first`: the first,
    named as its table row or key): training never writes one, so the file was changed. A restore
    (storage/keyed.py) and the choice of a checkpoint to resume (checkpoint/chain.py) both say it."""
    return DataError(
        f"{path}: {count:,} row(s) hold NaN or infinity (first: {first}), which training never writes: "
        "the checkpoint was changed"
    )
