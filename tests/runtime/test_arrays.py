"""runtime/arrays.py: the sort-based unique (and unique with inverse) is np.unique's result, value for value
and dtype for dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from graphtrain.runtime import arrays

INT_DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.bool_]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    hnp.arrays(st.sampled_from(INT_DTYPES), hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40))
)
def test_unique_and_distinct_are_numpys(a: np.ndarray) -> None:
    got, want = arrays.unique(a), np.unique(a)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert arrays.distinct(a) == (len(want) == a.size)


def test_the_input_is_left_as_it_was() -> None:
    a = np.array([5, 1, 5, -3], dtype=np.int64)
    arrays.unique(a)
    arrays.distinct(a)
    assert a.tolist() == [5, 1, 5, -3]


@pytest.mark.parametrize("a", [np.array([1.0, np.nan, 1.0, np.nan]), np.array(["b", "a", "b"])])
def test_other_dtypes_keep_numpys_rules(a: np.ndarray) -> None:
    np.testing.assert_array_equal(arrays.unique(a), np.unique(a))  # NaNs equal, strings sorted


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    hnp.arrays(st.sampled_from(INT_DTYPES), hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40))
)
def test_unique_inverse_is_numpys_and_torchs(a: np.ndarray) -> None:
    uniq, inverse = arrays.unique_inverse(a)
    want, want_inverse = np.unique(a, return_inverse=True)
    assert uniq.dtype == want.dtype and inverse.dtype == np.int64
    np.testing.assert_array_equal(uniq, want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
    np.testing.assert_array_equal(uniq[inverse], a.reshape(-1))
    if a.dtype == np.int64:  # what kge._lookup took from torch.unique
        t_uniq, t_inverse = torch.unique(torch.from_numpy(a.reshape(-1)), return_inverse=True)
        assert torch.equal(torch.from_numpy(uniq), t_uniq)
        assert torch.equal(torch.from_numpy(inverse), t_inverse)


def test_unique_inverse_refuses_floats() -> None:
    with pytest.raises(TypeError):
        arrays.unique_inverse(np.array([1.0, 2.0]))
