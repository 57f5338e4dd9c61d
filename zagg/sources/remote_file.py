"""Remote granules (S3 objects, or archive granules read over S3 or HTTPS) as read-only
file objects for h5py, fetched on the thread that reads them.

h5py holds its global lock while HDF5 calls back into a Python file object. fsspec's
asynchronous filesystems (s3fs, HTTP) serve reads on their own event-loop thread; if the
cyclic garbage collector runs there and frees an h5py object, that thread waits for h5py's
lock while the reading thread waits for it: the process hangs (h5py documents this for any
file object served by another thread). Here each reading thread keeps an event loop of its
own, run only inside its reads, so every request, and any collection it triggers, happens
on the thread that already holds the lock (which is re-entrant). Each thread keeps its loop
and filesystems for the files it reads next, as s3fs keeps its instances, and closes them
when the thread or the process ends. Blocks are cached with fsspec's ``BlockCache``.

:func:`remote_filesystem` is the one place a synchronous filesystem for a remote granule
is made (the direct chunk reads use it): plain ``s3://`` storage options go to s3fs as
they are; an archive granule's (:mod:`zagg.sources.archive_access`) become this process's
own S3 session or HTTPS token.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import weakref
from collections.abc import Mapping

from zagg.sources.archive_access import filesystem_kwargs, is_archive, read_url

#: blocks of ``block_size`` bytes an open file keeps
CACHED_BLOCKS = 32

_threads = threading.local()


def open_s3(url: str, storage_options: Mapping | None, block_size: int):
    """A read-only file object of an ``s3://`` object for h5py: requests run on the
    calling thread. From a thread already running an event loop (a notebook's main thread
    under a synchronous dask scheduler) it is fsspec's own file object, served by fsspec's
    thread."""
    options = dict(storage_options or {})
    if _loop_running():
        fs, target = remote_filesystem(url, options)
        return fs.open(target, "rb", block_size=block_size, cache_type="blockcache")
    clients = getattr(_threads, "clients", None)
    if clients is None:
        clients = _threads.clients = ThreadClients()
    fs, target = clients.filesystem(url, options)
    return CallerThreadFile(target, clients.loop, fs, block_size)


def remote_filesystem(href: str, options: Mapping | None):
    """``(filesystem, url)`` reading the remote granule ``href`` under its storage
    ``options``, on fsspec's shared event loop."""
    import fsspec

    options = dict(options or {})
    if is_archive(options):
        protocol, kwargs = filesystem_kwargs(options, own_loop=False)
        return fsspec.filesystem(protocol, **kwargs), read_url(href, options)
    return fsspec.filesystem("s3", **options), href


class ThreadClients:
    """One thread's event loop and its asynchronous filesystems by storage options; their
    clients are closed when this object is collected or the process exits."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.filesystems: dict[str, object] = {}
        weakref.finalize(self, _close, self.loop, self.filesystems)

    def filesystem(self, href: str, options: dict):
        """``(filesystem, url)`` reading ``href`` on this thread's loop."""
        key = json.dumps(options, sort_keys=True, default=repr)
        if key not in self.filesystems:
            if is_archive(options):
                protocol, kwargs = filesystem_kwargs(options, own_loop=True)
            else:
                protocol, kwargs = "s3", options
            self.filesystems[key] = _async_filesystem(protocol, self.loop, kwargs)
        target = read_url(href, options) if is_archive(options) else href
        return self.filesystems[key], target


def _async_filesystem(protocol: str, loop, kwargs: dict):
    import fsspec

    cls = fsspec.get_filesystem_class(protocol)
    return cls(asynchronous=True, loop=loop, skip_instance_cache=True, **kwargs)


def _close(loop, filesystems: dict) -> None:
    for fs in filesystems.values():
        s3 = getattr(fs, "_s3", None)
        closing = s3.close() if s3 is not None else _http_close(fs)
        if closing is not None:
            try:
                loop.run_until_complete(closing)
            except Exception:  # closing on the way out: nothing left to tell
                pass
    loop.close()


def _http_close(fs):
    """The coroutine closing an HTTP filesystem's aiohttp session, if it opened one."""
    session = getattr(fs, "_session", None)
    return session.close() if session is not None and not session.closed else None


class CallerThreadFile(io.RawIOBase):
    """A read-only, seekable remote object read through ``fs`` (an asynchronous fsspec
    filesystem bound to ``loop``, which runs on this thread only inside each request).

    ``details`` is the object's info (size, ETag) as the filesystem reports it.
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
