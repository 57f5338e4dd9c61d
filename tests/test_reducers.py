"""A reducer registered from outside zagg works end to end: aggregate, store, moczarr."""

import moczarr
import mortie
import numpy as np
import pytest
import xarray as xr

import zagg
from zagg import reducers
from zagg.reducers import Reducer, State


# -- a reducer of our own: range = max - min, with states and kernels of its own ------------
def _lo_hi_chunk(points, spec):
    """Per cell, the smallest and largest finite value (NaN when none): plain numpy."""
    grp = points.grouping
    v = points.contiguous(spec.source, spec.where).astype(np.float64)
    out = np.full((grp.offsets.size - 1, 2), np.nan)
    finite = np.isfinite(v)
    cell = np.repeat(np.arange(out.shape[0]), np.diff(grp.offsets))
    lo, hi = np.full(out.shape[0], np.inf), np.full(out.shape[0], -np.inf)
    np.minimum.at(lo, cell[finite], v[finite])
    np.maximum.at(hi, cell[finite], v[finite])
    seen = np.bincount(cell[finite], minlength=out.shape[0]) > 0
    out[seen, 0], out[seen, 1] = lo[seen], hi[seen]
    return out


def _lo_hi_combine(values, groups, spec):
    rows = np.concatenate(values)[groups.perm]
    starts = groups.offsets[:-1]
    with np.errstate(invalid="ignore"):
        lo = np.fmin.reduceat(rows[:, 0], starts) if rows.size else rows[:0, 0]
        hi = np.fmax.reduceat(rows[:, 1], starts) if rows.size else rows[:0, 1]
    return np.stack([lo, hi], axis=1)


LO_HI = State("lo_hi", _lo_hi_chunk, _lo_hi_combine)
RANGE = Reducer("range", (LO_HI,), lambda s, p: s["lo_hi"][:, 1] - s["lo_hi"][:, 0],
                "float64", "none", dtype_kinds="f")


@pytest.fixture
def with_range():
    reducers.register(RANGE)
    yield RANGE
    reducers.unregister("range")


def points(n=30_000, seed=4):
    rng = np.random.default_rng(seed)
    lat = np.round(rng.uniform(-75.7, -75.3, n), 3)
    lon = np.round(rng.uniform(-100.3, -99.5, n), 3)
    h = rng.normal(1500.0, 40.0, n)
    h[rng.random(n) < 0.1] = np.nan
    return xr.Dataset({"lat": ("obs", lat), "lon": ("obs", lon), "h": ("obs", h)})


def config(fields):
    return {"data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"},
                            "variables": ["h"]},
            "aggregation": {"variables": fields},
            "output": {"dataset": {"short_name": "RANGE", "version": "1"},
                       "grid": {"parent_order": 8, "child_order": 14}}}


def test_a_registered_reducer_aggregates_and_stores_end_to_end(with_range, tmp_path):
    ds = points()
    cfg = config({"count": {"function": "count"},
                  "h_range": {"function": "range", "source": "h"},
                  "h_min": {"function": "min", "source": "h", "dtype": "float64"}})
    res = zagg.aggregate(ds, cfg, chunk_size=4_000).compute()
    # against plain numpy, cell by cell
    lat, lon, h = ds["lat"].values, ds["lon"].values, ds["h"].values
    cells = mortie.geo2mort(lat, lon, order=14)
    at = {int(w): i for i, w in enumerate(res["morton"].values)}
    with_values = 0
    for w in np.unique(cells):
        v = h[cells == w]
        v = v[np.isfinite(v)]
        got = res["h_range"].values[at[int(w)]]
        if v.size:
            assert got == v.max() - v.min()
            with_values += 1
        else:
            assert np.isnan(got)  # no finite value: the fill
    assert with_values > 100
    # the same through a store, read back by the independent reader
    summary = zagg.to_hive(zagg.aggregate(ds, cfg, chunk_size=4_000), tmp_path / "s")
    assert summary.leaves_written == len(res.attrs["zagg"]["shards"])
    mz = moczarr.open_hive(str(tmp_path / "s"))
    stored = dict(zip(mz["morton"].values.tolist(), mz["h_range"].values.tolist(), strict=True))
    for w, v in zip(res["morton"].values.tolist(), res["h_range"].values.tolist(), strict=True):
        assert stored[w] == v or (np.isnan(stored[w]) and np.isnan(v))


def test_a_registered_reducer_is_chunking_invariant(with_range):
    ds = points(seed=5)
    cfg = config({"h_range": {"function": "range", "source": "h"}})
    a = zagg.aggregate(ds, cfg, chunk_size=30_000).compute()
    b = zagg.aggregate(ds.chunk({"obs": 1_337}), cfg).compute()
    xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


def test_registration_refuses_a_taken_name_and_configs_see_it():
    with pytest.raises(ValueError, match="already registered"):
        reducers.register(Reducer("mean", (LO_HI,), lambda s, p: None, "float64", "none"))
    with pytest.raises(zagg.ConfigError, match="unknown function 'range'"):
        zagg.load_config(config({"h_range": {"function": "range", "source": "h"}}))
    reducers.register(RANGE)
    try:
        zagg.load_config(config({"h_range": {"function": "range", "source": "h"}}))
    finally:
        reducers.unregister("range")
    with pytest.raises(ValueError, match="pyramid_class"):
        Reducer("bad", (LO_HI,), lambda s, p: None, "float64", "sometimes")
