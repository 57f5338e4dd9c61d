"""Read plans: which rows of a granule a region (or shard-restricted) run needs.

A run restricted to some shards needs only the photons that can fall in them. ICESat-2
products carry their own along-track index: ATL03 groups its photons into 20 m segments
(``/{group}/geolocation``: a reference photon's ``reference_photon_lat``/``_lon``, the
1-based first photon ``ph_index_beg`` (0 for an empty segment) and ``segment_ph_cnt``),
and an ATL06 row *is* a segment with its own coordinates. A :class:`ReadPlan` names that
index; :func:`needed_rows` reads nothing itself but turns the index's arrays into the row
ranges whose segments can reach the run's shards, padded by ``pad`` segments either side,
and :func:`blocks` cuts them into read units that begin and end on storage-chunk
boundaries, so no chunk is decompressed twice.

"Can reach" is decided with mortie alone: a segment is kept when its reference point lies
in a run shard or within ``margin`` metres of one (:class:`ShardCover`: the shards' cells
at a finer order plus mortie's metre buffer around them), or when it has no finite
reference point. Points outside the shards are still dropped by the aggregation, so a
run's results are the same with the plan on or off; the plan only decides what is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from zagg import grid as G
from zagg.checks.validation import fail

__all__ = ["ATL03_SEGMENTS", "ReadPlan", "ShardCover", "blocks", "needed_rows", "parse_read_plan"]

#: the ATL03 geolocation segment index, as paths relative to a beam group
ATL03_SEGMENTS = {
    "latitude": "/{group}/geolocation/reference_photon_lat",
    "longitude": "/{group}/geolocation/reference_photon_lon",
    "ph_index_beg": "/{group}/geolocation/ph_index_beg",
    "segment_ph_cnt": "/{group}/geolocation/segment_ph_cnt",
}
DEFAULT_PAD = 1
DEFAULT_MARGIN = 100.0  # metres: well above the ~20 m along-track span of a segment
FINE_ORDER = 14  # ~400 m cells: the cover's resolution near the shard edges
MAX_COVER_CELLS = 1 << 20
_KEYS = ("latitude", "longitude", "ph_index_beg", "segment_ph_cnt", "pad", "margin")


@dataclass(frozen=True)
class ReadPlan:
    """The along-track index of a granule product. ``kind`` is ``segments`` (an index of
    segments, each naming its rows by ``ph_index_beg``/``segment_ph_cnt``) or
    ``coordinates`` (each row is its own segment, located by the points' coordinates)."""

    kind: str
    latitude: str | None = None
    longitude: str | None = None
    ph_index_beg: str | None = None
    segment_ph_cnt: str | None = None
    pad: int = DEFAULT_PAD
    margin: float = DEFAULT_MARGIN

    def items(self) -> tuple[tuple[str, str], ...]:
        """(role, path template) of the index datasets read at open time."""
        if self.kind == "coordinates":
            return ()
        return (
            ("latitude", self.latitude),
            ("longitude", self.longitude),
            ("ph_index_beg", self.ph_index_beg),
            ("segment_ph_cnt", self.segment_ph_cnt),
        )


def parse_read_plan(value, path: str, template) -> ReadPlan | None:
    """Validate ``data_source.read_plan``: ``atl03`` (the ATL03 geolocation segments),
    ``coordinates`` (rows located by the points' own coordinates, as ATL06 segments), a
    mapping of the four segment-index paths (with optional ``pad`` and ``margin``), or
    ``false``/``off`` (the default: whole beams are read). ``template`` validates a path."""
    if value is None or value is False:
        return None
    presets = "'atl03' (the 20 m geolocation segments), 'coordinates' (ATL06-like rows)"
    if isinstance(value, str):
        if value == "atl03":
            return ReadPlan(
                "segments", **{k: template(v, f"{path}") for k, v in ATL03_SEGMENTS.items()}
            )
        if value == "coordinates":
            return ReadPlan("coordinates", margin=0.0)
        fail(
            path,
            f"{value!r} is not a read plan; use {presets}, a mapping of the segment "
            "index paths (latitude, longitude, ph_index_beg, segment_ph_cnt) or false",
        )
    if not isinstance(value, Mapping):
        fail(path, f"expected {presets}, a mapping or false, got {value!r}")
    from zagg.checks.validation import check_keys

    check_keys(value, _KEYS, path)
    pad = value.get("pad", DEFAULT_PAD)
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad <= 1000:
        fail(f"{path}.pad", f"expected a whole number of segments 0..1000, got {pad!r}")
    margin = value.get("margin", DEFAULT_MARGIN)
    if (
        isinstance(margin, bool)
        or not isinstance(margin, int | float)
        or not 0 <= margin <= 100_000
    ):
        fail(f"{path}.margin", f"expected metres in 0..100000, got {margin!r}")
    roles = ("latitude", "longitude", "ph_index_beg", "segment_ph_cnt")
    given = [r for r in roles if r in value]
    if not given:
        return ReadPlan("coordinates", pad=pad, margin=float(margin))
    missing = [r for r in roles if r not in value]
    if missing:
        fail(
            f"{path}.{missing[0]}",
            "is required with the other segment-index paths (a "
            "segment index names latitude, longitude, ph_index_beg and segment_ph_cnt, "
            "as ATL03's /{group}/geolocation does); or use read_plan: atl03",
        )
    paths = {r: template(value[r], f"{path}.{r}") for r in roles}
    return ReadPlan("segments", pad=pad, margin=float(margin), **paths)


class ShardCover:
    """The run's shards (words at ``shard_order``) and, when ``margin`` > 0, the ring of
    cells within ``margin`` metres around them (mortie's ``morton_buffer_meters``, at a
    finer order near the edges): :meth:`reaches` says which points lie in either."""

    def __init__(self, shards, shard_order: int, margin: float):
        self.order = int(shard_order)
        self.shards = np.unique(np.asarray(shards, dtype=np.uint64))
        self.margin = float(margin)
        self.fine = self.order
        self.ring = np.zeros(0, np.uint64)
        if self.margin > 0 and self.shards.size:
            import mortie

            depth = 0
            while (
                self.order + depth < FINE_ORDER
                and self.shards.size * 4 ** (depth + 1) <= MAX_COVER_CELLS
            ):
                depth += 1
            self.fine = self.order + depth
            cells = self.shards
            if depth:
                cells = np.sort(mortie.generate_morton_children(self.shards, self.fine).ravel())
            self.ring = np.asarray(mortie.morton_buffer_meters(cells, self.margin), dtype=np.uint64)

    def reaches(self, lat, lon, unplaced: bool) -> np.ndarray:
        """Per point, whether it lies in a shard or in the margin ring; points that cannot
        be placed (non-finite coordinates) count as ``unplaced``."""
        words, ok = G.cell_words(lat, lon, self.fine)
        hit = np.isin(G.ancestor(words, self.order), self.shards)
        if self.ring.size:
            hit |= np.isin(words, self.ring)
        if unplaced:
            hit |= ~ok
        else:
            hit &= ok
        return hit


def _dilate(mask: np.ndarray, pad: int) -> np.ndarray:
    """``mask`` with every set entry's ``pad`` neighbours either side set too."""
    if not pad or not mask.any():
        return mask
    idx = np.flatnonzero(mask)
    out = np.zeros(mask.size + 1, np.int64)
    np.add.at(out, np.clip(idx - pad, 0, mask.size), 1)
    np.add.at(out, np.clip(idx + pad + 1, 0, mask.size), -1)
    return np.cumsum(out[:-1]) > 0


def needed_rows(
    plan: ReadPlan, cover: ShardCover, rows: int, index: Mapping
) -> list[tuple[int, int]]:
    """Sorted, disjoint row ranges ``(start, stop)`` of one group that the run needs.

    ``index`` holds the plan's arrays for the group: for ``segments`` the four index
    arrays, for ``coordinates`` the points' ``latitude`` and ``longitude``.
    """
    lat = np.asarray(index["latitude"], dtype=np.float64)
    lon = np.asarray(index["longitude"], dtype=np.float64)
    if plan.kind == "coordinates":
        keep = _dilate(cover.reaches(lat, lon, unplaced=False), plan.pad)
        return _runs(np.flatnonzero(keep), np.flatnonzero(keep) + 1)
    beg = np.asarray(index["ph_index_beg"], dtype=np.int64)
    cnt = np.asarray(index["segment_ph_cnt"], dtype=np.int64)
    if not (beg.size == cnt.size == lat.size == lon.size):
        raise ValueError(
            f"the segment index arrays differ in length (latitude {lat.size}, "
            f"longitude {lon.size}, ph_index_beg {beg.size}, segment_ph_cnt "
            f"{cnt.size})"
        )
    keep = _dilate(cover.reaches(lat, lon, unplaced=True), plan.pad)
    keep &= (cnt > 0) & (beg > 0)
    start = beg[keep] - 1
    stop = start + cnt[keep]
    if start.size and (start.min() < 0 or stop.max() > rows):
        raise ValueError(
            f"the segment index names photons {int(start.min())}.."
            f"{int(stop.max())} but the group has {rows} rows"
        )
    return _runs(start, stop)


def _runs(start: np.ndarray, stop: np.ndarray) -> list[tuple[int, int]]:
    """The union of ranges ``[start, stop)`` as sorted, disjoint runs."""
    if not start.size:
        return []
    order = np.argsort(start, kind="stable")
    start, stop = start[order], np.maximum.accumulate(stop[order])
    new = np.r_[True, start[1:] > stop[:-1]]
    first = np.flatnonzero(new)
    ends = np.r_[first[1:], start.size] - 1
    return list(zip(start[first].tolist(), stop[ends].tolist(), strict=True))


def blocks(runs, rows: int, align: int, max_rows: int) -> list[tuple[int, int]]:
    """Read units covering ``runs`` of a group of ``rows`` rows: each run widened to whole
    storage chunks of ``align`` rows, touching runs merged, and every unit at most
    ``max_rows`` rows (a multiple of ``align`` when ``max_rows`` >= ``align``), so
    consecutive units never share a chunk."""
    align = max(int(align), 1)
    step = max_rows - max_rows % align if max_rows >= align else max_rows
    out: list[tuple[int, int]] = []
    for a, b in runs:
        a = a - a % align
        b = min(-(-b // align) * align, rows)
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    cut = []
    for a, b in out:
        cut += [(s, min(s + step, b)) for s in range(a, b, step)]
    return cut
