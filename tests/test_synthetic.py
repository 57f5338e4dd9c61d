"""Tests for the lazy, seeded synthetic ATL03-like photon generator."""

import dask
import numpy as np
import pytest

from zagg.sources import synthetic
from zagg.sources.synthetic import (
    DEFAULT_REGION,
    EARTH_RADIUS,
    SURFACE_TYPES,
    beam_counts,
    photon_chunk,
    surface_height,
    synthetic_photons,
)

VARS = ("lat_ph", "lon_ph", "h_ph", "signal_conf_ph", "delta_time")
EPOCH_2019 = 365 * 86400.0  # 2019-01-01 in seconds since 2018-01-01
EPOCH_2024 = 2191 * 86400.0  # 2024-01-01


@pytest.fixture(scope="module")
def photons():
    ds = synthetic_photons(300_000, chunk_size=100_000, seed=3)
    with dask.config.set(scheduler="sync"):
        return ds.compute()


@pytest.fixture(scope="module")
def chunk():
    """One full 1e6-row chunk as numpy arrays, plus the beam boundaries."""
    n = 1_000_000
    return photon_chunk(11, 0, n), np.cumsum(beam_counts(n, 0.2))


def _step_metres(lat, lon):
    """Distance (m) and northward/eastward components between consecutive points."""
    north = np.diff(lat) * np.deg2rad(EARTH_RADIUS)
    east = np.diff(lon) * np.deg2rad(EARTH_RADIUS) * np.cos(np.deg2rad(lat[1:]))
    return np.hypot(north, east), north, east


def _same_beam_pairs(n, ends):
    keep = np.ones(n - 1, dtype=bool)
    keep[ends[:-1] - 1] = False  # pair straddling a beam boundary
    return keep


def test_length_and_chunking():
    ds = synthetic_photons(2_500_003, chunk_size=1_000_000)
    assert ds.sizes == {"photon": 2_500_003, "surface_type": 5}
    for var in VARS:
        assert ds[var].chunks[0] == (1_000_000, 1_000_000, 500_003)
        assert ds[var].dims[0] == "photon"
    assert ds.signal_conf_ph.chunks[1] == (5,)
    small = synthetic_photons(10, chunk_size=1_000_000)
    assert small.lat_ph.chunks == ((10,),)
    assert small.compute().lat_ph.shape == (10,)
    empty = synthetic_photons(0).compute()
    assert empty.sizes == {"photon": 0, "surface_type": 5}


def test_dtypes_shapes_and_attrs(photons):
    ds = photons
    assert ds.lat_ph.dtype == np.float64 and ds.lon_ph.dtype == np.float64
    assert ds.delta_time.dtype == np.float64
    assert ds.h_ph.dtype == np.float32
    assert ds.signal_conf_ph.dtype == np.int8
    assert ds.signal_conf_ph.dims == ("photon", "surface_type")
    assert ds.signal_conf_ph.shape == (300_000, 5)
    assert ds.signal_conf_ph.attrs["surface_types"] == list(SURFACE_TYPES)
    assert SURFACE_TYPES == ("land", "ocean", "sea_ice", "land_ice", "inland_water")
    for var in VARS:
        assert {"units", "long_name"} <= set(ds[var].attrs)
    assert ds.lat_ph.attrs["valid_min"] == -90.0 and ds.lon_ph.attrs["valid_max"] == 180.0
    assert ds.signal_conf_ph.attrs["valid_min"] == -2
    assert ds.signal_conf_ph.attrs["valid_max"] == 4
    assert ds.attrs["seed"] == 3
    assert ds.attrs["region"] == list(DEFAULT_REGION)
    assert ds.attrs["generator"] == "zagg.sources.synthetic.synthetic_photons"


def test_values_in_region_and_ranges(photons):
    lon_min, lat_min, lon_max, lat_max = DEFAULT_REGION
    lat, lon = photons.lat_ph.values, photons.lon_ph.values
    ok = np.isfinite(lat)
    assert ok.mean() > 0.999
    assert np.array_equal(ok, np.isfinite(lon))
    assert lat[ok].min() >= lat_min and lat[ok].max() <= lat_max
    assert lon[ok].min() >= lon_min and lon[ok].max() <= lon_max
    h = photons.h_ph.values
    assert np.isfinite(h).all()
    assert h.min() >= 500 - 250 - 1 and h.max() <= 2000 + 250 + 1
    t = photons.delta_time.values
    assert np.isfinite(t).all()
    assert t.min() >= EPOCH_2019 and t.max() < EPOCH_2024 + 3600
    conf = photons.signal_conf_ph.values
    assert conf.min() >= -2 and conf.max() <= 4


def test_passes_cover_the_box():
    ds = synthetic_photons(100_000, chunk_size=1_000, seed=4).compute()  # 100 short passes
    lat, lon = ds.lat_ph.values, ds.lon_ph.values
    ok = np.isfinite(lat)
    lon_min, lat_min, lon_max, lat_max = DEFAULT_REGION
    hist, _, _ = np.histogram2d(
        lon[ok], lat[ok], bins=4, range=[[lon_min, lon_max], [lat_min, lat_max]]
    )
    assert (hist > 0).mean() > 0.8


def test_region_parameter_is_respected():
    region = (10.0, 45.0, 10.5, 45.2)
    ds = synthetic_photons(50_000, region, chunk_size=20_000, seed=5).compute()
    lat, lon = ds.lat_ph.values, ds.lon_ph.values
    ok = np.isfinite(lat)
    assert 45.0 <= lat[ok].min() and lat[ok].max() <= 45.2
    assert 10.0 <= lon[ok].min() and lon[ok].max() <= 10.5
    assert ds.attrs["region"] == list(region)


def test_deterministic_and_chunk_independent():
    a = synthetic_photons(450_000, chunk_size=100_000, seed=7)
    b = synthetic_photons(450_000, chunk_size=100_000, seed=7)
    full_a, full_b = a.compute(), b.compute()
    for var in VARS:
        np.testing.assert_array_equal(full_a[var].values, full_b[var].values)
        alone = a[var].data.blocks[3].compute()  # computes chunk 3 only
        np.testing.assert_array_equal(alone, full_a[var].values[300_000:400_000])
    np.testing.assert_array_equal(
        photon_chunk(7, 3, 100_000)["h_ph"], full_a.h_ph.values[300_000:400_000]
    )


def test_different_seeds_differ():
    a = synthetic_photons(20_000, seed=1).compute()
    b = synthetic_photons(20_000, seed=2).compute()
    for var in ("lat_ph", "lon_ph", "h_ph", "delta_time"):
        assert not np.array_equal(a[var].values, b[var].values, equal_nan=True)


def test_chunks_are_different_passes():
    c0, c1 = photon_chunk(0, 0, 10_000), photon_chunk(0, 1, 10_000)
    assert c0["delta_time"][0] != c1["delta_time"][0]
    assert not np.allclose(c0["lat_ph"][:100], c1["lat_ph"][:100], equal_nan=True)


def test_nan_fraction(photons):
    lat = photons.lat_ph.values
    assert 10 <= np.isnan(lat).sum() <= 60  # default 1e-4 of 300k rows: ~30
    ds = synthetic_photons(200_000, chunk_size=50_000, nan_fraction=0.01).compute()
    bad = np.isnan(ds.lat_ph.values)
    assert 0.008 < bad.mean() < 0.012
    assert np.array_equal(bad, np.isnan(ds.lon_ph.values))
    assert np.isfinite(ds.h_ph.values[bad]).all()
    assert np.isfinite(ds.delta_time.values[bad]).all()
    none = synthetic_photons(100_000, nan_fraction=0.0).compute()
    assert np.isfinite(none.lat_ph.values).all() and np.isfinite(none.lon_ph.values).all()


def test_huge_dataset_is_lazy_with_small_graph(monkeypatch):
    def boom(*args):
        raise AssertionError("data generated while building the dataset")

    monkeypatch.setattr(synthetic, "photon_chunk", boom)
    ds = synthetic_photons(1_000_000_000, chunk_size=1_000_000)
    graph = ds.__dask_graph__()
    n_tasks = len(graph)
    assert ds.sizes["photon"] == 1_000_000_000
    assert ds.lat_ph.data.numblocks == (1000,)
    # One generator task per chunk plus one selection task per variable and chunk.
    assert n_tasks == 1000 * (1 + len(VARS))
    assert len(ds.h_ph.data.__dask_graph__()) == 2 * 1000


def test_spatial_coherence(chunk):
    data, ends = chunk
    dist, _, _ = _step_metres(data["lat_ph"], data["lon_ph"])
    keep = _same_beam_pairs(dist.size + 1, ends) & np.isfinite(dist)
    assert np.mean(dist[keep] < 2.0) > 0.8
    assert np.mean(dist[keep] < 12.0) > 0.99
    strong = dist[: ends[0] - 1]  # beam 0 is a strong beam
    strong = strong[np.isfinite(strong)]
    assert np.mean(strong < 2.0) > 0.9
    assert abs(np.median(strong[strong > 0]) - 0.7) < 0.01  # one shot apart


def test_tracks_are_near_polar_at_ground_speed(chunk):
    data, ends = chunk
    dist, north, east = _step_metres(data["lat_ph"], data["lon_ph"])
    dt = np.diff(data["delta_time"])
    keep = _same_beam_pairs(dist.size + 1, ends) & (dist > 0.1) & (dist < 5)
    heading = np.degrees(np.arctan2(np.abs(east[keep]), np.abs(north[keep])))
    assert heading.max() < 15.5
    speed = dist[keep] / dt[keep]
    assert np.allclose(np.median(speed), 7000.0, rtol=0.01)
    for end, count in zip(ends, beam_counts(1_000_000, 0.2), strict=True):
        assert np.all(np.diff(data["delta_time"][end - count : end]) >= 0)


def test_heights_follow_seeded_surface(chunk):
    data, _ = chunk
    ok = np.isfinite(data["lat_ph"])
    lat, lon = data["lat_ph"][ok], data["lon_ph"][ok]
    surface = surface_height(lon, lat, seed=11)
    assert 500 <= surface.min() and surface.max() <= 2000
    resid = data["h_ph"][ok] - surface
    signal = data["signal_conf_ph"][ok].max(axis=1) >= 2
    assert 0.78 < signal.mean() < 0.82  # noise_fraction = 0.2
    assert 0.12 < resid[signal].std() < 0.2
    assert np.abs(resid[~signal]).max() <= 250.01
    assert 100 < resid[~signal].std() < 190  # uniform over +-250 m: std ~144 m


def test_signal_confidence(chunk):
    data, _ = chunk
    conf = data["signal_conf_ph"]
    assert conf.shape == (1_000_000, 5) and conf.flags.c_contiguous
    assert set(np.unique(conf)) <= set(range(-2, 5))
    ok = np.isfinite(data["lat_ph"])
    resid = data["h_ph"][ok] - surface_height(data["lon_ph"][ok], data["lat_ph"][ok], seed=11)
    best = conf[ok].max(axis=1)
    assert np.mean(best[np.abs(resid) < 0.3] >= 2) > 0.99  # at the surface: signal
    assert best[np.abs(resid) > 2].max() <= 1  # far from it: background 0/1
    assert (best >= 0).all()  # every photon lies under at least one surface mask
    land_ice = conf[:, SURFACE_TYPES.index("land_ice")]
    assert np.mean(land_ice >= 0) > 0.9  # land ice covers most of the box
    assert np.mean(land_ice[land_ice >= 2] == 4) > 0.75  # signal is mostly high confidence
    for name in SURFACE_TYPES:
        column = conf[:, SURFACE_TYPES.index(name)]
        assert 0.005 < np.mean(column >= 0), name  # every surface mask shows up somewhere
    assert np.mean(conf[:, SURFACE_TYPES.index("ocean")] == -1) > 0.8


def test_noise_fraction_parameter():
    clean = synthetic_photons(100_000, noise_fraction=0.0).compute()
    assert (clean.signal_conf_ph.values.max(axis=1) >= 2).all()
    noisy = synthetic_photons(100_000, noise_fraction=0.5).compute()
    assert 0.47 < np.mean(noisy.signal_conf_ph.values.max(axis=1) >= 2) < 0.53


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_points": -1},
        {"chunk_size": 0},
        {"seed": -3},
        {"noise_fraction": 1.0},
        {"nan_fraction": 1.5},
        {"region": (-98.0, -76.0, -102.0, -75.0)},
        {"region": (0.0, -95.0, 1.0, -80.0)},
    ],
)
def test_rejects_bad_arguments(kwargs):
    args = {"n_points": 100, **kwargs}
    with pytest.raises(ValueError):
        synthetic_photons(**args)
