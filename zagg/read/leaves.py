"""Which leaves a read opens, and which of their cells are occupied.

The spec's reader flow: the manifest; the root ``coverage.moc`` when it is usable (else a
delimiter walk of the digit tree); a region drops the shards it cannot touch before any leaf
is read. Each remaining leaf costs its commit stamp (debris is skipped with a warning) and,
for a partial leaf, its coverage bitmap sidecar: the stamp's tier-0 box rejects a leaf the
region misses, the bitmap gives the exact occupied cells (hive_layout.md "Coverage").
``encoding: "full"`` means every cell. A leaf whose coverage says neither (a box-only leaf,
a missing sidecar) has its occupancy read from its arrays instead.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from zagg import grid as _grid
from zagg.errors import ZaggWarning
from zagg.hive import coverage as _coverage
from zagg.hive import paths as _paths
from zagg.hive.manifest import path_grouping, read_manifest
from zagg.hive.stamp import check_stamp, data_prefix, read_stamp
from zagg.hive.storage import StoreRoot
from zagg.hive.walk import walk_leaves
from zagg.read.region import Region, nested_ids, subtree_intervals

METADATA_READERS = 16  # concurrent small GETs (stamps, bitmaps, metadata)


@dataclass(frozen=True)
class Leaf:
    """One admitted leaf: where it is, its stamp, and the cells a read takes from it.

    ``ranks`` are the ascending positions on the leaf's cells axis of its occupied cells
    (inside the region, when there is one); ``occupied`` all its occupied cells; both None
    when the coverage does not say (the arrays decide then)."""

    rel: str
    shard_id: str
    stamp: dict
    prefix: str
    ranks: np.ndarray | None
    occupied: np.ndarray | None


def manifest_of(root: StoreRoot) -> dict:
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"no morton_hive.json at {root.url}: not a hive store root")
    return manifest


def candidates(
    root: StoreRoot,
    manifest: dict,
    discover: str,
    region: Region | None = None,
    window: str | None = None,
) -> list[tuple[str, str]]:
    """``(leaf prefix, shard id)`` of the leaves that may hold data (in the region), in
    ascending word order; ``window`` picks a windowed store's leaves of that window (the
    root coverage lists shards of any window, so those are found by the walk)."""
    if discover not in ("auto", "moc", "walk"):
        raise ValueError(f"discover={discover!r}: expected 'auto', 'moc' or 'walk'")
    g = path_grouping(manifest)
    if window is not None:
        found = walk_leaves(root, window, g)
        if region is None or not found:
            return found
        lo, hi = subtree_intervals(_grid.from_decimal([sid for _, sid in found]), region.order)
        return [leaf for leaf, k in zip(found, region.overlaps(lo, hi), strict=True) if k]
    found = _coverage.listed_leaves(root, manifest["shard_order"], discover, g)
    if region is None or not found:
        return found
    lo, hi = subtree_intervals(_grid.from_decimal([sid for _, sid in found]), region.order)
    keep = region.overlaps(lo, hi)
    return [leaf for leaf, k in zip(found, keep, strict=True) if k]


class IncompleteStoreWarning(ZaggWarning):
    """A store whose last run did not finish: some stamped leaves are not (yet) listed in
    its root coverage, so a read through it would miss them."""


def warn_if_incomplete(
    root: StoreRoot, found: list[tuple[str, str]], discover: str, window: str | None, stacklevel=3
) -> None:
    """Warn, naming the store and the fix, when the read can tell without more listing
    that a run into the store did not finish: no usable root coverage although leaves are
    there (the read walks instead), or (a windowed read, which walks anyway) stamped shards
    the root coverage does not list. The walk of an unwindowed store is not paid for this:
    ``zagg verify`` checks every leaf."""
    if not found or (window is None and discover == "walk"):
        return
    envelope = _coverage.read_root_coverage(root)
    if envelope is not None and window is None:
        return
    missing = []
    if envelope is not None:
        try:
            listed = set(_coverage.expand_ranges(envelope))
        except ValueError:
            listed = set()
        missing = sorted({sid for _, sid in found} - listed)
        if not missing:
            return
    why = (
        f"its root {_paths.ROOT_COVERAGE_KEY} does not list {len(missing)} of its shards "
        f"(e.g. {missing[0]})"
        if missing
        else f"it has no usable root {_paths.ROOT_COVERAGE_KEY}"
    )
    warnings.warn(
        f"{root.url} is incomplete: {why}, so the last run into it did not finish (or one "
        "is still writing). Run the same zagg run command again to complete it; "
        f"`zagg verify {root.url}` checks every leaf",
        IncompleteStoreWarning,
        stacklevel=stacklevel,
    )


def admit(
    root: StoreRoot,
    manifest: dict,
    found: list[tuple[str, str]],
    region: Region | None,
    *,
    stacklevel: int = 3,
) -> list[Leaf]:
    """Stamp, coverage and region check of every candidate, concurrently; debris is
    skipped with a warning, a leaf without a cell in the region is left out."""
    depth = manifest["cell_order"] - manifest["shard_order"]
    with ThreadPoolExecutor(max_workers=METADATA_READERS) as pool:
        got = list(pool.map(lambda item: _admit_one(root, item, depth, region), found))
    leaves = []
    for (rel, _), leaf in zip(found, got, strict=True):
        if leaf == "debris":
            warnings.warn(
                f"skipping {root.url_of(rel)}: no commit stamp (debris from an unfinished "
                "write, or a leaf the root coverage lists that is gone); run the same zagg "
                "run command again to finish it",
                ZaggWarning,
                stacklevel=stacklevel,
            )
        elif leaf is not None:
            leaves.append(leaf)
    return leaves


def _admit_one(root: StoreRoot, item: tuple[str, str], depth: int, region: Region | None):
    rel, sid = item
    stamp = read_stamp(root, rel)
    if stamp is None:
        return "debris"
    stamp = check_stamp(stamp, rel)
    prefix = data_prefix(rel, stamp)
    envelope = _coverage.parse_leaf_envelope(stamp)
    if region is not None and envelope is not None and not _box_meets(envelope, region):
        return None
    occupied = occupied_ranks(root, rel, prefix, envelope, depth)
    ranks = occupied
    if region is not None and occupied is not None:
        ranks = occupied[region.contains(cell_nested(sid, depth, occupied))]
        if not ranks.size:
            return None
    return Leaf(rel, sid, stamp, prefix, ranks, occupied)


def _box_meets(envelope: dict, region: Region) -> bool:
    members = [m for m in envelope.get("box") or [] if m is not None]
    try:
        words = _grid.from_decimal(members)
    except ValueError:
        return True  # an unreadable box rejects nothing: the bitmap decides
    if not words.size:
        return True
    lo, hi = subtree_intervals(words, region.order)
    return bool(region.overlaps(lo, hi).any())


def occupied_ranks(
    root: StoreRoot, rel: str, prefix: str, envelope: dict | None, depth: int
) -> np.ndarray | None:
    """Ascending ranks of the leaf's occupied cells from its coverage, or None when its
    coverage does not say (box-only, no envelope, a missing sidecar)."""
    if envelope is None:
        return None
    encoding = envelope.get("encoding")
    if encoding == "full":
        return np.arange(4**depth, dtype=np.int64)
    if depth == 0:
        return np.zeros(1, np.int64)  # a one-cell leaf's box is that cell
    if encoding != "bitmap":
        return None
    sidecar = envelope.get("sidecar") or _paths.LEAF_COVERAGE_NAME
    payload = root.read_bytes(f"{prefix}/{sidecar}")
    if payload is None:
        warnings.warn(
            f"{root.url_of(prefix)}/{sidecar} is missing: reading the leaf's "
            "occupancy from its arrays",
            ZaggWarning,
            stacklevel=4,
        )
        return None
    try:
        bits = _coverage.decode_bitmap(payload, depth)
    except ValueError as exc:
        raise ValueError(f"{root.url_of(prefix)}/{sidecar}: {exc}") from None
    return np.flatnonzero(bits).astype(np.int64)


def cell_nested(shard_id: str, depth: int, ranks: np.ndarray) -> np.ndarray:
    """NESTED ids at the cell order of the cells ``ranks`` of a shard."""
    shard_nested = int(nested_ids(_grid.from_decimal([shard_id]))[0][0])
    return (shard_nested << (2 * depth)) + np.asarray(ranks, dtype=np.int64)


def cell_words(shard_id: str, shard_order: int, cell_order: int, ranks: np.ndarray) -> np.ndarray:
    """The cell coordinate (spec §1.5 "The cell coordinate") at ``ranks`` of a shard."""
    word = _grid.from_decimal([shard_id])[0]
    ranks = np.asarray(ranks, dtype=np.int64)
    if cell_order > 27:
        return _grid.shard_cell_words(word, shard_order, cell_order)[ranks]
    first = np.uint64(int(word) + cell_order - shard_order)
    return first + ranks.astype(np.uint64) * np.uint64(_grid.stride(cell_order))
