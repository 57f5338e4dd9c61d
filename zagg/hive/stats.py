"""Per-leaf sidecars beside the ``.zarr``: the stats record and the granule-id sibling.

``stats.json`` (the morton-hive/1 name for an unwindowed leaf) carries the same
``content_hashes`` record as the stamp, ``cells_with_data``, the store's ``semantic_hash``
and ``granules_sha256``, plus telemetry. ``granules.json`` lists the bare granule ids the
leaf was built from. Granule identity is the basename (the part after the last ``/`` of an
``s3://`` or ``https://`` href), so the same granule hashes equal whichever way it was read;
``granules_sha256`` is sha256 over the sorted unique ids joined by ``"\\n"`` (UTF-8).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from zagg.hive import paths
from zagg.hive.storage import StoreRoot, as_root

STATS_SPEC = "zagg-leaf-stats/1"
GRANULES_SPEC = "zagg-granules/1"


def bare_granule_ids(ids: Iterable[str]) -> list[str]:
    """Sorted unique basenames of granule hrefs or ids."""
    out = set()
    for raw in ids:
        name = str(raw).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if not name:
            raise ValueError(f"granule id {raw!r} has an empty basename")
        out.add(name)
    return sorted(out)


def granules_sha256(ids: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(bare_granule_ids(ids)).encode("utf-8")).hexdigest()


def stats_record(
    record: dict,
    *,
    semantic_hash: str | None = None,
    granules_sha: str | None = None,
    extra: dict | None = None,
) -> dict:
    """The sidecar payload built from a :func:`zagg.hive.write_leaf` record."""
    body = {
        "spec": STATS_SPEC,
        "shard_key": record["shard_id"],
        "leaf": record["path"],
        "cells_with_data": record["cells_with_data"],
        "granule_count": record["granule_count"],
        "content_hashes": record["content_hashes"],
        "semantic_hash": semantic_hash,
        "granules_sha256": granules_sha,
        "written_at": record["written_at"],
        "bytes_written": record["bytes_written"],
        "duration_s": record["timings"].get("total_s"),
        "timings": record["timings"],
    }
    if record.get("window") is not None:
        body["window"] = record["window"]
    if extra:
        clash = sorted(set(extra) & set(body))
        if clash:
            raise ValueError(f"extra stats keys would shadow the record: {clash}")
        body.update(extra)
    return body


def write_stats(
    root: str | StoreRoot,
    record: dict,
    *,
    semantic_hash: str | None = None,
    granules_sha: str | None = None,
    extra: dict | None = None,
) -> str:
    """Write the leaf's ``stats.json`` sidecar; returns its key."""
    root = as_root(root)
    key = paths.stats_key(record["shard_id"])
    root.write_json(
        key,
        stats_record(record, semantic_hash=semantic_hash, granules_sha=granules_sha, extra=extra),
    )
    return key


def read_stats(root: str | StoreRoot, shard_id: str, window: str | None = None) -> dict | None:
    """A leaf's stats sidecar, or None when absent (sidecars are telemetry, never truth)."""
    root = as_root(root)
    try:
        payload = root.read_json(paths.stats_key(shard_id, window))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def granules_record(ids: Iterable[str]) -> dict:
    """The ``granules.json`` payload of a leaf built from granules ``ids``."""
    bare = bare_granule_ids(ids)
    return {"spec": GRANULES_SPEC, "ids": bare, "granules_sha256": granules_sha256(bare)}
