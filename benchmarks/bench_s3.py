"""Benchmark: how many round trips to an object store each leaf write waits for.

A leaf's tasks compute for tens of milliseconds; on S3 every request they wait for adds a
round trip (10-50 ms within a region), and a worker's threads are its cores, so that wait
is throughput lost. This script serves a local S3 (moto, in a subprocess on 127.0.0.1)
that delays every request by a fixed latency, runs ``zagg.run`` on synthetic points into
it on a LocalCluster, once without delay and once with it, and prints

    round trips per leaf = extra wall time x threads / (leaves x latency)

— the requests a leaf write waits for one after another (the client's own few requests
for the manifest and root objects add a little). It also prints the requests the server
saw, by method. With ``ZAGG_S3_TRACE=FILE`` in its environment the server appends each
request (time, thread, method, path) to FILE, to see what a leaf waits for.

    python benchmarks/bench_s3.py                      # 10^6 sparse points, 30 ms latency
    python benchmarks/bench_s3.py --size 1e7 --latency 0.05
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings

from common import standard_config


def serve(latency: float) -> None:
    """Run moto's S3 on 127.0.0.1, each request delayed by ``latency`` seconds; print the
    port, then serve. ``GET /__counts`` answers the request counts by method."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    counts: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def delayed(environ, start_response):
        if environ.get("PATH_INFO") == "/__counts":
            body = json.dumps(counts).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        with lock:
            counts[environ.get("REQUEST_METHOD", "?")] += 1
            if trace:
                trace.write(
                    f"{time.time():.3f} {threading.get_ident() % 10000} "
                    f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}"
                    f"?{environ.get('QUERY_STRING', '')}\n"
                )
        time.sleep(latency)
        return app(environ, start_response)

    trace = (
        open(os.environ["ZAGG_S3_TRACE"], "a", buffering=1)
        if os.environ.get("ZAGG_S3_TRACE")
        else None
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, delayed, threaded=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


class Server:
    """A :func:`serve` subprocess with ``latency`` seconds per request."""

    def __init__(self, latency: float):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(latency)], stdout=subprocess.PIPE, text=True
        )
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"
        self.options = {
            "endpoint_url": self.url,
            "key": "bench",
            "secret": "bench-secret",
            "skip_instance_cache": True,
        }

    def counts(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/__counts") as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def one_run(latency: float, ds, client, size: int) -> list[tuple[float, object, dict]]:
    """(wall seconds, run summary, requests by method) of a run into a new store on a fresh
    server, then of the same run again into that store (which replaces every leaf)."""
    import s3fs

    from zagg.pipeline.run import run

    server = Server(latency)
    out = []
    try:
        s3fs.S3FileSystem(**server.options).mkdir("bench")
        for _ in range(2):
            before = server.counts()
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # the points travel in the graph, knowingly
                warnings.filterwarnings("ignore", "Sending large graph")
                summary = run(
                    standard_config(),
                    store=f"s3://bench/store-{size}",
                    source=ds,
                    scheduler=client,
                    progress=False,
                    storage_options=server.options,
                )
            wall = time.perf_counter() - t0
            after = server.counts()
            out.append((wall, summary, {k: after[k] - before.get(k, 0) for k in after}))
        return out
    finally:
        server.close()


def report(label: str, fast: list, slow: list, threads: int, latency: float) -> None:
    t_fast = min(r[0] for r in fast)
    t_slow, summary, counts = min(slow, key=lambda r: r[0])
    leaves = summary.shards
    trips = (t_slow - t_fast) * threads / (leaves * latency)
    total = sum(counts.values())
    print(
        f"  {label}: {leaves} leaves, {t_fast:.2f} s without latency, {t_slow:.2f} s with; "
        f"{total} requests ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}, "
        f"{total / leaves:.1f} per leaf)"
    )
    print(f"    round trips per leaf, one after another: {trips:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1e6)
    ap.add_argument("--latency", type=float, default=0.03, help="seconds per request")
    ap.add_argument(
        "--region", nargs=4, type=float, default=None, metavar=("LON0", "LAT0", "LON1", "LAT1")
    )
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return 0
    os.environ.setdefault("RAYON_NUM_THREADS", str(os.cpu_count() or 1))
    from zagg.cluster.clients import client_for
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    n = int(args.size)
    region = tuple(args.region or DEFAULT_REGION)
    ds = synthetic_photons(n, region, chunk_size=1_000_000, seed=1)[
        ["lat_ph", "lon_ph", "h_ph"]
    ].compute()
    print(
        f"zagg S3 benchmark: {n:.0e} synthetic photons over {list(region)}, local S3 "
        f"delaying each request by {args.latency * 1e3:.0f} ms"
    )
    with client_for(None) as client:
        threads = sum(client.nthreads().values())
        one_run(0.0, ds, client, n)  # the workers' one-time set-up
        fast, slow = [], []
        for _ in range(args.reps):  # interleaved, best of each
            fast.append(one_run(0.0, ds, client, n))
            slow.append(one_run(args.latency, ds, client, n))
    print(f"  {threads} threads")
    report("new store", [r[0] for r in fast], [r[0] for r in slow], threads, args.latency)
    report("existing store", [r[1] for r in fast], [r[1] for r in slow], threads, args.latency)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
