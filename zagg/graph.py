"""The task graph of an aggregation, written directly as graph layers.

Per input chunk one reduction task; per shard one chain: each touching chunk's piece of
the shard, a combine tree (``FAN_IN`` partials per task), the shard's occupied cells
(``contents``, what the leaf writer reads) and the dense arrays (``finalize``), then one
task per output array chunk picking its field. ``dask.delayed`` would tokenize and walk
every argument of every call (about a millisecond each here), seconds of client time for
runs of thousands of shards before any work starts; here the plan sits in the graph once
and tasks are plain tuples.

Every shard-chain key carries its shard index second, which sets its ``priority``
annotation: on a distributed cluster a worker finishes one shard before starting the next
one's pieces, so partials are freed shard by shard.
"""

from __future__ import annotations

import operator
import uuid
from dataclasses import dataclass

import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from . import grid as G

FAN_IN = 64  # partials merged per combine task: up to 64 chunks per shard merge once


def shard_priority(i: int, n: int) -> int:
    """Scheduling priority of the tasks of the i-th of n shards (earlier shards first)."""
    return n - i


@dataclass(frozen=True)
class ShardJob:
    """What every task of a shard chain needs: stored once in the graph, referenced by key."""

    plan: object  # aggregate.Plan
    fields: tuple
    keys: tuple

    def contents(self, part, shard_word: int) -> dict:
        from .aggregate import shard_contents

        return shard_contents(self.plan, self.fields, self.keys, part, shard_word)

    def finalize(self, contents: dict) -> dict:
        from .aggregate import finalize_shard

        return finalize_shard(self.plan, self.fields, contents)

    def combine(self, *parts):
        from .aggregate import _combine

        return _combine(self.plan, *parts)


def _layer(tasks: dict, n_shards: int) -> MaterializedLayer:
    def priority(key):
        return shard_priority(key[1], n_shards) if isinstance(key, tuple) else n_shards + 1

    return MaterializedLayer(tasks, annotations={"priority": priority})


def chunk_tasks(plan, blocks: list[tuple[Delayed, ...]]) -> list[Delayed]:
    """One reduction task per input chunk (``blocks[j]`` holds the chunk's input arrays in
    ``plan.inputs`` order); each yields an :class:`~zagg.aggregate.ChunkResult`."""
    from .aggregate import reduce_chunk

    token = tokenize(plan, [[b.key for b in blk] for blk in blocks])
    name = f"zagg-reduce-{token}"
    plan_key = f"zagg-plan-{token}"
    tasks = {plan_key: plan}
    for j, blk in enumerate(blocks):
        tasks[name, j] = (reduce_chunk, plan_key, *[b.key for b in blk])
    deps = [b for blk in blocks for b in blk]
    graph = HighLevelGraph.from_collections(name, tasks, dependencies=deps)
    return [Delayed((name, j), graph, layer=name) for j in range(len(blocks))]


def literal_blocks(arrays: list[np.ndarray], chunk_size: int) -> list[tuple[Delayed, ...]]:
    """Per run of ``chunk_size`` rows, a view of each of ``arrays`` (same length) as a graph
    literal, in the shape :func:`chunk_tasks` takes."""
    token = uuid.uuid4().hex
    n = arrays[0].shape[0]
    blocks = []
    for j, start in enumerate(range(0, n, chunk_size)):
        row = []
        for i, a in enumerate(arrays):
            key = (f"zagg-input-{i}-{token}", j)
            row.append(Delayed(key, {key: a[start : start + chunk_size]}))
        blocks.append(tuple(row))
    return blocks


def summary_tasks(results: list[Delayed], summarize) -> list[Delayed]:
    """``summarize(result)`` for every chunk result, as one layer."""
    token = tokenize([r.key for r in results])
    name = f"zagg-summary-{token}"
    tasks = {(name, j): (summarize, r.key) for j, r in enumerate(results)}
    graph = HighLevelGraph.from_collections(name, tasks, dependencies=results)
    return [Delayed((name, j), graph, layer=name) for j in range(len(results))]


@dataclass
class ShardArrays:
    """The lazy output of :func:`shard_chains`."""

    arrays: dict  # output array name → dask array (one chunk per shard)
    morton: object  # dask array of cell words
    chain_layer: str  # the graph layer of the shard chains
    contents: str  # key (contents, i) in that layer holds shard i's occupied cells


def shard_chains(
    job: ShardJob,
    shard_words: np.ndarray,
    members: dict[int, list[Delayed]],
    outputs: dict[str, np.dtype],
) -> ShardArrays:
    """Per shard: pieces → combine tree → contents → finalize, and one dask array per
    entry of ``outputs`` (name → dtype; object for ragged fields) with one chunk per shard,
    plus the ``morton`` coordinate."""
    import dask.array as da

    plan = job.plan
    p, c = plan.shard_order, plan.cell_order
    n = 4 ** (c - p)
    s = len(shard_words)
    deps = list({r.key: r for rs in members.values() for r in rs}.values())
    token = tokenize(
        job,
        np.asarray(shard_words, np.uint64).tobytes(),
        [[r.key for r in members[int(w)]] for w in shard_words],
    )
    chain = f"zagg-shard-{token}"
    job_key = f"zagg-job-{token}"
    piece, comb = f"zagg-piece-{token}", f"zagg-combine-{token}"
    contents, fin = f"zagg-contents-{token}", f"zagg-finalize-{token}"
    tasks: dict = {job_key: job}
    for i, w in enumerate(int(w) for w in shard_words):
        level = []
        for j, r in enumerate(members[w]):
            tasks[piece, i, j] = (_piece, r.key, w)
            level.append((piece, i, j))
        depth = 0
        while len(level) > 1:
            nxt = []
            for k in range(0, len(level), FAN_IN):
                key = (comb, i, depth, k // FAN_IN)
                tasks[key] = (ShardJob.combine, job_key, *level[k : k + FAN_IN])
                nxt.append(key)
            level, depth = nxt, depth + 1
        tasks[contents, i] = (ShardJob.contents, job_key, level[0], w)
        tasks[fin, i] = (ShardJob.finalize, job_key, (contents, i))
    layers = {chain: _layer(tasks, s)}
    graph = HighLevelGraph.from_collections(chain, layers[chain], dependencies=deps)
    layers, dependencies = dict(graph.layers), dict(graph.dependencies)

    def add(name, layer_tasks):
        layers[name] = _layer(layer_tasks, s)
        dependencies[name] = {chain}

    names = {}
    for out in outputs:
        names[out] = f"zagg-{out}-{token}"
        add(names[out], {(names[out], i): (operator.getitem, (fin, i), out) for i in range(s)})
    morton = f"zagg-morton-{token}"
    add(
        morton,
        {(morton, i): (G.shard_cell_words, np.uint64(w), p, c) for i, w in enumerate(shard_words)},
    )
    full = HighLevelGraph(layers, dependencies)
    chunks = ((n,) * s,) if s else ((0,),)

    def array(name, dtype):
        if not s:
            return da.zeros((0,), dtype=dtype, chunks=(n,))
        return da.Array(full, name, chunks, dtype=dtype)

    return ShardArrays(
        {out: array(names[out], np.dtype(dt)) for out, dt in outputs.items()},
        array(morton, np.uint64),
        chain,
        contents,
    )


def shard_tasks(prefix: str, func, shared, args: list[tuple], dependencies) -> list[Delayed]:
    """One task per shard, ``func(shared, *args[i])``, as one layer: ``shared`` is stored
    once in the graph; ``args`` may hold keys of ``dependencies`` (dask collections)."""
    token = tokenize(prefix, uuid.uuid4().hex)  # tasks with side effects: never merged
    name = f"{prefix}-{token}"
    shared_key = f"{prefix}-shared-{token}"
    tasks = {shared_key: shared}
    for i, a in enumerate(args):
        tasks[name, i] = (func, shared_key, *a)
    graph = HighLevelGraph({name: _layer(tasks, len(args))}, {name: set()})
    if dependencies:
        graph = HighLevelGraph.from_collections(name, graph.layers[name],
                                                dependencies=list(dependencies))
    return [Delayed((name, i), graph, layer=name) for i in range(len(args))]


def contents_delayed(
    graph: HighLevelGraph, layer: str, contents: str, n_shards: int
) -> list[Delayed] | None:
    """The per-shard contents tasks of a graph built by :func:`shard_chains`, or None when
    the graph no longer holds them."""
    if layer not in graph.layers:
        return None
    return [Delayed((contents, i), graph, layer=layer) for i in range(n_shards)]


def _piece(result, shard_word: int):
    return result.piece(shard_word)
