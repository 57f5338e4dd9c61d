"""``quantile`` and ``cdf`` of a t-digest field, per cell, as (lazy) DataArrays.

Both evaluate :mod:`zagg.kernels.quantiles` once per chunk: on a dask-backed Dataset the
result is a dask array with the field's chunks (one task per leaf, run in parallel when
computed); on an in-memory one it is computed at once. NaN where a cell is empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zagg.checks.arguments import require_dataset
from zagg.hive.layout import check_ragged_attrs
from zagg.hive.schema import RAGGED_SPECS

if TYPE_CHECKING:
    import xarray as xr

DIGEST_ELEMENT = {"dtype": "float32", "shape": [-1, 2]}


def quantile(ds: xr.Dataset, field: str, q) -> xr.DataArray:
    """Quantile(s) ``q`` in [0, 1] of the t-digest ``field`` per cell.

    A scalar ``q`` gives the field's shape; a sequence adds a trailing ``quantile``
    dimension. Centroids are interpolated like numpy's ``quantile(..., method="hazen")``,
    so a loss-free cell (at most ``delta`` values) gives exactly that of its values, which
    the payload holds as float32.
    """
    var = _digest_field(ds, field, "zagg.quantile")
    qs = _numbers(q, "q", "a number or a list of numbers in [0, 1]")
    if np.any((qs < 0) | (qs > 1)) or np.any(np.isnan(qs)):
        raise ValueError(f"quantiles must lie in [0, 1], got {q!r}")
    scalar = np.ndim(q) == 0
    attrs = _labelled(var, percentile_name(float(qs[0])) if scalar else "quantile", None)
    return _evaluate(var, field, qs, scalar, "quantile", _quantile_block, attrs)


def cdf(ds: xr.Dataset, field: str, x) -> xr.DataArray:
    """The fraction of the t-digest ``field``'s weight at or below ``x`` per cell (the
    inverse of :func:`quantile`; 0 below the smallest mean, 1 above the largest).

    A scalar ``x`` gives the field's shape; a sequence adds a trailing ``value`` dimension.
    """
    var = _digest_field(ds, field, "zagg.cdf")
    xs = _numbers(x, "x", "a number or a list of numbers")
    attrs = _labelled(var, "fraction at or below the value", "1")
    return _evaluate(var, field, xs, np.ndim(x) == 0, "value", _cdf_block, attrs)


def percentile_name(q: float) -> str:
    """ "median", "10th percentile", "2.5th percentile", "minimum"… for quantile ``q``."""
    if q == 0.5:
        return "median"
    if q in (0.0, 1.0):
        return "minimum" if q == 0 else "maximum"
    p = round(q * 100, 6)
    text = f"{p:g}"
    n = int(p) if p == int(p) else None
    suffix = "th"
    if n is not None and n % 100 not in (11, 12, 13):
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{text}{suffix} percentile"


def _labelled(var, what: str, units: str | None) -> dict:
    """The CF attrs of a statistic of ``var``: "{long_name}, {what}" in the field's units
    (or ``units`` when the statistic has its own)."""
    name = var.attrs.get("long_name", var.name)
    attrs = {"long_name": f"{name}, {what}"}
    units = units or var.attrs.get("units")
    if units:
        attrs["units"] = units
    return attrs


def digest_fields(ds) -> list[str]:
    return [
        str(n)
        for n, v in ds.data_vars.items()
        if (v.attrs.get("ragged") or {}).get("element") == DIGEST_ELEMENT
    ]


def _digest_field(ds, field: str, call: str):
    require_dataset(
        ds,
        call,
        "open the store with zagg.open_hive(path), or pass the Dataset zagg.aggregate returned",
    )
    listed = ", ".join(digest_fields(ds)) or "none"
    if field not in ds.data_vars:
        raise KeyError(
            f"{field!r} is not a variable of this dataset; its t-digest fields: {listed}"
        )
    var = ds[field]
    if "ragged" not in var.attrs:
        raise ValueError(
            f"{field!r} is not a t-digest field (it holds one value per cell); "
            f"this dataset's t-digest fields: {listed}"
        )
    block = check_ragged_attrs(field, dict(var.attrs), RAGGED_SPECS)
    if block["element"] != DIGEST_ELEMENT:
        raise ValueError(
            f"{field!r} is not a t-digest: its element is {block['element']}, expected "
            f"float32 with shape [-1, 2]; this dataset's t-digest fields: {listed}"
        )
    return var


def _numbers(value, name: str, what: str) -> np.ndarray:
    try:
        out = np.atleast_1d(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be {what}, got {value!r}") from exc
    if out.ndim != 1:
        raise ValueError(
            f"{name} must be a number or a flat list of numbers, got shape {np.shape(value)}"
        )
    return out


def _evaluate(var, field: str, points: np.ndarray, scalar: bool, dim: str, block, attrs):
    import dask.array as da
    import xarray as xr

    data = var.data
    if isinstance(data, da.Array):
        values = data.map_blocks(
            block,
            points,
            dtype=np.float64,
            new_axis=data.ndim,
            chunks=(*data.chunks, (points.size,)),
        )
    else:
        values = block(np.asarray(data), points)
    out = xr.DataArray(values, dims=(*var.dims, dim), coords=var.coords, name=field, attrs=attrs)
    out = out.assign_coords({dim: points})
    return out.isel({dim: 0}) if scalar else out


def _quantile_block(payloads: np.ndarray, qs: np.ndarray) -> np.ndarray:
    from zagg.kernels.quantiles import quantiles

    flat = np.asarray(payloads, dtype=object).reshape(-1)
    return quantiles(flat, qs).reshape(*payloads.shape, qs.size)


def _cdf_block(payloads: np.ndarray, xs: np.ndarray) -> np.ndarray:
    from zagg.kernels.quantiles import cdfs

    flat = np.asarray(payloads, dtype=object).reshape(-1)
    return cdfs(flat, xs).reshape(*payloads.shape, xs.size)
