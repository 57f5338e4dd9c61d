"""A swept store: every level against a direct aggregation, moczarr, and the sweep's rules."""

import copy
import json
import os
import shutil
import warnings

import numpy as np
import pytest
import yaml

import zagg
from zagg.hive import artifact
from zagg.kernels import composition
from zagg.pyramid import lease
from zagg.pyramid.sweep import sweep
from zagg.read.levels import levels, open_level, open_pyramid
from zagg.sources.synthetic import synthetic_photons

P, CI, C = 6, 8, 11  # shards of order 6, leaf resolution 8 (d = 2), cells of order 11
STRATA = yaml.safe_load(open("configs/atl03_strata.yaml"))


def config(p=P, ci=CI, c=C, pyramid=None):
    raw = copy.deepcopy(STRATA)
    raw["aggregation"]["variables"].update(
        {
            "h_sum": {"function": "sum", "source": "h_ph"},
            "h_min": {"function": "min", "source": "h_ph"},
            "h_max": {"function": "max", "source": "h_ph"},
            "h_mean": {"function": "mean", "source": "h_ph"},
        }
    )
    raw["output"]["grid"] = {"parent_order": p, "chunk_inner": ci, "child_order": c}
    if pyramid is not None:
        raw["output"]["pyramid"] = pyramid
    return raw


@pytest.fixture(scope="module")
def points():
    """100 short passes over an 8° x 4° box; heights on a 1/64 m grid, so every sum of them
    (and of sums of them) is exact in float64 and any fold order gives the same bytes."""
    ds = synthetic_photons(60_000, (-104, -77, -96, -73), seed=3, chunk_size=600)
    return ds.assign(h_ph=(np.round(ds.h_ph * 64) / 64).astype("float32")).persist()


@pytest.fixture(scope="module")
def unswept(points, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("pyr") / "unswept")
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config())), store)
    return store


@pytest.fixture(scope="module")
def store(unswept, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pyr") / "swept")
    shutil.copytree(unswept, path)
    summary = sweep(path)
    assert summary.folded == summary.nodes > 0 and summary.skipped == 0
    return path


def manifest(store):
    with open(os.path.join(store, "morton_hive.json")) as f:
        return json.load(f)


def direct(points, r):
    """The points aggregated straight at cell order ``r`` (no pyramid)."""
    cfg = zagg.load_config(config(p=min(P, r), ci=r, c=r, pyramid=False))
    return zagg.aggregate(points, cfg).compute()


def level_orders(store):
    return [r for r, e in levels(manifest(store)).items() if e["artifact"] != "source"]


def listing(store):
    out = {}
    for dirpath, _dirs, files in os.walk(store):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            out[os.path.relpath(full, store)] = (st.st_mtime_ns, st.st_size)
    return out


def overviews(store):
    return sorted(
        os.path.relpath(os.path.join(d, "all.zarr"), store)
        for d, dirs, _ in os.walk(store)
        if "all.zarr" in dirs
    )


# -- values --------------------------------------------------------------------------------
def test_the_manifest_lists_every_order_down_to_zero(store):
    m = manifest(store)
    assert [e["node"] for e in m["pyramid"]["overviews"]] == list(range(P, -1, -1))
    assert level_orders(store) == [8, 7, 6, 5, 4, 3, 2]
    actual = {e["node"]: e.get("actuals") for e in m["pyramid"]["overviews"]}
    assert actual[P] == {"regime": "leaf-column", "merges_from_raw": 1}
    assert [actual[k]["merges_from_raw"] for k in range(P - 1, -1, -1)] == [2, 2, 3, 4, 5, 6]
    assert [actual[k]["regime"] for k in range(P - 1, -1, -1)] == ["stage-gather"] * 2 + [
        "stage-merge"
    ] * 4


@pytest.mark.parametrize("r", [8, 7, 6, 5, 4, 3, 2])
def test_exact_fields_equal_a_direct_aggregation_byte_for_byte(store, points, r):
    ours, ref = open_level(store, r).compute(), direct(points, r)
    assert ours.sizes["cells"] > 0
    np.testing.assert_array_equal(ours["morton"].values, ref["morton"].values)
    for name in ("count", "h_sum", "h_min", "h_max"):
        a, b = ours[name].values, ref[name].values
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes(), name
    assert "h_mean" not in ours  # class none: native resolution only


def _raw_quantiles(points, r, q):
    from zagg import grid

    lat, lon, h = (np.asarray(points[v].values) for v in ("lat_ph", "lon_ph", "h_ph"))
    ok = np.isfinite(lat) & np.isfinite(h)
    words, _ = grid.cell_words(lat[ok], lon[ok], r)
    order = np.argsort(words, kind="stable")
    w, v = words[order], h[ok][order]
    cells, start = np.unique(w, return_index=True)
    return cells, [np.quantile(part, q, method="hazen") for part in np.split(v, start[1:])]


@pytest.mark.parametrize("r", [8, 5, 2])
def test_digest_levels_hold_exact_weights_and_close_quantiles(store, points, r):
    ours = open_level(store, r).compute()
    weights = [np.frombuffer(p, "<f4").reshape(-1, 2)[:, 1].sum() for p in ours["h_tdigest"].values]
    np.testing.assert_array_equal(np.asarray(weights), ours["count"].values.astype("f4"))
    q = [0.1, 0.5, 0.9]
    cells, raw = _raw_quantiles(points, r, q)
    np.testing.assert_array_equal(cells, ours["morton"].values)
    est = zagg.quantile(ours, "h_tdigest", q).values
    spread = (ours["h_max"].values - ours["h_min"].values)[:, None]
    # stated tolerance at the default overview_delta 128 (up to about 177 centroids a cell,
    # merged 1-7 times): every estimate within 3 % of its cell's value range, the median within 0.2 %
    err = np.abs(est - np.asarray(raw))
    assert np.all(err <= 0.03 * spread + 1e-3)
    assert np.median(err / np.maximum(spread, 1e-3)) <= 0.002


@pytest.mark.parametrize("r", [8, 7, 5])  # a column group folded from raw, two fold levels
def test_digest_levels_hold_the_direct_digests_budget_and_accuracy(store, points, r):
    """Every cell whose digest compresses (at least twice overview_delta points) holds
    exactly the centroids a digest built from its raw points under the pyramid's size law
    at overview_delta 128 holds (more than the 65-70 of a digest at 128), and over 99
    quantiles its median error (relative to each cell's range) is within 1.5x that direct
    digest's (the stated tolerance for a fold of folds)."""
    from zagg.kernels import fold, tdigest

    q = np.linspace(0.01, 0.99, 99)
    ours = open_level(store, r).compute()
    cells, raw = _raw_values(points, r)
    np.testing.assert_array_equal(cells, ours["morton"].values)
    big = [i for i, values in enumerate(raw) if values.size >= 256]
    assert len(big) >= 5
    errors = {"fold": [], "direct": []}
    for i in big:
        rows = np.frombuffer(ours["h_tdigest"].values[i], "<f4").reshape(-1, 2)
        direct = tdigest.build(raw[i], [0, raw[i].size], fold.compression(raw[i].size, 128))
        assert len(rows) == direct[0].size > 70  # the law's budget, no more and no less
        exact = np.quantile(raw[i], q, method="hazen")
        for name, digest in (("fold", rows), ("direct", np.c_[direct[0], direct[1]])):
            errors[name].append(np.abs(tdigest.quantile(digest, q) - exact) / np.ptp(raw[i]))
    fold, direct = (np.median(np.concatenate(errors[k])) for k in ("fold", "direct"))
    assert fold <= 1.5 * direct


def _raw_values(points, r):
    """The cells at order ``r`` holding finite heights, and each one's heights."""
    from zagg import grid

    lat, lon, h = (np.asarray(points[v].values) for v in ("lat_ph", "lon_ph", "h_ph"))
    ok = np.isfinite(lat) & np.isfinite(h)
    words, _ = grid.cell_words(lat[ok], lon[ok], r)
    order = np.argsort(words, kind="stable")
    cells, start = np.unique(words[order], return_index=True)
    return cells, np.split(h[ok][order].astype(np.float64), start[1:])


@pytest.mark.parametrize("r", [8, 6, 4, 2])
def test_composition_presence_is_exact_and_lanes_within_the_kway_bound(store, points, r):
    ours, ref = open_level(store, r).compute(), direct(points, r)
    lanes = composition.unpack(ours["composition"].values).astype(int)
    truth = composition.unpack(ref["composition"].values).astype(int)
    np.testing.assert_array_equal(lanes > 0, truth > 0)
    mfr = levels(manifest(store))[r]
    k = mfr["order"]
    entry = {e["node"]: e for e in manifest(store)["pyramid"]["overviews"]}[k]
    depth = entry["actuals"]["merges_from_raw"]
    # one re-quantization per fold: within depth + 1 lane steps of the one-pass word
    assert np.abs(lanes - truth).max() <= depth + 1


def test_signal_digest_weights_are_the_composition_divisor(store):
    ours = open_level(store, 5).compute()
    n = [
        np.frombuffer(p, "<f4").reshape(-1, 2)[:, 1].sum() if p else 0
        for p in ours["h_tdigest_signal"].values
    ]
    has_word = ours["composition"].values != 0
    np.testing.assert_array_equal(has_word, np.asarray(n) > 0)
    locs = ours["h_tdigest_signal_locations"].values
    rows = [len(np.frombuffer(p, "<f4")) // 2 for p in ours["h_tdigest_signal"].values]
    assert [len(w) for w in locs] == rows  # one location word per centroid, row-aligned


def test_quantile_and_plot_map_at_a_level(store):
    ds = open_level(store, 6)
    med = zagg.quantile(ds, "h_tdigest", 0.5)
    assert med.sizes["cells"] == ds.sizes["cells"] and np.isfinite(med.values).all()
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fig = zagg.plot_map(ds, "count")
    assert fig is not None


def test_open_pyramid_is_a_tree_of_every_level(store):
    tree = open_pyramid(store)
    assert list(tree.children) == ["o11", "o8", "o7", "o6", "o5", "o4", "o3", "o2"]
    total = int(tree["o11"].ds["count"].sum())
    for name in tree.children:
        assert int(tree[name].ds["count"].sum()) == total


@pytest.mark.parametrize("r", [8, 7, 5])  # a column level, and overviews above and below p
def test_a_region_subsets_a_level(store, r):
    whole = open_level(store, r).compute()
    part = open_level(store, r, bbox=(-104, -77, -100, -73)).compute()
    assert 0 < part.sizes["cells"] < whole.sizes["cells"]
    at = np.searchsorted(whole["morton"].values, part["morton"].values)
    np.testing.assert_array_equal(whole["morton"].values[at], part["morton"].values)
    assert whole["count"].values[at].tobytes() == part["count"].values.tobytes()


# -- moczarr reads it ----------------------------------------------------------------------
def test_moczarr_reads_every_level_with_our_values(store):
    moczarr = pytest.importorskip("moczarr")
    for r in level_orders(store):
        ours = open_level(store, r).compute()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = moczarr.open_level(store, r).compute()
        keep = theirs["count"].values > 0
        np.testing.assert_array_equal(theirs["morton"].values[keep], ours["morton"].values)
        for name in ("count", "h_sum", "h_min", "h_max", "composition"):
            assert theirs[name].values[keep].tobytes() == ours[name].values.tobytes(), (r, name)
        for name in ("h_tdigest", "h_tdigest_signal"):
            got = [bytes(v or b"") for v in theirs[name].values[keep]]
            assert got == [bytes(v) for v in ours[name].values], (r, name)


def test_moczarr_verifies_every_overview_and_column(store):
    moczarr = pytest.importorskip("moczarr")
    from moczarr.stats import verify_overview_arrays

    nodes = [rel.split("/all.zarr")[0].replace("/", "") for rel in overviews(store)]
    assert nodes
    for node in nodes:
        out = verify_overview_arrays(store, node)
        assert out["match"] is True and out["combined_match"] is True, node
    columns = list(moczarr.walk_columns(store))
    assert len(columns) == len(zagg.hive.walk_leaves(store)) > 1
    for rel in columns:
        stamp = moczarr.read_commit(store, rel)
        assert moczarr.hash_arrays(store, rel) == stamp["content_hashes"]["arrays"]
        with open(os.path.join(store, artifact.sidecar_key(rel))) as f:
            assert json.load(f)["content_hashes"] == stamp["content_hashes"]


def test_moczarr_open_pyramid(store):
    moczarr = pytest.importorskip("moczarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = moczarr.open_pyramid(store)
    assert {f"o{r}" for r in level_orders(store)} <= set(tree.children)


# -- the sweep -----------------------------------------------------------------------------
def test_a_second_sweep_writes_no_object(store):
    before = listing(store)
    summary = sweep(store)
    assert summary.folded == 0 and summary.objects_written == 0
    assert listing(store) == before  # the lease came and went
    assert not os.path.exists(os.path.join(store, lease.LEASE_KEY))


def test_tuple_width_changes_no_bytes(store, unswept, tmp_path):
    other = str(tmp_path / "w1")
    shutil.copytree(unswept, other)
    sweep(other, tuple_width=1)
    for rel in overviews(store):
        a = artifact.stamped_attrs(zagg.hive.StoreRoot(store), rel, "overview")
        b = artifact.stamped_attrs(zagg.hive.StoreRoot(other), rel, "overview")
        assert (
            a["morton_hive_commit"]["content_hashes"] == b["morton_hive_commit"]["content_hashes"]
        ), rel
    assert overviews(store) == overviews(other)


def test_rewriting_one_leaf_refolds_exactly_its_ancestors(store, points, tmp_path):
    path = str(tmp_path / "rewrite")
    shutil.copytree(store, path)
    ds = zagg.aggregate(points, zagg.load_config(config())).compute()
    sid = ds.attrs["zagg"]["shards"][0]
    n = ds.attrs["zagg"]["shard_cells"][0]
    one = ds.isel(cells=slice(0, n)).copy(deep=True)
    one["count"].values[0] += 1000  # an edited leaf: its column changes, its hashes move
    zagg.to_hive(one, path)
    summary = sweep(path)
    refolded = sorted(r["node"] for r in summary.records)
    ancestors = sorted(sid[: (1 if sid.startswith("-") else 0) + 1 + k] for k in range(P))
    assert refolded == ancestors
    total = int(open_level(path, 2)["count"].sum())
    assert total == int(ds["count"].sum()) + 1000


def test_a_live_lease_refuses_a_second_sweep_and_a_stale_one_is_claimed(store, tmp_path):
    root = zagg.hive.StoreRoot(store)
    held = lease.acquire(root, "stage-20260101T000000Z-aaaaaa")
    try:
        with pytest.raises(lease.SweepRefused, match="stage-20260101T000000Z-aaaaaa"):
            sweep(store)
    finally:
        held.release()
    stale = dict(held.payload, heartbeat_at="2020-01-01T00:00:00+00:00", ttl_s=60)
    root.write_json(lease.LEASE_KEY, stale)
    summary = sweep(store)
    assert summary.claimed_from == "stage-20260101T000000Z-aaaaaa"
    assert not root.exists(lease.LEASE_KEY)


def test_two_concurrent_acquires_on_s3_admit_one(moto_s3):
    options, fs = moto_s3
    fs.mkdir("pyramid-lease")
    root = zagg.hive.StoreRoot("s3://pyramid-lease/store", options)
    first = lease.acquire(root, "stage-a")
    with pytest.raises(lease.SweepRefused, match="'stage-a' holds this store"):
        lease.acquire(root, "stage-b")
    first.release()
    lease.acquire(root, "stage-c").release()


def test_a_crash_leaves_debris_readers_skip_and_the_next_sweep_heals(store, tmp_path):
    path = str(tmp_path / "crash")
    shutil.copytree(store, path)
    rel = [o for o in overviews(path) if o.count("/") == 4][0]  # an order-3 overview
    doc_path = os.path.join(path, rel, "zarr.json")
    with open(doc_path) as f:
        doc = json.load(f)
    good = open_level(store, 5).compute()
    del doc["attributes"]["morton_hive_commit"]  # the stamp never landed
    with open(doc_path, "w") as f:
        json.dump(doc, f)
    partial = open_level(path, 5).compute()
    assert partial.sizes["cells"] < good.sizes["cells"]
    stale = {
        "spec": lease.LEASE_SPEC,
        "run_id": "stage-dead",
        "scope": None,
        "acquired_at": "2020-01-01T00:00:00+00:00",
        "heartbeat_at": "2020-01-01T00:00:00+00:00",
        "ttl_s": 900,
        "claimed_from": None,
    }
    zagg.hive.StoreRoot(path).write_json(lease.LEASE_KEY, stale)
    summary = sweep(path)  # claims the crashed sweep's lease, refolds the debris node
    assert summary.claimed_from == "stage-dead"
    node = rel.rsplit("/", 1)[0].replace("/", "")
    assert sorted(r["node"] for r in summary.records) == [node[:i] for i in range(2, 6)]
    healed = open_level(path, 5).compute()
    assert healed["count"].values.tobytes() == good["count"].values.tobytes()


def test_deleting_every_overview_leaves_leaf_reads_unchanged(store, tmp_path):
    path = str(tmp_path / "noov")
    shutil.copytree(store, path)
    before = zagg.open_hive(path).compute()
    for rel in overviews(path):
        shutil.rmtree(os.path.join(path, rel))
        os.remove(os.path.join(path, artifact.sidecar_key(rel)))
    after = zagg.open_hive(path).compute()

    def attrs(ds):  # NaN fills compare as text
        return json.dumps(ds.attrs, sort_keys=True, default=repr)

    assert attrs(before) == attrs(after) and list(before.variables) == list(after.variables)
    for name, var in before.variables.items():
        a, b = var.values, after[name].values
        if a.dtype == object:
            assert [np.asarray(x).tobytes() for x in a] == [np.asarray(x).tobytes() for x in b]
        else:
            assert a.tobytes() == b.tobytes(), name
    with pytest.raises(ValueError, match="zagg sweep"):
        open_level(path, 4)
    assert sweep(path).folded == len(overviews(store))


def test_scope_limits_the_refolded_nodes(store, tmp_path):
    path = str(tmp_path / "scope")
    shutil.copytree(store, path)
    for rel in overviews(path):
        shutil.rmtree(os.path.join(path, rel))
    first = overviews(store)[-1].split("/all.zarr")[0].replace("/", "")
    summary = sweep(path, scope=[first])
    written = {r["node"] for r in summary.records}
    assert first in written
    assert all(n.startswith(first) or first.startswith(n) for n in written)


def test_a_missing_word_is_demoted_and_recorded(unswept, tmp_path):
    path = str(tmp_path / "demoted")
    shutil.copytree(unswept, path)
    col = sorted(
        os.path.relpath(os.path.join(d, "all.pyramid.zarr"), path)
        for d, dirs, _ in os.walk(path)
        if "all.pyramid.zarr" in dirs
    )[0]
    for r in range(P, CI + 1):
        shutil.rmtree(os.path.join(path, col, str(r), "composition"))
    sweep(path)
    parent = col.rsplit("/", 2)[0] + "/all.zarr"
    block = artifact.stamped_attrs(zagg.hive.StoreRoot(path), parent, "overview")[
        artifact.OVERVIEW_ATTR
    ]
    [rec] = block["demotions"]
    assert rec["field"] == "composition" and rec["reason"] == "word-missing"
    assert rec["contributors"] == 1 and rec["of"] == "h_tdigest_signal" and rec["cells"] > 0
    others = [
        o
        for o in overviews(path)
        if not parent.startswith(o.rsplit("/", 1)[0] + "/") and o != parent
    ]
    for rel in others:  # a level whose children all carry the word stays quiet
        attrs = artifact.stamped_attrs(zagg.hive.StoreRoot(path), rel, "overview")
        assert "demotions" not in attrs[artifact.OVERVIEW_ATTR], rel


def test_sweep_refuses_a_store_without_a_ladder(points, tmp_path):
    path = str(tmp_path / "off")
    zagg.to_hive(zagg.aggregate(points, zagg.load_config(config(pyramid=False))), path)
    assert not any("pyramid" in d for d, _, _ in os.walk(path))
    with pytest.raises(ValueError, match="declares no zagg-pyramid/2 ladder"):
        sweep(path)


def test_a_foreign_stamp_written_after_admission_aborts_loudly(store, tmp_path):
    from zagg.pyramid.ladder import ForeignStamp

    path = str(tmp_path / "foreign")
    shutil.copytree(store, path)
    rel = [o for o in overviews(path) if o.count("/") == 1][0]
    doc_path = os.path.join(path, rel, "zarr.json")
    with open(doc_path) as f:
        doc = json.load(f)
    doc["attributes"]["morton_hive_commit"].update(
        run_id="stage-29990101T000000Z-cccccc", written_at="2999-01-01T00:00:00+00:00"
    )
    doc["attributes"]["zagg_overview"]["generation"]["n_leaves"] = -1  # due for a refold
    with open(doc_path, "w") as f:
        json.dump(doc, f)
    with pytest.raises(ForeignStamp, match="stage-29990101T000000Z-cccccc"):
        sweep(path)
    assert not os.path.exists(os.path.join(path, lease.LEASE_KEY))  # released on failure


@pytest.mark.parametrize("r", [P, P + 1])
def test_moczarr_column_groups_equal_the_gathered_overviews(store, r):
    """Column groups inside the footprint are what the gather levels concatenate: moczarr's
    column reader and our overview level hold the same bytes."""
    pytest.importorskip("moczarr")
    from moczarr.level import open_column_order

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = open_column_order(store, manifest(store), r).compute()
    ours = open_level(store, r).compute()
    keep = theirs["count"].values > 0
    np.testing.assert_array_equal(theirs["morton"].values[keep], ours["morton"].values)
    for name in ("count", "h_sum", "h_min", "composition"):
        assert theirs[name].values[keep].tobytes() == ours[name].values.tobytes(), name
    assert [bytes(v or b"") for v in theirs["h_tdigest"].values[keep]] == [
        bytes(v) for v in ours["h_tdigest"].values
    ]


def test_every_column_is_the_direct_fold_of_its_leaf(store):
    from pathlib import Path

    from test_pyramid_run import assert_columns_are_the_direct_fold_of_their_leaves

    assert assert_columns_are_the_direct_fold_of_their_leaves(Path(store)) > 0


def test_a_child_restamped_in_the_same_second_by_another_run_forces_a_parent_refold(
    store, tmp_path
):
    path = str(tmp_path / "runids")
    shutil.copytree(store, path)
    child = [o for o in overviews(path) if o.count("/") == 3][0]  # an order-2 overview
    doc_path = os.path.join(path, child, "zarr.json")
    with open(doc_path) as f:
        doc = json.load(f)
    # same leaves, same second, same bytes: only the run id that stamped it differs
    doc["attributes"]["morton_hive_commit"]["run_id"] = "stage-20200101T000000Z-dddddd"
    with open(doc_path, "w") as f:
        json.dump(doc, f)
    summary = sweep(path)
    node = child.rsplit("/", 1)[0].replace("/", "")
    assert sorted(r["node"] for r in summary.records) == [node[:2], node[:3]]
    parent = artifact.stamped_attrs(
        zagg.hive.StoreRoot(path), overviews(path)[0].split("/")[0] + "/all.zarr", "overview"
    )
    assert "stage-20200101T000000Z-dddddd" in json.dumps(parent)
