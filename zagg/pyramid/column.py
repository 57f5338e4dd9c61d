"""The leaf column (spec §4.6): the pyramid levels inside one shard, written by its leaf's task.

After the leaf's stamp, the task that wrote it folds the shard's cells order by order
inside the shard — every declared leaf resolution, every ladder rung in the leaf's
footprint and the one-cell node-order member — and writes them as ``all.pyramid.zarr``
beside the leaf (role ``column``, ``zagg_column`` provenance, stamp last; its
``all.pyramid.stats.json`` follows with the leaf's other sidecars). Groups at or above the
raw-fold boundary fold from the leaf's cells, the coarser ones flat from the boundary
group, each through the fields' reducer folds (:func:`zagg.pyramid.levels.coarsen`), touching
only occupied cells.
A run whose declaration has no composable field writes none and deletes a stale one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from zagg import grid as G
from zagg.hive import artifact
from zagg.hive.cells import DenseCells, DigestRows, RaggedCells, digest_rows, ragged_cells
from zagg.hive.layout import FieldSpec
from zagg.hive.leaf import LeafSpec, ShardLeaf
from zagg.hive.stamp import now_iso
from zagg.hive.storage import background, dumps_json
from zagg.pyramid.declare import Declaration
from zagg.pyramid.levels import (
    FieldCells,
    Law,
    Level,
    blocks,
    coarsen,
    concat,
    laws_of,
    lossless,
    point_union,
    regroups_exactly,
    single_observations,
    slice_level,
)
from zagg.reducers.partials import Digests

WINDOW_ALL = artifact.WINDOW_ALL


def shard_words(shard_id: str, p: int, order: int, ranks: np.ndarray) -> np.ndarray:
    """Cell words at ``order`` of positions ``ranks`` on a node's axis (orders <= 27)."""
    word = G.from_decimal([shard_id])[0]
    first = np.uint64(int(word) + order - p)
    return first + np.asarray(ranks, np.int64).astype(np.uint64) * np.uint64(G.stride(order))


def digests_of(
    cells: RaggedCells, locations: RaggedCells | None = None, times: RaggedCells | None = None
) -> Digests:
    """The centroid columns of stored t-digest cells (``[mean, weight]`` float32 rows),
    with the location word and the time word of each centroid from the located and timed
    siblings' cells."""
    locs, words = (None if w is None else _words(w) for w in (locations, times))
    if isinstance(cells, DigestRows):
        weights = cells.weights
        if (locs is not None or words is not None) and weights is None:
            weights = np.ones(cells.means.size, np.float32)
        return Digests(cells.means, weights, cells.offsets // 8, locs, words)
    rows = np.frombuffer(np.ascontiguousarray(cells.data).tobytes(), "<f4").reshape(-1, 2)
    return Digests(
        rows[:, 0].copy(), rows[:, 1].copy(), np.asarray(cells.offsets) // 8, locs, words
    )


def _words(cells: RaggedCells) -> np.ndarray:
    """A word sibling's cells as one uint64 column, row-aligned with its payload's."""
    return np.frombuffer(np.ascontiguousarray(cells.data).tobytes(), "<u8").astype(np.uint64)


def leaf_level(shard_id: str, contents: dict, laws: dict[str, Law], p: int, c: int) -> Level:
    """A leaf's stored cells (``ShardCells.contents``) as the level at its cell order."""
    out = Level(c)
    for name, law in laws.items():
        cells = contents[name]
        words = shard_words(shard_id, p, c, cells.ranks)
        if law.kind == "ragged":
            values = digests_of(
                cells,
                contents[law.locations] if law.locations else None,
                contents[law.times] if law.times else None,
            )
        else:
            values = np.asarray(cells.values)
        out.fields[name] = FieldCells(words, values)
    return out


def node_contents(level: Level, node_id: str, laws: dict[str, Law]) -> dict:
    """A level's fields as the cells an artifact group at ``node_id`` stores."""
    k = G.id_order(node_id)
    word = G.from_decimal([node_id])[0]
    out = {}
    for name, law in laws.items():
        fc = level.fields.get(name)
        if law.kind == "ragged":
            if fc is None or not len(fc):
                out[name] = digest_rows(
                    np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.float32)
                )
                for sibling in (law.locations, law.times):
                    if sibling:
                        out[sibling] = ragged_cells(
                            np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.uint8)
                        )
                continue
            ranks = G.cell_rank(fc.words, word, k, level.order)
            d = fc.values
            out[name] = digest_rows(ranks, d.offsets, d.means, d.weights)
            for sibling, column in ((law.locations, d.locs), (law.times, d.times)):
                if sibling:
                    words = np.ascontiguousarray(column, dtype="<u8")
                    out[sibling] = ragged_cells(
                        ranks, (d.offsets - d.offsets[0]) * 8, words.view(np.uint8)
                    )
        else:
            dtype = law.dtype.newbyteorder("<")
            if fc is None or not len(fc):
                out[name] = DenseCells(np.zeros(0, np.int64), np.zeros(0, dtype))
                continue
            out[name] = DenseCells(
                G.cell_rank(fc.words, word, k, level.order),
                np.asarray(fc.values).astype(dtype, copy=False),
            )
    return out


def artifact_specs(specs: Mapping[str, FieldSpec], laws: dict[str, Law]) -> dict[str, FieldSpec]:
    """The array specs of a pyramid artifact: the composable fields (and their located
    and timed siblings) as the leaf stores them."""
    names = [n for n in specs if n in laws]
    names += [law.locations for law in laws.values() if law.locations]
    names += [law.times for law in laws.values() if law.times]
    return {n: specs[n] for n in sorted(names)}


#: digest centroids a leaf column folds at once (bounds the fold's extra memory per task)
BLOCK_ROWS = 2_000_000


def column_levels(leaf: Level, decl: Declaration, laws: dict[str, Law]) -> dict[int, tuple]:
    """Every column group ``r`` → ``(level, demotions)``: from the leaf's cells at or above
    the boundary, flat from the boundary group below it.

    A digest group folded from the leaf's cells is the fold of all their centroids under
    each group cell, compressed once. Where the leaf's centroids are single observations,
    that fold is the direct digest of the cell's values sorted: each raw group sorts its
    cells' values once (:func:`~zagg.pyramid.levels.point_union`) and the fold bins them,
    instead of merging every leaf cell's run. Other digests fold the finest raw group's
    sorted unions (the digest fold at :data:`~zagg.pyramid.levels.LOSSLESS`); counts,
    minima and maxima fold each raw group from the one below, which is their fold to the
    bit. Every way gives the direct fold's bytes. The leaf is folded in blocks of whole
    cells of the coarsest raw group (about :data:`BLOCK_ROWS` centroids each), so the
    extra memory is a block's, not the leaf's."""
    raw = [r for r in decl.column_groups() if decl.group_source(r) == decl.cell_order]
    parts: dict[int, list] = {r: [] for r in raw}
    demoted: dict = {}
    for lo, hi in blocks(leaf, raw[-1], BLOCK_ROWS):
        for r, (level, dem) in _raw_groups(slice_level(leaf, raw[-1], lo, hi), raw, laws).items():
            parts[r].append(level)
            for d in dem:  # one contributor (the leaf), whichever block fired
                demoted[(d["field"], d["reason"])] = d
    out = {
        r: (concat(parts[r], r), sorted(demoted.values(), key=lambda d: (d["field"], d["reason"])))
        for r in raw
    }
    for r in decl.column_groups():
        if r not in out:
            out[r] = coarsen([out[decl.group_source(r)][0]], r, laws)
    return {r: out[r] for r in decl.column_groups()}


def _raw_groups(leaf: Level, raw: list[int], laws: dict[str, Law]) -> dict[int, tuple]:
    """The groups folded from (a block of) the leaf's cells, finest first: a field whose
    fold of folds is its fold (:func:`~zagg.pyramid.levels.regroups_exactly`) from the
    group below, a digest of single observations from its values sorted per group cell,
    the other digests from the finest group's sorted unions, the rest from the leaf."""
    chained = {n: law for n, law in laws.items() if regroups_exactly(law)}
    points = {n: law for n, law in laws.items() if single_observations(law, leaf.fields.get(n))}
    unions = {
        n: law for n, law in laws.items() if n not in points and _unionable(law, leaf.fields.get(n))
    }
    others = {n: law for n, law in laws.items() if n not in {**chained, **points, **unions}}
    union = coarsen([leaf], raw[0], lossless(unions))[0] if unions else None
    out = {}
    below = leaf
    for r in raw:
        level, demotions = coarsen([leaf], r, others)
        level.fields.update(coarsen([below], r, chained)[0].fields)
        if union is not None:
            level.fields.update(coarsen([union], r, unions)[0].fields)
        for n, law in points.items():
            sorted_ = Level(r, {n: point_union(leaf.fields[n], r)})
            level.fields.update(coarsen([sorted_], r, {n: law})[0].fields)
        level.fields = {n: level.fields[n] for n in laws if n in level.fields}
        out[r] = (level, demotions)
        below = level
    return out


def _unionable(law: Law, cells: FieldCells | None) -> bool:
    """Whether a digest field's raw groups may fold the finest group's sorted unions and
    keep the direct fold's bytes: its fold merges whole centroids (flux), or every centroid
    is one observation (a heavier one is read against its own digest's neighbours)."""
    if law.kind != "ragged":
        return False
    if law.opts.get("weights") == "flux" or cells is None:
        return True
    weights = cells.values.weights
    return weights is None or bool(np.all(weights == 1))


def materialized(decl: Declaration, laws: dict[str, Law]) -> dict:
    """The ``fields`` map of an artifact: the composable fields' entries."""
    return {n: dict(decl.fields[n]) for n in laws}


def write_column(
    spec: LeafSpec,
    shard_id: str,
    contents: dict,
    decl: Declaration | None,
    *,
    granule_count: int = 0,
    window: str | None = None,
) -> dict | None:
    """Write the leaf column of ``shard_id`` (of its leaf of ``window``: the window's
    ``{window}.pyramid.zarr``) from the leaf's stored cells (``contents``) after its stamp,
    into the store of the run's leaf record ``spec``; returns the artifact record (None: the
    declaration carries no column, and a stale one was deleted)."""
    root = spec.root
    rel = artifact.column_path(shard_id, window)
    laws = laws_of(decl.fields) if decl is not None else {}
    if not laws:
        artifact.clear(root, rel)
        return None
    t0 = time.perf_counter()
    # a previous column is cleared while this one folds (its listing's round trip on an
    # object store passes meanwhile); the writer holds the leaf's claim, so none is racing
    clearing = background().submit(artifact.clear, root, rel)
    try:
        p, c = decl.shard_order, decl.cell_order
        levels = column_levels(leaf_level(shard_id, contents, laws, p, c), decl, laws)
        demotions = sorted(
            (d for _, dem in levels.values() for d in dem), key=lambda d: (d["field"], d["reason"])
        )
        finest = decl.column_groups()[0]
        provenance = {
            "role": "column",
            artifact.COLUMN_ATTR: {
                "spec": artifact.COLUMN_SPEC,
                "node": shard_id,
                "order": p,
                "source_cell_order": c,
                "window": window or WINDOW_ALL,
                "fields": materialized(decl, laws),
                "groups": {
                    str(r): {
                        "regime": "leaf-column",
                        "merges_from_raw": decl.group_mfr(r),
                        "n_cells": 4 ** (r - p),
                    }
                    for r in decl.column_groups()
                },
                "cells_with_data_order": finest,
                **({"demotions": demotions} if demotions else {}),
                "generated_at": now_iso(),
            },
        }
        groups = {r: node_contents(lv, shard_id, laws) for r, (lv, _) in levels.items()}
    finally:  # waited for even when the fold fails: nothing may delete after the claim
        clearing.result()
    t_fold = time.perf_counter()
    record = artifact.write_artifact(
        root,
        rel,
        shard_id,
        groups,
        artifact_specs(spec.specs, laws),
        provenance,
        cells_with_data=levels[finest][0].n_cells(),
        granule_count=granule_count,
        morton_attrs=dict(spec.morton_attrs),
        fresh=True,
    )
    record["timings"] = {"fold_s": t_fold - t0, "total_s": time.perf_counter() - t0}
    return record


def after_leaf(
    spec: LeafSpec, leaf: ShardLeaf, record: dict | None, decl: Declaration | None
) -> dict | None:
    """The leaf task's column step: once ``leaf`` is stamped (``record``), its column and
    the column's sidecar (written here, like the leaf's); its time joins the leaf's."""
    if record is None:
        return None
    col = write_column(
        spec,
        leaf.shard_id,
        leaf.contents,
        decl,
        granule_count=record.get("granule_count", 0),
        window=leaf.window,
    )
    if col is None:
        return record
    spec.root.write_many({key: dumps_json(payload) for key, payload in col.pop("sidecar").items()})
    record["column"] = {
        k: col[k]
        for k in ("path", "content_hashes", "bytes_written", "objects_written", "written_at")
    }
    record["timings"]["column_s"] = col["timings"]["total_s"]
    record["bytes_written"] += col["bytes_written"]
    record["objects_written"] += col["objects_written"]
    return record
