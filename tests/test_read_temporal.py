"""``zagg.open_temporal``: the leaves' temporal records, the root section and its cover
read back, checked against the raw points, the spec's own examples and moczarr."""

from __future__ import annotations

import json
import shutil

import moczarr
import mortie
import numpy as np
import pytest
from test_windows_timed import REGION, config, write

import zagg
from zagg import grid as G
from zagg.hive import StoreRoot, read_stamp
from zagg.sources.synthetic import synthetic_photons
from zagg.windows import assign, toc
from zagg.windows.record import b64, bucket_words


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(24_000, REGION, chunk_size=12_000, seed=5).compute()


@pytest.fixture(scope="module")
def store(tmp_path_factory, photons):
    path = tmp_path_factory.mktemp("temporal") / "s"
    write(photons, config(), path)
    return path


def raw(photons):
    """Per observation: its shard id, window label, instant (ns) and toc word."""
    w = config().output.windowing
    shards, ok = G.cell_words(photons["lat_ph"].values, photons["lon_ph"].values, 8)
    t = photons["delta_time"].values[ok]
    return (
        np.array(G.to_decimal(shards[ok])),
        assign.window_index(w, t).astype(str),
        toc.instants(w, t)[0],
        toc.observation_words(w, t),
    )


def test_every_shard_and_bucket_counts_the_raw_observations(store, photons):
    ids, _years, ns, words = raw(photons)
    ds = zagg.open_temporal(store)
    assert ds.attrs["zagg_temporal"]["exact"] and ds.attrs["zagg_temporal"]["uncounted_shards"] == 0
    assert list(ds["shard"].values) == sorted(set(ids), key=lambda s: int(G.from_decimal([s])[0]))
    for sid, word, n, counted in zip(
        ds["shard"].values, ds["word"].values, ds["n_obs"].values, ds["counted"].values, strict=True
    ):
        mine = ids == sid
        assert counted and n == mine.sum()
        assert int(word) == int(mortie.toc_reduce(words[mine]))
        # the envelope contains every instant, snapped outward by less than one 2^32 ns step
        first = mortie.to_datetime64(ns[mine].min()).astype("datetime64[ns]")
        last = mortie.to_datetime64(ns[mine].max()).astype("datetime64[ns]")
        row = ds.isel(shards=list(ds["shard"].values).index(sid))
        start, end = row["time_start"].values, row["time_end"].values
        assert start <= first and end >= last
        assert (first - start) < np.timedelta64(2**32, "ns") > (end - last)
    b, n = np.unique(ns >> 39, return_counts=True)
    np.testing.assert_array_equal(ds["bucket"].values, bucket_words(b, 24))
    np.testing.assert_array_equal(ds["obs"].values, n)
    assert int(ds["obs"].sum()) == ids.size == ds.attrs["zagg_temporal"]["obs_total"]
    # the cover's gaps are the bucket grid's: one word per run of occupied buckets
    for sid, cover in zip(ds["shard"].values, ds["cover"].values, strict=True):
        mine = np.unique(ns[ids == sid] >> 39)
        np.testing.assert_array_equal(cover, mortie.toc_normalize(bucket_words(mine, 24)))
    # moczarr reads the same tier-1 words off the root coverage
    listed, got = moczarr.temporal_shard_words(moczarr.load_root_coverage(str(store)))
    assert {
        G.to_decimal(np.array([w], np.uint64))[0]: int(t) for w, t in zip(listed, got, strict=True)
    } == {s: int(w) for s, w in zip(ds["shard"].values, ds["word"].values, strict=True)}


def test_a_window_reads_its_own_leaves_records(store, photons):
    ids, years, ns, words = raw(photons)
    label = sorted(set(years))[0]
    ds = zagg.open_temporal(store, window=label)
    assert ds.attrs["zagg_temporal"]["source"] == "records"
    in_window = years == label
    assert int(ds["n_obs"].sum()) == in_window.sum() == int(ds["obs"].sum())
    for sid, word in zip(ds["shard"].values, ds["word"].values, strict=True):
        assert int(word) == int(mortie.toc_reduce(words[in_window & (ids == sid)]))
    with pytest.raises(ValueError, match="has no leaf"):
        zagg.open_temporal(store, window="1999")


def test_a_region_keeps_the_shards_that_touch_it(store, photons):
    ids, *_ = raw(photons)
    first = sorted(set(ids))[0]
    ds = zagg.open_temporal(store, cells=[first])
    assert list(ds["shard"].values) == [first]
    assert int(ds["n_obs"][0]) == (ids == first).sum()
    assert ds.attrs["zagg_temporal"]["source"] == "records"


def test_a_leaf_without_its_record_is_coverage_only(tmp_path, store, photons):
    ids, years, ns, words = raw(photons)
    copy = tmp_path / "s"
    shutil.copytree(store, copy)
    sid, label = ids[0], years[0]
    rel = zagg.hive.leaf_path(sid, label)
    prefix = f"{rel}/{read_stamp(StoreRoot(str(copy)), rel)['current']}"
    (copy / prefix / "temporal.toc").unlink()
    ds = zagg.open_temporal(copy, window=label)
    row = list(ds["shard"].values).index(sid)
    mine = (ids == sid) & (years == label)
    assert not ds["counted"].values[row] and ds["n_obs"].values[row] == 0
    # the join is a semilattice: over the centroids' words it is the observations' join
    assert int(ds["word"].values[row]) == int(mortie.toc_reduce(words[mine]))
    assert ds.attrs["zagg_temporal"]["uncounted_shards"] == 1
    assert not ds.attrs["zagg_temporal"]["exact"]
    # the other shards still count exactly
    others = ds["counted"].values.copy()
    others[row] = True
    assert others.all()


def test_a_damaged_record_reads_as_absent(tmp_path, store, photons):
    ids, years, _ns, _words = raw(photons)
    copy = tmp_path / "s"
    shutil.copytree(store, copy)
    sid, label = ids[0], years[0]
    rel = zagg.hive.leaf_path(sid, label)
    path = copy / rel / read_stamp(StoreRoot(str(copy)), rel)["current"] / "temporal.toc"
    rec = json.loads(path.read_text())
    rec["n_obs"] += 1  # disagrees with its counts' obs_total
    path.write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="damaged temporal record"):
        ds = zagg.open_temporal(copy, window=label)
    assert not ds["counted"].values[list(ds["shard"].values).index(sid)]


def spec_uncounted_store(path):
    """The spec's uncounted surface (§7, §10.3): a manifest and the root objects only,
    five occupied buckets at obs 0 under ``uncounted_shards: 1``."""
    path.mkdir()
    manifest = {
        "spec": "morton-hive/1",
        "dataset": {"short_name": "TEMPORAL", "version": "1"},
        "cell_order": 6,
        "shard_order": 4,
        "split_schedule": [1, 1, 1, 1],
        "path_grouping": 1,
        "pyramid": {"spec": "zagg-pyramid/1", "overview": {"orders": []}},
        "generated_at": "2026-09-17T18:02:11+00:00",
    }
    (path / "morton_hive.json").write_text(json.dumps(manifest))
    buckets = np.array([1000, 1001, 1003, 1040, 1041], np.int64) + (1 << 23) + (1 << 22)
    words = bucket_words(buckets, 24)
    word = int(mortie.toc_reduce(words))
    section = {
        "spec": "zagg-coverage-toc/1",
        "source": "sweep",
        "generated_at": "2026-08-17T22:59:35+00:00",
        "fields": ["h_tdigest"],
        "cover": "zagg-coverage-toc-cover/1",
        "shards": {"11213": str(word)},
        "counts": {
            "temporal_order": 24,
            "cap": 512,
            "element": {"dtype": "uint64", "shape": [-1]},
            "encoding": "base64",
            "words": b64(words),
            "obs": b64(np.zeros(5, np.uint64)),
            "count": 5,
            "obs_total": 0,
            "uncounted_shards": 1,
        },
    }
    moc = {
        "spec": "morton-moc/1",
        "encoding": "ranges",
        "order": 4,
        "source": "sweep",
        "generated_at": "2026-08-17T22:59:35+00:00",
        "ranges": [["11213", "11213"]],
        "temporal": section,
    }
    (path / "coverage.moc").write_text(json.dumps(moc))
    cover = np.asarray(mortie.toc_normalize(words), np.uint64)
    (path / "coverage.toc").write_text(
        json.dumps(
            {
                "spec": "zagg-coverage-toc-cover/1",
                "source": "sweep",
                "generated_at": "2026-08-23T02:41:00+00:00",
                "order": 4,
                "temporal_order": 24,
                "cap": 512,
                "fields": ["h_tdigest"],
                "element": {"dtype": "uint64", "shape": [-1]},
                "encoding": "base64",
                "shards": {"11213": {"words": b64(cover), "count": int(cover.size)}},
            }
        )
    )
    return word, words, cover


def test_the_uncounted_surface_reads_its_tier_one_listing(tmp_path):
    word, words, cover = spec_uncounted_store(tmp_path / "u")
    ds = zagg.open_temporal(tmp_path / "u")
    assert list(ds["shard"].values) == ["11213"] and int(ds["word"][0]) == word
    assert not ds["counted"].values[0] and int(ds["leaves"][0]) == 0
    np.testing.assert_array_equal(ds["cover"].values[0], cover)
    assert cover.size == 3  # the buckets' runs: 1000-1001, 1003, 1040-1041
    np.testing.assert_array_equal(ds["bucket"].values, words)
    assert ds["obs"].values.tolist() == [0] * 5  # occupied, uncounted: never read as empty
    meta = ds.attrs["zagg_temporal"]
    assert (meta["source"], meta["uncounted_shards"], meta["obs_total"], meta["exact"]) == (
        "root",
        1,
        0,
        False,
    )
    listed, got = moczarr.temporal_shard_words(moczarr.load_root_coverage(str(tmp_path / "u")))
    assert [int(g) for g in got] == [word]


def test_unknown_revisions_and_broken_blocks_read_as_absent(tmp_path):
    spec_uncounted_store(tmp_path / "u")
    moc = json.loads((tmp_path / "u" / "coverage.moc").read_text())
    moc["temporal"]["counts"]["obs_total"] = 7  # disagrees with its obs buffer
    (tmp_path / "u" / "coverage.moc").write_text(json.dumps(moc))
    with pytest.warns(UserWarning, match="counts block is refused"):
        ds = zagg.open_temporal(tmp_path / "u")
    assert ds.sizes["buckets"] == 5 and ds.attrs["zagg_temporal"]["source"] == "records"
    moc["temporal"]["spec"] = "zagg-coverage-toc/9"
    (tmp_path / "u" / "coverage.moc").write_text(json.dumps(moc))
    assert zagg.open_temporal(tmp_path / "u").sizes["shards"] == 0


def test_per_cell_spans_are_each_cells_join_of_its_observations(store, photons):
    from test_windows_timed import raw_by_cell

    raw = raw_by_cell(photons, config())
    label = sorted({w for w, _c in raw})[0]
    ds = zagg.open_temporal(store, window=label, per_cell=True)
    assert ds.sizes["cells"] == sum(1 for w, _c in raw if w == label)
    for word, cell in zip(ds["cell_word"].values, ds["cell_morton"].values, strict=True):
        members = np.array([t for _h, t in raw[(label, int(cell))]], np.uint64)
        assert int(word) == int(mortie.toc_reduce(members))
    assert (ds["cell_start"].values <= ds["cell_end"].values).all()
    with pytest.raises(ValueError, match="time-windowed store"):
        zagg.open_temporal(store, per_cell=True)
