"""Fill-valued arrays whose untouched pages cost nothing.

A shard's dense field has 4^(c-p) cells and, where the data are sparse, holds mostly its
fill value: along a few ICESat-2 tracks 84-92 % of a float field's pages never receive a
value. ``np.full`` writes every one of them, and first touches of fresh pages are much of
what an aggregation waits for. :func:`filled` maps instead one shared, fill-valued memory
file copy-on-write: pages no one writes stay shared by every array of that dtype and fill
in the process, and a page is copied only when a value lands on it (what ``calloc`` does
for a fill of zero bytes). The arrays are ordinary writable numpy arrays.

Linux only (``memfd_create``); elsewhere, for arrays under :data:`MIN_BYTES`, for object
dtypes, once a quarter of the kernel's limit on a process's mappings is in use by such
arrays (so other allocations keep theirs) and whenever a mapping fails, it is ``np.full``.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
import weakref

import numpy as np

#: smaller arrays are plain ``np.full``: a mapping costs a system call and its own entry
MIN_BYTES = 1 << 20

_lock = threading.Lock()
# (dtype, the fill's bytes) → (file descriptor, size in bytes) of the current template
_templates: dict[tuple[str, bytes], tuple[int, int]] = {}
_live = 0  # mappings made here and not yet released


@functools.lru_cache(maxsize=1)
def mapping_budget() -> int:
    """How many arrays may be mapped at once: a quarter of ``vm.max_map_count``."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read()) // 4
    except (OSError, ValueError):
        return 65530 // 4  # the kernel's default limit


def _released() -> None:
    global _live
    with _lock:
        _live -= 1


def filled(n: int, dtype, fill) -> np.ndarray:
    """A writable array of ``n`` values of ``dtype``, all equal to ``fill``."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        return np.full(n, fill, dtype=dtype)
    value = np.array(fill, dtype=dtype)
    if not value.tobytes().strip(b"\0"):
        return np.zeros(n, dtype=dtype)  # calloc: the same saving, without a file
    nbytes = n * dtype.itemsize
    if nbytes < MIN_BYTES or not hasattr(os, "memfd_create"):
        return np.full(n, value, dtype=dtype)
    global _live
    try:
        with _lock:  # a template outgrown by another thread is closed under this lock
            if _live >= mapping_budget():
                return np.full(n, value, dtype=dtype)
            pages = mmap.mmap(_template(dtype, value, nbytes), nbytes, access=mmap.ACCESS_COPY)
            _live += 1
    except (OSError, ValueError):
        return np.full(n, value, dtype=dtype)
    weakref.finalize(pages, _released)  # when the last array over these pages goes
    return np.frombuffer(pages, dtype=dtype, count=n)


def _template(dtype: np.dtype, value: np.ndarray, nbytes: int) -> int:
    """The descriptor of a memory file of at least ``nbytes`` holding ``value`` repeated,
    made (or outgrown and made again, twice as big) on first need; the caller holds
    ``_lock``."""
    key = (dtype.str, value.tobytes())
    found = _templates.get(key)
    if found is not None and found[1] >= nbytes:
        return found[0]
    size = max(nbytes, 2 * found[1] if found else 0)
    size += -size % mmap.PAGESIZE
    fd = os.memfd_create(f"zagg-fill-{dtype.str}", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as pages:
            np.frombuffer(pages, dtype=dtype, count=size // dtype.itemsize)[:] = value
    except BaseException:
        os.close(fd)
        raise
    if found is not None:
        os.close(found[0])  # arrays mapped from it keep its pages alive
    _templates[key] = (fd, size)
    return fd
