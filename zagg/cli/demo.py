"""The built-in demo: seeded ATL03 HDF5 granules over Pine Island Glacier → a hive store,
a printed summary and a PNG map of what the product holds per cell (:data:`MAPS`).

Two products: ``tdigest`` (the default: count, height statistics and a height t-digest) and
``strata`` (the shipped ``atl03_strata_granules`` config: signal and noise strata digests
and the composition word, read from the granules' whole ``signal_conf_ph`` matrix)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DEMO_SHORT_NAME = "ZAGG-DEMO"
PRODUCTS = ("tdigest", "strata")
#: what each product's map draws, one panel a field (zagg.plot_map's ``field`` and
#: keywords): photon count and median height; the median heights of the signal and noise
#: strata and the high-confidence fraction of the signal photons (a composition lane)
MAPS = {
    "tdigest": (["count", "h_tdigest"], {}),
    "strata": (["h_tdigest_signal", "h_tdigest_noise", "composition"], {"lane": "high"}),
}


BEAMS = ["gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r"]


def demo_config(granules: str) -> dict:
    """ATL03 granules → count, height statistics and a height t-digest per order-17 cell."""
    return {
        "data_source": {
            "granules": granules,
            "groups": BEAMS,
            "coordinates": {
                "latitude": "/{group}/heights/lat_ph",
                "longitude": "/{group}/heights/lon_ph",
            },
            "variables": {
                "h_ph": "/{group}/heights/h_ph",
                "land_ice_conf": {"path": "/{group}/heights/signal_conf_ph", "column": 3},
            },
            "filters": [{"variable": "land_ice_conf", "op": "ge", "value": 2}],
            "delta_time": "/{group}/heights/delta_time",
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_mean": {"function": "mean", "source": "h_ph", "attrs": {"units": "m"}},
                "h_min": {"function": "min", "source": "h_ph", "attrs": {"units": "m"}},
                "h_max": {"function": "max", "source": "h_ph", "attrs": {"units": "m"}},
                "h_tdigest": {"function": "tdigest", "source": "h_ph"},
            }
        },
        "output": {
            "dataset": {"short_name": DEMO_SHORT_NAME, "version": "1"},
            "grid": {"type": "healpix", "parent_order": 9, "chunk_inner": 13, "child_order": 17},
        },
    }


def strata_demo_config(granules: str) -> dict:
    """The shipped ``atl03_strata_granules`` config on the demo's granules and grid."""
    from zagg.config.model import load_config

    raw = load_config("atl03_strata_granules").raw
    raw["data_source"]["granules"] = granules
    raw["output"]["store"] = None
    raw["output"]["dataset"] = {"short_name": DEMO_SHORT_NAME, "version": "1"}
    raw["output"]["grid"] = {
        "type": "healpix",
        "parent_order": 9,
        "chunk_inner": 13,
        "child_order": 17,
    }
    return raw


def demo_granules(directory: Path, points: int, seed: int) -> list[Path]:
    """Seeded ATL03 granules in ``directory`` (reused when already written for this seed)."""
    from zagg.sources.write_granules import write_granules

    per = min(500_000, int(points))
    n = max(1, -(-points // per))
    marker = directory / f".zagg-demo-{seed}-{n}x{per}"
    if marker.exists():
        return sorted(directory.glob("ATL03_*.h5"))
    if directory.exists():
        shutil.rmtree(directory)
    paths = write_granules(directory, n, product="ATL03", points_per_granule=per, seed=seed)
    marker.touch()
    return paths


def _clear_previous_demo(store: Path) -> None:
    """Remove an earlier demo store at ``store``; refuse to touch anything else."""
    if not store.exists():
        return
    manifest = store / "morton_hive.json"
    try:
        short = json.loads(manifest.read_text())["dataset"]["short_name"]
    except (OSError, ValueError, KeyError, TypeError):
        short = None
    if short != DEMO_SHORT_NAME:
        raise FileExistsError(
            f"{store} exists and is not a zagg demo store; pass --store with a new path"
        )
    shutil.rmtree(store)


def demo(
    store: str = "demo-store",
    points: int = 4_000_000,
    seed: int = 0,
    workers: int | None = None,
    map_path: str | None = None,
    granules: str | None = None,
    product: str = "tdigest",
) -> dict:
    """Write seeded ATL03 granules (once), aggregate them into ``store`` as ``product``
    (one of :data:`PRODUCTS`) and draw the map.

    Returns ``{"summary": RunSummary, "map": path or None}``.
    """
    from zagg.pipeline.run import run

    if product not in PRODUCTS:
        raise ValueError(f"product must be one of {', '.join(PRODUCTS)}, got {product!r}")
    path = Path(store)
    _clear_previous_demo(path)
    gdir = Path(granules) if granules else path.with_name(path.name + "-granules")
    what = "strata product" if product == "strata" else "t-digest product"
    print(
        f"zagg demo ({what}): ATL03 granules with ~{points:,} synthetic photons over Pine "
        f"Island Glacier in {gdir}/ → {path}/ (order-17 cells, order-9 shards)"
    )
    files = demo_granules(gdir, points, seed)
    print(
        f"granules        {len(files)} HDF5 files, {sum(f.stat().st_size for f in files):,} bytes"
    )
    cfg = strata_demo_config(str(gdir)) if product == "strata" else demo_config(str(gdir))
    summary = run(cfg, store=str(path), workers=workers)
    print("\n".join(summary.lines()))
    png = Path(map_path) if map_path else path.with_name(path.name + ".png")
    made = plot_map(str(path), str(png), product=product)
    if made:
        print(f"map             {png}")
    if product == "tdigest":
        print(
            "also            python -m zagg demo --product strata  (signal/noise strata and "
            "the composition word, from the granules' signal_conf_ph)"
        )
    return {"summary": summary, "map": str(png) if made else None}


def plot_map(store: str, png: str, product: str = "tdigest") -> list[str] | None:
    """The map of a demo store of ``product`` (:data:`MAPS`, drawn by :func:`zagg.plot_map`)
    per occupied cell; returns its panels' titles (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("map             skipped (install matplotlib for the PNG map)")
        return None
    from zagg.read import open_hive
    from zagg.read.plot import plot_map as draw

    ds = open_hive(store)
    fields, options = MAPS[product]
    axes = draw(ds, fields, projection="lonlat", **options)
    fig = axes[0].figure
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return [a.get_title("left") or a.get_title() for a in axes]
