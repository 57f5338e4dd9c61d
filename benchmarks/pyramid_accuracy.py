"""The pyramid digests' budget and accuracy, order by order (printed by bench_pyramid.py).

A small store of the 19/13/9 geometry is written with ``overview_delta: 128`` and swept.
At every level (the leaf columns' 13..9 and the overviews' 12..4) each cell's folded digest
is set beside a digest built directly from the same cell's raw points at delta 128 (the
leaf law): centroids per cell (median), and the median and 99th-percentile quantile error
at q = 0.01, 0.1, 0.5, 0.9, 0.99 against the raw points' exact quantiles, relative to each
cell's value range. Targets at every order: the fold's centroids within 20 % of the
direct digest's, and its median error at most 1.2x the direct digest's.
"""

from __future__ import annotations

import numpy as np

Q = np.array([0.01, 0.1, 0.5, 0.9, 0.99])
DELTA = 128
CENTROID_TOLERANCE = 0.20
ERROR_RATIO = 1.2


def _errors(est: np.ndarray, exact: np.ndarray, spread: np.ndarray) -> np.ndarray:
    return (np.abs(est - exact) / np.where(spread > 0, spread, 1.0)[:, None]).ravel()


def accuracy(points, store: str) -> list[str]:
    """The per-order lines of one swept store of ``points`` (a computed Dataset)."""
    import zagg
    from zagg import grid as G
    from zagg.kernels import tdigest as T
    from zagg.read.levels import levels, open_level

    lat, lon, h = (np.asarray(points[v].values, np.float64) for v in ("lat_ph", "lon_ph", "h_ph"))
    ok = np.isfinite(lat) & np.isfinite(lon) & np.isfinite(h)
    words = G.cell_words(lat[ok], lon[ok], 19)[0]
    h = h[ok].astype(np.float32).astype(np.float64)
    manifest = zagg.read.leaves.manifest_of(zagg.hive.storage.as_root(store))
    lines = [
        f"pyramid digests at overview_delta {DELTA} beside direct digests at delta {DELTA} "
        "(centroids per cell: median; error: |q est - q exact| / cell range over "
        "q = 0.01, 0.1, 0.5, 0.9, 0.99)",
        "order  cells  fold k  direct k  k ratio   fold p50  direct p50  p50 ratio"
        "   fold p99  direct p99",
    ]
    for r, entry in levels(manifest).items():
        if entry["artifact"] == "source":
            continue
        ds = open_level(store, r).compute()
        cells = ds["morton"].values
        anc = G.ancestor(words, r)
        order = np.argsort(anc, kind="stable")
        a, v = anc[order], h[order]
        starts = np.searchsorted(a, cells)
        ends = np.searchsorted(a, cells, side="right")
        keep = ends - starts >= 2 * DELTA  # cells whose digests compress
        if not keep.any():
            continue
        offsets = np.concatenate([[0], np.cumsum(ends[keep] - starts[keep])])
        raw = np.concatenate([v[s:e] for s, e in zip(starts[keep], ends[keep], strict=True)])
        m, w, o = T.build(raw, offsets, DELTA)[:3]
        direct_k = np.diff(o)
        est_direct = np.empty((keep.sum(), Q.size))
        T.segment_quantiles(m, w, o, Q, est_direct)
        payloads = ds["h_tdigest"].values[keep]
        rows = [np.frombuffer(p, "<f4").reshape(-1, 2) for p in payloads]
        fold_k = np.array([len(x) for x in rows])
        fm = np.concatenate([x[:, 0] for x in rows]).astype(np.float64)
        fw = np.concatenate([x[:, 1] for x in rows]).astype(np.float64)
        fo = np.concatenate([[0], np.cumsum(fold_k)])
        est_fold = np.empty((keep.sum(), Q.size))
        T.segment_quantiles(fm, fw, fo, Q, est_fold)
        parts = np.split(raw, offsets[1:-1])
        exact = np.array([np.quantile(p, Q, method="hazen") for p in parts])
        spread = np.array([p.max() - p.min() for p in parts])
        ef, ed = _errors(est_fold, exact, spread), _errors(est_direct, exact, spread)
        k_ratio = np.median(fold_k) / np.median(direct_k)
        p50 = np.median(ef) / max(np.median(ed), 1e-12)
        met = abs(k_ratio - 1) <= CENTROID_TOLERANCE and p50 <= ERROR_RATIO
        lines.append(
            f"{r:5d} {keep.sum():6d} {np.median(fold_k):7.0f} {np.median(direct_k):9.0f}"
            f" {k_ratio:8.2f} {np.median(ef):10.5f} {np.median(ed):11.5f} {p50:10.2f}"
            f" {np.quantile(ef, 0.99):10.5f} {np.quantile(ed, 0.99):11.5f}"
            f"   {'meets' if met else 'misses'}"
        )
    return lines


def run_accuracy(n: int, region, tmp: str) -> list[str]:
    """Write and sweep a store of ``n`` synthetic photons over ``region`` at
    ``overview_delta`` 128 (in-process, no cluster), and return :func:`accuracy`'s lines."""
    import dask
    from common import standard_config

    import zagg
    from zagg.sources.synthetic import synthetic_photons

    points = synthetic_photons(n, tuple(region), chunk_size=min(n, 1 << 20), seed=1).compute()
    cfg = standard_config()
    cfg["output"]["pyramid"] = {"overview_delta": DELTA}
    store = f"{tmp}/accuracy"
    with dask.config.set(scheduler="threads"):
        zagg.to_hive(zagg.aggregate(points, zagg.load_config(cfg)), store)
        zagg.sweep(store)
    return accuracy(points, store)


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=4e5)
    ap.add_argument("--region", nargs=4, type=float, default=(-100.2, -75.6, -99.8, -75.4))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("\n".join(run_accuracy(int(args.size), args.region, tmp)))
