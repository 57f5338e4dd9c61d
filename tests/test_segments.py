"""Grouping points by cell: the run-addressed path (no permutation) and the gathered path
give the same cells, the same points per cell, and the same states and digests."""

import numpy as np
import pytest

from zagg import grid as G
from zagg.kernels import segments, tdigest

ORDER = 19


def track_words(n, seed=0):
    """Cell words of an along-track stream: consecutive points share a cell, and cells are
    visited in a scrambled order (so runs must still be sorted)."""
    rng = np.random.default_rng(seed)
    lat0, lon0 = -75.5 + rng.uniform(-0.1, 0.1, 8), -100.0 + rng.uniform(-0.1, 0.1, 8)
    t = np.linspace(0, 1, n // 8)
    lat = np.concatenate([a + 0.02 * t for a in lat0])
    lon = np.concatenate([b + 0.005 * t for b in lon0])
    words, _ = G.point_words(lat, lon)
    return G.ancestor(words, ORDER)


def check_grouping(grp, words):
    cells, counts = np.unique(words, return_counts=True)
    np.testing.assert_array_equal(grp.cells, cells)
    np.testing.assert_array_equal(grp.sizes, counts)
    idx = np.arange(words.size)
    addressed = grp.addressed(idx)
    contiguous = grp.contiguous(idx)
    perm = grp.permutation()
    for j in range(0, cells.size, max(cells.size // 200, 1)):
        want = np.flatnonzero(words == cells[j])  # input order kept inside a cell
        a, n = grp.starts[j], grp.sizes[j]
        np.testing.assert_array_equal(addressed[a : a + n], want)
        np.testing.assert_array_equal(contiguous[grp.offsets[j] : grp.offsets[j + 1]], want)
        np.testing.assert_array_equal(perm[grp.offsets[j] : grp.offsets[j + 1]], want)


def test_track_input_is_grouped_without_a_permutation():
    words = track_words(40_000)
    grp = segments.group_cells(words, ORDER)
    assert grp.order is None  # every cell one run of the input
    check_grouping(grp, words)


def test_revisited_cells_fall_back_to_a_gathered_grouping():
    words = track_words(40_000)
    words = np.concatenate([words, words[:5000]])  # the tracks pass over the cells again
    grp = segments.group_cells(words, ORDER)
    assert grp.order is not None
    np.testing.assert_array_equal(grp.starts, grp.offsets[:-1])
    check_grouping(grp, words)


def test_empty_and_single_point_groupings():
    grp = segments.group_cells(np.zeros(0, np.uint64), ORDER)
    assert grp.cells.size == 0 and list(grp.offsets) == [0]
    words = track_words(800)[:1]
    grp = segments.group_cells(words, ORDER)
    assert list(grp.cells) == list(words) and list(grp.offsets) == [0, 1]


def dense_states(values, starts, offsets, names):
    """The per-cell states ``names`` (count, sum, sumsq, min, max) of finite values."""
    out = {"count": segments.count_finite(values, starts, offsets)}
    for name in names:
        if name in ("sum", "sumsq"):
            out[name] = segments.dd_sums(values, starts, offsets, squares=name == "sumsq")
        elif name in ("min", "max"):
            out[name] = segments.extremes(values, starts, offsets, name == "max")
    return out


def combine_states(states, perm, offsets):
    """The same states of several rows merged per cell, each by its own combine."""
    out = {}
    for name, x in states.items():
        if name in ("sum", "sumsq"):
            out[name] = segments.combine_dd(x, perm, offsets)
        elif name in ("min", "max"):
            out[name] = segments.combine_extreme(x, perm, offsets, name == "max")
        else:
            out[name] = segments.combine_sum(x, perm, offsets)
    return out


@pytest.mark.parametrize("revisit", [False, True])
def test_states_and_digests_agree_between_addressing_and_gathering(revisit):
    words = track_words(40_000, seed=2)
    if revisit:
        words = np.concatenate([words, words[::7]])
    rng = np.random.default_rng(3)
    x = rng.normal(100, 5, words.size).astype(np.float32)
    x[rng.random(x.size) < 0.05] = np.nan
    wts = rng.uniform(0.5, 2.0, words.size)
    hits = rng.random(words.size) < 0.5
    grp = segments.group_cells(words, ORDER)
    xs = grp.contiguous(x)
    want = dense_states(xs, None, grp.offsets, ("count", "sum", "min", "max"))
    got = dense_states(grp.addressed(x), grp.starts, grp.offsets, ("count", "sum", "min", "max"))
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_array_equal(
        segments.segment_sums(grp.addressed(hits), grp.offsets, grp.starts),
        segments.segment_sums(grp.contiguous(hits), grp.offsets),
    )
    for kw in ({}, {"weights": True}, {"return_members": True}):
        w_add = grp.addressed(wts) if kw.get("weights") else None
        w_con = grp.contiguous(wts) if kw.get("weights") else None
        extra = {"return_members": True} if kw.get("return_members") else {}
        a = tdigest.build(
            grp.addressed(x), grp.offsets, 8, weights=w_add, starts=grp.starts, **extra
        )
        b = tdigest.build(xs, grp.offsets, 8, weights=w_con, **extra)
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)


def test_build_refuses_starts_out_of_bounds():
    with pytest.raises(ValueError, match="starts"):
        tdigest.build(np.ones(5, np.float32), np.array([0, 3, 5]), starts=np.array([0, 4]))
    with pytest.raises(ValueError, match="starts"):
        tdigest.build(np.ones(5, np.float32), np.array([0, 3, 5]), starts=np.array([0]))


def test_extremes_keep_no_sign_of_zero_whatever_the_order():
    offsets = np.array([0, 3, 6])
    for values in ([-0.0, 0.0, 1.0, 0.0, -0.0, -1.0], [0.0, -0.0, 1.0, -0.0, 0.0, -1.0]):
        st = dense_states(np.array(values), None, offsets, ("count", "min", "max"))
        assert st["min"][0] == 0.0 and not np.signbit(st["min"][0])
        assert st["max"][1] == 0.0 and not np.signbit(st["max"][1])
        np.testing.assert_array_equal(st["count"], [3, 3])


def test_combined_extremes_skip_nan_rows_and_keep_nan_for_empty_cells():
    # rows of three cells: [nan, 2, -1], [nan, nan], [5]
    x = np.array([np.nan, 2.0, -1.0, np.nan, np.nan, 5.0])
    perm = np.array([0, 1, 2, 3, 4, 5])
    offsets = np.array([0, 3, 5, 6])
    out = combine_states({"min": x, "max": x}, perm, offsets)
    np.testing.assert_array_equal(out["min"], [-1.0, np.nan, 5.0])
    np.testing.assert_array_equal(out["max"], [2.0, np.nan, 5.0])
    shuffled = combine_states(
        {"min": x[::-1], "max": x[::-1]}, np.array([3, 4, 5, 1, 2, 0]), offsets
    )
    np.testing.assert_array_equal(shuffled["min"], out["min"])
    np.testing.assert_array_equal(shuffled["max"], out["max"])


def _exact_dd(hi, lo):
    from fractions import Fraction

    return Fraction(float(hi)) + Fraction(float(lo))


def test_sums_are_exact_and_chunking_invariant_across_wide_magnitudes():
    """A cell of float32 values spanning ~70 binary orders, with cancellation: the
    double-double state holds the exact sum, normalised, and any split into partials
    combines to the same pair bit for bit (sums of squares too, on values whose squares
    stay within the double-double's reach)."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    n = 4000
    x = (rng.normal(0, 1, n) * 2.0 ** rng.integers(-30, 40, n)).astype(np.float32)
    x[::7] = -x[1::7][: x[::7].size]  # cancellation
    x[5] = np.nan
    finite = [Fraction(float(v)) for v in x if np.isfinite(v)]
    want_sum = sum(finite)
    whole = dense_states(x, None, np.array([0, n]), ("count", "sum"))
    assert whole["count"][0] == n - 1
    assert _exact_dd(*whole["sum"][0]) == want_sum
    assert whole["sum"][0, 0] == float(want_sum)  # normalised: hi is the rounded sum
    y = (rng.choice([-1.0, 1.0], n) * rng.uniform(1, 2, n) * 2.0 ** rng.integers(0, 11, n)).astype(
        np.float32
    )
    sq = dense_states(y, None, np.array([0, n]), ("sumsq",))
    want_sq = sum(Fraction(float(v)) ** 2 for v in y)
    assert _exact_dd(*sq["sumsq"][0]) == want_sq
    for cuts in ([1000, 2500], [1, 2, 3, 3999], list(range(0, n, 97))[1:]):
        offsets = np.array([0, *cuts, n])
        k = offsets.size - 1
        for values, ref, wanted in ((x, whole, ("count", "sum")), (y, sq, ("sumsq",))):
            parts = dense_states(values, None, offsets, wanted)
            merged = combine_states(parts, np.arange(k), np.array([0, k]))
            for name in ref:
                np.testing.assert_array_equal(merged[name][0], ref[name][0], err_msg=name)
