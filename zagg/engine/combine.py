"""The central lazy object: a dask array holding each shard's occupied cells, one per chunk.

Built from the chunk reductions: per shard, its pieces are tree-combined (fan-in
:data:`FAN_IN`, :func:`tree_levels`) and the last merge is finalized into a
:class:`~zagg.engine.shards.ShardCells`. Everything downstream is ``map_blocks`` over that array:
the leaf writer (:mod:`zagg.engine.write`), the sparse Dataset (occupied cells only, one chunk per
shard) and the dense twin (all 4^(c−p) cells per shard).

The per-shard chains are ``dask.delayed`` calls: how many pieces a shard merges depends on
the data, so no blockwise pattern expresses them. Their scheduling preferences go through
``dask.annotate``: shards heaviest first (the longest chains start earliest), and within a
shard a later stage before an earlier one, so a worker finishes a shard (and frees its
pieces) before starting the next one's. Task names read as stages on the dashboard:
``piece``, ``combine``, ``shard-cells`` (the last merge and the finalize), then
``write-leaf`` or the Dataset's arrays (named after the fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np

from zagg import grid as G
from zagg.config.store import StoreSpec
from zagg.engine.facts import RunFacts, zagg_attrs
from zagg.engine.plan import Plan
from zagg.engine.reduce import ChunkResult
from zagg.engine.shards import ShardCells, dense_arrays, finalize, sparse_arrays
from zagg.reducers.partials import Partial, combine
from zagg.stages import COMBINE, PIECE, SHARD_CELLS, layer_name

FAN_IN = 64  # partials merged per combine task: up to 64 chunks per shard merge once
#: a shard's task stages in order; later stages run first within a shard
STAGES = ("piece", "combine", "finalize", "encode", "output")


def block_tasks(array: da.Array, optimize: bool = False) -> list:
    """One Delayed per block of ``array``. Optimizing its graph first fuses what can be
    fused (a chunk's reading into its reduction) but drops the tasks' priorities, and the
    futures of a persisted array; so only arrays of neither are optimized."""
    return array.to_delayed(optimize_graph=optimize).ravel().tolist()


def shard_priorities(rows, n: int) -> list[int]:
    """Scheduling rank of each of n shards: the heaviest first by ``rows`` (estimated rows
    per shard; None: in shard order)."""
    order = range(n) if rows is None else sorted(range(n), key=lambda i: (-rows[i], i))
    prio = [0] * n
    for rank, i in enumerate(order):
        prio[i] = n - rank
    return prio


def stage_priority(shard_rank: int, stage: str) -> int:
    return shard_rank * len(STAGES) + STAGES.index(stage)


def tree_levels(items: list, func, *args, fan_in: int = FAN_IN, key: tuple = ("combine",)):
    """Merge ``items`` by ``func(*args, *group)`` over groups of at most ``fan_in``, level
    by level, until at most ``fan_in`` remain for the caller's last merge; ``key``
    prefixes every task's key (name first)."""
    level, depth = list(items), 0
    merge = dask.delayed(func, pure=False)
    while len(level) > fan_in:
        level = [
            merge(*args, *level[k : k + fan_in], dask_key_name=(*key, depth, k // fan_in))
            for k in range(0, len(level), fan_in)
        ]
        depth += 1
    return level


def merge_shard(plan: Plan, shard_word: int, *items) -> Partial:
    """One shard's partial from chunk results (cut to the shard here) and partials."""
    parts = [it.piece(shard_word) if isinstance(it, ChunkResult) else it for it in items]
    nonempty = [p for p in parts if p.cells.size]
    if not nonempty:
        return parts[0] if parts else Partial(np.zeros(0, np.uint64), {})
    return combine(nonempty, plan.state_specs)


def _cut(result: ChunkResult, shard_word: int) -> Partial:
    return result.piece(shard_word)


def shard_cells(plan: Plan, unit: int, *items) -> np.ndarray:
    """A unit's last merge and its finalize: its :class:`~zagg.engine.shards.ShardCells`, as the
    one-element object block of the collection's array. A unit is a shard, or a (shard,
    window) pair in a windowed run (:meth:`zagg.engine.plan.Plan.unit_of`)."""
    out = np.empty(1, dtype=object)
    shard_word, window = plan.unit_of(unit)
    part = merge_shard(plan, unit, *items)
    out[0] = finalize(plan, part, shard_word)
    out[0].clock = part.clock
    if window is not None:
        from zagg.engine.reduce_windows import time_range

        out[0].window, out[0].time_range = window, time_range(plan, part)
    return out


@dataclass
class Shards:
    """The aggregated cells of a run: ``cells`` is an object dask array whose chunk i holds
    shard ``words[i]``'s :class:`~zagg.engine.shards.ShardCells` (shards ascending)."""

    cells: da.Array
    words: np.ndarray
    spec: StoreSpec  # what the store of these cells is (grid, fields, windows, pyramid)
    facts: RunFacts  # what the run found (shards, points, granules), beside the spec
    attrs: dict  # stored array name → zarr attrs
    priorities: list[int]
    sizes: list[int] | None = None  # occupied cells per shard, once known
    morton: np.ndarray | None = field(default=None, repr=False)  # their words, once known
    rows: list[int] | None = None  # estimated rows per shard (cells + centroids), if known

    @property
    def arrays(self) -> dict:
        """Stored array name → (kind, dtype, fill), fields then their siblings."""
        return self.spec.arrays

    @property
    def shard_ids(self) -> list[str]:
        """The distinct shards of the units (a windowed run has one unit per (shard,
        window), :mod:`zagg.windows.units`)."""
        words = self.words
        if self.spec.windowing is not None:
            from zagg.windows.units import unpack

            words = np.unique(unpack(words, self.spec.grid.shard_order)[0])
        return G.to_decimal(words)

    @property
    def unit_names(self) -> list[str]:
        """Each unit's leaf stem: the shard id, or ``{id}_{window}`` in a windowed run
        (:func:`zagg.hive.paths.leaf_stem`)."""
        windowing = self.spec.windowing
        if windowing is None:
            return G.to_decimal(self.words)
        from zagg.hive.paths import leaf_stem
        from zagg.windows.assign import label
        from zagg.windows.units import unpack

        shards, index = unpack(self.words, self.spec.grid.shard_order)
        return [
            leaf_stem(sid, label(windowing, i))
            for sid, i in zip(G.to_decimal(shards), index.tolist(), strict=True)
        ]

    def priority(self, stage: str):
        """A ``dask.annotate`` priority for per-shard blocks at ``stage`` (keys end in the
        shard's block index)."""
        prio = self.priorities
        return lambda key: stage_priority(prio[key[-1]], stage)

    def persist(self, progress: bool = False) -> Shards:
        """The same shards with every ShardCells computed and held by the cluster, and
        their sizes and cell words known (what a sparse Dataset needs)."""
        from zagg.engine import progress as progress_

        (cells,) = progress_.persist(
            [self.cells], progress=progress, optimize=False, label="combining and finalizing shards"
        )
        p, c = self.spec.grid.shard_order, self.spec.grid.cell_order
        words = []
        if self.words.size:
            words_of = dask.delayed(_words_block, pure=False)
            blocks = block_tasks(cells)
            words = progress_.compute([words_of(b, p, c) for b in blocks])
        sizes = [w.size for w in words]
        morton = np.concatenate(words) if words else np.zeros(0, np.uint64)
        return Shards(
            cells,
            self.words,
            self.spec,
            self.facts,
            self.attrs,
            self.priorities,
            sizes,
            morton,
            self.rows,
        )

    def to_dataset(self):
        """The sparse Dataset: every stored array over the occupied cells (dimension
        ``cells``, the ``morton`` coordinate, one chunk per shard)."""
        shards = self if self.sizes is not None else self.persist()
        chunks = (tuple(shards.sizes),) if shards.sizes else ((0,),)
        return _dataset(
            shards,
            chunks,
            lambda name: shards.cells.map_blocks(
                _sparse_block,
                name=layer_name(f"sparse-{name}", shards.cells.name),
                chunks=chunks,
                dtype=_dtype(shards, name),
                arrays={name: shards.arrays[name]},
                meta=np.empty(0, _dtype(shards, name)),
            ),
            shards.morton,
        )

    def to_dense(self):
        """The dense twin: every stored array over all 4^(c−p) cells of each shard, in
        canonical nested order (the leaf's own shape)."""
        p, c = self.spec.grid.shard_order, self.spec.grid.cell_order
        n = self.spec.grid.cells_per_shard
        chunks = ((n,) * len(self.words),) if self.words.size else ((0,),)
        with dask.annotate(priority=self.priority("output")):
            morton = self.cells.map_blocks(
                _dense_words,
                p=p,
                c=c,
                n=n,
                dtype=np.uint64,
                chunks=chunks,
                name=layer_name("dense-morton", self.cells.name),
            )
        return _dataset(
            self,
            chunks,
            lambda name: self.cells.map_blocks(
                _dense_block,
                name=layer_name(f"dense-{name}", self.cells.name),
                chunks=chunks,
                dtype=_dtype(self, name),
                arrays={name: self.arrays[name]},
                n=n,
                meta=np.empty(0, _dtype(self, name)),
            ),
            morton,
        )


def _dtype(shards: Shards, name: str) -> np.dtype:
    kind, dtype, _ = shards.arrays[name]
    return np.dtype(object) if kind == "ragged" else np.dtype(dtype)


def _dataset(shards: Shards, chunks, make, morton):
    """A Dataset over ``chunks`` of cells whose arrays ``make(name)`` builds; its attrs
    record how many cells each shard holds (:func:`zagg.engine.write.to_hive` checks a Dataset
    still holds them all)."""
    import xarray as xr

    empty = not shards.words.size
    data_vars = {}
    for name in shards.arrays:
        data = da.zeros(0, dtype=_dtype(shards, name), chunks=chunks) if empty else make(name)
        data_vars[name] = xr.Variable("cells", data, shards.attrs.get(name) or {})
    if empty:
        morton = np.zeros(0, np.uint64)
    ds = xr.Dataset(data_vars, coords={"morton": ("cells", morton)})
    ds["morton"].attrs = {"long_name": "morton cell word", "grid": "healpix-nested-morton"}
    ds.attrs["zagg"] = {
        **zagg_attrs(shards.spec, shards.facts),
        "shard_cells": [] if empty else list(chunks[0]),
    }
    return ds


def _words_block(block, p: int, c: int) -> np.ndarray:
    sc: ShardCells = block[0]
    return G.shard_cell_words(sc.shard, p, c)[sc.ranks]


def _dense_words(block, p: int, c: int, n: int) -> np.ndarray:
    return G.shard_cell_words(block[0].shard, p, c)


def _sparse_block(block, arrays: dict) -> np.ndarray:
    (name,) = arrays
    return sparse_arrays(block[0], arrays)[name]


def _dense_block(block, arrays: dict, n: int) -> np.ndarray:
    (name,) = arrays
    return dense_arrays(block[0], arrays, n)[name]


def build(
    plan: Plan,
    results: list,
    members: dict,
    words: np.ndarray,
    rows: dict | None,
    spec: StoreSpec,
    facts: RunFacts,
    attrs: dict,
    pieces_as_tasks: bool,
) -> Shards:
    """The :class:`Shards` of ``words`` from the chunk results (Delayed or futures);
    ``members[w]`` lists the results holding shard ``w`` (all of them when unknown).

    ``pieces_as_tasks``: cut each chunk's piece of a shard in a task of its own, run where
    the chunk's result lives, so only the piece moves to the combine (several workers).
    Otherwise the combines cut them (one process holds every result: nothing moves, and a
    run of 10^8 points would otherwise add thousands of tasks).

    The array's blocks are one layer of ``shard-cells`` tasks (each a shard's last merge
    and its finalize), built directly: blocks made with ``da.from_delayed`` would add two
    alias tasks per shard, each a scheduler round trip, unless low-level fusion removed
    them, and fusion drops the tasks' priority annotations.
    """
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    words = np.asarray(words, np.uint64)
    weights = None if rows is None else [rows.get(int(w), 0) for w in words]
    prio = shard_priorities(weights, len(words))
    name = layer_name(
        SHARD_CELLS, plan.token, [r.key for r in results], words.tolist(), pieces_as_tasks
    )
    token = name[len(SHARD_CELLS) + 1 :]
    cut = dask.delayed(_cut, pure=False)
    layer, deps = {}, []
    for i, w in enumerate(words.tolist()):
        items = list(members.get(w, ()))
        if pieces_as_tasks:
            with dask.annotate(priority=stage_priority(prio[i], "piece")):
                items = [
                    cut(r, w, dask_key_name=(f"{PIECE}-{token}", i, j)) for j, r in enumerate(items)
                ]
        with dask.annotate(priority=stage_priority(prio[i], "combine")):
            items = tree_levels(
                items, merge_shard, plan, w, fan_in=FAN_IN, key=(f"{COMBINE}-{token}", i)
            )
        layer[(name, i)] = Task((name, i), shard_cells, plan, w, *[TaskRef(d.key) for d in items])
        deps += items
    if not layer:
        cells = da.zeros(0, dtype=object, chunks=((0,),))
        return Shards(cells, words, spec, facts, attrs, prio, rows=weights)
    with dask.annotate(priority=lambda key: stage_priority(prio[key[-1]], "finalize")):
        graph = HighLevelGraph.from_collections(name, layer, dependencies=deps)
    cells = da.Array(
        graph, name, chunks=((1,) * len(words),), dtype=object, meta=np.empty(0, object)
    )
    return Shards(cells, words, spec, facts, attrs, prio, rows=weights)
