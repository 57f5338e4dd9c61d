"""Version subgroups of versioned leaves: their names, and collecting superseded ones.

A versioned leaf's root ``zarr.json`` names its ``current`` version, ``run-{run_id}-{attempt}``
(the run's id, then 8 hex characters drawn for each write, so two writers of one leaf never
share a prefix). A replacement writes a new version and moves the pointer; the superseded
versions stay until :func:`collect` removes them; :func:`superseded` measures them.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from zagg.hive import stamp as stamp_
from zagg.hive.storage import StoreRoot

_NAME = re.compile(r"^run-[0-9a-f]{8,64}-[0-9a-f]{8}$")


def new_run_id() -> str:
    return uuid.uuid4().hex


def new_version(run_id: str) -> str:
    """A fresh version name of the run ``run_id`` (a new attempt each call)."""
    return check_name(f"run-{run_id}-{uuid.uuid4().hex[:8]}")


def check_name(version: str) -> str:
    if not isinstance(version, str) or not _NAME.match(version):
        raise ValueError(
            f"{version!r} is not a version name (run-{{run_id}}-{{attempt}}, lowercase hex)"
        )
    return version


def leaf_versions(root: StoreRoot, leaf: str) -> list[str]:
    """The version subgroups under a leaf (any, current or not), sorted by name."""
    dirs, _ = root.list_dir(leaf)
    return [d for d in dirs if d.startswith("run-")]


@dataclass
class Collected:
    """What :func:`collect` removed (or, in a dry run, would remove), leaf by leaf."""

    removed: dict[str, list[str]] = field(default_factory=dict)  # leaf → versions
    kept: int = 0
    protected: int = 0  # superseded versions kept because ``protect`` said so
    skipped: list[str] = field(default_factory=list)  # leaves whose pointer cannot be read

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.removed.values())


def collect(
    root: StoreRoot,
    leaves: list[str],
    *,
    keep: int = 0,
    dry_run: bool = False,
    protect: Callable[[str, str, str | None], bool] | None = None,
) -> Collected:
    """Remove the superseded versions of each leaf: every version subgroup but the one
    its pointer names and the ``keep`` newest others (by their stamp's time), and but
    those ``protect(leaf, version, written_at)`` keeps (a snapshot of the store's
    Icechunk companion still references them). A leaf without a readable pointer is left
    alone."""
    out = Collected()
    for leaf in leaves:
        pointer, problem = stamp_.read_stamp_or_debris(root, leaf)
        current = (pointer or {}).get("current")
        if problem or not current:
            if problem or leaf_versions(root, leaf):
                out.skipped.append(leaf)
            continue
        others = [v for v in leaf_versions(root, leaf) if v != current]
        times = {}
        for v in others:
            own, _ = stamp_.read_stamp_or_debris(root, f"{leaf}/{v}")
            times[v] = (own or {}).get("written_at") or ""  # unstamped: oldest
        others.sort(key=lambda v: (times[v], v), reverse=True)
        doomed = others[keep:]
        if protect is not None:
            held = [v for v in doomed if protect(leaf, v, times[v] or None)]
            doomed = [v for v in doomed if v not in held]
            out.protected += len(held)
        out.kept += 1 + min(keep, len(others))
        if not doomed:
            continue
        out.removed[leaf] = doomed
        if not dry_run:
            for v in doomed:
                root.delete_prefix(f"{leaf}/{v}")
    return out


def superseded(root: StoreRoot, leaves: list[tuple[str, str]]) -> tuple[int, int]:
    """How many superseded versions the ``leaves`` (``(leaf path, current version)``) of a
    local store hold, and their bytes: every version subgroup but the current one (what
    ``zagg gc`` removes, less what it keeps for the Icechunk companion's snapshots). A
    walk of the leaves' folders; an object store is not measured ((0, 0)): it would pay a
    listing a leaf, and a run's writes list none."""
    if not root.is_local:
        return 0, 0
    count = size = 0
    for leaf, current in leaves:
        base = os.path.join(root.path, leaf)
        try:
            names = [e.name for e in os.scandir(base) if e.is_dir() and e.name != current]
        except FileNotFoundError:
            continue
        for name in names:
            if _NAME.match(name):
                count += 1
                size += _bytes_under(os.path.join(base, name))
    return count, size


def _bytes_under(path: str) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(folder, f))
            except FileNotFoundError:  # removed meanwhile (a concurrent gc)
                pass
    return total
