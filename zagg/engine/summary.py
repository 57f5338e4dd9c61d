"""What a run did: the summary :func:`zagg.run` and :func:`zagg.to_hive` return.

A plain record (no dask, no numpy), so a run that the re-run gate leaves nothing to do
reports without loading the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSummary:
    """What a write did: counts, sizes, rates and the per-leaf records."""

    store: str
    run_id: str | None = None  # names the run's leaf versions and refusal manifest
    shards: int = 0
    leaves_written: int = 0
    #: the cells with data of every unit the run covers: the leaves it wrote and those it
    #: found current (a re-run's summary counts what the store holds, not only its writes)
    cells_with_data: int = 0
    cells_written: int | None = None  # of those, in the leaves this run wrote
    points: int | None = None
    granules: int | None = None
    failed_granules: list = field(default_factory=list)
    bytes_written: int = 0
    wall_seconds: float = 0.0
    records: list = field(default_factory=list, repr=False)
    #: the point accounting (read, filtered, invalid_coordinates, outside_shards, keyed)
    point_counts: dict | None = None
    sweep: object = None  # the pyramid sweep chained after the run (zagg.pyramid.sweep)
    icechunk: object = None  # the Icechunk companion's commit (zagg.pyramid.icechunk)
    gate: object = None  # the re-run verdicts (zagg.pipeline.reruns.Gate; None: no gate)
    stages: object = None  # where the tasks' time went (zagg.pipeline.timings.StageTimes)
    #: why and in how many shard groups a run was read (None: one pass; zagg.pipeline.stream)
    shard_groups: str | None = None
    #: the superseded versions the leaves this run wrote now hold: (count, bytes)
    superseded: tuple[int, int] = (0, 0)

    @property
    def points_per_second(self) -> float | None:
        if not self.points or not self.wall_seconds:
            return None
        return self.points / self.wall_seconds

    def _dropped_lines(self) -> list[str]:
        """Where the points that were read but not aggregated went, and a warning when none
        was aggregated (coordinates swapped or out of range, a filter that drops all)."""
        c = self.point_counts or {}
        read = c.get("points_in") or 0
        why = [
            (c.get("invalid_coordinates", 0), "with invalid coordinates (NaN or |latitude| > 90)"),
            (c.get("filtered", 0), "removed by data_source.filters"),
            (c.get("outside_shards", 0), "outside the run's shards"),
            (c.get("outside_windows", 0), "in no time window (output.windowing)"),
        ]
        lines = [f"  dropped       {n:,} {what}" for n, what in why if n]
        if lines:
            lines.insert(0, f"  of read       {read:,}")
        if c.get("read_again"):
            lines.append(
                f"  read twice    {c['read_again']:,} rows where two shard groups meet "
                "(counted above in each)"
            )
        if read and not c.get("keyed"):
            hints = {  # the commonest reason decides what to check first
                "outside_shards": "the region (--region, --bbox or --shards) holds none of "
                "these points",
                "invalid_coordinates": "check data_source.coordinates (latitude and longitude "
                "swapped?)",
                "filtered": "check data_source.filters",
            }
            hint = hints[max(hints, key=lambda k: c.get(k) or 0)]
            lines.append(f"warning: no point was aggregated, so no leaf was written; {hint}")
        elif self.point_counts is not None and not read and self.leaves_written == 0:
            lines.append(
                "warning: no point was read, so no leaf was written; check the "
                "source (granules, catalog and region, or input)"
            )
        return lines

    def _written_cells(self) -> str:
        """How many of the cells are in the leaves written, when some units were current."""
        if self.gate is None or not self.gate.of("current"):
            return ""
        n = self.cells_written or 0
        return f" ({n:,} in the {self.leaves_written:,} leaves written)"

    @property
    def units(self) -> dict[str, int]:
        """Shards by what the run did with them: ``current`` (already up to date, not
        written), ``rewritten`` (leaves written), ``refused`` (a contraction)."""
        g = self.gate
        return {
            "current": len(g.of("current")) if g else 0,
            "rewritten": self.leaves_written,
            "refused": len(g.of("refused")) if g else 0,
        }

    def _gate_lines(self) -> list[str]:
        g = self.gate
        if g is None or not g.verdicts:
            return []
        u = self.units
        lines = [
            f"re-run          {u['current']:,} shards current, {u['rewritten']:,} "
            f"rewritten, {u['refused']:,} refused"
        ]
        if g.objects_touched or g.touch_failures:
            lines.append(
                f"  touched       {g.objects_touched:,} objects of current shards"
                + (f" ({g.touch_failures} failed)" if g.touch_failures else "")
            )
        if g.refusals_key:
            refused = [g.verdicts[s] for s in g.of("refused")]
            missing = sorted({m for v in refused for m in v.missing})
            lines.append(
                f"  refused       their leaves were built from granules this run "
                f"does not have ({', '.join(missing[:5])}"
                f"{', ...' if len(missing) > 5 else ''}; {len(missing)} in all): "
                f"see {g.refusals_key}; pass --allow-contraction to rewrite them"
            )
        return lines

    def _superseded_lines(self) -> list[str]:
        """The earlier versions of the leaves the run rewrote, which stay on disk until
        ``zagg gc`` removes them."""
        count, nbytes = self.superseded
        if not count:
            return []
        return [
            f"superseded      {nbytes:,} bytes ({nbytes / 2**20:.1f} MiB) in {count:,} earlier "
            f"version(s) of the leaves written; zagg gc {self.store} removes them"
        ]

    def lines(self) -> list[str]:
        rate = self.points_per_second
        pts = "unknown" if self.points is None else f"{self.points:,}"
        return [
            f"store           {self.store}",
            *([f"run id          {self.run_id}"] if self.run_id else []),
            f"shards          {self.shards:,} ({self.leaves_written:,} leaves written)",
            *([f"shard groups    {self.shard_groups}"] if self.shard_groups else []),
            f"cells with data {self.cells_with_data:,}" + self._written_cells(),
            f"points          {pts}" + (f" ({rate / 1e6:.2f} M points/s)" if rate else ""),
            *self._dropped_lines(),
            *(
                [f"granules        {self.granules:,} read, {len(self.failed_granules)} failed"]
                if self.granules is not None
                else []
            ),
            *[
                f"  failed        {f.get('granule')}: {f.get('error')}"
                for f in self.failed_granules[:10]
            ],
            *self._gate_lines(),
            f"bytes written   {self.bytes_written:,} ({self.bytes_written / 2**20:.1f} MiB)",
            *self._superseded_lines(),
            f"wall time       {self.wall_seconds:.1f} s",
            *(self.stages.lines() if self.stages is not None else []),
            *(
                ["pyramid sweep:", *("  " + line for line in self.sweep.lines())]
                if self.sweep is not None
                else []
            ),
        ]
