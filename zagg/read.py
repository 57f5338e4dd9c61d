"""Read a morton-hive store (or one leaf) back into the in-memory leaf Dataset shape.

The result matches what :mod:`zagg.aggregate` produces: dimension ``cells``, one dask chunk
per shard (``4**(c - p)`` cells, shards in ascending word order), the ``morton`` coordinate
from the cell law, and one variable per stored field with its zarr dtype and attrs. Ragged
cells read as raw payload bytes (``b""`` when empty).

Discovery follows the spec's reader flow: the manifest, then the root ``coverage.moc`` when
it is usable, else a delimiter walk of the digit tree; every leaf is admitted only with a
commit stamp (debris is skipped with a warning naming it). Anything this reader cannot
interpret — an unknown spec revision, a vlen array without its ``ragged`` block, a leaf
without its ``morton`` array — raises with the leaf, the array and the problem named.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from zagg import grid as _grid
from zagg.checks import require_dataset
from zagg.hive import coverage as _coverage
from zagg.hive import decode as _decode
from zagg.hive import paths as _paths
from zagg.hive.layout import CELL_DIM, MORTON, Geometry, check_ragged_attrs
from zagg.hive.manifest import read_manifest
from zagg.hive.stamp import check_stamp, data_prefix, read_stamp
from zagg.hive.storage import StoreRoot, as_root
from zagg.hive.walk import walk_leaves

if TYPE_CHECKING:
    import xarray as xr

_DECLARATION_SPECS = {
    "composition": "zagg-composition/1",
    "temporal": "zagg-toc/1",
    "located": "zagg-located/1",
}
_VLEN_NAMES = ("variable_length_bytes", "bytes")
_METADATA_READERS = 16


# -- public API --------------------------------------------------------------------------
def open_hive(
    store: str | StoreRoot,
    storage_options: dict[str, Any] | None = None,
    *,
    discover: str = "auto",
) -> xr.Dataset:
    """Open every commit-stamped leaf of a store as one lazy Dataset on ``cells``.

    ``discover`` picks the leaf candidates: ``"auto"`` (the root coverage MOC when usable,
    else the walk), ``"moc"`` or ``"walk"``.
    """
    root = as_root(store, storage_options)
    manifest = _manifest(root)
    candidates = _candidates(root, manifest, discover)
    with ThreadPoolExecutor(max_workers=_METADATA_READERS) as pool:
        stamps = list(pool.map(lambda item: read_stamp(root, item[0]), candidates))
    leaves = []
    for (rel, sid), stamp in zip(candidates, stamps, strict=True):
        if stamp is None:
            warnings.warn(
                f"skipping {root.url_of(rel)}: no commit stamp (debris from an unfinished write, "
                "or a leaf the root coverage lists that is gone)",
                UserWarning,
                stacklevel=2,
            )
            continue
        leaves.append((rel, sid, check_stamp(stamp, rel)))
    if not leaves:
        raise ValueError(f"{root.url} has no commit-stamped leaf: nothing to open")
    return _dataset(root, manifest, leaves)


def open_leaf(
    store: str | StoreRoot, shard_id: str, storage_options: dict[str, Any] | None = None
) -> xr.Dataset:
    """Open one shard's leaf (it must carry its commit stamp) as a one-chunk Dataset."""
    root = as_root(store, storage_options)
    manifest = _manifest(root)
    if _grid.id_order(shard_id) != manifest["shard_order"]:
        raise ValueError(
            f"shard {shard_id} is order {_grid.id_order(shard_id)}; this store's shards are "
            f"order {manifest['shard_order']}"
        )
    rel = _paths.leaf_path(shard_id)
    stamp = read_stamp(root, rel)
    if stamp is None:
        raise ValueError(
            f"{root.url_of(rel)} has no commit stamp: the leaf is absent or debris from an "
            "unfinished write (re-run the shard to heal it)"
        )
    return _dataset(root, manifest, [(rel, shard_id, check_stamp(stamp, rel))])


def decode_digest(payload: bytes | None) -> np.ndarray:
    """A t-digest payload as its (k, 2) float32 ``[mean, weight]`` rows; empty -> (0, 2)."""
    if payload is None:
        payload = b""
    data = bytes(payload)
    if len(data) % 8:
        raise ValueError(
            f"a t-digest payload is whole (mean, weight) float32 pairs; got {len(data)} bytes"
        )
    return np.frombuffer(data, dtype="<f4").reshape(-1, 2).astype(np.float32)


def _is_digest(attrs) -> bool:
    block = attrs.get("ragged")
    return isinstance(block, dict) and block.get("element") == {"dtype": "float32",
                                                                "shape": [-1, 2]}


def quantile(ds: xr.Dataset, field: str, q) -> xr.DataArray:
    """Quantile(s) ``q`` of a t-digest field per cell, NaN where the cell is empty.

    A scalar ``q`` gives a ``(cells,)`` array; a sequence adds a ``quantile`` dimension.
    Centroids are interpolated like numpy's ``quantile(..., method="hazen")``, so a
    loss-free cell (at most ``delta`` values) gives exactly that of its values, which the
    payload holds as float32.
    """
    import dask.array as da
    import xarray as xr

    require_dataset(ds, "zagg.quantile", "open the store with zagg.open_hive(path), or pass "
                    "the Dataset zagg.aggregate returned")
    digests = [str(n) for n, v in ds.data_vars.items() if _is_digest(v.attrs)]
    listed = ", ".join(digests) or "none"
    if field not in ds.data_vars:
        raise KeyError(f"{field!r} is not a variable of this dataset; its t-digest fields: "
                       f"{listed}")
    var = ds[field]
    if "ragged" not in var.attrs:
        raise ValueError(f"{field!r} is not a t-digest field (it holds one value per cell); "
                         f"this dataset's t-digest fields: {listed}")
    block = check_ragged_attrs(field, dict(var.attrs))
    if block["element"] != {"dtype": "float32", "shape": [-1, 2]}:
        raise ValueError(
            f"{field!r} is not a t-digest: its element is {block['element']}, expected "
            f"float32 with shape [-1, 2]; this dataset's t-digest fields: {listed}"
        )
    try:
        qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"q must be a number or a list of numbers in [0, 1], got {q!r}") \
            from exc
    if qs.ndim != 1:
        raise ValueError(f"q must be a number or a flat list of numbers, got shape "
                         f"{np.shape(q)}")
    if np.any((qs < 0) | (qs > 1)) or np.any(np.isnan(qs)):
        raise ValueError(f"quantiles must lie in [0, 1], got {q!r}")
    data = var.data
    if isinstance(data, da.Array):
        values = data.map_blocks(
            _quantile_block, qs, dtype=np.float64, new_axis=1, chunks=(data.chunks[0], (qs.size,))
        )
    else:
        values = _quantile_block(np.asarray(data), qs)
    out = xr.DataArray(
        values,
        dims=(var.dims[0], "quantile"),
        coords={**{k: c for k, c in var.coords.items()}, "quantile": qs},
        name=field,
    )
    return out.isel(quantile=0) if np.ndim(q) == 0 else out


# -- discovery ---------------------------------------------------------------------------
def _manifest(root: StoreRoot) -> dict:
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"no morton_hive.json at {root.url}: not a hive store root")
    return manifest


def _candidates(root: StoreRoot, manifest: dict, discover: str) -> list[tuple[str, str]]:
    if discover not in ("auto", "moc", "walk"):
        raise ValueError(f"discover={discover!r}: expected 'auto', 'moc' or 'walk'")
    envelope = None if discover == "walk" else _coverage.read_root_coverage(root)
    if envelope is None and discover == "moc":
        raise ValueError(f"{root.url} has no usable root coverage.moc; use discover='walk'")
    if envelope is not None and envelope["order"] == manifest["shard_order"]:
        ids = _coverage.expand_ranges(envelope)
        words = _grid.from_decimal(ids)
        return [(_paths.leaf_path(ids[i]), ids[i]) for i in np.argsort(words, kind="stable")]
    found = walk_leaves(root)
    order = manifest["shard_order"]
    for rel, sid in found:
        if _grid.id_order(sid) != order:
            raise ValueError(
                f"{root.url_of(rel)} is an order-{_grid.id_order(sid)} leaf in a store whose "
                f"manifest declares shard_order {order}"
            )
    return found


# -- one leaf's arrays -------------------------------------------------------------------
@dataclass(frozen=True)
class _ArrayMeta:
    """What the reader needs of one array, read straight from its ``zarr.json`` (for the
    layouts :mod:`zagg.hive.decode` knows; zarr-python opens the others)."""

    shape: tuple
    dtype: np.dtype
    attrs: dict
    chunks: tuple
    shards: tuple | None
    meta: dict
    layout: tuple  # zagg.hive.decode.layout(meta), handed to the loaders


def _meta_of(arr) -> dict:
    return arr.meta if isinstance(arr, _ArrayMeta) else arr.metadata.to_dict()


def _layout_of(arr) -> tuple | None:
    """The decoder layout of an array read directly (None: the loader finds out)."""
    return arr.layout if isinstance(arr, _ArrayMeta) else None


def _direct_group(root: StoreRoot, key: str):
    """``(attrs, arrays)`` of the group at ``key`` from its members' ``zarr.json``, or None
    when any member array has a layout the direct decoder does not know."""
    group = root.read_json(f"{key}/zarr.json")
    if not isinstance(group, dict) or group.get("node_type") != "group":
        return None
    arrays = {}
    for name in root.list_dir(key)[0]:
        meta = root.read_json(f"{key}/{name}/zarr.json")
        if not isinstance(meta, dict) or meta.get("node_type") != "array":
            continue  # not an array node (zarr-python's listing skips it too)
        layout = _decode.layout(meta)
        if layout is None:
            return None
        n, per, sharded, dtype, _fill = layout
        arrays[name] = _ArrayMeta((n,), np.dtype(object) if dtype is None else dtype,
                                  dict(meta.get("attributes") or {}), (per,),
                                  (n,) if sharded else None, meta, layout)
    return dict(group.get("attributes") or {}), arrays


def _leaf_arrays(root: StoreRoot, manifest: dict, rel: str, stamp: dict):
    """The leaf's cell group attrs and arrays, every one checked against the spec."""
    prefix = data_prefix(rel, stamp)
    group_name = str(manifest["cell_order"])
    direct = _direct_group(root, f"{prefix}/{group_name}")
    if direct is not None:
        group_attrs, arrays = direct
    else:
        zstore = root.zarr_store(prefix, read_only=True)
        try:
            group = zarr.open_group(zstore, path=group_name, mode="r", zarr_format=3)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
            raise ValueError(
                f"stamped leaf {root.url_of(rel)} has no cell group {group_name!r}: the leaf "
                "is corrupt; rewrite it"
            ) from exc
        group_attrs, arrays = dict(group.attrs), dict(group.arrays())
    where = root.url_of(rel)
    if MORTON not in arrays:
        raise ValueError(
            f"leaf {where} has no {group_name}/morton array: an unwindowed leaf must store its "
            "cell coordinate (the leaf is corrupt; rewrite it)"
        )
    for name, arr in arrays.items():
        _check_array(where, group_name, name, arr)
    return group_attrs, arrays


def _check_array(where: str, group: str, name: str, arr) -> None:
    meta = _meta_of(arr)
    if len(arr.shape) != 1:
        raise ValueError(f"{where}: array {group}/{name} is not 1-D on the cells axis")
    attrs = dict(arr.attrs)
    if meta.get("data_type") in _VLEN_NAMES:
        try:
            check_ragged_attrs(f"{group}/{name}", attrs)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    elif arr.dtype.kind == "O":
        raise ValueError(
            f"{where}: array {group}/{name} has data type {meta.get('data_type')!r}, which this "
            "reader cannot decode (zagg-ragged/1 arrays are variable_length_bytes)"
        )
    for key, known in _DECLARATION_SPECS.items():
        block = attrs.get(key)
        if isinstance(block, dict) and "spec" in block and block["spec"] != known:
            raise ValueError(
                f"{where}: array {group}/{name} declares {key} spec {block['spec']!r}; this "
                f"reader understands {known!r} only"
            )
    if name == MORTON and arr.dtype != np.uint64:
        raise ValueError(f"{where}: {group}/morton has dtype {arr.dtype}, expected uint64")


def _geometry(manifest: dict, arrays: dict, where: str) -> Geometry:
    p, c = manifest["shard_order"], manifest["cell_order"]
    morton = arrays[MORTON]
    n = morton.shape[0]
    if n != 4 ** (c - p):
        raise ValueError(
            f"{where}: morton holds {n} cells; a shard of order {p} at cell order {c} has "
            f"{4 ** (c - p)}"
        )
    inner = morton.chunks[0]
    chunk_order = c - _coverage.depth_of(inner)
    sharded = morton.shards is not None or chunk_order == p
    return Geometry(p, chunk_order, c, sharded)


def _schema(arrays: dict) -> dict[str, tuple]:
    return {
        name: (
            "ragged" if arr.dtype.kind == "O" else "dense",
            arr.dtype,
            _meta_of(arr).get("fill_value"),
            dict(arr.attrs),
        )
        for name, arr in arrays.items()
        if name != MORTON
    }


# -- lazy loading ------------------------------------------------------------------------
def _read_array(root: StoreRoot, prefix: str, path: str, found=None) -> np.ndarray:
    """A leaf array's values: decoded straight from its chunk objects when it has one of
    the spec's layouts (:mod:`zagg.hive.decode`, many times faster; ``found``: its layout,
    already read), else by zarr-python."""
    values = _decode.read_array(root, f"{prefix}/{path}", found)
    return _zarr_array(root, prefix, path) if values is None else values


def _zarr_array(root: StoreRoot, prefix: str, path: str) -> np.ndarray:
    arr = zarr.open_array(root.zarr_store(prefix, read_only=True), path=path, mode="r")
    return arr[...]


def _load_field(root: StoreRoot, prefix: str, path: str, ragged: bool,
                found=None) -> np.ndarray:
    values = _decode.read_array(root, f"{prefix}/{path}", found)
    if values is not None:  # ragged: bytes objects already, b"" where empty
        return values
    values = _zarr_array(root, prefix, path)
    if not ragged:
        return np.asarray(values)
    out = np.empty(values.shape[0], dtype=object)
    if set(map(type, values)) <= {bytes}:
        out[:] = list(values)
    else:
        out[:] = [b"" if cell is None else bytes(cell) for cell in values]
    return out


def _load_morton(root: StoreRoot, prefix: str, path: str, shard_id: str, p: int, c: int,
                 found=None):
    stored = np.asarray(_read_array(root, prefix, path, found), dtype=np.uint64)
    law = _grid.shard_cell_words(_grid.from_decimal(shard_id)[0], p, c)
    if law.shape != stored.shape:
        raise RuntimeError(
            f"zagg.grid.shard_cell_words gave {law.shape[0]} words for shard {shard_id} at cell "
            f"order {c}; the leaf stores {stored.shape[0]}. This is a bug in zagg.grid"
        )
    bad = (stored != 0) & (stored != law)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{root.url_of(prefix)}: stored morton[{i}] = {int(stored[i])} breaks the cell law "
            f"(expected {int(law[i])} or the 0 fill); the leaf is corrupt"
        )
    return law


def _dataset(root: StoreRoot, manifest: dict, leaves: list[tuple[str, str, dict]]) -> xr.Dataset:
    import dask.array as da
    import xarray as xr

    p, c = manifest["shard_order"], manifest["cell_order"]
    group = str(c)
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    schema = geometry = group_attrs = morton_attrs = None
    columns: dict[str, list] = {}
    mortons = []
    with ThreadPoolExecutor(max_workers=_METADATA_READERS) as pool:
        opened = list(pool.map(lambda leaf: _leaf_arrays(root, manifest, leaf[0], leaf[2]), leaves))
    for (rel, sid, stamp), (attrs, arrays) in zip(leaves, opened, strict=True):
        where = root.url_of(rel)
        leaf_schema = _schema(arrays)
        leaf_geometry = _geometry(manifest, arrays, where)
        if schema is None:
            schema, geometry, group_attrs = leaf_schema, leaf_geometry, attrs
        elif leaf_schema.keys() != schema.keys() or any(
            leaf_schema[k][:2] != schema[k][:2] for k in schema
        ):
            raise ValueError(
                f"{where} stores arrays {_describe(leaf_schema)}, unlike the first leaf's "
                f"{_describe(schema)}: one store holds one schema"
            )
        prefix = data_prefix(rel, stamp)
        if morton_attrs is None:
            morton_attrs = dict(arrays[MORTON].attrs)
        # one plain task tuple per leaf and array: dask.delayed would tokenize every
        # argument of every call (~20 ms a leaf), minutes of graph building for big stores
        mortons.append((_load_morton, root, prefix, f"{group}/{MORTON}", sid, p, c,
                        _layout_of(arrays[MORTON])))
        for name, (kind, _dtype, _fill, _attrs) in schema.items():
            columns.setdefault(name, []).append(
                (_load_field, root, prefix, f"{group}/{name}", kind == "ragged",
                 _layout_of(arrays[name])))
    token = tokenize(root.url, [(rel, sid, stamp) for rel, sid, stamp in leaves])
    chunks = ((geometry.n_cells,) * len(leaves),)

    def array(label, tasks, dtype):
        name = f"zagg-read-{label}-{token}"
        graph = HighLevelGraph.from_collections(
            name, {(name, i): task for i, task in enumerate(tasks)}, dependencies=[])
        return da.Array(graph, name, chunks, dtype=dtype)

    data_vars = {
        name: ((CELL_DIM,), array(name, tasks, schema[name][1]), schema[name][3])
        for name, tasks in sorted(columns.items())
    }
    morton = xr.Variable((CELL_DIM,), array(MORTON, mortons, np.uint64), morton_attrs)
    ds = xr.Dataset(data_vars, coords={MORTON: morton})
    ds.attrs = dict(group_attrs or {})
    ds.attrs["zagg"] = {
        "grid": geometry.as_grid(),
        "shards": [sid for _, sid, _ in leaves],
        "fields": {
            name: {
                "kind": kind,
                "dtype": "object" if kind == "ragged" else str(dtype),
                "fill_value": _fill_of(kind, dtype, fill),
            }
            for name, (kind, dtype, fill, _a) in sorted(schema.items())
        },
        "dataset": dict(manifest.get("dataset") or {}),
    }
    ds.attrs["morton_hive"] = {
        k: manifest[k]
        for k in ("spec", "cell_order", "shard_order", "semantic_hash")
        if k in manifest
    }
    return ds


def _fill_of(kind: str, dtype: np.dtype, fill):
    if kind == "ragged":
        return b""
    if dtype.kind == "f":
        return float(fill)
    return dtype.type(fill).item()


def _describe(schema: dict) -> str:
    return "{" + ", ".join(f"{k}: {v[1]}" for k, v in sorted(schema.items())) + "}"


def _quantile_block(payloads: np.ndarray, qs: np.ndarray) -> np.ndarray:
    from zagg.kernels.tdigest import quantiles

    out = np.full((payloads.shape[0], qs.size), np.nan, dtype=np.float64)
    empty = np.array([cell is None or len(cell) == 0 for cell in payloads], dtype=bool)
    if (~empty).any():
        for j, qj in enumerate(qs):
            out[:, j] = np.asarray(quantiles(payloads, float(qj)), dtype=np.float64).reshape(-1)
        out[empty] = np.nan
    return out
