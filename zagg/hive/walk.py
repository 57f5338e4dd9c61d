"""The discovery walk: delimiter listings down the digit tree to every ``{id}.zarr`` leaf.

This is the fallback and verification path (no root MOC, a refresh, a debris audit), never
a per-observation lookup. It yields stamped leaves and debris alike; completeness is the
stamp's job. A ``*.zarr`` entry is a leaf of the node only when its basename is the node's
own id, so overview and column objects (``all.zarr``, ``*.pyramid.zarr``) are skipped.
"""

from __future__ import annotations

import re

from zagg import grid
from zagg.hive.storage import StoreRoot, as_root

_BASE_RE = re.compile(r"^-?[1-6]$")
_DIGIT_RE = re.compile(r"^[1-4]$")


def walk_leaves(
    root: str | StoreRoot, window: str | None = None, grouping: int = 1
) -> list[tuple[str, str]]:
    """``(leaf prefix, shard id)`` of every leaf in the tree, in ascending word order; with
    ``window``, the leaves of that time window (``{id}_{window}.zarr``) instead
    (``grouping``: the tree's ``path_grouping``, digits per directory)."""
    root = as_root(root)
    digit = _digit_re(grouping)
    suffix = ".zarr" if window is None else f"_{window}.zarr"
    found: list[tuple[str, str]] = []
    dirs, _ = root.list_dir("")
    stack = [(d, d) for d in dirs if _BASE_RE.match(d)]
    while stack:
        node, node_id = stack.pop()
        children, files = root.list_dir(node)
        for name in children + files:
            if name == f"{node_id}{suffix}":
                found.append((f"{node}/{name}", node_id))
            elif digit.match(name) and name in children:
                stack.append((f"{node}/{name}", node_id + name))
    if not found:
        return []
    words = grid.from_decimal([sid for _, sid in found])
    order = sorted(range(len(found)), key=lambda i: int(words[i]))
    return [found[i] for i in order]


def walk_windows(root: str | StoreRoot, grouping: int = 1) -> dict[str, list[tuple[str, str]]]:
    """Every windowed leaf of the tree by window label: ``{label: [(leaf prefix, shard
    id), ...]}``, labels ascending (chronological for generative schedules)."""
    root = as_root(root)
    digit = _digit_re(grouping)
    found: dict[str, list[tuple[str, str]]] = {}
    dirs, _ = root.list_dir("")
    stack = [(d, d) for d in dirs if _BASE_RE.match(d)]
    while stack:
        node, node_id = stack.pop()
        children, files = root.list_dir(node)
        for name in children + files:
            if (
                name.startswith(f"{node_id}_")
                and name.endswith(".zarr")
                and not name.endswith(".pyramid.zarr")
            ):
                label = name[len(node_id) + 1 : -len(".zarr")]
                found.setdefault(label, []).append((f"{node}/{name}", node_id))
            elif digit.match(name) and name in children:
                stack.append((f"{node}/{name}", node_id + name))
    out = {}
    for label in sorted(found):
        leaves = found[label]
        words = grid.from_decimal([sid for _, sid in leaves])
        out[label] = [leaves[i] for i in sorted(range(len(leaves)), key=lambda i: int(words[i]))]
    return out


def _digit_re(grouping: int) -> re.Pattern:
    """The directory names below a base cell: one digit, or 1..g on a grouped tree."""
    return _DIGIT_RE if grouping == 1 else re.compile(rf"^[1-4]{{1,{int(grouping)}}}$")


def all_leaves(root: str | StoreRoot) -> list[tuple[str, str]]:
    """Every leaf of the tree, unwindowed ones first, then each window's (labels
    ascending): what store-wide maintenance (version collection) goes over."""
    root = as_root(root)
    return walk_leaves(root) + [leaf for leaves in walk_windows(root).values() for leaf in leaves]
