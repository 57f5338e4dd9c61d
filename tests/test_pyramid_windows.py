"""The pyramid of a windowed store: per-window columns and overviews, and the all-time fold."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import dask
import numpy as np
import pytest
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg import grid as G
from zagg.checks.validation import ConfigError
from zagg.config.model import load_config
from zagg.config.store import StoreSpec
from zagg.engine.aggregate import shard_collection
from zagg.hive import artifact
from zagg.hive.manifest import read_manifest
from zagg.hive.storage import as_root
from zagg.hive.walk import walk_windows
from zagg.pyramid.declare import of_manifest
from zagg.pyramid.levels import digest_weights
from zagg.pyramid.reading import payload_digests
from zagg.read.levels import levels, open_level
from zagg.sources.synthetic import synthetic_photons
from zagg.windows import assign

REGION = (-100.2, -75.6, -99.8, -75.4)  # three order-8 shards
P, BASE, C = 8, 10, 13  # d = 2: gathers at cell orders 9 and 8, merges from 7 down to 2
EXACT = ("count", "h_sum", "h_min", "h_max")


def raw_config(windowed=True, pyramid=None):
    output = {"pyramid": {"overviews": BASE} if pyramid is None else pyramid}
    if windowed:
        output["windowing"] = dict(YEARLY)
    return pipeline_config(
        synthetic_source("h_ph", "delta_time"),
        fields("count", "h_sum", "h_min", "h_max", "h_tdigest"),
        grid_orders(P, C, inner=10),
        **output,
    )


def write(ds, cfg, store):
    from zagg.engine.write import write_shards

    with dask.config.set(scheduler="sync"):
        return write_shards(shard_collection(ds, cfg, chunk_size=25_000), str(store))


@pytest.fixture(scope="module")
def photons():
    """Heights on a 1/64 m grid: every sum of them (and of sums) is exact in float64, so
    any fold order gives the same bytes."""
    ds = synthetic_photons(60_000, REGION, chunk_size=12_000, seed=5).compute()
    return ds.assign(h_ph=(np.round(ds.h_ph * 64) / 64).astype("float32"))


@pytest.fixture(scope="module")
def stores(tmp_path_factory, photons):
    base = tmp_path_factory.mktemp("pyrwin")
    write(photons, load_config(raw_config(False)), base / "plain")
    write(photons, load_config(raw_config()), base / "win")
    plain = zagg.sweep(str(base / "plain"))
    win = zagg.sweep(str(base / "win"))
    assert plain.folded == plain.nodes > 0
    assert win.folded == win.nodes > plain.nodes and win.skipped == 0
    return str(base / "plain"), str(base / "win")


def window_points(photons, label):
    windowing = load_config(raw_config()).output.windowing
    idx = assign.window_index(windowing, photons["delta_time"].values)
    keep = idx == int(label)
    return (
        photons["lat_ph"].values[keep],
        photons["lon_ph"].values[keep],
        photons["h_ph"].values[keep].astype(np.float64),
    )


def direct(lat, lon, h, order):
    """count, sum, min, max of the points per cell at ``order``, by cell word."""
    words, ok = G.cell_words(lat, lon, order)
    words, h = words[ok], h[ok]
    cells, inv = np.unique(words, return_inverse=True)
    out = {"count": np.bincount(inv), "h_sum": np.bincount(inv, weights=h)}
    lo = np.full(cells.size, np.inf)
    hi = np.full(cells.size, -np.inf)
    np.minimum.at(lo, inv, h)
    np.maximum.at(hi, inv, h)
    out["h_min"], out["h_max"] = lo, hi
    return cells, out


def windows_of(store):
    return sorted(walk_windows(store))


def pyramid_orders(store):
    return [
        r for r, e in levels(read_manifest(as_root(store))).items() if e["artifact"] != "source"
    ]


# -- the declaration -----------------------------------------------------------------------
def test_a_windowed_pyramid_declares_the_all_time_fold(stores):
    _plain, win = stores
    manifest = read_manifest(as_root(win))
    assert manifest["pyramid"]["overview"]["all_time"] is True
    assert of_manifest(manifest).windowed
    assert load_config(raw_config(pyramid={"overviews": BASE, "all_time": True})).output.pyramid
    with pytest.raises(ConfigError, match="all_time must be true"):
        load_config(raw_config(pyramid={"overviews": BASE, "all_time": False}))
    with pytest.raises(ConfigError, match="output.pyramid.all_time"):
        load_config(raw_config(False, pyramid={"overviews": BASE, "all_time": True}))
    # a timed digest folds through the levels, its entry declaring the per-centroid times
    timed = raw_config()
    timed["aggregation"]["variables"]["h_tdigest"]["timed"] = True
    entry = StoreSpec.of(load_config(timed)).pyramid.fields["h_tdigest"]
    assert entry["class"] == "approximate" and entry["temporal"] == "per-centroid"
    assert "temporal" not in StoreSpec.of(load_config(raw_config())).pyramid.fields["h_tdigest"]


# -- per-window levels ---------------------------------------------------------------------
def test_each_windowed_leaf_writes_its_windows_column(stores):
    _plain, win = stores
    root = as_root(win)
    for label, found in walk_windows(root).items():
        for _rel, sid in found:
            rel = artifact.column_path(sid, label)
            assert rel.endswith(f"/{label}.pyramid.zarr")
            attrs = artifact.stamped_attrs(root, rel, "column")
            assert attrs[artifact.COLUMN_ATTR]["window"] == label
            assert root.exists(artifact.sidecar_key(rel))
    node = G.node_path(found[0][1])
    assert not root.exists(f"{node}/{artifact.COLUMN_NAME}/zarr.json")  # no all-time column


def test_per_window_levels_equal_a_direct_aggregation_of_the_windows_points(stores, photons):
    _plain, win = stores
    for label in windows_of(win):
        lat, lon, h = window_points(photons, label)
        for r in pyramid_orders(win):
            ds = open_level(win, r, window=label).compute()
            cells, want = direct(lat, lon, h, r)
            np.testing.assert_array_equal(ds["morton"].values, cells)
            for name in EXACT:
                np.testing.assert_array_equal(
                    ds[name].values.astype(np.float64), want[name], err_msg=f"{label} o{r} {name}"
                )
            assert ds.attrs["zagg_level"]["artifacts"][0].endswith(
                f"/{label}.pyramid.zarr" if r == BASE else f"/{label}.zarr"
            )


def test_digest_weights_are_the_counts_in_every_window_and_all_time(stores):
    _plain, win = stores
    for label in [*windows_of(win), None]:
        for r in pyramid_orders(win):
            if label is None and r == BASE:
                continue  # no all-time column
            ds = open_level(win, r, window=label).compute()
            weights = digest_weights(payload_digests(ds["h_tdigest"].values))
            np.testing.assert_array_equal(weights, ds["count"].values.astype(np.float64))


# -- the all-time fold ---------------------------------------------------------------------
def _chunks(store, rel):
    top = Path(store) / rel
    return {
        str(p.relative_to(top)): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and "/c/" in str(p)
    }


def test_the_all_time_fold_is_the_unwindowed_ladder_byte_for_byte(stores):
    plain, win = stores
    decl = of_manifest(read_manifest(as_root(plain)))
    shards = sorted({sid for found in walk_windows(win).values() for _r, sid in found})
    checked = 0
    for k, r in decl.ladder():
        for nid in sorted({s[: (1 if s.startswith("-") else 0) + 1 + k] for s in shards}):
            rel = artifact.overview_path(nid)
            a = artifact.stamped_attrs(as_root(plain), rel, "overview")
            b = artifact.stamped_attrs(as_root(win), rel, "overview")
            for name in EXACT:
                ours = _chunks(win, f"{rel}/{r}/{name}")
                theirs = _chunks(plain, f"{rel}/{r}/{name}")
                assert ours and ours == theirs, (nid, name)
                key = f"{r}/{name}"
                assert (
                    b["morton_hive_commit"]["content_hashes"]["arrays"][key]
                    == a["morton_hive_commit"]["content_hashes"]["arrays"][key]
                )
                checked += 1
    assert checked == len(EXACT) * sum(1 for _ in decl.ladder())
    for r in pyramid_orders(win):
        if r == BASE:
            continue
        ours, theirs = open_level(win, r).compute(), open_level(plain, r).compute()
        for name in EXACT:
            assert ours[name].values.tobytes() == theirs[name].values.tobytes(), (r, name)


def test_the_all_time_provenance_counts_the_windows(stores):
    _plain, win = stores
    root = as_root(win)
    decl = of_manifest(read_manifest(root))
    k, r = decl.ladder()[0]  # a gather level: the all-time fold is a merge there too
    by_node: dict[str, set] = {}
    for label, found in walk_windows(root).items():
        for _rel, sid in found:
            by_node.setdefault(sid[: (1 if sid.startswith("-") else 0) + 1 + k], set()).add(label)
    for nid, labels in by_node.items():
        block = artifact.stamped_attrs(root, artifact.overview_path(nid), "overview")[
            artifact.OVERVIEW_ATTR
        ]
        assert block["window"] == "all" and block["regime"] == "stage-merge"
        assert block["source_windows"] == {"folded": len(labels), "missing": 0, "unreadable": 0}
        per = [
            artifact.stamped_attrs(root, artifact.overview_path(nid, w), "overview")[
                artifact.OVERVIEW_ATTR
            ]
            for w in sorted(labels)
        ]
        assert all(p["window"] == w for p, w in zip(per, sorted(labels), strict=True))
        assert block["merges_from_raw"] == 1 + max(p["merges_from_raw"] for p in per)
        assert block["generation"]["n_leaves"] == sum(p["generation"]["n_leaves"] for p in per)
        assert block["source_children"]["folded"] == sum(
            p["source_children"]["folded"] for p in per
        )


def test_a_resweep_of_an_unchanged_windowed_store_writes_nothing(stores, tmp_path):
    _plain, win = stores
    copy = tmp_path / "again"
    shutil.copytree(win, copy)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in copy.rglob("*") if p.is_file()}
    summary = zagg.sweep(str(copy))
    assert summary.folded == 0 and summary.objects_written == 0
    assert summary.skipped == summary.nodes > 0
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in copy.rglob("*") if p.is_file()}
    assert after == before


def test_a_new_window_overview_refolds_the_all_time_fold(stores, tmp_path):
    _plain, win = stores
    copy = tmp_path / "heal"
    shutil.copytree(win, copy)
    root = as_root(str(copy))
    label = windows_of(str(copy))[-1]
    sid = walk_windows(root)[label][0][1]
    nid = sid[: (1 if sid.startswith("-") else 0) + P]  # the order p-1 ancestor
    want = artifact.stamped_attrs(root, artifact.overview_path(nid), "overview")
    shutil.rmtree(copy / artifact.overview_path(nid, label))
    os.remove(copy / artifact.sidecar_key(artifact.overview_path(nid, label)))
    summary = zagg.sweep(str(copy))
    assert summary.folded >= 2  # the window's overview, then the node's close
    got = artifact.stamped_attrs(root, artifact.overview_path(nid), "overview")
    assert (
        got["morton_hive_commit"]["content_hashes"] == want["morton_hive_commit"]["content_hashes"]
    )


# -- reading -------------------------------------------------------------------------------
def test_open_level_refuses_what_a_windowed_store_does_not_hold(stores):
    plain, win = stores
    with pytest.raises(ValueError, match="window='<label>'"):
        open_level(win, BASE)
    with pytest.raises(ValueError, match="not a windowed store"):
        open_level(plain, 9, window="2021")
    assert open_level(win, 9, window="all").sizes == open_level(win, 9).sizes
    tree = zagg.open_pyramid(win)
    assert sorted(tree.children) == sorted(f"o{r}" for r in pyramid_orders(win) if r != BASE)
    label = windows_of(win)[0]
    assert f"o{BASE}" in zagg.open_pyramid(win, window=label).children


def test_moczarr_reads_the_window_levels_and_the_all_time_fold(stores):
    moczarr = pytest.importorskip("moczarr")
    _plain, win = stores
    for kw in [*({"window": w} for w in windows_of(win)), {"all_time": True}]:
        for r in pyramid_orders(win):
            if kw.get("all_time") and r == BASE:
                continue
            ours = open_level(win, r, window=kw.get("window")).compute()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = moczarr.open_level(win, r, **kw).compute()
            keep = theirs["count"].values > 0
            np.testing.assert_array_equal(theirs["morton"].values[keep], ours["morton"].values)
            for name in EXACT:
                assert theirs[name].values[keep].tobytes() == ours[name].values.tobytes(), (
                    kw,
                    r,
                    name,
                )
            got = [bytes(v or b"") for v in theirs["h_tdigest"].values[keep]]
            assert got == [bytes(v) for v in ours["h_tdigest"].values], (kw, r)


def test_inspect_lists_the_window_levels_and_the_all_time_fold(stores, capsys):
    from zagg.cli.main import main

    _plain, win = stores
    main(["inspect", win])
    out = capsys.readouterr().out
    labels = windows_of(win)
    column = next(line for line in out.splitlines() if f"o{BASE} " in line and "column" in line)
    assert all(f"{w} " in column for w in labels) and "all " not in column
    over = next(line for line in out.splitlines() if "o9 " in line and "overview" in line)
    assert over.split("overview", 1)[1].split()[0] == "all"
    assert "sweep" not in over


def test_the_windowed_pyramid_docs_example_runs_on_the_reference_grid(tmp_path, monkeypatch):
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "pyramid.md").read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[1]
    assert 'window="2021"' in block
    ds = synthetic_photons(5_000, REGION, chunk_size=1_000, seed=3).compute()
    raw = raw_config(pyramid=True)
    raw["output"]["grid"] = {"parent_order": 9, "chunk_inner": 13, "child_order": 19}
    monkeypatch.chdir(tmp_path)
    write(ds, load_config(raw), "store")
    zagg.sweep("store")
    assert "2021" in windows_of("store")
    scope: dict = {"zagg": zagg}
    exec(block, scope)


def test_moczarr_verifies_the_window_overviews_the_folds_and_the_columns(stores):
    moczarr = pytest.importorskip("moczarr")
    from moczarr.stats import verify_overview_arrays

    _plain, win = stores
    decl = of_manifest(read_manifest(as_root(win)))
    windows = walk_windows(win)
    checked = 0
    for k, _r in decl.ladder():
        for label in [None, *sorted(windows)]:
            ids = [sid for w, found in windows.items() if label in (None, w) for _rel, sid in found]
            for nid in sorted({s[: (1 if s.startswith("-") else 0) + 1 + k] for s in ids}):
                out = verify_overview_arrays(win, nid, window=label)
                assert out["match"] is True and out["combined_match"] is True, (nid, label)
                checked += 1
    assert checked > len(decl.ladder())
    columns = list(moczarr.walk_columns(win))
    assert len(columns) == sum(len(found) for found in windows.values())
    for rel in columns:
        stamp = moczarr.read_commit(win, rel)
        assert moczarr.hash_arrays(win, rel) == stamp["content_hashes"]["arrays"]


def test_a_window_without_its_overview_is_counted_missing_and_left_out(stores, photons, tmp_path):
    _plain, win = stores
    copy = tmp_path / "missing"
    shutil.copytree(win, copy)
    root = as_root(str(copy))
    decl = of_manifest(read_manifest(root))
    label = windows_of(str(copy))[0]
    for _rel, sid in walk_windows(root)[label]:  # the window's columns and overviews go
        shutil.rmtree(copy / artifact.column_path(sid, label))
    for k, _r in decl.ladder():
        for _rel, sid in walk_windows(root)[label]:
            rel = artifact.overview_path(sid[: (1 if sid.startswith("-") else 0) + 1 + k], label)
            shutil.rmtree(copy / rel, ignore_errors=True)
    zagg.sweep(str(copy))
    k, r = decl.ladder()[-1]
    sid = walk_windows(root)[label][0][1]
    nid = sid[: (1 if sid.startswith("-") else 0) + 1 + k]
    block = artifact.stamped_attrs(root, artifact.overview_path(nid), "overview")[
        artifact.OVERVIEW_ATTR
    ]
    folded = len(windows_of(str(copy))) - 1
    assert block["source_windows"] == {"folded": folded, "missing": 1, "unreadable": 0}
    others = [w for w in windows_of(str(copy)) if w != label]
    parts = [window_points(photons, w) for w in others]
    lat, lon, h = (np.concatenate([p[i] for p in parts]) for i in range(3))
    cells, want = direct(lat, lon, h, r)
    ds = open_level(str(copy), r).compute()
    np.testing.assert_array_equal(ds["morton"].values, cells)
    np.testing.assert_array_equal(ds["count"].values, want["count"])


def test_a_manifest_recording_all_time_false_gets_no_fold(stores, tmp_path):
    import json

    _plain, win = stores
    copy = tmp_path / "gated"
    shutil.copytree(win, copy, ignore=shutil.ignore_patterns("all.zarr", "all.stats.json"))
    manifest = json.loads((copy / "morton_hive.json").read_text())
    manifest["pyramid"]["overview"]["all_time"] = False
    (copy / "morton_hive.json").write_text(json.dumps(manifest))
    summary = zagg.sweep(str(copy))
    assert summary.folded == 0
    assert not list(copy.rglob("all.zarr"))
    label = windows_of(str(copy))[0]
    assert open_level(str(copy), 9, window=label).sizes["cells"] > 0


def test_the_windowed_pyramid_on_s3_equals_the_local_store(stores, photons, moto_s3):
    from zagg.engine.write import write_shards

    options, fs = moto_s3
    fs.mkdir("windowed-pyramid")
    url = "s3://windowed-pyramid/w"
    _plain, win = stores
    with dask.config.set(scheduler="sync"):
        write_shards(
            shard_collection(photons, load_config(raw_config()), chunk_size=25_000),
            url,
            storage_options=options,
        )
    summary = zagg.sweep(url, storage_options=options)
    assert summary.folded > 0 and summary.skipped == 0
    label = windows_of(win)[0]
    for r, window in ((BASE, label), (9, label), (9, None), (4, None)):
        a = open_level(url, r, storage_options=options, window=window).compute()
        b = open_level(win, r, window=window).compute()
        assert a["morton"].values.tobytes() == b["morton"].values.tobytes()
        for name in EXACT:
            assert a[name].values.tobytes() == b[name].values.tobytes(), (r, window, name)
        assert [bytes(x) for x in a["h_tdigest"].values] == [
            bytes(x) for x in b["h_tdigest"].values
        ]
    assert zagg.sweep(url, storage_options=options).objects_written == 0
