"""One input chunk's points, filtered, keyed onto cells and grouped by cell.

:func:`key_chunk` applies the source's filters, keys the coordinates with mortie (cell
words, or order-29 point words when a state needs them), drops points that cannot be keyed
or fall outside the run's shards, and groups the kept points by cell. The result,
:class:`CellPoints`, is what every state's chunk kernel reads: any variable's values for
the kept points, in input order or as the kernels address them, each made once per chunk
however many states read it.
"""

from __future__ import annotations

import numpy as np

from zagg import grid as G
from zagg.checks import predicate
from zagg.engine.plan import POINT_WORDS, Plan
from zagg.kernels import segments


class CellPoints:
    """The kept points of one chunk grouped by cell (``grouping``: sorted cell words and
    the kernels' addressing, see :class:`zagg.kernels.segments.Grouping`)."""

    def __init__(self, plan: Plan, cell_words: np.ndarray, select, point_words=None):
        self.plan = plan
        self.cell_words = cell_words
        self.grouping = segments.group_cells(cell_words, plan.grid.cell_order)
        self._select = select
        self._point_words = point_words
        self._cache: dict = {}

    def _memo(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def values(self, name: str) -> np.ndarray:
        """A declared variable's values for the kept points, in input order (flags as
        0/1 ``uint8``); :data:`zagg.engine.plan.POINT_WORDS` gives their order-29 words."""
        if name == POINT_WORDS:
            return self._point_words
        return self._memo(("values", name), lambda: self._select(name))

    def selected(self, where: str) -> np.ndarray:
        """Mask (input order) of the kept points the predicate ``where`` selects."""

        def make():
            pred = predicate.parse(where, self.plan.declared)
            return pred.evaluate({n: self.values(n) for n in pred.variables})

        return self._memo(("where", where), make)

    def masked(self, source: str, where: str | None) -> np.ndarray:
        """``source`` in input order, NaN where ``where`` excludes a point."""
        if where is None:
            return self.values(source)
        return self._memo(
            ("masked", source, where),
            lambda: np.where(
                self.selected(where), self.values(source).astype(np.float64, copy=False), np.nan
            ),
        )

    def addressed(self, source: str, where: str | None = None) -> np.ndarray:
        """:meth:`masked` as the kernels address it with ``grouping.starts``."""
        return self._memo(
            ("addressed", source, where),
            lambda: self.grouping.addressed(self.masked(source, where)),
        )

    def contiguous(self, source: str, where: str | None = None) -> np.ndarray:
        """:meth:`masked` in cell order, each cell's points contiguous."""
        return self.grouping.contiguous(self.masked(source, where))

    def contiguous_values(self, name: str) -> np.ndarray:
        """:meth:`values` in cell order, each cell's points contiguous."""
        return self.grouping.contiguous(self.values(name))

    def permutation(self) -> np.ndarray:
        """The point permutation listing the kept points cell by cell."""
        return self._memo("permutation", self.grouping.permutation)


def key_chunk(plan: Plan, arrs: dict) -> tuple[CellPoints, dict]:
    """Filter and key one chunk (``arrs``: input variable → array): its kept points
    grouped by cell and the point accounting."""
    n_in = len(arrs[plan.lat])
    keep = None
    for f in plan.filters:
        m = f.mask(np.asarray(arrs[f.variable]))
        keep = m if keep is None else keep & m
    lat = np.asarray(arrs[plan.lat], dtype=np.float64)
    lon = np.asarray(arrs[plan.lon], dtype=np.float64)
    # the kept input rows as indices, made once: every array is gathered through them in
    # one pass (``take`` beats a boolean mask per array, and drops are folded in, not
    # applied as a second mask)
    rows = None if keep is None else np.flatnonzero(keep)
    if rows is not None:
        lat, lon = lat.take(rows), lon.take(rows)
    n_filtered = n_in - len(lat)
    if plan.needs_point_words:
        words, ok = G.point_words(lat, lon)
        cell_words = G.keyed_ancestor(words, ok, plan.grid.cell_order)
    else:
        words = None
        cell_words, ok = G.cell_words(lat, lon, plan.grid.cell_order)
    n_invalid = int(len(ok) - np.count_nonzero(ok))
    sel = ok
    n_outside = 0
    if plan.shard_set is not None:
        inside = np.isin(
            G.ancestor(cell_words, plan.grid.shard_order),
            np.asarray(plan.shard_set, dtype=np.uint64),
        )
        n_outside = int(np.count_nonzero(ok & ~inside))
        sel = ok & inside
    if not bool(sel.all()):
        drop = np.flatnonzero(~sel)
        cell_words = _without(cell_words, sel, drop)
        if words is not None:
            words = _without(words, sel, drop)
        rows = np.flatnonzero(sel) if rows is None else _without(rows, sel, drop)
    columns = {n: (var, col) for n, var, col in plan.columns}

    def select(name):
        var, col = columns.get(name, (name, None))
        v = np.asarray(arrs[var])
        if col is not None:
            v = v[:, col]
        if rows is not None:
            v = v.take(rows, axis=0)
        if v.dtype == np.bool_:  # flags aggregate as 0/1 (a mean is the fraction set)
            v = v.view(np.uint8)
        return v

    counts = {
        "points_in": n_in,
        "filtered": n_filtered,
        "invalid_coordinates": n_invalid,
        "outside_shards": n_outside,
        "keyed": int(cell_words.size),
    }
    return CellPoints(plan, cell_words, select, words), counts


def _without(x: np.ndarray, sel: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """``x[sel]``, where ``drop`` lists the rows ``sel`` leaves out: a few (unkeyable
    coordinates are rare) are cut out by copying the spans between them, at memory speed."""
    if drop.size > 64:
        return x[sel]
    edges = np.concatenate(([-1], drop, [x.size]))
    return np.concatenate([x[a + 1 : b] for a, b in zip(edges[:-1], edges[1:], strict=True)])
