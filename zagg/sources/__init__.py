"""Point-observation sources zagg aggregates: HDF5 granules (local or S3, optionally through
a catalog) and the seeded synthetic photon generator.

The names below load their module on first use, so a process that only generates or reads
points of one kind (a worker running synthetic chunks, say) never imports h5py for the
others.
"""

import importlib

_HOMES = {
    "DEFAULT_REGION": "synthetic",
    "open_granules": "granules",
    "parse_granule_source": "granules",
    "synthetic_photons": "synthetic",
    "write_granules": "write_granules",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # over the submodule the import bound to the same name
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
