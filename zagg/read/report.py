"""Report lines for ``zagg inspect``: each object the format defines, as the reader sees it.

One function per object, each returning a few human-readable lines and never raising for a
damaged object (the line says what is wrong; ``zagg verify`` is the check): the temporal
record, one leaf column's groups, the multiscales companion, and the ragged arrays of the
store's schema with their revision.
"""

from __future__ import annotations

import warnings

import numpy as np

from zagg.hive import artifact
from zagg.hive.storage import StoreRoot


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"


def has_temporal(root: StoreRoot, manifest: dict) -> bool:
    """Whether a store can carry a temporal record: a windowed store, or a root coverage
    with a temporal section (a store with a timed field, windowed or not)."""
    from zagg.hive.coverage import read_root_coverage

    return manifest.get("temporal") is not None or "temporal" in (read_root_coverage(root) or {})


def temporal_lines(root: StoreRoot, manifest: dict) -> list[str]:
    """The store's temporal record (``open_temporal``) in a few lines."""
    from zagg.read.temporal import open_temporal

    if not has_temporal(root, manifest):
        return ["temporal record: none (no timed field, or no leaf wrote a record)"]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = open_temporal(root)
    except (OSError, ValueError) as exc:
        return [f"temporal record: does not read ({_short(exc)})"]
    if not t.sizes["shards"]:
        return ["temporal record: none (no timed field, or no leaf record or root section)"]
    meta = t.attrs["zagg_temporal"]
    known = t["word"].values != 0
    first = t["time_start"].values[known].min() if known.any() else None
    last = t["time_end"].values[known].max() if known.any() else None
    counted = int(t["counted"].sum())
    out = [
        f"temporal record: {t.sizes['shards']} shards ({counted} counted from leaf records, "
        f"{t.sizes['shards'] - counted} coverage only), observed {first} .. {last}",
        f"  {t.sizes['buckets']} time buckets at order {meta['temporal_order']}, "
        f"{meta['obs_total']} observations counted"
        + (
            ""
            if meta["exact"]
            else f" (a lower bound: {meta['uncounted_shards']} shards uncounted)"
        )
        + f", from {meta['source']}",
    ]
    out += [f"  warning: {c.message}" for c in caught if issubclass(c.category, UserWarning)]
    return out


def column_lines(root: StoreRoot, manifest: dict, shard: str, window: str | None) -> list[str]:
    """One leaf column's groups: order, declared or intermediate, occupied cells."""
    from zagg.pyramid.declare import of_manifest
    from zagg.read.column import committed, groups_of

    decl = of_manifest(manifest)
    if decl is None or not decl.composable():
        return []
    rel = artifact.column_path(shard, window)
    try:
        attrs = committed(root, rel)
    except ValueError as exc:
        return [f"leaf column {rel}: {_short(exc)}"]
    record = attrs[artifact.COLUMN_ATTR]
    parts = []
    for r in groups_of(record):
        g = record["groups"][str(r)]
        kind = "declared" if r in decl.resolutions else "intermediate"
        parts.append(f"{r} ({kind}, mfr {g.get('merges_from_raw')})")
    out = [f"leaf column {rel}: groups " + ", ".join(parts)]
    if record.get("demotions"):
        out.append(f"  demotions: {record['demotions']}")
    return out


def companion_lines(root: StoreRoot, manifest: dict) -> list[str]:
    """The multiscales companion group: its stamp and the members per order."""
    from zagg.pyramid.companion import read_companion

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read_companion(root, manifest)
    except (OSError, ValueError) as exc:
        return [f"multiscales companion: unusable ({_short(exc)})"]
    if got is None:
        why = " (ignored: " + str(caught[0].message) + ")" if caught else ""
        return [f"multiscales companion: absent{why}"]
    stamp = got["stamp"]
    members = {k: len(v.get("members") or {}) for k, v in got["levels"].items()}
    return [
        f"multiscales companion: {stamp.get('spec')}, members from "
        f"{stamp.get('members_source')} of {stamp.get('members_generated_at', 'unknown age')}, "
        f"written {stamp.get('generated_at')}",
        "  members per order: " + ", ".join(f"{k}: {n}" for k, n in members.items()),
    ]


def ragged_lines(root: StoreRoot, manifest: dict, prefix: str) -> list[str]:
    """The ragged arrays of one leaf (the store's schema) and their revision."""
    from zagg.hive.schema import leaf_group

    try:
        _attrs, arrays = leaf_group(root, prefix, str(manifest["cell_order"]), prefix)
    except (OSError, ValueError) as exc:
        return [f"ragged arrays: the schema leaf does not read ({_short(exc)})"]
    found = [
        f"{name} ({a.attrs['ragged']['spec']}, element {a.attrs['ragged']['element']})"
        for name, a in sorted(arrays.items())
        if a.dtype == np.dtype(object) and isinstance(a.attrs.get("ragged"), dict)
    ]
    return ["ragged arrays: " + ("; ".join(found) if found else "none")]
