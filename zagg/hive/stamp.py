"""The commit stamp (D4): the last write of a leaf, in its root group attrs.

A leaf whose root ``zarr.json`` has no ``morton_hive_commit`` mapping is debris: readers
skip it and writers may clear it. The stamp is read with one GET of that JSON object, no
zarr machinery, so readers and writers agree on completeness cheaply.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from zarr.core.buffer import default_buffer_prototype
from zarr.core.group import GroupMetadata

from zagg.hive.storage import StoreRoot

COMMIT_ATTR = "morton_hive_commit"
ZARR_JSON = "zarr.json"
HIVE_SPEC = "morton-hive/1"
HIVE_SPEC_WINDOWED = "morton-hive/2"  # a time-windowed leaf or store
KNOWN_SPECS = (HIVE_SPEC, HIVE_SPEC_WINDOWED)


def now_iso() -> str:
    """UTC now, whole seconds, ISO 8601 with an explicit ``+00:00`` offset (the one clock)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def build_stamp(
    *,
    cells_with_data: int,
    granule_count: int,
    written_at: str,
    coverage: dict,
    content_hashes: dict,
    window: str | None = None,
    time_range: list[str] | None = None,
) -> dict:
    """The stamp of a leaf (key order as in the spec's examples); a windowed leaf's is
    ``morton-hive/2`` with its ``window`` and the actual ``time_range`` it holds (its first
    and last observation, ISO 8601 UTC)."""
    out = {
        "spec": HIVE_SPEC if window is None else HIVE_SPEC_WINDOWED,
        "complete": True,
        "cells_with_data": int(cells_with_data),
        "granule_count": int(granule_count),
        "written_at": written_at,
        "coverage": coverage,
        "content_hashes": content_hashes,
    }
    if window is not None:
        out["window"] = window
        if time_range is not None:
            out["time_range"] = list(time_range)
    return out


def stamped_group_document(group_doc: bytes, stamp: dict) -> bytes:
    """A root group's ``zarr.json`` with ``stamp`` added to its attributes, serialized by
    zarr's own group metadata (the bytes ``group.attrs.update`` would write)."""
    meta = GroupMetadata.from_dict(json.loads(group_doc))
    sealed = dataclasses.replace(meta, attributes={**meta.attributes, COMMIT_ATTR: stamp})
    return bytes(sealed.to_buffer_dict(default_buffer_prototype())[ZARR_JSON].to_bytes())


def write_stamp(root: StoreRoot, leaf: str, group_doc: bytes, stamp: dict) -> int:
    """Seal the leaf at ``leaf``: one rewrite of its root group metadata (``group_doc``, as
    written) carrying the stamp, with no read and no zarr store machinery; returns the
    object's size."""
    return root.write_bytes(f"{leaf}/{ZARR_JSON}", stamped_group_document(group_doc, stamp))


def read_stamp(root: StoreRoot, leaf: str) -> dict | None:
    """The stamp of the leaf at ``leaf`` (a key prefix), or None for debris or absence.

    A present but unparsable root ``zarr.json`` raises: that leaf claims to exist and
    cannot be half-trusted (readers refuse it). :func:`read_stamp_or_debris` reads it as
    debris instead, for the writer and the store audits.
    """
    meta = root.read_json(f"{leaf}/zarr.json")
    if not isinstance(meta, dict):
        return None
    attrs = meta.get("attributes")
    stamp = attrs.get(COMMIT_ATTR) if isinstance(attrs, dict) else None
    return dict(stamp) if isinstance(stamp, dict) else None


def read_stamp_or_debris(root: StoreRoot, leaf: str) -> tuple[dict | None, str | None]:
    """``(stamp, None)`` as :func:`read_stamp` gives it, or ``(None, why)`` when the leaf's
    root ``zarr.json`` is present but unparsable.

    For writers and store audits, which must not stop at one damaged leaf: the stamp is
    the leaf's last write, so a torn or truncated root object means the stamp did not
    land, and the leaf is debris that the next write of its shard clears. ``why`` names
    the object and the parse error, so the caller can say which leaf it set aside.
    """
    try:
        return read_stamp(root, leaf), None
    except ValueError as exc:
        return None, str(exc)


def check_stamp(stamp: dict, leaf: str) -> dict:
    """Raise on a stamp this reader cannot interpret (unknown spec revision)."""
    spec = stamp.get("spec")
    if spec not in KNOWN_SPECS:
        raise ValueError(
            f"leaf {leaf} is stamped with spec {spec!r}; this reader understands "
            f"{list(KNOWN_SPECS)} only"
        )
    if stamp.get("complete") is not True:
        raise ValueError(f"leaf {leaf} has a commit stamp whose 'complete' is not true")
    return stamp


def data_prefix(leaf: str, stamp: dict) -> str:
    """Where the leaf's arrays live: ``{leaf}/{current}`` on a versioned leaf, else ``leaf``."""
    current = stamp.get("current")
    if current is None:
        return leaf
    if not isinstance(current, str) or not current.startswith("run-") or "/" in current:
        raise ValueError(
            f"leaf {leaf} names an invalid version {current!r}: 'current' must be one path "
            "component starting with 'run-'"
        )
    return f"{leaf}/{current}"
