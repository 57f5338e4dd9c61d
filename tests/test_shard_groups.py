"""Runs in shard groups: a run whose partials would pass its memory budget is read one group
of shards after another, and writes the same leaves, columns and overviews as one pass."""

import json
import shutil
import subprocess
import sys

import h5py
import moczarr
import numpy as np
import pytest
import yaml
from builders import (
    IN_PROCESS,
    atl03_source,
    fields,
    grid_orders,
    pipeline_config,
    synthetic_source,
)

import zagg
from zagg import grid as G
from zagg.config.model import ConfigError, load_config
from zagg.config.store import StoreSpec
from zagg.hive.semantic import semantic_hash
from zagg.pipeline.run import run
from zagg.pipeline.stream import cut_groups
from zagg.sources.readplan import ReadPlan, ShardCover, needed_rows
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -76.0, -99.8, -75.0)
P, C = 10, 15
BUDGET = "4MiB"  # far below what these granules' partials hold: several groups


def config(location, store, **source):
    variables = fields("count", "h_tdigest", "h_min")
    return pipeline_config(
        atl03_source(location, confidence=2, read_plan="atl03", **source),
        variables,
        grid_orders(P, C),
        name="ATL03",
        version="006",
        store=store,
    )


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    """Three granules; in the first, some segments lose their reference point (their
    photons cannot be placed by the index) and some name no photon (their rows are named
    by no segment): every group must still find those rows."""
    d = tmp_path_factory.mktemp("group-granules")
    paths = write_granules(d, 3, product="ATL03", points_per_granule=200_000, region=REGION, seed=5)
    with h5py.File(paths[0], "r+") as f:
        geo = f["gt1l/geolocation"]
        for name in ("reference_photon_lat", "reference_photon_lon"):
            values = geo[name][...]
            values[200:260] = geo[name].attrs.get("_FillValue", np.nan)
            geo[name][...] = values
        cnt = f["gt2r/geolocation/segment_ph_cnt"][...]
        cnt[400:430] = 0
        f["gt2r/geolocation/segment_ph_cnt"][...] = cnt
    return d


def leaves(summary) -> dict:
    return {r["shard_id"]: r["content_hashes"]["combined"] for r in summary.records}


@pytest.fixture(scope="module")
def one_pass(granules, tmp_path_factory):
    store = tmp_path_factory.mktemp("one-pass") / "store"
    summary = run(config(granules, store), memory_budget="off", progress=False, **IN_PROCESS)
    assert summary.shard_groups is None
    return store, summary


def test_a_run_in_shard_groups_writes_the_leaves_of_one_pass(granules, one_pass, tmp_path):
    base, whole = one_pass
    store = tmp_path / "groups"
    summary = run(config(granules, store), memory_budget=BUDGET, progress=False, **IN_PROCESS)
    groups = int(summary.shard_groups.split(":")[0])
    assert groups >= 3
    assert leaves(summary) == leaves(whole) and len(leaves(whole)) > groups
    assert summary.points == whole.points
    assert summary.cells_with_data == whole.cells_with_data
    assert summary.point_counts["keyed"] == whole.point_counts["keyed"]
    assert summary.granules == whole.granules == 3
    # the store root lists every leaf of every group; the pyramid is the one pass's
    ours, theirs = (moczarr.load_root_coverage(str(s)) for s in (store, base))
    assert ours.pop("generated_at") and theirs.pop("generated_at")
    assert ours == theirs
    for order in (P - 1, P - 4):
        ours = zagg.open_level(store, order).compute()
        theirs = zagg.open_level(base, order).compute()
        np.testing.assert_array_equal(ours.morton.values, theirs.morton.values)
        np.testing.assert_array_equal(ours["count"].values, theirs["count"].values)
        assert list(ours.h_tdigest.values) == list(theirs.h_tdigest.values)
    for leaf, _ in zagg.hive.walk_leaves(store):  # the independent reader agrees
        stamp = moczarr.read_commit(str(store), leaf)
        assert moczarr.hash_arrays(str(store), leaf) == stamp["content_hashes"]["arrays"]
    lines = "\n".join(summary.lines())
    assert f"shard groups    {groups}: one pass would hold about" in lines
    assert "over the memory budget of 4.00 MiB" in lines


def test_a_region_run_in_shard_groups_writes_the_leaves_of_its_one_pass(granules, tmp_path):
    bbox = "-100.2,-75.9,-99.8,-75.2"
    one = run(
        config(granules, tmp_path / "one"),
        bbox=bbox,
        memory_budget="off",
        progress=False,
        **IN_PROCESS,
    )
    grouped = run(
        config(granules, tmp_path / "groups"),
        bbox=bbox,
        memory_budget=BUDGET,
        progress=False,
        **IN_PROCESS,
    )
    assert grouped.shard_groups is not None
    assert leaves(grouped) == leaves(one)
    assert grouped.points == one.points


def test_a_damaged_chunk_leaves_its_granule_out_from_its_group_on(granules, one_pass, tmp_path):
    """A chunk that does not decompress is found by the group that reads it: that group
    and the later ones leave the granule out (on_error: skip); the leaves written before
    hold all its rows their shards needed, so each leaf is the one pass's with or
    without the granule, and never with it after a leaf without it."""
    d = tmp_path / "g"
    shutil.copytree(granules, d)
    names = sorted(p.name for p in d.glob("*.h5"))
    bad = d / names[2]
    with h5py.File(bad, "r") as f:
        dset = f["gt2l/heights/h_ph"]
        info = dset.id.get_chunk_info(dset.id.get_num_chunks() - 2)  # late along the track
    with open(bad, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 3)
        fh.write(b"\x13\x37" * 40)
    with pytest.warns(UserWarning, match="damaged and left out"):
        summary = run(
            config(d, tmp_path / "s", on_error="skip"),
            memory_budget=BUDGET,
            progress=False,
            **IN_PROCESS,
        )
    assert [f["granule"] for f in summary.failed_granules] == [bad.name]
    (tmp_path / "without").mkdir()
    for name in names[:2]:
        shutil.copy(d / name, tmp_path / "without" / name)
    without = leaves(
        run(
            config(tmp_path / "without", tmp_path / "w"),
            memory_budget="off",
            progress=False,
            **IN_PROCESS,
        )
    )
    with_all = leaves(one_pass[1])
    kinds = []
    for sid, h in sorted(leaves(summary).items(), key=lambda kv: G.from_decimal([kv[0]])[0]):
        assert h in (with_all.get(sid), without.get(sid)), sid
        kinds.append("with" if h == with_all.get(sid) != without.get(sid) else "same")
        if h == without.get(sid) != with_all.get(sid):
            kinds[-1] = "without"
    assert "without" in kinds
    first_without = kinds.index("without")
    assert "with" not in kinds[first_without:]


def test_rows_no_segment_names_are_read_by_every_cover():
    """Segments name rows 10..40 and 60..90 of 100: the rest can hold points anywhere, so
    a cover that reaches no segment still reads them."""
    plan = ReadPlan("segments", "lat", "lon", "beg", "cnt", pad=0, margin=0.0)  # paths unused here
    index = {
        "latitude": np.array([-75.5, -75.5]),
        "longitude": np.array([-100.0, -100.0]),
        "ph_index_beg": np.array([11, 61]),
        "segment_ph_cnt": np.array([30, 30]),
    }
    elsewhere = G.ancestor(G.cell_words(np.array([10.0]), np.array([10.0]), P)[0], P)
    far = ShardCover(elsewhere, P, 0.0)
    assert needed_rows(plan, far, 100, index) == [(0, 10), (40, 60), (90, 100)]
    near = ShardCover(G.cell_words(np.array([-75.5]), np.array([-100.0]), P)[0], P, 0.0)
    assert needed_rows(plan, near, 100, index) == [(0, 100)]


def test_groups_tile_the_shard_words_within_the_budget():
    words = np.array([10, 20, 30, 40, 50], np.uint64)
    rows = np.array([5, 5, 50, 5, 5])
    held = rows * 10
    groups = cut_groups(words, rows, held, budget=120)
    assert [g.shards for g in groups] == [(10, 20), (30,), (40, 50)]  # 500 alone: over it
    assert [g.span for g in groups] == [(0, 30), (30, 40), (40, None)]
    assert [g.held for g in groups] == [100, 500, 100]
    assert [g.rows for g in groups] == [10, 50, 10]


@pytest.mark.parametrize("value", ["lots", -1, True, [1]])
def test_a_bad_memory_budget_is_refused_naming_the_key(granules, value):
    raw = config(granules, "s")
    raw["output"]["memory_budget"] = value
    with pytest.raises(ConfigError, match=r"output\.memory_budget.*auto, off or a size"):
        load_config(raw)
    with pytest.raises(ConfigError, match=r"memory_budget.*auto, off or a size"):
        run(config(granules, "s"), memory_budget=value, progress=False)


def test_memory_budget_settings_read_as_said(granules):
    for value, budget in (("auto", None), ("off", 0), ("512MiB", 512 * 2**20), (4096, 4096)):
        raw = config(granules, "s")
        raw["output"]["memory_budget"] = value
        assert load_config(raw).output.memory_budget == budget


def test_the_command_line_takes_a_memory_budget(granules, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config(granules, str(tmp_path / "s"))))
    bad = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(path), "--memory-budget", "plenty"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--memory-budget" in bad.stderr and "auto, off" in bad.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(path), "--plan"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "memory          budget auto" in shown.stdout
    assert "cuts the shards into groups" in shown.stdout


def test_a_source_that_cannot_be_split_warns_naming_the_fix(tmp_path):
    raw = pipeline_config(
        synthetic_source(points=20_000, seed=1),
        fields("count", "h_tdigest"),
        grid_orders(6, 12),
        store=tmp_path / "s",
        memory_budget="64KiB",
    )
    with pytest.warns(UserWarning, match=r"over its memory budget.*data_source\.read_plan"):
        summary = run(raw, progress=False, **IN_PROCESS)
    assert summary.shard_groups is None and summary.points > 0


def test_a_store_made_while_the_read_plan_was_hashed_stays_the_same_store(granules, tmp_path):
    """``read_plan`` and ``reads`` say how points are fetched, not what they are, so they
    left the semantic hash; a store whose manifest hashed them (made before) is still
    this config's store, and its next run fills it under the hash it has."""
    store = tmp_path / "earlier"
    raw = config(granules, store)
    run(raw, bbox="-100.2,-75.9,-99.8,-75.8", progress=False, sweep=False, **IN_PROCESS)
    spec = StoreSpec.of(load_config(raw))
    core = dict(spec.core)
    core["data_source"] = {**core["data_source"], "read_plan": "atl03"}
    earlier = semantic_hash(core)
    assert earlier != spec.semantic_hash
    manifest = store / "morton_hive.json"
    recorded = json.loads(manifest.read_text())
    recorded["semantic_hash"] = earlier
    manifest.write_text(json.dumps(recorded))
    summary = run(raw, progress=False, sweep=False, **IN_PROCESS)
    assert summary.leaves_written > 0
    assert json.loads(manifest.read_text())["semantic_hash"] == earlier
    raw["aggregation"]["variables"]["count"]["where"] = "land_ice_conf >= 3"
    with pytest.raises(zagg.hive.ManifestConflictError, match="semantic_hash"):
        run(raw, progress=False, sweep=False, **IN_PROCESS)
