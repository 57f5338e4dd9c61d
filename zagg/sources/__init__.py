"""Point-observation sources zagg aggregates, each a registered record
(:mod:`zagg.sources.registry`): HDF5 granules (local or S3, optionally through a catalog),
zarr/netCDF and Parquet/GeoParquet inputs, and the seeded synthetic photon generator.

The names below load their module on first use, so a process that only generates or reads
points of one kind (a worker running synthetic chunks, say) never imports h5py for the
others.

May import the ground floor, checks, kernels and windows (the clocks of time variables);
never a store or a run.
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "DEFAULT_REGION": ".synthetic",
        "DataSource": ".record",
        "Footprint": ".record",
        "Source": ".record",
        "register": ".registry",
        "open_granules": ".granules",
        "parse_granule_source": ".granules",
        "synthetic_photons": ".synthetic",
        "write_granules": ".write_granules",
    },
)
