"""Points Dataset → the shards' occupied cells: a keyed groupby-reduction onto morton cells.

Each input chunk is reduced by one ``blockwise`` call over the input's own dask chunks
(:func:`zagg.engine.reduce.reduce_chunk`: keying, grouping by cell, every state's chunk kernel),
so reading a chunk and reducing it fuse into one task and dask-array or xarray inputs keep
their graph. Which shards hold data is discovered from those reductions' small summaries;
per shard the pieces are tree-combined and finalized (:mod:`zagg.engine.combine`). The public
:func:`aggregate` returns a Dataset over the occupied cells; :func:`zagg.run` writes the
same shards straight to a store.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np

from zagg import grid as G
from zagg.checks.arguments import require_dataset
from zagg.config.model import Config, load_config
from zagg.config.store import StoreSpec, array_attrs
from zagg.engine import combine as collection
from zagg.engine import progress as progress_
from zagg.engine.facts import RunFacts
from zagg.engine.plan import Plan, make_plan
from zagg.engine.reduce import reduce_chunk
from zagg.stages import REDUCE_CHUNK, layer_name

if TYPE_CHECKING:
    import xarray as xr

DEFAULT_CHUNK = 1 << 20


def aggregate(
    ds: xr.Dataset,
    config,
    *,
    shards=None,
    dense: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> xr.Dataset:
    """Aggregate the points of ``ds`` onto the config's cells.

    ``ds`` is any Dataset with one observation dimension (numpy- or dask-backed; numpy
    inputs are cut into chunks of ``chunk_size`` points). Returns a Dataset on dimension
    ``cells`` holding the occupied cells only (those with at least one keyed point), in
    ascending ``morton`` order, one dask chunk per shard: dense fields hold their fill
    where a cell has no value, t-digest fields the payload bytes (``b""`` when empty).

    The number of occupied cells depends on the data, so this reduces the points before it
    returns: the cluster keeps each shard's finalized cells (never raw points) and the
    Dataset's arrays are made from them when computed. ``shards`` (decimal ids or words
    at the shard order) restricts the result to those shards. ``dense=True`` gives the
    leaf-shaped twin instead: all 4^(child_order − parent_order) cells of every shard, in
    canonical nested order (with ``shards`` given, nothing is computed until it is).

    With a ``granule`` index variable and ``ds.attrs["granules"]`` (as
    :func:`zagg.sources.granules.open_granules` makes), each shard's contributing granules
    are tracked into ``attrs["zagg"]["shard_granules"]``.
    """
    require_dataset(
        ds,
        "zagg.aggregate",
        "open the points first (e.g. xr.open_zarr(path) "
        "or xr.open_dataset(path)), or name them in the config's "
        "data_source.input and use zagg.run",
    )
    config = load_config(config)
    if config.output.windowing is not None:
        raise ValueError(
            "zagg.aggregate returns one Dataset over cells; this config splits "
            "cells by time window (output.windowing), so write it with zagg.run "
            "and read the windows back with zagg.open_hive(store, windows=[...])"
        )
    config.check_dataset(ds)
    lazy = dense and shards is not None
    shards_ = shard_collection(
        ds, config, shards=shards, chunk_size=chunk_size, progress=progress, discover=not lazy
    )
    if dense:
        return shards_.to_dense()
    return shards_.persist(progress=progress).to_dataset()


def shard_collection(
    ds: xr.Dataset,
    config: Config,
    *,
    shards=None,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
    discover: bool = True,
    select=None,
    spec: StoreSpec | None = None,
    span=None,
) -> collection.Shards:
    """The lazy :class:`~zagg.engine.combine.Shards` of a points Dataset.

    With ``discover`` the chunk reductions are computed and kept on the cluster first (a
    progress bar follows them when asked), so only the shards holding data are built,
    heaviest first, and the point accounting is known; without, ``shards`` must be given
    and every chunk feeds every shard lazily. ``select(names, shard_granules)``, called once
    the units holding data are known (named by their leaf stems: the shard id, or
    ``{id}_{window}``), returns the names of those to build (a re-run's gate);
    ``shard_granules`` is None when granules are not tracked. ``spec`` is the config's
    :class:`~zagg.config.store.StoreSpec` when the caller holds it already. ``span``
    (``(lo, hi)`` shard words, hi None for no end) keeps only the shards of one group of
    a run read in shard groups (:mod:`zagg.pipeline.stream`).
    """
    spec = StoreSpec.of(config) if spec is None else spec
    granule_ids = list(ds.attrs.get("granules") or [])
    granule_var = "granule" if granule_ids and "granule" in ds.variables else None
    plan = make_plan(config, shards, granule_var, span)
    dim, arrays = input_arrays(ds, plan, chunk_size)
    results = chunk_reductions(plan, arrays)
    t0 = time.perf_counter()
    found = Discovery.lazy(results, plan)
    if discover:
        found = Discovery.run(
            results, progress, granule_ids if granule_var else None, unit_name=unit_namer(plan)
        )
        if select is not None:
            name = unit_namer(plan) or (lambda w: G.to_decimal(np.uint64(w))[0])
            names = [name(int(w)) for w in found.words]
            keep = set(select(names, found.shard_granules))
            found = found.only(found.words[np.array([n in keep for n in names], dtype=bool)], keep)
    facts = RunFacts(
        G.to_decimal(np.asarray(unit_shards(plan, found.words), np.uint64)),
        dim,
        found.counts,
        round(time.perf_counter() - t0, 3),
        granule_ids if granule_var else None,
        found.shard_granules if granule_var else None,
        list(ds.attrs.get("failed_granules") or []),
    )
    return collection.build(
        plan,
        found.results,
        found.members,
        found.words,
        found.rows,
        spec,
        facts,
        array_attrs(config),
        pieces_as_tasks=not found.in_one_process,
    )


# -- the chunk reductions ------------------------------------------------------------------
def input_arrays(ds: xr.Dataset, plan: Plan, chunk_size: int) -> tuple[str, list[da.Array]]:
    """The observation dimension and the dask arrays chunk tasks read (``plan.inputs``
    order), chunked alike along it; numpy inputs become arrays whose chunks are views of
    them (copying them chunk by chunk into the graph would double their memory)."""
    lat = ds[plan.lat]
    if lat.ndim != 1:
        raise ValueError(f"latitude variable {plan.lat!r} must be 1-D, has dims {lat.dims}")
    dim = lat.dims[0]
    # variables stored as coordinates (CF ``coordinates``, ``set_coords``) are read like
    # any other; the Dataset's other coordinates are not carried into the graph
    sub = ds[list(plan.inputs)].reset_coords()
    sub = sub.drop_vars([v for v in sub.data_vars if v not in plan.inputs])
    columns = {n: (var, col) for n, var, col in plan.columns}
    two_d = {f.variable for f in plan.filters}
    two_d |= {var for var, col in columns.values() if col is not None}
    two_d |= {s.source for _, s in plan.specs if s.state.name == "lanes"}
    for name in plan.inputs:
        v = sub[name]
        if v.dims[0] != dim or (v.ndim > 1 and name not in two_d) or v.ndim > 2:
            raise ValueError(
                f"variable {name!r} has dims {v.dims}; every variable zagg reads must run along "
                f"the observation dimension {dim!r}; a 2-D variable is read through a column "
                "(data_source.variables: {name: {variable, column}}), a filter column or a "
                "composition source"
            )
    if all(sub[name].chunks is None for name in plan.inputs):
        return dim, [_in_memory(np.asarray(sub[name].values), chunk_size) for name in plan.inputs]
    if any(sub[name].chunks is None for name in plan.inputs):
        # a fresh token: xarray would otherwise hash every byte of the in-memory arrays
        sub = sub.chunk({dim: chunk_size}, token=uuid.uuid4().hex)
    extra = {d: -1 for d in sub.dims if d != dim}
    if extra:
        sub = sub.chunk(extra)
    sub = sub.unify_chunks()
    return dim, [sub[name].data for name in plan.inputs]


def _in_memory(values: np.ndarray, chunk_size: int) -> da.Array:
    """A dask array of ``values`` (in memory) whose chunks are row-range views of it."""
    n = values.shape[0]
    if n == 0:
        return da.from_array(values, chunks=values.shape)
    parts = [
        da.from_delayed(
            dask.delayed(values[a : a + chunk_size], pure=False),
            shape=values[a : a + chunk_size].shape,
            dtype=values.dtype,
        )
        for a in range(0, n, chunk_size)
    ]
    return da.concatenate(parts)


def chunk_reductions(plan: Plan, arrays: list[da.Array]) -> da.Array:
    """One :class:`~zagg.engine.reduce.ChunkResult` per input chunk, as an object dask array
    (``blockwise`` over the inputs' own chunks: reading and reducing fuse)."""
    pairs = []
    for a in arrays:
        pairs += [a, "ij"[: a.ndim]]
    return da.blockwise(
        _reduce_block,
        "i",
        *pairs,
        plan=plan,
        adjust_chunks={"i": 1},
        concatenate=True,
        dtype=object,
        meta=np.empty(0, object),
        name=layer_name(REDUCE_CHUNK, plan.token, [a.name for a in arrays]),
    )


def _reduce_block(*arrays, plan: Plan) -> np.ndarray:
    out = np.empty(1, dtype=object)
    out[0] = reduce_chunk(plan, *arrays)
    return out


def _summary(block: np.ndarray) -> tuple:
    return block[0].summary()


def _result(block: np.ndarray):
    return block[0]


@dataclass
class Discovery:
    """What the chunk reductions say about a run: its shards, which results feed each,
    their estimated rows and the point accounting."""

    results: list  # per chunk: its ChunkResult (Delayed or future)
    words: np.ndarray
    members: dict
    rows: dict | None = None
    counts: dict | None = None
    shard_granules: dict | None = None
    in_one_process: bool = True

    @classmethod
    def lazy(cls, reductions: da.Array, plan: Plan) -> Discovery:
        """Nothing computed: every chunk may feed every one of the plan's shards."""
        take = dask.delayed(_result, pure=True)
        name = layer_name("result", reductions.name)
        results = [
            take(b, dask_key_name=f"{name}-{i}")
            for i, b in enumerate(collection.block_tasks(reductions, optimize=True))
        ]
        words = np.asarray(plan.shard_set or (), dtype=np.uint64)
        client = progress_.active_client()
        one = client is None or len(client.scheduler_info(n_workers=-1)["workers"]) <= 1
        return cls(results, words, {int(w): results for w in words}, in_one_process=one)

    @classmethod
    def run(
        cls, reductions: da.Array, progress: bool, granule_ids=None, unit_name=None
    ) -> Discovery:
        """Compute the chunk reductions (kept on the cluster) and gather their summaries;
        ``unit_name(key)`` names a unit in ``shard_granules`` (default: the shard id).

        Each chunk's summary is asked for as soon as the reductions are submitted, so it is
        made right after its chunk is reduced: on a distributed cluster nothing waits for
        the last reduction before the summaries start (a local scheduler persists them
        first, then summarizes)."""
        with progress_.task_deaths():  # a local scheduler runs the reductions here
            (reductions,) = dask.persist(reductions)  # a distributed client returns at once
        blocks = collection.block_tasks(reductions)
        take = dask.delayed(_result, pure=False)
        summarize = dask.delayed(_summary, pure=False)
        summaries = progress_.compute(
            [summarize(b) for b in blocks],
            progress=progress,
            label="keying and reducing input chunks",
        )
        words = np.unique(
            np.concatenate([s for s, _, _, _ in summaries] + [np.zeros(0, np.uint64)])
        )
        results = [take(b) for b in blocks]
        members = {int(w): [] for w in words}
        rows = dict.fromkeys(members, 0)
        for r, (ws, _, _, n) in zip(results, summaries, strict=True):
            for w, k in zip(ws.tolist(), n.tolist(), strict=True):
                members[w].append(r)
                rows[w] += k
        counts = (
            {k: int(sum(c[k] for _, c, _, _ in summaries)) for k in summaries[0][1]}
            if summaries
            else {}
        )
        shard_granules = None
        if granule_ids is not None:
            per_shard: dict[int, set] = {}
            for _, _, g, _ in summaries:
                for w, idx in (g or {}).items():
                    per_shard.setdefault(w, set()).update(idx)
            name = unit_name or (lambda w: G.to_decimal(np.uint64(w))[0])
            shard_granules = {
                name(w): sorted(granule_ids[i] for i in idx) for w, idx in per_shard.items()
            }
        return cls(
            results, words, members, rows, counts, shard_granules, _held_by_one_worker(reductions)
        )

    def only(self, words: np.ndarray, names) -> Discovery:
        """The same discovery restricted to the units ``words`` (named ``names`` where
        granules are tracked)."""
        members = {int(w): self.members[int(w)] for w in words}
        rows = None if self.rows is None else {w: self.rows[w] for w in members}
        granules = (
            None
            if self.shard_granules is None
            else {n: ids for n, ids in self.shard_granules.items() if n in names}
        )
        return dataclasses.replace(
            self,
            words=np.asarray(words, np.uint64),
            members=members,
            rows=rows,
            shard_granules=granules,
        )


def _held_by_one_worker(persisted: da.Array) -> bool:
    """Whether one process holds every persisted chunk result (no distributed client, or
    one worker holds them all): then no piece of a result ever has to move."""
    client = progress_.active_client()
    if client is None:
        return True
    from distributed import futures_of

    futures = futures_of(persisted)
    held = client.who_has(futures) if futures else {}
    return len({w for where in held.values() for w in where}) <= 1


def unit_shards(plan: Plan, units) -> np.ndarray:
    """The distinct shard words of a run's units (its units themselves when unwindowed)."""
    if plan.windowing is None:
        return units
    from zagg.windows.units import unpack

    return np.unique(unpack(units, plan.grid.shard_order)[0])


def unit_namer(plan: Plan):
    """How a run unit is named where granules are tracked: the shard id, or the windowed
    leaf's stem ``{id}_{window}`` (:func:`zagg.hive.paths.leaf_stem`)."""
    if plan.windowing is None:
        return None
    from zagg.hive.paths import leaf_stem
    from zagg.windows.assign import label

    def name(unit: int) -> str:
        shard, index = plan.unit_of(unit)
        return leaf_stem(G.to_decimal(np.uint64(shard))[0], label(plan.windowing, index))

    return name
