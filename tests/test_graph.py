"""The aggregation's task graph: shape, priorities, and results independent of tree shape."""

import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr
from dask.task_spec import Task
from test_aggregate import P, make_config, make_points
from test_hive_builders import chunk_objects

import zagg
from zagg import graph
from zagg import grid as G
from zagg.aggregate import Plan

aggregate_module = importlib.import_module("zagg.aggregate")


def _shared(tasks: dict, cls) -> list:
    """The objects of class ``cls`` that ``tasks`` share by key. Each must be a task (not
    a bare literal, which distributed's scheduler would hold back as a data producer
    while other tasks are ready)."""
    from dask.task_spec import DataNode, Task

    assert not any(isinstance(v, (cls, DataNode)) for v in tasks.values())
    out = [v() for v in tasks.values()
           if isinstance(v, Task) and not v.dependencies and isinstance(v(), cls)]
    for v in tasks.values():
        if isinstance(v, Task) and not v.dependencies:
            assert not v.data_producer
    return out


def _chain_layer(res):
    hlg = res["count"].data.__dask_graph__()
    return hlg, hlg.layers[res.attrs["zagg"]["contents"]["layer"]]


def _in_one_process(monkeypatch, inline: bool) -> None:
    """Build the next graphs as if the chunk results were (not) all in one process."""
    monkeypatch.setattr(aggregate_module, "_in_one_process", lambda results, found: inline)


@pytest.mark.parametrize("inline", [False, True])
def test_chain_holds_plan_once_and_its_tasks_per_piece_combine_contents_finalize(
        monkeypatch, inline):
    ds = make_points(6000, seed=3)
    _in_one_process(monkeypatch, inline)
    res = zagg.aggregate(ds, make_config(), chunk_size=1000)
    _, layer = _chain_layer(res)
    tasks = dict(layer)
    jobs = _shared(tasks, graph.ShardJob)
    assert len(jobs) == 1 and isinstance(jobs[0].plan, Plan)
    shards = res.attrs["zagg"]["shards"]
    kinds = {}
    for k in tasks:
        if isinstance(k, tuple):
            kinds.setdefault(k[0].split("-")[1], set()).add(k[1])
    # every shard has its contents and finalize task; pieces only where chunks touch it
    assert kinds["contents"] == kinds["finalize"] == set(range(len(shards)))
    assert "combine" in kinds  # six chunks: shards touched by several chunks are combined
    waits = set().union(*(tasks[k].dependencies for k in tasks
                          if isinstance(k, tuple) and "-combine-" in k[0]))
    chunk_results = {k for k in waits if isinstance(k, tuple) and "-reduce-" in k[0]}
    if inline:  # each combine cuts its pieces from the chunk results it waits for
        assert "piece" not in kinds
        assert len(chunk_results) == 6
        assert all(k in chunk_results or k in tasks for k in waits)
    else:  # a task per piece, run where its chunk's result lives
        assert kinds["piece"] == set(range(len(shards)))
        assert not chunk_results


def test_pieces_are_cut_inside_the_combines_when_one_process_holds_every_chunk():
    from distributed import Client, LocalCluster, futures_of, wait

    from zagg.aggregate import _in_one_process as one_process
    from zagg.config import load_config
    from zagg.graph import chunk_tasks

    def chunk_results(seed):
        ds = make_points(4000, seed=seed).chunk({"obs": 1000})
        blocks = zip(*[ds[n].data.to_delayed().reshape(-1) for n in ("lat", "lon", "h")],
                     strict=True)
        return chunk_tasks(plan, list(blocks))

    plan = aggregate_module.make_plan(load_config(make_config()))
    assert one_process([], discovered=True)  # no client: everything in this process
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        spread = [client.persist(r, workers=[workers[j % 2]])
                  for j, r in enumerate(chunk_results(8))]
        together = [client.persist(r, workers=[workers[0]]) for r in chunk_results(9)]
        wait(futures_of([*spread, *together]))
        assert not one_process(spread, discovered=True)
        assert one_process(together, discovered=True)
        assert not one_process(chunk_results(10), discovered=False)  # two workers could


def _clusters(sizes, seed=0):
    """``sizes[i]`` points spread over one whole shard (order P) near the i-th of some
    far-apart places."""
    rng = np.random.default_rng(seed)
    places = [(-75.5, -99.0), (-60.0, 10.0), (45.0, 120.0), (10.0, -40.0)]
    lat, lon = [], []
    for (y, x), n in zip(places[: len(sizes)], sizes, strict=True):
        cy, cx = y + rng.uniform(-1, 1, 40 * n + 400), x + rng.uniform(-1, 1, 40 * n + 400)
        shard = G.cell_words(cy, cx, P)[0]
        words, inverse = np.unique(shard, return_inverse=True)
        keep = shard == words[np.bincount(inverse).argmax()]
        lat.append(cy[keep][:n])
        lon.append(cx[keep][:n])
        assert lat[-1].size == n
    lat, lon = np.concatenate(lat), np.concatenate(lon)
    h = rng.normal(100.0, 5.0, lat.size).astype(np.float32)
    q = np.zeros(lat.size, np.int8)
    return xr.Dataset({"lat": ("obs", lat), "lon": ("obs", lon), "h": ("obs", h), "q": ("obs", q)})


def test_every_shard_task_carries_its_shard_priority_heaviest_shard_first():
    sizes = [300, 4000, 50, 1200]
    ds = _clusters(sizes)
    res = zagg.aggregate(ds, make_config(), chunk_size=1000)
    hlg, _ = _chain_layer(res)
    shards = res.attrs["zagg"]["shards"]
    n = len(shards)
    assert n == 4
    words = G.cell_words(ds["lat"].values, ds["lon"].values, P)[0]
    points = {s: int(np.sum(words == G.from_decimal([s])[0])) for s in shards}
    assert sorted(points.values()) == sorted(sizes)
    by_weight = sorted(range(n), key=lambda i: -points[shards[i]])
    expected = {i: n - rank for rank, i in enumerate(by_weight)}
    seen = set()
    for name in [res.attrs["zagg"]["contents"]["layer"], res["count"].data.name,
                 res["morton"].data.name]:
        layer = hlg.layers[name]
        prio = layer.annotations["priority"]
        for key in layer:
            if isinstance(key, tuple):
                stage = key[0].split("-")[1] if key[0].split("-")[1] in graph.STAGES else "output"
                assert prio(key) == expected[key[1]] * len(graph.STAGES) + graph.STAGES.index(stage)
                seen.add(key[1])
            else:  # the shared job: needed before any shard
                assert prio(key) == (n + 1) * len(graph.STAGES)
    assert seen == set(range(n))


def test_given_shards_are_prioritised_in_shard_order():
    ds = make_points(3000, seed=4)
    shards = zagg.aggregate(ds, make_config(), chunk_size=1000).attrs["zagg"]["shards"]
    res = zagg.aggregate(ds, make_config(), shards=shards, chunk_size=1000)
    hlg, layer = _chain_layer(res)
    n = len(shards)
    assert {
        layer.annotations["priority"](k) // len(graph.STAGES)
        for k in layer
        if isinstance(k, tuple) and k[1] == 0
    } == {n}
    assert res.attrs["zagg"]["contents"]["blocks"] == [1] * n


def test_write_tasks_carry_priorities_and_share_one_writer(tmp_path):
    from zagg.write import LeafWriter, prepare_write

    res = zagg.aggregate(make_points(3000, seed=5), make_config(), chunk_size=1000)
    w = prepare_write(res, tmp_path / "s")
    hlg = w.tasks[0].__dask_graph__()
    layer = hlg.layers[w.tasks[0].__dask_layers__()[0]]
    writers = _shared(dict(layer), LeafWriter)
    assert len(writers) == 1
    n = len(w.shards)
    last = len(graph.STAGES) - 1  # a write goes before any other task of its shard
    assert [layer.annotations["priority"](t.key) for t in w.tasks] == [
        p * len(graph.STAGES) + last for p in res.attrs["zagg"]["contents"]["priority"]
    ]
    assert sorted(res.attrs["zagg"]["contents"]["priority"]) == list(range(1, n + 1))
    summary = w.execute()
    assert summary.leaves_written == n


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("fan_in", [2, 3])
def test_results_do_not_depend_on_the_combine_tree_shape(monkeypatch, fan_in, inline):
    ds = make_points(8000, seed=6)
    cfg = make_config()
    flat = zagg.aggregate(ds, cfg, chunk_size=500).compute()
    monkeypatch.setattr(graph, "FAN_IN", fan_in)
    _in_one_process(monkeypatch, inline)
    deep = zagg.aggregate(ds, cfg, chunk_size=500)
    tasks = dict(_chain_layer(deep)[1])
    depths = {k[3] for k in tasks if isinstance(k, tuple) and "-combine-" in k[0]}
    assert max(depths) >= 1  # 16 chunks at fan-in 2 or 3: at least two combine levels
    _assert_same_values(flat, deep.compute())


def _assert_same_values(a, b):
    """Every variable of two computed leaf Datasets holds the same values."""
    for name in a.variables:
        x, y = a[name].values, b[name].values
        if x.dtype == object:
            assert all(p == q for p, q in zip(x, y, strict=True)), name
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("sharded", [True, False])
def test_heavy_shards_split_into_blocks_give_the_same_values_and_bytes(
    monkeypatch, tmp_path, sharded, inline
):
    _in_one_process(monkeypatch, inline)
    ds = _clusters([6000, 900, 40], seed=7)
    cfg = make_config(sharded=sharded)
    whole = zagg.aggregate(ds, cfg, chunk_size=1000)
    assert whole.attrs["zagg"]["contents"]["blocks"] == [1, 1, 1]
    monkeypatch.setattr(graph, "BLOCK_ROWS", 1000)
    split = zagg.aggregate(ds, cfg, chunk_size=1000)
    blocks = split.attrs["zagg"]["contents"]["blocks"]
    order = np.argsort(split.attrs["zagg"]["contents"]["priority"])[::-1]
    # the heaviest shard (about 6000 points and their cells) in 8 or 16 blocks, the
    # lightest whole; every block count divides the leaf's 256 inner chunks
    assert blocks[order[0]] in (8, 16) and blocks[order[-1]] == 1
    tasks = dict(_chain_layer(split)[1])
    block_keys = {k[1:] for k in tasks if isinstance(k, tuple) and "-blockcontents-" in k[0]}
    assert block_keys == {(i, b) for i, nb in enumerate(blocks) if nb > 1 for b in range(nb)}

    _assert_same_values(whole.compute(), split.compute())

    s1 = zagg.to_hive(whole, tmp_path / "whole")
    s2 = zagg.to_hive(split, tmp_path / "split")
    assert s1.leaves_written == s2.leaves_written == 3
    h1 = {r["shard_id"]: r["content_hashes"] for r in s1.records}
    h2 = {r["shard_id"]: r["content_hashes"] for r in s2.records}
    assert h1 == h2
    o1, o2 = chunk_objects(tmp_path / "whole"), chunk_objects(tmp_path / "split")
    assert o1.keys() == o2.keys() and all(o1[k] == o2[k] for k in o1)
    from zagg.write import prepare_write

    w = prepare_write(split, tmp_path / "again")
    layer = dict(w.tasks[0].__dask_graph__().layers[w.tasks[0].__dask_layers__()[0]])
    encodes = [k for k in layer if isinstance(k, tuple) and "-encode-" in k[0]]
    assert len(encodes) == sum(nb for nb in blocks if nb > 1)


def test_a_write_whose_recorded_priorities_do_not_fit_goes_in_shard_order(tmp_path):
    from zagg.write import prepare_write

    res = zagg.aggregate(make_points(3000, seed=5), make_config(), chunk_size=1000).compute()
    n = len(res.attrs["zagg"]["shards"])
    z = res.attrs["zagg"]
    res.attrs["zagg"] = {**z, "contents": {**z["contents"], "priority": [1]}}
    w = prepare_write(res, tmp_path / "s")
    layer = w.tasks[0].__dask_graph__().layers[w.tasks[0].__dask_layers__()[0]]
    write = graph.STAGES.index("write")
    assert [layer.annotations["priority"](t.key) for t in w.tasks] == \
        [(n - i) * len(graph.STAGES) + write for i in range(n)]
    assert w.execute().leaves_written == n


def _reduce_keys(results):
    """Per reduction task of ``results``: the keys it waits for, and the graph's keys."""
    from dask.task_spec import Task

    dsk = dict(results[0].dask)
    deps = {r.key: dsk[r.key].dependencies for r in results}
    assert all(isinstance(dsk[r.key], Task) for r in results)
    return deps, set(dsk)


def _partials_equal(a, b):
    assert np.array_equal(a.shards, b.shards) and np.array_equal(a.bounds, b.bounds)
    assert np.array_equal(a.partial.cells, b.partial.cells)


def test_input_reads_run_inside_the_reductions_that_read_them(tmp_path):
    import dask

    from zagg.aggregate import make_plan, reduce_chunk
    from zagg.config import load_config

    ds = make_points(5000, seed=4)
    ds.chunk({"obs": 1000}).to_zarr(tmp_path / "p.zarr", zarr_format=3, consolidated=False)
    opened = xr.open_zarr(tmp_path / "p.zarr", zarr_format=3, consolidated=False)
    plan = make_plan(load_config(make_config()))
    blocks = list(zip(*[opened[n].data.to_delayed(optimize_graph=False).reshape(-1)
                        for n in plan.inputs], strict=True))
    results = graph.chunk_tasks(plan, blocks)
    deps, keys = _reduce_keys(results)
    reads = {b.key for blk in blocks for b in blk}
    # no task of its own per chunk and array: a reduction waits only for the plan and the
    # opened arrays, which every chunk shares
    for d in deps.values():
        assert not d & reads
        assert len(d) == 1 + len(plan.inputs)
    # the nested reads are zagg's read_block, so a worker needs no dask.array to run them
    layer = results[0].dask.layers[results[0].key[0]]
    nested = [a for task in layer.values() if task.func is reduce_chunk for a in task.args
              if isinstance(a, Task)]
    assert len(nested) == len(blocks) * len(plan.inputs)
    assert {a.func for a in nested} == {graph.read_block}
    with dask.config.set(scheduler="sync"):
        got = dask.compute(*results)
    for j, r in enumerate(got):
        rows = slice(1000 * j, 1000 * (j + 1))
        want = reduce_chunk(plan, *[ds[n].values[rows] for n in plan.inputs])
        _partials_equal(r, want)
        assert r.counts == want.counts


def test_read_block_reads_as_dask_getter_does():
    import threading

    from dask.array.core import getter

    values = np.arange(12.0).reshape(3, 4)

    class CountingLock:
        def __init__(self):
            self.lock, self.taken = threading.Lock(), 0

        def acquire(self):
            self.taken += 1
            self.lock.acquire()

        def release(self):
            self.lock.release()

    lock = CountingLock()
    for index in [(slice(0, 2), slice(1, 3)), (1, slice(None)), (slice(None), None, 2)]:
        got = graph.read_block(values, index, lock=lock)
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, getter(values, index))
    assert lock.taken == 3 and not lock.lock.locked()
    as_list = graph.read_block([[1, 2], [3, 4]], 1)
    assert type(as_list) is np.ndarray and as_list.tolist() == [3, 4]
    assert graph.read_block([[1, 2], [3, 4]], 1, asarray=False) == [3, 4]


def test_a_block_read_by_two_inputs_stays_one_task():
    import dask

    from zagg.aggregate import make_plan, reduce_chunk
    from zagg.config import load_config

    ds = make_points(2000, seed=5).chunk({"obs": 1000})
    plan = make_plan(load_config(make_config()))
    per = {n: ds[n].data.to_delayed(optimize_graph=False).reshape(-1) for n in plan.inputs}
    per[plan.inputs[-1]] = per[plan.inputs[0]]  # one block read for two inputs
    blocks = list(zip(*[per[n] for n in plan.inputs], strict=True))
    results = graph.chunk_tasks(plan, blocks)
    deps, _ = _reduce_keys(results)
    for j, d in enumerate(deps.values()):
        assert blocks[j][-1].key in d  # referenced, computed once, not inlined twice
    with dask.config.set(scheduler="sync"):
        got = dask.compute(*results)
    for j, r in enumerate(got):
        arrays = [b.compute() for b in blocks[j]]
        _partials_equal(r, reduce_chunk(plan, *arrays))


def test_a_process_first_input_read_starts_numbas_setup_in_the_background():
    """Reading a process's first input block starts numba's one-time set-up in a thread of
    its own (so the first reductions find it done), once: later reads start nothing."""
    code = textwrap.dedent("""
        import numpy as np
        from zagg import graph
        from zagg.kernels import setup
        assert setup._thread is None and not setup._first_call.signatures
        block = graph.read_block(np.arange(10.0), (slice(2, 5),))
        started = setup._thread
        started.join()
        graph.read_block(np.arange(10.0), (slice(0, 1),))
        print(block.tolist() == [2.0, 3.0, 4.0], started.name, started.daemon,
              bool(setup._first_call.signatures), setup._thread is started)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "zagg-numba-setup", "True", "True", "True"]
