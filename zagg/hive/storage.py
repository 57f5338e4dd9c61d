"""A hive store root: key-level I/O on a local directory or any fsspec URL (``s3://`` …).

Everything the format layer reads or writes goes through :class:`StoreRoot`: small JSON
and sidecar objects by key, delimiter listings for the discovery walk, prefix deletes for
the leaf retry discipline, and zarr stores rooted at a leaf prefix. Keys are always
``/``-separated and relative to the root. The object is cheap to pickle (URL + options),
so a dask task can receive one and open its own filesystem handle.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import fcntl
import functools
import json
import os
import posixpath
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import fsspec
import zarr.storage
from zarr.abc.store import Store

from zagg.errors import ZaggError
from zagg.hive.parts import Parts, object_bytes, object_size

#: lost races a shared object's update retries before giving up (each re-reads and merges)
UPDATE_ATTEMPTS = 64


class StoreIOError(ZaggError, OSError):
    """A store's disk or object store failed under a read or write: the disk is full, or
    the object store cannot be reached or keeps failing. Names the object and the fix; a
    run stopped by it leaves only whole leaves (see :func:`io_fault`)."""


#: what a run stopped by a store fault leaves, and how to finish it
RERUN = (
    "then run the same command again: the store keeps the leaves already stamped, readers "
    "skip any leaf left without its stamp, and the re-run writes the rest"
)


def io_fault(root: StoreRoot, what, exc: BaseException) -> StoreIOError | None:
    """The :class:`StoreIOError` of ``exc``, raised by I/O on ``what`` (a key, or a dict
    of keys) under ``root``: a full disk, or an object store that cannot be reached or
    failed. None for anything else (a missing object, a refused permission and bugs keep
    their own exceptions)."""
    if isinstance(what, str):
        where = root.url_of(what)
    else:
        keys = sorted(what)
        where = f"{root.url_of(keys[0])} (and {len(keys) - 1} more)" if keys else root.url
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreIOError(
            f"cannot write {where}: the disk is full ({exc.strerror}); free space on it or "
            f"give the store another location, {RERUN}"
        )
    if root.is_local:
        return None
    names = {c.__name__ for c in type(exc).__mro__}
    connection = bool(
        names & {"ConnectionError", "HTTPClientError", "ClientConnectionError", "TimeoutError"}
    )
    passed = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError)
    if connection or (isinstance(exc, OSError) and not isinstance(exc, passed)):
        what_went = (
            "cannot reach the object store for" if connection else "the object store failed on"
        )
        return StoreIOError(
            f"{what_went} {where} ({type(exc).__name__}: {exc}); check the endpoint "
            f"(storage_options' endpoint_url), the network and the service's status, {RERUN}"
        )
    return None


def _faults(method):
    """Raise a store fault of ``method`` (its first argument the key) as :func:`io_fault`
    says."""

    @functools.wraps(method)
    def guarded(self, what="", *args, **kwargs):
        try:
            return method(self, what, *args, **kwargs)
        except ZaggError:
            raise
        except Exception as exc:
            fault = io_fault(self, what, exc)
            if fault is None:
                raise
            raise fault from exc

    return guarded


class StoreRoot:
    """One store root: a local path or an fsspec URL plus its ``storage_options``."""

    def __init__(self, url: str | StoreRoot, storage_options: dict[str, Any] | None = None):
        if isinstance(url, StoreRoot):
            storage_options = url.storage_options if storage_options is None else storage_options
            url = url.url
        if isinstance(url, os.PathLike):
            url = os.fspath(url)
        if not isinstance(url, str) or not url:
            raise ValueError(f"a store root must be a non-empty path or URL, got {url!r}")
        self.url = url.rstrip("/") or url
        self.storage_options = dict(storage_options or {})
        self._fs = None
        self._path = None
        self._dirs: set[str] = set()  # local directories known to exist
        self._dirs_lock = threading.Lock()  # leaf writes of one run share this root

    # -- identity -----------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"StoreRoot({self.url!r})"

    def __getstate__(self) -> dict:
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], state["storage_options"])

    @property
    def is_local(self) -> bool:
        return "://" not in self.url or self.url.startswith("file://")

    def _resolve(self) -> None:
        if self._fs is None:
            self._fs, self._path = fsspec.core.url_to_fs(self.url, **self.storage_options)

    @property
    def fs(self):
        """The fsspec filesystem (created on first use, so the object pickles cheaply)."""
        self._resolve()
        return self._fs

    @property
    def path(self) -> str:
        """The root's path inside :attr:`fs`."""
        self._resolve()
        return self._path

    def _full(self, key: str) -> str:
        key = _clean_key(key)
        return f"{self.path}/{key}" if key else self.path

    def url_of(self, key: str) -> str:
        """The URL of ``key`` under this root (what zarr or another reader would open)."""
        key = _clean_key(key)
        return f"{self.url}/{key}" if key else self.url

    # -- objects ------------------------------------------------------------------------
    @_faults
    def read_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when it does not exist. On an object store this
        is one ranged GET: s3fs's plain read asks for the size first, which takes two round
        trips for an object and two to find one missing."""
        full = self._full(key)
        try:
            if self.is_local:
                return self.fs.cat_file(full)
            try:
                return self.fs.cat_file(full, start=0)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                raise
            except OSError:  # an empty object has no byte range to read (HTTP 416)
                return self.fs.cat_file(full)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    @_faults
    def write_bytes(self, key: str, data) -> int:
        """Write one object (bytes-like or :class:`Parts`), creating parent directories
        locally; returns its size."""
        full = self._full(key)
        if self.is_local:
            parent = posixpath.dirname(full)
            with self._dirs_lock:
                known = parent in self._dirs
            if not known:  # one makedirs per directory, not per object
                os.makedirs(parent, exist_ok=True)
                with self._dirs_lock:
                    self._dirs.add(parent)
            tmp = _staging_name(full)
            try:
                with open(tmp, "wb") as f:
                    size = (
                        sum(f.write(p) for p in data) if isinstance(data, Parts) else f.write(data)
                    )
                os.replace(tmp, full)  # whole, like a PUT: no reader or writer sees a part
            except BaseException:
                _discard(tmp)
                raise
            return size
        self.fs.pipe_file(full, object_bytes(data))
        return object_size(data)

    @_faults
    def write_many(self, objects: dict[str, Any]) -> None:
        """Write several objects (key → bytes-like or :class:`Parts`). On an object store
        they go up as concurrent PUTs: a leaf's objects then cost about one round trip, not
        one each."""
        if self.is_local:
            for key, data in objects.items():
                self.write_bytes(key, data)
            return
        if objects:
            self.fs.pipe({self._full(k): object_bytes(v) for k, v in objects.items()})

    @_faults
    def create(self, key: str, data) -> bool:
        """Write one object only if ``key`` does not exist yet, atomically: an exclusive
        create locally, a conditional PUT (``If-None-Match: *``) on an object store. True
        when this call created it, False when it was there already."""
        full = self._full(key)
        payload = object_bytes(data)
        if self.is_local:  # written aside, then linked: the object appears whole or not
            os.makedirs(posixpath.dirname(full), exist_ok=True)
            tmp = _staging_name(full)
            try:
                with open(tmp, "wb") as f:
                    f.write(payload)
                os.link(tmp, full)
            except FileExistsError:
                return False
            finally:
                _discard(tmp)
            return True
        try:
            self.fs.pipe_file(full, payload, mode="create")
        except FileExistsError:
            return False
        except OSError as exc:  # s3fs reports a failed precondition as a plain OSError
            if "PreconditionFailed" in str(exc) or "412" in str(exc):
                return False
            raise
        return True

    # -- shared objects: compare-and-swap ----------------------------------------------
    @_faults
    def update_json(
        self,
        key: str,
        merge: Callable[[Any], Any],
        *,
        replace_unreadable: bool = False,
        attempts: int = UPDATE_ATTEMPTS,
    ) -> Any:
        """Read-merge-write one JSON object that concurrent writers share, losing no
        writer's update: ``merge(current)`` (the parsed object, None when absent) returns
        the object to leave, or None to leave the standing one as it is. Returns the object
        standing after the call.

        Locally the read, the merge and the atomic replace happen under an exclusive
        ``flock`` of a hidden lock file beside the object (the kernel releases it when its
        holder dies: no stale lock, no timeout). On an object store the write is a
        conditional PUT: ``If-Match`` the ETag that was read, or ``If-None-Match: *`` when
        there was nothing; a writer that lost the race re-reads and merges again, so
        ``merge`` must be a pure function of what it is given. An unparsable object raises
        ``ValueError`` unless ``replace_unreadable`` (then ``merge`` sees None). Gives up
        with :class:`StoreContentionError` after ``attempts`` lost races."""
        if self.is_local:
            with self._locked(key):
                current = self._parse(key, self.read_bytes(key), replace_unreadable)
                new = merge(current)
                if new is None:
                    return current
                self.write_bytes(key, dumps_json(new))
                return new
        for attempt in range(attempts):
            data, etag = self._read_tagged(key)
            current = self._parse(key, data, replace_unreadable)
            new = merge(current)
            if new is None:
                return current
            if self._put_if(key, dumps_json(new), etag):
                return new
            _pause(attempt)
        raise StoreContentionError(
            f"{self.url_of(key)} kept changing under {attempts} attempts to update it (other "
            "writers of this store); run again to finish this run's update"
        )

    @_faults
    def delete_if(self, key: str, doomed: Callable[[Any], bool]) -> bool:
        """Delete a shared JSON object only when ``doomed(current)`` holds for the object
        standing at the moment of the delete (under the lock locally, ``If-Match`` its ETag
        on an object store); whether it was deleted."""
        if self.is_local:
            with self._locked(key):
                current = self._parse(key, self.read_bytes(key), True)
                if current is None or not doomed(current):
                    return False
                self.delete(key)
                return True
        for attempt in range(UPDATE_ATTEMPTS):
            data, etag = self._read_tagged(key)
            current = self._parse(key, data, True)
            if etag is None or not doomed(current):
                return False
            bucket, path, _ = self.fs.split_path(self._full(key))
            try:
                self.fs.call_s3("delete_object", Bucket=bucket, Key=path, IfMatch=etag)
            except FileNotFoundError:
                return False
            except OSError as exc:
                if not _lost_race(exc):
                    raise
                _pause(attempt)
                continue
            self._forget(key)
            return True
        return False

    @contextlib.contextmanager
    def _locked(self, key: str):
        """An exclusive lock on ``key`` among every process of this machine (and of hosts
        sharing a file system whose locks span them): ``.{name}.lock`` beside it, held
        while the block runs. It is never deleted (a lock file unlinked under a waiter
        would let two holders in); it holds no bytes."""
        full = self._full(key)
        head, name = posixpath.split(full)
        os.makedirs(head, exist_ok=True)
        fd = os.open(posixpath.join(head, f".{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _parse(self, key: str, data: bytes | None, replace_unreadable: bool) -> Any:
        if data is None:
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if replace_unreadable:
                return None
            raise ValueError(f"{self.url_of(key)} is not valid JSON: {exc}") from exc

    def _read_tagged(self, key: str) -> tuple[bytes | None, str | None]:
        """An object store's object and its ETag from one GET; (None, None) when absent."""
        from fsspec.asyn import sync

        bucket, path, _ = self.fs.split_path(self._full(key))

        async def get():
            try:
                resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=path)
            except FileNotFoundError:
                return None, None
            try:
                return await resp["Body"].read(), resp["ETag"]
            finally:
                resp["Body"].close()

        return sync(self.fs.loop, get)

    def _put_if(self, key: str, data: bytes, etag: str | None) -> bool:
        """One conditional PUT: replace the object whose ETag is ``etag``, or create it
        when ``etag`` is None; False when another writer got there first."""
        bucket, path, _ = self.fs.split_path(self._full(key))
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            self.fs.call_s3("put_object", Bucket=bucket, Key=path, Body=data, **condition)
        except (FileExistsError, FileNotFoundError):  # created, or deleted, meanwhile
            return False
        except OSError as exc:
            if _lost_race(exc):
                return False
            if _unsupported(exc):
                raise StoreContentionError(
                    f"{self.url_of(key)}: the object store refused a conditional write "
                    "(If-Match / If-None-Match); zagg needs them to share a store's root "
                    "objects between runs: use a store that supports them (AWS S3 does)"
                ) from exc
            raise
        finally:
            self._forget(key)
        return True

    def _forget(self, key: str) -> None:
        with contextlib.suppress(Exception):  # listing caches only
            self.fs.invalidate_cache(self._full(key))

    @_faults
    def delete(self, key: str) -> None:
        """Delete one object (a no-op when absent)."""
        try:
            self.fs.rm_file(self._full(key))
        except FileNotFoundError:
            pass

    def touch(self, keys) -> tuple[int, int]:
        """Give each existing object a fresh modification time, its bytes unchanged: a
        local ``os.utime``, an object store's server-side self-copy that replaces its
        metadata. Best effort: returns (objects touched, failures); absent keys count
        as neither."""
        touched = failed = 0
        for key in keys:
            full = self._full(key)
            try:
                if self.is_local:
                    os.utime(full)
                else:
                    self._copy_onto_itself(full)
                touched += 1
            except FileNotFoundError:
                continue
            except Exception:  # never fails the run: the objects keep their old times
                failed += 1
        return touched, failed

    def _copy_onto_itself(self, full: str) -> None:
        bucket, key, _ = self.fs.split_path(full)
        self.fs.call_s3(
            "copy_object",
            Bucket=bucket,
            Key=key,
            CopySource={"Bucket": bucket, "Key": key},
            MetadataDirective="REPLACE",
        )

    @_faults
    def list_keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (recursively), relative to the root, sorted."""
        full = self._full(prefix)
        if self.is_local:  # a plain directory walk: no listing cache to bypass
            base = self.path.rstrip("/") + "/"
            if os.path.isfile(full):
                return [full[len(base) :]]
            return sorted(
                os.path.join(d, f)[len(base) :] for d, _, files in os.walk(full) for f in files
            )
        try:
            self.fs.invalidate_cache(full)
        except Exception:
            pass
        try:
            found = self.fs.find(full)
        except FileNotFoundError:
            return []
        base = self.path.rstrip("/") + "/"
        return sorted(f[len(base) :] if f.startswith(base) else f for f in found)

    def read_json(self, key: str) -> Any | None:
        """Parse one JSON object; ``None`` when absent, ``ValueError`` when unparsable."""
        data = self.read_bytes(key)
        if data is None:
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.url_of(key)} is not valid JSON: {exc}") from exc

    def write_json(self, key: str, payload: Any) -> int:
        return self.write_bytes(key, dumps_json(payload))

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._full(key)))

    @_faults
    def list_dir(self, prefix: str = "") -> tuple[list[str], list[str]]:
        """One delimiter listing: (child directory names, child object names), sorted."""
        full = self._full(prefix)
        try:
            self.fs.invalidate_cache(full)
        except Exception:  # cache invalidation is best-effort
            pass
        try:
            entries = self.fs.ls(full, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        dirs, files = [], []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if entry["name"].rstrip("/") == full.rstrip("/"):
                continue
            (dirs if entry.get("type") == "directory" else files).append(name)
        return sorted(dirs), sorted(files)

    @_faults
    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` (a no-op when nothing is there)."""
        if not _clean_key(prefix):
            raise ValueError("refusing to delete the whole store root")
        full = self._full(prefix)
        with self._dirs_lock:
            self._dirs = {d for d in self._dirs if d != full and not d.startswith(full + "/")}
        try:
            self.fs.rm(full, recursive=True)
        except FileNotFoundError:
            pass
        try:
            self.fs.invalidate_cache(full)
        except Exception:
            pass

    # -- zarr ---------------------------------------------------------------------------
    def zarr_store(self, prefix: str, *, read_only: bool = False) -> Store:
        """A zarr v3 store rooted at ``prefix`` (LocalStore locally, FsspecStore otherwise)."""
        if self.is_local:
            full = self._full(prefix)
            if read_only:
                return zarr.storage.LocalStore(full, read_only=True)
            return zarr.storage.LocalStore(full)
        return zarr.storage.FsspecStore.from_url(
            self.url_of(prefix), storage_options=self.storage_options or None, read_only=read_only
        )


class StoreRootError(ZaggError, ValueError):
    """A store location that cannot take a hive store: a file, a directory that cannot be
    written, or one that already holds something other than a hive store."""


class StoreContentionError(ZaggError, RuntimeError):
    """A shared store-root object that other writers kept changing under every attempt to
    update it, or an object store without the conditional writes that sharing needs."""


def _pause(attempt: int) -> None:
    """A short random wait after a lost race, growing with the attempts: it only spreads
    the writers out (correctness rests on the conditional write, not on this)."""
    time.sleep(random.uniform(0, min(0.5, 0.01 * 2 ** min(attempt, 6))))


def _error_code(exc: BaseException) -> tuple[str, int]:
    cause = exc.__cause__
    response = getattr(cause, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    return code, status


def _lost_race(exc: BaseException) -> bool:
    """Whether a failed conditional request means another writer changed the object: S3's
    412 Precondition Failed, or its 409 when two conditional writes overlap."""
    code, status = _error_code(exc)
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
        return True
    return "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc)


def _unsupported(exc: BaseException) -> bool:
    code, status = _error_code(exc)
    return code == "NotImplemented" or status == 501


def check_store_root(root: StoreRoot, manifest_key: str) -> bool:
    """Refuse, before any work, a root that a run could not write or would mix into: a
    local path that is a file or not writable, or a non-empty location without a manifest
    (another dataset, or a hive store whose manifest was removed). Hidden entries (names
    starting with '.') are ignored. Returns whether the root holds a manifest: when it
    does not, it holds nothing else either."""
    if root.is_local:
        path = root.path
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreRootError(
                f"store {root.url!r} is a file, not a directory; give a new or "
                "empty directory, or an existing hive store"
            )
        probe = path
        while not os.path.exists(probe):
            probe = os.path.dirname(probe) or "."
        if not os.access(probe, os.W_OK | os.X_OK):
            raise StoreRootError(
                f"cannot write the store {root.url!r}: {probe!r} is not "
                "writable; check its permissions or choose another location"
            )
    dirs, files = root.list_dir("")
    if manifest_key in files:
        return True
    others = [n for n in dirs + files if not n.startswith(".")]
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise StoreRootError(
            f"store {root.url!r} is not empty ({shown}) but holds no "
            f"{manifest_key}: it is not a hive store (or its manifest was "
            "removed); give a new or empty location"
        )
    return False


def as_root(root: str | StoreRoot, storage_options: dict[str, Any] | None = None) -> StoreRoot:
    """Accept a path/URL or an existing :class:`StoreRoot`."""
    if isinstance(root, StoreRoot) and storage_options is None:
        return root
    return StoreRoot(root, storage_options)


def dumps_json(payload: Any) -> bytes:
    """The one JSON serialization used for every object we write (indented, UTF-8)."""
    return (json.dumps(payload, indent=2, allow_nan=False) + "\n").encode("utf-8")


def _clean_key(key: str) -> str:
    key = key.strip("/")
    if any(part in ("", ".", "..") for part in key.split("/")) and key:
        raise ValueError(f"{key!r} is not a clean store key (empty, '.' or '..' component)")
    return key


def _staging_name(full: str) -> str:
    """A private name beside ``full`` for writing it aside (hidden, unique per write)."""
    head, name = posixpath.split(full)
    return posixpath.join(head, f".{name}.{uuid.uuid4().hex[:12]}.part")


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_background_pool = None
_background_lock = threading.Lock()


def background() -> concurrent.futures.ThreadPoolExecutor:
    """Threads for an object store's requests a task need not wait for at once (clearing
    a previous attempt while the new one encodes): their round trips pass meanwhile."""
    global _background_pool
    with _background_lock:
        if _background_pool is None:
            _background_pool = concurrent.futures.ThreadPoolExecutor(
                4, thread_name_prefix="zagg-store-background"
            )
        return _background_pool
