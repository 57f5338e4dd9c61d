"""The ladder above the shard (spec §4.4): one overview per ancestor node, order p−1 to 0.

Every node of order ``k`` carries one level at cell order ``k + d``. While that order is
at or above the shard order the level is a *gather*: the leaf columns' group of that
order under the node, concatenated (no value changes, so it keeps the columns' accuracy).
Below it the level is a *merge*: the node's four children's levels coarsened by 4 through
each field's reducer fold (:func:`zagg.pyramid.levels.coarsen`). Nothing above the shard
reads a raw leaf.

:func:`plan` decides which nodes to fold from metadata alone: a node is current when its
generation triple (consumed children, newest child stamp, the run ids those stamps carry
and relay) and the digest of its children's content hashes match what its committed
overview records; a merge node is also refolded when a child is. :func:`node_task` is the
dask task of one node (dask.delayed, named ``fold-node-…``; a current child a refolded
parent needs is read by a ``load-level`` / ``load-carry`` task); each returns the level
its parent folds, so a gather's column groups are read once for the whole ladder.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field

from zagg import grid as G
from zagg.errors import ZaggError, ZaggWarning
from zagg.hive import artifact
from zagg.hive.stamp import COMMIT_ATTR, now_iso
from zagg.pyramid.column import node_contents
from zagg.pyramid.declare import Declaration
from zagg.pyramid.levels import Level, coarsen, concat, gather
from zagg.pyramid.reading import group_level

GATHER, MERGE = "stage-gather", "stage-merge"


@dataclass
class NodePlan:
    """One ancestor node of the ladder and what its fold consumes."""

    id: str
    order: int
    cells: int
    regime: str
    children: list[str]  # node ids one order finer (leaf shard ids under an order p-1 node)
    leaves: list[str]  # committed leaves under the node
    columns: list[str]  # those leaves with a committed column
    existing: dict | None  # the committed overview's zagg_overview block
    existing_stamp: dict | None
    in_scope: bool = True
    dirty: bool = False
    generation: dict | None = None  # planned (gathers; merges recompute it from children)
    content: str | None = None


@dataclass
class Context:
    """What every node task shares."""

    root: object
    decl: Declaration
    laws: dict
    specs: dict
    run_id: str
    morton_attrs: dict
    columns: dict = field(default_factory=dict)  # leaf id → column root attrs (stamped)
    started_at: str = ""  # when the sweep was admitted (the foreign-stamp backstop)
    window: str | None = None  # a windowed store's ladder of one window (None: unwindowed)


@dataclass
class NodeResult:
    """A folded (or loaded) node: its level, the column groups its parent gathers, and
    what its parent's generation and provenance need."""

    id: str
    level: Level | None
    carry: dict
    info: dict  # n_leaves, written_at, run_id, run_ids, combined, mfr
    record: dict | None = None  # the overview written, when this run wrote one


def content_digest(items: list[tuple[str, str]]) -> str:
    """The skip digest of a node: sha256 of its children's ``id:combined`` hashes."""
    text = "\n".join(f"{a}:{b}" for a, b in sorted(items))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _combined(attrs: dict | None) -> str:
    stamp = (attrs or {}).get(COMMIT_ATTR) or {}
    return str((stamp.get("content_hashes") or {}).get("combined"))


def gather_generation(ctx_columns: dict, leaves: list[str]) -> tuple[dict, str]:
    """The generation triple and content digest of a gather node over its leaf columns
    (leaf columns carry no run id: the term is empty at the finest tier)."""
    stamps = [ctx_columns[s][COMMIT_ATTR] for s in leaves]
    gen = {
        "n_leaves": len(leaves),
        "max_leaf_timestamp": max((s.get("written_at") or "" for s in stamps), default=None),
        "run_ids": [],
    }
    return gen, content_digest([(s, _combined(ctx_columns[s])) for s in leaves])


def child_info(attrs: dict | None) -> dict | None:
    """What a parent needs of a committed child overview (None: no committed overview)."""
    if attrs is None:
        return None
    block, stamp = attrs[artifact.OVERVIEW_ATTR], attrs[COMMIT_ATTR]
    gen = block.get("generation") or {}
    return {
        "n_leaves": int(gen.get("n_leaves") or 0),
        "written_at": stamp.get("written_at"),
        "run_id": stamp.get("run_id"),
        "run_ids": list(gen.get("run_ids") or []),
        "combined": _combined(attrs),
        "mfr": int(block.get("merges_from_raw") or 0),
    }


def merge_generation(infos: dict[str, dict]) -> tuple[dict, str]:
    """The generation triple and content digest of a merge node over its children."""
    run_ids = set()
    for i in infos.values():
        run_ids.update(i["run_ids"])
        if i.get("run_id"):
            run_ids.add(i["run_id"])
    gen = {
        "n_leaves": sum(i["n_leaves"] for i in infos.values()),
        "max_leaf_timestamp": max((i["written_at"] or "" for i in infos.values()), default=None),
        "run_ids": sorted(run_ids),
    }
    return gen, content_digest([(n, i["combined"]) for n, i in infos.items()])


def same_generation(recorded: dict | None, gen: dict) -> bool:
    """Whether a recorded generation equals ``gen`` (absent run_ids read as the empty set,
    never as a wildcard)."""
    if not isinstance(recorded, dict):
        return False
    return (
        recorded.get("n_leaves") == gen["n_leaves"]
        and recorded.get("max_leaf_timestamp") == gen["max_leaf_timestamp"]
        and sorted(recorded.get("run_ids") or []) == gen["run_ids"]
    )


def plan(
    decl: Declaration, leaves: list[str], columns: dict, overviews: dict, scope_of
) -> dict[int, dict[str, NodePlan]]:
    """Every ancestor node of ``leaves`` by order, with its regime, children and whether
    it must be folded (``columns``: leaf → stamped column attrs; ``overviews``: node →
    stamped overview attrs; ``scope_of(node)``: whether the sweep may refold it)."""
    p = decl.shard_order
    nodes: dict[int, dict[str, NodePlan]] = {}
    for k, r in decl.ladder():
        by_node: dict[str, list[str]] = {}
        for sid in leaves:
            by_node.setdefault(G.ancestor_id(sid, k), []).append(sid)
        nodes[k] = {}
        for nid, under in sorted(by_node.items(), key=lambda kv: G.from_decimal([kv[0]])[0]):
            kids = sorted(
                {G.ancestor_id(s, k + 1) for s in under}, key=lambda s: int(G.from_decimal([s])[0])
            )
            attrs = overviews.get(nid)
            nodes[k][nid] = NodePlan(
                nid,
                k,
                r,
                GATHER if r >= p else MERGE,
                kids,
                under,
                [s for s in under if s in columns],
                None if attrs is None else attrs[artifact.OVERVIEW_ATTR],
                None if attrs is None else attrs[COMMIT_ATTR],
                scope_of(nid),
            )
    for k, _r in decl.ladder():
        for node in nodes[k].values():
            if not node.columns:
                continue  # nothing under it carries a column: no level to write
            if node.regime == GATHER:
                node.generation, node.content = gather_generation(columns, node.columns)
                changed = (
                    node.existing is None
                    or not same_generation(node.existing.get("generation"), node.generation)
                    or node.existing.get("content_hash") != node.content
                )
            else:
                kids = nodes[k + 1]
                infos = {c: child_info(overviews.get(c)) for c in node.children}
                infos = {c: i for c, i in infos.items() if i is not None}
                gen, content = merge_generation(infos)
                changed = (
                    node.existing is None
                    or any(kids[c].dirty for c in node.children)
                    or not same_generation(node.existing.get("generation"), gen)
                    or node.existing.get("content_hash") != content
                )
            node.dirty = node.in_scope and changed
    return nodes


# -- the tasks -----------------------------------------------------------------------------
class ColumnMoved(ZaggError, RuntimeError):
    """A leaf column was rewritten while the sweep read it."""


class ForeignStamp(ZaggError, RuntimeError):
    """Another sweep wrote an overview this sweep owns since it was admitted."""


def column_level_groups(ctx: Context, sid: str, orders: list[int]) -> dict[int, Level]:
    """Groups ``orders`` of one leaf's committed column as levels (a group the column lacks
    is an empty level: the column under-covers it). The column's stamp is read again after
    its groups, and a column rewritten meanwhile (a run writing that leaf) is read once
    more, never folded from two writes."""
    rel = artifact.column_path(sid, ctx.window)
    planned = _combined(ctx.columns[sid])
    for _attempt in range(2):
        groups = ctx.columns[sid][artifact.COLUMN_ATTR].get("groups") or {}
        out = {
            r: group_level(ctx.root, rel, sid, r, ctx.laws) if str(r) in groups else Level(r)
            for r in orders
        }
        now = artifact.stamped_attrs(ctx.root, rel, "column")
        if now is not None and _combined(now) == planned:
            return out
        if now is None:
            break
        ctx.columns[sid], planned = now, _combined(now)
    raise ColumnMoved(
        f"the leaf column {ctx.root.url_of(rel)} changed while the sweep read "
        "it (a run is writing that leaf): sweep again once the run is done"
    )


def check_owner(ctx: Context, rel: str) -> None:
    """Abort loudly when the overview at ``rel`` carries a stamp another sweep wrote after
    this one was admitted (the lease's residual-race backstop, spec §4.8)."""
    attrs = artifact.read_root(ctx.root, rel) or {}
    stamp = attrs.get(COMMIT_ATTR)
    if not isinstance(stamp, dict):
        return
    other = stamp.get("run_id")
    if other and other != ctx.run_id and str(stamp.get("written_at") or "") > ctx.started_at:
        raise ForeignStamp(
            f"{ctx.root.url_of(rel)} was written by sweep {other!r} at "
            f"{stamp.get('written_at')}, after this sweep ({ctx.run_id}) was "
            "admitted: two sweeps ran at once; sweep again when it is done"
        )


def load_carry(ctx: Context, node: NodePlan) -> NodeResult:
    """A current gather node's column groups its refolded parent gathers: read from the
    leaf columns under it (resolutions from the shard order to the node's own)."""
    orders = list(range(ctx.decl.shard_order, node.cells + 1))
    per = [column_level_groups(ctx, s, orders) for s in node.columns]
    carry = {r: concat([g[r] for g in per], r) for r in orders}
    info = (
        child_info(
            {artifact.OVERVIEW_ATTR: node.existing or {}, COMMIT_ATTR: node.existing_stamp or {}}
        )
        if node.existing
        else None
    )
    return NodeResult(node.id, carry[node.cells], carry, info or {})


def load_level(ctx: Context, node: NodePlan) -> NodeResult:
    """A current merge-tier child: its committed overview's level."""
    rel = artifact.overview_path(node.id, ctx.window)
    level = group_level(ctx.root, rel, node.id, node.cells, ctx.laws)
    info = child_info({artifact.OVERVIEW_ATTR: node.existing, COMMIT_ATTR: node.existing_stamp})
    return NodeResult(node.id, level, {}, info)


def node_task(ctx: Context, node: NodePlan, inputs: list) -> NodeResult:
    """Fold one node from its inputs (children's results; at order p−1 nothing: the task
    reads its leaves' columns) and write its overview, stamp last."""
    decl = ctx.decl
    p, r = decl.shard_order, node.cells
    counts = {"folded": 0, "missing": 0, "unreadable": 0}
    demotions: list = []
    if node.regime == GATHER:
        if node.order == p - 1:
            orders = list(range(p, r + 1))
            per = []
            for sid in node.leaves:
                if sid not in node.columns:
                    counts["missing"] += 1
                    continue
                try:
                    per.append(column_level_groups(ctx, sid, orders))
                    counts["folded"] += 1
                except (OSError, ValueError) as exc:
                    counts["unreadable"] += 1
                    warnings.warn(
                        f"leaf column of {sid} is unreadable ({exc}); the overview "
                        f"at {node.id} under-covers it",
                        ZaggWarning,
                        stacklevel=2,
                    )
            parts = {o: [g[o] for g in per] for o in orders}
        else:
            got = [i for i in inputs if i is not None]
            parts = {o: [i.carry[o] for i in got] for o in range(p, r + 1)}
            counts["folded"] = len(node.columns)
            counts["missing"] = len(node.leaves) - len(node.columns)
        level, demotions = gather(parts.pop(r), r, ctx.laws)
        carry = {o: concat(lv, o) for o, lv in parts.items()}
        generation, content = node.generation, node.content
        mfr = decl.level_mfr(node.order)
    else:
        got = {i.id: i for i in inputs if i is not None and i.level is not None}
        counts["folded"] = len(got)
        counts["missing"] = len(node.children) - len(got)
        level, demotions = coarsen([got[c].level for c in node.children if c in got], r, ctx.laws)
        carry = {}
        generation, content = merge_generation({c: got[c].info for c in got})
        mfr = 1 + max((got[c].info.get("mfr") or 0 for c in got), default=0)
    record = write_overview(ctx, node, level, counts, demotions, generation, content, mfr)
    info = {
        "n_leaves": generation["n_leaves"],
        "written_at": record["written_at"],
        "run_id": ctx.run_id,
        "run_ids": generation["run_ids"],
        "combined": record["content_hashes"]["combined"],
        "mfr": mfr,
    }
    return NodeResult(node.id, level, carry, info, _summary(record, node, counts, mfr))


def _summary(record: dict, node: NodePlan, counts: dict, mfr: int) -> dict:
    return {
        "node": node.id,
        "order": node.order,
        "regime": node.regime,
        "merges_from_raw": mfr,
        "source_children": counts,
        "bytes_written": record["bytes_written"],
        "objects_written": record["objects_written"] + 1,
    }


def write_overview(
    ctx: Context,
    node: NodePlan,
    level: Level,
    counts: dict,
    demotions: list,
    generation: dict,
    content: str,
    mfr: int,
) -> dict:
    """The node's ``all.zarr`` (a window's ladder: ``{window}.zarr``): its one level
    group, ``role: overview`` and the ``zagg-overview/2`` provenance, stamp (with the run
    id) last, then its sidecar."""
    decl = ctx.decl
    rel = artifact.overview_path(node.id, ctx.window)
    check_owner(ctx, rel)
    block = {
        "spec": artifact.OVERVIEW_SPEC,
        "node": node.id,
        "order": node.order,
        "cell_order": node.cells,
        "source_shard_order": decl.shard_order,
        "source_cell_order": decl.cell_order,
        "window": ctx.window or artifact.WINDOW_ALL,
        "fields": {n: dict(decl.fields[n]) for n in ctx.laws},
        "regime": node.regime,
        "merges_from_raw": mfr,
        "source_children": dict(counts),
        "run_id": ctx.run_id,
        "generation": generation,
        "content_hash": content,
        **({"demotions": demotions} if demotions else {}),
        "generated_at": now_iso(),
    }
    return write_level(ctx, rel, node.id, node.cells, level, block)


def write_level(
    ctx: Context, rel: str, node_id: str, cells: int, level: Level, block: dict
) -> dict:
    """One overview artifact at ``rel`` (its one level group and ``zagg_overview``
    provenance ``block``), stamp with the run id last, then its sidecar."""
    groups = {cells: node_contents(level, node_id, ctx.laws)}
    record = artifact.write_artifact(
        ctx.root,
        rel,
        node_id,
        groups,
        ctx.specs,
        {"role": "overview", artifact.OVERVIEW_ATTR: block},
        cells_with_data=level.n_cells(),
        stamp_extra={"run_id": ctx.run_id},
        morton_attrs=ctx.morton_attrs,
    )
    for key, payload in record.pop("sidecar").items():
        try:
            ctx.root.write_json(key, payload)
        except Exception as exc:  # sidecars are telemetry, never truth
            warnings.warn(f"stats sidecar {key} was not written: {exc}", ZaggWarning, stacklevel=2)
    return record
