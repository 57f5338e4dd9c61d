"""One batch run: config → source points → aggregate → hive store, on a dask cluster.

A run is its plan (:mod:`zagg.pipeline.plan`, decided before any cluster starts) and an
:class:`Executor` that runs it: the cluster, the read, the aggregation and the writes, the
Icechunk commit and the chained sweep.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zagg.cluster.clients import cluster_for, connected
from zagg.config.model import Config
from zagg.pipeline import stream
from zagg.pipeline.gate import record_granules, selector, source_ids
from zagg.pipeline.plan import AUTO, RunPlan, plan_run
from zagg.pyramid.icechunk import after_run, enabled
from zagg.pyramid.icechunk_runs import finalize_run
from zagg.sources import registry

if TYPE_CHECKING:
    import xarray as xr

    from zagg.engine.write import RunSummary


def open_source(cfg: Config, *, shards=None, granules=None) -> xr.Dataset:
    """The points Dataset a config names, opened by its registered source
    (:mod:`zagg.sources.registry`): restricted to ``shards`` where the source can skip what
    cannot reach them (a catalog's footprints, a read plan's rows), and to the read units
    ``granules`` (ids) when given."""
    src = cfg.data_source
    return registry.of(src).open(
        src, shards=shards, shard_order=cfg.grid.shard_order, only=granules
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
    memory_budget=None,
    granules=None,
) -> RunSummary:
    """Aggregate a config's points into its hive store and return the run summary.

    ``scheduler`` is where the work runs: None for a new LocalCluster sized by ``workers``,
    ``threads`` and ``memory_limit``; a scheduler address; a cluster object; or a
    ``distributed.Client`` (a dask-gateway notebook's, say), which is used and left open.
    ``granules`` (a path, URL, glob or list) reads the user's own granules (or points
    file) in place of the location the config names, and ``catalog`` replaces the config's
    granule location by a catalog file; ``region`` (a
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
    :mod:`zagg.pipeline.timings`). ``memory_budget`` (a size such as ``"4GiB"`` or bytes,
    ``"auto"``, or ``"off"``; default: the config's ``output.memory_budget``, ``auto``)
    bounds the partial aggregates held at once: a granule run with a read plan that
    would hold more is read one group of shards after another
    (:mod:`zagg.pipeline.stream`), each point reaching the leaf it reaches in one pass.

    Re-runs write only what changed (:mod:`zagg.pipeline.gate`): a shard whose leaf was built by
    the same config from the same granules is current and not written again (with a
    catalog, its granules are not even read); a shard whose planned granules drop some its
    leaf was built from is refused (listed in a ``refusals_*.json`` at the store root)
    unless ``allow_contraction``. ``overwrite`` rewrites every shard regardless.

    A run is a plan (:func:`zagg.pipeline.plan.plan_run`: every check and decision that
    needs no computing, ``zagg run --plan`` prints it) and its execution
    (:class:`Executor`).
    """
    t0 = time.perf_counter()
    plan = plan_run(
        config,
        store=store,
        source=source,
        storage_options=storage_options,
        catalog=catalog,
        granules=granules,
        region=region,
        bbox=bbox,
        shards=shards,
        sweep=sweep,
        overwrite=overwrite,
        allow_contraction=allow_contraction,
        memory_budget=memory_budget,
    )
    executor = Executor(
        scheduler=scheduler,
        workers=workers,
        threads=threads,
        memory_limit=memory_limit,
        progress=progress,
        dashboard=dashboard,
        performance_report=performance_report,
        timings=timings,
    )
    return executor.execute(plan, t_start=t0)


@dataclass(frozen=True)
class Executor:
    """Where and how a :class:`~zagg.pipeline.plan.RunPlan` runs: its cluster (see
    :func:`run` for the knobs), the progress bars and what watches the run."""

    scheduler: object = None
    workers: int | None = None
    threads: int | None = None
    memory_limit: object = None
    progress: bool = True
    dashboard: bool = False
    performance_report: str | None = None
    timings: bool | None = None  # None: on the clusters the run starts
    #: the partial aggregates the run may hold at once, bytes (0: off; "auto": sized from
    #: the cluster; None: the plan's, RunPlan.budget); see zagg.pipeline.stream
    memory_budget: int | str | None = None

    def __post_init__(self):
        from zagg.pipeline.watch import check_watch

        check_watch(self.dashboard, self.performance_report)

    def execute(self, plan: RunPlan, t_start: float | None = None) -> RunSummary:
        """Run ``plan``: act on its re-run verdicts, then (unless every unit is current)
        start the cluster, read and aggregate the points, write the leaves and the store
        root's objects, commit the Icechunk companion and chain the sweep."""
        t0 = time.perf_counter() if t_start is None else t_start
        cfg = plan.config
        gate = plan.gate()
        if plan.verdicts is not None:
            gate.apply(plan.verdicts)
            if not plan.todo:  # the repo still catches up with leaves an earlier run left
                done = gate.summary(time.perf_counter() - t0)
                after_run(cfg, done, plan.store, plan.storage_options, plan.run_id)
                done = chain_sweep(plan, done)
                # the run's Icechunk tag
                return finalize_run(cfg, done, plan.store, plan.storage_options, plan.run_id)
        from zagg.pipeline.warm import notice_if_cold
        from zagg.pipeline.watch import watching

        notice_if_cold()  # a fresh environment compiles numba's kernels during this run
        with (
            cluster_for(
                self.scheduler,
                workers=self.workers,
                threads=self.threads,
                memory_limit=self.memory_limit,
                dashboard=self.dashboard,
            ) as cluster,
            connected(cluster) as client,
            watching(
                client,
                dashboard=self.dashboard,
                performance_report=self.performance_report,
                timings=self.scheduler is None if self.timings is None else self.timings,
            ) as watch,
        ):
            from zagg.sources.granules import skip_damaged

            if plan.source is None:
                ds = open_source(cfg, shards=plan.read_shards, granules=plan.read_granules)
            else:
                ds = plan.source
            budget = stream.memory_budget(self.budget(plan), client)
            streaming = stream.plan_groups(
                cfg, ds, budget, shards=plan.read_shards, progress=self.progress
            )
            if streaming is None:
                # under on_error: skip, a granule found damaged while it is read (a chunk
                # that does not decompress) is left out, recorded, and the run redone
                # without it
                summary = skip_damaged(ds, lambda ds: self.aggregate_and_write(plan, gate, ds, t0))
            else:
                summary = self.write_groups(plan, gate, streaming, t0)
            if plan.planned is not None:
                gate.record_empty(plan.planned, plan.todo, summary)
            elif gate is not None:
                self.refuse_vanished(plan, gate, ds, summary)
            watch.finish(summary)
            after_run(cfg, summary, plan.store, plan.storage_options, plan.run_id)
            summary = chain_sweep(plan, summary)
            # the run's Icechunk tag
            return finalize_run(cfg, summary, plan.store, plan.storage_options, plan.run_id)

    @staticmethod
    def refuse_vanished(plan: RunPlan, gate, ds, summary) -> None:
        """After a run that found its units by reading: the store's units its input no
        longer reaches, built from granules that are gone from it, are refused and named
        (:meth:`zagg.pipeline.gate.RunGate.refuse_vanished`)."""
        ids = source_ids(plan.config, ds, from_config=plan.source is None)
        if ids is None:
            return  # points without granule ids: nothing to compare a leaf's record with
        failed = [f.get("granule") for f in summary.failed_granules]
        gate.refuse_vanished([*ids, *(f for f in failed if f)], plan.shards)
        gate.finish(summary)

    def budget(self, plan: RunPlan) -> int | None:
        """The run's memory budget in bytes: the executor's, else the plan's (None: auto;
        0: off)."""
        if self.memory_budget is None:
            return plan.budget
        return None if self.memory_budget == AUTO else self.memory_budget

    def write_groups(self, plan: RunPlan, gate, streaming, t0: float) -> RunSummary:
        """Aggregate and write a run one shard group after another
        (:mod:`zagg.pipeline.stream`); the summary of them all."""

        def one(ds, group, earlier):
            return self.aggregate_and_write(
                plan, gate, ds, t0, span=group.span, earlier=earlier, finish=False
            )

        summaries, granules = stream.run_groups(streaming, one, progress=self.progress)
        summary = stream.merged(summaries, streaming, granules, time.perf_counter() - t0)
        if gate is not None:
            gate.finish(summary)
        return summary

    def aggregate_and_write(
        self, plan: RunPlan, gate, ds, t0: float, span=None, earlier=(), finish=True
    ) -> RunSummary:
        """Aggregate ``ds`` and write its units as they are aggregated: nothing here keeps
        them, so each input chunk's partial is freed once the shards it feeds are written.
        ``span`` keeps one shard group's shards; ``earlier`` are the records of the leaves
        the run's earlier groups wrote (the store root lists them all); ``finish`` puts
        the gate's verdicts on the summary (a run in groups does once, at its end)."""
        from zagg.engine.aggregate import shard_collection
        from zagg.engine.write import write_shards

        cfg = plan.config
        cfg.check_dataset(ds)
        ids = source_ids(cfg, ds, from_config=plan.source is None)
        shards = shard_collection(
            ds,
            cfg,
            shards=plan.read_shards,
            progress=self.progress,
            select=selector(gate, plan.todo, ids),
            spec=plan.spec,
            span=span,
        )
        record_granules(shards, plan.planned, ids)
        summary = write_shards(
            shards,
            plan.store,
            storage_options=plan.storage_options,
            progress=self.progress,
            t_start=t0,
            versioned=plan.spec.leaf_versions,
            run_id=plan.run_id,
            current=[*earlier, *(() if gate is None else gate.current())],
        )
        if gate is not None and finish:
            gate.finish(summary)
        return summary


#: how often a run's chained sweep asks again for a lease another sweep holds
SWEEP_RETRY_S = 1.0


def chain_sweep(plan: RunPlan, summary: RunSummary):
    """The sweep a run chains after its leaves (``plan.sweep``: by default whenever a
    pyramid is declared; ``output.sweep: false`` or ``sweep=False`` opts out), so that every
    level the manifest declares is built; scoped to the shards the run covers: those it
    wrote and those it found current (a killed run may have stamped leaves it never swept;
    nodes already folded from the same children are not rewritten). A run that does not
    sweep records its leaf columns as the built part of the pyramid."""
    from zagg.pipeline.reruns import unit_of
    from zagg.pyramid.sweep import record_columns
    from zagg.pyramid.sweep import sweep as run_sweep

    covered = {r["shard_id"] for r in summary.records}
    if summary.gate is not None:
        covered |= {unit_of(u)[0] for u in summary.gate.of("current")}
    if not plan.sweep:
        if covered and plan.spec.pyramid is not None:
            record_columns(plan.store, storage_options=plan.storage_options)
        return summary
    from zagg.pyramid.lease import SweepRefused

    # another run's sweep of this store may hold its lease: ours waits its turn (the
    # holder finishes, or its lease goes stale and is claimed), then folds our shards
    while True:
        try:
            summary.sweep = run_sweep(
                plan.store,
                storage_options=plan.storage_options,
                scope=sorted(covered) or None,
                icechunk=enabled(plan.config.output.icechunk),
            )
            return summary
        except SweepRefused:
            time.sleep(SWEEP_RETRY_S)
