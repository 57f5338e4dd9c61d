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

import dataclasses
import datetime as dt
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import mortie
import numpy as np

from zagg import grid as G
from zagg.checks.validation import ConfigError, check_keys, fail
from zagg.sources.archive_access import ACCESS, access_options
from zagg.sources.archive_endpoints import TIMEOUT, Endpoints, endpoints
from zagg.sources.catalog import DEFAULT_ORDER, Catalog, CatalogEntry, CatalogError, check_order
from zagg.sources.errors import ArchiveError, ArchiveUnreachable, EmptySearch
from zagg.sources.granule_config import GRANULE_SUFFIXES
from zagg.sources.regions import RegionError, box_rings, check_bbox, region_polygons

__all__ = [
    "Found",
    "Search",
    "describe",
    "cmr_parameters",
    "parse_search",
    "search_catalog",
    "search_granules",
]

#: records CMR returns per page at most (its documented maximum)
PAGE_SIZE = 2000
#: a search reading more pages than this is refused (narrow it): 2,000,000 granules
MAX_PAGES = 1000
#: degrees between the points of a densified polygon edge
EDGE_STEP = 0.05
_KEYS = (
    "short_name",
    "version",
    "region",
    "bbox",
    "polygon",
    "temporal",
    "cycles",
    "rgts",
    "access",
    "order",
)
_EPOCH = dt.datetime(2018, 1, 1, tzinfo=dt.UTC)  # ICESat-2's delta_time zero (UTC)


@dataclass(frozen=True)
class Search:
    """A validated ``search`` block: what to find (product, place, span, tracks), how the
    found granules are read (``access``) and the order of their footprints."""

    short_name: str
    version: str | None = None
    region: str | None = None
    bbox: tuple[float, float, float, float] | None = None
    polygon: str | None = None
    temporal: tuple[str, str] | None = None
    cycles: tuple[int, ...] = ()
    rgts: tuple[int, ...] = ()
    access: str = "auto"
    order: int = DEFAULT_ORDER

    def as_dict(self) -> dict:
        """The query as a catalog records it (JSON types, unset keys left out)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None and v != () and f.name not in ("access",):
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


def parse_search(raw, path: str = "data_source.granules.search") -> Search:
    """Validate a ``search`` block; every refusal is a ConfigError naming the key."""
    check_keys(raw, _KEYS, path, ("short_name",))
    name = raw["short_name"]
    if not isinstance(name, str) or not name.strip():
        fail(f"{path}.short_name", f"expected a product short name such as ATL03, got {name!r}")
    version = raw.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, str | int) or not str(version):
            fail(f"{path}.version", f'expected a version string such as "006", got {version!r}')
        if isinstance(version, int):
            fail(
                f"{path}.version",
                f'{version!r} is a number; quote it ("{version:03d}"): versions are strings '
                "and their leading zeros count",
            )
    places = [k for k in ("region", "bbox", "polygon") if raw.get(k) is not None]
    if len(places) > 1:
        fail(path, f"give one of region, bbox and polygon, not {' and '.join(places)}")
    region = polygon = bbox = None
    if raw.get("region") is not None:
        region = _place_file(raw["region"], f"{path}.region", "a shipped region name or a path")
    if raw.get("polygon") is not None:
        polygon = _place_file(raw["polygon"], f"{path}.polygon", "a GeoJSON polygon file")
    if raw.get("bbox") is not None:
        value = raw["bbox"]
        if not isinstance(value, list | tuple) or len(value) != 4:
            fail(f"{path}.bbox", f"expected [west, south, east, north] in degrees, got {value!r}")
        try:
            bbox = check_bbox(value, f"config key '{path}.bbox'")
        except RegionError as exc:
            raise ConfigError(str(exc)) from None
    order = raw.get("order", DEFAULT_ORDER)
    try:
        order = check_order(order)
    except CatalogError as exc:
        fail(f"{path}.order", str(exc))
    access = raw.get("access", "auto")
    if access not in ACCESS:
        fail(
            f"{path}.access",
            f"{access!r} is not one of {', '.join(ACCESS)} (auto: S3 inside AWS us-west-2, "
            "HTTPS elsewhere)",
        )
    return Search(
        name.strip(),
        None if version is None else str(version),
        region,
        bbox,
        polygon,
        _temporal(raw.get("temporal"), f"{path}.temporal"),
        _numbers(raw.get("cycles"), f"{path}.cycles", 1, 99, "cycle"),
        _numbers(raw.get("rgts"), f"{path}.rgts", 1, 1387, "reference ground track"),
        access,
        order,
    )


def _place_file(value, path: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected {what}, got {value!r}")
    try:
        region_polygons(value)
    except RegionError as exc:
        fail(path, str(exc).replace("--region ", ""))
    return value


def _temporal(value, path: str) -> tuple[str, str] | None:
    """``[start, end]`` as ISO 8601 UTC strings; a bare date as the end means the end of
    that day."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        fail(path, f"expected [start, end] (ISO 8601, e.g. [2019-01-01, 2019-12-31]), got {value!r}")
    start, end = (_instant(v, f"{path}[{i}]", end=i == 1) for i, v in enumerate(value))
    if start > end:
        fail(path, f"the start {value[0]} is after the end {value[1]}")
    return tuple(t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in (start, end))


def _instant(value, path: str, end: bool) -> dt.datetime:
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, dt.date):
        t = dt.datetime(value.year, value.month, value.day)
        t += dt.timedelta(days=1, seconds=-1) if end else dt.timedelta(0)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace("Z", "+00:00")
        try:
            t = dt.datetime.fromisoformat(text)
        except ValueError:
            fail(path, f"{value!r} is not an ISO 8601 time such as 2019-01-01T00:00:00Z")
        if end and len(text) == 10:
            t += dt.timedelta(days=1, seconds=-1)
    else:
        fail(path, f"expected an ISO 8601 time such as 2019-01-01T00:00:00Z, got {value!r}")
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def _numbers(value, path: str, lo: int, hi: int, what: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        fail(path, f"expected a non-empty list of {what} numbers {lo}..{hi}, got {value!r}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            fail(f"{path}[{i}]", f"expected a {what} number {lo}..{hi}, got {v!r}")
    return tuple(sorted(set(value)))


def describe(search: Search) -> str:
    """The query in one line, as messages name it."""
    parts = [search.short_name + (f" version {search.version}" if search.version else "")]
    if search.region:
        parts.append(f"over {search.region}")
    if search.polygon:
        parts.append(f"in the polygon {search.polygon}")
    if search.bbox:
        parts.append(f"in the box {list(search.bbox)}")
    if search.temporal:
        parts.append(f"from {search.temporal[0]} to {search.temporal[1]}")
    if search.cycles:
        parts.append(f"cycles {list(search.cycles)}")
    if search.rgts:
        parts.append(f"RGTs {list(search.rgts)}")
    return " ".join(parts)


# --------------------------------------------------------------------------- the query


def cmr_parameters(search: Search) -> list[tuple[str, str]]:
    """The CMR granule-search parameters of ``search`` (repeated keys kept in order)."""
    params = [("short_name", search.short_name)]
    if search.version:
        params.append(("version", search.version))
    if search.temporal:
        params.append(("temporal", ",".join(search.temporal)))
    if search.bbox:
        # a box across the antimeridian is CMR's own west > east form
        params.append(("bounding_box", ",".join(_num(v) for v in search.bbox)))
    rings = _query_rings(search)
    if len(rings) == 1:
        params.append(("polygon", rings[0]))
    elif rings:
        params += [("polygon[]", r) for r in rings] + [("options[polygon][or]", "true")]
    patterns = _name_patterns(search)
    if patterns:
        params += [("readable_granule_name[]", p) for p in patterns]
        params.append(("options[readable_granule_name][pattern]", "true"))
    return params


def _num(v: float) -> str:
    return f"{float(v):.6f}".rstrip("0").rstrip(".")


def _query_rings(search: Search) -> list[str]:
    """Each polygon's outer ring as CMR takes it: ``lon,lat,...`` counter-clockwise and
    closed (holes left out: the query finds a superset, the run's region restricts)."""
    place = search.region or search.polygon
    if place is None:
        return []
    _, polygons = region_polygons(place)
    out = []
    for poly in polygons:
        ring = np.asarray(poly[0], dtype=np.float64)[:, :2]
        if not np.array_equal(ring[0], ring[-1]):
            ring = np.vstack([ring, ring[:1]])
        x, y = ring[:, 0], ring[:, 1]
        if np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]) < 0:  # clockwise: reverse it
            ring = ring[::-1]
        out.append(",".join(f"{_num(a)},{_num(b)}" for a, b in ring))
    return out


def _name_patterns(search: Search) -> list[str]:
    """Granule-name patterns of the asked tracks and cycles (NSIDC's ICESat-2 names carry
    ``<rgt:4><cycle:2><region:2>`` after the start time)."""
    if not search.cycles and not search.rgts:
        return []
    rgts = [f"{r:04d}" for r in search.rgts] or ["????"]
    cycles = [f"{c:02d}" for c in search.cycles] or ["??"]
    return [f"{search.short_name}_??????????????_{r}{c}??_*" for r in rgts for c in cycles]


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
        if str(u.get("URL", "")).startswith("https://")
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


_found: dict[tuple, Catalog] = {}  # (search, endpoints) -> its catalog, once per process
_found_lock = threading.Lock()


def search_catalog(search: Search, where: Endpoints | None = None) -> Catalog:
    """The catalog of what ``search`` finds (asked once per process: a run's plan and its
    reads see one answer). Its storage options read the granules as ``search.access``
    says (no secret: each process logs in by itself). Nothing found is an
    :class:`EmptySearch` naming the query."""
    where = where or endpoints()
    key = (search, where)
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
