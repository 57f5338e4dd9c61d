"""Where a run's time went: its tasks' own start and stop times, grouped by stage.

The scheduler records every task's compute and transfer intervals (distributed's task
stream); :class:`TaskTimes` collects them for the length of a run and :func:`stages` adds
them up by what the task does, from the key names the run gives its tasks:

- ``read``: the input's own tasks (granule reads, the synthetic generator, array loads);
- ``key + reduce``: ``reduce-chunk``, keying each input chunk with mortie and reducing it
  (input reads that dask fused into the same task are inside this figure);
- ``combine``: cutting chunk partials by shard and merging them (``piece``, ``combine``,
  ``shard-cells``);
- ``write``: ``write-leaf`` (and the ``encode-leaf`` tasks of big leaves); the leaf
  records' own timings split it into the leaf's objects (arrays, coverage, stamp) and its
  pyramid column, the rest being the task's set-up (the first tasks of a fresh environment
  compile numba kernels here);
- ``pyramid``: the sweep's folds, when one is chained.

Seconds are summed over tasks, so on several threads they add up to more than the wall
time.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field

from zagg.stages import ORDER, stage_of


@dataclass
class StageTimes:
    """Seconds of task compute per stage, transfers, and the write's split."""

    compute: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)  # tasks per stage
    transfer: float = 0.0
    tasks: int = 0
    leaf_objects: float | None = None  # the write records' own total_s and encoded_s
    leaf_columns: float | None = None  # ... and their column_s
    threads: int | None = None

    @property
    def total(self) -> float:
        return sum(self.compute.values())

    def lines(self) -> list[str]:
        total = self.total or 1.0
        on = f" on {self.threads} threads" if self.threads else ""
        out = [f"time in tasks   {self.total:.1f} s{on} ({self.tasks:,} tasks)"]
        for stage in ORDER:
            if stage not in self.compute:
                continue
            s = self.compute[stage]
            line = (
                f"  {stage:<13} {s:8.1f} s {100 * s / total:5.1f} % "
                f"{self.counts.get(stage, 0):>7,} tasks"
            )
            if stage == "write" and self.leaf_objects is not None:
                rest = max(0.0, s - self.leaf_objects - (self.leaf_columns or 0.0))
                line += (
                    f"  (leaf objects {self.leaf_objects:.1f} s, columns "
                    f"{self.leaf_columns or 0.0:.1f} s, task set-up {rest:.1f} s)"
                )
            out.append(line)
        if self.transfer:
            out.append(f"  {'transfers':<13} {self.transfer:8.1f} s")
        return out


def stages(
    task_stream: list[dict], records: list[dict] | None = None, threads: int | None = None
) -> StageTimes:
    """Add up task-stream entries (``distributed.get_task_stream`` data) by stage; the
    write's split comes from the leaf ``records`` (their ``timings``)."""
    from distributed.utils import key_split

    compute: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    transfer = 0.0
    for entry in task_stream:
        stage = stage_of(key_split(entry["key"]))
        counts[stage] += 1
        for ss in entry.get("startstops", ()):
            seconds = float(ss["stop"]) - float(ss["start"])
            if ss["action"] == "compute":
                compute[stage] += seconds
            elif ss["action"] == "transfer":
                transfer += seconds
    out = StageTimes(dict(compute), dict(counts), transfer, len(task_stream), threads=threads)
    timed = [r["timings"] for r in records or () if r and r.get("timings")]
    if timed:
        out.leaf_objects = sum(
            float(t.get("total_s") or 0.0) + float(t.get("encoded_s") or 0.0) for t in timed
        )
        out.leaf_columns = sum(float(t.get("column_s") or 0.0) for t in timed)
    return out


class TaskTimes(contextlib.AbstractContextManager):
    """Record the task stream of ``client`` from the start of the block; :meth:`stages`
    (inside the block or after it) says where the time went since then."""

    def __init__(self, client):
        self.client = client
        self.start = None

    def __enter__(self):
        from time import time

        self.start = time()
        self.client.get_task_stream(start=self.start)  # the scheduler starts recording
        return self

    def __exit__(self, *exc):
        return False

    def stages(self, records=None) -> StageTimes:
        data = self.client.get_task_stream(start=self.start)
        info = self.client.scheduler_info(n_workers=-1)
        threads = sum(w.get("nthreads", 0) for w in info.get("workers", {}).values())
        return stages(data, records, threads or None)
