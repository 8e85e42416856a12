"""What a table's piece manifests must say for a restore to read them: one table (the same row shape,
dtype and optimizer in every piece) and the optimizer state that optimizer keeps for such rows
(contract/optimizers.py's table, as optim/state.py's make_state lays it out).

No hash covers a manifest.json (it holds the hashes), and a restore builds its state from the first
piece's optimizer and copies each piece's files into it: a piece saying another row shape, or a state
the optimizer does not keep, failed there as a KeyError or numpy's "could not broadcast", after the
checkpoint had been chosen. points.pieces_of calls this, so a restore, an export and verify_checkpoint
(the choice of the checkpoint to resume from) refuse it alike, in one line; it imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphtrain.contract.optimizers import BY_NAME
from graphtrain.runtime.checkpoint.chain import MANIFEST
from graphtrain.runtime.errors import DataError

ONE_TABLE = ("row_shape", "dtype", "optimizer")  # what every piece of a table says alike (num_rows: tiling)


State = dict[str, tuple[str, tuple[int | str, ...]]]  # name -> (dtype, shape: "n" for the piece's rows)


def kept_state(manifest: Mapping[str, Any]) -> State:
    """The state the piece's optimizer keeps (make_state's): a row's entries ("n" rows of the row's
    shape) and the table-wide global Adam step, (1,)."""
    optimizer = manifest.get("optimizer")
    if optimizer is None:
        return {}
    dim = manifest["row_shape"][0] if manifest["row_shape"] else 1
    out: State = {}
    for entry in BY_NAME[optimizer["kind"]].state:
        if entry.shape == "step":
            out[entry.name] = ("int64", (1,) if optimizer.get("step_count") == "global" else ("n",))
        else:
            out[entry.name] = ("float32", ("n", dim) if entry.shape == "element" else ("n",))
    return out


def listed_state(manifest: Mapping[str, Any]) -> State | None:
    """The state the piece's manifest lists, as kept_state says it (a row's entries with "n" for their
    rows: chain.is_whole's rule); None where it is not a map of entries with a shape list."""
    state = manifest.get("state")
    if not isinstance(state, dict):
        return None
    optimizer = manifest.get("optimizer") or {}
    out: State = {}
    for name, entry in state.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list):
            return None
        whole = not shape or (name == "step" and optimizer.get("step_count") == "global")
        out[name] = (str(entry.get("dtype")), tuple(shape) if whole else ("n", *shape[1:]))
    return out


def _said(state: State | None) -> str:
    """A state layout in words: `sum float32 (n, 8)`, `step int64 (1,)`."""
    if state is None:
        return "(not a map of entries with their shape)"
    said = [f"{k} {dtype} {str(shape).replace(chr(39), '')}" for k, (dtype, shape) in sorted(state.items())]
    return ", ".join(said) or "none"


def check_piece(manifest: Mapping[str, Any], d: Path) -> None:
    """A piece's optimizer is one of the kinds and its state the one that kind keeps for its rows.

    Raises:
        DataError: naming the manifest, what it lists and what the optimizer keeps.
    """
    optimizer = manifest.get("optimizer")
    row_shape = manifest.get("row_shape")
    if not isinstance(row_shape, list) or not all(type(n) is int and n >= 0 for n in row_shape):
        raise DataError(f"{d / MANIFEST}: row_shape {row_shape!r} is not a list of whole numbers")
    if optimizer is not None and (not isinstance(optimizer, dict) or optimizer.get("kind") not in BY_NAME):
        kind = optimizer.get("kind") if isinstance(optimizer, dict) else optimizer
        raise DataError(f"{d / MANIFEST}: optimizer kind must be one of {tuple(BY_NAME)}, got {kind!r}")
    have, want = listed_state(manifest), kept_state(manifest)
    if have != want:
        kind = "no optimizer" if optimizer is None else f"optimizer {optimizer['kind']}"
        raise DataError(
            f"{d / MANIFEST}: lists optimizer state {_said(have)}, where {kind} over rows of {row_shape} "
            f"keeps {_said(want)}"
        )


def check_pieces(pieces: list[tuple[dict[str, Any], Path]], name: str) -> None:
    """Every piece of table `name` is of one table (ONE_TABLE as its first piece says) and check_piece's.

    Raises:
        DataError: naming the first piece that differs or whose state is not its optimizer's.
    """
    first = pieces[0][0]
    for manifest, d in pieces:
        check_piece(manifest, d)
        for key in ONE_TABLE:
            if manifest.get(key) != first.get(key):
                raise DataError(
                    f"{d / MANIFEST}: {key} {manifest.get(key)!r}, where the first piece of {name!r} says "
                    f"{first.get(key)!r}: a table's pieces are of one table"
                )
