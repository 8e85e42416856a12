"""Every init argument of a create is checked, naming the field, on every path: before, a normal init
with a negative std failed inside torch ("internal error in create: RuntimeError: normal expects std >=
0.0") and a large seed answered "Overflow when unpacking long long" (found by a protocol fuzz)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.kvstore.serving.server import ShardServer
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.inits import init_rows
from tests.runtime.conftest import TOKEN

BAD = [
    ({"kind": "normal", "std": -1.0}, "'std' must be >= 0"),
    ({"kind": "normal", "std": float("nan")}, "'std' must be a finite number"),
    ({"kind": "normal", "mean": float("inf")}, "'mean' must be a finite number"),
    ({"kind": "uniform", "low": 1.0, "high": 1.0}, "'low' must be below 'high'"),
    ({"kind": "uniform", "low": 2.0}, "'low' must be below 'high'"),  # the default high is 1
    ({"kind": "uniform", "high": float("inf")}, "'high' must be a finite number"),
    ({"kind": "normal", "seed": 2**63}, "'seed' must be in"),
    ({"kind": "normal", "seed": -1}, "'seed' must be in"),
    ({"kind": "normal", "seed": 1.5}, "'seed' must be int"),
    ({"kind": "normal", "seed": True}, "'seed' must be int"),
    ({"kind": "normal", "std": "1"}, "'std' must be int/float"),
    ({"kind": "ones"}, "init kind must be one of"),
    ({"kind": "normal", "scale": 1.0}, "unknown keys"),
]


@pytest.mark.parametrize(("spec", "message"), BAD)
def test_a_bad_init_is_refused_naming_the_field(spec: dict, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        init_rows(spec, 0, 4, (3,), torch.empty(4, 3))
    s = ShardTensors(0)
    with pytest.raises(StorageError, match=message):
        s.create("t", 4, (3,), "float32", 0, 4, spec)
    assert "t" not in s.tensors


@pytest.mark.parametrize("seed", [0, 7, 2**40, 2**63 - 1])
def test_every_int64_seed_initialises_the_same_rows_whatever_the_split(seed: int) -> None:
    spec = {"kind": "normal", "mean": 0.5, "std": 0.0 if seed == 7 else 2.0, "seed": seed}
    whole = torch.empty(200_000, 2)
    init_rows(spec, 0, 200_000, (2,), whole)
    part = torch.empty(100_000, 2)
    init_rows(spec, 70_000, 170_000, (2,), part)
    assert torch.equal(part, whole[70_000:170_000])
    assert torch.isfinite(whole).all()


def test_small_seeds_keep_their_values() -> None:
    """The generator's seed is taken modulo 2**64 now; seeds that fitted before give the same rows."""
    out = torch.empty(3, 2)
    init_rows({"kind": "uniform", "seed": 5}, 0, 3, (2,), out)
    want = torch.empty(1 << 16, 2).uniform_(-1.0, 1.0, generator=torch.Generator().manual_seed(5 * 1_000_003))
    assert torch.equal(out, want[:3])


@pytest.mark.timeout(60)
def test_a_server_answers_a_bad_init_naming_the_field_and_keeps_serving() -> None:
    srv = ShardServer(ShardTensors(0), TOKEN, "tcp://127.0.0.1:0", workers=1)
    srv.start()
    client = kvstore.connect([srv.address], TOKEN, timeout=10, retries=0)
    try:
        bounds = np.array([0, 10])
        for spec, message in [BAD[0], BAD[6]]:
            with pytest.raises(Exception, match=message) as info:
                client.create("t", 10, (3,), "float32", bounds, spec)
            assert "internal error" not in str(info.value)
        client.create("t", 10, (3,), "float32", bounds, {"kind": "normal", "std": 0.5, "seed": 2**63 - 1})
        assert srv.liveness()[0]
    finally:
        client.close()
        srv.stop()
