"""What a source variable measures: the CF ``long_name`` and ``units`` zagg names it by.

A stored field's attrs are a function of its config alone (every leaf of a store, and every
re-run, writes the same array metadata), so they cannot come from the attrs of whichever
granule a worker happened to open. Instead the variables of the products zagg reads
(ICESat-2 ATL03, ATL06 and ATL08, and the synthetic generator that mimics ATL03) are named
here once; any other variable is described by its own name, with no units, unless the
field's ``attrs`` in the config say otherwise.
"""

from __future__ import annotations

from typing import NamedTuple


class Quantity(NamedTuple):
    """A CF-style description: ``long_name`` and ``units`` (None: not known)."""

    long_name: str
    units: str | None


#: variable name → what it measures (UDUNITS spellings; "1" for dimensionless)
KNOWN = {
    "h_ph": Quantity("photon height", "m"),
    "h_li": Quantity("land ice height", "m"),
    "h_li_sigma": Quantity("land ice height uncertainty", "m"),
    "h_te_mean": Quantity("terrain height", "m"),
    "h_canopy": Quantity("canopy height", "m"),
    "dem_h": Quantity("DEM height", "m"),
    "geoid": Quantity("geoid height", "m"),
    "signal_conf_ph": Quantity("photon signal confidence", "1"),
    "quality_ph": Quantity("photon quality flag", "1"),
    "atl03_cnf": Quantity("photon signal confidence", "1"),
    "lat_ph": Quantity("latitude", "degrees_north"),
    "lon_ph": Quantity("longitude", "degrees_east"),
    "latitude": Quantity("latitude", "degrees_north"),
    "longitude": Quantity("longitude", "degrees_east"),
}


def quantity(name: str) -> Quantity:
    """The description of source variable ``name``: known, or its own name without units."""
    return KNOWN.get(name, Quantity(name, None))
