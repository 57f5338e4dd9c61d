"""Timed digests: a ``{field}_times`` toc word per centroid, checked against the raw points."""

from __future__ import annotations

import dask
import moczarr
import mortie
import numpy as np
import pytest
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg import grid as G
from zagg import hive
from zagg.config.model import ConfigError, load_config
from zagg.engine.aggregate import shard_collection
from zagg.engine.write import write_shards
from zagg.kernels import tdigest
from zagg.sources.synthetic import synthetic_photons
from zagg.windows import assign, toc

REGION = (-100.2, -75.6, -99.8, -75.4)


def config(delta=16, located=False):
    digest = {"timed": True, "located": located, "params": {"delta": delta}}
    return load_config(
        pipeline_config(
            synthetic_source("h_ph", "delta_time"),
            fields("count", "h_tdigest", h_tdigest=digest),
            grid_orders(8, 13, inner=10),
            pyramid=False,
            windowing=dict(YEARLY),
        )
    )


def write(ds, cfg, store, chunk=7_000):
    with dask.config.set(scheduler="sync"):
        return write_shards(shard_collection(ds, cfg, chunk_size=chunk), str(store))


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(60_000, REGION, chunk_size=12_000, seed=5).compute()


def raw_by_cell(photons, cfg):
    """Per (window label, cell word): the raw heights and their toc words."""
    w = cfg.output.windowing
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    cells, ok = G.cell_words(lat, lon, 13)
    t = photons["delta_time"].values
    years = assign.window_index(w, t)
    words = toc.observation_words(w, t)
    h = photons["h_ph"].values
    out: dict = {}
    for i in np.flatnonzero(ok & np.isfinite(h)):
        out.setdefault((str(years[i]), int(cells[i])), []).append((float(h[i]), int(words[i])))
    return out


def test_each_centroids_word_contains_its_members_checked_against_raw_points(tmp_path, photons):
    cfg = config(delta=16)
    write(photons, cfg, tmp_path / "s")
    raw = raw_by_cell(photons, cfg)
    seen_merged = seen_single = 0
    for label in ("2019", "2021", "2023"):
        ds = zagg.open_hive(tmp_path / "s", window=label).load()
        assert ds["h_tdigest_times"].attrs["temporal"] == {
            "spec": "zagg-toc/1",
            "shape": "per-centroid",
            "grammar": "mortie-toc/1",
        }
        assert ds["h_tdigest"].attrs["times"] == "h_tdigest_times"
        for j, word in enumerate(ds["morton"].values):
            digest = tdigest.payload_to_array(ds["h_tdigest"].values[j])
            times = np.asarray(ds["h_tdigest_times"].values[j], np.uint64)
            assert times.shape == (digest.shape[0],)  # row-aligned with the payload
            members = raw[(label, int(word))]
            member_words = np.array([m[1] for m in members], np.uint64)
            # the cell's words join to exactly the join of its raw observations' instants
            assert mortie.toc_reduce(times) == mortie.toc_reduce(member_words)
            # every raw instant lies inside some centroid's word
            starts, ends = mortie.toc2time(times)
            for t in mortie.toc2time(member_words)[0]:
                inside = (starts <= t) & ((t < ends) | (starts == ends) & (t == starts))
                assert inside.any()
            single = digest[:, 1] == 1
            # a one-observation centroid carries its observation's own timestamp word
            pairs = {(np.float32(h), w) for h, w in members}
            for (mean, _), w in zip(digest[single], times[single], strict=True):
                assert (np.float32(mean), int(w)) in pairs
                assert not mortie.toc_is_range(np.array([w], np.uint64))[0]
            seen_single += int(single.sum())
            seen_merged += int((~single).sum())
    assert seen_merged > 20 and seen_single > 20  # both kinds of centroid were checked


def test_timed_digests_do_not_depend_on_chunking(tmp_path, photons):
    cfg = config(delta=100_000, located=True)  # loss-free: one centroid per observation
    a = write(photons, cfg, tmp_path / "a", chunk=7_000)
    b = write(photons, cfg, tmp_path / "b", chunk=25_000)
    key = {(r["shard_id"], r["window"]): r["content_hashes"] for r in a.records}
    assert key == {(r["shard_id"], r["window"]): r["content_hashes"] for r in b.records}
    arrays = a.records[0]["content_hashes"]["arrays"]
    assert sorted(arrays) == [
        "13/count",
        "13/h_tdigest",
        "13/h_tdigest_locations",
        "13/h_tdigest_times",
    ]


def test_moczarr_reads_the_times_sibling_we_wrote(tmp_path, photons):
    write(photons, config(), tmp_path / "s")
    root = str(tmp_path / "s")
    rel, sid = hive.walk_leaves(root, "2019")[0]
    ours = zagg.read.open_leaf(root, sid, window="2019", dense=True).load()
    store = moczarr.open_leaf(root, sid, window="2019")
    arr, element = moczarr.open_ragged(store, "13/h_tdigest_times")
    raw = arr[:]
    checked = 0
    for i, cell in enumerate(raw):
        if cell is None or not len(cell):
            continue
        np.testing.assert_array_equal(
            np.asarray(moczarr.decode_cell(cell, element)),
            np.asarray(ours["h_tdigest_times"].values[i], np.uint64),
        )
        checked += 1
    assert checked == int((ours["count"].values > 0).sum()) > 0


def test_time_words_decode_to_utc_datetimes():
    w = config().output.windowing
    t = np.array([365 * 86400 + 18.0, 365 * 86400 + 18.5])  # GPS: 2019-01-01T00:00:00(.5) UTC
    words = toc.observation_words(w, t)
    start, end = toc.decode(words)
    assert start.astype(str).tolist() == [
        "2019-01-01T00:00:00.000000000",
        "2019-01-01T00:00:00.500000000",
    ]
    assert (start == end).all()
    joined = mortie.toc_reduce(words)
    lo, hi = toc.decode(np.array([joined], np.uint64))
    assert lo[0] <= start[0] and hi[0] > start[1]


def test_timed_needs_the_windowing_clock_and_a_digest():
    raw = config().raw
    del raw["output"]["windowing"]
    with pytest.raises(
        ConfigError,
        match=r"'aggregation.variables.h_tdigest.timed'.*"
        r"output.windowing",
    ):
        load_config(raw)
    raw = config().raw
    raw["aggregation"]["variables"]["count"]["timed"] = True
    with pytest.raises(ConfigError, match="only digest"):
        load_config(raw)
    raw = config().raw
    raw["aggregation"]["variables"]["h_tdigest_times"] = {"function": "count"}
    with pytest.raises(ConfigError, match="taken by the times sibling"):
        load_config(raw)


def _b64(block, key="words"):
    from zagg.windows.record import decode_words

    return decode_words(block, key)


def test_leaf_temporal_record_counts_every_clocked_observation(tmp_path, photons):
    import json

    cfg = config()
    summary = write(photons, cfg, tmp_path / "s")
    w = cfg.output.windowing
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    shards, ok = G.cell_words(lat, lon, 8)
    t = photons["delta_time"].values
    years = assign.window_index(w, t)
    ns = toc.instants(w, t)[0]
    root = hive.StoreRoot(str(tmp_path / "s"))
    for r in summary.records:
        stamp = hive.read_stamp(root, r["path"])
        obj = json.loads(
            (tmp_path / "s" / r["path"] / stamp["current"] / "temporal.toc").read_text()
        )
        mine = ok & (shards == G.from_decimal([r["shard_id"]])[0]) & (years == int(r["window"]))
        inst = ns[mine]
        assert obj["spec"] == "zagg-leaf-temporal/1" and obj["source"] == "worker"
        assert obj["fields"] == ["h_tdigest"] and obj["temporal_order"] == 24
        counted = int(zagg.read.open_leaf(root, r["shard_id"], window=r["window"])["count"].sum())
        assert obj["n_obs"] == obj["counts"]["obs_total"] == mine.sum() == counted
        assert int(obj["word"]) == int(mortie.toc_reduce(toc.observation_words(w, t[mine])))
        words, obs = _b64(obj["counts"]), _b64(obj["counts"], "obs")
        lo, hi = mortie.toc2time(words)
        assert np.all(hi - lo == 2**39) and np.all(lo % 2**39 == 0)
        expected = [int(((inst >= a) & (inst < b)).sum()) for a, b in zip(lo, hi, strict=True)]
        assert obs.tolist() == expected and sum(expected) == inst.size
        cover = _b64(obj["cover"])
        np.testing.assert_array_equal(cover, mortie.toc_normalize(words))


def test_no_record_without_a_timed_field(tmp_path, photons):
    raw = config().raw
    raw["aggregation"]["variables"]["h_tdigest"]["timed"] = False
    summary = write(photons, load_config(raw), tmp_path / "s")
    assert summary.records and not list((tmp_path / "s").rglob("temporal.toc"))
    assert all(r["temporal"] is None for r in summary.records)


def test_a_leaf_whose_temporal_record_cannot_be_written_is_left_unstamped(
    tmp_path, photons, monkeypatch
):
    cfg = config()
    w = cfg.output.windowing
    years = assign.window_index(w, photons["delta_time"].values)
    first = photons.isel(photon=np.flatnonzero(years == years[0]))
    shard = G.to_decimal(
        G.cell_words(first["lat_ph"].values[:1], first["lon_ph"].values[:1], 8)[0]
    )[0]
    rel = hive.leaf_path(shard, str(years[0]))
    # the storage refuses the record's object (a full disk, a denied PUT): nothing else
    real = hive.StoreRoot.write_bytes

    def refuse_records(self, key, data):
        if key.startswith(rel) and key.endswith("/temporal.toc"):
            raise OSError(f"no space left for {key}")
        return real(self, key, data)

    monkeypatch.setattr(hive.StoreRoot, "write_bytes", refuse_records)
    with pytest.raises(OSError, match="no space left"):
        write(first, cfg, tmp_path / "s")
    root = hive.StoreRoot(str(tmp_path / "s"))
    assert hive.read_stamp(root, rel) is None  # neither a stamp nor a pointer: debris
    versions = [p for p in (tmp_path / "s" / rel).iterdir() if p.name.startswith("run-")]
    assert versions and all((v / "13" / "count").exists() for v in versions)  # arrays landed
    assert not any(
        (v / "zarr.json").exists() and hive.read_stamp(root, f"{rel}/{v.name}") for v in versions
    )


def _raw_instants(photons, cfg):
    w = cfg.output.windowing
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    shards, ok = G.cell_words(lat, lon, 8)
    t = photons["delta_time"].values
    ids = np.array(G.to_decimal(shards[ok]))
    return ids, toc.instants(w, t[ok])[0], toc.observation_words(w, t[ok])


def _buckets(ns):
    b, n = np.unique(np.asarray(ns, np.int64) >> 39, return_counts=True)
    from zagg.windows.record import bucket_words

    return bucket_words(b, 24), n


def test_root_temporal_section_and_cover_equal_the_raw_points(tmp_path, photons):
    import json

    from zagg.hive.rootsection import quantize
    from zagg.windows.record import decode_words

    cfg = config()
    write(photons, cfg, tmp_path / "s")
    ids, ns, words = _raw_instants(photons, cfg)
    env = json.loads((tmp_path / "s" / "coverage.moc").read_text())
    sec = env["temporal"]
    assert sec["spec"] == "zagg-coverage-toc/1" and sec["fields"] == ["h_tdigest"]
    assert sec["cover"] == "zagg-coverage-toc-cover/1"
    assert sorted(sec["shards"]) == sorted(set(ids.tolist()))
    for sid, word in sec["shards"].items():
        assert int(word) == int(mortie.toc_reduce(words[ids == sid]))
    bucket, count = _buckets(ns)
    counts = sec["counts"]
    assert counts["uncounted_shards"] == 0 and counts["obs_total"] == ns.size
    np.testing.assert_array_equal(decode_words(counts), bucket)
    np.testing.assert_array_equal(decode_words(counts, "obs"), count)
    cover = json.loads((tmp_path / "s" / "coverage.toc").read_text())
    assert (cover["spec"], cover["order"], cover["temporal_order"], cover["cap"]) == (
        "zagg-coverage-toc-cover/1",
        8,
        24,
        512,
    )
    for sid, block in cover["shards"].items():
        mine = decode_words(block)
        np.testing.assert_array_equal(mine, mortie.toc_normalize(_buckets(ns[ids == sid])[0]))
        # parity with tier 1: the cover's envelope is the quantized shard word's
        assert mortie.toc_reduce(mine) == mortie.toc_reduce(
            quantize(np.array([int(sec["shards"][sid])], np.uint64), 24)
        )
    # the independent reader decodes the same tier-1 words
    listed, got = moczarr.temporal_shard_words(moczarr.load_root_coverage(str(tmp_path / "s")))
    assert {
        G.to_decimal(np.array([w], np.uint64))[0]: int(t) for w, t in zip(listed, got, strict=True)
    } == {k: int(v) for k, v in sec["shards"].items()}


def test_appending_a_year_unions_tier_one_and_the_cover_and_drops_partial_counts(tmp_path, photons):
    import json

    cfg = config()
    years = assign.window_index(cfg.output.windowing, photons["delta_time"].values)
    last = int(years.max())
    write(photons.isel(photon=np.flatnonzero(years < last)), cfg, tmp_path / "s")
    write(photons.isel(photon=np.flatnonzero(years == last)), cfg, tmp_path / "s")
    write(photons, cfg, tmp_path / "whole")
    got = json.loads((tmp_path / "s" / "coverage.moc").read_text())["temporal"]
    whole = json.loads((tmp_path / "whole" / "coverage.moc").read_text())["temporal"]
    assert got["shards"] == whole["shards"]  # the joins compose exactly
    assert "counts" not in got and "counts" in whole  # never a partial count
    a = json.loads((tmp_path / "s" / "coverage.toc").read_text())["shards"]
    b = json.loads((tmp_path / "whole" / "coverage.toc").read_text())["shards"]
    assert a == b
    # a producer with no temporal contribution leaves the section standing
    hive.update_root_coverage(hive.StoreRoot(str(tmp_path / "s")), list(got["shards"]), 8)
    assert json.loads((tmp_path / "s" / "coverage.moc").read_text())["temporal"] == got


def test_time_range_fields_hold_each_cells_join_and_decode_to_its_first_and_last(tmp_path, photons):
    from zagg.read.windows import decode_times

    raw = config().raw
    raw["aggregation"]["variables"]["t_range"] = {"function": "time_range", "source": "delta_time"}
    cfg = load_config(raw)
    write(photons, cfg, tmp_path / "s")
    w = cfg.output.windowing
    lat, lon = photons["lat_ph"].values, photons["lon_ph"].values
    cells, ok = G.cell_words(lat, lon, 13)
    t = photons["delta_time"].values
    years = assign.window_index(w, t)
    words = toc.observation_words(w, t)
    ns = toc.instants(w, t)[0]
    series = zagg.open_hive(tmp_path / "s", windows="all").load()
    assert series["t_range"].attrs["temporal"] == {
        "spec": "zagg-toc/1",
        "shape": "per-cell",
        "grammar": "mortie-toc/1",
    }
    start, end = decode_times(series["t_range"])
    checked = 0
    for i, label in enumerate(series["window"].values):
        for j in np.flatnonzero(series["count"].values[i] > 0)[:40]:
            mine = ok & (cells == series["morton"].values[j]) & (years == int(label))
            assert int(series["t_range"].values[i, j]) == int(mortie.toc_reduce(words[mine]))
            first = mortie.to_datetime64(np.array([ns[mine].min()], np.uint64))[0]
            assert start.values[i, j] <= first and end.values[i, j] >= first
            checked += 1
        empty = series["count"].values[i] == 0
        assert (series["t_range"].values[i][empty] == 0).all()
        assert np.isnat(start.values[i][empty]).all()
    assert checked > 40
    raw["output"].pop("windowing")
    raw["aggregation"]["variables"]["h_tdigest"]["timed"] = False
    with pytest.raises(ConfigError, match="time_range reads its source"):
        load_config(raw)


def test_a_cluster_run_writes_the_same_timed_leaves_and_records(tmp_path, photons, worker_process):
    import json

    cfg = config(delta=100_000)
    direct = write(photons, cfg, tmp_path / "direct", chunk=25_000)
    summary = zagg.run(
        cfg.raw,
        store=str(tmp_path / "run"),
        source=photons.chunk({"photon": 25_000}),
        scheduler=worker_process,
        progress=False,
    )
    key = {(r["shard_id"], r["window"]): r["content_hashes"] for r in direct.records}
    assert key == {(r["shard_id"], r["window"]): r["content_hashes"] for r in summary.records}

    def records(records):
        return {
            (r["shard_id"], r["window"]): {
                k: v for k, v in r["temporal"].items() if k != "generated_at"
            }
            for r in records
        }

    assert records(direct.records) == records(summary.records)
    a = json.loads((tmp_path / "direct" / "coverage.moc").read_text())["temporal"]
    b = json.loads((tmp_path / "run" / "coverage.moc").read_text())["temporal"]
    assert a["shards"] == b["shards"] and a["counts"] == b["counts"]


def test_mortie_toc_vectors_the_records_rest_on():
    t0 = int(mortie.from_datetime64(np.array(["2019-06-01T12:00"], "datetime64[ns]"))[0])
    assert t0 == 5346216018000000000
    a, b = mortie.time2toc(np.array([t0, t0 + 10**9], np.uint64))
    joined = mortie.toc_merge(np.array([a], np.uint64), np.array([b], np.uint64))
    lo, hi = mortie.toc2time(joined)
    assert (int(lo[0]), int(hi[0])) == (5346216017641078784, 5346216019788562432)
    assert mortie.toc_merge(np.array([a], np.uint64), np.array([a], np.uint64))[0] == a
    # the gps clock reaches the same word without the leap table
    w = config().output.windowing
    t = (np.datetime64("2019-06-01T12:00") - np.datetime64("2018-01-01")) / np.timedelta64(1, "s")
    assert int(toc.instants(w, [t + 18])[0][0]) == t0


def test_bucket_words_span_their_bucket_and_counts_coarsen_to_the_cap():
    from zagg.windows.record import bucket_words, capped

    b = np.array([7, 8, 1000], np.int64)
    lo, hi = mortie.toc2time(bucket_words(b, 24))
    assert (lo == b.astype(np.uint64) << np.uint64(39)).all()
    assert (hi == (b.astype(np.uint64) + np.uint64(1)) << np.uint64(39)).all()
    # 600 buckets two apart: still 600 at order 23 (each its own parent), 300 at order 22
    buckets = np.arange(0, 1200, 2, dtype=np.int64)
    got, counts, order = capped(buckets, np.ones(600, np.int64))
    assert order == 22
    assert got.tolist() == list(range(300)) and counts.tolist() == [2] * 300
    same, kept, o = capped(buckets[:512], np.ones(512, np.int64))  # at the cap: unchanged
    assert o == 24 and same.tolist() == buckets[:512].tolist() and kept.sum() == 512


def test_unknown_revisions_of_the_root_objects_are_kept():
    from zagg.hive.rootsection import compose_cover, compose_section

    future = {"spec": "zagg-coverage-toc/9", "shards": {"1": "5"}}
    mine = {
        "spec": "zagg-coverage-toc/1",
        "fields": ["h"],
        "shards": {"2": "7"},
        "cover": "zagg-coverage-toc-cover/1",
    }
    assert compose_section(future, mine) is future
    assert (
        compose_cover({"spec": "zagg-coverage-toc-cover/7"}, {"fields": [], "shards": {}}, 8)
        is None
    )
    # a standing section at this revision unions its shards with this run's
    standing = {
        "spec": "zagg-coverage-toc/1",
        "fields": ["g"],
        "shards": {"1": "5"},
        "counts": {"obs_total": 3},
    }
    out = compose_section(standing, mine)
    assert out["shards"] == {"1": "5", "2": "7"} and out["fields"] == ["g", "h"]
    assert "counts" not in out  # never summed across runs


def test_rows_tying_on_mean_and_weight_are_ordered_by_their_words():
    from zagg.reducers.timed import order_ties

    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 40, 200)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    seg = np.repeat(np.arange(sizes.size), sizes)
    means = np.sort(rng.integers(0, 6, offsets[-1]).astype(np.float32) + seg * 10)  # ties
    weights = np.ones(means.size, np.float32)
    weights[rng.random(means.size) < 0.3] = 2
    order = np.lexsort([weights, means])
    means, weights = means[order], weights[order]
    locs = rng.integers(1, 4, means.size).astype(np.uint64)
    times = rng.integers(1, 1000, means.size).astype(np.uint64)
    got_locs, got_times = order_ties(means, weights, offsets, [locs, times])
    # the reference: every row sorted by (cell, mean, weight, location word, time word)
    ref = np.lexsort([times, locs, weights, means, seg])
    np.testing.assert_array_equal(got_locs, locs[ref])
    np.testing.assert_array_equal(got_times, times[ref])
    assert not np.array_equal(got_times, times)  # there were ties to order
