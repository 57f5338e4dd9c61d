"""Partial aggregates: per-cell states of one piece of input, and how pieces combine.

A :class:`Partial` holds, for a sorted set of cell words, the dense states of every source
variable (count, double-double sums, min, max) and the t-digest centroids of every digest
source (CSR float32). Partials of the same shard from different input chunks combine by
grouping equal cells — never by revisiting raw points — which is what bounds memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .kernels import located, segments, tdigest


@dataclass
class Digests:
    """Centroids of many cells: cell i owns rows ``offsets[i]:offsets[i+1]``."""

    means: np.ndarray  # float32
    weights: np.ndarray | None  # float32; None: every centroid weighs 1 (loss-free counts)
    offsets: np.ndarray  # int64, len(cells) + 1
    locs: np.ndarray | None = None  # uint64 location word per centroid (located digests)

    @classmethod
    def of(cls, means, weights, offsets, locs=None) -> Digests:
        """Float32 digests; unit weights are dropped (half the memory of a loss-free
        partial, which is most of what a run holds between its two phases)."""
        means = np.asarray(means).astype(np.float32, copy=False)
        if weights is not None:
            weights = np.asarray(weights).astype(np.float32, copy=False)
            if locs is None and (weights.size == 0 or (weights.min() == 1
                                                       and weights.max() == 1)):
                weights = None
        return cls(means, weights, np.asarray(offsets, np.int64), locs)

    def weights_or_ones(self) -> np.ndarray:
        return np.ones(self.means.size, np.float32) if self.weights is None else self.weights

    def take(self, a: int, b: int) -> Digests:
        lo, hi = self.offsets[a], self.offsets[b]
        locs = None if self.locs is None else self.locs[lo:hi]
        weights = None if self.weights is None else self.weights[lo:hi]
        return Digests(self.means[lo:hi], weights, self.offsets[a : b + 1] - lo, locs)

    @property
    def nbytes(self) -> int:
        n = self.means.nbytes + self.offsets.nbytes
        n += 0 if self.weights is None else self.weights.nbytes
        return n + (0 if self.locs is None else self.locs.nbytes)


@dataclass
class Partial:
    """Per-cell states of one piece of input; ``cells`` are sorted unique cell words."""

    cells: np.ndarray
    states: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # source → arrays
    digests: dict[str, Digests] = field(default_factory=dict)  # digest key → centroids

    def take(self, a: int, b: int) -> Partial:
        """Rows ``a:b`` (a contiguous run of cells, e.g. one shard)."""
        return Partial(
            self.cells[a:b],
            {s: {k: v[a:b] for k, v in arrs.items()} for s, arrs in self.states.items()},
            {k: d.take(a, b) for k, d in self.digests.items()},
        )

    def compact(self) -> Partial:
        """The same partial in less memory while it waits to be combined: counts as int32
        and extremes as float32 where that is exact (:func:`combine` widens them back)."""
        states = {}
        for src, arrs in self.states.items():
            out = {}
            for k, v in arrs.items():
                if k == "count" and v.dtype == np.int64 and (v.size == 0 or v.max() < 2**31):
                    v = v.astype(np.int32)
                elif k in ("min", "max") and v.dtype == np.float64:
                    with np.errstate(over="ignore"):
                        narrow = v.astype(np.float32)
                    if np.array_equal(narrow, v, equal_nan=True):
                        v = narrow
                out[k] = v
            states[src] = out
        return Partial(self.cells, states, self.digests)

    @property
    def nbytes(self) -> int:
        n = self.cells.nbytes + sum(d.nbytes for d in self.digests.values())
        return n + sum(v.nbytes for arrs in self.states.values() for v in arrs.values())


@dataclass(frozen=True)
class DigestSpec:
    """One digest to build: of ``source`` over the rows ``where`` selects."""

    source: str
    delta: int
    where: str | None = None
    located: bool = False
    weight_source: str | None = None  # flux weights per observation (None: counts)

    @property
    def declaration(self) -> str:
        return "counts" if self.weight_source is None else "flux"

    @property
    def key(self) -> str:
        loc = "+loc" if self.located else ""
        flux = f"*{self.weight_source}" if self.weight_source else ""
        return f"{self.source}@{self.delta}{loc}{flux}" + (f"|{self.where}" if self.where else "")


def group_key(source: str | None, where: str | None) -> str:
    """Key of the dense states of ``source`` ("" = no source) over the rows ``where`` keeps."""
    return (source or "") + (f"|{where}" if where else "")


def _widened(name: str, x: np.ndarray) -> np.ndarray:
    """Undo :meth:`Partial.compact` before states are summed across partials."""
    if name == "count" and x.dtype != np.int64:
        return x.astype(np.int64)
    if name in ("min", "max") and x.dtype != np.float64:
        return x.astype(np.float64)
    return x


def combine(parts: list[Partial], digest_specs: dict[str, DigestSpec]) -> Partial:
    """Merge partials: states of equal cells combine, digests merge (k-way, loss-free while
    a cell's total weight stays within delta). Parts are taken in list order."""
    parts = [p for p in parts if p.cells.size]
    if not parts:
        raise ValueError("combine() needs at least one non-empty partial")
    if len(parts) == 1:
        return parts[0]
    cells = np.concatenate([p.cells for p in parts])
    perm, ucells, offsets = segments.group_sorted(cells)
    states = {}
    for src in parts[0].states:
        cat = {k: _widened(k, np.concatenate([p.states[src][k] for p in parts]))
               for k in parts[0].states[src]}
        states[src] = segments.combine_states(cat, perm, offsets)
    digests = {}
    for key, spec in digest_specs.items():
        means = np.concatenate([p.digests[key].means for p in parts])
        unit = all(p.digests[key].weights is None for p in parts)
        weights = None if unit else np.concatenate([p.digests[key].weights_or_ones()
                                                    for p in parts])
        sizes = np.concatenate([np.diff(p.digests[key].offsets) for p in parts])
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        # rows of row-group perm[i] in grouped order
        gsizes = sizes[perm]
        run_starts = starts[perm]
        if not spec.located:
            m, w, o = tdigest.merge_runs(means, weights, run_starts, gsizes, offsets, spec.delta,
                                         declaration=spec.declaration, out_dtype=np.float32)
            digests[key] = Digests.of(m, w, o)
            continue
        if weights is None:
            weights = np.ones(means.size, np.float32)
        cell_rows = np.add.reduceat(gsizes, offsets[:-1]) if gsizes.size else gsizes
        new_off = np.concatenate(([0], np.cumsum(cell_rows))).astype(np.int64)
        means = segments.gather_runs(means, run_starts, gsizes)
        weights = segments.gather_runs(weights, run_starts, gsizes)
        locs = np.concatenate([p.digests[key].locs for p in parts])
        locs = segments.gather_runs(locs, run_starts, gsizes)
        m, w, o, loc = located.located_merge(means, weights, locs, new_off, spec.delta,
                                             declaration=spec.declaration)
        digests[key] = Digests.of(m, w, o, loc)
    return Partial(ucells, states, digests)
