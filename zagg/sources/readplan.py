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

__all__ = [
    "ATL03_SEGMENTS",
    "ReadPlan",
    "ShardCover",
    "blocks",
    "GroupCovers",
    "group_rows",
    "needed_rows",
    "parse_read_plan",
    "shard_photons",
]

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
    cells within ``margin`` metres around them (mortie's ``morton_buffer_meters``, at the
    finer order ``fine`` near the edges: by default as fine as :data:`FINE_ORDER` while the
    shards' cells there stay under :data:`MAX_COVER_CELLS`): :meth:`reaches` says which
    points lie in either."""

    def __init__(self, shards, shard_order: int, margin: float, fine: int | None = None):
        self.order = int(shard_order)
        self.shards = np.unique(np.asarray(shards, dtype=np.uint64))
        self.margin = float(margin)
        self.fine = self.order
        self.ring = np.zeros(0, np.uint64)
        if self.margin > 0 and self.shards.size:
            import mortie

            self.fine = fine_order(self.shards.size, self.order) if fine is None else fine
            cells = self.shards
            if self.fine > self.order:
                cells = np.sort(mortie.generate_morton_children(self.shards, self.fine).ravel())
            self.ring = np.asarray(mortie.morton_buffer_meters(cells, self.margin), dtype=np.uint64)

    def reaches(self, lat, lon, unplaced: bool) -> np.ndarray:
        """Per point, whether it lies in a shard or in the margin ring; points that cannot
        be placed (non-finite coordinates) count as ``unplaced``."""
        hit = np.zeros(np.shape(lat), bool)
        points, _ = GroupCovers([self]).pairs(lat, lon, unplaced)
        hit[points] = True
        return hit


def fine_order(shards: int, shard_order: int) -> int:
    """The order a cover of ``shards`` shards draws its margin ring at."""
    depth = 0
    while shard_order + depth < FINE_ORDER and shards * 4 ** (depth + 1) <= MAX_COVER_CELLS:
        depth += 1
    return shard_order + depth


class GroupCovers:
    """Several :class:`ShardCover` (of disjoint shards, their rings at one order) asked at
    once: which covers each point reaches, with a handful of array operations whatever
    their number (a run in shard groups asks every group's cover of every index)."""

    def __init__(self, covers: list[ShardCover]):
        fines = {c.fine for c in covers if c.ring.size}
        if len(fines) > 1:
            raise ValueError(f"covers asked at once need one ring order, got {sorted(fines)}")
        self.count = len(covers)
        self.order = covers[0].order if covers else 0
        self.fine = fines.pop() if fines else self.order
        shards = [c.shards for c in covers] + [np.zeros(0, np.uint64)]
        labels = [np.full(c.shards.size, i) for i, c in enumerate(covers)] + [np.zeros(0, int)]
        self.shards, self.shard_cover = _sorted_pairs(np.concatenate(shards), labels)
        rings = [c.ring for c in covers] + [np.zeros(0, np.uint64)]
        labels = [np.full(c.ring.size, i) for i, c in enumerate(covers)] + [np.zeros(0, int)]
        self.ring, self.ring_cover = _sorted_pairs(np.concatenate(rings), labels)

    @classmethod
    def of(cls, groups, shard_order: int, margin: float) -> GroupCovers:
        """The covers of ``groups`` (lists of shard words), their rings at the order the
        largest group's would be drawn at."""
        fine = fine_order(max((len(g) for g in groups), default=1), shard_order)
        return cls([ShardCover(list(g), shard_order, margin, fine) for g in groups])

    def pairs(self, lat, lon, unplaced: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(point, cover)`` index pairs: each point with every cover it reaches (in a
        shard, or in the ring); points that cannot be placed reach every cover when
        ``unplaced``, none otherwise."""
        words, ok = G.cell_words(
            np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64), self.fine
        )
        n = words.size
        points, covers = [], []
        if self.shards.size:
            shard = G.ancestor(words, self.order)
            at = np.minimum(np.searchsorted(self.shards, shard), self.shards.size - 1)
            hit = ok & (self.shards[at] == shard)
            points.append(np.flatnonzero(hit))
            covers.append(self.shard_cover[at[hit]])
        if self.ring.size:
            lo = np.searchsorted(self.ring, words, "left")
            hi = np.searchsorted(self.ring, words, "right")
            k = np.where(ok, hi - lo, 0)
            if k.any():
                which = np.repeat(np.arange(n), k)
                first = np.repeat(lo - np.cumsum(k) + k, k) + np.arange(int(k.sum()))
                points.append(which)
                covers.append(self.ring_cover[first])
        if unplaced and not ok.all():
            loose = np.flatnonzero(~ok)
            points.append(np.repeat(loose, self.count))
            covers.append(np.tile(np.arange(self.count), loose.size))
        if not points:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(points).astype(np.int64), np.concatenate(covers).astype(np.int64)


def _sorted_pairs(words: np.ndarray, labels: list) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(words, kind="stable")
    return words[order], np.concatenate(labels)[order]


def needed_rows(
    plan: ReadPlan, cover: ShardCover, rows: int, index: Mapping
) -> list[tuple[int, int]]:
    """Sorted, disjoint row ranges ``(start, stop)`` of one group that the run needs.

    ``index`` holds the plan's arrays for the group: for ``segments`` the four index
    arrays, for ``coordinates`` the points' ``latitude`` and ``longitude``.
    """
    return group_rows(plan, GroupCovers([cover]), rows, index)[0]


def group_rows(
    plan: ReadPlan, covers: GroupCovers, rows: int, index: Mapping
) -> list[list[tuple[int, int]]]:
    """Per cover, the sorted, disjoint row ranges of one group (beam) it needs: the rows
    of the segments reaching it (or, unplaced, every cover), ``pad`` segments either side,
    and every row no segment names."""
    lat = np.asarray(index["latitude"], dtype=np.float64)
    lon = np.asarray(index["longitude"], dtype=np.float64)
    if plan.kind == "coordinates":
        points, which = covers.pairs(lat, lon, unplaced=False)
        first = np.arange(lat.size, dtype=np.int64)
        last, named, unnamed = first + 1, None, np.zeros((0, 2), np.int64)
    else:
        beg = np.asarray(index["ph_index_beg"], dtype=np.int64)
        cnt = np.asarray(index["segment_ph_cnt"], dtype=np.int64)
        if not (beg.size == cnt.size == lat.size == lon.size):
            raise ValueError(
                f"the segment index arrays differ in length (latitude {lat.size}, "
                f"longitude {lon.size}, ph_index_beg {beg.size}, segment_ph_cnt "
                f"{cnt.size})"
            )
        first, last, named = _segment_rows(beg, cnt, rows)
        # rows no segment names can lie anywhere: they are read as unplaced points are
        unnamed = _gaps(_runs(first[named], last[named]), rows)
        points, which = covers.pairs(lat, lon, unplaced=True)
    if plan.pad and points.size:
        shifts = np.arange(-plan.pad, plan.pad + 1)
        points = np.clip((points[:, None] + shifts).ravel(), 0, lat.size - 1)
        which = np.repeat(which, shifts.size)
    if named is not None:
        keep = named[points]
        points, which = points[keep], which[keep]
    order = np.lexsort((points, which))
    points, which = points[order], which[order]
    bounds = np.searchsorted(which, np.arange(covers.count + 1))
    out = []
    for i in range(covers.count):
        seg = points[bounds[i] : bounds[i + 1]]  # ascending, repeats side by side
        seg = seg[np.r_[True, seg[1:] != seg[:-1]]] if seg.size else seg
        out.append(
            _runs(
                np.concatenate([first[seg], unnamed[:, 0]]),
                np.concatenate([last[seg], unnamed[:, 1]]),
            )
        )
    return out


def _segment_rows(beg, cnt, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each segment's rows ``[first, last)`` and whether it names any (``named``),
    refusing an index that names rows past the group's end."""
    named = (cnt > 0) & (beg > 0)
    first, last = beg - 1, beg - 1 + cnt
    if named.any() and (first[named].min() < 0 or last[named].max() > rows):
        raise ValueError(
            f"the segment index names photons {int(first[named].min())}.."
            f"{int(last[named].max())} but the group has {rows} rows"
        )
    return first, last, named


def _gaps(runs: list[tuple[int, int]], rows: int) -> np.ndarray:
    """The ``(start, stop)`` ranges of ``0..rows`` that sorted, disjoint ``runs`` leave."""
    edges = np.array([0, *(x for r in runs for x in r), rows], np.int64).reshape(-1, 2)
    return edges[edges[:, 1] > edges[:, 0]]


def shard_photons(
    plan: ReadPlan, rows: int, index: Mapping, shard_order: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """How many rows of one group each shard can expect: ``(shard words, rows per shard,
    rows that cannot be placed)``, by where each segment's reference point lies (for
    ``coordinates``: each row's own point). Rows of segments without a finite reference
    point, and rows no segment names, cannot be placed."""
    lat = np.asarray(index["latitude"], dtype=np.float64)
    lon = np.asarray(index["longitude"], dtype=np.float64)
    words, ok = G.cell_words(lat, lon, shard_order)
    if plan.kind == "coordinates":
        shard, n = np.unique(words[ok], return_counts=True)
        return shard, n.astype(np.int64), int(lat.size - ok.sum())
    beg = np.asarray(index["ph_index_beg"], dtype=np.int64)
    cnt = np.asarray(index["segment_ph_cnt"], dtype=np.int64)
    first, last, named = _segment_rows(beg, cnt, rows)
    per = (last - first)[named]
    placed = ok[named]
    shard, inverse = np.unique(words[named][placed], return_inverse=True)
    n = np.bincount(inverse, weights=per[placed], minlength=shard.size).astype(np.int64)
    return shard, n, int(rows - n.sum())


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
