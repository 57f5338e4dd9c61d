"""Read a morton-hive store back into xarray: sparse and lazy by default.

- :func:`open_hive` — the store's occupied cells (or, ``dense=True``, every leaf's cells)
  as one Dataset with one dask chunk per leaf; ``region=``/``bbox=``/``cells=`` subsets,
  ``verify=True`` checks the content hashes as it reads;
- :func:`open_leaf` — one shard's leaf; :func:`open_store` — a store root as a DataTree;
- :func:`quantile`, :func:`cdf` — vectorised t-digest evaluation per cell;
- :func:`composition_lanes` — composition words split into their named lanes;
- :func:`open_temporal` — when a store was observed and how often (the §10 records);
- :func:`open_column` — every group of one leaf column, with its provenance.

Modules: ``leaves`` (discovery, stamps, coverage), ``region``, ``schema`` (array metadata
and spec checks), ``loaders`` (the per-leaf tasks), ``verify``, ``build`` (the Dataset),
``raster`` (``(time, cells)`` leaves), ``tree``, ``stats``, ``fields``, ``temporal``, ``column``, ``levels``.
"""

from zagg.read.fields import composition_lanes, decode_digest
from zagg.read.open import open_hive, open_leaf
from zagg.read.region import RegionError
from zagg.read.stats import cdf, quantile
from zagg.read.tree import open_store
from zagg.read.verify import IntegrityError

__all__ = [
    "IntegrityError",
    "RegionError",
    "cdf",
    "composition_lanes",
    "decode_digest",
    "open_hive",
    "open_leaf",
    "open_store",
    "quantile",
]
