"""Windowed runs: one leaf per (shard, window), morton-hive/2 stores, reading windows back."""

from __future__ import annotations

import json
from pathlib import Path

import dask
import moczarr
import numpy as np
import pytest
import xarray as xr
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg import grid as G
from zagg import hive
from zagg.config.model import load_config
from zagg.engine.aggregate import shard_collection
from zagg.engine.write import write_shards
from zagg.hive.walk import walk_windows
from zagg.kernels import tdigest
from zagg.sources.synthetic import synthetic_photons
from zagg.windows import assign

REGION = (-100.2, -75.6, -99.8, -75.4)  # three order-8 shards
YEAR_2018 = 365 * 86400


def config(windowed=True, *, child=13, inner=10, schedule="yearly", scale="gps"):
    output = {"pyramid": False}
    if windowed:
        output["windowing"] = dict(YEARLY, schedule=schedule, scale=scale)
    return load_config(
        pipeline_config(
            synthetic_source("h_ph", "delta_time"),
            fields("count", "h_sum", "h_tdigest"),
            grid_orders(8, child, inner=inner),
            **output,
        )
    )


def write(ds, cfg, store):
    with dask.config.set(scheduler="sync"):
        return write_shards(shard_collection(ds, cfg, chunk_size=25_000), str(store))


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(120_000, REGION, chunk_size=12_000, seed=5).compute()


def years_of(photons) -> list[str]:
    idx = assign.window_index(config().output.windowing, photons["delta_time"].values)
    return [str(y) for y in np.unique(idx)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, photons):
    base = tmp_path_factory.mktemp("windows")
    write(photons, config(False), base / "plain")
    summary = write(photons, config(), base / "yearly")
    return base / "plain", base / "yearly", summary


def _files(root: Path, rel: str) -> dict[str, bytes]:
    top = root / rel
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


def test_windows_sum_to_the_unwindowed_store(stores, photons):
    plain, yearly, summary = stores
    flat = zagg.open_hive(plain).load()
    stacked = zagg.open_hive(yearly, windows="all").load()
    assert list(stacked["window"].values) == years_of(photons) and len(years_of(photons)) >= 4
    np.testing.assert_array_equal(stacked["morton"].values, np.sort(flat["morton"].values))
    at = np.searchsorted(stacked["morton"].values, flat["morton"].values)
    np.testing.assert_array_equal(stacked["count"].sum("window").values[at], flat["count"].values)
    np.testing.assert_allclose(
        stacked["h_sum"].sum("window").values[at], flat["h_sum"].values, rtol=1e-12
    )
    # each window's digest weighs exactly its cell's count there
    for i in range(stacked.sizes["window"]):
        for j in np.flatnonzero(stacked["count"].values[i] > 0)[:20]:
            digest = tdigest.payload_to_array(stacked["h_tdigest"].values[i, j])
            assert digest[:, 1].sum() == stacked["count"].values[i, j]
    assert summary.points == int(flat["count"].sum())
    assert summary.leaves_written == sum(len(v) for v in walk_windows(str(yearly)).values())


def test_leaf_stamp_names_its_window_and_the_actual_time_range(stores, photons):
    _, yearly, summary = stores
    root = hive.StoreRoot(str(yearly))
    manifest = json.loads((yearly / "morton_hive.json").read_text())
    assert manifest["spec"] == "morton-hive/2"
    assert manifest["temporal"]["schedule"] == "yearly"
    assert manifest["temporal"]["scale"] == "gps"
    w = config().output.windowing
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    words, ok = G.cell_words(lat, lon, 8)
    times = photons["delta_time"].values
    years = assign.window_index(w, times)
    for record in summary.records:
        rel = record["path"]
        sid, window = record["shard_id"], record["window"]
        assert rel == hive.leaf_path(sid, window) and rel.endswith(f"{sid}_{window}.zarr")
        stamp = hive.read_stamp(root, rel)
        assert stamp["spec"] == "morton-hive/2" and stamp["window"] == window
        mine = ok & (words == G.from_decimal([sid])[0]) & (years == int(window))
        first, last = assign.utc_ns(
            w, times[mine][[np.argmin(times[mine]), np.argmax(times[mine])]]
        )[0]
        assert stamp["time_range"] == [assign.iso_ns(first), assign.iso_ns(last)]
        assert stamp["cells_with_data"] == record["cells_with_data"]
        # no stored morton: the coordinate is derived; the hashes have no morton key
        data = stamp.get("current")
        prefix = f"{rel}/{data}" if data else rel
        assert not (yearly / prefix / "13" / "morton").exists()
        assert sorted(stamp["content_hashes"]["arrays"]) == ["13/count", "13/h_sum", "13/h_tdigest"]
        node = rel.rsplit("/", 1)[0]
        sidecar = json.loads((yearly / node / f"stats_{window}.json").read_text())
        assert sidecar["content_hashes"] == stamp["content_hashes"]
        assert sidecar["window"] == window


def test_moczarr_opens_each_window_with_our_values(stores, photons):
    _, yearly, _ = stores
    root = str(yearly)
    assert moczarr.read_manifest(root)["spec"] == "morton-hive/2"
    for window in years_of(photons)[::2]:
        ours = zagg.open_hive(yearly, window=window).load()
        theirs = moczarr.open_hive(root, window=window)
        keep = np.asarray(theirs["count"].values) > 0
        words = np.asarray(
            theirs["cells"].values if "cells" in theirs.coords else theirs["morton"].values
        )[keep]
        order = np.argsort(words)
        np.testing.assert_array_equal(words[order], ours["morton"].values)
        np.testing.assert_array_equal(
            np.asarray(theirs["count"].values)[keep][order], ours["count"].values
        )
        for rel, sid in hive.walk_leaves(root, window):
            stamp = moczarr.read_commit(root, rel)
            assert stamp["window"] == window
            got = moczarr.hash_arrays(root, moczarr.leaf_data_prefix(rel, stamp))
            assert got == stamp["content_hashes"]["arrays"]
            # moczarr's leaf store derives the coordinate our reader derives
            store = moczarr.open_leaf(root, sid, window=window)
            arr, element = moczarr.open_ragged(store, "13/h_tdigest")
            raw = arr[:]
            cells = [i for i, v in enumerate(raw) if v is not None and len(v)]
            ranks = np.asarray(cells)
            law = G.shard_cell_words(G.from_decimal([sid])[0], 8, 13)[ranks]
            mine = ours.sel(morton=law)
            for i, word in zip(ranks[:10], law[:10], strict=False):
                np.testing.assert_array_equal(
                    np.asarray(moczarr.decode_cell(raw[i], element)),
                    tdigest.payload_to_array(mine["h_tdigest"].sel(morton=word).item()),
                )


def test_appending_a_year_adds_leaves_and_leaves_the_others_byte_identical(tmp_path, photons):
    w = config().output.windowing
    years = assign.window_index(w, photons["delta_time"].values)
    last = int(years.max())
    store = tmp_path / "s"
    write(photons.isel(photon=np.flatnonzero(years < last)), config(), store)
    before = {
        label: [rel for rel, _ in leaves] for label, leaves in walk_windows(str(store)).items()
    }
    assert sorted(before) == years_of(photons)[:-1]
    kept = {}
    for label, rels in before.items():
        for rel in rels:
            node = rel.rsplit("/", 1)[0]
            kept.update(_files(store, rel))
            kept[f"{node}/stats_{label}.json"] = (store / node / f"stats_{label}.json").read_bytes()
    manifest = (store / "morton_hive.json").read_bytes()
    summary = write(photons.isel(photon=np.flatnonzero(years == last)), config(), store)
    assert {r["window"] for r in summary.records} == {str(last)}
    after = walk_windows(str(store))
    assert sorted(after) == years_of(photons)
    now = {}
    for rels in before.values():
        for rel in rels:
            now.update(_files(store, rel))
    for key in kept:
        if key.endswith(".json") and "stats_" in key:
            now[key] = (store / key).read_bytes()
    assert now == kept
    assert (store / "morton_hive.json").read_bytes() == manifest
    # the appended year holds what a whole run writes for it
    whole = tmp_path / "whole"
    write(photons, config(), whole)
    ours = {
        sid: hive.read_stamp(hive.StoreRoot(str(store)), rel)["content_hashes"]
        for rel, sid in hive.walk_leaves(str(store), str(last))
    }
    full = {
        sid: hive.read_stamp(hive.StoreRoot(str(whole)), rel)["content_hashes"]
        for rel, sid in hive.walk_leaves(str(whole), str(last))
    }
    assert ours == full and ours


def test_an_instant_on_a_boundary_lands_only_in_the_later_window(tmp_path):
    # three observations of one cell: 1 ms before UTC 2019-01-01, on it, 1 ms after (GPS)
    t = np.array([YEAR_2018 + 18 - 1e-3, YEAR_2018 + 18, YEAR_2018 + 18 + 1e-3])
    ds = xr.Dataset(
        {
            "lat_ph": ("photon", np.full(3, -75.5)),
            "lon_ph": ("photon", np.full(3, -100.0)),
            "h_ph": ("photon", np.array([1.0, 2.0, 4.0], np.float32)),
            "delta_time": ("photon", t),
        }
    )
    summary = write(ds, config(), tmp_path / "gps")
    got = {r["window"]: r for r in summary.records}
    assert sorted(got) == ["2018", "2019"]
    one = zagg.open_hive(tmp_path / "gps", window="2018").load()
    two = zagg.open_hive(tmp_path / "gps", window="2019").load()
    assert one["count"].values.tolist() == [1] and one["h_sum"].values.tolist() == [1.0]
    assert two["count"].values.tolist() == [2] and two["h_sum"].values.tolist() == [6.0]
    assert hive.read_stamp(hive.StoreRoot(str(tmp_path / "gps")), got["2019"]["path"])[
        "time_range"
    ] == ["2019-01-01T00:00:00Z", "2019-01-01T00:00:00.001Z"]
    # read as UTC seconds, the same numbers are 18 s later: all three fall in 2019
    summary = write(ds, config(scale="utc"), tmp_path / "utc")
    assert [r["window"] for r in summary.records] == ["2019"]
    assert zagg.open_hive(tmp_path / "utc", window="2019")["count"].values.tolist() == [3]


def test_a_fully_occupied_leaf_records_full_coverage_and_no_bitmap(tmp_path):
    import mortie

    # one observation at the centre of each order-9 cell of a shard (2019), and of two of
    # its cells only (2020)
    shard = G.from_decimal(["-512113221"])[0]
    cells = G.shard_cell_words(shard, 8, 9)
    lat, lon = mortie.mort2geo(np.concatenate([cells, cells[:2]]))
    t = np.array([YEAR_2018 + 86400.0] * 4 + [2 * YEAR_2018 + 86400.0] * 2)
    ds = xr.Dataset(
        {
            "lat_ph": ("photon", np.asarray(lat)),
            "lon_ph": ("photon", (np.asarray(lon) + 180) % 360 - 180),
            "h_ph": ("photon", np.ones(6, np.float32)),
            "delta_time": ("photon", t),
        }
    )
    summary = write(ds, config(child=9, inner=9), tmp_path / "s")
    full = [r for r in summary.records if r["coverage"].get("encoding") == "full"]
    partial = [r for r in summary.records if r["coverage"].get("encoding") == "bitmap"]
    assert [(r["window"], r["cells_with_data"]) for r in full] == [("2019", 4)]
    assert [(r["window"], r["cells_with_data"]) for r in partial] == [("2020", 2)]
    root = hive.StoreRoot(str(tmp_path / "s"))
    for r in full:
        stamp = hive.read_stamp(root, r["path"])
        assert stamp["coverage"] == {
            "spec": "morton-moc/1",
            "box": stamp["coverage"]["box"],
            "cell_order": 9,
            "source": "worker",
            "encoding": "full",
        }
        prefix = f"{r['path']}/{stamp['current']}"
        assert not (tmp_path / "s" / prefix / "coverage.moc").exists()
        assert moczarr.parse_leaf_coverage(moczarr.read_commit(str(tmp_path / "s"), r["path"]))
    back = zagg.open_hive(tmp_path / "s", window=full[0]["window"]).load()
    assert int((back["count"].values > 0).sum()) == sum(
        r["cells_with_data"] for r in summary.records if r["window"] == full[0]["window"]
    )


def test_reading_a_windowed_store_names_the_window_argument(stores):
    plain, yearly, _ = stores
    with pytest.raises(ValueError, match=r"pass window=\.\.\. \(one of \['2019'"):
        zagg.open_hive(yearly)
    with pytest.raises(ValueError, match="not a time-windowed store"):
        zagg.open_hive(plain, window="2019")
    with pytest.raises(ValueError, match=r"windows \['2030'\] have no leaf"):
        zagg.open_hive(yearly, windows=["2019", "2030"])
    with pytest.raises(ValueError, match="zagg.run"):
        zagg.aggregate(xr.Dataset(), config())


def test_dense_window_read_derives_the_coordinate(stores, photons):
    _, yearly, _ = stores
    year = years_of(photons)[1]
    dense = zagg.open_hive(yearly, window=year, dense=True).load()
    rels = hive.walk_leaves(str(yearly), year)
    law = np.concatenate([G.shard_cell_words(G.from_decimal([sid])[0], 8, 13) for _, sid in rels])
    np.testing.assert_array_equal(dense["morton"].values, law)
    sparse = zagg.open_hive(yearly, window=year).load()
    assert int(dense["count"].sum()) == int(sparse["count"].sum()) > 0


def test_run_on_a_cluster_writes_the_same_windowed_leaves(
    tmp_path, photons, stores, worker_process
):
    _, yearly, _ = stores
    cfg = config().raw
    summary = zagg.run(
        cfg,
        store=str(tmp_path / "r"),
        source=photons.chunk({"photon": 25_000}),
        scheduler=worker_process,
        progress=False,
    )
    mine = {(r["shard_id"], r["window"]): r["content_hashes"] for r in summary.records}
    root = hive.StoreRoot(str(yearly))
    theirs = {}
    for label, leaves in walk_windows(str(yearly)).items():
        for rel, sid in leaves:
            theirs[(sid, label)] = hive.read_stamp(root, rel)["content_hashes"]
    assert mine == theirs


def test_windowed_leaves_encoded_array_by_array_are_the_same(
    tmp_path, photons, stores, monkeypatch
):
    """Every windowed leaf's arrays (no stored morton) encoded in tasks of their own before
    the task that writes it, as a big leaf's are: the same leaves and content hashes."""
    import zagg.engine.write

    _, yearly, _ = stores
    monkeypatch.setattr(zagg.engine.write, "SPLIT_BYTES", 0)
    summary = write(photons, config(), tmp_path / "split")
    assert all(r["timings"]["encoded_s"] > 0 for r in summary.records)
    mine = {(r["shard_id"], r["window"]): r["content_hashes"] for r in summary.records}
    root = hive.StoreRoot(str(yearly))
    theirs = {
        (sid, label): hive.read_stamp(root, rel)["content_hashes"]
        for label, leaves in walk_windows(str(yearly)).items()
        for rel, sid in leaves
    }
    assert mine == theirs


def test_inspect_lists_windows_and_their_time_ranges(stores, photons):
    from zagg.read.inspect import inspect_store

    _, yearly, summary = stores
    text = inspect_store(str(yearly))
    lines = text.splitlines()
    at = lines.index(f"windows: {len(years_of(photons))}")
    for label, line in zip(years_of(photons), lines[at + 1 :], strict=False):
        records = [r for r in summary.records if r["window"] == label]
        root = hive.StoreRoot(str(yearly))
        ranges = [hive.read_stamp(root, r["path"])["time_range"] for r in records]
        cells = sum(r["cells_with_data"] for r in records)
        n = len(records)
        assert line == (
            f"  {label:<10} {n} {'leaf' if n == 1 else 'leaves'}, {cells:,} cells with "
            f"data, {min(r[0] for r in ranges)} .. {max(r[1] for r in ranges)}"
        )
    assert f"leaves: {len(summary.records)} stamped, 0 debris" in lines
    assert "sample quantiles (leaf -512113221, window " in text


def test_verify_checks_every_windowed_leaf(stores, tmp_path):
    import shutil

    from zagg.read.inspect import EXIT_DAMAGED, EXIT_INTACT, verify_status

    _, yearly, summary = stores
    n = len(summary.records)
    report, status = verify_status(str(yearly))
    assert status == EXIT_INTACT and f"{n} ok" in report, report
    copy = tmp_path / "copy"
    shutil.copytree(yearly, copy)
    rel = summary.records[0]["path"]
    stamp = hive.read_stamp(hive.StoreRoot(str(copy)), rel)
    chunk = copy / rel / stamp["current"] / "13" / "h_sum" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[-9] ^= 0xFF  # one stored value changes
    chunk.write_bytes(bytes(data))
    report, status = verify_status(str(copy))
    assert status == EXIT_DAMAGED and rel in report, report


def test_a_store_refuses_another_window_schedule_before_writing(stores, photons):
    from zagg.hive.manifest import ManifestConflictError

    _, yearly, _ = stores
    before = sorted(p.name for p in yearly.rglob("*.zarr"))
    with pytest.raises(ManifestConflictError, match="temporal"):
        write(photons, config(schedule="monthly"), yearly)
    with pytest.raises(ManifestConflictError, match="spec"):
        write(photons, config(False), yearly)
    assert sorted(p.name for p in yearly.rglob("*.zarr")) == before


def test_gc_collects_superseded_versions_of_windowed_leaves(tmp_path, photons):
    from zagg.cli.main import main

    store = tmp_path / "s"
    first = write(photons, config(), store)
    again = write(photons, config(), store)
    assert len(again.records) == len(first.records) > 1
    for r in again.records:
        assert len(list((store / r["path"]).glob("run-*"))) == 2
    assert main(["gc", str(store)]) == 0
    for r in again.records:
        assert [p.name for p in (store / r["path"]).glob("run-*")] == [r["version"]]
    assert main(["verify", str(store)]) == 0


def test_dense_windows_stack_every_cell_of_their_shards(stores):
    plain, yearly, _ = stores
    dense = zagg.open_hive(yearly, windows="all", dense=True).load()
    shards = sorted(
        {sid for leaves in walk_windows(str(yearly)).values() for _, sid in leaves},
        key=lambda s: int(G.from_decimal([s])[0]),
    )
    law = np.concatenate([G.shard_cell_words(G.from_decimal([s])[0], 8, 13) for s in shards])
    np.testing.assert_array_equal(dense["morton"].values, law)
    flat = zagg.open_hive(plain, dense=True).load()
    at = np.searchsorted(dense["morton"].values, flat["morton"].values)
    np.testing.assert_array_equal(dense["count"].sum("window").values[at], flat["count"].values)
