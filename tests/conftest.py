"""Shared test services, started once per test process (so once per pytest-xdist worker):
a real S3 server (moto's server mode) and a dask cluster of one worker process, both on
127.0.0.1 and free ports."""

import subprocess
import sys

import pytest

#: moto's threaded server in a process of its own (its request handling then never waits
#: for the test's own threads): it prints ``host:port`` once it listens and stops when its
#: standard input closes
S3_SERVER = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture(scope="session")
def moto_s3():
    """``(storage_options, s3fs filesystem)`` of a local S3 server, for the whole session.

    Tests create their own buckets; credentials are dummies the server accepts.
    """
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    server = subprocess.Popen(
        [sys.executable, "-c", S3_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        address = server.stdout.readline().strip()
        assert address, "the S3 server did not start"
        options = {
            "endpoint_url": f"http://{address}",
            "key": "AKIDLOCALTEST",
            "secret": "local-secret-value-123",
        }
        yield options, s3fs.S3FileSystem(**options)
    finally:
        server.stdin.close()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def worker_process():
    """The scheduler address of a local cluster zagg starts with one worker process of one
    thread (its deployment profile, its preload), shared by the session: a run on it crosses
    a process boundary as on any real cluster, and only the first pays the worker's start."""
    from zagg.cluster.clients import cluster_for

    with cluster_for(None, workers=1, threads=1, processes=True) as cluster:
        yield cluster.scheduler_address
