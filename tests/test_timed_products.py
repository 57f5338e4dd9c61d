"""Per-centroid times everywhere: the shipped strata product (located and timed signal and
noise digests, composition, the default pyramid) run on ATL03-shaped granules keeps one toc
word per centroid at the leaf and at every level of its pyramid, unwindowed and windowed
yearly, checked against the raw photons read straight from the granules, read back by zagg
and by moczarr, and checked by ``zagg verify``."""

from __future__ import annotations

import json
import shutil
from functools import cache

import h5py
import moczarr
import mortie
import numpy as np
import pytest
import zarr
from distributed import Client

import zagg
from zagg.cli.main import main
from zagg.config.model import load_config
from zagg.hive.hashes import array_digest, combined_digest
from zagg.hive.walk import walk_leaves, walk_windows
from zagg.kernels import tdigest
from zagg.read.levels import levels
from zagg.sources.synthetic import synthetic_photons
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -75.6, -99.9, -75.45)
BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
FIELDS = ("h_tdigest_signal", "h_tdigest_noise")
SHARD, CELL = 9, 15
#: the shipped strata grid with smaller leaves (4^6 cells a shard: quick to hash and verify)
GRID = {"type": "healpix", "parent_order": SHARD, "chunk_inner": 11, "child_order": CELL}
#: GPS nanoseconds at the ATLAS epoch label 2018-01-01T00:00:00 (the config's epoch, scale gps)
ATLAS_EPOCH_GPS_NS = int(
    (np.datetime64("2018-01-01", "ns") - np.datetime64("1980-01-06", "ns")).astype(np.int64)
)


class Photons:
    """Photons' positions, heights, strata and each one's instant and timestamp word (on the
    strata configs' clock: GPS seconds since the ATLAS epoch), with its cell at any order."""

    def __init__(self, lat, lon, h, conf, t):
        ok = np.isfinite(lat) & np.isfinite(lon)
        self.lat, self.lon, self.h = lat[ok], lon[ok], h[ok].astype(np.float64)
        self.signal = conf[ok].max(axis=1) >= 2  # the strata's where-predicates
        gps = ATLAS_EPOCH_GPS_NS + np.rint(t[ok] * 1e9).astype(np.int64)
        self.ns = np.asarray(mortie.from_gps_ns(gps), np.uint64)
        self.words = np.asarray(mortie.time2toc(self.ns), np.uint64)
        self.year = mortie.to_datetime64(self.ns).astype("datetime64[Y]").astype(int) + 1970

    @classmethod
    def of_granules(cls, paths) -> Photons:
        """The granules' photons, read with h5py (fills as NaN)."""
        names = ("lat_ph", "lon_ph", "h_ph", "signal_conf_ph", "delta_time")
        cols = {name: [] for name in names}
        for path in paths:
            with h5py.File(path, "r") as f:
                for beam in BEAMS:
                    for name in names:
                        d = f[f"{beam}/heights/{name}"]
                        values, fill = d[...], d.attrs.get("_FillValue")
                        if fill is not None and values.dtype.kind == "f":
                            values = np.where(values == fill, np.nan, values.astype(np.float64))
                        cols[name].append(values)
        return cls(*(np.concatenate(cols[name]) for name in names))

    @classmethod
    def of_dataset(cls, ds) -> Photons:
        names = ("lat_ph", "lon_ph", "h_ph", "signal_conf_ph", "delta_time")
        return cls(*(np.asarray(ds[name].values) for name in names))

    @cache  # noqa: B019 (one object per module)
    def cells(self, order: int) -> np.ndarray:
        return np.asarray(mortie.geo2mort(self.lat, self.lon, order=order), np.uint64)

    def stratum(self, field: str) -> np.ndarray:
        """The photons a digest field reads: a finite height, in its stratum if it has one."""
        finite = np.isfinite(self.h)
        if field not in FIELDS:
            return finite
        return finite & (self.signal if field == "h_tdigest_signal" else ~self.signal)


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("timed-granules")
    return write_granules(d, 4, product="ATL03", points_per_granule=5_000, region=REGION, seed=4)


@pytest.fixture(scope="module")
def photons(granules):
    return Photons.of_granules(granules)


def strata(granules, store, windowing=None) -> dict:
    """The shipped strata granule config (its fields and default pyramid), on the granules
    and :data:`GRID`."""
    raw = load_config("atl03_strata_granules").raw
    raw["data_source"]["granules"] = str(granules[0].parent)
    raw["output"]["store"] = str(store)
    raw["output"]["grid"] = dict(GRID)
    if windowing:
        raw["output"]["windowing"] = windowing  # the schedule alone: the source's clock
    return raw


@pytest.fixture(scope="module")
def client():
    with Client(processes=False, n_workers=1, threads_per_worker=2) as c:
        yield c


@pytest.fixture(scope="module")
def plain(granules, client, tmp_path_factory):
    store = tmp_path_factory.mktemp("timed-plain") / "store"
    summary = zagg.run(strata(granules, store), scheduler=client, progress=False)
    assert summary.sweep is not None and summary.sweep.folded > 0
    return str(store)


@pytest.fixture(scope="module")
def yearly(granules, client, tmp_path_factory):
    store = tmp_path_factory.mktemp("timed-yearly") / "store"
    raw = strata(granules, store, windowing={"schedule": "yearly"})
    zagg.run(raw, scheduler=client, progress=False)
    return str(store)


def check_times(
    ds, field: str, photons: Photons, keep: np.ndarray, leaf: bool = False
) -> np.ndarray:
    """Every cell of ``ds`` (one level) against the raw photons of ``keep`` beneath it: the
    ``_times`` words are row-aligned with the payload, join to exactly the photons' join, hold
    every photon's instant, each centroid's envelope holds at least its weight of the cell's
    instants, a timestamp word is one of them, and (leaf) a one-photon centroid carries that
    photon's own word. Returns the cells, single-photon and merged centroids checked."""
    order = _order(ds)
    sel = keep & photons.stratum(field)
    cells, t, w = photons.cells(order)[sel], photons.ns[sel], photons.words[sel]
    h = photons.h[sel].astype(np.float32)
    by = np.argsort(cells, kind="stable")
    cells, t, w, h = cells[by], t[by], w[by], h[by]
    uniq, first = np.unique(cells, return_index=True)
    spans = dict(
        zip(uniq.tolist(), zip(first, np.append(first[1:], cells.size), strict=True), strict=True)
    )
    payloads, times = ds[field].values, ds[f"{field}_times"].values
    checked = np.zeros(3, np.int64)
    for j, cell in enumerate(ds["morton"].values.tolist()):
        digest = tdigest.payload_to_array(payloads[j])
        words = _words(times[j])
        assert words.shape == (digest.shape[0],)  # one word per centroid row
        a, b = spans.pop(int(cell), (0, 0))
        if not digest.shape[0]:
            assert a == b  # no photon of the stratum here
            continue
        mine_t, mine_w = t[a:b], w[a:b]
        assert mortie.toc_reduce(words) == mortie.toc_reduce(mine_w)
        lo, hi = (np.asarray(x, np.uint64) for x in mortie.toc2time(words))
        tt = mine_t[:, None]
        inside = (lo <= tt) & ((tt < hi) | ((lo == hi) & (tt == lo)))
        assert inside.any(axis=1).all()  # every photon lies in a centroid's word
        assert (inside.sum(axis=0) >= digest[:, 1] - 1e-3).all()
        stamps = ~np.asarray(mortie.toc_is_range(words), bool)
        assert np.isin(lo[stamps], mine_t).all()
        if leaf:
            pairs = set(zip(h[a:b].tolist(), mine_w.tolist(), strict=True))
            single = digest[:, 1] == 1
            assert stamps[single].all()
            for mean, word in zip(digest[single, 0].tolist(), words[single].tolist(), strict=True):
                assert (mean, word) in pairs
        checked += [1, int((digest[:, 1] == 1).sum()), int((digest[:, 1] != 1).sum())]
    assert not spans, "cells with photons but no centroids"
    return checked


def _order(ds) -> int:
    """The cell order of a level's (area) words."""
    return int(np.asarray(ds["morton"].values[:1], np.uint64)[0] & np.uint64(63))


def _words(v) -> np.ndarray:
    if isinstance(v, bytes | bytearray | memoryview):
        return np.frombuffer(bytes(v), "<u8").astype(np.uint64)
    return np.asarray(v, np.uint64)


# -- unwindowed ----------------------------------------------------------------------------
def test_the_shipped_strata_product_declares_timed_located_digests_on_the_source_clock():
    cfg = load_config("atl03_strata_granules")
    assert cfg.output.windowing is None and cfg.output.pyramid is not None
    assert cfg.clock == ("time", "2018-01-01T00:00:00Z", "gps", "seconds")
    for name in FIELDS:
        assert cfg.fields[name].timed and cfg.fields[name].located
    synthetic = load_config("atl03_strata")
    assert synthetic.clock == ("delta_time", "2018-01-01T00:00:00Z", "gps", "seconds")
    assert all(synthetic.fields[name].timed for name in FIELDS)


def test_unwindowed_times_hold_every_photon_at_the_leaf_and_every_level(plain, photons):
    manifest = json.loads(open(f"{plain}/morton_hive.json").read())
    entries = manifest["pyramid"]["overview"]["fields"]
    for name in FIELDS:
        assert entries[name]["class"] == "approximate"
        assert entries[name]["temporal"] == "per-centroid"
        assert entries[name]["location"] == "coordinates"
    everywhere = np.ones(photons.ns.size, bool)
    leaf = zagg.open_hive(plain).load()
    for name in FIELDS:
        assert leaf[name].attrs["times"] == f"{name}_times"
        assert check_times(leaf, name, photons, everywhere, leaf=True)[0] > 50
    table = levels(manifest)
    assert min(e["order"] for e in table.values()) == 0 and len(table) > 10  # down to order 0
    seen = np.zeros(3, np.int64)
    for order in sorted(table):
        ds = zagg.open_level(plain, order).load()
        assert int(ds["count"].sum()) == photons.ns.size
        for name in FIELDS:
            assert ds[f"{name}_times"].attrs["temporal"] == {
                "spec": "zagg-toc/1",
                "shape": "per-centroid",
                "grammar": "mortie-toc/1",
            }
            seen += check_times(ds, name, photons, everywhere)
    assert seen[0] > 100 and seen[1] > 100 and seen[2] > 100  # single and merged centroids


def test_every_column_group_keeps_the_times_of_its_shard(plain, photons):
    for _rel, sid in walk_leaves(plain):
        shard = photons.cells(SHARD) == zagg.grid.from_decimal([sid])[0]
        tree = zagg.open_column(plain, sid)
        assert len(tree.children) > 1  # the declared member and intermediate groups
        for node in tree.children.values():
            ds = node.to_dataset().load()
            for name in FIELDS:
                check_times(ds, name, photons, shard)


def test_the_leaves_carry_temporal_records_counting_every_photon(plain, photons):
    root = json.loads(open(f"{plain}/coverage.moc").read())["temporal"]
    assert root["fields"] == sorted(FIELDS)
    assert root["counts"]["obs_total"] == photons.ns.size
    assert root["counts"]["uncounted_shards"] == 0
    for sid, word in root["shards"].items():
        mine = photons.cells(SHARD) == zagg.grid.from_decimal([sid])[0]
        assert int(word) == int(mortie.toc_reduce(photons.words[mine]))
    t = zagg.open_temporal(plain)
    assert bool(t["counted"].all()) and int(t["n_obs"].sum()) == photons.ns.size


def test_moczarr_reads_the_times_of_leaves_columns_and_overviews(plain):
    manifest = json.loads(open(f"{plain}/morton_hive.json").read())
    for _rel, sid in walk_leaves(plain):
        ours = zagg.open_leaf(plain, sid).load()
        at = {int(w): i for i, w in enumerate(ours["morton"].values)}
        store = moczarr.open_leaf(plain, sid)
        col = moczarr.open_column(plain, sid)
        tree = zagg.open_column(plain, sid)
        for name in FIELDS:
            got = list(moczarr.read_ragged(store, f"{CELL}/{name}", times=True))
            assert got
            for word, values, words in got:
                np.testing.assert_array_equal(words, ours[f"{name}_times"].values[at[int(word)]])
                assert len(words) == len(values)
            for child in tree.children.values():
                group = child.to_dataset().load()
                r = _order(group)
                mine = {
                    int(w): np.asarray(v, np.uint64)
                    for w, v in zip(
                        group["morton"].values, group[f"{name}_times"].values, strict=True
                    )
                    if len(v)
                }
                theirs = {
                    int(w): np.asarray(words)
                    for w, _v, words in moczarr.read_ragged(col, f"{r}/{name}", times=True)
                }
                assert theirs.keys() == mine.keys() and theirs
                for w, words in theirs.items():
                    np.testing.assert_array_equal(words, mine[w])
    for order, entry in levels(manifest).items():
        if entry["artifact"] != "overview":
            continue
        ours = zagg.open_level(plain, order).load()
        theirs = moczarr.open_level(plain, order).load()
        at = {int(w): i for i, w in enumerate(theirs["morton"].values)}
        for name in FIELDS:
            for w, v in zip(ours["morton"].values, ours[f"{name}_times"].values, strict=True):
                np.testing.assert_array_equal(
                    _words(theirs[f"{name}_times"].values[at[int(w)]]), np.asarray(v, np.uint64)
                )


def test_open_pyramid_returns_the_times_at_every_level(plain):
    tree = zagg.open_pyramid(plain)
    found = 0
    for node in tree.subtree:
        if node.has_data and "h_tdigest_signal" in node.data_vars:
            assert {f"{n}_times" for n in FIELDS} <= set(node.data_vars), node.path
            found += 1
    assert found == len(levels(json.loads(open(f"{plain}/morton_hive.json").read())))


def test_verify_passes_and_checks_the_times_siblings(plain, tmp_path, capsys):
    assert main(["verify", plain, "--quiet"]) == 0
    assert "pyramid artifacts" in capsys.readouterr().out
    # an overview whose times sibling lost a word, its content hashes made to agree: only
    # the row alignment can tell
    copy = tmp_path / "s"
    shutil.copytree(plain, copy)
    rel = next(p.parent for p in copy.rglob("all.zarr/zarr.json"))
    group = next(d.name for d in rel.iterdir() if d.is_dir())
    key = f"{group}/h_tdigest_signal_times"
    arr = zarr.open_array(str(rel / key), mode="r+")
    cells = arr[...]
    i = next(j for j, c in enumerate(cells.tolist()) if c and len(c) > 8)
    cells[i] = cells[i][:-8]
    arr[...] = cells
    meta = json.loads((rel / "zarr.json").read_text())
    hashes = meta["attributes"]["morton_hive_commit"]["content_hashes"]
    hashes["arrays"][key] = array_digest(zarr.open_array(str(rel / key), mode="r")[...])
    hashes["combined"] = combined_digest(hashes["arrays"])
    (rel / "zarr.json").write_text(json.dumps(meta))
    assert main(["verify", str(copy), "--quiet"]) != 0
    out = capsys.readouterr().out
    assert "misaligned" in out and key in out


# -- windowed yearly -----------------------------------------------------------------------
def test_yearly_windows_and_the_all_time_fold_hold_every_photon(yearly, photons):
    manifest = json.loads(open(f"{yearly}/morton_hive.json").read())
    windows = sorted(walk_windows(yearly))
    assert len(windows) >= 2
    assert windows == sorted({str(y) for y in photons.year.tolist()})
    for label in windows:
        keep = photons.year == int(label)
        leaf = zagg.open_hive(yearly, window=label).load()
        for name in FIELDS:
            assert check_times(leaf, name, photons, keep, leaf=True)[0] > 0
    everywhere = np.ones(photons.ns.size, bool)
    for order, entry in sorted(levels(manifest).items()):
        if entry["artifact"] == "source":
            continue
        labels = windows + (["all"] if entry["artifact"] == "overview" else [])
        for label in labels:
            keep = everywhere if label == "all" else photons.year == int(label)
            ds = zagg.open_level(yearly, order, window=label).load()
            assert int(ds["count"].sum()) == int(keep.sum())
            for name in FIELDS:
                assert check_times(ds, name, photons, keep)[0] > 0, (order, label)
            if entry["artifact"] == "overview":  # the independent reader agrees
                mz = (
                    moczarr.open_level(yearly, order, all_time=True)
                    if label == "all"
                    else moczarr.open_level(yearly, order, window=label)
                ).load()
                at = {int(w): i for i, w in enumerate(mz["morton"].values)}
                for w, v in zip(
                    ds["morton"].values, ds["h_tdigest_noise_times"].values, strict=True
                ):
                    np.testing.assert_array_equal(
                        _words(mz["h_tdigest_noise_times"].values[at[int(w)]]),
                        np.asarray(v, np.uint64),
                    )
    assert main(["verify", yearly, "--quiet"]) == 0


# -- every kind of source ------------------------------------------------------------------
def test_a_users_dataset_and_a_zarr_input_keep_the_same_times(tmp_path, client):
    points = synthetic_photons(12_000, REGION, chunk_size=4_000, seed=3).compute()
    raw = {
        "data_source": {
            "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
            "variables": ["h_ph", "delta_time"],
            "time": "delta_time",
            "epoch": "2018-01-01T00:00:00Z",
            "scale": "gps",
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h": {"function": "tdigest", "source": "h_ph", "timed": True},
                "t_range": {"function": "time_range", "source": "delta_time"},
            }
        },
        "output": {"dataset": {"short_name": "T", "version": "1"}, "grid": dict(GRID)},
    }
    truth = Photons.of_dataset(points)
    everywhere = np.ones(truth.ns.size, bool)
    # a user's own Dataset through zagg.aggregate: the sparse result carries the words
    ds = zagg.aggregate(points, load_config(raw)).compute()
    assert check_times(ds, "h", truth, everywhere, leaf=True)[0] > 50
    cells = truth.cells(CELL)  # time_range reads the same clock: each cell's join
    for word, got in zip(ds["morton"].values, ds["t_range"].values, strict=True):
        assert int(got) == int(mortie.toc_reduce(truth.words[cells == word]))
    # the same Dataset through zagg.run(source=...), and as a zarr input
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_a = zagg.run(
        raw, store=a, source=points.chunk({"photon": 4_000}), scheduler=client, progress=False
    )
    points.to_zarr(tmp_path / "in.zarr", consolidated=False)
    raw["data_source"]["input"] = str(tmp_path / "in.zarr")
    run_b = zagg.run(raw, store=b, scheduler=client, progress=False)
    leaves = {r["shard_id"]: r["content_hashes"] for r in run_a.records}
    assert leaves == {r["shard_id"]: r["content_hashes"] for r in run_b.records}
    for run in (run_a, run_b):  # each leaf counts its clocked photons
        assert sum(r["temporal"]["n_obs"] for r in run.records) == truth.ns.size
    leaf = zagg.open_hive(b).load()
    assert check_times(leaf, "h", truth, everywhere, leaf=True)[0] == len(ds["morton"])
    for level in (11, 8, 2):
        assert check_times(zagg.open_level(b, level).load(), "h", truth, everywhere)[0] > 0


def test_the_yearly_strata_stores_icechunk_companion_equals_every_level(yearly):
    """The Icechunk companion of the yearly strata store: every declared order, at every
    window and the all-time rows, reads through plain icechunk + xarray what open_level
    reads from the hive (counts, composition words, digest payloads, location and time
    words)."""
    pytest.importorskip("icechunk")
    from icechunk_checks import repo_matches_hive

    manifest = json.loads(open(f"{yearly}/morton_hive.json").read())
    assert repo_matches_hive(yearly) >= len(levels(manifest)) * len(walk_windows(yearly))
