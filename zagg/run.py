"""One batch run: config → source points → aggregate → hive store, on a dask cluster."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING

from . import hive
from .checks import require_dataset
from .cluster import cluster_for, connected
from .config import Config, ConfigError, load_config
from .hive.paths import MANIFEST_KEY
from .manifests import check_store

if TYPE_CHECKING:
    import xarray as xr

    from .write import RunSummary


def open_source(cfg: Config, *, shards=None) -> xr.Dataset:
    """The points Dataset a config names: HDF5 granules (only those a catalog says touch
    ``shards``, when given), the built-in generator, or a zarr/netCDF input."""

    src = cfg.data_source
    if src.granules is not None:
        # the granule source decides what the shards let it skip (a catalog's footprints,
        # a read plan's rows): zagg.sources.granules.open_for_config
        from .sources.granules import open_for_config

        return open_for_config(cfg, shards=shards)
    if src.synthetic is not None:
        from .sources.synthetic import DEFAULT_REGION, synthetic_photons

        s = src.synthetic
        return synthetic_photons(
            int(s["points"]),
            tuple(s.get("region") or DEFAULT_REGION),
            chunk_size=int(s.get("chunk_size", 1_000_000)),
            seed=int(s.get("seed", 0)),
            noise_fraction=float(s.get("noise_fraction", 0.2)),
        )
    if src.input is not None:
        from .sources.inputs import open_input

        return open_input(src.input, src.storage_options)
    raise ConfigError(_NO_INPUT)


_NO_INPUT = ("config key 'data_source': no input given; set 'input' (a zarr store or netCDF "
             "file) or 'synthetic' (the built-in generator), or pass a Dataset to "
             "zagg.aggregate (or zagg.run(..., source=ds)) yourself")


def check_source(cfg: Config) -> None:
    """Refuse, before any cluster starts, a config that names no points or a local input
    that does not exist (remote inputs are checked when opened)."""
    src = cfg.data_source
    if src.granules is not None or src.synthetic is not None:
        return
    if src.input is None:
        raise ConfigError(_NO_INPUT)
    if "://" not in src.input and not os.path.exists(src.input):
        raise ConfigError(f"config key 'data_source.input': {src.input!r} does not exist; "
                          "give the path of a zarr store or netCDF file with the points")


def run(config, *, store: str | None = None, source: xr.Dataset | None = None,
        scheduler=None, workers: int | None = None, threads: int | None = None,
        memory_limit=None, progress: bool = True, storage_options=None,
        catalog: str | None = None, region: str | None = None, bbox=None,
        shards=None, sweep: bool | None = None, dashboard: bool = False,
        performance_report: str | None = None, timings: bool | None = None) -> RunSummary:
    """Aggregate a config's points into its hive store and return the run summary.

    ``scheduler`` is where the work runs: None for a new LocalCluster sized by ``workers``,
    ``threads`` and ``memory_limit``; a scheduler address; a cluster object; or a
    ``distributed.Client`` (a dask-gateway notebook's, say), which is used and left open.
    ``catalog`` replaces the config's granule location by a catalog file; ``region`` (a
    GeoJSON polygon file), ``bbox`` (``"lon0,lat0,lon1,lat1"``) or ``shards`` restrict the
    run to the covering shards at the shard order, and with a catalog only granules that
    touch them are read. The store's manifest is checked before any work starts, so an
    incompatible existing store is refused without computing anything. ``sweep`` (default:
    the config's ``output.sweep``) builds the pyramid ladder after the leaves, on the same
    cluster (its summary is ``summary.sweep``). ``dashboard`` serves a local cluster's
    dashboard on 127.0.0.1 and prints its link; ``performance_report`` writes distributed's
    performance report of the run to that HTML file; ``timings`` (default: on the clusters
    the run starts) records the tasks' own timings, shown as ``summary.stages`` (see
    :mod:`zagg.timings`).
    """
    t0 = time.perf_counter()
    cfg = load_config(config)
    if catalog is not None:
        if cfg.data_source.granules is None:
            raise ConfigError("--catalog needs a granule data_source (data_source.granules)")
        granules = dataclasses.replace(cfg.data_source.granules, granules=str(catalog))
        cfg = dataclasses.replace(cfg, data_source=dataclasses.replace(
            cfg.data_source, granules=granules))
    store = store or cfg.output.store
    if not store:
        raise ConfigError("config key 'output.store': no store given; set it or pass --store")
    if region is not None and bbox is not None:
        raise ConfigError("give --region or --bbox, not both: a run covers one region")
    if region is not None or bbox is not None:
        from .regions import region_shards

        shards = region_shards(geojson=region, bbox=bbox, order=cfg.grid.parent_order)
    if source is None:
        check_source(cfg)
    else:
        require_dataset(source, "zagg.run(source=...)", "open the points first (e.g. "
                        "xr.open_zarr(path)), or leave source out and name them in the "
                        "config's data_source.input")
    options = dict(cfg.output.storage_options) if storage_options is None else storage_options
    probe = {"grid": cfg.grid.as_dict(), "config": cfg.raw,
             "dataset": {"short_name": cfg.output.short_name, "version": cfg.output.version}}
    root = hive.StoreRoot(store, options)
    hive.check_store_root(root, MANIFEST_KEY)
    check_store(root, probe)
    from .watch import check_watch, watching

    check_watch(dashboard, performance_report)
    from .warm import notice_if_cold

    notice_if_cold()  # a fresh environment compiles numba's kernels during this run
    with cluster_for(scheduler, workers=workers, threads=threads, memory_limit=memory_limit,
                     dashboard=dashboard) as cluster, connected(cluster) as client, \
            watching(client, dashboard=dashboard, performance_report=performance_report,
                     timings=scheduler is None if timings is None else timings) as watch:
        ds = open_source(cfg, shards=shards) if source is None else source
        from .aggregate import shard_collection
        from .sources.granules import skip_damaged
        from .write import write_shards

        def aggregate_and_write(ds):
            # the shards are written as they are aggregated, and nothing here keeps them:
            # each input chunk's partial is freed as soon as the shards it feeds are written
            cfg.check_dataset(ds)
            return write_shards(shard_collection(ds, cfg, shards=shards, progress=progress),
                                store, storage_options=options, progress=progress,
                                t_start=t0, versioned=cfg.output.leaf_versions)

        # under on_error: skip, a granule found damaged while it is read (a chunk that
        # does not decompress) is left out, recorded, and the run redone without it
        summary = skip_damaged(ds, aggregate_and_write)
        watch.finish(summary)
        return chain_sweep(cfg, summary, store, options, sweep)


def chain_sweep(cfg: Config, summary: RunSummary, store, options, sweep: bool | None):
    """The sweep a run chains after its leaves (``output.sweep: stages`` or ``sweep=True``),
    scoped to the shards the run wrote."""
    if not (cfg.output.sweep == "stages" if sweep is None else sweep):
        return summary
    if cfg.output.pyramid is None:
        raise ConfigError("a sweep after the run needs a pyramid: output.pyramid is false")
    from .pyramid.sweep import sweep as run_sweep

    written = [r["shard_id"] for r in summary.records]
    summary.sweep = run_sweep(store, storage_options=options, scope=written or None)
    return summary
