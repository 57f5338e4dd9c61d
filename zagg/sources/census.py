"""Granules read by shard group: where their rows fall, and the rows each group needs.

A run too large to hold every shard's partial at once is aggregated one group of shards
after another (:mod:`zagg.pipeline.stream`). Both steps here use the granules' own
along-track index (``data_source.read_plan``), never their points:

- :func:`shard_census`: how many rows each shard can expect, by where each segment's
  reference point lies (what sizes the groups);
- :func:`for_groups`: the granules once per group, each with the rows that group's shards
  (and their ``margin`` ring) need, the index read once for all groups.

Both run one task per granule on the current dask scheduler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import dask

from zagg.sources.errors import GranuleError, crashed
from zagg.sources.granules import Scanned
from zagg.sources.readplan import GroupCovers
from zagg.sources.scan import census, granule_id, runs_for_covers


@dataclass(frozen=True)
class Census:
    """Rows per shard word (at ``order``) of scanned granules, and the rows that cannot be
    placed (segments without a finite reference point, rows no segment names)."""

    order: int
    rows: dict[int, int]
    unplaced: int


def shard_census(opened: Scanned, shard_order: int) -> tuple[Census, Scanned]:
    """The census of ``opened``'s granules, and ``opened`` without any whose index cannot
    be read under ``on_error: skip`` (recorded as failed; ``fail`` raises)."""
    results = _each(opened, census, shard_order)
    rows: dict[int, int] = {}
    unplaced = 0
    for res in results.values():
        if isinstance(res, GranuleError):
            continue
        counts, loose = res
        for w, n in counts.items():
            rows[w] = rows.get(w, 0) + n
        unplaced += loose
    return Census(shard_order, rows, unplaced), _kept(opened, results)


def for_groups(opened: Scanned, groups: list, shard_order: int) -> list[Scanned]:
    """``opened`` once per group of shard words, each granule with the rows the group
    needs by the read plan (its shards and the ``margin`` ring around them)."""
    covers = GroupCovers.of(groups, shard_order, opened.source.read_plan.margin)
    # the covers travel as one graph key, not a copy per granule task
    results = _each(opened, runs_for_covers, dask.delayed(covers, traverse=False))
    kept = _kept(opened, results)
    return [
        Scanned(
            opened.source,
            tuple(
                dataclasses.replace(
                    s,
                    groups=tuple(
                        dataclasses.replace(g, runs=runs)
                        for g, runs in zip(s.groups, results[s.href][i], strict=True)
                    ),
                )
                for s in kept.scans
            ),
            kept.failed,
        )
        for i in range(len(groups))
    ]


def _each(opened: Scanned, func, *shared) -> dict:
    """``func(source, href, groups, *shared)`` for every scanned granule (``groups``: its
    ``(group, rows)``), one dask task each: results by href (the :class:`GranuleError` in
    place of a result whose granule could not be read). Tasks carry names and row counts,
    not the scans' chunk indexes."""
    scans = list(opened.scans)
    source = dask.delayed(opened.source, traverse=False)
    tasks = [
        dask.delayed(_caught)(func, source, s.href, [(g.group, g.rows) for g in s.groups], *shared)
        for s in scans
    ]
    out = dask.compute(*tasks) if scans else ()
    return dict(zip([s.href for s in scans], out, strict=True))


def _caught(func, source, href, *args):
    try:
        return func(source, href, *args)
    except GranuleError as exc:
        return exc
    except BaseException as exc:  # a crash a distributed gather could not carry
        if crashed(href, exc) is None:
            raise
        return crashed(href, exc)


def _kept(opened: Scanned, results: dict) -> Scanned:
    """``opened`` without the granules whose task failed: raised under ``on_error:
    fail``, else recorded as failed."""
    failed = list(opened.failed)
    scans = []
    for s in opened.scans:
        res = results[s.href]
        if isinstance(res, GranuleError):
            if opened.source.on_error == "fail":
                raise res
            failed.append({"granule": granule_id(s.href), "error": str(res)})
        else:
            scans.append(s)
    return Scanned(opened.source, tuple(scans), tuple(failed))
