"""The built-in demo: synthetic ATL03-like photons over Pine Island Glacier → a hive store,
a printed summary and a PNG map of photon count and median height per cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DEMO_SHORT_NAME = "ZAGG-DEMO"


def demo_config(points: int, seed: int) -> dict:
    return {
        "data_source": {
            "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
            "variables": ["h_ph", "signal_conf_ph", "delta_time"],
            "time": "delta_time",
            "synthetic": {"points": int(points), "seed": int(seed)},
            "filters": [{"variable": "signal_conf_ph", "column": 3, "op": "ge", "value": 2}],
        },
        "aggregation": {"variables": {
            "count": {"function": "count"},
            "h_mean": {"function": "mean", "source": "h_ph", "attrs": {"units": "m"}},
            "h_min": {"function": "min", "source": "h_ph", "attrs": {"units": "m"}},
            "h_max": {"function": "max", "source": "h_ph", "attrs": {"units": "m"}},
            "h_tdigest": {"function": "tdigest", "source": "h_ph"},
        }},
        "output": {
            "dataset": {"short_name": DEMO_SHORT_NAME, "version": "1"},
            "grid": {"type": "healpix", "parent_order": 9, "chunk_inner": 13,
                     "child_order": 17},
        },
    }


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
        raise FileExistsError(f"{store} exists and is not a zagg demo store; pass --store with "
                              "a new path")
    shutil.rmtree(store)


def demo(store: str = "demo-store", points: int = 4_000_000, seed: int = 0,
         workers: int | None = None, map_path: str | None = None) -> dict:
    """Run the demo and return ``{"summary": RunSummary, "map": path or None}``."""
    from .run import run

    path = Path(store)
    _clear_previous_demo(path)
    print(f"zagg demo: {points:,} synthetic ATL03-like photons over Pine Island Glacier "
          f"→ {path}/ (order-17 cells, order-9 shards)")
    summary = run(demo_config(points, seed), store=str(path), workers=workers)
    print("\n".join(summary.lines()))
    png = Path(map_path) if map_path else path.with_name(path.name + ".png")
    made = plot_map(str(path), str(png))
    if made:
        print(f"map             {png}")
    return {"summary": summary, "map": str(png) if made else None}


def plot_map(store: str, png: str) -> bool:
    """Scatter map of count and median height per occupied cell; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("map             skipped (install matplotlib for the PNG map)")
        return False
    import mortie
    import numpy as np

    from .read import open_hive, quantile

    ds = open_hive(store)
    count = ds["count"].values
    occupied = count > 0
    words = ds["morton"].values[occupied]
    lat, lon = mortie.mort2geo(words)
    lon = np.where(lon > 180, lon - 360, lon)
    median = quantile(ds.isel(cells=np.flatnonzero(occupied)), "h_tdigest", 0.5).values
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    for ax, values, title, cmap in (
        (axes[0], count[occupied], "photons per cell", "viridis"),
        (axes[1], median, "median height (m)", "terrain"),
    ):
        sc = ax.scatter(lon, lat, c=values, s=1.5, cmap=cmap, linewidths=0)
        ax.set_title(title)
        ax.set_xlabel("longitude")
        ax.set_ylabel("latitude")
        fig.colorbar(sc, ax=ax)
    fig.suptitle(f"zagg demo store {store}: {int(occupied.sum()):,} cells with data")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True
