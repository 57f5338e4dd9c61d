"""Tests for the per-cell t-digest kernels and their payload contract."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zagg.kernels import tdigest as td


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _random_segments(rng, lengths, bad_fraction=0.1):
    """Random float64 values grouped by segment, with NaN/inf sprinkled in."""
    values = rng.normal(size=int(np.sum(lengths))) * 10
    bad = rng.random(values.size) < bad_fraction
    values[bad] = rng.choice([np.nan, np.inf, -np.inf], size=int(bad.sum()))
    return values, _offsets(lengths)


def _segment_rows(payloads):
    return [td.payload_to_array(p) for p in payloads]


# --- payload contract -----------------------------------------------------------------


@pytest.mark.parametrize("delta", [8, 64, td.DEFAULT_DELTA])
def test_weights_count_finite_values_and_rows_sorted(delta):
    rng = np.random.default_rng(1)
    lengths = rng.choice([0, 1, 2, 5, 7, 30, 70, 200, 1500], size=300)
    values, offsets = _random_segments(rng, lengths)
    means, weights, out_offsets = td.build(values, offsets, delta)
    assert means.dtype == weights.dtype == np.float64
    assert out_offsets.dtype == np.int64 and out_offsets.shape == offsets.shape
    payloads = td.to_payloads(means, weights, out_offsets)
    assert payloads.dtype == object and payloads.shape == (lengths.size,)
    for i, p in enumerate(payloads):
        seg = values[offsets[i] : offsets[i + 1]].astype(np.float32)
        n_finite = int(np.isfinite(seg).sum())
        assert isinstance(p, bytes) and len(p) % 8 == 0
        rows = td.payload_to_array(p)
        assert rows.dtype == np.float32 and rows.shape == (len(p) // 8, 2)
        np.testing.assert_array_equal(rows, np.frombuffer(p, "<f4").reshape(-1, 2))
        assert rows[:, 1].sum(dtype=np.float64) == n_finite
        assert np.all(rows[:, 1] >= 1) and np.all(rows[:, 1] == np.round(rows[:, 1]))
        assert np.all(np.diff(rows[:, 0]) >= 0)
        assert len(rows) <= max(n_finite if n_finite <= delta else delta, 0)
        if n_finite:  # extremes are exact when loss-free, else bound the means
            lo, hi = seg[np.isfinite(seg)].min(), seg[np.isfinite(seg)].max()
            assert (rows[0, 0] == lo) if n_finite <= delta else (rows[0, 0] >= lo)
            assert (rows[-1, 0] == hi) if n_finite <= delta else (rows[-1, 0] <= hi)


def test_payload_bytes_are_little_endian_float32_rows():
    means, weights, offsets = td.build(np.array([3.0, 1.0, 2.0]), [0, 3])
    expected = np.array([[1, 1], [2, 1], [3, 1]], dtype="<f4").tobytes()
    assert td.to_payloads(means, weights, offsets)[0] == expected
    assert expected[:4] == b"\x00\x00\x80\x3f"  # 1.0f, little-endian


def test_loss_free_payload_is_sorted_float32_values():
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 120, size=200)
    values, offsets = _random_segments(rng, lengths, bad_fraction=0.05)
    payloads = td.to_payloads(*td.build(values, offsets))
    for i, rows in enumerate(_segment_rows(payloads)):
        seg = values[offsets[i] : offsets[i + 1]].astype(np.float32)
        np.testing.assert_array_equal(rows[:, 0], np.sort(seg[np.isfinite(seg)]))
        np.testing.assert_array_equal(rows[:, 1], 1.0)


@pytest.mark.parametrize("delta", [6, 12, td.DEFAULT_DELTA])
@pytest.mark.parametrize("order", ["track", "shuffled"])
def test_cells_addressed_in_place_equal_a_sort_of_each_cell(order, delta):
    """Cells read where they lie in the input (``starts``), as along-track chunks give
    them, build the same digests as each cell's values gathered and sorted by numpy: sizes
    0 to 70 (most up to 16), ties, NaN, infinities and -0.0, cells ending at the array's
    end, segments above delta compressed alike."""
    rng = np.random.default_rng(7)
    sizes = np.concatenate([rng.integers(0, 17, 300), rng.integers(17, 71, 40), [0, 1, 16, 3]])
    n = int(sizes.sum())
    values = np.round(rng.normal(0.0, 3.0, n), 1).astype(np.float32)  # many ties
    special = rng.choice(n, n // 20, replace=False)
    values[special] = rng.choice(
        np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], np.float32), special.size
    )
    offsets = _offsets(sizes)
    starts = offsets[:-1].copy()
    if order == "shuffled":  # the cells' runs lie in the input in another order than the cells
        runs = rng.permutation(sizes.size)
        runs = np.concatenate([runs[runs != sizes.size - 1], [sizes.size - 1]])  # last stays last
        placed = np.concatenate([values[offsets[r] : offsets[r + 1]] for r in runs])
        starts[runs] = np.concatenate([[0], np.cumsum(sizes[runs])[:-1]])
        values = placed
    gathered = np.concatenate([values[a : a + k] for a, k in zip(starts, sizes, strict=True)])
    want = td.build(gathered, offsets, delta, out_dtype=np.float32)
    got = td.build(values, offsets, delta, out_dtype=np.float32, starts=starts)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    m, _, off = got
    for j in np.flatnonzero(sizes <= delta):
        seg = values[starts[j] : starts[j] + sizes[j]]
        finite = np.sort(seg[np.isfinite(seg)] + np.float32(0.0))
        np.testing.assert_array_equal(m[off[j] : off[j + 1]], finite)
        cell = m[off[j] : off[j + 1]]
        assert not np.signbit(cell[cell == 0]).any()  # -0.0 is stored as 0.0
    one = td.build(values[-3:], [0, 3], delta, out_dtype=np.float32, starts=[0])
    tail = values[-3:][np.isfinite(values[-3:])]
    np.testing.assert_array_equal(one[0], np.sort(tail + np.float32(0.0)))


def test_cells_above_16_values_sort_across_the_whole_float32_range():
    """The ranks of a cell of 17 to 64 values, extremes, subnormals and both zeros among
    them, with ties: sorted as numpy sorts them."""
    edge = np.array([-3.4e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1e-38, 2.5, 3.4e38], np.float32)
    rng = np.random.default_rng(9)
    for size in (17, 33, 40, 64):
        v = rng.choice(edge, size)
        m, _, off = td.build(v, [0, size], out_dtype=np.float32)
        np.testing.assert_array_equal(m, np.sort(v + np.float32(0.0)))
        assert list(off) == [0, size] and not np.signbit(m[m == 0]).any()


def test_float32_input_and_exact_boundary_values():
    v = np.array([np.float32(0.1), -0.0, 0.0, 1e-45, np.float32(3.4e38)], dtype=np.float32)
    rows = td.payload_to_array(td.to_payloads(*td.build(v, [0, 5]))[0])
    np.testing.assert_array_equal(rows[:, 0], np.sort(v))
    assert not np.signbit(rows[:, 0]).any()  # -0.0 is stored as 0.0
    # the loss-free regime ends exactly at n == delta
    x = np.arange(10.0)[::-1]
    assert len(td.build(x, [0, 10], delta=10)[0]) == 10
    assert len(td.build(x, [0, 10], delta=9)[0]) < 10


def test_empty_and_non_finite_segments_give_empty_payloads():
    values = np.array([np.nan, np.inf, 5.0, np.nan, -np.inf, 1e300])
    means, weights, offsets = td.build(values, [0, 0, 2, 3, 6, 6])
    payloads = td.to_payloads(means, weights, offsets)
    assert list(payloads) == [b"", b"", np.array([5, 1], "<f4").tobytes(), b"", b""]
    assert td.payload_to_array(b"").shape == (0, 2)
    empty = td.build(np.array([], np.float32), [0])
    assert empty[0].size == 0 and list(empty[2]) == [0]
    assert td.to_payloads(*empty).shape == (0,)


def test_from_payloads_round_trip():
    rng = np.random.default_rng(3)
    values, offsets = _random_segments(rng, [0, 3, 1000, 1, 0, 600])
    payloads = td.to_payloads(*td.build(values, offsets))
    means, weights, out_offsets = td.from_payloads(payloads)
    again = td.to_payloads(means, weights, out_offsets)
    assert list(again) == list(payloads)
    assert td.from_payloads(np.array([None, b""], dtype=object))[2].tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        td.payload_to_array(b"\x00" * 12)


def test_long_segments_take_the_numpy_sort_path():
    rng = np.random.default_rng(4)
    values, offsets = _random_segments(rng, [130, 511, 512, 513, 5000])
    payloads = td.to_payloads(*td.build(values, offsets, 512))
    for i, rows in enumerate(_segment_rows(payloads)):
        seg = values[offsets[i] : offsets[i + 1]].astype(np.float32)
        finite = np.sort(seg[np.isfinite(seg)])
        assert rows[:, 1].sum() == finite.size
        if finite.size <= 512:
            np.testing.assert_array_equal(rows[:, 0], finite)
    # the caller's array is never modified
    before = values.copy()
    td.build(values, offsets)
    np.testing.assert_array_equal(values, before)


def test_dropped_unit_weights_leave_the_means_and_offsets_unchanged():
    """Loss-free builds can hand back None for their all-ones weights; the means and
    offsets are those of the full build (scattered addressing included), and a segment
    above delta keeps its weights."""
    rng = np.random.default_rng(8)
    values, offsets = _random_segments(rng, [0, 1, 7, 16, 33, 64, 65, 300, 512])
    values[rng.random(values.size) < 0.05] = np.nan
    starts = offsets[:-1][::-1].copy()
    sizes = np.diff(offsets)[::-1]
    scattered_offsets = np.concatenate(([0], np.cumsum(sizes)))
    for kw in ({}, {"starts": starts}):
        offs = scattered_offsets if kw else offsets
        full = td.build(values, offs, 512, out_dtype=np.float32, **kw)
        m, w, o = td.build(values, offs, 512, out_dtype=np.float32, drop_unit_weights=True, **kw)
        assert w is None and np.all(full[1] == 1)
        np.testing.assert_array_equal(m, full[0])
        np.testing.assert_array_equal(o, full[2])
    big, big_off = _random_segments(rng, [10, 600])
    m, w, o = td.build(big, big_off, 512, drop_unit_weights=True)
    assert w is not None and w.sum() == np.isfinite(big).sum() and w.max() > 1


def test_bad_arguments():
    with pytest.raises(ValueError):
        td.build(np.zeros(3), [0, 4])
    with pytest.raises(ValueError):
        td.build(np.zeros(3), [0, 2, 1, 3])
    with pytest.raises(ValueError):
        td.build(np.zeros(3), [0, 3], delta=0)
    with pytest.raises(ValueError):
        td.quantile(np.array([1.0, 1.0], "<f4").tobytes(), 1.5)


# --- merge ----------------------------------------------------------------------------


def _merge_payloads(pieces, delta):
    """Merge one cell's payload pieces (bytes concatenation is a valid centroid list)."""
    joined = np.array([b"".join(pieces)], dtype=object)
    return td.to_payloads(*td.merge(*td.from_payloads(joined), delta))[0]


_float32s = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(_float32s, min_size=0, max_size=140),
    data=st.data(),
)
def test_merge_of_loss_free_pieces_equals_build_of_all(values, data):
    delta = 128
    values = np.array(values, dtype=np.float32)
    if np.isfinite(values).sum() > delta:
        values = values[np.isfinite(values)][:delta]
    k = data.draw(st.integers(1, 5), label="pieces")
    order = np.array(data.draw(st.permutations(range(values.size)), label="order"), dtype=int)
    cuts = sorted(
        data.draw(
            st.lists(st.integers(0, values.size), min_size=k - 1, max_size=k - 1), label="cuts"
        )
    )
    bounds = _offsets(np.diff([0, *cuts, values.size]))
    pieces = td.to_payloads(*td.build(values[order], bounds, delta))
    piece_order = data.draw(st.permutations(range(k)), label="piece order")
    merged = _merge_payloads([pieces[i] for i in piece_order], delta)
    whole = td.to_payloads(*td.build(values, [0, values.size], delta))[0]
    assert merged == whole


def test_merge_many_cells_at_once_matches_build():
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 300, size=50)
    values, offsets = _random_segments(rng, lengths)
    whole = td.to_payloads(*td.build(values, offsets))
    # split every cell into two digests and lay out both halves cell by cell
    halves = []
    for i in range(lengths.size):
        seg = values[offsets[i] : offsets[i + 1]]
        cut = rng.integers(0, seg.size + 1)
        halves += [seg[cut:], seg[:cut]]
    pieces = td.to_payloads(*td.build(np.concatenate(halves), _offsets([h.size for h in halves])))
    means, weights, piece_offsets = td.from_payloads(pieces)
    merged = td.to_payloads(*td.merge(means, weights, piece_offsets[::2]))
    assert list(merged) == list(whole)


def test_merge_of_loss_free_pieces_above_delta_compresses_like_build():
    # Compression sees the same sorted unit-weight rows either way, so results agree exactly.
    rng = np.random.default_rng(10)
    x = rng.normal(size=180)
    whole = td.to_payloads(*td.build(x, [0, 180], delta=100))[0]
    pieces = td.to_payloads(*td.build(x, [0, 90, 180], delta=100))
    assert len(whole) // 8 < 100 and all(len(p) // 8 == 90 for p in pieces)
    assert _merge_payloads([pieces[1], pieces[0]], 100) == whole


def test_merge_is_stable_and_keeps_weights():
    means = np.array([2.0, 1.0, 2.0, 1.0])
    weights = np.array([3.0, 1.0, 5.0, 2.0])
    m, w, o = td.merge(means, weights, [0, 4])
    np.testing.assert_array_equal(m, [1, 1, 2, 2])
    np.testing.assert_array_equal(w, [1, 2, 3, 5])
    assert list(o) == [0, 4]


@pytest.mark.parametrize("declaration", ["counts", "flux"])
@pytest.mark.parametrize("delta", [4, 16, td.DEFAULT_DELTA])
def test_merge_runs_equals_merge_of_gathered_runs(declaration, delta):
    """Runs scattered over the input (one sorted digest per partial and cell) merge exactly
    like the gathered rows, including single-run cells (copied) and compressed cells."""
    rng = np.random.default_rng(delta)
    n_runs = 400
    sizes = rng.choice([0, 1, 3, 8, 20, 60], size=n_runs)
    starts = _offsets(sizes)[:-1]
    # values on a coarse lattice, so runs share means (ties across runs)
    means = np.concatenate([np.sort(np.round(rng.normal(size=k) * 8) / 8) for k in sizes])
    means = means.astype(np.float32)
    weights = rng.choice([1.0, 2.0, 0.5], size=means.size).astype(np.float32)
    if declaration == "counts":
        weights[:] = 1.0
    perm = rng.permutation(n_runs)  # runs reach the kernel in scattered order
    cell_runs = _offsets(rng.choice([1, 1, 1, 2, 3, 5, 9, 17], size=n_runs))
    cell_runs = cell_runs[cell_runs <= n_runs]
    if cell_runs[-1] != n_runs:
        cell_runs = np.append(cell_runs, n_runs)
    r_starts, r_sizes = starts[perm], sizes[perm]
    got = td.merge_runs(
        means, weights, r_starts, r_sizes, cell_runs, delta, declaration=declaration
    )
    gathered = np.concatenate([np.arange(a, a + k) for a, k in zip(r_starts, r_sizes, strict=True)])
    cell_rows = [
        int(r_sizes[a:b].sum()) for a, b in zip(cell_runs[:-1], cell_runs[1:], strict=True)
    ]
    want = td.merge(
        means[gathered],
        weights[gathered],
        _offsets(cell_rows),
        delta,
        declaration=declaration,
        out_dtype=np.float32,
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert got[0].dtype == np.float32
    compressed = max(cell_rows) > delta  # cells of many runs outgrow even the default delta
    assert (got[2][-1] < means.size) == compressed
    if declaration == "counts":  # implicit unit weights merge like explicit ones
        m, w, o = td.merge_runs(means, None, r_starts, r_sizes, cell_runs, delta)
        np.testing.assert_array_equal(m, got[0])
        np.testing.assert_array_equal(o, got[2])
        if compressed:
            np.testing.assert_array_equal(w, got[1])
        else:  # nothing compressed: unit weights stay implicit
            assert w is None and np.all(got[1] == 1)


@pytest.mark.parametrize("runs_per_cell", [3, 8, 40, 130])
def test_merge_runs_of_many_short_runs_sorts_every_cell(runs_per_cell):
    """A cell seen by many chunks (a few values from each, some none) comes out as its
    values sorted: cells of 0 to 520 values from 3 to 130 runs, ties and -0.0 included."""
    rng = np.random.default_rng(runs_per_cell)
    n_cells = 300
    sizes = rng.choice([0, 1, 1, 2, 4], size=n_cells * runs_per_cell)
    values = np.round(rng.normal(size=int(sizes.sum())) * 4) / 4
    values[rng.random(values.size) < 0.05] = -0.0
    starts = _offsets(sizes)[:-1]
    means = np.concatenate([np.sort(values[a : a + k]) for a, k in zip(starts, sizes, strict=True)])
    means = means.astype(np.float32)
    perm = rng.permutation(sizes.size)
    cell_runs = np.arange(0, sizes.size + 1, runs_per_cell, dtype=np.int64)
    m, w, o = td.merge_runs(means, None, starts[perm], sizes[perm], cell_runs, 10**6)
    assert w is None
    for j in range(n_cells):
        runs = perm[cell_runs[j] : cell_runs[j + 1]]
        want = np.sort(np.concatenate([means[starts[r] : starts[r] + sizes[r]] for r in runs]))
        got = m[o[j] : o[j + 1]]
        np.testing.assert_array_equal(got, want + np.float32(0))
        assert not np.signbit(got[got == 0]).any()


# --- compressed regime ----------------------------------------------------------------

_QS = np.array([1e-4, 1e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999])
_TAILS = (_QS <= 0.01) | (_QS >= 0.99)


def _rank_error(values, estimates):
    xs = np.sort(values.astype(np.float32).astype(np.float64))
    ecdf = np.searchsorted(xs, estimates, "left") + np.searchsorted(xs, estimates, "right")
    return np.abs(ecdf / (2 * xs.size) - _QS)


@pytest.fixture(scope="module")
def normal_sample():
    return np.random.default_rng(6).normal(size=100_000)


def test_compressed_build_accuracy(normal_sample):
    # Over 20 seeds the worst rank error measured 2.3e-4 (middle) and 5e-5 (tails).
    m, w, o = td.build(normal_sample, [0, normal_sample.size], 512)
    assert w.sum() == normal_sample.size and np.all(np.diff(m) >= 0)
    assert m.size <= 512
    err = _rank_error(normal_sample, td.quantile(td.to_payloads(m, w, o)[0], _QS))
    assert err[~_TAILS].max() < 5e-4
    assert err[_TAILS].max() < 1.5e-4


def test_compressed_merge_accuracy(normal_sample):
    # Ten compressed pieces merged; worst over 20 seeds 2.6e-4 (middle), 8e-5 (tails).
    rng = np.random.default_rng(7)
    labels = np.sort(rng.integers(0, 10, normal_sample.size))
    shuffled = rng.permutation(normal_sample)
    pieces = td.to_payloads(*td.build(shuffled, np.searchsorted(labels, np.arange(11)), 512))
    assert all(len(p) // 8 < 1000 for p in pieces)  # pieces are compressed themselves
    merged = _merge_payloads(list(pieces), 512)
    rows = td.payload_to_array(merged)
    assert rows[:, 1].sum() == normal_sample.size and len(rows) <= 512
    err = _rank_error(normal_sample, td.quantile(merged, _QS))
    assert err[~_TAILS].max() < 5e-4
    assert err[_TAILS].max() < 1.5e-4


@pytest.mark.parametrize("delta", [10, 100, 512, 2000])
def test_centroid_count_bounded_by_delta(delta):
    x = np.random.default_rng(8).exponential(size=200_000)
    m, w, _ = td.build(x, [0, x.size], delta)
    assert m.size <= delta and w.sum() == x.size
    m2, w2, _ = td.merge(np.concatenate([m, m]), np.concatenate([w, w]), [0, 2 * m.size], delta)
    assert m2.size <= delta and w2.sum() == 2 * x.size


# --- reading --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 10, 77, 512])
def test_quantile_matches_numpy_hazen_on_loss_free(n):
    rng = np.random.default_rng(n)
    v = rng.normal(size=n).astype(np.float32)
    payload = td.to_payloads(*td.build(v, [0, n]))[0]
    q = np.concatenate([[0, 1, 0.5, 1e-9, 1 - 1e-9], rng.random(200)])
    expected = np.quantile(v.astype(np.float64), q, method="hazen")
    np.testing.assert_array_equal(td.quantile(payload, q), expected)
    assert td.quantile(payload, 0.3) == np.quantile(v.astype(np.float64), 0.3, method="hazen")
    assert np.ndim(td.quantile(payload, 0.3)) == 0
    assert td.quantile(td.payload_to_array(payload), q[:3]).shape == (3,)


def test_quantile_of_empty_digest_is_nan():
    assert np.isnan(td.quantile(b"", 0.5))
    assert np.isnan(td.quantile(b"", [0.1, 0.9])).all()
    assert np.isnan(td.cdf(b"", 0.0))


def test_quantile_interpolates_weighted_centroids():
    rows = np.array([[0.0, 2.0], [10.0, 2.0]], "<f4")  # positions 1 and 3 of total 4
    assert td.quantile(rows, 0.25) == 0.0
    assert td.quantile(rows, 0.5) == 5.0
    assert td.quantile(rows, 0.625) == 7.5
    assert td.quantile(rows, 0.9) == 10.0
    assert td.cdf(rows, 5.0) == 0.5
    assert td.cdf(rows, -1.0) == 0.0 and td.cdf(rows, 11.0) == 1.0


def test_cdf_monotone_and_consistent_with_quantile(normal_sample):
    for n in (50, normal_sample.size):
        x = normal_sample[:n]
        payload = td.to_payloads(*td.build(x, [0, n]))[0]
        grid = np.linspace(-5, 5, 2001)
        c = td.cdf(payload, grid)
        assert np.all(np.diff(c) >= 0) and c[0] == 0 and c[-1] == 1
        rows = td.payload_to_array(payload)
        lo = rows[0, 1] / (2 * n)
        hi = 1 - rows[-1, 1] / (2 * n)
        q = np.linspace(lo, hi, 501)
        np.testing.assert_allclose(td.cdf(payload, td.quantile(payload, q)), q, atol=1e-9)
        inside = grid[(grid >= rows[0, 0]) & (grid <= rows[-1, 0])]
        np.testing.assert_allclose(td.quantile(payload, td.cdf(payload, inside)), inside, atol=1e-9)


def test_cdf_ties_use_middle_of_run():
    payload = td.to_payloads(*td.build(np.array([1.0, 2.0, 2.0, 2.0, 3.0]), [0, 5]))[0]
    assert td.cdf(payload, 2.0) == 0.5
    assert td.cdf(payload, 1.0) == 0.1 and td.cdf(payload, 3.0) == 0.9
    np.testing.assert_array_equal(td.cdf(payload, [1.5, 2.5]), [0.2, 0.8])


def test_quantiles_over_many_cells():
    rng = np.random.default_rng(9)
    lengths = rng.choice([0, 1, 4, 30, 600, 3000], size=40)
    values, offsets = _random_segments(rng, lengths)
    payloads = td.to_payloads(*td.build(values, offsets))
    q = [0.0, 0.1, 0.5, 0.99, 1.0]
    table = td.quantiles(payloads, q)
    assert table.shape == (40, 5) and table.dtype == np.float64
    for i, p in enumerate(payloads):
        if p:
            np.testing.assert_array_equal(table[i], td.quantile(p, q))
        else:
            assert np.isnan(table[i]).all()
    np.testing.assert_array_equal(td.quantiles(payloads, 0.5), table[:, 2])
