"""The aggregation's task graph: shape, priorities, and results independent of tree shape."""

import numpy as np
import pytest
from test_aggregate import make_config, make_points

import zagg
from zagg import graph
from zagg.aggregate import Plan


def _chain_layer(res):
    hlg = res["count"].data.__dask_graph__()
    return hlg, hlg.layers[res.attrs["zagg"]["contents"]["layer"]]


def test_chain_holds_plan_once_and_one_task_per_piece_combine_contents_finalize():
    ds = make_points(6000, seed=3)
    res = zagg.aggregate(ds, make_config(), chunk_size=1000)
    _, layer = _chain_layer(res)
    tasks = dict(layer)
    jobs = [v for v in tasks.values() if isinstance(v, graph.ShardJob)]
    assert len(jobs) == 1 and isinstance(jobs[0].plan, Plan)
    shards = res.attrs["zagg"]["shards"]
    kinds = {}
    for k in tasks:
        if isinstance(k, tuple):
            kinds.setdefault(k[0].split("-")[1], set()).add(k[1])
    # every shard has its contents and finalize task; pieces only where chunks touch it
    assert kinds["contents"] == kinds["finalize"] == set(range(len(shards)))
    assert kinds["piece"] == set(range(len(shards)))
    assert "combine" in kinds  # six chunks: shards touched by several chunks are combined


def test_every_shard_task_carries_its_shard_priority():
    ds = make_points(6000, seed=4)
    res = zagg.aggregate(ds, make_config(), chunk_size=1000)
    hlg, _ = _chain_layer(res)
    n = len(res.attrs["zagg"]["shards"])
    assert n > 1
    seen = set()
    for name in [res.attrs["zagg"]["contents"]["layer"], res["count"].data.name,
                 res["morton"].data.name]:
        layer = hlg.layers[name]
        prio = layer.annotations["priority"]
        for key in layer:
            if isinstance(key, tuple):
                assert prio(key) == n - key[1]
                seen.add(key[1])
            else:
                assert prio(key) == n + 1  # the shared job: needed before any shard
    assert seen == set(range(n))


def test_write_tasks_carry_priorities_and_share_one_writer(tmp_path):
    from zagg.write import LeafWriter, prepare_write

    res = zagg.aggregate(make_points(3000, seed=5), make_config(), chunk_size=1000)
    w = prepare_write(res, tmp_path / "s")
    hlg = w.tasks[0].__dask_graph__()
    layer = hlg.layers[w.tasks[0].__dask_layers__()[0]]
    writers = [v for v in dict(layer).values() if isinstance(v, LeafWriter)]
    assert len(writers) == 1
    n = len(w.shards)
    assert sorted(layer.annotations["priority"](t.key) for t in w.tasks) == list(range(1, n + 1))
    summary = w.execute()
    assert summary.leaves_written == n


@pytest.mark.parametrize("fan_in", [2, 3])
def test_results_do_not_depend_on_the_combine_tree_shape(monkeypatch, fan_in):
    ds = make_points(8000, seed=6)
    cfg = make_config()
    flat = zagg.aggregate(ds, cfg, chunk_size=500).compute()
    monkeypatch.setattr(graph, "FAN_IN", fan_in)
    deep = zagg.aggregate(ds, cfg, chunk_size=500)
    tasks = dict(_chain_layer(deep)[1])
    depths = {k[2] for k in tasks if isinstance(k, tuple) and "-combine-" in k[0]}
    assert max(depths) >= 1  # 16 chunks at fan-in 2 or 3: at least two combine levels
    deep = deep.compute()
    for name in flat.data_vars:
        a, b = flat[name].values, deep[name].values
        if a.dtype == object:
            assert all(x == y for x, y in zip(a, b, strict=True)), name
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
