"""Tests for granule catalogs: build, JSON/parquet round trip, selection by shard."""

import json
import shutil

import dask
import h5py
import mortie
import numpy as np
import pytest
from builders import atl03_source, fields, grid_orders, pipeline_config

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
    """Every photon of every beam, with its height."""
    return atl03_source(location, variables={"h_ph": "/{group}/heights/h_ph"}, **extra)


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


def _scans(monkeypatch) -> list[str]:
    """The granule file names build_catalog scans from now on (a spy on its entry reader)."""
    scanned = []
    original = C._entry

    def spy(source, href, order):
        scanned.append(href.rsplit("/", 1)[-1])
        return original(source, href, order)

    monkeypatch.setattr(C, "_entry", spy)
    return scanned


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
            int(round(np.nanmin(t) * 1e6)), "us"
        )
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
    only_first = [
        i for i in first.footprint if not any(i in e.footprint for e in catalog.entries[1:])
    ]
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
    only_first = [
        i for i in first.footprint if not any(i in e.footprint for e in catalog.entries[1:])
    ]
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
    scanned = _scans(monkeypatch)
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
    (tmp_path / "y.json").write_text(
        json.dumps({"zagg_catalog": 1, "order": 9, "granules": [{"id": "a"}]})
    )
    with pytest.raises(CatalogError, match="entry 0 lacks"):
        read_catalog(tmp_path / "y.json")
    with pytest.raises(ValueError, match="order must be"):
        build_catalog(block(tmp_path), order=30)
    from zagg.config.model import ConfigError

    with pytest.raises(
        ConfigError, match="config key 'data_source.granules': catalog .*does not exist"
    ):
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


# --------------------------------------------------------------------------- QA fixes


def cli_config(tmp_path, location, **extra):
    """A whole pipeline config file (JSON is YAML) around ``block(location)``."""
    cfg = pipeline_config(
        block(location, **extra),
        fields("count"),
        grid_orders(ORDER, 13),
        name="ATL03",
        version="006",
        store=tmp_path / "store",
    )
    path = tmp_path / f"cfg{len(list(tmp_path.glob('cfg*.yaml')))}.yaml"
    path.write_text(json.dumps(cfg))
    return path


def copy_granules(granules, d, n=None):
    d.mkdir(parents=True, exist_ok=True)
    for p in granules[:n]:
        shutil.copy(p, d / p.name)
    return sorted(d.glob("*.h5"))


def test_hrefs_are_stored_against_the_catalog_not_the_working_directory(
    granules, tmp_path, monkeypatch
):
    from zagg.cli.main import main

    work = tmp_path / "work"
    copies = copy_granules(granules, work / "g" / "ATL03", 3)
    monkeypatch.chdir(work)
    cfg = cli_config(tmp_path, "unused")
    # the QA command: granules and catalog both given relative to the working directory
    assert main(["catalog", "g/ATL03", "sub/cat.json", "--config", str(cfg)]) == 0
    stored = [g["href"] for g in json.loads((work / "sub" / "cat.json").read_text())["granules"]]
    # not below the catalog's folder: absolute, so the catalog alone can move
    assert stored == [str(p) for p in copies]
    with dask.config.set(scheduler="sync"):
        cat = build_catalog(block("g/ATL03"), order=ORDER)
    assert [e.href for e in cat] == [str(p) for p in copies]  # absolute in memory
    write_catalog(cat, "g/cat.parquet")  # beside the granules: relative to its folder
    import pyarrow.parquet as pq

    table = pq.read_table(work / "g" / "cat.parquet")
    assert table.column("href").to_pylist() == [f"ATL03/{p.name}" for p in copies]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for rel in ("../work/sub/cat.json", "../work/g/cat.parquet"):
        back = read_catalog(rel)
        assert [e.href for e in back] == [str(p) for p in copies]
        ds = open_granules(block(rel))
        assert ds.attrs["granules"] == [p.name for p in copies]
        assert ds.sizes["obs"] == sum(e.rows for e in back)
    # as `zagg run --catalog` does it: the config's source with the catalog swapped in
    from zagg.config.model import load_config
    from zagg.pipeline.run import open_source

    conf = load_config(str(cli_config(tmp_path, "../work/sub/cat.json")))
    assert open_source(conf).attrs["granules"] == [p.name for p in copies]

    # the granule tree moves as a whole: the in-tree catalog still opens
    shutil.move(work / "g", tmp_path / "moved")
    moved = read_catalog(tmp_path / "moved" / "cat.parquet")
    assert [e.href for e in moved] == [str(tmp_path / "moved" / "ATL03" / p.name) for p in copies]
    assert open_granules(block(tmp_path / "moved" / "cat.parquet")).attrs["granules"] == [
        p.name for p in copies
    ]


def test_relative_hrefs_of_a_hand_written_catalog_with_dots(granules, catalog, tmp_path):
    copies = copy_granules(granules, tmp_path / "data", 2)
    (tmp_path / "cats").mkdir()
    doc = {
        **catalog.header(),
        "granules": [{**e.as_dict(), "href": f"../data/{e.id}"} for e in catalog][:2],
    }
    (tmp_path / "cats" / "c.json").write_text(json.dumps(doc))
    assert [e.href for e in read_catalog(tmp_path / "cats" / "c.json")] == [str(p) for p in copies]


@pytest.mark.parametrize("order", [40, -1, True, 9.0, "9"])
def test_bad_order_is_refused_before_scanning(granules, order, monkeypatch):
    scanned = []
    monkeypatch.setattr(C, "_entry", lambda *a: scanned.append(a))
    monkeypatch.setattr(C, "list_granules", lambda *a: scanned.append(a))
    with pytest.raises(CatalogError, match=r"integer in 0\.\.29, got .*grid\.parent_order"):
        build_catalog(block(granules[0].parent), order=order)
    with pytest.raises(CatalogError, match=r"integer in 0\.\.29"):
        C.check_order(order)
    assert scanned == []
    assert C.check_order(0) == 0 and C.check_order(29) == 29 and C.check_order(np.int64(9)) == 9


def test_catalog_path_is_checked_before_scanning(catalog, tmp_path):
    assert C.check_catalog_path("cat.JSON") == "json"
    assert C.check_catalog_path("s3://b/cat.parquet") == "parquet"
    for bad in ("cat.txt", "cat", "s3://b/cat.csv", tmp_path / "cat.json.gz"):
        with pytest.raises(CatalogError, match=r"must end in \.json or \.parquet"):
            C.check_catalog_path(bad)
    with pytest.raises(CatalogError, match=r"must end in \.json or \.parquet"):
        write_catalog(catalog, tmp_path / "cat.txt")
    assert not (tmp_path / "cat.txt").exists()


def test_skipped_granules_are_carried_and_an_empty_catalog_is_refused(granules, tmp_path):
    d = tmp_path / "some"
    bad, *good = copy_granules(granules, d, 3)
    bad.write_bytes(b"not an hdf5 file at all")
    with dask.config.set(scheduler="sync"):
        cat = build_catalog(block(d, on_error="skip"), order=ORDER)
    assert cat.ids == [p.name for p in good]
    assert len(cat.failed) == 1
    assert cat.failed[0]["granule"] == bad.name
    assert "cannot read for the catalog" in cat.failed[0]["error"]
    for suffix in (".json", ".parquet"):
        back = read_catalog(write_catalog(cat, tmp_path / f"some{suffix}"))
        assert back.failed == cat.failed and back.ids == cat.ids

    none = tmp_path / "none"
    for p in copy_granules(granules, none, 2):
        p.write_bytes(b"garbage")
    with (
        dask.config.set(scheduler="sync"),
        pytest.raises(
            CatalogError,
            match=r"none of the 2 granule\(s\).*nothing to "
            r"aggregate.*cannot read for the catalog",
        ),
    ):
        build_catalog(block(none, on_error="skip"), order=ORDER)
    # an empty selection is not written either
    empty = select(cat, ["1" + "1" * ORDER])
    assert len(empty) == 0
    with pytest.raises(CatalogError, match="no granules.*nothing to aggregate"):
        write_catalog(empty, tmp_path / "empty.json")
    assert not (tmp_path / "empty.json").exists()


def test_sizes_are_recorded_and_a_replaced_granule_is_refused(granules, tmp_path, monkeypatch):
    d = tmp_path / "sized"
    copies = copy_granules(granules, d, 3)
    with dask.config.set(scheduler="sync"):
        cat = build_catalog(block(d), order=ORDER)
    assert [e.size for e in cat] == [p.stat().st_size for p in copies]
    path = write_catalog(cat, d / "cat.parquet")
    assert [e.size for e in read_catalog(write_catalog(cat, d / "cat.json"))] == [
        e.size for e in cat
    ]
    assert read_catalog(path) == cat

    # replace the second granule by another product file of a different size
    victim = copies[1]
    shutil.copy(granules[4], victim)
    assert victim.stat().st_size != cat.entries[1].size
    for on_error in ("fail", "skip"):
        with pytest.raises(
            CatalogError,
            match=f"{victim.name}.*is {victim.stat().st_size} "
            f"bytes but the catalog .* recorded "
            f"{cat.entries[1].size}.*rebuild the catalog",
        ):
            open_granules(block(path, on_error=on_error))
    # a run whose shards do not touch the replaced granule does not open it
    first = cat.entries[0]
    only_first = [i for i in first.footprint if not any(i in e.footprint for e in cat.entries[1:])]
    ds = open_granules(block(path), shards=only_first[:1])
    assert ds.attrs["granules"] == [first.id]

    # rebuilding with reuse rescans exactly the replaced granule
    scanned = _scans(monkeypatch)
    with dask.config.set(scheduler="sync"):
        fresh = build_catalog(block(d), order=ORDER, reuse=read_catalog(path))
    assert scanned == [victim.name]
    assert fresh.entries[1].size == victim.stat().st_size
    assert fresh.entries[0] == cat.entries[0]
    write_catalog(fresh, path)
    assert open_granules(block(path)).attrs["granules"] == [p.name for p in copies]

    # catalogs without sizes (written before sizes were recorded) still open, unchecked
    doc = json.loads((d / "cat.json").read_text())
    for g in doc["granules"]:
        del g["size"]
    (d / "old.json").write_text(json.dumps(doc))
    old = read_catalog(d / "old.json")
    assert [e.size for e in old] == [None] * 3
    assert open_granules(block(d / "old.json")).attrs["granules"] == [p.name for p in copies]
    doc["granules"][0]["size"] = -5
    (d / "neg.json").write_text(json.dumps(doc))
    with pytest.raises(CatalogError, match="entry 0 has size -5"):
        read_catalog(d / "neg.json")


def test_s3_catalogs_use_the_sources_storage_options(granules, tmp_path, moto_s3):
    from zagg.cli.main import main
    from zagg.config.model import load_config
    from zagg.pipeline.run import open_source

    opts, fs = moto_s3
    fs.mkdir("qa3")
    for p in granules[:2]:
        fs.put(str(p), f"qa3/in/{p.name}")
    cfg = cli_config(tmp_path, "s3://qa3/in/", storage_options=opts)
    # the CLI passes no storage options to write_catalog: the catalog carries the source's
    assert main(["catalog", "s3://qa3/in/", "s3://qa3/cat.parquet", "--config", str(cfg)]) == 0
    cat = read_catalog("s3://qa3/cat.parquet", storage_options=opts)
    assert cat.ids == [p.name for p in granules[:2]]
    assert [e.size for e in cat] == [p.stat().st_size for p in granules[:2]]
    assert opts["secret"] not in fs.cat("qa3/cat.parquet").decode(errors="replace")
    assert "secret" not in repr(cat) and opts["secret"] not in repr(cat)
    # reading the catalog from S3 (run --catalog) takes the data_source's storage options
    conf = load_config(str(cli_config(tmp_path, "s3://qa3/cat.parquet", storage_options=opts)))
    assert open_source(conf).attrs["granules"] == cat.ids
    # local granules in an S3 catalog are stored absolute
    with dask.config.set(scheduler="sync"):
        local = build_catalog(block(granules[0].parent), order=ORDER)
    write_catalog(local, "s3://qa3/local.json", storage_options=opts)
    doc = json.loads(fs.cat("qa3/local.json"))
    assert [g["href"] for g in doc["granules"]] == [str(p) for p in granules]
    # a hand-written relative href resolves against the catalog's S3 folder
    doc = {**cat.header(), "granules": [{**e.as_dict(), "href": f"../in/{e.id}"} for e in cat]}
    fs.pipe("qa3/sub/rel.json", json.dumps(doc).encode())
    rel = read_catalog("s3://qa3/sub/rel.json", storage_options=opts)
    assert [e.href for e in rel] == [f"s3://qa3/in/{p.name}" for p in granules[:2]]
    # an object replaced after cataloguing is refused by its size
    fs.put(str(granules[3]), f"qa3/in/{granules[1].name}")
    with pytest.raises(CatalogError, match=f"{granules[1].name}.*rebuild the catalog"):
        open_source(conf)
