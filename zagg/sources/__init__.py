"""Point-observation sources zagg aggregates: HDF5 granules (local or S3, optionally through
a catalog) and the seeded synthetic photon generator."""

from .granules import open_granules, parse_granule_source
from .synthetic import DEFAULT_REGION, synthetic_photons
from .write_granules import write_granules

__all__ = ["DEFAULT_REGION", "open_granules", "parse_granule_source", "synthetic_photons",
           "write_granules"]
