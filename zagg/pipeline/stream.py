"""A run in shard groups, when the partials of all its shards at once would not fit.

A shard's partial is complete only once the last input chunk reaching it is reduced, and
satellite tracks cross every shard of a region, so a one-pass run holds every shard's
partial until its last granule is read: its memory grows with its points
(:mod:`zagg.engine.memory`). When that estimate passes the run's memory budget, the run
takes a census of its granules' along-track index (rows per shard, nothing of the points
read: :mod:`zagg.sources.census`), cuts its shards in morton order into groups whose
estimates fit, and aggregates and writes one group after another, each group reading
only the rows its shards can reach (``data_source.read_plan``), so memory follows the
budget and the reads stay about those of one pass.

Every point reaches its leaf as in a one-pass run: a group is a span of shard words, and a
point is kept by the group whose span holds its shard; a group reads the segments whose
reference point lies within the read plan's margin of its shards, every segment without
a reference point and every row no segment names. Exact fields are the same bytes; a
t-digest is too while its cells stay loss-free (within ``delta`` values), and beyond
that is merged from other input chunks, as any rechunking would. The pyramid sweep and
the Icechunk commit follow the last group, once.

The budget (``output.memory_budget``, ``zagg run --memory-budget``) is ``auto`` by
default: a quarter of the cluster's memory, and at most :data:`AUTO_PER_THREAD` per
thread, so that a run's peak follows its budget rather than its size.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dask.utils import format_bytes

from zagg.errors import ZaggWarning

#: ``auto``: the share of the cluster's memory a run's partials may take...
AUTO_SHARE = 0.25
#: ...and at most this much per worker thread
AUTO_PER_THREAD = 2**30


def memory_budget(value: int | None, client) -> int:
    """The run's budget in bytes (0: off) from a configured ``value`` (None: ``auto``,
    sized from ``client``'s workers)."""
    if value is not None:
        return int(value)
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    threads = sum(int(w.get("nthreads") or 1) for w in workers) or 1
    memory = sum(int(w.get("memory_limit") or 0) for w in workers)
    cap = AUTO_PER_THREAD * threads
    return min(int(memory * AUTO_SHARE), cap) if memory else cap


@dataclass(frozen=True)
class ShardGroup:
    """One group of a run read in groups: the span of shard words it keeps (``hi`` None:
    no upper end), the shards whose rows it reads, and their census rows and estimated
    held bytes."""

    span: tuple[int, int | None]
    shards: tuple[int, ...]
    rows: int
    held: int


def cut_groups(words, rows, held, budget: int) -> list[ShardGroup]:
    """Shards (words ascending, their census rows and held bytes) cut into consecutive
    groups whose held bytes fit ``budget`` (a shard over it alone makes a group); the
    spans tile every shard word, the first from 0 and the last without end."""
    cuts, total = [0], 0
    for i, h in enumerate(held):
        if total and total + int(h) > budget:
            cuts.append(i)
            total = 0
        total += int(h)
    cuts.append(len(words))
    groups = []
    for k in range(len(cuts) - 1):
        a, b = cuts[k], cuts[k + 1]
        lo = 0 if k == 0 else int(words[a])
        hi = None if b == len(words) else int(words[b])
        groups.append(
            ShardGroup(
                (lo, hi),
                tuple(int(w) for w in words[a:b]),
                int(np.sum(rows[a:b])),
                int(np.sum(held[a:b])),
            )
        )
    return groups


@dataclass(frozen=True)
class Streaming:
    """The shard groups of a run and what each reads (a :class:`zagg.sources.granules.
    Scanned` per group), with the budget and the one-pass estimate that called for them."""

    groups: tuple[ShardGroup, ...]
    scanned: tuple
    budget: int
    estimate: int
    chunk_size: int

    def line(self) -> str:
        return (
            f"{len(self.groups)}: one pass would hold about "
            f"{format_bytes(self.estimate)} of partials, over the memory budget of {format_bytes(self.budget)}"
        )


def plan_groups(cfg, ds, budget: int, shards=None, progress: bool = False) -> Streaming | None:
    """The shard groups of a run over the points ``ds`` (opened from ``cfg``'s granules,
    restricted to ``shards`` when given), or None when one pass fits ``budget`` (0: off),
    or cannot be split (then a warning names the fix). ``progress`` says when the
    granules' index is read for a census."""
    from zagg.engine.memory import held_bytes, held_per
    from zagg.engine.plan import make_plan

    if not budget:
        return None
    plan = make_plan(cfg)
    cell, point = held_per(plan)
    rows = int(ds[cfg.data_source.latitude].size)
    if rows * (cell + point) <= budget:  # every point its own cell: the most it can hold
        return None
    recipe = ds.encoding.get("zagg_granules")
    src = cfg.data_source.granules
    if recipe is None or src is None or src.read_plan is None or "scanned" not in recipe:
        warnings.warn(
            f"this run may hold up to {format_bytes(rows * (cell + point))} of partial aggregates at "
            f"once ({rows:,} rows), over its memory budget of {format_bytes(budget)}; a granule "
            "source with data_source.read_plan runs in shard groups within the budget "
            "(or raise output.memory_budget / --memory-budget)",
            ZaggWarning,
            stacklevel=3,
        )
        return None
    from zagg.sources.census import for_groups, shard_census

    order = cfg.grid.shard_order
    if progress:
        print(
            f"{rows:,} rows may hold up to {format_bytes(rows * (cell + point))} of partials, over the "
            f"memory budget of {format_bytes(budget)}: reading the granules' segment index to cut "
            "the shards into groups",
            file=sys.stderr,
        )
    census, opened = shard_census(recipe["scanned"], order)
    words, counts = _reachable(census, src.read_plan.margin, shards)
    held = held_bytes(plan, counts)
    if int(held.sum()) <= budget:
        return None
    groups = cut_groups(words, counts, held, budget)
    if len(groups) < 2:
        return None
    scanned = for_groups(opened, [g.shards for g in groups], order)
    return Streaming(
        tuple(groups),
        tuple(scanned),
        budget,
        int(held.sum()),
        recipe["kwargs"]["chunk_size"],
    )


def _reachable(census, margin: float, shards) -> tuple[np.ndarray, np.ndarray]:
    """The shard words a run's points can fall in (ascending) and their census rows: the
    run's shards when restricted, else the censused shards and those within ``margin``
    of them (a segment's photons lie near its reference point, which may be across a
    shard edge)."""
    from zagg import grid as G

    if shards is not None:
        words = np.unique(G.as_words(shards))
    else:
        words = np.fromiter(census.rows, np.uint64, len(census.rows))
        if words.size and margin > 0:
            import mortie

            ring = np.asarray(mortie.morton_buffer_meters(np.sort(words), margin), np.uint64)
            words = np.union1d(words, ring)
        words = np.unique(words)
    counts = np.array([census.rows.get(int(w), 0) for w in words], np.int64)
    return words, counts


def run_groups(
    streaming: Streaming, aggregate: Callable, *, progress: bool = False
) -> tuple[list, list[str]]:
    """Aggregate and write each group in turn: ``aggregate(ds, group, earlier)`` with the
    group's points and the records of the leaves written before it; returns the groups'
    summaries and the granules that fed any group. A granule found damaged in a group
    (under ``on_error: skip``) is left out of that group and every later one; the leaves
    already written hold every row of it their shards needed (those reads succeeded)."""
    from zagg.sources.granules import granules_dataset, skip_damaged

    summaries, fed, earlier = [], set(), []
    skipped: list[dict] = []
    n = len(streaming.groups)
    for i, (group, scanned) in enumerate(zip(streaming.groups, streaming.scanned, strict=True)):
        if progress:
            print(
                f"shard group {i + 1} of {n}: {len(group.shards):,} shards, "
                f"{group.rows:,} rows by the census",
                file=sys.stderr,
            )

        def opened(skip, scanned=scanned, before=tuple(skipped)):
            # a group reads short runs of many granules: tasks of up to chunk_size rows
            return granules_dataset(
                _without(scanned, [*before, *skip]), streaming.chunk_size, pack=True
            )

        def use(ds, group=group, before=tuple(earlier)):
            fed.update(ds.attrs.get("granules") or [])
            return aggregate(ds, group, list(before))

        summary = skip_damaged(opened([]), use, reopen=opened)
        known = {f["granule"] for f in skipped}
        skipped += [f for f in summary.failed_granules if f.get("granule") not in known]
        summaries.append(summary)
        earlier += summary.records
    return summaries, sorted(fed)


def _without(scanned, skip: list[dict]):
    """``scanned`` without the granules of ``skip``, recorded as failed."""
    if not skip:
        return scanned
    from zagg.sources.scan import granule_id

    gone = {s["granule"] for s in skip}
    failed = list(scanned.failed)
    failed += [s for s in skip if s["granule"] not in {f["granule"] for f in failed}]
    return dataclasses.replace(
        scanned,
        scans=tuple(s for s in scanned.scans if granule_id(s.href) not in gone),
        failed=tuple(failed),
    )


def rows_read_again(streaming: Streaming) -> int:
    """Rows the groups read more than once: where two groups' rows meet inside one storage
    chunk (or within the read plan's margin), both read it."""
    from zagg.sources.granules import read_blocks

    spans: dict[tuple, list] = {}
    for scanned in streaming.scanned:
        for s in scanned.scans:
            for g in s.groups:
                spans.setdefault((s.href, g.group), []).extend(read_blocks(g, streaming.chunk_size))
    again = 0
    for blocks in spans.values():
        blocks.sort()
        reach = -1  # the furthest row read so far
        for a, b in blocks:
            again += max(0, min(b, reach) - a)
            reach = max(reach, b)
    return again


def merged(summaries: list, streaming: Streaming, granules: list[str], wall: float):
    """One run's summary from its groups': every leaf written, the points kept, the rows
    read (``read_again``: those two groups read, whose tallies count them in each), the
    granules that fed any group, the cells of every unit the run covers."""
    last = summaries[-1]
    counts: dict[str, int] = {}
    for s in summaries:
        for k, v in (s.point_counts or {}).items():
            counts[k] = counts.get(k, 0) + int(v)
    counts["read_again"] = rows_read_again(streaming)
    failed, seen = [], set()
    for s in summaries:
        for f in s.failed_granules:
            if f.get("granule") not in seen:
                seen.add(f.get("granule"))
                failed.append(f)
    return dataclasses.replace(
        last,
        shards=sum(s.shards for s in summaries),
        leaves_written=sum(s.leaves_written for s in summaries),
        cells_written=sum(s.cells_written or 0 for s in summaries),
        points=sum(s.points or 0 for s in summaries),
        granules=len(granules),
        failed_granules=failed,
        bytes_written=sum(s.bytes_written for s in summaries),
        wall_seconds=wall,
        records=[r for s in summaries for r in s.records],
        point_counts=counts,
        shard_groups=streaming.line(),
        superseded=tuple(sum(n) for n in zip(*(s.superseded for s in summaries), strict=True)),
    )
