"""The pyramid's digest fold (zagg.kernels.fold) against the raw points beneath it."""

import mortie
import numpy as np
import pytest

from zagg.kernels import fold
from zagg.kernels import located as lc
from zagg.kernels import tdigest as td

DELTA = 128
Q = np.linspace(0.01, 0.99, 99)


def _offsets(sizes):
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _cell_values(rng, n_cells, parts, size):
    """Raw values of ``n_cells`` cells of ``parts`` parts each (a part: ``size`` values),
    shaped like photon heights: each part a surface peak at its own height with scatter, a
    slope across the part and a uniform background, so the parts of a cell overlap."""
    values = []
    for _ in range(n_cells * parts):
        n = int(rng.integers(size // 2, size))
        peak = rng.normal(rng.normal(0, 20), 1.0, n) + rng.uniform(-15, 15, n)
        noise = rng.uniform(-250, 250, n)
        values.append(np.where(rng.random(n) < 0.2, noise, peak).astype(np.float32))
    return values


def _digests(values):
    """Digests (float32 rows, as stored) of each piece of ``values`` under the pyramid's
    size law: a finer level's cells."""
    m, w, o = _direct(values, np.float32)
    return m, w.astype(np.float32), o


def _law(n, delta=DELTA):
    """The k1 compression the pyramid's size law bins ``n`` observations at (a cell of at
    most ``delta`` is kept whole, as a leaf digest keeps it)."""
    return fold.compression(n, delta) if n > delta else delta


def _direct(cells, dtype=np.float64):
    """Each cell's digest built from its raw values under the pyramid's size law."""
    built = [td.build(c, [0, c.size], _law(c.size), out_dtype=dtype)[:3] for c in cells]
    sizes = [b[0].size for b in built]
    return (
        np.concatenate([b[0] for b in built]),
        np.concatenate([b[1] for b in built]),
        _offsets(sizes),
    )


def _fold(digests, parts, delta=DELTA):
    """Fold consecutive groups of ``parts`` digests, one group per cell."""
    m, w, o = digests
    cells = np.arange(0, o.size, parts, dtype=np.int64)
    return fold.fold_runs(m, w, o[:-1], np.diff(o), cells, delta)


def _errors(digests, raw_cells):
    """Quantile errors relative to each cell's range (cells x Q)."""
    m, w, o = (np.asarray(x, np.float64) if i < 2 else x for i, x in enumerate(digests))
    est = np.empty((o.size - 1, Q.size))
    td.segment_quantiles(m, w, o, Q, est)
    exact = np.array([np.quantile(c, Q, method="hazen") for c in raw_cells])
    spread = np.array([np.ptp(c) for c in raw_cells])[:, None]
    return np.abs(est - exact) / spread


@pytest.fixture(scope="module")
def cells():
    """64 cells of 4 overlapping parts (2,000-4,000 values each), and each cell's raw values."""
    rng = np.random.default_rng(5)
    parts = _cell_values(rng, 64, 4, 4000)
    raw = [np.concatenate(parts[i : i + 4]).astype(np.float64) for i in range(0, len(parts), 4)]
    return parts, raw


def test_a_fold_holds_the_direct_digests_centroids_with_its_accuracy(cells):
    parts, raw = cells
    pm, pw, po = _digests(parts)
    m, w, o = _fold((pm, pw, po), 4)
    direct = _direct(raw)
    # the budget: exactly the centroids a digest of the cell's raw points holds under the law
    np.testing.assert_array_equal(np.diff(o), np.diff(direct[2]))
    # every weight an integer count, summing to the cell's count; the parts' sum kept up to
    # the float32 rounding of the folded means
    assert np.all(w == np.round(w)) and np.all(w >= 1)
    parts_sum = np.add.reduceat(pm.astype(np.float64) * pw, po[:-1])
    for j, values in enumerate(raw):
        seg = slice(o[j], o[j + 1])
        assert w[seg].sum() == values.size
        assert np.all(np.diff(m[seg]) >= 0)
        mw = m[seg].astype(np.float64) * w[seg]
        assert abs(mw.sum() - parts_sum[4 * j : 4 * j + 4].sum()) <= np.abs(mw).sum() * 2.0**-23
    # stated tolerance: median error (99 quantiles, relative to each cell's range) within
    # 1.5x the direct digest's, every error within 2 % of the range
    ours, theirs = _errors((m, w, o), raw), _errors(direct, raw)
    assert np.median(ours) <= 1.5 * np.median(theirs)
    assert ours.max() <= 0.02


def test_a_cascade_of_folds_keeps_the_budget_and_the_accuracy():
    """Two levels: 16 parts fold into 4 per cell, those 4 into the cell (fold of folds)."""
    rng = np.random.default_rng(6)
    parts = _cell_values(rng, 16, 16, 2000)
    raw = [np.concatenate(parts[i : i + 16]).astype(np.float64) for i in range(0, 256, 16)]
    middle = _fold(_digests(parts), 4)
    m, w, o = _fold(middle, 4)
    direct = _direct(raw)
    np.testing.assert_array_equal(np.diff(o), np.diff(direct[2]))
    assert [w[o[j] : o[j + 1]].sum() for j in range(16)] == [r.size for r in raw]
    ours, theirs = _errors((m, w, o), raw), _errors(direct, raw)
    assert np.median(ours) <= 1.6 * np.median(theirs)  # stated tolerance for two folds
    assert ours.max() <= 0.02
    # sharper than a digest of the raw points at the declared delta (the leaf's law, about
    # half the centroids): stated tolerance, the median error at most 0.75x its
    leaf_law = td.build(np.concatenate(raw), _offsets([r.size for r in raw]), DELTA)[:3]
    assert np.median(ours) <= 0.75 * np.median(_errors(leaf_law, raw))


def test_the_size_law_grows_with_the_points_a_cell_summarizes():
    """Delta up to delta observations, then 0.28 delta per doubling, at most 2.75 delta:
    a cell never holds more than 1.4 delta centroids, however many points it summarizes."""
    assert fold.compression(DELTA, DELTA) == DELTA
    assert fold.compression(4 * DELTA, DELTA) == pytest.approx(DELTA * 1.56)
    assert fold.compression(1e9, DELTA) == 2.75 * DELTA
    counts = [fold.bins(n, DELTA).size - 1 for n in (200, 1_000, 10_000, 100_000, 10**7)]
    # more with more points, up to the ceiling's k1 bins (the law's k1 bins at the ceiling
    # hold a few more where some tail bins are still single observations)
    assert counts == [84, 125, 179, 177, 177]
    for n in np.unique(np.geomspace(DELTA + 1, 2e7, 300).astype(np.int64)):
        assert fold.bins(n, DELTA).size - 1 <= 1.4 * DELTA


def test_a_fold_of_single_observations_is_the_direct_digest():
    rng = np.random.default_rng(7)
    sizes = rng.integers(0, 300, 40 * 6)
    runs = [np.sort(rng.normal(size=k).astype(np.float32)) for k in sizes]
    m, w, o = fold.fold_runs(
        np.concatenate(runs), None, _offsets(sizes)[:-1], sizes, np.arange(0, 241, 6), DELTA
    )
    cells = [np.concatenate(runs[i : i + 6]) for i in range(0, 240, 6)]
    want = _direct(cells, np.float32)
    assert m.tobytes() == want[0].tobytes()
    assert w.tobytes() == want[1].astype(np.float32).tobytes()
    np.testing.assert_array_equal(o, want[2])


def test_one_sorted_run_per_cell_folds_as_the_merge_of_its_pieces():
    """A cell given as its values sorted (one run) folds to the bytes of the same values
    given as several sorted runs, or with explicit unit weights; -0.0 reads as 0.0."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 400, 30 * 4)
    runs = [np.sort(rng.normal(size=k).astype(np.float32)) for k in sizes]
    runs[3][: min(5, runs[3].size)] = -0.0  # signed zeros: read as 0.0 either way
    runs[3].sort()
    pieces = fold.fold_runs(
        np.concatenate(runs), None, _offsets(sizes)[:-1], sizes, np.arange(0, 121, 4), DELTA
    )
    cells = [np.sort(np.concatenate(runs[i : i + 4]) + np.float32(0)) for i in range(0, 120, 4)]
    whole = np.concatenate(cells)
    counts = np.array([c.size for c in cells])
    starts = _offsets(counts)[:-1]
    one = fold.fold_runs(whole, None, starts, counts, np.arange(31), DELTA)
    weighed = fold.fold_runs(whole, np.ones(whole.size), starts, counts, np.arange(31), DELTA)
    for got in (one, weighed):
        assert got[0].tobytes() == pieces[0].tobytes()
        assert got[1].tobytes() == pieces[1].tobytes()
        np.testing.assert_array_equal(got[2], pieces[2])
    assert not (np.signbit(one[0]) & (one[0] == 0)).any()  # no -0.0 comes out


def test_sort_points_sorts_each_cell_and_reads_negative_zero_as_zero():
    rng = np.random.default_rng(12)
    values = rng.normal(size=500).astype(np.float32)
    values[::50] = -0.0
    offsets = np.array([0, 0, 1, 120, 121, 400, 500])
    got = fold.sort_points(values, offsets)
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        want = np.sort(values[a:b] + np.float32(0))
        assert got[a:b].tobytes() == want.tobytes()
    assert not np.signbit(got[got == 0]).any()
    assert values[0] == 0 and np.signbit(values[0])  # the input is left as it was


def test_a_fold_keeps_rows_it_cannot_reduce():
    rng = np.random.default_rng(8)
    # a loss-free cell (40 observations) comes out as its values, sorted
    small = [np.sort(rng.normal(size=k).astype(np.float32)) for k in (10, 30)]
    m, w, o = fold.fold_runs(np.concatenate(small), None, [0, 10], [10, 30], [0, 2], DELTA)
    np.testing.assert_array_equal(m, np.sort(np.concatenate(small)))
    assert w is None and list(o) == [0, 40]  # unit weights stay implicit, as given
    # one part already at the budget is kept as it is: folding it again changes nothing
    digest = _digests([rng.normal(size=5000).astype(np.float32)])
    again = fold.fold_runs(digest[0], digest[1], [0], [digest[0].size], [0, 1], DELTA)
    assert again[0].tobytes() == digest[0].tobytes()
    assert again[1].tobytes() == digest[1].tobytes()


def test_a_fold_does_not_depend_on_the_order_of_its_parts(cells):
    parts, _ = cells
    m, w, o = _digests(parts)
    sizes = np.diff(o)
    order = np.concatenate([np.arange(i + 3, i - 1, -1) for i in range(0, sizes.size, 4)])
    forward = fold.fold_runs(m, w, o[:-1], sizes, np.arange(0, sizes.size + 1, 4), DELTA)
    backward = fold.fold_runs(
        m, w, o[:-1][order], sizes[order], np.arange(0, sizes.size + 1, 4), DELTA
    )
    for a, b in zip(forward, backward, strict=True):
        assert a.tobytes() == b.tobytes()


def test_every_row_is_a_member_of_the_centroids_that_took_its_mass(cells):
    parts, _ = cells
    m, w, o = _digests(parts[:16])
    sizes = np.diff(o)
    out_m, out_w, out_o, index, offsets = fold.fold_runs(
        m, w, o[:-1], sizes, [0, 4, 8, 12, 16], DELTA, return_members=True
    )
    assert np.array_equal(np.unique(index), np.arange(m.size))  # every row is a member
    owner = np.repeat(np.arange(out_m.size), np.diff(offsets))
    cell_of_row = np.repeat(np.arange(16) // 4, sizes)
    cell_of_centroid = np.repeat(np.arange(4), np.diff(out_o))
    np.testing.assert_array_equal(cell_of_row[index], cell_of_centroid[owner])
    for row in range(m.size):  # a row reaches consecutive centroids of its cell
        reached = np.sort(owner[index == row])
        np.testing.assert_array_equal(reached, np.arange(reached[0], reached[-1] + 1))
    # a centroid's members hold at least its weight (shared rows count on both sides)
    member_weight = np.add.reduceat(w[index].astype(np.float64), offsets[:-1])
    assert np.all(member_weight >= out_w)


def test_a_located_fold_of_single_observations_is_their_located_build():
    """Heights on a coarse grid (many ties across parts): the fold's rows and words are
    those of a located digest built from the observations at once."""
    rng = np.random.default_rng(10)
    lat = rng.uniform(-75.6, -75.4, 6000)
    lon = rng.uniform(-100.2, -99.8, 6000)
    words = mortie.geo2mort(lat, lon, order=29)
    values = (np.round(rng.normal(0, 4, words.size)) / 2).astype(np.float32)
    sizes = np.full(60, 100)  # 60 parts of 100 observations, 6 cells of 10 parts
    parts = _offsets(sizes)
    order = np.argsort(np.repeat(np.arange(60), 100) * 100.0 + values, kind="stable")
    values, words = values[order], words[order]  # each part sorted, ties in input order
    ones = np.ones(values.size, np.float32)
    got = lc.located_fold(values, ones, words, parts[:-1], sizes, np.arange(0, 61, 10), DELTA)
    want = lc.located_build(values, words, _offsets(np.full(6, 1000)), _law(1000))
    for a, b in zip(got, want, strict=True):  # rows as stored (float32), words exactly
        kind = np.float32 if b.dtype.kind == "f" else b.dtype
        np.testing.assert_array_equal(np.asarray(a, kind), np.asarray(b, kind))


def test_located_folds_carry_a_word_containing_every_member():
    rng = np.random.default_rng(9)
    lat = rng.uniform(-75.6, -75.4, 40_000)
    lon = rng.uniform(-100.2, -99.8, 40_000)
    words = mortie.geo2mort(lat, lon, order=29)
    parent = mortie.clip2order(9, words)
    child = mortie.clip2order(11, words)
    order = np.lexsort((child, parent))
    words, child, parent = words[order], child[order], parent[order]
    values = rng.normal(0, 10, words.size).astype(np.float32)
    _, starts = np.unique(child, return_index=True)
    offsets = np.append(starts, child.size).astype(np.int64)
    m, w, o, loc = lc.located_build(values, words, offsets, DELTA)
    cell_runs = np.append(np.unique(parent[starts], return_index=True)[1], starts.size)
    fm, fw, fo, floc = lc.located_fold(
        m, w, loc, o[:-1], np.diff(o), cell_runs.astype(np.int64), DELTA
    )
    _, _, _, index, member_offsets = fold.fold_runs(
        m, w, o[:-1], np.diff(o), cell_runs.astype(np.int64), DELTA, return_members=True
    )
    assert fw.sum() == values.size and floc.size == fm.size
    owner = np.repeat(np.arange(fm.size), np.diff(member_offsets))
    orders = mortie.orders_of(floc[owner])
    for k in np.unique(orders):  # each member's word lies in its centroid's word
        at = orders == k
        np.testing.assert_array_equal(mortie.clip2order(int(k), loc[index][at]), floc[owner][at])
    assert np.all(mortie.orders_of(floc) >= 9)  # never coarser than the folded cell
