"""The reducer registry: declarative records saying how each aggregation function is built.

A reducer names the per-cell *states* it needs (``chunk``), how those states merge across
input chunks (``combine`` — fixed per state, see :data:`STATE_COMBINE`) and how the stored
value is made from them (``finalize``), plus its default dtype, fill value and pyramid
composability class. The engine computes the union of states per source variable in one
pass, so ``mean`` + ``std`` + ``count`` on one variable share their sums. Kernels live in
:mod:`zagg.kernels`; nothing here runs per point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .kernels.constants import DEFAULT_DELTA

#: How each state combines across partial aggregates (the combine step of every reducer).
STATE_COMBINE = {
    "count": "sum",  # finite source values (keyed points when there is no source)
    "sum": "dd-sum",  # double-double sum of finite values
    "sumsq": "dd-sum",  # double-double sum of squares
    "min": "min",
    "max": "max",
    "digest": "tdigest-merge",
    "lanes": "sum",  # exact per-lane photon counts of the composition word (and N_signal)
}

REQUIRED = object()  # a Param default meaning "the config must give it"

PYRAMID_CLASSES = ("exact", "approximate", "packed", "none")


@dataclass(frozen=True)
class Param:
    """One tunable of a reducer: default, python type and a validity check with its wording."""

    default: object
    kind: type
    check: Callable[[object], bool] = lambda v: True
    valid: str = ""


@dataclass(frozen=True)
class Reducer:
    name: str
    kind: str  # "dense" or "ragged"
    chunk: tuple[str, ...]  # states it needs
    #: stored values of the populated cells from their states (None for ragged reducers)
    finalize: Callable[[Mapping[str, np.ndarray], Mapping[str, object]], np.ndarray] | None
    default_dtype: str
    pyramid_class: str
    pyramid_method: str | None
    needs_source: bool = True
    source_optional: bool = False
    params: Mapping[str, Param] = field(default_factory=dict)
    dtype_kinds: str = "fiu"  # numpy dtype kinds accepted for the output
    spec_attrs: Callable[[Mapping[str, object]], dict] = lambda params: {}

    def default_fill(self, dtype: np.dtype):
        if self.kind == "ragged":
            return b""
        return np.nan if np.dtype(dtype).kind == "f" else 0


def _dd_value(hi, lo):
    return hi + lo


def _fin_count(s, p):
    return s["count"]


def _fin_min(s, p):
    return s["min"]


def _fin_max(s, p):
    return s["max"]


def _fin_sum(s, p):
    return _dd_value(s["sum_hi"], s["sum_lo"])


def _fin_mean(s, p):
    with np.errstate(invalid="ignore", divide="ignore"):
        return _dd_value(s["sum_hi"], s["sum_lo"]) / s["count"]


def _fin_var(s, p):
    from .kernels.segments import dd_variance

    return dd_variance(s["count"], s["sum_hi"], s["sum_lo"], s["sumsq_hi"], s["sumsq_lo"], p["ddof"])


def _fin_std(s, p):
    return np.sqrt(_fin_var(s, p))


def _ddof_param():
    return {
        "ddof": Param(0, int, lambda v: v in (0, 1), "0 (population) or 1 (sample)"),
    }


def _fin_composition(s, p):
    from .kernels.composition import compose

    return compose(s["lanes"], s["nsig"])


def _composition_attrs(params):
    from .kernels.composition import composition_attrs

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


REGISTRY: dict[str, Reducer] = {
    r.name: r
    for r in (
        Reducer(
            "count",
            "dense",
            ("count",),
            _fin_count,
            "int64",
            "exact",
            "sum",
            source_optional=True,
            dtype_kinds="iu",
        ),
        Reducer("sum", "dense", ("count", "sum"), _fin_sum, "float64", "exact", "sum", dtype_kinds="f"),
        Reducer("mean", "dense", ("count", "sum"), _fin_mean, "float32", "none", None, dtype_kinds="f"),
        Reducer("min", "dense", ("count", "min"), _fin_min, "float32", "exact", "min", dtype_kinds="fi"),
        Reducer("max", "dense", ("count", "max"), _fin_max, "float32", "exact", "max", dtype_kinds="fi"),
        Reducer(
            "var",
            "dense",
            ("count", "sum", "sumsq"),
            _fin_var,
            "float32",
            "none",
            None,
            params=_ddof_param(),
            dtype_kinds="f",
        ),
        Reducer(
            "std",
            "dense",
            ("count", "sum", "sumsq"),
            _fin_std,
            "float32",
            "none",
            None,
            params=_ddof_param(),
            dtype_kinds="f",
        ),
        Reducer(
            "tdigest",
            "ragged",
            ("digest",),
            None,
            "float32",
            "approximate",
            "tdigest_kway",
            params={
                "delta": Param(
                    DEFAULT_DELTA,
                    int,
                    lambda v: 16 <= v <= 1_000_000,
                    "an integer from 16 to 1000000",
                ),
                "weights": Param("counts", str, lambda v: v in ("counts", "flux"),
                                 "'counts' (observation counts) or 'flux'"),
                "weight_source": Param(None, str, lambda v: bool(v),
                                       "a declared variable holding each observation's flux"),
                "gain": Param(None, dict, lambda v: {"name", "version"} <= set(v),
                              "a mapping with at least the gain constant's name and version"),
            },
            dtype_kinds="f",
            spec_attrs=_tdigest_attrs,
        ),
        Reducer(
            "composition",
            "dense",
            ("lanes",),
            _fin_composition,
            "uint64",
            "packed",
            "composition_kway",
            params={
                "of": Param(REQUIRED, str, lambda v: bool(v), "the name of the signal digest"),
                "threshold": Param(2, int, lambda v: 1 <= v <= 4, "a confidence level 1..4"),
            },
            dtype_kinds="u",
            spec_attrs=_composition_attrs,
        ),
    )
}

def get(name: str) -> Reducer:
    return REGISTRY[name]
