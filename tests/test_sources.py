"""Sources are registered records: a new kind of points is one record (parse, open, units,
describe) and runs, plans and re-runs like the built-ins; a data_source block picks its
record by key and value; ``--granules`` points a config at the user's own granules."""

import json

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from builders import atl03_source, fields, grid_orders, pipeline_config, synthetic_source
from distributed import Client

import zagg
from zagg.checks.validation import check_keys, fail
from zagg.cli.main import main
from zagg.config.model import ConfigError, load_config
from zagg.config.store import StoreSpec
from zagg.pipeline.batch import batch
from zagg.pipeline.plan import plan_run
from zagg.sources import registry
from zagg.sources.record import DataSource, Source
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -75.6, -99.8, -75.4)


# -- a plug-in source: a ramp of points along a meridian, in one module's worth of code --
def parse_ramp(raw, path):
    check_keys(raw, ("ramp", "variables"), path, ("ramp",))
    n = raw["ramp"].get("points")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        fail(f"{path}.ramp.points", f"expected a positive number of points, got {n!r}")
    return DataSource("lat", "lon", ("v",), kind="ramp", settings={"points": n})


def open_ramp(source, **_):
    n = source.settings["points"]
    lat = np.linspace(-75.6, -75.4, n)
    return xr.Dataset(
        {
            "lat": ("obs", da.from_array(lat, chunks=max(1, n // 3))),
            "lon": ("obs", da.from_array(np.full(n, -100.0), chunks=max(1, n // 3))),
            "v": ("obs", da.from_array(np.arange(n, dtype=float), chunks=max(1, n // 3))),
        }
    )


RAMP = Source(
    name="ramp",
    key="ramp",
    parse=parse_ramp,
    open=open_ramp,
    units=lambda source, ds: [f"ramp-{source.settings['points']}"],
    describe=lambda source: f"a ramp of {source.settings['points']:,} points",
)


@pytest.fixture
def ramp():
    registry.register(RAMP)
    yield RAMP
    registry.unregister("ramp")


def ramp_config(n=3_000):
    variables = fields("count", v_max={"function": "max", "source": "v"})
    return pipeline_config({"ramp": {"points": n}}, variables, grid_orders(6, 12))


def test_a_registered_record_is_a_whole_source(tmp_path, ramp, worker_process):
    store = str(tmp_path / "ramp")
    plan = plan_run(ramp_config(), store=store)
    assert "inputs          a ramp of 3,000 points" in plan.lines()
    first = zagg.run(ramp_config(), store=store, scheduler=worker_process, progress=False)
    assert first.points == 3_000 and first.leaves_written > 0
    ds = zagg.open_hive(store)
    assert int(ds["count"].values.sum()) == 3_000
    assert float(np.nanmax(ds["v_max"].values)) == 2_999.0
    # the record's read units are the gate's fingerprints: a re-run finds every leaf current
    again = zagg.run(ramp_config(), store=store, scheduler=worker_process, progress=False)
    assert again.leaves_written == 0 and again.units["current"] == first.leaves_written
    with pytest.raises(ConfigError, match=r"'data_source.ramp.points': expected a positive"):
        load_config(ramp_config(0))


def test_a_block_picks_its_record_by_key_and_value(tmp_path):
    def kind(source):
        cfg = pipeline_config(source, fields("count"), grid_orders(6, 12))
        return load_config(cfg).data_source.kind

    assert kind(synthetic_source()) == "dataset"
    assert kind(synthetic_source(points=10)) == "synthetic"
    assert kind(synthetic_source(input="p.zarr")) == "input"
    assert kind(synthetic_source(input="p.nc")) == "input"
    assert kind(synthetic_source(input="s3://b/p.parquet")) == "parquet"
    assert kind(atl03_source(tmp_path)) == "granules"
    assert kind(atl03_source(tmp_path / "cat.parquet")) == "catalog"
    with pytest.raises(ConfigError, match=r"'data_source.input': give either 'granules' or"):
        kind({**atl03_source(tmp_path), "input": "p.zarr"})
    with pytest.raises(ConfigError, match=r"'data_source': give either 'input' or 'synthetic'"):
        kind(synthetic_source(points=10, input="p.zarr"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("input"))


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    d = tmp_path_factory.mktemp("mine")
    write_granules(d, 2, points_per_granule=10_000, region=REGION, seed=9)
    return d


def granule_config(location):
    return pipeline_config(
        atl03_source(location), fields("count"), grid_orders(8, 13), name="ATL03", version="006"
    )


def test_granules_points_a_shipped_config_at_your_own_granules(tmp_path, granules, capsys):
    store = str(tmp_path / "s")
    # the shipped config's own location is not here: the plan refuses it, naming the fix
    assert main(["run", "atl03_tdigest", "--plan", "--store", store]) == 2
    err = capsys.readouterr().err
    assert "'./granules/ATL03' does not exist" in err and "--granules" in err
    argv = ["run", "atl03_tdigest", "--plan", "--store", store, "--granules", str(granules)]
    assert main(argv) == 0
    assert f"inputs          granule files: {granules}" in capsys.readouterr().out
    glob = str(granules / "ATL03_*.h5")
    plan = plan_run("atl03_tdigest", store=store, granules=glob)
    assert plan.config.data_source.granules.granules == glob
    # where the points are read from is packaging: the store is the config's store
    assert plan.spec.semantic_hash == StoreSpec.of(load_config("atl03_tdigest")).semantic_hash


def test_granules_runs_and_reruns_a_config_on_other_granules(tmp_path, granules, worker_process):
    cfg = granule_config(tmp_path / "nowhere")
    (tmp_path / "cfg.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    store = str(tmp_path / "s")
    with pytest.raises(ConfigError, match=r"'data_source.granules': .*nowhere.* does not exist"):
        zagg.run(cfg, store=store, scheduler=worker_process, progress=False)
    direct = zagg.run(
        granule_config(granules),
        store=str(tmp_path / "direct"),
        scheduler=worker_process,
        progress=False,
    )
    argv = ["run", str(tmp_path / "cfg.yaml"), "--store", store, "--granules", str(granules)]
    assert main([*argv, "--scheduler", worker_process, "--quiet"]) == 0
    got, want = zagg.open_hive(store), zagg.open_hive(str(tmp_path / "direct"))
    np.testing.assert_array_equal(got["count"].values, want["count"].values)
    assert int(got["count"].values.sum()) == direct.points > 0
    again = zagg.run(
        cfg, store=store, granules=str(granules), scheduler=worker_process, progress=False
    )
    assert again.leaves_written == 0 and again.units["current"] == direct.leaves_written


def test_a_batch_reads_every_region_from_your_granules(tmp_path, granules, worker_process):
    cfg = granule_config(tmp_path / "nowhere")
    box = tmp_path / "box.geojson"
    lon0, lat0, lon1, lat1 = REGION
    ring = [[lon0, lat0], [lon1, lat0], [lon1, lat1], [lon0, lat1], [lon0, lat0]]
    box.write_text(json.dumps({"type": "Polygon", "coordinates": [ring]}))
    out = tmp_path / "lines.txt"
    with Client(worker_process) as client, out.open("w") as lines:
        summary = batch(
            cfg,
            [str(box)],
            store=str(tmp_path / "b"),
            client=client,
            out=lines,
            progress=False,
            granules=str(granules),
        )
    assert not summary.failed
    assert summary.results[0].summary.points > 0
    ds = zagg.open_hive(str(tmp_path / "b"))
    assert int(ds["count"].values.sum()) == summary.results[0].summary.points


def test_granules_on_a_source_without_a_location_is_refused(tmp_path, capsys):
    cfg = pipeline_config(synthetic_source(points=100), fields("count"), grid_orders(6, 12))
    with pytest.raises(ConfigError, match=r"--granules names where the points are read from"):
        plan_run(cfg, store=str(tmp_path / "s"), granules=str(tmp_path))
    path = tmp_path / "cfg.yaml"
    path.write_text(json.dumps(cfg))
    argv = ["run", str(path), "--store", str(tmp_path / "s"), "--granules", "x"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("zagg: error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
