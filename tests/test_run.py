"""Points → store end to end: to_hive, the run on a distributed cluster, the CLI, moczarr."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import moczarr
import numpy as np
import pytest
from builders import (
    IN_PROCESS,
    IN_PROCESS_CLI,
    fields,
    grid_orders,
    pipeline_config,
    synthetic_source,
)
from leaves import data_dir

import zagg
from zagg import hive
from zagg.cli.main import main
from zagg.engine.write import to_hive
from zagg.kernels import tdigest
from zagg.pipeline.run import run
from zagg.read import open_hive
from zagg.sources.synthetic import synthetic_photons

ROOT = Path(__file__).resolve().parents[1]

REGION = (-100.2, -75.6, -99.8, -75.4)  # a few order-8 shards


def config(store=None, *, points=None, child=13, sharded=True):
    synthetic = {"points": points, "seed": 5, "region": REGION, "chunk_size": 40_000}
    kept = [{"variable": "signal_conf_ph", "column": 3, "op": "ge", "value": 2}]
    return pipeline_config(
        synthetic_source("h_ph", "signal_conf_ph", filters=kept, **(synthetic if points else {})),
        fields("count", "h_mean", "h_max", "h_tdigest", h_mean={"dtype": "float64"}),
        grid_orders(8, child, inner=10, sharded=sharded),
        store=store or None,
        # these tests are about the leaves: the chained sweep is tested with the pyramid
        sweep=False,
    )


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(120_000, REGION, chunk_size=30_000, seed=5).compute()


def _hashes(root):
    out = {}
    for leaf, sid in hive.walk_leaves(root):
        out[sid] = hive.read_stamp(hive.StoreRoot(root), leaf)["content_hashes"]
    return out


@pytest.mark.parametrize("dense", [False, True])
def test_store_roundtrip_matches_the_aggregate_and_moczarr(tmp_path, photons, dense):
    """What aggregate returns is what the store reads back as, sparse or leaf-shaped."""
    leaves = zagg.aggregate(photons, config(), dense=dense).compute()
    summary = to_hive(leaves, tmp_path / "s")
    assert summary.leaves_written == summary.shards == len(leaves.attrs["zagg"]["shards"])
    assert summary.cells_with_data == int((leaves["count"].values > 0).sum())
    assert summary.points == int(leaves["count"].sum())
    back = open_hive(tmp_path / "s", dense=dense)
    for var in ("count", "h_mean", "h_max"):
        np.testing.assert_array_equal(back[var].values, leaves[var].values)
    assert list(back["h_tdigest"].values) == list(leaves["h_tdigest"].values)
    np.testing.assert_array_equal(back["morton"].values, leaves["morton"].values)
    if not dense:  # the same occupied cells per leaf
        assert back.attrs["zagg"]["shard_cells"] == leaves.attrs["zagg"]["shard_cells"]
    # the independent reader sees the same store
    root = str(tmp_path / "s")
    man = moczarr.read_manifest(root)
    assert man["cell_order"] == 13 and man["shard_order"] == 8
    ours = _hashes(root)
    for leaf, sid in hive.walk_leaves(root):
        assert moczarr.read_commit(root, leaf)["cells_with_data"] > 0
        got = moczarr.hash_arrays(root, leaf)
        assert got == ours[sid]["arrays"]
        assert moczarr.combined_hash(got) == ours[sid]["combined"]
    mz = moczarr.open_hive(root)
    occupied = leaves["count"].values > 0
    assert int(mz["count"].values.sum()) == int(leaves["count"].values.sum())
    assert int((mz["count"].values > 0).sum()) == int(occupied.sum())


def test_moczarr_read_ragged_equals_our_digests(tmp_path, photons):
    to_hive(zagg.aggregate(photons, config()), tmp_path / "s")
    root = str(tmp_path / "s")
    leaf, sid = hive.walk_leaves(root)[0]
    ours = zagg.read.open_leaf(root, sid).load()
    by_word = {int(w): i for i, w in enumerate(ours["morton"].values)}
    store = moczarr.open_leaf(root, sid)
    seen = 0
    for word, values in moczarr.read_ragged(store, "13/h_tdigest"):
        mine = tdigest.payload_to_array(ours["h_tdigest"].values[by_word[int(word)]])
        np.testing.assert_array_equal(np.asarray(values), mine)
        seen += 1
    assert seen == int((ours["count"].values > 0).sum())


@pytest.fixture(scope="module")
def two_workers():
    """A local cluster of two worker processes of one thread each, shared by the module."""
    from zagg.cluster.clients import cluster_for

    with cluster_for(None, workers=2, threads=1) as cluster:
        yield cluster.scheduler_address


@pytest.mark.parametrize("fan_in", [64, 2])
def test_content_hashes_do_not_depend_on_workers_chunking_or_the_combine_tree(
    tmp_path, photons, monkeypatch, fan_in, two_workers
):
    from zagg.engine import combine as collection

    cfg = config()
    # digests are chunking-invariant while loss-free: give every cell room for its photons
    cfg["aggregation"]["variables"]["h_tdigest"]["params"] = {"delta": 100_000}
    monkeypatch.setattr(collection, "FAN_IN", fan_in)  # deep trees merge in many steps
    runs = {}
    # one worker (in this process), two worker processes, one worker
    clusters = (IN_PROCESS, {"scheduler": two_workers}, IN_PROCESS)
    sizes = (("a", 30_000), ("b", 17_000), ("c", 7_000))
    for (label, chunk), cluster in zip(sizes, clusters, strict=True):
        store = tmp_path / label
        run(
            cfg,
            store=str(store),
            source=photons.chunk({"photon": chunk}),
            progress=False,
            **cluster,
        )
        runs[label] = _hashes(store)
    assert runs["a"] == runs["b"] == runs["c"] and len(runs["a"]) >= 2


def test_run_reads_a_zarr_input_quietly_and_writes_the_same_leaves(tmp_path, photons):
    points = tmp_path / "points.zarr"
    photons.chunk({"photon": 40_000}).to_zarr(points, zarr_format=3, consolidated=False)
    cfg = config()
    cfg["data_source"]["input"] = str(points)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run(cfg, store=str(tmp_path / "a"), progress=False, **IN_PROCESS)
    assert not [w for w in caught if "consolidated" in str(w.message)]
    direct = to_hive(zagg.aggregate(photons.chunk({"photon": 40_000}), config()), tmp_path / "b")
    assert summary.points == direct.points > 0
    assert _hashes(tmp_path / "a") == _hashes(tmp_path / "b") and summary.leaves_written >= 2


def test_rerun_with_changed_cell_order_is_refused_before_any_write(tmp_path, photons, monkeypatch):
    store = tmp_path / "s"
    to_hive(zagg.aggregate(photons, config()), store)
    before = sorted(p.relative_to(store) for p in store.rglob("*"))

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a run the store refuses")

    monkeypatch.setattr(sys.modules["zagg.pipeline.run"], "cluster_for", no_cluster)
    with pytest.raises(hive.ManifestConflictError, match="cell_order"):
        run(config(child=12), store=str(store), source=photons, workers=1, progress=False)
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_a_run_without_points_is_refused_before_its_cluster_starts(tmp_path, monkeypatch):
    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a run with no points to read")

    monkeypatch.setattr(sys.modules["zagg.pipeline.run"], "cluster_for", no_cluster)
    with pytest.raises(zagg.ConfigError, match="'data_source': no input given"):
        run(config(tmp_path / "s"), progress=False)
    cfg = config(tmp_path / "s")
    cfg["data_source"]["input"] = str(tmp_path / "missing.zarr")
    with pytest.raises(
        zagg.ConfigError, match="'data_source.input': .*missing.zarr.* does not exist"
    ):
        run(cfg, progress=False)
    assert not (tmp_path / "s").exists()


def test_the_readme_example_config_runs_from_the_shell(tmp_path):
    """``configs/atl03_synthetic.yaml`` names its points, so the README's first shell
    command works as written (here with fewer points and one small worker)."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "atl03_synthetic.yaml").read_text())
    assert cfg["data_source"]["synthetic"]["points"] >= 10**6
    cfg["data_source"]["synthetic"]["points"] = 50_000
    path = tmp_path / "atl03_synthetic.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert (
        main(
            [
                "run",
                str(path),
                "--store",
                str(tmp_path / "atl03-store"),
                *IN_PROCESS_CLI,
                "--quiet",
            ]
        )
        == 0
    )
    assert hive.walk_leaves(tmp_path / "atl03-store")


def test_cli_takes_a_western_southern_bbox_as_written(tmp_path):
    """``--bbox -100.2,-75.6,-100.0,-75.5`` (values starting with '-') restricts the run to
    the box's shards, exactly as ``--bbox=...`` does."""
    import yaml

    from zagg.sources.regions import region_shards

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config(points=60_000)))
    box = "-100.2,-75.6,-100.05,-75.5"
    for flag, store in ((["--bbox", box], "a"), ([f"--bbox={box}"], "b")):
        assert (
            main(
                [
                    "run",
                    str(path),
                    "--store",
                    str(tmp_path / store),
                    *flag,
                    *IN_PROCESS_CLI,
                    "--quiet",
                ]
            )
            == 0
        )
    everywhere = tmp_path / "all"
    assert (
        main(
            [
                "run",
                str(path),
                "--store",
                str(everywhere),
                *IN_PROCESS_CLI,
                "--quiet",
            ]
        )
        == 0
    )
    inside = set(region_shards(bbox=box, order=8))
    written = {sid for _, sid in hive.walk_leaves(tmp_path / "a")}
    assert written and written <= inside
    assert written == {sid for _, sid in hive.walk_leaves(tmp_path / "b")}
    assert written < {sid for _, sid in hive.walk_leaves(everywhere)}


def test_wrong_arguments_get_a_type_error_that_says_what_to_pass(tmp_path, photons):
    with pytest.raises(
        TypeError,
        match=r"zagg.aggregate needs an xarray Dataset, got str "
        r"'pts.zarr'; open the points first",
    ):
        zagg.aggregate("pts.zarr", config())
    with pytest.raises(TypeError, match=r"zagg.run\(source=...\) needs an xarray Dataset"):
        run(config(tmp_path / "r"), source=str(tmp_path), progress=False)
    with pytest.raises(TypeError, match=r"to_hive needs an xarray Dataset, got str"):
        to_hive("leaves", tmp_path / "t")
    leaves = zagg.aggregate(photons, config())
    with pytest.raises(ValueError, match=r"lacks 'h_mean', 'h_max', 'h_tdigest'.*declares only"):
        to_hive(leaves[["count"]], tmp_path / "s")
    with pytest.raises(ValueError, match=r"without selecting cells.*shards=\[...\]"):
        to_hive(leaves.isel(cells=slice(0, 10)), tmp_path / "s")
    assert not any(p.exists() for p in (tmp_path / "r", tmp_path / "t", tmp_path / "s"))


def test_a_store_location_that_cannot_take_a_hive_store_is_refused_before_any_work(
    tmp_path, photons, monkeypatch
):
    """A file, another dataset's directory (here the input zarr itself) and a hive store
    whose manifest was removed are refused up front; nothing in them changes."""
    import yaml

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a store that is refused")

    monkeypatch.setattr(sys.modules["zagg.pipeline.run"], "cluster_for", no_cluster)
    afile = tmp_path / "afile"
    afile.write_text("not a store")
    other = tmp_path / "points.zarr"
    photons.isel(photon=slice(0, 100)).to_zarr(other, consolidated=False)
    unmanifested = tmp_path / "unmanifested"
    to_hive(zagg.aggregate(photons, config()), unmanifested)
    (unmanifested / "morton_hive.json").unlink()
    cases = [
        (afile, r"is a file, not a directory"),
        (other, r"is not empty \(.*\) but holds no morton_hive.json"),
        (unmanifested, r"not a hive store \(or its manifest was removed\)"),
    ]
    for store, message in cases:
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        with pytest.raises(hive.StoreRootError, match=message):
            run(config(), store=str(store), source=photons, progress=False)
        with pytest.raises(hive.StoreRootError, match=message):
            to_hive(zagg.aggregate(photons, config()), store)
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config(points=1_000)))
    code = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(path), "--store", str(afile)],
        capture_output=True,
        text=True,
    )
    assert code.returncode == 2 and "Traceback" not in code.stderr
    assert "is a file, not a directory" in code.stderr


def test_a_run_uses_a_client_it_is_given_and_leaves_it_open(tmp_path, photons):
    """A notebook on a dask-gateway cluster holds a Client: the run goes through it (no
    LocalCluster of its own) and the client is still usable afterwards."""
    from distributed import Client, LocalCluster, get_task_stream

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        with get_task_stream(client) as stream:
            summary = run(config(tmp_path / "c"), source=photons, scheduler=client, progress=False)
        assert summary.leaves_written >= 2
        # the run's own tasks (reductions, leaf writes) ran on this client's workers
        keys = [r["key"] for r in stream.data if isinstance(r["key"], tuple)]
        assert any(k[0].startswith("reduce-chunk-") for k in keys)
        writes = [k for k in keys if k[0].startswith("write-leaf-")]
        assert len(writes) == summary.shards  # one write task per shard
        assert client.status == "running" and client.submit(sum, [1, 2]).result() == 3
    expected = to_hive(zagg.aggregate(photons, config()), tmp_path / "d")
    assert _hashes(tmp_path / "c") == _hashes(tmp_path / "d") and expected.leaves_written


def test_region_and_bbox_together_are_refused(tmp_path, photons):
    with pytest.raises(zagg.ConfigError, match="only one of .*got --region and --bbox"):
        run(
            config(tmp_path / "s"),
            source=photons,
            region="regions/x.geojson",
            bbox="-100,-76,-99,-75",
            progress=False,
        )
    assert not (tmp_path / "s").exists()


def test_unsharded_store_reads_back_identically(tmp_path, photons):
    a = zagg.aggregate(photons, config(sharded=False), dense=True).compute()
    to_hive(a, tmp_path / "u")
    b = open_hive(tmp_path / "u", dense=True)
    np.testing.assert_array_equal(a["count"].values, b["count"].values)
    leaf = hive.walk_leaves(tmp_path / "u")[0][0]
    chunks = sorted((data_dir(tmp_path / "u", leaf) / "13" / "count" / "c").iterdir())
    assert len(chunks) > 1  # one object per occupied inner chunk


def test_empty_run_writes_only_the_manifest_and_config(tmp_path, photons):
    cfg = config()
    cfg["data_source"]["filters"][0]["value"] = 99
    summary = to_hive(zagg.aggregate(photons, cfg), tmp_path / "e")
    assert summary.leaves_written == 0
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == [
        "aggregation.yaml",
        "morton_hive.json",
    ]
    lines = summary.lines()
    n = photons.sizes["photon"]
    assert f"  of read       {n:,}" in lines
    assert f"  dropped       {n:,} removed by data_source.filters" in lines
    assert any(x.startswith("warning: no point was aggregated") for x in lines)


def test_run_summary_accounts_for_points_it_did_not_aggregate(tmp_path, photons):
    """Swapped or broken coordinates must not look like a quiet success."""
    holed = photons.copy()
    lat = holed["lat_ph"].values.copy()
    lat[:1000] = np.nan
    lat[1000:1500] = 120.0
    holed["lat_ph"] = ("photon", lat)
    summary = run(config(tmp_path / "h"), source=holed, progress=False, **IN_PROCESS)
    lines = summary.lines()
    kept = holed["signal_conf_ph"].values[:, 3] >= 2  # the config's filter runs first
    lon = holed["lon_ph"].values
    bad = ~np.isfinite(lat) | ~np.isfinite(lon) | (np.abs(lat) > 90)
    invalid = int((kept & bad).sum())
    assert invalid >= int(kept[:1500].sum()) > 0
    filtered = int((~kept).sum())
    assert (
        f"  dropped       {invalid:,} with invalid coordinates (NaN or |latitude| > 90)" in lines
        and f"  dropped       {filtered:,} removed by data_source.filters" in lines
    )
    assert summary.points == summary.point_counts["keyed"] > 0
    assert not any(x.startswith("warning") for x in lines)
    swapped = photons.rename({"lat_ph": "lon_ph", "lon_ph": "lat_ph"})
    lines = run(config(tmp_path / "w"), source=swapped, progress=False, **IN_PROCESS).lines()
    assert any(x.startswith("warning: no point was aggregated") and "swapped?" in x for x in lines)
    elsewhere = run(
        config(tmp_path / "b"),
        source=photons,
        bbox="10,10,11,11",
        progress=False,
        **IN_PROCESS,
    ).lines()
    assert any(
        "the region (--region, --bbox or --shards) holds none of these points" in x
        for x in elsewhere
    )
    nothing = run(
        config(tmp_path / "n"),
        source=photons.isel(photon=slice(0, 0)),
        progress=False,
        **IN_PROCESS,
    ).lines()
    assert any(x.startswith("warning: no point was read") for x in nothing)


def test_cli_run_inspect_verify(tmp_path):
    cfg_path = tmp_path / "cfg.yaml"
    import yaml

    cfg_path.write_text(yaml.safe_dump(config(tmp_path / "cli", points=60_000)))
    assert main(["run", str(cfg_path), *IN_PROCESS_CLI, "--quiet"]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "inspect", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "(morton-hive/1, semantic hash " in result.stdout and "stamped" in result.stdout
    assert f"config: {tmp_path / 'cli' / 'aggregation.yaml'}" in result.stdout
    assert "q50=" in result.stdout
    ok = subprocess.run(
        [sys.executable, "-m", "zagg", "verify", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "all stamped leaves intact" in ok.stdout
    # tamper with one array value: verify reports a mismatch on that array
    store = tmp_path / "cli"
    leaf = hive.walk_leaves(store)[0][0]
    import zarr

    arr = zarr.open_array(str(data_dir(store, leaf) / "13" / "h_max"), mode="r+")
    vals = arr[:]
    i = int(np.flatnonzero(~np.isnan(vals))[0])
    arr[i] = vals[i] + 1
    bad = subprocess.run(
        [sys.executable, "-m", "zagg", "verify", str(store)], capture_output=True, text=True
    )
    assert bad.returncode == 1 and "mismatch" in bad.stdout and "13/h_max" in bad.stdout


def test_cli_reports_config_errors_cleanly(tmp_path):
    bad = tmp_path / "bad.yaml"
    cfg = config(tmp_path / "x")
    cfg["aggregation"]["variables"]["count"]["function"] = "cnt"
    bad.write_text(json.dumps(cfg))  # JSON is YAML
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "run", str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "unknown function 'cnt' (did you mean 'count'?)" in result.stderr
    assert not (tmp_path / "x").exists()


def test_demo_writes_store_summary_and_map(tmp_path, capsys):
    from zagg.cli.demo import demo

    out = demo(store=str(tmp_path / "demo-store"), points=80_000, workers=1)
    text = capsys.readouterr().out
    assert "cells with data" in text and "points/s" in text
    assert out["map"] and (tmp_path / "demo-store.png").stat().st_size > 10_000
    assert (
        moczarr.read_manifest(str(tmp_path / "demo-store"))["dataset"]["short_name"] == "ZAGG-DEMO"
    )


def test_verify_reports_each_outcome_separately(tmp_path, photons):
    import zarr

    from zagg.read.inspect import verify_leaf, verify_store

    store = tmp_path / "v"
    to_hive(zagg.aggregate(photons, config()), store)
    root = hive.StoreRoot(store)
    leaves = [leaf for leaf, _ in hive.walk_leaves(store)]
    assert len(leaves) >= 3
    assert all(verify_leaf(root, leaf)["status"] == "ok" for leaf in leaves)
    # an extra array under one leaf
    group = zarr.open_group(str(data_dir(store, leaves[0]) / "13"), mode="r+")
    group.create_array("debris", shape=(4,), dtype="int8")
    extra = verify_leaf(root, leaves[0])
    assert extra["status"] == "extra array" and extra["extra"] == ["13/debris"]
    # a missing array under another
    shutil_rmtree(data_dir(store, leaves[1]) / "13" / "h_max")
    missing = verify_leaf(root, leaves[1])
    assert missing["status"] == "missing array" and missing["missing"] == ["13/h_max"]
    # a stamp without recorded hashes is unverifiable, not tampered
    meta_path = store / leaves[2] / "zarr.json"
    meta = json.loads(meta_path.read_text())
    del meta["attributes"]["morton_hive_commit"]["content_hashes"]
    meta_path.write_text(json.dumps(meta))
    assert verify_leaf(root, leaves[2])["status"] == "unverifiable"
    report, ok = verify_store(store)
    assert not ok and "extra array" in report and "missing array" in report
    assert "unverifiable" in report


def shutil_rmtree(path):
    import shutil

    shutil.rmtree(path)


#: both ways to start the command line: the installed script and the module
ENTRY_POINTS = {
    "zagg": [str(Path(sys.executable).parent / "zagg")],
    "python -m zagg": [sys.executable, "-m", "zagg"],
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_cli_stops_quietly_when_its_reader_closes_the_pipe(tmp_path, photons, entry):
    """``zagg inspect STORE | head``: no BrokenPipeError traceback."""
    to_hive(zagg.aggregate(photons, config()), tmp_path / "s")
    p = subprocess.Popen(
        [*ENTRY_POINTS[entry], "inspect", str(tmp_path / "s")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and err == ""


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("quiet", [False, True])
def test_cli_interrupted_mid_run_says_how_to_finish_in_one_line(tmp_path, quiet, entry):
    """Ctrl-C during ``zagg run``, while it reduces (behind its progress bar) or
    writes (collecting results with none): exit status 130 and one line saying what the
    store holds and how to finish it, with no traceback nor the client's shutdown noise."""
    import signal
    import time

    path = tmp_path / "cfg.yaml"
    store = tmp_path / "s"
    path.write_text(json.dumps(config(store, points=3_000_000, child=18)))  # JSON is YAML
    p = subprocess.Popen(
        [*ENTRY_POINTS[entry], "run", str(path), *(["--quiet"] if quiet else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    if quiet:  # the manifest goes up as the leaves start to be written
        deadline = time.monotonic() + 120
        while not (store / "morton_hive.json").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    else:
        for line in p.stderr:  # the reduction's progress label: the run is under way
            seen.append(line)
            if "keying and reducing input chunks" in line:
                break
    p.send_signal(signal.SIGINT)
    err = "".join(seen) + p.stderr.read()
    assert p.wait(timeout=120) == 130, err
    assert err.rstrip().splitlines()[-1] == (
        "zagg: interrupted; the store keeps the leaves already stamped, and readers skip any "
        "leaf left without its stamp: run the same command again to finish it"
    )
    assert "Traceback" not in err and "AllExit" not in err


def test_the_morton_coordinate_keeps_its_attrs_in_the_store(tmp_path, photons):
    leaves = zagg.aggregate(photons, config())
    assert leaves["morton"].attrs["long_name"] == "morton cell word"
    to_hive(leaves, tmp_path / "lazy")
    to_hive(leaves.compute(), tmp_path / "computed")
    for store in ("lazy", "computed"):
        assert open_hive(tmp_path / store)["morton"].attrs == leaves["morton"].attrs
    assert _hashes(tmp_path / "lazy") == _hashes(tmp_path / "computed")


def test_unversioned_leaves_look_for_earlier_attempts_and_a_rerun_heals(
    tmp_path, photons, monkeypatch
):
    """Unversioned leaves: every leaf task lists its leaf for an earlier attempt, even in
    a store the run created (another run may have written a leaf there since), and debris
    is cleared. Each leaf's stats sidecar lands with its stamp's hashes."""
    import dask
    from test_hive_builders import spy_listings

    listed = spy_listings(monkeypatch)
    store = tmp_path / "s"
    leaves = zagg.aggregate(photons, config())
    with dask.config.set(scheduler="sync"):
        first = to_hive(leaves, store, leaf_versions=False)
    paths = sorted(r["path"] for r in first.records)
    assert len(paths) == first.shards > 1
    assert sorted(p for p, _ in listed if p.endswith(".zarr")) == paths
    for r in first.records:
        sidecar = hive.read_stats(store, r["shard_id"])
        assert (
            sidecar["content_hashes"]
            == hive.read_stamp(hive.StoreRoot(store), r["path"])["content_hashes"]
        )
    debris = store / paths[0] / "13" / "stale" / "c" / "0"
    debris.parent.mkdir(parents=True)
    debris.write_bytes(b"an older attempt's object")
    listed.clear()
    with dask.config.set(scheduler="sync"):
        again = to_hive(zagg.aggregate(photons, config()), store, leaf_versions=False)
    assert sorted(p for p, _ in listed if p.endswith(".zarr")) == paths
    assert not debris.exists()
    assert {r["shard_id"]: r["content_hashes"] for r in again.records} == {
        r["shard_id"]: r["content_hashes"] for r in first.records
    }


def test_a_versioned_rewrite_adds_a_version_and_moves_the_pointer(tmp_path, photons, monkeypatch):
    """Versioned leaves (the default) are never listed nor cleared: a rewrite writes a new
    version beside the current one, then points the leaf at it; the old version stays until
    ``zagg gc``, which keeps the one ``current`` names."""
    import dask
    from test_hive_builders import spy_listings

    listed = spy_listings(monkeypatch)
    store = tmp_path / "s"
    root = hive.StoreRoot(store)
    with dask.config.set(scheduler="sync"):
        first = to_hive(zagg.aggregate(photons, config()), store)
        again = to_hive(zagg.aggregate(photons, config()), store)
    assert not [p for p, _ in listed if p.endswith(".zarr")]
    for a, b in zip(
        sorted(first.records, key=lambda r: r["path"]),
        sorted(again.records, key=lambda r: r["path"]),
        strict=True,
    ):
        assert a["version"] != b["version"] and a["run_id"] != b["run_id"]
        assert hive.read_stamp(root, b["path"])["current"] == b["version"]
        assert sorted(p.name for p in (store / b["path"]).glob("run-*")) == sorted(
            [a["version"], b["version"]]
        )
        assert a["content_hashes"] == b["content_hashes"]
    assert main(["gc", str(store), "--dry-run"]) == 0
    assert all(len(list((store / r["path"]).glob("run-*"))) == 2 for r in again.records)
    assert main(["gc", str(store)]) == 0
    for r in again.records:
        assert [p.name for p in (store / r["path"]).glob("run-*")] == [r["version"]]
    assert main(["verify", str(store)]) == 0


def test_leaves_stamped_before_a_failed_write_keep_their_sidecars(tmp_path, photons):
    """The client writes the leaves' sidecars after them; when one leaf's write fails, the
    leaves already stamped still get theirs before the failure is raised."""
    import shutil

    import dask
    from distributed import Client, LocalCluster

    store = tmp_path / "s"
    with dask.config.set(scheduler="sync"):
        first = to_hive(zagg.aggregate(photons, config()), store)
    for sidecar in store.rglob("stats.json"):
        sidecar.unlink()
    # the lightest shard: with one worker thread and the heaviest shards first, it is
    # written last, so the others are stamped before its write fails
    bad = min(first.records, key=lambda r: r["cells_with_data"])
    shutil.rmtree(store / bad["path"])
    (store / bad["path"]).write_bytes(b"a file where the leaf's directory must go")
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        with pytest.raises(OSError):
            run(config(store), source=photons, scheduler=client, progress=False)
    assert (store / bad["path"]).is_file()
    stamped = {sid: leaf for leaf, sid in hive.walk_leaves(store) if (store / leaf).is_dir()}
    assert len(stamped) == len(first.records) - 1 >= 1
    for sid, leaf in stamped.items():
        sidecar = hive.read_stats(store, sid)
        assert (
            sidecar["content_hashes"]
            == hive.read_stamp(hive.StoreRoot(store), leaf)["content_hashes"]
        )
