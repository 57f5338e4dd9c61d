"""What a granule search of NASA's archive asks: the ``search`` block, validated, and the
CMR parameters it becomes.

``data_source.granules: {search: {short_name, version, region | bbox | polygon, temporal,
cycles, rgts, access, order}}`` (``docs/archive.md``). :func:`parse_search` refuses a bad
block as a ConfigError naming the key, before anything is asked;
:func:`cmr_parameters` writes the query in the CMR search API's own terms
(:mod:`zagg.sources.archive_search` asks it). Importable without dask or h5py, so checking a
config stays light.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

import numpy as np

from zagg.checks.validation import ConfigError, check_keys, check_order, fail
from zagg.sources.regions import RegionError, check_bbox, region_polygons

__all__ = ["ACCESS", "FOOTPRINT_ORDER", "Search", "cmr_parameters", "describe", "parse_search"]

#: the ways to read an archive granule; ``auto`` picks one where the run starts
ACCESS = ("auto", "s3", "https")
#: the order of a search's footprints unless it says (a catalog's default order)
FOOTPRINT_ORDER = 9
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
    order: int = FOOTPRINT_ORDER

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
    order = check_order(raw.get("order", FOOTPRINT_ORDER), f"{path}.order")
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
        fail(
            path, f"expected [start, end] (ISO 8601, e.g. [2019-01-01, 2019-12-31]), got {value!r}"
        )
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
