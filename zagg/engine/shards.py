"""One shard's aggregated cells: finalized from its combined partial, in every shape needed.

:class:`ShardCells` is the unit of the central collection (:mod:`zagg.engine.combine`): the
ranks of the shard's occupied cells (those with at least one keyed point) and, per stored
array, the cells holding a value (:class:`~zagg.hive.cells.DenseCells` /
:class:`~zagg.hive.cells.RaggedCells`), which is exactly what a leaf writer consumes. It
converts to the arrays of one chunk of the sparse Dataset (occupied cells only) or of the
dense twin (all 4^(c−p) cells), and back from the sparse arrays a user may have edited.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zagg import grid as G
from zagg.checks.validation import ConfigError
from zagg.engine.plan import Plan
from zagg.hive import cells
from zagg.reducers.partials import Partial


@dataclass
class ShardCells:
    """A shard's occupied cells (``ranks``, ascending positions among its 4^(c−p)) and
    each stored array's cells with a value (``contents``: array name → cells)."""

    shard: int  # the shard word
    ranks: np.ndarray
    contents: dict
    window: int | None = None  # the window index of a windowed run's unit
    #: a windowed unit's first and last observation time, in the time field's own units
    time_range: tuple[float, float] | None = None
    clock: object = None  # its clocked observations (zagg.windows.record.Clock)

    def __len__(self) -> int:
        return int(self.ranks.size)


def finalize(plan: Plan, part: Partial, shard_word: int) -> ShardCells:
    """The stored values of one shard from its combined partial: each field's reducer
    finalizes its states; cells it says hold no value get the field's fill."""
    rank = G.cell_rank(part.cells, shard_word, plan.grid.shard_order, plan.grid.cell_order)
    out = {}
    for fp in plan.fields:
        f, red = fp.field, fp.reducer
        if not part.cells.size:
            out.update(_empty(f, red))
            continue
        states = {name: part.states[key] for name, key in fp.states}
        if red.kind == "ragged":
            d = red.finalize(states, f.params)
            out[f.name] = cells.digest_rows(rank, d.offsets, d.means, d.weights)
            if f.located:
                words = np.ascontiguousarray(d.locs, dtype="<u8")
                out[f.locations_name] = cells.ragged_cells(
                    rank, (d.offsets - d.offsets[0]) * words.itemsize, words
                )
            if f.timed:
                words = np.ascontiguousarray(d.times, dtype="<u8")
                out[f.times_name] = cells.ragged_cells(
                    rank, (d.offsets - d.offsets[0]) * words.itemsize, words
                )
            continue
        dtype = np.dtype(f.dtype)
        vals = np.asarray(red.finalize(states, f.params))
        has = red.has_value(states)
        has = np.ones(vals.shape[0], bool) if has is None else np.asarray(has, bool)
        if vals.dtype.kind == "f":
            has &= ~np.isnan(vals)
        out[f.name] = cells.dense_cells(
            rank[has], stored_values(vals[has], dtype, f), dtype, f.fill_value
        )
    return ShardCells(int(shard_word), rank, out)


def _empty(f, red) -> dict:
    if red.kind == "ragged":
        empty = cells.ragged_cells(
            np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.uint8)
        )
        return {
            f.name: empty,
            **({f.locations_name: empty} if f.located else {}),
            **({f.times_name: empty} if f.timed else {}),
        }
    return {
        f.name: cells.DenseCells(
            np.zeros(0, np.int64), np.zeros(0, np.dtype(f.dtype).newbyteorder("<"))
        )
    }


def stored_values(vals: np.ndarray, dtype: np.dtype, f) -> np.ndarray:
    """``vals`` cast to the field's stored ``dtype``, refusing values the dtype cannot hold
    (an integer out of its range, a finite float that would become infinite) instead of
    letting them wrap around or overflow silently."""
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, not warned about
        out = vals.astype(dtype)
    if not vals.size or dtype == vals.dtype:
        return out
    bad = None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = vals.min(), vals.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            limits = f"{info.min}..{info.max}"
    elif dtype.kind == "f":
        over = np.isinf(out) & np.isfinite(vals)
        if over.any():
            bad = vals[over][0]
            limits = f"magnitudes up to {np.finfo(dtype).max:.4g}"
    if bad is None:
        return out
    raise ConfigError(
        f"config key 'aggregation.variables.{f.name}.dtype': a cell's {f.function} is {bad}, "
        f"which {dtype.name} cannot store ({limits}); choose a wider dtype (the default for "
        f"{f.function} is {f.reducer.default_dtype}). The dtype is part of the store's "
        "identity: write the rerun to a new store, or delete this one first"
    )


# -- the Dataset shapes of one shard -------------------------------------------------------
def sparse_arrays(sc: ShardCells, arrays: dict) -> dict:
    """One chunk of the sparse Dataset: per array of ``arrays`` (name → (kind, dtype,
    fill)) its values at the occupied cells, ``b""`` / the fill where it has none."""
    out = {}
    for name, (kind, dtype, fill) in arrays.items():
        c = sc.contents[name]
        at = np.searchsorted(sc.ranks, c.ranks)
        if kind == "ragged":
            a = np.empty(len(sc), dtype=object)
            a.fill(b"")
            a[at] = c.payloads()
        else:
            a = np.full(len(sc), fill, dtype=dtype)
            a[at] = c.values
        out[name] = a
    return out


def dense_arrays(sc: ShardCells, arrays: dict, n: int) -> dict:
    """One chunk of the dense twin: every array over all ``n`` cells of the shard."""
    out = {}
    for name, (kind, dtype, fill) in arrays.items():
        c = sc.contents[name]
        out[name] = (
            cells.to_objects(c, n)
            if kind == "ragged"
            else cells.to_dense(c, n, np.dtype(dtype), fill)
        )
    return out


def from_sparse(
    shard_word: int, ranks: np.ndarray, values: dict, arrays: dict, payload
) -> ShardCells:
    """A shard's cells from one chunk of a sparse Dataset (``values``: array name → values
    at ``ranks``). Cells equal to the fill hold no value; ``payload(name, i, cell)`` turns
    a ragged cell into bytes (or raises)."""
    contents = {}
    for name, (kind, dtype, fill) in arrays.items():
        v = np.asarray(values[name])
        if kind == "ragged":
            rc = cells.ragged_from_objects(v, lambda i, cell, name=name: payload(name, i, cell))
            rc.ranks = ranks[rc.ranks]
            contents[name] = rc
        else:
            dc = cells.dense_from_array(v, np.dtype(dtype), fill)
            contents[name] = cells.DenseCells(ranks[dc.ranks], dc.values)
    return ShardCells(int(shard_word), np.asarray(ranks, np.int64), contents)
