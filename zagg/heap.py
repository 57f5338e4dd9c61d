"""Heap behaviour of worker processes: reuse freed buffers, give back what a task left.

Each chunk and leaf allocates tens of MB of numpy arrays, and on fresh pages every first
touch costs a page fault. distributed's default (``MALLOC_TRIM_THRESHOLD_=65536``, set
before a worker starts) pins glibc's mmap threshold at 128 KiB, so every such array is
mapped and unmapped again — whole tasks ran 2-3 times slower here. :func:`tune_heap`
raises both thresholds so buffers are reused from the heap; :func:`trim_heap`, called when
a task that leaves long-lived results behind finishes (every input chunk's reduction, big
merges), returns the free pages scattered between those results, so holding partials
never pins the task's temporaries.
Both are no-ops without glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

MMAP_THRESHOLD = 16 * 2**20  # allocations below this come from the (reusable) heap
TRIM_THRESHOLD = 64 * 2**20  # free heap top kept before giving memory back
# a task trims after itself only when its result is at least this big: trimming after small
# tasks gives back little and makes the next tasks fault their pages in again
TRIM_AFTER_BYTES = 32 * 2**20


@functools.lru_cache(maxsize=1)
def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


_tuned = False  # set in processes whose heap tune_heap configured (cluster workers)


def tune_heap(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's mmap and trim thresholds in this process; False where there is no glibc."""
    global _tuned
    libc = _libc()
    if libc is None:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    _tuned = bool(libc.mallopt(m_mmap_threshold, int(mmap_threshold))) and bool(
        libc.mallopt(m_trim_threshold, int(trim_threshold)))
    return _tuned


def trim_heap() -> None:
    """Return every free heap page to the system (glibc ``malloc_trim(0)``) — in processes
    tuned by :func:`tune_heap` only; elsewhere glibc's own policy is left alone."""
    if _tuned:
        _libc().malloc_trim(0)
