"""Beams, tracks and cycles: ``data_source.beams`` keeps each granule's strong (or weak)
beams by its own orientation, and the per-point ``beam``, ``spot``, ``strong``, ``rgt`` and
``cycle`` variables select points exactly in filters and fields."""

import h5py
import numpy as np
import pytest
import xarray as xr
from builders import atl03_source, fields, grid_orders, pipeline_config

import zagg
from zagg.config.model import ConfigError
from zagg.sources.errors import GranuleError
from zagg.sources.granules import open_granules
from zagg.sources.write_granules import write_granules

REGION = (-100.2, -75.6, -99.8, -75.4)
LEFT, RIGHT = ["gt1l", "gt2l", "gt3l"], ["gt1r", "gt2r", "gt3r"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Four granules, two flown backward (sc_orient 0) and two forward (1)."""
    d = tmp_path_factory.mktemp("mixed")
    return write_granules(
        d, 4, points_per_granule=20_000, region=REGION, seed=5, sc_orient=(0, 1, 0, 1)
    )


def orbit(path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: int(f[f"orbit_info/{k}"][0]) for k in ("sc_orient", "rgt", "cycle_number")}


def config(source, *names, **more):
    variables = fields(*(names or ("count", "h_min", "h_max")), **more)
    return pipeline_config(source, variables, grid_orders(8, 13), name="ATL03", version="006")


def cells(ds: xr.Dataset, cfg) -> xr.Dataset:
    return zagg.aggregate(ds, cfg).compute()


def bare(ds: xr.Dataset) -> xr.Dataset:
    """Points without their granule index (two opened sources concatenated)."""
    return ds.drop_vars("granule").assign_attrs(granules=[])


def test_the_orientations_put_the_strong_beams_on_the_documented_tracks(mixed):
    for path in mixed:
        sc = orbit(path)["sc_orient"]
        strong = LEFT if sc == 0 else RIGHT
        with h5py.File(path, "r") as f:
            kinds = {g: f[g].attrs["atlas_beam_type"] for g in LEFT + RIGHT}
        assert {g for g, k in kinds.items() if k == "strong"} == set(strong)
    assert sorted(orbit(p)["sc_orient"] for p in mixed) == [0, 0, 1, 1]


def test_strong_beams_equal_the_strong_groups_named_by_hand(mixed):
    cfg = config(atl03_source(mixed[0].parent, beams="strong"))
    picked = open_granules(zagg.load_config(cfg).data_source.granules)
    backward = [p for p in mixed if orbit(p)["sc_orient"] == 0]
    forward = [p for p in mixed if orbit(p)["sc_orient"] == 1]
    by_hand = xr.concat(
        [
            bare(open_granules(atl03_source(backward, groups=LEFT))),
            bare(open_granules(atl03_source(forward, groups=RIGHT))),
        ],
        dim="obs",
    )
    assert picked.sizes["obs"] == by_hand.sizes["obs"] > 0
    got, want = cells(picked, cfg), cells(by_hand, cfg)
    assert got["count"].sum() > 0
    for name in ("morton", "count", "h_min", "h_max"):
        np.testing.assert_array_equal(got[name].values, want[name].values)
    # the weak beams are the other half of every granule's photons
    weak = open_granules(atl03_source(mixed[0].parent, beams="weak"))
    every = open_granules(atl03_source(mixed[0].parent))
    assert weak.sizes["obs"] + picked.sizes["obs"] == every.sizes["obs"]
    assert set(np.unique(weak["strong"].values)) == {0}
    assert set(np.unique(picked["strong"].values)) == {1}


def test_per_point_beam_spot_rgt_and_cycle_come_from_each_granule(mixed):
    ds = open_granules(atl03_source(mixed[0].parent))
    granule = ds["granule"].values
    for i, gid in enumerate(ds.attrs["granules"]):
        path = next(p for p in mixed if p.name == gid)
        meta = orbit(path)
        rows = granule == i
        assert set(ds["rgt"].values[rows].tolist()) == {meta["rgt"]}
        assert set(ds["cycle"].values[rows].tolist()) == {meta["cycle_number"]}
        with h5py.File(path, "r") as f:
            sizes = [f[f"{g}/heights/lat_ph"].shape[0] for g in ds.attrs["groups"]]
            spots = [int(f[g].attrs["atlas_spot_number"]) for g in ds.attrs["groups"]]
            strong = [f[g].attrs["atlas_beam_type"] == "strong" for g in ds.attrs["groups"]]
        assert ds["spot"].values[rows].tolist() == np.repeat(spots, sizes).tolist()
        assert ds["strong"].values[rows].tolist() == np.repeat(strong, sizes).tolist()
        assert (
            ds["beam"].values[rows].tolist() == np.repeat([10, 20, 30, 40, 50, 60], sizes).tolist()
        )


def test_rgt_and_cycle_filters_keep_exactly_the_matching_granules(mixed):
    tracks = [orbit(p)["rgt"] for p in mixed]
    keep = tracks[:2]
    src = atl03_source(mixed[0].parent, filters=[{"variable": "rgt", "op": "in", "value": keep}])
    cfg = config(src)
    got = cells(open_granules(zagg.load_config(cfg).data_source.granules), cfg)
    matching = [p for p, t in zip(mixed, tracks, strict=True) if t in keep]
    want = cells(open_granules(atl03_source(matching)), cfg)
    for name in ("morton", "count", "h_min", "h_max"):
        np.testing.assert_array_equal(got[name].values, want[name].values)

    cycle = orbit(mixed[-1])["cycle_number"]
    src = atl03_source(mixed[0].parent, filters=[{"variable": "cycle", "op": "eq", "value": cycle}])
    cfg = config(src)
    got = cells(open_granules(zagg.load_config(cfg).data_source.granules), cfg)
    matching = [p for p in mixed if orbit(p)["cycle_number"] == cycle]
    assert 0 < len(matching) < len(mixed)
    want = cells(open_granules(atl03_source(matching)), cfg)
    np.testing.assert_array_equal(got["count"].values, want["count"].values)


def test_a_count_per_beam_strength_is_a_field_like_any_other(mixed):
    cfg = config(
        atl03_source(mixed[0].parent),
        "count",
        count_strong={"function": "count", "where": "strong == 1"},
        count_weak={"function": "count", "where": "strong == 0"},
    )
    got = cells(open_granules(zagg.load_config(cfg).data_source.granules), cfg)
    strong_cfg = config(atl03_source(mixed[0].parent, beams="strong"), "count")
    strong = cells(open_granules(zagg.load_config(strong_cfg).data_source.granules), strong_cfg)
    lookup = dict(
        zip(strong["morton"].values.tolist(), strong["count"].values.tolist(), strict=True)
    )
    expected = np.array([lookup.get(w, 0) for w in got["morton"].values.tolist()])
    np.testing.assert_array_equal(got["count_strong"].values, expected)
    np.testing.assert_array_equal(
        got["count_strong"].values + got["count_weak"].values, got["count"].values
    )


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"beams": "bright"}, "data_source.beams", "strong, weak or all"),
        ({"beams": "strong", "groups": ["beam1", "beam2"]}, "data_source.beams", "'beam1'"),
    ],
)
def test_bad_beam_selections_are_refused_naming_the_key(mixed, change, key, words):
    src = atl03_source(mixed[0].parent, **change)
    if "groups" in change:
        src["coordinates"] = {"latitude": "/{group}/lat", "longitude": "/{group}/lon"}
        src["variables"] = {"h": "/{group}/h"}
        src.pop("delta_time")
    with pytest.raises(ConfigError, match=rf"'{key}'.*{words}"):
        zagg.load_config(config(src, "count"))


def test_a_granule_in_transition_has_no_strong_beams(tmp_path, mixed):
    turning = tmp_path / mixed[0].name
    turning.write_bytes(mixed[0].read_bytes())
    with h5py.File(turning, "r+") as f:
        del f["orbit_info/sc_orient"]
        f["orbit_info/sc_orient"] = np.array([0, 1], np.int8)
    with pytest.raises(GranuleError, match=r"sc_orient 2 .*beams: all.*on_error: skip"):
        open_granules(atl03_source(tmp_path, beams="strong"))
    skipped = open_granules(atl03_source([turning, mixed[1]], beams="strong", on_error="skip"))
    assert skipped.attrs["granules"] == [mixed[1].name]
    assert [f["granule"] for f in skipped.attrs["failed_granules"]] == [turning.name]
