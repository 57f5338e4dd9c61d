"""Keying one chunk: the rows kept, their mortie cells and the granules per shard, against
plain numpy over every point, on track-ordered and on shuffled input."""

import mortie
import numpy as np
import pytest

from zagg import grid as G
from zagg.config.model import load_config
from zagg.engine.keying import key_chunk
from zagg.engine.plan import make_plan
from zagg.engine.reduce import reduce_chunk
from zagg.kernels import keep as keep_rows

P, C = 6, 13


def plan_of(filters=True, located=False):
    src = {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h", "q"]}
    if filters:
        src["filters"] = [{"variable": "q", "op": "ge", "value": 1}]
    fields = {"count": {"function": "count"}, "h_td": {"function": "tdigest", "source": "h"}}
    if located:
        fields["h_td"]["located"] = True
    raw = {
        "data_source": src,
        "aggregation": {"variables": fields},
        "output": {
            "dataset": {"short_name": "TEST", "version": "1"},
            "grid": {"parent_order": P, "child_order": C},
        },
    }
    return make_plan(load_config(raw), None, "granule")


def track(n, seed=0, shuffle=False):
    """An along-track chunk over a few shards: granules in runs (one granule comes back
    after another), unkeyable coordinates here and there, a quality flag dropping a third."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, n)
    lat = -75.0 + 2.0 * t + rng.normal(0, 1e-5, n)
    lon = -100.0 + 0.5 * np.sin(3 * t)
    bad = rng.choice(n, n // 50, replace=False)
    lat[bad[0::4]] = np.nan
    lon[bad[1::4]] = np.inf
    lat[bad[2::4]] = 90.5
    lat[bad[3::4]] = -np.inf
    granule = np.repeat(np.array([0, 1, 0, 2], np.int32), -(-n // 4))[:n]
    arrs = {
        "lat": lat,
        "lon": lon,
        "q": rng.integers(0, 3, n).astype(np.int8),
        "h": rng.normal(1500.0, 30.0, n).astype(np.float32),
        "granule": granule,
    }
    if shuffle:
        perm = rng.permutation(n)
        arrs = {k: v[perm] for k, v in arrs.items()}
    return arrs


def kept_of(arrs, filters=True):
    ok = np.isfinite(arrs["lat"]) & np.isfinite(arrs["lon"]) & (np.abs(arrs["lat"]) <= 90)
    return ok & (arrs["q"] >= 1) if filters else ok


@pytest.mark.parametrize("masked", [True, False])
def test_keyable_rows_are_the_kept_rows_with_keyable_coordinates(masked):
    arrs = track(5_000, seed=1)
    arrs["lat"][:3] = [90.0, -90.0, 90.0000001]  # the poles are keyable, beyond them not
    mask = arrs["q"] >= 1 if masked else None
    lat, lon = arrs["lat"].copy(), arrs["lon"].copy()
    lat.flags.writeable = False
    rows, klat, klon, n_kept = keep_rows.keyable_rows(mask, lat, lon)
    want = np.flatnonzero(kept_of(arrs, masked))
    assert rows.dtype == np.int64
    np.testing.assert_array_equal(rows, want)
    np.testing.assert_array_equal(klat, arrs["lat"][want])
    np.testing.assert_array_equal(klon, arrs["lon"][want])
    assert n_kept == (int(mask.sum()) if masked else 5_000)
    np.testing.assert_array_equal(lat, arrs["lat"])  # inputs untouched


def test_keyable_rows_of_nothing_and_of_nothing_kept():
    e = np.zeros(0)
    rows, lat, lon, n_kept = keep_rows.keyable_rows(np.zeros(0, bool), e, e)
    assert (rows.size, lat.size, lon.size, n_kept) == (0, 0, 0, 0)
    rows, *_, n_kept = keep_rows.keyable_rows(np.zeros(4, bool), np.zeros(4), np.zeros(4))
    assert (rows.size, n_kept) == (0, 0)
    with pytest.raises(ValueError, match="one entry per row"):
        keep_rows.keyable_rows(np.ones(3, bool), np.zeros(4), np.zeros(4))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("located", [False, True])
def test_chunk_keying_is_mortie_on_the_kept_points(shuffle, located):
    arrs = track(20_000, seed=2, shuffle=shuffle)
    points, counts = key_chunk(plan_of(located=located), arrs)
    kept = kept_of(arrs)
    q_kept = arrs["q"] >= 1
    want = mortie.geo2mort(arrs["lat"][kept], arrs["lon"][kept], order=C)
    np.testing.assert_array_equal(points.cell_words, want)
    np.testing.assert_array_equal(points.values("h"), arrs["h"][kept])
    assert counts == {
        "points_in": 20_000,
        "filtered": int((~q_kept).sum()),
        "invalid_coordinates": int((q_kept & ~kept).sum()),
        "outside_shards": 0,
        "keyed": int(kept.sum()),
    }
    grp = points.grouping  # runs of equal cell in input order, as the grouping saw them
    cut = np.flatnonzero(np.concatenate(([True], want[1:] != want[:-1])))
    np.testing.assert_array_equal(grp.runs, cut)
    np.testing.assert_array_equal(grp.run_cells, want[cut])


def brute_granules(cell_words, granule):
    """Shard word → ascending granules, shards in order of their first granule, from every
    point's (shard, granule) pair."""
    shard = G.ancestor(cell_words, P)
    pairs = sorted({(int(g), int(s)) for s, g in zip(shard, granule, strict=True)})
    out = {}
    for g, s in pairs:
        out.setdefault(s, []).append(g)
    return out


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("filters", [True, False])
def test_granules_per_shard_are_those_of_every_point(shuffle, filters):
    arrs = track(30_000, seed=3, shuffle=shuffle)
    plan = plan_of(filters)
    result = reduce_chunk(plan, *(arrs[k] for k in plan.inputs))
    kept = kept_of(arrs, filters)
    words = mortie.geo2mort(arrs["lat"][kept], arrs["lon"][kept], order=C)
    want = brute_granules(words, arrs["granule"][kept])
    assert len(want) > 2
    assert list(result.granules.items()) == list(want.items())
    np.testing.assert_array_equal(result.shards, sorted(want))


def test_granules_where_a_dropped_row_separates_two_runs_of_one_granule():
    arrs = track(2_000, seed=4)
    arrs["granule"][:] = 5
    arrs["granule"][1000] = 6  # only on a row the filter drops
    arrs["q"][1000] = 0
    plan = plan_of()
    result = reduce_chunk(plan, *(arrs[k] for k in plan.inputs))
    assert all(g == [5] for g in result.granules.values())
    one = {k: v[1000:1001] for k, v in arrs.items()}  # one row, filtered out
    empty = reduce_chunk(plan, *(one[k] for k in plan.inputs))
    assert empty.granules is None and empty.shards.size == 0
    one["q"][:] = 2  # one point, one cell
    single = reduce_chunk(plan, *(one[k] for k in plan.inputs))
    assert list(single.granules.values()) == [[6]] and single.partial.cells.size == 1


#: longitudes no sane writer should produce but a file may hold: each is an angle, keyed as
#: the same angle in [-180, 180)
HOSTILE_LONS = np.array(
    [1e30, -1e300, 1e5, float(2**62), -1e-20, 5e-324, -5e-324, 180.0, -180.0, -0.0, 540.0,
     -540.0, 359.99999999999994, -180.00000000000003, 179.99999999999997, 1.7976931348623157e308]
)  # fmt: skip


def test_wrapped_longitudes_are_the_same_angles_in_one_range():
    # exact values: the float 1e30 is an integer whose remainder by 360 is 16 (Python's
    # integers say so), and the remainder is computed exactly
    w = G.wrap_longitude(HOSTILE_LONS)
    want = [int(v) % 360 for v in HOSTILE_LONS[:4]]
    assert w[:4].tolist() == [float(r - 360 if r >= 180 else r) for r in want]
    assert ((w >= -180.0) & (w < 180.0)).all()
    assert w[7:12].tolist() == [-180.0, -180.0, 0.0, -180.0, -180.0]
    assert not np.signbit(w[9])  # -0.0 becomes 0.0
    assert w[14] == 179.99999999999997 and w[13] == 179.99999999999997
    # the keying pass wraps by the same rule, bit for bit
    rows, _, lon, _ = keep_rows.keyable_rows(None, np.zeros(HOSTILE_LONS.size), HOSTILE_LONS)
    assert rows.size == HOSTILE_LONS.size
    np.testing.assert_array_equal(lon.view(np.uint64), w.view(np.uint64))
    # an in-range longitude is not touched
    inside = np.random.default_rng(3).uniform(-180.0, 180.0, 100_000)
    np.testing.assert_array_equal(G.wrap_longitude(inside).view(np.uint64), inside.view(np.uint64))
    # non-finite longitudes stay unkeyable
    rows, *_ = keep_rows.keyable_rows(None, np.zeros(3), np.array([np.nan, np.inf, -np.inf]))
    assert rows.size == 0


def test_one_position_keys_to_one_cell_however_its_longitude_is_spelled():
    # latitudes over every base-cell row, the polar caps included (where raw mortie keys
    # 180 and -180, 0.0 and -0.0 into different base cells)
    rng = np.random.default_rng(4)
    lat = np.concatenate([rng.uniform(-90.0, 90.0, 2_000), [-90.0, 90.0, 0.0, 60.0, -60.0]])
    lon = rng.uniform(-180.0, 180.0, lat.size)
    want_pts, ok = G.point_words(lat, lon)
    want_cells, _ = G.cell_words(lat, lon, C)
    assert ok.all()
    for k in (1, -1, 2, 32, 33, -32, -33, 1000):
        np.testing.assert_array_equal(G.point_words(lat, lon + k * 360.0)[0], want_pts)
        np.testing.assert_array_equal(G.cell_words(lat, lon + k * 360.0, C)[0], want_cells)
    one = np.ones_like(lat)
    for a, b in ((180.0, -180.0), (0.0, -0.0), (540.0, -180.0), (-360.0, 0.0)):
        np.testing.assert_array_equal(
            G.point_words(lat, a * one)[0], G.point_words(lat, b * one)[0]
        )
    # the chunk's keying gives the same cells as the canonical spelling, and keys every point
    plan = plan_of(filters=False)
    arrs = {"lat": lat, "lon": lon + 33 * 360.0, "q": np.ones(lat.size, np.int8),
            "h": np.zeros(lat.size, np.float32)}  # fmt: skip
    points, counts = key_chunk(plan, arrs)
    np.testing.assert_array_equal(points.cell_words, want_cells)
    assert counts["keyed"] == lat.size and counts["invalid_coordinates"] == 0


def test_a_longitude_far_out_of_range_is_keyed_as_its_angle():
    # each of these made mortie's kernel panic when passed through unchanged
    lat = np.full(HOSTILE_LONS.size, -75.0)
    words, ok = G.cell_words(lat, HOSTILE_LONS, C)
    assert ok.all()
    want = mortie.geo2mort(lat, G.wrap_longitude(HOSTILE_LONS), order=C)
    np.testing.assert_array_equal(words, want)
    plan = plan_of(filters=False)
    arrs = {"lat": lat, "lon": HOSTILE_LONS, "q": np.ones(lat.size, np.int8),
            "h": np.zeros(lat.size, np.float32)}  # fmt: skip
    points, counts = key_chunk(plan, arrs)
    np.testing.assert_array_equal(np.sort(points.cell_words), np.sort(want))
    assert counts["keyed"] == HOSTILE_LONS.size
