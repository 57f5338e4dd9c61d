"""The store spec: what a config says about the store it writes, gathered once.

A run's config is parsed once (:mod:`zagg.config.model`); :meth:`StoreSpec.of` then gathers,
once, what every writer of its store reads: the grid, the per-array fields block, the
product's identity, the window schedule, the pyramid declaration, the semantic core and
hash, and the config record (credentials masked). The spec travels to the leaf writer, the
manifest, the pyramid's columns and the re-run gate; nothing parses the config again.

A Dataset from ``zagg.aggregate`` carries the spec in its ``attrs["zagg"]`` block
(:meth:`StoreSpec.attrs`, beside the run's own facts), and ``zagg.to_hive`` rebuilds it from
those attrs once (:meth:`StoreSpec.from_attrs`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from zagg.checks.credentials import redacted
from zagg.checks.validation import ConfigError
from zagg.grid import Grid
from zagg.pyramid import declare

#: data_source keys that say where and how points are fetched, not what they are: a store
#: filled region by region may read granules from another place, with other credentials,
#: another error policy, read plan or fetch settings, and its leaves do not change
PACKAGING_SOURCE_KEYS = ("input", "granules", "storage_options", "on_error", "read_plan", "reads")
#: the packaging keys of stores made before ``read_plan`` and ``reads`` were packaging:
#: such a store keeps the hash its config had then (:meth:`StoreSpec.matching`)
EARLIER_PACKAGING_SOURCE_KEYS = ("input", "granules", "storage_options", "on_error")


@dataclass(frozen=True)
class StoreSpec:
    """What identifies and shapes a store, from one config (read-only; ``fields`` and
    ``record`` are copies the spec owns)."""

    grid: Grid
    #: every stored array (each field, then its located and timed siblings):
    #: ``{name: {function, source, kind, dtype, fill_value, params, pyramid_class, ...}}``
    fields: Mapping[str, Mapping] = field(repr=False)
    dataset: Mapping[str, str]  # {"short_name", "version"}
    #: the config mapping, credentials masked (the store's aggregation.yaml)
    record: Mapping = field(repr=False)
    windowing: object = None  # the zagg.windows.Windowing (None: one leaf per shard)
    pyramid: declare.Declaration | None = None  # None: declared off
    leaf_versions: bool = True  # each leaf write makes a new version (output.leaf_versions)
    #: the data_source keys the semantic core leaves out
    packaging: tuple[str, ...] = PACKAGING_SOURCE_KEYS

    @classmethod
    def of(cls, config) -> StoreSpec:
        """The spec of a loaded :class:`~zagg.config.model.Config`."""
        out = config.output
        fields = fields_block(config)
        pyramid = declare.declared(
            config.grid,
            out.pyramid,
            fields,
            out.overview_delta,
            windowed=out.windowing is not None,
        )
        return cls(
            config.grid,
            fields,
            {"short_name": out.short_name, "version": out.version},
            redacted(config.raw),
            out.windowing,
            pyramid,
            out.leaf_versions,
        )

    @classmethod
    def from_attrs(cls, zattrs: Mapping) -> StoreSpec:
        """The spec a Dataset's ``attrs["zagg"]`` block serializes (:meth:`attrs`)."""
        record = copy.deepcopy(dict(zattrs.get("config") or {}))
        output = record.get("output") or {}
        grid = Grid.from_dict(zattrs["grid"])
        fields = copy.deepcopy(dict(zattrs["fields"]))
        windowing = None
        raw = zattrs.get("windowing")
        if raw is not None:
            from zagg.windows.schedule import parse_windowing

            windowing = parse_windowing(raw, (raw.get("time_field"),))
        try:
            pyramid = declare.declaration(
                grid, fields, output.get("pyramid"), windowed=windowing is not None
            )
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"config key 'output.pyramid': cannot resolve it ({exc})") from exc
        return cls(
            grid,
            fields,
            dict(zattrs["dataset"]),
            record,
            windowing,
            pyramid,
            bool(output.get("leaf_versions", True)),
        )

    def attrs(self) -> dict:
        """The spec's part of a Dataset's ``attrs["zagg"]`` block (fresh plain copies)."""
        return {
            "grid": self.grid.as_dict(),
            "fields": copy.deepcopy(dict(self.fields)),
            "dataset": dict(self.dataset),
            "config": copy.deepcopy(dict(self.record)),
            **({"windowing": self.windowing.as_dict()} if self.windowing is not None else {}),
        }

    @property
    def arrays(self) -> dict:
        """Every stored array's ``(kind, dtype, fill)``: fields, then their siblings."""
        return {n: (f["kind"], f["dtype"], f["fill_value"]) for n, f in self.fields.items()}

    @property
    def timed(self) -> tuple[str, ...]:
        """The fields that keep per-centroid times (their leaves carry temporal records)."""
        return tuple(sorted(f["times_of"] for f in self.fields.values() if f.get("times_of")))

    @cached_property
    def core(self) -> dict:
        """The semantic core of the store's config (:func:`semantic_core`)."""
        return semantic_core(
            dict(self.record), dict(self.dataset), self.grid.sharded, self.packaging
        )

    @cached_property
    def semantic_hash(self) -> str:
        """The digest the manifest records and every leaf's identity carries."""
        from zagg.hive.semantic import semantic_hash

        return semantic_hash(self.core)

    def matching(self, recorded: str | None) -> StoreSpec:
        """This spec as the store holding ``recorded`` (its manifest's semantic hash) was
        made: a store made while ``data_source.read_plan`` and ``reads`` were part of the
        hash keeps the hash this config had then, so it stays the same store."""
        if recorded is None or recorded == self.semantic_hash:
            return self
        earlier = dataclasses.replace(self, packaging=EARLIER_PACKAGING_SOURCE_KEYS)
        return earlier if earlier.semantic_hash == recorded else self


def semantic_core(
    config_raw: dict, dataset: dict, sharded: bool, packaging=PACKAGING_SOURCE_KEYS
) -> dict:
    """The part of a run's configuration that decides leaf contents (hashed into the store).

    Included: the data source (what is read and filtered), every aggregation field, the
    product identity and the leaf-shaping ``grid.sharded``. Excluded as packaging: where
    the points are fetched from and how (:data:`PACKAGING_SOURCE_KEYS`, credentials
    included), the orders (recorded and frozen separately), the store location and
    options, memory limits, the fields' pyramid budgets.
    """
    source = config_raw.get("data_source")
    if isinstance(source, dict):
        source = {k: v for k, v in source.items() if k not in packaging}
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


def fields_block(config) -> dict:
    """The per-array declaration the writer reads: every field, then located siblings."""
    out = {}
    for f in config.fields.values():
        out[f.name] = {
            "function": f.function,
            "source": f.source,
            "kind": f.kind,
            "dtype": f.dtype,
            "fill_value": f.fill_value,
            "params": dict(f.params),
            "pyramid_class": f.reducer.pyramid_class,
        }
        if f.where:
            out[f.name]["where"] = f.where
        if f.overview_delta is not None:
            out[f.name]["overview_delta"] = f.overview_delta
        if f.located:
            out[f.locations_name] = _sibling(f, locations_of=f.name)
        if f.timed:
            out[f.times_name] = _sibling(f, times_of=f.name)
    return out


def _sibling(f, **of) -> dict:
    """The declaration of a field's located or timed sibling (ragged uint64 words)."""
    return {
        "function": None,
        "source": f.source,
        "kind": "ragged",
        "dtype": "uint64",
        "fill_value": b"",
        "params": {},
        "pyramid_class": "approximate",
        **of,
    }


def array_attrs(config) -> dict:
    """Every stored array's zarr attrs, as the config declares them (fields, then their
    located and timed siblings)."""
    attrs = {}
    for f in config.fields.values():
        attrs[f.name] = f.array_attrs()
        if f.located:
            attrs[f.locations_name] = f.locations_attrs()
        if f.timed:
            attrs[f.times_name] = f.times_attrs()
    return attrs
