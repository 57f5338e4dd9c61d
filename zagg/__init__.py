"""zagg: aggregate point observations onto HEALPix morton cells, lazily, with dask.

The public names load their modules on first use, so ``import zagg`` (and the CLI, which
starts a run's cluster before it imports numba, dask and xarray) stays fast.
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "aggregate": ".engine.aggregate",
        "brief_warnings": ".errors",
        "ZaggWarning": ".errors",
        "load_config": ".config.model",
        "ConfigError": ".config.model",
        "cdf": ".read",
        "composition_lanes": ".read",
        "open_column": ".read.column",
        "open_hive": ".read",
        "open_icechunk": ".read.icechunk",
        "open_leaf": ".read",
        "open_store": ".read",
        "open_temporal": ".read.temporal",
        "open_level": ".read.levels",
        "open_pyramid": ".read.levels",
        "sweep": ".pyramid.sweep",
        "plot_map": ".read.plot",
        "quantile": ".read",
        "run": ".pipeline.run",
        "to_hive": ".engine.write",
    },
)
__version__ = "0.1.0"
