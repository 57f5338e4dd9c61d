"""The reducer registry: one declarative record per aggregation function.

In the spirit of flox's ``Aggregation``, a :class:`Reducer` says everything the engine needs
and nothing the engine decides on its own:

- ``chunk``: the per-cell :class:`State` records it needs. A state knows how the points of a
  cell run become it (its own ``chunk`` kernel) and how k of its values for the same cell
  merge into one (its ``combine``: associative and commutative, so the same function merges
  the partials of input chunks, the pieces of a shard and, later, the cells of a pyramid
  fold). States are shared: ``mean``, ``std`` and ``count`` of one variable compute their
  ``count`` and ``sum`` once.
- ``finalize``: the stored value of each cell from its states; ``present`` says which
  cells hold one (the others get the field's fill).
- the stored dtype and fill, its parameters, the spec attrs it stamps and its pyramid
  composability class (exact / approximate / packed / none);
- ``fold``: how the *stored* values of child cells fold into their parent cell (a
  :class:`Fold`), which every pyramid fold site (leaf columns, overviews, the sweep) calls.
  A class ``none`` reducer has none: its field is absent above the native resolution.

Adding a reducer is one record (plus the kernels of any new state) passed to
:func:`register`. Nothing here runs per point: the kernels live in :mod:`zagg.reducers.states` and
:mod:`zagg.kernels`, imported only when a chunk is reduced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from zagg.kernels.constants import DEFAULT_DELTA
from zagg.reducers import states as S
from zagg.windows import cellclock as _cellclock

REQUIRED = object()  # a Param default meaning "the config must give it"

PYRAMID_CLASSES = ("exact", "approximate", "packed", "none")
KINDS = ("dense", "ragged")


@dataclass(frozen=True)
class Param:
    """One tunable of a reducer: default, python type and a validity check with its wording."""

    default: object
    kind: type
    check: Callable[[object], bool] = lambda v: True
    valid: str = ""


@dataclass(frozen=True)
class State:
    """A per-cell intermediate: ``chunk(points, spec)`` gives its value for every cell of one
    input chunk (:class:`zagg.engine.keying.CellPoints`); ``combine(values, groups, spec)`` merges
    values of the same cells from several pieces (:class:`zagg.reducers.partials.Groups`);
    ``compact(value)`` may return a smaller copy that combines to the same result (how
    partials wait for their shard). ``options`` names the field settings the state depends
    on (its identity: two fields share a state only when these agree); ``reads(spec,
    declared)`` names the variables it reads beyond its source and predicate."""

    name: str
    chunk: Callable
    combine: Callable
    compact: Callable | None = None
    options: tuple[str, ...] = ()
    reads: Callable | None = None
    #: ``held(options) -> (bytes per cell, bytes per point)``: at most what a waiting
    #: partial of this state holds (None: 8 bytes per cell); sizes a run's shard groups
    held: Callable | None = None

    def held_bytes(self, options: dict) -> tuple[int, int]:
        """Bytes per cell and per point a waiting partial of this state holds at most."""
        return (8, 0) if self.held is None else self.held(options)


@dataclass(frozen=True)
class Fold:
    """The pyramid law of a reducer: ``combine(values, groups, opts, divisor)`` folds the
    stored values of child cells (one entry of ``values`` per contributor, rows in cell
    order) into one stored value per parent cell, ``groups`` (:class:`zagg.reducers.partials.Groups`
    over the concatenated rows) saying which rows make each parent. For the exact and
    approximate classes it goes through the reducer's own state ``combine``; ``opts`` are
    the field's fold settings (a digest's ``overview_delta``). A packed fold also takes
    ``divisor``: each row's weight from the ``of`` digest (the composition's N_signal).
    ``method`` is the law's name in the manifest (spec §4.5)."""

    method: str
    combine: Callable
    needs_divisor: bool = False

    @classmethod
    def of_state(cls, state: State, method: str) -> Fold:
        """The law of a reducer whose stored value is its state's value: the state's own
        ``combine``."""
        return cls(
            method,
            lambda values, groups, opts, divisor=None: state.combine(
                list(values), groups, S.FoldSpec(state, opts)
            ),
        )


@dataclass(frozen=True)
class Reducer:
    """How one aggregation function is computed, stored and folded."""

    name: str
    chunk: tuple[State, ...]
    #: stored values of the cells from ``{state name: value}`` and the field's params
    finalize: Callable[[Mapping[str, object], Mapping[str, object]], object]
    default_dtype: str
    pyramid_class: str
    kind: str = "dense"  # "dense": one value per cell; "ragged": a t-digest payload per cell
    #: which cells hold a value, from the same states (None: every cell whose ``count``
    #: state is positive when it has one, else every cell); NaN results never count
    present: Callable[[Mapping[str, object]], np.ndarray] | None = None
    needs_source: bool = True
    source_optional: bool = False
    params: Mapping[str, Param] = field(default_factory=dict)
    dtype_kinds: str = "fiu"  # numpy dtype kinds accepted for the output
    spec_attrs: Callable[[Mapping[str, object]], dict] = lambda params: {}
    #: state settings a field resolves from the other fields of its config, beyond its
    #: params and flags (e.g. the rows of the digest a composition describes)
    options: Callable[[object, Mapping[str, object]], dict] | None = None
    #: how stored values of child cells fold into a parent cell (None for class none)
    fold: Fold | None = None
    #: the CF ``(long_name, units)`` of the stored value from the source's
    #: :class:`~zagg.sources.quantities.Quantity` (None: no source) and the field's params
    describe: Callable[[object, Mapping[str, object]], tuple[str, str | None]] = (
        lambda source, params: (source.long_name if source else "points", None)
    )

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"reducer {self.name!r}: kind must be one of {KINDS}")
        if self.pyramid_class not in PYRAMID_CLASSES:
            raise ValueError(
                f"reducer {self.name!r}: pyramid_class must be one of {PYRAMID_CLASSES}"
            )
        if not self.chunk or not all(isinstance(s, State) for s in self.chunk):
            raise ValueError(f"reducer {self.name!r}: chunk must be a non-empty tuple of State")
        if self.pyramid_class != "none" and not isinstance(self.fold, Fold):
            raise ValueError(
                f"reducer {self.name!r}: pyramid_class {self.pyramid_class!r} needs a fold "
                "(how stored values of child cells fold into their parent, e.g. "
                "Fold.of_state(state, 'sum')); declare pyramid_class 'none' to keep the "
                "field at native resolution only"
            )

    @property
    def pyramid_fold(self) -> Fold | None:
        """The fold the pyramid applies to this reducer's fields (None: absent above the
        native resolution)."""
        return None if self.pyramid_class == "none" else self.fold

    def default_fill(self, dtype: np.dtype):
        if self.kind == "ragged":
            return b""
        return np.nan if np.dtype(dtype).kind == "f" else 0

    def has_value(self, states: Mapping[str, object]) -> np.ndarray | None:
        """Mask of the cells holding a value (None: all of them), NaN results aside."""
        if self.present is not None:
            return self.present(states)
        if "count" in states:
            return np.asarray(states["count"]) > 0
        return None


# -- the built-in reducers -----------------------------------------------------------------
COUNT = State("count", S.count_chunk, S.sum_combine, S.compact_count, held=lambda o: (4, 0))
SUM = State("sum", S.sum_dd_chunk, S.dd_combine, held=lambda o: (16, 0))
SUMSQ = State("sumsq", S.sumsq_dd_chunk, S.dd_combine, held=lambda o: (16, 0))
MIN = State("min", S.min_chunk, S.min_combine, S.compact_extreme)
MAX = State("max", S.max_chunk, S.max_combine, S.compact_extreme)
DIGEST = State(
    "digest",
    S.digest_chunk,
    S.digest_combine,
    options=("delta", "located", "weight_source", "weights", "timed", "clock"),
    reads=S.digest_reads,
    held=S.digest_held,
)
CLOCK_RANGE = State(
    "clock_range",
    _cellclock.chunk,
    _cellclock.combine,
    options=("clock",),
    reads=_cellclock.reads,
    held=lambda o: (16, 0),
)
LANES = State(
    "lanes",
    S.lanes_chunk,
    S.sum_combine,
    options=("threshold", "of_source", "of_where"),
    reads=S.lanes_reads,
    held=lambda o: (72, 0),
)


def _fin_count(s, p):
    return s["count"]


def _fin_min(s, p):
    return s["min"]


def _fin_max(s, p):
    return s["max"]


def _fin_sum(s, p):
    return S.dd_value(s["sum"])


def _fin_mean(s, p):
    with np.errstate(invalid="ignore", divide="ignore"):
        return S.dd_value(s["sum"]) / s["count"]


def _fin_var(s, p):
    return S.dd_variance(s["count"], s["sum"], s["sumsq"], p["ddof"])


def _fin_std(s, p):
    return np.sqrt(_fin_var(s, p))


def _ddof_param():
    return {
        "ddof": Param(0, int, lambda v: v in (0, 1), "0 (population) or 1 (sample)"),
    }


def _fin_digest(s, p):
    return s["digest"]


def _fin_composition(s, p):
    return S.compose_lanes(s["lanes"])


def _composition_options(f, fields):
    of = fields[f.params["of"]]
    return {"of_source": of.source, "of_where": of.where}


def _composition_present(s):
    return S.lanes_signal(s["lanes"]) > 0


def _composition_attrs(params):
    from zagg.kernels.composition import composition_attrs

    return {"composition": composition_attrs(params["of"], params["threshold"])}


def _tdigest_attrs(params):
    attrs = {
        "ragged": {
            "spec": "zagg-ragged/1",
            "element": {"dtype": "float32", "shape": [-1, 2]},
        },
        "weights": params.get("weights", "counts"),
    }
    if attrs["weights"] == "flux":
        attrs["gain"] = dict(params["gain"])
    return attrs


_TDIGEST_PARAMS = {
    "delta": Param(
        DEFAULT_DELTA, int, lambda v: 16 <= v <= 1_000_000, "an integer from 16 to 1000000"
    ),
    "weights": Param(
        "counts", str, lambda v: v in ("counts", "flux"), "'counts' (observation counts) or 'flux'"
    ),
    "weight_source": Param(
        None, str, lambda v: bool(v), "a declared variable holding each observation's flux"
    ),
    "gain": Param(
        None,
        dict,
        lambda v: {"name", "version"} <= set(v),
        "a mapping with at least the gain constant's name and version",
    ),
}

REGISTRY: dict[str, Reducer] = {}


def register(reducer: Reducer, *, replace: bool = False) -> Reducer:
    """Make ``reducer`` available to configs as ``function: <reducer.name>``.

    Refuses to shadow a registered name unless ``replace``. On a cluster of worker
    processes, define the reducer in a module the workers can import too (its kernels
    travel by reference).
    """
    if not isinstance(reducer, Reducer):
        raise TypeError(f"register() needs a Reducer, got {type(reducer).__name__}")
    if reducer.name in REGISTRY and not replace:
        raise ValueError(
            f"a reducer named {reducer.name!r} is already registered; pick "
            "another name or pass replace=True"
        )
    REGISTRY[reducer.name] = reducer
    return reducer


def unregister(name: str) -> None:
    """Remove a registered reducer (configs can no longer name it)."""
    REGISTRY.pop(name, None)


def get(name: str) -> Reducer:
    return REGISTRY[name]


def _named(template: str, units: str | None = "source"):
    """A ``describe`` rule: ``template`` with ``{of}`` the source's long_name, and units
    the source's (``"source"``), their square (``"source2"``) or a fixed string."""

    def describe(source, params):
        of = source.long_name if source else "points"
        u = source.units if source else None
        if units == "source2":
            u = None if u is None else "1" if u == "1" else f"{u}2" if u.isalpha() else f"({u})2"
        elif units != "source":
            u = units
        return template.format(of=of), u

    return describe


def _describe_count(source, params):
    return ("number of points" if source is None else f"number of {source.long_name} values"), "1"


def _describe_composition(source, params):
    return f"signal confidence composition of {params['of']}", None


FOLD_COUNT = Fold("sum", S.fold_count)
FOLD_SUM = Fold("sum", S.fold_sum)
FOLD_MIN = Fold("min", S.fold_min)
FOLD_MAX = Fold("max", S.fold_max)
FOLD_DIGEST = Fold("tdigest_kway", S.fold_digest)
FOLD_COMPOSITION = Fold("composition_kway", S.fold_composition, needs_divisor=True)

for _r in (
    Reducer(
        "count",
        (COUNT,),
        _fin_count,
        "int64",
        "exact",
        source_optional=True,
        dtype_kinds="iu",
        fold=FOLD_COUNT,
        describe=_describe_count,
    ),
    Reducer(
        "sum",
        (COUNT, SUM),
        _fin_sum,
        "float64",
        "exact",
        dtype_kinds="f",
        fold=FOLD_SUM,
        describe=_named("sum of {of}"),
    ),
    Reducer(
        "mean",
        (COUNT, SUM),
        _fin_mean,
        "float32",
        "none",
        dtype_kinds="f",
        describe=_named("mean {of}"),
    ),
    Reducer(
        "min",
        (COUNT, MIN),
        _fin_min,
        "float32",
        "exact",
        dtype_kinds="fi",
        fold=FOLD_MIN,
        describe=_named("minimum {of}"),
    ),
    Reducer(
        "max",
        (COUNT, MAX),
        _fin_max,
        "float32",
        "exact",
        dtype_kinds="fi",
        fold=FOLD_MAX,
        describe=_named("maximum {of}"),
    ),
    Reducer(
        "var",
        (COUNT, SUM, SUMSQ),
        _fin_var,
        "float32",
        "none",
        params=_ddof_param(),
        dtype_kinds="f",
        describe=_named("variance of {of}", "source2"),
    ),
    Reducer(
        "std",
        (COUNT, SUM, SUMSQ),
        _fin_std,
        "float32",
        "none",
        params=_ddof_param(),
        dtype_kinds="f",
        describe=_named("standard deviation of {of}"),
    ),
    Reducer(
        "tdigest",
        (DIGEST,),
        _fin_digest,
        "float32",
        "approximate",
        kind="ragged",
        params=_TDIGEST_PARAMS,
        dtype_kinds="f",
        spec_attrs=_tdigest_attrs,
        fold=FOLD_DIGEST,
        describe=_named("{of}"),  # the digest's quantiles are of the source quantity
    ),
    Reducer(
        "time_range",
        (CLOCK_RANGE,),
        _cellclock.finalize,
        "uint64",
        "none",
        present=_cellclock.present,
        dtype_kinds="u",
        spec_attrs=_cellclock.spec_attrs,
        describe=_named("time range of {of}", None),  # toc words (temporal): no CF units
    ),
    Reducer(
        "composition",
        (LANES,),
        _fin_composition,
        "uint64",
        "packed",
        present=_composition_present,
        options=_composition_options,
        params={
            "of": Param(REQUIRED, str, lambda v: bool(v), "the name of the signal digest"),
            "threshold": Param(2, int, lambda v: 1 <= v <= 4, "a confidence level 1..4"),
        },
        dtype_kinds="u",
        spec_attrs=_composition_attrs,
        fold=FOLD_COMPOSITION,
        describe=_describe_composition,
    ),
):
    register(_r)
del _r
