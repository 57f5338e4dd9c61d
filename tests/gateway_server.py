"""A real dask-gateway server on 127.0.0.1 for tests and benchmarks: the repository's
``dask-gateway/dask_gateway_config.py`` (local backend, simple authenticator), started as
its own process on a free port and stopped with everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CONFIG = Path(__file__).resolve().parent.parent / "dask-gateway" / "dask_gateway_config.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_gateway(log_path: Path, timeout: float = 60.0):
    """Yield ``(url, process)`` of a running gateway; its schedulers and workers run this
    interpreter's environment (its ``dask`` command first on PATH)."""
    port = free_port()
    bindir = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        "ZAGG_GATEWAY_ADDRESS": f"127.0.0.1:{port}",
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("ZAGG_GATEWAY_PASSWORD", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [os.path.join(bindir, "dask-gateway-server"), "-f", str(CONFIG)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dask-gateway-server exited: {log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/api/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dask-gateway-server did not start: {log_path.read_text()}")
            time.sleep(0.2)
        yield url, proc
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server the way its operators do (SIGINT: it stops its clusters first)."""
    import psutil

    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        started = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _gone, alive = psutil.wait_procs(started, timeout=30)
    for p in alive:  # a process the server failed to stop
        with contextlib.suppress(psutil.Error):
            p.kill()


def listening(pid: int) -> set[tuple[str, int]]:
    """(ip, port) of every listening socket of process ``pid`` and its descendants."""
    import psutil

    found = set()
    try:
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return found
    for p in procs:
        with contextlib.suppress(psutil.Error):
            found |= {
                (c.laddr.ip, c.laddr.port)
                for c in p.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
    return found
