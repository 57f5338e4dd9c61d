"""Write one shard's leaf: validate → clear prefix → template → arrays → coverage → stamp.

:func:`write_leaf` is what a dask task calls with one shard's numpy arrays. Everything is
validated before the first byte is written (bad ids, wrong lengths or dtypes, malformed
ragged declarations raise with nothing on the store). A retry clears the prefix and writes
the whole leaf again, so a crash at any point leaves either the previous state or an
unstamped prefix (debris) that the next write heals. The stamp is always the last write of
the leaf prefix; the granule and stats siblings follow it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Mapping

import numpy as np
from zarr.storage import WrapperStore

from zagg import grid as _grid
from zagg.hive import coverage, encode, hashes, paths, stamp, stats
from zagg.hive.layout import MORTON, FieldSpec, Geometry, field_specs, template_documents
from zagg.hive.storage import StoreRoot, as_root


def write_leaf(
    root: str | StoreRoot,
    shard_id: str,
    arrays: Mapping[str, np.ndarray],
    fields: Mapping[str, dict],
    grid: Mapping,
    *,
    attrs: Mapping[str, dict] | None = None,
    granule_count: int | None = None,
    granule_ids: Iterable[str] | None = None,
    semantic_hash: str | None = None,
    write_stats: bool = True,
    stats_extra: Mapping | None = None,
) -> dict | None:
    """Write the leaf of ``shard_id`` and return its record; an empty shard writes nothing.

    ``arrays`` maps each field name (and optionally ``"morton"``, checked against the cell
    law) to a 1-D array of ``4**(c - p)`` cells in canonical nested order; dense fields as
    numpy values, ragged fields as an object array of raw payload bytes (``b""``/None when
    empty). ``fields`` is the ``{name: {kind, dtype, fill_value, ...}}`` block, ``grid`` the
    ``{type, parent_order, chunk_inner, child_order, sharded}`` block and ``attrs`` the
    exact zarr attrs of each array. ``granule_ids`` (when given) are recorded in the
    ``granules.json`` sibling and hashed into the stats sidecar, which is written when
    ``write_stats`` is true. Returns None when no cell is occupied.
    """
    t_start = time.perf_counter()
    root = as_root(root)
    geometry = Geometry.from_grid(dict(grid))
    specs = field_specs(dict(fields), dict(attrs or {}))
    rel = paths.leaf_path(shard_id)
    if _grid.id_order(shard_id) != geometry.shard_order:
        raise ValueError(
            f"shard {shard_id} is order {_grid.id_order(shard_id)}, but the grid's parent_order "
            f"is {geometry.shard_order}"
        )
    ids = None if granule_ids is None else stats.bare_granule_ids(granule_ids)
    if granule_count is None:
        granule_count = 0 if ids is None else len(ids)
    values, lengths, occupied, morton = _prepare(shard_id, arrays, specs, geometry)
    cells_with_data = int(occupied.sum())
    if cells_with_data == 0:
        return None
    morton_attrs = dict((attrs or {}).get(MORTON) or {})
    t_prepared = time.perf_counter()

    previous = stamp.read_stamp(root, rel)
    if previous is not None and "current" in previous:
        raise ValueError(
            f"leaf {rel} is a versioned leaf (its stamp names current={previous['current']!r}); "
            "clearing it would delete every version. Write this store with a versioned writer "
            "or to a new root"
        )
    root.delete_prefix(rel)
    sizes = {  # final size of every object of the leaf, by key
        key: root.write_bytes(f"{rel}/{key}", doc)
        for key, doc in template_documents(geometry, specs, morton_attrs).items()
    }
    store = _CountingStore(root.zarr_store(rel))
    chunk_bytes, chunk_objects = _write_chunks(root, rel, geometry, specs, values, lengths,
                                               morton)
    t_arrays = time.perf_counter()

    extra_bytes = 0
    if geometry.depth > 0:
        payload, raw_nbytes = coverage.encode_bitmap(occupied)
        extra_bytes += root.write_bytes(f"{rel}/{paths.LEAF_COVERAGE_NAME}", payload)
        envelope = coverage.leaf_envelope(
            coverage.box(shard_id, occupied, geometry.depth),
            geometry.cell_order,
            bitmap_nbytes=len(payload),
            raw_nbytes=raw_nbytes,
        )
    else:
        envelope = coverage.leaf_envelope(coverage.box(shard_id, occupied, 0), geometry.cell_order)
    t_coverage = time.perf_counter()

    group = str(geometry.cell_order)
    written = {f"{group}/{MORTON}": morton} | {f"{group}/{n}": v for n, v in values.items()}
    content = hashes.content_hashes(written, lengths={f"{group}/{n}": v
                                                      for n, v in lengths.items()})
    t_hashed = time.perf_counter()

    written_at = stamp.now_iso()
    seal = stamp.build_stamp(
        cells_with_data=cells_with_data,
        granule_count=granule_count,
        written_at=written_at,
        coverage=envelope,
        content_hashes=content,
    )
    stamp.write_stamp(store, seal)
    t_stamped = time.perf_counter()

    record = {
        "shard_id": shard_id,
        "path": rel,
        "cells_with_data": cells_with_data,
        "granule_count": int(granule_count),
        "content_hashes": content,
        "coverage": envelope,
        "bytes_written": sum((sizes | store.sizes).values()) + chunk_bytes + extra_bytes,
        "objects_written": len(sizes | store.sizes) + chunk_objects + (1 if extra_bytes else 0),
        "written_at": written_at,
        "timings": {
            "prepare_s": t_prepared - t_start,
            "arrays_s": t_arrays - t_prepared,
            "coverage_s": t_coverage - t_arrays,
            "hash_s": t_hashed - t_coverage,
            "stamp_s": t_stamped - t_hashed,
            "total_s": t_stamped - t_start,
        },
    }
    granules_sha = None
    if ids is not None:
        granules_sha = stats.write_granules(root, shard_id, ids)
    if write_stats:
        try:
            stats.write_stats(root, record, semantic_hash=semantic_hash, granules_sha=granules_sha,
                              extra=dict(stats_extra) if stats_extra else None)
        except Exception as exc:  # the sidecar is telemetry, never truth
            warnings.warn(f"stats sidecar for leaf {rel} was not written: {exc}", stacklevel=2)
    return record


def _prepare(
    shard_id: str, arrays: Mapping[str, np.ndarray], specs: dict[str, FieldSpec], geometry: Geometry
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Normalized field values, ragged payload lengths, cell occupancy, and the stored
    ``morton`` (0 in empty chunks)."""
    n = geometry.n_cells
    missing = sorted(set(specs) - set(arrays))
    extra = sorted(set(arrays) - set(specs) - {MORTON})
    if missing or extra:
        raise ValueError(
            f"shard {shard_id}: arrays do not match the fields block "
            f"(missing {missing}, undeclared {extra})"
        )
    values, lengths, occupied = {}, {}, np.zeros(n, dtype=bool)
    for name, spec in specs.items():
        raw = np.asarray(arrays[name]) if not isinstance(arrays[name], np.ndarray) else arrays[name]
        if raw.shape != (n,):
            raise ValueError(
                f"shard {shard_id}: field {name!r} has shape {raw.shape}, expected ({n},) "
                f"= 4**(child_order - parent_order) cells"
            )
        if spec.ragged:
            values[name], lengths[name] = _ragged_values(name, raw, spec)
            occupied |= lengths[name] > 0
        else:
            values[name] = _dense_values(name, raw, spec)
            occupied |= _non_fill(values[name], spec.fill_value)
    law = _grid.shard_cell_words(
        _grid.from_decimal(shard_id)[0], geometry.shard_order, geometry.cell_order
    )
    if law.shape != (n,):
        raise RuntimeError(
            f"zagg.grid.shard_cell_words gave {law.shape[0]} words for shard {shard_id} at cell "
            f"order {geometry.cell_order}; the cell law has {n}. This is a bug in zagg.grid"
        )
    if MORTON in arrays:
        given = np.asarray(arrays[MORTON])
        if given.shape != (n,) or not np.array_equal(given.astype(np.uint64), law):
            raise ValueError(
                f"shard {shard_id}: the morton array given does not follow the cell law "
                "(the shard's children at the cell order, in nested order)"
            )
    chunk_full = occupied.reshape(-1, geometry.cells_per_chunk).any(axis=1)
    morton = np.where(np.repeat(chunk_full, geometry.cells_per_chunk), law, np.uint64(0))
    return values, lengths, occupied, morton.astype(np.uint64)


def _dense_values(name: str, raw: np.ndarray, spec: FieldSpec) -> np.ndarray:
    if raw.dtype.kind not in "biuf":
        raise ValueError(f"dense field {name!r} got values of dtype {raw.dtype}")
    try:
        values = raw.astype(spec.dtype.newbyteorder("<"), casting="same_kind", copy=False)
    except TypeError as exc:
        raise ValueError(
            f"dense field {name!r}: values of dtype {raw.dtype} cannot be stored as {spec.dtype}"
        ) from exc
    if values.dtype.kind == "f":
        # one NaN bit pattern, the one the fill decodes to; copy only when one differs
        nan = np.isnan(values)
        canonical = np.array(np.nan, dtype=values.dtype).view(f"u{values.itemsize}")
        if (values.view(f"u{values.itemsize}")[nan] != canonical).any():
            values = values.copy()
            values[nan] = np.nan
    return values


def _non_fill(values: np.ndarray, fill) -> np.ndarray:
    if isinstance(fill, float) and np.isnan(fill):
        return ~np.isnan(values)
    return values != values.dtype.type(fill)


def _ragged_values(name: str, raw: np.ndarray, spec: FieldSpec) -> tuple[np.ndarray, np.ndarray]:
    """Cells as bytes (b"" when empty) and their lengths; only non-empty cells are visited."""
    element = spec.attrs["ragged"]["element"]
    dtype = np.dtype(str(element["dtype"])).newbyteorder("<")
    row_bytes = dtype.itemsize * int(np.prod(element["shape"][1:], dtype=np.int64))
    out = np.ascontiguousarray(raw, dtype=object)
    lengths = np.zeros(out.shape[0], dtype=np.int64)
    filled = np.flatnonzero(encode.object_pointers(out) != encode.EMPTY_BYTES_ID)
    cells = out[filled].tolist()
    if cells and set(map(type, cells)) != {bytes}:  # rare: None, bytearray, ndarray cells
        out = out.copy()  # never mutate the caller's array
        cells = [_payload(name, int(i), c, dtype) for i, c in zip(filled, cells, strict=True)]
        out[filled] = np.array(cells + [None], dtype=object)[:-1]
    lengths[filled] = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
    bad = np.flatnonzero(lengths % row_bytes)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"ragged field {name!r}: cell {i} holds {lengths[i]} bytes, not a whole number "
            f"of {row_bytes}-byte rows of the declared element {element}"
        )
    return out, lengths


def _payload(name: str, i: int, cell, dtype: np.dtype) -> bytes:
    if cell is None:
        return b""
    if type(cell) is bytes:
        return cell
    if isinstance(cell, bytes | bytearray | memoryview):
        return bytes(cell)
    if isinstance(cell, np.ndarray):
        return np.ascontiguousarray(cell, dtype=dtype).tobytes()
    raise ValueError(
        f"ragged field {name!r}: cell {i} holds a {type(cell).__name__}; expected raw "
        "payload bytes (b'' or None when empty)"
    )


def _write_chunks(root, rel, geometry: Geometry, specs, values, lengths, morton):
    """Write every array's chunk objects; returns (bytes, objects) written."""
    group = str(geometry.cell_order)
    k = geometry.n_inner
    enc = encode.ChunkEncoder()
    arrays = [(MORTON, False, morton, np.dtype("uint64"), 0)]
    arrays += [(n, sp.ragged, values[n], sp.dtype, sp.fill_value) for n, sp in specs.items()]
    total = count = 0
    for name, ragged, vals, dtype, fill in arrays:
        if ragged:
            sharded = geometry.ragged_sharded
            chunks = enc.ragged_chunks(vals, lengths[name], k if sharded else 1)
        else:
            sharded = geometry.dense_sharded
            chunks = enc.dense_chunks(vals, dtype, fill, k)
        if sharded:
            objects = [(0, encode.shard_object(chunks))]
        else:
            objects = list(enumerate(chunks))
        for idx, data in objects:
            if data is not None:
                total += root.write_bytes(f"{rel}/{group}/{name}/c/{idx}", data)
                count += 1
    return total, count


class _CountingStore(WrapperStore):
    """A zarr store wrapper that tallies the final size of every object written."""

    def __init__(self, store):
        super().__init__(store)
        self._sizes: dict[str, int] = {}

    async def set(self, key, value) -> None:
        await self._store.set(key, value)
        self._sizes[key] = len(value)

    async def delete(self, key) -> None:
        await self._store.delete(key)
        self._sizes.pop(key, None)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self._sizes)
