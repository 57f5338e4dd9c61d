"""The pyramid from the shell and on S3: ``zagg run --sweep``, ``zagg sweep``, inspect."""

import json
import warnings

import numpy as np
import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg.cli.main import main
from zagg.hive import artifact
from zagg.pipeline.run import run
from zagg.read.levels import open_level
from zagg.sources.synthetic import synthetic_photons

REGION = (-101.0, -76.0, -99.0, -75.0)


def config(store=None, grid=None, **output):
    return pipeline_config(
        synthetic_source(),
        fields("count", "h_max", "h_tdigest", h_tdigest={"params": {"delta": 64}}),
        grid or grid_orders(5, 10, inner=7),
        name="PYR",
        store=store or None,
        **output,
    )


@pytest.fixture(scope="module")
def photons():
    return synthetic_photons(20_000, REGION, chunk_size=500, seed=7).compute()


def test_output_sweep_chains_the_ladder_after_a_run(tmp_path, photons, worker_process):
    store = tmp_path / "store"
    summary = run(
        config(store, sweep="stages"), source=photons, scheduler=worker_process, progress=False
    )
    assert summary.sweep is not None and summary.sweep.folded == summary.sweep.nodes > 0
    assert any(line.startswith("pyramid sweep:") for line in summary.lines())
    total = int(photons["lat_ph"].notnull().sum())
    for r in (7, 6, 5, 4, 3, 2):
        assert int(open_level(store, r)["count"].sum()) == total
    m = json.loads((store / "morton_hive.json").read_text())
    assert all("actuals" in e for e in m["pyramid"]["overviews"])


def test_zagg_sweep_from_the_shell_then_inspect_lists_the_levels(tmp_path, photons, capsys):
    store = tmp_path / "store"
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(config())), str(store))
    assert main(["inspect", str(store)]) == 0
    before = capsys.readouterr().out
    assert "o7   column     " in before and "python -m zagg sweep" in before
    assert main(["sweep", str(store), "--tuple-width", "2"]) == 0
    out = capsys.readouterr().out
    assert "ladder nodes" in out and "current" in out
    assert main(["inspect", str(store)]) == 0
    after = capsys.readouterr().out
    for line in after.splitlines():
        if line.startswith("  o") and "overview" in line:
            done, total = line.split()[2].split("/")
            assert done == total, line
    assert main(["sweep", str(store)]) == 0
    assert "0 folded" in capsys.readouterr().out


def test_a_held_lease_refuses_the_shell_sweep_with_one_line(tmp_path, photons, capsys):
    from zagg.hive import StoreRoot
    from zagg.pyramid import lease

    store = tmp_path / "store"
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(config())), str(store))
    held = lease.acquire(StoreRoot(str(store)), "stage-20260101T000000Z-bbbbbb")
    try:
        assert main(["sweep", str(store)]) == 2
        err = capsys.readouterr().err
        assert "stage-20260101T000000Z-bbbbbb" in err and "holds this store" in err
    finally:
        held.release()


def test_a_run_with_the_pyramid_off_deletes_a_stale_column(tmp_path, photons):
    store = tmp_path / "store"
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(config())), str(store))
    columns = sorted(store.rglob("all.pyramid.zarr"))
    assert columns
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(config(pyramid=False))), str(store))
    assert not list(store.rglob("all.pyramid.zarr"))
    assert not list(store.rglob("all.pyramid.stats.json"))


def test_columns_and_the_ladder_on_s3_equal_the_local_store(tmp_path, photons, moto_s3):
    options, fs = moto_s3
    fs.mkdir("pyramid-store")
    url = "s3://pyramid-store/p"
    local = tmp_path / "local"
    ds = zagg.aggregate(photons, zagg.load_config(config()))
    zagg.to_hive(ds, url, storage_options=options)
    zagg.to_hive(ds, str(local))
    remote = zagg.sweep(url, storage_options=options)
    assert remote.folded == zagg.sweep(str(local)).folded > 0
    for r in (7, 5, 2):
        a = open_level(url, r, storage_options=options).compute()
        b = open_level(str(local), r).compute()
        assert a["morton"].values.tobytes() == b["morton"].values.tobytes()
        assert a["count"].values.tobytes() == b["count"].values.tobytes()
        assert [bytes(x) for x in a["h_tdigest"].values] == [
            bytes(x) for x in b["h_tdigest"].values
        ]
    root = zagg.hive.StoreRoot(url, options)
    assert not root.exists("sweep.lease.json")
    assert zagg.sweep(url, storage_options=options).objects_written == 0
    rel = artifact.column_path(ds.attrs["zagg"]["shards"][0])
    assert artifact.stamped_attrs(root, rel, "column") is not None
    assert np.isfinite(
        zagg.quantile(open_level(url, 3, storage_options=options), "h_tdigest", 0.5).values
    ).all()


def test_the_pyramid_docs_examples_run_on_the_reference_grid(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "pyramid.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2  # the unwindowed reads, then a windowed store's
    ds = synthetic_photons(5_000, REGION, chunk_size=1_000, seed=3)
    raw = config(grid={"parent_order": 9, "chunk_inner": 13, "child_order": 19})
    monkeypatch.chdir(tmp_path)
    zagg.to_hive(zagg.aggregate(ds, zagg.load_config(raw)), "store")
    zagg.sweep("store")
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    scope: dict = {}
    exec(blocks[0], scope)
    assert list(scope["tree"].children)[:3] == ["o19", "o13", "o12"]
    assert np.isfinite(scope["med"].values).all()


def test_wide_column_groups_are_sharded_and_read_back(tmp_path, photons):
    moczarr = pytest.importorskip("moczarr")
    grid = {"parent_order": 2, "chunk_inner": 5, "child_order": 9}
    raw = config(grid=grid, pyramid={"overviews": [8, 7, 6, 5]})
    store = tmp_path / "wide"
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(raw)), str(store))
    col = sorted(store.rglob("all.pyramid.zarr"))[0]
    layout = {}
    for r in (8, 7, 6):
        meta = json.loads((col / str(r) / "h_tdigest" / "zarr.json").read_text())
        codec = meta["codecs"][0]
        layout[r] = (
            meta["shape"][0],
            codec["name"],
            codec.get("configuration", {}).get("chunk_shape"),
            codec.get("configuration", {}).get("index_location"),
        )
    assert layout[8] == (4**6, "sharding_indexed", [1024], "end")
    assert layout[7] == (4**5, "sharding_indexed", [256], "end")
    assert layout[6][1] != "sharding_indexed" and layout[6][0] == 4**4
    rel = str(col.relative_to(store))
    stamp = moczarr.read_commit(str(store), rel)
    assert moczarr.hash_arrays(str(store), rel) == stamp["content_hashes"]["arrays"]
    ours = open_level(store, 8).compute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = moczarr.open_level(str(store), 8).compute()
    keep = theirs["count"].values > 0
    assert theirs["count"].values[keep].tobytes() == ours["count"].values.tobytes()
    assert [bytes(v) for v in theirs["h_tdigest"].values[keep]] == [
        bytes(v) for v in ours["h_tdigest"].values
    ]
    assert int(ours["count"].sum()) == int(photons["lat_ph"].notnull().sum())


def assert_columns_are_the_direct_fold_of_their_leaves(store):
    """Every column group equals the fold kernels applied to the committed leaf's arrays:
    from the leaf's cells at and above the boundary, from the boundary group below it."""
    from zagg.hive import StoreRoot, read_stamp, walk_leaves
    from zagg.hive.stamp import data_prefix
    from zagg.pyramid.declare import of_manifest
    from zagg.pyramid.levels import coarsen, laws_of
    from zagg.pyramid.reading import group_level
    from zagg.reducers.partials import Digests

    root = StoreRoot(str(store))
    decl = of_manifest(json.loads((store / "morton_hive.json").read_text()))
    laws = laws_of(decl.fields)
    compared = 0
    for rel, sid in walk_leaves(root):
        leaf = group_level(
            root, data_prefix(rel, read_stamp(root, rel)), sid, decl.cell_order, laws
        )
        want = {}
        for r in decl.column_groups():
            src = decl.group_source(r)
            want[r] = coarsen([leaf if src == decl.cell_order else want[src]], r, laws)[0]
            got = group_level(root, artifact.column_path(sid), sid, r, laws)
            assert sorted(got.fields) == sorted(want[r].fields)
            for name, fc in want[r].fields.items():
                other = got.fields[name]
                assert fc.words.tobytes() == other.words.tobytes(), (sid, r, name)
                if isinstance(fc.values, Digests):
                    a, b = fc.values, other.values
                    assert a.means.tobytes() == b.means.tobytes(), (sid, r, name)
                    assert a.weights_or_ones().tobytes() == b.weights_or_ones().tobytes()
                    assert a.offsets.tobytes() == b.offsets.tobytes()
                    assert (a.locs is None) == (b.locs is None)
                    if a.locs is not None:
                        assert a.locs.tobytes() == b.locs.tobytes(), (sid, r, name)
                else:
                    assert np.asarray(fc.values).tobytes() == np.asarray(other.values).tobytes(), (
                        sid,
                        r,
                        name,
                    )
                compared += 1
    return compared


@pytest.mark.parametrize("block_rows", [2_000_000, 300])  # one block per leaf, or many
def test_columns_equal_the_fold_of_their_leaves_with_compressed_digests(
    tmp_path, photons, monkeypatch, block_rows
):
    from zagg.pyramid import column

    monkeypatch.setattr(column, "BLOCK_ROWS", block_rows)
    store = tmp_path / "store"
    ds = zagg.aggregate(photons, zagg.load_config(config()))
    rows = [len(p) // 8 for p in ds["h_tdigest"].values]
    assert max(rows) == 64 > 0  # the leaf digests are compressed (weighted centroids)
    zagg.to_hive(ds, str(store))
    assert assert_columns_are_the_direct_fold_of_their_leaves(store) > 0


@pytest.mark.parametrize("block_rows", [2_000_000, 300])
def test_columns_equal_the_fold_of_their_leaves_with_single_observations(
    tmp_path, photons, monkeypatch, block_rows
):
    """Leaf digests of single observations (every weight 1: the raw groups fold from each
    group cell's values sorted) and counts, minima and maxima (folded group from group)
    give the columns the direct fold of the leaf's cells gives."""
    from zagg.pyramid import column

    monkeypatch.setattr(column, "BLOCK_ROWS", block_rows)
    raw = pipeline_config(
        synthetic_source(),
        fields("count", "h_min", "h_max", "h_tdigest", h_tdigest={"params": {"delta": 4096}}),
        grid_orders(5, 10, inner=7),
        name="PYR",
    )
    ds = zagg.aggregate(photons, zagg.load_config(raw))
    payloads = [np.frombuffer(p, "<f4").reshape(-1, 2) for p in ds["h_tdigest"].values if p]
    assert all((p[:, 1] == 1).all() for p in payloads)  # single observations only
    assert max(len(p) for p in payloads) > 128  # some group cell compresses at 128
    store = tmp_path / "store"
    zagg.to_hive(ds, str(store))
    assert assert_columns_are_the_direct_fold_of_their_leaves(store) > 0


def test_columns_equal_the_fold_of_their_leaves_located_and_flux(tmp_path, photons, monkeypatch):
    from zagg.pyramid import column

    monkeypatch.setattr(column, "BLOCK_ROWS", 200)
    raw = config(pyramid={"overviews": [8, 7]})
    photons = photons.assign(flux=photons["h_ph"] * 0 + 2.5)
    raw["data_source"]["variables"] = ["h_ph", "flux"]
    raw["aggregation"]["variables"].update(
        {
            "h_located": {
                "function": "tdigest",
                "source": "h_ph",
                "located": True,
                "params": {"delta": 32},
            },
            "h_flux": {
                "function": "tdigest",
                "source": "h_ph",
                "params": {
                    "delta": 32,
                    "weights": "flux",
                    "weight_source": "flux",
                    "gain": {"name": "unit", "version": "1"},
                },
            },
        }
    )
    store = tmp_path / "store"
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(raw)), str(store))
    assert assert_columns_are_the_direct_fold_of_their_leaves(store) > 0
