"""Commit the store's Icechunk companion: every committed leaf, declared column member and
overview as virtual references in one repository (spec §11), after a run and its sweep.

:func:`commit` brings ``{root}/icechunk/`` to the hive as it stands: one group per level
named by its cell order (the base, each declared column member, each overview order), a
``(window, cells)`` array per field over that order's whole sphere, the row coordinate
``window_start``/``window_end`` at the root and the root attrs ``zagg_icechunk``,
``zarr_conventions`` and ``multiscales``, the manifests split as the block records (§11.5).

A leaf's references come from the ref carrier its own task wrote beside it
(:class:`CarrierWriter`), so the commit does not read the leaves again; an object without
a valid carrier (an overview, a leaf written without one) is read as §11.4 says. Each
object's references are fingerprinted; the fingerprints ride the commit's metadata, so
the next commit re-writes only the objects whose references changed and a commit with
nothing changed lands nothing. A run killed before its commit leaves the repo at its
previous snapshot, and the next commit (which compares against the hive, not against the
run) catches up. A commit that another writer beats to the branch is derived again from
the new tip and the hive (:func:`retrying`) rather than rebased, since what it records —
the ledger of fingerprints — is derived from the snapshot it started on; on a local store
each attempt also holds the store root's lock (:func:`zagg.hive.icechunk.exclusive`).
Nothing here copies a byte of the hive: every chunk is a reference into a
leaf, column or overview object. The run's close (finalize, tag, retention) is
:mod:`zagg.pyramid.icechunk_runs`.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import hashlib
import json
import logging
import math
import random
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from zagg import grid as G
from zagg.errors import ZaggError, ZaggWarning
from zagg.hive import artifact, coverage
from zagg.hive import icechunk as ic
from zagg.hive.manifest import read_manifest
from zagg.hive.paths import leaf_path
from zagg.hive.stamp import COMMIT_ATTR, data_prefix, read_stamp_or_debris
from zagg.hive.storage import StoreRoot, as_root, dumps_json
from zagg.hive.walk import walk_windows
from zagg.pyramid.declare import of_manifest
from zagg.pyramid.icechunk_knobs import Settings, orders

log = logging.getLogger(__name__)

LEDGER = "zagg_refs"  # commit-metadata key: object → "identity fingerprint" of its refs
ALL = artifact.WINDOW_ALL
ROW_FILL = -(2**63)
MULTISCALES_CONVENTION = {
    "schema_url": "https://raw.githubusercontent.com/zarr-conventions/multiscales/refs/tags/v0.1/schema.json",
    "spec_url": "https://github.com/zarr-conventions/multiscales/blob/v0.1/README.md",
    "uuid": "d35379db-88df-4056-af3a-620245f8e347",
    "name": "multiscales",
    "description": "Multiscale layout of zarr datasets",
}
READERS = 16  # concurrent reads of carriers and objects on an object store


def enabled(knob: bool | None) -> bool:
    """``output.icechunk`` resolved: its value, or on when the package is installed."""
    return ic.available() if knob is None else bool(knob)


# -- what the repo indexes ---------------------------------------------------------------


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
    stamp: str | None = None  # its stamp's written_at: with prefix, what identifies it
    kind: str = "leaf"  # leaf | column | overview
    touched: int | None = None  # on a local store, its root zarr.json's mtime (ns)

    @property
    def key(self) -> str:
        return f"{self.level}|{self.row}|{self.node}"

    @property
    def identity(self) -> str:
        """What the ledger compares to skip an unchanged object without reading it: its
        data prefix and stamp, and on a local store the time the lifecycle touch moves
        (with the checksums its references carry; an object store's ETags survive it)."""
        tail = "" if self.touched is None else f"@{self.touched}"
        return f"{self.prefix}@{self.stamp}{tail}"


@dataclass
class IcechunkSummary:
    """What one commit did."""

    path: str
    snapshot: str | None = None
    commits: list = field(default_factory=list)  # messages of the commits made
    objects: int = 0
    changed: int = 0
    refs: int = 0
    carriers: int = 0  # objects whose references came from a carrier
    read: int = 0  # objects whose references were read from the objects themselves
    rows: list = field(default_factory=list)
    split_ratchet: str | None = None  # "{from}->{to}" when this commit re-cut the split
    warnings: list = field(default_factory=list)
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


def _pool_map(root: StoreRoot, fn, items):
    """``map(fn, items)``, on an object store with concurrent requests."""
    items = list(items)
    if root.is_local or len(items) < 2:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(min(READERS, len(items))) as pool:
        return list(pool.map(fn, items))


def _written_at(attrs: dict | None) -> str | None:
    seal = (attrs or {}).get(COMMIT_ATTR)
    return seal.get("written_at") if isinstance(seal, dict) else None


def objects(root: StoreRoot, manifest: dict) -> list[Obj]:
    """Every committed object the repo indexes, in a stable order."""
    p, c = int(manifest["shard_order"]), int(manifest["cell_order"])
    decl = of_manifest(manifest)
    windowed = manifest.get("temporal") is not None
    if windowed:
        by_row = {w: [sid for _r, sid in found] for w, found in walk_windows(root).items()}
    else:
        by_row = {ALL: [sid for _r, sid in coverage.listed_leaves(root, p)]}
    units = [(row, sid) for row, sids in by_row.items() for sid in sids]

    def leaf(unit):
        row, sid = unit
        rel = leaf_path(sid, None if row == ALL else row)
        stamp, problem = read_stamp_or_debris(root, rel)
        if stamp is None or problem:
            return None
        prefix = data_prefix(rel, stamp)
        when = ic.modified(root, f"{prefix}/zarr.json")
        return Obj(c, row, sid, prefix, stamp.get("written_at"), "leaf", when)

    def column(unit):
        row, sid = unit
        rel = artifact.column_path(sid, None if row == ALL else row)
        attrs = artifact.stamped_attrs(root, rel, "column")
        groups = (attrs or {}).get(artifact.COLUMN_ATTR, {}).get("groups") or {}
        when, touched = _written_at(attrs), ic.modified(root, f"{rel}/zarr.json")
        return [
            Obj(r, row, sid, rel, when, "column", touched)
            for r in decl.resolutions
            if str(r) in groups
        ]

    out = [o for o in _pool_map(root, leaf, units) if o is not None]
    if decl is None:
        return out
    out += [o for found in _pool_map(root, column, units) for o in found]
    shards = sorted({s for sids in by_row.values() for s in sids})
    rows = list(by_row) + ([ALL] if windowed and decl.all_time else [])
    nodes = []
    for k, r in decl.ladder():
        for nid in sorted({G.ancestor_id(s, k) for s in shards}):
            for row in rows:
                if row != ALL and not any(G.ancestor_id(s, k) == nid for s in by_row[row]):
                    continue
                nodes.append((k, r, nid, row))

    def overview(item):
        _k, r, nid, row = item
        rel = artifact.overview_path(nid, None if row == ALL else row)
        attrs = artifact.stamped_attrs(root, rel, "overview")
        if attrs and attrs[artifact.OVERVIEW_ATTR].get("cell_order") == r:
            when = ic.modified(root, f"{rel}/zarr.json")
            return Obj(r, row, nid, rel, _written_at(attrs), "overview", when)
        return None

    return out + [o for o in _pool_map(root, overview, nodes) if o is not None]


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
    h = hashlib.sha256()
    for name, a in sorted(arrays.items()):
        h.update(f"{name}\n".encode())
        for r in a.refs:
            h.update(f"{r.j} {r.key} {r.offset} {r.length} {r.checksum}\n".encode())
    return h.hexdigest()[:20]


def _ledger(repo, snapshot: str | None = None) -> dict:
    """The fingerprints the newest commit that recorded them left, in main's history or
    ``snapshot``'s (empty: none)."""
    history = repo.ancestry(snapshot_id=snapshot) if snapshot else repo.ancestry(branch="main")
    for snap in history:
        meta = snap.metadata or {}
        if LEDGER in meta:
            return dict(meta[LEDGER])
    return {}


def indexed(repo, snapshot: str) -> bool:
    """Whether ``snapshot``'s history holds a commit of references (a ledger): a repo
    whose every such commit failed holds the store's groups and reads fill everywhere."""
    return any(LEDGER in (s.metadata or {}) for s in repo.ancestry(snapshot_id=snapshot))


# -- references: from the carriers, else from the objects ----------------------------------


def _carrier_of(obj: Obj) -> str | None:
    if obj.kind == "overview":
        return None
    return ic.carrier_key(obj.node, None if obj.row == ALL else obj.row)


def gather(
    root: StoreRoot, objs: list[Obj], geometry: dict, summary: IcechunkSummary
) -> dict[str, dict[str, ic.ObjectArray]]:
    """Every object's references by its key: from its leaf's carrier when the carrier
    describes the object as it stands (same data prefix, same stamp), else read from the
    object itself. Carriers and objects are read concurrently on an object store."""
    wanted = sorted({k for o in objs if (k := _carrier_of(o)) is not None})

    def read(key):
        try:
            return ic.carrier_units(root, root.read_json(key), geometry)
        except ValueError:  # unreadable: the objects are read instead
            return None

    units = {}
    for key, found in zip(wanted, _pool_map(root, read, wanted), strict=True):
        for u in found or ():
            if isinstance(u, dict):
                units[(key, f"{u.get('level')}|{u.get('row')}|{u.get('node')}")] = u
    out, missing = {}, []
    for o in objs:
        u = units.get((_carrier_of(o), o.key))
        arrays = None
        if u is not None and u.get("prefix") == o.prefix and u.get("stamp") == o.stamp:
            try:
                arrays = ic.refreshed(root, ic.unit_arrays(u, root.is_local))
            except (KeyError, TypeError, ValueError):  # a damaged unit: read the object
                arrays = None
        if arrays is None:
            missing.append(o)
        else:
            out[o.key] = arrays
            summary.carriers += 1
    read_back = _pool_map(root, lambda o: ic.group_refs(root, f"{o.prefix}/{o.level}"), missing)
    for o, arrays in zip(missing, read_back, strict=True):
        out[o.key] = arrays
        summary.read += 1
    return out


# -- the ref carrier, written by the leaf's own task ----------------------------------------


def write_carrier(root: StoreRoot, record: dict, geometry: dict, columns=()) -> dict:
    """Write the ref carrier of the leaf a task just wrote (``record``, the leaf writer's
    record): the references of its arrays and of its column's declared members, read from
    the objects the task just stored (each group in three rounds of requests, §11.4).
    ``geometry``: the store's shard, inner-chunk and cell orders. Returns what lands in
    the record's ``icechunk``."""
    shard, window = record["shard_id"], record.get("window")
    row = ALL if window is None else window
    rel = record["path"]
    prefix = f"{rel}/{record['version']}" if record.get("version") else rel
    c = int(geometry["cell_order"])
    leaf = ic.group_refs(root, f"{prefix}/{c}")
    units = [ic.carrier_unit(c, row, shard, prefix, record.get("written_at"), leaf)]
    if columns:
        col = artifact.column_path(shard, window)
        attrs = artifact.stamped_attrs(root, col, "column")
        held = (attrs or {}).get(artifact.COLUMN_ATTR, {}).get("groups") or {}
        units += [
            ic.carrier_unit(
                r, row, shard, col, _written_at(attrs), ic.group_refs(root, f"{col}/{r}")
            )
            for r in columns
            if str(r) in held
        ]
    key = ic.carrier_key(shard, window)
    n = root.write_bytes(key, dumps_json(ic.carrier_doc(root, geometry, units)))
    refs = sum(len(a["refs"]) for u in units for a in u["arrays"].values())
    return {"carrier": key, "bytes": n, "refs": refs, "units": len(units)}


@dataclass(frozen=True)
class CarrierWriter:
    """A leaf writer whose every leaf unit ends with its ref carrier (§11.4: last in the
    unit, after the stamp, the sidecars and the column). Fail-open: a carrier that cannot
    be written is recorded in the leaf's record and the commit reads that leaf instead."""

    writer: object
    geometry: dict
    columns: tuple[int, ...] = ()

    @property
    def root(self):
        return self.writer.root

    @property
    def arrays(self) -> list[str]:
        return self.writer.arrays

    def hashed_bytes(self, rows: int) -> int:
        return self.writer.hashed_bytes(rows)

    def encode(self, sc, name: str):
        return self.writer.encode(sc, name)

    def write(self, sc, encoded: dict | None = None):
        record = self.writer.write(sc, encoded)
        if record:
            try:
                record["icechunk"] = write_carrier(
                    self.writer.root, record, self.geometry, self.columns
                )
            except Exception as exc:  # the index never fails the leaf it indexes
                warnings.warn(
                    f"ref carrier of leaf {record.get('path')} was not written: {exc}",
                    ZaggWarning,
                    stacklevel=2,
                )
                record["icechunk"] = {"error": f"{type(exc).__name__}: {exc}"}
        return record


def with_carriers(writer, spec):
    """``writer`` (a :class:`~zagg.engine.write.LeafWriter`) made to
    write each leaf's ref carrier, when the store spec's ``output.icechunk`` is on (a
    :class:`~zagg.config.store.StoreSpec`); else ``writer`` itself."""
    output = (spec.record or {}).get("output") or {}
    knob = output.get("icechunk")
    if isinstance(knob, dict):
        knob = knob.get("enabled", True)
    if not enabled(knob if isinstance(knob, bool) else None):
        return writer
    g = spec.grid
    geometry = {
        "shard_order": g.shard_order,
        "chunk_order": g.chunk_order,
        "cell_order": g.cell_order,
    }
    columns = tuple(spec.pyramid.resolutions) if spec.pyramid is not None else ()
    return CarrierWriter(writer, geometry, columns)


# -- the repo's structure ----------------------------------------------------------------


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
        day0 = np.datetime64("0001-01-01", "D").astype(np.int64)
        index = int(day.astype(np.int64)) - int(day0)
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


class RepoDocs:
    """A writable session's store, read and written as zarr documents and chunks."""

    def __init__(self, session):
        from zarr.core.buffer import default_buffer_prototype

        self.session = session
        self.store = session.store
        self.proto = default_buffer_prototype()

    def get_bytes(self, key: str) -> bytes | None:
        from zarr.core.sync import sync

        buf = sync(self.store.get(key, self.proto))
        return None if buf is None else buf.to_bytes()

    def get_json(self, key: str):
        data = self.get_bytes(key)
        return None if data is None else json.loads(data)

    def put_json(self, key: str, doc: dict) -> bool:
        """Write a metadata document unless it is already there as given."""
        if self.get_json(key) == doc:
            return False
        self.put_chunk(key, json.dumps(doc).encode())
        return True

    def put_chunk(self, key: str, data: bytes) -> None:
        from zarr.core.sync import sync

        sync(self.store.set(key, self.proto.buffer.from_bytes(data)))

    def delete(self, key: str) -> None:
        from zarr.core.sync import sync

        sync(self.store.delete(key))


def read_block(repo, snapshot: str | None = None) -> dict:
    """The ``zagg_icechunk`` block of main's tip (or of ``snapshot``); empty when none."""
    session = (
        repo.readonly_session(snapshot_id=snapshot)
        if snapshot
        else repo.readonly_session(branch="main")
    )
    doc = RepoDocs(session).get_json("zarr.json") or {}
    return dict((doc.get("attributes") or {}).get("zagg_icechunk") or {})


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


def coordinate_chunk(values) -> bytes:
    """One encoded 1,024-row chunk of the row coordinate (fill beyond ``values``)."""
    import numcodecs

    block = np.full(1024, ROW_FILL, dtype="<i8")
    block[: len(values)] = values
    return bytes(numcodecs.Zstd(level=3).encode(block.tobytes()))


def _write_rows(repo: RepoDocs, manifest: dict, rows: list[str]) -> bool:
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
        return changed
    bounds = [_row_bounds(w, r) if r != ALL else (ROW_FILL, ROW_FILL) for r in rows]
    for i, name in enumerate(("window_start", "window_end")):
        for c0 in range(0, len(rows), 1024):
            vals = [b[i] for b in bounds[c0 : c0 + 1024]]
            repo.put_chunk(f"{name}/c/{c0 // 1024}", coordinate_chunk(vals))
    return changed


@dataclass
class _Split:
    """The run's manifest split after the §11.5 ratchet."""

    split_order: int
    rows_per_manifest: int
    commit_order: int
    ratchet: str | None = None


def _ratchet(block: dict, settings: Settings, p: int, summary: IcechunkSummary, path: str):
    """The split this commit writes at: the store's recorded split_order unless the
    config's is coarser (a ratchet, recorded); a finer one is adopted from the store with
    a warning. rows_per_manifest is the store's once the repo exists."""
    wanted, commit_order = orders(settings, p)
    if not block:
        split, rows, ratchet = wanted, settings.rows_per_manifest, None
    else:
        if "rows_per_manifest" not in block:
            raise ValueError(
                f"{path} records no rows_per_manifest: it was written before manifests were "
                f"split by row; clear {ic.REPO_DIR}/ and run again to re-create it"
            )
        split, rows, ratchet = int(block["split_order"]), int(block["rows_per_manifest"]), None
        explicit = settings.split_order is not None or settings.commit_order is not None
        if explicit and wanted < split:
            ratchet, split = f"{split}->{wanted}", wanted
        elif explicit and wanted > split:
            summary.warnings.append(
                f"output.icechunk.split_order {wanted} is finer than the store's {split}: "
                f"the store's is kept (a split only ever moves coarser)"
            )
        if settings.rows_per_manifest != rows and settings.rows_per_manifest != 1:
            summary.warnings.append(
                f"output.icechunk.rows_per_manifest {settings.rows_per_manifest} differs "
                f"from the store's {rows}, fixed when its repo was created: the store's is kept"
            )
    if settings.commit_order is None:
        commit_order = min(commit_order, split)
    if commit_order > split:
        raise ValueError(
            f"output.icechunk.commit_order {commit_order} is finer than the store's "
            f"split_order {split}; give commit_order <= {split}"
        )
    for w in summary.warnings:
        log.warning("icechunk: %s", w)
    return _Split(split, rows, commit_order, ratchet)


def _templates(root: StoreRoot, objs: list[Obj]) -> tuple[dict, dict]:
    """Per level, the metadata of each array and the group attrs, from one object of it."""
    first: dict[int, Obj] = {}
    for o in objs:
        first.setdefault(o.level, o)

    def read(o):
        arrays = ic.group_refs(root, f"{o.prefix}/{o.level}")
        doc = root.read_json(f"{o.prefix}/{o.level}/zarr.json") or {}
        return {n: a.meta for n, a in arrays.items()}, dict(doc.get("attributes") or {})

    got = dict(zip(first, _pool_map(root, read, first.values()), strict=True))
    return {c: g[0] for c, g in got.items() if g[0]}, {c: g[1] for c, g in got.items()}


def _chunk_order(level: Level, metas: dict) -> int:
    """A level's chunk-axis order: the order one chunk of its objects spans."""
    meta = next(iter(metas.values()))
    return level.node_order + round(math.log(ic.chunk_count(meta), 4))


def _structure(root, manifest, lv, templates, group_attrs, block, rows, split, p):
    """The root attrs (the block with its levels and splits) and the level arrays."""
    levels = dict(block.get("levels") or {})
    for c, e in lv.items():
        if c in templates:
            own = _chunk_order(e, templates[c])
            levels[str(c)] = {
                "node_order": e.node_order,
                "artifact": e.artifact,
                "chunk_order": own,
                "cell_order": c,
                "split": None,
            }
    cell_order = int(manifest["cell_order"])
    base = levels.get(str(cell_order))
    base_chunk = base["chunk_order"] if base else int(block.get("chunk_order", p))
    for e in levels.values():
        e["split"] = ic.level_split(
            base_chunk, split.split_order, e["chunk_order"], split.rows_per_manifest
        )
    levels = dict(sorted(levels.items(), key=lambda kv: -int(kv[0])))
    new_block = {
        "spec": ic.SPEC,
        "shard_order": p,
        "chunk_order": base_chunk,
        "cell_order": cell_order,
        "url_prefix": ic.url_prefix(root),
        "rows": rows,
        "commit": "leaf",
        "commit_order": split.commit_order,
        "split_order": split.split_order,
        "rows_per_manifest": split.rows_per_manifest,
        "levels": levels,
    }
    if "retired" in block:
        new_block["retired"] = block["retired"]
    attrs = {"zagg_icechunk": new_block}
    if manifest.get("multiscales"):
        listed = {c: e for c, e in lv.items() if str(c) in levels}
        base_dggs = group_attrs.get(cell_order, {}).get("dggs")
        ms = dict(manifest["multiscales"][0])
        ms["layout"] = _layout(manifest, listed, base_dggs)
        attrs["zarr_conventions"] = [dict(MULTISCALES_CONVENTION)]
        attrs["multiscales"] = ms
    return new_block, attrs


def _check_block(block: dict, new: dict, path: str) -> None:
    for key in ("shard_order", "chunk_order", "cell_order", "url_prefix"):
        if block and block.get(key) != new[key]:
            raise ValueError(
                f"{path} records {key} {block.get(key)!r}, the store {new[key]!r}: clear "
                f"{ic.REPO_DIR}/ and run again to re-create it"
            )


@dataclass(frozen=True)
class _Entry:
    """One object's line in the commit metadata's ledger: what identified the object (its
    data prefix and stamp), the fingerprint of its references, and which of its chunks
    held one (hex bits), so a replacement drops only the chunks the old one held."""

    identity: str
    fingerprint: str
    mask: int | None = None

    def __str__(self) -> str:
        return f"{self.identity} {self.fingerprint} {self.mask:x}"

    @classmethod
    def parse(cls, text: str | None):
        if not text:
            return None
        parts = text.split(" ")
        if len(parts) == 3:
            return cls(parts[0], parts[1], int(parts[2], 16))
        return cls("", parts[-1])  # a ledger written before identities and masks

    def chunks(self, count: int) -> set[int]:
        """The chunk indices the object held (every one when unknown)."""
        if self.mask is None:
            return set(range(count))
        return {j for j in range(count) if self.mask >> j & 1}


def _held(arrays: dict[str, ic.ObjectArray]) -> int:
    mask = 0
    for a in arrays.values():
        for r in a.refs:
            mask |= 1 << r.j
    return mask


class _Staged:
    """The references and deletions of one commit, set array by array in one call each
    (Icechunk's per-call cost is paid once per array, not per reference)."""

    def __init__(self, root: StoreRoot, docs: RepoDocs):
        self.docs = docs
        self.prefix = ic.url_prefix(root)  # every reference's container prefix
        self.refs: dict[str, list] = {}
        self.gone: list[str] = []

    def add(self, path: str, index: tuple[int, int], ndim: int, ref: ic.Ref) -> None:
        import icechunk

        local = isinstance(ref.checksum, _dt.datetime)
        self.refs.setdefault(path, []).append(
            icechunk.VirtualChunkSpec(
                index=[*index] + [0] * (ndim - 1),
                location=ic.location(self.prefix, ref.key),
                offset=ref.offset,
                length=ref.length,
                etag_checksum=None if local else ref.checksum,
                last_updated_at_checksum=ref.checksum if local else None,
            )
        )

    def drop(self, path: str, index: tuple[int, int], ndim: int) -> None:
        self.gone.append(ic.repo_chunk_key(path, index[0], index[1], ndim))

    def flush(self) -> int:
        """Set every staged reference, then delete every dropped chunk (an object's held
        and dropped chunks never meet); returns the references set."""
        n = 0
        for path, specs in self.refs.items():
            failed = self.docs.store.set_virtual_refs(f"/{path}", specs)
            if failed:
                raise ic.IcechunkError(
                    f"{len(failed)} references of /{path} name no known container: "
                    "clear icechunk/ and run again"
                )
            n += len(specs)
        for key in self.gone:
            self.docs.delete(key)
        return n


# -- one commit --------------------------------------------------------------------------

#: attempts of one commit that loses to other writers before it gives up
COMMIT_TRIES = 12


class _Moved(ZaggError, RuntimeError):
    """The repository moved between two reads of one commit attempt (retried; a run that
    loses every attempt says so in one line)."""


def _lost_race(exc: BaseException) -> bool:
    """Whether ``exc`` says another writer moved the branch (or the repo) first."""
    import icechunk

    names = ("ConflictError", "RebaseFailedError")
    kinds = (_Moved, *(getattr(icechunk, n) for n in names if hasattr(icechunk, n)))
    if isinstance(exc, kinds):
        return True
    own = getattr(icechunk, "IcechunkError", ())
    return isinstance(exc, own) and "conflict" in str(exc).lower()


def retrying(attempt, what: str, tries: int = COMMIT_TRIES):
    """``attempt()`` until it lands: a commit that another writer beat to the branch is
    derived again, from a fresh session at the new tip and the hive as it then stands, so
    it never drops or overwrites what the other writer committed; at most ``tries``
    attempts, with a growing random pause between them."""
    for n in range(1, tries + 1):
        try:
            return attempt()
        except Exception as exc:
            if not _lost_race(exc) or n == tries:
                if _lost_race(exc):
                    raise ic.IcechunkError(
                        f"{what} lost {n} races to other writers of the repository; run "
                        "again once they are done"
                    ) from None
                raise
            log.info("icechunk: %s lost a race (attempt %d): %s", what, n, exc)
            time.sleep(random.uniform(0.02, 0.1) * n)
    raise AssertionError("unreachable")


def commit(
    store,
    storage_options=None,
    *,
    message: str = "leaf",
    run_id: str | None = None,
    settings: Settings | None = None,
) -> IcechunkSummary:
    """Bring the store's repo to its hive: create it (and its groups, arrays and rows) when
    absent, re-write the references of every object whose references changed, and commit
    once — nothing when nothing changed. ``message`` heads the commit's message;
    ``settings`` are the config's knobs (the store's recorded split wins, §11.5). Safe
    against other writers committing at once (:func:`retrying`)."""
    t0 = time.perf_counter()
    root = as_root(store, storage_options)
    ic.check_path(root)
    settings = settings or Settings()

    def attempt():
        with ic.exclusive(root):
            return _commit_once(root, settings, message, run_id)

    summary = retrying(attempt, f"the {message} commit")
    summary.seconds = time.perf_counter() - t0
    return summary


def _commit_once(root: StoreRoot, settings: Settings, message: str, run_id) -> IcechunkSummary:
    """One attempt of :func:`commit`, every input read afresh."""
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"{root.url} has no manifest: not a hive store root")
    summary = IcechunkSummary(ic.url_prefix(root) + ic.REPO_DIR)
    p = int(manifest["shard_order"])
    lv = levels_of(manifest)
    objs = objects(root, manifest)
    summary.objects = len(objs)
    repo = ic.open_repo(root, create=bool(objs))
    if repo is None:  # no object yet (a run whose region held no point): nothing to index
        return summary
    block = read_block(repo)
    if block and block.get("spec") != ic.SPEC:
        raise ValueError(
            f"{summary.path} is a {block.get('spec')!r} repo, not {ic.SPEC}: clear "
            f"{ic.REPO_DIR}/ and run again to re-create it"
        )
    rows = list(block.get("rows") or [])
    windowed = manifest.get("temporal") is not None
    wanted = sorted({o.row for o in objs} - {ALL}) + ([ALL] if not windowed else [])
    if windowed and any(o.row == ALL for o in objs):
        wanted.append(ALL)
    rows += [w for w in wanted if w not in rows]
    if not rows:
        return summary  # a windowed store with no window yet: nothing to index
    summary.rows = rows
    row_of = {label: i for i, label in enumerate(rows)}

    split = _ratchet(block, settings, p, summary, summary.path)
    templates, group_attrs = _templates(root, objs)
    new_block, attrs = _structure(root, manifest, lv, templates, group_attrs, block, rows, split, p)
    _check_block(block, new_block, summary.path)
    summary.split_ratchet = split.ratchet
    # the split is saved with the repo before any commit, so every manifest is cut by it
    cut = ic.splitting(new_block["levels"], split.rows_per_manifest)
    saved = repo.config.manifest
    if saved is None or repr(saved.splitting) != repr(cut):
        repo = ic.open_repo(root, splitting=cut)
        repo.save_config()
    docs = RepoDocs(repo.writable_session("main"))
    if read_block(repo, docs.session.snapshot_id) != block:  # moved since it was read
        raise _Moved("the repository's block moved while it was read")
    structure = docs.put_json("zarr.json", _group_doc(attrs))
    structure |= _write_rows(docs, manifest, rows)
    n_nodes = {c: 12 * 4**e.node_order for c, e in lv.items()}
    for c, metas in templates.items():
        structure |= docs.put_json(f"{c}/zarr.json", _group_doc(group_attrs.get(c, {})))
        for name, meta in metas.items():
            doc = ic.repo_array_doc(meta, len(rows), n_nodes[c])
            structure |= docs.put_json(f"{c}/{name}/zarr.json", doc)
    for c in set(int(k) for k in new_block["levels"]) - set(templates):  # listed, no object now
        for name in _array_names(docs, c):
            doc = docs.get_json(f"{c}/{name}/zarr.json")
            if doc and doc["shape"][0] != len(rows):  # rows grow for the whole repo
                doc["shape"][0] = len(rows)
                structure |= docs.put_json(f"{c}/{name}/zarr.json", doc)
    if structure and docs.session.has_uncommitted_changes:
        head = f"split ratchet {split.ratchet}" if split.ratchet else "init"
        docs.session.commit(
            f"{head} {run_id or ''}".strip(),
            metadata={"run_id": run_id, "split_ratchet": split.ratchet},
        )
        summary.commits.append("split ratchet" if split.ratchet else "init")
        docs = RepoDocs(repo.writable_session("main"))

    ledger = _ledger(repo, docs.session.snapshot_id)
    fresh: dict[str, str] = {}
    todo = []
    for o in objs:
        old = _Entry.parse(ledger.get(o.key))
        if old is not None and old.identity == o.identity:
            fresh[o.key] = ledger[o.key]  # unchanged, and not touched since: not read
        else:
            todo.append(o)
    geometry = {k: new_block[k] for k in ("shard_order", "chunk_order", "cell_order")}
    refs = gather(root, todo, geometry, summary)
    ranks = _ranks(sorted({o.node for o in todo}))
    staged = _Staged(root, docs)
    for o in todo:
        arrays = refs[o.key]
        new = _Entry(o.identity, _fingerprint(arrays), _held(arrays))
        fresh[o.key] = str(new)
        old = _Entry.parse(ledger.get(o.key))
        if old is not None and old.fingerprint == new.fingerprint:
            continue
        summary.changed += 1
        w, rank = row_of[o.row], ranks[o.node]
        for name, a in arrays.items():
            meta = templates.get(o.level, {}).get(name)
            if meta is None:
                continue
            path, base, ndim = f"{o.level}/{name}", rank * a.chunks, len(meta["shape"])
            for ref in a.refs:
                staged.add(path, (w, base + ref.j), ndim, ref)
            if old is not None:  # a replaced object: drop the chunks it no longer holds
                held = {ref.j for ref in a.refs}
                for j in old.chunks(a.chunks) - held:
                    staged.drop(path, (w, base + j), ndim)
    gone = set()
    for key in set(ledger) - set(fresh):
        if _still_there(root, key, ledger[key]):  # listed late (another run's): kept
            fresh[key] = ledger[key]
        else:
            gone.add(key)
    for key in gone:  # an object no longer in the hive: its chunks read as fill
        level, row, node = key.split("|")
        if row not in row_of or int(level) not in templates:
            continue
        rank = _ranks([node])[node]
        old = _Entry.parse(ledger[key])
        for name, meta in templates[int(level)].items():
            k = ic.chunk_count(meta)
            for j in old.chunks(k):
                staged.drop(f"{level}/{name}", (row_of[row], rank * k + j), len(meta["shape"]))
    summary.refs = staged.flush()
    if summary.changed or gone:
        summary.snapshot = docs.session.commit(
            f"{message} {run_id or ''}".strip(),
            metadata={LEDGER: fresh, "run_id": run_id, "objects": len(fresh)},
        )
        summary.commits.append(message)
    else:
        summary.snapshot = docs.session.snapshot_id
    return summary


def _still_there(root: StoreRoot, key: str, entry: str) -> bool:
    """Whether an object the ledger lists but this commit's listing of the hive did not is
    still in the hive (its group document stands): another run's object, listed in a root
    object that run had not yet updated when this commit read it."""
    old = _Entry.parse(entry)
    prefix = old.identity.split("@", 1)[0] if old is not None else ""
    if not prefix:
        return False
    return root.exists(f"{prefix}/{key.split('|', 1)[0]}/zarr.json")


def _array_names(docs: RepoDocs, c: int) -> list[str]:
    from zarr.core.sync import sync

    async def names():
        return [k async for k in docs.store.list_dir(f"{c}/")]

    return sorted(n.rstrip("/") for n in sync(names()) if n.rstrip("/") != "zarr.json")


def commit_quietly(store, storage_options=None, **kwargs) -> dict:
    """:func:`commit`, fail-open: the hive is normative and the repo regenerable, so a
    failure is logged and returned as ``{"error": …}`` and never fails the run."""
    try:
        s = commit(store, storage_options, **kwargs)
    except Exception as exc:  # the index never fails the hive it indexes
        log.warning("icechunk commit failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}"}
    out = {
        "path": s.path,
        "snapshot": s.snapshot,
        "commits": s.commits,
        "objects": s.objects,
        "changed": s.changed,
        "refs": s.refs,
        "carriers": s.carriers,
        "read": s.read,
        "rows": s.rows,
        "seconds": s.seconds,
    }
    if s.split_ratchet:
        out["split_ratchet"] = s.split_ratchet
    if s.warnings:
        out["warnings"] = s.warnings
    return out


def after_run(cfg, summary, store, storage_options, run_id: str | None = None):
    """The run's commit of its leaves (``leaf``), when the config's knob is on; recorded
    as ``summary.icechunk``. Returns ``summary``."""
    if enabled(cfg.output.icechunk):
        summary.icechunk = commit_quietly(
            store,
            storage_options,
            message="leaf",
            run_id=run_id,
            settings=getattr(cfg.output, "icechunk_settings", None),
        )
    return summary


def after_sweep(root: StoreRoot, knob: bool | None, run_id: str | None = None) -> dict | None:
    """The sweep's commit of its overviews (``node``): when ``knob`` is true, or unset and
    the store already has a repo."""
    if knob is False or not ic.available():
        return None
    if knob is None and not has_repo(root):
        return None
    return commit_quietly(root, message="node", run_id=run_id)


def has_repo(root: StoreRoot) -> bool:
    """Whether the store has an Icechunk companion (``{root}/icechunk/``)."""
    import icechunk

    try:
        return icechunk.Repository.exists(ic.repo_storage(root))
    except ValueError:
        return False
