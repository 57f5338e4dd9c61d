"""``plot_map`` figures as a reader sees them, rendered at 100 dpi: the figures of the four
notebooks (the same calls on the same data) and regions of every shape, each checked for
tick labels that do not overlap, maps that fill the figure and colorbars labelled with
the field's long_name and units."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zagg
from zagg.sources.synthetic import synthetic_photons

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")


def _store(path, n, seed, config="atl03_synthetic", region=None, sweep=False) -> str:
    kw = {} if region is None else {"region": region}
    photons = synthetic_photons(n, chunk_size=100_000, seed=seed, **kw)
    zagg.to_hive(zagg.aggregate(photons, zagg.load_config(config)), str(path))
    if sweep:
        zagg.sweep(str(path))
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The notebooks' stores: the same generator, seeds and configs (the granules
    notebook's seeded granules aggregated in-process instead of on a cluster)."""
    from zagg.cli.demo import demo_config
    from zagg.sources.granules import open_granules
    from zagg.sources.write_granules import write_granules

    root = tmp_path_factory.mktemp("plots")
    gdir = root / "granules"
    write_granules(gdir, 2, product="ATL03", points_per_granule=100_000, seed=0)
    cfg = zagg.load_config(demo_config(str(gdir)))
    granules = zagg.aggregate(open_granules(cfg.data_source.granules), cfg)
    zagg.to_hive(granules, root / "granules-store")
    return {
        "quickstart": _store(root / "quickstart-store", 300_000, 0),
        "reading": _store(root / "reading-store", 300_000, 1, sweep=True),
        "strata": _store(root / "strata-store", 200_000, 2, config="atl03_strata"),
        "granules": str(root / "granules-store"),
    }


def _figures(stores) -> dict:
    """name → (the figure's map Axes, the colorbar labels expected, left to right)."""
    quick = zagg.open_hive(stores["quickstart"])
    reading = zagg.open_hive(stores["reading"], bbox=(-100.5, -75.8, -99.5, -75.3))
    level = zagg.open_level(stores["reading"], 11)
    strata = zagg.open_hive(stores["strata"]).load()
    granules = zagg.open_hive(stores["granules"])
    return {
        "quickstart-map": (
            zagg.plot_map(quick, ["count", "h_tdigest"], projection="lonlat"),
            ["number of points", "photon height, median (m)"],
        ),
        "granules-map": (
            zagg.plot_map(granules, "h_tdigest", projection="lonlat"),
            ["photon height, median (m)"],
        ),
        "reading-quantiles": (
            zagg.plot_map(reading, "h_tdigest", q=[0.1, 0.9], projection="lonlat"),
            ["photon height (m)"],  # one colorbar for both panels of the one field
        ),
        "reading-level": (
            zagg.plot_map(level, "h_tdigest", projection="lonlat"),
            ["photon height, median (m)"],
        ),
        "strata-maps": (
            zagg.plot_map(
                strata,
                ["h_tdigest_signal", "h_tdigest_noise", "composition"],
                lane="land_ice",
                projection="lonlat",
            ),
            [
                "signal photon height, median (m)",
                "noise photon height, median (m)",
                "fraction flagged land ice",
            ],
        ),
    }


def _label_boxes(ax, which: str, renderer) -> list:
    """Window extents of the tick labels drawn on one axis of ``ax``."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    frame = ax.get_window_extent(renderer)
    lo, hi = (frame.x0, frame.x1) if which == "x" else (frame.y0, frame.y1)
    boxes = []
    for label in axis.get_ticklabels():
        if not (label.get_visible() and label.get_text()):
            continue
        box = label.get_window_extent(renderer)
        centre = (box.x0 + box.x1) / 2 if which == "x" else (box.y0 + box.y1) / 2
        if lo - 1 <= centre <= hi + 1:
            boxes.append(box)
    return boxes


def _disjoint(boxes) -> bool:
    return all(
        a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
    )


def _cells(ax):
    """The collection of the map's cells (dots, or cell outlines when big enough)."""
    return next(c for c in ax.collections if c.get_array() is not None)


def _colorbar_label(cb) -> str:
    return cb.ax.get_xlabel() if cb.orientation == "horizontal" else cb.ax.get_ylabel()


def check_figure(axes, expected_labels, name: str = "") -> None:
    """At 100 dpi: per map, tick labels pairwise disjoint on each axis and at least two
    labelled ticks on each outer axis; each map's plotting box at least half of its share
    of the figure (figure area / maps); the colorbars labelled as ``expected_labels``."""
    maps = list(np.atleast_1d(axes))
    fig = maps[0].figure
    fig.set_dpi(100)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    share = fig.bbox.width * fig.bbox.height / len(maps)
    labels = []
    for ax in maps:
        for which in "xy":
            boxes = _label_boxes(ax, which, renderer)
            assert _disjoint(boxes), (name, which, [t.get_text() for t in ax.get_xticklabels()])
        box = ax.get_window_extent(renderer)
        assert box.width * box.height >= 0.5 * share, (name, box.width * box.height / share)
        cells = _cells(ax)
        if cells.colorbar is not None:
            labels.append(_colorbar_label(cells.colorbar))
    assert len(_label_boxes(maps[0], "y", renderer)) >= 2
    assert len(_label_boxes(maps[-1], "x", renderer)) >= 2
    assert labels == expected_labels, name


def test_the_notebooks_figures_are_legible_and_fill_the_figure(stores):
    for name, (axes, expected) in _figures(stores).items():
        check_figure(axes, expected, name)
        plt.close(np.atleast_1d(axes)[0].figure)
    # the labels are the fields' own attrs, as stored
    ds = zagg.open_hive(stores["quickstart"])
    assert ds["h_tdigest"].attrs["long_name"] == "photon height"
    assert ds["h_tdigest"].attrs["units"] == "m"
    assert ds["count"].attrs == {"long_name": "number of points", "units": "1"}


SHAPES = {  # points filling regions of every shape and size
    "tall": (-100.5, -78.0, -99.5, -72.0),
    "wide": (-120.0, -75.6, -80.0, -75.0),
    "tiny": (-100.004, -75.502, -99.996, -75.498),
    "equatorial": (10.0, -2.0, 30.0, 2.0),
    "polar": (-180.0, -89.0, 180.0, -80.0),
    "hemisphere": (-170.0, -60.0, 170.0, 60.0),
}


def _filled(region, seed: int = 0, n: int = 30_000) -> xr.Dataset:
    """``n`` points uniform over ``region`` (uniform on the sphere) with a smooth height
    field plus noise, and the config that grids them at an order of ~300 cells across."""
    rng = np.random.default_rng(seed)
    lon0, lat0, lon1, lat1 = region
    z = rng.uniform(np.sin(np.radians(lat0)), np.sin(np.radians(lat1)), n)
    lat = np.degrees(np.arcsin(z))
    lon = rng.uniform(lon0, lon1, n)
    u, v = (lon - lon0) / (lon1 - lon0), (lat - lat0) / (lat1 - lat0)
    h = 1000 + 400 * u - 250 * v**2 + 30 * np.sin(6 * u) + rng.normal(0, 5, n)
    ds = xr.Dataset({"lat": ("obs", lat), "lon": ("obs", lon), "h": ("obs", h)})
    side = np.radians(max((lon1 - lon0) * np.cos(np.radians((lat0 + lat1) / 2)), lat1 - lat0))
    order = int(np.clip(np.round(np.log2(np.sqrt(np.pi / 3) * 150 / side)), 4, 18))
    parent = max(order - 6, 1)
    config = {
        "data_source": {"coordinates": {"latitude": "lat", "longitude": "lon"}, "variables": ["h"]},
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_ph_like": {"function": "tdigest", "source": "h", "attrs": {"units": "m"}},
            }
        },
        "output": {
            "dataset": {"short_name": "SHAPES", "version": "1"},
            "grid": {"parent_order": parent, "chunk_inner": parent, "child_order": order},
        },
    }
    return ds, config


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_region_of_any_shape_fills_its_figure_with_legible_ticks(shape, tmp_path):
    points, config = _filled(SHAPES[shape])
    zagg.to_hive(zagg.aggregate(points, config), tmp_path / "s")
    ds = zagg.open_hive(tmp_path / "s")
    single = zagg.plot_map(ds, "h_ph_like", q=0.1)
    check_figure(single, ["h, 10th percentile (m)"])
    polar = shape not in ("equatorial", "hemisphere")  # every cell poleward of 60°S
    assert ("km from the south pole" in single.get_xlabel()) == polar
    plt.close(single.figure)
    pair = zagg.plot_map(ds, "h_ph_like", q=[0.25, 0.75], projection="lonlat")
    check_figure(pair, ["h (m)"])
    first, second = (_cells(p) for p in pair)
    assert first.norm.vmin == second.norm.vmin and first.norm.vmax == second.norm.vmax
    plt.close(pair[0].figure)
    counts = zagg.plot_map(ds, "count")
    check_figure(counts, ["number of points"])
    plt.close(counts.figure)


def test_colour_scales_follow_the_kind_of_field(stores):
    from matplotlib.colors import LogNorm

    ds = zagg.open_hive(stores["quickstart"]).load()
    count = _cells(zagg.plot_map(ds, "count", projection="lonlat"))
    assert isinstance(count.norm, LogNorm) and count.cmap.name == "magma"
    values = count.get_array()
    assert count.norm.vmin == values.min() >= 1 and count.norm.vmax == values.max()
    height = _cells(zagg.plot_map(ds, "h_mean", projection="lonlat"))
    assert height.cmap.name == "viridis" and not isinstance(height.norm, LogNorm)
    h = ds["h_mean"].values
    np.testing.assert_allclose(
        [height.norm.vmin, height.norm.vmax], np.nanpercentile(h, [1, 99]), rtol=1e-6
    )
    spread = zagg.quantile(ds, "h_tdigest", 0.9) - zagg.quantile(ds, "h_tdigest", 0.1)
    dh = spread - float(spread.median())
    ds["dh"] = dh.assign_attrs(long_name="height spread difference from its median", units="m")
    diff = zagg.plot_map(ds, "dh", projection="lonlat")
    sc = _cells(diff)
    assert sc.cmap.name == "RdBu_r" and sc.norm.vmax > 0 and sc.norm.vmin == -sc.norm.vmax
    assert _colorbar_label(sc.colorbar) == "height spread difference from its median (m)"
    with pytest.raises(ValueError, match="kind='log'"):
        zagg.plot_map(ds, "count", kind="log")
    plt.close("all")


def test_xarray_labels_zagg_fields_and_quantiles_itself(stores):
    ds = zagg.open_hive(stores["quickstart"])
    q = zagg.quantile(ds, "h_tdigest", 0.1)
    assert q.attrs == {"long_name": "photon height, 10th percentile", "units": "m"}
    assert zagg.quantile(ds, "h_tdigest", 0.5).attrs["long_name"] == "photon height, median"
    ax = ds["h_mean"].plot.hist()[2][0].axes
    assert ax.get_xlabel() == "mean photon height [m]"
    plt.figure()
    ax = q.plot.hist()[2][0].axes  # xarray wraps a long label onto two lines
    assert ax.get_xlabel().replace("\n", " ") == "photon height, 10th percentile [m]"
    plt.close("all")
