"""The sweep: build or refresh a store's pyramid ladder from its committed leaf columns.

``python -m zagg sweep STORE`` (or :func:`sweep`, or ``output.sweep: "stages"`` after a
run) admits itself with the store's lease, reads metadata only to plan (the leaf columns'
and the overviews' root ``zarr.json``), then folds the nodes whose generation moved as a
dask graph of 4-to-1 steps, one wave of ``tuple_width`` orders at a time (the lease beats
between waves; the width changes no byte), and finishes: the root coverage and the
manifest's per-level ``actuals`` are rewritten only when they change, and the lease is
deleted. A re-run on an unchanged store therefore writes no data object. A windowed
store's sweep runs one ladder per window and then the all-time close
(:mod:`zagg.pyramid.windowed`).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dask

from zagg import grid as G
from zagg.errors import ZaggError
from zagg.hive import artifact, coverage
from zagg.hive.manifest import read_manifest, update_manifest
from zagg.hive.paths import MANIFEST_KEY
from zagg.hive.stamp import now_iso
from zagg.hive.storage import StoreRoot, as_root
from zagg.pyramid import lease as _lease
from zagg.pyramid.companion import refresh_companion
from zagg.pyramid.declare import of_manifest
from zagg.pyramid.ladder import MERGE, Context, NodePlan, load_carry, load_level, node_task, plan
from zagg.pyramid.levels import laws_of
from zagg.pyramid.reading import group_schema, specs_of

READERS = 16  # concurrent metadata GETs while planning


class SweepError(ZaggError, ValueError):
    """A store (or a request) the sweep cannot work on; the message names why and the fix."""


@dataclass
class SweepSummary:
    """What a sweep did."""

    store: str
    run_id: str
    leaves: int = 0
    columns: int = 0
    nodes: int = 0
    folded: int = 0
    skipped: int = 0
    objects_written: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    claimed_from: str | None = None
    icechunk: dict | None = None  # the Icechunk companion's commit after the ladder
    records: list = field(default_factory=list, repr=False)

    def lines(self) -> list[str]:
        return [
            f"store           {self.store}",
            f"sweep           {self.run_id}"
            + (f" (claimed the stale lease of {self.claimed_from})" if self.claimed_from else ""),
            f"leaves          {self.leaves:,} ({self.columns:,} with a column)",
            f"ladder nodes    {self.nodes:,}: {self.folded:,} folded, {self.skipped:,} current",
            f"objects written {self.objects_written:,} ({self.bytes_written / 2**20:.2f} MiB)",
            f"wall time       {self.seconds:.1f} s",
        ]


def parse_scope(scope) -> list[str] | None:
    """Node prefixes (decimal ids, a list or comma-separated text) a sweep refolds."""
    if scope is None:
        return None
    items = [s.strip() for s in scope.split(",")] if isinstance(scope, str) else list(scope)
    items = [s for s in items if s]
    for s in items:
        try:
            G.validate_id(s)
        except ValueError as exc:
            raise SweepError(f"scope {s!r}: {exc}") from None
    return items


def _in_scope(scope: list[str] | None):
    """Whether a node is an ancestor of a scoped node, or under one (by id prefix; a set
    lookup per prefix, so a scope of many shards stays cheap)."""
    if scope is None:
        return lambda node: True
    given = set(scope)
    above = {s[:i] for s in given for i in range(1, len(s) + 1)}
    return lambda node: node in above or any(node[:i] in given for i in range(1, len(node)))


def sweep(
    store,
    *,
    storage_options=None,
    scope=None,
    tuple_width: int = 3,
    ttl_s: int = _lease.DEFAULT_TTL,
    progress: bool = False,
    icechunk: bool | None = None,
) -> SweepSummary:
    """Build or refresh the pyramid ladder of ``store`` from its committed leaf columns.

    ``scope`` (node prefixes) limits which ancestor nodes are refolded; a refolded node
    always folds every child on disk. Refuses (:class:`~zagg.pyramid.lease.SweepRefused`)
    while another sweep holds the store's lease. Nodes whose generation triple is
    unchanged are not rewritten. ``icechunk`` commits the store's Icechunk companion after
    the ladder (``node``); None: when the store has one."""
    t0 = time.perf_counter()
    root = as_root(store, storage_options)
    manifest = read_manifest(root)
    if manifest is None:
        raise SweepError(f"no {MANIFEST_KEY} at {root.url}: not a hive store root")
    decl = of_manifest(manifest)
    if decl is None:
        raise SweepError(
            f"{root.url_of(MANIFEST_KEY)} declares no zagg-pyramid/2 ladder "
            "(pyramid declared off): nothing to sweep; declare output.pyramid "
            "in the config and write the store with it"
        )
    if not isinstance(tuple_width, int) or tuple_width < 1:
        raise SweepError(f"tuple_width must be a positive integer, got {tuple_width!r}")
    scope = parse_scope(scope)
    run_id = _lease.new_run_id()
    held = _lease.acquire(root, run_id, scope=scope, ttl_s=ttl_s)
    summary = SweepSummary(root.url, run_id, claimed_from=held.payload.get("claimed_from"))
    try:
        _run(root, manifest, decl, scope, tuple_width, held, summary)
    finally:
        held.release()
    from zagg.pyramid.icechunk import after_sweep

    summary.icechunk = after_sweep(root, icechunk, run_id)
    summary.seconds = time.perf_counter() - t0
    return summary


def _committed_leaves(root: StoreRoot, manifest: dict) -> list[str]:
    return [sid for _rel, sid in coverage.listed_leaves(root, manifest["shard_order"])]


def _read_attrs(root: StoreRoot, rels: dict[str, str], role: str) -> dict[str, dict]:
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        got = dict(
            zip(
                rels,
                pool.map(lambda rel: artifact.stamped_attrs(root, rel, role), rels.values()),
                strict=True,
            )
        )
    return {k: v for k, v in got.items() if v is not None}


def _run(root, manifest, decl, scope, width, held, summary: SweepSummary) -> None:
    laws = laws_of(decl.fields)
    if decl.windowed:
        from zagg.pyramid.windowed import run_windowed

        leaves, _records = run_windowed(root, decl, laws, _in_scope(scope), width, held, summary)
        _finish(root, manifest, decl, leaves, summary)
        return
    leaves = _committed_leaves(root, manifest)
    summary.leaves = len(leaves)
    ladder(root, decl, laws, leaves, _in_scope(scope), width, held, summary)
    _finish(root, manifest, decl, leaves, summary)


def ladder(
    root, decl, laws, leaves: list[str], scope_of, width, held, summary, window: str | None = None
) -> list[dict]:
    """Plan and fold the ladder over ``leaves`` (a windowed store's: over the leaves of
    ``window``, writing that window's overviews); returns the records of the overviews
    written and adds its counts to ``summary``."""
    columns = _read_attrs(root, {s: artifact.column_path(s, window) for s in leaves}, "column")
    summary.columns += len(columns)
    ancestors = {}
    for k, _r in decl.ladder():
        for s in leaves:
            nid = G.ancestor_id(s, k)
            ancestors[nid] = artifact.overview_path(nid, window)
    overviews = _read_attrs(root, ancestors, "overview")
    nodes = plan(decl, leaves, columns, overviews, scope_of)
    active = [n for by in nodes.values() for n in by.values() if n.columns]
    summary.nodes += len(active)
    summary.skipped += sum(1 for n in active if not n.dirty)
    if not laws or not any(n.dirty for n in active):
        return []
    specs = array_specs(root, decl, laws, list(columns), window)
    laws = {n: law for n, law in laws.items() if n in specs}  # what the columns hold
    morton = morton_attrs(root, artifact.column_path(next(iter(columns)), window), decl.base)
    ctx = Context(
        root,
        decl,
        laws,
        specs,
        held.run_id,
        morton,
        columns,
        started_at=held.payload["acquired_at"],
        window=window,
    )
    records = _fold(ctx, nodes, width, held)
    summary.folded += len(records)
    summary.records.extend(records)
    summary.objects_written += sum(r["objects_written"] for r in records)
    summary.bytes_written += sum(r["bytes_written"] for r in records)
    return records


def array_specs(root, decl, laws: dict, leaves: list[str], window: str | None = None) -> dict:
    """The overviews' array specs (dtype, fill, attrs), from the leaf columns: the first
    column, and further ones only for a field the first lacks."""
    specs: dict = {}
    wanted = set(laws) | {law.locations for law in laws.values() if law.locations}
    wanted |= {law.times for law in laws.values() if law.times}
    for sid in leaves:
        specs.update(
            {
                k: v
                for k, v in specs_of(
                    group_schema(root, artifact.column_path(sid, window), decl.base), laws
                ).items()
                if k not in specs
            }
        )
        if wanted <= set(specs):
            break
    return specs


def morton_attrs(root, rel: str, r: int) -> dict:
    meta = root.read_json(f"{rel}/{r}/morton/zarr.json") or {}
    return dict(meta.get("attributes") or {})


def _fold(ctx: Context, nodes: dict, width: int, held) -> list[dict]:
    """The ladder as waves of ``width`` orders: each wave's node tasks are persisted (on a
    cluster their results stay on the workers), the lease beats, and the next wave folds
    them."""
    token = uuid.uuid4().hex[:8]
    p = ctx.decl.shard_order
    # the context (every leaf column's attrs among it) is one key of the graph that every
    # node task reads: passed as itself, dask would walk it once per task as it builds them
    ctx = dask.delayed(ctx, name=f"fold-context-{token}", traverse=False)
    orders = list(range(p - 1, -1, -1))
    prev: dict = {}  # node id → delayed result of the previous wave's coarsest order
    records = []
    for at in range(0, len(orders), width):
        wave = orders[at : at + width]
        made: dict = {}
        todo = []
        for k in wave:
            made_k = {}
            for node in nodes[k].values():
                if not node.dirty:
                    continue
                inputs = (
                    []
                    if node.order == p - 1
                    else [
                        _input(ctx, nodes[k + 1][c], node, made.get(c, prev.get(c)), token)
                        for c in node.children
                    ]
                )
                with dask.annotate(priority=p - k):
                    task = dask.delayed(node_task, pure=False)(
                        ctx, node, inputs, dask_key_name=f"fold-node-{k}-{node.id}-{token}"
                    )
                made_k[node.id] = task
                todo.append(task)
            made.update(made_k)
        done = dask.persist(*todo) if todo else ()
        _wait(done)
        held.beat()
        results = dict(zip((t.key for t in todo), done, strict=True))
        prev = {
            nid: results[t.key] for nid, t in made.items() if nodes[wave[-1]].get(nid) is not None
        }
        records.extend(
            r["record"]
            for r in dask.compute(*[dask.delayed(_record)(d) for d in done])
            if r["record"] is not None
        )
    return records


def _record(result) -> dict:
    return {"record": result.record}


def _input(ctx: Context, child: NodePlan, parent: NodePlan, made, token: str):
    """A parent's input from one child: its task this run, else a read of what it has."""
    if made is not None:
        return made
    if not child.columns or child.existing is None and parent.regime == MERGE:
        return None  # nothing committed to read: the parent counts it missing
    loader = load_level if parent.regime == MERGE else load_carry
    name = "load-level" if parent.regime == MERGE else "load-carry"
    return dask.delayed(loader, pure=False)(
        ctx, child, dask_key_name=f"{name}-{child.order}-{child.id}-{token}"
    )


def _wait(done) -> None:
    """Block until persisted results exist (a distributed client persists asynchronously)."""
    try:
        from distributed import get_client, wait
    except ImportError:
        return
    try:
        get_client()
    except ValueError:
        return
    wait(list(done))


def _leaf_actuals(entry: dict, decl) -> bool:
    """Record the leaf entry's actuals (the fleet's own columns, spec §4.5); whether the
    entry changed."""
    want = {
        "regime": "leaf-column",
        "merges_from_raw": max(decl.group_mfr(r) for r in entry["cells"]),
    }
    if entry.get("actuals") == want:
        return False
    entry["actuals"] = want
    return True


def record_columns(store, *, storage_options=None) -> bool:
    """After a run that does not sweep: record in the manifest that the leaf entry is
    built (its columns), so that the ladder levels without actuals read as declared but
    not yet swept (spec §4.5). Whether the manifest was rewritten."""
    root = as_root(store, storage_options)
    manifest = read_manifest(root)
    decl = of_manifest(manifest) if manifest is not None else None
    if decl is None or not laws_of(decl.fields):
        return False  # no ladder, or no composable field: no column is written

    def change(fresh: dict) -> bool:
        changed = False
        for entry in (fresh.get("pyramid") or {}).get("overviews") or []:
            if int(entry["node"]) == decl.shard_order:
                changed = _leaf_actuals(entry, decl) or changed
        return changed

    return update_manifest(root, change) is not None


def _finish(root, manifest, decl, leaves, summary) -> None:
    """The finisher: the root coverage and the manifest's actuals, each only when it
    changes (the lease is released by the caller). A level's actuals describe every
    committed overview at its order, folded by this sweep or standing from an earlier one,
    so a sweep that completes an interrupted one records what an uninterrupted one does."""
    order = manifest["shard_order"]
    if leaves:  # a union: a run publishing meanwhile keeps its shards listed
        before = coverage.read_root_coverage(root)
        after = coverage.update_root_coverage(root, leaves, order, source="refresh")
        if after is not None and after is not before and after != before:
            summary.objects_written += 1
    wanted = {}
    for entry in (manifest.get("pyramid") or {}).get("overviews") or []:
        node = int(entry["node"])
        if node != decl.shard_order:
            wanted[node] = level_actuals(root, leaves, node)
    stamp = {"run_id": summary.run_id, "generated_at": now_iso()}

    def change(fresh: dict) -> bool:
        changed = False
        for entry in (fresh.get("pyramid") or {}).get("overviews") or []:
            node = int(entry["node"])
            if node == decl.shard_order:
                changed = _leaf_actuals(entry, decl) or changed
                continue
            want = wanted.get(node)
            had = entry.get("actuals") or {}
            if want is None or {k: had.get(k) for k in want} == want:
                continue
            entry["actuals"] = {**want, **stamp}
            changed = True
        return changed

    fresh = update_manifest(root, change)
    if fresh is not None:
        summary.objects_written += 1
    summary.objects_written += refresh_companion(root, fresh or read_manifest(root) or manifest)


def level_actuals(root, leaves: list[str], order: int) -> dict | None:
    """What the committed all-time overviews at ``order`` over ``leaves`` record: their
    regime, the most merges from raw, and their summed source children (None: no
    overview there yet)."""
    ids = sorted({G.ancestor_id(s, order) for s in leaves})
    found = _read_attrs(root, {nid: artifact.overview_path(nid) for nid in ids}, "overview")
    blocks = [found[nid][artifact.OVERVIEW_ATTR] for nid in ids if nid in found]
    if not blocks:
        return None
    counts = {"folded": 0, "missing": 0, "unreadable": 0}
    for b in blocks:
        for key in counts:
            counts[key] += int((b.get("source_children") or {}).get(key) or 0)
    return {
        "regime": blocks[0].get("regime"),
        "merges_from_raw": max(int(b.get("merges_from_raw") or 0) for b in blocks),
        "source_children": counts,
    }
