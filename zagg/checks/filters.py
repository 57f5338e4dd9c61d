"""Row filters of a data source: ``variable[column] <op> value``, parsed from the config."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from zagg.checks.validation import check_keys, check_name, did_you_mean, fail

FILTER_OPS = ("eq", "ne", "lt", "le", "gt", "ge", "in", "not_in")


@dataclass(frozen=True)
class Filter:
    """Keep rows where ``variable[column] <op> value`` holds (rows failing any filter drop)."""

    variable: str
    op: str
    value: object
    column: int | None = None

    def mask(self, data: np.ndarray) -> np.ndarray:
        if self.column is not None:
            data = data[:, self.column]
        v = self.value
        if self.op == "in":
            return np.isin(data, list(v))
        if self.op == "not_in":
            return ~np.isin(data, list(v))
        ops = {
            "eq": np.equal,
            "ne": np.not_equal,
            "lt": np.less,
            "le": np.less_equal,
            "gt": np.greater,
            "ge": np.greater_equal,
        }
        return ops[self.op](data, v)


def parse_filters(raw, variables, path) -> tuple[Filter, ...]:
    """The ``filters`` list of a data source; each names a declared variable."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        fail(path, f"expected a list of {{variable, op, value}} mappings, got {raw!r}")
    out = []
    for i, f in enumerate(raw):
        p = f"{path}[{i}]"
        check_keys(f, ("variable", "op", "value", "column"), p, ("variable", "op", "value"))
        var = check_name(f["variable"], f"{p}.variable")
        if var not in variables:
            fail(
                f"{p}.variable",
                f"{var!r} is not declared in data_source.variables "
                f"({', '.join(variables)}); declare it there first",
            )
        op = f["op"]
        if op not in FILTER_OPS:
            fail(
                f"{p}.op",
                f"unknown operator {op!r}{did_you_mean(op, FILTER_OPS)}; valid: "
                f"{', '.join(FILTER_OPS)}",
            )
        value = f["value"]
        if op in ("in", "not_in"):
            if not isinstance(value, list) or not value:
                fail(f"{p}.value", f"operator {op!r} needs a non-empty list, got {value!r}")
            bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int | float)]
        else:
            bad = [value] if isinstance(value, bool) or not isinstance(value, int | float) else []
        if bad:
            fail(f"{p}.value", f"filter values must be numbers, got {bad[0]!r}")
        values = value if isinstance(value, list) else [value]
        if not all(math.isfinite(v) for v in values):
            fail(
                f"{p}.value",
                f"filter values must be finite numbers, got {value!r} (NaN "
                "compares false with everything; to drop NaN rows use a range, e.g. "
                "op: ge with the smallest valid value)",
            )
        column = f.get("column")
        if column is not None and (
            isinstance(column, bool) or not isinstance(column, int) or column < 0
        ):
            fail(f"{p}.column", f"expected a non-negative column index, got {column!r}")
        out.append(Filter(var, op, value, column))
    return tuple(out)
