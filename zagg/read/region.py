"""Regions for a read: a GeoJSON polygon, a lon/lat box or a list of cells → cell intervals.

A region is held as sorted, disjoint half-open intervals of NESTED HEALPix ids at the
store's cell order (rank space: every cell below an order-k cell ``n`` is the contiguous
run ``[n·4^(c−k), (n+1)·4^(c−k))``), so selecting shards, stamps' boxes and occupied cells
is ``searchsorted`` arithmetic, never a per-cell geometry test.

A cell belongs to a polygon or box region when it is in mortie's cover of it at the cell
order: every cell the boundary touches plus every cell whose centre is inside (holes and
multipart polygons by mortie's even-odd rule). Box edges are densified first, because mortie
treats ring edges as great-circle arcs (:func:`zagg.sources.regions.box_ring`), and cut into pieces at
most 90° wide (:func:`zagg.sources.regions.box_pieces`), so that the whole globe, a box wider than
180° and one across the antimeridian (west > east, or east up to 360) are unambiguous. A ``cells`` region holds every cell at or below the
listed ones (and the cell containing a listed word finer than the cell order).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mortie
import numpy as np

from zagg import grid as _grid
from zagg.sources.regions import RegionError, box_rings


class Region:
    """Sorted disjoint intervals ``[lo[i], hi[i])`` of NESTED ids at cell order ``order``."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, order: int):
        self.lo = np.asarray(lo, dtype=np.int64)
        self.hi = np.asarray(hi, dtype=np.int64)
        self.order = int(order)

    @classmethod
    def from_words(cls, words: np.ndarray, order: int) -> Region:
        """The region of morton words at any orders (area or point words)."""
        words = np.asarray(words, dtype=np.uint64)
        if words.size == 0:
            return cls(np.zeros(0), np.zeros(0), order)
        nested, depth = nested_ids(words)
        depth = depth.astype(np.int64)
        finer = depth > order
        shift = 2 * np.where(finer, 0, order - depth)
        lo = np.where(finer, nested >> (2 * np.maximum(depth - order, 0)), nested << shift)
        hi = np.where(finer, lo + 1, (nested + 1) << shift)
        idx = np.argsort(lo, kind="stable")
        lo, hi = lo[idx], hi[idx]
        # merge overlapping or touching intervals
        reach = np.maximum.accumulate(hi)
        starts = np.concatenate([[True], lo[1:] > reach[:-1]])
        group = np.cumsum(starts) - 1
        out_lo = lo[starts]
        out_hi = np.zeros(out_lo.size, np.int64)
        np.maximum.at(out_hi, group, hi)
        return cls(out_lo, out_hi, order)

    def contains(self, nested: np.ndarray) -> np.ndarray:
        """Mask of the order-``order`` NESTED ids that lie in the region."""
        nested = np.asarray(nested, dtype=np.int64)
        i = np.searchsorted(self.lo, nested, side="right") - 1
        ok = i >= 0
        out = np.zeros(nested.shape, dtype=bool)
        out[ok] = nested[ok] < self.hi[i[ok]]
        return out

    def overlaps(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Mask of the intervals ``[lo, hi)`` that share a cell with the region."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        # the first region interval ending after lo must start before hi
        j = np.searchsorted(self.hi, lo, side="right")
        ok = j < self.lo.size
        out = np.zeros(lo.shape, dtype=bool)
        out[ok] = self.lo[j[ok]] < hi[ok]
        return out


def nested_ids(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(NESTED id as int64, order)`` of morton words at any orders (mortie's decoding)."""
    nested, depth = mortie.MortonIndexArray(np.asarray(words, np.uint64)).to_nested()
    return np.asarray(nested, dtype=np.int64), np.asarray(depth, dtype=np.int64)


def subtree_intervals(shard_words: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi)`` of every shard's cells at cell order ``order``, in NESTED ids."""
    nested, depth = nested_ids(shard_words)
    shift = 2 * (order - depth)
    return nested << shift, (nested + 1) << shift


def parse_region(region=None, bbox=None, cells=None, *, order: int) -> Region | None:
    """The region one of ``region`` (GeoJSON: a mapping, JSON text, a file path or the name
    of a shipped region), ``bbox`` ``(lon0, lat0, lon1, lat1)`` or ``cells`` (morton words
    or decimal ids) describes, at cell order ``order``; None when none is given."""
    given = [
        name for name, v in (("region", region), ("bbox", bbox), ("cells", cells)) if v is not None
    ]
    if len(given) > 1:
        raise RegionError(f"give one of region=, bbox= or cells=, not {' and '.join(given)}")
    if region is not None:
        geo, label = _geojson(region)
        return Region.from_words(_cover_geojson(geo, label, order), order)
    if bbox is not None:
        parts = [
            np.asarray(
                mortie.from_wkb(_wkb_polygon([np.stack([lons, lats], 1)]), order=order, moc=True),
                np.uint64,
            )
            for lats, lons in box_rings(bbox)
        ]
        return Region.from_words(np.concatenate(parts), order)
    if cells is not None:
        return Region.from_words(_cell_words(cells), order)
    return None


# -- GeoJSON -------------------------------------------------------------------------------
def _geojson(region) -> tuple[dict, str]:
    if isinstance(region, dict):
        return region, "the GeoJSON region"
    if not isinstance(region, str | Path):
        raise RegionError(
            f"region= takes GeoJSON (a mapping, JSON text or a file path), got "
            f"{type(region).__name__}; use bbox= for a lon/lat box and cells= "
            "for morton cells"
        )
    text = str(region)
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text), "the GeoJSON region"
        except json.JSONDecodeError as exc:
            raise RegionError(f"region= text is not valid JSON ({exc})") from None
    path = Path(text)
    if not path.exists():
        from zagg.packaged import find, names

        shipped = find("region", text)
        if shipped is None:
            raise RegionError(
                f"region {text!r} is neither a GeoJSON file nor a shipped region "
                f"(shipped: {', '.join(names('region'))})"
            )
        path = shipped
    try:
        return json.loads(path.read_text()), f"region {text}"
    except OSError as exc:
        raise RegionError(f"region {text}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise RegionError(f"region {text}: not valid JSON ({exc})") from None


def _polygons(geo, label: str) -> list[list]:
    kind = geo.get("type") if isinstance(geo, dict) else None
    if kind == "FeatureCollection":
        return [p for f in geo.get("features") or [] for p in _polygons(f, label)]
    if kind == "Feature":
        return _polygons(geo.get("geometry") or {}, label)
    if kind in ("Polygon", "MultiPolygon"):
        coords = geo.get("coordinates")
        if not isinstance(coords, list) or not coords:
            raise RegionError(
                f"{label}: a {kind} needs a non-empty 'coordinates' list of "
                "rings of [lon, lat] positions"
            )
        return [coords] if kind == "Polygon" else list(coords)
    raise RegionError(
        f"{label}: GeoJSON of type {kind!r} has no polygon; use a Polygon, "
        "MultiPolygon, Feature or FeatureCollection"
    )


def _cover_geojson(geo, label: str, order: int) -> np.ndarray:
    polygons = _polygons(geo, label)
    if not polygons:
        raise RegionError(f"{label} holds no polygon")
    parts = []
    for rings in polygons:
        checked = []
        for ring in rings if isinstance(rings, list) else [None]:
            try:
                arr = np.asarray(ring, dtype=np.float64)
            except (TypeError, ValueError):
                arr = np.zeros((0, 0))
            if arr.ndim != 2 or arr.shape[0] < 4 or arr.shape[1] < 2:
                raise RegionError(
                    f"{label}: a polygon ring needs at least 4 [lon, lat] "
                    f"positions, got {str(ring)[:80]}"
                )
            if not (np.isfinite(arr[:, :2]).all() and (np.abs(arr[:, 1]) <= 90).all()):
                raise RegionError(
                    f"{label}: ring positions must be finite [lon, lat] with -90 <= lat <= 90"
                )
            checked.append(arr[:, :2])
        parts.append(
            np.asarray(mortie.from_wkb(_wkb_polygon(checked), order=order, moc=True), np.uint64)
        )
    return np.concatenate(parts)


def _wkb_polygon(rings: list[np.ndarray]) -> bytes:
    """Little-endian WKB of one polygon (outer ring, then holes) of [lon, lat] rings."""
    out = [struct.pack("<BII", 1, 3, len(rings))]
    for ring in rings:
        ring = np.asarray(ring, dtype="<f8")
        if not np.array_equal(ring[0], ring[-1]):
            ring = np.vstack([ring, ring[:1]])
        out.append(struct.pack("<I", ring.shape[0]) + np.ascontiguousarray(ring).tobytes())
    return b"".join(out)


# -- boxes and cells ---------------------------------------------------------------------
def _cell_words(cells) -> np.ndarray:
    if isinstance(cells, str | int | np.integer):
        items = [cells]
    elif isinstance(cells, np.ndarray):
        items = cells.ravel().tolist()
    else:
        items = list(cells)
    if not items:
        raise RegionError("cells= is empty; give at least one morton word or decimal id")
    words = np.zeros(len(items), dtype=np.uint64)
    for i, item in enumerate(items):
        if isinstance(item, str):
            text = item[:-1] if item.endswith("p") else item
            try:
                word = _grid.from_decimal([text])[0]
            except ValueError as exc:
                raise RegionError(f"cells=: {exc}") from None
            if item.endswith("p"):
                word = mortie.decimal_to_word(item)
            words[i] = word
        elif isinstance(item, int | np.integer) and not isinstance(item, bool) and item > 0:
            words[i] = np.uint64(item)
        else:
            raise RegionError(
                f"cells=: {item!r} is neither a morton word (a positive uint64) "
                "nor a decimal id such as '-5121141141'"
            )
    try:
        mortie.validate_morton(words)
    except ValueError as exc:
        raise RegionError(f"cells=: {exc}") from None
    return words
