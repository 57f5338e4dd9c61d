"""Decoding single stored fields: t-digest payloads and composition words.

A composition word (spec §3) packs eight 8-bit lanes LSB-first: lane ``i`` is bits
``8i .. 8i+7``, a quantized fraction ``k / 255`` of the cell's signal stratum, ``k > 0``
exactly when that flag occurred. The lane names come from the array's own ``composition``
attrs block, which must be ``zagg-composition/1`` with the spec's fixed lane order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zagg.checks.arguments import require_dataset

if TYPE_CHECKING:
    import xarray as xr

COMPOSITION_SPEC = "zagg-composition/1"
LANES = ("land", "ocean", "sea_ice", "land_ice", "inland_water", "low", "med", "high")
LANE_DIM = "lane"


def decode_digest(payload: bytes | None) -> np.ndarray:
    """A t-digest payload as its (k, 2) float32 ``[mean, weight]`` rows; empty -> (0, 2)."""
    data = b"" if payload is None else bytes(payload)
    if len(data) % 8:
        raise ValueError(
            f"a t-digest payload is whole (mean, weight) float32 pairs; got {len(data)} bytes"
        )
    return np.frombuffer(data, dtype="<f4").reshape(-1, 2).astype(np.float32)


def composition_lanes(ds: xr.Dataset, field: str, *, fractions: bool = False) -> xr.DataArray:
    """The composition ``field`` split into its named lanes: a ``uint8`` DataArray with a
    trailing ``lane`` dimension (coordinate: the lane names of the field's attrs), lazy on
    a dask-backed Dataset. ``fractions=True`` gives ``k / 255`` as float64 instead."""
    require_dataset(ds, "zagg.composition_lanes", "open the store with zagg.open_hive(path)")
    listed = ", ".join(n for n, v in ds.data_vars.items() if "composition" in v.attrs) or "none"
    if field not in ds.data_vars:
        raise KeyError(
            f"{field!r} is not a variable of this dataset; its composition fields: {listed}"
        )
    var = ds[field]
    block = var.attrs.get("composition")
    if not isinstance(block, dict):
        raise ValueError(
            f"{field!r} carries no 'composition' attrs block, so it is not a "
            f"composition word; this dataset's composition fields: {listed}"
        )
    if block.get("spec") != COMPOSITION_SPEC:
        raise ValueError(
            f"{field!r} declares composition spec {block.get('spec')!r}; this "
            f"reader understands {COMPOSITION_SPEC!r} only"
        )
    if list(block.get("lanes") or []) != list(LANES):
        raise ValueError(
            f"{field!r} declares lanes {block.get('lanes')!r}; "
            f"{COMPOSITION_SPEC} fixes them to {list(LANES)}"
        )
    if var.dtype != np.uint64:
        raise ValueError(f"{field!r} holds {var.dtype}; a composition word is uint64")
    import dask.array as da
    import xarray as xr

    data = var.data
    if isinstance(data, da.Array):
        lanes = data.map_blocks(
            _lanes,
            fractions,
            dtype=np.float64 if fractions else np.uint8,
            new_axis=data.ndim,
            chunks=(*data.chunks, (len(LANES),)),
        )
    else:
        lanes = _lanes(np.asarray(data), fractions)
    out = xr.DataArray(lanes, dims=(*var.dims, LANE_DIM), coords=var.coords, name=field)
    out = out.assign_coords({LANE_DIM: list(LANES)})
    out.attrs = {
        "long_name": f"fraction of {block.get('of')}'s points per flag",
        "of": block.get("of"),
        "threshold": block.get("threshold"),
        "units": "1" if fractions else "1/255",
    }
    return out


def _lanes(words: np.ndarray, fractions: bool) -> np.ndarray:
    words = np.ascontiguousarray(words, dtype="<u8")
    lanes = words.view(np.uint8).reshape(*words.shape, len(LANES))
    return lanes / 255.0 if fractions else lanes.copy()
