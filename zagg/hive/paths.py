"""Key names inside a morton-hive store, computed and re-validated before any write.

Leaf paths come from :func:`zagg.grid.hive_path` (``{sign+base}/{d1}/…/{dn}/{id}.zarr``,
path_grouping 1) and are checked again against the node invariant here, independently of how
they were built, so a bad id or a drifted path builder fails before a byte is written.
"""

from __future__ import annotations

import re

MANIFEST_KEY = "morton_hive.json"
ROOT_COVERAGE_KEY = "coverage.moc"
CONFIG_KEY = "aggregation.yaml"  # the config of the run that made the store
LEAF_COVERAGE_NAME = "coverage.moc"
LEAF_TEMPORAL_NAME = "temporal.toc"  # the leaf temporal record, beside its arrays
ROOT_COVER_KEY = "coverage.toc"  # the root word-set cover sibling of coverage.moc
STATS_NAME = "stats.json"
GRANULES_NAME = "granules.json"

_BASE_RE = re.compile(r"^-?[1-6]$")
_DIGIT_RE = re.compile(r"^[1-4]$")


def leaf_stem(shard_id: str, window: str | None = None) -> str:
    """The name of a leaf without ``.zarr``: the shard id, or ``{id}_{window}`` for a
    windowed leaf. It is the leaf's key everywhere a run names its units (the window rides
    in the leaf key only through this function)."""
    from zagg import grid

    return grid.leaf_name(shard_id, window)[: -len(".zarr")]


def leaf_path(shard_id: str, window: str | None = None, grouping: int = 1) -> str:
    """The leaf prefix of a shard, validated, e.g. ``-5/1/1/2/3/3/3/-5112333.zarr``, or
    ``…/-5112333_2019.zarr`` for its window ``2019`` (``grouping``: the tree's
    ``path_grouping``, digits per component)."""
    from zagg import grid  # (mortie, which zagg.grid loads, is not needed for the root keys)

    rel = grid.hive_path(shard_id, window, grouping)
    check_leaf_path(rel, grouping)
    return rel


def node_of(shard_id: str) -> str:
    """The digit-tree node holding the shard's leaf and its sidecars."""
    return leaf_path(shard_id).rsplit("/", 1)[0]


def sidecar_name(base: str, window: str | None = None) -> str:
    """A leaf sidecar's name at its node: ``stats.json``, or ``stats_{window}.json`` beside
    a windowed leaf (the names are keyed to the store's spec revision)."""
    if window is None:
        return base
    stem, ext = base.rsplit(".", 1)
    return f"{stem}_{window}.{ext}"


def stats_key(shard_id: str, window: str | None = None) -> str:
    """The leaf's stats sidecar (a sibling object of the ``.zarr`` at its node)."""
    return f"{node_of(shard_id)}/{sidecar_name(STATS_NAME, window)}"


def granules_key(shard_id: str, window: str | None = None) -> str:
    """The leaf's granule-id sibling object."""
    return f"{node_of(shard_id)}/{sidecar_name(GRANULES_NAME, window)}"


def check_leaf_path(rel: str, grouping: int = 1) -> str:
    """Raise unless ``rel`` is a legal leaf path under the node invariant.

    The first component is ``{sign+base}``, every further directory one digit ``1..4``
    (``grouping`` digits on a grouped tree, the last component the remainder), and the
    basename ``{id}.zarr`` (or ``{id}_{window}.zarr``) where ``id`` is exactly the
    concatenated components.
    """
    parts = rel.split("/")
    ok = len(parts) >= 2 and parts[-1].endswith(".zarr")
    if ok:
        head, digits = parts[0], parts[1:-1]
        name, _, window = parts[-1][: -len(".zarr")].partition("_")
        ok = bool(_BASE_RE.match(head)) and all(
            _DIGIT_RE.match(d) if grouping == 1 else _digits_ok(d, grouping) for d in digits
        )
        ok = ok and all(len(d) == grouping for d in digits[:-1])
        ok = ok and name == head + "".join(digits)
    if not ok:
        raise ValueError(
            f"{rel!r} is not a legal hive leaf path: expected '{{sign+base}}/{{d1}}/…/{{id}}.zarr' "
            "with one digit 1-4 per component and the full id as the basename"
        )
    from zagg import grid

    grid.parse_leaf_name(parts[-1])
    return rel


def _digits_ok(component: str, grouping: int) -> bool:
    return 0 < len(component) <= grouping and all(ch in "1234" for ch in component)


def shard_id_of(rel: str) -> str:
    """The shard id of a validated leaf path."""
    return check_leaf_path(rel).rsplit("/", 1)[-1][: -len(".zarr")].partition("_")[0]


def window_of(rel: str) -> str | None:
    """The window label of a validated leaf path (None: an unwindowed leaf)."""
    return check_leaf_path(rel).rsplit("/", 1)[-1][: -len(".zarr")].partition("_")[2] or None
