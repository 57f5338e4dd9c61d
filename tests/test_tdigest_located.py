"""Tests for member tracking, flux-weighted digests and the location-word channel."""

import mortie
import numpy as np
import pytest

from zagg.kernels import located as lc
from zagg.kernels import tdigest as td

CELL_ORDER = 9


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _segment_ids(offsets):
    return np.repeat(np.arange(offsets.size - 1), np.diff(offsets))


def _segment_sums(x, offsets):
    return np.bincount(_segment_ids(offsets), x, minlength=offsets.size - 1)


def _ranges(starts, sizes):
    """Concatenated ``arange(starts[i], starts[i] + sizes[i])``."""
    shift = np.repeat(starts - _offsets(sizes)[:-1], sizes)
    return np.arange(int(sizes.sum())) + shift


def _observations(rng, n, span=(0.4, 0.8), decimals=None):
    """n observations near (-75, -100), grouped by their order-9 cell.

    Returns ``(values, points, cells, offsets)``: float64 values, the order-29 point words
    from ``mortie.geo2mort``, each cell's area word and the cell offsets.
    """
    lat = -75.0 + rng.random(n) * span[0]
    lon = -100.0 + rng.random(n) * span[1]
    cell_of = mortie.geo2mort(lat, lon, order=CELL_ORDER)
    points = mortie.geo2mort(lat, lon)
    order = np.argsort(cell_of, kind="stable")
    cells, starts = np.unique(cell_of[order], return_index=True)
    values = rng.normal(size=n) * 5
    if decimals is not None:  # coarse values force ties
        values = np.round(values, decimals)
    return values, points[order], cells, np.append(starts, n).astype(np.int64)


def _check_members(values, weights, offsets, result, dtype=np.float32):
    """Every kept row in exactly one centroid of its own segment; means, weights agree.

    ``dtype`` is the precision the kernel read the inputs at (float32 for build).
    """
    means, cw, out_offsets, member_index, member_offsets = result
    v32 = values.astype(dtype).astype(np.float64)
    w = np.ones(values.size) if weights is None else weights.astype(dtype).astype(np.float64)
    kept = np.isfinite(v32) & (w > 0) & np.isfinite(w)
    assert member_offsets[0] == 0 and member_offsets[-1] == member_index.size
    assert member_offsets.size == means.size + 1 and np.all(np.diff(member_offsets) >= 1)
    np.testing.assert_array_equal(np.sort(member_index), np.flatnonzero(kept))
    centroid_of = _segment_ids(member_offsets)
    seg_of_row = _segment_ids(offsets)[member_index]
    np.testing.assert_array_equal(seg_of_row, _segment_ids(out_offsets)[centroid_of])
    mw = w[member_index]
    wsum = np.bincount(centroid_of, mw, minlength=means.size)
    msum = np.bincount(centroid_of, mw * v32[member_index], minlength=means.size)
    np.testing.assert_allclose(cw, wsum, rtol=1e-12)
    np.testing.assert_allclose(means, msum / wsum, rtol=1e-9, atol=1e-9)
    return member_index, member_offsets


# --- member tracking --------------------------------------------------------------------


@pytest.mark.parametrize("delta", [4, 50, td.DEFAULT_DELTA])
def test_build_members_partition_the_kept_rows(delta):
    rng = np.random.default_rng(1)
    lengths = rng.choice([0, 1, 3, 10, 64, 65, 300, 2000], size=200)
    values = rng.normal(size=lengths.sum()) * 10
    values[rng.random(values.size) < 0.05] = np.nan
    offsets = _offsets(lengths)
    result = td.build(values, offsets, delta, return_members=True)
    plain = td.build(values, offsets, delta)
    for a, b in zip(plain, result[:3], strict=True):
        np.testing.assert_array_equal(a, b)  # tracking changes nothing
    member_index, member_offsets = _check_members(values, None, offsets, result)
    sizes = np.diff(member_offsets)
    n_kept = _segment_sums(np.isfinite(values), offsets)
    loss_free = np.repeat(n_kept <= delta, np.diff(result[2]))
    assert np.all(sizes[loss_free] == 1) and np.all(sizes[~loss_free] >= 1)
    np.testing.assert_array_equal(result[1], sizes)  # counts: weight = member count
    # a loss-free centroid's single member has exactly its value
    single = member_index[member_offsets[:-1][loss_free]]
    np.testing.assert_array_equal(result[0][loss_free], values[single].astype(np.float32))


def test_build_members_with_offset_start_index_into_the_input():
    values = np.array([9.0, 9.0, 3.0, np.nan, 1.0, 2.0])
    m, w, o, mi, mo = td.build(values, [2, 4, 6], return_members=True)
    np.testing.assert_array_equal(m, [3.0, 1.0, 2.0])
    np.testing.assert_array_equal(mi, [2, 4, 5])
    np.testing.assert_array_equal(mo, [0, 1, 2, 3])
    empty = td.build(np.zeros(0), [0], return_members=True)
    assert empty[3].size == 0 and empty[4].tolist() == [0]


@pytest.mark.parametrize("declaration", ["counts", "flux"])
def test_merge_members_index_the_input_centroid_rows(declaration):
    rng = np.random.default_rng(2)
    lengths = rng.choice([0, 1, 20, 300, 1500], size=60)
    values = rng.normal(size=lengths.sum())
    weights = rng.exponential(size=values.size) if declaration == "flux" else None
    pieces = td.build(values, _offsets(lengths), 64, weights=weights)
    cell_offsets = pieces[2][::2]  # two consecutive pieces per cell
    result = td.merge(*pieces[:2], cell_offsets, 64, declaration=declaration, return_members=True)
    plain = td.merge(*pieces[:2], cell_offsets, 64, declaration=declaration)
    for a, b in zip(plain, result[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    member_index, member_offsets = _check_members(
        pieces[0], pieces[1], cell_offsets, result, np.float64
    )
    assert member_index.size == pieces[0].size  # a merge keeps every input row
    if declaration == "counts":  # loss-free while the total weight fits
        cell_loss_free = _segment_sums(pieces[1], cell_offsets) <= 64
    else:  # while the rows fit
        cell_loss_free = np.diff(cell_offsets) <= 64
    loss_free = np.repeat(cell_loss_free, np.diff(result[2]))
    assert loss_free.any() and (~loss_free).any()
    assert np.all(np.diff(member_offsets)[loss_free] == 1)


# --- flux weights -----------------------------------------------------------------------


def test_flux_build_keeps_positive_finite_weights_only():
    rng = np.random.default_rng(3)
    lengths = rng.choice([0, 1, 5, 40, 200, 5000], size=100)
    offsets = _offsets(lengths)
    values = rng.normal(size=lengths.sum())
    weights = rng.gamma(2.0, 30.0, size=values.size)
    weights[rng.random(values.size) < 0.1] = 0.0
    bad = rng.random(values.size) < 0.05
    weights[bad] = rng.choice([-1.0, np.nan, np.inf, 1e-50], size=bad.sum())
    values[rng.random(values.size) < 0.03] = np.inf
    result = td.build(values, offsets, 100, weights=weights, return_members=True)
    _check_members(values, weights, offsets, result)
    w32 = weights.astype(np.float32)
    good = np.isfinite(values) & np.isfinite(w32) & (w32 > 0)
    assert np.all(result[1] > 0)
    for i, rows in enumerate(map(td.payload_to_array, td.to_payloads(*result[:3]))):
        sl = slice(offsets[i], offsets[i + 1])
        v, w = values[sl][good[sl]].astype(np.float32), w32[sl][good[sl]]
        assert rows[:, 1].sum(dtype=np.float64) == pytest.approx(w.sum(dtype=np.float64))
        assert len(rows) <= 100 and np.all(np.diff(rows[:, 0]) >= 0) and np.all(rows[:, 1] > 0)
        if v.size <= 100:  # loss-free: the sorted (value, weight) pairs
            order = np.lexsort((w, v))
            np.testing.assert_array_equal(rows[:, 0], v[order])
            np.testing.assert_array_equal(rows[:, 1], w[order])
        else:
            assert len(rows) < v.size


def test_flux_zero_weight_rows_produce_no_row_and_ties_sort_by_weight():
    values = np.array([2.0, 1.0, 2.0, 5.0, 2.0, 7.0])
    weights = np.array([3.0, 0.5, 0.25, 0.0, 1.0, -2.0])
    rows = td.payload_to_array(td.to_payloads(*td.build(values, [0, 6], weights=weights))[0])
    np.testing.assert_array_equal(rows, [[1.0, 0.5], [2.0, 0.25], [2.0, 1.0], [2.0, 3.0]])


def test_flux_loss_free_rule_counts_observations_not_weight():
    x = np.arange(10.0)
    heavy = np.full(10, 100.0)
    light = np.full(10, 0.01)
    assert td.build(x, [0, 10], 10, weights=heavy)[0].size == 10
    assert td.build(x, [0, 10], 10, weights=light)[0].size == 10
    assert td.build(x, [0, 10], 9, weights=light)[0].size < 10
    # merge under "flux" keys on rows too; "counts" on total weight
    m, w, _ = td.build(x, [0, 10], 10, weights=heavy)
    assert td.merge(m, w, [0, 10], 10, declaration="flux")[0].size == 10
    assert td.merge(m, w, [0, 10], 10)[0].size < 10


def test_flux_compression_positions_by_weight():
    # one observation carrying most of the weight sits alone in the middle of q-space,
    # while many light ones share centroids at the ends
    x = np.arange(1001.0)
    w = np.ones(1001)
    w[500] = 1e6
    m, cw, _, mi, mo = td.build(x, [0, 1001], 20, weights=w, return_members=True)
    (heavy,) = np.flatnonzero(cw >= 1e6)
    assert mi[mo[heavy] : mo[heavy + 1]].tolist() == [500] and m[heavy] == 500.0
    assert cw.sum() == 1e6 + 1000 and m.size <= 20 and np.diff(mo).max() > 100


def test_flux_merge_of_loss_free_pieces_equals_build_of_all():
    rng = np.random.default_rng(4)
    x = np.round(rng.normal(size=150), 1)  # value ties with different weights
    w = rng.choice([0.5, 1.5, 2.0, 3.25], size=150)
    whole = td.to_payloads(*td.build(x, [0, 150], 200, weights=w))[0]
    perm = rng.permutation(150)
    pieces = td.build(x[perm], [0, 40, 90, 150], 200, weights=w[perm])
    rev = np.concatenate([np.arange(90, 150), np.arange(0, 90)])  # pieces in another order
    merged = td.merge(pieces[0][rev], pieces[1][rev], [0, 150], 200, declaration="flux")
    assert td.to_payloads(*merged)[0] == whole


def test_check_weights_compatible_refuses_counts_with_flux():
    assert td.check_weights_compatible(None, "counts") == "counts"
    assert td.check_weights_compatible("flux", "flux") == "flux"
    for a, b in [("counts", "flux"), ("flux", None)]:
        with pytest.raises(ValueError, match="flux") as err:
            td.check_weights_compatible(a, b)
        assert repr(a) in str(err.value) and repr(b) in str(err.value)
    with pytest.raises(ValueError, match="photons"):
        td.check_weights_compatible("photons", "photons")
    with pytest.raises(ValueError):
        td.merge(np.ones(2), np.ones(2), [0, 2], declaration="energy")


# --- location words ---------------------------------------------------------------------


def test_loss_free_locations_are_the_observations_point_words():
    rng = np.random.default_rng(5)
    values, points, cells, offsets = _observations(rng, 3000, decimals=1)
    values[rng.random(values.size) < 0.05] = np.nan
    means, weights, out_offsets, loc = lc.located_build(values, points, offsets)
    assert np.diff(offsets).max() <= td.DEFAULT_DELTA and loc.dtype == np.uint64
    keep = np.isfinite(values)
    seg = _segment_ids(offsets)[keep]
    v32, pts = values[keep].astype(np.float32), points[keep]
    order = np.lexsort((pts, v32, seg))  # by cell, value, then word
    np.testing.assert_array_equal(means, v32[order])
    np.testing.assert_array_equal(loc, pts[order])
    assert mortie.is_point(loc).all() and np.all(mortie.orders_of(loc) == 29)
    payloads = lc.locations_to_payloads(loc, out_offsets)
    digest = td.to_payloads(means, weights, out_offsets)
    assert [len(p) for p in payloads] == [len(p) for p in digest]


def _containment(loc, cells, out_offsets):
    """Every word's ancestor at the cell order is its cell (orders decoded per word)."""
    assert np.all(mortie.orders_of(loc) >= CELL_ORDER)
    cell_of_row = np.repeat(cells, np.diff(out_offsets))
    np.testing.assert_array_equal(mortie.clip2order(CELL_ORDER, loc), cell_of_row)


@pytest.mark.parametrize("flux", [False, True])
def test_compressed_locations_are_common_ancestors_of_members(flux):
    rng = np.random.default_rng(6)
    values, points, cells, offsets = _observations(rng, 20_000)
    weights = rng.exponential(size=values.size) if flux else None
    means, cw, out_offsets, loc = lc.located_build(values, points, offsets, 16, weights=weights)
    _, _, _, mi, mo = td.build(values, offsets, 16, weights=weights, return_members=True)
    sizes = np.diff(mo)
    assert np.diff(offsets).max() > 16 and sizes.max() > 1
    single = sizes == 1
    np.testing.assert_array_equal(loc[single], points[mi[mo[:-1][single]]])
    assert mortie.is_point(loc[single]).all() and not mortie.is_point(loc[~single]).any()
    for j in rng.choice(np.flatnonzero(~single), size=25, replace=False):
        members = points[mi[mo[j] : mo[j + 1]]]
        assert loc[j] == mortie.common_ancestor(members)
    _containment(loc, cells, out_offsets)


def _ancestor_of_all(loc, member_words, sizes):
    """Each ``loc[j]`` contains each of its members' words; a lone member is ``loc[j]``."""
    parents = np.repeat(loc, sizes)
    lone = np.repeat(sizes == 1, sizes)
    np.testing.assert_array_equal(member_words[lone], parents[lone])
    assert not mortie.is_point(loc[sizes > 1]).any()
    orders = mortie.orders_of(parents)
    assert np.all(mortie.orders_of(member_words) >= orders)
    for k in np.unique(orders[~lone]):  # clip each member to its parent's order
        at = ~lone & (orders == k)
        np.testing.assert_array_equal(mortie.clip2order(int(k), member_words[at]), parents[at])


def test_merge_of_random_splits_keeps_ancestry():
    rng = np.random.default_rng(7)
    values, points, cells, offsets = _observations(rng, 6000)
    delta = 12
    # split every cell's observations randomly into three pieces, one digest per piece
    piece = rng.integers(0, 3, values.size)
    seg = _segment_ids(offsets)
    order = np.lexsort((piece, seg))
    piece_offsets = np.searchsorted(seg[order] * 3 + piece[order], np.arange(3 * cells.size + 1))
    pm, pw, po, ploc = lc.located_build(values[order], points[order], piece_offsets, delta)
    _, _, _, pmi, pmo = td.build(values[order], piece_offsets, delta, return_members=True)
    means, weights, out_offsets, loc = lc.located_merge(pm, pw, ploc, po[::3], delta)
    _, _, _, mi, mo = td.merge(pm, pw, po[::3], delta, return_members=True)
    assert weights.sum() == values.size and np.diff(mo).max() > 1
    _containment(loc, cells, out_offsets)
    _ancestor_of_all(loc, ploc[mi], np.diff(mo))
    # through both levels: the observations beneath each merged centroid
    beneath = points[order][pmi[_ranges(pmo[mi], np.diff(pmo)[mi])]]
    per_centroid = _segment_sums(np.diff(pmo)[mi], mo).astype(np.int64)
    _ancestor_of_all(loc, beneath, per_centroid)
    obs_offsets = _offsets(per_centroid)
    for j in rng.choice(np.flatnonzero(per_centroid > 1), size=20, replace=False):
        assert loc[j] == mortie.common_ancestor(beneath[obs_offsets[j] : obs_offsets[j + 1]])


@pytest.mark.parametrize("flux", [False, True])
def test_loss_free_located_merge_is_byte_identical_to_one_shot_build(flux):
    rng = np.random.default_rng(8)
    values, points, cells, offsets = _observations(rng, 4000, span=(1.5, 3.0), decimals=0)
    assert np.diff(offsets).max() <= td.DEFAULT_DELTA  # loss-free throughout
    seg = _segment_ids(offsets)
    dup = np.flatnonzero(rng.random(values.size) < 0.1)[1:]  # repeated positions too
    dup = dup[seg[dup - 1] == seg[dup]]
    points[dup] = points[dup - 1]
    weights = rng.choice([0.5, 2.0, 7.5], size=values.size) if flux else None
    declaration = "flux" if flux else "counts"
    whole = lc.located_build(values, points, offsets, weights=weights)
    for k in (2, 3, 4):  # random splits into k pieces per cell, rows shuffled
        perm = rng.permutation(values.size)
        piece = rng.integers(0, k, values.size)
        order = perm[np.lexsort((piece[perm], seg[perm]))]
        keys = seg[order] * k + piece[order]
        piece_offsets = np.searchsorted(keys, np.arange(k * cells.size + 1))
        w = None if weights is None else weights[order]
        pm, pw, po, ploc = lc.located_build(values[order], points[order], piece_offsets, weights=w)
        # lay out each cell's pieces in a random order
        slots = (
            np.arange(cells.size)[:, None] * k
            + rng.permuted(np.tile(np.arange(k), (cells.size, 1)), axis=1)
        ).ravel()
        rows = _ranges(po[slots], np.diff(po)[slots])
        merged = lc.located_merge(pm[rows], pw[rows], ploc[rows], po[::k], declaration=declaration)
        assert list(td.to_payloads(*merged[:3])) == list(td.to_payloads(*whole[:3]))
        got = lc.locations_to_payloads(merged[3], merged[2])
        assert list(got) == list(lc.locations_to_payloads(whole[3], whole[2]))


def test_location_payloads_round_trip():
    words = np.array([1, 2**63 + 5, 7], np.uint64)
    payloads = lc.locations_to_payloads(words, [0, 0, 2, 2, 3])
    assert list(payloads) == [
        b"",
        np.array([1, 2**63 + 5], "<u8").tobytes(),
        b"",
        b"\x07" + b"\x00" * 7,
    ]
    back, offsets = lc.locations_from_payloads(np.array([*payloads, None], dtype=object))
    assert back.dtype == np.uint64
    np.testing.assert_array_equal(back, words)
    np.testing.assert_array_equal(offsets, [0, 0, 2, 2, 3, 3])
    with pytest.raises(ValueError):
        lc.locations_from_payloads([b"\x00" * 12])


def test_located_arguments_are_checked():
    with pytest.raises(ValueError, match="uint64"):
        lc.located_build(np.zeros(2), np.zeros(2, np.int64), [0, 2])
    with pytest.raises(ValueError, match="2 location words"):
        lc.located_build(np.zeros(2), np.zeros(3, np.uint64), [0, 2])
    with pytest.raises(ValueError, match="null"):
        lc.located_build(np.zeros(2), np.zeros(2, np.uint64), [0, 2])
    # a dropped row needs no word
    m, w, o, loc = lc.located_build(
        np.array([np.nan, 1.0]), np.array([0, 2**62 + 29], np.uint64), [0, 2]
    )
    assert loc.tolist() == [2**62 + 29]


def test_common_ancestors_come_from_one_mortie_call(monkeypatch):
    calls = []
    original = mortie.common_ancestor

    def counting(words, *, offsets=None):
        calls.append(None if offsets is None else offsets.size - 1)
        return original(words, offsets=offsets)

    monkeypatch.setattr(lc.mortie, "common_ancestor", counting)
    rng = np.random.default_rng(9)
    values, points, cells, offsets = _observations(rng, 4000, span=(1.5, 3.0))
    lc.located_build(values, points, offsets)  # loss-free: no call at all
    assert calls == []
    m, w, o, loc = lc.located_build(values, points, offsets, 20)
    assert len(calls) == 1 and calls[0] == np.count_nonzero(~mortie.is_point(loc))
