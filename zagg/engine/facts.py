"""What one aggregation found, beside its store spec: its shards, points and granules.

These facts are learnt while a run goes on (the chunk reductions find the shards and count
the points; a re-run records the granules each unit was planned from), so they travel beside
the frozen :class:`~zagg.config.store.StoreSpec`, never inside it. Together the two make a
Dataset's ``attrs["zagg"]`` block (:func:`zagg_attrs`), and are read back from it
(:meth:`RunFacts.from_attrs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from zagg.grid import LATITUDE_CONVENTION


@dataclass
class RunFacts:
    """The shards an aggregation holds, its point accounting and its granules."""

    shards: list[str] = field(default_factory=list)  # decimal ids, ascending
    observation_dim: str | None = None
    points: dict | None = None  # read, filtered, invalid_coordinates, ..., keyed
    discovery_seconds: float | None = None
    granules: list[str] | None = None  # the granules read (None: granules not tracked)
    #: per unit (its leaf stem) the granule ids its leaf records; None: not known
    shard_granules: dict | None = None
    failed_granules: list = field(default_factory=list)  # granules that failed to read
    shard_cells: list[int] | None = None  # occupied cells per shard, as a Dataset made them

    @property
    def tracks_granules(self) -> bool:
        """Whether leaves record granule ids (then a unit without any records none)."""
        return self.granules is not None or self.shard_granules is not None

    def unit_granules(self) -> dict | None:
        """The granule ids each unit's leaf records, by leaf stem (None: not tracked)."""
        return dict(self.shard_granules or {}) if self.tracks_granules else None

    @classmethod
    def from_attrs(cls, zattrs: Mapping) -> RunFacts:
        """The facts a Dataset's ``attrs["zagg"]`` block records."""
        granules = zattrs.get("granules")
        shard_granules = zattrs.get("shard_granules")
        if shard_granules is None and "shard_granules" in zattrs and granules is None:
            shard_granules = {}  # tracked, none known
        return cls(
            shards=list(zattrs.get("shards") or []),
            observation_dim=zattrs.get("observation_dim"),
            points=zattrs.get("points"),
            discovery_seconds=zattrs.get("discovery_seconds"),
            granules=None if granules is None else list(granules),
            shard_granules=None if shard_granules is None else dict(shard_granules),
            failed_granules=list(zattrs.get("failed_granules") or []),
            shard_cells=zattrs.get("shard_cells"),
        )


def zagg_attrs(spec, facts: RunFacts) -> dict:
    """The ``attrs["zagg"]`` block of a Dataset of ``spec``'s cells: grid, shards, fields,
    product, the point accounting and the config (credentials masked: attrs show in
    notebooks), then the granules when they are tracked."""
    own = spec.attrs()
    out = {
        "grid": own.pop("grid"),
        "shards": list(facts.shards),
        "fields": own.pop("fields"),
        "dataset": own.pop("dataset"),
        "latitude": LATITUDE_CONVENTION,
        "observation_dim": facts.observation_dim,
        "points": facts.points,
        "discovery_seconds": facts.discovery_seconds,
        "config": own.pop("config"),
        **own,
    }
    if facts.granules is not None:
        out["granules"] = list(facts.granules)
    if facts.tracks_granules:
        out["shard_granules"] = facts.shard_granules
    if facts.failed_granules:
        out["failed_granules"] = list(facts.failed_granules)
    return out
