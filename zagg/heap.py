"""Heap behaviour of worker processes: reuse freed buffers, give back what a task left.

Each chunk and leaf allocates tens of MB of numpy arrays, and on fresh pages every first
touch costs a page fault. distributed's default (``MALLOC_TRIM_THRESHOLD_=65536``, set
before a worker starts) pins glibc's mmap threshold at 128 KiB, so every such array is
mapped and unmapped again — whole tasks ran 2-3 times slower here. :func:`tune_heap`
raises both thresholds so buffers are reused from the heap; :func:`trim_heap`, called when
a task that leaves long-lived results behind finishes, returns the free pages scattered
between those results: after an input chunk's reduction only once more than an eighth of
the worker's memory limit lies free (holding partials never pins more of the tasks'
temporaries than that, and below it the next chunks reuse the free pages instead of
faulting them in again), after a big merge always (the reduction is over by then).
Faults are dear on a VM that hands freed memory back to its host (1–2 ms per MiB on the
machine these benchmarks ran on: trimming after every chunk made warm 10^8-point runs
12-20 % slower there). Both are no-ops without glibc.

zagg's own processes (the CLI's, and the worker processes of a cluster zagg starts) also
keep every thread's allocations in one malloc arena (:func:`share_one_arena`). glibc's
default gives each thread an arena of its own (up to eight per core), and memory freed in
one arena is reused only by the threads of that arena: the task threads, mortie's pool and
zarr's I/O threads each grew their own. A first run of 10^8 points touched 1.8–1.9 GiB of
new memory with them, 1.3 GiB in one arena.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

MMAP_THRESHOLD = 16 * 2**20  # allocations below this come from the (reusable) heap
TRIM_THRESHOLD = 64 * 2**20  # free heap top kept before giving memory back
ARENA_MAX = 1  # malloc arenas in zagg's own processes (MALLOC_ARENA_MAX for new ones)
# a task trims after itself only when its result is at least this big: trimming after small
# tasks gives back little and makes the next tasks fault their pages in again
TRIM_AFTER_BYTES = 32 * 2**20
# free heap memory a worker keeps for its next tasks: an eighth of its memory limit, at
# least MIN_KEEP_FREE (a chunk of 10^6 points needs ≈ 100 MB per thread); KEEP_FREE_BYTES
# where the limit is unknown
MIN_KEEP_FREE = 256 * 2**20
KEEP_FREE_BYTES = 1 * 2**30


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


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
    try:
        libc.mallinfo2.restype = _Mallinfo2  # glibc >= 2.33
    except AttributeError:
        libc.mallinfo2 = None
    return libc


_tuned = False  # set in processes whose heap tune_heap configured (cluster workers)
_owned = False  # set by own_process: this process is zagg's (the CLI), its heap too
_keep_free = KEEP_FREE_BYTES  # free bytes trim_heap leaves alone in this process
_outside = None  # resident bytes outside malloc's blocks when tune_heap ran (None: unknown)


def _resident_bytes() -> int | None:
    """This process's resident set size (Linux), None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _malloc_state() -> tuple[int, int] | None:
    """(free bytes, bytes handed out) of every arena and mmapped block (``mallinfo2``)."""
    libc = _libc()
    if libc is None or libc.mallinfo2 is None:
        return None
    info = libc.mallinfo2()
    return int(info.fordblks), int(info.uordblks) + int(info.hblkhd)


def free_heap_bytes() -> int | None:
    """Free heap bytes still resident, None where unknown. glibc's own count of free bytes
    includes pages already given back, so where the resident size is known it is capped by
    the resident memory that neither malloc's blocks in use nor the process's other memory
    (as measured when :func:`tune_heap` ran) account for. ``mallinfo2`` walks the free
    lists: 0.3–0.5 ms in a worker after dense 10^7 runs, ≈ 12 ms on a heap cut into
    100,000 free fragments."""
    state = _malloc_state()
    if state is None:
        return None
    free, used = state
    rss = _resident_bytes()
    if rss is None or _outside is None:
        return free
    return max(0, min(free, rss - _outside - used))


def keep_free_for(memory_limit) -> int:
    """The free heap bytes a worker with ``memory_limit`` bytes (None or 0: no limit)
    keeps for reuse: an eighth of the limit, at least :data:`MIN_KEEP_FREE`."""
    if not memory_limit:
        return KEEP_FREE_BYTES
    return max(MIN_KEEP_FREE, int(memory_limit) // 8)


def tune_heap(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD,
              memory_limit=None) -> bool:
    """Set glibc's mmap and trim thresholds in this process and how much free heap
    :func:`trim_heap` keeps (see :func:`keep_free_for`); False where there is no glibc."""
    global _tuned, _keep_free, _outside
    _keep_free = keep_free_for(memory_limit)
    libc = _libc()
    if libc is None:
        return False
    if _outside is None:  # once: a worker's plugins are set up again by every new client
        # after giving back what is free, so that a worker that ran other work before
        # (a shared dask-gateway cluster's) does not count its free heap as outside
        libc.malloc_trim(0)
        state, rss = _malloc_state(), _resident_bytes()
        _outside = None if state is None or rss is None else max(0, rss - state[1])
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    _tuned = bool(libc.mallopt(m_mmap_threshold, int(mmap_threshold))) and bool(
        libc.mallopt(m_trim_threshold, int(trim_threshold)))
    return _tuned


def share_one_arena(arena_max: int = ARENA_MAX) -> bool:
    """Let threads that first allocate from now on share the arenas that exist, ``arena_max``
    at most (glibc ``M_ARENA_MAX``); False where there is no glibc. Call it while the process
    has one thread: threads keep the arena they were given. A process started with
    ``MALLOC_ARENA_MAX`` set needs no call."""
    libc = _libc()
    m_arena_max = -8  # <malloc.h>
    return libc is not None and bool(libc.mallopt(m_arena_max, int(arena_max)))


def own_process() -> None:
    """Declare this process zagg's own (``python -m zagg``), while it has one thread: a
    cluster worker running inside it tunes the heap as a worker process does, and all its
    threads share one malloc arena (:func:`share_one_arena`). A notebook's or a script's
    process is never tuned: its heap is not zagg's."""
    global _owned
    _owned = True
    share_one_arena()


def process_is_owned() -> bool:
    """Whether :func:`own_process` declared this process zagg's."""
    return _owned


def trim_heap(keep: int | None = None) -> bool:
    """Return every free heap page to the system (glibc ``malloc_trim(0)``) when more than
    ``keep`` bytes (default: what :func:`tune_heap` set) lie free and resident (see
    :func:`free_heap_bytes`), or always where that is unknown — in processes tuned by
    :func:`tune_heap` only; elsewhere glibc's own policy is left alone. True when it
    trimmed."""
    if not _tuned:
        return False
    keep = _keep_free if keep is None else keep
    free = free_heap_bytes()
    if free is not None and free <= keep:
        return False
    _libc().malloc_trim(0)
    return True
