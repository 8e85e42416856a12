"""A learnable table sharded across the trainer ranks (SOK's model-parallel embedding).

Rank r owns the keys r, r+W, r+2W, ... (key mod world size, SOK's rule) and holds their rows and
optimizer state at row key // W. A lookup is collective: every rank calls it the same number of times,
in the same order (as every rank averages its dense gradients).

Lookup (SOK's All2AllDenseEmbedding): unique -> exchange keys -> owners gather -> exchange rows -> expand.
With `unique=False` every occurrence travels (cheaper when keys barely repeat: no sort). The rows come
back as a leaf that takes part in autograd (optim/capture.py), so the table plugs into the sparse
optimizers (SparseAdam([table], ...)) like SparseEmbedding and DistEmbedding.

Update: at `optimizer.step()` each rank sums its own gradients per key (with the count of occurrences),
sends them to the owners, and each owner applies one native sparse-optimizer step to its shard with the
gradients of every rank. Duplicates follow the table's rule over the whole global batch: `sum` adds every
occurrence on every rank, `mean` divides by their total count. One optimizer step per training step,
as a single process holding the whole table and the concatenated batches of all ranks would take.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any

import torch
import torch.distributed as dist

from graphtrain.runtime.collective import exchange as ex
from graphtrain.runtime.collective.rows import DynamicKeys, FixedKeys, KeyMapFull
from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.native import cuda
from graphtrain.runtime.native import optim as native
from graphtrain.runtime.native.backend import ENV_BACKEND, CoreBackend, choose
from graphtrain.runtime.native.keymap import KeyMap
from graphtrain.runtime.native.memory import empty
from graphtrain.runtime.optim import functional
from graphtrain.runtime.optim.capture import GradientCapture
from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.optim.late import LateFlags, first_bad
from graphtrain.runtime.optim.state import make_state
from graphtrain.runtime.storage import placement as place
from graphtrain.runtime.storage.inits import INIT_BLOCK_ROWS, init_rows
from graphtrain.runtime.storage.sizes import state_bytes

DEFAULT_INIT: dict[str, Any] = {"kind": "uniform", "low": -1.0, "high": 1.0}


def fill_strided(spec: dict[str, Any], num_rows: int, world: int, rank: int, out: torch.Tensor) -> None:
    """Rows r, r+W, ... of the table `spec` initialises (storage/inits.py), whatever the split: a rank
    draws the global blocks in turn and keeps its rows, so memory stays one block above the shard."""
    dim = out.shape[1]
    if spec.get("kind", "zeros") == "zeros":
        out.zero_()
        return
    for lo in range(0, num_rows, INIT_BLOCK_ROWS):
        hi = min(num_rows, lo + INIT_BLOCK_ROWS)
        block = torch.empty((hi - lo, dim), dtype=torch.float32)
        init_rows(spec, lo, hi, (dim,), block)
        first = lo + (rank - lo) % world  # the first key of this block that rank owns
        if first < hi:
            rows = block[first - lo :: world]
            start = ex.local_rows(torch.tensor(first), world).item()
            out[start : start + len(rows)] = rows.to(out.device)


HALF = functional.HALF  # the half types the native cores step


def half_unsteppable(dtype: torch.dtype, device: torch.device) -> str:
    """Why a `dtype` table on `device` cannot be stepped: the torch reference, which its optimizer would
    fall back to there, steps float32 only."""
    asked = os.environ.get(ENV_BACKEND)
    if asked:
        why = f"{ENV_BACKEND}={asked} asks for that backend"
    elif device.type == "cuda":
        why = cuda.unavailable_reason(device.index or 0)
    else:
        why = "the CPU core is not built (reinstall the package)"
    return f"a {dtype} table is stepped by the native cores only, and none steps it on {device}: {why}"


class CollectiveEmbedding:
    """`num_embeddings` x `dim` rows sharded over the ranks of `group` by key mod world size. `dtype`
    float16 or bfloat16: the rows are held and exchanged in half (half the memory, lookup bytes and
    checkpoint), the model reads them widened to float32, and the owners step them in float32 and round
    back stochastically (the CPU core on the host, the CUDA core on a GPU: the same rounding, bit for bit
    where their float32 results agree); the optimizer state stays float32."""

    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        name: str,
        init: dict[str, Any] | None = None,
        group: dist.ProcessGroup | None = None,
        device: torch.device | str = "cpu",
        unique: bool = True,
        capacity: int | None = None,
        on_full: str = "error",
        dtype: torch.dtype = torch.float32,
    ):
        """capacity: a dynamic vocabulary of that many rows in all (any int64 key, rows on first sight;
        num_embeddings is then the capacity); on_full: "error" or "evict" (least recently used)."""
        if num_embeddings < 1 or dim < 1:
            raise ValueError(f"embedding {name!r}: num_embeddings and dim must be >= 1")
        if dtype not in (torch.float32, *HALF):
            raise ValueError(f"embedding {name!r}: dtype must be float32, float16 or bfloat16, got {dtype}")
        if on_full not in ("error", "evict"):
            raise ValueError(f"embedding {name!r}: on_full must be 'error' or 'evict', got {on_full!r}")
        self.num_embeddings = capacity or num_embeddings
        self.dim = dim
        self.name = name
        self.dtype = dtype
        self.unique = unique
        self.comm = ex.Exchange(group)
        self.world, self.rank = self.comm.world, self.comm.rank
        self.init = dict(init or DEFAULT_INIT)
        self.config: OptimConfig | None = None
        self.state: dict[str, torch.Tensor] = {}
        self.steps = 0
        self._capture = GradientCapture(dim)
        self._dedup_ws: native.DedupWorkspace | None = None
        # a captured step's (train/graphed.py): its checks leave verdicts on the device, read a step late
        self.late: LateFlags | None = None
        self.dynamic = capacity is not None
        share = ex.shard_rows(self.num_embeddings, self.world, self.rank)
        extra = KeyMap.bytes_for(max(1, share)) if self.dynamic else 0
        # refused before anything is allocated: a table too big is one line, not the OOM killer
        place.fits(
            f"collective table {name!r} on rank {self.rank}",
            share * dim * dtype.itemsize + extra,
            torch.device(device),
        )
        if self.dynamic:
            if capacity < self.world:  # type: ignore[operator]
                raise ValueError(f"embedding {name!r}: capacity {capacity} is below the {self.world} ranks")
            self.place: FixedKeys | DynamicKeys = DynamicKeys(self, capacity, on_full == "evict", self.init)  # type: ignore[arg-type]
            self.weight = empty((self.place.capacity(self.rank), dim), dtype, torch.device(device))
            self.weight.zero_()  # rows get their key's initial value when a key takes them
        else:
            self.place = FixedKeys(num_embeddings, self.world)
            self.weight = empty((self.place.capacity(self.rank), dim), dtype, torch.device(device))
            fill_strided(self.init, num_embeddings, self.world, self.rank, self.weight)

    @property
    def device(self) -> torch.device:
        return self.weight.device

    @property
    def wire(self) -> str:
        """The rows' element type by its wire and checkpoint name (runtime/dtypes.py)."""
        return str(self.dtype).removeprefix("torch.")

    @property
    def keys(self) -> torch.Tensor:
        """The global keys of this rank's rows in use, in row order."""
        if isinstance(self.place, DynamicKeys):
            return torch.from_numpy(self.place.keymap.keys()).to(self.device)
        return torch.arange(self.rank, self.num_embeddings, self.world, device=self.device)

    # -- lookup ---------------------------------------------------------------------------------

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).to(device=self.device, dtype=torch.int64)
        rows = self.gather(flat).float()  # widened from half
        return self._capture.rows(flat, rows).view(*ids.shape, self.dim)

    def rows(self, ids: Any) -> torch.Tensor:
        """Current rows without autograd (evaluation, export); collective like a lookup."""
        flat = torch.as_tensor(ids).reshape(-1).to(device=self.device, dtype=torch.int64)
        with torch.no_grad():
            return self.gather(flat).float()

    @property
    def local(self) -> bool:
        """One rank holds every row of a static table: nothing to route, exchange or deduplicate first
        (each of those waits for a GPU to count; the sparse step reduces duplicates itself)."""
        return self.world == 1 and not self.dynamic

    def gather(self, keys: torch.Tensor) -> torch.Tensor:
        """The rows of `keys` (1-D int64), fetched from their owners; no autograd."""
        if self.local and self.late is not None:  # a captured step's: flagged on the device, no wait
            rows = len(self.weight)
            slot = self.late.slot(f"lookup of {self.name!r}", rows)
            slot.flags[0].copy_(first_bad(keys, rows))
            return self.weight.index_select(0, keys.clamp(0, rows - 1))
        if self.local:
            detail = self.place.refuse(keys, f"lookup of {self.name!r}")
            if detail:
                raise SparseInputError(detail)
            return self.weight.index_select(0, keys)
        if self.unique:
            uniq, inverse = torch.unique(keys, return_inverse=True)
            return self._fetch(uniq).index_select(0, inverse)
        return self._fetch(keys)

    def _fetch(self, keys: torch.Tensor) -> torch.Tensor:
        what = f"lookup of {self.name!r}"
        detail = self.place.refuse(keys, what)
        if detail:
            keys = keys[:0]
        plan = ex.route(keys, self.world)
        recv = self.comm.header(plan.send, ex.BAD_IDS if detail else ex.OK, self.device, what, detail)
        asked = self.comm.rows(keys.index_select(0, plan.order), plan.send, recv)
        found, problem = self.serve(asked)
        if self.dynamic:  # the owners' verdict (a full shard) reaches every rank before any row moves
            self.comm.header(recv, ex.FULL if problem else ex.OK, self.device, what, problem)
        back = self.comm.rows(found, recv, plan.send)
        out = torch.empty_like(back)
        out[plan.order] = back
        return out

    def serve(self, asked: torch.Tensor) -> tuple[torch.Tensor, str]:
        """The rows of keys this rank owns that peers asked for, inserting new keys of a dynamic
        vocabulary on a training lookup (grad enabled); an unseen key's evaluation lookup reads its
        initial value. Returns the rows and, when a full shard refused the keys, why (rows then zeros)."""
        try:
            rows = self.place.lookup(asked, insert=torch.is_grad_enabled())
        except KeyMapFull as exc:
            return self.weight.new_zeros((len(asked), self.dim)), str(exc)
        with torch.no_grad():
            found = self.weight.index_select(0, rows.clamp_min(0))
            unseen = rows < 0
            if isinstance(self.place, DynamicKeys) and bool(unseen.any()):
                found[unseen] = self.place.initial(asked[unseen]).to(found.dtype)
        return found, ""

    # -- the sparse-optimizer protocol (optim/optimizers.py) ---------------------------------------

    def attach(self, config: OptimConfig) -> None:
        """Give the table an optimizer: creates the state of this rank's rows (a second one is refused)."""
        if self.config is not None and self.config != config:
            raise ValueError(f"embedding {self.name!r} already has optimizer {self.config.kind}")
        if self.config is None:
            if self.dtype in HALF and functional.choose_backend(self.device) is CoreBackend.TORCH:
                # refused now, not at the first step after the data is loaded and a batch computed
                raise ValueError(f"embedding {self.name!r}: {half_unsteppable(self.dtype, self.device)}")
            # refused before it is allocated, as the rows are and as a shard server's state is: Adam's is
            # twice a float32 table's rows, four times a half one's
            need = state_bytes(config.kind, config.step_count, len(self.weight), self.dim)
            place.fits(
                f"optimizer state of collective table {self.name!r} on rank {self.rank}", need, self.device
            )
            self.state = make_state(config, len(self.weight), self.dim, self.device)
            self.config = config

    def pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._capture.pending(self.device)

    def clear(self) -> None:
        self._capture.clear()

    def apply_gradients(
        self, ids: torch.Tensor, grads: torch.Tensor, backend: str | None = None, wait: bool = True
    ) -> int:
        """Send this rank's (ids, grads) to their owners and apply the owners' step; collective (a rank
        with nothing to send still takes part). Returns the unique rows this rank updated.

        Raises (on every rank alike):
            NonFiniteGradient: a rank's gradients hold NaN or infinity and the table refuses them.
            SparseInputError: a rank's ids are outside the table.
        """
        if self.config is None:
            raise ValueError(f"embedding {self.name!r} has no optimizer")
        config = self.config
        self.steps += 1
        ids = ids.to(device=self.device, dtype=torch.int64)
        grads = grads.to(device=self.device, dtype=torch.float32).reshape(-1, self.dim)
        if self.local and config.nonfinite == "refuse":
            return self._step_local(ids, grads, config, backend)
        keys, packed, status, detail = self._reduce(ids, grads, config)
        plan = ex.route(keys, self.world)
        what = f"gradients of {self.name!r}"
        recv = self.comm.header(plan.send, status, self.device, what, detail)
        got_keys = self.comm.rows(keys.index_select(0, plan.order), plan.send, recv)
        got = self.comm.rows(packed.index_select(0, plan.order), plan.send, recv)
        rows = self.place.update(got_keys)
        held = rows >= 0  # a dynamic key evicted since its lookup has no row left to update
        if not bool(held.all()):
            rows, got = rows[held], got[held]
        sums, counts = ex.unpack_gradients(got, self.dim, self.dtype)
        if config.duplicate == "mean" and len(rows):
            total = torch.zeros(len(self.weight), device=self.device).index_add_(0, rows, counts)
            sums = sums / total.index_select(0, rows).unsqueeze(1)
        # the rows arrive summed per rank (and divided for `mean`): what is left is a sum over ranks
        step_config = dataclasses.replace(config, duplicate="sum", nonfinite="refuse")
        return functional.sparse_step(
            step_config,
            self.weight,
            self.state,
            rows,
            sums.contiguous(),
            backend,
            round_seed=self.round_seed(),
        )

    def round_seed(self) -> int:
        """This step's stochastic-rounding seed of a half table: new every step and different per table
        and rank (as a shard server's pieces: storage/shard.TensorShard.round_seed)."""
        base = zlib.crc32(f"{self.name}:rank{self.rank}".encode()) << 32
        return base | (self.steps & 0xFFFFFFFF)

    def _step_local(
        self, ids: torch.Tensor, grads: torch.Tensor, config: OptimConfig, backend: str | None
    ) -> int:
        """The step of a table one rank holds whole: the raw ids to the sparse step, which checks them and
        the gradients and sums (or averages) each id's occurrences before any row changes, as the
        exchange path's owner would (the CUDA core in its one wait for the device). In a captured step
        the verdict stays on the device (optim/late.py) and nothing waits."""
        if self.late is not None:
            what = f"gradients of {self.name!r}"
            ids = self.late.gate(ids, len(self.weight))  # nothing stepped after a flagged check
            slot = self.late.slot(what, len(self.weight))
            ws = self.late.workspace(what, self.weight, len(ids))
            return functional.sparse_step(
                config,
                self.weight,
                self.state,
                ids,
                grads.contiguous(),
                backend,
                True,
                0,
                None,
                slot.flags,
                ws,
            )
        try:
            return functional.sparse_step(
                config, self.weight, self.state, ids, grads.contiguous(), backend, True, self.round_seed()
            )
        except NonFiniteGradient as exc:
            raise NonFiniteGradient(f"gradients of {self.name!r}: {exc}", exc.row) from None
        except SparseInputError as exc:
            raise SparseInputError(f"gradients of {self.name!r}: {exc}") from None

    def _dedup(
        self, ids: torch.Tensor, grads: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unique ids, their summed gradients, each position's unique index): the native core's hash
        dedup for a table in host memory (5-10x torch's sort and index_add here; a dynamic vocabulary's
        keys unchecked: any int64), torch's else."""
        if self.device.type == "cpu" and len(ids) and choose() is CoreBackend.CPU:
            if self._dedup_ws is None:
                self._dedup_ws = native.DedupWorkspace()
            rows = -1 if self.dynamic else self.num_embeddings
            return native.dedup(ids, grads, rows, False, functional.threads(), self._dedup_ws)
        keys, inverse = torch.unique(ids, return_inverse=True)
        sums = grads.new_zeros((len(keys), self.dim)).index_add_(0, inverse, grads)
        return keys, sums, inverse

    def _reduce(
        self, ids: torch.Tensor, grads: torch.Tensor, config: OptimConfig
    ) -> tuple[torch.Tensor, torch.Tensor, int, str]:
        """This rank's gradients summed per key with each key's occurrence count, packed for the wire
        (exchange.pack_gradients); status and message when they cannot be sent (ids out of range, a
        refused non-finite row)."""
        empty_out = (ids[:0], ex.pack_gradients(grads[:0], ids[:0], self.dtype))
        detail = self.place.refuse(ids, f"gradients of {self.name!r}")
        if detail:
            return *empty_out, ex.BAD_IDS, detail
        # a finite sum proves every element finite (functional._check_finite): the row scan only then
        if len(ids) and not bool(torch.isfinite(grads.sum())):
            finite = torch.isfinite(grads).all(dim=1)
            if not bool(finite.all()):
                if config.nonfinite == "refuse":
                    row = int(torch.nonzero(~finite)[0])
                    detail = f"gradient row {row} of {self.name!r} holds NaN or infinity"
                    return *empty_out, ex.NON_FINITE, detail
                ids, grads = ids[finite], grads[finite]
        keys, sums, inverse = self._dedup(ids, grads.contiguous())
        counts = torch.bincount(inverse, minlength=len(keys))
        return keys, ex.pack_gradients(sums, counts, self.dtype), ex.OK, ""
