"""Shared test services: a real S3 server (moto's server mode) on 127.0.0.1."""

import logging

import pytest


@pytest.fixture(scope="session")
def moto_s3():
    """``(storage_options, s3fs filesystem)`` of a local S3 server, for the whole session.

    Tests create their own buckets; credentials are dummies the server accepts.
    """
    server_mod = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {
        "endpoint_url": f"http://{host}:{port}",
        "key": "AKIDLOCALTEST",
        "secret": "local-secret-value-123",
    }
    try:
        yield options, s3fs.S3FileSystem(**options)
    finally:
        server.stop()
