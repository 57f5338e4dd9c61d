"""zagg.aggregate against a brute-force numpy computation, cell by cell."""

import dask.array as dsa
import mortie
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zagg
from zagg import grid as G
from zagg.kernels import tdigest

P, C = 6, 11  # 1024 cells per shard keeps brute force quick


def make_config(fields=None, filters=None, p=P, c=C, **grid):
    fields = fields or {
        "count": {"function": "count"},
        "h_sum": {"function": "sum", "source": "h"},
        "h_mean": {"function": "mean", "source": "h", "dtype": "float64"},
        "h_min": {"function": "min", "source": "h"},
        "h_max": {"function": "max", "source": "h"},
        "h_var": {"function": "var", "source": "h", "dtype": "float64"},
        "h_std": {"function": "std", "source": "h", "dtype": "float64", "params": {"ddof": 1}},
        "h_td": {"function": "tdigest", "source": "h"},
    }
    src = {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h", "q"]}
    if filters:
        src["filters"] = filters
    return {
        "data_source": src,
        "aggregation": {"variables": fields},
        "output": {
            "dataset": {"short_name": "TEST", "version": "1"},
            "grid": {"parent_order": p, "child_order": c, **grid},
        },
    }


def make_points(n, seed=0, nan_frac=0.05, box=(-100.0, -76.0, -96.0, -75.0)):
    rng = np.random.default_rng(seed)
    lon = rng.uniform(box[0], box[2], n)
    lat = rng.uniform(box[1], box[3], n)
    # clustered points so many cells hold several points, some exactly one
    lat[: n // 2] = np.round(lat[: n // 2], 2)
    lon[: n // 2] = np.round(lon[: n // 2], 2)
    h = rng.normal(1500.0, 30.0, n).astype(np.float32)
    h[rng.random(n) < nan_frac] = np.nan
    q = rng.integers(0, 4, n).astype(np.int8)
    return xr.Dataset({"lat": ("obs", lat), "lon": ("obs", lon), "h": ("obs", h), "q": ("obs", q)})


def brute_force(ds, c=C, keep=None):
    """Per-cell values computed with plain numpy, keyed by mortie.geo2mort at the cell order."""
    lat, lon, h = ds["lat"].values, ds["lon"].values, ds["h"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    if keep is not None:
        ok &= keep
    cells = mortie.geo2mort(lat[ok], lon[ok], order=c)
    h = h[ok]
    out = {}
    for w in np.unique(cells):
        v = h[cells == w].astype(np.float64)
        f = v[np.isfinite(v)]
        out[int(w)] = (len(v), f)
    return out


def computed(ds, config, **kw):
    return zagg.aggregate(ds, config, **kw).compute()


def cell_index(res):
    return {int(w): i for i, w in enumerate(res["morton"].values)}


def test_every_reducer_matches_brute_force():
    ds = make_points(20_000, seed=1)
    res = computed(ds, make_config(), chunk_size=3_000)
    truth = brute_force(ds)
    idx = cell_index(res)
    assert int(res["count"].sum()) == sum(n for n, _ in truth.values())
    singles = 0
    for w, (n, f) in truth.items():
        i = idx[w]
        assert res["count"].values[i] == n
        payload = res["h_td"].values[i]
        if f.size == 0:
            assert np.isnan(res["h_mean"].values[i]) and np.isnan(res["h_min"].values[i])
            assert payload == b""
            continue
        singles += f.size == 1
        assert res["h_sum"].values[i] == pytest.approx(f.sum(), rel=1e-12)
        assert res["h_mean"].values[i] == pytest.approx(f.mean(), rel=1e-12)
        assert res["h_min"].values[i] == np.float32(f.min())
        assert res["h_max"].values[i] == np.float32(f.max())
        assert res["h_var"].values[i] == pytest.approx(f.var(), rel=1e-9, abs=1e-9)
        if f.size > 1:
            assert res["h_std"].values[i] == pytest.approx(f.std(ddof=1), rel=1e-9)
        else:
            assert np.isnan(res["h_std"].values[i])
        arr = tdigest.payload_to_array(payload)
        np.testing.assert_array_equal(arr[:, 0], np.sort(f.astype(np.float32)))
        np.testing.assert_array_equal(arr[:, 1], np.ones(f.size, np.float32))
    assert singles > 3  # single-point cells were exercised
    # the result holds exactly the occupied cells; the dense twin holds the fill elsewhere
    assert sorted(idx) == sorted(truth) and res.sizes["cells"] == len(truth)
    dense = computed(ds, make_config(), chunk_size=3_000, dense=True)
    empty = ~np.isin(dense["morton"].values, np.array(list(truth), np.uint64))
    assert empty.sum() == dense.sizes["cells"] - len(truth) > 0
    assert (dense["count"].values[empty] == 0).all()
    assert np.isnan(dense["h_mean"].values[empty]).all()
    assert all(b == b"" for b in dense["h_td"].values[empty])
    at = np.searchsorted(dense["morton"].values, res["morton"].values)
    for var in ("count", "h_sum", "h_min", "h_max", "h_var"):
        np.testing.assert_array_equal(dense[var].values[at], res[var].values)
    assert list(dense["h_td"].values[at]) == list(res["h_td"].values)


def test_layout_is_canonical_and_one_chunk_per_shard():
    ds = make_points(5_000, seed=2)
    truth = np.array(sorted(brute_force(ds)), np.uint64)
    out = zagg.aggregate(ds, make_config())
    shards = G.from_decimal(out.attrs["zagg"]["shards"])
    np.testing.assert_array_equal(shards, np.unique(G.ancestor(truth, P)))  # only shards with data
    # sparse: the occupied cells, ascending, one chunk per shard holding that shard's cells
    words = out["morton"].values
    np.testing.assert_array_equal(words, truth)
    per_shard = [int((G.ancestor(truth, P) == s).sum()) for s in shards]
    assert list(out["count"].chunks[0]) == per_shard == out.attrs["zagg"]["shard_cells"]
    # the dense twin: every cell of every shard, in canonical nested order
    dense = zagg.aggregate(ds, make_config(), dense=True)
    n = 4 ** (C - P)
    assert all(ch == n for ch in dense["count"].chunks[0])
    words = dense["morton"].values
    for k, s in enumerate(shards):
        np.testing.assert_array_equal(words[k * n : (k + 1) * n], G.shard_cell_words(s, P, C))


def test_cell_words_agree_with_mortie_keying_at_cell_order():
    ds = make_points(3_000, seed=3, nan_frac=0)
    res = computed(ds, make_config({"count": {"function": "count"}}))
    occupied = res["morton"].values[res["count"].values > 0]
    truth = np.unique(mortie.geo2mort(ds["lat"].values, ds["lon"].values, order=C))
    np.testing.assert_array_equal(occupied, truth)


@pytest.mark.parametrize(
    ("p", "c", "located"), [(P, C, False), (P, C, True), (22, 27, False), (22, 27, True)]
)
def test_nonfinite_coordinates_are_dropped_and_counted(p, c, located):
    """Whichever way points are keyed (straight at the cell order, or through order-29
    point words for located digests), refused points are counted and every other point
    lands in its mortie cell, up to the deepest supported order (where every point is a
    shard of its own, so fewer of them)."""
    n = 4_000 if c == C else 500
    ds = make_points(n, seed=4)
    lat = ds["lat"].values.copy()
    lat[:7] = np.nan
    lat[7:10] = np.inf
    lat[10] = 95.0  # outside [-90, 90]
    ds["lat"] = ("obs", lat)
    fields = {"count": {"function": "count"}}
    if located:
        fields["h_td"] = {"function": "tdigest", "source": "h", "located": True}
    out = zagg.aggregate(ds, make_config(fields, p=p, c=c))
    pts = out.attrs["zagg"]["points"]
    assert pts["invalid_coordinates"] == 11
    assert pts["keyed"] == n - 11
    res = out.compute()
    assert int(res["count"].sum()) == n - 11
    occupied = res["morton"].values[res["count"].values > 0]
    words, _ = G.point_words(lat[11:], ds["lon"].values[11:])
    np.testing.assert_array_equal(occupied, np.unique(G.ancestor(words, c)))


def test_filters_apply_before_aggregation():
    ds = make_points(6_000, seed=5)
    filters = [{"variable": "q", "op": "ge", "value": 2}, {"variable": "q", "op": "ne", "value": 3}]
    res = computed(ds, make_config(filters=filters))
    keep = ds["q"].values == 2
    truth = brute_force(ds, keep=keep)
    idx = cell_index(res)
    assert int(res["count"].sum()) == int(keep.sum())
    for w, (n, f) in truth.items():
        assert res["count"].values[idx[w]] == n
        if f.size:
            assert res["h_max"].values[idx[w]] == np.float32(f.max())


def test_shards_argument_restricts_the_result():
    ds = make_points(6_000, seed=6)
    full = computed(ds, make_config())
    shards = full.attrs["zagg"]["shards"]
    pick = shards[1:3]
    out = zagg.aggregate(ds, make_config(), shards=pick)
    assert out.attrs["zagg"]["shards"] == pick
    inside = np.isin(G.ancestor(full["morton"].values, P), G.from_decimal(pick))
    sub = out.compute()
    np.testing.assert_array_equal(sub["morton"].values, full["morton"].values[inside])
    for var in ("count", "h_min", "h_sum"):
        np.testing.assert_array_equal(sub[var].values, full[var].values[inside])
    assert list(sub["h_td"].values) == list(full["h_td"].values[inside])


def test_the_dense_twin_of_given_shards_stays_lazy():
    ds = make_points(6_000, seed=6)
    full = computed(ds, make_config(), dense=True)
    pick = full.attrs["zagg"]["shards"][1:3]
    out = zagg.aggregate(ds, make_config(), shards=pick, dense=True)
    assert out.attrs["zagg"]["points"] is None  # nothing computed yet
    sub = out.compute()
    n = 4 ** (C - P)
    for var in ("count", "h_min", "h_sum"):
        np.testing.assert_array_equal(sub[var].values, full[var].values[n : 3 * n])
    assert list(sub["h_td"].values) == list(full["h_td"].values[n : 3 * n])


def test_dask_and_numpy_inputs_agree_and_southern_northern_shards():
    north = make_points(2_000, seed=7, box=(40.0, 60.0, 42.0, 61.0))
    south = make_points(2_000, seed=8)
    ds = xr.concat([north, south], dim="obs")
    a = computed(ds, make_config())
    b = computed(ds.chunk({"obs": 777}), make_config())
    xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    shards = a.attrs["zagg"]["shards"]
    assert any(s.startswith("-") for s in shards) and any(not s.startswith("-") for s in shards)


def test_variables_stored_as_coordinates_are_read_like_data_variables():
    """CF files and ``set_coords`` put latitude/longitude (or a value) among the
    coordinates; the result is the same, and unrelated coordinates are left out."""
    ds = make_points(3_000, seed=13)
    expected = computed(ds, make_config())
    labelled = ds.assign_coords(track=("obs", np.arange(ds.sizes["obs"]) % 7))
    for coords in (["lat", "lon"], ["lat", "lon", "h"]):
        for data in (labelled, labelled.chunk({"obs": 500})):
            got = computed(data.set_coords(coords), make_config(), chunk_size=800)
            xr.testing.assert_identical(got.drop_attrs(), expected.drop_attrs())


def test_in_memory_inputs_are_read_in_chunks_and_later_edits_do_not_reach_the_result():
    ds = make_points(5_000, seed=10)
    expected = computed(ds.chunk({"obs": 700}), make_config())
    result = zagg.aggregate(ds, make_config(), chunk_size=700)
    ds["h"].values[:] = -1.0  # the caller reuses its buffers before computing
    ds["lat"].values[:] = 0.0
    xr.testing.assert_identical(result.compute().drop_attrs(), expected.drop_attrs())


def test_aggregating_in_memory_inputs_leaves_them_untouched():
    clean = make_points(5_000, seed=11, nan_frac=0.0)  # every point kept: kernels get views
    holed = make_points(5_000, seed=12)
    holed["lat"].values[:7] = np.nan  # a few unkeyable points
    fields = {
        "count": {"function": "count"},
        "h_var": {"function": "var", "source": "h", "dtype": "float64"},
        "h_td": {"function": "tdigest", "source": "h", "params": {"delta": 20}},
        "h_loc": {"function": "tdigest", "source": "h", "located": True},
    }
    for ds, filters in (
        (clean, None),
        (holed, None),
        (clean, [{"variable": "q", "op": "ne", "value": 3}]),
    ):
        before = {k: ds[k].values.tobytes() for k in ds.data_vars}
        computed(ds, make_config(fields, filters), chunk_size=900)
        assert {k: ds[k].values.tobytes() for k in ds.data_vars} == before


def test_empty_input_gives_empty_dataset():
    ds = make_points(100, seed=9)
    out = zagg.aggregate(ds, make_config(filters=[{"variable": "q", "op": "gt", "value": 10}]))
    assert out.sizes["cells"] == 0
    assert out.attrs["zagg"]["shards"] == []


def test_missing_source_variable_is_refused_at_aggregate_time():
    ds = make_points(100).drop_vars("h")
    with pytest.raises(zagg.ConfigError, match=r"aggregation.variables.h_sum.source.*'h'"):
        zagg.aggregate(ds, make_config())


EXACT = ("count", "h_min", "h_max", "h_sum", "h_mean")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    chunks=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    scale=st.sampled_from([1e-3, 1.0, 1e4, 1e7]),
)
def test_exact_fields_are_chunking_invariant(seed, chunks, scale):
    ds = make_points(600, seed=seed)
    ds["h"] = ds["h"] * np.float32(scale)
    cfg = make_config()
    ref = computed(ds, cfg, chunk_size=600)
    total = 600
    sizes = []
    while total > 0:
        for ch in chunks:
            take = min(ch, total)
            if take:
                sizes.append(take)
            total -= take
    reshuffled = ds.chunk({"obs": tuple(sizes)})
    got = computed(reshuffled, cfg)
    for var in EXACT:
        np.testing.assert_array_equal(got[var].values, ref[var].values)
    # digests are loss-free here, so they are chunking-invariant too
    assert list(got["h_td"].values) == list(ref["h_td"].values)


def test_digest_compresses_above_delta_and_keeps_exact_weight():
    n = 5_000
    rng = np.random.default_rng(11)
    lat = np.full(n, -75.5)
    lon = np.full(n, -99.0)
    h = rng.normal(0, 1, n).astype(np.float32)
    ds = xr.Dataset(
        {
            "lat": ("obs", lat),
            "lon": ("obs", lon),
            "h": ("obs", h),
            "q": ("obs", np.zeros(n, np.int8)),
        }
    )
    cfg = make_config({"h_td": {"function": "tdigest", "source": "h", "params": {"delta": 100}}})
    res = computed(ds.chunk({"obs": 700}), cfg)
    payloads = [p for p in res["h_td"].values if p]
    assert len(payloads) == 1
    arr = tdigest.payload_to_array(payloads[0])
    assert arr[:, 1].sum() == n and len(arr) <= 100
    assert np.all(np.diff(arr[:, 0]) >= 0)
    assert abs(tdigest.quantile(arr, 0.5) - np.median(h)) < 0.05


def test_integer_and_dask_backed_lazy_input_not_materialised():
    n = 50_000
    lat = dsa.random.uniform(-76, -75, size=n, chunks=10_000)
    lon = dsa.random.uniform(-100, -98, size=n, chunks=10_000)
    q = dsa.random.randint(0, 5, size=n, chunks=10_000).astype(np.int16)
    ds = xr.Dataset(
        {
            "lat": ("obs", lat),
            "lon": ("obs", lon),
            "h": ("obs", q.astype(np.float32)),
            "q": ("obs", q),
        }
    )
    cfg = make_config(
        {"q_max": {"function": "max", "source": "h", "dtype": "int16", "fill_value": -1}}
    )
    res = computed(ds, cfg)
    assert res["q_max"].dtype == np.int16
    assert set(np.unique(res["q_max"].values)) <= {-1, 0, 1, 2, 3, 4}
    assert (res["q_max"].values >= 0).sum() > 0


def test_compacted_states_combine_exactly_like_full_ones():
    """Chunk partials wait in int32 counts and float32 extremes where exact; combining
    them gives the full-width states bit for bit."""
    from zagg.reducers.partials import Groups
    from zagg.reducers.records import COUNT, MAX, MIN

    a = {
        "count": np.array([1, 2, 3]),
        "min": np.array([0.5, -1.0, np.nan]),
        "max": np.array([0.1, 1e300, 2.0]),
    }
    b = {
        "count": np.array([4, 5]),
        "min": np.array([-2.0, 0.25]),
        "max": np.array([3.0, 1.0 / 3.0]),
    }
    states = {"count": COUNT, "min": MIN, "max": MAX}
    small = {k: states[k].compact(v) for k, v in a.items()}
    assert small["count"].dtype == np.int32
    assert small["min"].dtype == np.float32  # every min is exact in float32
    assert small["max"].dtype == np.float64  # 1e300 is not
    assert states["max"].compact(b["max"]).dtype == np.float64  # neither is 1/3
    groups, cells = Groups.of(np.array([5, 9, 12, 9, 12], dtype=np.uint64))
    np.testing.assert_array_equal(cells, [5, 9, 12])
    for k, state in states.items():
        full = state.combine([a[k], b[k]], groups, None)
        packed = state.combine([small[k], state.compact(b[k])], groups, None)
        assert packed.dtype == full.dtype
        np.testing.assert_array_equal(packed, full)
    np.testing.assert_array_equal(
        states["count"].combine([a["count"], b["count"]], groups, None), [1, 6, 8]
    )
    np.testing.assert_array_equal(
        states["min"].combine([a["min"], b["min"]], groups, None), [0.5, -2.0, 0.25]
    )


@pytest.mark.parametrize(
    "function, dtype, value, shown",
    [
        ("count", "uint8", 1.0, "300"),
        ("max", "int16", 1e6, "1000000"),
        ("sum", "float16", 1e4, "3000000"),
    ],
)
def test_values_a_declared_dtype_cannot_hold_are_refused_not_wrapped(function, dtype, value, shown):
    """300 points in one cell: a count of 300 in uint8, a maximum of 1e6 in int16 or a sum of
    3e6 in float16 would wrap around or overflow; the field's dtype key is named instead."""
    n = 300
    ds = xr.Dataset(
        {
            "lat": ("obs", np.full(n, -75.5)),
            "lon": ("obs", np.full(n, -100.0)),
            "h": ("obs", np.full(n, value)),
            "q": ("obs", np.zeros(n, np.int8)),
        }
    )
    field = {"function": function, "dtype": dtype}
    if function != "count":
        field["source"] = "h"
    with pytest.raises(
        zagg.ConfigError,
        match=rf"aggregation.variables.x.dtype': a cell's "
        rf"{function} is {shown}.*wider dtype",
    ):
        computed(ds, make_config({"x": field}))
    field["dtype"] = {"count": "uint16", "max": "int32", "sum": "float32"}[function]
    res = computed(ds, make_config({"x": field, "n": {"function": "count"}}))
    got = res["x"].values[res["n"].values > 0]
    assert got.tolist() == [{"count": n, "max": value, "sum": n * value}[function]]


def _with_confidence(n=200):
    ds = make_points(n, seed=14)
    conf = np.random.default_rng(14).integers(0, 5, (n, 5)).astype(np.int8)
    return ds.assign(conf=(("obs", "lane"), conf))


@pytest.mark.parametrize(
    "variables, fields, filters, message",
    [
        (
            {"conf": "conf", "c1": {"variable": "conf", "column": 1}},
            {"m": {"function": "mean", "source": "conf"}},
            None,
            r"'aggregation.variables.m.source': 'conf' is the Dataset variable 'conf' of dims "
            r"\('obs', 'lane'\).*declare one of its columns",
        ),
        (
            {"c7": {"variable": "conf", "column": 7}},
            {"s": {"function": "sum", "source": "c7"}},
            None,
            r"'data_source.variables.c7.column': column 7 of 'conf', which has 5 columns \(0..4\)",
        ),
        (
            ["conf", "h"],
            {"n": {"function": "count"}},
            [{"variable": "conf", "op": "ge", "value": 2}],
            r"'data_source.filters\[0\].variable': 'conf' .* one value per point",
        ),
        (
            ["h"],
            {"n": {"function": "count"}},
            [{"variable": "h", "column": 2, "op": "ge", "value": 2}],
            r"'data_source.filters\[0\].column': column 2 of 'h', which has dims \('obs',\).*drop",
        ),
    ],
)
def test_variables_of_the_wrong_shape_are_refused_naming_the_key(
    variables, fields, filters, message
):
    cfg = make_config(fields, filters)
    cfg["data_source"]["variables"] = variables
    with pytest.raises(zagg.ConfigError, match=message):
        zagg.aggregate(_with_confidence(), cfg)


def test_a_column_of_a_2d_variable_is_read_like_a_1d_variable():
    ds = _with_confidence()
    cfg = make_config(
        {"s": {"function": "sum", "source": "c3"}, "n": {"function": "count"}},
        [{"variable": "conf", "column": 1, "op": "ge", "value": 2}],
    )
    cfg["data_source"]["variables"] = {"conf": "conf", "c3": {"variable": "conf", "column": 3}}
    flat = ds.assign(
        c3=("obs", ds["conf"].values[:, 3].astype(np.float64)), c1=("obs", ds["conf"].values[:, 1])
    )
    ref = make_config(
        {"s": {"function": "sum", "source": "c3"}, "n": {"function": "count"}},
        [{"variable": "c1", "op": "ge", "value": 2}],
    )
    ref["data_source"]["variables"] = ["c3", "c1"]
    got, want = computed(ds, cfg), computed(flat, ref)
    np.testing.assert_array_equal(got["n"].values, want["n"].values)
    np.testing.assert_array_equal(got["s"].values, want["s"].values)
    assert got["n"].values.sum() > 0


@pytest.mark.parametrize(
    "fields, filters, key",
    [
        ({"t_min": {"function": "min", "source": "t"}}, None, "aggregation.variables.t_min.source"),
        (
            {"t_td": {"function": "tdigest", "source": "t"}},
            None,
            "aggregation.variables.t_td.source",
        ),
        (
            {"n": {"function": "count"}},
            [{"variable": "t", "op": "gt", "value": 0}],
            r"data_source.filters\[0\].variable",
        ),
    ],
)
def test_dates_are_refused_where_numbers_are_read(fields, filters, key):
    """A datetime64 variable would reach the kernels as raw integers (a digest of
    milliseconds) or fail inside numpy; the key is named and a numeric copy suggested."""
    ds = make_points(100, seed=15)
    ds["t"] = ("obs", np.datetime64("2020-01-01") + np.arange(100).astype("timedelta64[s]"))
    cfg = make_config(fields, filters)
    cfg["data_source"]["variables"] = ["h", "t"]
    with pytest.raises(
        zagg.ConfigError,
        match=rf"'{key}': 't' has dtype datetime64\[s\], "
        r"which zagg cannot read as numbers.*int64",
    ):
        zagg.aggregate(ds, cfg)


def test_boolean_flags_aggregate_as_zero_and_one():
    ds = make_points(2_000, seed=16, nan_frac=0.0)
    flag = ds["h"].values > 1500
    fields = {
        "f_mean": {"function": "mean", "source": "f", "dtype": "float64"},
        "f_sum": {"function": "sum", "source": "f"},
        "n": {"function": "count"},
    }
    cfg = make_config(fields)
    cfg["data_source"]["variables"] = ["f"]
    got = computed(ds.assign(f=("obs", flag)), cfg)
    want = computed(ds.assign(f=("obs", flag.astype(np.float64))), cfg)
    for k in fields:
        np.testing.assert_array_equal(got[k].values, want[k].values)
    assert 0 < np.nansum(got["f_sum"].values) < 2_000


@pytest.mark.parametrize(
    "field, where, message",
    [
        (
            {"function": "composition", "source": "h", "params": {"of": "td"}},
            None,
            r"'aggregation.variables.c.source': a composition reads the \(points, 5\) integer",
        ),
        (
            {"function": "tdigest", "source": "h"},
            "conf >= 2",
            r"'aggregation.variables.c.where': 'conf' is the Dataset variable 'conf' of dims",
        ),
    ],
)
def test_composition_and_where_read_variables_of_the_right_shape(field, where, message):
    ds = _with_confidence()
    fields = {"td": {"function": "tdigest", "source": "h"}, "c": dict(field)}
    if where:
        fields["c"]["where"] = where
    cfg = make_config(fields)
    cfg["data_source"]["variables"] = ["h", "conf"]
    with pytest.raises(zagg.ConfigError, match=message):
        zagg.aggregate(ds, cfg)


def test_a_graph_built_twice_from_the_same_points_has_the_same_task_keys():
    from dask.utils import key_split

    ds = make_points(6_000, seed=6).chunk({"obs": 2_000})
    pick = computed(ds, make_config(), dense=True).attrs["zagg"]["shards"][1:3]
    first = zagg.aggregate(ds, make_config(), shards=pick, dense=True)
    again = zagg.aggregate(ds, make_config(), shards=pick, dense=True)
    keys = set(first["h_td"].data.__dask_graph__())
    assert keys == set(again["h_td"].data.__dask_graph__())
    prefixes = {key_split(k) for k in keys}
    assert {"reduce-chunk", "shard-cells", "dense"} <= prefixes
    # another config is another graph
    other = zagg.aggregate(ds, make_config(c=C - 1), shards=pick, dense=True)
    assert other["h_td"].data.name != first["h_td"].data.name
