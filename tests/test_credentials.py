"""Credentials never show (config repr, Dataset attrs) and never enter a store's identity."""

import copy

import numpy as np
import pytest
import xarray as xr

import zagg
from zagg.config.store import StoreSpec

SECRET = "s3cr3t-value-0123"


def _config(secret=SECRET, source=None):
    src = {
        "coordinates": {"latitude": "lat", "longitude": "lon"},
        "variables": ["h"],
        "input": "s3://bucket/points.zarr",
        "storage_options": {
            "key": "AKIDEXAMPLE",
            "secret": secret,
            "endpoint_url": "http://127.0.0.1:9000",
        },
    }
    src.update(source or {})
    return {
        "data_source": src,
        "aggregation": {
            "variables": {"n": {"function": "count"}, "hm": {"function": "mean", "source": "h"}}
        },
        "output": {
            "store": "s3://bucket/store",
            "dataset": {"short_name": "X", "version": "1"},
            "grid": {"parent_order": 6, "child_order": 10},
            "storage_options": {"key": "AKIDEXAMPLE", "secret": secret},
        },
    }


def _points():
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "lat": ("obs", rng.uniform(-60, -59.9, 500)),
            "lon": ("obs", rng.uniform(10, 10.1, 500)),
            "h": ("obs", rng.normal(size=500)),
        }
    )


def test_secrets_are_masked_in_reprs_and_in_the_attrs_a_notebook_shows():
    cfg = zagg.load_config(_config())
    assert SECRET not in repr(cfg) and SECRET not in str(cfg.output.storage_options)
    assert "***" in repr(cfg.output.storage_options)
    leaves = zagg.aggregate(_points(), cfg)
    assert SECRET not in repr(leaves.attrs) and SECRET not in leaves._repr_html_()
    recorded = leaves.attrs["zagg"]["config"]
    assert recorded["output"]["storage_options"]["secret"] == "***"
    assert recorded["data_source"]["storage_options"]["endpoint_url"] == "http://127.0.0.1:9000"
    assert cfg.output.storage_options["secret"] == SECRET  # the run itself still has it


def test_where_and_how_points_are_fetched_is_not_part_of_the_store_identity():
    def hash_of(raw):
        return StoreSpec.of(zagg.load_config(raw)).semantic_hash

    base = hash_of(_config())
    assert hash_of(_config(secret="rotated-key-456")) == base
    assert hash_of(_config(source={"input": "/data/points.zarr", "storage_options": None})) == base
    changed = copy.deepcopy(_config())
    changed["data_source"]["filters"] = [{"variable": "h", "op": "gt", "value": 0}]
    assert hash_of(changed) != base  # what is read still counts


def test_output_storage_options_are_validated_without_showing_secrets():
    raw = _config()
    raw["output"]["storage_options"]["secret_key"] = SECRET
    with pytest.raises(
        zagg.ConfigError,
        match=r"output.storage_options.secret_key': unknown "
        r"key",
    ) as err:
        zagg.load_config(raw)
    assert SECRET not in str(err.value)


def test_an_s3_zarr_input_is_read_with_its_storage_options(tmp_path, moto_s3, worker_process):
    from zagg.engine.write import to_hive
    from zagg.pipeline.run import run

    options, fs = moto_s3
    fs.mkdir("points-in")
    points = _points()
    points.to_zarr("s3://points-in/p.zarr", storage_options=options, consolidated=False)
    raw = _config(source={"input": "s3://points-in/p.zarr", "storage_options": options})
    raw["output"] = {**raw["output"], "store": str(tmp_path / "s")}
    del raw["output"]["storage_options"]
    summary = run(raw, scheduler=worker_process, progress=False)
    local = to_hive(zagg.aggregate(points, raw), tmp_path / "local")
    assert summary.points == local.points == 500
    got, want = zagg.open_hive(tmp_path / "s").load(), zagg.open_hive(tmp_path / "local").load()
    np.testing.assert_array_equal(got["n"].values, want["n"].values)
    bad = copy.deepcopy(raw)
    bad["data_source"]["storage_options"] = {**options, "secret": SECRET}
    bad["data_source"]["input"] = "s3://no-such-bucket/p.zarr"
    with pytest.raises(zagg.ConfigError, match="data_source.input") as err:
        run(bad, store=str(tmp_path / "t"), scheduler=worker_process, progress=False)
    assert SECRET not in str(err.value)
