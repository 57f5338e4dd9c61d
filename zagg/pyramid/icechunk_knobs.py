"""``output.icechunk`` parsed: whether the store's Icechunk companion is written, and its
retention and manifest-split knobs (spec §11.4–11.5).

Kept apart from the commit code so loading a config imports neither zarr nor icechunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from zagg.checks.validation import fail

#: the default split: one base manifest per order-2 cell. Icechunk 1 pays, for every
#: reference a session sets, in proportion to the manifests its array is cut into
#: (12·4^split_order per row block), and zagg sets every reference of a run from one
#: client, so zagg cuts coarser than a fleet of committing nodes would.
DEFAULT_SPLIT_ORDER = 2


@dataclass(frozen=True)
class Settings:
    """``output.icechunk``'s layout and history knobs (spec §11.4–11.5)."""

    #: run tags kept by each run's finalize (0: keep every run, expire nothing)
    retain_runs: int = 0
    #: one base manifest per cell of this order (None: commit_order); ratchets coarser only
    split_order: int | None = None
    #: recorded per run; zagg commits from the client, so it only bounds split_order
    commit_order: int | None = None
    #: rows of the window axis per manifest, fixed when the repo is created
    rows_per_manifest: int = 1


_KEYS = ("enabled", "commit", "retain_runs", "split_order", "commit_order", "rows_per_manifest")


def orders(settings: Settings, shard_order: int) -> tuple[int, int]:
    """``(split_order, commit_order)`` the settings ask for: split_order defaults to
    commit_order when that is given (§11.5), else to :data:`DEFAULT_SPLIT_ORDER` (capped
    at the shard order); commit_order, which zagg only records (its client makes every
    commit), to the finer of that default and split_order."""
    split, commit = settings.split_order, settings.commit_order
    if split is None:
        split = min(DEFAULT_SPLIT_ORDER, shard_order) if commit is None else commit
    if commit is None:
        commit = min(DEFAULT_SPLIT_ORDER, split)
    return split, commit


def parse_settings(value, shard_order: int) -> tuple[bool | None, Settings]:
    """``output.icechunk``: absent (on when the package is installed), ``true``, ``false``,
    or a mapping of the knobs (on; ``enabled: false`` turns it off). Refuses what zagg
    does not write: another commit mode than ``leaf``, a split outside
    ``commit_order <= split_order <= shard_order``, fewer than one row per manifest."""
    if value is None or isinstance(value, bool):
        return value, Settings()
    if not isinstance(value, dict):
        fail(
            "output.icechunk",
            f"expected true (commit the store's Icechunk companion), false, or a mapping "
            f"of its settings ({', '.join(_KEYS[1:])}), got {value!r}",
        )
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        fail("output.icechunk", f"unknown key {unknown[0]!r}; the keys are {', '.join(_KEYS)}")
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        fail("output.icechunk.enabled", f"expected true or false, got {enabled!r}")
    mode = value.get("commit", "leaf")
    if mode != "leaf":
        fail(
            "output.icechunk.commit",
            f"{mode!r} is not supported: zagg commits the leaves' references from the "
            "client after the leaves and the overviews' after the sweep ('leaf'); the "
            "per-node 'ladder' of a serverless writer has no place in a dask run",
        )

    def count(key, low, default):
        v = value.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            fail(f"output.icechunk.{key}", f"expected a whole number >= {low}, got {v!r}")
        return v

    s = Settings(
        retain_runs=count("retain_runs", 0, 0),
        split_order=count("split_order", 0, None),
        commit_order=count("commit_order", 0, None),
        rows_per_manifest=count("rows_per_manifest", 1, 1),
    )
    split_order, commit_order = orders(s, shard_order)
    if not commit_order <= split_order <= shard_order:
        fail(
            "output.icechunk.split_order",
            f"needs commit_order <= split_order <= shard_order, got commit_order "
            f"{commit_order}, split_order {split_order} and shard order {shard_order} "
            "(output.grid.parent_order): a base manifest must lie inside one shard's "
            "ancestor at split_order",
        )
    if enabled:
        _require_package()
    return enabled, s


def _require_package() -> None:
    import importlib.util

    if importlib.util.find_spec("icechunk") is None:
        fail(
            "output.icechunk",
            "is on but the icechunk package is not installed; install it "
            "(pip install 'zagg[icechunk]') or set output.icechunk: false",
        )
