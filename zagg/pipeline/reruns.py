"""Re-runs: which shards of a store a run must write, before it reads or writes them.

Each leaf records its identity: the store's semantic hash (what and how, from the config)
and the granule ids it was built from (over what), in its stats sidecar
(``granules_sha256``) and the ``granules.json`` sibling. A run plans, per shard, the same
pair and gets one verdict per shard (:func:`classify`):

- ``current``: the pair matches and the leaf is stamped: the run writes nothing for it and
  only refreshes its objects' modification times (:func:`touch_current`), so lifecycle
  rules that purge old objects leave it alone; the store-root objects the run finishes
  still list it (:func:`current_records`), so a run that resumes a killed one leaves the
  root an uninterrupted run leaves;
- ``refused``: the planned granules drop ids the leaf was built from (a contraction, e.g.
  a catalog that lost granules): nothing is written for it unless contraction is allowed,
  and the run records every missing id in a refusal manifest at the store root
  (:func:`write_refusals`);
- ``rewrite``: everything else (new granules, a changed config, no or an unreadable
  record, an unstamped leaf).

A unit of the store the run neither plans nor finds (no point of its input falls in it any
more) whose leaf was built from granules its input no longer has is ``refused`` too
(:func:`vanished`): the granules that fed it disappeared, and the run names them rather
than leave the shard silently out of date.

A run that refused units exits with :data:`EXIT_REFUSED` on the command line.

A unit the run computed and found empty (no point of its granules left in the shard after
the filters) has no leaf, so it records its identity in its sidecars alone
(:func:`write_empty`): the next run with the same identity finds it ``current`` without
reading its granules again.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from zagg import __version__
from zagg.hive import paths
from zagg.hive.coverage import expand_ranges, read_root_coverage
from zagg.hive.stamp import data_prefix, now_iso, read_stamp_or_debris
from zagg.hive.stats import (
    STATS_SPEC,
    bare_granule_ids,
    granules_record,
    granules_sha256,
    read_stats,
)
from zagg.hive.storage import StoreRoot, dumps_json
from zagg.hive.walk import walk_leaves, walk_windows

CURRENT, REFUSED, REWRITE = "current", "refused", "rewrite"
#: the command line's exit status of a run that refused units (``refusals_*.json``)
EXIT_REFUSED = 4
#: the reason of a unit refused because every granule the run lacks fed it alone
GONE = "granules gone"
REFUSALS_SPEC = "zagg-refusals/1"
_READERS = 16  # concurrent sidecar reads on an object store


def unit_of(stem: str) -> tuple[str, str | None]:
    """``(shard id, window or None)`` of a unit named by its leaf stem (``-5112333`` or
    ``-5112333_2019``, :func:`zagg.hive.paths.leaf_stem`)."""
    sid, _, window = stem.partition("_")
    return sid, window or None


@dataclass(frozen=True)
class Verdict:
    """What a run does with one unit (a shard, or a shard's window), and why."""

    shard_id: str  # the unit's leaf stem
    kind: str  # current / refused / rewrite
    reason: str
    missing: tuple[str, ...] = ()  # recorded ids the plan drops (refused, or allowed)
    added: tuple[str, ...] = ()  # planned ids the record lacks
    versioned: bool = False
    empty: bool = False  # no leaf: the unit was computed and holds no point
    cells_with_data: int = 0  # what the stamped leaf holds (a current unit's)
    data: str | None = None  # the prefix of the leaf's arrays (a current unit's)


@dataclass
class Gate:
    """The verdicts of one run, and what it did about the current ones."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    objects_touched: int = 0
    touch_failures: int = 0
    refusals_key: str | None = None

    def of(self, kind: str) -> list[str]:
        return [sid for sid, v in self.verdicts.items() if v.kind == kind]

    def merge(self, other: Gate) -> Gate:
        return Gate(
            {**self.verdicts, **other.verdicts},
            self.objects_touched + other.objects_touched,
            self.touch_failures + other.touch_failures,
            other.refusals_key or self.refusals_key,
        )


def classify(
    root: StoreRoot,
    planned: dict[str, list[str] | None],
    semantic_hash: str,
    *,
    allow_contraction: bool = False,
    column: bool = False,
) -> dict[str, Verdict]:
    """The verdict of every planned shard (shard id → its planned granule ids; None where
    the run cannot say, which is always a rewrite). With ``column`` (the config declares
    leaf columns) a unit is current only when its stamped column is there too."""
    items = sorted(planned.items())
    workers = 1 if root.is_local else _READERS

    def verdict(item):
        v = _verdict(root, *item, semantic_hash, allow_contraction)
        if v.kind == CURRENT and column and not v.empty and not _has_column(root, v.shard_id):
            return Verdict(
                v.shard_id, REWRITE, "its pyramid column is missing", versioned=v.versioned
            )
        return v

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return {v.shard_id: v for v in pool.map(verdict, items)}


def _recorded_empty(record, semantic_hash: str, ids) -> bool:
    """Whether a sidecar without a leaf records this identity as computed and empty."""
    return (
        isinstance(record, dict)
        and record.get("leaf") is None
        and record.get("cells_with_data") == 0
        and ids is not None
        and record.get("semantic_hash") == semantic_hash
        and record.get("granules_sha256") == granules_sha256(ids)
    )


def write_empty(root: StoreRoot, shard_ids, planned: dict, semantic_hash: str, run_id: str) -> int:
    """Record units the run computed and found empty (their sidecars, no leaf); returns
    how many."""
    payloads = {}
    for sid in shard_ids:
        granules = granules_record(planned[sid])
        payloads[paths.granules_key(*unit_of(sid))] = dumps_json(granules)
        payloads[paths.stats_key(*unit_of(sid))] = dumps_json(
            {
                "spec": STATS_SPEC,
                "shard_key": unit_of(sid)[0],
                "window": unit_of(sid)[1],
                "leaf": None,
                "cells_with_data": 0,
                "granule_count": len(granules["ids"]),
                "content_hashes": None,
                "semantic_hash": semantic_hash,
                "granules_sha256": granules["granules_sha256"],
                "written_at": now_iso(),
                "run_id": run_id,
            }
        )
    if payloads:
        root.write_many(payloads)
    return len(payloads) // 2


def _has_column(root: StoreRoot, unit: str) -> bool:
    from zagg.hive import artifact

    rel = artifact.column_path(*unit_of(unit))
    return artifact.stamped_attrs(root, rel, "column") is not None


def recorded_ids(root: StoreRoot, sid: str) -> set[str] | None:
    """The granule ids a unit's ``granules.json`` sibling records (None when it is absent
    or unreadable)."""
    try:
        sibling = root.read_json(paths.granules_key(*unit_of(sid)))
    except ValueError:
        return None
    ids = sibling.get("ids") if isinstance(sibling, dict) else None
    return set(bare_granule_ids(ids)) if isinstance(ids, list) else None


def _verdict(root: StoreRoot, sid: str, ids, semantic_hash: str, allow: bool) -> Verdict:
    leaf = paths.leaf_path(*unit_of(sid))
    stamp, problem = read_stamp_or_debris(root, leaf)
    if stamp is None and not problem:
        record = read_stats(root, *unit_of(sid))
        if _recorded_empty(record, semantic_hash, ids):
            return Verdict(sid, CURRENT, "empty", empty=True)
    if stamp is None:
        return Verdict(sid, REWRITE, "torn stamp" if problem else "no stamped leaf")
    versioned = stamp.get("current") is not None
    if versioned:
        own, _ = read_stamp_or_debris(root, data_prefix(leaf, stamp))
        if own is None:
            return Verdict(sid, REWRITE, "its current version is missing or unstamped")
    record = read_stats(root, *unit_of(sid))
    if record is None:
        return Verdict(sid, REWRITE, "no stats sidecar", versioned=versioned)
    if record.get("content_hashes") != stamp.get("content_hashes"):
        return Verdict(
            sid, REWRITE, "the sidecar does not describe the stamped leaf", versioned=versioned
        )
    if record.get("semantic_hash") != semantic_hash:
        return Verdict(sid, REWRITE, "the config changed", versioned=versioned)
    if ids is None:
        return Verdict(sid, REWRITE, "the run does not know its granules", versioned=versioned)
    planned = set(bare_granule_ids(ids))
    recorded_sha = record.get("granules_sha256")
    if recorded_sha == granules_sha256(planned):
        return Verdict(
            sid,
            CURRENT,
            "unchanged",
            versioned=versioned,
            cells_with_data=int(stamp.get("cells_with_data") or 0),
            data=data_prefix(leaf, stamp),
        )
    recorded = recorded_ids(root, sid)
    if recorded is None or recorded_sha is None or granules_sha256(recorded) != recorded_sha:
        # no sibling, or one that disagrees with the sidecar's hash (a torn rewrite)
        return Verdict(sid, REWRITE, "its granules are not recorded", versioned=versioned)
    missing = tuple(sorted(recorded - planned))
    added = tuple(sorted(planned - recorded))
    if missing and not allow:
        return Verdict(
            sid, REFUSED, "contraction" if not added else "mixed", missing, added, versioned
        )
    return Verdict(
        sid,
        REWRITE,
        "contraction allowed" if missing else "new granules",
        missing,
        added,
        versioned,
    )


def vanished(
    root: StoreRoot,
    gated,
    known,
    *,
    shards=None,
    windowed: bool = False,
) -> dict[str, Verdict]:
    """The refused verdicts of the store's units the run did not gate (``gated``: the
    units it planned or found) whose leaves record granules that are not among ``known``
    (every granule the run's input has): their granules disappeared from the input, so no
    point of the run reaches them. Only units of ``shards`` when the run is restricted to
    them; units without a readable granule record are left alone."""
    stored = _stored_units(root, windowed)
    if shards is not None:
        keep = set(shards)
        stored = [u for u in stored if unit_of(u)[0] in keep]
    candidates = sorted(set(stored) - set(gated))
    if not candidates:
        return {}
    known = set(bare_granule_ids(list(known)))
    workers = 1 if root.is_local else _READERS
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        records = list(pool.map(lambda u: recorded_ids(root, u), candidates))
    out = {}
    for unit, recorded in zip(candidates, records, strict=True):
        missing = tuple(sorted((recorded or set()) - known))
        if missing:
            out[unit] = Verdict(unit, REFUSED, GONE, missing)
    return out


def _stored_units(root: StoreRoot, windowed: bool) -> list[str]:
    """The units holding a leaf in the store (a tree zagg writes: one digit a directory):
    the shards its root coverage lists (the leaves walked when it has none), or in a
    windowed store every windowed leaf."""
    if windowed:
        return [
            paths.leaf_stem(sid, label)
            for label, leaves in walk_windows(root).items()
            for _leaf, sid in leaves
        ]
    cov = read_root_coverage(root)
    if cov is not None:
        try:
            return expand_ranges(cov)
        except (KeyError, TypeError, ValueError):
            pass
    return [sid for _leaf, sid in walk_leaves(root)]


def current_records(root: StoreRoot, verdicts: list[Verdict], *, timed: bool) -> list[dict]:
    """The leaf records of the current units that hold a leaf, as the store root's objects
    need them: shard id, window, cells with data, and with ``timed`` (the config declares
    per-centroid times) the leaf's temporal record, read from beside its arrays. A re-run
    merges them with the leaves it wrote, so the root lists every unit, written or not."""
    held = [v for v in verdicts if v.kind == CURRENT and not v.empty]

    def record(v: Verdict) -> dict:
        sid, window = unit_of(v.shard_id)
        temporal = None
        if timed and v.data is not None:
            try:
                temporal = root.read_json(f"{v.data}/{paths.LEAF_TEMPORAL_NAME}")
            except ValueError:
                temporal = None  # unreadable: the root's temporal cache leaves it out
        return {
            "shard_id": sid,
            "window": window,
            "cells_with_data": v.cells_with_data,
            "temporal": temporal if isinstance(temporal, dict) else None,
        }

    workers = 1 if root.is_local or not timed else _READERS
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(record, held))


def touch_current(
    root: StoreRoot, verdicts: list[Verdict], *, column: bool = False
) -> tuple[int, int]:
    """Refresh the modification times of the current leaves' objects (their bytes stay):
    a versioned leaf's pointer and sidecars only (its versions are never touched), an
    unversioned leaf's whole tree and sidecars, and with ``column`` the leaf column's tree
    and its sidecar. On a local store, where no expiry rule runs, the trees' data objects
    keep their times: the Icechunk companion's references into them carry those times as
    checksums, so moving them would make an unchanged re-run re-commit every one. Best
    effort: (touched, failed)."""
    from zagg.hive import artifact

    def tree(rel: str) -> list[str]:
        return [f"{rel}/zarr.json"] if root.is_local else root.list_keys(rel)

    keys = []
    for v in verdicts:
        unit = unit_of(v.shard_id)
        sides = [paths.stats_key(*unit), paths.granules_key(*unit)]
        if v.empty:
            keys += sides
            continue
        if column:
            rel = artifact.column_path(*unit)
            keys += [*tree(rel), artifact.sidecar_key(rel)]
        leaf = paths.leaf_path(*unit)
        if v.versioned:
            keys += [f"{leaf}/zarr.json", *sides]
        else:
            keys += [*tree(leaf), *sides]
    return root.touch(keys)


def touch_root(root: StoreRoot) -> tuple[int, int]:
    """Refresh the store-root objects no leaf owns (manifest, config record, coverage)."""
    return root.touch([paths.MANIFEST_KEY, paths.CONFIG_KEY, paths.ROOT_COVERAGE_KEY])


def refusals_key(run_id: str, at: str) -> str:
    stamp = at.replace("-", "").replace(":", "").split("+")[0]  # 2026-12-01T10:00:00 → …
    return f"refusals_{stamp}Z_{run_id}.json"


def write_refusals(
    root: StoreRoot, run_id: str, semantic_hash: str, refused: list[Verdict], key=None
) -> str | None:
    """The refusal manifest of a run that refused shards: every refused shard and the
    complete list of granule ids its plan dropped. Returns its key (None: nothing refused);
    ``key`` rewrites the run's manifest written before."""
    if not refused:
        return None
    at = now_iso()
    body = {
        "spec": REFUSALS_SPEC,
        "run_id": run_id,
        "written_at": at,
        "semantic_hash": semantic_hash,
        "zagg_version": __version__,
        "refused": [
            {
                "shard_key": unit_of(v.shard_id)[0],
                "window": unit_of(v.shard_id)[1],
                "classification": v.reason,
                "missing_granules": list(v.missing),
                "added_granules": list(v.added),
            }
            for v in sorted(refused, key=lambda v: v.shard_id)
        ],
    }
    key = key or refusals_key(run_id, at)
    root.write_bytes(key, dumps_json(body))
    return key
