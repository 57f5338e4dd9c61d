"""Regions → covering shards: boxes, GeoJSON polygons, and refusals that name the file."""

import json

import pytest

from zagg.regions import RegionError, region_shards


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
