"""Reducer records: how a cell's points become a state (chunk), how states merge
(combine), how the stored value is made (finalize), fill, dtype and pyramid class;
the registry, the states and their partial merges, the timed state.

May import the ground floor, checks, windows (the time algebra) and kernels.
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "Reducer": ".records",
        "State": ".records",
        "Fold": ".records",
        "register": ".records",
        "unregister": ".records",
        "get": ".records",
    },
)
