"""The engine: a config's plan, keying with mortie, the per-chunk keyed reduction
(blockwise), the per-shard tree combine, the occupied-cells collection and the
leaf writes (map_blocks per shard), with progress over dask's waits;
``zagg.aggregate`` and ``zagg.to_hive``.

May import the ground floor, checks, config, reducers, kernels, hive, windows,
sources and pyramid (leaf columns); never cluster, pipeline or cli.
"""
