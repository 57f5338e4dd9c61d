"""The leaf temporal record (``temporal.toc``, ``zagg-leaf-temporal/1``) and its inputs.

The worker that writes a leaf holds every observation's instant; the record keeps what it
knew: how many clocked observations the leaf aggregated in each aligned time bucket (order
24 of the toc scale: buckets of 2^39 ns, about 9.2 minutes), the join of all their
instants (one toc word), and the cover those buckets make. Counts exist nowhere else, so a
leaf whose record cannot be written is not stamped.

:class:`Clock` is what the reduction carries per (shard, window) unit: sorted bucket
indices with their counts, and the first and last instant (mortie's ns). Clocks of
disjoint pieces merge by summing counts per bucket.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

import mortie
import numpy as np

SPEC = "zagg-leaf-temporal/1"
TEMPORAL_ORDER = 24  # the one pinned bucket order of the temporal path
CAP = 512  # most words a block holds; above it the buckets coarsen by whole orders
ELEMENT = {"dtype": "uint64", "shape": [-1]}
NAME = "temporal.toc"


@dataclass
class Clock:
    """Clocked observations of one unit: per order-24 bucket its count, and the first and
    last instant (ns on mortie's GPS-aligned scale)."""

    buckets: np.ndarray  # int64, ascending, unique
    counts: np.ndarray  # int64
    lo: int
    hi: int

    @property
    def n_obs(self) -> int:
        return int(self.counts.sum())


def clock_of(ns: np.ndarray) -> Clock | None:
    """The clock of observation instants (None when there are none)."""
    ns = np.asarray(ns, np.int64)
    if not ns.size:
        return None
    buckets, counts = np.unique(ns >> (63 - TEMPORAL_ORDER), return_counts=True)
    return Clock(buckets.astype(np.int64), counts.astype(np.int64), int(ns.min()), int(ns.max()))


def merge_clocks(clocks) -> Clock | None:
    """The clock of disjoint pieces: counts summed per bucket."""
    clocks = [c for c in clocks if c is not None]
    if not clocks:
        return None
    if len(clocks) == 1:
        return clocks[0]
    b = np.concatenate([c.buckets for c in clocks])
    n = np.concatenate([c.counts for c in clocks])
    keys, inverse = np.unique(b, return_inverse=True)
    sums = np.zeros(keys.size, np.int64)
    np.add.at(sums, inverse, n)
    return Clock(keys, sums, min(c.lo for c in clocks), max(c.hi for c in clocks))


def bucket_words(buckets: np.ndarray, order: int) -> np.ndarray:
    """The aligned range word of each bucket of ``order`` (its envelope is exactly the
    bucket ``[b·2^(63−o), (b+1)·2^(63−o))``)."""
    span = 63 - order
    b = np.asarray(buckets, np.uint64)
    start = b << np.uint64(span)
    end = ((b + np.uint64(1)) << np.uint64(span)) - np.uint64(1)
    return np.asarray(mortie.span2toc(start, end), np.uint64).reshape(-1)


def coarsen(buckets: np.ndarray, counts: np.ndarray, order: int, to: int):
    """Buckets at the coarser order ``to``, counts summed per ancestor bucket."""
    parent = np.asarray(buckets, np.int64) >> (order - to)
    keys, inverse = np.unique(parent, return_inverse=True)
    sums = np.zeros(keys.size, np.int64)
    np.add.at(sums, inverse, counts)
    return keys, sums


def capped(buckets, counts, order: int = TEMPORAL_ORDER, cap: int = CAP):
    """``(buckets, counts, order)`` coarsened by whole orders until at most ``cap``."""
    while buckets.size > cap and order > 0:
        buckets, counts = coarsen(buckets, counts, order, order - 1)
        order -= 1
    return buckets, counts, order


def b64(words: np.ndarray) -> str:
    return base64.b64encode(np.asarray(words, "<u8").tobytes()).decode("ascii")


def envelope_word(clock: Clock) -> int:
    """The join of every instant: a timestamp when they are one instant, else the range
    mortie's join makes of the first and last."""
    ends = np.array([clock.lo, clock.hi], np.uint64)
    return int(mortie.toc_reduce(np.asarray(mortie.time2toc(ends), np.uint64)))


def leaf_record(fields, clock: Clock, generated_at: str | None = None) -> dict:
    """The ``temporal.toc`` object of a leaf whose fold saw ``clock``'s observations."""
    buckets, counts, order = capped(clock.buckets, clock.counts)
    words = bucket_words(buckets, order)
    cover = np.asarray(mortie.toc_normalize(words), np.uint64).reshape(-1)
    counts_block = {
        "temporal_order": order,
        "cap": CAP,
        "element": dict(ELEMENT),
        "encoding": "base64",
        "words": b64(words),
        "obs": b64(counts),
        "count": int(words.size),
        "obs_total": int(counts.sum()),
    }
    cover_block = {
        "element": dict(ELEMENT),
        "encoding": "base64",
        "words": b64(cover),
        "count": int(cover.size),
    }
    if order < TEMPORAL_ORDER:
        cover_block["temporal_order"] = order
    return {
        "spec": SPEC,
        "source": "worker",
        "generated_at": generated_at or datetime.now(UTC).replace(microsecond=0).isoformat(),
        "fields": sorted(fields),
        "n_obs": clock.n_obs,
        "word": str(envelope_word(clock)),
        "temporal_order": TEMPORAL_ORDER,
        "cap": CAP,
        "counts": counts_block,
        "cover": cover_block,
    }


def decode_words(block: dict, key: str = "words") -> np.ndarray:
    """The uint64 buffer of a record block (checked against its ``count``)."""
    words = np.frombuffer(base64.b64decode(block[key]), "<u8").astype(np.uint64)
    if words.size != block["count"]:
        raise ValueError(
            f"a temporal block's {key} holds {words.size} words, its count says {block['count']}"
        )
    return words
