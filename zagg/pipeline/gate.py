"""The re-run gate of one run: which of its shards it writes, decided before it reads
when it can.

Each shard is a unit with an identity: the store's semantic hash and the unit's planned
granule ids (:mod:`zagg.pipeline.reruns` holds the verdicts). Where a run's plan comes from:

- **a catalog** (``data_source.granules`` names one), or any source whose registered record
  gives ``footprints`` (:mod:`zagg.sources.record`): each granule's footprint says which
  shards it touches, so every unit's plan is known before any granule is opened. The gate
  runs first and the run reads only the granules of the units it must rewrite; an
  unchanged re-run opens no granule at all. Leaves record their planned ids.
- **any other source**: which shards a granule feeds is known only once it is read, so
  the run reads and reduces its points, then gates the shards it found (their planned ids
  are the granules that fed them, plus those the leaf recorded that the run read again)
  and writes only the units that are not current. The source's record names the read
  units (its ``units``): a directory or list of granules names its granules by file name,
  the built-in generator is one granule ``synthetic`` (its parameters are in the semantic
  hash), an input file is its file name; a Dataset passed in without granule ids has no
  identity and is always rewritten.

``overwrite`` bypasses the gate (every unit rewritten, contraction included). A run's
plan (:mod:`zagg.pipeline.plan`) classifies a catalog's units without acting on them; the
executor applies the verdicts (:meth:`RunGate.apply`) and hands the aggregation the hooks
below (:func:`selector`, :func:`record_granules`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zagg.config.store import StoreSpec
from zagg.hive.paths import leaf_stem
from zagg.hive.storage import StoreRoot
from zagg.pipeline.reruns import (
    CURRENT,
    REFUSED,
    REWRITE,
    Gate,
    Verdict,
    classify,
    current_records,
    recorded_ids,
    touch_current,
    touch_root,
    vanished,
    write_empty,
    write_refusals,
)
from zagg.sources import builtin, registry

SYNTHETIC_ID = builtin.SYNTHETIC_ID


@dataclass
class RunGate:
    """The gate of one run: its store, the store spec (whose semantic hash is half of each
    unit's identity), and what it has decided so far."""

    root: StoreRoot
    spec: StoreSpec
    run_id: str
    allow_contraction: bool = False
    gate: Gate | None = None

    @property
    def column(self) -> bool:
        """Whether the config declares leaf columns: a unit needs its column too."""
        return self.spec.pyramid is not None

    def classify(self, planned: dict[str, list[str] | None]) -> dict[str, Verdict]:
        """The verdict of each ``planned`` unit (reading its leaf's records, writing
        nothing)."""
        return classify(
            self.root,
            planned,
            self.spec.semantic_hash,
            allow_contraction=self.allow_contraction,
            column=self.column,
        )

    def vanished(self, gated, known, shards=None) -> dict[str, Verdict]:
        """The refused verdicts of the store's units this run does not gate (``gated``)
        whose granules are gone from its input (``known``: every granule id it has),
        within ``shards`` when the run is restricted (:func:`zagg.pipeline.reruns.vanished`);
        none when contraction is allowed (such a leaf is then left as it is)."""
        if self.allow_contraction:
            return {}
        return vanished(
            self.root, gated, known, shards=shards, windowed=self.spec.windowing is not None
        )

    def refuse_vanished(self, known, shards=None) -> None:
        """After a run that found its units by reading: refuse (and record in the run's
        refusals) the store's units whose granules are gone from its input."""
        gated = {} if self.gate is None else self.gate.verdicts
        gone = self.vanished(gated, known, shards)
        if gone:
            self.apply(gone)

    def apply(self, verdicts: dict[str, Verdict]) -> set[str]:
        """Act on ``verdicts``: touch the current units, record the refusals; returns the
        units to write."""
        gate = Gate(dict(verdicts))
        current = [v for v in verdicts.values() if v.kind == CURRENT]
        gate.objects_touched, gate.touch_failures = touch_current(
            self.root, current, column=self.column
        )
        self.gate = gate if self.gate is None else self.gate.merge(gate)
        if any(v.kind == REFUSED for v in verdicts.values()):
            # one refusal manifest a run: it lists every unit refused so far
            self.gate.refusals_key = write_refusals(
                self.root,
                self.run_id,
                self.spec.semantic_hash,
                [v for v in self.gate.verdicts.values() if v.kind == REFUSED],
                key=self.gate.refusals_key,
            )
        if current:  # the store-root objects no leaf owns live as long as its leaves
            touched, failed = touch_root(self.root)
            self.gate.objects_touched += touched
            self.gate.touch_failures += failed
        return {sid for sid, v in verdicts.items() if v.kind == REWRITE}

    def decide(self, planned: dict[str, list[str] | None]) -> set[str]:
        """Classify ``planned`` units and act on the verdicts (:meth:`apply`); returns the
        units to write."""
        return self.apply(self.classify(planned))

    def record_empty(self, planned: dict, todo, summary) -> None:
        """After a planned run: the units it was to write that came out empty (no point
        in the shard, or the window) record their identity, so the next run skips them."""
        written = {leaf_stem(r["shard_id"], r.get("window")) for r in summary.records}
        failed = {f.get("granule") for f in summary.failed_granules}
        empty = sorted(set(todo) - written)
        write_empty(
            self.root,
            empty,
            {sid: [i for i in planned[sid] if i not in failed] for sid in empty},
            self.spec.semantic_hash,
            self.run_id,
        )

    def current(self) -> list[dict]:
        """The records of the units found current that hold a leaf (what the store root's
        objects need of them, :func:`zagg.pipeline.reruns.current_records`)."""
        if self.gate is None:
            return []
        return current_records(
            self.root, list(self.gate.verdicts.values()), timed=bool(self.spec.timed)
        )

    def summary(self, wall_seconds: float):
        """The summary of a run the gate left nothing to do: no granule read, nothing
        written but the root coverage, which lists every current unit (a killed run may
        have stamped them all and died before publishing them)."""
        from zagg.engine.summary import RunSummary
        from zagg.hive.coverage import finish_root_coverage

        current = self.current()
        finish_root_coverage(self.root, current, self.spec.grid.shard_order)
        return RunSummary(
            store=self.root.url,
            run_id=self.run_id,
            shards=len(self.gate.verdicts),
            cells_with_data=sum(r["cells_with_data"] for r in current),
            cells_written=0,
            points=0,
            granules=0,
            wall_seconds=wall_seconds,
            gate=self.gate,
        )

    def finish(self, summary) -> None:
        """Put the verdicts on a run's ``summary``: its shards count every unit gated."""
        if self.gate is not None:
            summary.gate = self.gate
            summary.shards = max(summary.shards, len(self.gate.verdicts))


# -- the hooks a run's aggregation calls ---------------------------------------------------
def selector(gate: RunGate | None, todo, ids: list[str] | None):
    """The ``select(names, contributors)`` hook of a run's aggregation
    (:func:`zagg.engine.aggregate.shard_collection`), called once the units holding data
    are known: a planned run builds its units to write (``todo``) and no others; any
    other gated run gates the units the read found, by the granules that fed each and
    those their leaves recorded; None (every unit built) without a gate, or for a Dataset
    without granule ids (no identity to compare)."""
    if todo is not None:

        def planned(found, contributors):
            return [u for u in found if u in todo]

        return planned
    if gate is None or ids is None:
        return None

    def found(units, contributors):
        return gate.decide(
            found_plan(contributors, units, ids, lambda sid: recorded_ids(gate.root, sid) or ())
        )

    return found


def record_granules(shards, planned: dict | None, ids: list[str] | None) -> None:
    """The granule ids each leaf records (its identity's second half), into the run's
    facts beside ``shards``: with a catalog plan, the planned ids of its unit that were
    read (a granule that failed to read is left out, so the next run retries it); else
    the granules that fed it, or the one granule a single-granule source is."""
    facts = shards.facts
    failed = {f.get("granule") for f in facts.failed_granules}
    if planned is not None:
        facts.shard_granules = {
            u: [i for i in planned.get(u, ()) if i not in failed] for u in shards.unit_names
        }
    elif facts.shard_granules is None and ids is not None:
        facts.shard_granules = {u: list(ids) for u in shards.unit_names}


def catalog_plan(cfg, shards=None) -> dict[str, list[str]] | None:
    """Per unit (its leaf stem: the shard id at the shard order, or ``{id}_{window}``) the
    read units whose footprint touches the shard (and whose time range reaches the window),
    restricted to ``shards`` when given, from the source's ``footprints`` (a catalog's);
    None when the plan cannot be known before reading (a source without footprints,
    footprints coarser than the shards, or a windowed run whose time field is not the one
    the footprints' time ranges are on)."""
    src = cfg.data_source
    footprints = registry.of(src).footprints
    if footprints is None:
        return None
    windowing = cfg.output.windowing
    if windowing is not None and (src.time is None or windowing.time_field != src.time):
        return None
    from zagg import grid as G

    found = footprints(src, cfg.grid.shard_order, shards)
    if found is None:
        return None
    wanted = None if shards is None else set(G.to_decimal(G.as_words(shards)))
    plan: dict[str, set[str]] = {}
    for fp in found:
        labels = [None] if windowing is None else entry_windows(windowing, fp.time_range)
        if labels is None:  # a read unit without a recorded time range
            return None
        for sid in fp.shards:
            if wanted is None or sid in wanted:
                for window in labels:
                    plan.setdefault(leaf_stem(sid, window), set()).add(fp.id)
    return {u: sorted(ids) for u, ids in sorted(plan.items())}


def catalog_ids(cfg) -> list[str]:
    """Every granule id the catalog of a config's granule source lists."""
    from zagg.sources.granules import catalog_entries

    return [e.id for e in catalog_entries(cfg.data_source.granules)]


def entry_windows(windowing, time_range) -> list[str] | None:
    """The labels of the windows a read unit's time range ``(lo, hi)`` reaches (None: no
    range recorded)."""
    from zagg.windows.assign import bounds, label, utc_ns, window_index

    if time_range is None or None in time_range:
        return None
    span = np.array(time_range, np.float64)
    if windowing.schedule != "explicit":
        lo, hi = window_index(windowing, span).tolist()
        return [label(windowing, i) for i in range(lo, hi + 1)]
    t0, t1 = utc_ns(windowing, span)[0]
    out = []
    for i in range(len(windowing.windows)):
        start, end = (np.datetime64(b, "ns") for b in bounds(windowing, i))
        if start <= t1 and t0 < end:
            out.append(label(windowing, i))
    return out


def source_ids(cfg, ds, from_config: bool) -> list[str] | None:
    """The read unit ids a run's points come from (the gate's fingerprints): the granules a
    Dataset was opened from (``attrs["granules"]``), else for points the config names
    what its registered source says (the generator's id, an input file's name); None when
    unknown (a passed-in Dataset without granule ids)."""
    if ds.attrs.get("granules"):
        return [str(g) for g in ds.attrs["granules"]]
    if from_config:
        src = cfg.data_source
        return registry.of(src).units(src, ds)
    return None


def found_plan(
    found_ids: dict[str, list[str]] | None,
    shard_ids: list[str],
    read_ids: list[str] | None,
    recorded,
) -> dict[str, list[str] | None]:
    """The planned ids of the shards a full read found: the granules that fed each (or,
    for a one-granule source, that granule), plus the ids its leaf recorded that the run
    read again (a granule that touched the shard but kept no point in it last time)."""
    read = set(read_ids or ())
    out: dict[str, list[str] | None] = {}
    for sid in shard_ids:
        if found_ids is not None:
            ids = set(found_ids.get(sid) or ())
        elif read_ids is not None:
            ids = set(read)
        else:
            out[sid] = None
            continue
        out[sid] = sorted(ids | (set(recorded(sid)) & read))
    return out
