"""Regions → covering shards: boxes, GeoJSON polygons, and refusals that name the file."""

import json

import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source

from zagg.sources.regions import RegionError, region_shards


def _square(lon0, lat0, d):
    return [[lon0, lat0], [lon0 + d, lat0], [lon0 + d, lat0 + d], [lon0, lat0 + d], [lon0, lat0]]


def test_a_polygon_and_its_bounding_box_cover_the_same_shards(tmp_path):
    path = tmp_path / "r.geojson"
    path.write_text(json.dumps({"type": "Polygon", "coordinates": [_square(-100, -76, 1)]}))
    from_polygon = region_shards(geojson=path, order=6)
    from_box = region_shards(bbox="-100,-76,-99,-75", order=6)
    assert from_polygon and set(from_polygon) <= set(from_box)


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"type": "Polygon"}, r"a GeoJSON Polygon needs a non-empty 'coordinates' list"),
        ({"type": "MultiPolygon", "coordinates": []}, r"MultiPolygon needs a non-empty"),
        (
            {"type": "Polygon", "coordinates": [[["a", "b"], [1, 2], [3, 4], [1, 2]]]},
            r"holds something other than \[lon, lat\] numbers",
        ),
        ({"type": "Polygon", "coordinates": [[[1, 2], [3, 4]]]}, r"at least 4 \[lon, lat\]"),
        ({"type": "Point", "coordinates": [1, 2]}, r"type 'Point' has no polygons"),
    ],
)
def test_malformed_geojson_is_refused_naming_the_file(tmp_path, doc, message):
    path = tmp_path / "bad.geojson"
    path.write_text(json.dumps(doc))
    with pytest.raises(RegionError, match=rf"--region .*bad.geojson: .*{message}"):
        region_shards(geojson=path, order=6)


# -- boxes the sphere makes ambiguous: the globe, wider than 180°, across the antimeridian --

CLUSTERS = [(0.0, 179.7), (30.0, -179.7), (-60.0, 10.0), (70.0, -100.0), (-20.0, 120.0)]
BOXES = {
    "globe": (-180, -90, 180, 90),
    "wider than 180": (-150, -80, 150, 80),
    "wider than 180 up to 300": (100, -90, 300, 90),
    "antimeridian west > east": (170, -10, -170, 40),
    "antimeridian east up to 360": (170, -10, 190, 40),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small store of point clusters around the globe, two of them at the antimeridian,
    with its pyramid built."""
    import numpy as np
    import xarray as xr

    import zagg

    rng = np.random.default_rng(3)
    lat = np.concatenate([la + rng.uniform(-0.05, 0.05, 300) for la, _ in CLUSTERS])
    lon = np.concatenate([lo + rng.uniform(-0.05, 0.05, 300) for _, lo in CLUSTERS])
    lon = (lon + 180) % 360 - 180
    ds = xr.Dataset(
        {"lat_ph": ("photon", lat), "lon_ph": ("photon", lon), "h_ph": ("photon", lat * 0 + 1)}
    ).chunk({"photon": 500})
    cfg = pipeline_config(
        synthetic_source(), fields("count"), grid_orders(3, 8, inner=5), name="WORLD"
    )
    store = str(tmp_path_factory.mktemp("world") / "store")
    zagg.to_hive(zagg.aggregate(ds, zagg.load_config(cfg)), store)
    zagg.sweep(store)
    return store


def _inside(words, box):
    """Whether each cell's centre (by mortie) lies in the box, longitudes wrapped."""
    import mortie
    import numpy as np

    lat, lon = mortie.mort2geo(np.asarray(words, np.uint64))
    west, south, east, north = box
    width = (east - west) % 360 or (360 if east != west else 0)
    if east - west >= 360:
        width = 360
    return (lat >= south) & (lat <= north) & (((np.asarray(lon) - west) % 360) <= width)


@pytest.mark.parametrize("name", list(BOXES))
@pytest.mark.parametrize("order", [8, 5, 3])  # cells well inside or outside each box
def test_wide_and_antimeridian_boxes_keep_exactly_the_cells_inside(world, name, order):
    import numpy as np

    from zagg.read.levels import open_level

    box = BOXES[name]
    full = open_level(world, order)
    sub = open_level(world, order, bbox=box)
    # every level holds every point, northern shards (words below 2**63) included
    assert int(full["count"].values.sum()) == 300 * len(CLUSTERS)
    keep = _inside(full["morton"].values, box)
    assert 0 < keep.sum() and (name == "globe") == bool(keep.all())
    np.testing.assert_array_equal(sub["morton"].values, full["morton"].values[keep])
    np.testing.assert_array_equal(sub["count"].values, full["count"].values[keep])


@pytest.mark.parametrize("name", list(BOXES))
def test_wide_and_antimeridian_boxes_select_the_shards_of_their_cells(world, name):
    import numpy as np

    import zagg
    from zagg import grid as G

    box = BOXES[name]
    full = zagg.open_hive(world)
    sub = zagg.open_hive(world, bbox=box)
    keep = _inside(full["morton"].values, box)
    np.testing.assert_array_equal(sub["morton"].values, full["morton"].values[keep])
    shards = set(region_shards(bbox=",".join(str(v) for v in box), order=3))
    held = set(G.to_decimal(np.unique(G.ancestor(full["morton"].values, 3))))
    inside = set(G.to_decimal(np.unique(G.ancestor(full["morton"].values[keep], 3))))
    assert held & shards == inside
    if name == "globe":
        assert len(shards) == 12 * 4**3


def test_a_box_with_no_width_or_height_is_refused():
    with pytest.raises(RegionError, match="west != east"):
        region_shards(bbox="10,0,10,1", order=3)
    with pytest.raises(RegionError, match="south < north"):
        region_shards(bbox="0,1,10,0", order=3)
    with pytest.raises(RegionError, match="within -180..360"):
        region_shards(bbox="-200,0,10,1", order=3)
