"""A table's initial rows: generated in fixed global blocks of rows, each from its own seed, so a
table's initial values do not depend on how it is split across servers. The spec is checked first
(protocol.init_spec), so a bad value is refused naming its field on every path (the server's, the
in-process one) instead of failing inside torch."""

from __future__ import annotations

from typing import Any

import torch

from graphtrain.runtime.kvstore.protocol import init_spec

INIT_BLOCK_ROWS = 1 << 16


def init_rows(spec: dict[str, Any], lo: int, hi: int, row_shape: tuple[int, ...], out: torch.Tensor) -> None:
    """Fill `out` (rows lo..hi) from an init spec, the same values whatever the split.

    spec: {"kind": "zeros"|"uniform"|"normal", "low", "high", "mean", "std", "seed"}, checked by
    protocol.init_spec.

    Raises:
        ProtocolError: a bad init spec, naming the field.
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
        vals = torch.empty((INIT_BLOCK_ROWS, *row_shape), dtype=out.dtype)
        if kind == "uniform":
            vals.uniform_(float(spec.get("low", -1.0)), float(spec.get("high", 1.0)), generator=gen)
        else:
            vals.normal_(float(spec.get("mean", 0.0)), float(spec.get("std", 1.0)), generator=gen)
        out[a - lo : b - lo] = vals[a - b_lo : b - b_lo]
