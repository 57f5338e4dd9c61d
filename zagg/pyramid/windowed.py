"""The sweep of a windowed store: one ladder per time window, then the all-time close.

A windowed (``morton-hive/2``) store's leaves are ``(shard, window)`` pairs, each with its
window's column ``{window}.pyramid.zarr``. Every window has its own ladder of overviews,
``{window}.zarr`` at each ancestor node, planned and folded exactly as an unwindowed
store's (:func:`zagg.pyramid.sweep.ladder` over that window's leaves). After the windows,
each ladder node *closes*: its ``all.zarr`` is folded cell for cell from the node's own
per-window overviews — one k-way fold per cell across windows through each field's
reducer law (:func:`zagg.pyramid.levels.coarsen` at the level's own order), never from
the leaf tier, so its cost follows the window count (spec §4.4 "The all-time fold of a
windowed store"). Its provenance is a ``stage-merge`` at every level with
``source_windows``, the windows' summed ``source_children`` and their summed generation;
a node whose windows' overviews are unchanged since its ``all.zarr`` was folded is
current and is not rewritten.
"""

from __future__ import annotations

import warnings

import dask

from zagg import grid as G
from zagg.errors import ZaggWarning
from zagg.hive import artifact
from zagg.hive.stamp import COMMIT_ATTR, now_iso
from zagg.hive.walk import walk_windows
from zagg.pyramid.ladder import (
    MERGE,
    Context,
    check_owner,
    child_info,
    merge_generation,
    same_generation,
    write_level,
)
from zagg.pyramid.levels import coarsen
from zagg.pyramid.reading import group_level


def _by_word(ids) -> list[str]:
    ids = sorted(set(ids))
    return sorted(ids, key=lambda s: int(G.from_decimal([s])[0]))


def run_windowed(
    root, decl, laws: dict, scope_of, width: int, held, summary
) -> tuple[list[str], list[dict]]:
    """Every window's ladder, then every node's all-time close. Returns the store's shard
    ids (any window) and the records of the ``all.zarr`` artifacts written."""
    from zagg.pyramid.sweep import array_specs, ladder, morton_attrs

    windows = {w: _by_word(sid for _rel, sid in found) for w, found in walk_windows(root).items()}
    shards = _by_word(s for sids in windows.values() for s in sids)
    summary.leaves = sum(len(s) for s in windows.values())
    for w, sids in windows.items():
        ladder(root, decl, laws, sids, scope_of, width, held, summary, window=w)
        held.beat()
    if not laws or not decl.all_time:  # a store recording all_time: false has no fold
        return shards, []
    ctx = None
    for w, sids in windows.items():  # the array specs: any window's committed columns
        cols = [
            s
            for s in sids
            if artifact.stamped_attrs(root, artifact.column_path(s, w), "column") is not None
        ]
        if cols:
            specs = array_specs(root, decl, laws, cols, w)
            ctx = Context(
                root,
                decl,
                {n: v for n, v in laws.items() if n in specs},
                specs,
                held.run_id,
                morton_attrs(root, artifact.column_path(cols[0], w), decl.base),
                started_at=held.payload["acquired_at"],
            )
            break
    if ctx is None:
        return shards, []
    tasks = []
    for k, r in decl.ladder():
        for nid in _by_word(G.ancestor_id(s, k) for s in shards):
            known = [
                w for w, sids in windows.items() if any(G.ancestor_id(s, k) == nid for s in sids)
            ]
            summary.nodes += 1
            if not scope_of(nid):
                summary.skipped += 1
                continue
            tasks.append(
                dask.delayed(close_node, pure=False)(
                    ctx, nid, k, r, known, dask_key_name=f"close-node-{k}-{nid}-{held.run_id}"
                )
            )
    results = dask.compute(*tasks) if tasks else ()
    records = [rec for rec in results if rec is not None]
    summary.skipped += len(results) - len(records)
    summary.folded += len(records)
    summary.records.extend(records)
    summary.objects_written += sum(r["objects_written"] for r in records)
    summary.bytes_written += sum(r["bytes_written"] for r in records)
    return shards, records


def close_node(ctx: Context, nid: str, k: int, r: int, windows: list[str]) -> dict | None:
    """Fold node ``nid``'s per-window overviews (``windows``: the windows with a leaf under
    it) into its ``all.zarr``; None when it is current (nothing is written) or no window
    overview is committed yet."""
    found = {
        w: artifact.stamped_attrs(ctx.root, artifact.overview_path(nid, w), "overview")
        for w in windows
    }
    found = {
        w: a
        for w, a in found.items()
        if a is not None and a[artifact.OVERVIEW_ATTR].get("cell_order") == r
    }
    if not found:
        return None
    rel = artifact.overview_path(nid)
    infos = {w: child_info(a) for w, a in found.items()}
    generation, content = merge_generation(infos)
    existing = artifact.stamped_attrs(ctx.root, rel, "overview")
    if existing is not None:
        block = existing[artifact.OVERVIEW_ATTR]
        if (
            same_generation(block.get("generation"), generation)
            and block.get("content_hash") == content
            and (block.get("source_windows") or {}).get("missing") == len(windows) - len(found)
        ):
            return None
    counts = {"folded": 0, "missing": len(windows) - len(found), "unreadable": 0}
    children = {"folded": 0, "missing": 0, "unreadable": 0}
    levels, used = [], {}
    for w, attrs in found.items():
        try:
            levels.append(group_level(ctx.root, artifact.overview_path(nid, w), nid, r, ctx.laws))
        except (OSError, ValueError) as exc:
            counts["unreadable"] += 1
            warnings.warn(
                f"the {w} overview at node {nid} is unreadable ({exc}); its "
                "all-time fold under-covers that window",
                ZaggWarning,
                stacklevel=2,
            )
            continue
        counts["folded"] += 1
        used[w] = infos[w]
        for key, n in (attrs[artifact.OVERVIEW_ATTR].get("source_children") or {}).items():
            if key in children:
                children[key] += int(n)
    if not levels:
        return None
    if len(used) != len(infos):
        generation, content = merge_generation(used)
    level, demotions = coarsen(levels, r, ctx.laws)
    mfr = 1 + max(i["mfr"] for i in used.values())
    decl = ctx.decl
    check_owner(ctx, rel)
    block = {
        "spec": artifact.OVERVIEW_SPEC,
        "node": nid,
        "order": k,
        "cell_order": r,
        "source_shard_order": decl.shard_order,
        "source_cell_order": decl.cell_order,
        "window": artifact.WINDOW_ALL,
        "fields": {n: dict(decl.fields[n]) for n in ctx.laws},
        "regime": MERGE,
        "merges_from_raw": mfr,
        "source_children": children,
        "source_windows": counts,
        "run_id": ctx.run_id,
        "generation": generation,
        "content_hash": content,
        **({"demotions": demotions} if demotions else {}),
        "generated_at": now_iso(),
    }
    record = write_level(ctx, rel, nid, r, level, block)
    return {
        "node": nid,
        "order": k,
        "regime": MERGE,
        "merges_from_raw": mfr,
        "source_children": children,
        "source_windows": counts,
        "bytes_written": record["bytes_written"],
        "objects_written": record["objects_written"] + 1,
        COMMIT_ATTR: record["stamp"],
    }
