"""The Icechunk companion (spec §11): the whole store as one versioned xarray dataset of
virtual references, equal cell for cell to the hive's own levels."""

from __future__ import annotations

import os
import shutil

import dask
import numpy as np
import pytest
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source

icechunk = pytest.importorskip("icechunk")
xr = pytest.importorskip("xarray")

import mortie  # noqa: E402
from icechunk_checks import plain_open, repo_matches_hive  # noqa: E402

import zagg  # noqa: E402
from zagg.checks.validation import ConfigError  # noqa: E402
from zagg.config.model import load_config  # noqa: E402
from zagg.engine.aggregate import shard_collection  # noqa: E402
from zagg.hive.icechunk import IcechunkError, repo_storage  # noqa: E402
from zagg.hive.manifest import read_manifest  # noqa: E402
from zagg.hive.storage import StoreRoot  # noqa: E402
from zagg.hive.walk import walk_leaves, walk_windows  # noqa: E402
from zagg.pyramid.icechunk import commit, levels_of  # noqa: E402
from zagg.pyramid.icechunk_runs import summary_lines  # noqa: E402
from zagg.read.levels import open_level  # noqa: E402
from zagg.sources.synthetic import synthetic_photons  # noqa: E402

REGION = (-100.2, -75.6, -99.8, -75.4)
P, BASE, C = 8, 10, 13


def raw_config(**output):
    """Yearly windows of counts, sums, maxima and digests, with overviews from order 10."""
    return pipeline_config(
        synthetic_source("h_ph", "delta_time"),
        fields("count", "h_sum", "h_max", "h_tdigest"),
        grid_orders(P, C, inner=10),
        name="ICE",
        pyramid={"overviews": BASE},
        windowing=dict(YEARLY),
        **output,
    )


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(30_000, REGION, chunk_size=10_000, seed=3).compute()


def build(photons, store, storage_options=None, sweep=True):
    """The leaves (each with its ref carrier), the ladder unless ``sweep`` is false, and
    one commit of the repo."""
    from zagg.engine.write import write_shards

    cfg = load_config(raw_config())
    with dask.config.set(scheduler="sync"):
        write_shards(
            shard_collection(photons, cfg, chunk_size=15_000),
            store,
            storage_options=storage_options,
        )
    if sweep:
        zagg.sweep(store, storage_options=storage_options, icechunk=False)
    return commit(store, storage_options, run_id="test")


def assert_levels_equal(store, storage_options=None, orders=None):
    checked = repo_matches_hive(store, storage_options, orders)
    manifest = read_manifest(StoreRoot(store, storage_options))
    assert checked >= 2 * (len(orders or levels_of(manifest)) - 1)


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def base_values(store, photons_rows) -> dict:
    """The leaves' counts per window: {label: (nested ranks, counts)}."""
    out = {}
    for label in photons_rows:
        want = open_level(store, C, window=label).compute()
        nested = np.asarray(mortie.mort2healpix(want["morton"].values)[0], dtype=np.int64)
        out[label] = (nested, want["count"].values, [bytes(x) for x in want["h_tdigest"].values])
    return out


def test_every_level_of_the_repo_equals_open_level_cell_for_cell(tmp_path, photons):
    store = str(tmp_path / "store")
    first = build(photons, store)
    assert first.commits == ["init", "leaf"] and first.changed == first.objects > 0
    assert_levels_equal(store)
    # every leaf's and column's references came from the carrier its task wrote: the
    # commit read only the overviews, which the sweep wrote
    leaves = sum(len(v) for v in walk_windows(store).values())
    assert first.carriers == 2 * leaves and first.read == first.objects - first.carriers > 0
    # virtual references only: the repo holds no chunk bytes of its own
    repo_size = tree_bytes(os.path.join(store, "icechunk"))
    assert repo_size < 0.25 * (tree_bytes(store) - repo_size)
    chunks = os.path.join(store, "icechunk", "chunks")
    assert not os.path.isdir(chunks) or not os.listdir(chunks)
    # a second unchanged commit lands nothing
    again = commit(store, run_id="again")
    assert again.commits == [] and again.changed == 0 and again.snapshot == first.snapshot
    via = zagg.open_icechunk(store, 2)
    assert list(via["window"].values) == first.rows
    assert via.attrs["zagg_icechunk"]["snapshot"] == first.snapshot


def test_a_leaf_without_a_usable_carrier_is_read_from_its_objects(tmp_path, photons):
    """A carrier lost, or one describing an older write of its leaf: the commit reads that
    leaf's objects instead, and the repo is right all the same."""
    import json

    store = tmp_path / "store"
    build(photons, str(store), sweep=False)
    carriers = sorted(store.glob("**/icechunk_refs_*.json"))
    assert len(carriers) == sum(len(v) for v in walk_windows(str(store)).values())
    doc = json.loads(carriers[0].read_text())
    assert doc["spec"] == "zagg-icechunk-refs/1" and doc["checksum"] == "last_modified"
    assert {u["row"] for u in doc["units"]} == {carriers[0].stem.split("_")[-1]}
    carriers[0].unlink()
    doc = json.loads(carriers[1].read_text())
    doc["units"][0]["stamp"] = "2000-01-01T00:00:00Z"  # an older write of the leaf
    carriers[1].write_text(json.dumps(doc))
    shutil.rmtree(store / "icechunk")
    again = commit(str(store), run_id="again")
    assert again.carriers == 2 * (len(carriers) - 2) + 1  # the second one's column stands
    assert again.read == again.objects - again.carriers
    assert_levels_equal(str(store), orders=[C, 10])


def test_a_rewrite_commits_only_what_changed_and_old_snapshots_keep_reading(tmp_path, photons):
    store = str(tmp_path / "store")
    first = build(photons, store)
    label = first.rows[0]
    old_leaves = open_level(store, C, window=label).compute()
    nested = np.asarray(mortie.mort2healpix(old_leaves["morton"].values)[0], dtype=np.int64)
    keep = photons.isel(photon=slice(0, 20_000))
    second = build(keep, store)
    assert second.commits == ["leaf"] and 0 < second.changed <= second.objects
    assert_levels_equal(store)
    new = zagg.open_icechunk(store, 2)
    w = list(new["window"].values).index("all")
    assert int(new["count"].isel(window=w).sum()) == int(open_level(store, 2)["count"].sum())
    # the first snapshot still reads the leaves as they were (their versions are kept)
    old = zagg.open_icechunk(store, C, snapshot=first.snapshot)
    got = old["count"].isel(window=first.rows.index(label), cells=nested).values
    np.testing.assert_array_equal(got, old_leaves["count"].values)


def test_finalize_tags_each_run_and_the_tag_reads_that_runs_leaves(tmp_path, photons):
    from zagg.pyramid.icechunk_runs import finalize

    store = str(tmp_path / "store")
    first = build(photons, store, sweep=False)
    a, b = "a" * 32, "b" * 32
    done = finalize(store, run_id=a)
    assert done["tag"] == f"run-{a}" and done["tagged"] and done["retention_error"] is None
    rows = [r for r in first.rows if r != "all"]
    before = base_values(store, rows)
    build(photons.isel(photon=slice(5_000, 22_000)), store, sweep=False)  # every leaf written again
    finalize(store, run_id=b)
    after = base_values(store, rows)
    assert any(len(before[r][1]) != len(after[r][1]) for r in rows)  # the hive did change
    pinned = zagg.open_icechunk(store, C, tag=f"run-{a}")
    for w, label in enumerate(pinned["window"].values[: len(rows)]):
        nested, counts, digests = before[label]
        got = pinned.isel(window=w, cells=nested)
        np.testing.assert_array_equal(got["count"].values, counts)
        assert [bytes(x) for x in got["h_tdigest"].values] == digests
    assert_levels_equal(store, orders=[C])  # main reads the second run's hive
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(f"{store}/icechunk"))
    meta = repo.lookup_snapshot(repo.lookup_tag(f"run-{a}")).metadata
    assert meta["run_id"] == a and meta["zagg_version"] == zagg.__version__
    assert meta["semantic_hash"] == read_manifest(StoreRoot(store))["semantic_hash"]
    # zagg's default cut: one base manifest per order-2 cell
    assert (meta["commit"], meta["split_order"], meta["retain_runs"]) == ("leaf", 2, 0)
    # the finalize changes nothing a reader sees, and a second one writes nothing
    history = [s.id for s in repo.ancestry(branch="main")]
    again = finalize(store, run_id=b)
    assert again["tagged"] is False and again["snapshot"] == repo.lookup_tag(f"run-{b}")
    assert [s.id for s in repo.ancestry(branch="main")] == history


def test_retention_keeps_the_newest_runs_and_expires_exactly_the_older_snapshots(
    tmp_path, photons, capsys
):
    from zagg.cli.main import main
    from zagg.pyramid.icechunk_runs import finalize

    store = str(tmp_path / "store")
    repo_of = lambda: icechunk.Repository.open(  # noqa: E731
        icechunk.local_filesystem_storage(f"{store}/icechunk")
    )
    runs = [f"{i:032x}" for i in range(4)]
    pinned = {}
    for i, run in enumerate(runs):
        build(photons.isel(photon=slice(0, 30_000 - 4_000 * i)), store, sweep=False)
        if i == 3:
            repo = repo_of()
            older = {
                s.id
                for s in repo.ancestry(branch="main")
                if s.written_at < repo.lookup_snapshot(repo.lookup_tag(f"run-{runs[2]}")).written_at
                and s.parent_id is not None
            }
        done = finalize(store, run_id=run, retain_runs=2)
        pinned[run] = base_values(store, ["2021"])["2021"]
    repo = repo_of()
    # the two newest runs keep their tags; the snapshots older than the oldest kept run's
    # finalize are exactly the ones expired
    assert {t for t in repo.list_tags()} == {f"run-{runs[2]}", f"run-{runs[3]}"}
    assert done["tags_deleted"] == 1 and done["snapshots_expired"] == len(older) > 0
    kept = {s.id for s in repo.ancestry(branch="main")}
    assert not kept & older
    assert [s.message.split(" ")[0] for s in repo.ancestry(branch="main")] == [
        "finalize",
        "leaf",
        "finalize",
        "Repository",
    ]
    # zagg gc keeps the versions the kept run tags read, and removes the others
    assert main(["gc", store]) == 0
    out = capsys.readouterr().out
    assert "superseded version(s) kept for its snapshots" in out
    for run in runs[2:]:
        nested, counts, _ = pinned[run]
        got = zagg.open_icechunk(store, C, tag=f"run-{run}").isel(window=0, cells=nested)
        np.testing.assert_array_equal(got["count"].values, counts)
    # cutting to the newest run removes the tag of the one before and what only it read
    assert main(["gc", store, "--retain-runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "deleted 1 run tag(s) beyond the 1 newest" in out
    assert set(repo_of().list_tags()) == {f"run-{runs[3]}"}
    assert "removed 0 superseded" not in out
    nested, counts, _ = pinned[runs[3]]
    got = zagg.open_icechunk(store, C, tag=f"run-{runs[3]}").isel(window=0, cells=nested)
    np.testing.assert_array_equal(got["count"].values, counts)
    assert_levels_equal(store, orders=[C])


def test_the_manifest_split_is_recorded_used_and_only_ratchets_coarser(tmp_path, photons):
    from zagg.pyramid.icechunk_knobs import Settings
    from zagg.pyramid.icechunk_runs import finalize

    def manifests(store):
        return len(os.listdir(os.path.join(store, "icechunk", "manifests")))

    fine, coarse = str(tmp_path / "fine"), str(tmp_path / "coarse")
    for store in (fine, coarse):
        build(photons, store)
        shutil.rmtree(os.path.join(store, "icechunk"))
    one = commit(fine, settings=Settings(split_order=P))  # a manifest per leaf
    commit(coarse, settings=Settings(split_order=6, commit_order=6))  # one per order-6 cell
    assert manifests(fine) > manifests(coarse)
    block = plain_open(StoreRoot(coarse), "/").attrs["zagg_icechunk"]
    assert (block["split_order"], block["commit_order"], block["rows_per_manifest"]) == (6, 6, 1)
    # the base: chunk order 10, one order-6 cell per manifest; every other level the same
    # chunk count, but never more than its own chunk axis spans in one base cell
    assert block["levels"][str(C)]["split"] == {"chunks": 4**4, "order": 6, "rows": 1}
    assert block["levels"]["8"]["split"] == {"chunks": 4**4, "order": 2, "rows": 1}
    assert block["levels"]["3"]["split"] == {"chunks": 4, "order": 0, "rows": 1}
    assert plain_open(StoreRoot(fine), "/").attrs["zagg_icechunk"]["split_order"] == P
    # a finer split than the store's is not applied; a coarser one re-cuts, once
    finer = commit(coarse, settings=Settings(split_order=7, rows_per_manifest=2))
    assert finer.split_ratchet is None and len(finer.warnings) == 2
    recut = commit(coarse, settings=Settings(split_order=4, commit_order=4), run_id="r")
    assert recut.split_ratchet == "6->4" and recut.commits == ["split ratchet"]
    block = plain_open(StoreRoot(coarse), "/").attrs["zagg_icechunk"]
    assert (block["split_order"], block["rows_per_manifest"]) == (4, 1)
    assert block["levels"][str(C)]["split"] == {"chunks": 4**6, "order": 4, "rows": 1}
    done = finalize(coarse, run_id="c" * 32, rewrite_pending=recut.split_ratchet)
    assert done["rewrite_pending"] == {"from": 6, "to": 4}
    back = commit(coarse, settings=Settings(split_order=6))
    assert back.split_ratchet is None and back.warnings
    assert plain_open(StoreRoot(coarse), "/").attrs["zagg_icechunk"]["split_order"] == 4
    assert_levels_equal(coarse, orders=[C, 3])
    assert one.rows == ["2021", "2023", "all"]


def everything(store) -> dict[str, bytes]:
    """Every object of a local store, ``icechunk/`` included: key → bytes."""
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()}


def test_a_run_commits_the_repo_and_an_unchanged_rerun_writes_nothing(
    tmp_path, photons, worker_process
):
    store = tmp_path / "store"
    cfg = raw_config(store=str(store), sweep="stages")
    photons = photons.assign_attrs(granules=["granule-1"])  # an identity the gate compares
    one = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    assert one.icechunk["commits"] == ["init", "leaf"], one.icechunk
    assert one.sweep.icechunk["commits"][-1] == "node"  # after any new level groups
    closing = one.icechunk["finalize"]
    assert closing["tag"] == f"run-{one.run_id}" and closing["tagged"], closing
    # (the sweep's own init adds the overview levels' groups)
    line = f"icechunk        init, leaf, init, node; tagged run-{one.run_id}"
    assert summary_lines(one) == [line]
    assert_levels_equal(str(store))
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(store / "icechunk")))
    assert repo.lookup_tag(f"run-{one.run_id}") == repo.lookup_branch("main")
    before = everything(store)
    two = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    # every shard is current: no leaf is written, no overview refolded, no reference
    # renewed (the lifecycle touch leaves the objects the references checksum alone), and
    # the run is not tagged: the first run's tag reads the same snapshot
    assert two.records == [] and two.bytes_written == 0
    assert two.icechunk["commits"] == [] and two.icechunk["changed"] == 0, two.icechunk
    assert two.sweep.icechunk["commits"] == []
    assert two.icechunk["finalize"]["same_as"] == f"run-{one.run_id}"
    assert "tag" not in two.icechunk["finalize"]
    assert summary_lines(two) == [
        f"icechunk        nothing new; not tagged: nothing changed since run-{one.run_id}, "
        "whose tag reads this run's store"
    ]
    after = everything(store)
    assert sorted(after) == sorted(before)  # not one object added or removed
    assert [k for k in before if after[k] != before[k]] == []  # nor one changed
    assert commit(str(store)).commits == []
    assert_levels_equal(str(store))


def test_a_lost_commit_is_caught_up_by_the_next_one(tmp_path, photons):
    """A run killed after its leaves and before its commit: the next commit, whatever it
    writes, brings the repo to the hive."""
    store = str(tmp_path / "store")
    build(photons, store)
    shutil.rmtree(os.path.join(store, "icechunk"))
    late = commit(store, run_id="resumed")
    assert late.changed == late.objects
    assert_levels_equal(store)


def test_a_run_whose_region_holds_no_point_commits_nothing_and_fails_nothing(
    tmp_path, photons, worker_process
):
    """A region run that aggregates no point leaves a store with no object: the companion
    has nothing to index, so no repository is made and the summary reports no error."""
    store = tmp_path / "store"
    far = photons.isel(photon=slice(0, 0)).assign_attrs(granules=[])
    run = zagg.run(
        raw_config(store=str(store)), source=far, scheduler=worker_process, progress=False
    )
    assert run.records == [] and "error" not in (run.icechunk or {}), run.icechunk
    assert (
        icechunk.Repository.exists(icechunk.local_filesystem_storage(str(store / "icechunk")))
        is False
    )


def test_output_icechunk_false_writes_no_repo_and_bad_values_are_refused(
    tmp_path, photons, worker_process
):
    store = tmp_path / "off"
    cfg = raw_config(store=str(store), icechunk={"enabled": False, "retain_runs": 3})
    summary = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    assert summary.icechunk is None and not (store / "icechunk").exists()
    assert not list(store.glob("**/icechunk_refs*.json"))  # nor any carrier
    on = load_config(raw_config(icechunk={"retain_runs": 2, "split_order": 7}))
    assert on.output.icechunk is True and on.output.icechunk_settings.retain_runs == 2
    for bad, key in (
        ("yes", "output.icechunk"),
        ({"commit": "ladder"}, "output.icechunk.commit"),
        ({"split_order": P + 1}, "output.icechunk.split_order"),
        ({"commit_order": 7, "split_order": 6}, "output.icechunk.split_order"),
        ({"rows_per_manifest": 0}, "output.icechunk.rows_per_manifest"),
        ({"retain_runs": -1}, "output.icechunk.retain_runs"),
        ({"retain": 2}, "output.icechunk"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(raw_config(icechunk=bad))


def test_the_repo_on_the_local_s3_server_equals_open_level(photons, moto_s3):
    from zagg.pyramid.icechunk_runs import finalize

    options, fs = moto_s3
    fs.mkdir("ice-store")
    url = "s3://ice-store/prod"
    first = build(photons, url, options)
    assert first.commits == ["init", "leaf"]
    assert first.path == "s3://ice-store/prod/icechunk"
    assert first.carriers > 0 and first.read == first.objects - first.carriers
    assert_levels_equal(url, options)
    unchanged = commit(url, options)  # an object store's unchanged objects are not even read
    assert unchanged.commits == [] and unchanged.carriers == unchanged.read == 0
    done = finalize(url, options, run_id="d" * 32)
    assert done["tagged"] and done["tag"] == "run-" + "d" * 32
    assert finalize(url, options, run_id="d" * 32)["tagged"] is False
    again = build(photons.isel(photon=slice(0, 20_000)), url, options)
    assert again.changed > 0
    assert_levels_equal(url, options, orders=[C, 2])


#: two shards of order 8 the small synthetic run below fills, one per racing run
RACE_SHARDS = ("-512113221", "-512113222")


def race_config(path):
    """Two short tracks' points in two order-8 shards, without windows or pyramid."""
    import yaml

    cfg = pipeline_config(
        synthetic_source(points=20_000, seed=1, chunk_size=4_000, region=REGION),
        fields("count", "h_sum"),
        grid_orders(8, 12),
        name="RACE",
    )
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_two_runs_committing_at_once_both_land_on_main(tmp_path, worker_process):
    """Two ``zagg run`` processes into one store at once, each writing one shard: they
    race to create the repository, to init it, to commit their leaves and to close their
    runs. Whichever loses a race derives its commit again from the new tip and the hive,
    so main ends holding both runs' leaves."""
    import subprocess
    import sys

    cfg = race_config(tmp_path / "race.yaml")
    for attempt in range(3):
        store = tmp_path / f"store{attempt}"
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "zagg", "run", str(cfg), "--store", str(store)]
                + ["--scheduler", worker_process, "--shards", shard, "--quiet"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for shard in RACE_SHARDS
        ]
        outs = [r.communicate(timeout=600) for r in runs]
        for r, (out, err) in zip(runs, outs, strict=True):
            assert r.returncode == 0, err
            # tagged, or (when the other run's commit already took in its leaf) pointing
            # at the tag that reads its store; never an error
            line = next(x for x in out.splitlines() if x.startswith("icechunk "))
            assert "; tagged run-" in line or "not tagged: nothing changed since run-" in line
        leaves = {sid for _, sid in walk_leaves(store)}
        assert leaves == set(RACE_SHARDS)
        assert repo_matches_hive(str(store)) == 1
        base = zagg.open_icechunk(str(store))
        for sid in RACE_SHARDS:  # each run's leaf, read through main, is the hive's
            want = open_level(str(store), 12).compute()
            nested = np.asarray(mortie.mort2healpix(want["morton"].values)[0], dtype=np.int64)
            got = base["count"].isel(window=0, cells=nested).values
            np.testing.assert_array_equal(got, want["count"].values)
            assert int(want["count"].sum()) > 0, sid
        repo = icechunk.Repository.open(icechunk.local_filesystem_storage(f"{store}/icechunk"))
        assert 1 <= len([t for t in repo.list_tags() if t.startswith("run-")]) <= 2
        ledger = next(
            s.metadata["zagg_refs"]
            for s in repo.ancestry(branch="main")
            if "zagg_refs" in (s.metadata or {})
        )
        assert {k.split("|")[2] for k in ledger} == set(RACE_SHARDS)


def test_a_commit_that_loses_a_race_is_derived_again_from_the_new_tip(tmp_path, photons):
    """The retry path itself: a session opened before another writer's commit landed
    fails on the conflict, and the retry derives the commit again from the new tip and
    the hive as it then stands, keeping what the winner committed. Errors that are not a
    lost race are not retried; a race lost every time is one line."""
    from zagg.engine.write import write_shards
    from zagg.hive import icechunk as ic
    from zagg.pyramid.icechunk import RepoDocs, coordinate_chunk, retrying

    store = str(tmp_path / "store")
    build(photons.isel(photon=slice(0, 15_000)), store, sweep=False)  # run one, committed
    with dask.config.set(scheduler="sync"):  # run two's leaves: every shard written again
        write_shards(shard_collection(photons, load_config(raw_config()), chunk_size=15_000), store)
    repo = ic.open_repo(StoreRoot(store))
    tried = []

    def attempt():
        if not tried:
            stale = RepoDocs(repo.writable_session("main"))
            tried.append(commit(store, run_id="winner"))  # lands while `stale` is open
            stale.put_chunk("window_start/c/0", coordinate_chunk([]))
            stale.session.commit("stale")  # based on the old tip: a conflict
        tried.append("again")
        return commit(store, run_id="loser")

    got = retrying(attempt, "a test commit")
    winner = tried[0]
    assert tried[1:] == ["again"] and winner.commits == ["leaf"] and winner.changed > 0
    assert got.commits == [] and got.snapshot == winner.snapshot  # nothing left to commit
    assert [s.message for s in repo.ancestry(branch="main")][0] == "leaf winner"
    assert_levels_equal(store, orders=[C])

    calls = []

    def broken():
        calls.append(1)
        raise KeyError("not a race")

    with pytest.raises(KeyError):
        retrying(broken, "a broken commit")
    assert calls == [1]

    def always_lost():
        calls.append(1)
        stale, winner = (RepoDocs(repo.writable_session("main")) for _ in range(2))
        for docs in (winner, stale):
            docs.put_chunk("window_start/c/0", coordinate_chunk([len(calls)]))
            docs.session.commit("lost")

    calls.clear()
    with pytest.raises(ic.IcechunkError, match=r"^a lost commit lost 3 races to other writers"):
        retrying(always_lost, "a lost commit", tries=3)
    assert len(calls) == 3


def test_open_icechunk_without_the_extra_names_it_in_one_line(tmp_path, monkeypatch):
    import sys

    from zagg.errors import ZaggError

    monkeypatch.setitem(sys.modules, "icechunk", None)  # the package as if not installed
    with pytest.raises(ZaggError) as got:
        zagg.open_icechunk(str(tmp_path))
    assert str(got.value) == (
        "zagg.open_icechunk needs the icechunk package: pip install 'zagg[icechunk]'"
    )
    assert isinstance(got.value, ImportError)


def plain_copy(store: str, to) -> None:
    """Materialize main's tip of ``store``'s repo as a plain zarr v3 hierarchy at
    ``to/icechunk`` (every document and every chunk, the references resolved)."""
    from icechunk_checks import plain_session
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
    from zarr.storage import LocalStore

    source = plain_session(StoreRoot(store)).store
    target = LocalStore(str(to / "icechunk"))
    proto = default_buffer_prototype()

    async def copy():
        async for key in source.list():
            await target.set(key, await source.get(key, proto))

    sync(copy())


def test_a_plain_zarr_root_opens_with_the_same_levels_and_root_attrs(tmp_path, photons):
    store = str(tmp_path / "store")
    build(photons, store)
    plain = tmp_path / "plain"
    plain_copy(store, plain)
    assert not (plain / "icechunk" / "repo").exists() and (plain / "icechunk/zarr.json").exists()
    repo_root = zagg.open_icechunk(store).attrs["root_attrs"]
    assert set(repo_root) == {"zagg_icechunk", "zarr_conventions", "multiscales"}
    assert repo_root["multiscales"]["layout"][0]["asset"] == str(C)
    block = repo_root["zagg_icechunk"]
    for order in (C, 10, 3):
        via_repo = zagg.open_icechunk(store, order)
        via_zarr = zagg.open_icechunk(str(plain), order)
        assert via_zarr.attrs["root_attrs"] == repo_root
        assert via_zarr.attrs["zagg_icechunk"] == {**block, "snapshot": None}
        assert list(via_zarr.data_vars) == list(via_repo.data_vars)
        assert dict(via_zarr.sizes) == dict(via_repo.sizes)
        assert list(via_zarr["window"].values) == block["rows"]
        np.testing.assert_array_equal(via_zarr["window_start"], via_repo["window_start"])
        for w, label in enumerate(block["rows"]):
            if label == "all" and order >= 10:  # the leaves and columns are per window
                continue
            want = open_level(store, order, window=None if label == "all" else label).compute()
            nested = np.asarray(mortie.mort2healpix(want["morton"].values)[0], dtype=np.int64)
            got = via_zarr["count"].isel(window=w, cells=nested).values
            np.testing.assert_array_equal(got, want["count"].values)
    with pytest.raises(IcechunkError, match="plain zarr hierarchy"):
        zagg.open_icechunk(str(plain), tag="run-x")


@pytest.mark.parametrize(
    "name", ["with space", "hash#mark", "question?mark", "acc\u00e9nt", "pct%20"]
)
def test_a_store_path_with_characters_a_url_encodes_works_end_to_end(tmp_path, photons, name):
    store = str(tmp_path / name / "store")
    first = build(photons.isel(photon=slice(0, 10_000)), store, sweep=False)
    assert first.commits == ["init", "leaf"] and first.refs > 0
    assert_levels_equal(store, orders=[C])
    want = open_level(store, C, window="2021").compute()
    nested = np.asarray(mortie.mort2healpix(want["morton"].values)[0], dtype=np.int64)
    ds = zagg.open_icechunk(store)
    got = ds["count"].isel(window=first.rows.index("2021"), cells=nested).values
    np.testing.assert_array_equal(got, want["count"].values)
    assert int(want["count"].sum()) > 0


def test_a_store_path_icechunk_cannot_name_is_refused_before_anything_is_written(tmp_path, photons):
    store = tmp_path / "line\nbreak"
    with pytest.raises(IcechunkError, match="control character"):
        build(photons.isel(photon=slice(0, 5_000)), str(store), sweep=False)
    assert not (store / "icechunk").exists()


def test_a_reference_that_no_longer_resolves_is_one_line_never_fill(tmp_path, photons):
    store = tmp_path / "store"
    first = build(photons.isel(photon=slice(0, 10_000)), str(store), sweep=False)
    want = open_level(str(store), C, window="2021").compute()
    nested = np.asarray(mortie.mort2healpix(want["morton"].values)[0], dtype=np.int64)
    # a referenced object rewritten out of band (its modification time moved)
    shard = next(p for p in store.rglob("c/0") if "/run-" in str(p) and f"/{C}/count/" in str(p))
    later = shard.stat().st_mtime + 10
    os.utime(shard, (later, later))
    ds = zagg.open_icechunk(str(store))
    with pytest.raises(IcechunkError) as got:
        np.asarray(ds["count"].isel(window=first.rows.index("2021"), cells=nested))
    text = str(got.value)
    assert "\n" not in text and "does not resolve" in text and "run again" in text
    # a repo whose commits of references never landed: refused, not read as fill
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(f"{store}/icechunk"))
    init = [s.id for s in repo.ancestry(branch="main") if s.message.startswith("init")][0]
    repo.reset_branch("main", init)
    with pytest.raises(IcechunkError, match="no reference to its objects"):
        zagg.open_icechunk(str(store))


def test_a_key_prefix_with_a_space_on_the_local_s3_server(photons, moto_s3):
    options, fs = moto_s3
    fs.mkdir("ice-spaced")
    url = "s3://ice-spaced/my product"
    first = build(photons.isel(photon=slice(0, 10_000)), url, options, sweep=False)
    assert first.commits == ["init", "leaf"] and first.refs > 0
    assert_levels_equal(url, options, orders=[C])


def test_commits_racing_on_the_local_s3_server_all_land(photons, moto_s3):
    """Three writers commit and close runs into one S3 store at once (no lock there: the
    object store's conditional writes make the losers' commits conflict, and they are
    derived again); every one lands, main equals the hive and every run is tagged."""
    import threading

    from zagg.engine.write import write_shards
    from zagg.pyramid.icechunk_runs import finalize

    options, fs = moto_s3
    fs.mkdir("ice-race")
    url = "s3://ice-race/prod"
    with dask.config.set(scheduler="sync"):
        write_shards(
            shard_collection(photons, load_config(raw_config()), chunk_size=15_000),
            url,
            storage_options=options,
        )
    done, failed = {}, []

    def writer(i):
        try:
            done[i] = commit(url, options, run_id=f"r{i}").commits
            done[i] += [finalize(url, options, run_id=f"{i:032x}")["tag"]]
        except Exception as exc:  # reported below, with the others' outcome
            failed.append(f"{i}: {exc!r}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == [] and len(done) == 3, (failed, done)
    assert sorted(c for d in done.values() for c in d[:-1]) == ["init", "leaf"]
    repo = icechunk.Repository.open(repo_storage(StoreRoot(url, options)))
    assert {d[-1] for d in done.values()} == set(repo.list_tags())
    assert_levels_equal(url, options, orders=[C])
