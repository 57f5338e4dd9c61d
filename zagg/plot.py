"""``plot_map``: a quick matplotlib map of one field (or a quantile) per cell.

Cells are drawn at their centres (mortie's ``mort2geo``, authalic latitude as the store
records) on a plain lon/lat axis with degree tick labels, or on a polar stereographic axis
(kilometres from the pole, with a labelled graticule) for polar data; no coastlines, no
map library. A t-digest field is mapped through :func:`zagg.quantile` (``q``, the median
by default); a composition field needs one of its lanes (``lane=``). Needs the ``plot``
extra (matplotlib).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import xarray as xr

EARTH_RADIUS_KM = 6371.0088
_POLAR_LAT = 60.0  # "auto" picks the polar axis when every cell lies poleward of this


def plot_map(
    ds: xr.Dataset,
    field: str,
    *,
    q: float = 0.5,
    lane: str | None = None,
    projection: str = "auto",
    ax=None,
    cmap: str = "viridis",
    s: float = 2.0,
    title: str | None = None,
    colorbar: bool = True,
):
    """Map ``field`` of ``ds`` (an :func:`zagg.open_hive` Dataset) at the store's cell
    order; returns the matplotlib Axes.

    ``projection`` is ``"lonlat"``, ``"polar"`` (stereographic about the nearer pole) or
    ``"auto"``. Empty cells (NaN, or the fill of an integer field) are left out.
    """
    try:
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ImportError as exc:
        raise ImportError("zagg.plot_map needs matplotlib: pip install 'zagg[plot]'") from exc
    import mortie

    from zagg.checks import require_dataset

    require_dataset(ds, "zagg.plot_map", "open the store with zagg.open_hive(path)")
    values, label = _values(ds, field, q, lane)
    words = np.asarray(ds["morton"].values, dtype=np.uint64).reshape(-1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    keep = np.isfinite(values)
    words, values = words[keep], values[keep]
    if ax is None:
        _fig, ax = plt.subplots(figsize=(7, 6), constrained_layout=True)
    if not words.size:
        ax.set_title(title or f"{label}: no cells with data")
        return ax
    lat, lon = mortie.mort2geo(words)
    lon = np.where(lon > 180, lon - 360, lon)
    if projection == "auto":
        projection = (
            "polar"
            if (np.abs(lat) > _POLAR_LAT).all() and (np.sign(lat) == np.sign(lat[0])).all()
            else "lonlat"
        )
    if projection == "lonlat":
        sc = ax.scatter(lon, lat, c=values, s=s, cmap=cmap, linewidths=0, rasterized=True)
        ax.xaxis.set_major_locator(MaxNLocator(3))  # degree labels are wide: few of them
        ax.yaxis.set_major_locator(MaxNLocator(6))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _degrees(v, "E", "W")))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _degrees(v, "N", "S")))
        ax.set_aspect(1.0 / max(np.cos(np.radians(np.median(lat))), 0.05))
        ax.set_xlabel("longitude")
        ax.set_ylabel("latitude")
    elif projection == "polar":
        south = lat[0] < 0
        x, y = polar_stereographic(lat, lon, south)
        sc = ax.scatter(x, y, c=values, s=s, cmap=cmap, linewidths=0, rasterized=True)
        ax.set_aspect("equal")
        _graticule(ax, south, x, y)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_xlabel(f"km from the {'south' if south else 'north'} pole (polar stereographic)")
        ax.set_ylabel("km")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    else:
        raise ValueError(f"projection={projection!r}: expected 'auto', 'lonlat' or 'polar'")
    if colorbar:
        ax.figure.colorbar(sc, ax=ax, label=label)
    order = (ds.attrs.get("morton_hive") or {}).get("cell_order")
    at = f" at order {order}" if order is not None else ""
    ax.set_title(title or f"{label}{at}: {words.size:,} cells")
    return ax


def _values(ds, field: str, q: float, lane: str | None):
    if field not in ds.variables:
        raise KeyError(
            f"{field!r} is not a variable of this dataset; its fields: "
            f"{', '.join(map(str, ds.data_vars))}"
        )
    var = ds[field]
    if "ragged" in var.attrs:
        from zagg.read.stats import quantile

        return quantile(ds, field, q).values, f"{field} q{q:g}"
    if "composition" in var.attrs:
        from zagg.read.fields import composition_lanes

        lanes = composition_lanes(ds, field, fractions=True)
        if lane is None:
            raise ValueError(
                f"{field!r} is a composition word: pick one of its lanes with "
                f"lane= ({', '.join(map(str, lanes['lane'].values))})"
            )
        return lanes.sel(lane=lane).values, f"{field} {lane} fraction"
    values = np.asarray(var.values)
    if values.dtype.kind in "iub":
        fill = ((ds.attrs.get("zagg") or {}).get("fields") or {}).get(field, {}).get("fill_value")
        values = values.astype(np.float64)
        if fill is not None:
            values[values == fill] = np.nan
    units = var.attrs.get("units")
    return values, f"{field} ({units})" if units else field


def _degrees(v: float, pos: str, neg: str) -> str:
    v = float(v)
    hemi = pos if v > 0 else neg if v < 0 else ""
    return f"{abs(v):g}°{hemi}"


def polar_stereographic(lat, lon, south: bool) -> tuple[np.ndarray, np.ndarray]:
    """Polar stereographic ``(x, y)`` in km on the sphere (true scale at the pole)."""
    phi = np.radians(np.asarray(lat, np.float64))
    lam = np.radians(np.asarray(lon, np.float64))
    if south:
        rho = 2 * EARTH_RADIUS_KM * np.tan(np.pi / 4 + phi / 2)
        return rho * np.sin(lam), rho * np.cos(lam)
    rho = 2 * EARTH_RADIUS_KM * np.tan(np.pi / 4 - phi / 2)
    return rho * np.sin(lam), -rho * np.cos(lam)


def _graticule(ax, south: bool, x, y) -> None:
    """Light parallels and meridians through the data's extent, labelled in degrees."""
    x0, x1, y0, y1 = x.min(), x.max(), y.min(), y.max()
    pad = 0.05 * max(x1 - x0, y1 - y0, 1.0)
    ax.set_xlim(x0 - pad, x1 + pad)
    ax.set_ylim(y0 - pad, y1 + pad)
    sign = -1 if south else 1
    rho = np.hypot(x, y)
    lats = 90 - np.degrees(2 * np.arctan(rho / (2 * EARTH_RADIUS_KM)))
    lo, hi = lats.min(), lats.max()
    step = _nice((hi - lo) / 3 or 1.0)
    lons_all = np.degrees(np.arctan2(x, -y if not south else y))
    lon_step = _nice((np.ptp(lons_all) or 10.0) / 3)
    t = np.linspace(-180, 180, 721)
    for a in np.arange(np.floor(lo / step) * step, hi + step, step):
        gx, gy = polar_stereographic(np.full(t.size, sign * a), t, south)
        ax.plot(gx, gy, color="0.75", lw=0.5, zorder=0)
        i = int(np.argmin(np.hypot(gx - (x0 + x1) / 2, gy - y1)))
        if x0 - pad <= gx[i] <= x1 + pad:
            ax.annotate(
                _degrees(sign * a, "N", "S"),
                (gx[i], gy[i]),
                fontsize=7,
                color="0.4",
                ha="center",
                va="bottom",
            )
    r = np.linspace(0, 90, 181)
    for m in np.arange(
        np.floor(lons_all.min() / lon_step) * lon_step, lons_all.max() + lon_step, lon_step
    ):
        gx, gy = polar_stereographic(sign * r, np.full(r.size, m), south)
        ax.plot(gx, gy, color="0.75", lw=0.5, zorder=0)
        inside = (gx >= x0 - pad) & (gx <= x1 + pad) & (gy >= y0 - pad) & (gy <= y1 + pad)
        if inside.any():
            i = int(np.flatnonzero(inside)[0])
            ax.annotate(
                _degrees(((m + 180) % 360) - 180, "E", "W"), (gx[i], gy[i]), fontsize=7, color="0.4"
            )


def _nice(step: float) -> float:
    """A round step (1, 2 or 5 × a power of ten) at or above ``step``."""
    base = 10 ** np.floor(np.log10(step))
    for m in (1, 2, 5, 10):
        if m * base >= step:
            return float(m * base)
    return float(10 * base)
