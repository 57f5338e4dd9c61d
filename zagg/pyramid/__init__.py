"""The multi-resolution pyramid: every HEALPix order from the leaves' cells down to 0.

- :mod:`~zagg.pyramid.declare` — ``output.pyramid`` → the ``zagg-pyramid/2`` ladder, the
  manifest block and its ``multiscales`` mirror;
- :mod:`~zagg.pyramid.levels` — sparse cells of one resolution and the coarsen-by-4 fold
  that calls each field's reducer :class:`~zagg.reducers.Fold` (the one fold engine);
- :mod:`~zagg.pyramid.column` — the leaf column a leaf's own task writes after its stamp;
- :mod:`~zagg.pyramid.ladder` — the overviews above the shard as a dask graph of 4-to-1
  folds down to order 0; :mod:`~zagg.pyramid.sweep` runs it on a store under the
  :mod:`~zagg.pyramid.lease`;
- :mod:`~zagg.pyramid.windowed` — a windowed store's sweep: one ladder per time window,
  then each node's all-time ``all.zarr`` folded from its window overviews;
- :mod:`~zagg.pyramid.companion` — the store-root ``multiscales/`` group documents that
  let stock zarr tools walk the ladder (written after each run and sweep);
- :mod:`~zagg.pyramid.icechunk` — the Icechunk companion ``icechunk/``: each leaf task's
  ref carrier and the commits of every level's references after a run and its sweep;
  :mod:`~zagg.pyramid.icechunk_runs` closes each run (finalize, its tag, retention) and
  tells the version collector what the kept history reads;
  :mod:`~zagg.pyramid.icechunk_knobs` parses ``output.icechunk``.

May import the ground floor, checks, hive, reducers and kernels.
"""

from zagg.lazy import lazy_package

lazy_package(
    __name__,
    {
        "sweep": ".sweep",
        "SweepRefused": ".lease",
    },
)
