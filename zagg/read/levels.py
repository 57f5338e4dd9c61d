"""Pyramid levels: ``open_level`` (one resolution as a sparse Dataset) and ``open_pyramid``.

A ``zagg-pyramid/2`` store is addressable at every level its manifest declares (spec
§4.4): the native cells (the leaves, :func:`zagg.read.open_hive`), the declared leaf
resolutions (groups of the leaf columns) and one overview per ancestor node above the
shard. A column also holds groups below its declared resolutions, down to the shard
order: those within-footprint intermediates feed the ladder and are not levels
(:func:`zagg.read.column.open_column` reads every group a column holds). A level reads like the native store: the
occupied cells of that order on ``cells`` (one dask chunk per artifact), the ``morton``
coordinate at that order, ``cell_ids`` and the same fields (those the pyramid carries),
so :func:`zagg.quantile` and :func:`zagg.plot_map` work on any level. Only committed
(stamped) artifacts are read; a level nobody swept yet raises, naming the sweep.

A windowed store carries every level per time window (``window="2019"``: the window's
columns ``{window}.pyramid.zarr`` and overviews ``{window}.zarr``) and, above the shard,
the all-time fold of its windows (``all.zarr``, read with ``window=None`` or ``"all"``);
it has no all-time column and no all-time leaf, so those levels need a window.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.base import tokenize

from zagg import grid as G
from zagg.errors import ZaggWarning
from zagg.grid import Grid
from zagg.hive import artifact
from zagg.hive.layout import MORTON
from zagg.hive.loaders import load_field
from zagg.hive.manifest import path_grouping
from zagg.hive.schema import held, leaf_group, schema
from zagg.hive.storage import as_root
from zagg.pyramid.companion import read_companion
from zagg.read import build as _build
from zagg.read import leaves as _leaves
from zagg.read.region import parse_region, subtree_intervals

if TYPE_CHECKING:
    import xarray as xr

LEVEL_ATTR = "zagg_level"
PYRAMID_V1 = "zagg-pyramid/1"
OVERVIEW_SPECS = ("zagg-overview/1", "zagg-overview/2")


def levels(manifest: dict) -> dict[int, dict]:
    """``{cell order: {"cell_order", "order", "artifact"}}`` of every level the manifest
    declares, finest first: the native cells (``source``), the declared leaf resolutions
    (``column``) and the ladder (``overview``, one per ancestor node order). A
    ``zagg-pyramid/1`` block declares overviews at its ``orders`` only, each at the
    constant depth ``k + (cell_order - shard_order)`` (spec §4.4)."""
    from zagg.pyramid.declare import of_manifest

    p, c = int(manifest["shard_order"]), int(manifest["cell_order"])
    out = {c: {"cell_order": c, "order": p, "artifact": "source"}}
    decl = of_manifest(manifest)
    if decl is not None:
        for r in decl.resolutions:
            out[r] = {"cell_order": r, "order": p, "artifact": "column"}
        for k, r in decl.ladder():
            out[r] = {"cell_order": r, "order": k, "artifact": "overview"}
    for k in v1_orders(manifest):
        out[k + c - p] = {"cell_order": k + c - p, "order": k, "artifact": "overview"}
    return dict(sorted(out.items(), reverse=True))


def v1_orders(manifest: dict) -> list[int]:
    """The ancestor orders a ``zagg-pyramid/1`` block declares (empty: declared off, /2,
    or no block); an order that is no ancestor of the shards is refused by name."""
    block = manifest.get("pyramid")
    if not isinstance(block, dict) or block.get("spec") != PYRAMID_V1:
        return []
    orders = (block.get("overview") or {}).get("orders") or []
    p = int(manifest["shard_order"])
    bad = [k for k in orders if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < p]
    if bad:
        raise ValueError(
            f"the manifest's zagg-pyramid/1 orders {orders} hold {bad[0]!r}, which is not an "
            f"ancestor order of its order-{p} shards (0 .. {p - 1})"
        )
    return sorted({int(k) for k in orders}, reverse=True)


def open_level(
    store,
    order: int,
    storage_options: dict[str, Any] | None = None,
    *,
    region=None,
    bbox=None,
    cells=None,
    window: str | None = None,
) -> xr.Dataset:
    """The occupied cells of one pyramid level (cell order ``order``) as a lazy Dataset.

    ``region`` / ``bbox`` / ``cells`` keep the cells inside that region (at the level's
    order) and open only the artifacts that can hold one. The native order is
    :func:`zagg.read.open_hive`'s read. On a windowed store ``window`` names the time
    window whose level is read; ``None`` (or ``"all"``) reads the all-time fold, which
    exists above the shard only."""
    from zagg.read.open import open_hive

    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    window = _window_of(root, manifest, window)
    table = levels(manifest)
    order = int(order)
    if order not in table:
        raise ValueError(
            f"cell order {order} is not a level of {root.url}: its levels are "
            f"{sorted(table, reverse=True)} (the pyramid declared in its "
            "manifest; output.pyramid sets it)"
        )
    entry = table[order]
    if entry["artifact"] != "source" and path_grouping(manifest) > 1:
        raise ValueError(grouped_refusal(root, manifest, order))
    if window is None and manifest.get("temporal") is not None and entry["artifact"] != "overview":
        raise ValueError(
            f"level {order} of the windowed store {root.url} is a "
            f"{entry['artifact']} level: it exists per time window only (the "
            "all-time fold starts above the shard); pass window='<label>'"
        )
    if entry["artifact"] == "source":
        return open_hive(root, region=region, bbox=bbox, cells=cells, window=window)
    reg = parse_region(region, bbox, cells, order=order)
    found = _leaves.candidates(root, manifest, "auto", window=window)  # the region cuts below
    k = entry["order"]
    nodes = sorted(
        {G.ancestor_id(sid, k) for _rel, sid in found}, key=lambda n: int(G.from_decimal([n])[0])
    )
    if reg is not None and nodes:
        lo, hi = subtree_intervals(G.from_decimal(nodes), reg.order)
        nodes = [n for n, keep in zip(nodes, reg.overlaps(lo, hi), strict=True) if keep]
    kind = artifact.column_path if entry["artifact"] == "column" else artifact.overview_path

    def path(node, kind=kind):
        return kind(node, window)

    role = entry["artifact"]
    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        attrs = list(pool.map(lambda n: artifact.stamped_attrs(root, path(n), role), nodes))
    stamped = [
        (n, a)
        for n, a in zip(nodes, attrs, strict=True)
        if a is not None and _carries(root, path(n), a, role, order)
    ]
    if not stamped:
        how = (
            "re-run the leaves with output.pyramid declared"
            if role == "column"
            else f"build it with `python -m zagg sweep {root.url}`"
        )
        what = "" if window is None else f" of window {window!r}"
        raise ValueError(
            f"level {order}{what} of {root.url} is declared but no committed "
            f"{role} holds it yet: {how}"
        )
    return open_group(root, manifest, stamped, path, k, order, role, reg)


def grouped_refusal(root, manifest: dict, order: int) -> str:
    """Why a grouped tree's order nodes are not read (spec reader_concepts.md)."""
    return (
        f"level {order} of {root.url} is omitted: the store groups "
        f"{path_grouping(manifest)} digits per directory (path_grouping), so its pyramid's "
        "order nodes have no settled path; its native cells read as usual"
    )


def _window_of(root, manifest: dict, window) -> str | None:
    """``window`` checked against the store: a label on a windowed store only; ``"all"``
    is the all-time fold, read like ``None``."""
    if window is None or window == artifact.WINDOW_ALL:
        return None
    if manifest.get("temporal") is None:
        raise ValueError(
            f"{root.url} is not a windowed store (its manifest declares no "
            f"window schedule): drop window={window!r}"
        )
    return str(window)


def _carries(root, rel: str, attrs: dict, role: str, order: int) -> bool:
    """Whether a committed artifact holds level ``order``: a column lists the group; an
    overview at a revision this reader knows declares that ``cell_order`` (an unknown
    revision is dropped with a warning, a wrong cell order raises)."""
    if role == "column":
        return str(order) in (attrs[artifact.COLUMN_ATTR].get("groups") or {})
    block = attrs[artifact.OVERVIEW_ATTR]
    if block.get("spec") not in OVERVIEW_SPECS:
        warnings.warn(
            f"{root.url_of(rel)}: zagg_overview spec {block.get('spec')!r} is not one this "
            f"reader implements ({', '.join(OVERVIEW_SPECS)}): the overview is left out",
            ZaggWarning,
            stacklevel=4,
        )
        return False
    if block.get("cell_order") != order:
        raise ValueError(
            f"{root.url_of(rel)} is an overview of cell order {block.get('cell_order')!r}, "
            f"but the manifest puts level {order} at its node: the artifact is foreign or "
            "stale; re-run the sweep"
        )
    return True


def provenance(stamped: list, role: str) -> dict:
    """What a level's artifacts record about their folds: every ``demotions`` record
    (node-attributed) and, for overviews, the fold regimes (absent reads "leaves")."""
    key = artifact.COLUMN_ATTR if role == "column" else artifact.OVERVIEW_ATTR
    demotions = [
        {**d, "node": node} for node, a in stamped for d in (a[key].get("demotions") or [])
    ]
    out = {"demotions": demotions}
    if role == "overview":
        out["fold_sources"] = sorted(
            {a[key].get("fold_source") or a[key].get("regime") or "leaves" for _n, a in stamped}
        )
    return out


def open_group(root, manifest, stamped, path, k: int, r: int, role: str, reg) -> xr.Dataset:
    """Group ``r`` of the ``stamped`` artifacts (node, root attrs) at ``path(node)``, nodes
    of order ``k``: their occupied cells as one sparse Dataset."""
    group = str(r)
    first = path(stamped[0][0])
    group_attrs, arrays = leaf_group(root, first, group, root.url_of(first))
    fields = schema(arrays)
    depth = r - k

    def occupancy(item):
        node, stamp_attrs = item
        rel = path(node)
        found = np.zeros(4**depth, dtype=bool)
        for f in fields.values():
            values = load_field(root, rel, group, f, None, root.url_of(rel), None, None)
            found |= held(values, f.fill)
        ranks = np.flatnonzero(found).astype(np.int64)
        if reg is not None:
            ranks = ranks[reg.contains(_leaves.cell_nested(node, depth, ranks))]
        return _leaves.Leaf(rel, node, stamp_attrs["morton_hive_commit"], rel, ranks, ranks)

    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        got = [leaf for leaf in pool.map(occupancy, stamped) if leaf.ranks.size]
    if not got and reg is None:
        warnings.warn(
            f"level {r} of {root.url}: its {role}s hold no cell", ZaggWarning, stacklevel=3
        )
    grid = Grid(k, r, r, True)
    parts = [_leaves.cell_words(leaf.shard_id, k, r, leaf.ranks) for leaf in got]
    words = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    token = tokenize(
        root.url,
        r,
        [(leaf.rel, leaf.stamp) for leaf in got],
        reg is not None and [leaf.ranks for leaf in got],
    )
    ds = _build.dataset(
        root,
        manifest,
        got,
        fields,
        grid,
        group_attrs,
        dict(arrays[MORTON].attrs),
        dense=False,
        recorded=None,
        token=token,
        words=words,
    )
    ds.attrs["morton_hive"] = {**ds.attrs["morton_hive"], "cell_order": r, "shard_order": k}
    ds.attrs[LEVEL_ATTR] = {
        "cell_order": r,
        "order": k,
        "artifact": role,
        "artifacts": [leaf.rel for leaf in got],
        **provenance(stamped, role),
    }
    for d in ds.attrs[LEVEL_ATTR]["demotions"]:  # the field's fill cells say why, here
        if d.get("field") in ds.data_vars:
            ds[d["field"]].attrs.setdefault("demotions", []).append(d)
    return ds


def open_pyramid(
    store,
    storage_options: dict[str, Any] | None = None,
    *,
    region=None,
    bbox=None,
    cells=None,
    window: str | None = None,
) -> xr.DataTree:
    """Every materialized level of a store as one DataTree: a child ``o{order}`` per
    level, finest first (the native cells included); declared levels nobody has written
    yet are left out with a warning. On a windowed store ``window`` picks the window;
    without it the tree is the all-time fold's levels (those above the shard)."""
    import xarray as xr

    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    all_time = manifest.get("temporal") is not None and window in (None, artifact.WINDOW_ALL)
    children = {}
    for r, e in levels(manifest).items():
        if all_time and e["artifact"] != "overview":
            continue
        if e["artifact"] != "source" and path_grouping(manifest) > 1:
            warnings.warn(grouped_refusal(root, manifest, r), ZaggWarning, stacklevel=2)
            continue
        try:
            children[f"o{r}"] = open_level(
                root, r, region=region, bbox=bbox, cells=cells, window=window
            )
        except ValueError as exc:
            if "no committed" not in str(exc):
                raise
            warnings.warn(str(exc), ZaggWarning, stacklevel=2)
    tree = xr.DataTree.from_dict(children)
    tree.attrs = {
        "morton_hive": {
            k: manifest[k] for k in ("spec", "cell_order", "shard_order") if k in manifest
        },
        "pyramid": manifest.get("pyramid"),
        **({"multiscales": manifest["multiscales"]} if "multiscales" in manifest else {}),
    }
    companion = read_companion(root, manifest)
    if companion is not None:
        tree.attrs["zagg_multiscales"] = companion
    return tree
