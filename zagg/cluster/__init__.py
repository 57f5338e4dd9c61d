"""Where work runs: one way to get a client (local, a scheduler address, a
dask-gateway), the deployment profile applied where processes start, and the
workers' preload.

May import the ground floor, checks, engine and hive (the preload loads them).
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "connect": ".clients",
        "ClusterError": ".clients",
    },
)
