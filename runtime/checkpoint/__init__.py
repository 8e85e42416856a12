"""Checkpoints of sharded tables, in one format for the shard servers' tables and the collective ones.

    pieces.py     a table's piece written (rows, state, manifest, sha256), checkpoint.json written last
    points.py     LATEST and BEST, resolving and verifying a checkpoint, pruning old ones
    restore.py    a shard's rows restored from any number of pieces; a whole table exported
    chain.py      incremental pieces read through their chain of bases
    increment.py  which rows changed since the last checkpoint, and whether the next piece is a delta
    snapshot.py   copy-on-write snapshots written while training goes on

Callers use the package (`from graphtrain.runtime import checkpoint as ckpt`); the names below are its
interface. Each is imported from its module when first used (PEP 562): pieces.py and restore.py import
torch, which resolving a checkpoint and reading its checkpoint.json (chain.py, points.py: `graphtrain
predict`'s and `infer`'s refusals) never need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphtrain.runtime.checkpoint.chain import FORMAT, FORMAT_VERSION, LATEST, MANIFEST, TOP
    from graphtrain.runtime.checkpoint.pieces import (
        finish_piece,
        gpu_writer,
        mark_latest,
        partition_record,
        piece_dir,
        piece_entry,
        save_keys,
        save_whole,
        write_frozen,
        write_piece,
        write_top,
    )
    from graphtrain.runtime.checkpoint.points import (
        BEST,
        MARKER_MAX_BYTES,
        latest_verified,
        mark_best,
        pieces_of,
        prune,
        read_marker,
        read_top,
        resolve_checkpoint,
        resolve_latest,
        restore_point,
        saved_config,
        saved_round_steps,
        verify_checkpoint,
    )
    from graphtrain.runtime.checkpoint.restore import export_keyed, export_state, export_table, restore_into

# each name of the interface: its module, imported on the name's first use
_HOMES = {
    **dict.fromkeys(["FORMAT", "FORMAT_VERSION", "LATEST", "MANIFEST", "TOP"], "chain"),
    **dict.fromkeys(
        [
            "finish_piece",
            "gpu_writer",
            "mark_latest",
            "partition_record",
            "piece_dir",
            "piece_entry",
            "save_keys",
            "save_whole",
            "write_frozen",
            "write_piece",
            "write_top",
        ],
        "pieces",
    ),
    **dict.fromkeys(
        [
            "BEST",
            "MARKER_MAX_BYTES",
            "latest_verified",
            "mark_best",
            "pieces_of",
            "prune",
            "read_marker",
            "read_top",
            "resolve_checkpoint",
            "resolve_latest",
            "restore_point",
            "saved_config",
            "saved_round_steps",
            "verify_checkpoint",
        ],
        "points",
    ),
    **dict.fromkeys(["export_keyed", "export_state", "export_table", "restore_into"], "restore"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # once: later uses find it as if imported at the top
    return value


def __dir__() -> list[str]:
    """The names not yet used too (dir(), a REPL's completion): __getattr__ imports them on use."""
    return sorted({*globals(), *_HOMES})


# literal, for linters and type checkers (tests/runtime/cli/test_light_imports.py: equal to _HOMES')
__all__ = [
    "BEST",
    "FORMAT",
    "FORMAT_VERSION",
    "LATEST",
    "MANIFEST",
    "MARKER_MAX_BYTES",
    "TOP",
    "export_keyed",
    "export_state",
    "export_table",
    "finish_piece",
    "gpu_writer",
    "latest_verified",
    "mark_best",
    "mark_latest",
    "partition_record",
    "piece_dir",
    "piece_entry",
    "pieces_of",
    "prune",
    "read_marker",
    "read_top",
    "resolve_checkpoint",
    "resolve_latest",
    "restore_into",
    "restore_point",
    "save_keys",
    "save_whole",
    "saved_config",
    "saved_round_steps",
    "verify_checkpoint",
    "write_frozen",
    "write_piece",
    "write_top",
]
