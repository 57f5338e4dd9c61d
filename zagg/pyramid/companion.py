"""The multiscales companion group (spec §4.10): the ladder as plain zarr v3 groups.

At the reserved store-root path ``multiscales/`` a stock zarr reader finds one group
document per ladder order (``multiscales/{k}/zarr.json``, ``k = shard_order - 1 .. 0``)
whose ``zagg_multiscales_level`` attrs map every order-``k`` ancestor of the store's
occupied shards to the store-root-relative path of its overview's resolution group
(``{node path}/all.zarr/{cells[0]}``), and a root document carrying the §4.9
``multiscales`` list, the ``zagg_multiscales`` stamp and the children inlined as
consolidated metadata. Metadata only: no arrays, no data. Children are written first and
the root document last (it is the commit marker). References claim ownership, never
presence: an overview not swept yet is "not materialized".

Written for a ``zagg-pyramid/2`` store whose all-time fold exists (unwindowed, or
``all_time``), from the root coverage's shard set; a rewrite that would change nothing
but the clock is skipped. :func:`read_companion` reads it back, strict on its revision.
"""

from __future__ import annotations

import json
import warnings

import zarr

from zagg import grid as _grid
from zagg.errors import ZaggWarning
from zagg.hive import artifact
from zagg.hive import coverage as _coverage
from zagg.hive.stamp import now_iso
from zagg.hive.storage import StoreRoot
from zagg.pyramid.declare import MULTISCALES_SPEC, of_manifest

PREFIX = "multiscales"
STAMP_ATTR = "zagg_multiscales"
LEVEL_ATTR = "zagg_multiscales_level"
WINDOW = "all"


def documents(manifest: dict, envelope: dict | None) -> dict[str, bytes] | None:
    """The companion's objects (key under the store root → bytes), children first and the
    root document last; None when the store carries no companion (not /2, a windowed
    store without its all-time fold, or no usable root coverage to take members from)."""
    decl = of_manifest(manifest)
    if decl is None or (decl.windowed and not decl.all_time) or envelope is None:
        return None
    if envelope.get("order") != decl.shard_order:
        return None
    shards = _coverage.expand_ranges(envelope)
    short = (manifest.get("dataset") or {}).get("short_name")
    stamp = {
        "spec": MULTISCALES_SPEC,
        "window": WINDOW,
        "members_source": "coverage.moc",
        "generated_at": now_iso(),
    }
    if envelope.get("generated_at"):
        stamp["members_generated_at"] = envelope["generated_at"]
    store = zarr.storage.MemoryStore()
    root = zarr.open_group(
        store,
        mode="w",
        zarr_format=3,
        attributes={"multiscales": decl.multiscales(short), STAMP_ATTR: stamp},
    )
    for k, r in decl.ladder():
        nodes = sorted(
            {_node_of(s, k) for s in shards}, key=lambda n: int(_grid.from_decimal([n])[0])
        )
        root.create_group(
            str(k),
            attributes={
                LEVEL_ATTR: {
                    "spec": MULTISCALES_SPEC,
                    "order": k,
                    "cells": [r],
                    "artifact": "overview",
                    "window": WINDOW,
                    "members": {n: f"{artifact.overview_path(n)}/{r}" for n in nodes},
                }
            },
        )
    with warnings.catch_warnings():  # the inline form is the spec's (§4.10), on purpose
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr.consolidate_metadata(store)
    docs = {k: bytes(v.to_bytes()) for k, v in store._store_dict.items()}
    out = {f"{PREFIX}/{k}": v for k, v in sorted(docs.items()) if k != "zarr.json"}
    out[f"{PREFIX}/zarr.json"] = docs["zarr.json"]
    return out


def _node_of(shard_id: str, order: int) -> str:
    sign = 1 if shard_id.startswith("-") else 0
    return shard_id[: sign + 1 + order]


#: rounds of a companion refresh while other runs keep changing the root coverage
ROUNDS = 32


def write_companion(root: StoreRoot, manifest: dict) -> int:
    """Write (or refresh) the companion from the manifest and the root coverage; returns
    the objects written (0: no companion for this store, or the standing one already
    says the same).

    Concurrent runs each refresh it after their own root coverage update: each writes the
    documents of the coverage it read, then reads the coverage again and starts over while
    it changed. A writer's last documents therefore come from a coverage that still stood
    after they were written, and the run whose update made the final coverage writes its
    documents after it: the last word on every document is the final coverage's. A writer
    that sees the coverage change ``ROUNDS`` times leaves the refresh to the runs changing
    it (each of which refreshes after its change), with a warning."""
    written = 0
    for _ in range(ROUNDS):
        envelope = _coverage.read_root_coverage(root)
        docs = documents(manifest, envelope)
        if docs is None:
            return written
        if not _same(read_root_doc(root), json.loads(docs[f"{PREFIX}/zarr.json"])):
            for key, data in docs.items():  # the root document is the last: commit marker
                root.write_bytes(key, data)
            written += len(docs)
        if _members(_coverage.read_root_coverage(root)) == _members(envelope):
            return written
    warnings.warn(
        f"{root.url_of(PREFIX)}: the root coverage kept changing while the multiscales "
        "companion was refreshed; the runs changing it refresh it after them",
        ZaggWarning,
        stacklevel=2,
    )
    return written


def _members(envelope: dict | None):
    """What the companion's documents take from a root coverage."""
    if envelope is None:
        return None
    return envelope.get("order"), envelope.get("ranges"), envelope.get("generated_at")


def _same(standing: dict | None, mine: dict) -> bool:
    """Equal documents but for the write clock."""
    if standing is None:
        return False

    def strip(doc):
        doc = json.loads(json.dumps(doc))
        (doc.get("attributes") or {}).get(STAMP_ATTR, {}).pop("generated_at", None)
        return doc

    return strip(standing) == strip(mine)


def read_root_doc(root: StoreRoot) -> dict | None:
    try:
        doc = root.read_json(f"{PREFIX}/zarr.json")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("node_type") == "group" else None


def read_companion(root: StoreRoot, manifest: dict) -> dict | None:
    """The committed companion as ``{"stamp", "multiscales", "levels": {order: level
    attrs}}`` (None: absent, which is always legal). An unknown revision raises; a level
    whose group disagrees with the manifest's ladder raises too (the manifest wins)."""
    doc = read_root_doc(root)
    if doc is None:
        return None
    where = root.url_of(f"{PREFIX}/zarr.json")
    attrs = doc.get("attributes") or {}
    stamp = attrs.get(STAMP_ATTR)
    if not isinstance(stamp, dict) or stamp.get("spec") != MULTISCALES_SPEC:
        raise ValueError(
            f"{where}: zagg_multiscales spec {(stamp or {}).get('spec')!r} is not "
            f"{MULTISCALES_SPEC!r}, the revision this reader implements"
        )
    decl = of_manifest(manifest)
    if decl is None:
        warnings.warn(
            f"{where}: the store no longer declares zagg-pyramid/2, so its multiscales "
            "companion is stale and is ignored (the manifest wins)",
            ZaggWarning,
            stacklevel=3,
        )
        return None
    ladder = dict(decl.ladder())
    levels = {}
    for k in sorted(ladder, reverse=True):
        try:
            child = root.read_json(f"{PREFIX}/{k}/zarr.json")
        except ValueError:
            child = None
        level = ((child or {}).get("attributes") or {}).get(LEVEL_ATTR)
        if not isinstance(level, dict):
            continue  # an order the companion does not mirror (yet): nothing to find
        if level.get("spec") != MULTISCALES_SPEC:
            raise ValueError(
                f"{root.url_of(f'{PREFIX}/{k}/zarr.json')}: level spec {level.get('spec')!r} "
                f"is not {MULTISCALES_SPEC!r}"
            )
        if level.get("order") != k or list(level.get("cells") or []) != [ladder[k]]:
            raise ValueError(
                f"{root.url_of(f'{PREFIX}/{k}/zarr.json')} mirrors order {level.get('order')} "
                f"cells {level.get('cells')}, but the manifest's ladder has cells "
                f"[{ladder[k]}] at order {k}: the companion is stale; rewrite it with "
                "`python -m zagg sweep`"
            )
        levels[k] = level
    return {"stamp": dict(stamp), "multiscales": attrs.get("multiscales"), "levels": levels}


def refresh_companion(root: StoreRoot, manifest: dict) -> int:
    """:func:`write_companion`, fail-open: the companion is a regenerable mirror, so a
    failure to write it warns and never fails the run or sweep that called it."""
    try:
        return write_companion(root, manifest)
    except (OSError, ValueError) as exc:
        warnings.warn(
            f"{root.url_of(PREFIX)}: the multiscales companion was not written ({exc}); "
            "the store reads the same without it",
            ZaggWarning,
            stacklevel=2,
        )
        return 0
