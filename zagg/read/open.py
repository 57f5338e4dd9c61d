"""``open_hive`` and ``open_leaf``: a store (or one leaf) as one lazy xarray Dataset.

The open reads only metadata: the manifest, the root coverage, each candidate leaf's stamp
and coverage bitmap, and one leaf's array metadata (the store's schema). Every array is
read per leaf, by its own dask task, only when computed; in a sparse read a task fetches
just the inner chunks holding the cells it returns. A leaf that breaks the spec or the
schema raises, naming the leaf, the array and the problem, at open for the schema leaf and
when its task runs for the others.
"""

from __future__ import annotations

import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.base import tokenize

from zagg import grid as _grid
from zagg.hive import coverage as _coverage
from zagg.hive import paths as _paths
from zagg.hive import verify as _verify
from zagg.hive.layout import MORTON
from zagg.hive.loaders import load_field, load_morton
from zagg.hive.manifest import path_grouping
from zagg.hive.schema import TIME, leaf_grid, leaf_group, schema
from zagg.hive.schema import held as _held
from zagg.hive.stamp import check_stamp, data_prefix, read_stamp
from zagg.hive.storage import StoreRoot, as_root
from zagg.read import build as _build
from zagg.read import leaves as _leaves
from zagg.read.region import parse_region

if TYPE_CHECKING:
    import xarray as xr


def open_hive(
    store: str | StoreRoot,
    storage_options: dict[str, Any] | None = None,
    *,
    region=None,
    bbox=None,
    cells=None,
    dense: bool = False,
    verify: bool = False,
    discover: str = "auto",
    window: str | None = None,
    windows=None,
) -> xr.Dataset:
    """Open the commit-stamped leaves of a store as one lazy Dataset on ``cells``.

    By default the Dataset holds the occupied cells only (from each leaf's coverage), one
    dask chunk per leaf; ``dense=True`` gives every leaf's ``4^(c−p)`` cells instead.
    ``region`` (GeoJSON), ``bbox`` ``(lon0, lat0, lon1, lat1)`` or ``cells`` (morton words
    or decimal ids) keeps the occupied cells inside that region and opens only the leaves
    that can hold one (a dense read keeps those leaves whole). ``verify=True`` checks each
    leaf's content hashes as its arrays are read and raises naming the leaf and array.
    ``discover`` picks the leaf candidates: ``"auto"`` (the root coverage MOC when usable,
    else the walk), ``"moc"`` or ``"walk"``.

    A time-windowed store (``morton-hive/2``) is read one window at a time: ``window``
    (a label such as ``"2019"``) opens that window's leaves, and ``windows`` (a list of
    labels, or ``"all"`` for every window the store holds) stacks them on a ``window``
    dimension, a time series per cell over the union of their occupied cells
    (:mod:`zagg.read.windows`).
    """
    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    if windows is not None:
        from zagg.read.windows import open_windows

        return open_windows(
            root,
            manifest,
            windows,
            region=region,
            bbox=bbox,
            cells=cells,
            dense=dense,
            verify=verify,
        )
    _check_window(root, manifest, window)
    reg = parse_region(region, bbox, cells, order=manifest["cell_order"])
    found = _leaves.candidates(root, manifest, discover, reg, window)
    _leaves.warn_if_incomplete(root, found, discover, window)
    if window is None and discover != "walk":
        warn_if_unlisted(root, manifest)
    leaves = _leaves.admit(root, manifest, found, reg)
    if not leaves:
        if reg is None:
            what = "" if window is None else f" in window {window!r}"
            raise ValueError(f"{root.url} has no commit-stamped leaf{what}: nothing to open")
        first = _first_stamped(root, manifest, discover, window)
        return _open(root, manifest, [], dense=dense, verify=verify, schema_leaf=first)
    return _open(root, manifest, leaves, dense=dense, verify=verify, region=reg)


def open_leaf(
    store: str | StoreRoot,
    shard_id: str,
    storage_options: dict[str, Any] | None = None,
    *,
    dense: bool = False,
    verify: bool = False,
    window: str | None = None,
) -> xr.Dataset:
    """Open one shard's leaf (it must carry its commit stamp): its occupied cells, or with
    ``dense=True`` all of its cells, as a one-chunk Dataset; ``window`` names the leaf of
    a time-windowed store."""
    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    _grid.validate_id(shard_id)
    if _grid.id_order(shard_id) != manifest["shard_order"]:
        raise ValueError(
            f"shard {shard_id} is order {_grid.id_order(shard_id)}; this store's shards are "
            f"order {manifest['shard_order']}"
        )
    if window is not None:
        _check_window(root, manifest, window)
    rel = _paths.leaf_path(shard_id, window, path_grouping(manifest))
    if read_stamp(root, rel) is None:
        raise ValueError(
            f"{root.url_of(rel)} has no commit stamp: the leaf is absent or debris from an "
            "unfinished write (re-run the shard to heal it)"
        )
    leaves = _leaves.admit(root, manifest, [(rel, shard_id)], None)
    return _open(root, manifest, leaves, dense=dense, verify=verify)


def tree_prefixes(root: StoreRoot, digits: int) -> set[str]:
    """The ids of the tree's directories ``digits`` levels below the base cells (0: the
    base cells): one delimiter listing per level and directory, so a few for a store."""
    found = {d for d in root.list_dir("")[0] if _BASE_DIR.match(d)}
    for _ in range(digits):
        found = {
            f"{node}{d}"
            for node in found
            for d in root.list_dir(_grid.node_path(node))[0]
            if d in _DIGITS
        }
    return found


_BASE_DIR = re.compile(r"^-?[1-6]$")
_DIGITS = {"1", "2", "3", "4"}


def warn_if_unlisted(root: StoreRoot, manifest: dict, stacklevel: int = 3) -> list[str]:
    """Warn (:class:`~zagg.read.leaves.IncompleteStoreWarning`) when the tree holds
    directories near its top that no shard of the root coverage lies under: leaves a run
    wrote but the coverage does not list (a run that did not finish, one still writing, or
    a coverage written by a writer that lost another's update). The check lists only the
    top two levels of the tree: leaves missing from the coverage beside listed ones in the
    same subtree are for ``zagg verify``, which walks every leaf. Returns those
    directories' ids."""
    if path_grouping(manifest) != 1:
        return []
    envelope = _coverage.read_root_coverage(root)
    if envelope is None or envelope.get("order") != manifest["shard_order"]:
        return []  # no usable coverage: warn_if_incomplete has said so
    try:
        listed = _coverage.expand_ranges(envelope)
    except ValueError:
        return []
    digits = min(1, manifest["shard_order"])
    covered = {sid[: len(sid) - _grid.id_order(sid) + digits] for sid in listed}
    unlisted = sorted(tree_prefixes(root, digits) - covered)
    if unlisted:
        shown = ", ".join(f"{_grid.node_path(n)}/" for n in unlisted[:3])
        warnings.warn(
            f"{root.url} may be incomplete: its tree holds leaves under {shown} that its root "
            f"{_paths.ROOT_COVERAGE_KEY} does not list, so a read through it misses them (a "
            "run into it did not finish, or one is still writing). Run the same zagg run "
            "command again, or rebuild the coverage with zagg.hive.refresh_root_coverage; "
            "discover='walk' reads every leaf",
            _leaves.IncompleteStoreWarning,
            stacklevel=stacklevel,
        )
    return unlisted


def _check_window(root: StoreRoot, manifest: dict, window: str | None) -> None:
    """Refuse a window on an unwindowed store, and a windowed store read without one."""
    windowed = manifest.get("temporal") is not None
    if window is not None and not windowed:
        raise ValueError(
            f"window={window!r}: {root.url} is not a time-windowed store (its "
            "manifest declares no temporal schedule); open it without window="
        )
    if window is None and windowed:
        from zagg.hive.walk import walk_windows

        labels = list(walk_windows(root, path_grouping(manifest)))
        raise ValueError(
            f"{root.url} is a time-windowed store: pass window=... (one of "
            f"{labels[:12]}) or windows=[...] / windows='all' for a window "
            "dimension"
        )
    if window is not None:
        _grid.validate_window(window)


def _first_stamped(
    root: StoreRoot, manifest: dict, discover: str, window: str | None = None
) -> _leaves.Leaf:
    """The first stamped leaf of the store (the schema of an empty region read)."""
    for rel, sid in _leaves.candidates(root, manifest, discover, window=window):
        stamp = read_stamp(root, rel)
        if stamp is not None:
            stamp = check_stamp(stamp, rel)
            return _leaves.Leaf(
                rel, sid, stamp, data_prefix(rel, stamp), np.zeros(0, np.int64), None
            )
    raise ValueError(f"{root.url} has no commit-stamped leaf: nothing to open")


def _open(
    root: StoreRoot,
    manifest: dict,
    leaves: list[_leaves.Leaf],
    *,
    dense: bool,
    verify: bool,
    region=None,
    schema_leaf: _leaves.Leaf | None = None,
) -> xr.Dataset:
    first = schema_leaf or leaves[0]
    group = str(manifest["cell_order"])
    where = root.url_of(first.rel)
    group_attrs, arrays = leaf_group(root, first.prefix, group, where)
    grid = leaf_grid(manifest, arrays, where, group)
    if TIME in arrays:
        from zagg.read.raster import open_raster

        return open_raster(
            root,
            manifest,
            leaves,
            arrays,
            grid,
            group_attrs,
            dense=dense,
            verify=verify,
            schema_leaf=first,
        )
    fields = schema(arrays)
    if not dense:
        leaves = _resolve_occupancy(
            root, leaves, group, fields, region, manifest["cell_order"] - manifest["shard_order"]
        )
    recorded = None
    if verify:
        recorded = [_verify.recorded_hashes(leaf.stamp, root.url_of(leaf.rel)) for leaf in leaves]
        _verify_layout(root, leaves, group, recorded, manifest, dense)
    words = None
    if not dense:
        p, c = manifest["shard_order"], manifest["cell_order"]
        parts = [_leaves.cell_words(leaf.shard_id, p, c, leaf.ranks) for leaf in leaves]
        words = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    token = tokenize(
        root.url,
        dense,
        verify,
        [(leaf.rel, leaf.stamp, None if dense else leaf.ranks) for leaf in leaves],
    )
    morton_attrs = dict(arrays[MORTON].attrs) if MORTON in arrays else {}
    return _build.dataset(
        root,
        manifest,
        leaves,
        fields,
        grid,
        group_attrs,
        morton_attrs,
        dense=dense,
        recorded=recorded,
        token=token,
        words=words,
        derived=MORTON not in arrays,
    )


def _resolve_occupancy(root, leaves, group, fields, region, depth) -> list[_leaves.Leaf]:
    """Leaves whose coverage does not list their cells get them from their arrays (every
    cell any field holds a value in), masked to the region."""
    unknown = [leaf for leaf in leaves if leaf.occupied is None]
    if not unknown:
        return leaves

    def occupancy(leaf):
        found = np.zeros(4**depth, dtype=bool)
        for field in fields.values():
            values = load_field(
                root, leaf.prefix, group, field, None, root.url_of(leaf.rel), None, None
            )
            found |= _held(values, field.fill)
        occupied = np.flatnonzero(found).astype(np.int64)
        ranks = occupied
        if region is not None:
            ranks = occupied[region.contains(_leaves.cell_nested(leaf.shard_id, depth, occupied))]
        return _leaves.Leaf(leaf.rel, leaf.shard_id, leaf.stamp, leaf.prefix, ranks, occupied)

    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        resolved = dict(zip(map(id, unknown), pool.map(occupancy, unknown), strict=True))
    out = [resolved.get(id(leaf), leaf) for leaf in leaves]
    return [leaf for leaf in out if leaf.ranks.size]


def _verify_layout(root, leaves, group, recorded, manifest, dense) -> None:
    """Every leaf's array set against its stamp, and (sparse reads, which never read it)
    its stored ``morton`` against its digest and the cell law."""
    p, c = manifest["shard_order"], manifest["cell_order"]

    def check(i):
        leaf = leaves[i]
        where = root.url_of(leaf.rel)
        _attrs, arrays = leaf_group(root, leaf.prefix, group, where)
        _verify.check_key_set(where, recorded[i], {f"{group}/{name}" for name in arrays})
        if not dense and MORTON in arrays:
            load_morton(
                root, leaf.prefix, f"{group}/{MORTON}", leaf.shard_id, p, c, where, recorded[i]
            )

    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        list(pool.map(check, range(len(leaves))))
