"""Benchmark: two ``python -m zagg run`` processes into one store at once, many times.

Each round starts two runs of a tiny synthetic config into a fresh store at the same moment
(halves of its shards, given by ``--shards``, or both all of them), on a local disk and on a
local S3 server (moto, on 127.0.0.1), with the pyramid swept and the Icechunk companion on,
and then checks what a user relies on after both exit 0:

- the root ``coverage.moc`` lists exactly the stamped leaves, and they are both runs' shards;
- ``zagg.open_hive`` (through the root coverage) reads what a walk reads, without warning;
- every level the manifest declares opens without warning and counts every point;
- the Icechunk companion's ``main`` branch reads what the hive reads at every level;
- ``zagg verify`` finds the store intact.

It prints, per case, the rounds that held every check and the median wall time of a pair
beside a single run's (their ratio), and exits 1 when any round failed.

    python benchmarks/bench_concurrent.py                   # 20 rounds of each case
    python benchmarks/bench_concurrent.py --rounds 2 --where local
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the Icechunk check the tests use

#: the synthetic points' region (a few order-6 shards) and their number
REGION = [-102.0, 39.0, -99.0, 40.5]
POINTS, CHUNK = 2000, 250  # a pass per chunk: eight passes over the region
SHARD_ORDER, CELL_ORDER, OVERVIEW = 6, 10, 8
CASES = ("disjoint", "same")


def config(storage_options: dict | None = None) -> dict:
    """The tiny run: a count and a mean at order 10 in order-6 shards, a pyramid level
    between them, the sweep chained and the Icechunk companion on."""
    output = {
        "dataset": {"short_name": "RACE", "version": "1"},
        "grid": {"type": "healpix", "parent_order": SHARD_ORDER, "child_order": CELL_ORDER},
        "pyramid": {"overviews": OVERVIEW},
        "icechunk": True,
    }
    if storage_options:
        output["storage_options"] = dict(storage_options)
    return {
        "data_source": {
            "coordinates": {"latitude": "lat_ph", "longitude": "lon_ph"},
            "variables": ["h_ph"],
            "synthetic": {"points": POINTS, "seed": 1, "region": list(REGION), "chunk_size": CHUNK},
        },
        "aggregation": {
            "variables": {
                "count": {"function": "count"},
                "h_mean": {"function": "mean", "source": "h_ph"},
            }
        },
        "output": output,
    }


def all_shards() -> list[str]:
    """The shards the points fall in, keyed by mortie alone, in ascending word order."""
    import numpy as np

    from zagg import grid
    from zagg.sources.synthetic import synthetic_photons

    ds = synthetic_photons(POINTS, tuple(REGION), seed=1, chunk_size=CHUNK).compute()
    words = grid.keyable_words(ds["lat_ph"].values, ds["lon_ph"].values, SHARD_ORDER)
    return grid.to_decimal(np.unique(words))


def plans(case: str, shards: list[str]) -> list[list[str]]:
    """Each run's extra arguments: halves of the shards (``disjoint``) or all of them."""
    if case == "same":
        return [[], []]
    half = len(shards) // 2
    return [["--shards", ",".join(shards[:half])], ["--shards", ",".join(shards[half:])]]


def run_pair(cfg: Path, store: str, logs: Path, extras: list[list[str]]) -> list[int]:
    """The runs of a round (one per item of ``extras``, their extra arguments), started
    together; each writes to files of its own."""
    env = {**os.environ, "ICECHUNK_LOG": "error"}
    procs, files = [], []
    for i, extra in enumerate(extras):
        out, err = (
            (logs / f"{Path(store).name}-{i}.out").open("w"),
            (logs / f"{Path(store).name}-{i}.err").open("w"),
        )
        files += [out, err]
        cmd = [sys.executable, "-m", "zagg", "run", str(cfg), "--store", store]
        cmd += ["--workers", "1", "--threads", "1", "--quiet", *extra]
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=env))
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in files:
            f.close()
    for i, code in enumerate(codes):
        if code != 0:
            err = (logs / f"{Path(store).name}-{i}.err").read_text()[-4000:]
            raise AssertionError(f"run {i} into {store} exited {code}:\n{err}")
    return codes


def check_store(store: str, options: dict | None, shards: set[str]) -> None:
    """Every promise after two runs at once (see the module's docstring); raises
    AssertionError naming the first that does not hold."""
    import numpy as np

    import zagg
    from zagg import hive
    from zagg.hive.coverage import expand_ranges, read_root_coverage
    from zagg.read.inspect import EXIT_INTACT, verify_status
    from zagg.read.levels import levels

    root = hive.StoreRoot(store, options)
    stamped = {sid for rel, sid in hive.walk_leaves(root) if hive.read_stamp(root, rel)}
    assert stamped == shards, f"stamped leaves {sorted(stamped)}, the runs' {sorted(shards)}"
    envelope = read_root_coverage(root)
    listed = set(expand_ranges(envelope)) if envelope else set()
    assert listed == stamped, (
        f"root coverage lists {sorted(listed)}; the stamped leaves are {sorted(stamped)}"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an incomplete store or a missing level warns
        hive_ds = zagg.open_hive(store, options).compute()
        walked = zagg.open_hive(store, options, discover="walk").compute()
        np.testing.assert_array_equal(hive_ds["morton"].values, walked["morton"].values)
        np.testing.assert_array_equal(hive_ds["count"].values, walked["count"].values)
        total = int(hive_ds["count"].values.sum())
        manifest = hive.read_manifest(root)
        for order in sorted(levels(manifest)):
            level = zagg.open_level(store, order, options)
            got = int(np.nan_to_num(level["count"].values).sum())
            assert got == total, f"level {order} counts {got} points, the leaves {total}"
    from icechunk_checks import repo_matches_hive

    repo_matches_hive(store, options)
    report, status = verify_status(store, options)
    assert status == EXIT_INTACT, report


@contextlib.contextmanager
def local_s3():
    """storage_options of a moto S3 server on 127.0.0.1 that answers one request at a time
    (stopped on exit). moto checks ``If-Match`` / ``If-None-Match`` and then writes, with
    nothing between the two that keeps another request out; S3 makes the pair atomic. A
    threaded moto server can therefore let two conditional PUTs on one ETag both succeed,
    so the checks here use a server that serves requests one after another."""
    import logging
    import threading

    import s3fs
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        options = {
            "endpoint_url": f"http://127.0.0.1:{server.port}",
            "key": "AKIDLOCALTEST",
            "secret": "local-secret-value-123",
        }
        s3fs.S3FileSystem(**options).mkdir("concurrent")
        yield options
    finally:
        server.shutdown()
        thread.join()


def rounds(case: str, n: int, folder: Path, options: dict | None) -> dict:
    """``n`` rounds of one case; what held and how long the pairs took."""
    cfg = folder / "race.yaml"
    cfg.write_text(yaml.safe_dump(config(options)))
    shards = all_shards()
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    held, failures, seconds = 0, [], []
    for i in range(n):
        store = f"s3://concurrent/{case}-{i}" if options else str(folder / f"{case}-{i}")
        t0 = time.perf_counter()
        try:
            run_pair(cfg, store, logs, plans(case, shards))
            seconds.append(time.perf_counter() - t0)
            check_store(store, options, set(shards))
            held += 1
        except AssertionError as exc:
            failures.append(f"round {i}: {exc}")
    return {"held": held, "failures": failures, "seconds": seconds}


def single_run(folder: Path, options: dict | None) -> float:
    """One run alone into a fresh store (the pairs' yardstick)."""
    cfg = folder / "race.yaml"
    cfg.write_text(yaml.safe_dump(config(options)))
    store = "s3://concurrent/single" if options else str(folder / "single")
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    run_pair(cfg, store, logs, [[]])
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds of each case (default 20)")
    ap.add_argument("--where", default="local,s3", help="local, s3 or both (default)")
    ap.add_argument("--cases", default=",".join(CASES), help="disjoint, same or both")
    args = ap.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="zagg-concurrent-") as tmp:
        for where in args.where.split(","):
            folder = Path(tmp) / where
            folder.mkdir()
            with local_s3() if where == "s3" else contextlib.nullcontext() as options:
                alone = single_run(folder, options)
                for case in args.cases.split(","):
                    try:
                        got = rounds(case, args.rounds, folder, options)
                    except Exception:
                        traceback.print_exc()
                        failed = True
                        continue
                    pair = statistics.median(got["seconds"]) if got["seconds"] else float("nan")
                    print(
                        f"{where:5} {case:8} {got['held']}/{args.rounds} rounds held every "
                        f"check; a pair takes {pair / alone:.2f} x one run alone"
                    )
                    for line in got["failures"]:
                        print(f"  {line.splitlines()[0]}")
                    failed |= bool(got["failures"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
