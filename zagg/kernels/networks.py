"""Sorting networks for tiny segments, as straight-line numba code.

A leaf cell holds ~10 observations, so building its loss-free digest is mostly sorting
a handful of floats. Insertion sort mispredicts a branch per element (~18 ns per value
here); a fixed network of compare-exchanges (Batcher's odd–even merge sort) keeps the
values in registers as branch-free min/max pairs (~5 ns per value).

The networks are generated once at import from the pair list below. Each is compiled as a
function of its own, once per element type, and called (not inlined: numba's inlining of
a few hundred straight-line statements costs several times their compile, in every caller);
a caller's numba cache holds the code of the networks it calls, so a change here also needs
the callers' caches cleared (``__pycache__``). Widths stop at 16: a 32-wide network
compiles for several seconds per element type, and counting ranks is as fast there.
"""

from __future__ import annotations

import numba as nb

WIDTHS = (8, 16)


def batcher_pairs(n: int) -> list[tuple[int, int]]:
    """Compare-exchange pairs of Batcher's odd–even merge sort of ``n`` (a power of two)
    inputs, in execution order."""
    pairs = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return pairs


def _network(n: int):
    """``sort(src, dst, base, m)``: sort ``src[:n]`` and write the smallest ``m`` values
    to ``dst[base:base + m]`` (pad ``src[m:n]`` with +inf first)."""
    lines = [f"def sort{n}(src, dst, base, m):"]
    lines += [f"    a{i} = src[{i}]" for i in range(n)]
    lines += [f"    a{i}, a{j} = min(a{i}, a{j}), max(a{i}, a{j})" for i, j in batcher_pairs(n)]
    lines += [f"    if {i} < m:\n        dst[base + {i}] = a{i}" for i in range(n)]
    namespace: dict = {}
    exec(compile("\n".join(lines), f"<sorting network {n}>", "exec"), namespace)
    return nb.njit(nogil=True)(namespace[f"sort{n}"])


sort8, sort16 = (_network(n) for n in WIDTHS)


@nb.njit(inline="always")
def sort_up_to_16(src, dst, base, n, pad):
    """Sort ``src[:n]`` (n <= 16) into ``dst[base:base + n]`` with the narrower network,
    after padding ``src`` up to its width with ``pad`` (no less than any value)."""
    if n <= 8:
        for k in range(n, 8):
            src[k] = pad
        sort8(src, dst, base, n)
    else:
        for k in range(n, 16):
            src[k] = pad
        sort16(src, dst, base, n)
