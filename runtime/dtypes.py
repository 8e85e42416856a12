"""Element types a table may have, by wire name: the one table behind the protocol (numpy), the shard
state and the clients (torch). Node data kept as bool or int8 in a partition travels as int32.

bfloat16 has no numpy type: its arrays are its 16 raw bits as int16, on the wire, in checkpoints and
wherever numpy holds them (to_numpy, from_numpy); torch holds them as bfloat16."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

NUMPY: dict[str, np.dtype[Any]] = {
    **{name: np.dtype(name) for name in ("float32", "float64", "int32", "int64", "float16")},
    "bfloat16": np.dtype(np.int16),  # its bits
}
HALF = ("float16", "bfloat16")  # tables stored in half, stepped in float32 (the CPU and CUDA cores)
WIDENED = {"bool": "int32", "int8": "int32"}


def wire_name(dtype: object, widen: bool = False) -> str | None:
    """The wire name of a numpy or torch dtype (or of a name), None when it cannot travel; `widen`
    maps bool and int8 node data to int32."""
    name = str(dtype).removeprefix("torch.")
    if widen:
        name = WIDENED.get(name, name)
    return name if name in NUMPY else None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host tensor's numpy view (no copy); a bfloat16 one's bits as int16."""
    import torch

    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def from_numpy(a: np.ndarray, name: str) -> torch.Tensor:
    """The torch view (no copy) of an array of wire type `name`; bfloat16 from its int16 bits."""
    import torch

    t = torch.from_numpy(a)
    return t.view(torch.bfloat16) if name == "bfloat16" else t


def widened(a: np.ndarray, name: str) -> np.ndarray:
    """An array of wire type `name` as float32 when it is a half type (an export, a client's rows)."""
    if name not in HALF:
        return a
    return from_numpy(np.array(a), name).float().numpy()  # a copy: `a` may be a read-only map


def nonfinite_rows(a: np.ndarray, name: str) -> np.ndarray:
    """Which rows of array `a` of wire type `name` hold a NaN or an infinity (a bool per row). A
    bfloat16 array is its bits as int16: such a value is one whose eight exponent bits are all set (a
    numpy kind "i" array that isfinite calls finite throughout)."""
    flat = a.reshape(len(a), -1)
    if name == "bfloat16":
        return ((flat.view(np.uint16) & 0x7F80) == 0x7F80).any(axis=1)
    if a.dtype.kind != "f":
        return np.zeros(len(a), dtype=bool)
    return ~np.isfinite(flat).all(axis=1)


def narrowed(a: np.ndarray, name: str) -> np.ndarray:
    """float32 rows as wire type `name` (a half type), rounded to nearest even: a half table's gradients
    on the wire, half the bytes (the server widens them again before its float32 step). A finite value
    beyond the type's range saturates to its largest rather than becoming infinite (which the server
    would refuse as a NaN gradient); NaN and infinity stay what they are. Rows within the range (almost
    every push) are cast straight after one min-max pass: the saturating pass (torch.isfinite, where)
    cost a trainer ~100 us per 1,024 x 64 gradients, against ~20 us."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    dtype = to_torch(name)
    top = torch.finfo(dtype).max
    if t.numel():
        lo, hi = torch.aminmax(t)
        if -top <= float(lo) and float(hi) <= top:  # false for an infinity; a NaN casts to NaN either way
            return to_numpy(t.to(dtype))
    t = torch.where(torch.isfinite(t), t.clamp(-top, top), t)
    return to_numpy(t.to(dtype))


def to_torch(name: str) -> torch.dtype:
    """The torch dtype of a wire name (torch names its dtypes as numpy does)."""
    import torch

    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype
