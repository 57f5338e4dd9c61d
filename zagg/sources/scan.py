"""What a granule is, as read at open time: HDF5 files opened locally or on S3, each
configured path checked in every group, and the storage layout recorded so that reads run
later without h5py (:mod:`zagg.sources.chunks`).

:func:`scan` opens one granule and returns its :class:`Scan` (rows, layouts and chunk index
per group, dtypes and attrs per variable, the file's stamp), and under a read plan the row
ranges the run needs; :func:`read_scanned` reads rows of a scanned dataset. The granule
source (:mod:`zagg.sources.granules`) and the catalog builder (:mod:`zagg.sources.catalog`)
both scan through here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from zagg.sources.beams import Orbit, kept_groups, read_orbit
from zagg.sources.chunks import (
    FetchSettings,
    Layout,
    chunk_index,
    float_fill,
    layout_of,
    read_direct,
)
from zagg.sources.errors import ArchiveError, GranuleError
from zagg.sources.granule_config import GranuleSource
from zagg.sources.readplan import ShardCover, group_rows, needed_rows, shard_photons


def granule_id(href: str) -> str:
    """The id of a granule: its bare file name, whatever the href."""
    return PurePosixPath(href.rstrip("/")).name


def s3_filesystem(options: Mapping):
    import fsspec

    return fsspec.filesystem("s3", **dict(options))


def local_path(href: str) -> str:
    return href[len("file://") :] if href.startswith("file://") else href


@contextlib.contextmanager
def open_h5(
    href: str,
    storage_options: Mapping | None = None,
    block_size: int = FetchSettings.metadata_block_size,
):
    """An open ``h5py.File`` for a local path or an ``s3://`` URL (through s3fs, read in
    ranged requests of ``block_size`` bytes)."""
    with open_with_stamp(href, storage_options, block_size) as (f, _):
        yield f


@contextlib.contextmanager
def open_with_stamp(href: str, storage_options: Mapping | None, block_size: int):
    import h5py

    if href.startswith("s3://"):
        from zagg.sources.remote_file import open_s3

        # read on this thread: see zagg.sources.remote_file for the hang this avoids
        with open_s3(href, storage_options, block_size) as fobj, h5py.File(fobj, "r") as f:
            details = getattr(fobj, "details", None) or {}
            yield f, (details.get("ETag"), details.get("size"))
    else:
        path = local_path(href)
        st = os.stat(path)
        with h5py.File(path, "r") as f:
            yield f, (st.st_size, st.st_mtime_ns)


def stamp_size(href: str, stamp) -> int | None:
    """The file size in bytes inside a stamp of :func:`open_with_stamp`."""
    size = stamp[1] if href.startswith("s3://") else stamp[0]
    return None if size is None else int(size)


@dataclass(frozen=True)
class GroupShape:
    """One group of a granule: its rows, how each path read there is stored (``layouts``,
    ``index``: the chunk entries by HDF5 path) and, under a read plan, the row ranges the
    run needs (``runs``; None: every row)."""

    group: str | None
    rows: int
    layouts: Mapping[str, Layout] = field(default_factory=dict)
    index: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    runs: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class Scan:
    """What open time learns about one granule: per group its rows and storage, dtypes and
    attrs per variable, and the bytes the read plan's index took."""

    href: str
    groups: tuple[GroupShape, ...]
    dtypes: Mapping[str, str]
    attrs: Mapping[str, Mapping]
    stamp: object  # size/mtime or ETag: part of the graph token
    index_bytes: int = 0
    orbit: Orbit = field(default_factory=Orbit)  # /orbit_info: orientation, rgt, cycle


def hdf5_path(template: str, group: str | None) -> str:
    """The HDF5 path of ``template`` in ``group`` (templates without groups are paths)."""
    return template if group is None else template.format(group=group)


def group_prefix(template: str) -> str:
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


def scan(source: GranuleSource, href: str, cover: ShardCover | None = None) -> Scan:
    """Open one granule and check every configured path in every group (metadata only;
    under a read plan with ``cover``, also the plan's index)."""
    with _opened(source, href) as (f, stamp):
        return scan_file(source, f, href, granule_id(href), stamp, cover)


def scan_file(
    source: GranuleSource, f, href: str, gid: str, stamp, cover: ShardCover | None = None
) -> Scan:
    import h5py

    items = source.items()
    groups = source.groups or (None,)
    orbit = read_orbit(f)
    if source.beams != "all":  # by this granule's orientation
        groups = kept_groups(groups, source.beams, orbit, gid, f"{source.config_key}.beams")
    prefix = group_prefix(source.latitude)
    shapes, dtypes, attrs = [], {}, {}
    index_bytes = 0
    for group in groups:
        if group is not None and prefix.format(group=group) not in f:
            continue  # the whole group is absent: an empty beam
        rows = None
        layouts, index = {}, {}
        for name, template, column in items:
            hpath = hdf5_path(template, group)
            obj = f.get(hpath)
            if obj is None:
                raise GranuleError(
                    f"granule {gid!r}: HDF5 path {hpath!r} (data_source "
                    f"{item_key(name)}) does not exist in {href}"
                )
            if not isinstance(obj, h5py.Dataset):
                raise GranuleError(
                    f"granule {gid!r}: HDF5 path {hpath!r} is a group, not a "
                    f"dataset; point {item_key(name)} at a dataset"
                )
            shape = obj.shape
            one_d = name in ("latitude", "longitude", "time")
            if len(shape) not in (1, 2) or (one_d and len(shape) != 1):
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has shape {shape}; "
                    + (
                        f"{item_key(name)} must be 1-D along the observations"
                        if one_d
                        else f"a variable must be 1-D along the observations, 2-D (rows x columns, "
                        f"read whole, such as signal_conf_ph for a composition), or one "
                        f"column of a 2-D dataset chosen by {{path, column}} in "
                        f"{item_key(name)}"
                    )
                )
            if column is not None and (len(shape) != 2 or column >= shape[1]):
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has shape {shape}; column {column} of "
                    f"{item_key(name)} needs a 2-D dataset with more than {column} columns"
                )
            if rows is None:
                rows = shape[0]
            elif shape[0] != rows:
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has {shape[0]} rows but the latitude "
                    f"{source.latitude.format(group=group)!r} has {rows}; every variable of "
                    "one group must run along the same observations"
                )
            if obj.dtype.kind not in "biuf":
                raise GranuleError(
                    f"granule {gid!r}: {hpath!r} has dtype {obj.dtype}; only "
                    "numeric datasets can be read"
                )
            prev = dtypes.get(name)
            dtypes[name] = obj.dtype.str if prev is None else np.result_type(prev, obj.dtype).str
            if name not in attrs:
                attrs[name] = _decode_attrs(obj.attrs)
            if hpath not in layouts:
                layouts[hpath] = layout_of(obj)
                index[hpath] = chunk_index(obj, layouts[hpath])
        runs = None
        if cover is not None and source.read_plan is not None:
            runs, nbytes = _plan_runs(source, f, href, gid, group, int(rows), layouts, index, cover)
            index_bytes += nbytes
        shapes.append(GroupShape(group, int(rows), layouts, index, runs))
    return Scan(href, tuple(shapes), dtypes, attrs, stamp, index_bytes, orbit)


def read_whole(f, href: str, hpath: str, options, settings: FetchSettings):
    """All rows of dataset ``hpath`` of the open granule (directly when its layout allows,
    else through h5py) with float fill as NaN, and the bytes fetched."""
    dset = f[hpath]
    layout = layout_of(dset)
    if layout.fallback is not None:
        arr, nbytes = np.asarray(dset[...]), int(dset.id.get_storage_size())
    else:
        arr, nbytes = read_direct(
            href, layout, chunk_index(dset, layout), 0, layout.rows, options, settings
        )
    fill = float_fill(dset)
    if fill is not None:
        arr = arr.astype(np.float64)
        arr[arr == fill] = np.nan
    return arr, nbytes


def read_scanned(
    f,
    href: str,
    shape: GroupShape,
    template: str,
    start: int,
    stop: int,
    options,
    settings: FetchSettings,
) -> np.ndarray:
    """Rows ``start:stop`` of a scanned group's dataset at ``template`` as float64 (fill
    as NaN), read directly when its layout allows, else through the open file ``f``."""
    hpath = hdf5_path(template, shape.group)
    layout = shape.layouts[hpath]
    if layout.fallback is not None:
        arr = np.asarray(f[hpath][start:stop])
    else:
        arr = read_direct(href, layout, shape.index[hpath], start, stop, options, settings)[0]
    arr = arr.astype(np.float64)
    if layout.nan_fill is not None:
        arr[arr == layout.nan_fill] = np.nan
    return arr


def _plan_runs(source: GranuleSource, f, href, gid, group, rows, layouts, index, cover):
    """The rows of one group the run needs, by the read plan's index, and the bytes read."""
    arrays, nbytes = read_index(source, f, href, gid, group)
    return tuple(_needed(source, href, gid, group, cover, rows, arrays)), nbytes


def read_index(source: GranuleSource, f, href: str, gid: str, group) -> tuple[dict, int]:
    """The read plan's index arrays of one group of the open granule ``f`` (by role) and
    the bytes read."""
    import h5py

    plan = source.read_plan
    key = f"{source.config_key}.read_plan"
    if plan.kind == "coordinates":
        roles = (("latitude", source.latitude), ("longitude", source.longitude))
    else:
        roles = plan.items()
    arrays, nbytes = {}, 0
    for role, template in roles:
        hpath = hdf5_path(template, group)
        obj = f.get(hpath)
        if not isinstance(obj, h5py.Dataset) or len(obj.shape) != 1:
            what = "does not exist" if obj is None else f"is not a 1-D dataset ({obj})"
            raise GranuleError(
                f"granule {gid!r}: HDF5 path {hpath!r} ({key} {role}) {what} "
                f"in {href}; fix the read plan's paths or set {key}: false"
            )
        try:
            arrays[role], n = read_whole(f, href, hpath, source.storage_options, source.reads)
        except Exception as exc:
            msg = source.storage_options.redact(f"{type(exc).__name__}: {exc}")
            raise GranuleError(
                f"granule {gid!r} ({href}): the read plan's index {hpath!r} cannot be read: {msg}"
            ) from None
        nbytes += n
    return arrays, nbytes


def _needed(source: GranuleSource, href, gid, group, cover, rows: int, arrays):
    try:
        return needed_rows(source.read_plan, cover, rows, arrays)
    except ValueError as exc:
        raise _index_error(source, href, gid, group, exc) from None


def _index_error(source: GranuleSource, href, gid, group, exc) -> GranuleError:
    return GranuleError(
        f"granule {gid!r} ({href}), group {group!r}: {exc}; the read "
        f"plan's index ({source.config_key}.read_plan) does not describe these rows"
    )


def census(source: GranuleSource, href: str, groups, shard_order: int) -> tuple[dict, int]:
    """How many rows of a granule each shard (word at ``shard_order``) can expect, by its
    read plan's index, and how many rows cannot be placed (see
    :func:`zagg.sources.readplan.shard_photons`); ``groups``: ``(group, rows)`` as
    scanned."""
    counts: dict[int, int] = {}
    unplaced = 0
    found = _each_index(
        source, href, groups, lambda rows, a: shard_photons(source.read_plan, rows, a, shard_order)
    )
    for words, n, loose in found:
        for w, k in zip(words.tolist(), n.tolist(), strict=True):
            counts[w] = counts.get(w, 0) + k
        unplaced += loose
    return counts, unplaced


def runs_for_covers(source: GranuleSource, href: str, groups, covers) -> list[list]:
    """Per cover of ``covers`` (a :class:`GroupCovers`), per group (``(group, rows)`` as
    scanned) the rows of a granule that cover needs; the index is read once."""
    found = _each_index(
        source, href, groups, lambda rows, a: group_rows(source.read_plan, covers, rows, a)
    )
    return [[tuple(per_group[i]) for per_group in found] for i in range(covers.count)]


def _each_index(source: GranuleSource, href: str, groups, use) -> list:
    """``use(rows, arrays)`` on the read plan's index of each scanned group (``(group,
    rows)``) of the granule at ``href``, opened once; an index that does not describe
    its group's rows is refused naming the granule and group."""
    gid = granule_id(href)
    out = []
    with _opened(source, href) as (f, _):
        for group, rows in groups:
            arrays, _ = read_index(source, f, href, gid, group)
            try:
                out.append(use(rows, arrays))
            except ValueError as exc:
                raise _index_error(source, href, gid, group, exc) from None
    return out


@contextlib.contextmanager
def _opened(source: GranuleSource, href: str):
    """The granule at ``href`` open (h5py file, stamp); any failure but a
    :class:`GranuleError` is reported as a granule that cannot be opened."""
    try:
        with open_with_stamp(href, source.storage_options, source.reads.metadata_block_size) as (
            f,
            stamp,
        ):
            yield f, stamp
    except (GranuleError, ArchiveError):  # an archive's refused login is no damaged granule
        raise
    except Exception as exc:  # h5py/OS/s3 errors: corrupt, truncated, unreadable
        if "://" not in href and os.path.islink(href) and not os.path.exists(href):
            raise GranuleError(
                f"granule {granule_id(href)!r} ({href}) is a symbolic link to "
                f"{os.readlink(href)!r}, which does not exist: restore the file it points "
                "to, or remove the link"
            ) from None
        msg = source.storage_options.redact(f"{type(exc).__name__}: {exc}")
        raise GranuleError(
            f"granule {granule_id(href)!r} ({href}): cannot open as HDF5: {msg}"
        ) from None


def item_key(name: str) -> str:
    if name in ("latitude", "longitude"):
        return f"coordinates.{name}"
    return "delta_time" if name == "time" else f"variables.{name}"
