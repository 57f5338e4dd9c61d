"""Pyramid artifacts: leaf columns and overviews, zarr v3 groups of several resolutions.

Both kinds (spec §4.4, §4.6) hold one group per cell order ``r``, named ``str(r)``, with
the node's ``4^(r - node)`` descendant words in ``morton`` and one array per composable
field, laid out by the group's own geometry: below ``4^5`` cells one unsharded chunk,
from ``4^5`` on one ``sharding_indexed`` object with inner chunks of
``min(4^5, n / 4)`` cells. Arrays are encoded from their occupied cells by
:mod:`zagg.hive.encode` (the leaf's own encoder and §5 digests). Write order is the leaf's:
the prefix of a previous artifact (and its stale sidecar) is cleared, then the template,
the chunks, and last one PUT of the root ``zarr.json`` carrying the role, provenance and
commit stamp together, so a stamp certifies everything. The stats sidecar
(``{stem}.stats.json``) follows. Artifacts are never versioned (spec §1.5).
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import zarr
from zarr.codecs import BytesCodec, VLenBytesCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.group import GroupMetadata

from zagg import grid as _grid
from zagg.hive import encode, hashes
from zagg.hive.cells import DenseCells, RaggedCells, dense_cells
from zagg.hive.layout import CELL_DIM, MORTON, VLEN_DTYPE, FieldSpec, dggs_attrs
from zagg.hive.parts import object_size
from zagg.hive.stamp import COMMIT_ATTR, HIVE_SPEC, ZARR_JSON, now_iso
from zagg.hive.stats import STATS_SPEC
from zagg.hive.storage import StoreRoot

ROLE_ATTR = "role"
COLUMN_ATTR = "zagg_column"
COLUMN_SPEC = "zagg-column/1"
OVERVIEW_ATTR = "zagg_overview"
OVERVIEW_SPEC = "zagg-overview/2"
COLUMN_NAME = "all.pyramid.zarr"
OVERVIEW_NAME = "all.zarr"
SHARDED_DEPTH = 5  # groups of 4^5 cells or more are sharded (spec §4.6 "Layout")


def sidecar_key(rel: str) -> str:
    """The stats sidecar of an artifact: its basename's stem + ``.stats.json``."""
    node, name = rel.rsplit("/", 1)
    return f"{node}/{name[: -len('.zarr')]}.stats.json"


WINDOW_ALL = "all"  # the reserved label of the all-time fold (never a window's)


def column_path(shard_id: str, window: str | None = None) -> str:
    """The leaf column of a shard: ``{node}/all.pyramid.zarr`` unwindowed, and
    ``{node}/{window}.pyramid.zarr`` beside the shard's leaf of that window."""
    name = COLUMN_NAME if window is None else f"{_label(window)}.pyramid.zarr"
    return f"{_grid.node_path(shard_id)}/{name}"


def overview_path(node_id: str, window: str | None = None) -> str:
    """The overview at an ancestor node: ``{node}/all.zarr`` (the unwindowed ladder, or a
    windowed store's all-time fold), ``{node}/{window}.zarr`` for one time window."""
    name = OVERVIEW_NAME if window is None else f"{_label(window)}.zarr"
    return f"{_grid.node_path(node_id)}/{name}"


def _label(window: str) -> str:
    """A window label as a path component: checked against the label grammar."""
    from zagg.windows.schedule import LABEL_RE

    if window == WINDOW_ALL or not LABEL_RE.match(str(window)):
        raise ValueError(
            f"{window!r} is not a window label (1-32 of [0-9A-Za-z-], never "
            f"{WINDOW_ALL!r}, the all-time fold's reserved name)"
        )
    return window


def group_layout(node_order: int, r: int) -> tuple[int, int, bool]:
    """``(cells, cells per inner chunk, sharded)`` of resolution group ``r`` at a node."""
    n = 4 ** (r - node_order)
    if r - node_order < SHARDED_DEPTH:
        return n, n, False
    return n, min(4**SHARDED_DEPTH, n // 4), True


def template_documents(
    node_order: int, groups: dict[int, dict[str, FieldSpec]], morton_attrs: dict | None
) -> dict[str, bytes]:
    """The metadata objects of an artifact (key → bytes), the root group without attrs;
    built by zarr once per layout in a process (every column of a run shares one)."""
    key = json.dumps(
        [
            node_order,
            morton_attrs or {},
            sorted(
                [
                    r,
                    [
                        [n, sp.kind, str(sp.dtype), repr(sp.fill_value), sp.attrs]
                        for n, sp in specs.items()
                    ],
                ]
                for r, specs in groups.items()
            ),
        ],
        sort_keys=True,
        default=str,
    )
    docs = _TEMPLATES.get(key)
    if docs is None:
        docs = _template(node_order, groups, morton_attrs)
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        _TEMPLATES[key] = docs
    return docs


_TEMPLATES: dict[str, dict[str, bytes]] = {}


def _template(
    node_order: int, groups: dict[int, dict[str, FieldSpec]], morton_attrs: dict | None
) -> dict[str, bytes]:
    store = zarr.storage.MemoryStore()
    root = zarr.open_group(store, mode="w", zarr_format=3)
    for r, specs in sorted(groups.items(), reverse=True):
        g = root.create_group(str(r), attributes=dggs_attrs(r))
        n, inner, sharded = group_layout(node_order, r)
        _array(g, MORTON, np.dtype("uint64"), 0, dict(morton_attrs or {}), n, inner, sharded, False)
        for name, spec in specs.items():
            _array(g, name, spec.dtype, spec.fill_value, spec.attrs, n, inner, sharded, spec.ragged)
    return {k: bytes(v.to_bytes()) for k, v in store._store_dict.items()}


def _array(group, name, dtype, fill, attrs, n, inner, sharded, ragged):
    common = {
        "shape": (n,),
        "chunks": (inner,),
        "shards": (n,) if sharded else None,
        "filters": None,
        "attributes": dict(attrs),
        "dimension_names": [CELL_DIM],
        "config": {"write_empty_chunks": False},
    }
    if ragged:
        group.create_array(
            name,
            dtype=VLEN_DTYPE,
            fill_value=b"",
            serializer=VLenBytesCodec(),
            compressors=[ZstdCodec(level=3, checksum=False)],
            **common,
        )
    else:
        group.create_array(
            name,
            dtype=dtype.newbyteorder("<"),
            fill_value=fill,
            serializer=BytesCodec(endian="little"),
            compressors=None,
            **common,
        )


def root_document(template_root: bytes, attrs: dict) -> bytes:
    """The root ``zarr.json`` with ``attrs`` (role, provenance, stamp), as zarr writes it."""
    meta = GroupMetadata.from_dict(json.loads(template_root))
    sealed = dataclasses.replace(meta, attributes={**meta.attributes, **attrs})
    return bytes(sealed.to_buffer_dict(default_buffer_prototype())[ZARR_JSON].to_bytes())


def group_words(node_id: str, node_order: int, r: int) -> np.ndarray:
    """The node's order-``r`` descendant words, ascending (the group's ``morton``)."""
    return _grid.shard_cell_words(_grid.from_decimal([node_id])[0], node_order, r)


def clear(root: StoreRoot, rel: str) -> None:
    """Delete an artifact and its sidecar: one listing of the node finds them, and on an
    object store one bulk delete removes both (nothing is deleted when neither is there)."""
    node = rel.rsplit("/", 1)[0]
    dirs, files = root.list_dir(node)
    names = {rel.rsplit("/", 1)[1], sidecar_key(rel).rsplit("/", 1)[1]}
    found = [f"{node}/{n}" for n in sorted(names & set(dirs + files))]
    if not found:
        return
    if root.is_local:
        for key in found:
            root.delete_prefix(key)
        return
    try:
        root.fs.rm([root._full(k) for k in found], recursive=True)
    except FileNotFoundError:
        pass
    root.fs.invalidate_cache(root._full(node))


def write_artifact(
    root: StoreRoot,
    rel: str,
    node_id: str,
    groups: dict[int, dict[str, DenseCells | RaggedCells]],
    specs: dict[str, FieldSpec],
    provenance: dict,
    *,
    cells_with_data: int,
    granule_count: int = 0,
    stamp_extra: dict | None = None,
    morton_attrs: dict | None = None,
    fresh: bool = False,
) -> dict:
    """Write one artifact at ``rel`` (template → chunks → root attrs + stamp last) and
    return its record: content hashes, stamp, bytes and objects written, and its stats
    sidecar payload (``record["sidecar"]``: key → payload) for the caller to write."""
    t0 = time.perf_counter()
    node_order = _grid.id_order(node_id)
    if not fresh:
        clear(root, rel)
    template = template_documents(node_order, {r: specs for r in groups}, morton_attrs)
    objects = {f"{rel}/{k}": v for k, v in template.items() if k != ZARR_JSON}
    digests = {}
    for r, contents in groups.items():
        n, inner, sharded = group_layout(node_order, r)
        arrays = [
            (
                MORTON,
                dense_cells(
                    np.arange(n, dtype=np.int64),
                    group_words(node_id, node_order, r),
                    np.dtype("<u8"),
                    0,
                ),
                0,
            )
        ]
        arrays += [(name, contents[name], spec.fill_value) for name, spec in specs.items()]
        for name, cells, fill in arrays:
            if isinstance(cells, RaggedCells):
                enc = encode.encode_ragged_cells(cells, n, n // inner)
            else:
                enc = encode.encode_dense(cells.ranks, cells.values, fill, n, n // inner, sharded)
            digests[f"{r}/{name}"] = enc.digest
            for idx, data in enc.objects:
                objects[f"{rel}/{r}/{name}/c/{idx}"] = data
    root.write_many(objects)
    content = {"arrays": dict(sorted(digests.items())), "combined": hashes.combined_digest(digests)}
    written_at = now_iso()
    seal = {
        "spec": HIVE_SPEC,
        "complete": True,
        "cells_with_data": int(cells_with_data),
        "granule_count": int(granule_count),
        "content_hashes": content,
        "written_at": written_at,
        **(stamp_extra or {}),
    }
    doc = root_document(template[ZARR_JSON], {**provenance, COMMIT_ATTR: seal})
    root.write_bytes(f"{rel}/{ZARR_JSON}", doc)
    nbytes = sum(object_size(v) for v in objects.values()) + len(doc)
    record = {
        "path": rel,
        "node": node_id,
        "stamp": seal,
        "content_hashes": content,
        "cells_with_data": int(cells_with_data),
        "written_at": written_at,
        "bytes_written": nbytes,
        "objects_written": len(objects) + 1,
        "seconds": time.perf_counter() - t0,
    }
    record["sidecar"] = {
        sidecar_key(rel): {
            "spec": STATS_SPEC,
            "leaf": rel,
            "node": node_id,
            "cells_with_data": int(cells_with_data),
            "granule_count": int(granule_count),
            "content_hashes": content,
            "written_at": written_at,
            "bytes_written": nbytes,
            "duration_s": record["seconds"],
        }
    }
    return record


def read_root(root: StoreRoot, rel: str) -> dict | None:
    """The root attrs of an artifact, or None when absent or unparsable (debris)."""
    try:
        meta = root.read_json(f"{rel}/{ZARR_JSON}")
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get("node_type") != "group":
        return None
    attrs = meta.get("attributes")
    return dict(attrs) if isinstance(attrs, dict) else None


def stamped_attrs(root: StoreRoot, rel: str, role: str) -> dict | None:
    """The root attrs of a committed artifact of ``role`` (None: absent, debris, or not
    that kind of artifact)."""
    attrs = read_root(root, rel)
    if not attrs or not isinstance(attrs.get(COMMIT_ATTR), dict):
        return None
    if attrs.get(ROLE_ATTR) != role:
        return None
    key = COLUMN_ATTR if role == "column" else OVERVIEW_ATTR
    return attrs if isinstance(attrs.get(key), dict) else None
