"""Run units: one (shard, window) pair keyed by one uint64 word.

Discovery, the per-unit merges and their scheduling key every unit by one integer, as an
unwindowed run keys every shard by its word. A shard word at order p leaves its bits 6 to
59 − 2p zero (the tuples of the orders below p), so a windowed unit is the shard word with
its window index in those bits. Units of one shard sort together, windows in chronological
order within it; an unwindowed unit is the shard word itself.
"""

from __future__ import annotations

import numpy as np

SHIFT = 6  # the suffix (order) bits stay as they are


def room(shard_order: int) -> int:
    """Bits a shard word at ``shard_order`` leaves for the window index."""
    return 54 - 2 * int(shard_order)


def pack(shard_words, index, shard_order: int) -> np.ndarray:
    """Unit keys of shard words with window indices (broadcast)."""
    index = np.asarray(index, dtype=np.uint64)
    if index.size and int(index.max()) >> room(shard_order):
        raise ValueError(
            f"window index {int(index.max())} does not fit beside a shard word at "
            f"order {shard_order}"
        )
    return np.asarray(shard_words, np.uint64) | (index << np.uint64(SHIFT))


def unpack(units, shard_order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(shard words, window indices)`` of unit keys."""
    units = np.asarray(units, dtype=np.uint64)
    mask = np.uint64((1 << room(shard_order)) - 1) << np.uint64(SHIFT)
    return units & ~mask, ((units & mask) >> np.uint64(SHIFT)).astype(np.int64)
