"""Columnar point files as a source: ``data_source.input`` naming a Parquet or GeoParquet
file (or a directory of them), such as a SlideRule ATL06-SR or ATL03 subset or a GEDI L2A
table.

The file is read lazily through dask: each dask chunk is one row group of one file, and a
task reads only its own column of it, so nothing but the footers is read when the Dataset
is opened. Coordinates are two numeric columns (``coordinates: {latitude, longitude}``) or a
point geometry column (``coordinates: {geometry: geometry}``): WKB points (GeoParquet's
encoding, ISO or extended WKB, 2-D or with Z/M) or GeoArrow's native ``{x, y}`` points,
decoded per chunk into ``longitude`` (x) and ``latitude`` (y), degrees on WGS84. Numeric
and boolean columns become variables on ``obs`` (timestamps as int64 nanoseconds since
1970-01-01); other columns are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from zagg.checks.credentials import StorageOptions
from zagg.checks.validation import ConfigError
from zagg.sources.builtin import check_input, input_name
from zagg.sources.points_config import COLUMNAR_SUFFIXES, is_columnar, parse_points
from zagg.sources.record import Source

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["PARQUET", "open_parquet", "wkb_points"]

KEY = "config key 'data_source.input'"
#: GeoParquet CRSs read as longitude/latitude (absent: OGC:CRS84, the format's default)
LONLAT_CODES = {("OGC", "CRS84"), ("EPSG", "4326"), ("OGC", "CRS84h"), ("EPSG", "4979")}


@dataclass(frozen=True)
class Part:
    """One row group of one file: where a dask chunk's rows are."""

    path: str
    row_group: int
    rows: int


def _fs(path: str, storage_options):
    import fsspec

    return fsspec.core.url_to_fs(path, **dict(storage_options or {}))


def _files(path: str, storage_options) -> list[str]:
    """The Parquet files of ``path`` (itself, or those below a directory, in name order)."""
    fs, bare = _fs(path, storage_options)
    if fs.isdir(bare):
        found = sorted(
            p
            for p in fs.find(bare)
            if p.lower().endswith(COLUMNAR_SUFFIXES) and not _hidden(p, bare)
        )
    elif fs.exists(bare):
        found = [bare]
    else:
        raise ConfigError(
            f"{KEY}: {path!r} does not exist; give the path or URL of a Parquet or "
            "GeoParquet file (or a directory of them)"
        )
    if not found:
        raise ConfigError(f"{KEY}: no Parquet file (*.parquet) below {path!r}")
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return [p if protocol in ("file", "local") else f"{protocol}://{p}" for p in found]


def _hidden(p: str, root: str) -> bool:
    rel = p[len(root) :].lstrip("/")
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def _parquet_file(path: str, storage_options):
    import pyarrow.parquet as pq

    fs, bare = _fs(path, storage_options)
    return pq.ParquetFile(fs.open(bare, "rb"))


def open_parquet(path: str, storage_options=None, geometry: str | None = None) -> xr.Dataset:
    """The lazy points Dataset of the Parquet/GeoParquet file(s) at ``path``; ``geometry``
    names a point geometry column decoded into ``latitude`` and ``longitude``."""
    import dask.array as da
    import pyarrow as pa
    import xarray as xr
    from dask.base import tokenize

    options = StorageOptions(storage_options or {})
    try:
        files = _files(path, options)
        parts, schema, geo = [], None, None
        for f in files:
            pf = _parquet_file(f, options)
            if schema is None:
                schema = pf.schema_arrow
                geo = (schema.metadata or {}).get(b"geo")
            elif not pf.schema_arrow.equals(schema, check_metadata=False):
                raise ConfigError(
                    f"{KEY}: {f!r} has other columns than {files[0]!r}; every file of a "
                    "directory input must share one schema"
                )
            meta = pf.metadata
            parts += [Part(f, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    except ConfigError:
        raise
    except Exception as exc:
        detail = options.redact(" ".join(str(exc).split()) or type(exc).__name__)
        raise ConfigError(
            f"{KEY}: cannot open {path!r} as Parquet ({type(exc).__name__}: {detail}); "
            "if the file is cut short or corrupt, export it again"
        ) from exc
    parts = [p for p in parts if p.rows] or parts[:1]
    chunks = (tuple(p.rows for p in parts) or (0,),)
    token = tokenize(path, [(p.path, p.row_group, p.rows) for p in parts])
    columns = {}
    for fld in schema:
        t = fld.type
        if pa.types.is_timestamp(t):
            columns[fld.name] = np.dtype("int64")
        elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            columns[fld.name] = t.to_pandas_dtype()
    data_vars = {}
    for name, dtype in columns.items():
        arr = da.map_blocks(
            _read_column,
            parts=parts,
            column=name,
            storage_options=options,
            dtype=dtype,
            chunks=chunks,
            name=f"read-parquet-{name}-{token}",
        )
        attrs = {"source_column": name}
        if pa.types.is_timestamp(schema.field(name).type):
            attrs["units"] = "nanoseconds since 1970-01-01T00:00:00Z"
        data_vars[name] = xr.Variable("obs", arr, attrs=attrs)
    if geometry is not None:
        if geometry not in schema.names:
            raise ConfigError(
                f"config key 'data_source.coordinates.geometry': {geometry!r} is not a "
                f"column of {path!r}; its columns: {', '.join(schema.names)}"
            )
        _check_crs(geo, geometry, path)
        for axis, name in ((0, "longitude"), (1, "latitude")):
            arr = da.map_blocks(
                _read_points,
                parts=parts,
                column=geometry,
                axis=axis,
                storage_options=options,
                dtype=np.float64,
                chunks=chunks,
                name=f"read-parquet-{name}-{token}",
            )
            units = "degrees_east" if axis == 0 else "degrees_north"
            data_vars[name] = xr.Variable(
                "obs", arr, attrs={"units": units, "source_column": geometry}
            )
    return xr.Dataset(
        data_vars, attrs={"source": "zagg.sources.parquet", "input": path, "files": len(files)}
    )


def _check_crs(geo: bytes | None, column: str, path: str) -> None:
    """Refuse a GeoParquet geometry column whose CRS is not longitude/latitude."""
    if geo is None:
        return
    try:
        meta = json.loads(geo).get("columns", {}).get(column, {})
    except (ValueError, AttributeError):
        return
    encoding = meta.get("encoding", "WKB")
    if str(encoding).lower() not in ("wkb", "point"):
        raise ConfigError(
            f"config key 'data_source.coordinates.geometry': column {column!r} of {path!r} is "
            f"encoded {encoding!r}; zagg reads points as WKB or GeoArrow 'point'"
        )
    if "crs" not in meta or meta["crs"] is None:
        return
    crs = meta["crs"]
    ident = crs.get("id", {}) if isinstance(crs, dict) else {}
    code = (str(ident.get("authority", "")).upper(), str(ident.get("code", "")))
    if code in {(a.upper(), c) for a, c in LONLAT_CODES}:
        return
    name = crs.get("name", crs) if isinstance(crs, dict) else crs
    raise ConfigError(
        f"config key 'data_source.coordinates.geometry': the points of {path!r} are in the "
        f"CRS {name!r}; zagg needs longitude/latitude on WGS84 (OGC:CRS84 or EPSG:4326): "
        "reproject the file first (e.g. GeoDataFrame.to_crs(4326))"
    )


def _read_table(part: Part, column: str, storage_options):
    """One column of one row group (a damaged file refused naming it, whatever failed)."""
    try:
        table = _parquet_file(part.path, storage_options).read_row_group(
            part.row_group, columns=[column]
        )
    except Exception as exc:
        detail = StorageOptions(storage_options or {}).redact(" ".join(str(exc).split()))
        raise ConfigError(
            f"{KEY}: cannot read column {column!r} of row group {part.row_group} of "
            f"{part.path} ({type(exc).__name__}: {detail}); if the file is cut short or "
            "corrupt, export it again"
        ) from exc
    return table.column(0)


def _read_column(parts, column, storage_options, block_id=None) -> np.ndarray:
    import pyarrow as pa

    part = parts[block_id[0]]
    col = _read_table(part, column, storage_options)
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("ns")).cast(pa.int64())
    if col.null_count and not pa.types.is_floating(col.type):
        raise ConfigError(
            f"{KEY}: column {column!r} of {part.path} holds nulls in row group "
            f"{part.row_group}; only float columns may (read as NaN): fill them or store the "
            "column as float"
        )
    return col.to_numpy(zero_copy_only=False)


def _read_points(parts, column, axis, storage_options, block_id=None) -> np.ndarray:
    import pyarrow as pa

    col = _read_table(parts[block_id[0]], column, storage_options).combine_chunks()
    if pa.types.is_struct(col.type):  # GeoArrow native points: {x, y[, z]}
        field = col.field("x" if axis == 0 else "y")
        out = field.to_numpy(zero_copy_only=False).astype(np.float64)
        out[~col.is_valid().to_numpy(zero_copy_only=False)] = np.nan
        return out
    try:
        return wkb_points(col)[:, axis]
    except ValueError as exc:
        raise ConfigError(
            f"config key 'data_source.coordinates.geometry': column {column!r} of "
            f"{parts[block_id[0]].path}, row group {parts[block_id[0]].row_group}: {exc}"
        ) from None


#: WKB geometry type 1 (point), with Z, M or ZM as ISO codes 1001/2001/3001
_POINT_TYPES = (1, 1001, 2001, 3001)
_EWKB_SRID = 0x20000000


def wkb_points(col) -> np.ndarray:
    """``(n, 2)`` float64 x and y of a pyarrow binary array of WKB points (NaN for null or
    empty points); refuses any other geometry."""
    import pyarrow as pa

    n = len(col)
    out = np.full((n, 2), np.nan)
    if not n:
        return out
    if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        raise ValueError(f"a geometry column must hold WKB (binary), got {col.type}")
    offsets_type = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    _, off_buf, data_buf = col.buffers()
    offsets = np.frombuffer(off_buf, offsets_type, n + 1, col.offset * offsets_type().itemsize)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    start = offsets[:-1].astype(np.int64)
    length = (offsets[1:] - offsets[:-1]).astype(np.int64)
    rows = np.flatnonzero(valid & (length > 0))
    if not rows.size:
        return out
    s = start[rows]
    little = data[s] == 1
    raw_type = data[s[:, None] + 1 + np.arange(4)].astype(np.uint32)
    weights = np.array([1, 1 << 8, 1 << 16, 1 << 24], np.uint32)
    gtype = np.where(little, raw_type @ weights, raw_type[:, ::-1] @ weights)
    srid = (gtype & _EWKB_SRID) != 0
    base = gtype & 0x0FFFFFFF
    if not np.isin(base, _POINT_TYPES).all():
        bad = int(base[~np.isin(base, _POINT_TYPES)][0])
        raise ValueError(f"a geometry column must hold points; found WKB geometry type {bad}")
    xo = s + 5 + np.where(srid, 4, 0)
    if (xo + 16 > s + length[rows]).any():
        raise ValueError("a WKB point is shorter than its coordinates")
    for axis in (0, 1):
        b = data[xo[:, None] + 8 * axis + np.arange(8)]
        b = np.where(little[:, None], b, b[:, ::-1])
        out[rows, axis] = np.ascontiguousarray(b).view("<f8")[:, 0]
    return out


PARQUET = Source(
    name="parquet",
    key="input",
    accepts=is_columnar,
    parse=lambda raw, path: parse_points(raw, path, "parquet"),
    open=lambda source, **_: open_parquet(
        source.input, source.storage_options, source.settings.geometry
    ),
    units=input_name,
    describe=lambda source: f"Parquet: {source.input}",
    check=check_input,
    located=True,
)
