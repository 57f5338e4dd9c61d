"""Config validation: good configs parse; every bad one is refused with a message that names
the key path, the bad value and what would be valid."""

import copy
import math
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from zagg.config.model import ConfigError, load_config

BASE = {
    "data_source": {
        "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
        "variables": ["h_ph", "signal_conf_ph", "delta_time"],
        "time": "delta_time",
        "filters": [{"variable": "signal_conf_ph", "column": 3, "op": "ge", "value": 2}],
    },
    "aggregation": {
        "variables": {
            "count": {"function": "count"},
            "h_mean": {"function": "mean", "source": "h_ph", "attrs": {"units": "m"}},
            "h_tdigest": {"function": "tdigest", "source": "h_ph", "params": {"delta": 256}},
        }
    },
    "output": {
        "store": "./store",
        "store_layout": "hive",
        "dataset": {"short_name": "ATL03", "version": "007"},
        "grid": {"type": "healpix", "parent_order": 9, "chunk_inner": 13, "child_order": 19},
    },
}


def variant(path, value, delete=False):
    cfg = copy.deepcopy(BASE)
    keys = path.split(".")
    node = cfg
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if delete:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return cfg


def test_base_config_parses_with_defaults():
    cfg = load_config(BASE)
    assert cfg.grid.cells_per_shard == 4**10
    assert cfg.grid.inner_chunks == 256
    assert cfg.grid.sharded is True
    f = cfg.fields["count"]
    assert (f.dtype, f.fill_value, f.source) == ("int64", 0, None)
    m = cfg.fields["h_mean"]
    assert m.dtype == "float32" and math.isnan(m.fill_value)
    td = cfg.fields["h_tdigest"]
    assert td.params == {"delta": 256, "weights": "counts", "weight_source": None, "gain": None}
    assert td.array_attrs() == {
        "long_name": "photon height",
        "units": "m",
        "ragged": {"spec": "zagg-ragged/1", "element": {"dtype": "float32", "shape": [-1, 2]}},
        "weights": "counts",
    }
    assert m.array_attrs() == {"long_name": "mean photon height", "units": "m"}
    filt = cfg.data_source.filters[0]
    conf = np.array([[0, 0, 0, 4, 0], [0, 0, 0, 1, 0]], np.int8)
    np.testing.assert_array_equal(filt.mask(conf), [True, False])


def test_every_field_is_named_with_cf_long_name_and_units():
    """long_name and units follow from what the source measures and the reducer; a stratum
    or predicate says which points; the config's own attrs win."""
    cfg = copy.deepcopy(BASE)
    cfg["data_source"]["variables"] = ["h_ph", "signal_conf_ph", "delta_time", "q"]
    cfg["aggregation"]["variables"] = {
        "count": {"function": "count"},
        "h_count": {"function": "count", "source": "h_ph"},
        "h_sum": {"function": "sum", "source": "h_ph"},
        "h_min": {"function": "min", "source": "h_ph"},
        "h_var": {"function": "var", "source": "h_ph"},
        "h_std": {"function": "std", "source": "h_ph"},
        "q_max": {"function": "max", "source": "q"},
        "h_high": {"function": "mean", "source": "h_ph", "where": "q >= 2"},
        "h_named": {"function": "max", "source": "h_ph", "attrs": {"long_name": "crest"}},
        "h_signal": {
            "function": "tdigest",
            "source": "h_ph",
            "where": "q >= 1",
            "stratum": {"name": "signal", "threshold": 2},
        },
        "composition": {
            "function": "composition",
            "source": "signal_conf_ph",
            "params": {"of": "h_signal"},
        },
    }
    fields = load_config(cfg).fields
    got = {
        n: (f.array_attrs().get("long_name"), f.array_attrs().get("units"))
        for n, f in fields.items()
    }
    assert got == {
        "count": ("number of points", "1"),
        "h_count": ("number of photon height values", "1"),
        "h_sum": ("sum of photon height", "m"),
        "h_min": ("minimum photon height", "m"),
        "h_var": ("variance of photon height", "m2"),
        "h_std": ("standard deviation of photon height", "m"),
        "q_max": ("maximum q", None),  # an unknown variable: its name, no units
        "h_high": ("mean photon height where q >= 2", "m"),
        "h_named": ("crest", "m"),
        "h_signal": ("signal photon height", "m"),
        "composition": ("signal confidence composition of h_signal", None),
    }


def test_a_loaded_config_is_read_only_and_survives_pickling():
    """The validated mapping identifies a store (its semantic hash): editing a loaded config
    in place is refused, and editing ``raw`` changes a copy, never the config."""
    import pickle

    cfg = load_config(BASE)
    with pytest.raises(TypeError, match="read-only.*load it again"):
        cfg.fields.pop("h_mean")
    with pytest.raises(TypeError, match="read-only"):
        cfg.fields["h_tdigest"].params["delta"] = 16
    with pytest.raises(TypeError, match="read-only"):
        cfg.fields["h_mean"].attrs.update(units="km")
    edited = cfg.raw
    edited["output"]["grid"]["child_order"] = 18
    del edited["aggregation"]["variables"]["h_mean"]
    assert cfg.raw == BASE and cfg.grid.cell_order == 19
    assert load_config(edited).grid.cell_order == 18  # the documented way to change one
    again = pickle.loads(pickle.dumps(cfg))
    assert again.raw == BASE and again.fields["h_tdigest"] == cfg.fields["h_tdigest"]
    with pytest.raises(TypeError, match="read-only"):
        again.fields.clear()


def test_a_config_path_without_its_extension_is_not_taken_for_yaml_text(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"'configs/atl03_synthetic' is neither an existing "
        r"\.yaml/\.yml file, the name of a shipped config nor "
        r"YAML text.*ending in \.yaml",
    ):
        load_config("configs/atl03_synthetic")
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_config(str(tmp_path / "missing.yaml"))
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"dir.yaml' is a directory"):
        load_config(str(tmp_path / "dir.yaml"))
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match=r"bin.yaml' is not a readable UTF-8 text file"):
        load_config(str(tmp_path / "bin.yaml"))


def test_yaml_text_and_packaged_configs_load():
    text = (
        "data_source:\n  coordinates: {latitude: a, longitude: b}\n  variables: [v]\n"
        "aggregation:\n  variables:\n    n: {function: count}\n"
        "output:\n  dataset: {short_name: X, version: '1'}\n"
        "  grid: {parent_order: 3, child_order: 6}\n"
    )
    cfg = load_config(text)
    assert cfg.grid.chunk_order == 6  # default: min(child, parent + 4)
    configs = sorted(Path(__file__).parent.parent.joinpath("configs").glob("*.yaml"))
    assert configs, "packaged configs are missing"
    for path in configs:
        load_config(path)


def test_yaml_is_loaded_safely():
    evil = "data_source: !!python/object/apply:os.system ['echo pwned']\n"
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(evil)


BAD = [
    # (description, config, expected message regex)
    (
        "unknown top-level key",
        variant("outptu", {}),
        r"config key 'outptu': unknown key \(did you mean 'output'\?\)",
    ),
    (
        "misspelt grid key",
        variant("output.grid.child_ordr", 19),
        r"'output.grid.child_ordr': unknown key \(did you mean 'child_order'\?\)",
    ),
    (
        "misspelt field key",
        variant("aggregation.variables.h_mean.sourse", "h_ph"),
        r"'aggregation.variables.h_mean.sourse': unknown key \(did you mean 'source'\?\)",
    ),
    ("missing output", variant("output", None, delete=True), r"'output': is required"),
    (
        "parent order too big",
        variant("output.grid.parent_order", 30),
        r"'output.grid.parent_order': order 30 is outside 0..29",
    ),
    (
        "negative order",
        variant("output.grid.child_order", -1),
        r"'output.grid.child_order': order -1 is outside 0..29",
    ),
    (
        "order not an int",
        variant("output.grid.parent_order", "9"),
        r"'output.grid.parent_order': expected an integer order 0..29, got '9'",
    ),
    (
        "parent above child",
        variant("output.grid.parent_order", 20),
        r"'output.grid': parent_order 20 > child_order 19",
    ),
    (
        "chunk_inner below parent",
        variant("output.grid.chunk_inner", 8),
        r"'output.grid.chunk_inner': 8 must lie between parent_order 9 and child_order 19",
    ),
    (
        "chunk_inner above child",
        variant("output.grid.chunk_inner", 20),
        r"'output.grid.chunk_inner': 20 must lie between",
    ),
    (
        "shard too large",
        variant("output.grid.parent_order", 4),
        r"'output.grid': one shard of 4\^\(19-4\) = 1,073,741,824 cells needs about .* MiB, over "
        r"the shard_memory_limit .* raise parent_order",
    ),
    (
        "grid type",
        variant("output.grid.type", "rectilinear"),
        r"'output.grid.type': 'rectilinear' is not supported; the morton hive needs 'healpix'",
    ),
    (
        "layout",
        variant("output.store_layout", "flat"),
        r"'output.store_layout': 'flat' is not supported; use 'hive'",
    ),
    (
        "unknown function",
        variant("aggregation.variables.h_mean.function", "meen"),
        r"'aggregation.variables.h_mean.function': unknown function 'meen' \(did you mean "
        r"'mean'\?\); valid: composition, count, max, mean, min, std, sum, tdigest, time_range, var",
    ),
    (
        "source not declared",
        variant("aggregation.variables.h_mean.source", "h_li"),
        r"'aggregation.variables.h_mean.source': 'h_li' is not declared in data_source.variables",
    ),
    (
        "mean without source",
        variant("aggregation.variables.h_mean.source", None, delete=True),
        r"'aggregation.variables.h_mean.source': function 'mean' needs a source variable",
    ),
    (
        "fill not representable int",
        variant("aggregation.variables.count.fill_value", -1.5),
        r"'aggregation.variables.count.fill_value': -1.5 is not representable in dtype int64",
    ),
    (
        "fill overflows dtype",
        variant(
            "aggregation.variables.count", {"function": "count", "dtype": "int8", "fill_value": 300}
        ),
        r"'aggregation.variables.count.fill_value': 300 is not representable in dtype int8",
    ),
    (
        "fill is a string",
        variant("aggregation.variables.h_mean.fill_value", "none"),
        r"'aggregation.variables.h_mean.fill_value': 'none' is not representable in dtype float32",
    ),
    (
        "bad dtype name",
        variant("aggregation.variables.h_mean.dtype", "float33"),
        r"'aggregation.variables.h_mean.dtype': 'float33' is not a numpy dtype name",
    ),
    (
        "fill beyond float32",
        variant("aggregation.variables.h_mean.fill_value", 1e40),
        r"'aggregation.variables.h_mean.fill_value': 1e\+40 is not representable in dtype float32",
    ),
    (
        "CF scale attr",
        variant("aggregation.variables.h_mean.attrs", {"scale_factor": 2.0}),
        r"'aggregation.variables.h_mean.attrs.scale_factor': 'scale_factor' tells CF readers",
    ),
    (
        "CF fill attr",
        variant("aggregation.variables.h_mean.attrs", {"_FillValue": -9999.0}),
        r"'aggregation.variables.h_mean.attrs._FillValue': .*set by fill_value",
    ),
    (
        "CF time units",
        variant("aggregation.variables.h_mean.attrs", {"units": "days since 2000-01-01"}),
        r"'aggregation.variables.h_mean.attrs.units': 'units' tells CF readers",
    ),
    (
        "params on a function without any",
        variant("aggregation.variables.count.params", {"delta": 3}),
        r"'aggregation.variables.count.params': 'count' takes no params; remove this key",
    ),
    (
        "date attr",
        variant("aggregation.variables.h_mean.attrs", {"created": date(2024, 1, 1)}),
        r"'aggregation.variables.h_mean.attrs.created': datetime.date\(2024, 1, 1\) \(date\) "
        r"cannot be stored as a JSON attribute; quote it",
    ),
    (
        "nan attr",
        variant("aggregation.variables.h_mean.attrs", {"valid_max": math.nan}),
        r"'aggregation.variables.h_mean.attrs.valid_max': nan cannot be stored: attrs are JSON",
    ),
    (
        "nan filter value",
        variant("data_source.filters.0.value", math.inf),
        r"'data_source.filters\[0\].value': filter values must be finite numbers",
    ),
    (
        "unquoted version",
        variant("output.dataset.version", 7),
        r"'output.dataset.version': got the number 7; write the version as text, quoted "
        r"\(version: '007' or '7'\)",
    ),
    (
        "misspelt dtype",
        variant("aggregation.variables.h_mean.dtype", "flaot32"),
        r"'flaot32' is not a numpy dtype name \(did you mean 'float32'\?\)",
    ),
    (
        "integer mean",
        variant("aggregation.variables.h_mean.dtype", "int32"),
        r"'aggregation.variables.h_mean.dtype': 'int32' is not valid for 'mean'; use float16/32/64",
    ),
    (
        "digest dtype",
        variant("aggregation.variables.h_tdigest.dtype", "float64"),
        r"'aggregation.variables.h_tdigest.dtype': t-digest payloads are float32",
    ),
    (
        "delta out of range",
        variant("aggregation.variables.h_tdigest.params.delta", 2),
        r"'aggregation.variables.h_tdigest.params.delta': 2 is invalid; expected an integer from "
        r"16 to 1000000",
    ),
    (
        "unknown param",
        variant("aggregation.variables.h_tdigest.params.compression", 100),
        r"'aggregation.variables.h_tdigest.params.compression': unknown key; valid keys here: "
        r"delta",
    ),
    (
        "shadow ragged attr",
        variant("aggregation.variables.h_tdigest.attrs", {"ragged": {}}),
        r"'aggregation.variables.h_tdigest.attrs.ragged': 'ragged' is owned by the store format",
    ),
    (
        "shadow weights attr",
        variant("aggregation.variables.h_mean.attrs", {"weights": "flux"}),
        r"'aggregation.variables.h_mean.attrs.weights': 'weights' is owned by the store format",
    ),
    (
        "shadow temporal attr",
        variant("aggregation.variables.count.attrs", {"temporal": 1}),
        r"'aggregation.variables.count.attrs.temporal': 'temporal' is owned",
    ),
    (
        "unknown filter op",
        variant("data_source.filters.0.op", "gte"),
        r"'data_source.filters\[0\].op': unknown operator 'gte' \(did you mean 'gt'\?\); valid: "
        r"eq, ne, lt, le, gt, ge, in, not_in",
    ),
    (
        "filter on undeclared variable",
        variant("data_source.filters.0.variable", "quality_ph"),
        r"'data_source.filters\[0\].variable': 'quality_ph' is not declared",
    ),
    (
        "filter in without list",
        variant("data_source.filters.0", {"variable": "h_ph", "op": "in", "value": 3}),
        r"'data_source.filters\[0\].value': operator 'in' needs a non-empty list, got 3",
    ),
    (
        "filter value string",
        variant("data_source.filters.0.value", "high"),
        r"'data_source.filters\[0\].value': filter values must be numbers, got 'high'",
    ),
    (
        "variables not a list",
        variant("data_source.variables", "h_ph"),
        r"'data_source.variables': expected a list of variable names or a mapping of names to "
        r"variables, got 'h_ph'",
    ),
    (
        "coordinates missing latitude",
        variant("data_source.coordinates.latitude", None, delete=True),
        r"'data_source.coordinates.latitude': is required but missing",
    ),
    (
        "empty aggregation",
        variant("aggregation.variables", {}),
        r"'aggregation.variables': expected a non-empty mapping of output fields",
    ),
    (
        "field named morton",
        variant("aggregation.variables.morton", {"function": "count"}),
        r"'aggregation.variables.morton': field names must be identifiers .* and not 'morton'",
    ),
    (
        "sharded not bool",
        variant("output.grid.sharded", "yes"),
        r"'output.grid.sharded': expected true or false, got 'yes'",
    ),
    (
        "memory limit garbage",
        variant("output.shard_memory_limit", "lots"),
        r"'output.shard_memory_limit': 'lots' is not a positive size",
    ),
    (
        "dataset version missing",
        variant("output.dataset.version", None, delete=True),
        r"'output.dataset.version': is required but missing",
    ),
    (
        "cell order 28",
        variant("output.grid.child_order", 28),
        r"'output.grid.child_order': cell order 28 is not supported yet",
    ),
]


@pytest.mark.parametrize("desc,cfg,message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_refused_with_a_named_message(desc, cfg, message):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the message is the whole report: no numpy warnings
        with pytest.raises(ConfigError, match=message):
            load_config(cfg)


def test_the_bad_table_is_large_enough():
    assert len(BAD) >= 20


def test_shard_memory_limit_can_be_raised():
    cfg = variant("output.grid.parent_order", 6)
    with pytest.raises(ConfigError, match="shard_memory_limit"):
        load_config(cfg)
    cfg["output"]["shard_memory_limit"] = "64GiB"
    assert load_config(cfg).grid.cells_per_shard == 4**13


def test_reducer_registry_is_consistent():
    from zagg.reducers import records as reducers

    for r in reducers.REGISTRY.values():
        assert r.kind in reducers.KINDS and r.pyramid_class in reducers.PYRAMID_CLASSES
        assert r.chunk and all(callable(s.chunk) and callable(s.combine) for s in r.chunk)
        assert callable(r.finalize), r.name
    # the moments share their states by name: mean and std of one variable share "sum"
    names = {r.name: [s.name for s in r.chunk] for r in reducers.REGISTRY.values()}
    assert names["mean"] == ["count", "sum"] and names["std"] == ["count", "sum", "sumsq"]


def test_the_data_source_declares_the_clock_that_timed_fields_read():
    timed = variant("aggregation.variables.h_tdigest.timed", True)
    with pytest.raises(
        ConfigError,
        match=r"'aggregation.variables.h_tdigest.timed': per-centroid times .* declare the "
        r"clock beside the time variable \(data_source.time with data_source.epoch",
    ):
        load_config(timed)
    timed["data_source"].update(epoch="2018-01-01T00:00:00Z", scale="gps")
    cfg = load_config(timed)
    assert cfg.clock == ("delta_time", "2018-01-01T00:00:00Z", "gps", "seconds")
    assert cfg.output.windowing is None and cfg.output.pyramid is not None
    # a windowing block reads the same clock unless it says otherwise, and may not contradict it
    timed["output"]["windowing"] = {"schedule": "yearly"}
    w = load_config(timed).output.windowing
    assert (w.time_field, w.scale, w.units, str(w.epoch)) == (
        "delta_time",
        "gps",
        "seconds",
        "2018-01-01T00:00:00",
    )
    timed["output"]["windowing"]["scale"] = "utc"
    with pytest.raises(
        ConfigError, match=r"'output.windowing.scale': 'utc' differs from the data source's clock"
    ):
        load_config(timed)
    bad = [
        ("data_source.time", None, r"'data_source.epoch': the clock describes the time variable"),
        ("data_source.epoch", "2018-01-01T00:00:00.5Z", r"'data_source.epoch': .* whole second"),
        ("data_source.scale", "glonass", r"'data_source.scale': 'glonass' is not a time scale"),
        ("data_source.units", "hours", r"'data_source.units': 'hours' is not a unit"),
        ("data_source.time", "t", r"'data_source.time': 't' is not declared"),
    ]
    for path, value, message in bad:
        cfg = copy.deepcopy(timed)
        del cfg["output"]["windowing"]
        keys = path.split(".")
        if value is None:
            del cfg[keys[0]][keys[1]]
        else:
            cfg[keys[0]][keys[1]] = value
        with pytest.raises(ConfigError, match=message):
            load_config(cfg)
    scale_only = variant("data_source.scale", "gps")
    with pytest.raises(ConfigError, match=r"'data_source.epoch': give the instant"):
        load_config(scale_only)


def test_a_granule_source_declares_its_clock_beside_delta_time():
    raw = load_config("atl03_strata_granules").raw
    assert load_config(raw).clock == ("time", "2018-01-01T00:00:00Z", "gps", "seconds")
    del raw["data_source"]["delta_time"]
    with pytest.raises(ConfigError, match=r"add data_source.delta_time"):
        load_config(raw)
    raw = load_config("atl03_strata_granules").raw
    del raw["data_source"]["epoch"], raw["data_source"]["scale"]
    with pytest.raises(
        ConfigError,
        match=r"'aggregation.variables.h_tdigest_signal.timed': .* \(data_source.delta_time "
        r"with data_source.epoch",
    ):
        load_config(raw)
