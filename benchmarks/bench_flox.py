"""Benchmark: zagg's per-chunk dense reducers beside flox's groupby-reductions.

One keyed chunk of synthetic ATL03-like photons (track-ordered, as granules are; order-19
cells in one order-9 shard's box, with NaN heights mixed in) is grouped once by cell
(:func:`zagg.kernels.segments.group_cells`, what keying hands every state). On it, per
reducer (count of finite values, sum, min, max, mean), zagg's chunk kernels
(:mod:`zagg.kernels.segments`: the ``count``, ``sum``, ``min``, ``max`` states' own calls;
a mean is its sum and count) run beside ``flox.groupby_reduce`` with engine ``numpy``,
``numba``, ``flox`` and ``numbagg`` (those installed), each given the cell index of every
point: in input order, and in cell order (the grouping's points, which zagg's kernels
address). Keying and grouping are done before any timing; each reducer's implementations
run in alternating rounds, timed by the process's CPU seconds (the machine may be
shared), and each is checked against zagg's values (count, min, max exactly; sum and mean
within float64 rounding: zagg sums in double-double, flox is given the heights as float64,
cast before timing, since it sums in the values' dtype). Last, ``numpy_groupies.aggregate``
(the kernel flox's numpy and numba engines call) on the cell indices as they are: flox's
own cost is mostly factorizing the codes and reindexing to the expected cells on every
call. Printed: each implementation's best time per reducer and its ratio to zagg's (above
1: slower than zagg).

Needs the ``bench`` extra (``pip install 'zagg[bench]'``: flox, numbagg).

    python benchmarks/bench_flox.py                    # 2e6 points, 5 rounds
    python benchmarks/bench_flox.py --points 4e6 --rounds 7
"""

from __future__ import annotations

import argparse
import time

import numpy as np

#: a box of about one order-9 shard (0.1 x 0.05 degrees) crossed by many passes
BOX = (-100.0, -75.5, -99.9, -75.45)
REDUCERS = ("count", "sum", "min", "max", "mean")
FLOX_FUNCS = {
    "count": "count",
    "sum": "nansum",
    "min": "nanmin",
    "max": "nanmax",
    "mean": "nanmean",
}


def keyed_chunk(n: int):
    """``(values, grouping, codes)`` of ``n`` synthetic photons keyed at order 19: the
    heights (float32, about 1 % NaN), the cell grouping and each point's cell index."""
    import xarray as xr

    from zagg import grid as G
    from zagg.kernels import segments
    from zagg.sources.synthetic import synthetic_photons

    passes = 40
    pts = xr.concat(
        [
            synthetic_photons(n // passes, BOX, chunk_size=n // passes, seed=7 + i).compute()
            for i in range(passes)
        ],
        dim="photon",
    )
    lat, lon = (np.asarray(pts[v].values, np.float64) for v in ("lat_ph", "lon_ph"))
    h = np.asarray(pts["h_ph"].values, np.float32).copy()
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat, lon, h = lat[ok], lon[ok], h[ok]
    h[np.random.default_rng(0).random(h.size) < 0.01] = np.nan
    words = G.cell_words(lat, lon, 19)[0]
    grouping = segments.group_cells(words, 19)
    codes = np.searchsorted(grouping.cells, words).astype(np.intp)
    return h, grouping, codes


def zagg_reducers(h, grp):
    """zagg's chunk kernels per reducer, on the grouping's addressing."""
    from zagg.kernels import segments

    x = grp.addressed(h)

    def mean():
        dd = segments.dd_sums(x, grp.starts, grp.offsets)
        n = segments.count_finite(x, grp.starts, grp.offsets)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (dd[:, 0] + dd[:, 1]) / n

    return {
        "count": lambda: segments.count_finite(x, grp.starts, grp.offsets),
        "sum": lambda: (lambda dd: dd[:, 0] + dd[:, 1])(
            segments.dd_sums(x, grp.starts, grp.offsets)
        ),
        "min": lambda: segments.extremes(x, grp.starts, grp.offsets, False),
        "max": lambda: segments.extremes(x, grp.starts, grp.offsets, True),
        "mean": mean,
    }


def flox_reducers(h, grp, codes, engine: str, grouped: bool):
    """``flox.groupby_reduce`` per reducer with ``engine``, on the points in input order
    or (``grouped``) in cell order."""
    import flox

    h = h.astype(np.float64)  # flox sums in the values' dtype: float64 to compare sums
    if grouped:
        x, by = grp.addressed(h), np.repeat(np.arange(grp.cells.size), np.diff(grp.offsets))
        if grp.order is None:  # the input is already in cell runs: its own codes
            by = codes
    else:
        x, by = h, codes
    expected = np.arange(grp.cells.size)

    def run(func):
        fill = 0 if func in ("count", "nansum") else np.nan  # a cell of NaN only: 0, as zagg
        out, _ = flox.groupby_reduce(
            x, by, func=func, expected_groups=expected, engine=engine, fill_value=fill
        )
        return out

    return {r: (lambda f=FLOX_FUNCS[r]: run(f)) for r in REDUCERS}


def groupies_reducers(h, codes):
    """``numpy_groupies.aggregate`` (the kernel under flox's numpy and numba engines) on
    the cell indices as they are: no factorizing, no reindexing."""
    import numpy_groupies as npg

    x = h.astype(np.float64)
    n = int(codes.max()) + 1 if codes.size else 0
    funcs = {"count": "nanlen", "sum": "nansum", "min": "nanmin", "max": "nanmax"}
    funcs["mean"] = "nanmean"

    kernels = {"numpy": npg.aggregate_numpy.aggregate, "numba": npg.aggregate_numba.aggregate}

    def run(func, engine):
        fill = 0 if func in ("nanlen", "nansum") else np.nan
        return kernels[engine](codes, x, func=func, size=n, fill_value=fill)

    return {
        engine: {r: (lambda f=funcs[r], e=engine: run(f, e)) for r in REDUCERS}
        for engine in ("numpy", "numba")
    }


def same(reducer: str, ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Whether flox's result equals zagg's (count, min, max exactly; sum and mean within
    float64 rounding of the plain sum)."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if reducer in ("count", "min", "max"):
        return bool(np.array_equal(ours, theirs, equal_nan=True))
    return bool(np.allclose(ours, theirs, rtol=1e-9, atol=0, equal_nan=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=2e6)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import importlib.util

    h, grp, codes = keyed_chunk(int(args.points))
    print(
        f"{h.size:,} points in {grp.cells.size:,} order-19 cells "
        f"({grp.cells.size / 4**10:.1%} of an order-9 shard's cells), "
        f"{'one run per cell' if grp.order is None else 'cells in several runs'}; "
        "CPU seconds, best of each round"
    )
    engines = ["numpy", "numba", "flox"]
    if importlib.util.find_spec("numbagg"):
        engines.append("numbagg")
    impls = {"zagg": zagg_reducers(h, grp)}
    for engine in engines:
        for grouped in (False, True):
            name = f"flox/{engine}" + (" (cell order)" if grouped else "")
            impls[name] = flox_reducers(h, grp, codes, engine, grouped)
    for engine, fns in groupies_reducers(h, codes).items():
        impls[f"numpy_groupies/{engine}"] = fns
    results = {r: {} for r in REDUCERS}
    for name, fns in impls.items():  # warm: numba compiles, flox's first calls
        for r in REDUCERS:
            try:
                results[r][name] = fns[r]()
            except Exception as exc:  # an engine without this reduction
                results[r][name] = exc
    best = {r: dict.fromkeys(impls, float("inf")) for r in REDUCERS}
    names = list(impls)
    for i in range(args.rounds):
        order = names if i % 2 == 0 else names[::-1]
        for r in REDUCERS:
            for name in order:
                if isinstance(results[r][name], Exception):
                    continue
                t0 = time.process_time()
                impls[name][r]()
                best[r][name] = min(best[r][name], time.process_time() - t0)
    print(f"{'implementation':<28}" + "".join(f"{r:>18}" for r in REDUCERS))
    for name in names:
        cells = []
        for r in REDUCERS:
            got = results[r][name]
            if isinstance(got, Exception):
                cells.append(f"{'n/a':>18}")
                continue
            ok = "" if same(r, results[r]["zagg"], got) else " DIFF"
            t = best[r][name]
            cells.append(f"{t * 1e3:8.1f} ms {t / best[r]['zagg']:5.2f}x{ok}".rjust(18))
        print(f"{name:<28}" + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
