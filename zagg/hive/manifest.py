"""The store manifest ``morton_hive.json``: built once, written before any leaf, write-once.

A rerun may re-ensure it: when the frozen keys match the existing manifest nothing is
written; when they differ and the store already holds leaves (any ``{sign+base}/`` child at
the root) the write is refused naming the differing keys. A mismatch on an empty root is
an ordinary first write. There is no override: change roots instead.
"""

from __future__ import annotations

import re

from zagg.errors import ZaggError
from zagg.hive.paths import MANIFEST_KEY
from zagg.hive.stamp import HIVE_SPEC, HIVE_SPEC_WINDOWED, now_iso
from zagg.hive.storage import StoreRoot, as_root, dumps_json

FROZEN_KEYS = (
    "spec",
    "dataset",
    "cell_order",
    "shard_order",
    "split_schedule",
    "temporal",
    "semantic_hash",
)
PYRAMID_SPECS = ("zagg-pyramid/1", "zagg-pyramid/2")
PYRAMID_OFF = {"spec": "zagg-pyramid/1", "overview": {"orders": []}}
_BASE_RE = re.compile(r"^-?[1-6]$")


class ManifestConflictError(ZaggError, ValueError):
    """An existing store's manifest disagrees with this run on frozen keys."""


def build_manifest(
    *,
    dataset: dict,
    semantic_hash: str,
    cell_order: int,
    shard_order: int,
    generated_at: str | None = None,
    pyramid: dict | None = None,
    multiscales: list | None = None,
    temporal: dict | None = None,
) -> dict:
    """The manifest of a store; ``pyramid`` is its pyramid block (default: the declared-off
    form) and ``multiscales`` the §4.9 mirror a ``zagg-pyramid/2`` block carries beside it.
    With ``temporal`` (a window schedule, :meth:`zagg.windows.Windowing.manifest_block`)
    the store is windowed, ``morton-hive/2``; its actual time extent is never here."""
    if not isinstance(dataset, dict) or not {"short_name", "version"} <= set(dataset):
        raise ValueError(f"dataset must be {{'short_name', 'version'}}, got {dataset!r}")
    if not isinstance(semantic_hash, str) or not semantic_hash:
        raise ValueError("semantic_hash must be a non-empty string")
    p, c = int(shard_order), int(cell_order)
    if not 0 <= p <= c <= 29:
        raise ValueError(f"need 0 <= shard_order ({p}) <= cell_order ({c}) <= 29")
    if pyramid is None:
        pyramid = {"spec": PYRAMID_OFF["spec"], "overview": {"orders": []}}
    if pyramid.get("spec") not in PYRAMID_SPECS:
        raise ValueError(
            f"pyramid block declares spec {pyramid.get('spec')!r}; known "
            f"revisions are {list(PYRAMID_SPECS)}"
        )
    mirror = {"multiscales": multiscales} if multiscales is not None else {}
    if temporal is not None and not temporal.get("schedule"):
        raise ValueError(f"a temporal block names its schedule, got {temporal!r}")
    windowed = {"temporal": dict(temporal)} if temporal is not None else {}
    return {
        "spec": HIVE_SPEC if temporal is None else HIVE_SPEC_WINDOWED,
        "dataset": {"short_name": str(dataset["short_name"]), "version": str(dataset["version"])},
        "semantic_hash": semantic_hash,
        "cell_order": c,
        "shard_order": p,
        "split_schedule": [1] * p,
        "path_grouping": 1,
        **windowed,
        "pyramid": pyramid,
        **mirror,
        "generated_at": generated_at or now_iso(),
    }


def read_manifest(root: str | StoreRoot) -> dict | None:
    """The store's manifest, or None when there is none; a malformed one raises."""
    root = as_root(root)
    payload = root.read_json(MANIFEST_KEY)
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise ValueError(f"{root.url_of(MANIFEST_KEY)} is not a JSON object")
    spec = payload.get("spec")
    if spec not in (HIVE_SPEC, HIVE_SPEC_WINDOWED):
        raise ValueError(
            f"{root.url_of(MANIFEST_KEY)} declares spec {spec!r}; zagg reads and writes "
            f"{HIVE_SPEC!r} and {HIVE_SPEC_WINDOWED!r} stores only"
        )
    temporal = payload.get("temporal")
    if spec == HIVE_SPEC_WINDOWED and not (isinstance(temporal, dict) and temporal.get("schedule")):
        raise ValueError(
            f"{root.url_of(MANIFEST_KEY)} is {HIVE_SPEC_WINDOWED} but has no "
            "temporal block naming its schedule"
        )
    for key in ("cell_order", "shard_order"):
        if not isinstance(payload.get(key), int):
            raise ValueError(f"{root.url_of(MANIFEST_KEY)}: {key} must be an integer")
    pyramid = payload.get("pyramid")
    if isinstance(pyramid, dict) and pyramid.get("spec") not in PYRAMID_SPECS:
        raise ValueError(
            f"{root.url_of(MANIFEST_KEY)} declares pyramid spec {pyramid.get('spec')!r}; known "
            f"revisions are {list(PYRAMID_SPECS)}"
        )
    grouping = payload.get("path_grouping", 1)
    if not isinstance(grouping, int) or isinstance(grouping, bool) or grouping < 1:
        raise ValueError(
            f"{root.url_of(MANIFEST_KEY)}: path_grouping must be an integer >= 1, got {grouping!r}"
        )
    return payload


def path_grouping(manifest: dict) -> int:
    """Digits per directory of the store's tree (1 unless the manifest says otherwise)."""
    return int(manifest.get("path_grouping", 1))


def frozen_differences(existing: dict, new: dict) -> list[str]:
    """Frozen keys whose values differ (a semantic_hash missing on either side is exempt)."""
    diffs = []
    for key in FROZEN_KEYS:
        if key == "semantic_hash" and (key not in existing or key not in new):
            continue
        if existing.get(key) != new.get(key):
            diffs.append(key)
    return diffs


def has_leaves(root: StoreRoot) -> list[str]:
    """The ``{sign+base}/`` children at the root (one delimiter listing)."""
    dirs, _files = root.list_dir("")
    return [d for d in dirs if _BASE_RE.match(d)]


def check_manifest(root: str | StoreRoot, manifest: dict, explain=None) -> dict | None:
    """Read-only precheck before any leaf is written; returns the existing manifest.

    Raises :class:`ManifestConflictError` when frozen keys differ and leaves exist. When the
    semantic hashes differ, ``explain(existing)`` (if given) may return the sentence that
    says which settings differ, in place of the generic one.
    """
    root = as_root(root)
    try:
        existing = read_manifest(root)
    except ValueError as exc:
        if has_leaves(root):
            raise ManifestConflictError(
                f"the existing manifest at {root.url_of(MANIFEST_KEY)} is unreadable ({exc}) and "
                "the store holds leaves; clear the root or write to a new one"
            ) from exc
        return None
    if existing is None:
        return None
    if path_grouping(existing) != path_grouping(manifest):
        raise ManifestConflictError(
            f"refusing to write into {root.url}: its tree groups {path_grouping(existing)} "
            f"digits per directory (path_grouping), this run writes "
            f"{path_grouping(manifest)}; zagg reads such a store but writes one-digit trees "
            "only: write to a new root"
        )
    diffs = frozen_differences(existing, manifest)
    if diffs:
        children = has_leaves(root)
        if children:
            detail = ", ".join(
                f"{k} (existing {existing.get(k)!r}, new {manifest.get(k)!r})" for k in diffs
            )
            meaning = ""
            if "semantic_hash" in diffs:
                said = explain(existing) if explain is not None else None
                meaning = " " + (
                    said
                    or (
                        "The semantic hash covers the config's data_source, aggregation, "
                        "output.dataset and output.grid.sharded: one of them differs from the "
                        "config this store was made with."
                    )
                )
            raise ManifestConflictError(
                f"refusing to write leaves into {root.url}: frozen manifest keys differ from the "
                f"existing store: {detail}.{meaning} The store already holds leaves under "
                f"{children}; clear the root or choose a new one"
            )
    return existing


def write_manifest(root: str | StoreRoot, manifest: dict, explain=None) -> bool:
    """Ensure the manifest: no write when the frozen keys already match; returns True if
    written. A new store's manifest is created only if absent (two first runs at once:
    one creates it, the other then checks against it as any later run does); a differing
    one on a root without leaves is replaced by a compare-and-swap, so a standing
    manifest's recorded actuals are never overwritten by a stale copy."""
    root = as_root(root)
    existing = check_manifest(root, manifest, explain)
    if existing is not None and not frozen_differences(existing, manifest):
        return False
    if existing is None and root.create(MANIFEST_KEY, dumps_json(manifest)):
        return True
    existing = check_manifest(root, manifest, explain)  # what stands now refuses, or not
    if existing is not None and not frozen_differences(existing, manifest):
        return False

    def replace(current):
        if isinstance(current, dict) and not frozen_differences(current, manifest):
            return None
        return manifest

    left = root.update_json(MANIFEST_KEY, replace, replace_unreadable=True)
    return left is manifest


def update_manifest(root: str | StoreRoot, change) -> dict | None:
    """Change the standing manifest in place with ``change(manifest) -> bool`` (whether it
    changed anything), as one compare-and-swap: a concurrent writer's change is re-read and
    ``change`` applied again, so neither is lost. Returns the manifest written, or None
    when there is none or nothing changed."""
    root = as_root(root)
    last: dict = {}

    def apply(current):  # called again on each lost race: only its last answer counts
        last["written"] = current if isinstance(current, dict) and change(current) else None
        return last["written"]

    root.update_json(MANIFEST_KEY, apply)
    return last.get("written")
