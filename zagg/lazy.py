"""Packages whose public names load their modules on first use.

``import zagg`` (and ``zagg.hive``, ``zagg.sources``) then costs milliseconds instead of
importing numba, mortie, zarr or h5py, which a run's client needs only later and some
processes never.
"""

from __future__ import annotations

import importlib
import sys
import types


class LazyPackage(types.ModuleType):
    """A package whose public names (``_homes``: name → module relative to the package)
    are imported on first access.

    A name that is also its home module's name (``zagg.run``,
    ``zagg.sources.write_granules``) keeps naming the public object: when the import system
    binds that submodule to the package, the object is bound instead (the module stays
    reachable through ``sys.modules``).
    """

    _homes: dict[str, str]

    def __getattr__(self, name: str):
        home = self.__dict__.get("_homes", {}).get(name)
        if home is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, self.__name__), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and self._homes.get(name) == f".{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self._homes))


def lazy_package(name: str, homes: dict[str, str]) -> None:
    """Make the package ``name`` a :class:`LazyPackage` exporting ``homes``."""
    module = sys.modules[name]
    module.__dict__.update(_homes=dict(homes), __all__=sorted(homes))
    module.__class__ = LazyPackage
