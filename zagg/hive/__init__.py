"""The morton-hive store format: paths, manifest, leaf writer, stamp, coverage, hashes.

Task side (one dask task per shard): :func:`write_leaf_cells` (from the occupied cells) or
:func:`write_leaf` (from dense arrays) writes one self-describing leaf and returns a small
record. Client side, before any leaf: :func:`build_manifest` +
:func:`write_manifest` (or the read-only :func:`check_manifest`); after the leaves:
:func:`update_root_coverage`. Nothing here knows about dask.
"""

from zagg.hive.cells import DenseCells, RaggedCells
from zagg.hive.coverage import (
    read_root_coverage,
    refresh_root_coverage,
    update_root_coverage,
)
from zagg.hive.hashes import array_digest, combined_digest, content_hashes
from zagg.hive.layout import Geometry, dggs_attrs
from zagg.hive.leaf import write_leaf, write_leaf_cells
from zagg.hive.manifest import (
    ManifestConflictError,
    build_manifest,
    check_manifest,
    read_manifest,
    write_manifest,
)
from zagg.hive.paths import leaf_path
from zagg.hive.semantic import semantic_hash
from zagg.hive.stamp import read_stamp
from zagg.hive.stats import read_stats, write_stats
from zagg.hive.storage import StoreRoot
from zagg.hive.walk import walk_leaves

__all__ = [
    "DenseCells",
    "Geometry",
    "ManifestConflictError",
    "RaggedCells",
    "StoreRoot",
    "array_digest",
    "build_manifest",
    "check_manifest",
    "combined_digest",
    "content_hashes",
    "dggs_attrs",
    "leaf_path",
    "read_manifest",
    "read_root_coverage",
    "read_stamp",
    "read_stats",
    "refresh_root_coverage",
    "semantic_hash",
    "update_root_coverage",
    "walk_leaves",
    "write_leaf",
    "write_leaf_cells",
    "write_manifest",
    "write_stats",
]
