"""Point-observation sources that zagg can aggregate (currently: seeded synthetic photons)."""

from .synthetic import DEFAULT_REGION, synthetic_photons

__all__ = ["DEFAULT_REGION", "synthetic_photons"]
