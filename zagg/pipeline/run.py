"""One batch run: config → source points → aggregate → hive store, on a dask cluster."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING

from zagg import hive
from zagg.checks.arguments import require_dataset
from zagg.cluster.clients import cluster_for, connected
from zagg.config.model import Config, ConfigError, load_config
from zagg.engine.manifest import check_store, manifest_for
from zagg.hive.paths import MANIFEST_KEY
from zagg.hive.versions import new_run_id
from zagg.pyramid.icechunk import after_run, enabled
from zagg.pyramid.icechunk_runs import finalize_run

if TYPE_CHECKING:
    import xarray as xr

    from zagg.engine.write import RunSummary


def open_source(cfg: Config, *, shards=None, granules=None) -> xr.Dataset:
    """The points Dataset a config names: HDF5 granules (only those a catalog says touch
    ``shards``, when given, and only the ids ``granules`` when given), the built-in
    generator, or a zarr/netCDF input."""

    src = cfg.data_source
    if src.granules is not None:
        # the granule source decides what the shards let it skip (a catalog's footprints,
        # a read plan's rows): zagg.sources.granules.open_for_config
        from zagg.sources.granules import open_for_config

        return open_for_config(cfg, shards=shards, only=granules)
    if src.synthetic is not None:
        from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

        s = src.synthetic
        return synthetic_photons(
            int(s["points"]),
            tuple(s.get("region") or DEFAULT_REGION),
            chunk_size=int(s.get("chunk_size", 1_000_000)),
            seed=int(s.get("seed", 0)),
            noise_fraction=float(s.get("noise_fraction", 0.2)),
        )
    if src.input is not None:
        from zagg.sources.inputs import open_input

        return open_input(src.input, src.storage_options)
    raise ConfigError(_NO_INPUT)


_NO_INPUT = (
    "config key 'data_source': no input given; set 'input' (a zarr store or netCDF "
    "file) or 'synthetic' (the built-in generator), or pass a Dataset to "
    "zagg.aggregate (or zagg.run(..., source=ds)) yourself"
)


def check_source(cfg: Config) -> None:
    """Refuse, before any cluster starts, a config that names no points or a local input
    that does not exist (remote inputs are checked when opened)."""
    src = cfg.data_source
    if src.granules is not None or src.synthetic is not None:
        return
    if src.input is None:
        raise ConfigError(_NO_INPUT)
    if "://" not in src.input and not os.path.exists(src.input):
        raise ConfigError(
            f"config key 'data_source.input': {src.input!r} does not exist; "
            "give the path of a zarr store or netCDF file with the points"
        )


def run(
    config,
    *,
    store: str | None = None,
    source: xr.Dataset | None = None,
    scheduler=None,
    workers: int | None = None,
    threads: int | None = None,
    memory_limit=None,
    progress: bool = True,
    storage_options=None,
    catalog: str | None = None,
    region: str | None = None,
    bbox=None,
    shards=None,
    sweep: bool | None = None,
    overwrite: bool = False,
    allow_contraction: bool = False,
    dashboard: bool = False,
    performance_report: str | None = None,
    timings: bool | None = None,
) -> RunSummary:
    """Aggregate a config's points into its hive store and return the run summary.

    ``scheduler`` is where the work runs: None for a new LocalCluster sized by ``workers``,
    ``threads`` and ``memory_limit``; a scheduler address; a cluster object; or a
    ``distributed.Client`` (a dask-gateway notebook's, say), which is used and left open.
    ``catalog`` replaces the config's granule location by a catalog file; ``region`` (a
    GeoJSON polygon file), ``bbox`` (``"lon0,lat0,lon1,lat1"``) or ``shards`` (shard ids at
    the shard order, a list or comma-separated text) restrict the run to those shards, and
    with a catalog only granules that touch them are read. The store's manifest is checked before any work starts, so an
    incompatible existing store is refused without computing anything. ``sweep`` (default:
    the config's ``output.sweep``, on whenever a pyramid is declared) builds the pyramid
    ladder after the leaves, on the same cluster (its summary is ``summary.sweep``);
    ``sweep=False`` leaves it to a later ``zagg sweep``. ``dashboard`` serves a local cluster's
    dashboard on 127.0.0.1 and prints its link; ``performance_report`` writes distributed's
    performance report of the run to that HTML file; ``timings`` (default: on the clusters
    the run starts) records the tasks' own timings, shown as ``summary.stages`` (see
    :mod:`zagg.pipeline.timings`).

    Re-runs write only what changed (:mod:`zagg.pipeline.gate`): a shard whose leaf was built by
    the same config from the same granules is current and not written again (with a
    catalog, its granules are not even read); a shard whose planned granules drop some its
    leaf was built from is refused (listed in a ``refusals_*.json`` at the store root)
    unless ``allow_contraction``. ``overwrite`` rewrites every shard regardless.
    """
    t0 = time.perf_counter()
    cfg = load_config(config)
    if catalog is not None:
        if cfg.data_source.granules is None:
            raise ConfigError("--catalog needs a granule data_source (data_source.granules)")
        granules = dataclasses.replace(cfg.data_source.granules, granules=str(catalog))
        cfg = dataclasses.replace(
            cfg, data_source=dataclasses.replace(cfg.data_source, granules=granules)
        )
    store = store or cfg.output.store
    if not store:
        raise ConfigError("config key 'output.store': no store given; set it or pass --store")
    given = [n for n, v in (("--region", region), ("--bbox", bbox), ("--shards", shards)) if v]
    if len(given) > 1:
        raise ConfigError(
            f"give only one of --region, --bbox and --shards (got {' and '.join(given)}): "
            "a run covers one region"
        )
    if region is not None or bbox is not None:
        from zagg.sources.regions import region_shards

        shards = region_shards(geojson=region, bbox=bbox, order=cfg.grid.parent_order)
    elif shards is not None:
        shards = checked_shards(shards, cfg.grid.parent_order)
    if source is None:
        check_source(cfg)
    else:
        require_dataset(
            source,
            "zagg.run(source=...)",
            "open the points first (e.g. "
            "xr.open_zarr(path)), or leave source out and name them in the "
            "config's data_source.input",
        )
    options = dict(cfg.output.storage_options) if storage_options is None else storage_options
    probe = {
        "grid": cfg.grid.as_dict(),
        "config": cfg.raw,
        "dataset": {"short_name": cfg.output.short_name, "version": cfg.output.version},
    }
    root = hive.StoreRoot(store, options)
    hive.check_store_root(root, MANIFEST_KEY)
    check_store(root, probe)
    from zagg.pipeline.gate import RunGate, catalog_plan, found_plan, source_ids
    from zagg.pipeline.reruns import recorded_ids, unit_of
    from zagg.pipeline.watch import check_watch, watching

    check_watch(dashboard, performance_report)
    run_id = new_run_id()
    gate = (
        None
        if overwrite
        else RunGate(
            root,
            manifest_for(probe)["semantic_hash"],
            run_id,
            allow_contraction,
            column=cfg.output.pyramid is not None,
        )
    )
    # with a catalog every shard's granules are known before any is opened: gate first
    planned = catalog_plan(cfg, shards) if gate is not None and source is None else None
    timed = any(f.timed for f in cfg.fields.values())  # leaves carry temporal records
    todo = only = None
    if planned is not None:
        todo = gate.decide(planned)
        if not todo:  # the repo still catches up with leaves an earlier run left unindexed
            done = gate.summary(time.perf_counter() - t0, cfg.grid.parent_order, timed)
            after_run(cfg, done, store, options, run_id)
            done = chain_sweep(cfg, done, store, options, sweep)
            return finalize_run(cfg, done, store, options, run_id)  # the run's Icechunk tag
        # read only the shards and granules of the units to write
        shards = sorted({unit_of(u)[0] for u in todo})
        only = sorted({g for u in todo for g in planned[u]})
    from zagg.pipeline.warm import notice_if_cold

    notice_if_cold()  # a fresh environment compiles numba's kernels during this run
    with (
        cluster_for(
            scheduler,
            workers=workers,
            threads=threads,
            memory_limit=memory_limit,
            dashboard=dashboard,
        ) as cluster,
        connected(cluster) as client,
        watching(
            client,
            dashboard=dashboard,
            performance_report=performance_report,
            timings=scheduler is None if timings is None else timings,
        ) as watch,
    ):
        ds = open_source(cfg, shards=shards, granules=only) if source is None else source
        from zagg.engine.aggregate import shard_collection
        from zagg.engine.write import write_shards
        from zagg.sources.granules import skip_damaged

        def aggregate_and_write(ds):
            # the shards are written as they are aggregated, and nothing here keeps them:
            # each input chunk's partial is freed as soon as the shards it feeds are written
            cfg.check_dataset(ds)
            ids = source_ids(cfg, ds, from_config=source is None)
            select = None
            if todo is not None:  # a planned run builds its units to write, no others

                def select(found, contributors):
                    return [u for u in found if u in todo]
            elif gate is not None and ids is not None:
                # gate the shards the read finds (a Dataset with no granule ids has no
                # identity to compare: every shard is written)
                def select(found, contributors):
                    return gate.decide(
                        found_plan(
                            contributors, found, ids, lambda sid: recorded_ids(root, sid) or ()
                        )
                    )

            shards_ = shard_collection(ds, cfg, shards=shards, progress=progress, select=select)
            record_granules(shards_, planned, ids)
            summary = write_shards(
                shards_,
                store,
                storage_options=options,
                progress=progress,
                t_start=t0,
                versioned=cfg.output.leaf_versions,
                run_id=run_id,
                current=() if gate is None else gate.current(timed),
            )
            if gate is not None and gate.gate is not None:
                summary.gate = gate.gate
                summary.shards = max(summary.shards, len(gate.gate.verdicts))
            return summary

        # under on_error: skip, a granule found damaged while it is read (a chunk that
        # does not decompress) is left out, recorded, and the run redone without it
        summary = skip_damaged(ds, aggregate_and_write)
        if planned is not None:
            gate.record_empty(planned, todo, summary)
        watch.finish(summary)
        after_run(cfg, summary, store, options, run_id)
        summary = chain_sweep(cfg, summary, store, options, sweep)
        return finalize_run(cfg, summary, store, options, run_id)  # the run's Icechunk tag


def checked_shards(shards, order: int) -> list[str]:
    """The decimal ids of ``shards`` (decimal ids, comma-separated text or morton words),
    each refused unless it is a shard at the store's shard order."""
    import numpy as np

    from zagg import grid as G

    if isinstance(shards, str):
        shards = [s.strip() for s in shards.split(",") if s.strip()]
    example = "e.g. --shards -5121132231,-5121132232"
    try:
        words = G.as_words(shards)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--shards: {exc}; list shard ids, {example}") from None
    if not words.size:
        raise ConfigError(f"--shards: no shard id given; {example}")
    orders = (words & np.uint64(63)).tolist()  # a word's low six bits: its order
    wrong = [sid for sid, o in zip(G.to_decimal(words), orders, strict=True) if o != order]
    if wrong:
        raise ConfigError(
            f"--shards: {wrong[0]} is not a shard of this config: its shards are order "
            f"{order} (output.grid.parent_order), ids of {order + 1} digits after the base "
            f"cell; {example} (zagg inspect STORE lists a store's leaves)"
        )
    return sorted(set(G.to_decimal(words)))


def record_granules(shards, planned: dict | None, ids: list[str] | None) -> None:
    """The granule ids each leaf records (its identity's second half): with a catalog
    plan, the planned ids of its shard that were read (a granule that failed to read is
    left out, so the next run retries it); else the granules that fed it, or the one
    granule a single-granule source is."""
    meta = shards.meta
    failed = {f.get("granule") for f in meta.get("failed_granules") or ()}
    if planned is not None:
        meta["shard_granules"] = {
            u: [i for i in planned.get(u, ()) if i not in failed] for u in shards.unit_names
        }
    elif meta.get("shard_granules") is None and ids is not None:
        meta["shard_granules"] = {u: list(ids) for u in shards.unit_names}


#: how often a run's chained sweep asks again for a lease another sweep holds
SWEEP_RETRY_S = 1.0


def chain_sweep(cfg: Config, summary: RunSummary, store, options, sweep: bool | None):
    """The sweep a run chains after its leaves (by default whenever a pyramid is declared;
    ``output.sweep: false`` or ``sweep=False`` opts out), so that every level the manifest
    declares is built; scoped to the shards the run covers: those it wrote and those it
    found current (a killed run may have stamped leaves it never swept; nodes already
    folded from the same children are not rewritten). A run that does not sweep records
    its leaf columns as the built part of the pyramid."""
    wanted = cfg.output.sweep == "stages" if sweep is None else sweep
    if wanted and cfg.output.pyramid is None:
        raise ConfigError(
            "a sweep after the run needs a pyramid: output.pyramid is false; "
            "declare a pyramid or run without --sweep"
        )
    from zagg.pipeline.reruns import unit_of
    from zagg.pyramid.sweep import record_columns
    from zagg.pyramid.sweep import sweep as run_sweep

    covered = {r["shard_id"] for r in summary.records}
    if summary.gate is not None:
        covered |= {unit_of(u)[0] for u in summary.gate.of("current")}
    if not wanted:
        if covered and cfg.output.pyramid is not None:
            record_columns(store, storage_options=options)
        return summary
    from zagg.pyramid.lease import SweepRefused

    # another run's sweep of this store may hold its lease: ours waits its turn (the
    # holder finishes, or its lease goes stale and is claimed), then folds our shards
    while True:
        try:
            summary.sweep = run_sweep(
                store,
                storage_options=options,
                scope=sorted(covered) or None,
                icechunk=enabled(cfg.output.icechunk),
            )
            return summary
        except SweepRefused:
            time.sleep(SWEEP_RETRY_S)
