"""zagg: aggregate point observations onto HEALPix morton cells, lazily, with dask.

The public names load their modules on first use, so ``import zagg`` (and the CLI, which
starts a run's cluster before it imports numba, dask and xarray) stays fast.
"""

from __future__ import annotations

import importlib
import sys
import types

_PUBLIC = {
    "aggregate": ".aggregate",
    "load_config": ".config",
    "ConfigError": ".config",
    "open_hive": ".read",
    "open_leaf": ".read",
    "quantile": ".read",
    "run": ".run",
    "to_hive": ".write",
}

__all__ = list(_PUBLIC)
__version__ = "0.1.0"


class _Package(types.ModuleType):
    """``zagg.aggregate`` and ``zagg.run`` name functions, not their modules: when the
    import system binds such a submodule to the package, the function is bound instead (the
    module stays reachable through ``sys.modules``)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == f".{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'zagg' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
