"""Integrity on read: a leaf's §5 content hashes, checked as its arrays are decoded.

The stamp records, per array (keyed by its path under the leaf's data root, e.g.
``"19/count"``), sha256 over the decoded values (spec §5.2). A verifying read decodes the
whole array it reads, hashes it with :func:`zagg.hive.hashes.array_digest` and compares;
a differing digest, an array the stamp does not record, or a recorded array that is gone
raises :class:`IntegrityError` naming the leaf and the array. The coverage bitmap is not
hashed, so a verifying read also checks it against the data: every cell holding a value
must be one the bitmap lists (a bitmap that left one out would drop it from every read).
"""

from __future__ import annotations

import numpy as np

from zagg.errors import ZaggError
from zagg.hive.hashes import array_digest
from zagg.hive.schema import held as _held


class IntegrityError(ZaggError, ValueError):
    """A leaf whose arrays do not match what its commit stamp recorded."""


def recorded_hashes(stamp: dict, where: str) -> dict[str, str]:
    """The per-array digests a stamp records (structured or flat shape, spec §5.3)."""
    record = stamp.get("content_hashes")
    if isinstance(record, dict) and isinstance(record.get("arrays"), dict):
        return dict(record["arrays"])
    if isinstance(record, dict) and record:
        return {k: v for k, v in record.items() if k != "combined"}
    raise IntegrityError(
        f"leaf {where} records no content hashes in its commit stamp: it cannot be verified "
        "(it is not known to be damaged either); open it with verify=False, or rewrite the "
        "leaf with a current zagg"
    )


def check_key_set(where: str, recorded: dict[str, str], present: set[str]) -> None:
    """Raise on an array present but not recorded, or recorded but missing."""
    extra = sorted(present - set(recorded))
    missing = sorted(set(recorded) - present)
    if extra:
        raise IntegrityError(
            f"leaf {where}: array {extra[0]} is present but its stamp records "
            "no hash for it (a foreign or debris array); rewrite the leaf"
        )
    if missing:
        raise IntegrityError(
            f"leaf {where}: array {missing[0]} is recorded in its stamp but "
            "missing; the leaf is damaged: rewrite it"
        )


def check_digest(where: str, key: str, values: np.ndarray, recorded: dict[str, str]) -> None:
    """Raise unless ``values`` (the whole decoded array) hash as the stamp recorded."""
    expected = recorded.get(key)
    if expected is None:
        raise IntegrityError(
            f"leaf {where}: array {key} is present but its stamp records no "
            "hash for it; rewrite the leaf"
        )
    got = array_digest(values)
    if got != expected:
        raise IntegrityError(
            f"leaf {where}: array {key} does not match its content hash (stored values hash "
            f"to {got[:12]}…, the stamp records {expected[:12]}…): the leaf is damaged; "
            "rewrite it (re-run its shard) or restore it from a copy"
        )


def check_covered(where: str, key: str, values: np.ndarray, fill, occupied) -> None:
    """Raise when a cell of ``values`` (or of a boolean mask of held cells) holds data the
    coverage bitmap does not list."""
    if occupied is None:
        return
    held = values if values.dtype == bool else _held(values, fill)
    listed = np.zeros(values.size, dtype=bool)
    listed[occupied] = True
    stray = np.flatnonzero(held & ~listed)
    if stray.size:
        raise IntegrityError(
            f"leaf {where}: array {key} holds data in cell {int(stray[0])}, which its coverage "
            "bitmap does not list (the bitmap is damaged); rewrite the leaf"
        )
