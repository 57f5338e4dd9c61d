"""The store root's temporal coverage: the ``temporal`` section of ``coverage.moc`` and the
``coverage.toc`` cover sibling, composed from the leaves' temporal records after a run.

Tier 1 (``shards``) maps each shard to one toc word, the join of every observation instant
its leaves hold; tier 2 (``counts``) is the store-wide counted cover, the sum of the
leaves' records. ``coverage.toc`` keeps, per shard, the canonical word set of its occupied
order-24 buckets, so gaps between passes stay visible below the shard's envelope.

Both are caches, composed with what stands by one compare-and-swap update each
(:meth:`~zagg.hive.storage.StoreRoot.update_json`, so concurrent runs lose none of each
other's shards): tier 1 and the covers union (a union never double-counts), while tier 2
is only ever replaced whole, and only by a run that wrote every leaf the store holds and
finds no shard listed that it did not write; otherwise the counts are dropped rather
than published partial. A section or cover at a revision this code does not know is kept
as it stands.
"""

from __future__ import annotations

import warnings

import mortie
import numpy as np

from zagg.errors import ZaggWarning
from zagg.hive.coverage import same_but_times
from zagg.hive.paths import ROOT_COVER_KEY
from zagg.hive.stamp import now_iso
from zagg.windows.record import (
    CAP,
    ELEMENT,
    TEMPORAL_ORDER,
    b64,
    bucket_words,
    capped,
    coarsen,
    decode_words,
)
from zagg.windows.toc import pinned_order

SECTION_SPEC = "zagg-coverage-toc/1"
COVER_SPEC = "zagg-coverage-toc-cover/1"
SOURCE = "dispatcher"


def _counts_of(record: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """A record's (bucket indices, counts, order)."""
    block = record["counts"]
    order = int(block["temporal_order"])
    words = decode_words(block)
    obs = decode_words(block, "obs").astype(np.int64)
    start, _ = mortie.toc2time(words) if words.size else (np.zeros(0, np.uint64), None)
    return (np.asarray(start, np.uint64) >> np.uint64(63 - order)).astype(np.int64), obs, order


def _pinned(order) -> bool:
    """Whether a stored temporal order is one readers take (:func:`zagg.windows.toc.pinned_order`)."""
    try:
        pinned_order(order)
    except ValueError:
        return False
    return True


def sum_counts(parts) -> tuple[np.ndarray, np.ndarray, int]:
    """Counted covers of disjoint contributors summed per bucket, at the coarsest of their
    orders."""
    parts = list(parts)
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), TEMPORAL_ORDER
    order = min(o for _, _, o in parts)
    b, n = [], []
    for buckets, counts, o in parts:
        if o != order:
            buckets, counts = coarsen(buckets, counts, o, order)
        b.append(buckets)
        n.append(counts)
    keys, inverse = np.unique(np.concatenate(b), return_inverse=True)
    sums = np.zeros(keys.size, np.int64)
    np.add.at(sums, inverse, np.concatenate(n))
    return keys, sums, order


def cover_words(buckets: np.ndarray, order: int, cap: int = CAP) -> tuple[np.ndarray, int]:
    """The canonical cover of occupied buckets, coarsened by whole orders until it holds
    at most ``cap`` words; ``(words, order)``."""
    while True:
        words = np.asarray(mortie.toc_normalize(bucket_words(buckets, order)), np.uint64).reshape(
            -1
        )
        if words.size <= cap or order == 0:
            return words, order
        buckets, _ = coarsen(buckets, np.zeros(buckets.size, np.int64), order, order - 1)
        order -= 1


def quantize(words: np.ndarray, order: int) -> np.ndarray:
    """Words widened to the bucket grid of ``order`` (start floored, end ceiled) and
    canonicalized: the buckets they touch, as one normalized word set."""
    if not np.asarray(words).size:
        return np.zeros(0, np.uint64)
    buckets = np.unique(buckets_of(words, order))
    return np.asarray(mortie.toc_normalize(bucket_words(buckets, order)), np.uint64).reshape(-1)


def run_section(records: list[dict], whole: bool) -> tuple[dict, dict] | None:
    """This run's section and cover from its leaf records (None when no leaf carries one);
    ``whole``: the run wrote every leaf the store holds, so its counts are the store's."""
    timed = [r for r in records if r.get("temporal")]
    if not timed:
        return None
    by_shard: dict[str, list[dict]] = {}
    for r in timed:
        by_shard.setdefault(r["shard_id"], []).append(r["temporal"])
    fields = sorted({f for r in timed for f in r["temporal"]["fields"]})
    shards, covers = {}, {}
    for sid, recs in sorted(by_shard.items()):
        words = np.array([int(t["word"]) for t in recs], np.uint64)
        shards[sid] = str(int(mortie.toc_reduce(words)))
        buckets, _, order = sum_counts(_counts_of(t) for t in recs)
        words, order = cover_words(buckets, order)
        covers[sid] = _cover_block(words, order)
    section = {
        "spec": SECTION_SPEC,
        "source": SOURCE,
        "generated_at": now_iso(),
        "fields": fields,
        "cover": COVER_SPEC,
        "shards": shards,
    }
    if whole:
        buckets, counts, order = sum_counts(_counts_of(r["temporal"]) for r in timed)
        buckets, counts, order = capped(buckets, counts, order)
        words = bucket_words(buckets, order)
        section["counts"] = {
            "temporal_order": order,
            "cap": CAP,
            "element": dict(ELEMENT),
            "encoding": "base64",
            "words": b64(words),
            "obs": b64(counts),
            "count": int(words.size),
            "obs_total": int(counts.sum()),
            "uncounted_shards": 0,
        }
    return section, {"fields": fields, "shards": covers}


def _cover_block(words: np.ndarray, order: int) -> dict:
    block = {"words": b64(words), "count": int(words.size)}
    if order < TEMPORAL_ORDER:
        block["temporal_order"] = order
    return block


def compose_section(standing, mine: dict) -> dict:
    """The section a run leaves: tier 1 unioned by the toc join, tier 2 this run's when it
    has one (whole), else none; a standing section at another revision is kept as is."""
    if (
        isinstance(standing, dict)
        and isinstance(standing.get("spec"), str)
        and standing["spec"] != SECTION_SPEC
    ):
        return standing
    if not (isinstance(standing, dict) and isinstance(standing.get("shards"), dict)):
        return mine
    out = dict(mine)
    if set(standing["shards"]) - set(mine["shards"]):
        # the store holds shards this run did not write (another run's, published while
        # this one ran): its counts are not the store's, whatever it found when it began
        out.pop("counts", None)
    shards = dict(standing["shards"])
    for sid, word in mine["shards"].items():
        if sid in shards:
            pair = np.array([int(shards[sid]), int(word)], np.uint64)
            shards[sid] = str(int(mortie.toc_reduce(pair)))
        else:
            shards[sid] = word
    out["shards"] = dict(sorted(shards.items()))
    out["fields"] = sorted(set(standing.get("fields") or []) | set(mine["fields"]))
    return out


def compose_cover(standing, mine: dict, order: int) -> dict | None:
    """The ``coverage.toc`` a run leaves (None: keep the standing one, at a revision this
    code does not read)."""
    base = {
        "spec": COVER_SPEC,
        "source": SOURCE,
        "generated_at": now_iso(),
        "order": order,
        "temporal_order": TEMPORAL_ORDER,
        "cap": CAP,
    }
    if (
        isinstance(standing, dict)
        and isinstance(standing.get("spec"), str)
        and standing["spec"] != COVER_SPEC
    ):
        return None
    shards = dict(mine["shards"])
    fields = set(mine["fields"])
    usable = (
        isinstance(standing, dict)
        and standing.get("spec") == COVER_SPEC
        and standing.get("order") == order
        and isinstance(standing.get("shards"), dict)
        # above the pinned order readers refuse it: this run's cover replaces it
        and _pinned(standing.get("temporal_order", TEMPORAL_ORDER))
    )
    if usable:
        fields |= set(standing.get("fields") or [])
        for sid, block in standing["shards"].items():
            if sid not in shards:
                shards[sid] = block
                continue
            try:
                a, b = decode_words(block), decode_words(shards[sid])
            except (KeyError, ValueError, TypeError):
                continue  # an undecodable standing block is replaced by this run's
            o = min(
                int(block.get("temporal_order", TEMPORAL_ORDER)),
                int(shards[sid].get("temporal_order", TEMPORAL_ORDER)),
            )
            words, o = cover_words(np.unique(buckets_of(np.concatenate([a, b]), o)), o)
            shards[sid] = _cover_block(words, o)
    return {
        **base,
        "fields": sorted(fields),
        "element": dict(ELEMENT),
        "encoding": "base64",
        "shards": dict(sorted(shards.items())),
    }


def buckets_of(words: np.ndarray, order: int) -> np.ndarray:
    """The order-``order`` buckets the words' envelopes touch (a timestamp's, its own)."""
    start, end = mortie.toc2time(np.asarray(words, np.uint64))
    start, end = np.asarray(start, np.uint64), np.asarray(end, np.uint64)
    span = np.uint64(63 - order)
    last = np.maximum(end, start + np.uint64(1)) - np.uint64(1)  # the last instant covered
    lo, hi = start >> span, last >> span
    return np.concatenate(
        [np.arange(int(a), int(b) + 1, dtype=np.int64) for a, b in zip(lo, hi, strict=True)]
    )


def store_leaves(root, windowed: bool = True) -> set[tuple[str, str | None]]:
    """Every leaf the store holds, as (shard id, window): its window leaves, or (not
    ``windowed``) its shard leaves with window None."""
    from zagg.hive.walk import walk_leaves, walk_windows

    if not windowed:
        return {(sid, None) for _, sid in walk_leaves(root)}
    return {(sid, label) for label, leaves in walk_windows(root).items() for _, sid in leaves}


def publish(root, records: list[dict], order: int) -> dict | None:
    """After a run: write ``coverage.toc`` (composed with the standing one) and return the
    section to compose into ``coverage.moc`` (None: this run has no temporal records)."""
    if not any(r.get("temporal") for r in records):
        return None
    mine = {(r["shard_id"], r.get("window")) for r in records}
    windowed = any(w is not None for _, w in mine)
    made = run_section(records, whole=store_leaves(root, windowed) <= mine)
    if made is None:
        return None
    section, cover = made

    def merge(standing):  # unparsable: debris this run replaces
        composed = compose_cover(standing, cover, order)
        return None if composed is None or same_but_times(standing, composed) else composed

    left = root.update_json(ROOT_COVER_KEY, merge, replace_unreadable=True)
    if isinstance(left, dict):
        section["cover"] = left.get("spec")
    return section


def root_temporal(root, records: list[dict], shard_order: int) -> dict | None:
    """The root temporal section of a run whose leaves carry temporal records (writing
    their ``coverage.toc`` first); None otherwise. Fail-open: both are caches."""
    if not any(r.get("temporal") for r in records):
        return None
    try:
        return publish(root, records, shard_order)
    except Exception as exc:  # a regenerable cache never fails the run
        warnings.warn(
            f"the root temporal coverage of {root.url} was not updated: {exc}",
            ZaggWarning,
            stacklevel=2,
        )
        return None
