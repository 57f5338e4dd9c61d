"""Partial aggregates: per-cell states of one piece of input, and how pieces combine.

A :class:`Partial` holds, for a sorted set of cell words, the value of every state the
plan computes (keyed by :attr:`zagg.engine.plan.StateSpec.key`). Partials of the same shard from
different input chunks combine by grouping equal cells and calling each state's own
``combine`` — never by revisiting raw points — which is what bounds memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Digests:
    """Centroids of many cells: cell i owns rows ``offsets[i]:offsets[i+1]``."""

    means: np.ndarray  # float32
    weights: np.ndarray | None  # float32; None: every centroid weighs 1 (loss-free counts)
    offsets: np.ndarray  # int64, len(cells) + 1
    locs: np.ndarray | None = None  # uint64 location word per centroid (located digests)
    times: np.ndarray | None = None  # uint64 toc time word per centroid (timed digests)

    @classmethod
    def of(cls, means, weights, offsets, locs=None, times=None) -> Digests:
        """Float32 digests; unit weights are dropped (half the memory of a loss-free
        partial, which is most of what a run holds while its shards wait)."""
        means = np.asarray(means).astype(np.float32, copy=False)
        if weights is not None:
            weights = np.asarray(weights).astype(np.float32, copy=False)
            if (
                locs is None
                and times is None
                and (weights.size == 0 or (weights.min() == 1 and weights.max() == 1))
            ):
                weights = None
        return cls(means, weights, np.asarray(offsets, np.int64), locs, times)

    def weights_or_ones(self) -> np.ndarray:
        return np.ones(self.means.size, np.float32) if self.weights is None else self.weights

    def take(self, a: int, b: int) -> Digests:
        lo, hi = self.offsets[a], self.offsets[b]
        locs = None if self.locs is None else self.locs[lo:hi]
        times = None if self.times is None else self.times[lo:hi]
        weights = None if self.weights is None else self.weights[lo:hi]
        return Digests(self.means[lo:hi], weights, self.offsets[a : b + 1] - lo, locs, times)

    @property
    def rows(self) -> np.ndarray:
        """Centroids per cell."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        n = self.means.nbytes + self.offsets.nbytes
        n += 0 if self.weights is None else self.weights.nbytes
        n += 0 if self.times is None else self.times.nbytes
        return n + (0 if self.locs is None else self.locs.nbytes)


def take_rows(value, a: int, b: int):
    """Rows ``a:b`` (cells) of a state value: an array's rows or a :class:`Digests`' cells."""
    return value[a:b] if isinstance(value, np.ndarray) else value.take(a, b)


@dataclass(frozen=True)
class Groups:
    """How the rows of several pieces' concatenated cells group into merged cells: rows
    ``perm[offsets[j]:offsets[j+1]]`` (in piece order) are merged cell j."""

    perm: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, keys: np.ndarray) -> tuple[Groups, np.ndarray]:
        """The grouping of possibly repeated ``keys`` (stable) and the unique keys."""
        perm = np.argsort(keys, kind="stable")
        sk = keys[perm]
        if sk.size == 0:
            return cls(perm, np.zeros(1, np.int64)), sk
        starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
        return cls(perm, np.append(starts, sk.size).astype(np.int64)), sk[starts]


@dataclass
class Partial:
    """Per-cell states of one piece of input; ``cells`` are sorted unique cell words."""

    cells: np.ndarray
    states: dict[str, object] = field(default_factory=dict)  # state key → value
    #: a unit's clocked observations (a zagg.windows.record.Clock), when the run keeps
    #: its leaves' temporal records
    clock: object = None

    def take(self, a: int, b: int) -> Partial:
        """Rows ``a:b`` (a contiguous run of cells, e.g. one shard)."""
        return Partial(self.cells[a:b], {k: take_rows(v, a, b) for k, v in self.states.items()})

    def compact(self, specs) -> Partial:
        """The same partial in less memory while it waits to be combined (each state's own
        ``compact``, when it has one)."""
        out = {}
        for key, value in self.states.items():
            squeeze = specs[key].state.compact
            out[key] = value if squeeze is None else squeeze(value)
        return Partial(self.cells, out)

    @property
    def nbytes(self) -> int:
        return self.cells.nbytes + sum(int(v.nbytes) for v in self.states.values())


def combine(parts: list[Partial], specs) -> Partial:
    """Merge partials: for each state, the values of equal cells combine through the
    state's own ``combine`` (``specs``: state key → :class:`zagg.engine.plan.StateSpec`). Parts
    are taken in list order."""
    parts = [p for p in parts if p.cells.size]
    if not parts:
        raise ValueError("combine() needs at least one non-empty partial")
    if len(parts) == 1:
        return parts[0]
    groups, cells = Groups.of(np.concatenate([p.cells for p in parts]))
    states = {
        key: spec.state.combine([p.states[key] for p in parts], groups, spec)
        for key, spec in specs.items()
    }
    clock = None
    if any(p.clock is not None for p in parts):
        from zagg.windows.record import merge_clocks

        clock = merge_clocks([p.clock for p in parts])
    return Partial(cells, states, clock)
