"""Command line: ``python -m zagg run | sweep | demo | inspect | verify`` and the rest
(``python -m zagg --help`` lists them; ``zagg run --plan`` prints a run's plan)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

from zagg import __version__
from zagg.errors import brief
from zagg.hive.paths import MANIFEST_KEY


def _plan_options(args) -> dict:
    """The options of ``zagg run`` that decide its plan: the run and ``--plan`` pass the
    same ones to :func:`zagg.pipeline.plan.plan_run` (through ``zagg.run``)."""
    return {
        "store": args.store,
        "catalog": args.catalog,
        "granules": args.granules,
        "region": args.region,
        "bbox": args.bbox,
        "shards": args.shards,
        "sweep": args.sweep,
        "overwrite": args.overwrite,
        "allow_contraction": args.allow_contraction,
        "memory_budget": args.memory_budget,
    }


def _cmd_run(args) -> int:
    if args.plan:
        return _print_plan(args)
    from zagg.pipeline.reruns import EXIT_REFUSED
    from zagg.pipeline.run import run

    knobs = {
        **_plan_options(args),
        "progress": not args.quiet,
        "dashboard": args.dashboard,
        "performance_report": args.performance_report,
    }
    if args.gateway is None and args.adaptive is None:
        summary = run(
            args.config,
            scheduler=args.scheduler,
            workers=args.workers,
            threads=args.threads,
            memory_limit=args.memory_limit,
            **knobs,
        )
    else:
        with _connected(args) as client:
            summary = run(args.config, scheduler=client, timings=True, **knobs)
    from zagg.pyramid.icechunk_runs import summary_lines

    print("\n".join(summary.lines() + summary_lines(summary)))
    refused = summary.gate is not None and summary.gate.of("refused")
    return EXIT_REFUSED if refused else 0


def _print_plan(args) -> int:
    """``zagg run --plan``: what the run would do, decided as the run decides it, printed;
    no cluster starts and nothing is written. Exits as the run would: with
    :data:`~zagg.pipeline.reruns.EXIT_REFUSED` when it plans to refuse units."""
    from zagg.pipeline.plan import plan_run
    from zagg.pipeline.reruns import EXIT_REFUSED, REFUSED

    plan = plan_run(args.config, **_plan_options(args))
    print("\n".join(["plan (nothing started, nothing written):", *plan.lines()]))
    refused = plan.verdicts is not None and any(v.kind == REFUSED for v in plan.verdicts.values())
    return EXIT_REFUSED if refused else 0


def _cmd_batch(args) -> int:
    from zagg.cluster.clients import connect
    from zagg.config.model import load_config
    from zagg.pipeline.batch import batch
    from zagg.pipeline.reruns import EXIT_REFUSED

    cfg = load_config(args.config)  # a bad config is refused before any cluster starts
    if args.gateway is not None or args.adaptive is not None:
        client = _connected(args)
    else:
        client = connect(
            args.scheduler,
            workers=args.workers,
            threads=args.threads,
            memory_limit=args.memory_limit,
        )
    with client:
        summary = batch(
            cfg,
            args.regions,
            store=args.store,
            client=client,
            progress=not args.quiet,
            timings=True,
            granules=args.granules,
        )
    print("\n".join(summary.lines()))
    refused = any(
        r.summary is not None and r.summary.gate is not None and r.summary.gate.of("refused")
        for r in summary.results
    )
    return 1 if summary.failed else EXIT_REFUSED if refused else 0


def _connected(args):
    """The client of ``--gateway`` or ``--adaptive`` (zagg.cluster.connect), once the
    config is known to load: a bad one is refused before any cluster starts."""
    from zagg.cluster.clients import ClusterError, connect
    from zagg.config.model import load_config
    from zagg.pipeline.watch import check_watch

    load_config(args.config)
    check_watch(args.dashboard and args.gateway is None, args.performance_report)
    if args.scheduler is not None:
        raise ClusterError(
            "--adaptive sizes a cluster zagg starts; an existing scheduler "
            "(--scheduler) keeps its own"
        )
    return connect(
        gateway=args.gateway,
        workers=args.workers,
        threads=args.threads,
        memory_limit=args.memory_limit,
        adaptive=args.adaptive,
        dashboard=args.dashboard and args.gateway is None,
        gateway_options=_gateway_options(args.gateway_option),
    )


def _key_values(pairs, flag: str, example: str, typed) -> dict | None:
    """Repeated ``flag KEY=VALUE`` arguments as a mapping, each value through ``typed``."""
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {example}")
        out[key] = typed(value)
    return out


def _gateway_options(pairs) -> dict | None:
    """``--gateway-option name=value`` pairs; values are read as YAML scalars (numbers,
    booleans) so they reach the gateway typed."""
    import yaml

    return _key_values(pairs, "--gateway-option", "image=org/zagg:1.0", yaml.safe_load)


def _adaptive(text: str) -> tuple[int, int]:
    """argparse type of --adaptive: MIN,MAX workers."""
    lo, sep, hi = text.partition(",")
    try:
        bounds = (int(lo), int(hi)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or bounds[0] < 0 or bounds[1] < max(bounds[0], 1):
        raise argparse.ArgumentTypeError(
            f"--adaptive expects MIN,MAX workers with 0 <= MIN "
            f"<= MAX and MAX >= 1, e.g. 1,8; got {text!r}"
        )
    return bounds


def _cmd_warm(args) -> int:
    from zagg.pipeline.warm import CONFIGS, is_cold, warm

    cold = is_cold()
    seconds = warm(args.configs or CONFIGS, out=sys.stdout)
    print(
        f"numba kernels {'compiled and cached' if cold else 'already cached'}: "
        f"{sum(seconds.values()):.1f} s"
    )
    return 0


def _cmd_sweep(args) -> int:
    from zagg.pyramid.sweep import sweep

    summary = sweep(
        args.store,
        storage_options=_storage_options(args.storage_option),
        scope=args.scope,
        tuple_width=args.tuple_width,
    )
    print("\n".join(summary.lines()))
    return 0


def _cmd_demo(args) -> int:
    from zagg.cli.demo import demo

    demo(
        store=args.store,
        points=args.points,
        seed=args.seed,
        workers=args.workers,
        map_path=args.map,
        product=args.product,
    )
    return 0


def _cmd_catalog(args) -> int:
    from zagg.config.model import ConfigError, load_config
    from zagg.sources.catalog import build_catalog, check_catalog_path, check_order, write_catalog

    if args.search is not None:
        return _catalog_search(args)
    if args.granules is None:
        raise ConfigError(
            "zagg catalog needs the granules to scan (a directory, glob or s3:// prefix), "
            "or --search FILE to catalogue what a search of NASA's archive finds"
        )
    if not args.config:
        raise ConfigError(
            "zagg catalog needs --config: its data_source says which HDF5 paths "
            "hold the coordinates"
        )
    check_catalog_path(args.output)  # refuse a bad suffix or order before scanning anything
    order = check_order(9 if args.order is None else args.order)
    cfg = load_config(args.config)
    if cfg.data_source.granules is None:
        raise ConfigError("the config's data_source has no 'granules' block")
    source = dataclasses.replace(cfg.data_source.granules, granules=args.granules)
    catalog = build_catalog(source, order=order)
    write_catalog(catalog, args.output, storage_options=source.storage_options)
    skipped = f", {len(catalog.failed)} skipped (unreadable)" if catalog.failed else ""
    print(f"catalog {args.output}: {len(catalog)} granules{skipped}, footprints at order {order}")
    for f in catalog.failed:
        print(f"  skipped {f['granule']}: {f['error']}")
    return 0


def _catalog_search(args) -> int:
    """``zagg catalog --search FILE OUTPUT``: what a search of NASA's archive finds, as a
    catalog (nothing is read but the archive's records)."""
    import yaml
    from dask.utils import format_bytes

    from zagg.config.model import ConfigError
    from zagg.sources.archive_query import describe, parse_search
    from zagg.sources.archive_search import search_catalog
    from zagg.sources.catalog import check_catalog_path, check_order, write_catalog

    check_catalog_path(args.output)
    try:
        with open(args.search) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--search {args.search}: cannot read it as YAML ({exc})") from None
    path = "search"
    if isinstance(doc, dict) and isinstance(doc.get("data_source"), dict):
        doc, path = doc["data_source"].get("granules"), "data_source.granules"
    if isinstance(doc, dict) and "search" in doc:
        doc, path = doc["search"], f"{path}.search" if path != "search" else path
    if args.order is not None and isinstance(doc, dict):
        doc = {**doc, "order": check_order(args.order)}
    search = parse_search(doc, path)
    catalog = search_catalog(search)
    write_catalog(catalog, args.output, storage_options={})
    sizes = [e.size for e in catalog]
    size = format_bytes(sum(sizes)) if None not in sizes else "size unknown"
    print(
        f"catalog {args.output}: {len(catalog)} granules ({size}) found by a search of NASA's "
        f"archive ({describe(search)}), footprints at order {catalog.order}"
    )
    return 0


def _cmd_configs(args) -> int:
    import shutil
    import textwrap

    from zagg.packaged import find, names, summary

    indent = " " * 31
    width = max(60, shutil.get_terminal_size().columns)
    for kind, title in (
        ("config", "configs (zagg run NAME)"),
        ("region", "regions (zagg run CONFIG --region NAME)"),
    ):
        print(f"{title}:")
        for name in names(kind):
            # the whole description, wrapped under its column
            text = summary(find(kind, name), width=sys.maxsize)
            lines = textwrap.wrap(
                text, width, initial_indent=f"  {name:<28} ", subsequent_indent=indent
            )
            print("\n".join(lines) if lines else f"  {name}")
    return 0


def _cmd_gc(args) -> int:
    from zagg.hive import StoreRoot, read_manifest
    from zagg.hive.versions import collect
    from zagg.hive.walk import all_leaves
    from zagg.pyramid.icechunk_runs import history

    root = StoreRoot(args.store, _storage_options(args.storage_option))
    if read_manifest(root) is None:
        raise FileNotFoundError(f"{root.url} holds no morton_hive.json: not a hive store")
    # the versions a kept snapshot of the Icechunk companion references stay readable
    kept = history(root, retain_runs=args.retain_runs, dry_run=args.dry_run)
    done = collect(
        root,
        [leaf for leaf, _ in all_leaves(root)],
        keep=args.keep,
        dry_run=args.dry_run,
        protect=None if kept is None else kept.protect,
    )
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"gc {root.url}: {verb} {done.count} superseded version(s) of {len(done.removed)} "
        f"leaf(s); {done.kept} kept (the current ones, and up to {args.keep} more each)"
    )
    if kept is not None:
        print(
            f"  icechunk: {done.protected} superseded version(s) kept for its snapshots "
            f"and run tags ({len(kept.tags)} run tag(s))"
        )
        if kept.retention is not None:
            r = kept.retention
            print(
                f"  icechunk: {'would delete' if args.dry_run else 'deleted'} "
                f"{r['tags_deleted']} run tag(s) beyond the {args.retain_runs} newest and "
                f"{'would expire' if args.dry_run else 'expired'} "
                f"{r['snapshots_expired']} snapshot(s) older than the oldest kept"
            )
    for leaf, gone in sorted(done.removed.items())[:20]:
        print(f"  {leaf}: {', '.join(gone)}")
    for leaf in done.skipped:
        print(f"  skipped {leaf}: its pointer cannot be read (left as it is)")
    return 0


def _cmd_profile(args) -> int:
    from zagg.cluster.profile import PROFILE

    print(
        PROFILE if args.path else PROFILE.read_text(encoding="utf-8"), end="\n" if args.path else ""
    )
    return 0


def _storage_options(pairs) -> dict | None:
    """``--storage-option key=value`` pairs as fsspec options (true/false become booleans)."""
    return _key_values(
        pairs,
        "--storage-option",
        "endpoint_url=http://127.0.0.1:9000",
        lambda v: {"true": True, "false": False}.get(v.lower(), v),
    )


def _cmd_inspect(args) -> int:
    from zagg.read.inspect import inspect_store

    print(
        inspect_store(
            args.store,
            leaves=args.leaves,
            storage_options=_storage_options(args.storage_option),
            manifest=args.manifest,
        )
    )
    return 0


def _cmd_verify(args) -> int:
    from zagg.read.inspect import VerifyProgress, verify_status

    report, status = verify_status(
        args.store,
        storage_options=_storage_options(args.storage_option),
        progress=None if args.quiet else VerifyProgress(),
    )
    print(report)
    return status


def _at_least_one(text: str) -> int:
    """argparse type of worker, thread and point counts."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _memory_budget(text: str):
    """argparse type of --memory-budget: a size, auto or off."""
    from zagg.config.model import ConfigError
    from zagg.pipeline.plan import budget_argument

    try:
        return budget_argument(int(text) if text.isdigit() else text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _memory_limit(text: str):
    """argparse type of --memory-limit: a size, a fraction of the machine's memory or auto."""
    from zagg.cluster.clients import ClusterError, check_knobs

    try:
        value = float(text) if text.replace(".", "", 1).isdigit() and "." in text else text
        check_knobs(memory_limit=value)
    except ClusterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


VERBOSE_ICECHUNK_LOG = "warn"  # the level of Icechunk's log lines under --verbose


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=program_name(),
        description="Aggregate point "
        "observations onto HEALPix morton cells as a morton-hive store.",
    )
    ap.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    sub = ap.add_subparsers(
        dest="command", required=True, help="what to do (COMMAND --help: its options)"
    )

    r = sub.add_parser(
        "run",
        help="run a pipeline config into its store (exit status 4: it refused shards whose "
        "granules are gone from its input, listed in the store's refusals_*.json)",
    )
    r.add_argument(
        "config",
        help="pipeline config: a YAML file, or the name of a shipped one "
        "(python -m zagg configs lists them)",
    )
    r.add_argument("--store", help="output store (path or s3:// URL); overrides output.store")
    r.add_argument("--scheduler", help="address of an existing dask scheduler")
    r.add_argument(
        "--gateway",
        metavar="URL",
        help="a new cluster of the dask-gateway at "
        "URL (--workers of --threads cores and --memory-limit each, the deployment "
        "profile as their environment); needs zagg[gateway]",
    )
    r.add_argument(
        "--gateway-option",
        action="append",
        metavar="NAME=VALUE",
        help="another cluster option the gateway declares; repeatable",
    )
    r.add_argument(
        "--adaptive",
        type=_adaptive,
        metavar="MIN,MAX",
        help="let the cluster adapt between MIN and MAX workers (local or gateway)",
    )
    r.add_argument(
        "--dashboard",
        action="store_true",
        help="serve the local cluster's "
        "dashboard on 127.0.0.1 and print its link (needs zagg[dashboard])",
    )
    r.add_argument(
        "--performance-report",
        metavar="FILE.html",
        help="write distributed's performance report of the run (needs zagg[dashboard])",
    )
    r.add_argument(
        "--workers", type=_at_least_one, help="local cluster workers (default: cores / 2)"
    )
    r.add_argument("--threads", type=_at_least_one, help="threads per local worker (default 2)")
    r.add_argument(
        "--memory-limit",
        type=_memory_limit,
        help="memory limit per local worker, e.g. 4GiB, 0.5 (of the machine) or auto",
    )
    r.add_argument(
        "--memory-budget",
        type=_memory_budget,
        help="partial aggregates the run may hold at once (default: the config's "
        "output.memory_budget, auto: a quarter of the cluster's memory, at most 1GiB a "
        "thread); a granule run with a read plan that would hold more is read in shard "
        "groups. A size such as 4GiB, auto, or off",
    )
    r.add_argument("--catalog", help="granule catalog (JSON or parquet) to read from")
    r.add_argument(
        "--granules",
        metavar="PATH|URL|GLOB",
        help="read your own granules (a directory, glob, s3:// prefix or catalog) or points "
        "file in place of the location the config names (data_source.granules or input)",
    )
    r.add_argument(
        "--region",
        help="GeoJSON polygon file, or a shipped region's name: only the shards it covers",
    )
    r.add_argument("--bbox", help="lon0,lat0,lon1,lat1: only the shards this box covers")
    r.add_argument(
        "--shards",
        metavar="ID[,ID...]",
        help="comma-separated shard ids at the config's shard order (output.grid."
        "parent_order), e.g. -5121132231,-5121132232: only these shards",
    )
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument(
        "--plan",
        action="store_true",
        help="print the run's plan and exit, starting no cluster and writing nothing: the "
        "store and its manifest check, the inputs, the shards, the units and their re-run "
        "verdicts (with a catalog), the windows and what the pyramid builds",
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="rewrite every shard, even those already current (by default a "
        "re-run writes only shards whose config or granules changed)",
    )
    r.add_argument(
        "--allow-contraction",
        action="store_true",
        help="rewrite shards whose leaves were built from granules this run does "
        "not have (refused by default, and listed in refusals_*.json)",
    )
    swept = r.add_mutually_exclusive_group()
    swept.add_argument(
        "--sweep",
        action="store_true",
        default=None,
        help="build the pyramid ladder after the leaves (the default whenever the config "
        "declares a pyramid, unless output.sweep: false)",
    )
    swept.add_argument(
        "--no-sweep",
        dest="sweep",
        action="store_false",
        help="write the leaves and their columns only; build the overviews later with "
        "zagg sweep STORE",
    )
    r.set_defaults(func=_cmd_run)

    b = sub.add_parser(
        "batch",
        help="run a config over regions, one after another, into one "
        "store (exit status 1 when a region failed, else 4 when one refused shards)",
    )
    b.add_argument("config", help="pipeline config (YAML file or shipped name)")
    b.add_argument(
        "regions",
        nargs="+",
        help="GeoJSON polygon files or shipped region names, run in this order",
    )
    b.add_argument("--store", help="output store (path or s3:// URL); overrides output.store")
    b.add_argument("--scheduler", help="address of an existing dask scheduler")
    b.add_argument("--gateway", metavar="URL", help="a new dask-gateway cluster for the batch")
    b.add_argument(
        "--gateway-option",
        action="append",
        metavar="NAME=VALUE",
        help="another cluster option the gateway declares; repeatable",
    )
    b.add_argument(
        "--adaptive",
        type=_adaptive,
        metavar="MIN,MAX",
        help="let the cluster adapt between MIN and MAX workers (local or gateway)",
    )
    b.add_argument(
        "--workers", type=_at_least_one, help="local cluster workers (default: cores / 2)"
    )
    b.add_argument("--threads", type=_at_least_one, help="threads per local worker (default 2)")
    b.add_argument(
        "--memory-limit",
        type=_memory_limit,
        help="memory limit per local worker, e.g. 4GiB, 0.5 (of the machine) or auto",
    )
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.add_argument(
        "--granules",
        metavar="PATH|URL|GLOB",
        help="read your own granules (a directory, glob, s3:// prefix or catalog) or points "
        "file in place of the location the config names (data_source.granules or input)",
    )
    b.set_defaults(func=_cmd_batch, dashboard=False, performance_report=None)

    w = sub.add_parser(
        "sweep",
        help="build or refresh a store's pyramid ladder from its leaf "
        "columns (the overviews above the shard order)",
    )
    w.add_argument(
        "store",
        help="the store's root folder (path or s3:// URL, the folder holding morton_hive.json)",
    )
    w.add_argument(
        "--scope",
        help="comma-separated node ids (decimal, e.g. -5112,-5113): "
        "refold only the ancestor nodes of and under them",
    )
    w.add_argument(
        "--tuple-width",
        type=_at_least_one,
        default=3,
        help="orders folded per wave between lease heartbeats (default 3; the "
        "bytes written do not depend on it)",
    )
    w.set_defaults(func=_cmd_sweep)

    d = sub.add_parser("demo", help="aggregate synthetic ATL03-like photons into ./demo-store")
    d.add_argument(
        "--store",
        default="demo-store",
        help="the demo store to write (default demo-store; an earlier demo store there is "
        "replaced, anything else is refused)",
    )
    d.add_argument(
        "--points",
        type=_at_least_one,
        default=4_000_000,
        help="synthetic photons to write into the granules (default 4000000)",
    )
    d.add_argument("--seed", type=int, default=0, help="seed of the synthetic granules (default 0)")
    d.add_argument(
        "--workers", type=_at_least_one, help="local cluster workers (default: cores / 2)"
    )
    d.add_argument("--map", default=None, help="PNG map path (default: STORE.png beside it)")
    d.add_argument(
        "--product",
        choices=("tdigest", "strata"),
        default="tdigest",
        help="tdigest (default) or strata (signal/noise digests, composition)",
    )
    d.set_defaults(func=_cmd_demo)

    c = sub.add_parser("catalog", help="build a granule catalog (ids, times, footprints)")
    c.add_argument("granules", nargs="?", help="directory, glob or s3:// prefix of granule files")
    c.add_argument("output", help="catalog file to write (.json or .parquet)")
    c.add_argument("--config", help="pipeline config whose data_source names the paths")
    c.add_argument("--order", type=int, default=None, help="footprint order (default 9)")
    c.add_argument(
        "--search",
        metavar="FILE",
        help="catalogue what a search of NASA's archive finds instead: a YAML search block "
        "(short_name, version, region, temporal, ...) or a config whose "
        "data_source.granules is one",
    )
    c.set_defaults(func=_cmd_catalog)

    m = sub.add_parser(
        "warm",
        help="compile and cache zagg's numba kernels ahead of the "
        "first run (image builds, set-up scripts)",
    )
    m.add_argument(
        "configs",
        nargs="*",
        help="shipped configs to warm for (default: "
        "atl03_synthetic and atl03_strata, which use every kernel kind)",
    )
    m.set_defaults(func=_cmd_warm)

    k = sub.add_parser("configs", help="list the configs and regions shipped with zagg")
    k.set_defaults(func=_cmd_configs)

    f = sub.add_parser(
        "profile", help="print the deployment profile for dask workers (a dask config file)"
    )
    f.add_argument("--path", action="store_true", help="print its path instead")
    f.set_defaults(func=_cmd_profile)

    g = sub.add_parser("gc", help="remove superseded versions of versioned leaves")
    g.add_argument(
        "store",
        help="the store's root folder (path or s3:// URL, the folder holding morton_hive.json)",
    )
    g.add_argument(
        "--keep",
        type=int,
        default=0,
        help="superseded versions to keep per leaf besides the current one",
    )
    g.add_argument(
        "--retain-runs",
        type=_at_least_one,
        metavar="N",
        default=None,
        help="first cut the Icechunk companion's history to its N newest run tags (as "
        "output.icechunk.retain_runs does), so versions only older runs read are removed",
    )
    g.add_argument("--dry-run", action="store_true", help="list what would be removed")
    g.set_defaults(func=_cmd_gc)

    i = sub.add_parser(
        "inspect",
        help="summarise a store: its product, leaves, stamps, coverage and levels "
        "(--manifest adds the manifest in full)",
    )
    i.add_argument(
        "store",
        help="the store's root folder (path or s3:// URL, the folder holding morton_hive.json)",
    )
    i.add_argument("--leaves", type=int, default=10, help="leaves to list (default 10)")
    i.add_argument(
        "--manifest",
        action="store_true",
        help="also print the store's manifest (morton_hive.json) in full, after the summary",
    )
    i.set_defaults(func=_cmd_inspect)

    v = sub.add_parser(
        "verify",
        help="recompute every leaf's content hashes (exit status 0: "
        "intact, 1: damaged, 3: incomplete)",
    )
    v.add_argument(
        "store",
        help="the store's root folder (path or s3:// URL, the folder holding morton_hive.json)",
    )
    v.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr, only the report"
    )
    v.set_defaults(func=_cmd_verify)
    for p in (i, v, g, w):
        p.add_argument(
            "--storage-option",
            action="append",
            metavar="KEY=VALUE",
            help="fsspec option of an s3:// store, e.g. endpoint_url=... or "
            "profile=...; repeatable (credentials are better left to the "
            "AWS_* environment variables or a profile)",
        )
    for command in sub.choices.values():
        command.add_argument(
            "--verbose",
            action="store_true",
            help="show warnings with the line of code that gave them, and the libraries' "
            "log lines at their own levels (Icechunk's at warn)",
        )
    return ap


#: what an interrupted write leaves behind, and how to finish it
INTERRUPTED_WRITE = (
    "; the store keeps the leaves already stamped, and readers skip any "
    "leaf left without its stamp: run the same command again to finish it"
)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors that report bad input or a refused operation, printed as one line with
    exit status 2: zagg's own (every one derives from :class:`zagg.errors.ZaggError`) and
    the operating system's refusals of a path."""
    from zagg.errors import ZaggError

    return (
        ZaggError,
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    )


#: a value that starts with a minus and a digit (``-5112,-5113``, ``-102.5,-76,...``): no
#: option of zagg starts so, and argparse would otherwise read it as an unknown option
_NEGATIVE_VALUE = re.compile(r"^-\.?\d")


def _joined_negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--scope -5112,-5113`` as ``--scope=-5112,-5113``, for every option that takes a
    value (southern shard and node ids, a western or southern ``--bbox``): argparse takes
    only a plain negative number for a value, and a comma-separated list that starts with
    ``-`` for an option it does not know."""
    valued = _valued_options(parser, argv)
    out = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in valued and i + 1 < len(argv) and _NEGATIVE_VALUE.match(argv[i + 1]):
            out.append(f"{valued[a]}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _valued_options(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, str]:
    """The options that take a value, of ``parser`` and of the subcommand ``argv`` names
    (each option string, and each unambiguous abbreviation of a long one, mapped to its
    full string)."""
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            named = next((a for a in argv if a in action.choices), None)
            if named is not None:
                parsers.append(action.choices[named])
    every = {o: a for p in parsers for a in p._actions for o in a.option_strings}
    valued = {o: o for o, a in every.items() if a.nargs != 0}
    for option in [o for o in valued if o.startswith("--")]:
        for n in range(3, len(option)):
            prefix = option[:n]
            if prefix not in every and [o for o in every if o.startswith(prefix)] == [option]:
                valued[prefix] = option
    return valued


def program_name() -> str:
    """The name the command was invoked as, for usage lines: ``zagg`` (the script) or
    ``python -m zagg``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not name or name.endswith(".py") or name in ("-c", "-m"):
        return "python -m zagg"
    return name


class _CommandProcess:
    """What the command sets up in its process for the length of one command: asyncio's
    reports of the closing client's shutdown signal (distributed's ``AllExit``, left in
    waits nobody collects) are dropped, so after Ctrl-C they do not bury the one-line
    message; and Ctrl-C also asks zagg's waits to stop (:func:`zagg.engine.progress.request_stop`),
    so an interrupt Python swallows (one landing in an object's ``__del__`` or a garbage
    collector callback, which distributed runs) still stops the run at its next wait. A
    SIGINT ignored at start (a background job) stays ignored. zagg's own warnings show as
    ``zagg: warning: ...`` lines and Icechunk logs only its errors, unless ``verbose``:
    then warnings show as Python shows them and Icechunk logs at its own default level."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose

    def __enter__(self):
        import logging
        import os
        import signal
        import warnings

        self.logger = logging.getLogger("asyncio")
        self.logger.addFilter(_drop_all_exit)
        self.showwarning = warnings.showwarning
        self.icechunk_log = os.environ.get("ICECHUNK_LOG")
        if self.verbose:
            os.environ.setdefault("ICECHUNK_LOG", VERBOSE_ICECHUNK_LOG)
        else:
            warnings.showwarning = brief(self.showwarning)
        self.previous = signal.getsignal(signal.SIGINT)
        if self.previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupt)
        return self

    def __exit__(self, *exc):
        import os
        import signal
        import warnings

        from zagg.engine.progress import clear_stop

        warnings.showwarning = self.showwarning
        if self.icechunk_log is None:
            os.environ.pop("ICECHUNK_LOG", None)
        if self.previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.previous)
        self.logger.removeFilter(_drop_all_exit)
        clear_stop()
        return False


def _drop_all_exit(record) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return type(exc).__name__ != "AllExit"


def _interrupt(signum, frame):
    from zagg.engine.progress import request_stop

    request_stop()
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """Run one command; returns its exit status (what the ``zagg`` script exits with)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(_joined_negative_values(parser, argv))
    with _CommandProcess(verbose=getattr(args, "verbose", False)):
        try:
            _check_store_argument(args)
            code = args.func(args)
            sys.stdout.flush()
            return code
        except KeyboardInterrupt:
            print(
                "zagg: interrupted"
                + (INTERRUPTED_WRITE if args.func in (_cmd_run, _cmd_demo, _cmd_batch) else ""),
                file=sys.stderr,
            )
            return 130  # 128 + SIGINT, what a shell reports for a tool stopped by Ctrl-C
        except BrokenPipeError:
            return _reader_gone()
        except argparse.ArgumentTypeError as exc:
            print(f"zagg: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:
            if not isinstance(exc, _user_errors()):
                raise
            print(f"zagg: error: {exc}", file=sys.stderr)
            return 2
        except BaseException as exc:  # a task's death a local scheduler raised here
            from zagg.engine.progress import TaskDied, died

            if not died(exc):
                raise
            print(f"zagg: error: {TaskDied.of(exc)}", file=sys.stderr)
            return 2


def _check_store_argument(args) -> None:
    """Refuse a store path that is a folder inside a store (``STORE/-5/1``), naming the
    store root above it: every command takes the root, the folder holding the manifest."""
    store = getattr(args, "store", None)
    if not isinstance(store, str) or not store:
        return
    from zagg.hive import StoreRoot, StoreRootError

    root = StoreRoot(store, _storage_options(getattr(args, "storage_option", None)))
    if not root.is_local and not hasattr(args, "storage_option"):
        return  # a run's remote store takes the config's storage options: checked by the run
    try:
        above = None if root.exists(MANIFEST_KEY) else enclosing_store(root)
    except Exception:  # what cannot be looked at is reported by the command itself
        return
    if above is not None:
        raise StoreRootError(
            f"no store here ({root.url} is a folder inside a store); the store root is {above}"
        )


def enclosing_store(root) -> str | None:
    """The root of the store that holds ``root`` (a :class:`~zagg.hive.StoreRoot`) as one of
    its folders: the nearest folder above it with a manifest (None: none above)."""
    from zagg.hive import StoreRoot

    if root.is_local:
        path = os.path.abspath(root.path)
        above = []
        while os.path.dirname(path) != path:
            path = os.path.dirname(path)
            above.append(path)
    else:
        scheme, _, rest = root.url.partition("://")
        parts = rest.split("/")
        above = [f"{scheme}://{'/'.join(parts[:n])}" for n in range(len(parts) - 1, 0, -1)]
    for url in above:
        if StoreRoot(url, root.storage_options).exists(MANIFEST_KEY):
            return url
    return None


def _reader_gone() -> int:
    """The output's reader closed the pipe (``zagg inspect S | head``): stop quietly, as
    command-line tools do, with stdout pointed at /dev/null so the interpreter's final
    flush cannot fail again."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
