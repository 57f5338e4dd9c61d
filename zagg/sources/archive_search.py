"""A granule search of NASA's archive, and its result as a catalog.

``data_source.granules: {search: {...}}`` names granules by what they are (product,
version, place, time span, cycles, reference ground tracks) instead of where they are.
:func:`parse_search` validates the block; :func:`search_granules` asks the CMR search API
(``granules.umm_json``, every page, following ``CMR-Search-After``) and reads each UMM-G
record: its file name and size, time span, bounding polygons, track, and its S3 and
HTTPS links. :func:`search_catalog` turns the result into a :class:`Catalog` (a search IS
a catalog), so re-runs, regions and shard groups work on it unchanged; ``zagg catalog
--search`` writes it.

A catalogued footprint here comes from the archive's polygons, not from the points: the
cells at the catalog's order that the polygons cover (edges densified, since mortie
takes edges as great circles) and one ring of neighbours, as the archive's polygon
approximates where the points lie. Times are the records' time spans; sizes their
``SizeInBytes``; ``rows`` are unknown until a granule is opened.

CMR is asked over plain HTTP (its documented API) rather than through python-cmr or
earthaccess: neither can be pointed at another CMR and Earthdata Login together and both
lack the ICESat-2 track queries (reference ground track and cycle are searched as CMR's
granule-name patterns, as NSIDC names granules ``ATL03_<start>_<rgt><cycle><region>_...``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import mortie
import numpy as np

from zagg import grid as G
from zagg.sources.archive_access import access_options, choose_access
from zagg.sources.archive_endpoints import TIMEOUT, Endpoints, endpoints
from zagg.sources.archive_query import Search, cmr_parameters, describe
from zagg.sources.catalog import Catalog, CatalogEntry
from zagg.sources.errors import ArchiveError, ArchiveUnreachable, EmptySearch
from zagg.sources.granule_config import GRANULE_SUFFIXES
from zagg.sources.regions import box_rings

__all__ = ["Found", "footprint", "https_root", "search_catalog", "search_granules"]

#: records CMR returns per page at most (its documented maximum)
PAGE_SIZE = 2000
#: a search reading more pages than this is refused (narrow it): 2,000,000 granules
MAX_PAGES = 1000
#: degrees between the points of a densified polygon edge
EDGE_STEP = 0.05
_EPOCH = dt.datetime(2018, 1, 1, tzinfo=dt.UTC)  # ICESat-2's delta_time zero (UTC)


# --------------------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Found:
    """One granule a search found, as its UMM-G record describes it."""

    id: str
    s3: str
    https: str | None
    size: int | None
    time_start: str | None
    time_end: str | None
    polygons: tuple[tuple[tuple[float, float], ...], ...]
    rgt: int | None = None
    cycle: int | None = None


def search_granules(search: Search, where: Endpoints | None = None) -> list[Found]:
    """Every granule CMR finds for ``search``, in id order (all pages)."""
    import requests

    where = where or endpoints()
    url = f"{where.cmr}/granules.umm_json"
    params = cmr_parameters(search) + [("page_size", str(PAGE_SIZE))]
    headers = {"Client-Id": "zagg", "Accept": "application/json"}
    found: dict[str, Found] = {}
    session = requests.Session()
    for _ in range(MAX_PAGES):
        try:
            r = session.get(url, params=params, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise ArchiveUnreachable(
                f"the CMR search at {where.cmr} did not answer ({type(exc).__name__}) for "
                f"{describe(search)}; check the network and ZAGG_CMR_URL (unset: NASA's CMR)"
            ) from None
        if r.status_code != 200:
            raise ArchiveError(
                f"the CMR search at {where.cmr} refused {describe(search)} (HTTP "
                f"{r.status_code}: {_errors(r)}); fix the search block"
            )
        try:
            items = r.json()["items"]
        except (ValueError, KeyError, TypeError):
            raise ArchiveError(
                f"the CMR search at {where.cmr} answered without UMM-G items for "
                f"{describe(search)}; check ZAGG_CMR_URL (unset: NASA's CMR)"
            ) from None
        for item in items:
            g = _record(item)
            if g is not None and _on_track(g, search):
                found[g.id] = g
        after = r.headers.get("CMR-Search-After")
        if not after or not items:
            return [found[k] for k in sorted(found)]
        headers["CMR-Search-After"] = after
    raise ArchiveError(
        f"{describe(search)} finds more than {MAX_PAGES * PAGE_SIZE:,} granules; narrow it "
        "(a region, a time span, cycles or tracks)"
    )


def _errors(r) -> str:
    try:
        errs = r.json().get("errors")
    except (ValueError, AttributeError):
        errs = None
    text = "; ".join(str(e) for e in errs) if isinstance(errs, list) else (r.text or "")
    return " ".join(text.split())[:200] or "no message"


def _record(item: Mapping) -> Found | None:
    """A :class:`Found` from one ``granules.umm_json`` item; None for a granule without
    an S3 link to an HDF5 file (not in the cloud archive)."""
    umm = item.get("umm") if isinstance(item, Mapping) else None
    if not isinstance(umm, Mapping):
        raise ArchiveError("the CMR search answered an item without its UMM-G record")
    urls = [u for u in umm.get("RelatedUrls") or [] if isinstance(u, Mapping)]
    s3 = [
        u["URL"]
        for u in urls
        if str(u.get("URL", "")).startswith("s3://")
        and str(u.get("URL")).lower().endswith(GRANULE_SUFFIXES)
    ]
    if not s3:
        return None
    href = s3[0]
    name = href.rsplit("/", 1)[-1]
    https = [
        u["URL"]
        for u in urls
        if str(u.get("URL", "")).startswith(("https://", "http://"))
        and u.get("Type", "GET DATA") == "GET DATA"
        and str(u["URL"]).endswith("/" + name)
    ]
    size = None
    info = (umm.get("DataGranule") or {}).get("ArchiveAndDistributionInformation") or []
    for a in info:
        if isinstance(a, Mapping) and a.get("Name") == name and a.get("SizeInBytes") is not None:
            size = int(a["SizeInBytes"])
    span = (umm.get("TemporalExtent") or {}).get("RangeDateTime") or {}
    spatial = (umm.get("SpatialExtent") or {}).get("HorizontalSpatialDomain") or {}
    track = spatial.get("Track") or {}
    passes = track.get("Passes") or []
    return Found(
        name,
        href,
        https[0] if https else None,
        size,
        _utc(span.get("BeginningDateTime")),
        _utc(span.get("EndingDateTime")),
        _polygons(spatial.get("Geometry") or {}, name),
        passes[0].get("Pass") if passes and isinstance(passes[0], Mapping) else None,
        track.get("Cycle"),
    )


def _utc(text) -> str | None:
    if not text:
        return None
    t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    t = t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _polygons(geometry: Mapping, name: str):
    """The record's polygons (outer boundaries) and bounding rectangles as rings of
    (lon, lat)."""
    rings = []
    for gp in geometry.get("GPolygons") or []:
        points = ((gp or {}).get("Boundary") or {}).get("Points") or []
        ring = tuple((float(p["Longitude"]), float(p["Latitude"])) for p in points)
        if len(ring) >= 3:
            rings.append(ring)
    for box in geometry.get("BoundingRectangles") or []:
        w, s = box["WestBoundingCoordinate"], box["SouthBoundingCoordinate"]
        e, n = box["EastBoundingCoordinate"], box["NorthBoundingCoordinate"]
        rings.append(((w, s), (e, s), (e, n), (w, n), (w, s)))
    if not rings:
        raise ArchiveError(
            f"the archive's record of {name} has no polygon or bounding rectangle, so its "
            "footprint is unknown; list the granule by its S3 URL instead"
        )
    return tuple(rings)


def _on_track(g: Found, search: Search) -> bool:
    """Whether a found granule is on an asked track and cycle (by its record's Track, else
    by its name), as CMR's name patterns already ask."""
    if not search.cycles and not search.rgts:
        return True
    rgt, cycle = g.rgt, g.cycle
    if rgt is None or cycle is None:
        parts = g.id.split("_")
        if len(parts) > 2 and len(parts[2]) == 8 and parts[2].isdigit():
            rgt, cycle = int(parts[2][:4]), int(parts[2][4:6])
    return (not search.rgts or rgt in search.rgts) and (not search.cycles or cycle in search.cycles)


# --------------------------------------------------------------------------- the catalog


def footprint(polygons, order: int) -> tuple[str, ...]:
    """Decimal ids of the cells at ``order`` the polygons cover, and their neighbours."""
    words = []
    for ring in polygons:
        lons, lats = _densified(np.asarray(ring, dtype=np.float64))
        if np.ptp(lons) >= 180.0:  # a ring across the antimeridian: cover its box pieces
            box = (float(lons.max()), float(lats.min()), float(lons.min()), float(lats.max()))
            for blats, blons in box_rings(box):
                words.append(np.asarray(mortie.morton_coverage(blats, blons, order=order)))
            continue
        words.append(np.asarray(mortie.morton_coverage(lats, lons, order=order)))
    cells = np.unique(np.concatenate(words).astype(np.uint64))
    ring = np.asarray(mortie.morton_buffer(cells, k=1), np.uint64)
    return tuple(G.to_decimal(np.union1d(cells, ring)))


def _densified(ring: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An open ring (lons, lats) whose edges are cut into steps of at most EDGE_STEP
    degrees: along them a great circle stays on the lon/lat line the archive meant."""
    if np.array_equal(ring[0], ring[-1]):
        ring = ring[:-1]
    out = []
    for a, b in zip(ring, np.roll(ring, -1, axis=0), strict=True):
        n = max(1, int(np.ceil(np.abs(b - a).max() / EDGE_STEP)))
        t = np.arange(n)[:, None] / n
        out.append(a + (b - a) * t)
    pts = np.concatenate(out)
    return pts[:, 0], pts[:, 1]


def _delta_time(utc: str | None) -> float | None:
    """ICESat-2 ``delta_time`` (GPS seconds since 2018-01-01T00:00:00Z, which for any time
    since 2017 is UTC seconds since then: :mod:`zagg.sources.catalog`) of a UTC time."""
    if utc is None:
        return None
    t = dt.datetime.fromisoformat(utc.replace("Z", "+00:00"))
    return (t - _EPOCH).total_seconds()


def https_root(found: list[Found]) -> str:
    """The HTTPS host root every found granule is served under: its HTTPS link is
    ``{root}/{bucket}/{key}`` of its S3 link."""
    roots = set()
    for g in found:
        tail = g.s3[len("s3://") :]
        if g.https is None or not g.https.endswith("/" + tail):
            raise ArchiveError(
                f"the archive's record of {g.id} has no HTTPS link serving its S3 object "
                f"{g.s3} (HTTPS: {g.https}); zagg cannot choose how to read it"
            )
        roots.add(g.https[: -len(tail) - 1])
    if len(roots) > 1:
        raise ArchiveError(
            f"the granules found are served from {len(roots)} HTTPS hosts "
            f"({', '.join(sorted(roots))}); search one product of one archive at a time"
        )
    return roots.pop()


_found: dict[tuple, Catalog] = {}  # (search, endpoints, access) -> its catalog, once per process
_found_lock = threading.Lock()


def search_catalog(search: Search, where: Endpoints | None = None) -> Catalog:
    """The catalog of what ``search`` finds (asked once per process: a run's plan and its
    reads see one answer). Its storage options read the granules as ``search.access``
    says (no secret: each process logs in by itself). Nothing found is an
    :class:`EmptySearch` naming the query."""
    where = where or endpoints()
    key = (search, where, choose_access(search.access))
    with _found_lock:
        if key in _found:
            return _found[key]
    found = search_granules(search, where)
    if not found:
        raise EmptySearch(
            f"the archive's search ({where.cmr}) found no granule for {describe(search)}; "
            "widen the region, the time span or the tracks, or check the short name and version"
        )
    root = https_root(found)
    entries = tuple(
        CatalogEntry(
            g.id,
            g.s3,
            None,
            footprint(g.polygons, search.order),
            g.time_start,
            g.time_end,
            _delta_time(g.time_start),
            _delta_time(g.time_end),
            g.size,
        )
        for g in found
    )
    described = {"search": search.as_dict(), "archive": {"cmr": where.cmr, "https": root}}
    options = access_options(search.access, root, where)
    catalog = Catalog(search.order, entries, described, (), options)
    with _found_lock:
        _found[key] = catalog
    return catalog
