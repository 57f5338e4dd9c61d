"""Columnar point files: a Parquet file with latitude/longitude columns and a GeoParquet file
with WKB point geometries give the same leaves as the same points in a zarr store; WKB is
decoded exactly in every byte order and flavour, and bad files are refused naming the key."""

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from builders import fields, grid_orders, pipeline_config, synthetic_source

import zagg
from zagg import hive
from zagg.config.model import ConfigError, load_config
from zagg.pipeline.run import open_source, run
from zagg.sources.parquet import wkb_points
from zagg.sources.synthetic import synthetic_photons

REGION = (-100.2, -75.6, -99.8, -75.4)
ROWS = 1_500  # rows per zarr chunk and Parquet row group


def point_wkb(x: float, y: float, order: str = "<", kind: int = 1, srid: int | None = None):
    """A WKB point written field by field (byte order, type, [SRID], x, y, [z])."""
    flag = 1 if order == "<" else 0
    if srid is not None:
        body = struct.pack(f"{order}I", kind | 0x20000000) + struct.pack(f"{order}I", srid)
    else:
        body = struct.pack(f"{order}I", kind)
    coords = struct.pack(f"{order}dd", x, y)
    if kind in (1001, 2001):
        coords += struct.pack(f"{order}d", 7.0)
    return bytes([flag]) + body + coords


GEO = {
    "version": "1.1.0",
    "primary_column": "geometry",
    "columns": {"geometry": {"encoding": "WKB", "geometry_types": ["Point"]}},
}


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    """The same points as a zarr store, a Parquet file (lat/lon columns, row groups of
    ``ROWS``) and a GeoParquet file (WKB geometry, in two files of a directory)."""
    ds = synthetic_photons(4_000, REGION, chunk_size=4_000, seed=7).compute()
    ds = ds[["lat_ph", "lon_ph", "h_ph", "delta_time"]]
    d = tmp_path_factory.mktemp("columnar")
    # one chunking for all three (a t-digest's compression follows the input's chunks)
    ds.chunk({ds["lat_ph"].dims[0]: ROWS}).to_zarr(
        d / "points.zarr", zarr_format=3, consolidated=False
    )
    cols = {k: ds[k].values for k in ("lat_ph", "lon_ph", "h_ph", "delta_time")}
    pq.write_table(pa.table(cols), d / "points.parquet", row_group_size=ROWS)
    wkb = [
        None if not np.isfinite(x + y) else point_wkb(x, y)
        for x, y in zip(cols["lon_ph"], cols["lat_ph"], strict=True)
    ]
    geo = pa.table({"h_ph": cols["h_ph"], "delta_time": cols["delta_time"], "geometry": wkb})
    geo = geo.replace_schema_metadata({b"geo": json.dumps(GEO).encode()})
    (d / "points.geoparquet").mkdir()
    part = d / "points.geoparquet"
    pq.write_table(geo.slice(0, 2 * ROWS), part / "part-0.parquet", row_group_size=ROWS)
    pq.write_table(geo.slice(2 * ROWS), part / "part-1.parquet", row_group_size=ROWS)
    return d


def config(path, geometry=False):
    if geometry:
        source = {
            "input": str(path),
            "coordinates": {"geometry": "geometry"},
            "variables": ["h_ph"],
        }
    else:
        source = synthetic_source(input=str(path))
    variables = fields("count", "h_mean", "h_tdigest", h_mean={"dtype": "float64"})
    return pipeline_config(source, variables, grid_orders(6, 12, inner=6))


def _hashes(root):
    return {
        sid: hive.read_stamp(hive.StoreRoot(root), leaf)["content_hashes"]
        for leaf, sid in hive.walk_leaves(root)
    }


def test_parquet_and_geoparquet_give_the_leaves_of_the_same_points_in_zarr(
    tmp_path, points, worker_process
):
    hashes, counts = {}, {}
    for name, geometry in (
        ("points.zarr", False),
        ("points.parquet", False),
        ("points.geoparquet", True),
    ):
        store = tmp_path / name.replace(".", "_")
        summary = run(
            config(points / name, geometry),
            store=str(store),
            progress=False,
            scheduler=worker_process,
        )
        hashes[name], counts[name] = _hashes(store), summary.points
    assert counts["points.zarr"] > 3_000 and len(set(counts.values())) == 1
    assert hashes["points.zarr"] and hashes["points.parquet"] == hashes["points.zarr"]
    assert hashes["points.geoparquet"] == hashes["points.zarr"]
    # a re-run finds the Parquet store current: the file's name is its read unit
    again = run(
        config(points / "points.parquet"),
        store=str(tmp_path / "points_parquet"),
        progress=False,
        scheduler=worker_process,
    )
    assert again.leaves_written == 0 and again.units["current"] == len(hashes["points.zarr"])


def test_a_parquet_input_is_read_lazily_one_row_group_per_chunk(points):
    ds = open_source(load_config(config(points / "points.parquet")))
    assert ds["lat_ph"].chunks == ((1_500, 1_500, 1_000),)
    geo = open_source(load_config(config(points / "points.geoparquet", geometry=True)))
    assert geo["latitude"].chunks == ((1_500, 1_500, 1_000),)
    flat = open_source(load_config(config(points / "points.parquet")))
    np.testing.assert_array_equal(geo["latitude"].values, flat["lat_ph"].values)
    np.testing.assert_array_equal(geo["longitude"].values, flat["lon_ph"].values)


def test_wkb_points_decode_every_byte_order_and_flavour():
    blobs = [
        point_wkb(-99.5, -75.25),
        point_wkb(12.0, 45.5, order=">"),
        point_wkb(1.0, 2.0, kind=1001),  # ISO point Z
        point_wkb(-3.5, 4.25, order=">", srid=4326),  # extended WKB with an SRID
        None,
    ]
    xy = wkb_points(pa.array(blobs, pa.binary()))
    want = [(-99.5, -75.25), (12.0, 45.5), (1.0, 2.0), (-3.5, 4.25)]
    np.testing.assert_array_equal(xy[:4], want)
    assert np.isnan(xy[4]).all()
    line = bytes([1]) + struct.pack("<I", 2) + struct.pack("<I", 0)
    with pytest.raises(ValueError, match="geometry type 2"):
        wkb_points(pa.array([line], pa.binary()))


def test_bad_columnar_inputs_are_refused_naming_the_key(tmp_path, points):
    with pytest.raises(ConfigError, match=r"'data_source.coordinates.geometry': 'geom' is not"):
        cfg = config(points / "points.geoparquet", geometry=True)
        cfg["data_source"]["coordinates"] = {"geometry": "geom"}
        open_source(load_config(cfg))
    projected = tmp_path / "polar.parquet"
    table = pq.read_table(points / "points.geoparquet" / "part-0.parquet")
    meta = json.loads(table.schema.metadata[b"geo"])
    meta["columns"]["geometry"]["crs"] = {
        "name": "WGS 84 / Antarctic Polar Stereographic",
        "id": {"authority": "EPSG", "code": 3031},
    }
    pq.write_table(table.replace_schema_metadata({b"geo": json.dumps(meta).encode()}), projected)
    with pytest.raises(ConfigError, match=r"Polar Stereographic.*reproject"):
        open_source(load_config(config(projected, geometry=True)))
    cut = tmp_path / "cut.parquet"
    cut.write_bytes((points / "points.parquet").read_bytes()[:300])
    with pytest.raises(ConfigError, match=r"'data_source.input': cannot open .*cut\.parquet"):
        open_source(load_config(config(cut)))
    with pytest.raises(ConfigError, match=r"'data_source.input': .*gone\.parquet.* does not exist"):
        zagg.run(config(tmp_path / "gone.parquet"), store=str(tmp_path / "s"), progress=False)
    lines = tmp_path / "lines.parquet"
    line = bytes([1]) + struct.pack("<II", 2, 2) + struct.pack("<4d", 0, 0, 1, 1)
    pq.write_table(pa.table({"h_ph": [1.0], "geometry": pa.array([line], pa.binary())}), lines)
    ds = open_source(load_config(config(lines, geometry=True)))
    with pytest.raises(ConfigError, match=r"'data_source.coordinates.geometry': .* points"):
        ds["latitude"].compute(scheduler="sync")
    both = config(points / "points.parquet")
    both["data_source"]["coordinates"]["geometry"] = "geometry"
    with pytest.raises(ConfigError, match=r"'data_source.coordinates': give either 'geometry'"):
        load_config(both)
