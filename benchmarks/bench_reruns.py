"""Benchmark: what a re-run costs beside the first run into a fresh store.

On one cluster, in the same process, for each source:

- granules with a catalog (``--size`` photons of ATL03-shaped granules, the t-digest
  config, a catalog of their footprints): the first run into a fresh store; the same run
  again (unchanged: every shard current before any granule is opened); a run with one more
  granule (only the shards it touches are read and written); a resume after the leaves of
  a tenth of the shards are deleted (as a killed run leaves them);
- the same granules as a directory (no catalog): an unchanged re-run reads and reduces
  every point again and writes nothing;
- the standard synthetic config (``--size`` points, the generator's photons): the first
  run and an unchanged re-run (again a full read, no write).

Each line prints the wall time, the leaves written and the ratio to the first run of its
source (target: an unchanged re-run ≤ 0.05 of the first run).

    python benchmarks/bench_reruns.py                  # 1e7 photons
    python benchmarks/bench_reruns.py --size 2e5       # smoke
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_granules import granules_for, tdigest_config  # noqa: E402
from common import standard_config  # noqa: E402

TARGET = 0.05


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def line(label: str, wall: float, summary, first: float | None) -> str:
    ratio = "" if first is None else f"  {wall / first:6.3f} of the first run"
    units = summary.units
    return (
        f"{label:<40} {wall:7.2f} s  {summary.leaves_written:5d} leaves written, "
        f"{units['current']:5d} current{ratio}"
    )


def write_catalog_of(paths, where: Path) -> str:
    import zagg
    from zagg.sources.catalog import build_catalog, write_catalog

    cfg = tdigest_config("unused")
    cfg["data_source"]["granules"] = [str(p) for p in paths]
    source = zagg.load_config(cfg).data_source.granules
    write_catalog(build_catalog(source, order=9), where)
    return str(where)


def verdict(ratio: float) -> str:
    word = "meets" if ratio <= TARGET else "misses"
    return f"{ratio:.3f} ({word} the target {TARGET:.2f})"


def granule_runs(n: int, per: int, tmp: Path, client) -> list[str]:
    from zagg import hive
    from zagg.pipeline.run import run

    paths = granules_for(n + per, per, 7, None, tmp)  # one more granule than the first runs
    first_paths, extra = paths[:-1], paths[-1]
    cat = write_catalog_of(first_paths, tmp / "cat.json")
    more = write_catalog_of(paths, tmp / "more.json")

    def go(location, store, **kw):
        cfg = tdigest_config(location)
        return run(cfg, store=str(store), scheduler=client, progress=False, **kw)

    out = [
        f"granules: {len(first_paths)} of {per:,} photons (+1 for the new-granule run), "
        f"catalog footprints at order 9"
    ]
    wall0, s0 = timed(lambda: go(cat, tmp / "cat-store"))
    out.append(line("first run (catalog)", wall0, s0, None))
    wall1, s1 = timed(lambda: go(cat, tmp / "cat-store"))
    out.append(line("unchanged re-run (catalog)", wall1, s1, wall0))
    leaves = hive.walk_leaves(str(tmp / "cat-store"))
    for leaf, _ in leaves[: max(1, len(leaves) // 10)]:
        node = (tmp / "cat-store" / leaf).parent
        shutil.rmtree(node)
    wall2, s2 = timed(lambda: go(cat, tmp / "cat-store"))
    out.append(line("resume, a tenth of leaves lost", wall2, s2, wall0))
    wall3, s3 = timed(lambda: go(more, tmp / "cat-store"))
    out.append(line(f"one new granule ({extra.name[:19]}…)", wall3, s3, wall0))
    dir_cfg = [str(p) for p in first_paths]
    wall4, s4 = timed(lambda: go(dir_cfg, tmp / "dir-store"))
    out.append(line("first run (granule list)", wall4, s4, None))
    wall5, s5 = timed(lambda: go(dir_cfg, tmp / "dir-store"))
    out.append(line("unchanged re-run (granule list)", wall5, s5, wall4))
    out.append(f"unchanged re-run ÷ first run, catalog: {verdict(wall1 / wall0)}")
    out.append(f"unchanged re-run ÷ first run, granule list: {verdict(wall5 / wall4)}")
    return out


def synthetic_runs(n: int, tmp: Path, client) -> list[str]:
    from zagg.pipeline.run import run

    cfg = standard_config(synthetic={"points": n, "seed": 0})
    store = str(tmp / "syn-store")
    wall0, s0 = timed(lambda: run(cfg, store=store, scheduler=client, progress=False))
    wall1, s1 = timed(lambda: run(cfg, store=store, scheduler=client, progress=False))
    return [
        f"synthetic: {n:,} points, the standard config",
        line("first run", wall0, s0, None),
        line("unchanged re-run", wall1, s1, wall0),
        f"unchanged re-run ÷ first run, synthetic: {verdict(wall1 / wall0)}",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=float, default=1e7, help="photons of the first runs")
    ap.add_argument("--per-granule", type=int, default=2_500_000)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)
    n, per = int(args.size), min(args.per_granule, max(int(args.size) // 4, 1000))
    from zagg.cluster.clients import cluster_for, connected
    from zagg.pipeline.run import run
    from zagg.sources.synthetic import synthetic_photons

    with (
        tempfile.TemporaryDirectory() as d,
        cluster_for(None, workers=args.workers) as cl,
        connected(cl) as client,
    ):
        tmp = Path(d)
        # warm the workers (imports, numba's cache) on a throwaway run first
        warm = standard_config()
        run(
            warm,
            store=str(tmp / "warm"),
            source=synthetic_photons(20_000, seed=1),
            scheduler=client,
            progress=False,
        )
        for text in granule_runs(n, per, tmp, client) + synthetic_runs(n, tmp, client):
            print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
