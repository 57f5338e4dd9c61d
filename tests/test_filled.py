"""Fill-valued arrays mapped copy-on-write (zagg.filled): values, independence, memory."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest

from zagg import filled as F
from zagg.filled import filled

linux_only = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create")


@pytest.mark.parametrize(
    "n, dtype, fill",
    [
        (1 << 20, np.float32, np.nan),
        (1 << 20, np.float64, np.nan),
        (3 << 19, np.float64, -0.0),  # not all zero bytes: mapped, sign kept
        (1 << 18, np.int64, -1),
        (1 << 20, np.uint8, 255),
        (1 << 20, np.int32, 0),
        (10, np.float32, np.nan),  # under MIN_BYTES
        (0, np.float32, np.nan),
    ],
)
def test_values_equal_np_full(n, dtype, fill):
    got = filled(n, dtype, fill)
    want = np.full(n, fill, dtype=dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == (n,)
    assert got.tobytes() == want.tobytes()
    assert got.flags.writeable


@linux_only
def test_arrays_are_independent_and_pickle():
    a = filled(1 << 20, np.float32, np.nan)
    b = filled(1 << 20, np.float32, np.nan)
    assert isinstance(a.base, memoryview)  # mapped, not np.full
    a[[0, 5, (1 << 20) - 1]] = [1.0, 2.0, 3.0]
    assert int(np.isnan(a).sum()) == (1 << 20) - 3
    assert bool(np.isnan(b).all())
    c = filled(1 << 20, np.float32, np.nan)  # made after a was written: still all fill
    assert bool(np.isnan(c).all())
    back = pickle.loads(pickle.dumps(a, protocol=5))
    assert back.tobytes() == a.tobytes() and back.flags.writeable


@linux_only
def test_template_grows_for_a_bigger_array():
    small = filled(1 << 18, np.float64, 7.5)
    big = filled(1 << 22, np.float64, 7.5)
    assert bool((small == 7.5).all()) and bool((big == 7.5).all())
    big[-1] = 0.0
    assert small[-1] == 7.5 and filled(1 << 22, np.float64, 7.5)[-1] == 7.5


def _anonymous_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@linux_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_untouched_pages_take_no_private_memory():
    n, k = 1 << 20, 32  # 32 arrays of 8 MiB: 256 MiB written by np.full
    filled(n, np.float64, np.nan)  # the template itself is made outside the measurement
    before = _anonymous_bytes()
    arrays = [filled(n, np.float64, np.nan) for _ in range(k)]
    for a in arrays:
        a[:10] = 1.0  # one page copied per array
        assert int(np.isnan(a).sum()) == n - 10  # reading maps the shared pages
    grown = _anonymous_bytes() - before
    assert grown < 16 * 2**20, f"{grown / 2**20:.1f} MiB of private memory for {k} arrays"


def test_falls_back_to_np_full_when_mapping_fails(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(F.mmap, "mmap", refuse)
    monkeypatch.setattr(F, "_templates", {})
    got = filled(1 << 20, np.float32, np.nan)
    assert got.flags.owndata and bool(np.isnan(got).all())


@linux_only
def test_threads_growing_one_template_get_fill_values(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(F, "_templates", {})
    sizes = [(1 << 17) << (i % 6) for i in range(48)]  # 1-32 MiB of float64, interleaved

    def make(n):
        a = filled(n, np.float64, 2.5)
        return n, bool((a == 2.5).all())

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(make, sizes)) == [(n, True) for n in sizes]


@linux_only
def test_mappings_stay_within_their_budget(monkeypatch):
    import gc

    budget = F._live + 2  # two more mappings than this process holds now
    monkeypatch.setattr(F, "mapping_budget", lambda: budget)
    a, b = (filled(1 << 20, np.float32, np.nan) for _ in range(2))
    over = filled(1 << 20, np.float32, np.nan)
    assert isinstance(a.base, memoryview) and isinstance(b.base, memoryview)
    assert over.flags.owndata and bool(np.isnan(over).all())  # np.full past the budget
    del a
    gc.collect()
    again = filled(1 << 20, np.float32, np.nan)  # a released mapping frees its place
    assert isinstance(again.base, memoryview) and bool(np.isnan(again).all())
