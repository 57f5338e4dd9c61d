"""Leaf Dataset → morton-hive store: one dask task per shard chunk writes one leaf.

The client checks and writes the manifest before any leaf, submits one write task per
shard (each returns a small record), then writes the root coverage. Tasks never share an
object and only the client touches root objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dask

from . import graph, hive
from . import progress as progress_
from .checks import require_dataset
from .grid import from_decimal
from .hive.paths import MANIFEST_KEY
from .manifests import ensure_store

if TYPE_CHECKING:
    import xarray as xr


@dataclass
class RunSummary:
    """What a write did: counts, sizes, rates and the per-leaf records."""

    store: str
    shards: int = 0
    leaves_written: int = 0
    cells_with_data: int = 0
    points: int | None = None
    granules: int | None = None
    failed_granules: list = field(default_factory=list)
    bytes_written: int = 0
    wall_seconds: float = 0.0
    records: list = field(default_factory=list, repr=False)
    #: the point accounting (read, filtered, invalid_coordinates, outside_shards, keyed)
    point_counts: dict | None = None

    @property
    def points_per_second(self) -> float | None:
        if not self.points or not self.wall_seconds:
            return None
        return self.points / self.wall_seconds

    def _dropped_lines(self) -> list[str]:
        """Where the points that were read but not aggregated went, and a warning when none
        was aggregated (coordinates swapped or out of range, a filter that drops all)."""
        c = self.point_counts or {}
        read = c.get("points_in") or 0
        why = [(c.get("invalid_coordinates", 0), "with invalid coordinates (NaN or |latitude| "
                "> 90)"), (c.get("filtered", 0), "removed by data_source.filters"),
               (c.get("outside_shards", 0), "outside the run's shards")]
        lines = [f"  dropped       {n:,} {what}" for n, what in why if n]
        if lines:
            lines.insert(0, f"  of read       {read:,}")
        if read and not c.get("keyed"):
            hints = {  # the commonest reason decides what to check first
                "outside_shards": "the region (--region, --bbox or shards) holds none of "
                                  "these points",
                "invalid_coordinates": "check data_source.coordinates (latitude and longitude "
                                       "swapped?)",
                "filtered": "check data_source.filters",
            }
            hint = hints[max(hints, key=lambda k: c.get(k) or 0)]
            lines.append(f"warning: no point was aggregated, so no leaf was written; {hint}")
        elif self.point_counts is not None and not read and self.leaves_written == 0:
            lines.append("warning: no point was read, so no leaf was written; check the "
                         "source (granules, catalog and region, or input)")
        return lines

    def lines(self) -> list[str]:
        rate = self.points_per_second
        pts = "unknown" if self.points is None else f"{self.points:,}"
        return [
            f"store           {self.store}",
            f"shards          {self.shards:,} ({self.leaves_written:,} leaves written)",
            f"cells with data {self.cells_with_data:,}",
            f"points          {pts}" + (f" ({rate / 1e6:.2f} M points/s)" if rate else ""),
            *self._dropped_lines(),
            *([f"granules        {self.granules:,} read, {len(self.failed_granules)} failed"]
              if self.granules is not None else []),
            *[f"  failed        {f.get('granule')}: {f.get('error')}"
              for f in self.failed_granules[:10]],
            f"bytes written   {self.bytes_written:,} ({self.bytes_written / 2**20:.1f} MiB)",
            f"wall time       {self.wall_seconds:.1f} s",
        ]


@dataclass(frozen=True)
class LeafWriter:
    """What every leaf-write task shares (stored once in the graph): the store, the
    fields and their attrs, the grid, the semantic hash and per-shard granule ids."""

    root: hive.StoreRoot
    names: tuple
    fields: dict
    grid: dict
    attrs: dict
    semantic_hash: str
    shard_granules: dict | None  # None: granules were not tracked
    stats_extra: dict | None
    fresh: bool = False  # the store was empty when this write began: no leaf to clear

    def _kwargs(self, shard_id: str) -> dict:
        ids = None if self.shard_granules is None else self.shard_granules.get(shard_id)
        return {"attrs": self.attrs, "granule_count": None if ids is not None else 0,
                "granule_ids": ids, "semantic_hash": self.semantic_hash,
                "stats_extra": self.stats_extra, "fresh": self.fresh, "defer_siblings": True}

    def from_cells(self, shard_id: str, contents: dict) -> dict | None:
        """Write one leaf straight from its occupied cells (no dense arrays are built)."""
        return hive.write_leaf_cells(self.root, shard_id, contents, self.fields, self.grid,
                                     **self._kwargs(shard_id))

    def encode_block(self, contents: dict, block: int, blocks: int) -> dict:
        """The compressed chunk objects of one block of a leaf's ragged arrays (see
        :func:`zagg.hive.encode_block`), made beside the other blocks' before the write."""
        return hive.encode_block(contents, self.fields, self.grid, block, blocks, attrs=self.attrs)

    def from_blocks(self, shard_id: str, blocks: list, encoded: list) -> dict | None:
        """Write one leaf from its blocks' occupied cells and their compressed chunks."""
        return hive.write_leaf_blocks(
            self.root, shard_id, blocks, encoded, self.fields, self.grid, **self._kwargs(shard_id)
        )

    def from_arrays(self, shard_id: str, *blocks) -> dict | None:
        """Write one leaf from its dense per-cell blocks (a Dataset computed or changed
        since :func:`zagg.aggregate` made it)."""
        arrays = dict(zip(self.names, blocks, strict=True))
        return hive.write_leaf(self.root, shard_id, arrays, self.fields, self.grid,
                               **self._kwargs(shard_id))


def contents_tasks(ds: xr.Dataset) -> tuple[list, list] | None:
    """Per shard, the graph key holding its occupied cells (or the list of its blocks'),
    and those keys as dependencies, while ``ds`` is exactly the lazy Dataset
    :func:`zagg.aggregate` returned (every array's graph name unchanged and the tasks still
    in its graph); None otherwise (computed, persisted or edited)."""
    info = (ds.attrs.get("zagg") or {}).get("contents")
    if not info:
        return None
    for name, array_name in info["arrays"].items():
        data = ds.variables[name].data if name in ds.variables else None
        if not dask.is_dask_collection(data) or data.name != array_name:
            return None
    if set(info["arrays"]) != set(ds.variables):
        return None
    hlg = ds.__dask_graph__()
    sources = graph.contents_sources(hlg, info, len(ds.attrs["zagg"]["shards"]))
    if sources is None:
        return None
    return sources, graph.source_delayed(hlg, info["layer"], sources)


def to_hive(ds: xr.Dataset, store, *, storage_options=None, progress: bool = False,
            t_start: float | None = None) -> RunSummary:
    """Write a leaf Dataset from :func:`zagg.aggregate` as a morton-hive store.

    Refuses up front (nothing written) when ``store`` already holds a store whose frozen
    manifest keys differ. Returns a :class:`RunSummary`; empty shards write nothing. When
    the Dataset tracked its granules, each leaf records the ids of the granules that
    contributed to it (its stamp's ``granule_count`` and the ``granules.json`` sibling), and
    granules that failed to read are listed in every leaf's stats sidecar.
    """
    return prepare_write(ds, store, storage_options=storage_options,
                         t_start=t_start).execute(progress=progress)


@dataclass
class HiveWrite:
    """A checked, ready write: the manifest is on the store and one task per shard waits.

    :meth:`execute` submits the tasks and lets go of the graph at once, so on a
    distributed cluster each input chunk's partial is freed as soon as the last shard it
    feeds has been written (as long as nothing else holds the aggregated Dataset).
    """

    root: hive.StoreRoot
    shards: list[str]
    shard_order: int
    tasks: list
    info: dict
    t0: float

    def execute(self, progress: bool = False) -> RunSummary:
        tasks, self.tasks = self.tasks, []
        records = progress_.compute(
            tasks, progress=progress, label="writing leaves", release=True,
            # the leaves stamped before a failure keep their sidecars
            on_failure=lambda done: hive.write_siblings(self.root, [r for r in done if r]))
        written = [r for r in records if r]
        if written:
            # every leaf is stamped: its sidecars follow, all at once (one batch of
            # concurrent PUTs on an object store instead of a round trip in each leaf task)
            hive.write_siblings(self.root, written)
            hive.update_root_coverage(self.root, [r["shard_id"] for r in written],
                                      self.shard_order)
        return RunSummary(
            store=self.root.url,
            shards=len(self.shards),
            leaves_written=len(written),
            cells_with_data=sum(r["cells_with_data"] for r in written),
            points=self.info.get("points"),
            granules=self.info.get("granules"),
            failed_granules=list(self.info.get("failed") or []),
            bytes_written=sum(r["bytes_written"] for r in written),
            wall_seconds=time.perf_counter() - self.t0,
            records=written,
            point_counts=self.info.get("point_counts"),
        )


def prepare_write(ds: xr.Dataset, store, *, storage_options=None,
                  t_start: float | None = None) -> HiveWrite:
    """Check ``ds`` and the store, write the manifest and build one write task per shard
    (see :func:`to_hive`); nothing else is written until :meth:`HiveWrite.execute`."""
    t0 = time.perf_counter() if t_start is None else t_start
    require_dataset(ds, "to_hive", "pass the Dataset zagg.aggregate(points, config) returned")
    z = ds.attrs.get("zagg")
    if not z or "grid" not in z:
        raise ValueError("to_hive needs the Dataset returned by zagg.aggregate "
                         "(its attrs['zagg'] block is missing)")
    missing = [n for n in z["fields"] if n not in ds.variables]
    if missing:
        raise ValueError(f"the Dataset lacks {', '.join(map(repr, missing))}, which its config "
                         "declares; a store holds every field of its config, so write the whole "
                         "Dataset zagg.aggregate returned (to store fewer fields, aggregate with "
                         "a config that declares only those)")
    root = hive.StoreRoot(store, storage_options)
    grid = z["grid"]
    shard_ids = list(z["shards"])
    from_decimal(shard_ids)  # every path component validated before anything is written
    names = list(z["fields"])
    per_shard = 4 ** (grid["child_order"] - grid["parent_order"])
    if ds.sizes["cells"] != per_shard * len(shard_ids):
        raise ValueError(f"the Dataset has {ds.sizes['cells']} cells; {len(shard_ids)} shards "
                         f"of {per_shard} cells need {per_shard * len(shard_ids)}: a leaf holds "
                         "every cell of its shard, so write the Dataset zagg.aggregate returned "
                         "without selecting cells (to write only some shards, pass "
                         "shards=[...] to zagg.aggregate)")
    fresh = not hive.check_store_root(root, MANIFEST_KEY)
    semantic = ensure_store(root, z)["semantic_hash"]

    if any(ds[n].chunks is None for n in names):
        ds = ds.chunk({"cells": per_shard})  # a computed Dataset: one chunk per shard again
    attrs = {n: dict(ds[n].attrs) for n in names}
    if "morton" in ds.coords:  # the cell coordinate's attrs are stored with it too
        attrs["morton"] = dict(ds["morton"].attrs)
    fields = {n: dict(z["fields"][n]) for n in names}
    failed = z.get("failed_granules") or []
    writer = LeafWriter(root, tuple(names), fields, grid, attrs, semantic,
                        dict(z.get("shard_granules") or {}) if "shard_granules" in z else None,
                        {"failed_granules": failed} if failed else None, fresh)
    contents = contents_tasks(ds)
    priorities = (z.get("contents") or {}).get("priority")
    if priorities is not None and len(priorities) != len(shard_ids):
        priorities = None  # attrs edited since aggregate(): schedule in shard order
    if contents is not None:
        sources, deps = contents
        tasks = graph.blocked_write_tasks(
            "zagg-write",
            writer,
            LeafWriter.from_cells,
            LeafWriter.encode_block,
            LeafWriter.from_blocks,
            shard_ids,
            sources,
            deps,
            priorities,
        )
    else:
        arrays = [ds[n].data for n in names]
        keys = [a.__dask_keys__() for a in arrays]
        args = [(sid, *[k[i] for k in keys]) for i, sid in enumerate(shard_ids)]
        tasks = graph.shard_tasks("zagg-write", LeafWriter.from_arrays, writer, args, arrays,
                                  priorities)
    info = {"points": (z.get("points") or {}).get("keyed"), "point_counts": z.get("points"),
            "granules": len(z["granules"]) if "granules" in z else None, "failed": failed}
    return HiveWrite(root, shard_ids, grid["parent_order"], tasks, info, t0)
