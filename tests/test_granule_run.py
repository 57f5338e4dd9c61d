"""HDF5 granules → store end to end (local and S3): per-cell counts equal a direct numpy
recount of the granules' photons after filters; catalogs, regions, failed granules."""

import json
import shutil

import h5py
import moczarr
import mortie
import numpy as np
import pytest
from builders import BEAMS, atl03_source, fields, fill_as_nan, grid_orders, pipeline_config

import zagg
from zagg import hive
from zagg.pipeline.run import run
from zagg.sources.catalog import build_catalog, write_catalog
from zagg.sources.regions import region_shards
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -75.6, -99.8, -75.4)
P, C = 8, 13


def atl03_config(granules, store=None, **extra):
    """Count and t-digest the heights of the photons of land-ice confidence >= 3."""
    source = atl03_source(granules, confidence=3, **extra)
    variables = fields("count", "h_tdigest")
    orders = grid_orders(P, C)
    return pipeline_config(source, variables, orders, name="ATL03", version="006", store=store)


def recount(paths, keep_shards=None):
    """Per-cell photon counts and per-shard granule sets, read straight from the files."""
    cells, owners = [], []
    for path in paths:
        with h5py.File(path, "r") as f:
            for beam in BEAMS:
                if f"{beam}/heights/lat_ph" not in f:
                    continue
                lat = fill_as_nan(f[f"{beam}/heights/lat_ph"])
                lon = fill_as_nan(f[f"{beam}/heights/lon_ph"])
                conf = f[f"{beam}/heights/signal_conf_ph"][:, 3]
                ok = (conf >= 3) & np.isfinite(lat) & np.isfinite(lon)
                w = mortie.geo2mort(lat[ok], lon[ok], order=C)
                cells.append(w)
                owners += [path.name] * len(w)
    cells = np.concatenate(cells)
    owners = np.asarray(owners)
    shards = mortie.clip2order(P, cells)
    if keep_shards is not None:
        keep = np.isin(shards, zagg.grid.from_decimal(keep_shards))
        cells, owners, shards = cells[keep], owners[keep], shards[keep]
    words, counts = np.unique(cells, return_counts=True)
    per_shard = {}
    for s in np.unique(shards):
        per_shard[zagg.grid.to_decimal(s)[0]] = set(owners[shards == s])
    return dict(zip(words.tolist(), counts.tolist(), strict=True)), per_shard


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("granules")
    return write_granules(d, 4, product="ATL03", points_per_granule=30_000, region=REGION, seed=3)


def store_counts(store, storage_options=None):
    ds = zagg.open_hive(store, storage_options)
    n = ds["count"].values
    return {int(w): int(c) for w, c in zip(ds["morton"].values[n > 0], n[n > 0], strict=True)}


def test_local_granules_counts_match_recount(tmp_path, granules):
    store = tmp_path / "s"
    summary = run(atl03_config(granules[0].parent, store), workers=1, threads=2, progress=False)
    truth, per_shard = recount(granules)
    assert store_counts(store) == truth
    assert summary.points == sum(truth.values()) and summary.granules == len(granules)
    for leaf, sid in hive.walk_leaves(store):
        stamp = hive.read_stamp(hive.StoreRoot(store), leaf)
        ids = json.loads((store / leaf).parent.joinpath("granules.json").read_text())["ids"]
        assert set(ids) == per_shard[sid] and stamp["granule_count"] == len(ids)


def test_catalog_and_region_restrict_the_run(tmp_path, granules):
    cfg = atl03_config(granules[0].parent, tmp_path / "s")
    source = zagg.load_config(cfg).data_source.granules
    catalog = build_catalog(source, order=P)
    write_catalog(catalog, tmp_path / "cat.parquet")
    shards = region_shards(geojson="regions/test_box.geojson", order=P)
    summary = run(
        cfg,
        catalog=str(tmp_path / "cat.parquet"),
        region="regions/test_box.geojson",
        workers=1,
        threads=2,
        progress=False,
    )
    written = {sid for _, sid in hive.walk_leaves(tmp_path / "s")}
    assert written and written <= set(shards)
    truth, _ = recount(granules, keep_shards=shards)
    assert store_counts(tmp_path / "s") == truth
    assert summary.points == sum(truth.values())


def test_failed_granule_is_skipped_and_recorded(tmp_path, granules, worker_process):
    d = tmp_path / "g"
    d.mkdir()
    for p in granules:
        shutil.copy(p, d / p.name)
    bad = d / granules[1].name
    bad.write_bytes(bad.read_bytes()[:5000])  # truncated file
    with pytest.raises(Exception, match=granules[1].name):
        run(atl03_config(d, tmp_path / "fail"), scheduler=worker_process, progress=False)
    assert not (tmp_path / "fail").exists() or not hive.walk_leaves(tmp_path / "fail")
    store = tmp_path / "skip"
    summary = run(atl03_config(d, store, on_error="skip"), workers=1, threads=2, progress=False)
    assert [f["granule"] for f in summary.failed_granules] == [granules[1].name]
    good = [p for p in granules if p.name != granules[1].name]
    truth, per_shard = recount(good)
    assert store_counts(store) == truth
    leaf, sid = hive.walk_leaves(store)[0]
    stats = json.loads((store / leaf).parent.joinpath("stats.json").read_text())
    assert stats["failed_granules"][0]["granule"] == granules[1].name
    assert hive.read_stamp(hive.StoreRoot(store), leaf)["granule_count"] == len(per_shard[sid])


@pytest.fixture(scope="module")
def s3(granules, moto_s3):
    options, fs = moto_s3
    fs.mkdir("granules-in")
    fs.mkdir("zagg-out")
    for p in granules:
        fs.put(str(p), f"granules-in/atl03/{p.name}")
    return options, fs


def test_s3_to_s3_run_reads_back_with_zagg_and_moczarr(tmp_path, granules, s3):
    options, fs = s3
    cfg = atl03_config("s3://granules-in/atl03/", "s3://zagg-out/store", storage_options=options)
    cfg["output"]["storage_options"] = options
    summary = run(cfg, workers=1, threads=2, progress=False)
    assert summary.leaves_written > 0
    truth, _ = recount(granules)
    assert store_counts("s3://zagg-out/store", options) == truth
    assert fs.exists("zagg-out/store/morton_hive.json") and fs.exists("zagg-out/store/coverage.moc")
    # the independent reader: on the bytes the S3 run wrote
    local = tmp_path / "copy"
    fs.get("zagg-out/store", str(local), recursive=True)
    root = str(local)
    for leaf, sid in hive.walk_leaves(root):
        stamp = moczarr.read_commit(root, leaf)
        assert moczarr.hash_arrays(root, leaf) == stamp["content_hashes"]["arrays"]
        # the sidecars went up from the client after the leaves, in one batch
        assert hive.read_stats(root, sid)["content_hashes"] == stamp["content_hashes"]
        sibling = json.loads((local / leaf).parent.joinpath("granules.json").read_text())
        assert (
            sibling["ids"]
            and hive.read_stats(root, sid)["granules_sha256"] == sibling["granules_sha256"]
        )
    mz = moczarr.open_hive(root)
    assert int(mz["count"].values.sum()) == sum(truth.values())


def test_cli_verifies_and_inspects_an_s3_store(
    tmp_path, granules, s3, monkeypatch, capsys, worker_process
):
    """Credentials from the AWS_* environment, the endpoint as a --storage-option."""
    from zagg.cli.main import main

    options, fs = s3
    cfg = atl03_config("s3://granules-in/atl03/", "s3://zagg-out/cli", storage_options=options)
    cfg["output"]["storage_options"] = options
    run(cfg, scheduler=worker_process, progress=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
    endpoint = f"endpoint_url={options['endpoint_url']}"
    assert main(["verify", "s3://zagg-out/cli", "--storage-option", endpoint]) == 0
    assert "all stamped leaves intact" in capsys.readouterr().out
    assert main(["inspect", "s3://zagg-out/cli", "--storage-option", endpoint]) == 0
    out = capsys.readouterr().out
    assert "(morton-hive/1, semantic hash " in out and options["secret"] not in out
    assert main(["verify", "s3://zagg-out/cli", "--storage-option", "endpoint_url"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
