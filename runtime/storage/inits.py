"""A table's initial rows: generated in fixed global blocks of rows, each from its own seed, so a
table's initial values do not depend on how it is split across servers. The spec is checked first
(init_spec), so a bad value is refused naming its field on every path (the server's, the
in-process one) instead of failing inside torch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from graphtrain.runtime.storage.errors import StorageError, echo

INIT_BLOCK_ROWS = 1 << 16
INIT_KINDS = ("zeros", "uniform", "normal")
_KEYS = {"kind", "low", "high", "mean", "std", "norm", "seed"}


def init_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A table's initial-value spec, checked: {"kind": zeros|uniform|normal, "low", "high", "mean",
    "std", "norm" (finite numbers; low below high, std and norm (each row's L2 norm, 0: as drawn) not
    negative), "seed" (an integer in [0, 2**63))}; the defaults (-1, 1, 0, 1, 0, 0) count in the checks.

    Raises:
        StorageError: naming the field.
    """
    if not isinstance(spec, dict):
        raise StorageError(f"argument 'init' must be a map, got {type(spec).__name__}")
    kind = spec.get("kind", "zeros")
    if kind not in INIT_KINDS:
        raise StorageError(f"init kind must be one of {INIT_KINDS}, got {echo(kind)}")
    unknown = set(spec) - _KEYS
    if unknown:
        raise StorageError(f"init has unknown keys {echo(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {"kind": kind}
    for key in ("low", "high", "mean", "std", "norm"):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise StorageError(f"argument {key!r} must be int/float, got {type(value).__name__}")
            if not math.isfinite(value):
                raise StorageError(f"argument {key!r} must be a finite number, got {value}")
            out[key] = float(value)
    if "seed" in spec:
        seed = spec["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise StorageError(f"argument 'seed' must be int, got {type(seed).__name__}")
        if not 0 <= seed <= 2**63 - 1:
            raise StorageError(f"argument 'seed' must be in [0, {2**63 - 1}], got {seed}")
        out["seed"] = seed
    low, high = out.get("low", -1.0), out.get("high", 1.0)
    if kind == "uniform" and not low < high:
        raise StorageError(f"init 'low' must be below 'high', got low {low} and high {high}")
    for key in ("std", "norm"):
        if out.get(key, 0.0) < 0:
            raise StorageError(f"init {key!r} must be >= 0, got {out[key]}")
    return out


def init_rows(spec: dict[str, Any], lo: int, hi: int, row_shape: tuple[int, ...], out: torch.Tensor) -> None:
    """Fill `out` (rows lo..hi) from an init spec, the same values whatever the split.

    spec: {"kind": "zeros"|"uniform"|"normal", "low", "high", "mean", "std", "seed"}, checked by
    init_spec.

    Raises:
        StorageError: a bad init spec, naming the field.
    """
    spec = init_spec(spec)
    kind = spec["kind"]
    if kind == "zeros" or out.numel() == 0:
        out.zero_()
        return
    seed = spec.get("seed", 0)
    first, last = lo // INIT_BLOCK_ROWS, (hi - 1) // INIT_BLOCK_ROWS
    for block in range(first, last + 1):
        b_lo = block * INIT_BLOCK_ROWS
        a, b = max(lo, b_lo), min(hi, b_lo + INIT_BLOCK_ROWS)
        # modulo 2**64: the generator's seed range; the same seeds as before wherever they fitted
        gen = torch.Generator().manual_seed((seed * 1_000_003 + block) % 2**64)
        # half tables draw in float32 and round once: a float32 table's values, to nearest
        draw = torch.float32 if out.dtype in (torch.float16, torch.bfloat16) else out.dtype
        vals = torch.empty((INIT_BLOCK_ROWS, *row_shape), dtype=draw)
        if kind == "uniform":
            vals.uniform_(float(spec.get("low", -1.0)), float(spec.get("high", 1.0)), generator=gen)
        else:
            vals.normal_(float(spec.get("mean", 0.0)), float(spec.get("std", 1.0)), generator=gen)
        out[a - lo : b - lo] = vals[a - b_lo : b - b_lo]
    if spec.get("norm") and out.dim() > 1:  # each row scaled to that L2 norm (KGE rows on the sphere)
        rows = out.view(len(out), -1)
        wide = rows.float()
        rows.copy_(wide * (spec["norm"] / wide.norm(dim=1, keepdim=True).clamp_min_(1e-12)))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (the native core's mix64), element-wise on uint64 (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unit(keys: np.ndarray, cols: int, seed: int, stream: int) -> np.ndarray:
    """(len(keys), cols) uniforms in [0, 1), each a hash of (seed, stream, key, column): the native
    core's gt_keyed_unit (threads, one pass; the numpy reference below made up most of a dynamic
    table's insert time), the same bits."""
    from graphtrain.runtime.native import core

    keys = np.ascontiguousarray(keys, dtype=np.int64)
    out = np.empty((len(keys), cols), dtype=np.float64)
    base = (int((seed * 2 + stream) % 2**64) * int(_GOLDEN)) % 2**64
    core().gt_keyed_unit(len(keys), keys.ctypes.data, cols, base, out.ctypes.data)
    return out


def unit_reference(keys: np.ndarray, cols: int, seed: int, stream: int) -> np.ndarray:
    """_unit in numpy: what the native core is tested against."""
    with np.errstate(over="ignore"):
        k = keys.astype(np.uint64)[:, None] * np.uint64(cols) + np.arange(cols, dtype=np.uint64)[None, :]
        base = np.uint64((seed * 2 + stream) % 2**64) * _GOLDEN
        bits = _mix64(k * _GOLDEN + base)
    return (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24


def init_keyed(spec: dict[str, Any], keys: np.ndarray, dim: int) -> np.ndarray:
    """The initial rows of a dynamic vocabulary's `keys` (any int64): a function of (spec, key) alone, so
    a key gets the same row whichever shard inserts it and whenever, and an unseen key's pull returns it
    without inserting. Counter-based (a hash of seed, key and column) rather than torch's generators,
    which draw blocks of consecutive rows."""
    spec = init_spec(spec)
    kind, seed = spec["kind"], spec.get("seed", 0)
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    if kind == "zeros" or len(keys) == 0:
        return np.zeros((len(keys), dim), dtype=np.float32)
    if kind == "uniform":
        low, high = float(spec.get("low", -1.0)), float(spec.get("high", 1.0))
        rows = (low + (high - low) * _unit(keys, dim, seed, 0)).astype(np.float32)
    else:
        u1, u2 = _unit(keys, dim, seed, 0), _unit(keys, dim, seed, 1)
        normal = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller; 1 - u1 > 0
        rows = (float(spec.get("mean", 0.0)) + float(spec.get("std", 1.0)) * normal).astype(np.float32)
    if spec.get("norm"):  # each row scaled to that L2 norm, as init_rows does
        rows *= np.float32(spec["norm"]) / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows
