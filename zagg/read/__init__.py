"""Read a morton-hive store back into xarray: sparse and lazy by default.

- :func:`open_hive` — the store's occupied cells (or, ``dense=True``, every leaf's cells)
  as one Dataset with one dask chunk per leaf; ``region=``/``bbox=``/``cells=`` subsets,
  ``verify=True`` checks the content hashes as it reads;
- :func:`open_leaf` — one shard's leaf; :func:`open_store` — a store root as a DataTree;
- :func:`quantile`, :func:`cdf` — vectorised t-digest evaluation per cell;
- :func:`composition_lanes` — composition words split into their named lanes;
- :func:`open_temporal` — when a store was observed and how often (the §10 records);
- :func:`open_column` — every group of one leaf column, with its provenance.

Modules: ``leaves`` (discovery, stamps, coverage), ``region``, ``build`` (the Dataset),
``raster`` (``(time, cells)`` leaves), ``tree``, ``stats``, ``fields``, ``temporal``, ``column``, ``levels``, ``inspect``
(``zagg inspect``/``verify``), ``plot`` (maps). A leaf's schema, loaders and hash checks
are the format's own (:mod:`zagg.hive.schema`, :mod:`zagg.hive.loaders`,
:mod:`zagg.hive.verify`), shared with the sweep.

May import the ground floor, checks, hive, kernels, windows, sources (named
regions) and pyramid (the declaration); never the engine or a run.
"""

from zagg.hive.verify import IntegrityError
from zagg.read.fields import composition_lanes, decode_digest
from zagg.read.open import open_hive, open_leaf
from zagg.read.region import RegionError
from zagg.read.stats import cdf, quantile
from zagg.read.tree import open_store

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
