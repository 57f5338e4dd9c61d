"""Granule catalogs: per granule its id, href, time range and footprint, computed once.

:func:`build_catalog` reads every granule's coordinates (and ``delta_time``) once and records
its footprint, the morton cells at a stated order that its points fall in (mortie words keyed
exactly as aggregation keys points, stored as decimal ids), and its UTC time range. The
result is written and read back as JSON or parquet (:func:`write_catalog`,
:func:`read_catalog`), so later runs pick granules for a set of shards with :func:`select`
without opening any file; a catalog file is also a valid ``data_source.granules`` location.
Rebuilding with ``reuse=`` an older catalog only scans granules it does not list yet (or
whose file size changed).

Hrefs: a local granule at or below the catalog's own directory is stored relative to that
directory, any other local granule as an absolute path, and URLs (``s3://``) as they are;
relative hrefs are resolved against the catalog's directory when read, so a catalog opens
from any working directory. A catalog a search of NASA's archive wrote
(:mod:`zagg.sources.archive_search`) records the archive's HTTPS root in its ``source``
block; its granules are read as the reading process decides (S3 in the archive's region,
HTTPS elsewhere: :mod:`zagg.sources.archive_access`). Each entry records the granule's size in bytes, and opening a
granule whose size differs from its entry is refused (the catalog is stale).

Time: ICESat-2 ``delta_time`` is GPS seconds since the ATLAS SDP epoch, whose GPS time
(``/ancillary_data/atlas_sdp_gps_epoch``, 1198800018 s) is 2018-01-01T00:00:00Z. UTC is the
GPS epoch 1980-01-06T00:00:00Z plus ``atlas_sdp_gps_epoch + delta_time`` minus the GPS-UTC
offset of 18 leap seconds, which for every time since 2017 equals 2018-01-01T00:00:00Z plus
``delta_time``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

import dask
import numpy as np

from zagg import grid as G
from zagg.errors import ZaggError
from zagg.grid import MAX_ORDER
from zagg.sources.errors import crashed
from zagg.sources.granules import (
    GranuleError,
    GranuleSource,
    StorageOptions,
    list_granules,
    parse_granule_source,
)
from zagg.sources.scan import (
    granule_id,
    local_path,
    open_with_stamp,
    read_scanned,
    s3_filesystem,
    scan_file,
    stamp_size,
)

__all__ = [
    "ATLAS_SDP_GPS_EPOCH",
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "DEFAULT_ORDER",
    "GPS_UTC_LEAP_SECONDS",
    "build_catalog",
    "check_catalog_path",
    "check_order",
    "delta_time_to_utc",
    "read_catalog",
    "select",
    "write_catalog",
]

CATALOG_VERSION = 1
DEFAULT_ORDER = 9  # ~13 km cells: the shard order of the example configs
GPS_EPOCH = dt.datetime(1980, 1, 6, tzinfo=dt.UTC)
GPS_UTC_LEAP_SECONDS = 18  # GPS - UTC since 2017-01-01
ATLAS_SDP_GPS_EPOCH = 1198800018.0  # GPS seconds of 2018-01-01T00:00:00Z
READ_ROWS = 4_000_000  # coordinate rows read at once while building
_FIELDS = (
    "id",
    "href",
    "rows",
    "footprint",
    "time_start",
    "time_end",
    "delta_time_min",
    "delta_time_max",
)  # required in every entry; "size" is optional (older catalogs)


class CatalogError(ZaggError, ValueError):
    """A catalog file or a selection that zagg refuses; the message names the fix."""


@dataclass(frozen=True)
class CatalogEntry:
    """One granule: ``rows`` observations over its groups (None: not known before it is
    opened, as for a granule a search of the archive found), ``footprint`` decimal cell
    ids, ``size`` the file's size in bytes when catalogued (None in catalogs without
    sizes)."""

    id: str
    href: str
    rows: int | None
    footprint: tuple[str, ...]
    time_start: str | None = None
    time_end: str | None = None
    delta_time_min: float | None = None
    delta_time_max: float | None = None
    size: int | None = None

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["footprint"] = list(self.footprint)
        return d


@dataclass(frozen=True)
class Catalog:
    """Granule entries with footprints at ``order``; ``source`` says what was scanned and
    ``failed`` lists granules that were skipped because they could not be read ({granule,
    error}, with ``on_error: skip``). ``storage_options`` are the s3 options the granules
    (or the catalog file) were read with; :func:`write_catalog` uses them unless given
    others. They are never written, shown or compared."""

    order: int
    entries: tuple[CatalogEntry, ...]
    source: Mapping = dataclasses.field(default_factory=dict)
    failed: tuple[Mapping, ...] = ()
    storage_options: StorageOptions = dataclasses.field(
        default_factory=StorageOptions, repr=False, compare=False
    )

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    def header(self) -> dict:
        return {
            "zagg_catalog": CATALOG_VERSION,
            "order": self.order,
            "source": dict(self.source),
            "failed": [dict(f) for f in self.failed],
        }


# --------------------------------------------------------------------------- time


def delta_time_to_utc(delta_time: float, epoch: float = ATLAS_SDP_GPS_EPOCH) -> str:
    """ISO UTC string (microseconds, 'Z') of GPS seconds ``delta_time`` since ``epoch``
    (GPS seconds of the product's SDP epoch)."""
    seconds = float(epoch) + float(delta_time) - GPS_UTC_LEAP_SECONDS
    t = GPS_EPOCH + dt.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- building


def check_order(order) -> int:
    """``order`` if it is a valid footprint order (0..MAX_ORDER), else a CatalogError."""
    if (
        isinstance(order, bool)
        or not isinstance(order, int | np.integer)
        or not 0 <= order <= MAX_ORDER
    ):
        raise CatalogError(
            f"catalog order must be an integer in 0..{MAX_ORDER}, got "
            f"{order!r}; give the run's shard order (grid.parent_order, "
            f"{DEFAULT_ORDER} in the example configs) or any finer order"
        )
    return int(order)


def check_catalog_path(path) -> str:
    """The kind ('json' or 'parquet') of catalog file ``path`` names, refusing any other
    suffix (and parquet without pyarrow) with a CatalogError; cheap, so call it before
    :func:`build_catalog` scans anything."""
    kind = _kind(str(path))
    if kind == "parquet":
        _pyarrow()
    return kind


def build_catalog(source, *, order: int = DEFAULT_ORDER, reuse: Catalog | None = None) -> Catalog:
    """Scan the granules of ``source`` (a :class:`GranuleSource` or a raw ``data_source``
    mapping) into a catalog with footprints at ``order``.

    Only the coordinates and ``delta_time`` paths are read (all rows, ``READ_ROWS`` at a
    time); granules are scanned in parallel as dask tasks. Entries of ``reuse`` with the same
    href, order and file size are kept without reading (only the size is looked up). With
    ``on_error: skip`` unreadable granules are left out and listed in ``failed``; if no
    granule can be read the catalog is refused (a CatalogError: nothing to aggregate).
    Local hrefs are absolute in the returned catalog.
    """
    order = check_order(order)
    if not isinstance(source, GranuleSource):
        source = parse_granule_source(source)
    # every beam's footprint: a run may pick beams by each granule's orientation
    scan_source = dataclasses.replace(source, variables=(), filters=(), beams="all")
    known = {}
    if reuse is not None and reuse.order == order:
        known = {_absolute(e.href): e for e in reuse}
    hrefs = [_absolute(h) for h in list_granules(source)]
    opts = source.storage_options

    def safe(href):
        try:
            old = known.get(_absolute(href))
            if old is not None and old.size is not None and _current_size(href, opts) == old.size:
                return dataclasses.replace(old, href=href)
            return _entry(scan_source, href, order)
        except GranuleError as exc:
            return exc
        except BaseException as exc:  # a crash a distributed gather could not carry
            if crashed(href, exc) is None:
                raise
            return crashed(href, exc)

    results = dask.compute(*[dask.delayed(safe)(h) for h in hrefs])
    entries, failed = [], []
    for href, res in zip(hrefs, results, strict=True):
        if isinstance(res, GranuleError):
            if source.on_error == "fail":
                raise res
            failed.append({"granule": granule_id(href), "error": str(res)})
        else:
            entries.append(res)
    where = source.where
    if not entries:
        raise CatalogError(
            f"none of the {len(hrefs)} granule(s) at {where!r} could be read, so the catalog "
            f"would be empty and a run would have nothing to aggregate; fix or replace the "
            f"granules (first error: {failed[0]['error'] if failed else 'none'})"
        )
    described = {
        "granules": where,
        "groups": list(source.groups or []),
        "coordinates": {"latitude": source.latitude, "longitude": source.longitude},
        "delta_time": source.delta_time,
    }
    return Catalog(order, tuple(entries), described, tuple(failed), opts)


def _is_url(href: str) -> bool:
    return "://" in href and not href.startswith("file://")


def _absolute(href: str) -> str:
    """A local href as a normalised absolute path; URLs unchanged."""
    return href if _is_url(href) else os.path.abspath(local_path(href))


def _current_size(href: str, options: Mapping) -> int | None:
    """The granule file's size now (a stat, or one HEAD request on S3)."""
    try:
        if href.startswith("s3://"):
            size = s3_filesystem(options).info(href).get("size")
            return None if size is None else int(size)
        return os.path.getsize(local_path(href))
    except Exception as exc:
        msg = StorageOptions(options).redact(f"{type(exc).__name__}: {exc}")
        raise GranuleError(
            f"granule {granule_id(href)!r} ({href}): cannot read its size: {msg}"
        ) from None


def _entry(source: GranuleSource, href: str, order: int) -> CatalogEntry:
    gid = granule_id(href)
    try:
        with open_with_stamp(href, source.storage_options, source.reads.metadata_block_size) as (
            f,
            stamp,
        ):
            scan = scan_file(source, f, href, gid, stamp)
            epoch = ATLAS_SDP_GPS_EPOCH
            if "ancillary_data/atlas_sdp_gps_epoch" in f:
                epoch = float(np.asarray(f["ancillary_data/atlas_sdp_gps_epoch"]).ravel()[0])
            cells, times = [], []
            for g in scan.groups:
                for start in range(0, g.rows, READ_ROWS):
                    stop = min(start + READ_ROWS, g.rows)

                    def rows(template, g=g, start=start, stop=stop):
                        return read_scanned(
                            f, href, g, template, start, stop, source.storage_options, source.reads
                        )

                    words, ok = G.point_words(rows(source.latitude), rows(source.longitude))
                    cells.append(np.unique(G.ancestor(words[ok], order)))
                    if source.delta_time:
                        t = rows(source.delta_time)
                        t = t[np.isfinite(t)]
                        times += [t.min(), t.max()] if t.size else []
    except GranuleError:
        raise
    except Exception as exc:
        msg = source.storage_options.redact(f"{type(exc).__name__}: {exc}")
        raise GranuleError(
            f"granule {gid!r} ({href}): cannot read for the catalog: {msg}"
        ) from None
    cells = np.unique(np.concatenate(cells)) if cells else np.zeros(0, np.uint64)
    t_min, t_max = (float(min(times)), float(max(times))) if times else (None, None)
    return CatalogEntry(
        gid,
        href,
        int(sum(g.rows for g in scan.groups)),
        tuple(G.to_decimal(cells)),
        delta_time_to_utc(t_min, epoch) if times else None,
        delta_time_to_utc(t_max, epoch) if times else None,
        t_min,
        t_max,
        stamp_size(href, scan.stamp),
    )


# --------------------------------------------------------------------------- files


def write_catalog(catalog: Catalog, path, *, storage_options: Mapping | None = None) -> str:
    """Write ``catalog`` to ``path`` (local or s3://) as JSON or parquet, by suffix.

    ``storage_options`` default to the catalog's own (those of the granule source it was
    built from). Local granules at or below the catalog's directory are stored relative to
    it, other local granules as absolute paths, URLs as they are. A catalog without
    granules is refused: a run from it would have nothing to aggregate.
    """
    path = str(path)
    kind = check_catalog_path(path)
    if not catalog.entries:
        failed = f" ({len(catalog.failed)} skipped as unreadable)" if catalog.failed else ""
        raise CatalogError(
            f"catalog {path!r} would list no granules{failed}: a run from it "
            "would have nothing to aggregate; build it from readable granules"
        )
    opts = dict(catalog.storage_options if storage_options is None else storage_options)
    base = _catalog_dir(path)
    entries = [dataclasses.replace(e, href=_stored_href(e.href, base)) for e in catalog]
    try:
        if base is not None:
            os.makedirs(base, exist_ok=True)
        _write(catalog, entries, path, kind, opts)
    except OSError as exc:
        msg = StorageOptions(opts).redact(f"{type(exc).__name__}: {exc}")
        raise CatalogError(f"catalog {path!r} cannot be written: {msg}") from None
    return path


def _catalog_dir(path: str) -> str | None:
    """The absolute directory of a local catalog file; None for a URL."""
    if _is_url(path):
        return None
    return os.path.dirname(os.path.abspath(local_path(path)))


def _stored_href(href: str, base: str | None) -> str:
    """How ``href`` is written into a catalog whose local directory is ``base`` (None:
    the catalog is remote, so every local href is written absolute)."""
    if _is_url(href):
        return href
    full = _absolute(href)
    if base is not None:
        rel = os.path.relpath(full, base)
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return full


def _write(catalog: Catalog, entries: list[CatalogEntry], path: str, kind: str, opts: dict) -> None:
    import fsspec

    if kind == "json":
        doc = {**catalog.header(), "granules": [e.as_dict() for e in entries]}
        with fsspec.open(path, "w", **opts) as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        return
    pa, pq = _pyarrow()
    table = pa.table(
        {
            "id": pa.array([e.id for e in entries], pa.string()),
            "href": pa.array([e.href for e in entries], pa.string()),
            "rows": pa.array([e.rows for e in entries], pa.int64()),
            "footprint": pa.array([list(e.footprint) for e in entries], pa.list_(pa.string())),
            "time_start": pa.array([e.time_start for e in entries], pa.string()),
            "time_end": pa.array([e.time_end for e in entries], pa.string()),
            "delta_time_min": pa.array([e.delta_time_min for e in entries], pa.float64()),
            "delta_time_max": pa.array([e.delta_time_max for e in entries], pa.float64()),
            "size": pa.array([e.size for e in entries], pa.int64()),
        },
        metadata={"zagg_catalog": json.dumps(catalog.header())},
    )
    with fsspec.open(path, "wb", **opts) as f:
        pq.write_table(table, f)


def read_catalog(path, *, storage_options: Mapping | None = None) -> Catalog:
    """Read a catalog written by :func:`write_catalog`; relative hrefs are taken relative
    to the catalog file's directory (local ones become absolute paths)."""
    import fsspec

    path = str(path)
    kind = _kind(path)
    opts = StorageOptions(storage_options or {})
    redact = opts.redact
    try:
        if kind == "json":
            with fsspec.open(path, "r", **opts) as f:
                doc = json.load(f)
            rows = doc.get("granules") if isinstance(doc, dict) else None
            header = doc
        else:
            _, pq = _pyarrow()
            with fsspec.open(path, "rb", **opts) as f:
                table = pq.read_table(f)
            meta = (table.schema.metadata or {}).get(b"zagg_catalog")
            header = json.loads(meta) if meta else None
            rows = table.to_pylist()
    except FileNotFoundError:
        raise CatalogError(
            f"catalog {path!r} does not exist; build it with build_catalog and write_catalog"
        ) from None
    except (OSError, ValueError) as exc:
        raise CatalogError(
            f"catalog {path!r} cannot be read: {redact(f'{type(exc).__name__}: {exc}')}"
        ) from None
    if not isinstance(header, dict) or header.get("zagg_catalog") != CATALOG_VERSION:
        raise CatalogError(
            f"{path!r} is not a zagg catalog (version {CATALOG_VERSION}); "
            "write one with zagg.sources.catalog.write_catalog"
        )
    order = header.get("order")
    if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= MAX_ORDER:
        raise CatalogError(f"catalog {path!r}: order {order!r} is not in 0..{MAX_ORDER}")
    if not isinstance(rows, list):
        raise CatalogError(f"catalog {path!r}: no 'granules' list")
    entries = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or any(k not in r for k in _FIELDS):
            raise CatalogError(
                f"catalog {path!r}: granule entry {i} lacks one of {', '.join(_FIELDS)}"
            )
        size = r.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise CatalogError(
                f"catalog {path!r}: granule entry {i} has size {size!r}; rebuild the catalog"
            )
        entries.append(
            CatalogEntry(
                r["id"],
                _resolved_href(r["href"], path),
                None if r["rows"] is None else int(r["rows"]),
                tuple(r["footprint"] or ()),
                r["time_start"],
                r["time_end"],
                r["delta_time_min"],
                r["delta_time_max"],
                size,
            )
        )
    described = header.get("source") or {}
    archive = described.get("archive") if isinstance(described, dict) else None
    if isinstance(archive, dict) and archive.get("https"):
        # granules a search of NASA's archive found: read as this process decides
        from zagg.sources.archive_access import access_options

        opts = access_options("auto", archive["https"])
    return Catalog(order, tuple(entries), described, tuple(header.get("failed") or ()), opts)


def _resolved_href(href: str, path: str) -> str:
    """A stored href as an openable one: relative hrefs against the catalog's directory."""
    if _is_url(href) or href.startswith("file://") or os.path.isabs(href) or ":" in href[:3]:
        return href
    base = _catalog_dir(path)
    if base is not None:
        return os.path.normpath(os.path.join(base, href))
    scheme, rest = path.split("://", 1)
    folder = posixpath.dirname(rest)
    return f"{scheme}://{posixpath.normpath(posixpath.join(folder, href))}"


def _kind(path: str) -> str:
    low = path.lower()
    if low.endswith(".json"):
        return "json"
    if low.endswith(".parquet"):
        return "parquet"
    raise CatalogError(f"catalog path {path!r} must end in .json or .parquet")


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CatalogError(
            "parquet catalogs need pyarrow: pip install pyarrow, or use a .json catalog"
        ) from None
    return pa, pq


# --------------------------------------------------------------------------- selection


def select(catalog: Catalog, shards, *, shard_order: int | None = None) -> Catalog:
    """The catalog restricted to granules whose footprint touches one of ``shards``.

    ``shards`` are decimal ids or morton words, all at one order p (``shard_order`` if
    given). Footprints finer than p are coarsened to p; a catalog coarser than p cannot
    tell which shards a granule touches and is refused.
    """
    try:
        words = G.as_words(shards)
    except ValueError as exc:
        raise CatalogError(f"shards: {exc}") from None
    orders = sorted({int(w) & 63 for w in words})
    if len(orders) > 1:
        raise CatalogError(f"shards must all be at one order, got orders {orders}")
    if not orders:
        return dataclasses.replace(catalog, entries=())
    p = orders[0]
    if shard_order is not None and p != shard_order:
        raise CatalogError(
            f"shards are at order {p} but shard_order is {shard_order}; give "
            f"shards at order {shard_order}"
        )
    if catalog.order < p:
        raise CatalogError(
            f"catalog footprints are at order {catalog.order}, coarser than "
            f"the shards (order {p}); rebuild the catalog with "
            f"build_catalog(..., order={p}) or any order >= {p}"
        )
    wanted = np.unique(words)
    keep = []
    for e in catalog:
        if not e.footprint:
            continue
        cells = G.ancestor(G.from_decimal(e.footprint), p)
        if np.isin(cells, wanted).any():
            keep.append(e)
    return dataclasses.replace(catalog, entries=tuple(keep))
