"""Where a test finds a leaf's objects, whether the leaf is versioned or not."""

import re
from pathlib import Path

from zagg import hive

_VERSION = re.compile(r"/run-[0-9a-f]+-[0-9a-f]{8}(?=/|$)")


def data_dir(store, leaf) -> Path:
    """The directory holding a leaf's arrays: its current version's on a versioned leaf."""
    stamp = hive.read_stamp(hive.StoreRoot(store), str(leaf))
    current = (stamp or {}).get("current")
    return Path(store) / leaf / current if current else Path(store) / leaf


def without_versions(key: str) -> str:
    """``key`` with any version component (``run-{run_id}-{attempt}``) taken out: stores
    written by different runs compare object for object."""
    return _VERSION.sub("", key)
