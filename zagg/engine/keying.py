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
from zagg.kernels import keep as keep_rows
from zagg.kernels import segments


class CellPoints:
    """The kept points of one chunk grouped by cell (``grouping``: sorted cell words and
    the kernels' addressing, see :class:`zagg.kernels.segments.Grouping`)."""

    def __init__(self, plan: Plan, cell_words: np.ndarray, select, point_words=None, runs=None):
        self.plan = plan
        self.cell_words = cell_words
        self.grouping = segments.group_cells(cell_words, plan.grid.cell_order)
        self._select = select
        self._runs = runs
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

    def runs(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A declared variable's runs along the kept points (input order): the first point
        of each and its value, ``(at, values)``. A run may end where the value does not
        change (a dropped row between two equal values), never span a change; enough for
        variables that change rarely, such as a granule index, read without gathering
        every point's value."""

        def make():
            if self._runs is not None:
                return self._runs(name)
            v = self.values(name)
            at = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1]))) if v.size else v[:0]
            return at.astype(np.int64), v[at]

        return self._memo(("runs", name), make)

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
    # the rows the filters keep whose coordinates can be keyed, and their coordinates,
    # in one pass; every other array is gathered through ``rows`` once, when read
    rows, lat, lon, n_kept = keep_rows.keyable_rows(keep, arrs[plan.lat], arrs[plan.lon])
    n_filtered = n_in - n_kept
    n_invalid = n_kept - rows.size
    if rows.size == n_in:
        rows = None  # every row is kept: arrays are read as they are
    if plan.needs_point_words:
        words = G.keyable_words(lat, lon, None)
        cell_words = G.ancestor(words, plan.grid.cell_order)
    else:
        words = None
        cell_words = G.keyable_words(lat, lon, plan.grid.cell_order)
    n_outside = 0
    if plan.shard_set is not None or plan.shard_span is not None:
        inside, n_outside = _in_run(plan, cell_words)
        if not bool(inside.all()):
            drop = np.flatnonzero(~inside)
            cell_words = _without(cell_words, inside, drop)
            if words is not None:
                words = _without(words, inside, drop)
            rows = np.flatnonzero(inside) if rows is None else _without(rows, inside, drop)
    columns = {n: (var, col) for n, var, col in plan.columns}

    def raw(name):  # every input row's values
        var, col = columns.get(name, (name, None))
        v = np.asarray(arrs[var])
        return v if col is None else v[:, col]

    def select(name):
        v = raw(name)
        if rows is not None:
            v = v.take(rows, axis=0)
        if v.dtype == np.bool_:  # flags aggregate as 0/1 (a mean is the fraction set)
            v = v.view(np.uint8)
        return v

    def runs(name):
        # cut where the input rows change; a kept point starts a run where a cut falls
        # between it and the kept point before
        v = raw(name)
        n = n_in if rows is None else rows.size
        if n == 0:
            return np.zeros(0, np.int64), select(name)[:0]
        at = np.flatnonzero(v[1:] != v[:-1]) + 1
        if rows is not None:
            at = np.searchsorted(rows, at)
            at = np.unique(at[at < n])
        at = np.concatenate(([0], at[at > 0])).astype(np.int64)
        first = at if rows is None else rows[at]
        values = v[first]
        return at, values.view(np.uint8) if values.dtype == np.bool_ else values

    counts = {
        "points_in": n_in,
        "filtered": n_filtered,
        "invalid_coordinates": n_invalid,
        "outside_shards": n_outside,
        "keyed": int(cell_words.size),
    }
    return CellPoints(plan, cell_words, select, words, runs), counts


def _in_run(plan: Plan, cell_words: np.ndarray) -> tuple[np.ndarray, int]:
    """Which points the chunk keeps: those in the run's shards (``plan.shard_set``) and
    in its shard group's span (``plan.shard_span``); and how many fall outside the run's
    shards (a point of another group's span is that group's, and counted there)."""
    shards = G.ancestor(cell_words, plan.grid.shard_order)
    inside = np.ones(shards.size, bool)
    if plan.shard_set is not None:
        inside = np.isin(shards, np.asarray(plan.shard_set, dtype=np.uint64))
    n_outside = int(shards.size - np.count_nonzero(inside))
    if plan.shard_span is not None:
        lo, hi = plan.shard_span
        inside &= shards >= np.uint64(lo)
        if hi is not None:
            inside &= shards < np.uint64(hi)
    return inside, n_outside


def _without(x: np.ndarray, sel: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """``x[sel]``, where ``drop`` lists the rows ``sel`` leaves out: a few are cut out by
    copying the spans between them, at memory speed."""
    if drop.size > 64:
        return x[sel]
    edges = np.concatenate(([-1], drop, [x.size]))
    return np.concatenate([x[a + 1 : b] for a, b in zip(edges[:-1], edges[1:], strict=True)])
