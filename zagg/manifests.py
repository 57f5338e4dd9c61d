"""The store manifest a run writes, from its config: what identifies a store's contents.

Kept apart from the writer so a run can check an existing store before it imports dask,
numba or xarray (and before its cluster starts).
"""

from __future__ import annotations

from . import hive

#: data_source keys that say where and how points are fetched, not what they are: a store
#: filled region by region may read granules from another place, with other credentials
#: or another error policy, and its leaves do not change
PACKAGING_SOURCE_KEYS = ("input", "granules", "storage_options", "on_error")


def semantic_core(config_raw: dict, dataset: dict, sharded: bool) -> dict:
    """The part of a run's configuration that decides leaf contents (hashed into the store).

    Included: the data source (what is read and filtered), every aggregation field, the
    product identity and the leaf-shaping ``grid.sharded``. Excluded as packaging: where
    the points are fetched from and how (:data:`PACKAGING_SOURCE_KEYS`, credentials
    included), the orders (recorded and frozen separately), the store location and
    options, memory limits.
    """
    source = config_raw.get("data_source")
    if isinstance(source, dict):
        source = {k: v for k, v in source.items() if k not in PACKAGING_SOURCE_KEYS}
    return {
        "data_source": source,
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
