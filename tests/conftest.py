"""Shared test services, started once per test process (so once per pytest-xdist worker),
each in a process of its own: a real S3 server (moto's server mode) and a dask cluster of
one worker process, both on 127.0.0.1 and free ports."""

import contextlib
import os
import subprocess
import sys

import pytest

#: moto's threaded server in a process of its own (its request handling then never waits
#: for the test's own threads): it says ``host:port`` once it listens, and stops when its
#: standard input closes
S3_SERVER = """
import logging, os, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
with os.fdopen(int(sys.argv[1]), "w") as said:
    print("%s:%d" % server.get_host_and_port(), file=said)
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
    with _serving(S3_SERVER) as address:
        options = {
            "endpoint_url": f"http://{address}",
            "key": "AKIDLOCALTEST",
            "secret": "local-secret-value-123",
        }
        yield options, s3fs.S3FileSystem(**options)


#: a local cluster zagg starts with one worker process of one thread, served from a process
#: of its own (so no scheduler lives in the test's process): it says the scheduler's
#: address once the worker is up, and closes when its standard input closes
CLUSTER = """
import os, sys
from zagg.cluster.clients import cluster_for, connected
with cluster_for(None, workers=1, threads=1, processes=True) as cluster:
    with connected(cluster) as client:
        client.wait_for_workers(1, timeout=120)
    with os.fdopen(int(sys.argv[1]), "w") as said:
        print(cluster.scheduler_address, file=said)
    sys.stdin.read()
"""


@pytest.fixture(scope="session")
def worker_process():
    """The scheduler address of a local cluster of one worker process of one thread (zagg's
    deployment profile and preload), shared by the session: a run on it crosses a process
    boundary as on any real cluster, and only the first pays the worker's start."""
    with _serving(CLUSTER) as address:
        yield address


@contextlib.contextmanager
def _serving(script: str):
    """Run ``script`` in a child process; yield the line it writes to the file descriptor
    named by its first argument (its standard output, which a pipe nobody drains would
    block, goes nowhere), then close its standard input (its cue to stop) and wait for it."""
    said, say = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(say)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        pass_fds=(say,),
    )
    os.close(say)
    try:
        with os.fdopen(said) as heard:
            line = heard.readline().strip()
        assert line, f"the child process exited with {child.wait()} before it served"
        yield line
    finally:
        child.stdin.close()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
