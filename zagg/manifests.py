"""The store manifest a run writes, from its config: what identifies a store's contents.

Kept apart from the writer so a run can check an existing store before it imports dask,
numba or xarray (and before its cluster starts).
"""

from __future__ import annotations

from . import hive


def semantic_core(config_raw: dict, dataset: dict, sharded: bool) -> dict:
    """The part of a run's configuration that decides leaf contents (hashed into the store).

    Included: the data source (what is read and filtered), every aggregation field, the
    product identity and the leaf-shaping ``grid.sharded``. Excluded as packaging: the
    orders (recorded and frozen separately), the store location and options, memory limits.
    """
    return {
        "data_source": config_raw.get("data_source"),
        "aggregation": config_raw.get("aggregation"),
        "dataset": dataset,
        "grid": {"sharded": bool(sharded)},
    }


def manifest_for(zattrs: dict) -> dict:
    """The store manifest a leaf Dataset's attrs describe."""
    grid = zattrs["grid"]
    core = semantic_core(zattrs.get("config") or {}, zattrs["dataset"], grid.get("sharded", True))
    return hive.build_manifest(dataset=zattrs["dataset"], semantic_hash=hive.semantic_hash(core),
                               cell_order=grid["child_order"], shard_order=grid["parent_order"])
