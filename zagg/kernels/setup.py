"""Numba's one-time set-up of a process, paid ahead of the first task where that helps.

The first call of any compiled kernel, cached or not, builds numba's typing registries
(a fraction of a second, holding the GIL and numba's compiler lock). A worker process zagg
starts pays it in its preload (:mod:`zagg.cluster.preload`), before it takes any task.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True)
def _first_call(x: int) -> int:
    return x + 1


def run_numba_setup() -> None:
    """Numba's one-time set-up, in this thread (any cached kernel's first call does it)."""
    _first_call(1)
