"""Commit the store's Icechunk companion: every committed leaf, declared column member and
overview as virtual references in one repository (spec §11), after a run and its sweep.

:func:`commit` brings ``{root}/icechunk/`` to the hive as it stands: one group per level
named by its cell order (the base, each declared column member, each overview order), a
``(window, cells)`` array per field over that order's whole sphere, the row coordinate
``window_start``/``window_end`` at the root and the root attrs ``zagg_icechunk``,
``zarr_conventions`` and ``multiscales``. Each object's references are fingerprinted;
the fingerprints ride the commit's metadata, so the next commit re-writes only the objects
whose references changed and a commit with nothing changed lands nothing. A run killed
before its commit leaves the repo at its previous snapshot, and the next commit (which
compares against the hive, not against the run) catches up. Nothing here copies a byte of
the hive: every chunk is a reference into a leaf, column or overview object.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from zagg import grid as G
from zagg.hive import artifact, coverage
from zagg.hive import icechunk as ic
from zagg.hive.manifest import read_manifest
from zagg.hive.paths import leaf_path
from zagg.hive.stamp import data_prefix, read_stamp_or_debris
from zagg.hive.storage import StoreRoot, as_root
from zagg.hive.walk import walk_windows
from zagg.pyramid.declare import of_manifest

log = logging.getLogger(__name__)

LEDGER = "zagg_refs"  # commit-metadata key: object → fingerprint of its references
ALL = artifact.WINDOW_ALL
ROW_FILL = -(2**63)
MULTISCALES_CONVENTION = {
    "schema_url": "https://raw.githubusercontent.com/zarr-conventions/multiscales/refs/tags/v0.1/schema.json",
    "spec_url": "https://github.com/zarr-conventions/multiscales/blob/v0.1/README.md",
    "uuid": "d35379db-88df-4056-af3a-620245f8e347",
    "name": "multiscales",
    "description": "Multiscale layout of zarr datasets",
}
TUPLE_WIDTH = 3


@dataclass(frozen=True)
class Level:
    cell_order: int
    node_order: int
    artifact: str  # leaf | column | overview


@dataclass(frozen=True)
class Obj:
    """One committed hive object of one level and row."""

    level: int
    row: str
    node: str  # the decimal id of its node (the shard for leaves and columns)
    prefix: str  # the object's data root (a leaf's current version, else the artifact)

    @property
    def key(self) -> str:
        return f"{self.level}|{self.row}|{self.node}"


@dataclass
class IcechunkSummary:
    """What one commit did."""

    path: str
    snapshot: str | None = None
    commits: list = field(default_factory=list)  # messages of the commits made
    objects: int = 0
    changed: int = 0
    refs: int = 0
    rows: list = field(default_factory=list)
    seconds: float = 0.0


def levels_of(manifest: dict) -> dict[int, Level]:
    """Every level of the store, finest first: the base, the declared column members and
    the overview ladder (§11.1)."""
    p, c = int(manifest["shard_order"]), int(manifest["cell_order"])
    out = {c: Level(c, p, "leaf")}
    decl = of_manifest(manifest)
    if decl is not None:
        for r in decl.resolutions:
            out[r] = Level(r, p, "column")
        for k, r in decl.ladder():
            out[r] = Level(r, k, "overview")
    return dict(sorted(out.items(), reverse=True))


def objects(root: StoreRoot, manifest: dict) -> list[Obj]:
    """Every committed object the repo indexes, in a stable order."""
    p, c = int(manifest["shard_order"]), int(manifest["cell_order"])
    decl = of_manifest(manifest)
    windowed = manifest.get("temporal") is not None
    if windowed:
        by_row = {w: [sid for _r, sid in found] for w, found in walk_windows(root).items()}
    else:
        by_row = {ALL: [sid for _r, sid in coverage.listed_leaves(root, p)]}
    out: list[Obj] = []
    for row, sids in by_row.items():
        window = None if row == ALL else row
        for sid in sids:
            rel = leaf_path(sid, window)
            stamp, problem = read_stamp_or_debris(root, rel)
            if stamp is None or problem:
                continue
            out.append(Obj(c, row, sid, data_prefix(rel, stamp)))
        if decl is None:
            continue
        for sid in sids:
            rel = artifact.column_path(sid, window)
            attrs = artifact.stamped_attrs(root, rel, "column")
            groups = (attrs or {}).get(artifact.COLUMN_ATTR, {}).get("groups") or {}
            out += [Obj(r, row, sid, rel) for r in decl.resolutions if str(r) in groups]
    if decl is None:
        return out
    shards = sorted({s for sids in by_row.values() for s in sids})
    rows = list(by_row) + ([ALL] if windowed and decl.all_time else [])
    for k, r in decl.ladder():
        for nid in sorted({G.ancestor_id(s, k) for s in shards}):
            for row in rows:
                if row != ALL and not any(G.ancestor_id(s, k) == nid for s in by_row[row]):
                    continue
                rel = artifact.overview_path(nid, None if row == ALL else row)
                attrs = artifact.stamped_attrs(root, rel, "overview")
                if attrs and attrs[artifact.OVERVIEW_ATTR].get("cell_order") == r:
                    out.append(Obj(r, row, nid, rel))
    return out


def _ranks(nodes: list[str]) -> dict[str, int]:
    """NESTED rank of each node at its own order (the node's position on its level)."""
    import mortie

    out = {}
    by_order: dict[int, list[str]] = {}
    for n in nodes:  # mortie converts words of one order at a time
        by_order.setdefault(G.id_order(n), []).append(n)
    for same in by_order.values():
        nested, _ = mortie.mort2healpix(G.from_decimal(same))
        out.update(zip(same, (int(x) for x in np.asarray(nested)), strict=True))
    return out


def _fingerprint(arrays: dict[str, ic.ObjectArray]) -> str:
    parts = [
        [name, [[r.j, r.location, r.offset, r.length, str(r.checksum)] for r in a.refs]]
        for name, a in sorted(arrays.items())
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _object_arrays(root: StoreRoot, obj: Obj) -> dict[str, ic.ObjectArray]:
    group = f"{obj.prefix}/{obj.level}"
    dirs, _ = root.list_dir(group)
    got = {name: ic.object_array(root, f"{group}/{name}") for name in dirs}
    return {k: v for k, v in got.items() if v is not None}


def _ledger(repo) -> dict:
    """The fingerprints the newest commit that recorded them left (empty: none)."""
    for snap in repo.ancestry(branch="main"):
        meta = snap.metadata or {}
        if LEDGER in meta:
            return dict(meta[LEDGER])
    return {}


def block_levels(lv: dict[int, Level], chunk_order: int, split_order: int, rows: int) -> dict:
    """``zagg_icechunk.levels``: per level its orders, artifact and manifest split (§11.5)."""
    m_base = chunk_order - split_order
    out = {}
    for c, e in lv.items():
        own = chunk_order if e.artifact == "leaf" else e.node_order
        m = max(0, min(m_base, own))
        out[str(c)] = {
            "node_order": e.node_order,
            "artifact": e.artifact,
            "chunk_order": own,
            "cell_order": c,
            "split": {"chunks": 4**m, "order": own - m, "rows": rows},
        }
    return out


def _layout(manifest: dict, lv: dict[int, Level], base_dggs: dict | None) -> list[dict]:
    ms = (manifest.get("multiscales") or [{}])[0]
    fold = ms.get("fold") or {}
    exact = int(fold.get("exact_levels") or 0)
    cascade = fold.get("fold_source") == "cascade"
    cells = list(lv)
    base = cells[0]
    out = [{"asset": str(base), "dggs": dict(base_dggs or {})}]
    overviews = 0
    for i, c in enumerate(cells[1:], start=1):
        e = lv[c]
        src = base
        if e.artifact == "overview":
            overviews += 1
            if cascade and overviews > exact:
                src = cells[i - 1]
        out.append(
            {
                "asset": str(c),
                "derived_from": str(src),
                "transform": {"scale": [float(4 ** (src - c))]},
                "dggs": {"refinement_level": c},
            }
        )
    return out


def _windowing(manifest: dict):
    t = manifest.get("temporal")
    if t is None:
        return None
    from zagg.windows.schedule import parse_windowing

    keys = ("schedule", "time_field", "epoch", "scale", "units", "windows")
    return parse_windowing({k: t[k] for k in keys if k in t}, (t["time_field"],))


def _row_bounds(w, label: str) -> tuple[int, int]:
    """A window row's ``[start, end)`` in the manifest's time units (whole numbers only)."""
    from zagg.windows import assign

    if w.schedule == "yearly":
        index = int(label)
    elif w.schedule == "monthly":
        index = int(label[:4]) * 12 + int(label[4:]) - 1
    elif w.schedule == "daily":
        day = np.datetime64(f"{label[:4]}-{label[4:6]}-{label[6:]}", "D")
        index = int(day.astype(np.int64)) - int(assign._DAY0)
    else:
        index = [x.label for x in w.windows].index(label)
    out = []
    for when in assign.bounds(w, index):
        v = assign.in_units(w, when)
        if v != int(v):
            raise ValueError(
                f"window {label!r}: its bound {when} is not a whole number of "
                f"{w.units}, so it cannot be a row coordinate"
            )
        out.append(int(v))
    return out[0], out[1]


class _Repo:
    """A writable session's store, read and written as zarr documents."""

    def __init__(self, session):
        from zarr.core.buffer import default_buffer_prototype

        self.session = session
        self.store = session.store
        self.proto = default_buffer_prototype()

    def get_json(self, key: str):
        from zarr.core.sync import sync

        buf = sync(self.store.get(key, self.proto))
        return None if buf is None else json.loads(buf.to_bytes())

    def put_json(self, key: str, doc: dict) -> bool:
        """Write a metadata document unless it is already there as given."""
        from zarr.core.sync import sync

        if self.get_json(key) == doc:
            return False
        sync(self.store.set(key, self.proto.buffer.from_bytes(json.dumps(doc).encode())))
        return True

    def put_chunk(self, key: str, data: bytes) -> None:
        from zarr.core.sync import sync

        sync(self.store.set(key, self.proto.buffer.from_bytes(data)))

    def delete(self, key: str) -> None:
        from zarr.core.sync import sync

        sync(self.store.delete(key))


def _group_doc(attrs: dict) -> dict:
    return {"zarr_format": 3, "node_type": "group", "attributes": attrs}


def _coord_doc(n_rows: int, attrs: dict) -> dict:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [n_rows],
        "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1024]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": ROW_FILL,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
        ],
        "attributes": attrs,
        "dimension_names": [ic.ROW_DIM],
    }


def _write_rows(repo: _Repo, manifest: dict, rows: list[str]) -> None:
    w = _windowing(manifest)
    attrs = {}
    if w is not None:
        attrs = {
            "units": f"{w.units} since {manifest['temporal']['epoch']}",
            # CF's name for the manifest's gregorian-utc, so stock xarray decodes the rows
            "calendar": "standard",
            "scale": w.scale,
        }
    changed = False
    for name in ("window_start", "window_end"):
        changed |= repo.put_json(f"{name}/zarr.json", _coord_doc(len(rows), attrs))
    if not changed or w is None:
        return
    import numcodecs

    bounds = [_row_bounds(w, r) if r != ALL else (ROW_FILL, ROW_FILL) for r in rows]
    for i, name in enumerate(("window_start", "window_end")):
        for c0 in range(0, len(rows), 1024):
            block = np.full(1024, ROW_FILL, dtype="<i8")
            vals = [b[i] for b in bounds[c0 : c0 + 1024]]
            block[: len(vals)] = vals
            data = numcodecs.Zstd(level=3).encode(block.tobytes())
            repo.put_chunk(f"{name}/c/{c0 // 1024}", bytes(data))


def commit(
    store,
    storage_options=None,
    *,
    message: str = "leaf",
    run_id: str | None = None,
) -> IcechunkSummary:
    """Bring the store's repo to its hive: create it (and its groups, arrays and rows) when
    absent, re-write the references of every object whose references changed, and commit
    once — nothing when nothing changed. ``message`` heads the commit's message."""
    t0 = time.perf_counter()
    root = as_root(store, storage_options)
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"{root.url} has no manifest: not a hive store root")
    summary = IcechunkSummary(ic.url_prefix(root) + ic.REPO_DIR)
    lv = levels_of(manifest)
    objs = objects(root, manifest)
    summary.objects = len(objs)
    repo = ic.open_repo(root, create=True)
    session = repo.writable_session("main")
    r = _Repo(session)
    root_doc = r.get_json("zarr.json") or {}
    block = dict((root_doc.get("attributes") or {}).get("zagg_icechunk") or {})
    if block and block.get("spec") != ic.SPEC:
        raise ValueError(
            f"{summary.path} is a {block.get('spec')!r} repo, not {ic.SPEC}: clear "
            f"{ic.REPO_DIR}/ and commit again to re-create it"
        )
    rows = list(block.get("rows") or [])
    windowed = manifest.get("temporal") is not None
    wanted = sorted({o.row for o in objs} - {ALL}) + ([ALL] if not windowed else [])
    if windowed and any(o.row == ALL for o in objs):
        wanted.append(ALL)
    rows += [w for w in wanted if w not in rows]
    if not rows:
        summary.seconds = time.perf_counter() - t0
        return summary  # a windowed store with no window yet: nothing to index
    summary.rows = rows
    row_of = {label: i for i, label in enumerate(rows)}
    p = int(manifest["shard_order"])
    chunk_order = _chunk_order(root, objs, lv, manifest)
    commit_order = max(0, p - (p % TUPLE_WIDTH or TUPLE_WIDTH))
    split_order = int(block.get("split_order", commit_order))

    # every object's references first: they decide which levels and arrays exist
    arrays = {o.key: _object_arrays(root, o) for o in objs}
    templates: dict[int, dict[str, dict]] = {}
    group_attrs: dict[int, dict] = {}
    for o in objs:
        for name, a in arrays[o.key].items():
            templates.setdefault(o.level, {}).setdefault(name, a.meta)
        if o.level not in group_attrs:
            doc = root.read_json(f"{o.prefix}/{o.level}/zarr.json") or {}
            group_attrs[o.level] = dict(doc.get("attributes") or {})
    levels_block = block_levels(lv, chunk_order, split_order, 1)
    base_dggs = group_attrs.get(int(manifest["cell_order"]), {}).get("dggs")
    new_block = {
        "spec": ic.SPEC,
        "shard_order": p,
        "chunk_order": chunk_order,
        "cell_order": int(manifest["cell_order"]),
        "url_prefix": ic.url_prefix(root),
        "rows": rows,
        "commit": "leaf",
        "commit_order": commit_order,
        "split_order": split_order,
        "rows_per_manifest": 1,
        "levels": levels_block,
    }
    for key in ("shard_order", "cell_order", "url_prefix"):
        if block and block.get(key) != new_block[key]:
            raise ValueError(
                f"{summary.path} records {key} {block.get(key)!r}, the store "
                f"{new_block[key]!r}: clear {ic.REPO_DIR}/ and commit again to re-create it"
            )
    attrs = {"zagg_icechunk": new_block}
    if manifest.get("multiscales"):
        ms = dict(manifest["multiscales"][0])
        ms["layout"] = _layout(manifest, lv, base_dggs)
        attrs["zarr_conventions"] = [dict(MULTISCALES_CONVENTION)]
        attrs["multiscales"] = ms
    structure = r.put_json("zarr.json", _group_doc(attrs))
    _write_rows(r, manifest, rows)
    for c, e in lv.items():
        if c not in templates:
            continue
        structure |= r.put_json(f"{c}/zarr.json", _group_doc(group_attrs.get(c, {})))
        n_nodes = 12 * 4**e.node_order
        for name, meta in templates[c].items():
            doc = ic.repo_array_doc(meta, len(rows), n_nodes)
            structure |= r.put_json(f"{c}/{name}/zarr.json", doc)
    if structure and r.session.has_uncommitted_changes:
        r.session.commit(f"init {run_id or ''}".strip(), metadata={"run_id": run_id})
        summary.commits.append("init")
        session = repo.writable_session("main")
        r = _Repo(session)

    ledger = _ledger(repo)
    fresh = {}
    ranks = _ranks(sorted({o.node for o in objs}))
    for o in objs:
        fp = _fingerprint(arrays[o.key])
        fresh[o.key] = fp
        if ledger.get(o.key) == fp:
            continue
        summary.changed += 1
        w, rank = row_of[o.row], ranks[o.node]
        for name, a in arrays[o.key].items():
            ndim = len(a.meta["shape"])
            path = f"{o.level}/{name}"
            held = {ref.j for ref in a.refs}
            for ref in a.refs:
                r.store.set_virtual_ref(
                    ic.repo_chunk_key(path, w, rank * a.chunks + ref.j, ndim),
                    ref.location,
                    offset=ref.offset,
                    length=ref.length,
                    checksum=ref.checksum,
                )
                summary.refs += 1
            if o.key in ledger:  # a replaced object: drop the chunks it no longer holds
                for j in set(range(a.chunks)) - held:
                    r.delete(ic.repo_chunk_key(path, w, rank * a.chunks + j, ndim))
    gone = set(ledger) - set(fresh)
    for key in gone:  # an object no longer in the hive: its chunks read as fill
        level, row, node = key.split("|")
        if row not in row_of or int(level) not in templates:
            continue
        rank = _ranks([node])[node]
        for name, meta in templates[int(level)].items():
            k = _chunks_of(meta)
            for j in range(k):
                r.delete(
                    ic.repo_chunk_key(
                        f"{level}/{name}", row_of[row], rank * k + j, len(meta["shape"])
                    )
                )
    if summary.changed or gone:
        summary.snapshot = r.session.commit(
            f"{message} {run_id or ''}".strip(),
            metadata={LEDGER: fresh, "run_id": run_id, "objects": len(fresh)},
        )
        summary.commits.append(message)
    else:
        summary.snapshot = repo.lookup_branch("main")
    summary.seconds = time.perf_counter() - t0
    return summary


def _chunks_of(meta: dict) -> int:
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        inner = codecs[0]["configuration"]["chunk_shape"][0]
    else:
        inner = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    return -(-meta["shape"][0] // inner)


def _chunk_order(root, objs, lv, manifest) -> int:
    """The base level's chunk-axis order: the order one inner chunk of a leaf spans."""
    c = int(manifest["cell_order"])
    for o in objs:
        if o.level == c:
            dirs, _ = root.list_dir(f"{o.prefix}/{c}")
            for name in dirs:
                meta = root.read_json(f"{o.prefix}/{c}/{name}/zarr.json")
                if isinstance(meta, dict) and meta.get("node_type") == "array":
                    k = _chunks_of(meta)
                    return int(manifest["shard_order"]) + int(round(np.log(k) / np.log(4)))
    return int(manifest["shard_order"])


def commit_quietly(store, storage_options=None, **kwargs) -> dict:
    """:func:`commit`, fail-open: the hive is normative and the repo regenerable, so a
    failure is logged and returned as ``{"error": …}`` and never fails the run."""
    try:
        s = commit(store, storage_options, **kwargs)
    except Exception as exc:  # the index never fails the hive it indexes
        log.warning("icechunk commit failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "path": s.path,
        "snapshot": s.snapshot,
        "commits": s.commits,
        "objects": s.objects,
        "changed": s.changed,
        "refs": s.refs,
        "rows": s.rows,
        "seconds": s.seconds,
    }


def enabled(knob: bool | None) -> bool:
    """``output.icechunk`` resolved: its value, or on when the package is installed."""
    return ic.available() if knob is None else bool(knob)


def after_run(cfg, summary, store, storage_options, run_id: str | None = None):
    """The run's commit of its leaves (``leaf``), when the config's knob is on; recorded
    as ``summary.icechunk``. Returns ``summary``."""
    if enabled(cfg.output.icechunk):
        summary.icechunk = commit_quietly(store, storage_options, message="leaf", run_id=run_id)
    return summary


def after_sweep(root: StoreRoot, knob: bool | None, run_id: str | None = None) -> dict | None:
    """The sweep's commit of its overviews (``node``): when ``knob`` is true, or unset and
    the store already has a repo."""
    if knob is False or not ic.available():
        return None
    if knob is None and not _has_repo(root):
        return None
    return commit_quietly(root, message="node", run_id=run_id)


def _has_repo(root: StoreRoot) -> bool:
    import icechunk

    try:
        return icechunk.Repository.exists(ic.repo_storage(root))
    except ValueError:
        return False


def expire(store, storage_options=None, *, keep: int = 0, dry_run: bool = False) -> dict | None:
    """Expire the repo's history older than its ``keep + 1`` newest reference commits and
    collect what no kept snapshot reaches (Icechunk's ``expire_snapshots`` then
    ``garbage_collect``, both cut at the oldest kept commit's time, never "now"). This is
    what ``zagg gc --keep K`` runs beside removing superseded leaf versions: a snapshot
    older than the kept ones may name versions that collection removes. ``None`` when the
    store has no repo."""
    root = as_root(store, storage_options)
    if not ic.available() or not _has_repo(root):
        return None
    repo = ic.open_repo(root)
    commits = [s for s in repo.ancestry(branch="main") if LEDGER in (s.metadata or {})]
    out = {"kept": min(len(commits), keep + 1), "expired": 0, "gc": None}
    if len(commits) <= keep + 1:
        return out
    cutoff = commits[keep].written_at
    if dry_run:
        out["expired"] = sum(1 for s in repo.ancestry(branch="main") if s.written_at < cutoff)
        return out
    out["expired"] = len(repo.expire_snapshots(older_than=cutoff))
    gc = repo.garbage_collect(cutoff)
    out["gc"] = {"snapshots": gc.snapshots_deleted, "manifests": gc.manifests_deleted}
    return out
