"""``open_temporal``: when a store (or a region of it) was observed, and how often.

The spec's temporal record (§10): each leaf's ``temporal.toc`` (``zagg-leaf-temporal/1``,
§10.6, written by the leaf's own worker) holds its envelope toc word, its counted cover
(observations per aligned order-24 time bucket) and that cover's word set; the store root
carries the composition of those records in ``coverage.moc``'s ``temporal`` section
(``zagg-coverage-toc/1``: tier 1 one word per shard, tier 2 the store-wide counted cover,
§10.1-10.3) and per-shard word sets in the ``coverage.toc`` sibling (§10.5).

A read gives one Dataset: per shard (dimension ``shards``) its envelope word and its
decoded first/last instant, its counted observations and whether they are exact, and its
cover; per bucket (dimension ``buckets``) the observation count. Every object is
strict-checked and an unknown revision or a damaged one reads as absent, never as a
refusal. A leaf without a usable record is "coverage only" (§10.3): it adds its shard's
words and buckets but no count, and marks the shard uncounted. With no leaf record at
all the root's tier-1 shard listing (and its cover) is what the store says.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import mortie
import numpy as np

from zagg import grid as _grid
from zagg.errors import ZaggWarning
from zagg.hive import paths as _paths
from zagg.hive.coverage import read_root_coverage
from zagg.hive.manifest import path_grouping
from zagg.hive.rootsection import COVER_SPEC, SECTION_SPEC, buckets_of, cover_words, sum_counts
from zagg.hive.stamp import check_stamp, data_prefix, read_stamp
from zagg.hive.storage import StoreRoot, as_root
from zagg.read import leaves as _leaves
from zagg.read.region import parse_region, subtree_intervals
from zagg.windows.record import SPEC as RECORD_SPEC
from zagg.windows.record import TEMPORAL_ORDER, bucket_words, decode_words
from zagg.windows.toc import decode, pinned_order

if TYPE_CHECKING:
    import xarray as xr

SHARD_DIM = "shards"
BUCKET_DIM = "buckets"
ATTR = "zagg_temporal"


def open_temporal(
    store: str | StoreRoot,
    storage_options: dict[str, Any] | None = None,
    *,
    region=None,
    bbox=None,
    cells=None,
    window: str | None = None,
    per_cell: bool = False,
) -> xr.Dataset:
    """The temporal record of a store as a Dataset: per shard (``shards``) its envelope
    ``word`` (``time_start`` / ``time_end`` decoded, UTC), counted observations ``n_obs``
    (exact where ``counted``), its ``cover`` (the toc word set whose gaps are real gaps);
    per time bucket (``buckets``) the observations ``obs`` falling in it.

    ``region`` / ``bbox`` / ``cells`` keep the shards that can touch the region; ``window``
    reads one time window's leaves (their records only). Without a window the store-wide
    root section and ``coverage.toc`` are used where the leaves do not say more.

    ``per_cell=True`` adds, per occupied cell (dimension ``cells``, coordinate
    ``cell_morton``), the join of every per-centroid time word the cell holds
    (``cell_word``, decoded to ``cell_start`` / ``cell_end``): it reads the leaves'
    companions, so it needs ``window=`` on a windowed store."""
    root = as_root(store, storage_options)
    manifest = _leaves.manifest_of(root)
    windowed = manifest.get("temporal") is not None
    if window is not None:
        if not windowed:
            raise ValueError(
                f"window={window!r}: {root.url} is not a time-windowed store; drop window="
            )
        _grid.validate_window(window)
    p = int(manifest["shard_order"])
    reg = parse_region(region, bbox, cells, order=p)
    found = _leaf_candidates(root, manifest, window, windowed)
    section, cover = (None, None) if window is not None else _root_objects(root, p)
    keep = _in_region(reg)
    if window is not None and not found:
        from zagg.hive.walk import walk_windows

        held = list(walk_windows(root, path_grouping(manifest)))
        raise ValueError(f"window {window!r} has no leaf in {root.url}; it holds {held[:24]}")
    found = [(rel, sid) for rel, sid in found if keep(sid)]
    with ThreadPoolExecutor(max_workers=_leaves.METADATA_READERS) as pool:
        reads = list(pool.map(lambda item: _read_leaf(root, manifest, *item), found))
    by_shard: dict[str, list[dict]] = {}
    for (_rel, sid), got in zip(found, reads, strict=True):
        if got is not None:
            by_shard.setdefault(sid, []).append(got)
    listed = {} if section is None else dict(section["shards"])
    ids = sorted(
        set(by_shard) | {s for s in listed if keep(s)},
        key=lambda s: int(_grid.from_decimal([s])[0]),
    )
    rows = [_shard_row(sid, by_shard.get(sid, []), listed, cover) for sid in ids]
    uncounted = sum(1 for r in rows if not r["counted"])
    counts = None if section is None else section.get("counts")
    if counts is not None and reg is None and set(ids) == set(listed):
        buckets, obs, order = counts["buckets"], counts["obs"], counts["temporal_order"]
        uncounted, source = int(counts["uncounted_shards"]), "root"
    else:
        parts = [r["counts"] for r in rows]
        buckets, obs, order = sum_counts(parts)
        source = "records"
    out = _dataset(rows, buckets, obs, order, uncounted, source, window, section)
    if per_cell:
        out = out.merge(cell_spans(root, region, bbox, cells, window))
    return out


def cell_spans(root, region, bbox, cells, window) -> xr.Dataset:
    """Per occupied cell the join of its per-centroid time words (any timed field)."""
    import xarray as xr

    from zagg.read.open import open_hive

    ds = open_hive(root, region=region, bbox=bbox, cells=cells, window=window)
    names = [
        n
        for n, v in ds.data_vars.items()
        if (v.attrs.get("temporal") or {}).get("shape") == "per-centroid"
    ]
    if not names:
        raise ValueError(
            f"{root.url} holds no per-centroid time companion (a timed field): per-cell "
            "time spans need one; the per-shard record is all it has"
        )
    columns = [ds[n].values for n in names]
    words = np.zeros(ds.sizes["cells"], np.uint64)
    for i in range(words.size):
        held = [np.asarray(c[i], np.uint64) for c in columns if len(c[i])]
        if held:
            words[i] = int(mortie.toc_reduce(np.concatenate(held)))
    start, end = decode(words)
    empty = words == 0
    return xr.Dataset(
        {
            "cell_word": ("cells", words, {"grammar": "mortie-toc/1", "of": names}),
            "cell_start": (
                "cells",
                np.where(empty, np.datetime64("NaT", "ns"), start).astype("M8[ns]"),
            ),
            "cell_end": (
                "cells",
                np.where(empty, np.datetime64("NaT", "ns"), end).astype("M8[ns]"),
            ),
        },
        coords={"cell_morton": ("cells", np.asarray(ds["morton"].values, np.uint64))},
    )


def _leaf_candidates(root, manifest, window, windowed) -> list[tuple[str, str]]:
    if window is not None:
        return _leaves.candidates(root, manifest, "auto", window=window)
    if windowed:
        from zagg.hive.walk import walk_windows

        return [
            leaf
            for leaves in walk_windows(root, path_grouping(manifest)).values()
            for leaf in leaves
        ]
    try:
        return _leaves.candidates(root, manifest, "auto")
    except ValueError:
        return []


def _in_region(reg):
    if reg is None:
        return lambda sid: True

    def keep(sid: str) -> bool:
        lo, hi = subtree_intervals(_grid.from_decimal([sid]), reg.order)
        return bool(reg.overlaps(lo, hi)[0])

    return keep


# -- the objects, each strict-checked (an unusable one reads as absent) ------------------
def parse_record(obj, where: str) -> dict | None:
    """A leaf's ``temporal.toc`` as ``{word, n_obs, counts: (buckets, obs, order),
    cover, cover_order}``, or None (with a warning) when it is not a usable
    ``zagg-leaf-temporal/1`` record: the leaf then reads as coverage only."""
    if not isinstance(obj, dict) or obj.get("spec") != RECORD_SPEC:
        if obj is not None:
            _warn(f"{where}: not a {RECORD_SPEC} record (another revision?): coverage only")
        return None
    try:
        block = obj["counts"]
        order = pinned_order(block["temporal_order"])
        words, obs = decode_words(block), decode_words(block, "obs").astype(np.int64)
        if int(obs.sum()) != int(block["obs_total"]) or int(obj["n_obs"]) != int(obs.sum()):
            raise ValueError("n_obs, obs_total and the obs buffer disagree")
        buckets = _bucket_index(words, order)
        if not np.array_equal(bucket_words(buckets, order), words):
            raise ValueError("the counts words are not aligned bucket words")
        cover = decode_words(obj["cover"])
        cover_order = pinned_order(obj["cover"].get("temporal_order", TEMPORAL_ORDER))
        derived = np.asarray(mortie.toc_normalize(words), np.uint64).reshape(-1)
        if cover_order != order or not np.array_equal(cover, derived):
            raise ValueError("its cover is not the key set of its counts")
        word = int(obj["word"])
    except (KeyError, TypeError, ValueError) as exc:
        _warn(f"{where}: damaged temporal record ({exc}): the leaf reads as coverage only")
        return None
    return {
        "word": word,
        "n_obs": int(obs.sum()),
        "counts": (buckets, obs, order),
        "fields": list(obj.get("fields") or []),
    }


def _bucket_index(words: np.ndarray, order: int) -> np.ndarray:
    if not words.size:
        return np.zeros(0, np.int64)
    start, _ = mortie.toc2time(words)
    return (np.asarray(start, np.uint64) >> np.uint64(63 - order)).astype(np.int64)


def parse_section(envelope: dict | None, where: str) -> dict | None:
    """The root coverage's ``temporal`` section (tier 1 ``shards``; tier 2 ``counts``
    decoded to buckets, or None when the block is absent or unusable), or None."""
    sec = (envelope or {}).get("temporal")
    if not isinstance(sec, dict) or sec.get("spec") != SECTION_SPEC:
        return None
    shards = sec.get("shards")
    if not isinstance(shards, dict):
        return None
    out = {"shards": {}, "fields": list(sec.get("fields") or []), "counts": None}
    for sid, word in shards.items():
        try:
            _grid.validate_id(sid)
            out["shards"][sid] = int(word)
        except (TypeError, ValueError):
            _warn(f"{where}: temporal shard {sid!r} -> {word!r} is unreadable: left out")
    block = sec.get("counts")
    if isinstance(block, dict):
        try:
            order = pinned_order(block["temporal_order"])
            words, obs = decode_words(block), decode_words(block, "obs").astype(np.int64)
            if int(obs.sum()) != int(block["obs_total"]):
                raise ValueError("obs_total is not the sum of obs")
            marker = block["uncounted_shards"]
            if not isinstance(marker, int) or isinstance(marker, bool) or marker < 0:
                raise ValueError(f"uncounted_shards {marker!r} is not an integer >= 0")
            out["counts"] = {
                "buckets": _bucket_index(words, order),
                "obs": obs,
                "temporal_order": order,
                "uncounted_shards": marker,
            }
        except (KeyError, TypeError, ValueError) as exc:
            _warn(f"{where}: the temporal counts block is refused ({exc}): left out")
    return out


def parse_cover(obj, order: int, where: str) -> dict[str, tuple[np.ndarray, int]]:
    """``{shard: (words, temporal order)}`` of a ``coverage.toc`` (empty when absent, at
    another revision or another shard order)."""
    if not isinstance(obj, dict) or obj.get("spec") != COVER_SPEC or obj.get("order") != order:
        return {}
    try:  # refused as the root counts block and the leaf records refuse it
        top = pinned_order(obj.get("temporal_order", TEMPORAL_ORDER))
    except ValueError as exc:
        _warn(f"{where}: refused ({exc}): left out")
        return {}
    out = {}
    for sid, block in (obj.get("shards") or {}).items():
        try:
            o = pinned_order(block.get("temporal_order", top))
            if o > top:
                raise ValueError(f"order {o} is above the object's {top}")
            out[sid] = (decode_words(block), o)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            _warn(f"{where}: cover of shard {sid} is refused ({exc}): left out")
    return out


def _root_objects(root: StoreRoot, p: int):
    envelope = read_root_coverage(root)
    section = parse_section(envelope, root.url_of("coverage.moc"))
    try:
        obj = root.read_json(_paths.ROOT_COVER_KEY)
    except ValueError:
        obj = None
    return section, parse_cover(obj, p, root.url_of(_paths.ROOT_COVER_KEY))


# -- leaves --------------------------------------------------------------------------
def _read_leaf(root: StoreRoot, manifest: dict, rel: str, sid: str) -> dict | None:
    """One leaf's contribution: its record, else its companions' words (coverage only)."""
    stamp = read_stamp(root, rel)
    if stamp is None:
        return None
    stamp = check_stamp(stamp, rel)
    prefix = data_prefix(rel, stamp)
    where = root.url_of(f"{prefix}/{_paths.LEAF_TEMPORAL_NAME}")
    try:
        obj = root.read_json(f"{prefix}/{_paths.LEAF_TEMPORAL_NAME}")
    except ValueError:
        _warn(f"{where} is not JSON: the leaf reads as coverage only")
        obj = None
    rec = parse_record(obj, where)
    if rec is not None:
        return {**rec, "counted": True, "window": stamp.get("window")}
    found = companion_words(root, manifest, prefix, root.url_of(rel))
    if found is None:
        return {"failed": True}
    words, channels = found
    if not channels:
        return None  # the leaf declares no per-centroid time channel: nothing temporal
    instants = _representative(words)
    buckets = np.unique(instants >> np.int64(63 - TEMPORAL_ORDER))
    word = int(mortie.toc_reduce(words)) if words.size else 0
    return {
        "word": word,
        "n_obs": 0,
        "counts": (buckets, np.zeros(buckets.size, np.int64), TEMPORAL_ORDER),
        "counted": False,
        "window": stamp.get("window"),
    }


def companion_words(root, manifest, prefix: str, where: str) -> tuple[np.ndarray, int] | None:
    """Every §8.3 per-centroid toc word the leaf holds, any field, and how many such
    companions it has (None: a companion is not row-aligned with its payload, so the
    shard cannot be vouched for)."""
    from zagg.hive.loaders import load_field
    from zagg.hive.schema import leaf_group, schema

    group = str(manifest["cell_order"])
    _attrs, arrays = leaf_group(root, prefix, group, where)
    fields = schema(arrays)
    parts, channels = [], 0
    for name, f in fields.items():
        if (f.attrs.get("temporal") or {}).get("shape") != "per-centroid":
            continue
        channels += 1
        values = load_field(root, prefix, group, f, None, where, None, None)
        payload = next((p for p, g in fields.items() if g.attrs.get("times") == name), None)
        if payload is not None:
            rows = load_field(root, prefix, group, fields[payload], None, where, None, None)
            sizes = np.fromiter((len(b) // 8 for b in rows), np.int64, count=rows.size)
            if not np.array_equal(sizes, [w.size for w in values]):
                _warn(f"{where}: {name} is not row-aligned with {payload}: shard left out")
                return None
        parts.extend(w for w in values if w.size)
    words = np.concatenate(parts).astype(np.uint64) if parts else np.zeros(0, np.uint64)
    return words, channels


def _representative(words: np.ndarray) -> np.ndarray:
    """Each word's representative instant: a timestamp itself, a range its midpoint."""
    if not words.size:
        return np.zeros(0, np.int64)
    start, end = mortie.toc2time(words)
    start, end = np.asarray(start, np.uint64), np.asarray(end, np.uint64)
    return (start + (np.maximum(end, start) - start) // np.uint64(2)).astype(np.int64)


def _shard_row(sid: str, reads: list[dict], listed: dict, cover: dict | None) -> dict:
    """One shard: the join of its leaves' words, their counts summed, its cover."""
    failed = any(r.get("failed") for r in reads)
    reads = [r for r in reads if not r.get("failed")]
    counted = bool(reads) and not failed and all(r["counted"] for r in reads)
    words = [r["word"] for r in reads if r["word"]]
    if sid in listed and (not counted or not words):
        words.append(listed[sid])  # the root's tier-1 word where the leaves do not count
    word = int(mortie.toc_reduce(np.array(words, np.uint64))) if words else 0
    parts = [r["counts"] for r in reads]
    buckets, obs, order = sum_counts(parts)
    if cover and sid in cover and not counted:
        shard_cover, cover_order = cover[sid]
        if not reads:  # the root cover alone: its buckets are occupied, none counted
            keys = np.unique(buckets_of(shard_cover, cover_order)) if shard_cover.size else keys0()
            buckets, obs, order = keys, np.zeros(keys.size, np.int64), cover_order
    elif buckets.size:
        shard_cover, cover_order = cover_words(buckets, order)
    else:
        shard_cover, cover_order = np.zeros(0, np.uint64), TEMPORAL_ORDER
    return {
        "shard": sid,
        "word": word,
        "n_obs": int(sum(r["n_obs"] for r in reads)),
        "counted": counted,
        "leaves": len(reads),
        "fields": sorted({f for r in reads for f in r.get("fields", [])}),
        "counts": (buckets, obs, order),
        "cover": shard_cover,
        "cover_order": cover_order,
    }


def keys0() -> np.ndarray:
    return np.zeros(0, np.int64)


def _dataset(rows, buckets, obs, order, uncounted, source, window, section) -> xr.Dataset:
    import xarray as xr

    ids = [r["shard"] for r in rows]
    words = np.array([r["word"] for r in rows], np.uint64)
    start, end = decode(words)
    unknown = words == 0
    start = np.where(unknown, np.datetime64("NaT", "ns"), start).astype("datetime64[ns]")
    end = np.where(unknown, np.datetime64("NaT", "ns"), end).astype("datetime64[ns]")
    covers = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        covers[i] = r["cover"]
    bwords = bucket_words(buckets, order) if buckets.size else np.zeros(0, np.uint64)
    bstart, bend = decode(bwords)
    ds = xr.Dataset(
        {
            "word": (SHARD_DIM, words, {"grammar": "mortie-toc/1"}),
            "time_start": (SHARD_DIM, start),
            "time_end": (SHARD_DIM, end),
            "n_obs": (SHARD_DIM, np.array([r["n_obs"] for r in rows], np.int64)),
            "counted": (SHARD_DIM, np.array([r["counted"] for r in rows], bool)),
            "leaves": (SHARD_DIM, np.array([r["leaves"] for r in rows], np.int64)),
            "cover": (SHARD_DIM, covers),
            "cover_order": (SHARD_DIM, np.array([r["cover_order"] for r in rows], np.int64)),
            "obs": (BUCKET_DIM, np.asarray(obs, np.int64)),
            "bucket_start": (BUCKET_DIM, bstart.astype("datetime64[ns]")),
            "bucket_end": (BUCKET_DIM, bend.astype("datetime64[ns]")),
        },
        coords={
            "shard": (SHARD_DIM, np.array(ids, dtype=object)),
            "morton": (
                SHARD_DIM,
                _grid.from_decimal(ids) if ids else np.zeros(0, np.uint64),
            ),
            "bucket": (BUCKET_DIM, bwords),
        },
    )
    ds.attrs[ATTR] = {
        "window": window,
        "source": source,
        "temporal_order": int(order),
        "obs_total": int(np.asarray(obs).sum()),
        "uncounted_shards": int(uncounted),
        "exact": int(uncounted) == 0,
        "fields": sorted(
            {f for r in rows for f in r.get("fields", [])} | set((section or {}).get("fields", []))
        ),
    }
    return ds


def _warn(message: str) -> None:
    warnings.warn(message, ZaggWarning, stacklevel=4)
