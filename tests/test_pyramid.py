"""The pyramid declaration (spec §4.4–4.5, §4.9) and the reducer fold laws."""

import copy

import numpy as np
import pytest
import yaml

import zagg
from zagg.config.model import ConfigError
from zagg.pyramid import declare
from zagg.pyramid.declare import Declaration, resolutions
from zagg.reducers import records as reducers
from zagg.reducers.partials import Groups
from zagg.reducers.records import Fold, Reducer, State

STRATA = yaml.safe_load(open("configs/atl03_strata.yaml"))


def strata(pyramid=..., sweep=None, grid=None):
    raw = copy.deepcopy(STRATA)
    if grid:
        raw["output"]["grid"] = grid
    if pyramid is not ...:
        raw["output"]["pyramid"] = pyramid
    if sweep is not None:
        raw["output"]["sweep"] = sweep
    return raw


def manifest_of(raw):
    from zagg.config.store import StoreSpec
    from zagg.engine.manifest import manifest_for

    return manifest_for(StoreSpec.of(zagg.load_config(raw)))


# -- the ladder ----------------------------------------------------------------------------
def test_reference_geometry_expands_every_order_to_zero():
    block = manifest_of(strata({"overviews": [13]}))["pyramid"]
    assert block["spec"] == "zagg-pyramid/2"
    assert block["overviews"] == [{"node": 9, "cells": [13]}] + [
        {"node": k, "cells": [k + 4]} for k in range(8, -1, -1)
    ]


def test_default_is_the_chunk_order_and_scalar_is_sugar():
    assert manifest_of(strata())["pyramid"] == manifest_of(strata({"overviews": 13}))["pyramid"]
    assert resolutions(None, 9, 13, 19) == (13,)
    assert resolutions(None, 9, 9, 19) is None  # K == 1: the chunk order is not interior
    assert resolutions({"overviews": [16, 15, 14, 13]}, 9, 13, 19) == (16, 15, 14, 13)


@pytest.mark.parametrize(
    "value, words",
    [
        ({"overviews": [12, 10]}, "missing [11]"),
        ({"overviews": [10, 12]}, "strictly descending"),
        ({"overviews": [9]}, "not strictly between parent_order 9"),
        ({"overviews": 19}, "not strictly between"),
        ({"overviews": [True]}, "integer"),
        ({"overviews": []}, "non-empty list"),
        ({"orders": [7, 5]}, "zagg-pyramid/1 schedule"),
        ({"overviews": [13], "spacing": 2}, "zagg-pyramid/1 schedule"),
        ({"overview": [13]}, "did you mean 'overviews'"),
        ({"overviews": [13], "overview_delta": 3}, "overview_delta"),
        ("yes", "expected false, true or a mapping"),
    ],
)
def test_declaration_refusals_name_the_key_and_gap(value, words):
    with pytest.raises(ConfigError, match="output.pyramid") as info:
        zagg.load_config(strata(value))
    assert words in str(info.value)


def test_base_past_twice_the_shard_order_is_refused_naming_base():
    grid = {"parent_order": 3, "chunk_inner": 5, "child_order": 12}
    with pytest.raises(ConfigError, match="base 8 .* 2 \\* parent_order \\+ 1 = 7"):
        zagg.load_config(strata({"overviews": [9, 8]}, grid=grid))
    assert zagg.load_config(strata({"overviews": [7]}, grid=grid)).output.pyramid == (7,)


def test_pyramid_false_writes_the_declared_off_form_without_mirror():
    m = manifest_of(strata(False))
    assert m["pyramid"] == {"spec": "zagg-pyramid/1", "overview": {"orders": []}}
    assert "multiscales" not in m


def test_sweep_key():
    assert zagg.load_config(strata(sweep="stages")).output.sweep == "stages"
    assert zagg.load_config(strata(sweep=True)).output.sweep == "stages"
    assert zagg.load_config(strata()).output.sweep == "stages"  # a run builds its pyramid
    assert zagg.load_config(strata(sweep=False)).output.sweep is None
    assert zagg.load_config(strata(False)).output.sweep is None  # nothing to sweep
    with pytest.raises(ConfigError, match="output.sweep"):
        zagg.load_config(strata(sweep="always"))
    with pytest.raises(ConfigError, match="output.sweep.*declares none"):
        zagg.load_config(strata(False, sweep="stages"))


# -- the composability map -----------------------------------------------------------------
def test_field_map_of_the_strata_product():
    fields = manifest_of(strata())["pyramid"]["overview"]["fields"]
    assert fields["count"] == {
        "class": "exact",
        "method": "sum",
        "nan_policy": "skip",
        "dtype": "int64",
        "fill_value": 0,
        "function": "count",
    }
    assert fields["h_tdigest"] == {
        "class": "approximate",
        "method": "tdigest_kway",
        "dtype": "float32",
        "inner_shape": [2],
        "delta": 512,
        "overview_delta": 128,  # neither the field nor the pyramid names one: the cap
        "function": "tdigest",
    }
    assert fields["h_tdigest_signal"]["location"] == "coordinates"
    assert fields["composition"] == {
        "class": "packed",
        "method": "composition_kway",
        "dtype": "uint64",
        "fill_value": 0,
        "of": "h_tdigest_signal",
        "threshold": 2,
        "function": "composition",
    }
    assert "h_tdigest_signal_locations" not in fields


def test_none_fields_carry_class_only_and_overview_delta_splits():
    raw = strata({"overviews": 13, "overview_delta": 128})
    raw["aggregation"]["variables"]["h_mean"] = {"function": "mean", "source": "h_ph"}
    fields = manifest_of(raw)["pyramid"]["overview"]["fields"]
    assert fields["h_mean"] == {"class": "none"}
    assert fields["h_tdigest"]["delta"] == 512 and fields["h_tdigest"]["overview_delta"] == 128


def test_a_fields_overview_delta_wins_over_the_pyramids():
    raw = strata({"overviews": 13, "overview_delta": 256})
    raw["aggregation"]["variables"]["h_tdigest"]["overview_delta"] = 64
    fields = manifest_of(raw)["pyramid"]["overview"]["fields"]
    assert fields["h_tdigest"]["overview_delta"] == 64
    assert fields["h_tdigest_signal"]["overview_delta"] == 256  # the pyramid's default
    # a pyramid setting: the store's semantic hash does not move with it
    plain = strata({"overviews": 13, "overview_delta": 256})
    assert manifest_of(raw)["semantic_hash"] == manifest_of(plain)["semantic_hash"]


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("count", 128, "a t-digest field's, not 'count'"),
        ("h_tdigest", 8, "integer from 16 to 1000000, got 8"),
        ("h_tdigest", "big", "integer from 16 to 1000000"),
        ("h_tdigest", True, "integer from 16 to 1000000"),
    ],
)
def test_a_bad_field_overview_delta_is_refused_by_key(name, value, message):
    raw = strata()
    raw["aggregation"]["variables"][name]["overview_delta"] = value
    with pytest.raises(
        ConfigError, match=rf"aggregation.variables.{name}.overview_delta.*{message}"
    ):
        zagg.load_config(raw)


def test_packed_over_a_flux_divisor_is_declared_none():
    fields = {
        "sig": {
            "function": "tdigest",
            "kind": "ragged",
            "dtype": "float32",
            "params": {"delta": 64, "weights": "flux", "gain": {"name": "g", "version": 1}},
        },
        "comp": {
            "function": "composition",
            "kind": "dense",
            "dtype": "uint64",
            "fill_value": 0,
            "params": {"of": "sig", "threshold": 2},
        },
    }
    out = declare.field_map(fields)
    assert out["sig"]["class"] == "approximate" and out["sig"]["weights"] == "flux"
    assert out["comp"] == {"class": "none"}


def test_multiscales_mirror_is_derived_from_the_block():
    m = manifest_of(strata({"overviews": [14, 13]}))
    [ms] = m["multiscales"]
    assert ms["spec"] == "zagg-multiscales/1" and ms["name"] == "ATL03_STRATA"
    assert ms["base"] == {"order": 9, "cells": [19]}
    entries = m["pyramid"]["overviews"]
    assert [(d["order"], d["cells"]) for d in ms["datasets"]] == [
        (e["node"], e["cells"]) for e in entries
    ]
    assert [d["artifact"] for d in ms["datasets"]] == ["column"] + ["overview"] * 9
    assert ms["order2res"] == {str(e["node"]): e["cells"] for e in entries}
    fields = m["pyramid"]["overview"]["fields"]
    assert ms["fields"] == {n: e["class"] for n, e in fields.items()}
    assert ms["fold"] == {"fold_source": "cascade", "exact_levels": 1}


def test_moczarr_reads_the_declaration():
    pytest.importorskip("moczarr")
    from moczarr.level import pyramid_levels

    m = manifest_of(strata({"overviews": [14, 13]}))
    table = pyramid_levels(m)
    assert table[19]["artifact"] == "source"
    assert {r for r, e in table.items() if e["artifact"] == "column"} == {14, 13}
    assert {r: e["order"] for r, e in table.items() if e["artifact"] == "overview"} == {
        k + 4: k for k in range(9)
    }


def test_merges_from_raw_on_the_reference_geometry():
    d = Declaration(9, 19, (13,))
    assert {r: d.group_mfr(r) for r in d.column_groups()} == {13: 1, 12: 1, 11: 1, 10: 2, 9: 2}
    assert [d.level_mfr(k) for k in range(8, -1, -1)] == [1, 1, 2, 2, 3, 4, 5, 6, 7]
    shallow = Declaration(4, 6, (5,))  # the boundary is not below the cell order
    assert {r: shallow.group_mfr(r) for r in shallow.column_groups()} == {5: 1, 4: 1}


# -- fold laws -----------------------------------------------------------------------------
def _groups(parents):
    return Groups.of(np.asarray(parents))[0]


def test_exact_laws_fold_through_the_state_combines():
    g = _groups([0, 0, 1, 1, 1])
    count = reducers.get("count").pyramid_fold.combine
    assert count([np.array([3, 4]), np.array([1, 2, 5])], g, {}).tolist() == [7, 8]
    vals = [np.array([0.1, 0.2]), np.array([1e16, 1.0, -1e16])]
    got = reducers.get("sum").pyramid_fold.combine(vals, g, {})
    assert got.tolist() == [0.1 + 0.2, 1.0]  # double-double: the large terms cancel exactly
    vmin = reducers.get("min").pyramid_fold.combine([np.array([2.0, np.nan, 3.0, 1.0, 5.0])], g, {})
    assert vmin.tolist() == [2.0, 1.0]  # NaN is skipped


def test_composition_law_is_the_kway_form_weighted_by_its_digest():
    from zagg.kernels import composition

    words = composition.pack(
        np.array([[255, 0, 0, 0, 0, 0, 0, 255], [0, 0, 0, 255, 0, 0, 0, 255]], np.uint8)
    )
    fold = reducers.get("composition").pyramid_fold
    assert fold.needs_divisor
    got = fold.combine([words], _groups([0, 0]), {}, [np.array([3, 1])])
    assert composition.unpack(got)[0].tolist() == [191, 0, 0, 64, 0, 0, 0, 255]
    # order of the parts never changes the bytes
    again = fold.combine([words[::-1]], _groups([0, 0]), {}, [np.array([1, 3])])
    assert got.tolist() == again.tolist()


def _lo_hi_chunk(points, spec):
    return np.zeros((0, 2))


def test_outside_reducers_get_their_declared_class():
    state = State("lo_hi", _lo_hi_chunk, lambda v, g, s: np.concatenate(v))
    with pytest.raises(ValueError, match="pyramid_class 'exact' needs a fold"):
        Reducer("lohi", (state,), lambda s, p: None, "float64", "exact")
    none = Reducer("lohi_none", (state,), lambda s, p: None, "float64", "none")
    assert none.pyramid_fold is None
    exact = Reducer(
        "lohi_exact",
        (reducers.MAX,),
        lambda s, p: s["max"],
        "float64",
        "exact",
        fold=Fold.of_state(reducers.MAX, "max"),
    )
    g = _groups([0, 0, 1])
    assert exact.pyramid_fold.combine([np.array([1.0, 4.0, 2.0])], g, {}).tolist() == [4.0, 2.0]
    reducers.register(none)
    try:
        fields = {
            "r": {
                "function": "lohi_none",
                "kind": "dense",
                "dtype": "float64",
                "fill_value": np.nan,
                "params": {},
            }
        }
        assert declare.field_map(fields) == {"r": {"class": "none"}}
    finally:
        reducers.unregister("lohi_none")
