"""A reducer registered from outside zagg works end to end: aggregate, store, moczarr."""

import re
from pathlib import Path

import moczarr
import mortie
import numpy as np
import pytest
import xarray as xr

import zagg
from zagg.reducers import records as reducers
from zagg.reducers.records import Reducer

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reducers.md"


def docs_example() -> dict:
    """Run the reducer example of docs/reducers.md (it registers ``range``)."""
    (code,) = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    scope: dict = {}
    exec(code, scope)
    return scope


@pytest.fixture
def with_range():
    scope = docs_example()
    yield scope
    reducers.unregister("range")


def points(n=30_000, seed=4):
    rng = np.random.default_rng(seed)
    lat = np.round(rng.uniform(-75.7, -75.3, n), 3)
    lon = np.round(rng.uniform(-100.3, -99.5, n), 3)
    h = rng.normal(1500.0, 40.0, n)
    h[rng.random(n) < 0.1] = np.nan
    return xr.Dataset({"lat": ("obs", lat), "lon": ("obs", lon), "h": ("obs", h)})


def config(fields):
    return {
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
        "aggregation": {"variables": fields},
        "output": {
            "dataset": {"short_name": "RANGE", "version": "1"},
            "grid": {"parent_order": 8, "child_order": 14},
        },
    }


def test_a_registered_reducer_aggregates_and_stores_end_to_end(with_range, tmp_path):
    ds = points()
    cfg = config(
        {
            "count": {"function": "count"},
            "h_range": {"function": "range", "source": "h"},
            "h_min": {"function": "min", "source": "h", "dtype": "float64"},
        }
    )
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
    with pytest.raises(zagg.ConfigError, match="unknown function 'range'"):
        zagg.load_config(config({"h_range": {"function": "range", "source": "h"}}))
    scope = docs_example()
    try:
        zagg.load_config(config({"h_range": {"function": "range", "source": "h"}}))
        with pytest.raises(ValueError, match="already registered"):
            reducers.register(reducers.get("range"))
        lo_hi = scope["LO_HI"]
        with pytest.raises(ValueError, match="already registered"):
            reducers.register(Reducer("mean", (lo_hi,), lambda s, p: None, "float64", "none"))
        with pytest.raises(ValueError, match="pyramid_class"):
            Reducer("bad", (lo_hi,), lambda s, p: None, "float64", "sometimes")
    finally:
        reducers.unregister("range")
