"""A run's plan: what ``zagg.run`` will do, decided before any cluster starts.

:func:`plan_run` takes a run's arguments and settles everything that needs no computing:
the config and its store spec, the store and its manifest check, the region's shards, the
source, whether the pyramid is swept; with a catalog it also plans each unit's granules and
asks the re-run gate for their verdicts (reading the leaves' sidecars, nothing else). The
:class:`RunPlan` it returns is pure (nothing written, nothing started) and printable
(``zagg run --plan``); :mod:`zagg.pipeline.run` executes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from zagg import hive
from zagg.checks.arguments import require_dataset
from zagg.config.model import Config, ConfigError, load_config, parse_memory_budget
from zagg.config.store import StoreSpec
from zagg.engine.manifest import check_store
from zagg.hive.paths import MANIFEST_KEY
from zagg.hive.versions import new_run_id
from zagg.pipeline.gate import RunGate, catalog_ids, catalog_plan
from zagg.pipeline.reruns import CURRENT, REFUSED, REWRITE, Verdict, unit_of
from zagg.sources import registry

_SHOWN = 5  # ids a plan lists per line


@dataclass(frozen=True)
class RunPlan:
    """What one run does: its config and store spec, the store, the points, the shards and
    units it covers (with their re-run verdicts when a catalog lets them be known before
    reading), and what the pyramid builds."""

    config: Config
    spec: StoreSpec
    root: hive.StoreRoot
    storage_options: Mapping = field(repr=False)
    run_id: str
    source: object = field(default=None, repr=False)  # a Dataset passed in (None: the config's)
    #: the shards the run is restricted to (None: wherever the points fall)
    shards: tuple[str, ...] | None = None
    region: str | None = None  # how the restriction was given, for the printout
    existing: Mapping | None = field(default=None, repr=False)  # the store's manifest
    gated: bool = True  # False: --overwrite, every unit rewritten
    allow_contraction: bool = False
    #: per unit (its leaf stem) the catalogued granules planned for it (None: known only
    #: once the points are read)
    planned: Mapping[str, tuple[str, ...]] | None = field(default=None, repr=False)
    verdicts: Mapping[str, Verdict] | None = field(default=None, repr=False)
    sweep: bool = False  # the sweep is chained after the leaves
    #: the run's memory_budget argument, checked (None: the config's output.memory_budget)
    memory_budget: int | str | None = None

    @property
    def budget(self) -> int | None:
        """The run's memory budget in bytes (None: auto, sized from the cluster; 0: off):
        the run's ``memory_budget``, else the config's."""
        value = (
            self.config.output.memory_budget if self.memory_budget is None else self.memory_budget
        )
        return None if value == AUTO else value

    @property
    def store(self) -> str:
        return self.root.url

    @property
    def todo(self) -> frozenset[str] | None:
        """The units the run writes, when known before reading (None: decided after)."""
        if self.verdicts is None:
            return None
        return frozenset(u for u, v in self.verdicts.items() if v.kind == REWRITE)

    @property
    def read_shards(self) -> list[str] | None:
        """The shards whose points are read: those of the units to write when they are
        known, else the run's restriction (None: every shard)."""
        todo = self.todo
        if todo is None:
            return None if self.shards is None else list(self.shards)
        return sorted({unit_of(u)[0] for u in todo})

    @property
    def read_granules(self) -> list[str] | None:
        """The granules read, when the units to write are known (None: every granule the
        source names for :attr:`read_shards`)."""
        todo = self.todo
        if todo is None:
            return None
        return sorted({g for u in todo for g in self.planned[u]})

    def gate(self) -> RunGate | None:
        """A fresh re-run gate for the execution (None: --overwrite)."""
        if not self.gated:
            return None
        return RunGate(self.root, self.spec, self.run_id, self.allow_contraction)

    def lines(self) -> list[str]:
        """The plan in words (``zagg run --plan`` prints them)."""
        spec, grid = self.spec, self.spec.grid
        names = list(self.config.fields)
        siblings = len(spec.fields) - len(names)
        lines = [
            f"store           {self.store}",
            f"  manifest      {self._manifest_line()}",
            f"product         {spec.dataset['short_name']} {spec.dataset['version']}: "
            f"{', '.join(names)}" + (f" (+{siblings} sibling arrays)" if siblings else ""),
            f"grid            shards at order {grid.shard_order}, cells at order "
            f"{grid.cell_order} ({grid.cells_per_shard:,} per leaf, "
            f"{grid.inner_chunks:,} inner chunks)",
            f"inputs          {self._source_line()}",
            f"shards          {self._shards_line()}",
            *self._units_lines(),
            f"windows         {self._windows_line()}",
            f"memory          {self._memory_line()}",
            *self._pyramid_lines(),
        ]
        return lines

    def _manifest_line(self) -> str:
        if self.existing is None:
            return "none yet: written before the first leaf"
        return (
            f"matches this config (semantic hash {self.spec.semantic_hash[:12]}…, "
            f"{self.existing.get('spec')})"
        )

    def _source_line(self) -> str:
        if self.source is not None:
            sizes = ", ".join(f"{d}={n:,}" for d, n in dict(self.source.sizes).items())
            return f"a Dataset passed in ({sizes})"
        src = self.config.data_source
        return registry.of(src).describe(src)

    def _shards_line(self) -> str:
        if self.shards is not None:
            return f"{len(self.shards):,} ({self.region}): {_listed(self.shards)}"
        if self.planned is not None:
            touched = sorted({unit_of(u)[0] for u in self.planned})
            return f"{len(touched):,} the catalogued footprints touch: {_listed(touched)}"
        return "wherever the points fall (found while reading)"

    def _units_lines(self) -> list[str]:
        if not self.gated:
            return ["units           every unit the points reach is rewritten (--overwrite)"]
        if self.verdicts is None:
            return [
                "units           found while reading: the re-run gate compares each unit "
                "the points reach with its leaf, then writes those not current"
            ]
        kinds = {k: sorted(u for u, v in self.verdicts.items() if v.kind == k) for k in KINDS}
        catalogued = {g for ids in self.planned.values() for g in ids}
        out = [
            f"units           {len(self.verdicts):,} planned from the catalog: "
            + ", ".join(f"{len(kinds[k]):,} {KINDS[k]}" for k in KINDS)
        ]
        out += [f"  {KINDS[k]:<13} {_listed(kinds[k])}" for k in KINDS if kinds[k]]
        granules = self.read_granules or []
        out.append(
            f"  reads         {len(granules):,} of {len(catalogued):,} catalogued granules"
            + (f" in {_count(len(self.read_shards), 'shard')}" if granules else "")
        )
        return out

    def _memory_line(self) -> str:
        from dask.utils import format_bytes

        from zagg.pipeline.stream import AUTO_PER_THREAD, AUTO_SHARE

        budget = self.budget
        if budget == 0:
            return "budget off: one pass, however much it holds"
        said = (
            f"budget auto ({AUTO_SHARE:.0%} of the cluster's memory, at most "
            f"{format_bytes(AUTO_PER_THREAD)} a thread)"
            if budget is None
            else f"budget {format_bytes(budget)}"
        )
        src = self.config.data_source.granules
        if self.source is not None or src is None or src.read_plan is None:
            return f"{said}; this source is read in one pass (no granule read plan)"
        return (
            f"{said}: if one pass would hold more, a census of the granules' index "
            "cuts the shards into groups, read one after another"
        )

    def _windows_line(self) -> str:
        w = self.spec.windowing
        if w is None:
            return "none (one leaf per shard)"
        line = f"{w.schedule} on {w.time_field!r} ({w.units} since {w.epoch} {w.scale})"
        if self.verdicts is not None:
            labels = sorted({unit_of(u)[1] for u in self.verdicts} - {None})
            line += f"; planned: {_listed(labels)}"
        return line

    def _pyramid_lines(self) -> list[str]:
        from zagg.pyramid.icechunk import enabled

        decl = self.spec.pyramid
        icechunk = "committed after the leaves" if enabled(self.config.output.icechunk) else "off"
        if decl is None:
            return ["pyramid         declared off", f"icechunk        {icechunk}"]
        groups = decl.column_groups()
        lines = [
            f"pyramid         leaf columns at orders {_span(groups)} (declared "
            f"{_span(list(decl.resolutions))}), written by each leaf's task"
        ]
        if decl.ladder():
            nodes = [k for k, _ in decl.ladder()]
            cells = [r for _, r in decl.ladder()]
            what = f"overviews at node orders {_span(nodes)} (cells {_span(cells)})"
            lines.append(
                f"  sweep         {what}"
                + (
                    ", built after the leaves"
                    if self.sweep
                    else ": not built by this run (output.sweep: false or --no-sweep); "
                    "zagg sweep STORE builds them"
                )
            )
        lines.append(f"icechunk        {icechunk}")
        return lines


#: verdict kinds in the order a plan lists them
KINDS = {REWRITE: "to write", CURRENT: "current", REFUSED: "refused"}


def _listed(ids) -> str:
    ids = list(ids)
    if not ids:
        return "none"
    more = f", ... ({len(ids):,} in all)" if len(ids) > _SHOWN else ""
    return ", ".join(str(i) for i in ids[:_SHOWN]) + more


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _span(orders: list[int]) -> str:
    """``13..9`` for consecutive orders, one order alone as itself."""
    return str(orders[0]) if len(orders) == 1 else f"{orders[0]}..{orders[-1]}"


def plan_run(
    config,
    *,
    store: str | None = None,
    source=None,
    storage_options=None,
    catalog: str | None = None,
    region: str | None = None,
    bbox=None,
    shards=None,
    sweep: bool | None = None,
    overwrite: bool = False,
    allow_contraction: bool = False,
    memory_budget=None,
    granules=None,
) -> RunPlan:
    """The plan of ``zagg.run(config, ...)`` with these arguments (see :func:`zagg.run`):
    every refusal a run makes before computing is made here, and nothing is written."""
    memory_budget = budget_argument(memory_budget)
    cfg = load_config(config)
    if granules is not None:
        cfg = relocated(cfg, granules, "--granules")
    if catalog is not None:
        cfg = relocated(cfg, catalog, "--catalog")
    store = store or cfg.output.store
    if not store:
        raise ConfigError("config key 'output.store': no store given; set it or pass --store")
    given = [n for n, v in (("--region", region), ("--bbox", bbox), ("--shards", shards)) if v]
    if len(given) > 1:
        raise ConfigError(
            f"give only one of --region, --bbox and --shards (got {' and '.join(given)}): "
            "a run covers one region"
        )
    order = cfg.grid.shard_order
    restriction = None
    if region is not None or bbox is not None:
        from zagg.sources.regions import region_shards

        shards = region_shards(geojson=region, bbox=bbox, order=order)
        restriction = f"--region {region}" if region is not None else f"--bbox {bbox}"
    elif shards is not None:
        shards = checked_shards(shards, order)
        restriction = "--shards"
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
    root = hive.StoreRoot(store, options)
    hive.check_store_root(root, MANIFEST_KEY)
    recorded = hive.read_manifest(root)
    spec = StoreSpec.of(cfg).matching(recorded and recorded.get("semantic_hash"))
    existing = check_store(root, spec)
    wanted = cfg.output.sweep == "stages" if sweep is None else bool(sweep)
    if wanted and spec.pyramid is None:
        raise ConfigError(
            "a sweep after the run needs a pyramid: output.pyramid is false; "
            "declare a pyramid or run without --sweep"
        )
    plan = RunPlan(
        cfg,
        spec,
        root,
        options,
        new_run_id(),
        source,
        None if shards is None else tuple(shards),
        restriction,
        existing,
        gated=not overwrite,
        allow_contraction=allow_contraction,
        sweep=wanted,
        memory_budget=memory_budget,
    )
    # with a catalog every unit's granules are known before any is opened: gate first
    planned = catalog_plan(cfg, shards) if plan.gated and source is None else None
    if planned is None:
        return plan
    gate = plan.gate()
    verdicts = gate.classify(planned)
    # the store's units no catalogued footprint reaches any more, built from granules the
    # catalog lost: refused and named, like a unit that lost some of its granules
    verdicts.update(gate.vanished(verdicts, catalog_ids(cfg), shards))
    planned = {u: tuple(ids) for u, ids in planned.items()}
    return dataclasses.replace(plan, planned=planned, verdicts=verdicts)


def relocated(cfg: Config, location, option: str) -> Config:
    """``cfg`` reading its points from ``location`` (``--granules``: a path, URL, glob or
    list of the user's own granules or points file; ``--catalog``: a granule catalog): the
    location key of its source (``data_source.granules``, ``data_source.input``) replaced
    and the block parsed again, so the location picks its source (a catalog, a Parquet
    file). Where points are read from is packaging: the store and its semantic hash stay
    the same."""
    record = registry.of(cfg.data_source)
    if option == "--catalog" and record.key != "granules":
        raise ConfigError("--catalog needs a granule data_source (data_source.granules)")
    if not record.located:
        raise ConfigError(
            f"{option} names where the points are read from, but this config's data_source "
            f"has no location ({record.describe(cfg.data_source)}); use a config whose "
            "data_source names granules or an input file"
        )
    if isinstance(location, list | tuple):
        location = [str(v) for v in location]
    else:
        location = str(location)
    raw = cfg.raw
    raw["data_source"][record.key] = location
    return load_config(raw)


AUTO = "auto"  # a memory budget sized from the cluster (zagg.pipeline.stream)


def budget_argument(value) -> int | str | None:
    """A run's ``memory_budget`` argument checked: None (the config's), ``"auto"``, 0
    (``"off"``) or bytes; a value checked before is returned as it is."""
    if value is None or value == AUTO or (type(value) is int and value >= 0):
        return value
    parsed = parse_memory_budget(value, "memory_budget")
    return AUTO if parsed is None else parsed


def check_source(cfg: Config) -> None:
    """Refuse, before any cluster starts, a config that names no points, local granules
    that are not there (a missing directory, a glob or catalog that lists none) or a local
    input that does not exist (remote inputs are checked when opened)."""
    src = cfg.data_source
    registry.of(src).check(src)


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
