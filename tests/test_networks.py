"""Sorting networks for tiny segments, and the t-digest build that sorts with them."""

import itertools

import numpy as np
import pytest

from zagg.kernels import networks, tdigest


def _apply(pairs, x):
    x = x.copy()
    for i, j in pairs:
        lo, hi = np.minimum(x[:, i], x[:, j]), np.maximum(x[:, i], x[:, j])
        x[:, i], x[:, j] = lo, hi
    return x


@pytest.mark.parametrize("n", [8, 16])
def test_network_sorts_every_zero_one_input(n):
    # the 0-1 principle: a comparator network that sorts all 2^n binary inputs sorts all
    bits = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(np.int8)
    out = _apply(networks.batcher_pairs(n), bits)
    assert np.all(np.diff(out, axis=1) >= 0)


def test_network_32_sorts_random_zero_one_and_real_inputs():
    rng = np.random.default_rng(0)
    pairs = networks.batcher_pairs(32)
    assert len(pairs) == 191  # Batcher's count for 32 inputs
    bits = (rng.random((200_000, 32)) < rng.random((200_000, 1))).astype(np.int8)
    assert np.all(np.diff(_apply(pairs, bits), axis=1) >= 0)
    x = rng.normal(size=(5000, 32)).round(1)  # many ties
    np.testing.assert_array_equal(_apply(pairs, x), np.sort(x, axis=1))


@pytest.mark.parametrize("n", list(range(0, 65)))
def test_small_sort_equals_numpy_sort_at_every_size(n):
    rng = np.random.default_rng(n)
    src = np.empty(64)
    values = rng.choice([-2.5, 0.0, 1.0, 3.25, 1e30, -1e-30], n) + rng.integers(0, 3, n)
    values = values.astype(np.float32).astype(np.float64)  # float32 values, as digests hold
    src[:n] = values
    dst = np.full(n + 5, -7.0)
    tdigest._small_sort(src, n, dst, 3, np.empty(64, np.int64))
    np.testing.assert_array_equal(dst[3 : 3 + n], np.sort(values))
    assert np.all(dst[:3] == -7.0) and np.all(dst[3 + n :] == -7.0)  # nothing else written


def test_loss_free_build_is_each_segment_sorted_for_every_segment_length():
    rng = np.random.default_rng(1)
    sizes = np.array(list(itertools.chain(range(0, 70), [100, 513, 2000])))
    values = rng.normal(0, 10, sizes.sum()).astype(np.float32)
    values[rng.random(values.size) < 0.05] = np.nan
    values[::17] = -0.0
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    m, w, o = tdigest.build(values, offsets, delta=4096, out_dtype=np.float32)
    for s in range(sizes.size):
        seg = values[offsets[s] : offsets[s + 1]]
        want = np.sort(seg[np.isfinite(seg)] + np.float32(0.0))
        got = m[o[s] : o[s + 1]]
        np.testing.assert_array_equal(got, want)
        assert not np.any(np.signbit(got) & (got == 0))  # -0.0 stored as 0.0
        assert np.all(w[o[s] : o[s + 1]] == 1.0)


@pytest.mark.parametrize("n", list(range(0, 65)))
def test_rank_permutation_is_the_stable_argsort_at_every_size(n):
    rng = np.random.default_rng(100 + n)
    src = np.zeros(64)
    src[:n] = rng.choice([-3.5, -1e-30, 0.0, 2.0, 7.25, 3e38, -3e38], n)
    perm = np.full(64, -1, np.int64)
    tdigest._rank_permutation(src, n, perm, np.empty(32, np.uint64), np.empty(32, np.float32))
    np.testing.assert_array_equal(perm[:n], np.argsort(src[:n], kind="stable"))
