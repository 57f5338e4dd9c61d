"""The morton-hive store format: paths, manifest, leaf writer, stamp, coverage, hashes.

Task side (one dask task per shard): :func:`write_shard_leaf` (a run's :class:`LeafSpec`
and the shard's :class:`ShardLeaf`), :func:`write_leaf_cells` (from the occupied cells) or
:func:`write_leaf` (from dense arrays) writes one self-describing leaf, versioned or not
(:mod:`zagg.hive.versions`), and returns a small record. Client side, before any leaf:
:func:`build_manifest` + :func:`write_manifest` (or the read-only :func:`check_manifest`);
after the leaves: :func:`update_root_coverage`. Nothing here knows about dask.

May import the ground floor, checks and windows (the temporal records' algebra);
never dask, the engine or a run.
"""

from zagg.lazy import lazy_package

# public names load their modules on first use: checking a store's manifest needs neither
# numba nor mortie, which the leaf writer and coverage bring in
lazy_package(
    __name__,
    {
        name: f".{module}"
        for module, names in {
            "cells": ["DenseCells", "RaggedCells"],
            "coverage": ["read_root_coverage", "refresh_root_coverage", "update_root_coverage"],
            "hashes": ["array_digest", "combined_digest", "content_hashes"],
            "layout": ["dggs_attrs"],
            "leaf": ["LeafSpec", "ShardLeaf", "write_leaf", "write_leaf_cells", "write_shard_leaf"],
            "manifest": [
                "ManifestConflictError",
                "build_manifest",
                "check_manifest",
                "read_manifest",
                "write_manifest",
            ],
            "paths": ["leaf_path"],
            "semantic": ["semantic_hash"],
            "stamp": ["read_stamp"],
            "stats": ["read_stats", "write_stats"],
            "storage": ["StoreRoot", "StoreRootError", "check_store_root"],
            "walk": ["walk_leaves"],
        }.items()
        for name in names
    },
)
