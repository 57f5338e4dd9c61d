"""Re-runs end to end: an unchanged re-run writes nothing (and with a catalog reads no
granule), a packaging edit stays current, a dropped granule is refused without touching
the store's bytes, a new granule rewrites only its shards, a killed run resumes with only
the leaves it had not written, and ``overwrite`` rewrites everything."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import moczarr
import numpy as np
import pytest
import yaml
from builders import fields, grid_orders, pipeline_config, synthetic_source
from test_granule_run import REGION, atl03_config, recount, store_counts

import zagg
from zagg import hive
from zagg.engine.write import RunSummary
from zagg.pipeline.run import run
from zagg.read.inspect import EXIT_INTACT, verify_status
from zagg.sources.catalog import build_catalog, write_catalog
from zagg.sources.write_granules import write_granules


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("rerun-granules")
    return write_granules(d, 4, product="ATL03", points_per_granule=20_000, region=REGION, seed=5)


@pytest.fixture(scope="module")
def small_granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("race-granules")
    return write_granules(d, 4, product="ATL03", points_per_granule=3_000, region=REGION, seed=6)


def catalog(paths, where):
    """A catalog of ``paths`` written to ``where`` (its footprints at the shard order)."""
    cfg = atl03_config("unused")
    cfg["data_source"]["granules"] = [str(p) for p in paths]
    source = zagg.load_config(cfg).data_source.granules
    write_catalog(build_catalog(source, order=8), where)
    return str(where)


def go(location, store, **kw) -> RunSummary:
    return run(atl03_config(location, store), workers=1, threads=2, progress=False, **kw)


def snapshot(store) -> dict:
    """Every object of a store: relative path → (content sha256, mtime in ns)."""
    return {
        str(p.relative_to(store)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(store.rglob("*"))
        if p.is_file()
    }


def contents(snap: dict) -> dict:
    """The hive's objects by content. The Icechunk companion is left out here (that an
    unchanged re-run leaves it byte-identical too is tests/test_icechunk.py's)."""
    return {k: sha for k, (sha, _) in snap.items() if not k.startswith("icechunk/")}


def leaf_ids(store) -> dict[str, set[str]]:
    """Shard id → the granule ids its leaf records."""
    out = {}
    for leaf, sid in hive.walk_leaves(store):
        sibling = (store / leaf).parent / "granules.json"
        out[sid] = set(json.loads(sibling.read_text())["ids"])
    return out


def test_an_unchanged_catalog_rerun_reads_no_granule_and_writes_nothing(tmp_path, granules):
    g = tmp_path / "g"
    shutil.copytree(granules[0].parent, g)
    cat = catalog(sorted(g.glob("*.h5")), tmp_path / "cat.json")
    store = tmp_path / "s"
    first = go(cat, store)
    assert first.units == {"current": 0, "rewritten": first.leaves_written, "refused": 0}
    before = snapshot(store)
    g.rename(tmp_path / "away")  # a re-run that opened any granule would fail now
    again = go(cat, store)
    after = snapshot(store)
    assert again.units == {"current": first.leaves_written, "rewritten": 0, "refused": 0}
    assert again.granules == 0 and again.bytes_written == 0
    assert again.cells_with_data == first.cells_with_data > 0  # what the store holds
    assert again.cells_written == 0
    assert contents(after) == contents(before)  # not one object added, removed or changed
    # the lifecycle touch refreshed the leaves' pointers, never their versions' objects
    pointers = [  # the leaves' (the overviews the chained sweep built are not leaves)
        k for k in before if k.endswith(".zarr/zarr.json") and not k.endswith("/all.zarr/zarr.json")
    ]
    versions = [k for k in before if "/run-" in k]
    assert pointers and versions
    assert all(after[k][1] > before[k][1] for k in pointers)
    assert all(after[k][1] == before[k][1] for k in versions)
    assert not list(store.glob("refusals_*.json"))
    # a packaging edit (where the catalog lives, the error policy) is still current
    moved = tmp_path / "elsewhere.json"
    shutil.copy(cat, moved)
    (tmp_path / "away").rename(g)
    cfg = atl03_config(str(moved), store, on_error="skip")
    packaged = run(cfg, workers=1, threads=2, progress=False)
    assert packaged.units["current"] == first.leaves_written and packaged.leaves_written == 0
    assert contents(snapshot(store)) == contents(before)


def test_a_catalog_rerun_with_nothing_to_write_still_lists_every_leaf(tmp_path, granules):
    """A run killed after its last leaf, before its root coverage: the same catalog run
    again has nothing to write, reads no granule, and lists every current leaf."""
    cat = catalog(granules, tmp_path / "cat.json")
    store = tmp_path / "s"
    first = go(cat, store)
    listed = (store / "coverage.moc").read_text()
    (store / "coverage.moc").unlink()
    again = go(cat, store)
    assert again.granules == 0 and again.leaves_written == 0
    assert again.units["current"] == first.leaves_written
    assert (
        json.loads((store / "coverage.moc").read_text())["ranges"] == json.loads(listed)["ranges"]
    )
    report, status = verify_status(store)
    assert status == EXIT_INTACT, report


def test_a_dropped_granule_is_refused_and_the_store_keeps_its_bytes(tmp_path, granules):
    store = tmp_path / "s"
    first = go(catalog(granules, tmp_path / "all.json"), store)
    recorded = leaf_ids(store)
    dropped = granules[0].name
    expect_refused = {sid for sid, ids in recorded.items() if dropped in ids}
    assert expect_refused and expect_refused != set(recorded)
    before = contents(snapshot(store))
    fewer = catalog(granules[1:], tmp_path / "fewer.json")
    again = go(fewer, store)
    assert set(again.gate.of("refused")) == expect_refused
    assert again.units["refused"] == len(expect_refused) and again.leaves_written == 0
    [manifest] = store.glob("refusals_*.json")
    assert again.run_id in manifest.name
    body = json.loads(manifest.read_text())
    assert {r["shard_key"] for r in body["refused"]} == expect_refused
    assert all(r["missing_granules"] == [dropped] for r in body["refused"])
    now = contents(snapshot(store))
    now.pop(manifest.name)
    assert now == before  # the refused (and the current) leaves are untouched bytes
    # allowing the contraction rewrites exactly the refused shards without the granule
    allowed = go(fewer, store, allow_contraction=True)
    assert {r["shard_id"] for r in allowed.records} == expect_refused
    assert all(dropped not in ids for ids in leaf_ids(store).values())
    truth, _ = recount(granules[1:])
    got = store_counts(store)
    assert {w: n for w, n in got.items() if w in truth} == truth
    assert first.leaves_written == len(recorded)


def test_a_new_granule_rewrites_only_the_shards_it_touches(tmp_path, granules):
    store = tmp_path / "s"
    go(catalog(granules[:3], tmp_path / "three.json"), store)
    before = leaf_ids(store)
    again = go(catalog(granules, tmp_path / "four.json"), store)
    after = leaf_ids(store)
    grew = {sid for sid, ids in after.items() if granules[3].name in ids}
    assert grew and {r["shard_id"] for r in again.records} == grew
    assert set(again.gate.of("current")) == set(before) - grew
    truth, _ = recount(granules)
    assert store_counts(store) == truth


@pytest.mark.parametrize("source", ["catalog", "directory"])
def test_a_killed_run_resumes_with_only_the_missing_leaves(tmp_path, granules, source):
    location = (
        catalog(granules, tmp_path / "cat.json") if source == "catalog" else str(granules[0].parent)
    )
    store = tmp_path / "s"
    go(location, store, sweep=False)  # the leaves' resume (a sweep refolds their ancestors)
    leaves = sorted(hive.walk_leaves(store))
    assert len(leaves) >= 3
    # what a run killed mid-write leaves: a leaf never started, one whose pointer was
    # never written (its version is debris), and the others done
    gone = {leaves[0][1]}
    for leaf, _ in leaves[:1]:
        node = (store / leaf).parent
        shutil.rmtree(store / leaf)
        for side in ("stats.json", "granules.json", "all.pyramid.zarr", "all.pyramid.stats.json"):
            p = node / side
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    torn = leaves[1]
    (store / torn[0] / "zarr.json").unlink()
    kept = {
        k: v
        for k, v in contents(snapshot(store)).items()
        if not any(
            k.startswith(str((store / leaf).parent.relative_to(store))) for leaf, _ in leaves[:2]
        )
    }
    resumed = go(location, store, sweep=False)
    assert {r["shard_id"] for r in resumed.records} == gone | {torn[1]}
    assert resumed.units["current"] == len(leaves) - 2
    now = contents(snapshot(store))
    caches = ("coverage", "multiscales", "icechunk/")  # root caches and the companion
    assert {k: now[k] for k in kept if not k.startswith(caches)} == {
        k: v for k, v in kept.items() if not k.startswith(caches)
    }
    truth, _ = recount(granules)
    assert store_counts(store) == truth
    assert int(moczarr.open_hive(str(store))["count"].values.sum()) == sum(truth.values())


def test_overwrite_rewrites_every_shard_as_a_new_version(tmp_path, granules):
    store = tmp_path / "s"
    first = go(str(granules[0].parent), store)
    again = go(str(granules[0].parent), store, overwrite=True)
    assert again.leaves_written == first.leaves_written and again.gate is None
    root = hive.StoreRoot(store)
    for leaf, _ in hive.walk_leaves(store):
        assert hive.read_stamp(root, leaf)["current"].startswith(f"run-{again.run_id}-")
    truth, _ = recount(granules)
    assert store_counts(store) == truth


def test_points_the_config_names_rerun_as_current(tmp_path):
    cfg = pipeline_config(
        synthetic_source(points=30_000, seed=2),
        fields("count", "h_mean"),
        grid_orders(8, 13),
        name="SYN",
        store=tmp_path / "s",
    )
    first = run(cfg, workers=1, threads=2, progress=False)
    assert all(ids == {"synthetic"} for ids in leaf_ids(tmp_path / "s").values())
    before = contents(snapshot(tmp_path / "s"))
    again = run(cfg, workers=1, threads=2, progress=False)
    assert again.units == {"current": first.leaves_written, "rewritten": 0, "refused": 0}
    assert contents(snapshot(tmp_path / "s")) == before
    # other points (another seed) are another config: the store refuses it whole
    cfg["data_source"]["synthetic"]["seed"] = 3
    with pytest.raises(Exception, match="semantic|differ"):
        run(cfg, workers=1, threads=2, progress=False)
    ds = zagg.open_hive(tmp_path / "s")
    assert int(np.asarray(ds["count"].values).sum()) == first.points


#: one racer: a process that, for each store in turn, waits until the other racer is
#: ready too, then runs the config into it on its own cluster (one worker inside the
#: racer's process; every shard rewritten, so both write every leaf they share; the
#: leaves' race, so no chained sweep) and prints the run id
RACER = """
import faulthandler, os, pathlib, sys, time
faulthandler.dump_traceback_later(float(sys.argv[6]), exit=True)  # a hang shows its stacks
import zagg
from zagg.cluster.clients import cluster_for, connected
cfg, stores, me, other, sync = sys.argv[1], sys.argv[2].split(","), *sys.argv[3:5], \\
    pathlib.Path(sys.argv[5])
with cluster_for(None, workers=1, threads=os.cpu_count() or 1) as cluster, \\
        connected(cluster) as client:
    for i, store in enumerate(stores):
        (sync / f"{me}-{i}").touch()
        while not (sync / f"{other}-{i}").exists():
            time.sleep(0.005)
        print(zagg.run(cfg, store=store, scheduler=client, overwrite=True, sweep=False,
                       progress=False).run_id, flush=True)
"""


def _race(cfgs: list, stores: list[str], sync, budget: float = 540) -> list[tuple[str, str]]:
    """Two racers over ``stores``; returns each store's pair of run ids.

    Each racer writes to its own files (a pipe nobody drains would block a chatty racer
    and, through the barrier, its partner too); one racer failing stops the other at
    once, and a racer still running after ``budget`` seconds prints its stacks and exits.
    """
    sync.mkdir()
    logs = [(sync / f"{me}.out", sync / f"{me}.err") for me in "ab"]
    procs = []
    for c, me, other, (out, err) in zip(cfgs, "ab", "ba", logs, strict=True):
        with out.open("w") as o, err.open("w") as e:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        RACER,
                        str(c),
                        ",".join(stores),
                        me,
                        other,
                        str(sync),
                        str(budget),
                    ],
                    stdout=o,
                    stderr=e,
                    text=True,
                    # icechunk warns on stdout, which carries the racers' run ids
                    env={**os.environ, "ICECHUNK_LOG": "error"},
                )
            )
    try:
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for p, (_, err), me in zip(procs, logs, "ab", strict=True):
        assert p.returncode == 0, f"racer {me} exited {p.returncode}:\n{err.read_text()[-6000:]}"
    ids = [out.read_text().split() for out, _ in logs]
    assert all(len(i) == len(stores) for i in ids)
    return list(zip(*ids, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_runs_at_once_never_tear_a_leaf(tmp_path, small_granules, where, request):
    """Ten times on disk (five on S3, whose requests the local server and the client share
    two cores for), two runs (same config, different but overlapping granules) write one
    store at once: every stamped leaf is complete and verifies, and names as current a
    version one of the two runs wrote."""
    options = None
    if where == "s3":
        options, fs = request.getfixturevalue("moto_s3")
        fs.mkdir("race")
    cfgs = []
    for name, part in (("a", small_granules[:3]), ("b", small_granules[1:])):
        cfg = atl03_config("unused")
        cfg["data_source"]["granules"] = [str(p) for p in part]
        if options:
            cfg["output"]["storage_options"] = dict(options)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cfgs.append(path)
    reps = 5 if options else 10
    stores = [f"s3://race/{rep}" if options else str(tmp_path / f"s{rep}") for rep in range(reps)]
    for store, ids in zip(stores, _race(cfgs, stores, tmp_path / "sync"), strict=True):
        report, status = verify_status(store, options)
        assert status == EXIT_INTACT, report
        root = hive.StoreRoot(store, options)
        leaves = hive.walk_leaves(root)
        assert leaves
        for leaf, _ in leaves:
            current = hive.read_stamp(root, leaf)["current"]
            assert any(current.startswith(f"run-{i}-") for i in ids), current
        if not options:  # the independent reader follows the pointers to the same values
            ours = zagg.open_hive(store)["count"].values
            assert int(moczarr.open_hive(store)["count"].values.sum()) == int(ours.sum())


def test_the_command_line_refuses_then_allows_a_contraction(tmp_path, granules, capsys):
    from zagg.cli.main import main
    from zagg.pipeline.reruns import EXIT_REFUSED

    store = tmp_path / "s"
    go(catalog(granules, tmp_path / "all.json"), store)
    cfg = tmp_path / "fewer.yaml"
    cfg.write_text(yaml.safe_dump(atl03_config(catalog(granules[1:], tmp_path / "f.json"))))
    cli = ["run", str(cfg), "--store", str(store), "--quiet", "--workers", "1"]
    assert main(cli) == EXIT_REFUSED  # a batch script notices the refusal
    out = capsys.readouterr().out
    refused = int(
        re.search(r"re-run +\d+ shards current, 0 rewritten, (\d+) refused", out).group(1)
    )
    assert refused > 0 and granules[0].name in out and "--allow-contraction" in out
    assert main([*cli, "--allow-contraction"]) == 0
    assert re.search(
        rf"re-run +\d+ shards current, {refused} rewritten, 0 refused", capsys.readouterr().out
    )
    assert main([*cli, "--overwrite"]) == 0
    assert "re-run" not in capsys.readouterr().out  # no gate: every shard rewritten


def yearly(location, store) -> dict:
    cfg = atl03_config(location, store)
    cfg["output"]["windowing"] = {
        "schedule": "yearly",
        "time_field": "time",
        "epoch": "2018-01-01T00:00:00Z",
        "scale": "gps",
    }
    return cfg


def test_a_windowed_catalog_rerun_reads_only_the_new_granules_windows(tmp_path, granules):
    """Units are (shard, year): an unchanged re-run opens nothing, and a granule of a new
    year rewrites only that year's units, reading only the granules planned for them."""
    years = {g.name: g.name[6:10] for g in granules}  # ATL03_{yyyy}...
    newest = max(granules, key=lambda g: g.name)
    older = [g for g in granules if g is not newest]
    assert years[newest.name] not in {years[g.name] for g in older}
    store = tmp_path / "s"
    run_ = lambda cat: run(yearly(cat, store), workers=1, threads=2, progress=False)  # noqa: E731
    first = run_(catalog(older, tmp_path / "old.json"))
    before = contents(snapshot(store))
    again = run_(catalog(older, tmp_path / "old.json"))
    assert again.leaves_written == 0 and again.granules == 0
    assert again.units["current"] >= first.leaves_written
    grown = run_(catalog(granules, tmp_path / "all.json"))
    assert grown.granules == 1  # the new year's units need only the new granule
    assert {r["window"] for r in grown.records} == {years[newest.name]}
    after = contents(snapshot(store))
    older_objects = [k for k in before if k.startswith("-") and "/all." not in k]
    assert {k: after[k] for k in older_objects} == {
        k: before[k] for k in older_objects
    }  # every older leaf untouched (the all-time folds above take in the new year)
    truth, _ = recount(granules)
    windows = zagg.open_hive(store, windows="all")
    counts = windows["count"].sum("window").values
    got = {int(w): int(c) for w, c in zip(windows["morton"].values, counts, strict=True) if c}
    assert got == truth
