"""The store manifest a run writes, from its config: what identifies a store's contents.

Kept apart from the writer so a run can check an existing store before it imports dask,
numba or xarray (and before its cluster starts).
"""

from __future__ import annotations

from zagg import hive
from zagg.hive.paths import CONFIG_KEY

#: data_source keys that say where and how points are fetched, not what they are: a store
#: filled region by region may read granules from another place, with other credentials
#: or another error policy, and its leaves do not change
PACKAGING_SOURCE_KEYS = ("input", "granules", "storage_options", "on_error")


def semantic_core(config_raw: dict, dataset: dict, sharded: bool) -> dict:
    """The part of a run's configuration that decides leaf contents (hashed into the store).

    Included: the data source (what is read and filtered), every aggregation field, the
    product identity and the leaf-shaping ``grid.sharded``. Excluded as packaging: where
    the points are fetched from and how (:data:`PACKAGING_SOURCE_KEYS`, credentials
    included), the orders (recorded and frozen separately), the store location and
    options, memory limits.
    """
    source = config_raw.get("data_source")
    if isinstance(source, dict):
        source = {k: v for k, v in source.items() if k not in PACKAGING_SOURCE_KEYS}
    return {
        "data_source": source,
        "aggregation": _without_overview_deltas(config_raw.get("aggregation")),
        "dataset": dataset,
        "grid": {"sharded": bool(sharded)},
    }


def _without_overview_deltas(aggregation):
    """The aggregation block without the fields' pyramid budgets (a pyramid setting: the
    leaves do not depend on it)."""
    if not isinstance(aggregation, dict) or not isinstance(aggregation.get("variables"), dict):
        return aggregation
    variables = {
        name: (
            {k: v for k, v in spec.items() if k != "overview_delta"}
            if isinstance(spec, dict)
            else spec
        )
        for name, spec in aggregation["variables"].items()
    }
    return {**aggregation, "variables": variables}


def manifest_for(zattrs: dict) -> dict:
    """The store manifest a leaf Dataset's attrs describe (its pyramid declared as the
    config's ``output.pyramid`` says, :mod:`zagg.pyramid.declare`)."""
    grid = zattrs["grid"]
    core = semantic_core(zattrs.get("config") or {}, zattrs["dataset"], grid.get("sharded", True))
    return hive.build_manifest(
        dataset=zattrs["dataset"],
        semantic_hash=hive.semantic_hash(core),
        cell_order=grid["child_order"],
        shard_order=grid["parent_order"],
        temporal=_temporal_block(zattrs),
        **_pyramid_keys(zattrs),
    )


def _temporal_block(zattrs: dict) -> dict | None:
    """The manifest's temporal block of a windowed run (None: unwindowed)."""
    raw = zattrs.get("windowing")
    if raw is None:
        raw = ((zattrs.get("config") or {}).get("output") or {}).get("windowing")
    if raw is None:
        return None
    from zagg.windows.schedule import parse_windowing

    w = parse_windowing(raw, (raw.get("time_field"),) if isinstance(raw, dict) else ())
    return None if w is None else w.manifest_block()


def _pyramid_keys(zattrs: dict) -> dict:
    """The pyramid block and its multiscales mirror; a probe without fields (a run's
    precheck, which compares frozen keys only) gets the declared-off form."""
    if "fields" not in zattrs:
        return {}
    from zagg.pyramid.declare import manifest_keys

    return manifest_keys(zattrs)


_CORE_PATHS = {"dataset": "output.dataset", "grid": "output.grid"}  # core key -> config key
_SHOWN = 5  # differing settings a refusal lists
CONFIG_HEADER = (
    "# The configuration of the zagg run that made this store (credentials masked).\n"
    "# morton_hive.json's semantic_hash digests its data_source (without input, granules,\n"
    "# storage_options and on_error), aggregation, output.dataset and output.grid.sharded;\n"
    "# a run whose config differs there is refused, naming the settings that differ.\n"
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


def _zattrs_core(zattrs: dict) -> dict:
    return semantic_core(
        zattrs.get("config") or {}, zattrs["dataset"], zattrs["grid"].get("sharded", True)
    )


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


def semantic_explainer(root, zattrs: dict):
    """A ``check_manifest`` hook naming the settings where this run's config differs from
    the one the store was made with (as recorded in its ``aggregation.yaml``)."""

    def explain(existing: dict) -> str | None:
        try:
            old = _recorded_core(root, existing)
        except Exception:  # the explanation is best effort: never replace the refusal
            return None
        if old is None:
            return None
        diffs = differences(old, _zattrs_core(zattrs))
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


def check_store(root, zattrs: dict) -> dict | None:
    """Refuse a store made with another configuration (naming what differs) before any
    work; returns its existing manifest."""
    return hive.check_manifest(root, manifest_for(zattrs), semantic_explainer(root, zattrs))


def ensure_store(root, zattrs: dict) -> dict:
    """Check the store as :func:`check_store` does and write its manifest when new or
    changed, then the config record (then, or when missing); returns the manifest."""
    manifest = manifest_for(zattrs)
    written = hive.write_manifest(root, manifest, semantic_explainer(root, zattrs))
    if written or not root.exists(CONFIG_KEY):
        record = config_record(zattrs.get("config") or {})
        if record is not None:
            root.write_bytes(CONFIG_KEY, record)
    return manifest
