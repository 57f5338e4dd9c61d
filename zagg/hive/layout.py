"""The leaf template: one zarr v3 group ``{cell_order}`` holding ``morton`` and every field.

Its shape comes from the store's :class:`~zagg.grid.Grid` (spec §1.5): a leaf holds ``4**(c - p)`` cells split into ``K = 4**(chunk - p)``
inner chunks. Dense arrays use the bytes-only chain ``[bytes(little)]``; when sharded and
K > 1 they are one ``sharding_indexed`` object (index ``[bytes(little), crc32c]`` at the
end), otherwise one object per inner chunk. Ragged arrays are ``variable_length_bytes`` with
``[vlen-bytes, zstd(level=3, checksum=false)]`` and fill ``b""``, one whole-leaf sharded
object whenever K > 1. Inner chunks that hold only the fill are never written.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec, VLenBytesCodec, ZstdCodec
from zarr.errors import UnstableSpecificationWarning

from zagg import grid as _grid
from zagg.grid import Grid

CELL_DIM = "cells"
MORTON = "morton"
RAGGED_SPEC = "zagg-ragged/1"
WEIGHTS_VALUES = ("counts", "flux")
VLEN_DTYPE = "variable_length_bytes"

MORTON_CONVENTION = {
    "schema_url": "https://github.com/espg/mortie/blob/main/docs/specification.md#dggs-attrs",
    "spec_url": "https://github.com/espg/mortie/blob/main/docs/specification.md",
    "uuid": "3e22156d-ea9e-4e01-95fe-e3809a4b41e7",
    "name": "morton-dggs",
    "description": "Packed-u64 morton (HEALPix) DGGS convention",
}

# The spec pins zarr-python's ``variable_length_bytes`` dtype for ragged arrays (spec §1.3);
# zarr warns on every use that the dtype has no registered v3 spec. Silence exactly that.
warnings.filterwarnings(
    "ignore",
    message=r"The data type \(VariableLengthBytes\(\)\) does not have a Zarr V3 specification",
    category=UnstableSpecificationWarning,
)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
_RESERVED_NAMES = {MORTON, "combined", "zarr.json"}


@dataclass(frozen=True)
class FieldSpec:
    """How one field is stored: dense (numpy dtype + fill) or ragged (vlen payloads)."""

    kind: str
    dtype: np.dtype
    fill_value: Any
    attrs: dict = field(default_factory=dict)

    @property
    def ragged(self) -> bool:
        return self.kind == "ragged"


def field_specs(fields: dict, attrs: dict | None = None) -> dict[str, FieldSpec]:
    """Validate the fields block and per-array attrs into :class:`FieldSpec` records."""
    attrs = attrs or {}
    unknown = sorted(set(attrs) - set(fields) - {MORTON})
    if unknown:
        raise ValueError(f"attrs were given for arrays that are not fields: {unknown}")
    specs = {}
    for name in sorted(fields):
        decl = fields[name]
        check_name(name)
        kind = decl.get("kind")
        arr_attrs = dict(attrs.get(name) or {})
        if kind == "ragged":
            check_ragged_attrs(name, arr_attrs)
            specs[name] = FieldSpec("ragged", np.dtype(object), b"", arr_attrs)
        elif kind == "dense":
            try:
                dtype = np.dtype(decl["dtype"])
            except (KeyError, TypeError) as exc:
                raise ValueError(f"dense field {name!r} needs a numpy 'dtype': {exc}") from None
            if dtype.kind not in "biuf":
                raise ValueError(
                    f"dense field {name!r} has dtype {dtype}; dense arrays hold bool, integer or "
                    "float values (use kind 'ragged' for variable-length payloads)"
                )
            specs[name] = FieldSpec(
                "dense", dtype, dense_fill(dtype, decl.get("fill_value")), arr_attrs
            )
        else:
            raise ValueError(f"field {name!r} has kind {kind!r}; expected 'dense' or 'ragged'")
    return specs


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in _RESERVED_NAMES:
        raise ValueError(
            f"{name!r} cannot name a field array: use letters, digits, '_', '.', '-' (starting "
            f"with a letter or '_'), and none of {sorted(_RESERVED_NAMES)}"
        )
    if name.startswith("run-"):
        raise ValueError(f"{name!r} cannot name a field: 'run-' prefixes leaf version subgroups")
    return name


def dense_fill(dtype: np.dtype, fill_value: Any) -> Any:
    """The fill of a dense array: the declared one, else 0 (NaN for floats)."""
    if fill_value is None:
        return np.nan if dtype.kind == "f" else dtype.type(0).item()
    if dtype.kind == "f":
        return float(fill_value)
    if dtype.kind == "b":
        return bool(fill_value)
    value = int(fill_value)
    info = np.iinfo(dtype)
    if value != fill_value or not info.min <= value <= info.max:
        raise ValueError(f"fill value {fill_value!r} is not representable as {dtype}")
    return value


def check_ragged_attrs(name: str, attrs: dict, specs: tuple = (RAGGED_SPEC,)) -> dict:
    """Raise unless ``attrs`` carries a well-formed ragged block of one of ``specs`` (the
    writer's ``zagg-ragged/1``; a reader also takes the ``zagg-ragged/2`` block it derives
    from a typed array's data type); return it."""
    block = attrs.get("ragged")
    if not isinstance(block, dict):
        raise ValueError(
            f"ragged array {name!r} carries no 'ragged' attrs block: a variable-length array "
            "must declare {'spec': 'zagg-ragged/1', 'element': {'dtype', 'shape': [-1, ...]}}"
        )
    if block.get("spec") not in specs:
        raise ValueError(
            f"ragged array {name!r} declares spec {block.get('spec')!r}; this reader and writer "
            f"understand {' and '.join(repr(s) for s in specs)} only"
        )
    element = block.get("element")
    if not isinstance(element, dict) or "dtype" not in element or "shape" not in element:
        raise ValueError(f"ragged array {name!r}: 'element' needs 'dtype' and 'shape'")
    try:
        np.dtype(str(element["dtype"]))
    except TypeError:
        raise ValueError(
            f"ragged array {name!r}: unreadable element dtype {element['dtype']!r}"
        ) from None
    shape = element["shape"]
    if (
        not isinstance(shape, list)
        or not shape
        or shape[0] != -1
        or not all(isinstance(s, int) and s > 0 for s in shape[1:])
    ):
        raise ValueError(
            f"ragged array {name!r}: element shape {shape!r} must be [-1, *positive inner dims]"
        )
    weights = attrs.get("weights", "counts")
    if weights not in WEIGHTS_VALUES:
        raise ValueError(
            f"ragged array {name!r} declares weights {weights!r}; known declarations are "
            f"{list(WEIGHTS_VALUES)}"
        )
    return block


def dggs_attrs(cell_order: int) -> dict:
    """The cell group's attrs: the morton-dggs convention entry and the ``dggs`` block."""
    return {
        "zarr_conventions": [dict(MORTON_CONVENTION)],
        "dggs": {
            "name": "morton",
            "coordinate": MORTON,
            "latitude": _grid.LATITUDE_CONVENTION,
            "ellipsoid": {
                "name": "WGS84",
                "semi_major_axis": _grid.WGS84_SEMI_MAJOR_AXIS,
                "inverse_flattening": _grid.WGS84_INVERSE_FLATTENING,
            },
            "refinement_level": int(cell_order),
            "spatial_dimension": CELL_DIM,
        },
    }


def template_documents(
    grid: Grid,
    specs: dict[str, FieldSpec],
    morton_attrs: dict | None = None,
    morton: bool = True,
) -> dict[str, bytes]:
    """The leaf template's metadata objects (``zarr.json`` keys → bytes), built by zarr once
    per distinct leaf layout in a process and reused: every leaf of a run shares them.
    ``morton=False`` leaves out the stored cell coordinate (a windowed leaf derives it)."""
    key = json.dumps(
        [
            grid.as_dict(),
            morton_attrs or {},
            morton,
            [[n, sp.kind, str(sp.dtype), repr(sp.fill_value), sp.attrs] for n, sp in specs.items()],
        ],
        sort_keys=True,
        default=str,
    )
    docs = _TEMPLATES.get(key)
    if docs is None:
        store = zarr.storage.MemoryStore()
        create_template(store, grid, specs, morton_attrs, morton)
        docs = {k: bytes(v.to_bytes()) for k, v in store._store_dict.items()}
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        _TEMPLATES[key] = docs
    return docs


_TEMPLATES: dict[str, dict[str, bytes]] = {}


def create_template(
    store,
    grid: Grid,
    specs: dict[str, FieldSpec],
    morton_attrs: dict | None = None,
    morton: bool = True,
) -> dict[str, zarr.Array]:
    """Create the empty leaf (root group, cell group, arrays) in ``store``; no chunks yet.
    ``morton=False``: no stored cell coordinate (a windowed leaf, spec §1.5)."""
    root = zarr.open_group(store, mode="w", zarr_format=3)
    cells = root.create_group(str(grid.cell_order), attributes=dggs_attrs(grid.cell_order))
    arrays = {}
    if morton:
        arrays[MORTON] = _dense_array(cells, MORTON, np.dtype("uint64"), 0, morton_attrs, grid)
    for name, spec in specs.items():
        if spec.ragged:
            arrays[name] = _ragged_array(cells, name, spec.attrs, grid)
        else:
            arrays[name] = _dense_array(cells, name, spec.dtype, spec.fill_value, spec.attrs, grid)
    return arrays


def _dense_array(group, name, dtype, fill_value, attrs, grid: Grid):
    n, inner = grid.cells_per_shard, grid.cells_per_chunk
    return group.create_array(
        name,
        shape=(n,),
        chunks=(inner,) if grid.inner_chunks > 1 else (n,),
        shards=(n,) if grid.dense_sharded else None,
        dtype=dtype.newbyteorder("<"),
        fill_value=fill_value,
        serializer=BytesCodec(endian="little"),
        compressors=None,
        filters=None,
        attributes=dict(attrs or {}),
        dimension_names=[CELL_DIM],
        config={"write_empty_chunks": False},
    )


def _ragged_array(group, name, attrs, grid: Grid):
    n, inner = grid.cells_per_shard, grid.cells_per_chunk
    return group.create_array(
        name,
        shape=(n,),
        chunks=(inner,) if grid.ragged_sharded else (n,),
        shards=(n,) if grid.ragged_sharded else None,
        dtype=VLEN_DTYPE,
        fill_value=b"",
        serializer=VLenBytesCodec(),
        compressors=[ZstdCodec(level=3, checksum=False)],
        filters=None,
        attributes=dict(attrs),
        dimension_names=[CELL_DIM],
        config={"write_empty_chunks": False},
    )
