"""Numba's one-time set-up of a process, started in the background by its first input read.

The first call of any compiled kernel, cached or not, builds numba's typing registries
(≈ 0.25 s here, holding the GIL and numba's compiler lock). Left to the first reduction,
it stops both task threads: one builds them, the other waits for the lock, and a core idles.
Started as the first input chunk is read, it runs while the chunks are read and keyed
(mortie's kernels release the GIL), and the first reductions wait less for it: 0.16–0.21 s
each in a fresh process at dense 10^7, against 0.23–0.28 s.
"""

from __future__ import annotations

import threading

import numba

_thread: threading.Thread | None = None  # the background set-up, once started
_lock = threading.Lock()


@numba.njit(cache=True)
def _first_call(x: int) -> int:
    return x + 1


def run_numba_setup() -> None:
    """Numba's one-time set-up, in this thread (any cached kernel's first call does it)."""
    _first_call(1)


def start_numba_setup() -> None:
    """Start :func:`run_numba_setup` in a background thread, once per process."""
    global _thread
    if _thread is not None:
        return
    with _lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=run_numba_setup, name="zagg-numba-setup",
                                   daemon=True)
        _thread.start()
