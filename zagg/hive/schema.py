"""A leaf's arrays as the reader sees them: metadata, spec checks, and the store's schema.

The cell group ``{cell_order}`` of a leaf is read straight from its members' ``zarr.json``
(one listing plus one GET each) when every array has a layout :mod:`zagg.hive.decode`
knows, else through zarr-python. Every array is checked against the spec before it is
trusted: a vlen array must carry its ``zagg-ragged/1`` block, every declaration
(composition, temporal, located) must be a revision, shape and grammar this reader
implements, and an unwindowed leaf must store its ``morton`` array. Each refusal names the
leaf, the array and the problem.

Field kinds: ``dense`` (one value per cell), ``ragged`` (raw payload bytes per cell, e.g.
t-digests), ``words`` (a ragged ``uint64`` array of word rows, e.g. ``*_locations`` and
``*_times`` siblings, decoded per cell) and ``raster`` (a ``(time, cells)`` band).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from zagg.grid import Grid
from zagg.hive import decode as _decode
from zagg.hive.coverage import depth_of
from zagg.hive.layout import MORTON, check_ragged_attrs
from zagg.hive.storage import StoreRoot

TIME = "time"
_VLEN_NAMES = ("variable_length_bytes", "bytes")
_DECLARATIONS = {  # attrs key -> (spec, {shape: grammar} this reader implements)
    "composition": ("zagg-composition/1", None),
    "temporal": ("zagg-toc/1", {"coordinate", "per-cell", "per-centroid"}),
    "located": ("zagg-located/1", {"per-centroid"}),
}
_GRAMMARS = {"temporal": "mortie-toc/1", "located": "mortie-morton/1"}
WORD_ELEMENT = {"dtype": "uint64", "shape": [-1]}
RAGGED_V2 = "zagg-ragged/2"
#: the ragged revisions a read decodes (a /2 block is derived from the typed data type)
RAGGED_SPECS = ("zagg-ragged/1", RAGGED_V2)


@dataclass(frozen=True)
class ArrayMeta:
    """What the reader needs of one array, from its ``zarr.json``."""

    shape: tuple
    dtype: np.dtype
    attrs: dict
    chunks: tuple
    sharded: bool
    meta: dict
    layout: tuple | None  # zagg.hive.decode.layout(meta); None: zarr-python decodes it
    dims: tuple


@dataclass(frozen=True)
class Field:
    """One stored field of the store's schema."""

    name: str
    kind: str  # dense | ragged | words | raster
    dtype: np.dtype  # the stored dtype (object for vlen arrays)
    fill: object
    attrs: dict
    data_type: str

    @property
    def ragged(self) -> bool:
        return self.kind in ("ragged", "words")


def array_meta(meta: dict) -> ArrayMeta:
    """An :class:`ArrayMeta` from an array's ``zarr.json`` document."""
    found = _decode.layout(meta)
    typed = _decode.typed_element(meta.get("data_type"))
    vlen = typed is not None or meta.get("data_type") in _VLEN_NAMES
    attrs = dict(meta.get("attributes") or {})
    if typed is not None:
        if "ragged" in attrs:  # retired on /2 arrays: one of the two declarations would lie
            attrs["ragged_declared"] = attrs.pop("ragged")
        attrs["ragged"] = {"spec": RAGGED_V2, "element": typed}
    shape = tuple(meta.get("shape") or ())
    grid = (meta.get("chunk_grid") or {}).get("configuration") or {}
    codecs = meta.get("codecs") or []
    sharded = bool(codecs) and codecs[0].get("name") == "sharding_indexed"
    chunks = (
        tuple((codecs[0].get("configuration") or {}).get("chunk_shape") or ())
        if sharded
        else tuple(grid.get("chunk_shape") or ())
    )
    if vlen:
        dtype = np.dtype(object)
    else:
        try:
            dtype = np.dtype(meta.get("data_type")).newbyteorder("<")
        except TypeError:
            dtype = np.dtype(object)
    return ArrayMeta(
        shape,
        dtype,
        attrs,
        chunks,
        sharded,
        meta,
        found,
        tuple(meta.get("dimension_names") or ()),
    )


def leaf_group(root: StoreRoot, prefix: str, group: str, where: str):
    """``(group attrs, {name: ArrayMeta})`` of a leaf's cell group, every array checked."""
    key = f"{prefix}/{group}"
    doc = root.read_json(f"{key}/zarr.json")
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        raise ValueError(
            f"stamped leaf {where} has no cell group {group!r}: the leaf is corrupt; rewrite it"
        )
    arrays = {}
    for name in root.list_dir(key)[0]:
        meta = root.read_json(f"{key}/{name}/zarr.json")
        if isinstance(meta, dict) and meta.get("node_type") == "array":
            arrays[name] = array_meta(meta)  # other entries are not arrays of this leaf
    group_attrs = dict(doc.get("attributes") or {})
    for name, arr in arrays.items():
        check_array(where, group, name, arr)
    return group_attrs, arrays


def check_array(where: str, group: str, name: str, arr: ArrayMeta) -> None:
    """Raise, naming the leaf and array, unless this reader can decode ``arr`` exactly."""
    meta = arr.meta
    label = f"{where}: array {group}/{name}"
    raster = len(arr.shape) == 2 and arr.dims == (TIME, "cells")
    if len(arr.shape) != 1 and not raster:
        raise ValueError(
            f"{label} has shape {list(arr.shape)}: this reader reads arrays on "
            "the cells axis and (time, cells) raster bands"
        )
    attrs = arr.attrs
    typed = _decode.typed_element(meta.get("data_type")) is not None
    if typed and "ragged_declared" in attrs:
        raise ValueError(
            f"{label} is a typed zagg-ragged/2 array that also carries a 'ragged' attrs "
            "block, which /2 retires: the array is not well-formed (rewrite it)"
        )
    if typed and arr.layout is None:
        _typed_extension(label)
    if typed or meta.get("data_type") in _VLEN_NAMES:
        try:
            block = check_ragged_attrs(f"{group}/{name}", attrs, RAGGED_SPECS)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if raster:
            raise ValueError(f"{label}: a (time, cells) array cannot be variable-length")
        try:
            np.dtype(str(block["element"]["dtype"]))
        except TypeError:
            raise ValueError(f"{label}: unreadable element dtype") from None
    elif arr.dtype.kind == "O":
        raise ValueError(
            f"{label} has data type {meta.get('data_type')!r}, which this reader cannot "
            "decode (zagg-ragged/1 arrays are variable_length_bytes)"
        )
    for key, (spec, shapes) in _DECLARATIONS.items():
        block = attrs.get(key)
        if not isinstance(block, dict):
            continue
        if "spec" in block and block["spec"] != spec:
            raise ValueError(
                f"{label} declares {key} spec {block['spec']!r}; this reader "
                f"understands {spec!r} only"
            )
        if shapes is None:
            continue
        if block.get("shape") not in shapes:
            raise ValueError(
                f"{label} declares {key} shape {block.get('shape')!r}; this "
                f"reader implements {sorted(shapes)}"
            )
        if block.get("grammar") != _GRAMMARS[key]:
            raise ValueError(
                f"{label} declares {key} grammar {block.get('grammar')!r}; this "
                f"reader implements {_GRAMMARS[key]!r}"
            )
    if name == MORTON and arr.dtype != np.uint64:
        raise ValueError(f"{where}: {group}/morton has dtype {arr.dtype}, expected uint64")


def _typed_extension(label: str) -> None:
    """A typed array in a layout the direct decoder does not know is read through
    zarr-python, which needs the data type's extension package."""
    try:
        import zarr_vlen_ndarray  # noqa: F401
    except ImportError:
        raise ValueError(
            f"{label} is a zagg-ragged/2 (vlen-ndarray) array in a layout zagg's own decoder "
            "does not read: install zarr-vlen-ndarray to read this store "
            "(pip install zarr-vlen-ndarray)"
        ) from None


def field_kind(name: str, arr: ArrayMeta) -> str:
    if len(arr.shape) == 2:
        return "raster"
    if arr.dtype.kind == "O":
        element = (arr.attrs.get("ragged") or {}).get("element")
        return "words" if element == WORD_ELEMENT else "ragged"
    return "dense"


def schema(arrays: dict[str, ArrayMeta]) -> dict[str, Field]:
    """The fields of a leaf (every array but ``morton`` and ``time``), by name."""
    out = {}
    for name in sorted(arrays):
        if name in (MORTON, TIME):
            continue
        arr = arrays[name]
        kind = field_kind(name, arr)
        fill = b"" if arr.dtype.kind == "O" else fill_value(arr)
        out[name] = Field(
            name, kind, arr.dtype, fill, dict(arr.attrs), str(arr.meta.get("data_type"))
        )
    return out


def word_siblings(attrs: dict) -> list[str]:
    """The sibling arrays a digest payload's attrs bind, one word per centroid row each:
    its located sibling (``ragged.locations``, spec §1.2) and its timed one (the top-level
    ``times`` key, §8.3). Bound by the declaration, never by a naming convention."""
    names = [(attrs.get("ragged") or {}).get("locations"), attrs.get("times")]
    return [n for n in names if isinstance(n, str) and n]


def cell_rows(values: np.ndarray, attrs: dict) -> np.ndarray:
    """Rows per cell of a ragged array (``zagg-ragged`` element rows): a cell's bytes over
    the bytes of one row (or, for cells already decoded, their lengths); 0 when empty."""
    flat = values.ravel().tolist()
    lengths = np.fromiter((0 if v is None else len(v) for v in flat), np.int64, len(flat))
    first = next((v for v in flat if v is not None), b"")
    if not isinstance(first, bytes | bytearray | memoryview):
        return lengths
    element = (attrs.get("ragged") or {}).get("element") or {}
    inner = int(np.prod(element.get("shape", [-1])[1:], dtype=np.int64))
    return lengths // (np.dtype(element.get("dtype", "uint8")).itemsize * max(inner, 1))


def fill_value(arr: ArrayMeta):
    """The array's fill as a Python scalar of its dtype."""
    fill = arr.meta.get("fill_value")
    if arr.layout is not None:
        fill = arr.layout[4]
    elif arr.dtype.kind == "f" and isinstance(fill, str):
        fill = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}.get(fill, np.nan)
    if fill is None:
        return None
    return arr.dtype.type(fill).item()


def held(values: np.ndarray, fill) -> np.ndarray:
    """Mask of the cells of ``values`` that hold something other than the fill (a
    non-empty payload for a vlen array; any non-NaN value under a NaN fill)."""
    if values.dtype.kind == "O":
        flat = values.reshape(-1)
        return np.fromiter((len(v) > 0 for v in flat), bool, count=flat.size).reshape(values.shape)
    if values.dtype.kind == "f" and fill is not None and np.isnan(fill):
        return ~np.isnan(values)
    return values != values.dtype.type(fill)


def leaf_grid(manifest: dict, arrays: dict[str, ArrayMeta], where: str, group: str) -> Grid:
    """The leaf's orders, checked against the manifest (cells per leaf, inner chunks)."""
    p, c = manifest["shard_order"], manifest["cell_order"]
    if MORTON not in arrays and manifest.get("temporal") is not None and arrays:
        return _derived_grid(arrays, p, c, where)
    if MORTON not in arrays:
        raise ValueError(
            f"leaf {where} has no {group}/morton array: an unwindowed leaf must store its "
            "cell coordinate (the leaf is corrupt; rewrite it)"
        )
    morton = arrays[MORTON]
    n = morton.shape[0]
    if n != 4 ** (c - p):
        raise ValueError(
            f"{where}: morton holds {n} cells; a shard of order {p} at cell order {c} has "
            f"{4 ** (c - p)}"
        )
    inner = morton.chunks[-1] if morton.chunks else n
    chunk_order = c - depth_of(inner)
    return Grid(p, chunk_order, c, morton.sharded or chunk_order == p)


def _derived_grid(arrays: dict[str, ArrayMeta], p: int, c: int, where: str) -> Grid:
    """A windowed leaf's orders from its field arrays (it stores no ``morton``: the
    coordinate is derived, spec §1.5)."""
    name = next((k for k in sorted(arrays) if arrays[k].dtype.kind != "O"), sorted(arrays)[0])
    arr = arrays[name]
    n = arr.shape[0]
    if n != 4 ** (c - p):
        raise ValueError(
            f"{where}: {name} holds {n} cells; a shard of order {p} "
            f"at cell order {c} has {4 ** (c - p)}"
        )
    inner = arr.chunks[-1] if arr.chunks else n
    chunk_order = c - depth_of(inner)
    return Grid(p, chunk_order, c, arr.sharded or chunk_order == p)


def same_field(a: Field, b: Field) -> bool:
    return a.kind == b.kind and a.dtype == b.dtype and a.data_type == b.data_type


def describe(fields: dict[str, Field]) -> str:
    return "{" + ", ".join(f"{k}: {v.data_type}" for k, v in sorted(fields.items())) + "}"


def zarr_values(root: StoreRoot, prefix: str, path: str, sel=...) -> np.ndarray:
    """Values of an array through zarr-python (layouts the direct decoder does not know);
    vlen cells as ``bytes`` (``b""`` where empty)."""
    arr = zarr.open_array(root.zarr_store(prefix, read_only=True), path=path, mode="r")
    values = np.asarray(arr[sel])
    if values.dtype.kind != "O":
        return values
    out = np.empty(values.shape, dtype=object)
    out.ravel()[:] = [b"" if v is None else bytes(v) for v in values.ravel()]
    return out
