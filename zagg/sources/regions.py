"""Regions → the shards that cover them, at the shard order (mortie coverage).

A batch run per region aggregates only the shards a GeoJSON polygon or a lon/lat box
touches. Box edges are densified before covering: mortie treats ring edges as great-circle
arcs, which would cut corners off a lat/lon box.
"""

from __future__ import annotations

import json
from pathlib import Path

import mortie
import numpy as np

from zagg import grid as G
from zagg.errors import ZaggError

_DENSIFY = 64  # points per box edge


class RegionError(ZaggError, ValueError):
    """A region that cannot be covered; the message names the file or value and the fix."""


def parse_bbox(text: str) -> tuple[float, float, float, float]:
    """``"lon0,lat0,lon1,lat1"`` → a validated box (see :func:`check_bbox`)."""
    try:
        lon0, lat0, lon1, lat1 = (float(v) for v in str(text).split(","))
    except ValueError:
        raise RegionError(f"--bbox {text!r}: expected four numbers lon0,lat0,lon1,lat1") from None
    return check_bbox((lon0, lat0, lon1, lat1), f"--bbox {text!r}")


def check_bbox(bbox, label: str | None = None) -> tuple[float, float, float, float]:
    """A validated ``(west, south, east, north)`` box. Longitudes lie in -180..360; a box
    with west > east crosses the antimeridian (``(170, -10, -170, 10)`` is the same box as
    ``(170, -10, 190, 10)``), and one spanning 360° or more is every longitude."""
    label = label or f"bbox={bbox!r}"
    try:
        lon0, lat0, lon1, lat1 = (float(v) for v in bbox)
    except (TypeError, ValueError):
        raise RegionError(f"{label}: expected four numbers (lon0, lat0, lon1, lat1)") from None
    lons_ok = all(-180 <= v <= 360 for v in (lon0, lon1)) and lon0 != lon1
    if not (lons_ok and -90 <= lat0 < lat1 <= 90):
        raise RegionError(
            f"{label}: need west != east, both within -180..360 (west > east crosses the "
            "antimeridian), and -90 <= south < north <= 90 (west, south, east, north)"
        )
    return lon0, lat0, lon1, lat1


def box_pieces(bbox) -> list[tuple[float, float, float, float]]:
    """A validated box as boxes at most 90° wide that stay within -180..180 (cut at every
    multiple of 90°), so that no ring is ambiguous on the sphere: a box wider than 180°, a
    whole-globe box or one across the antimeridian covers exactly its cells."""
    lon0, lat0, lon1, lat1 = check_bbox(bbox)
    if lon1 < lon0:
        lon1 += 360.0
    lon1 = min(lon1, lon0 + 360.0)
    cuts = [lon0, *(k * 90.0 for k in range(-2, 9) if lon0 < k * 90.0 < lon1), lon1]
    pieces = []
    for west, east in zip(cuts, cuts[1:], strict=False):
        shift = 360.0 * np.floor((west + 180.0) / 360.0)  # bring the piece into -180..180
        pieces.append((west - shift, lat0, east - shift, lat1))
    return pieces


def box_rings(bbox) -> list[tuple[np.ndarray, np.ndarray]]:
    """The densified rings (lats, lons) of :func:`box_pieces`."""
    return [box_ring(piece) for piece in box_pieces(bbox)]


def box_ring(bbox) -> tuple[np.ndarray, np.ndarray]:
    """A densified closed ring (lats, lons) along the four edges of a lon/lat box."""
    lon0, lat0, lon1, lat1 = bbox
    t = np.linspace(0.0, 1.0, _DENSIFY, endpoint=False)
    lons = np.concatenate(
        [
            lon0 + (lon1 - lon0) * t,
            np.full(_DENSIFY, lon1),
            lon1 - (lon1 - lon0) * t,
            np.full(_DENSIFY, lon0),
        ]
    )
    lats = np.concatenate(
        [
            np.full(_DENSIFY, lat0),
            lat0 + (lat1 - lat0) * t,
            np.full(_DENSIFY, lat1),
            lat1 - (lat1 - lat0) * t,
        ]
    )
    return lats, lons


def _polygons(geo) -> list[list]:
    kind = geo.get("type") if isinstance(geo, dict) else None
    if kind == "FeatureCollection":
        return [p for f in geo.get("features", []) for p in _polygons(f)]
    if kind == "Feature":
        return _polygons(geo.get("geometry") or {})
    if kind in ("Polygon", "MultiPolygon"):
        coords = geo.get("coordinates")
        if not isinstance(coords, list) or not coords:
            raise RegionError(
                f"a GeoJSON {kind} needs a non-empty 'coordinates' list of "
                "rings of [lon, lat] positions"
            )
        return [coords] if kind == "Polygon" else list(coords)
    raise RegionError(
        f"GeoJSON of type {kind!r} has no polygons; use a Polygon, MultiPolygon, "
        "Feature or FeatureCollection"
    )


def cover_rings(rings, order: int) -> np.ndarray:
    """Shard words at ``order`` covering one polygon (outer ring + holes, [lon, lat] pairs)."""
    lats, lons = [], []
    if not isinstance(rings, list) or not rings:
        raise RegionError("a polygon needs a list of rings of [lon, lat] positions")
    for ring in rings:
        try:
            arr = np.asarray(ring, dtype=np.float64)
        except (TypeError, ValueError):
            raise RegionError(
                f"a polygon ring holds something other than [lon, lat] numbers: {str(ring)[:80]}"
            ) from None
        if arr.ndim != 2 or arr.shape[0] < 4 or arr.shape[1] < 2:
            raise RegionError("a polygon ring needs at least 4 [lon, lat] positions")
        lons.append(arr[:, 0])
        lats.append(arr[:, 1])
    if len(rings) == 1:
        return np.asarray(mortie.morton_coverage(lats[0], lons[0], order=order), np.uint64)
    return np.asarray(mortie.morton_coverage(lats, lons, order=order), np.uint64)


def region_polygons(geojson: str | Path) -> tuple[Path, list[list]]:
    """The GeoJSON file ``geojson`` names (a path, or the name of a shipped region such as
    ``"pine_island"``) and its polygons (each a list of rings of [lon, lat] positions)."""
    path = Path(geojson)
    if not path.exists():
        from zagg.packaged import find, names

        shipped = find("region", str(geojson))
        if shipped is None:
            raise RegionError(
                f"--region {geojson}: no such GeoJSON file, and no shipped region of "
                f"that name; the shipped regions are {', '.join(names('region'))} "
                "(zagg configs lists them), or give the path of a GeoJSON polygon file"
            )
        path = shipped
    try:
        geo = json.loads(path.read_text())
    except OSError as exc:
        raise RegionError(f"--region {path}: cannot read it ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise RegionError(f"--region {path}: not valid JSON ({exc})") from exc
    try:
        return path, _polygons(geo)
    except RegionError as exc:
        raise RegionError(f"--region {path}: {exc}") from None


def region_shards(*, geojson: str | Path | None = None, bbox=None, order: int) -> list[str]:
    """Decimal ids of the shards at ``order`` that a GeoJSON file (a path, or the name of a
    shipped region such as ``"pine_island"``) or a box touches."""
    words = []
    if geojson is not None:
        path, polygons = region_polygons(geojson)
        try:
            for poly in polygons:
                words.append(cover_rings(poly, order))
        except RegionError as exc:
            raise RegionError(f"--region {path}: {exc}") from None
    if bbox is not None:
        box = parse_bbox(bbox) if isinstance(bbox, str) else bbox
        for lats, lons in box_rings(box):
            words.append(np.asarray(mortie.morton_coverage(lats, lons, order=order), np.uint64))
    if not words:
        raise RegionError("give a region: a GeoJSON polygon file or a lon0,lat0,lon1,lat1 box")
    merged = np.unique(np.concatenate(words))
    if merged.size and not np.all(mortie.orders_of(merged) == order):
        raise RegionError(f"mortie returned a cover not at order {order}")
    return G.to_decimal(merged)
