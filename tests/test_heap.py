"""Worker heap policy: how much freed memory a worker keeps, and that trimming obeys it."""

import ctypes.util
import os
import subprocess
import sys
import textwrap

import pytest

from zagg import heap

GIB = 2**30
MIB = 2**20


def test_keep_free_is_an_eighth_of_the_memory_limit_with_a_floor():
    assert heap.keep_free_for(None) == heap.KEEP_FREE_BYTES == GIB
    assert heap.keep_free_for(0) == GIB
    assert heap.keep_free_for(24 * GIB) == 3 * GIB
    assert heap.keep_free_for(4 * GIB) == 512 * MIB
    assert heap.keep_free_for(1 * GIB) == heap.MIN_KEEP_FREE == 256 * MIB


def test_untuned_process_never_trims():
    assert heap._tuned is False
    assert heap.trim_heap(keep=0) is False


@pytest.mark.skipif(ctypes.util.find_library("c") is None or sys.platform != "linux",
                    reason="glibc heap only")
def test_trim_gives_back_free_heap_only_above_what_is_kept():
    """In a tuned process, 400 MiB of freed heap blocks stay (and stay resident) under a
    1 GiB allowance and go back to the system once the allowance is smaller; after that
    only what is touched again and freed counts against the allowance."""
    code = textwrap.dedent("""
        import numpy as np, psutil
        from zagg import heap
        assert heap.tune_heap(memory_limit=8 * 2**30)
        assert heap._keep_free == 2**30
        blocks, pins = [], []  # each block from the heap, touched, and pinned in place by a
        for _ in range(400):  # small array after it, so that freeing it leaves a hole
            blocks.append(np.ones(2**20, np.uint8))
            pins.append(np.ones(4096, np.uint8))
        del blocks
        free = heap.free_heap_bytes()
        outside = heap._outside  # measured once: tuning again must not count free heap in
        assert heap.tune_heap(memory_limit=8 * 2**30) and heap._outside == outside
        rss = psutil.Process().memory_info().rss
        kept = heap.trim_heap()
        rss_kept = psutil.Process().memory_info().rss
        trimmed = heap.trim_heap(keep=64 * 2**20)
        rss_trimmed = psutil.Process().memory_info().rss
        # given-back pages still count as free to glibc, not here: only 100 MiB of them,
        # touched again and freed, are free and resident afterwards
        after_trim = heap.free_heap_bytes()
        more = [np.ones(2**20, np.uint8) for _ in range(100)]
        del more
        again = heap.free_heap_bytes()
        print(free >= 390 * 2**20, kept, rss_kept >= rss - 16 * 2**20, trimmed,
              rss - rss_trimmed >= 300 * 2**20, after_trim < 32 * 2**20,
              90 * 2**20 <= again <= 140 * 2**20, heap.trim_heap(keep=200 * 2**20),
              heap.trim_heap(keep=50 * 2**20), len(pins))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "False", "True", "True", "True", "True", "True", "False", "True",
                   "400"]


@pytest.mark.skipif(ctypes.util.find_library("c") is None or sys.platform != "linux",
                    reason="glibc heap only")
def test_tuning_gives_back_heap_freed_before():
    """Heap a process freed before it was tuned (a shared cluster's worker that ran other
    work) is given back as it is tuned, not taken for memory outside malloc: memory freed
    later, and only that, counts as free."""
    code = textwrap.dedent("""
        import numpy as np
        from zagg import heap
        assert heap._libc().mallopt(-3, 16 * 2**20)  # M_MMAP_THRESHOLD: blocks from the heap
        blocks, pins = [], []
        for _ in range(200):
            blocks.append(np.ones(2**20, np.uint8))
            pins.append(np.ones(4096, np.uint8))
        del blocks
        assert heap.tune_heap(memory_limit=8 * 2**30)
        at_tune = heap.free_heap_bytes()
        later = [np.ones(2**20, np.uint8) for _ in range(150)]
        pins.append(np.ones(4096, np.uint8))
        del later
        print(at_tune < 16 * 2**20, 130 * 2**20 <= heap.free_heap_bytes() <= 190 * 2**20,
              heap.trim_heap(keep=100 * 2**20), heap.free_heap_bytes() < 16 * 2**20)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True", "True", "True"]


@pytest.mark.skipif(ctypes.util.find_library("c") is None or sys.platform != "linux",
                    reason="glibc heap only")
@pytest.mark.parametrize("how", ["default", "own_process", "environment"])
def test_threads_of_zaggs_own_process_share_one_malloc_arena(how):
    """glibc gives each new thread an arena of its own (freed memory is then reused only
    by that arena's threads); after ``own_process`` (the CLI) or with ``MALLOC_ARENA_MAX``
    set as the process starts (zagg's worker processes) four allocating threads all use
    the main arena. glibc's ``malloc_stats`` lists the arenas on stderr."""
    code = textwrap.dedent(f"""
        import ctypes, sys, threading
        from zagg import heap
        if {how == "own_process"!r}:
            heap.own_process()
        barrier = threading.Barrier(4)
        def work():
            barrier.wait()
            blocks = [bytearray(300_000) for _ in range(10)]
            barrier.wait()
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sys.stderr.flush()
        ctypes.CDLL(None).malloc_stats()
    """)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if how == "environment":
        env["MALLOC_ARENA_MAX"] = str(heap.ARENA_MAX)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    arenas = [line for line in out.stderr.splitlines() if line.startswith("Arena ")]
    assert len(arenas) == (5 if how == "default" else 1)
