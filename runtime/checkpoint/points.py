"""Checkpoint points: the LATEST and BEST markers, resolving a path or a marker to a complete
checkpoint, verifying one, pruning old ones, and the optimizer configuration a checkpoint saved.

"Latest" means the newest checkpoint, at or before the one LATEST names, whose every file checks out: a
damaged latest (a changed byte, a missing piece) is skipped for the one before it, with a line saying why.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtrain.runtime.checkpoint import chain, layout
from graphtrain.runtime.checkpoint.chain import FORMAT, FORMAT_VERSION, LATEST, MANIFEST, TOP
from graphtrain.runtime.data.cache import (
    Signature,
    atomic_file,
    files_problem,
    read_json,
    verify_files,
)
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.partition import identity
from graphtrain.runtime.storage import keyspace

if TYPE_CHECKING:
    from graphtrain.runtime.optim import OptimConfig

MARKER_MAX_BYTES = 4096


def read_marker(path: Path) -> str:
    """The checkpoint a marker file (LATEST, BEST) names, relative to its directory. At most
    MARKER_MAX_BYTES + 1 bytes are read, and only from a regular file: opened without blocking, so a
    FIFO in its place is refused rather than waited on, and a huge file is not read whole.

    Raises:
        FileNotFoundError: there is no such file.
        DataError: naming `path` and what it is instead of a marker (a FIFO, a directory, a long or
            binary or multi-line file), or why it cannot be read.
    """
    marker = f"a checkpoint marker (a {LATEST}-like file naming one checkpoint)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise DataError(f"{path}: cannot read the checkpoint marker ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a device"
            raise DataError(f"{path}: is {what}, not {marker}")
        raw = os.read(fd, MARKER_MAX_BYTES + 1)
    except OSError as exc:
        raise DataError(f"{path}: cannot read the checkpoint marker ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    try:
        rel = raw.decode().strip()
    except UnicodeDecodeError:
        rel = ""
    if not rel or len(raw) > MARKER_MAX_BYTES or "\n" in rel:
        raise DataError(f"{path}: not {marker}")
    return rel


def resolve_checkpoint(path: Path) -> Path:
    """The checkpoint directory a user points at: the directory itself, a marker file beside it (LATEST,
    BEST: a text file naming the checkpoint), or a checkpoint root (then its LATEST).

    Raises:
        DataError: naming `path` and what it is instead.
    """
    path = Path(path)
    if path.is_dir():
        if (path / TOP).exists():
            return path
        if (path / LATEST).exists():
            return resolve_checkpoint(path / LATEST)
        raise DataError(f"{path}: not a complete checkpoint (no {TOP}) and no {LATEST} file in it")
    try:
        rel = read_marker(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such checkpoint") from None
    root = path.parent.resolve()
    target = (root / rel).resolve()
    if root not in target.parents:
        raise DataError(f"{path}: names {rel!r}, outside {root}")
    if not (target / TOP).exists():
        raise DataError(f"{path}: names {rel!r}, which is not a complete checkpoint (no {TOP})")
    return target


BEST = "BEST"  # names the checkpoint of the best validation pass (the trainers' runtime/train/best.py)


def mark_best(root: Path, rel: str) -> None:
    """Point <root>/BEST at the complete checkpoint <root>/<rel> (atomic replace); prune keeps it."""
    if not (root / rel / TOP).exists():
        raise DataError(f"{root / rel}: not a complete checkpoint, cannot mark it best")
    with atomic_file(root / BEST) as f:
        f.write(f"{rel}\n".encode())


def prune(root: Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete checkpoints under `root` (never the LATEST one nor the
    BEST one, nor a base a kept incremental one reads), and incomplete ones older than LATEST. Names
    sort by step (step-%09d)."""
    latest = resolve_latest(root)
    if latest is None or keep < 1:
        return []
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    complete = [p for p in dirs if (p / TOP).exists()]
    try:
        best = {read_marker(root / BEST)}
    except (OSError, DataError):
        best = set()
    keep_set = {p.name for p in complete[-keep:]} | {latest.name} | best
    keep_set = chain.keep_with_bases(
        keep_set, {p.name: chain.bases_listed(read_json(p / TOP)) for p in complete}
    )
    removed = []
    for p in dirs:
        if p.name not in keep_set and p.name < latest.name:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def resolve_latest(root: Path) -> Path | None:
    """The checkpoint <root>/LATEST points at, or None if there is none yet."""
    try:
        rel = read_marker(root / LATEST)
    except FileNotFoundError:
        return None
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise DataError(f"{root / LATEST}: points outside the checkpoint root")
    return path


def read_top(root: Path) -> dict[str, Any]:
    """The complete-checkpoint manifest.

    Raises:
        DataError: no checkpoint.json (an incomplete or missing checkpoint) or a malformed one.
    """
    if not (root / TOP).exists():
        raise DataError(f"{root}: no {TOP}; not a complete checkpoint")
    top = read_json(root / TOP)
    if (
        not isinstance(top, dict)
        or top.get("format") != FORMAT
        or top.get("format_version") != FORMAT_VERSION
    ):
        raise DataError(f"{root / TOP}: not a graphtrain checkpoint of version {FORMAT_VERSION}")
    wrong = malformed(top)
    if wrong:
        raise DataError(f"{root / TOP}: not a graphtrain checkpoint: {wrong}")
    return top


def malformed(top: dict[str, Any]) -> str | None:
    """What in a checkpoint.json of the right format has the wrong shape (a hand edit, a damaged file:
    no hash covers it), or None: its readers index it without checking each level."""
    tensors = top.get("tensors")
    if not isinstance(tensors, dict):
        return "tensors is not a map of tables"
    for name, pieces in tensors.items():
        if not isinstance(pieces, list) or not all(
            isinstance(q, dict) and isinstance(q.get("dir"), str) for q in pieces
        ):
            return f"tensors.{name} is not a list of pieces, each with its dir"
        for q in pieces:  # read as <checkpoint>/<dir>: another place would be read (and checked) instead
            if os.path.isabs(q["dir"]) or ".." in Path(q["dir"]).parts:
                return f"tensors.{name}: piece dir {q['dir']!r} is outside the checkpoint"
    for section in ("partition", "trainer"):
        if section in top and not isinstance(top[section], dict):
            return f"{section} is not a map"
    record = top.get("partition", {})
    for key in ("config", "relative", "node_map_sha256"):  # how export and infer find the partition
        if "partition" in top and not isinstance(record.get(key), str):
            return f"partition.{key} is not a string"
    for key in ("table_keys", "table_node_types"):
        if not isinstance(record.get(key, {}), dict):
            return f"partition.{key} is not a map"
    if (wrong := identity.config_problem(record)) is not None:
        return f"partition.{wrong}"
    if "files" in top and (wrong := files_problem(top["files"])) is not None:
        return f"files {wrong}"
    model = (top.get("trainer") or {}).get("model")
    if model is not None and not isinstance(model, dict):
        return "trainer.model is not a map"
    return None


def pieces_of(root: Path, name: str) -> list[tuple[dict[str, Any], Path]]:
    """Manifests and directories of the pieces of tensor `name`, checked to tile [0, num_rows) and to
    describe one table with the optimizer state its optimizer keeps (layout.py)."""
    listed = read_top(root)["tensors"].get(name)
    if not listed:
        return []
    out = []
    for p in listed:
        d = root / p["dir"]
        manifest = read_json(d / MANIFEST)
        if not isinstance(manifest, dict) or not all(
            type(manifest.get(k)) is int for k in ("lo", "hi", "num_rows")
        ):  # no hash covers it: a hand edit would otherwise fail as a TypeError where it is compared
            raise DataError(f"{d / MANIFEST}: not a piece manifest (lo, hi and num_rows are not integers)")
        if (wrong := files_problem(manifest.get("files"))) is not None:
            raise DataError(f"{d / MANIFEST}: not a piece manifest: files {wrong}")
        out.append((manifest, d))
    out.sort(key=lambda x: x[0]["lo"])
    num_rows = out[0][0]["num_rows"]
    expect = 0
    for manifest, d in out:
        if manifest["num_rows"] != num_rows or manifest["lo"] != expect:
            raise DataError(f"{d}: pieces of {name!r} do not tile the table (gap or overlap at row {expect})")
        expect = manifest["hi"]
    if expect != num_rows:
        raise DataError(f"{root}: pieces of {name!r} cover rows [0, {expect}) of {num_rows}")
    layout.check_pieces(out, name)  # one table, the state its optimizer keeps: what a restore reads
    return out


def verify_checkpoint(root: Path, seen: dict[str, Signature] | None = None) -> None:
    """Check that the checkpoint at `root` is complete and unchanged: checkpoint.json, every piece it lists
    (tiling its table, sha256 of every file, an incremental piece's whole chain) and the other files it
    records. What a restore would refuse in files whose hashes match fails it too, in the restore's
    words: rows of NaN or infinity, a piece's rounding count, a dynamic table's keys (twice, or in
    another's piece), pieces of another row shape or a state their optimizer does not keep (pieces_of).
    latest_verified, the one choice of the checkpoint to resume from, then skips it as a damaged one
    rather than the shard servers failing on it. Not checked: what needs the spec (a table's shape,
    dtype, optimizer and vocabulary against the checkpoint's, a shard's capacity for its keys), which
    every checkpoint of a run shares: an older one would not do either. `seen`: gets each file's
    signature (cache.verify_files), for a record (verified.py).

    Raises:
        DataError: naming the first file missing or changed (ChecksumError), the gap in a table, or what
            a restore refuses.
    """
    top = read_top(root)
    for name in top["tensors"]:
        pieces = pieces_of(root, name)
        for manifest, d in pieces:
            chain.verify_piece((root, manifest, d), seen)
            chain.refuse_nonfinite((root, manifest, d))  # hash-valid rows a restore would refuse
        saved_round_steps(pieces)  # a count a restore would refuse, as well
        keyspace.check_pieces(pieces)  # and keys (restore_keyed's piece_keys)
    verify_files(root, top.get("files", {}), seen)


def latest_verified(root: Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint under `root` that verifies, at or before the one LATEST names (None
    if there is no LATEST yet), and one line for each newer one skipped: its name and what is wrong.

    Raises:
        DataError: LATEST exists but no checkpoint at or before it verifies (never a silent fresh start).
    """
    latest = resolve_latest(root)
    if latest is None:
        return None, []
    older = sorted(
        (p for p in root.iterdir() if p.is_dir() and p.name < latest.name and (p / TOP).exists()),
        key=lambda p: p.name,
        reverse=True,
    )
    skipped = []
    for path in [latest, *older]:
        try:
            verify_checkpoint(path)
        except (DataError, OSError) as exc:
            skipped.append(f"checkpoint {path.name} skipped: {' '.join(str(exc).split())}")
            continue
        return path, skipped
    raise DataError(f"{root}: no checkpoint at or before LATEST checks out ({'; '.join(skipped)})")


def restore_point(root: Path, which: str, say: Callable[[str], object] = print) -> Path | None:
    """The checkpoint `--restore which` names under `root`, verified: "latest" is latest_verified's
    choice (None if there is no checkpoint yet; each skipped one is said), anything else a checkpoint's
    directory name.

    Raises:
        DataError: the named checkpoint is incomplete or changed, or none at or before LATEST checks out.
    """
    if which != "latest":
        verify_checkpoint(root / which)
        return root / which
    path, skipped = latest_verified(root)
    for line in skipped:
        say(line)
    return path


def saved_config(
    first: dict[str, Any], name: str, table: tuple[int, tuple[int, ...], str], config: OptimConfig | None
) -> OptimConfig | None:
    """The optimizer a checkpoint's table was saved with, once its shape fits the table's
    (num_rows, row_shape, dtype) and its optimizer the table's `config` (when both have one).

    Raises:
        DataError: naming the mismatch.
    """
    # here, not at the top: the optimizers import torch, which resolving and reading a checkpoint
    # (`graphtrain predict`'s and `infer`'s refusals) never needs
    from graphtrain.runtime.optim import OptimConfig

    saved = (first["num_rows"], tuple(first["row_shape"]), first["dtype"])
    if saved != table:
        raise DataError(
            f"checkpoint of {name!r} is {saved[0]}x{saved[1]} {saved[2]}, the table is {table[0]}x{table[1]} "
            f"{table[2]}: give the table the checkpoint's shape and dtype, or start afresh (--overwrite)"
        )
    found = OptimConfig(**first["optimizer"]) if first["optimizer"] else None
    if config is not None and found is not None and config != found:
        raise DataError(f"checkpoint of {name!r} has optimizer {found}, the table {config}")
    return found


MAX_ROUND_STEPS = 2**63 - 1  # TensorShard.round_steps is an int64


def saved_round_steps(
    pieces: list[tuple[dict[str, Any], Path]], lo: int | None = None, hi: int | None = None
) -> int:
    """A half table's rounding count as saved (pieces.finish_piece's `round_steps`): the piece's of rows
    [lo, hi) where there is one, else the largest of all (seeds differ with the rows anyway); 0 from a
    checkpoint written before counts were kept.

    Raises:
        DataError: a count that is not a whole number in [0, 2**63), naming its piece.
    """
    same = [(m, d) for m, d in pieces if (m.get("lo"), m.get("hi")) == (lo, hi)]
    counts = []
    for m, d in same or pieces:
        n = m.get("round_steps", 0)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_ROUND_STEPS:
            raise DataError(f"{d / MANIFEST}: round_steps must be a whole number in [0, 2**63), got {n!r}")
        counts.append(n)
    return max(counts, default=0)
