"""Aggregated shards → morton-hive store: one ``write-leaf`` task per shard writes one leaf.

There is one write path: a layer of :meth:`LeafWriter.write` tasks over the central
collection (:class:`zagg.engine.combine.Shards`), one per shard (:func:`leaf_layer`).
:func:`zagg.run` hands it the collection it aggregated; :func:`to_hive` first rebuilds it
from a Dataset (sparse or dense, lazy, persisted, computed or edited: whatever its arrays
hold is what is written). The client checks and writes the manifest before any leaf,
submits the tasks (each returns a small record), then writes the sidecars and the root
coverage. A big leaf's arrays are encoded beside each other by ``encode-leaf`` tasks
(CPU only, nothing written) before its write-leaf task writes them: tasks never share an
object, and only the client touches root objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np

from zagg import grid as G
from zagg import hive
from zagg.checks.arguments import require_dataset
from zagg.config.store import StoreSpec
from zagg.engine import progress as progress_
from zagg.engine.combine import Shards, block_tasks, shard_priorities, stage_priority
from zagg.engine.facts import RunFacts
from zagg.engine.manifest import ensure_store
from zagg.engine.shards import ShardCells, from_sparse
from zagg.engine.summary import RunSummary
from zagg.engine.temporal import temporal_record, unit_window
from zagg.hive.coverage import finish_root_coverage
from zagg.hive.encode import EncodedArray
from zagg.hive.layout import MORTON
from zagg.hive.leaf import LeafSpec, ShardLeaf, encode_leaf_array, write_shard_leaf
from zagg.hive.paths import MANIFEST_KEY, leaf_stem
from zagg.hive.versions import new_run_id, superseded
from zagg.pyramid.icechunk import with_carriers
from zagg.stages import DATASET_CELLS, ENCODE_LEAF, WRITE_LEAF, layer_name

if TYPE_CHECKING:
    import xarray as xr


@dataclass(frozen=True)
class LeafWriter:
    """What every leaf-write task shares: the leaf record (built once from the store spec),
    each unit's granule ids, the pyramid declaration and the window schedule."""

    leaf: LeafSpec
    unit_granules: dict | None  # leaf stem → granule ids (None: granules were not tracked)
    pyramid: object = None  # the zagg.pyramid.declare.Declaration (None: declared off)
    windowing: object = None  # the zagg.windows.Windowing of a windowed run
    timed: tuple[str, ...] = ()  # fields keeping per-centroid times (temporal records)

    @classmethod
    def of(
        cls,
        spec: StoreSpec,
        facts: RunFacts,
        root: hive.StoreRoot,
        attrs: dict,
        *,
        run_id: str,
        versioned: bool,
    ) -> LeafWriter:
        """The writer of a store spec's leaves into ``root``, with the arrays' zarr
        ``attrs`` and the run's facts (granules, failed granules)."""
        failed = list(facts.failed_granules)
        leaf = LeafSpec.of(
            root,
            spec.fields,
            spec.grid,
            attrs,
            semantic_hash=spec.semantic_hash,
            run_id=run_id,
            versioned=versioned,
            stats_extra={"failed_granules": failed} if failed else None,
        )
        return cls(leaf, facts.unit_granules(), spec.pyramid, spec.windowing, spec.timed)

    @property
    def root(self) -> hive.StoreRoot:
        """The store the leaves are written into."""
        return self.leaf.root

    def shard_leaf(self, sc: ShardCells) -> ShardLeaf:
        """A shard's leaf: its occupied cells and identity (id, window, granules)."""
        shard_id = G.to_decimal(np.uint64(sc.shard))[0]
        window, time_range = unit_window(self.windowing, sc)
        ids = (
            None
            if self.unit_granules is None
            else self.unit_granules.get(leaf_stem(shard_id, window))
        )
        return ShardLeaf(
            shard_id,
            sc.contents,
            granule_ids=ids,
            window=window,
            time_range=time_range,
            temporal=temporal_record(self.timed, sc),
        )

    @property
    def arrays(self) -> list[str]:
        """The arrays every leaf of the run stores (a windowed run's leaves no ``morton``)."""
        return [MORTON] * (self.windowing is None) + list(self.leaf.specs)

    def encode(self, sc: ShardCells, name: str) -> EncodedArray:
        """One array of a shard's leaf encoded, nothing written (see :meth:`write`)."""
        return encode_leaf_array(self.leaf, self.shard_leaf(sc), name)

    def write(self, sc: ShardCells, encoded: dict | None = None) -> dict | None:
        """Write one shard's leaf from its occupied cells, then (with its sidecars, while
        its version is current) its pyramid column; None (nothing written) when no cell
        holds a value. ``encoded``: arrays :meth:`encode` made beforehand, by name."""
        leaf = self.shard_leaf(sc)
        return write_shard_leaf(
            self.leaf,
            leaf,
            derived=lambda record: self.write_column(leaf, record),
            encoded=encoded,
        )

    def hashed_bytes(self, rows: int) -> int:
        """About how many bytes a leaf's §5 digests hash, for a shard of ``rows`` (cells +
        centroids): each array over every cell of the shard, filled or not (the bulk of a
        leaf's encoding), plus the payload rows."""
        per_cell = sum(
            8
            if name == MORTON or self.leaf.specs[name].ragged
            else self.leaf.specs[name].dtype.itemsize
            for name in self.arrays
        )
        return self.leaf.grid.cells_per_shard * per_cell + 8 * int(rows)

    def write_column(self, leaf: ShardLeaf, record: dict | None) -> dict | None:
        """The leaf column (a windowed leaf's: its window's), after the leaf's stamp
        (:mod:`zagg.pyramid.column`)."""
        from zagg.pyramid.column import after_leaf

        return after_leaf(self.leaf, leaf, record, self.pyramid)


def _write_block(block, writer: LeafWriter, *encoded) -> np.ndarray:
    out = np.empty(1, dtype=object)
    by_name = dict(zip(writer.arrays, encoded, strict=True)) if encoded else None
    out[0] = writer.write(block[0], by_name)
    return out


def _encode_block(block, writer: LeafWriter, name: str) -> EncodedArray:
    return writer.encode(block[0], name)


#: a leaf whose digests hash at least this many bytes is encoded array by array in tasks
#: of their own, beside each other, before its write-leaf task writes it: the CPU work of
#: a big leaf is shared by every core, while one task stays the one writer of each object
SPLIT_BYTES = 16 * 2**20


def leaf_layer(shards: Shards, writer: LeafWriter, name: str) -> da.Array:
    """One ``write-leaf`` task per shard (an object array of the leaves' records) over the
    shards' cells; a big shard's arrays (:data:`SPLIT_BYTES`) are first encoded by
    ``encode-leaf`` tasks of their own, which its write-leaf task waits for."""
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    encode_name = layer_name(ENCODE_LEAF, name)
    rows = shards.rows or [0] * len(shards.words)
    layer = {}
    for i in range(len(shards.words)):
        cells = TaskRef((shards.cells.name, i))
        encoded = []
        if writer.hashed_bytes(rows[i]) >= SPLIT_BYTES:
            for j, array in enumerate(writer.arrays):
                key = (encode_name, i, j)
                layer[key] = Task(key, _encode_block, cells, writer, array)
                encoded.append(TaskRef(key))
        layer[(name, i)] = Task((name, i), _write_block, cells, writer, *encoded)
    prio = shards.priorities
    stage = {name: "output", encode_name: "encode"}
    with dask.annotate(priority=lambda key: stage_priority(prio[key[1]], stage[key[0]])):
        graph = HighLevelGraph.from_collections(name, layer, dependencies=[shards.cells])
    return da.Array(
        graph, name, chunks=((1,) * len(shards.words),), dtype=object, meta=np.empty(0, object)
    )


def to_hive(
    ds: xr.Dataset,
    store,
    *,
    storage_options=None,
    progress: bool = False,
    t_start: float | None = None,
    leaf_versions: bool | None = None,
) -> RunSummary:
    """Write a Dataset from :func:`zagg.aggregate` (sparse or ``dense=True``, as returned
    or persisted, computed or edited since) as a morton-hive store.

    Every stored array of its config must be present; each cell's values are written as
    the Dataset holds them (a cell whose every field holds its fill is not occupied).
    Refuses up front (nothing written) when ``store`` already holds a store whose frozen
    manifest keys differ. Returns a :class:`RunSummary`; shards without a value write
    nothing. When the Dataset tracked its granules, each leaf records the ids of the
    granules that contributed to it (its stamp's ``granule_count`` and the
    ``granules.json`` sibling), and granules that failed to read are listed in every
    leaf's stats sidecar. ``leaf_versions`` (default: the config's ``output.leaf_versions``)
    writes each leaf as a new version (see :func:`zagg.hive.write_leaf_cells`).
    """
    t0 = time.perf_counter() if t_start is None else t_start
    shards = shards_from_dataset(ds)
    if leaf_versions is None:
        leaf_versions = shards.spec.leaf_versions
    return write_shards(
        shards,
        store,
        storage_options=storage_options,
        progress=progress,
        t_start=t0,
        versioned=leaf_versions,
    )


def write_shards(
    shards: Shards,
    store,
    *,
    storage_options=None,
    progress: bool = False,
    t_start: float | None = None,
    versioned: bool = True,
    run_id: str | None = None,
    current=(),
) -> RunSummary:
    """Write every shard of ``shards`` as a leaf of ``store`` (see :func:`to_hive`);
    ``current`` are the records of the units a re-run left as they are (see
    :meth:`HiveWrite.execute`).

    Once the writes are submitted nothing here holds the shards: when the caller does not
    either (``write_shards(shard_collection(...), ...)``), each input chunk's partial is
    freed as soon as the last shard it feeds is written."""
    write = prepare_write(
        shards,
        store,
        storage_options=storage_options,
        t_start=t_start,
        versioned=versioned,
        run_id=run_id,
    )
    del shards
    return write.execute(progress=progress, current=current)


@dataclass
class HiveWrite:
    """A checked, ready write: the manifest is on the store and one task per shard waits.

    :meth:`execute` submits the tasks and lets go of the graph at once, so on a
    distributed cluster each input chunk's partial is freed as soon as the last shard it
    feeds has been written (as long as nothing else holds the aggregated shards).
    """

    root: hive.StoreRoot
    shards: list[str]
    shard_order: int
    tasks: list
    info: dict
    t0: float
    run_id: str | None = None

    def execute(self, progress: bool = False, current=()) -> RunSummary:
        """Write the leaves, then the root coverage over them and over ``current`` (the
        records of the units a re-run found current, :func:`zagg.pipeline.reruns.current_records`),
        so the root lists every unit the run covers whether it wrote it or not."""
        tasks, self.tasks = self.tasks, []
        records = progress_.compute(tasks, progress=progress, label="writing leaves", release=True)
        written = _records(records)
        current = list(current)
        finish_root_coverage(self.root, written + current, self.shard_order)
        cells = sum(r["cells_with_data"] for r in written)
        from zagg.pyramid.companion import refresh_companion

        manifest = hive.read_manifest(self.root)
        if manifest is not None:
            refresh_companion(self.root, manifest)
        return RunSummary(
            store=self.root.url,
            run_id=self.run_id,
            shards=len(self.shards),
            leaves_written=len(written),
            cells_with_data=cells + sum(r["cells_with_data"] for r in current),
            cells_written=cells,
            points=self.info.get("points"),
            granules=self.info.get("granules"),
            failed_granules=list(self.info.get("failed") or []),
            bytes_written=sum(r["bytes_written"] for r in written),
            wall_seconds=time.perf_counter() - self.t0,
            records=written,
            point_counts=self.info.get("point_counts"),
            superseded=superseded(
                self.root, [(r["path"], r["version"]) for r in written if r.get("version")]
            ),
        )


def _records(blocks) -> list[dict]:
    """The leaf records of computed write blocks (shards that wrote nothing left out)."""
    return [r for b in blocks for r in np.asarray(b, dtype=object).ravel().tolist() if r]


def prepare_write(
    shards: Shards,
    store,
    *,
    storage_options=None,
    t_start: float | None = None,
    run_id: str | None = None,
    versioned: bool = True,
) -> HiveWrite:
    """Check the store, write its manifest and build one write task per shard (see
    :func:`to_hive`); nothing else is written until :meth:`HiveWrite.execute`."""
    t0 = time.perf_counter() if t_start is None else t_start
    spec, facts = shards.spec, shards.facts
    root = hive.StoreRoot(store, storage_options)
    # a store empty when this run began may still gain another run's leaves meanwhile, so
    # every in-place object (an unversioned leaf, a column) is cleared before it is written
    hive.check_store_root(root, MANIFEST_KEY)
    run_id = run_id or new_run_id()
    writer = LeafWriter.of(
        spec, facts, root, shards.attrs, run_id=run_id, versioned=versioned
    )  # the leaf record is checked before the store's manifest is written
    writer = with_carriers(writer, spec)  # each leaf unit ends with its Icechunk ref carrier
    semantic = ensure_store(root, spec)["semantic_hash"]
    tasks = []
    if shards.words.size:
        name = layer_name(WRITE_LEAF, shards.cells.name, root.url, semantic, run_id)
        tasks = block_tasks(leaf_layer(shards, writer, name))
    info = {
        "points": (facts.points or {}).get("keyed"),
        "point_counts": facts.points,
        "granules": None if facts.granules is None else len(facts.granules),
        "failed": list(facts.failed_granules),
    }
    return HiveWrite(root, shards.shard_ids, spec.grid.shard_order, tasks, info, t0, run_id)


# -- a Dataset back into shards ------------------------------------------------------------
def shards_from_dataset(ds: xr.Dataset) -> Shards:
    """The :class:`Shards` a Dataset from :func:`zagg.aggregate` holds, checked: its
    ``morton`` coordinate says where each cell lies; its arrays are cut by shard."""
    require_dataset(ds, "to_hive", "pass the Dataset zagg.aggregate(points, config) returned")
    z = ds.attrs.get("zagg")
    if not z or "grid" not in z or "fields" not in z:
        raise ValueError(
            "to_hive needs a Dataset made by zagg.aggregate (its attrs['zagg'] block is missing)"
        )
    spec = StoreSpec.from_attrs(z)
    names = list(spec.fields)
    missing = [n for n in names if n not in ds.variables]
    if missing:
        raise ValueError(
            f"the Dataset lacks {', '.join(map(repr, missing))}, which its config "
            "declares; a store holds every field of its config, so write the whole "
            "Dataset zagg.aggregate returned (to store fewer fields, aggregate with "
            "a config that declares only those)"
        )
    if "morton" not in ds.variables or ds["morton"].dims != ("cells",):
        raise ValueError(
            "to_hive needs the Dataset's 'morton' coordinate of cell words on "
            "dimension 'cells' (zagg.aggregate makes it)"
        )
    arrays = spec.arrays
    for n in names:
        _check_array(ds[n], n, *arrays[n])
    p, c = spec.grid.shard_order, spec.grid.cell_order
    morton = np.asarray(ds["morton"].values)
    if morton.size and np.any(morton[1:] <= morton[:-1]):
        ds = ds.sortby("morton")
        morton = np.asarray(ds["morton"].values)
    words, sizes = _shard_runs(morton, p, c)
    facts = RunFacts.from_attrs(z)
    _check_whole_shards(facts, words, sizes)
    ds = ds.chunk({"cells": tuple(sizes) if sizes else -1})
    attrs = {n: dict(ds[n].attrs) for n in names}
    attrs["morton"] = dict(ds["morton"].attrs)
    chunks = ((1,) * len(words),) if words else ((0,),)
    cells = da.map_blocks(
        _from_sparse_block,
        da.from_array(morton, chunks=ds.chunks["cells"]),
        *[ds[n].data for n in names],
        names=tuple(names),
        arrays=arrays,
        p=p,
        c=c,
        words=[int(w) for w in words],
        chunks=chunks,
        dtype=object,
        meta=np.empty(0, object),
        name=layer_name(DATASET_CELLS, [ds[n].data.name for n in names], morton),
    )
    prio = shard_priorities(sizes, len(words))
    facts.shards = G.to_decimal(np.asarray(words, np.uint64))
    return Shards(
        cells, np.asarray(words, np.uint64), spec, facts, attrs, prio, sizes, morton, sizes
    )


def _check_array(var, name: str, kind: str, dtype: str, fill) -> None:
    if var.dims != ("cells",):
        raise ValueError(f"{name!r} has dims {var.dims}; every stored array runs along 'cells'")
    if kind == "ragged":
        if var.dtype != object:
            raise ValueError(
                f"ragged field {name!r} must hold one payload (bytes) per cell, in "
                f"an object array; it has dtype {var.dtype}"
            )
        return
    if var.dtype.kind not in "biuf":
        raise ValueError(f"dense field {name!r} got values of dtype {var.dtype}")
    if not np.can_cast(var.dtype, np.dtype(dtype), casting="same_kind"):
        raise ValueError(
            f"dense field {name!r}: values of dtype {var.dtype} cannot be stored as {dtype}"
        )


def _check_whole_shards(facts: RunFacts, words: list[int], sizes: list[int]) -> None:
    """Refuse a Dataset holding only some cells of a shard it was made with: a leaf holds
    every cell of its shard, so writing a selection would lose the others."""
    made = dict(zip(facts.shards, facts.shard_cells or [], strict=False))
    for sid, size in zip(G.to_decimal(np.asarray(words, np.uint64)), sizes, strict=True):
        if sid in made and size != made[sid]:
            raise ValueError(
                f"the Dataset holds {size} of the {made[sid]} cells of shard {sid}: "
                "a leaf holds every cell of its shard, so write the Dataset "
                "without selecting cells (to write only some shards, select "
                "whole shards, or pass shards=[...] to zagg.aggregate)"
            )


def _shard_runs(morton: np.ndarray, p: int, c: int) -> tuple[list[int], list[int]]:
    """The shards of ascending cell words and how many cells each holds, refusing words
    that are not distinct cells at the cell order."""
    morton = np.asarray(morton)
    if morton.dtype != np.uint64:
        raise ValueError(f"'morton' must hold uint64 cell words, got {morton.dtype}")
    if not morton.size:
        return [], []
    if np.any(morton[1:] == morton[:-1]):
        raise ValueError("'morton' lists a cell twice; each cell appears once")
    if np.any((morton & np.uint64(63)) != c):
        raise ValueError(f"'morton' holds words that are not cells at the cell order {c}")
    shard = G.ancestor(morton, p)
    starts = np.flatnonzero(np.concatenate(([True], shard[1:] != shard[:-1])))
    sizes = np.diff(np.append(starts, morton.size))
    return shard[starts].tolist(), sizes.tolist()


def _from_sparse_block(morton, *values, names, arrays, p, c, words, block_info=None):
    shard = words[block_info[None]["chunk-location"][0]]
    ranks = G.cell_rank(morton, np.uint64(shard), p, c)
    out = np.empty(1, dtype=object)
    out[0] = from_sparse(shard, ranks, dict(zip(names, values, strict=True)), arrays, _payload)
    return out


def _payload(name: str, i: int, cell) -> bytes:
    if cell is None:
        return b""
    if isinstance(cell, bytes | bytearray | memoryview):
        return bytes(cell)
    raise ValueError(
        f"ragged field {name!r}: cell {i} holds a {type(cell).__name__}; expected "
        "raw payload bytes (b'' when empty)"
    )
