"""The task graph of an aggregation, written directly as graph layers.

Per input chunk one reduction task (reading the chunk inside it); per shard one chain:
each touching chunk's piece of the shard, a combine tree (``FAN_IN`` partials per task),
the shard's occupied cells (``contents``, what the leaf writer reads) and the dense arrays
(``finalize``), then one task per output array chunk picking its field. ``dask.delayed``
would tokenize and walk every argument of every call (about a millisecond each here),
seconds of client time for runs of thousands of shards before any work starts; here the
plan sits in the graph once and tasks are built directly.

Every task also costs the scheduler and a worker a round trip, so tasks are only made
where they pay: input reads run inside the reductions (dask.array's block reads as
:func:`read_block`, so a worker never imports dask.array for them), and pieces inside the
combines when one process holds every chunk result (where they need not move). Objects
shared by key are tasks (:func:`shared_value`), never literals, which distributed would
hold back.

A shard whose discovery counted more than :data:`BLOCK_ROWS` rows is split into blocks
(runs of whole inner chunks): each block has its own pieces, combine tree and contents,
and the leaf write compresses each block's chunks in a task of its own, so one heavy shard
spreads over many threads instead of holding the end of the run on one.

Every shard-chain key carries its shard index second and names its stage, which set its
``priority`` annotation: shards go heaviest first (the longest chains start earliest), and
within a shard a later stage before an earlier one, so on a distributed cluster a worker
finishes one shard before starting the next one's pieces and partials are freed shard by
shard.
"""

from __future__ import annotations

import operator
import sys
import uuid
from collections import Counter
from dataclasses import dataclass

import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.task_spec import DataNode, Task, TaskRef

from . import grid as G

FAN_IN = 64  # partials merged per combine task: up to 64 chunks per shard merge once
BLOCK_ROWS = 4_000_000  # rows (cells + centroids) a shard block aims at, at most
MAX_BLOCKS = 16  # blocks of one shard, at most (across workers each adds a piece task per
# input chunk; in one process pieces are cut inside the combines, so it adds none)


def shard_priorities(rows, n: int) -> list[int]:
    """Scheduling priority of each of n shards' tasks: the heaviest shard first (by
    ``rows``, its estimated rows; None: in shard order), so the longest chains start
    earliest and no big shard is left to run alone at the end."""
    order = range(n) if rows is None else sorted(range(n), key=lambda i: (-rows[i], i))
    prio = [0] * n
    for rank, i in enumerate(order):
        prio[i] = n - rank
    return prio


def shard_blocks(rows: int | None, n_inner: int, cell_order: int) -> int:
    """How many blocks (runs of whole inner chunks) a shard of ``rows`` estimated rows is
    combined and encoded in: a power of two dividing ``n_inner``, so that no task holds
    much more than :data:`BLOCK_ROWS` and one heavy shard spreads over many threads."""
    if rows is None or cell_order > 27:  # block bounds use the cell law (orders <= 27)
        return 1
    blocks = 1
    while rows > blocks * BLOCK_ROWS and blocks * 2 <= min(n_inner, MAX_BLOCKS):
        blocks *= 2
    return blocks


def block_words(
    shard_word: int, shard_order: int, cell_order: int, block: int, blocks: int
) -> tuple[int, int] | None:
    """The cell-word bounds ``[lo, hi)`` of one block of a shard (None: the whole shard)."""
    if blocks == 1:
        return None
    n = 4 ** (cell_order - shard_order) // blocks
    first = shard_word + (cell_order - shard_order)
    step = G.stride(cell_order)
    lo = 0 if block == 0 else first + block * n * step
    hi = 2**64 - 1 if block == blocks - 1 else first + (block + 1) * n * step
    return lo, hi


@dataclass(frozen=True)
class ShardJob:
    """What every task of a shard chain needs: stored once in the graph, referenced by key."""

    plan: object  # aggregate.Plan
    fields: tuple
    keys: tuple

    def contents(self, part, shard_word: int) -> dict:
        from .aggregate import shard_contents

        return shard_contents(self.plan, self.fields, self.keys, part, shard_word)

    def joined(self, blocks: list) -> dict:
        """One shard's contents from its blocks' (ascending)."""
        from .hive.cells import join_cells

        return {name: join_cells([b[name] for b in blocks]) for name in blocks[0]}

    def finalize(self, contents: dict) -> dict:
        from .aggregate import finalize_shard

        return finalize_shard(self.plan, self.fields, contents)

    def combine(self, *parts):
        from .aggregate import _combine

        return _combine(self.plan, *parts)


# Within a shard, a task of a later stage goes before an earlier one (a block's encode
# before the next block's combine, a write as soon as it can), so a shard's contents are
# written and freed before the next shard's are made. Every key names its stage.
STAGES = ("piece", "combine", "blockcontents", "contents", "finalize", "output", "encode", "write")


def _layer(tasks: dict, prio: list[int], stage) -> MaterializedLayer:
    """A layer of shard tasks, each with priority ``prio[shard] * len(STAGES) + stage``;
    keys that are not tuples (shared objects) go before every shard's. ``stage`` is the
    stage of every key of the layer, or a function of the key giving it."""
    top = (max(prio, default=0) + 1) * len(STAGES)

    def priority(key):
        if not isinstance(key, tuple):
            return top
        at = STAGES.index(stage if isinstance(stage, str) else stage(key))
        return prio[key[1]] * len(STAGES) + at

    return MaterializedLayer(tasks, annotations={"priority": priority})


def _named_stage(key) -> str:
    """The stage a chain key names: ``zagg-<stage>-<token>``."""
    return key[0].split("-")[1]


def chunk_tasks(plan, blocks: list[tuple[Delayed, ...]]) -> list[Delayed]:
    """One reduction task per input chunk (``blocks[j]`` holds the chunk's input arrays in
    ``plan.inputs`` order); each yields an :class:`~zagg.aggregate.ChunkResult`."""
    from .aggregate import reduce_chunk

    token = tokenize(plan, [[b.key for b in blk] for blk in blocks])
    name = f"zagg-reduce-{token}"
    plan_key = f"zagg-plan-{token}"
    deps = [b for blk in blocks for b in blk]
    inputs = HighLevelGraph.merge(*[b.dask for b in deps]) if deps else HighLevelGraph({}, {})
    uses = Counter(b.key for b in deps)
    inlined = {b.key: _inlined(inputs, b.key) if uses[b.key] == 1 else TaskRef(b.key)
               for b in deps}
    tasks = {plan_key: shared_value(plan_key, plan)}
    for j, blk in enumerate(blocks):
        tasks[name, j] = Task((name, j), reduce_chunk, TaskRef(plan_key),
                              *[inlined[b.key] for b in blk])
    graph = HighLevelGraph.from_collections(name, tasks, dependencies=deps)
    return [Delayed((name, j), graph, layer=name) for j in range(len(blocks))]


def _inlined(inputs: HighLevelGraph, key):
    """The task that makes input block ``key``, to run inside the one reduction that reads
    it: a reduction then needs no task of its own per input array and chunk (each costs the
    scheduler a round trip). Data, aliases and blocks read twice stay references."""
    node = inputs[key]
    if not isinstance(node, Task):
        return TaskRef(key)
    core = sys.modules.get("dask.array.core")
    if core is not None and node.func is core.getter:
        return Task(node.key, read_block, *node.args, **node.kwargs)
    return node


def read_block(array, index, asarray=True, lock=None):
    """One input block, ``array[index]``, as dask.array's ``getter`` reads it (index
    without ``None``; its lock held). A worker then needs no dask.array to read its input:
    that import (≈ 0.8 s with the scipy modules it loads) would otherwise hold up a fresh
    worker's first reduction."""
    from .kernels.setup import start_numba_setup

    start_numba_setup()  # the process's first read starts it, ahead of the reductions
    if isinstance(index, tuple) and any(i is None for i in index):
        from dask.array.core import getter

        return getter(array, index, asarray=asarray, lock=lock)
    if lock:
        lock.acquire()
    try:
        block = array[index]
    finally:
        if lock:
            lock.release()
    return np.asarray(block) if asarray else block


def shared_value(key, value) -> Task:
    """``value`` as the task ``key`` that every task sharing it reads. Stored as a bare
    literal it would be a "data producer" to distributed's scheduler, which holds such
    tasks back while the workers are busy: a shared object needed by the first combine
    would wait until every other ready task of the run (every piece) had run."""
    return Task(key, _value, DataNode(None, value))


def _value(value):
    return value


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
    block_contents: str  # key (block_contents, i, b): block b of a shard combined in blocks
    blocks: list  # per shard, how many blocks it is combined in (1: no block keys)
    priorities: list  # per shard, its tasks' scheduling priority


def shard_chains(
    job: ShardJob,
    shard_words: np.ndarray,
    members: dict[int, list[Delayed]],
    outputs: dict[str, np.dtype],
    rows: dict[int, int] | None = None,
    n_inner: int = 1,
    inline_pieces: bool = False,
) -> ShardArrays:
    """Per shard: pieces → combine tree → contents → finalize, and one dask array per
    entry of ``outputs`` (name → dtype; object for ragged fields) with one chunk per shard,
    plus the ``morton`` coordinate. ``rows`` (shard word → estimated rows, from discovery)
    orders the shards heaviest first and splits heavy ones into blocks of whole inner
    chunks (``n_inner`` per shard), each with its own pieces, combine tree and contents.

    A piece (a chunk's rows of one shard or block) is a task of its own, run where its
    chunk's result lives so that only those rows move to the combine. With
    ``inline_pieces`` (every chunk result in one process) the combines cut their pieces
    themselves: a run of 10^8 points has thousands of pieces, and as tasks each costs the
    scheduler and a worker a round trip on the cores the combines need."""
    import dask.array as da

    plan = job.plan
    p, c = plan.shard_order, plan.cell_order
    n = 4 ** (c - p)
    s = len(shard_words)
    words = [int(w) for w in shard_words]
    deps = list({r.key: r for rs in members.values() for r in rs}.values())
    weights = None if rows is None else [rows.get(w, 0) for w in words]
    prio = shard_priorities(weights, s)
    n_blocks = [shard_blocks(None if weights is None else weights[i], n_inner, c) for i in range(s)]
    token = tokenize(
        job,
        np.asarray(shard_words, np.uint64).tobytes(),
        [[r.key for r in members[w]] for w in words],
        n_blocks,
        inline_pieces,
    )
    chain = f"zagg-shard-{token}"
    job_key = f"zagg-job-{token}"
    piece, comb = f"zagg-piece-{token}", f"zagg-combine-{token}"
    contents, fin = f"zagg-contents-{token}", f"zagg-finalize-{token}"
    bcontents = f"zagg-blockcontents-{token}"
    tasks: dict = {job_key: shared_value(job_key, job)}
    for i, w in enumerate(words):
        blocks = n_blocks[i]
        for b in range(blocks):
            bounds = block_words(w, p, c, b, blocks)
            level = []
            for j, r in enumerate(members[w]):
                if inline_pieces:  # cut inside the combine (or contents) it is passed to
                    level.append(Task(None, _piece, TaskRef(r.key), w, bounds))
                    continue
                key = (piece, i, b, j)
                tasks[key] = Task(key, _piece, TaskRef(r.key), w, bounds)
                level.append(TaskRef(key))
            depth = 0
            while len(level) > 1:
                nxt = []
                for k in range(0, len(level), FAN_IN):
                    key = (comb, i, b, depth, k // FAN_IN)
                    tasks[key] = Task(key, ShardJob.combine, TaskRef(job_key),
                                      *level[k : k + FAN_IN])
                    nxt.append(TaskRef(key))
                level, depth = nxt, depth + 1
            out = (contents, i) if blocks == 1 else (bcontents, i, b)
            tasks[out] = Task(out, ShardJob.contents, TaskRef(job_key), level[0], w)
        if blocks > 1:
            tasks[contents, i] = (
                ShardJob.joined,
                job_key,
                [(bcontents, i, b) for b in range(blocks)],
            )
        tasks[fin, i] = (ShardJob.finalize, job_key, (contents, i))
    layers = {chain: _layer(tasks, prio, _named_stage)}
    graph = HighLevelGraph.from_collections(chain, layers[chain], dependencies=deps)
    layers, dependencies = dict(graph.layers), dict(graph.dependencies)

    def add(name, layer_tasks):
        layers[name] = _layer(layer_tasks, prio, "output")
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
        bcontents,
        n_blocks,
        prio,
    )


def shard_tasks(
    prefix: str, func, shared, args: list[tuple], dependencies, priorities: list[int] | None = None
) -> list[Delayed]:
    """One task per shard, ``func(shared, *args[i])``, as one layer: ``shared`` is stored
    once in the graph; ``args`` may hold keys of ``dependencies`` (dask collections).
    ``priorities`` (per shard; default: in shard order) as :func:`shard_priorities`."""
    token = tokenize(prefix, uuid.uuid4().hex)  # tasks with side effects: never merged
    name = f"{prefix}-{token}"
    shared_key = f"{prefix}-shared-{token}"
    tasks = {shared_key: shared_value(shared_key, shared)}
    for i, a in enumerate(args):
        tasks[name, i] = (func, shared_key, *a)
    return _shard_layer(name, tasks, len(args), dependencies, priorities, "write")


def blocked_write_tasks(
    prefix: str,
    shared,
    whole,
    encode,
    joined,
    shard_ids: list[str],
    sources: list,
    dependencies,
    priorities: list[int],
) -> list[Delayed]:
    """One leaf-write task per shard, as :func:`shard_tasks`. ``sources[i]`` is the key of
    shard i's contents, or the list of its blocks' contents keys: then every block gets a
    task ``encode(shared, block, b, blocks)`` (its chunks compressed beside the other
    blocks') and the write is ``joined(shared, shard_id, blocks, encodings)``; otherwise
    ``whole(shared, shard_id, contents)``."""
    token = tokenize(prefix, uuid.uuid4().hex)
    name, enc = f"{prefix}-{token}", f"{prefix}-encode-{token}"
    shared_key = f"{prefix}-shared-{token}"
    tasks = {shared_key: shared_value(shared_key, shared)}
    for i, (sid, src) in enumerate(zip(shard_ids, sources, strict=True)):
        if not isinstance(src, list):
            tasks[name, i] = (whole, shared_key, sid, src)
            continue
        for b, key in enumerate(src):
            tasks[enc, i, b] = (encode, shared_key, key, b, len(src))
        tasks[name, i] = (
            joined,
            shared_key,
            sid,
            list(src),
            [(enc, i, b) for b in range(len(src))],
        )
    return _shard_layer(
        name,
        tasks,
        len(shard_ids),
        dependencies,
        priorities,
        lambda key: "encode" if key[0] == enc else "write",
    )


def _shard_layer(
    name: str, tasks: dict, n: int, dependencies, priorities: list[int] | None, stage
) -> list[Delayed]:
    prio = shard_priorities(None, n) if priorities is None else list(priorities)
    graph = HighLevelGraph({name: _layer(tasks, prio, stage)}, {name: set()})
    if dependencies:
        graph = HighLevelGraph.from_collections(name, graph.layers[name],
                                                dependencies=list(dependencies))
    return [Delayed((name, i), graph, layer=name) for i in range(n)]


def contents_sources(graph: HighLevelGraph, info: dict, n_shards: int) -> list | None:
    """Per shard, the key of its contents in a graph built by :func:`shard_chains` (the
    list of its blocks' keys when combined in blocks), from the Dataset's record ``info``
    of that build; None when the graph no longer holds them."""
    layer = info["layer"]
    if layer not in graph.layers:
        return None
    blocks = info.get("blocks") or [1] * n_shards
    return [
        (info["key"], i)
        if blocks[i] == 1
        else [(info["block_key"], i, b) for b in range(blocks[i])]
        for i in range(n_shards)
    ]


def source_delayed(graph: HighLevelGraph, layer: str, sources: list) -> list[Delayed]:
    """The contents keys in ``sources`` as Delayed objects of ``graph`` (dependencies of the
    write tasks)."""
    keys = [k for src in sources for k in (src if isinstance(src, list) else [src])]
    return [Delayed(k, graph, layer=layer) for k in keys]


def _piece(result, shard_word: int, words: tuple[int, int] | None = None):
    return result.piece(shard_word, words)
