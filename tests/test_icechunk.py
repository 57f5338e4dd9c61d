"""The Icechunk companion (spec §11): the whole store as one versioned xarray dataset of
virtual references, equal cell for cell to the hive's own levels."""

from __future__ import annotations

import asyncio
import os
import shutil

import dask
import numpy as np
import pytest
from builders import YEARLY, fields, grid_orders, pipeline_config, synthetic_source

icechunk = pytest.importorskip("icechunk")
xr = pytest.importorskip("xarray")

import mortie  # noqa: E402
import zarr  # noqa: E402

import zagg  # noqa: E402
from zagg.checks.validation import ConfigError  # noqa: E402
from zagg.config.model import load_config  # noqa: E402
from zagg.engine.aggregate import shard_collection  # noqa: E402
from zagg.hive.manifest import read_manifest  # noqa: E402
from zagg.hive.storage import StoreRoot  # noqa: E402
from zagg.hive.walk import walk_windows  # noqa: E402
from zagg.pyramid.icechunk import commit, levels_of  # noqa: E402
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


def build(photons, store, storage_options=None):
    from zagg.engine.write import write_shards

    cfg = load_config(raw_config())
    with dask.config.set(scheduler="sync"):
        write_shards(
            shard_collection(photons, cfg, chunk_size=15_000),
            store,
            storage_options=storage_options,
        )
    zagg.sweep(store, storage_options=storage_options, icechunk=False)
    return commit(store, storage_options, run_id="test")


def plain_session(root: StoreRoot):
    """A read-only session on the repo's main branch, opened with icechunk alone."""
    from zagg.hive import icechunk as ic

    repo = icechunk.Repository.open(  # the container config is the repo's own
        ic.repo_storage(root), authorize_virtual_chunk_access=ic.credentials(root)
    )
    return repo.readonly_session(branch="main")


def plain_open(root: StoreRoot, group: str, session=None):
    """The repo opened with icechunk and xarray alone (the documented plain way)."""
    session = session or plain_session(root)
    return xr.open_zarr(session.store, group=group, consolidated=False, chunks=None)


def referenced_chunks(session, array: str) -> dict[int, list[int]]:
    """Window row → the chunk indices along ``cells`` that the repo references for
    ``array`` (a ``(window, cells)`` array, zarr's default ``c/{row}/{chunk}`` keys). Every
    other chunk has no reference, so zarr reads the array's fill value there."""

    async def keys():
        return [k async for k in session.store.list_prefix(array)]

    found: dict[int, list[int]] = {}
    for key in asyncio.run(keys()):
        if key.startswith(f"{array}/c/"):
            row, chunk = key[len(array) + 3 :].split("/")
            found.setdefault(int(row), []).append(int(chunk))
    return found


def assert_levels_equal(store, storage_options=None):
    root = StoreRoot(store, storage_options)
    manifest = read_manifest(root)
    session = plain_session(root)
    top = plain_open(root, "/", session)
    rows = top.attrs["zagg_icechunk"]["rows"]
    assert top.attrs.keys() == {"zagg_icechunk", "zarr_conventions", "multiscales"}
    assert rows[-1] == "all" and len(rows) >= 3
    checked = 0
    for c, level in levels_of(manifest).items():
        ds = plain_open(root, str(c), session)
        referenced = referenced_chunks(session, f"{c}/count") if c <= 8 else {}
        assert ds["count"].dims == ("window", "cells")
        assert ds.sizes["cells"] == 12 * 4**c and ds.sizes["window"] == len(rows)
        for w, label in enumerate(rows):
            if label == "all" and level.artifact != "overview":
                continue
            want = open_level(
                store, c, storage_options, window=None if label == "all" else label
            ).compute()
            nested, _ = mortie.mort2healpix(want["morton"].values)
            got = ds.isel(window=w, cells=np.asarray(nested, dtype=np.int64))
            for name in ("count", "h_sum", "h_max"):
                np.testing.assert_array_equal(got[name].values, want[name].values)
            assert [bytes(x) for x in got["h_tdigest"].values] == [
                bytes(x) for x in want["h_tdigest"].values
            ]
            if c <= 8:  # outside the occupied cells a level reads fill (no stray reference):
                # the whole row's counts are those of the chunks it references (a chunk
                # without a reference reads the fill value, 0), read in one selection
                size = ds["count"].encoding["chunks"][1]
                held = [j * size + k for j in referenced.get(w, []) for k in range(size)]
                whole = ds["count"].isel(window=w, cells=np.asarray(held, dtype=np.int64))
                assert zarr.open_array(session.store, path=f"{c}/count").fill_value == 0
                assert int(np.nan_to_num(whole.values).sum()) == int(want["count"].sum())
            checked += 1
    assert checked >= 2 * (len(levels_of(manifest)) - 1)


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def test_every_level_of_the_repo_equals_open_level_cell_for_cell(tmp_path, photons):
    store = str(tmp_path / "store")
    first = build(photons, store)
    assert first.commits == ["init", "leaf"] and first.changed == first.objects > 0
    assert_levels_equal(store)
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


def test_a_run_commits_the_repo_and_an_unchanged_rerun_commits_nothing(
    tmp_path, photons, worker_process
):
    store = tmp_path / "store"
    cfg = raw_config(store=str(store), sweep="stages")
    photons = photons.assign_attrs(granules=["granule-1"])  # an identity the gate compares
    one = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    assert one.icechunk["commits"] == ["init", "leaf"], one.icechunk
    assert one.sweep.icechunk["commits"][-1] == "node"  # after any new level groups
    assert_levels_equal(str(store))
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(store / "icechunk")))
    n = len(list(repo.ancestry(branch="main")))
    two = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    # every shard is current: no leaf is written and no overview refolded; only the leaf
    # columns, whose trees the lifecycle touch re-stamps (moving their checksums), are
    # referenced afresh, and the sweep commits nothing
    leaves = sum(len(v) for v in walk_windows(str(store)).values())
    assert two.records == [] and two.icechunk["changed"] == leaves, two.icechunk
    assert two.sweep.icechunk["commits"] == []
    assert len(list(repo.ancestry(branch="main"))) == n + 1
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


def test_output_icechunk_false_writes_no_repo_and_bad_values_are_refused(
    tmp_path, photons, worker_process
):
    store = tmp_path / "off"
    cfg = raw_config(store=str(store), icechunk=False)
    summary = zagg.run(cfg, source=photons, scheduler=worker_process, progress=False)
    assert summary.icechunk is None and not (store / "icechunk").exists()
    with pytest.raises(ConfigError, match="output.icechunk"):
        load_config(raw_config(icechunk="yes"))


def test_the_repo_on_the_local_s3_server_equals_open_level(photons, moto_s3):
    options, fs = moto_s3
    fs.mkdir("ice-store")
    url = "s3://ice-store/prod"
    first = build(photons, url, options)
    assert first.commits == ["init", "leaf"]
    assert first.path == "s3://ice-store/prod/icechunk"
    assert_levels_equal(url, options)
    assert commit(url, options).commits == []


def test_zagg_gc_expires_the_snapshots_older_than_the_kept_versions(tmp_path, photons, capsys):
    from zagg.cli.main import main

    store = str(tmp_path / "store")
    first = build(photons, store)
    build(photons.isel(photon=slice(0, 20_000)), store)
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(f"{store}/icechunk"))
    before = [s.id for s in repo.ancestry(branch="main")]
    assert first.snapshot in before
    assert main(["gc", store, "--keep", "0"]) == 0
    assert "icechunk: expired" in capsys.readouterr().out
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(f"{store}/icechunk"))
    after = [s.id for s in repo.ancestry(branch="main")]
    assert first.snapshot not in after and len(after) < len(before)
    with pytest.raises(Exception):  # noqa: B017  (icechunk's own error type)
        zagg.open_icechunk(store, 2, snapshot=first.snapshot)
    assert_levels_equal(store)  # main still reads the hive, the collected versions unneeded
