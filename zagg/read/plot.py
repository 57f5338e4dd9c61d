"""``plot_map``: maps of fields (or quantiles) per cell, laid out for a paper.

Cells are drawn at their centres (mortie's ``mort2geo``, authalic latitude as the store
records) as squares of the cell's own size, on a plain lon/lat axis with degree ticks or on
a polar stereographic axis (kilometres from the pole, with a labelled graticule) for polar
data; no coastlines, no map library. A t-digest field is mapped through
:func:`zagg.quantile` (``q``, the median by default; a list of ``q`` gives one panel each);
a composition field needs one of its lanes (``lane=``). Colorbars are labelled from the
fields' CF ``long_name`` and ``units``, panels of one field share one colour scale and one
colorbar, and a figure made here is sized to the region's shape so the maps fill it.
Needs the ``plot`` extra (matplotlib).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import xarray as xr

EARTH_RADIUS_KM = 6371.0088
_POLAR_LAT = 60.0  # "auto" picks the polar axis when every cell lies poleward of this
KINDS = ("auto", "counts", "values", "difference", "fraction")
#: default colormap per kind: sequential for values and counts, diverging for differences
CMAPS = {"counts": "magma", "values": "viridis", "difference": "RdBu_r", "fraction": "YlGnBu"}
_DIFFERENCE_WORDS = ("difference", "change", "anomaly", "residual", "bias")
_ASPECT_RANGE = (0.3, 3.5)  # a panel's height / width; a longer region is padded to it
_STEPS = [1, 2, 2.5, 5, 10]
_MIN_MARKER_PT = 1.8  # a cell smaller than this is still drawn this wide (sparse tracks)


@dataclass
class _Panel:
    values: np.ndarray  # float64 per cell, NaN where empty
    long_name: str
    units: str | None
    what: str  # the panel's own title: what distinguishes it from its neighbours
    group: str  # panels of one group (one field) share a colour scale and a colorbar
    group_name: str
    group_units: str | None
    kind: str


def plot_map(
    ds: xr.Dataset,
    field,
    *,
    q=0.5,
    lane=None,
    projection: str = "auto",
    ax=None,
    cmap: str | None = None,
    kind: str = "auto",
    vmin: float | None = None,
    vmax: float | None = None,
    s: float | None = None,
    title: str | None = None,
    colorbar: bool = True,
):
    """Map ``field`` of ``ds`` (an :func:`zagg.open_hive` or :func:`zagg.open_level`
    Dataset) at the store's cell order.

    ``field`` is one name or a list; a list of quantiles ``q`` (t-digest fields) or of
    ``lane`` names (composition fields) gives one panel each. Without ``ax`` a figure is
    made, sized so the maps fill it; with ``ax`` (one Axes per panel) the maps are drawn
    there. Returns the Axes, or an array of them for several panels.

    ``projection`` is ``"lonlat"``, ``"polar"`` (stereographic about the nearer pole) or
    ``"auto"``. ``kind`` picks the colour scale: ``"counts"`` (logarithmic), ``"values"``
    (sequential, clipped to the 1st–99th percentile), ``"difference"`` (diverging about
    0), ``"fraction"`` (0 to 1) or ``"auto"`` (counts for a ``number of …`` field, fraction
    for a composition lane, difference for a ``difference``/``change``/``anomaly`` in its
    long_name, else values). Empty cells (NaN, or the fill of an integer field) are left out.
    """
    try:
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
    except ImportError as exc:
        raise ImportError("zagg.plot_map needs matplotlib: pip install 'zagg[plot]'") from exc
    import mortie

    from zagg.checks.arguments import require_dataset

    require_dataset(ds, "zagg.plot_map", "open the store with zagg.open_hive(path)")
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {', '.join(KINDS)}")
    if projection not in ("auto", "lonlat", "polar"):
        raise ValueError(f"projection={projection!r}: expected 'auto', 'lonlat' or 'polar'")
    panels = _panels(ds, field, q, lane, kind)
    words = np.asarray(ds["morton"].values, dtype=np.uint64).reshape(-1)
    any_data = np.zeros(words.size, bool)
    for p in panels:
        any_data |= np.isfinite(p.values)
    own = ax is None
    axes = None if own else np.atleast_1d(np.asarray(ax, dtype=object)).reshape(-1)
    if axes is not None and axes.size != len(panels):
        raise ValueError(f"{len(panels)} panels to draw but {axes.size} Axes given")
    header = _header(ds, int(any_data.sum()))
    if not any_data.any():
        if own:
            _fig, axes = plt.subplots(1, len(panels), squeeze=False, layout="constrained")
            axes = axes.reshape(-1)
        for a, p in zip(axes, panels, strict=True):
            a.set_title(title or f"{p.long_name}: no cells with data")
        return axes[0] if len(panels) == 1 else axes
    lat, lon = mortie.mort2geo(words)
    lat = np.asarray(lat, np.float64)
    lon = np.asarray(lon, np.float64)
    lon = np.where(lon > 180, lon - 360, lon)
    if projection == "auto":
        shown = lat[any_data]
        polar = (np.abs(shown) > _POLAR_LAT).all() and (np.sign(shown) == np.sign(shown[0])).all()
        projection = "polar" if polar else "lonlat"
    order = _order(ds)
    geo = _Geometry.of(projection, lat, lon, any_data, order)
    rows, cols, loc = _layout(len(panels), geo.aspect)
    if own:
        fig, grid = plt.subplots(
            rows, cols, figsize=_figsize(rows, cols, geo.aspect, loc), layout="compressed"
        )
        grid = np.atleast_1d(grid).reshape(-1)
        for extra in grid[len(panels) :]:
            extra.set_visible(False)
        axes = grid[: len(panels)]
    fig = axes[0].figure
    norms = _norms(panels, vmin, vmax)
    footprints = None  # cells as their HEALPix outlines once they are big enough to see
    if s is None and geo.cell_pixels(axes[0]) >= 2.0:
        footprints = geo.footprints(words[any_data])
    scatters, titles = [], []
    one_field = len({p.group for p in panels}) == 1
    for i, (a, p) in enumerate(zip(axes, panels, strict=True)):
        keep = np.isfinite(p.values)
        norm, _extend = norms[p.group]
        if footprints is not None:
            sc = PolyCollection(
                footprints[keep[any_data]],
                array=p.values[keep],
                cmap=cmap or CMAPS[p.kind],
                norm=norm,
                edgecolors="face",
                linewidths=0.25,
                rasterized=True,
            )
            a.add_collection(sc)
        else:
            sc = a.scatter(
                geo.x[keep],
                geo.y[keep],
                c=p.values[keep],
                s=1.0 if s is None else s,
                marker="s",
                cmap=cmap or CMAPS[p.kind],
                norm=norm,
                linewidths=0,
                rasterized=True,
            )
        scatters.append(sc)
        geo.decorate(a)
        if len(panels) > 1:
            what = p.what if one_field else p.long_name
            titles.append((a.set_title(f"({chr(97 + i)}) {what}", fontsize=10, loc="left"), a))
        if own:  # one extent for all: the degree (or km) labels only on the outer panels
            if i % cols:
                a.tick_params(labelleft=False)
                a.set_ylabel("")
            if i + cols < len(panels):
                a.tick_params(labelbottom=False)
                a.set_xlabel("")
    if colorbar:
        _colorbars(fig, axes, panels, scatters, norms, loc)
    if len(panels) == 1:
        text = title or header
        titles.append((axes[0].set_title(text, fontsize=10), axes[0]))
    else:
        titles.append((fig.suptitle(title or header, fontsize=11), None))
    _settle(fig, axes, titles, rows, cols, own)
    if s is None and footprints is None:
        size = _marker_size(axes[0], geo.cell_side)
        for sc in scatters:
            sc.set_sizes([size])
    return axes[0] if len(panels) == 1 else axes


def colorbar_label(long_name: str, units: str | None) -> str:
    """``"long_name (units)"``; a dimensionless ``"1"`` or absent unit is left out."""
    return f"{long_name} ({units})" if units and units != "1" else long_name


def _panels(ds, field, q, lane, kind: str) -> list[_Panel]:
    fields = [field] if isinstance(field, str) else list(field)
    if not fields:
        raise ValueError("field: name at least one field to map")
    qs = [q] if np.ndim(q) == 0 else list(q)
    lanes = [lane] if lane is None or isinstance(lane, str) else list(lane)
    out = []
    for name in fields:
        if name not in ds.variables:
            raise KeyError(
                f"{name!r} is not a variable of this dataset; its fields: "
                f"{', '.join(map(str, ds.data_vars))}"
            )
        var = ds[name]
        base = str(var.attrs.get("long_name", name))
        units = var.attrs.get("units")
        if "ragged" in var.attrs:
            from zagg.read.stats import percentile_name, quantile

            for qi in qs:
                da = quantile(ds, name, float(qi))
                what = percentile_name(float(qi))
                out.append(_panel(da.values, da.attrs, what, name, base, units, kind))
        elif "composition" in var.attrs:
            from zagg.read.fields import composition_lanes

            split = composition_lanes(ds, name, fractions=True)
            names = [str(v) for v in split["lane"].values]
            if lanes == [None]:
                raise ValueError(
                    f"{name!r} is a composition word: pick one of its lanes with "
                    f"lane= ({', '.join(names)})"
                )
            for ln in lanes:
                if ln not in names:
                    raise ValueError(f"lane={ln!r}: {name!r} has lanes {', '.join(names)}")
                attrs = {"long_name": f"fraction flagged {ln.replace('_', ' ')}", "units": "1"}
                what = f"{ln.replace('_', ' ')} fraction of {split.attrs.get('of')}"
                values = split.sel(lane=ln).values
                out.append(_panel(values, attrs, what, name, "fraction flagged", "1", kind))
        else:
            values = np.asarray(var.values)
            if values.dtype.kind in "iub":
                fields_block = (ds.attrs.get("zagg") or {}).get("fields") or {}
                fill = fields_block.get(name, {}).get("fill_value")
                values = values.astype(np.float64)
                if fill is not None:
                    values[values == fill] = np.nan
            out.append(_panel(values, var.attrs, base, name, base, units, kind))
    return out


def _panel(values, attrs, what, group, group_name, group_units, kind) -> _Panel:
    long_name = str(attrs.get("long_name", group))
    units = attrs.get("units")
    if kind == "auto":
        low = long_name.lower()
        if low.startswith("number of"):
            kind = "counts"
        elif low.startswith("fraction"):
            kind = "fraction"
        elif any(w in low for w in _DIFFERENCE_WORDS):
            kind = "difference"
        else:
            kind = "values"
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    return _Panel(values, long_name, units, what, group, group_name, group_units, kind)


def _norms(panels: list[_Panel], vmin, vmax) -> dict:
    """One colour scale per group over all its panels' values: ``group → (norm, extend)``."""
    from matplotlib.colors import LogNorm, Normalize

    out = {}
    for group in dict.fromkeys(p.group for p in panels):
        mine = [p for p in panels if p.group == group]
        v = np.concatenate([p.values[np.isfinite(p.values)] for p in mine])
        lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
        kind = mine[0].kind
        if kind == "counts" and lo > 0 and hi > lo:
            a, b = vmin or lo, vmax or hi
            out[group] = (LogNorm(a, b), _extend(lo, hi, a, b))
            continue
        if kind == "fraction":
            a, b = (0.0 if vmin is None else vmin), (1.0 if vmax is None else vmax)
        elif kind == "difference":
            m = float(np.percentile(np.abs(v), 99)) if v.size else 1.0
            a, b = (-m if vmin is None else vmin), (m if vmax is None else vmax)
        else:
            p1, p99 = np.percentile(v, [1, 99]) if v.size else (lo, hi)
            a = float(p1) if vmin is None else vmin
            b = float(p99) if vmax is None else vmax
        if not b > a:
            a, b = a - 0.5, b + 0.5
        out[group] = (Normalize(a, b), _extend(lo, hi, a, b))
    return out


def _extend(lo, hi, a, b) -> str:
    below, above = lo < a, hi > b
    return "both" if below and above else "min" if below else "max" if above else "neither"


def _colorbars(fig, axes, panels, scatters, norms, loc: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    for group in dict.fromkeys(p.group for p in panels):
        idx = [i for i, p in enumerate(panels) if p.group == group]
        first = panels[idx[0]]
        if len(idx) == 1:
            label = colorbar_label(first.long_name, first.units)
        else:
            label = colorbar_label(first.group_name, first.group_units)
        norm, extend = norms[group]
        cb = fig.colorbar(
            scatters[idx[0]],
            ax=list(axes[idx]) if len(idx) > 1 else axes[idx[0]],
            location=loc,
            extend=extend,
            shrink=1.0,
            aspect=34 if len(idx) > 1 else 26,
            extendfrac=0.035,
            pad=0.02,
        )
        cb.set_label(label, fontsize=10)
        cb.ax.tick_params(labelsize=9)
        if first.kind == "counts" and norm.__class__.__name__ == "LogNorm":
            cb.locator = LogLocator(subs=(1.0, 2.0, 5.0))
            cb.formatter = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
            cb.update_ticks()


@dataclass
class _Geometry:
    """Projected cell positions, the extent to show, and how to decorate an Axes."""

    projection: str
    x: np.ndarray
    y: np.ndarray
    limits: tuple[float, float, float, float]
    aspect: float  # panel height / width on the page
    axis_aspect: float  # y units per x unit on the page (matplotlib's set_aspect)
    cell_side: float  # a cell's side in y data units
    south: bool

    @classmethod
    def of(cls, projection, lat, lon, shown, order):
        side = np.sqrt(np.pi / 3) / 2.0**order  # a HEALPix cell's side, radians
        south = bool(lat[shown][0] < 0)
        if projection == "lonlat":
            x, y = lon, lat
            mid = np.radians(np.median(lat[shown]))
            axis_aspect = 1.0 / max(np.cos(mid), 0.05)
            cell = np.degrees(side)
        else:
            x, y = polar_stereographic(lat, lon, south)
            axis_aspect = 1.0
            cell = EARTH_RADIUS_KM * side
        xs, ys = x[shown], y[shown]
        x0, x1 = xs.min() - cell * axis_aspect, xs.max() + cell * axis_aspect
        y0, y1 = ys.min() - cell, ys.max() + cell
        w, h = (x1 - x0) / axis_aspect, (y1 - y0)  # page units: one y unit each
        w, h = max(w, h * 1e-3, 1e-9), max(h, w * 1e-3, 1e-9)
        lo, hi = _ASPECT_RANGE
        a = float(np.clip(h / w, lo, hi))
        if h / w > hi:  # too tall: widen the view
            grow = (h / a - w) * axis_aspect / 2
            x0, x1 = x0 - grow, x1 + grow
        elif h / w < lo:  # too wide: heighten it
            grow = (w * a - h) / 2
            y0, y1 = y0 - grow, y1 + grow
        pad_x, pad_y = 0.02 * (x1 - x0), 0.02 * (y1 - y0)
        limits = (x0 - pad_x, x1 + pad_x, y0 - pad_y, y1 + pad_y)
        return cls(projection, x, y, limits, a, axis_aspect, cell, south)

    def cell_pixels(self, ax) -> float:
        """About how many pixels (at 100 dpi) one cell spans in ``ax`` once laid out."""
        x0, x1, y0, y1 = self.limits
        fig_w, fig_h = ax.figure.get_size_inches()
        box = ax.get_position()
        across = min(
            box.width * fig_w, box.height * fig_h * (x1 - x0) / self.axis_aspect / (y1 - y0)
        )
        return float(100 * across * self.cell_side * self.axis_aspect / (x1 - x0))

    def footprints(self, words: np.ndarray) -> np.ndarray:
        """The cells' outlines (mortie's ``mort2polygon``), projected: ``(n, 5, 2)``."""
        import mortie

        ring = np.asarray(mortie.mort2polygon(words), dtype=np.float64).reshape(len(words), -1, 2)
        lat, lon = ring[..., 0], ring[..., 1]
        if self.projection == "polar":
            x, y = polar_stereographic(lat, lon, self.south)
        else:  # each outline's longitudes on the side of the cell's own centre
            lon0 = np.asarray(mortie.mort2geo(words)[1], np.float64)[:, None]
            lon0 = np.where(lon0 > 180, lon0 - 360, lon0)
            x, y = lon0 + (lon - lon0 + 180) % 360 - 180, lat
        return np.stack([x, y], axis=-1)

    def decorate(self, ax) -> None:
        from matplotlib.ticker import MaxNLocator

        x0, x1, y0, y1 = self.limits
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_aspect(self.axis_aspect, adjustable="box")
        ax.tick_params(labelsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(5, steps=_STEPS))
        ax.yaxis.set_major_locator(MaxNLocator(6, steps=_STEPS))
        if self.projection == "lonlat":
            ax.xaxis.set_major_formatter(DegreeFormatter("E", "W"))
            ax.yaxis.set_major_formatter(DegreeFormatter("N", "S"))
            return
        ax.xaxis.set_major_formatter(NumberFormatter())
        ax.yaxis.set_major_formatter(NumberFormatter())
        pole = "south" if self.south else "north"
        ax.set_xlabel(f"km from the {pole} pole (polar stereographic)", fontsize=9)
        ax.set_ylabel("km", fontsize=9)
        _graticule(ax, self.south, self.limits)


def _layout(n: int, aspect: float) -> tuple[int, int, str]:
    """Rows, columns and the colorbar side for ``n`` panels of ``aspect`` (height/width):
    wide regions stack, tall ones sit side by side with the colorbar below."""
    if n == 1:
        return 1, 1, "bottom" if aspect > 1.25 else "right"
    if aspect < 0.7:
        return n, 1, "right"
    cols = min(n, 3)
    return -(-n // cols), cols, "bottom" if aspect > 1.25 else "right"


def _figsize(rows: int, cols: int, aspect: float, loc: str) -> tuple[float, float]:
    """A first guess that is too big rather than too small; :func:`_settle` trims it."""
    area = 24.0 if rows * cols == 1 else 16.0
    w = np.sqrt(area / aspect)
    w = min(w, 8.0, 12.0 / cols)
    h = aspect * w
    if h > min(7.5, 9.5 / rows):
        h = min(7.5, 9.5 / rows)
        w = h / aspect
    fig_w = cols * (w + 1.0) + (1.1 if loc == "right" else 0.2)
    fig_h = rows * (h + 0.8) + (0.9 if loc == "bottom" else 0.0) + 0.6
    return float(fig_w), float(fig_h)


def _settle(fig, axes, titles, rows: int, cols: int, own: bool) -> None:
    """Trim a figure made here to its maps (no blank beside a fixed-aspect panel), wrap
    the titles to its width and thin the ticks until no two labels overlap."""
    originals = [t.get_text() for t, _ax in titles]
    for _ in range(6):
        changed = _declutter(fig, axes)
        if own:
            _wrap_titles(fig, titles, originals)
            changed |= _trim(fig, axes, rows, cols)
        if not changed:
            return


def _trim(fig, axes, rows: int, cols: int) -> bool:
    """Shrink the figure to its content: the compressed layout packs fixed-aspect panels
    and their colorbars together, so what is left over is margin round the whole."""
    fig.draw_without_rendering()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    pad = 0.08
    spare_w, spare_h = width - tight.width - pad, height - tight.height - pad
    if spare_w < 0.03 and spare_h < 0.03:
        return False
    fig.set_size_inches(width - max(spare_w, 0), height - max(spare_h, 0))
    return True


def _wrap_titles(fig, titles, originals: list[str]) -> None:
    """Break each title (its own text in ``originals``) into lines that fit over its panel,
    or over the figure when it has no Axes (the suptitle)."""
    fig_w = fig.get_size_inches()[0]
    for (t, ax), text in zip(titles, originals, strict=True):
        inches = fig_w if ax is None else ax.get_position().width * fig_w
        chars = max(24, int(inches * 72 / (0.52 * t.get_fontsize())))
        t.set_text("\n".join(textwrap.fill(line, chars) for line in text.split("\n")))


def _declutter(fig, axes) -> bool:
    """Fewer ticks on any axis whose labels overlap; True when one was thinned."""
    from matplotlib.ticker import MaxNLocator

    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    changed = False
    for a in axes:
        for axis, which in ((a.xaxis, "x"), (a.yaxis, "y")):
            if tick_labels_overlap(a, which, renderer):
                n = max(2, len(visible_tick_labels(a, which, renderer)) - 1)
                axis.set_major_locator(MaxNLocator(n, steps=_STEPS))
                changed = True
    return changed


def visible_tick_labels(ax, which: str, renderer) -> list:
    """The drawn major tick labels of one axis (``"x"`` or ``"y"``): non-empty, and
    placed along the axes' extent (ticks beyond the view are not drawn)."""
    box = ax.get_window_extent(renderer)
    axis = ax.xaxis if which == "x" else ax.yaxis
    out = []
    for t in axis.get_ticklabels():
        if not (t.get_visible() and t.get_text()):
            continue
        ext = t.get_window_extent(renderer)
        centre = (ext.x0 + ext.x1) / 2 if which == "x" else (ext.y0 + ext.y1) / 2
        lo, hi = (box.x0, box.x1) if which == "x" else (box.y0, box.y1)
        if lo - 1 <= centre <= hi + 1:
            out.append(t)
    return out


def tick_labels_overlap(ax, which: str, renderer, pad: float = 6.0) -> bool:
    """Whether two drawn tick labels of one axis overlap or come within ``pad`` px."""
    boxes = [t.get_window_extent(renderer) for t in visible_tick_labels(ax, which, renderer)]
    for i, p in enumerate(boxes):
        for r in boxes[i + 1 :]:
            if p.x0 < r.x1 + pad and r.x0 < p.x1 + pad and p.y0 < r.y1 + pad and r.y0 < p.y1 + pad:
                return True
    return False


def _marker_size(ax, cell_side: float) -> float:
    """The scatter size (points²) of a square one cell wide on the page."""
    fig = ax.figure
    fig.draw_without_rendering()
    (_, py0), (_, py1) = ax.transData.transform([(0.0, 0.0), (0.0, cell_side)])
    side_pt = abs(py1 - py0) * 72.0 / fig.dpi
    return float(max(side_pt, _MIN_MARKER_PT) ** 2)


def _order(ds) -> int:
    order = (ds.attrs.get("morton_hive") or {}).get("cell_order")
    if order is None:
        order = ((ds.attrs.get("zagg") or {}).get("grid") or {}).get("child_order")
    if order is None:
        import mortie

        order = int(mortie.orders_of(np.asarray(ds["morton"].values[:1], np.uint64))[0])
    return int(order)


def _header(ds, cells: int) -> str:
    """ "store · order 19 · all time · 8,637 cells": where the map comes from."""
    hive = ds.attrs.get("morton_hive") or {}
    zattrs = ds.attrs.get("zagg") or {}
    url = hive.get("store")
    if url:
        name = PurePosixPath(str(url).rstrip("/")).name or str(url)
    else:
        dataset = zattrs.get("dataset") or {}
        name = " ".join(str(dataset[k]) for k in ("short_name", "version") if k in dataset)
        name = f"{name or 'cells'} (not yet written)"
    level = " (pyramid level)" if ds.attrs.get("zagg_level") else ""
    window = zattrs.get("window")
    when = f"window {window}" if window else "all time"
    return f"{name} · order {_order(ds)}{level} · {when} · {cells:,} cells"


class _AdaptiveFormatter:
    """Shared by the tick formatters: as many decimals as the ticks need, and no more."""

    def set_locs(self, locs):
        super().set_locs(locs)
        locs = [float(v) for v in locs]
        self.decimals = 0
        while self.decimals < 6 and any(
            abs(round(v, self.decimals) - v) > 1e-9 * max(1.0, abs(v)) for v in locs
        ):
            self.decimals += 1


def _formatters():
    from matplotlib.ticker import Formatter

    class Degree(_AdaptiveFormatter, Formatter):
        """Degrees with a hemisphere letter (``75.5°S``), decimals as the ticks need."""

        def __init__(self, pos: str, neg: str):
            self.pos, self.neg, self.decimals = pos, neg, 0

        def __call__(self, v, _pos=None):
            v = round(float(v), self.decimals)
            hemi = self.pos if v > 0 else self.neg if v < 0 else ""
            return f"{abs(v):.{self.decimals}f}°{hemi}"

    class Number(_AdaptiveFormatter, Formatter):
        """Thousands separated, a real minus sign, decimals as the ticks need."""

        def __init__(self):
            self.decimals = 0

        def __call__(self, v, _pos=None):
            return f"{float(v):,.{self.decimals}f}".replace("-", "\u2212")

    return Degree, Number


def DegreeFormatter(pos: str, neg: str):  # noqa: N802 (a class made on first use)
    """A matplotlib tick formatter of degrees with hemisphere letters."""
    return _formatters()[0](pos, neg)


def NumberFormatter():  # noqa: N802
    """A matplotlib tick formatter of plain numbers with thousands separators."""
    return _formatters()[1]()


def polar_stereographic(lat, lon, south: bool) -> tuple[np.ndarray, np.ndarray]:
    """Polar stereographic ``(x, y)`` in km on the sphere (true scale at the pole)."""
    phi = np.radians(np.asarray(lat, np.float64))
    lam = np.radians(np.asarray(lon, np.float64))
    if south:
        rho = 2 * EARTH_RADIUS_KM * np.tan(np.pi / 4 + phi / 2)
        return rho * np.sin(lam), rho * np.cos(lam)
    rho = 2 * EARTH_RADIUS_KM * np.tan(np.pi / 4 - phi / 2)
    return rho * np.sin(lam), -rho * np.cos(lam)


def _graticule(ax, south: bool, limits) -> None:
    """Light parallels and meridians across the view: each parallel labelled where it
    leaves the view towards the top or right, each meridian towards the bottom or left."""
    x0, x1, y0, y1 = limits
    sign = -1 if south else 1
    cx, cy = np.meshgrid(np.linspace(x0, x1, 32), np.linspace(y0, y1, 32))
    rho = np.hypot(cx, cy)
    lats = 90 - np.degrees(2 * np.arctan(rho / (2 * EARTH_RADIUS_KM)))
    lons = np.degrees(np.arctan2(cx, cy if south else -cy))
    pole = rho.min() == 0 or (x0 <= 0 <= x1 and y0 <= 0 <= y1)
    lat_step = _nice(max(np.ptp(lats), 1e-6) / 3)
    if pole:
        lon_lo, lon_hi, lon_step = -180.0, 180.0, 45.0
    else:
        unwrapped = np.degrees(np.unwrap(np.radians(lons.ravel())))
        lon_lo, lon_hi = unwrapped.min(), unwrapped.max()
        lon_step = _nice_degrees((lon_hi - lon_lo) / 3)
    style = {"color": "0.7", "lw": 0.5, "zorder": 0.5}
    placed: list[tuple[float, float]] = []
    diagonal = np.hypot(x1 - x0, y1 - y0)

    def label(gx, gy, inside, text, score):
        i = np.flatnonzero(inside)[np.argmax(score[inside])]
        px, py = gx[i], gy[i]
        if any(np.hypot(px - qx, py - qy) < 0.08 * diagonal for qx, qy in placed):
            return
        placed.append((px, py))
        ax.text(
            px,
            py,
            text,
            ha="left" if px < (x0 + x1) / 2 else "right",
            va="bottom" if py < (y0 + y1) / 2 else "top",
            fontsize=7,
            color="0.3",
            clip_on=True,
            zorder=3,
            bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75},
        )

    # lines sampled densely across the view only, so a small view still gets smooth lines
    span = lon_hi - lon_lo
    t = np.linspace(lon_lo - 0.1 * span, lon_hi + 0.1 * span, 801)
    first = np.floor(lats.min() / lat_step) * lat_step
    for a in np.arange(first, lats.max() + lat_step, lat_step):
        if a >= 90 - 1e-9:
            continue
        gx, gy = polar_stereographic(np.full(t.size, sign * a), t, south)
        ax.plot(gx, gy, **style)
        inside = (gx >= x0) & (gx <= x1) & (gy >= y0) & (gy <= y1)
        if inside.any():
            score = (gx - x0) / (x1 - x0) + (gy - y0) / (y1 - y0)
            label(gx, gy, inside, _degrees(sign * a, "N", "S"), score)
    colat = 90 - lats
    reach = np.ptp(colat)
    r = np.linspace(max(colat.min() - 0.1 * reach, 0.0), min(colat.max() + 0.1 * reach, 89.99), 801)
    r = 90 - r
    for m in np.arange(np.floor(lon_lo / lon_step) * lon_step, lon_hi + lon_step, lon_step):
        if pole and m >= 180:
            continue
        gx, gy = polar_stereographic(sign * r, np.full(r.size, m), south)
        ax.plot(gx, gy, **style)
        inside = (gx >= x0) & (gx <= x1) & (gy >= y0) & (gy <= y1)
        if inside.any():
            score = np.hypot(gx, gy) if pole else -((gx - x0) / (x1 - x0) + (gy - y0) / (y1 - y0))
            label(gx, gy, inside, _degrees(((m + 180) % 360) - 180, "E", "W"), score)


def _nice_degrees(step: float) -> float:
    """A round step of longitude: 1, 2 or 5 × a power of ten below 10°, else 10, 15, 30,
    45 or 90°."""
    if step < 10:
        return _nice(max(step, 1e-6))
    return next((d for d in (10.0, 15.0, 30.0, 45.0) if d >= step), 90.0)


def _degrees(v: float, pos: str, neg: str) -> str:
    v = float(v)
    hemi = pos if 0 < v < 180 else neg if -180 < v < 0 else ""
    return f"{abs(v):g}°{hemi}"


def _nice(step: float) -> float:
    """A round step (1, 2 or 5 × a power of ten) at or above ``step``."""
    base = 10 ** np.floor(np.log10(step))
    for m in (1, 2, 5, 10):
        if m * base >= step:
            return float(m * base)
    return float(10 * base)
