"""Tests for HDF5 granules: the writer, the config block, and the lazy reader."""

import hashlib
import re
import shutil
import warnings

import dask
import h5py
import mortie
import numpy as np
import pytest
from builders import atl03_source

import zagg
from zagg.config.model import ConfigError, load_config
from zagg.sources.granules import (
    GranuleError,
    GranuleSource,
    open_granules,
    parse_granule_source,
)
from zagg.sources.write_granules import BEAMS, FILL_F4, FILL_F8, write_granules


def atl03_block(location, **extra):
    """Every photon of every beam, with its height and land-ice confidence."""
    return atl03_source(location, **extra)


def atl06_block(location, **extra):
    return {
        "granules": str(location),
        "groups": list(BEAMS),
        "coordinates": {
            "latitude": "/{group}/land_ice_segments/latitude",
            "longitude": "/{group}/land_ice_segments/longitude",
        },
        "variables": {
            "h_li": "/{group}/land_ice_segments/h_li",
            "quality": "/{group}/land_ice_segments/atl06_quality_summary",
        },
        "delta_time": "/{group}/land_ice_segments/delta_time",
        **extra,
    }


def h5_concat(paths, template, column=None):
    """A dataset read straight with h5py, concatenated in (granule, group) order, with the
    float fill values the products declare replaced by NaN."""
    out = []
    for p in paths:
        with h5py.File(p, "r") as f:
            for g in BEAMS:
                if g not in f:
                    continue
                d = f[template.format(group=g)]
                a = d[:] if column is None else d[:, column]
                if a.dtype.kind == "f" and "_FillValue" in d.attrs:
                    a = np.where(a == d.attrs["_FillValue"][0], np.nan, a).astype(a.dtype)
                out.append(a)
    return np.concatenate(out)


def h5_rows(path):
    """Rows per beam of one ATL03 granule (0 for an empty beam)."""
    with h5py.File(path, "r") as f:
        return [f[f"{g}/heights/lat_ph"].shape[0] for g in BEAMS]


@pytest.fixture(scope="module")
def atl03(tmp_path_factory):
    d = tmp_path_factory.mktemp("atl03")
    return write_granules(d, 4, points_per_granule=30_000, seed=5)


@pytest.fixture(scope="module")
def atl06(tmp_path_factory):
    d = tmp_path_factory.mktemp("atl06")
    return write_granules(d, 3, product="ATL06", points_per_granule=3_000, seed=5)


@pytest.fixture(scope="module")
def atl03_ds(atl03):
    ds = open_granules(atl03_block(atl03[0].parent))
    with dask.config.set(scheduler="sync"):
        return ds, ds.compute()


def copy_granules(paths, tmp_path):
    for p in paths:
        shutil.copy(p, tmp_path / p.name)
    return sorted(tmp_path.glob("*.h5"))


# --------------------------------------------------------------------------- writer


def test_written_layout_matches_the_products(atl03, atl06):
    assert [p.name[:6] for p in atl03] == ["ATL03_"] * 4
    assert len({p.name[6:20] for p in atl03}) == 4  # distinct start timestamps
    assert all(re.fullmatch(r"ATL03_\d{14}_\d{8}_006_01\.h5", p.name) for p in atl03)
    with h5py.File(atl03[0], "r") as f:
        assert f["ancillary_data/atlas_sdp_gps_epoch"][0] == 1198800018.0
        assert 1 <= f["orbit_info/rgt"][0] <= 1387
        h = f["gt1l/heights"]
        assert h["signal_conf_ph"].dtype == np.int8 and h["signal_conf_ph"].shape[1] == 5
        assert h["lat_ph"].chunks == (10_000,) and h["lat_ph"].compression == "gzip"
        assert h["h_ph"].attrs["_FillValue"][0] == FILL_F4
        geo = f["gt1l/geolocation"]
        beg, cnt = geo["ph_index_beg"][:], geo["segment_ph_cnt"][:]
        n = h["lat_ph"].shape[0]
        assert cnt.sum() == n and beg[0] == 1
        # ph_index_beg is 1-based and contiguous; 0 exactly where a segment has no photon
        nonempty = cnt > 0
        assert np.all(beg[~nonempty] == 0)
        assert np.array_equal(beg[nonempty][1:], (beg[nonempty] + cnt[nonempty])[:-1])
        assert np.all(np.diff(geo["segment_id"][:]) == 1)
        # a segment is 20 m: ~28.6 shots of 0.7 m, photons of one segment share its span
        t = h["delta_time"][:]
        seg_of_photon = np.repeat(np.arange(cnt.size), cnt)
        span = np.array(
            [np.ptp(t[seg_of_photon == s]) for s in range(0, cnt.size, 7) if cnt[s] > 1]
        )
        assert span.max() < 20 / 0.7 * 1e-4 + 1e-9
    # one beam of granule index 2 is empty (zero-length) in ATL03, absent in ATL06
    rows = [h5_rows(p) for p in atl03]
    assert sum(r.count(0) for r in rows) == 1
    absent = []
    for p in atl06:
        with h5py.File(p, "r") as f:
            absent += [g for g in BEAMS if g not in f]
            h = f[[g for g in BEAMS if g in f][0] + "/land_ice_segments/h_li"]
            assert h.dtype == np.float32 and h.attrs["_FillValue"][0] == FILL_F4
    assert len(absent) == 1
    h_li = h5_concat(atl06, "/{group}/land_ice_segments/h_li")
    assert 0 < np.isnan(h_li).sum() < 0.2 * h_li.size  # some fill rows (off the ice mask)
    assert 2_500 < h_li.size / 3 < 3_500  # about points_per_granule rows


def test_writer_is_deterministic(tmp_path, atl03):
    again = write_granules(tmp_path, 2, points_per_granule=30_000, seed=5)
    for p in again:  # granules 0 and 1 again: same names, same bytes
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        assert digest == hashlib.sha256((atl03[0].parent / p.name).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- reading


def test_values_equal_h5py_in_granule_group_order(atl03, atl03_ds):
    ds, c = atl03_ds
    assert set(ds.data_vars) == {
        "latitude",
        "longitude",
        "h_ph",
        "land_ice_conf",
        "time",
        "granule",
        # the granules' own metadata, per point (zagg.sources.beams)
        "beam",
        "spot",
        "strong",
        "rgt",
        "cycle",
    }
    assert ds.latitude.dims == ("obs",)
    assert ds.attrs["granules"] == [p.name for p in atl03]
    assert ds.attrs["failed_granules"] == []
    np.testing.assert_array_equal(c.latitude.values, h5_concat(atl03, "/{group}/heights/lat_ph"))
    np.testing.assert_array_equal(c.longitude.values, h5_concat(atl03, "/{group}/heights/lon_ph"))
    np.testing.assert_array_equal(c.h_ph.values, h5_concat(atl03, "/{group}/heights/h_ph"))
    assert c.h_ph.dtype == np.float32 and c.land_ice_conf.dtype == np.int8
    np.testing.assert_array_equal(
        c.land_ice_conf.values, h5_concat(atl03, "/{group}/heights/signal_conf_ph", 3)
    )
    np.testing.assert_array_equal(c.time.values, h5_concat(atl03, "/{group}/heights/delta_time"))
    per_granule = [sum(h5_rows(p)) for p in atl03]
    np.testing.assert_array_equal(c.granule.values, np.repeat(np.arange(4), per_granule))
    assert c.granule.dtype == np.int32
    # the generator's invalid geolocation is stored as fill and read back as NaN
    assert np.isnan(c.latitude.values).sum() >= 1


def test_one_chunk_per_nonempty_granule_group_and_splitting(atl03, atl03_ds):
    ds, _ = atl03_ds
    expected = tuple(n for p in atl03 for n in h5_rows(p) if n)
    assert ds.latitude.chunks == (expected,)  # the empty beam contributes no chunk
    small = open_granules(atl03_block(atl03[0].parent), chunk_size=1_000)
    assert max(small.latitude.chunks[0]) == 1_000
    assert sum(small.latitude.chunks[0]) == sum(expected)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(small.h_ph.values, atl03_ds[1].h_ph.values)


def test_open_reads_no_data_and_reads_bypass_h5py(atl03, atl03_ds, monkeypatch):
    reads = []
    original = h5py.Dataset.__getitem__

    def counting(self, key):
        reads.append(self.name)
        return original(self, key)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counting)
    ds = open_granules(atl03_block(atl03[0].parent))
    # open reads only each granule's orbit metadata (three scalars), never a group's rows
    orbit = ["/orbit_info/sc_orient", "/orbit_info/rgt", "/orbit_info/cycle_number"]
    assert reads == orbit * len(atl03)
    reads.clear()
    # the data are fetched and inflated outside h5py (whose lock would serialise threads)
    with dask.config.set(scheduler="threads"):
        c = ds.compute()
    assert reads == []
    np.testing.assert_array_equal(c.h_ph.values, atl03_ds[1].h_ph.values)
    np.testing.assert_array_equal(
        c.land_ice_conf.values, h5_concat(atl03, "/{group}/heights/signal_conf_ph", 3)
    )


def test_time_is_delta_time_seconds(atl03_ds):
    ds, c = atl03_ds
    assert c.time.dtype == np.float64
    assert ds.time.attrs["units"] == "seconds since 2018-01-01T00:00:00Z"
    # the generator's passes start between 2019 and 2024
    t0 = np.datetime64("2018-01-01T00:00:00") + np.timedelta64(int(c.time.min()), "s")
    assert np.datetime64("2019-01-01") <= t0 < np.datetime64("2024-01-01")


def test_atl06_fill_becomes_nan_and_absent_beam_is_skipped(atl06):
    ds = open_granules(atl06_block(atl06[0].parent))
    with dask.config.set(scheduler="sync"):
        c = ds.compute()
    raw = h5_concat(atl06, "/{group}/land_ice_segments/h_li")
    np.testing.assert_array_equal(c.h_li.values, raw)
    assert np.isnan(c.h_li.values).any()
    assert c.h_li.dtype == np.float32 and c.quality.dtype == np.int8
    np.testing.assert_array_equal(
        c.quality.values, h5_concat(atl06, "/{group}/land_ice_segments/atl06_quality_summary")
    )
    assert len(ds.latitude.chunks[0]) == 3 * 6 - 1


def granule_view(block):
    """The DataSource a config with this granule block hands to aggregation."""
    return load_config(
        {
            "data_source": block,
            "aggregation": {"variables": {"count": {"function": "count"}}},
            "output": {
                "dataset": {"short_name": "T", "version": "1"},
                "grid": {"parent_order": 8, "child_order": 14},
            },
        }
    ).data_source


def test_filters_on_a_column_and_aggregate_counts(atl03, atl03_ds):
    block = atl03_block(
        atl03[0].parent, filters=[{"variable": "land_ice_conf", "op": "ge", "value": 3}]
    )
    src = parse_granule_source(block)
    ds = open_granules(src)
    cfg = {
        "data_source": {
            "coordinates": {"latitude": "latitude", "longitude": "longitude"},
            "variables": ["h_ph", "land_ice_conf"],
            "time": "time",
            "filters": [{"variable": "land_ice_conf", "op": "ge", "value": 3}],
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_max": {"function": "max", "source": "h_ph"},
            }
        },
        "output": {
            "dataset": {"short_name": "ATL03", "version": "006"},
            "grid": {"parent_order": 8, "child_order": 14},
        },
    }
    config = load_config(cfg)
    # the granule block's view of the Dataset is what config.py hands to aggregation
    view = granule_view(block)
    assert (view.latitude, view.longitude, view.time) == ("latitude", "longitude", "time")
    assert view.filters == config.data_source.filters
    assert set(config.data_source.variables) <= set(view.variables)

    with dask.config.set(scheduler="sync"):
        leaves = zagg.aggregate(ds, config).compute()
    lat = h5_concat(atl03, "/{group}/heights/lat_ph")
    lon = h5_concat(atl03, "/{group}/heights/lon_ph")
    h = h5_concat(atl03, "/{group}/heights/h_ph")
    keep = h5_concat(atl03, "/{group}/heights/signal_conf_ph", 3) >= 3
    keep &= np.isfinite(lat) & np.isfinite(lon)
    assert 0.5 * keep.size < keep.sum() < keep.size  # the filter drops rows, not all
    cells = mortie.geo2mort(lat[keep], lon[keep], order=14)
    words, counts = np.unique(cells, return_counts=True)
    got = leaves["count"].values > 0
    np.testing.assert_array_equal(leaves["morton"].values[got], words)
    np.testing.assert_array_equal(leaves["count"].values[got], counts)
    order = np.argsort(cells, kind="stable")
    maxima = np.maximum.reduceat(h[keep][order], np.r_[0, np.cumsum(counts)[:-1]])
    np.testing.assert_array_equal(leaves["h_max"].values[got], maxima)
    assert leaves.attrs["zagg"]["points"]["filtered"] == int(
        (h5_concat(atl03, "/{group}/heights/signal_conf_ph", 3) < 3).sum()
    )


# --------------------------------------------------------------------------- bad granules


def test_truncated_granule_named_at_open_and_skipped(atl03, tmp_path):
    paths = copy_granules(atl03[:3], tmp_path)
    bad = paths[1]
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(GranuleError, match=bad.name) as err:
        open_granules(atl03_block(tmp_path))
    assert "cannot open as HDF5" in str(err.value)
    ds = open_granules(atl03_block(tmp_path, on_error="skip"))
    assert ds.attrs["granules"] == [paths[0].name, paths[2].name]
    [failed] = ds.attrs["failed_granules"]
    assert failed["granule"] == bad.name and "HDF5" in failed["error"]
    with dask.config.set(scheduler="sync"):
        granule = ds.granule.values
    np.testing.assert_array_equal(np.unique(granule), [0, 1])
    assert granule.size == sum(h5_rows(paths[0])) + sum(h5_rows(paths[2]))


def test_corrupt_chunk_named_at_read(atl03, tmp_path):
    [path] = copy_granules(atl03[:1], tmp_path)
    with h5py.File(path, "r") as f:
        info = f["gt2l/heights/h_ph"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(b"\xff" * min(64, info.size))
    ds = open_granules(atl03_block(tmp_path))  # metadata is intact: opens fine
    with (
        pytest.raises(GranuleError, match="/gt2l/heights/h_ph") as err,
        dask.config.set(scheduler="sync"),
    ):
        ds.h_ph.compute()
    assert path.name in str(err.value)


def test_missing_dataset_path_names_granule_and_path(atl03, tmp_path):
    paths = copy_granules(atl03[:2], tmp_path)
    with h5py.File(paths[0], "r+") as f:
        del f["gt2r/heights/h_ph"]
    with pytest.raises(GranuleError, match="'/gt2r/heights/h_ph'") as err:
        open_granules(atl03_block(tmp_path))
    assert paths[0].name in str(err.value) and "variables.h_ph" in str(err.value)
    ds = open_granules(atl03_block(tmp_path, on_error="skip"))
    assert ds.attrs["granules"] == [paths[1].name]
    assert ds.attrs["failed_granules"][0]["granule"] == paths[0].name
    with pytest.raises(GranuleError, match="'/gt1l/heights/nope'"):
        open_granules(atl03_block(tmp_path, variables={"x": "/{group}/heights/nope"}))
    with pytest.raises(GranuleError, match="none of the 2 granule"):
        open_granules(
            atl03_block(tmp_path, variables={"x": "/{group}/heights/nope"}, on_error="skip")
        )


def test_all_nan_coordinates_refused(atl03, tmp_path):
    [path] = copy_granules(atl03[:1], tmp_path)
    with h5py.File(path, "r+") as f:
        lat = f["gt3l/heights/lat_ph"]
        lat[:] = np.full(lat.shape, FILL_F8)
    ds = open_granules(atl03_block(tmp_path))
    with (
        pytest.raises(GranuleError, match="all NaN or fill") as err,
        dask.config.set(scheduler="sync"),
    ):
        ds.compute()
    assert path.name in str(err.value) and "/gt3l/heights/lat_ph" in str(err.value)
    skip = open_granules(atl03_block(tmp_path, on_error="skip"))
    with warnings.catch_warnings(record=True) as caught, dask.config.set(scheduler="sync"):
        warnings.simplefilter("always")
        lat = skip.latitude.values
    assert any("/gt3l/heights/lat_ph" in str(w.message) for w in caught)
    assert np.isnan(lat).sum() >= h5_rows(path)[4]


def test_empty_and_missing_groups(atl03, tmp_path):
    [path] = copy_granules(atl03[:1], tmp_path)
    with h5py.File(path, "r+") as f:
        del f["gt1r"]  # an absent beam, as real granules have
    ds = open_granules(atl03_block(tmp_path))
    rows = h5_rows(atl03[0])
    assert ds.latitude.chunks == (
        tuple(r for g, r in zip(BEAMS, rows, strict=True) if g != "gt1r"),
    )
    with pytest.raises(ConfigError, match=r"data_source.groups.*none of the groups"):
        open_granules(atl03_block(tmp_path, groups=["gt1x", "gt2x"]))
    with pytest.warns(UserWarning, match="gt9l"):
        open_granules(atl03_block(atl03[0].parent, groups=["gt1l", "gt9l"]))


def test_granules_whose_beams_are_all_empty_contribute_nothing(tmp_path):
    paths = write_granules(tmp_path, 1, points_per_granule=50)
    with h5py.File(paths[0], "r+") as f:
        for g in BEAMS[1:]:
            del f[g]
        for name in ("lat_ph", "lon_ph", "h_ph", "delta_time", "signal_conf_ph"):
            f[f"gt1l/heights/{name}"].resize(0, axis=0)
    ds = open_granules(atl03_block(tmp_path))
    assert ds.sizes["obs"] == 0 and ds.attrs["granules"] == []
    assert ds.compute().latitude.shape == (0,)


def test_paths_without_groups_read_one_chunk_per_granule(atl03):
    ds = open_granules(
        {
            "granules": str(atl03[0].parent),
            "coordinates": {
                "latitude": "/gt2l/heights/lat_ph",
                "longitude": "/gt2l/heights/lon_ph",
            },
            "variables": {"h": "/gt2l/heights/h_ph"},
        }
    )
    rows = [h5_rows(p)[2] for p in atl03]
    assert ds.h.chunks == (tuple(r for r in rows if r),)
    assert ds.attrs["granules"] == [p.name for p, r in zip(atl03, rows, strict=True) if r]
    with dask.config.set(scheduler="sync"):
        h = ds.h.values
    expected = []
    for p in atl03:
        with h5py.File(p, "r") as f:
            expected.append(f["gt2l/heights/h_ph"][:])
    np.testing.assert_array_equal(h, np.concatenate(expected))


def test_list_of_files_glob_and_single_file(atl03):
    d = atl03[0].parent
    by_glob = open_granules(atl03_block(f"{d}/ATL03_2*_006_01.h5"))
    assert by_glob.attrs["granules"] == [p.name for p in atl03]
    by_list = open_granules(atl03_block(d, granules=[str(atl03[2]), str(atl03[0])]))
    assert by_list.attrs["granules"] == [atl03[0].name, atl03[2].name]
    one = open_granules(atl03_block(atl03[1]))
    assert one.attrs["granules"] == [atl03[1].name]
    with pytest.raises(ConfigError, match="data_source.granules.*does not exist"):
        open_granules(atl03_block(d / "nowhere"))
    with pytest.raises(ConfigError, match="no granule files"):
        open_granules(atl03_block(f"{d}/*.nc"))
    with pytest.raises(ConfigError, match="needs their footprints"):
        open_granules(atl03_block(d), shards=["-512"])


# --------------------------------------------------------------------------- config block


def test_parse_a_full_block():
    src = parse_granule_source(
        {
            **atl03_block("s3://bucket/ATL03/"),
            "filters": [{"variable": "land_ice_conf", "op": "in", "value": [3, 4]}],
            "on_error": "skip",
            "storage_options": {
                "endpoint_url": "http://localhost:9000",
                "key": "AKIDEXAMPLE",
                "secret": "wJalrXUtnFEMI/K7MDENG",
            },
        }
    )
    assert isinstance(src, GranuleSource)
    assert src.groups == BEAMS and src.on_error == "skip"
    assert src.names == ("latitude", "longitude", "h_ph", "land_ice_conf", "time")
    assert [(v.name, v.column) for v in src.variables] == [("h_ph", None), ("land_ice_conf", 3)]
    assert src.filters[0].variable == "land_ice_conf" and src.filters[0].value == [3, 4]
    text = repr(src) + str(src.storage_options) + repr(src.storage_options)
    assert "wJalrXUtnFEMI" not in text and "AKIDEXAMPLE" not in text
    assert src.storage_options["secret"] == "wJalrXUtnFEMI/K7MDENG"
    nested = parse_granule_source(
        atl03_block(
            "s3://b/",
            storage_options={
                "client_kwargs": {
                    "aws_secret_access_key": "NESTEDSECRET",
                    "region_name": "us-west-2",
                }
            },
        )
    )
    opts = nested.storage_options
    assert "NESTEDSECRET" not in repr(opts) and "us-west-2" in repr(opts)
    assert opts.redact("failed with NESTEDSECRET inside") == "failed with *** inside"


BAD = [
    ({"granules": None}, "data_source.granules", "local directory"),
    ({"granules": "http://x/y"}, "data_source.granules", "s3:// URLs"),
    ({"groups": "gt1l"}, "data_source.groups", "list of group names"),
    ({"groups": ["gt1l", "gt1l"]}, "data_source.groups", "more than once"),
    ({"groups": ["gt/1l"]}, "data_source.groups[0]", "HDF5 group name"),
    (
        {"coordinates": {"latitude": "/{group}/heights/lat_ph"}},
        "data_source.coordinates.longitude",
        "required",
    ),
    (
        {"coordinates": {"lattitude": "a", "longitude": "/{group}/b"}},
        "data_source.coordinates.lattitude",
        "did you mean 'latitude'",
    ),
    (
        {"coordinates": {"latitude": "/heights/lat_ph", "longitude": "/{group}/heights/lon_ph"}},
        "data_source.coordinates.latitude",
        "does not contain '{group}'",
    ),
    (
        {"coordinates": {"latitude": "/{beam}/lat", "longitude": "/{group}/lon"}},
        "data_source.coordinates.latitude",
        "only placeholder is '{group}'",
    ),
    (
        {"coordinates": {"latitude": "/{group/lat", "longitude": "/{group}/lon"}},
        "data_source.coordinates.latitude",
        "unbalanced braces",
    ),
    (
        {"coordinates": {"latitude": "/{group}/../lat", "longitude": "/{group}/lon"}},
        "data_source.coordinates.latitude",
        "'..' component",
    ),
    ({"variables": ["h_ph"]}, "data_source.variables", "mapping of variable name"),
    ({"variables": {"h ph": "/{group}/h"}}, "data_source.variables.h ph", "identifiers"),
    ({"variables": {"time": "/{group}/h"}}, "data_source.variables.time", "reserved"),
    (
        {"variables": {"c": {"path": "/{group}/c", "column": -1}}},
        "data_source.variables.c.column",
        "non-negative column",
    ),
    (
        {"variables": {"c": {"pth": "/{group}/c"}}},
        "data_source.variables.c.pth",
        "did you mean 'path'",
    ),
    (
        {"filters": [{"variable": "nope", "op": "eq", "value": 1}]},
        "data_source.filters[0].variable",
        "not declared",
    ),
    (
        {"filters": [{"variable": "h_ph", "op": "equals", "value": 1}]},
        "data_source.filters[0].op",
        "valid: eq, ne",
    ),
    (
        {"filters": [{"variable": "h_ph", "op": "in", "value": 3}]},
        "data_source.filters[0].value",
        "non-empty list",
    ),
    (
        {"filters": [{"variable": "land_ice_conf", "op": "ge", "value": 3, "column": 3}]},
        "data_source.filters[0].column",
        "declare the column as its own variable",
    ),
    ({"delta_time": 5}, "data_source.delta_time", "HDF5 dataset path"),
    ({"time": "/{group}/heights/delta_time"}, "data_source.time", "'delta_time'"),
    ({"on_error": "ignore"}, "data_source.on_error", "'fail'"),
    ({"input": "x.zarr"}, "data_source.input", "not both"),
    ({"granule": "x"}, "data_source.granule", "did you mean 'granules'"),
    (
        {"storage_options": {"endpoint": "http://x"}},
        "data_source.storage_options.endpoint",
        "did you mean 'endpoint_url'",
    ),
    ({"storage_options": {"anon": "yes"}}, "data_source.storage_options.anon", "true or false"),
    ({"storage_options": {"key": "AKID"}}, "data_source.storage_options", "go together"),
    (
        {"storage_options": {"endpoint_url": "localhost:9000"}},
        "data_source.storage_options.endpoint_url",
        "http:// or https://",
    ),
]


@pytest.mark.parametrize(("change", "key", "hint"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_blocks_are_refused_naming_the_key(change, key, hint):
    raw = atl03_block("/data/atl03")
    raw.update(change)
    with pytest.raises(ConfigError) as err:
        parse_granule_source(raw)
    msg = str(err.value)
    assert msg.startswith(f"config key '{key}'"), msg
    assert hint in msg


def test_the_documented_examples_parse():
    import pathlib

    import yaml

    text = (pathlib.Path(__file__).parents[1] / "docs" / "granules.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    configs = [b for b in blocks if "data_source" in b]
    pieces = [b for b in blocks if "data_source" not in b]
    assert len(configs) == 3 and len(pieces) == 2
    for piece in pieces:  # snippets of a data_source block: read_plan, strata variables
        src = parse_granule_source(atl03_block("/d", **piece))
        assert src.read_plan is not None and src.read_plan.kind == "segments"
    strata = parse_granule_source(atl03_block("/d", **pieces[1]))
    assert {v.name: v.column for v in strata.variables}["signal_conf_ph"] is None
    for raw in configs:
        view = granule_view(raw["data_source"])
        load_config(
            {
                **raw,
                "data_source": {
                    "coordinates": {"latitude": view.latitude, "longitude": view.longitude},
                    "variables": list(view.variables),
                    "time": view.time,
                    "filters": raw["data_source"]["filters"],
                },
            }
        )


def test_secret_values_never_appear_in_refusals():
    raw = atl03_block("s3://b/p/", storage_options={"key": "AKIDSECRET1", "secret": 12345678})
    with pytest.raises(ConfigError) as err:
        parse_granule_source(raw)
    assert "12345678" not in str(err.value) and "AKIDSECRET1" not in str(err.value)
    assert "value not shown" in str(err.value)


def test_paths_without_groups():
    src = parse_granule_source(
        {"granules": "/d", "coordinates": {"latitude": "lat", "longitude": "/lon"}}
    )
    assert (src.groups, src.latitude, src.longitude) == (None, "/lat", "/lon")
    with pytest.raises(ConfigError, match="data_source.groups is not set"):
        parse_granule_source(
            {"granules": "/d", "coordinates": {"latitude": "/{group}/lat", "longitude": "/lon"}}
        )


# --------------------------------------------------------------------------- s3


@pytest.fixture(scope="module")
def s3(atl03, moto_s3):
    """The ATL03 granules on the local S3 server, under s3://granules/atl03/."""
    options, fs = moto_s3
    fs.mkdir("granules")
    for p in atl03:
        fs.put(str(p), f"granules/atl03/{p.name}")
    return options


def test_s3_prefix_and_glob_read_like_local(s3, atl03, atl03_ds):
    ds = open_granules(atl03_block("s3://granules/atl03/", storage_options=s3))
    assert ds.attrs["granules"] == [p.name for p in atl03]
    assert ds.latitude.chunks == atl03_ds[0].latitude.chunks
    with dask.config.set(scheduler="threads"):
        c = ds.compute()
    for name in ("latitude", "longitude", "h_ph", "land_ice_conf", "time", "granule"):
        np.testing.assert_array_equal(c[name].values, atl03_ds[1][name].values)
    glob = open_granules(atl03_block("s3://granules/atl03/ATL03_2021*.h5", storage_options=s3))
    assert glob.attrs["granules"] == [p.name for p in atl03 if p.name.startswith("ATL03_2021")]


def test_s3_errors_never_show_credentials(s3):
    with pytest.raises(ConfigError) as err:
        open_granules(atl03_block("s3://no-such-bucket/atl03/", storage_options=s3))
    msg = str(err.value)
    assert msg.startswith("config key 'data_source.granules'") and "no-such-bucket" in msg
    assert s3["secret"] not in msg and s3["key"] not in msg
    src = parse_granule_source(atl03_block("s3://granules/atl03/", storage_options=s3))
    assert s3["secret"] not in repr(src) and s3["key"] not in repr(src)


def test_a_dangling_symlink_among_the_granules_is_named_not_dropped(atl03, tmp_path):
    copy_granules(atl03[:2], tmp_path)
    link = tmp_path / "ATL03_20190101000000_00000000_006_01.h5"
    link.symlink_to(tmp_path / "moved_away.h5")
    want = (
        f"granule '{link.name}' ({link}) is a symbolic link to "
        f"'{tmp_path / 'moved_away.h5'}', which does not exist: restore the file it points "
        "to, or remove the link"
    )
    for where in (tmp_path, f"{tmp_path}/ATL03_*.h5"):
        ds = open_granules(atl03_block(where, on_error="skip"))
        assert ds.attrs["granules"] == [p.name for p in atl03[:2]]
        assert ds.attrs["failed_granules"] == [{"granule": link.name, "error": want}]
        with pytest.raises(GranuleError) as err:
            open_granules(atl03_block(where, on_error="fail"))
        assert str(err.value) == want
