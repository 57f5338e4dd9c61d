"""Shared test services: a real S3 server (moto's server mode) on 127.0.0.1."""

import socket
import subprocess
import sys
import time

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serving(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def moto_s3():
    """``(storage_options, s3fs filesystem)`` of a local S3 server, for the whole session.

    The server runs in a process of its own, as a real object store does: a server thread
    inside the test process could stop on h5py's lock while a test thread holds it waiting
    for the server's answer. Tests create their own buckets; credentials are dummies the
    server accepts.
    """
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    for _ in range(3):  # another process may take the free port before the server does
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while server.poll() is None and not _serving(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        if server.poll() is None and _serving(port):
            break
        server.kill()
        server.wait()
    else:
        pytest.fail("the local S3 server (python -m moto.server) did not start")
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": "AKIDLOCALTEST",
        "secret": "local-secret-value-123",
    }
    try:
        yield options, s3fs.S3FileSystem(**options)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
