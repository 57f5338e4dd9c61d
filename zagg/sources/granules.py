"""HDF5 granules (ICESat-2 ATL03/ATL06 and similar layouts) as one lazy points Dataset.

The ``data_source`` block of a granule config names where the granules are (a directory, a
glob, an ``s3://`` prefix or a catalog file), the beam groups, and the HDF5 paths of the
coordinates and variables with ``{group}`` standing for the group; see ``docs/granules.md``.
:func:`parse_granule_source` validates that block into a :class:`GranuleSource`;
:func:`open_granules` turns it into a Dataset on one dimension ``obs`` whose dask chunks are
read by h5py inside their own tasks (one or more per granule and group). At open time only
metadata is read (dataset shapes, dtypes, attributes), which is also when a corrupt file or a
missing path is refused, naming the granule and the path.
"""

from __future__ import annotations

import contextlib
import glob as globmod
import operator
import os
import re
import string
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import dask
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import Task, TaskRef

if TYPE_CHECKING:
    import dask.array as da
    import xarray as xr

from ..credentials import StorageOptions, parse_storage_options
from ..filters import Filter, parse_filters
from ..validation import ConfigError, check_keys, fail

__all__ = [
    "CATALOG_SUFFIXES",
    "GRANULE_SUFFIXES",
    "GranuleError",
    "GranuleSource",
    "GranuleVariable",
    "StorageOptions",
    "granule_id",
    "hdf5_path",
    "list_granules",
    "open_granules",
    "open_h5",
    "parse_granule_source",
    "read_block",
    "read_rows",
]

GRANULE_SUFFIXES = (".h5", ".hdf5", ".he5")
CATALOG_SUFFIXES = (".json", ".parquet")
RESERVED_NAMES = ("latitude", "longitude", "time", "granule")
ON_ERROR = ("fail", "skip")
DEFAULT_CHUNK = 2_000_000  # rows per dask chunk at most (a multiple of ATL03's 10000)
TIME_ATTRS = {
    "units": "seconds since 2018-01-01T00:00:00Z",
    "long_name": "GPS seconds since the ATLAS SDP epoch",
    "description": "the granules' delta_time, kept as float64 seconds; UTC is "
                   "2018-01-01T00:00:00Z plus this (GPS-UTC = 18 s is inside the epoch)",
}

_KEYS = ("granules", "groups", "coordinates", "variables", "filters", "delta_time",
         "on_error", "storage_options")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCAN_BLOCK = 1 << 20  # s3 read block while reading metadata
_READ_BLOCK = 8 << 20  # s3 read block while reading data


class GranuleError(ValueError):
    """A granule that cannot be read as configured; the message names the file and path."""


@dataclass(frozen=True)
class GranuleVariable:
    """One Dataset variable ``name`` read from the HDF5 ``path`` (one ``column`` if 2-D)."""

    name: str
    path: str
    column: int | None = None


@dataclass(frozen=True)
class GranuleSource:
    """A validated granule ``data_source`` block (paths keep their ``{group}`` placeholder)."""

    granules: str | tuple[str, ...]
    groups: tuple[str, ...] | None
    latitude: str
    longitude: str
    variables: tuple[GranuleVariable, ...] = ()
    filters: tuple[Filter, ...] = ()
    delta_time: str | None = None
    on_error: str = "fail"
    storage_options: StorageOptions = field(default_factory=StorageOptions, repr=False)
    config_key: str = "data_source"  # where the block sits in the config, for messages

    @property
    def names(self) -> tuple[str, ...]:
        """The variables of the opened Dataset, in order (``granule`` excepted)."""
        return ("latitude", "longitude", *(v.name for v in self.variables),
                *(("time",) if self.delta_time else ()))

    @property
    def is_catalog(self) -> bool:
        return isinstance(self.granules, str) and _is_catalog(self.granules)

    def items(self) -> tuple[tuple[str, str, int | None], ...]:
        """(name, path template, column) of everything read per group, coordinates first."""
        out = [("latitude", self.latitude, None), ("longitude", self.longitude, None)]
        out += [(v.name, v.path, v.column) for v in self.variables]
        if self.delta_time:
            out.append(("time", self.delta_time, None))
        return tuple(out)


# --------------------------------------------------------------------------- config block


def parse_granule_source(raw: Mapping, path: str = "data_source") -> GranuleSource:
    """Validate a granule ``data_source`` block; every refusal is a ``ConfigError``."""
    if isinstance(raw, Mapping) and "time" in raw:
        fail(f"{path}.time", "granule sources set the time variable with 'delta_time' (an "
              "HDF5 path such as '/{group}/heights/delta_time'); replace 'time' by it")
    for key in ("input", "synthetic"):
        if isinstance(raw, Mapping) and key in raw:
            fail(f"{path}.{key}", f"give either 'granules' or '{key}', not both")
    check_keys(raw, _KEYS, path, ("granules", "coordinates"))
    granules = _parse_location(raw["granules"], f"{path}.granules")
    groups = _parse_groups(raw.get("groups"), f"{path}.groups")
    grouped = groups is not None

    coords = raw["coordinates"]
    check_keys(coords, ("latitude", "longitude"), f"{path}.coordinates",
                ("latitude", "longitude"))
    lat = _template(coords["latitude"], f"{path}.coordinates.latitude", grouped)
    lon = _template(coords["longitude"], f"{path}.coordinates.longitude", grouped)

    variables = _parse_variables(raw.get("variables"), f"{path}.variables", grouped)
    delta_time = raw.get("delta_time")
    if delta_time is not None:
        delta_time = _template(delta_time, f"{path}.delta_time", grouped)
    declared = [v.name for v in variables] + (["time"] if delta_time else [])
    filters = _parse_granule_filters(raw.get("filters"), declared, f"{path}.filters")

    on_error = raw.get("on_error", "fail")
    if on_error not in ON_ERROR:
        fail(f"{path}.on_error", f"{on_error!r} is not valid; use 'fail' (stop at the first "
              "unreadable granule) or 'skip' (leave it out and record it)")
    options = parse_storage_options(raw.get("storage_options"), f"{path}.storage_options")
    return GranuleSource(granules, groups, lat, lon, variables, filters, delta_time, on_error,
                         options, path)


def _parse_location(value, path: str) -> str | tuple[str, ...]:
    what = ("a local directory, a glob, an s3://bucket/prefix/, a catalog file (.json or "
            ".parquet) or a list of granule files")
    if isinstance(value, list):
        if not value:
            fail(path, f"the list of granule files is empty; give {what}")
        for i, v in enumerate(value):
            if not isinstance(v, str) or not v.strip():
                fail(f"{path}[{i}]", f"expected a granule file path or URL, got {v!r}")
            if _is_catalog(v):
                fail(f"{path}[{i}]", f"{v!r} is a catalog; give it alone, not in a list")
        return tuple(value)
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected {what}, got {value!r}")
    if "://" in value and not value.startswith(("s3://", "file://")):
        fail(path, f"{value!r}: only local paths and s3:// URLs are supported")
    return value


def _parse_groups(value, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list) or not value:
        fail(path, f"expected a non-empty list of group names such as [gt1l, gt1r, gt2l, gt2r, "
              f"gt3l, gt3r], got {value!r}")
    for i, g in enumerate(value):
        if (not isinstance(g, str) or not g.strip() or "/" in g or g in (".", "..")
                or "{" in g or "}" in g):
            fail(f"{path}[{i}]", f"expected an HDF5 group name (no '/', braces or dots-only), "
                  f"got {g!r}")
    dup = sorted({g for g in value if value.count(g) > 1})
    if dup:
        fail(path, f"{dup} listed more than once; list each group once")
    return tuple(value)


def _template(value, path: str, grouped: bool) -> str:
    """A validated HDF5 path template, normalised to start with '/'."""
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected an HDF5 dataset path such as '/{{group}}/heights/lat_ph', "
              f"got {value!r}")
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        fail(path, f"{value!r} has unbalanced braces ({exc}); the only placeholder is "
              "'{group}'")
    fields = [(f, spec, conv) for _, f, spec, conv in parts if f is not None]
    for f, spec, conv in fields:
        if f != "group" or spec or conv:
            fail(path, f"{value!r} uses the placeholder {{{f}}}; the only placeholder is "
                  "'{group}'")
    if grouped and not fields:
        fail(path, f"{value!r} does not contain '{{group}}'; with data_source.groups set, "
              "every path must name its group, e.g. '/{group}/heights/h_ph'")
    if not grouped and fields:
        fail(path, f"{value!r} uses '{{group}}' but data_source.groups is not set; list the "
              "groups, e.g. groups: [gt1l, gt1r, gt2l, gt2r, gt3l, gt3r]")
    norm = "/" + value.strip("/")
    if any(c in ("", ".", "..") for c in norm[1:].split("/")):
        fail(path, f"{value!r} has an empty, '.' or '..' component; give an absolute HDF5 "
              "path such as '/{group}/heights/h_ph'")
    return norm


def _parse_variables(value, path: str, grouped: bool) -> tuple[GranuleVariable, ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        fail(path, f"expected a mapping of variable name to HDF5 path (or to {{path, "
              f"column}}), e.g. {{h_ph: '/{{group}}/heights/h_ph'}}, got {value!r}")
    out = []
    for name, spec in value.items():
        p = f"{path}.{name}"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            fail(p, "variable names must be identifiers (letters, digits, underscores)")
        if name in RESERVED_NAMES:
            fail(p, f"{name!r} is reserved for the Dataset's own variables "
                  f"({', '.join(RESERVED_NAMES)}); choose another name")
        column = None
        if isinstance(spec, Mapping):
            check_keys(spec, ("path", "column"), p, ("path",))
            column = spec.get("column")
            if column is not None and (isinstance(column, bool) or not isinstance(column, int)
                                       or column < 0):
                fail(f"{p}.column", f"expected a non-negative column index of the 2-D "
                      f"dataset, got {column!r}")
            spec = spec["path"]
            p = f"{p}.path"
        out.append(GranuleVariable(name, _template(spec, p, grouped), column))
    return tuple(out)


def _parse_granule_filters(value, declared, path: str) -> tuple[Filter, ...]:
    if isinstance(value, list):
        for i, f in enumerate(value):
            if isinstance(f, Mapping) and "column" in f:
                fail(f"{path}[{i}].column", "granule filters take no column; declare the "
                      "column as its own variable, e.g. variables: {land_ice_conf: {path: "
                      "'/{group}/heights/signal_conf_ph', column: 3}}, and filter on that name")
            check_keys(f, ("variable", "op", "value"), f"{path}[{i}]",
                        ("variable", "op", "value"))
    return parse_filters(value, tuple(declared), path)


# --------------------------------------------------------------------------- locations


def _is_catalog(location: str) -> bool:
    return location.lower().endswith(CATALOG_SUFFIXES)


def granule_id(href: str) -> str:
    """The id of a granule: its bare file name, whatever the href."""
    return PurePosixPath(href.rstrip("/")).name


def _s3(options: Mapping):
    import fsspec

    return fsspec.filesystem("s3", **dict(options))


def list_granules(source: GranuleSource) -> list[str]:
    """Hrefs of the granules a source names, sorted by granule id (a catalog keeps its
    order). Refuses an empty listing and two granules with the same id."""
    loc, key = source.granules, f"{source.config_key}.granules"
    if isinstance(loc, tuple):
        hrefs = [_local(h) for h in loc]
    elif _is_catalog(loc):
        hrefs = [e.href for e in _read_catalog(source)]
    elif loc.startswith("s3://"):
        hrefs = _list_s3(loc, source.storage_options, key)
    else:
        hrefs = _list_local(_local(loc), key)
    if not hrefs:
        raise _config_error(key, f"no granule files ({', '.join(GRANULE_SUFFIXES)}) found at "
                            f"{loc!r}; check the path or the glob")
    if not (isinstance(loc, str) and _is_catalog(loc)):
        hrefs = sorted(hrefs, key=granule_id)
    ids = [granule_id(h) for h in hrefs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _config_error(key, f"granule ids (file names) must be unique, but {dup[0]!r} "
                            "appears more than once; narrow the glob or the list")
    return hrefs


def _read_catalog(source: GranuleSource):
    from .catalog import CatalogError, read_catalog

    try:
        return read_catalog(source.granules, storage_options=source.storage_options)
    except CatalogError as exc:
        raise _config_error(f"{source.config_key}.granules", str(exc)) from None


def _local(href: str) -> str:
    return href[len("file://"):] if href.startswith("file://") else href


def _list_local(loc: str, key: str) -> list[str]:
    if any(c in loc for c in "*?["):
        found = globmod.glob(loc, recursive=True)
        return [p for p in found if p.lower().endswith(GRANULE_SUFFIXES) and os.path.isfile(p)]
    path = Path(loc)
    if path.is_dir():
        return [str(p) for p in path.iterdir()
                if p.suffix.lower() in GRANULE_SUFFIXES and p.is_file()]
    if path.is_file():
        return [str(path)]
    raise _config_error(key, f"{loc!r} does not exist; give a directory, a glob, an s3:// "
                        "prefix, a catalog file or a list of granule files")


def _list_s3(loc: str, options: StorageOptions, key: str) -> list[str]:
    try:
        fs = _s3(options)
        bare = loc[len("s3://"):]
        if any(c in bare for c in "*?["):
            found = fs.glob(bare)
        elif bare.lower().endswith(GRANULE_SUFFIXES):
            found = [bare] if fs.exists(bare) else []
        else:
            found = fs.find(bare.rstrip("/") + "/")
    except Exception as exc:  # s3fs raises many kinds; name the place, never the credentials
        raise _config_error(key, f"cannot list {loc!r}: {options.redact(str(exc))}") from None
    return ["s3://" + p for p in found if p.lower().endswith(GRANULE_SUFFIXES)]


def _config_error(key: str, msg: str) -> ConfigError:
    return ConfigError(f"config key '{key}': {msg}")


@contextlib.contextmanager
def open_h5(href: str, storage_options: Mapping | None = None, block_size: int = _READ_BLOCK):
    """An open ``h5py.File`` for a local path or an ``s3://`` URL (through s3fs)."""
    with _open_with_stamp(href, storage_options, block_size) as (f, _):
        yield f


@contextlib.contextmanager
def _open_with_stamp(href: str, storage_options: Mapping | None, block_size: int):
    import h5py

    if href.startswith("s3://"):
        fs = _s3(storage_options or {})
        with fs.open(href, "rb", block_size=block_size, cache_type="blockcache") as fobj, \
                h5py.File(fobj, "r") as f:
            details = getattr(fobj, "details", None) or {}
            yield f, (details.get("ETag"), details.get("size"))
    else:
        path = _local(href)
        st = os.stat(path)
        with h5py.File(path, "r") as f:
            yield f, (st.st_size, st.st_mtime_ns)


def _stamp_size(href: str, stamp) -> int | None:
    """The file size in bytes inside a stamp of :func:`_open_with_stamp`."""
    size = stamp[1] if href.startswith("s3://") else stamp[0]
    return None if size is None else int(size)


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class _GroupShape:
    group: str | None
    rows: int


@dataclass(frozen=True)
class _Scan:
    """What open time learns about one granule: rows per group, dtypes and attrs."""

    href: str
    groups: tuple[_GroupShape, ...]
    dtypes: Mapping[str, str]
    attrs: Mapping[str, Mapping]
    stamp: object  # size/mtime or ETag: part of the graph token


def hdf5_path(template: str, group: str | None) -> str:
    """The HDF5 path of ``template`` in ``group`` (templates without groups are paths)."""
    return template if group is None else template.format(group=group)


def _group_prefix(template: str) -> str:
    parts = template.split("/")
    for i, part in enumerate(parts):
        if "{group}" in part:
            return "/".join(parts[: i + 1])
    return ""


def _decode_attrs(attrs) -> dict:
    out = {}
    for k in ("units", "long_name", "standard_name", "description"):
        if k in attrs:
            v = attrs[k]
            if isinstance(v, bytes):
                v = v.decode(errors="replace")
            if isinstance(v, str):
                out[k] = v
    return out


def _scan(source: GranuleSource, href: str) -> _Scan:
    """Open one granule and check every configured path in every group (metadata only)."""
    gid = granule_id(href)
    try:
        with _open_with_stamp(href, source.storage_options, _SCAN_BLOCK) as (f, stamp):
            return _scan_file(source, f, href, gid, stamp)
    except GranuleError:
        raise
    except Exception as exc:  # h5py/OS/s3 errors: corrupt, truncated, unreadable
        msg = source.storage_options.redact(f"{type(exc).__name__}: {exc}")
        raise GranuleError(f"granule {gid!r} ({href}): cannot open as HDF5: {msg}") from None


def _scan_file(source: GranuleSource, f, href: str, gid: str, stamp) -> _Scan:
    import h5py

    items = source.items()
    groups = source.groups or (None,)
    prefix = _group_prefix(source.latitude)
    shapes, dtypes, attrs = [], {}, {}
    for group in groups:
        if group is not None and prefix.format(group=group) not in f:
            continue  # the whole group is absent: an empty beam
        rows = None
        for name, template, column in items:
            hpath = hdf5_path(template, group)
            obj = f.get(hpath)
            if obj is None:
                raise GranuleError(f"granule {gid!r}: HDF5 path {hpath!r} (data_source "
                                   f"{_item_key(name)}) does not exist in {href}")
            if not isinstance(obj, h5py.Dataset):
                raise GranuleError(f"granule {gid!r}: HDF5 path {hpath!r} is a group, not a "
                                   f"dataset; point {_item_key(name)} at a dataset")
            shape = obj.shape
            if column is None and len(shape) != 1:
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has shape {shape}; a variable must be 1-D "
                    f"along the observations, or 2-D with one column chosen by "
                    f"{{path, column}} in {_item_key(name)}")
            if column is not None and (len(shape) != 2 or column >= shape[1]):
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has shape {shape}; column {column} of "
                    f"{_item_key(name)} needs a 2-D dataset with more than {column} columns")
            if rows is None:
                rows = shape[0]
            elif shape[0] != rows:
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has {shape[0]} rows but the latitude "
                    f"{source.latitude.format(group=group)!r} has {rows}; every variable of "
                    "one group must run along the same observations")
            if obj.dtype.kind not in "biuf":
                raise GranuleError(f"granule {gid!r}: {hpath!r} has dtype {obj.dtype}; only "
                                   "numeric datasets can be read")
            prev = dtypes.get(name)
            dtypes[name] = obj.dtype.str if prev is None else np.result_type(prev, obj.dtype).str
            if name not in attrs:
                attrs[name] = _decode_attrs(obj.attrs)
        shapes.append(_GroupShape(group, int(rows)))
    return _Scan(href, tuple(shapes), dtypes, attrs, stamp)


def _item_key(name: str) -> str:
    if name in ("latitude", "longitude"):
        return f"coordinates.{name}"
    return "delta_time" if name == "time" else f"variables.{name}"


# --------------------------------------------------------------------------- reading


def read_rows(dset, start: int, stop: int, column: int | None = None, dtype=None) -> np.ndarray:
    """Rows ``start:stop`` (one ``column`` if given) of an h5py dataset as ``dtype``, with a
    float dataset's ``_FillValue`` (as ICESat-2 products declare it) turned into NaN."""
    arr = dset[start:stop] if column is None else dset[start:stop, column]
    arr = np.asarray(arr)
    if dtype is not None:
        arr = arr.astype(np.dtype(dtype), copy=False)
    if arr.dtype.kind == "f" and "_FillValue" in dset.attrs:
        fill = np.asarray(dset.attrs["_FillValue"]).ravel()
        if fill.size and np.isfinite(fill[0]):
            if not arr.flags.writeable:
                arr = arr.copy()
            arr[arr == arr.dtype.type(fill[0])] = np.nan
    return arr


def read_block(href: str, group: str | None, start: int, stop: int, items: tuple,
               dtypes: Mapping[str, str], storage_options: Mapping, fail_all_nan: bool) -> dict:
    """Read rows ``start:stop`` of every item of one group; float fill values become NaN.

    Runs inside a dask task. Refuses coordinates that are all non-finite (when
    ``fail_all_nan``), naming the granule and path; otherwise such rows are returned as NaN
    and aggregation drops and counts them.
    """
    gid = granule_id(href)
    out = {}
    options = StorageOptions(storage_options or {})  # a plain mapping works too
    hpath = None
    try:
        with open_h5(href, options) as f:
            for name, template, column in items:
                hpath = hdf5_path(template, group)
                out[name] = read_rows(f[hpath], start, stop, column, dtypes[name])
    except Exception as exc:
        where = f"HDF5 path {hpath!r}" if hpath else "the file"
        raise GranuleError(f"granule {gid!r} ({href}): reading {where} rows {start}:{stop} "
                           f"failed: {options.redact(f'{type(exc).__name__}: {exc}')}") from None
    for name, template, _ in items[:2]:
        if stop > start and not np.isfinite(out[name]).any():
            hp = hdf5_path(template, group)
            msg = (f"granule {gid!r} ({href}): coordinates at HDF5 path {hp!r} rows "
                   f"{start}:{stop} are all NaN or fill; no point there can be placed")
            if fail_all_nan:
                raise GranuleError(msg + "; fix or remove the granule, or set on_error: skip")
            warnings.warn(msg + "; its rows are dropped as invalid coordinates", stacklevel=1)
    return out


def _granule_index(n: int, index: int) -> np.ndarray:
    return np.full(n, index, dtype=np.int32)


def open_granules(source, *, shards=None, shard_order: int | None = None,
                  chunk_size: int = DEFAULT_CHUNK) -> xr.Dataset:
    """Open the granules of ``source`` as a lazy Dataset on dimension ``obs``.

    ``source`` is a :class:`GranuleSource` or a raw ``data_source`` mapping. Variables:
    ``latitude``, ``longitude``, one per declared variable, ``time`` (float64 seconds since
    2018-01-01T00:00:00Z) when ``delta_time`` is set, and ``granule`` (int32 index into
    ``attrs["granules"]``). Rows run granule by granule (in id order) and group by group (in
    the configured order); every dask chunk holds at most ``chunk_size`` rows of one granule
    and group, and is read in its own task. ``shards`` (decimal ids or words, all at
    ``shard_order`` if given) keeps only granules whose catalog footprint touches them, which
    needs ``granules`` to be a catalog file. A catalogued granule whose file size differs
    from its entry's is refused with a ``CatalogError`` (rebuild the catalog), whatever
    ``on_error`` says.
    """
    if not isinstance(source, GranuleSource):
        source = parse_granule_source(source)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    failed: list[dict] = []
    sizes: dict[str, int] = {}  # href -> bytes, as the catalog recorded them
    if source.is_catalog:
        from .catalog import select

        catalog = _read_catalog(source)
        if shards is not None:
            catalog = select(catalog, shards, shard_order=shard_order)
        failed += [dict(f) for f in catalog.failed]
        hrefs = []
        sizes = {e.href: e.size for e in catalog if e.size is not None}
        for e in catalog:
            if e.rows and not e.footprint:
                msg = (f"granule {e.id!r}: its coordinates ({source.latitude}, "
                       f"{source.longitude}) are all NaN or fill (catalog footprint is empty)")
                if source.on_error == "fail":
                    raise GranuleError(msg + "; fix or remove the granule, or set on_error: skip")
                failed.append({"granule": e.id, "error": msg})
            else:
                hrefs.append(e.href)
    else:
        if shards is not None:
            raise _config_error(f"{source.config_key}.granules", "selecting granules by "
                                "shards needs their footprints: build a catalog with "
                                "zagg.sources.catalog.build_catalog and write_catalog, then "
                                "point this key at the .json or .parquet file")
        hrefs = list_granules(source)

    scans = _scan_all(source, hrefs, failed)
    _check_sizes(source, scans, sizes)
    return _dataset(source, scans, failed, chunk_size)


def _check_sizes(source: GranuleSource, scans: list[_Scan], sizes: Mapping[str, int]) -> None:
    """Refuse a granule whose file size is not the one its catalog entry records: it was
    replaced after the catalog was built, so its footprint (and times) may be wrong."""
    from .catalog import CatalogError

    for s in scans:
        want, got = sizes.get(s.href), _stamp_size(s.href, s.stamp)
        if want is not None and got is not None and want != got:
            raise CatalogError(
                f"granule {granule_id(s.href)!r} ({s.href}) is {got} bytes but the catalog "
                f"{source.granules!r} recorded {want}: the file changed after the catalog was "
                "built, so its footprint and times may be wrong; rebuild the catalog "
                "(python -m zagg catalog ..., or build_catalog and write_catalog)")


def _scan_all(source: GranuleSource, hrefs: list[str], failed: list[dict]) -> list[_Scan]:
    def safe(href):
        try:
            return _scan(source, href)
        except GranuleError as exc:
            return exc

    results = dask.compute(*[dask.delayed(safe)(h) for h in hrefs]) if hrefs else ()
    scans = []
    for href, res in zip(hrefs, results, strict=True):
        if isinstance(res, GranuleError):
            if source.on_error == "fail":
                raise res
            failed.append({"granule": granule_id(href), "error": str(res)})
        else:
            scans.append(res)
    if source.groups and scans:
        present = {g.group for s in scans for g in s.groups}
        missing = [g for g in source.groups if g not in present]
        prefix = _group_prefix(source.latitude)
        if len(missing) == len(source.groups):
            raise _config_error(f"{source.config_key}.groups", f"none of the groups {missing} "
                                f"is in any of the {len(scans)} granule(s) (no {prefix!r}); check "
                                "the names (ICESat-2 beams are gt1l gt1r gt2l gt2r gt3l gt3r) "
                                "and the coordinate paths")
        if missing and len(scans) > 1:
            warnings.warn(f"{source.config_key}.groups: {missing} are in none of the "
                          f"{len(scans)} granules (no {prefix!r}); a misspelt group name reads "
                          "nothing",
                          stacklevel=3)
    if hrefs and not scans:
        first = failed[0]["error"] if failed else ""
        raise GranuleError(f"none of the {len(hrefs)} granule(s) could be read; first error: "
                           f"{first}")
    return scans


def _dataset(source: GranuleSource, scans: list[_Scan], failed: list[dict],
             chunk_size: int) -> xr.Dataset:
    """The lazy Dataset over ``scans``: one read task per block of at most ``chunk_size``
    rows of one granule and group, one selection task per variable and block, and one
    granule-index task per block (which never touches the file)."""
    import dask.array as da
    import xarray as xr

    items = source.items()
    dtypes: dict[str, str] = {name: np.dtype(np.float64).str for name, _, _ in items}
    attrs: dict[str, dict] = {}
    for i, s in enumerate(scans):
        for name, dt in s.dtypes.items():
            dtypes[name] = dt if i == 0 else np.result_type(dtypes[name], dt).str
        for name, a in s.attrs.items():
            attrs.setdefault(name, a)
    blocks = []  # (granule index, href, group, start, stop)
    contributing = []
    for s in scans:
        groups = [g for g in s.groups if g.rows > 0]
        if groups:
            contributing.append(granule_id(s.href))
        for g in groups:
            for start in range(0, g.rows, chunk_size):
                stop = min(start + chunk_size, g.rows)
                blocks.append((len(contributing) - 1, s.href, g.group, start, stop))

    token = tokenize(source.granules, source.groups, items, dtypes, source.storage_options,
                     [(s.href, s.stamp, s.groups) for s in scans], chunk_size)
    chunks = (tuple(b[4] - b[3] for b in blocks) or (0,),)
    read = f"read-granule-{token}"
    fail_nan = source.on_error == "fail"
    read_layer = {
        (read, i): Task((read, i), read_block, href, group, start, stop, items, dtypes,
                        source.storage_options, fail_nan, _data_producer=True)
        for i, (_, href, group, start, stop) in enumerate(blocks)
    }

    def array(name: str, dtype, make) -> da.Array:
        key = f"{name}-{token}"
        if not blocks:  # nothing to read: one empty chunk
            layer = {(key, 0): Task((key, 0), np.zeros, 0, np.dtype(dtype))}
            graph = HighLevelGraph({key: layer}, {key: set()})
        else:
            layer = {(key, i): make((key, i), i) for i in range(len(blocks))}
            uses_read = name in dtypes
            graph = HighLevelGraph({read: read_layer, key: layer} if uses_read else {key: layer},
                                   {read: set(), key: {read}} if uses_read else {key: set()})
        return da.Array(graph, key, chunks=chunks, dtype=np.dtype(dtype))

    data_vars = {}
    for name, template, column in items:
        arr = array(name, dtypes[name],
                    lambda k, i, name=name: Task(k, operator.getitem, TaskRef((read, i)), name))
        a = dict(TIME_ATTRS) if name == "time" else dict(attrs.get(name, {}))
        a["source_path"] = template
        if column is not None:
            a["column"] = column
        data_vars[name] = xr.Variable("obs", arr, attrs=a)
    index = array("granule", np.int32, lambda k, i: Task(k, _granule_index,
                                                          blocks[i][4] - blocks[i][3],
                                                          blocks[i][0]))
    data_vars["granule"] = xr.Variable(
        "obs", index, attrs={"long_name": "index of the row's granule in attrs['granules']"})
    where = source.granules if isinstance(source.granules, str) else list(source.granules)
    return xr.Dataset(data_vars, attrs={
        "source": "zagg.sources.granules",
        "granule_source": where,
        "groups": list(source.groups or []),
        "granules": contributing,
        "failed_granules": failed,
    })
