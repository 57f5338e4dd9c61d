"""The per-leaf tasks of a read: one call decodes one array of one leaf.

Each task reads its array's ``zarr.json`` (checking it against the store's schema, so a
leaf that differs is refused by name), then either only the cells it was asked for — the
shard index and the covering inner chunks (:func:`zagg.hive.decode.read_cells`) — or, for a
dense view or a verifying read, the whole array. Layouts the direct decoder does not know
are read through zarr-python, chunk span by chunk span. ``words`` fields come back as one
``uint64`` array per cell.
"""

from __future__ import annotations

import numpy as np

from zagg import grid as _grid
from zagg.hive import decode as _decode
from zagg.hive import verify as _verify
from zagg.hive.schema import Field, array_meta, check_array, describe, same_field, schema
from zagg.hive.schema import zarr_values as _zarr_values
from zagg.hive.storage import StoreRoot


def load_field(
    root: StoreRoot,
    prefix: str,
    group: str,
    field: Field,
    ranks,
    where: str,
    recorded: dict | None,
    occupied,
) -> np.ndarray:
    """The values of ``field`` in the leaf at ``prefix``: at ``ranks`` (ascending cell
    positions; None: every cell). With ``recorded`` (the stamp's digests) the whole array is
    decoded and verified first, and checked against the coverage ``occupied``."""
    path = f"{group}/{field.name}"
    arr = checked_meta(root, prefix, group, field, where)
    if recorded is not None:
        full = _whole(root, prefix, path, arr)
        _verify.check_digest(where, path, full, recorded)
        _verify.check_covered(where, path, full, field.fill, occupied)
        values = full if ranks is None else full[ranks]
    elif ranks is None:
        values = _whole(root, prefix, path, arr)
    elif arr.layout is not None:
        values = _decode.read_cells(root, f"{prefix}/{path}", arr.layout, ranks)
    else:
        values = _zarr_cells(root, prefix, path, arr, ranks)
    if field.kind == "words":
        values = words_of(values, f"{where}: array {path}")
    return values


def checked_meta(root, prefix, group, field: Field, where: str):
    """The metadata of ``field``'s array in one leaf, refused by name unless it is the
    store's field (same kind, dtype and data type) and decodable."""
    path = f"{group}/{field.name}"
    doc = root.read_json(f"{prefix}/{path}/zarr.json")
    if not isinstance(doc, dict) or doc.get("node_type") != "array":
        raise ValueError(
            f"leaf {where} has no array {path}, which the store's other leaves "
            "have: one store holds one schema (the leaf is damaged or foreign)"
        )
    arr = array_meta(doc)
    check_array(where, group, field.name, arr)
    mine = schema({field.name: arr})[field.name]
    if not same_field(mine, field):
        raise ValueError(
            f"leaf {where} stores {path} as {describe({field.name: mine})}, unlike "
            f"the store's {describe({field.name: field})}: one store holds one "
            "schema"
        )
    return arr


def _whole(root, prefix, path, arr) -> np.ndarray:
    if arr.layout is not None:
        values = _decode.read_array(root, f"{prefix}/{path}", arr.layout)
        if values is not None:
            return values
    return _zarr_values(root, prefix, path)


def _zarr_cells(root, prefix, path, arr, ranks) -> np.ndarray:
    """The cells ``ranks`` through zarr-python, one read per covering inner chunk."""
    per = int(arr.chunks[-1]) if arr.chunks else int(arr.shape[-1])
    ranks = np.asarray(ranks, dtype=np.int64)
    chunk_of = ranks // per
    wanted, starts = np.unique(chunk_of, return_index=True)
    bounds = np.append(starts, ranks.size)
    parts = []
    for i, k in enumerate(wanted.tolist()):
        block = _zarr_values(root, prefix, path, slice(k * per, (k + 1) * per))
        parts.append(block[ranks[bounds[i] : bounds[i + 1]] - k * per])
    if not parts:
        return np.zeros(0, dtype=arr.dtype)
    return np.concatenate(parts)


def words_of(payloads: np.ndarray, where: str) -> np.ndarray:
    """Object array of ``uint64`` word arrays from raw little-endian payloads."""
    out = np.empty(payloads.shape, dtype=object)
    empty = np.zeros(0, dtype=np.uint64)
    flat = out.reshape(-1)
    for i, p in enumerate(payloads.reshape(-1).tolist()):
        if not p:
            flat[i] = empty
        elif len(p) % 8:
            raise ValueError(
                f"{where}: cell {i} holds {len(p)} bytes, not whole uint64 words "
                "(the array is damaged)"
            )
        else:
            flat[i] = np.frombuffer(p, dtype="<u8").astype(np.uint64, copy=False)
    return out


def load_morton(
    root: StoreRoot,
    prefix: str,
    path: str,
    shard_id: str,
    p: int,
    c: int,
    where: str,
    recorded: dict | None,
) -> np.ndarray:
    """The leaf's whole stored ``morton`` array, checked against the cell law (and its
    digest with ``recorded``); returns the law's words (written or not)."""
    doc = root.read_json(f"{prefix}/{path}/zarr.json")
    arr = array_meta(doc) if isinstance(doc, dict) else None
    if arr is None:
        raise ValueError(
            f"leaf {where} has no {path} array: an unwindowed leaf must store its "
            "cell coordinate (the leaf is corrupt; rewrite it)"
        )
    stored = np.asarray(_whole(root, prefix, path, arr), dtype=np.uint64)
    if recorded is not None:
        _verify.check_digest(where, path, stored, recorded)
    law = _grid.shard_cell_words(_grid.from_decimal([shard_id])[0], p, c)
    if law.shape != stored.shape:
        raise ValueError(
            f"{where}: {path} holds {stored.shape[0]} cells, a shard of order {p} "
            f"at cell order {c} has {law.shape[0]}"
        )
    bad = (stored != 0) & (stored != law)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{where}: stored morton[{i}] = {int(stored[i])} breaks the cell law "
            f"(expected {int(law[i])} or the 0 fill); the leaf is corrupt"
        )
    return law
