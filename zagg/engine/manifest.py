"""The store manifest a run writes, from its store spec: what identifies a store's contents.

Kept apart from the writer so a run can check an existing store before it imports dask,
numba or xarray (and before its cluster starts).
"""

from __future__ import annotations

from zagg import hive
from zagg.config.store import StoreSpec, semantic_core
from zagg.hive.paths import CONFIG_KEY
from zagg.pyramid.declare import manifest_keys


def manifest_for(spec: StoreSpec) -> dict:
    """The store manifest of a :class:`~zagg.config.store.StoreSpec`: identity, orders,
    window schedule, the pyramid's block and its multiscales mirror."""
    return hive.build_manifest(
        dataset=dict(spec.dataset),
        semantic_hash=spec.semantic_hash,
        cell_order=spec.grid.cell_order,
        shard_order=spec.grid.shard_order,
        temporal=None if spec.windowing is None else spec.windowing.manifest_block(),
        **manifest_keys(spec.pyramid, spec.dataset.get("short_name")),
    )


_CORE_PATHS = {"dataset": "output.dataset", "grid": "output.grid"}  # core key -> config key
_SHOWN = 5  # differing settings a refusal lists
CONFIG_HEADER = (
    "# The configuration of the zagg run that made this store (credentials masked).\n"
    "# morton_hive.json's semantic_hash digests its data_source (without input, granules,\n"
    "# storage_options, on_error, read_plan and reads), aggregation, output.dataset and\n"
    "# output.grid.sharded; a run whose config differs there is refused, naming the\n"
    "# settings that differ.\n"
)


def config_record(config: dict) -> bytes | None:
    """The ``aggregation.yaml`` a run leaves at the store root: its config as YAML (already
    redacted by the caller), or None when the config holds values YAML cannot write."""
    import yaml

    try:
        text = yaml.safe_dump(_plain(config), sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return None
    return (CONFIG_HEADER + text).encode("utf-8")


def _plain(value):
    """``value`` with mappings as dicts, tuples as lists and numpy scalars as Python ones."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _recorded_core(root, existing: dict) -> dict | None:
    """The semantic core of the config recorded at the store root, when that record is the
    one the store's manifest was made from (its core hashes to the manifest's hash)."""
    import yaml

    data = root.read_bytes(CONFIG_KEY)
    if data is None:
        return None
    try:
        config = yaml.safe_load(data)
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict) or not isinstance(existing.get("dataset"), dict):
        return None
    output = config.get("output")
    grid = output.get("grid") if isinstance(output, dict) else None
    sharded = grid.get("sharded", True) if isinstance(grid, dict) else True
    core = semantic_core(config, existing["dataset"], sharded)
    try:
        same = hive.semantic_hash(core) == existing.get("semantic_hash")
    except ValueError:
        return None
    return core if same else None


def differences(old, new, path: str = "") -> list[tuple[str, object, object]]:
    """``(key path, old, new)`` for every setting where two configs' cores differ (a whole
    list when any of its items differ; ``...`` stands for an absent key)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else _CORE_PATHS.get(key, str(key))
            out += differences(old.get(key, ...), new.get(key, ...), sub)
        return out
    return [] if _plain(old) == _plain(new) else [(path, old, new)]


def _shown(value) -> str:
    import reprlib

    return "absent" if value is ... else reprlib.repr(value)


def semantic_explainer(root, spec: StoreSpec):
    """A ``check_manifest`` hook naming the settings where this run's config differs from
    the one the store was made with (as recorded in its ``aggregation.yaml``)."""

    def explain(existing: dict) -> str | None:
        try:
            old = _recorded_core(root, existing)
        except Exception:  # the explanation is best effort: never replace the refusal
            return None
        if old is None:
            return None
        diffs = differences(old, spec.core)
        if not diffs:
            return None
        listed = "; ".join(
            f"{p} (existing {_shown(a)}, new {_shown(b)})" for p, a, b in diffs[:_SHOWN]
        )
        more = f"; and {len(diffs) - _SHOWN} more" if len(diffs) > _SHOWN else ""
        return (
            f"This config differs from the one the store was made with (its "
            f"{CONFIG_KEY}) at {listed}{more}."
        )

    return explain


def check_store(root, spec: StoreSpec) -> dict | None:
    """Refuse a store made with another configuration (naming what differs) before any
    work; returns its existing manifest."""
    return hive.check_manifest(root, manifest_for(spec), semantic_explainer(root, spec))


def ensure_store(root, spec: StoreSpec) -> dict:
    """Check the store as :func:`check_store` does and write its manifest when new or
    changed, then the config record (then, or when missing); returns the manifest."""
    manifest = manifest_for(spec)
    written = hive.write_manifest(root, manifest, semantic_explainer(root, spec))
    if written or not root.exists(CONFIG_KEY):
        record = config_record(spec.record)
        if record is not None and written:
            root.write_bytes(CONFIG_KEY, record)
        elif record is not None:  # missing: only if no concurrent run records its own first
            root.create(CONFIG_KEY, record)
    return manifest
