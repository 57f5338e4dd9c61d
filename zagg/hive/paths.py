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
STATS_NAME = "stats.json"
GRANULES_NAME = "granules.json"

_BASE_RE = re.compile(r"^-?[1-6]$")
_DIGIT_RE = re.compile(r"^[1-4]$")


def leaf_path(shard_id: str) -> str:
    """The leaf prefix of an unwindowed shard, validated, e.g. ``-5/1/1/2/3/3/3/-5112333.zarr``."""
    from zagg import grid  # (mortie, which zagg.grid loads, is not needed for the root keys)

    rel = grid.hive_path(shard_id)
    check_leaf_path(rel)
    return rel


def node_of(shard_id: str) -> str:
    """The digit-tree node holding the shard's leaf and its sidecars."""
    return leaf_path(shard_id).rsplit("/", 1)[0]


def stats_key(shard_id: str) -> str:
    """The leaf's stats sidecar (a sibling object of the ``.zarr`` at its node)."""
    return f"{node_of(shard_id)}/{STATS_NAME}"


def granules_key(shard_id: str) -> str:
    """The leaf's granule-id sibling object."""
    return f"{node_of(shard_id)}/{GRANULES_NAME}"


def check_leaf_path(rel: str) -> str:
    """Raise unless ``rel`` is a legal unwindowed leaf path under the node invariant.

    The first component is ``{sign+base}``, every further directory one digit ``1..4``, and
    the basename ``{id}.zarr`` where ``id`` is exactly the concatenated components.
    """
    parts = rel.split("/")
    ok = len(parts) >= 2 and parts[-1].endswith(".zarr")
    if ok:
        head, digits, name = parts[0], parts[1:-1], parts[-1][: -len(".zarr")]
        ok = bool(_BASE_RE.match(head)) and all(_DIGIT_RE.match(d) for d in digits)
        ok = ok and name == head + "".join(digits)
    if not ok:
        raise ValueError(
            f"{rel!r} is not a legal hive leaf path: expected '{{sign+base}}/{{d1}}/…/{{id}}.zarr' "
            "with one digit 1-4 per component and the full id as the basename"
        )
    from zagg import grid

    grid.validate_id(parts[-1][: -len(".zarr")])
    return rel


def shard_id_of(rel: str) -> str:
    """The shard id of a validated leaf path."""
    return check_leaf_path(rel).rsplit("/", 1)[-1][: -len(".zarr")]
