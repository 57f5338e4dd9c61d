"""``zagg.cluster.connect``: one function for a local cluster, an existing scheduler or a
dask-gateway cluster (the gateway itself: tests/test_gateway.py)."""

import pytest

from zagg.cluster.clients import ClusterError, connect


def test_a_local_client_owns_its_cluster_and_closes_it():
    with connect(workers=1, threads=1) as client:
        cluster = client.cluster
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert len(client.scheduler_info()["workers"]) == 1
    assert cluster.status.name == "closed"


def test_an_adaptive_local_cluster_starts_workers_for_its_work():
    """From no worker at all (minimum 0): the task runs only once the cluster adapted."""
    with connect(adaptive=(0, 2), threads=1) as client:
        assert client.submit(pow, 2, 10).result(timeout=120) == 1024
        assert 1 <= len(client.scheduler_info()["workers"]) <= 2


def test_a_scheduler_address_gives_a_client_that_leaves_the_cluster_running():
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        client = connect(cluster.scheduler_address)
        assert client.submit(len, "abc").result() == 3
        client.close()
        assert cluster.status.name == "running"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"scheduler": "tcp://127.0.0.1:1", "gateway": "http://127.0.0.1:1"},
            "give a scheduler address or a gateway URL, not both",
        ),
        ({"adaptive": (3, 2)}, r"adaptive=\(3, 2\): need 0 <= minimum <= maximum"),
        ({"adaptive": "lots"}, "adaptive must be \\(minimum, maximum\\) workers"),
        (
            {"scheduler": "tcp://127.0.0.1:1", "adaptive": (1, 2)},
            "adaptive and dashboard are settings of a cluster zagg starts",
        ),
        ({"gateway": "http://127.0.0.1:1", "workers": 0}, "workers must be a whole number >= 1"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_anything_starts(kwargs, message):
    with pytest.raises(ClusterError, match=message):
        connect(**kwargs)
