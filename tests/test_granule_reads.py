"""Reading granules: read plans (identical results, fewer bytes), damaged chunks under
``on_error``, the storage layouts the chunk reader decodes, and the strata product from
granules end to end (moczarr reading its composition lanes)."""

import json
import os
import shutil

import dask
import h5py
import moczarr
import mortie
import numpy as np
import pytest
from builders import atl03_source, fields, fill_as_nan, grid_orders, pipeline_config

import zagg
from zagg.config.model import ConfigError, load_config
from zagg.kernels import composition, tdigest
from zagg.pipeline.run import run
from zagg.sources.granules import (
    GranuleError,
    open_granules,
    parse_granule_source,
    wants_processes,
)
from zagg.sources.regions import region_shards
from zagg.sources.write_granules import BEAMS, write_granules

REGION = (-100.2, -76.0, -99.8, -75.0)  # tall enough that the tracks (~30 km) do not wrap
P, C = 10, 15
BBOX = "-100.2,-75.65,-99.8,-75.62"  # a band across the tracks: cuts them mid-track


def block(location, **extra):
    """The photons of land-ice confidence >= 2."""
    return atl03_source(location, confidence=2, **extra)


def config(location, store=None, **extra):
    # a delta this large keeps every height as its own centroid
    variables = fields("count", "h_tdigest", h_tdigest={"params": {"delta": 100_000}})
    orders = grid_orders(P, C)
    return pipeline_config(
        block(location, **extra), variables, orders, name="ATL03", version="006", store=store
    )


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    """Three granules whose beams span several storage chunks (10 000 rows each)."""
    d = tmp_path_factory.mktemp("long-granules")
    return write_granules(d, 3, product="ATL03", points_per_granule=200_000, region=REGION, seed=3)


@pytest.fixture(scope="module")
def shards():
    return region_shards(bbox=BBOX, order=P)


def truth(paths, shards):
    """Per-cell counts and sorted heights of the kept photons in ``shards``, from h5py."""
    cells, heights = [], []
    for path in paths:
        with h5py.File(path, "r") as f:
            for beam in BEAMS:
                lat = fill_as_nan(f[f"{beam}/heights/lat_ph"])
                lon = fill_as_nan(f[f"{beam}/heights/lon_ph"])
                h = fill_as_nan(f[f"{beam}/heights/h_ph"])
                ok = (
                    (f[f"{beam}/heights/signal_conf_ph"][:, 3] >= 2)
                    & np.isfinite(lat)
                    & np.isfinite(lon)
                )
                cells.append(mortie.geo2mort(lat[ok], lon[ok], order=C))
                heights.append(h[ok])
    cells, heights = np.concatenate(cells), np.concatenate(heights)
    keep = np.isin(mortie.clip2order(P, cells), zagg.grid.from_decimal(shards))
    words, counts = np.unique(cells[keep], return_counts=True)
    return dict(zip(words.tolist(), counts.tolist(), strict=True)), cells[keep], heights[keep]


def stored(store, storage_options=None):
    """Per occupied cell: (count, decoded digest means and weights) as a zagg reader sees."""
    ds = zagg.open_hive(store, storage_options)
    n, words, digests = ds["count"].values, ds["morton"].values, ds["h_tdigest"].values
    out = {}
    for i in np.flatnonzero(n > 0):
        arr = tdigest.payload_to_array(digests[i])
        out[int(words[i])] = (int(n[i]), arr[:, 0].tolist(), arr[:, 1].tolist())
    return out


class PreadCounter:
    """Counts the bytes read from files through ``os.pread`` (the chunk reader's path)."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        real = os.pread

        def pread(fd, n, offset):
            data = real(fd, n, offset)
            self.bytes += len(data)
            return data

        monkeypatch.setattr(os, "pread", pread)


# --------------------------------------------------------------------------- read plans


def test_read_plan_gives_identical_cells_and_digests_reading_less(
    granules, shards, tmp_path, monkeypatch
):
    counter = PreadCounter(monkeypatch)
    sizes = {}
    for plan in (False, "atl03"):
        counter.bytes = 0
        summary = run(
            config(granules[0].parent, tmp_path / str(plan), read_plan=plan),
            shards=shards,
            workers=1,
            threads=2,
            progress=False,
        )
        sizes[plan] = (counter.bytes, summary.points)
    off, on = stored(tmp_path / "False"), stored(tmp_path / "atl03")
    counts, cells, heights = truth(granules, shards)
    assert {w: v[0] for w, v in on.items()} == counts  # exact per-cell counts
    assert on == off  # and the same digests, centroid for centroid
    for w, (_, means, weights) in on.items():  # each digest holds its cell's heights
        h = heights[cells == w]
        h = np.sort(h[np.isfinite(h)]).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(means, np.float32), h)
        assert sum(weights) == h.size
    assert sizes["atl03"][1] == sizes[False][1] == sum(counts.values())
    read_on, read_off = sizes["atl03"][0], sizes[False][0]
    total = sum(p.stat().st_size for p in granules)
    assert 0 < read_on < 0.8 * read_off < total  # the plan reads fewer bytes, whole chunks


def test_read_plan_reads_only_rows_whose_segments_reach_the_shards(granules, shards):
    src = parse_granule_source(block(granules[0].parent, read_plan="atl03"))
    whole = open_granules(parse_granule_source(block(granules[0].parent)))
    part = open_granules(src, shards=shards, shard_order=P)
    assert part.sizes["obs"] < whole.sizes["obs"]
    assert not wants_processes(part)  # gzip chunks: read on every thread
    assert part.attrs["index_bytes_read"] > 0 and whole.attrs["index_bytes_read"] == 0
    assert part.h_ph.attrs["stored_bytes_read"] < whole.h_ph.attrs["stored_bytes_read"]
    with dask.config.set(scheduler="threads"):
        lat, lon = part.latitude.values, part.longitude.values
    ok = np.isfinite(lat) & np.isfinite(lon)
    inside = np.isin(
        mortie.clip2order(P, mortie.geo2mort(lat[ok], lon[ok], order=P)),
        zagg.grid.from_decimal(shards),
    )
    assert 0.05 < inside.mean() < 1  # mostly rows of other shards are left unread ...
    counts, _, _ = truth(granules, shards)
    with dask.config.set(scheduler="threads"):  # ... and every row of the shards is read
        got = zagg.aggregate(part, load_config(config(granules[0].parent)), shards=shards).compute()
    n = got["count"].values
    assert dict(zip(got["morton"].values[n > 0].tolist(), n[n > 0].tolist(), strict=True)) == counts


def test_coordinates_plan_for_atl06_rows(tmp_path):
    # ~1000 km tracks (50 000 rows of 20 m a beam, five storage chunks) in a box that
    # does not wrap them
    paths = write_granules(
        tmp_path,
        1,
        product="ATL06",
        points_per_granule=300_000,
        region=(-100.2, -80.0, -99.8, -70.0),
        seed=4,
    )
    raw = {
        "granules": str(tmp_path),
        "groups": list(BEAMS),
        "coordinates": {
            "latitude": "/{group}/land_ice_segments/latitude",
            "longitude": "/{group}/land_ice_segments/longitude",
        },
        "variables": {"h_li": "/{group}/land_ice_segments/h_li"},
    }
    shards = region_shards(bbox=BBOX, order=P)
    cfg = load_config(
        {
            "data_source": raw,
            "aggregation": {
                "variables": {
                    "count": {"function": "count"},
                    "h_max": {"function": "max", "source": "h_li"},
                }
            },
            "output": {
                "dataset": {"short_name": "ATL06", "version": "006"},
                "grid": {"parent_order": P, "child_order": 17},
            },
        }
    )
    results = []
    for plan in (None, "coordinates"):
        src = parse_granule_source({**raw, **({"read_plan": plan} if plan else {})})
        ds = open_granules(src, shards=shards if plan else None, shard_order=P)
        with dask.config.set(scheduler="sync"):
            out = zagg.aggregate(ds, cfg, shards=shards).compute()
        results.append(
            (ds.sizes["obs"], out["count"].values, out["h_max"].values, out["morton"].values)
        )
    (n_off, c_off, h_off, w_off), (n_on, c_on, h_on, w_on) = results
    assert n_on <= 0.5 * n_off and c_on.sum() > 0
    np.testing.assert_array_equal(w_on, w_off)
    np.testing.assert_array_equal(c_on, c_off)
    np.testing.assert_array_equal(h_on, h_off)
    assert len(paths) == 1


@pytest.mark.parametrize(
    "value, key, hint",
    [
        ("atl08", "read_plan", "is not a read plan; use 'atl03'"),
        (
            {"latitude": "/{group}/geolocation/reference_photon_lat"},
            "read_plan.longitude",
            "is required with the other segment-index paths",
        ),
        ({"pad": -1}, "read_plan.pad", "expected a whole number of segments"),
        ({"margin": "far"}, "read_plan.margin", "expected metres"),
        ({"bogus": 1}, "read_plan.bogus", "unknown key"),
    ],
)
def test_bad_read_plans_are_refused_naming_the_key(value, key, hint):
    with pytest.raises(ConfigError, match=rf"'data_source.{key}'.*{hint}"):
        parse_granule_source(block("/d", read_plan=value))


def test_read_plan_index_missing_is_named(granules, shards, tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    shutil.copy(granules[0], d / granules[0].name)
    with h5py.File(d / granules[0].name, "r+") as f:
        del f["gt1l/geolocation/ph_index_beg"]
    src = parse_granule_source(block(d, read_plan="atl03"))
    with pytest.raises(
        GranuleError,
        match=r"'/gt1l/geolocation/ph_index_beg' "
        r"\(data_source.read_plan ph_index_beg\)",
    ):
        open_granules(src, shards=shards, shard_order=P)
    open_granules(src)  # a run over every shard needs no index


@pytest.mark.parametrize(
    "value, key",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"max_gap": "lots"}, "max_gap"),
        ({"metadata_block_size": -5}, "metadata_block_size"),
        ({"blocksize": 1}, "blocksize"),
    ],
)
def test_bad_read_settings_are_refused(value, key):
    with pytest.raises(ConfigError, match=rf"'data_source.reads.{key}'"):
        parse_granule_source(block("/d", reads=value))


def test_read_settings_parse():
    src = parse_granule_source(
        block(
            "/d",
            reads={
                "metadata_block_size": "4MiB",
                "max_gap": 0,
                "request_size": "2MiB",
                "concurrency": 4,
            },
        )
    )
    assert (
        src.reads.metadata_block_size,
        src.reads.max_gap,
        src.reads.request_size,
        src.reads.concurrency,
    ) == (4 << 20, 0, 2 << 20, 4)


# --------------------------------------------------------------------------- S3


@pytest.fixture(scope="module")
def s3(granules, moto_s3):
    options, fs = moto_s3
    fs.mkdir("plan-granules")
    for p in granules:
        fs.put(str(p), f"plan-granules/atl03/{p.name}")
    return options


def test_read_plan_on_s3_matches_local_and_plan_off(granules, shards, s3, tmp_path):
    reads = {"request_size": "256KiB", "concurrency": 4}
    for plan in (False, "atl03"):
        cfg = config(
            "s3://plan-granules/atl03/",
            tmp_path / f"s3-{plan}",
            read_plan=plan,
            storage_options=s3,
            reads=reads,
        )
        run(cfg, shards=shards, workers=1, threads=2, progress=False)
    on, off = stored(tmp_path / "s3-atl03"), stored(tmp_path / "s3-False")
    counts, _, _ = truth(granules, shards)
    assert on == off and {w: v[0] for w, v in on.items()} == counts
    src = parse_granule_source(
        block("s3://plan-granules/atl03/", read_plan="atl03", storage_options=s3)
    )
    ds = open_granules(src, shards=shards, shard_order=P)
    planned = ds.attrs["index_bytes_read"] + sum(
        ds[v].attrs["stored_bytes_read"] for v in ("latitude", "longitude", "h_ph", "land_ice_conf")
    )
    assert planned < 0.5 * sum(p.stat().st_size for p in granules)  # never whole granules


# --------------------------------------------------------------------------- damaged data


def _damage_chunk(path, dataset, index=3):
    """Overwrite the middle of one stored chunk: the file opens, the chunk does not
    decompress."""
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 3)
        fh.write(b"\x13\x37" * 40)
    return info


def test_a_damaged_chunk_fails_by_default_naming_granule_path_rows(granules, tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    for p in granules:
        shutil.copy(p, d / p.name)
    bad = d / granules[1].name
    _damage_chunk(bad, "gt2l/heights/h_ph")
    with pytest.raises(GranuleError) as err:
        run(config(d, tmp_path / "fail"), workers=1, threads=2, progress=False)
    msg = str(err.value)
    assert bad.name in msg and "'/gt2l/heights/h_ph'" in msg
    assert "rows 30000:40000" in msg and "on_error: skip" in msg
    assert not (tmp_path / "fail").exists() or not zagg.hive.walk_leaves(tmp_path / "fail")


def test_a_damaged_chunk_is_skipped_and_recorded_under_skip(granules, tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    for p in granules:
        shutil.copy(p, d / p.name)
    bad = d / granules[1].name
    _damage_chunk(bad, "gt2l/heights/h_ph")
    store = tmp_path / "skip"
    with pytest.warns(UserWarning, match="damaged and left out"):
        summary = run(config(d, store, on_error="skip"), workers=1, threads=2, progress=False)
    [failed] = summary.failed_granules
    assert failed["granule"] == bad.name and "cannot be decoded" in failed["error"]
    good = [p for p in granules if p.name != bad.name]
    every = region_shards(bbox="-100.2,-76,-99.8,-75", order=P)
    counts, _, _ = truth(good, every)
    assert {w: v[0] for w, v in stored(store).items()} == counts  # none of its rows
    assert summary.granules == 2
    leaf, _ = zagg.hive.walk_leaves(store)[0]
    stats = json.loads((store / leaf).parent.joinpath("stats.json").read_text())
    assert [f["granule"] for f in stats["failed_granules"]] == [bad.name]


# --------------------------------------------------------------------------- layouts


def _layouts_file(path):
    """One file whose group 'g' holds the same values in every storage layout the chunk
    reader meets (and two it hands to h5py)."""
    rng = np.random.default_rng(0)
    n = 25_003
    lat = rng.uniform(-75.6, -75.4, n)
    lon = rng.uniform(-100.2, -99.8, n)
    conf = rng.integers(-1, 5, (n, 5)).astype(np.int8)
    with h5py.File(path, "w") as f:
        g = f.create_group("g")
        g.create_dataset("lat", data=lat, chunks=(4096,), compression="gzip", shuffle=True)
        g.create_dataset("lon", data=lon)  # contiguous
        g.create_dataset("be", data=lat.astype(">f8"), chunks=(5000,), compression="gzip")
        g.create_dataset("conf", data=conf, chunks=(3000, 2), compression="gzip", shuffle=True)
        sparse = g.create_dataset(
            "sparse", shape=(n,), dtype="f4", chunks=(1000,), fillvalue=-7.0, compression="gzip"
        )
        sparse[2000:2500] = 1.5  # other chunks never written: they read as the fill value
        g.create_dataset("fletcher", data=lat, chunks=(4096,), fletcher32=True)
        g.create_dataset("lzf", data=lon, chunks=(4096,), compression="lzf")
    return lat, lon, conf


def test_every_layout_reads_as_h5py_does(tmp_path):
    lat, lon, conf = _layouts_file(tmp_path / "layouts.h5")
    raw = {
        "granules": str(tmp_path / "layouts.h5"),
        "coordinates": {"latitude": "/g/lat", "longitude": "/g/lon"},
        "variables": {
            "be": "/g/be",
            "conf": "/g/conf",
            "col": {"path": "/g/conf", "column": 4},
            "sparse": "/g/sparse",
            "fletcher": "/g/fletcher",
            "lzf": "/g/lzf",
        },
    }
    with pytest.warns(UserWarning, match="read through h5py"):
        ds = open_granules(raw, chunk_size=9000)
    assert ds.conf.dims == ("obs", "conf_column") and ds.conf.shape == conf.shape
    assert ds.attrs["h5py_datasets"] == 2 and wants_processes(ds)  # fletcher32 and lzf
    with dask.config.set(scheduler="threads"):
        c = ds.compute()
    np.testing.assert_array_equal(c.latitude.values, lat)
    np.testing.assert_array_equal(c.longitude.values, lon)
    np.testing.assert_array_equal(c.be.values, lat)
    np.testing.assert_array_equal(c.conf.values, conf)
    np.testing.assert_array_equal(c.col.values, conf[:, 4])
    sparse = np.full(lat.size, -7.0, np.float32)
    sparse[2000:2500] = 1.5
    np.testing.assert_array_equal(c.sparse.values, sparse)
    np.testing.assert_array_equal(c.fletcher.values, lat)
    np.testing.assert_array_equal(c.lzf.values, lon)
    # chunks of 4096, 5000, 3000 and 1000 rows share no small common multiple: read units
    # end on whole chunks of the largest (9000 rows asked for: 5000 per unit)
    assert set(ds.latitude.chunks[0][:-1]) == {5000}


def test_a_three_dimensional_variable_is_refused(tmp_path):
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["lat"] = np.zeros(10)
        f["lon"] = np.zeros(10)
        f["cube"] = np.zeros((10, 2, 2))
    with pytest.raises(
        GranuleError,
        match=r"'/cube' has shape \(10, 2, 2\).*2-D \(rows x "
        r"columns, read whole",
    ):
        open_granules(
            {
                "granules": str(tmp_path / "x.h5"),
                "coordinates": {"latitude": "/lat", "longitude": "/lon"},
                "variables": {"cube": "/cube"},
            }
        )


# --------------------------------------------------------------------------- strata


def test_strata_granule_config_end_to_end_with_moczarr(granules, tmp_path):
    raw = load_config("atl03_strata_granules").raw
    raw["data_source"]["granules"] = str(granules[0].parent)
    raw["output"]["grid"] = {"parent_order": 9, "child_order": 17}
    for name in ("h_tdigest_signal", "h_tdigest_noise"):
        raw["aggregation"]["variables"][name]["params"] = {"delta": 100_000}
    store = tmp_path / "strata"
    summary = run(raw, store=str(store), workers=1, threads=2, progress=False)
    assert summary.leaves_written > 0
    # brute force from h5py: per cell the signal rows' lane counts
    cells, confs, hs = [], [], []
    for path in granules:
        with h5py.File(path, "r") as f:
            for beam in BEAMS:
                lat = fill_as_nan(f[f"{beam}/heights/lat_ph"])
                lon = fill_as_nan(f[f"{beam}/heights/lon_ph"])
                ok = np.isfinite(lat) & np.isfinite(lon)
                cells.append(mortie.geo2mort(lat[ok], lon[ok], order=17))
                confs.append(f[f"{beam}/heights/signal_conf_ph"][:][ok])
                hs.append(fill_as_nan(f[f"{beam}/heights/h_ph"])[ok])
    cells, conf, h = np.concatenate(cells), np.concatenate(confs), np.concatenate(hs)
    top = conf.max(axis=1)
    signal = (top >= 2) & np.isfinite(h)
    rows = np.concatenate([conf >= 2, top[:, None] == np.array([2, 3, 4])], axis=1)[signal]
    words_s = np.unique(cells[signal])
    order = np.argsort(cells[signal], kind="stable")
    starts = np.searchsorted(cells[signal][order], words_s)
    lane_counts = np.add.reduceat(rows[order].astype(np.int64), starts, axis=0)
    n_signal = np.diff(np.r_[starts, order.size])
    expected = {
        int(w): (lc, int(n)) for w, lc, n in zip(words_s, lane_counts, n_signal, strict=True)
    }
    root = str(store)
    mz = moczarr.open_hive(root)
    import zarr

    checked = exact = 0
    for _, sid in zagg.hive.walk_leaves(root):
        leaf_store = moczarr.open_leaf(root, sid)
        comp = zarr.open_array(leaf_store, path="17/composition", mode="r")
        morton = zarr.open_array(leaf_store, path="17/morton", mode="r")[:]
        words = comp[:]
        filled = words != 0
        lanes = moczarr.named_lanes(words[filled], dict(comp.attrs))
        for j, w in enumerate(morton[filled].tolist()):
            expect, n = expected[w]
            assert (int(lanes["land_ice"][j]) > 0) == (expect[3] > 0)
            assert composition.compose(expect[None, :], np.array([n]))[0] == words[filled][j]
            if n <= 254:  # the lanes recover the counts exactly
                got = moczarr.counts_from_composition(words[filled][j : j + 1], np.array([n]))
                np.testing.assert_array_equal(np.asarray(got).ravel(), expect)
                exact += 1
            checked += 1
    assert checked == len(expected)  # every cell with signal photons has its word
    assert checked > 100 and exact > 100
    assert int(mz["count"].values.sum()) == summary.points == cells.size
