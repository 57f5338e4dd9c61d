"""``open_column``: one leaf column artifact, every group it holds (spec §4.6).

A shard's column (``all.pyramid.zarr`` beside its leaf, ``{window}.pyramid.zarr`` on a
windowed store) holds one group per cell order from the finest declared leaf resolution
down to the shard order: the declared members, which are pyramid levels, and below them
the within-footprint intermediates the ladder above the shard gathers from, which are not
levels but are committed and hashed all the same. Each group reads like a level (its
occupied cells on ``cells``, ``morton`` and ``cell_ids`` at that order), one DataTree
child ``o{order}`` per group; the tree's attrs carry the column's ``zagg_column``
provenance and commit stamp, each child its group's entry and whether it is declared.

:func:`verify_column` checks the artifact against its stamp: the array set (no array
missing, none unrecorded) and every array's §5 content hash, ``morton`` against the cell
law too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zagg import grid as _grid
from zagg.hive import artifact
from zagg.hive import verify as _verify
from zagg.hive.layout import MORTON
from zagg.hive.loaders import load_field, load_morton
from zagg.hive.manifest import path_grouping
from zagg.hive.schema import leaf_group, schema
from zagg.hive.storage import StoreRoot, as_root
from zagg.read import leaves as _leaves

if TYPE_CHECKING:
    import xarray as xr

GROUP_ATTR = "zagg_column_group"


def open_column(
    store: str | StoreRoot,
    shard: str,
    storage_options: dict[str, Any] | None = None,
    *,
    window: str | None = None,
    verify: bool = False,
) -> xr.DataTree:
    """The committed leaf column of ``shard`` as a DataTree, one child ``o{order}`` per
    group it holds (finest first), each that group's occupied cells as a lazy Dataset.

    ``window`` names the column of a windowed store's leaf of that window; ``verify=True``
    first checks every array of the column against its stamp's content hashes."""
    import xarray as xr

    from zagg.pyramid.declare import of_manifest
    from zagg.read.levels import open_group

    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    p = int(manifest["shard_order"])
    _grid.validate_id(shard)
    if _grid.id_order(shard) != p:
        raise ValueError(
            f"{shard} is an order-{_grid.id_order(shard)} id; the columns of {root.url} sit "
            f"at its shards, order {p}"
        )
    if window is not None and manifest.get("temporal") is None:
        raise ValueError(f"{root.url} is not a windowed store: drop window={window!r}")
    if window is None and manifest.get("temporal") is not None:
        raise ValueError(
            f"{root.url} is a windowed store: its columns are per window, pass window=..."
        )
    if path_grouping(manifest) > 1:
        raise ValueError(
            f"{root.url} groups {path_grouping(manifest)} digits per directory "
            "(path_grouping): its columns have no settled path, so they are not read"
        )
    rel = artifact.column_path(shard, window)
    attrs = committed(root, rel)
    record = attrs[artifact.COLUMN_ATTR]
    if verify:
        verify_column(root, rel, attrs, p)
    decl = of_manifest(manifest)
    declared = set(decl.resolutions) if decl is not None else set()
    children = {}
    for r in groups_of(record):
        ds = open_group(root, manifest, [(shard, attrs)], lambda _n: rel, p, r, "column", None)
        ds.attrs[GROUP_ATTR] = {
            **dict(record["groups"][str(r)]),
            "cell_order": r,
            "declared": r in declared,
        }
        children[f"o{r}"] = ds
    tree = xr.DataTree.from_dict(children)
    tree.attrs = {
        artifact.ROLE_ATTR: attrs[artifact.ROLE_ATTR],
        artifact.COLUMN_ATTR: dict(record),
        "morton_hive_commit": dict(attrs["morton_hive_commit"]),
        "path": rel,
    }
    return tree


def committed(root: StoreRoot, rel: str) -> dict:
    """The root attrs of the committed column at ``rel``, its ``zagg_column`` checked."""
    attrs = artifact.stamped_attrs(root, rel, "column")
    if attrs is None:
        raise ValueError(
            f"{root.url_of(rel)} holds no committed column (absent, debris, or not a "
            "column): a store declaring a pyramid writes one beside every leaf; re-run the "
            "shard to write it"
        )
    record = attrs[artifact.COLUMN_ATTR]
    if record.get("spec") != artifact.COLUMN_SPEC:
        raise ValueError(
            f"{root.url_of(rel)}: zagg_column spec {record.get('spec')!r} is not "
            f"{artifact.COLUMN_SPEC!r}, the revision this reader implements"
        )
    if not isinstance(record.get("groups"), dict) or not record["groups"]:
        raise ValueError(f"{root.url_of(rel)}: zagg_column lists no groups")
    return attrs


def groups_of(record: dict) -> list[int]:
    """The group orders a ``zagg_column`` record lists, finest first."""
    return sorted((int(r) for r in record["groups"]), reverse=True)


def verify_column(root: StoreRoot, rel: str, attrs: dict, shard_order: int) -> int:
    """Raise :class:`zagg.read.IntegrityError` unless every array of the column matches
    its stamp (key set and §5 digests); returns the number of arrays checked."""
    where = root.url_of(rel)
    stamp = attrs["morton_hive_commit"]
    recorded = _verify.recorded_hashes(stamp, where)
    node = attrs[artifact.COLUMN_ATTR].get("node")
    present: set[str] = set()
    groups = groups_of(attrs[artifact.COLUMN_ATTR])
    held = {int(d) for d in root.list_dir(rel)[0] if d.isdigit()}
    stray = sorted(held - set(groups))
    if stray:
        raise _verify.IntegrityError(
            f"column {where} holds group {stray[0]}, which its zagg_column does not list "
            "(a foreign or debris group); rewrite the column"
        )
    checked = 0
    for r in groups:
        _attrs, arrays = leaf_group(root, rel, str(r), where)
        present |= {f"{r}/{name}" for name in arrays}
        for field in schema(arrays).values():
            load_field(root, rel, str(r), field, None, where, recorded, None)
            checked += 1
        if MORTON in arrays:
            load_morton(root, rel, f"{r}/{MORTON}", node, shard_order, r, where, recorded)
            checked += 1
    _verify.check_key_set(where, recorded, present)
    return checked
