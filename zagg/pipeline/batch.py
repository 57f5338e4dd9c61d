"""Region batches: one run per region, one after another, into one store, on one cluster.

Each region's run writes only the shards that cover it (``zagg.run(..., region=...)``), so
a batch of regions builds a store region by region; shards two regions share are written
by each (with the same content: a shard always aggregates all of its points). A region
that fails (a malformed GeoJSON, granules that cannot be read) is reported and the batch
goes on with the next; a store that refuses the config (another config's manifest) stops
the batch at its first region.
Each run writes only the shards that are not already current (:mod:`zagg.pipeline.gate`), so a
batch run again skips the regions it finished, and an interrupted batch resumes where it
stopped; with a catalog, a finished region's granules are not even opened.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RegionResult:
    region: str
    summary: object = None  # the RunSummary, None when the region failed
    error: str | None = None

    @property
    def empty(self) -> bool:
        """The region ran, and no shard of it holds data (written now or current)."""
        return self.summary is not None and not self.summary.cells_with_data

    def line(self) -> str:
        if self.summary is None:
            return f"region {self.region}: failed: {self.error}"
        s = self.summary
        pts = "?" if s.points is None else f"{s.points:,}"
        current = s.units["current"] if getattr(s, "gate", None) else 0
        line = (
            f"region {self.region}: {s.shards:,} shards, {s.leaves_written:,} leaves "
            f"written, {current:,} current, {s.cells_with_data:,} cells with data, "
            f"{pts} points, {s.wall_seconds:.1f} s"
        )
        if self.empty:
            line += (
                f"\nwarning: region {self.region} holds no data: no point of the source "
                "falls in its shards (check that the region is where the source's points "
                "are, or that the catalog lists granules over it)"
            )
        return line


@dataclass
class BatchSummary:
    store: str
    results: list = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failed(self) -> list[RegionResult]:
        return [r for r in self.results if r.summary is None]

    @property
    def empty(self) -> list[RegionResult]:
        """The regions that ran and hold no data."""
        return [r for r in self.results if r.empty]

    def lines(self) -> list[str]:
        done = [r.summary for r in self.results if r.summary is not None]
        return [
            f"batch           {len(self.results)} regions into {self.store}",
            f"regions done    {len(done)}"
            + (
                f", {len(self.failed)} failed ({', '.join(r.region for r in self.failed)})"
                if self.failed
                else ""
            ),
            *(
                [
                    f"without data    {len(self.empty)} region"
                    f"{'' if len(self.empty) == 1 else 's'} "
                    f"({', '.join(r.region for r in self.empty)}): see the warnings above"
                ]
                if self.empty
                else []
            ),
            f"leaves written  {sum(s.leaves_written for s in done):,}",
            f"cells with data {sum(s.cells_with_data for s in done):,} (summed over regions)",
            f"points          {sum(s.points or 0 for s in done):,} (summed over regions)",
            f"wall time       {self.wall_seconds:.1f} s",
        ]


def region_label(region: str) -> str:
    """A region's name in the batch's lines: a file's stem, or a shipped region's name."""
    return Path(region).stem if region.endswith((".geojson", ".json")) else region


def batch(
    config,
    regions,
    *,
    store: str | None = None,
    client=None,
    progress: bool = True,
    out=None,
    granules=None,
    **run_knobs,
) -> BatchSummary:
    """Run ``config`` once per region of ``regions`` (GeoJSON files or shipped region
    names), in order, into ``store`` on ``client`` (a ``distributed.Client``: one cluster
    for every region; None lets each run start its own). Prints a line per region to
    ``out`` (default stdout) as it finishes; returns the :class:`BatchSummary`.
    ``granules`` (a path, URL, glob or list) reads every region from the user's own
    granules (or points file) in place of the location the config names."""
    from zagg.config.model import ConfigError, load_config
    from zagg.pipeline.plan import relocated
    from zagg.pipeline.run import run

    out = out or sys.stdout
    regions = list(regions)
    if not regions:
        raise ConfigError(
            "zagg batch needs at least one region (GeoJSON files or shipped region names)"
        )
    cfg = load_config(config)
    if granules is not None:  # refused once, before any region, when the config has no location
        cfg = relocated(cfg, granules, "--granules")
    store = store or cfg.output.store
    if not store:
        raise ConfigError("config key 'output.store': no store given; set it or pass --store")
    t0 = time.perf_counter()
    summary = BatchSummary(str(store))
    for k, region in enumerate(regions):
        label = region_label(str(region))
        try:
            result = RegionResult(
                label,
                run(
                    cfg,
                    store=store,
                    region=str(region),
                    scheduler=client,
                    progress=progress,
                    **run_knobs,
                ),
            )
        except (ConfigError, OSError, ValueError) as exc:
            if k == 0 and _store_refusal(exc):
                raise  # the store itself is refused: no region can be written
            result = RegionResult(label, error=str(exc))
        summary.results.append(result)
        print(result.line(), file=out, flush=True)
    summary.wall_seconds = time.perf_counter() - t0
    return summary


def _store_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` refuses the store (a manifest of another config, a root that is not
    a store), which every region would hit again."""
    return type(exc).__name__ in {"ManifestConflictError", "StoreRootError"}
