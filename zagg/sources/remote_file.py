"""S3 objects as read-only file objects for h5py, fetched on the thread that reads them.

h5py holds its global lock while HDF5 calls back into a Python file object. s3fs serves
reads on its own event-loop thread; if the cyclic garbage collector runs there and frees an
h5py object, that thread waits for h5py's lock while the reading thread waits for it: the
process hangs (h5py documents this for any file object served by another thread). Here each
reading thread keeps an event loop of its own, run only inside its reads, so every request,
and any collection it triggers, happens on the thread that already holds the lock (which is
re-entrant). Each thread keeps its loop and S3 clients for the files it reads next, as
s3fs keeps its instances, and closes them when the thread or the process ends. Blocks are
cached with fsspec's ``BlockCache``.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import weakref
from collections.abc import Mapping

#: blocks of ``block_size`` bytes an open file keeps
CACHED_BLOCKS = 32

_threads = threading.local()


def open_s3(url: str, storage_options: Mapping | None, block_size: int):
    """A read-only file object of an ``s3://`` object for h5py: requests run on the
    calling thread. From a thread already running an event loop (a notebook's main thread
    under a synchronous dask scheduler) it is s3fs's own file object, served by s3fs's
    thread."""
    options = dict(storage_options or {})
    if _loop_running():
        import fsspec

        fs = fsspec.filesystem("s3", **options)
        return fs.open(url, "rb", block_size=block_size, cache_type="blockcache")
    clients = getattr(_threads, "clients", None)
    if clients is None:
        clients = _threads.clients = ThreadClients()
    return CallerThreadS3File(url, clients.loop, clients.filesystem(options), block_size)


class ThreadClients:
    """One thread's event loop and its asynchronous s3fs filesystems by storage options;
    their clients are closed when this object is collected or the process exits."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.filesystems: dict[str, object] = {}
        weakref.finalize(self, _close, self.loop, self.filesystems)

    def filesystem(self, options: dict):
        import s3fs

        key = json.dumps(options, sort_keys=True, default=repr)
        if key not in self.filesystems:
            self.filesystems[key] = s3fs.S3FileSystem(
                asynchronous=True, loop=self.loop, skip_instance_cache=True, **options
            )
        return self.filesystems[key]


def _close(loop, filesystems: dict) -> None:
    for fs in filesystems.values():
        client = getattr(fs, "_s3", None)
        if client is not None:
            try:
                loop.run_until_complete(client.close())
            except Exception:  # closing on the way out: nothing left to tell
                pass
    loop.close()


class CallerThreadS3File(io.RawIOBase):
    """A read-only, seekable S3 object read through ``fs`` (an asynchronous s3fs
    filesystem bound to ``loop``, which runs on this thread only inside each request).

    ``details`` is the object's info (size, ETag) as s3fs reports it.
    """

    def __init__(self, url: str, loop, fs, block_size: int):
        from fsspec.caching import BlockCache

        super().__init__()
        self._loop, self._fs, self._path = loop, fs, url
        self.details = self._run(fs._info(url))
        self.size = int(self.details["size"])
        self._pos = 0
        self._cache = BlockCache(int(block_size), self._fetch, self.size, CACHED_BLOCKS)

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def _fetch(self, start: int, end: int) -> bytes:
        if start >= end:
            return b""
        return self._run(self._fs._cat_file(self._path, start=start, end=end))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        pos = base + int(offset)
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._pos + len(view), self.size)
        if end <= self._pos:
            return 0
        data = self._cache._fetch(self._pos, end)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
