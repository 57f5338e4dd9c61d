"""What every chunk and shard task of an aggregation needs: the plan, small and picklable.

A config's fields ask their reducers for states; the plan holds each distinct state once
(:class:`StateSpec`: a state record with the source, row predicate and options it reads)
and, per field, which of them it finalizes from (:class:`FieldPlan`). It also lists the
Dataset variables chunk tasks receive and the grid they key onto. The plan carries the
reducer and state records themselves, so a worker needs no registry lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zagg import grid as G
from zagg.checks import predicate
from zagg.config.model import Config, FieldSpec, Filter
from zagg.reducers.records import Reducer, State
from zagg.reducers.states import POINT_WORDS


@dataclass(frozen=True)
class StateSpec:
    """One state to compute: ``state`` of ``source`` over the rows ``where`` keeps, with
    the field settings named by ``state.options`` (sorted ``(name, value)`` pairs)."""

    state: State
    source: str | None
    where: str | None
    options: tuple[tuple[str, object], ...] = ()

    @property
    def opts(self) -> dict:
        return dict(self.options)

    @property
    def key(self) -> str:
        opts = ",".join(f"{k}={v!r}" for k, v in self.options)
        return f"{self.state.name}:{self.source or ''}|{self.where or ''}|{opts}"

    def reads(self, declared) -> set[str]:
        """The variables (declared names, or :data:`POINT_WORDS`) this state reads: its
        source, its predicate's variables and what the state record adds."""
        names = {self.source} if self.source else set()
        if self.where:
            names |= set(predicate.parse(self.where, declared).variables)
        if self.state.reads is not None:
            names |= set(self.state.reads(self, declared))
        return names


@dataclass(frozen=True)
class FieldPlan:
    """One output field: its declaration, its reducer and the keys of its states."""

    field: FieldSpec
    reducer: Reducer
    states: tuple[tuple[str, str], ...]  # (state name, StateSpec key)

    @property
    def name(self) -> str:
        return self.field.name


@dataclass(frozen=True)
class Plan:
    lat: str
    lon: str
    filters: tuple[Filter, ...]
    inputs: tuple[str, ...]  # Dataset variables handed to chunk tasks, in this order
    columns: tuple[tuple[str, str, int | None], ...]  # declared name, variable, column
    declared: tuple[str, ...]  # names predicates may read
    specs: tuple[tuple[str, StateSpec], ...]  # every distinct state, by key
    fields: tuple[FieldPlan, ...]
    grid: G.Grid  # the orders chunk tasks key onto
    shard_set: tuple[int, ...] | None = None
    #: ``(lo, hi)``: only shard words lo <= w < hi are kept (hi None: no upper end), the
    #: span of one shard group of a run read in groups (:mod:`zagg.pipeline.stream`)
    shard_span: tuple[int, int | None] | None = None
    granule_var: str | None = None  # per-row granule index, tracked into each shard
    #: the time-window schedule (a zagg.windows.Windowing): units are (shard, window)
    windowing: object = None
    #: keys of the min and max states of the time field (each unit's actual time range)
    time_states: tuple[str, str] | None = None
    #: the store's clock (:attr:`zagg.config.model.Config.clock`) when a field keeps
    #: per-centroid times: each unit then counts its clocked observations (its leaf's
    #: temporal record)
    clock: tuple[str, str, str, str] | None = None

    @property
    def keeps_clocks(self) -> bool:
        """Whether each unit counts its clocked observations (a field declares
        per-centroid times)."""
        return self.clock is not None

    def unit_of(self, unit: int) -> tuple[int, int | None]:
        """``(shard word, window index or None)`` of a run unit's key."""
        if self.windowing is None:
            return int(unit), None
        from zagg.windows.units import unpack

        shard, index = unpack([unit], self.grid.shard_order)
        return int(shard[0]), int(index[0])

    @property
    def token(self) -> str:
        """A deterministic hash of what the plan computes (its tasks' names derive from
        it): the records' names and settings, not the functions they hold."""
        from dask.base import tokenize

        return tokenize(
            self.lat,
            self.lon,
            repr(self.filters),
            self.inputs,
            self.columns,
            self.declared,
            [key for key, _ in self.specs],
            [(fp.name, fp.reducer.name, fp.states, repr(fp.field)) for fp in self.fields],
            self.grid.as_dict(),
            self.shard_set,
            self.shard_span,
            self.granule_var,
            repr(self.windowing),
            self.time_states,
            self.clock,
        )

    @property
    def state_specs(self) -> dict[str, StateSpec]:
        return dict(self.specs)

    @property
    def needs_point_words(self) -> bool:
        """Whether any state reads its points' order-29 words (located digests)."""
        return any(POINT_WORDS in s.reads(self.declared) for _, s in self.specs)


def field_plan(f: FieldSpec, config: Config) -> tuple[FieldPlan, list[StateSpec]]:
    red = f.reducer
    opts = {**f.params, "located": f.located, "timed": f.timed}
    if f.timed or f.function == "time_range":  # how times are read (zagg.windows.clock)
        opts["clock"] = config.clock
    if red.options is not None:
        opts.update(red.options(f, config.fields))
    specs = [
        StateSpec(s, f.source, f.where, tuple((k, _frozen(opts.get(k))) for k in sorted(s.options)))
        for s in red.chunk
    ]
    return FieldPlan(f, red, tuple((s.state.name, s.key) for s in specs)), specs


def _frozen(value):
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def make_plan(config: Config, shards=None, granule_var: str | None = None, span=None) -> Plan:
    src = config.data_source
    specs: dict[str, StateSpec] = {}
    fields = []
    for f in config.fields.values():
        fp, wanted = field_plan(f, config)
        fields.append(fp)
        for s in wanted:
            specs.setdefault(s.key, s)
    windowing = config.output.windowing
    time_states = None
    if windowing is not None:
        from zagg.reducers.records import MAX, MIN

        lo, hi = (
            StateSpec(MIN, windowing.time_field, None),
            StateSpec(MAX, windowing.time_field, None),
        )
        specs.setdefault(lo.key, lo)
        specs.setdefault(hi.key, hi)
        time_states = (lo.key, hi.key)
    used = set().union(*(s.reads(src.variables) for s in specs.values())) - {POINT_WORDS}
    columns = tuple((n, *src.columns.get(n, (n, None))) for n in sorted(used))
    inputs = [src.latitude, src.longitude]
    inputs += [f.variable for f in src.filters]
    inputs += [var for _, var, _ in columns]
    if granule_var:
        inputs.append(granule_var)
    shard_set = None
    if shards is not None:
        shard_set = tuple(int(w) for w in np.unique(shard_words(shards, config.grid.shard_order)))
    return Plan(
        src.latitude,
        src.longitude,
        src.filters,
        tuple(dict.fromkeys(inputs)),
        columns,
        tuple(src.variables),
        tuple(sorted(specs.items())),
        tuple(fields),
        config.grid,
        shard_set,
        None if span is None else (int(span[0]), None if span[1] is None else int(span[1])),
        granule_var,
        windowing,
        time_states,
        config.clock if any(f.timed for f in config.fields.values()) else None,
    )


def shard_words(shards, shard_order: int) -> np.ndarray:
    """Shard words from decimal ids or words, refusing any not at the shard order."""
    ids = [shards] if isinstance(shards, str) else list(shards)
    if ids and isinstance(ids[0], str):
        words = G.from_decimal(ids)
    else:
        words = np.asarray(ids, dtype=np.uint64)
    orders = words & np.uint64(63)
    if words.size and not np.all(orders == shard_order):
        raise ValueError(f"shards must be cells at the shard order (parent_order {shard_order})")
    return words
