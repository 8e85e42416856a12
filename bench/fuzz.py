"""Coverage-guided fuzzing of the shard server's request path (atheris, libFuzzer): the long run.

CI fuzzes for about a minute (tests/runtime/kvstore/test_fuzz.py, hypothesis); this runs for as long as
asked, guided by coverage of graphtrain.runtime.kvstore. An input is a list of frames, each a 2-byte
big-endian length and its bytes; the corpus starts from one valid request of every op, which libFuzzer
mutates. Each input goes through protocol.parse_request, opargs.validate and a Dispatcher over an
in-process shard holding a table under Adam, as a server's worker runs it. A finding is any of:
- an exception other than ProtocolError, GraphtrainError or ValueError;
- a refused request that changed a stored row or optimizer state;
- a stored value that is not finite.
Creates are capped at 64 MB here (a valid 10 GB create is an allocation, not a finding; the server's
own bound, the machine's free memory, has its own test), and the shard is rebuilt every 20,000 inputs.

    python bench/fuzz.py [--seconds 600] [--corpus DIR]

It prints libFuzzer's final statistics (stat::number_of_executed_units is the number of cases) and
exits non-zero on a finding, with the input that caused it saved as crash-* in the working directory.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from pathlib import Path

import atheris
import numpy as np
import torch

with atheris.instrument_imports(include=["graphtrain.runtime.kvstore"]):
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.kvstore.serving.dispatch import Dispatcher
    from graphtrain.runtime.kvstore.tables import state as shard_state
    from graphtrain.runtime.kvstore.wire import opargs, protocol
    from graphtrain.runtime.storage import placement as place

ROWS, DIM = 64, 8
FUZZ_MEMORY = 64 << 20


def capped_free(device: torch.device) -> int:
    """The memory a fuzzed create may take: the host's, at most FUZZ_MEMORY (a create of many GiB is
    refused by the server's own check, not by the fuzzer running out of memory)."""
    return min(FUZZ_MEMORY, place.free_bytes(device))


class Shard:
    def __init__(self, root: Path):
        self.root, self.inputs = root, 0
        self.reset()

    def reset(self) -> None:
        state = shard_state.ShardTensors(0, free=capped_free)
        state.create("emb", ROWS, (DIM,), "float32", 0, ROWS, {"kind": "uniform", "seed": 1})
        state.set_optimizer("emb", {"kind": "adam", "lr": 0.1})
        self.d = Dispatcher(state, self.root)

    def snapshot(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, t in self.d.state.tensors.items():
            out[name] = t.data.clone()
            out.update({f"{name}.{k}": v.clone() for k, v in t.state.items()})
        return out


def frames_of(data: bytes) -> list[bytes]:
    frames, i = [], 0
    while i + 2 <= len(data) and len(frames) < 16:
        (n,) = struct.unpack(">H", data[i : i + 2])
        frames.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    return frames


def encode_input(frames: list) -> bytes:
    return b"".join(struct.pack(">H", len(bytes(f))) + bytes(f) for f in frames)


def seeds() -> list[bytes]:
    ids = np.arange(4, dtype=np.int64)
    vals = np.ones((4, DIM), np.float32)
    requests = [
        ("health", None, [], {}),
        ("stats", None, [], {}),
        ("shm_info", None, [], {}),
        ("create", "t2", [], {"num_rows": 10, "row_shape": [4], "dtype": "float32", "lo": 0, "hi": 10}),
        ("set_optimizer", "t2", [], {"config": {"kind": "sgd", "lr": 0.1}}),
        ("pull", "emb", [ids], {}),
        ("push", "emb", [ids, vals], {}),
        ("push_grad", "emb", [ids, ids + 4, vals, vals], {"step": 3, "id_frames": 2}),
        ("push_grad", "emb", [ids], {"shm": {"name": "x", "offset": 0}}),
        ("barrier", None, [], {"key": "k", "count": 1, "timeout": 1.0}),
        ("sample", None, [ids], {"fanout": 2, "seed": 1}),
        ("checkpoint", None, [], {"path": "ck"}),
        ("restore", None, [], {"path": "ck"}),
    ]
    return [
        encode_input(protocol.encode_request(op, 1, name, arrays, args))
        for op, name, arrays, args in requests
    ]


def make_target(shard: Shard):  # noqa: ANN201
    def test_one_input(data: bytes) -> None:
        shard.inputs += 1
        if shard.inputs % 20_000 == 0:
            shard.reset()
        d = shard.d
        before = shard.snapshot()
        try:
            req = protocol.parse_request(frames_of(data))
            out = d.run(req, opargs.validate(req), who=("fuzz", req.rid))
            while out is not None and hasattr(out, "done") and not out.done:
                out.next()
            if req.op == "barrier" and out is None:
                d.barriers.withdraw(req.args.get("key"), ("fuzz", req.rid))
        except (protocol.ProtocolError, GraphtrainError, ValueError):
            after = shard.snapshot()
            if after.keys() != before.keys() or any(not torch.equal(after[k], v) for k, v in before.items()):
                raise AssertionError("a refused request changed the shard") from None
        for t in d.state.tensors.values():
            if t.dtype.startswith("float") and not bool(torch.isfinite(t.data).all()):
                raise AssertionError(f"a non-finite value was stored in {t.name!r}")

    return test_one_input


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--corpus", type=Path, default=None, help="corpus directory (default: a temporary one)")
    args, rest = ap.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="gt-fuzz-") as tmp:
        corpus = args.corpus or Path(tmp) / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds()):
            (corpus / f"seed-{i:02d}").write_bytes(seed)
        root = Path(tmp) / "ck"
        root.mkdir()
        argv = [sys.argv[0], f"-max_total_time={args.seconds}", "-print_final_stats=1", "-rss_limit_mb=4096"]
        atheris.Setup([*argv, *rest, str(corpus)], make_target(Shard(root)))
        atheris.Fuzz()


if __name__ == "__main__":
    main()
