"""Tests for granule catalogs: build, JSON/parquet round trip, selection by shard."""

import json
import shutil

import dask
import h5py
import mortie
import numpy as np
import pytest

from zagg import grid as G
from zagg.sources import catalog as C
from zagg.sources.catalog import (
    CatalogError,
    build_catalog,
    delta_time_to_utc,
    read_catalog,
    select,
    write_catalog,
)
from zagg.sources.granules import GranuleError, open_granules
from zagg.sources.write_granules import BEAMS, FILL_F8, write_granules

ORDER = 9


def block(location, **extra):
    return {
        "granules": str(location),
        "groups": list(BEAMS),
        "coordinates": {"latitude": "/{group}/heights/lat_ph",
                        "longitude": "/{group}/heights/lon_ph"},
        "variables": {"h_ph": "/{group}/heights/h_ph"},
        "delta_time": "/{group}/heights/delta_time",
        **extra,
    }


def h5_coords(path):
    """lat, lon, delta_time of a granule read straight with h5py, fill as NaN."""
    out = {"lat_ph": [], "lon_ph": [], "delta_time": []}
    with h5py.File(path, "r") as f:
        for g in BEAMS:
            for k in out:
                a = f[f"{g}/heights/{k}"][:]
                out[k].append(np.where(a == FILL_F8, np.nan, a))
    return [np.concatenate(out[k]) for k in ("lat_ph", "lon_ph", "delta_time")]


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    # a region of ~4 x 1 degrees spans many order-9 cells, so footprints differ per pass
    d = tmp_path_factory.mktemp("cat-atl03")
    return write_granules(d, 5, points_per_granule=20_000, seed=2)


@pytest.fixture(scope="module")
def catalog(granules):
    with dask.config.set(scheduler="sync"):
        return build_catalog(block(granules[0].parent), order=ORDER)


def test_entries_hold_ids_hrefs_footprints_and_times(granules, catalog):
    assert catalog.order == ORDER
    assert catalog.ids == [p.name for p in granules]
    assert [e.href for e in catalog] == [str(p) for p in granules]
    assert catalog.failed == ()
    assert catalog.source["coordinates"]["latitude"] == "/{group}/heights/lat_ph"
    for p, e in zip(granules, catalog, strict=True):
        lat, lon, t = h5_coords(p)
        assert e.rows == lat.size
        ok = np.isfinite(lat) & np.isfinite(lon)
        cells = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=ORDER))
        assert e.footprint == tuple(G.to_decimal(cells))
        assert all(G.id_order(i) == ORDER for i in e.footprint)
        assert e.delta_time_min == np.nanmin(t) and e.delta_time_max == np.nanmax(t)
        start = np.datetime64("2018-01-01T00:00:00", "us") + np.timedelta64(
            int(round(np.nanmin(t) * 1e6)), "us")
        assert e.time_start == f"{start}Z"
        # the file name's start stamp is the same instant, to the second
        stamp = p.name.split("_")[1]
        assert e.time_start[:19].replace("-", "").replace(":", "").replace("T", "") == stamp
    assert len({e.footprint for e in catalog}) == len(catalog)  # passes cross different cells


def test_delta_time_to_utc():
    assert delta_time_to_utc(0.0) == "2018-01-01T00:00:00.000000Z"
    assert delta_time_to_utc(86400.5) == "2018-01-02T00:00:00.500000Z"
    # via the GPS epoch: 1980-01-06 + (epoch + dt) - 18 leap seconds
    assert delta_time_to_utc(18.0, epoch=1198800000.0) == "2018-01-01T00:00:00.000000Z"
    assert C.GPS_UTC_LEAP_SECONDS == 18


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_round_trip(catalog, tmp_path, suffix):
    path = tmp_path / f"catalog{suffix}"
    write_catalog(catalog, path)
    back = read_catalog(path)
    assert back == catalog
    assert back.entries[0].footprint == catalog.entries[0].footprint
    if suffix == ".json":
        doc = json.loads(path.read_text())
        assert doc["zagg_catalog"] == 1 and doc["order"] == ORDER
        assert doc["granules"][0]["id"] == catalog.ids[0]


def test_relative_hrefs_resolve_against_the_catalog(granules, catalog, tmp_path):
    d = tmp_path / "copy"
    d.mkdir()
    for p in granules:
        shutil.copy(p, d / p.name)
    doc = {**catalog.header(), "granules": [{**e.as_dict(), "href": e.id} for e in catalog]}
    (d / "catalog.json").write_text(json.dumps(doc))
    back = read_catalog(d / "catalog.json")
    assert [e.href for e in back] == [f"{d}/{p.name}" for p in granules]
    ds = open_granules(block(d / "catalog.json"))
    assert ds.attrs["granules"] == catalog.ids


def test_select_by_shards_at_and_above_the_catalog_order(catalog):
    first = catalog.entries[0]
    only_first = [i for i in first.footprint
                  if not any(i in e.footprint for e in catalog.entries[1:])]
    assert only_first
    assert select(catalog, only_first[:1]).ids == [first.id]
    assert select(catalog, G.from_decimal(only_first[:1])).ids == [first.id]  # words too
    everything = sorted({i for e in catalog for i in e.footprint})
    assert select(catalog, everything).ids == catalog.ids
    # coarser shards: footprints are coarsened with grid.ancestor
    coarse = sorted({i[:-2] for i in first.footprint})
    assert G.id_order(coarse[0]) == ORDER - 2
    picked = select(catalog, coarse, shard_order=ORDER - 2)
    assert first.id in picked.ids
    for e in catalog:
        touches = bool({i[:-2] for i in e.footprint} & set(coarse))
        assert (e.id in picked.ids) == touches
    far = "1" + "1" * ORDER  # a cell in the northern hemisphere
    assert select(catalog, [far]).ids == []
    assert select(catalog, []).ids == []


def test_select_refuses_finer_or_mixed_shards(catalog):
    finer = catalog.entries[0].footprint[0] + "1"
    with pytest.raises(CatalogError, match=r"order 9, coarser than the shards \(order 10\)"):
        select(catalog, [finer])
    with pytest.raises(CatalogError, match="one order"):
        select(catalog, [finer, catalog.entries[0].footprint[0]])
    with pytest.raises(CatalogError, match="shard_order is 8"):
        select(catalog, catalog.entries[0].footprint[:1], shard_order=8)
    with pytest.raises(CatalogError, match="not a morton decimal area id"):
        select(catalog, ["-9x"])


def test_open_from_a_catalog_with_shards(granules, catalog, tmp_path):
    path = write_catalog(catalog, tmp_path / "catalog.parquet")
    first = catalog.entries[0]
    only_first = [i for i in first.footprint
                  if not any(i in e.footprint for e in catalog.entries[1:])]
    ds = open_granules(block(path), shards=only_first[:1])
    assert ds.attrs["granules"] == [first.id]
    lat, _, _ = h5_coords(granules[0])
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(ds.latitude.values, lat)
    full = open_granules(block(path))
    assert full.attrs["granules"] == catalog.ids


def test_reuse_scans_only_new_granules(granules, catalog, tmp_path, monkeypatch):
    d = tmp_path / "grow"
    d.mkdir()
    for p in granules[:3]:
        shutil.copy(p, d / p.name)
    with dask.config.set(scheduler="sync"):
        old = build_catalog(block(d), order=ORDER)
    for p in granules[3:]:
        shutil.copy(p, d / p.name)
    scanned = []
    original = C._entry

    def spy(source, href, order):
        scanned.append(href.rsplit("/", 1)[-1])
        return original(source, href, order)

    monkeypatch.setattr(C, "_entry", spy)
    with dask.config.set(scheduler="sync"):
        new = build_catalog(block(d), order=ORDER, reuse=old)
    assert sorted(scanned) == sorted(p.name for p in granules[3:])
    assert new.ids == catalog.ids
    assert [e.footprint for e in new] == [e.footprint for e in catalog]


def test_unreadable_and_all_nan_granules(granules, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    for p in granules[:3]:
        shutil.copy(p, d / p.name)
    truncated, blank, good = sorted(d.glob("*.h5"))
    truncated.write_bytes(truncated.read_bytes()[:4096])
    with h5py.File(blank, "r+") as f:
        for g in BEAMS:
            lat = f[f"{g}/heights/lat_ph"]
            lat[:] = np.full(lat.shape, FILL_F8)
    with pytest.raises(GranuleError, match=truncated.name):
        build_catalog(block(d), order=ORDER)
    with dask.config.set(scheduler="sync"):
        cat = build_catalog(block(d, on_error="skip"), order=ORDER)
    assert cat.ids == [blank.name, good.name]
    assert [f["granule"] for f in cat.failed] == [truncated.name]
    assert cat.entries[0].footprint == () and cat.entries[0].rows > 0
    path = write_catalog(cat, tmp_path / "bad.json")
    assert read_catalog(path).failed == cat.failed
    # opening from the catalog refuses the all-NaN granule before reading any data
    with pytest.raises(GranuleError, match=f"{blank.name}.*all NaN"):
        open_granules(block(path))
    ds = open_granules(block(path, on_error="skip"))
    assert ds.attrs["granules"] == [good.name]
    assert [f["granule"] for f in ds.attrs["failed_granules"]] == [truncated.name, blank.name]


def test_bad_catalog_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"granules": []}))
    with pytest.raises(CatalogError, match="not a zagg catalog"):
        read_catalog(tmp_path / "x.json")
    with pytest.raises(CatalogError, match="does not exist"):
        read_catalog(tmp_path / "missing.parquet")
    with pytest.raises(CatalogError, match=r"\.json or \.parquet"):
        read_catalog(tmp_path / "x.csv")
    (tmp_path / "y.json").write_text(json.dumps({"zagg_catalog": 1, "order": 9,
                                                 "granules": [{"id": "a"}]}))
    with pytest.raises(CatalogError, match="entry 0 lacks"):
        read_catalog(tmp_path / "y.json")
    with pytest.raises(ValueError, match="order must be"):
        build_catalog(block(tmp_path), order=30)
    from zagg.config import ConfigError

    with pytest.raises(ConfigError, match="config key 'data_source.granules': catalog .*does "
                                          "not exist"):
        open_granules(block(tmp_path / "nothing.json"))


def test_catalog_on_s3(granules, tmp_path, moto_s3):
    opts, fs = moto_s3
    fs.mkdir("cat")
    for p in granules[:2]:
        fs.put(str(p), f"cat/atl03/{p.name}")
    src = block("s3://cat/atl03/", storage_options=opts)
    with dask.config.set(scheduler="sync"):
        cat = build_catalog(src, order=ORDER)
    assert [e.href for e in cat] == [f"s3://cat/atl03/{p.name}" for p in granules[:2]]
    write_catalog(cat, "s3://cat/catalog.json", storage_options=opts)
    back = read_catalog("s3://cat/catalog.json", storage_options=opts)
    assert back == cat
    text = fs.cat("cat/catalog.json").decode()
    assert opts["secret"] not in text and opts["key"] not in text
    ds = open_granules(block("s3://cat/catalog.json", storage_options=opts))
    assert ds.attrs["granules"] == [p.name for p in granules[:2]]
