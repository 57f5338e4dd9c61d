"""The names of a run's task stages, and deterministic task keys built from them.

Every layer of dask tasks zagg builds is named ``{stage}-{token}``, the token coming from
:func:`dask.base.tokenize` of what the layer depends on (its inputs' names and the plan),
never from a random id: a graph built twice from the same inputs has the same keys, so a
re-submitted graph reuses what the cluster already holds, and the dashboard's task stream
and :mod:`zagg.pipeline.timings` group a run's tasks by the same prefixes every time.
A layer with an effect (writing leaves) also hashes its run's id: two runs are two writes,
and a second run must never be answered by the first one's results still on a cluster.
Imports nothing heavy at module load, so every floor of the package can use it.
"""

from __future__ import annotations

#: the per-chunk keyed reduction (blockwise over the input's chunks)
REDUCE_CHUNK = "reduce-chunk"
#: one chunk's piece of one shard, cut where the chunk's result lives
PIECE = "piece"
#: the tree combine of one shard's pieces
COMBINE = "combine"
#: one shard's last merge and finalize: its occupied cells
SHARD_CELLS = "shard-cells"
#: one leaf written (its arrays, coverage, stamp, pointer, sidecars and column)
WRITE_LEAF = "write-leaf"
#: one array of a big leaf encoded (chunk objects and digest) beside the leaf's others,
#: before the leaf's write-leaf task writes them
ENCODE_LEAF = "encode-leaf"
#: a user's sparse Dataset cut back into shards for writing
DATASET_CELLS = "cells"
#: one node of the pyramid sweep, folding its four children
FOLD_NODE = "fold-node"

#: task-key prefix → the stage a run's timings report it under; prefixes not listed are the
#: input's tasks ("read")
STAGE_OF = {
    REDUCE_CHUNK: "key + reduce",
    PIECE: "combine",
    COMBINE: "combine",
    SHARD_CELLS: "combine",
    "merge-shard": "combine",
    WRITE_LEAF: "write",
    ENCODE_LEAF: "write",
    FOLD_NODE: "pyramid",
    "summary": "other",
    "result": "other",
}
#: the stages in pipeline order
ORDER = ("read", "key + reduce", "combine", "write", "pyramid", "other")


def stage_of(prefix: str) -> str:
    """The stage a task-key prefix belongs to."""
    if prefix in STAGE_OF:
        return STAGE_OF[prefix]
    if prefix.startswith(("fold-", "column-", "overview-")):
        return "pyramid"
    return "read"


def layer_name(stage: str, *depends_on) -> str:
    """``{stage}-{token}``: the name of a layer of ``stage`` tasks over ``depends_on``
    (input collection names, plans, store URLs: anything :func:`~dask.base.tokenize`
    hashes deterministically)."""
    from dask.base import tokenize

    return f"{stage}-{tokenize(stage, *depends_on)}"
