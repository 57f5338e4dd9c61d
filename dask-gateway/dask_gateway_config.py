"""A dask-gateway server for one machine: laptops, workshops and zagg's own tests.

Start it with ``dask-gateway-server -f dask-gateway/dask_gateway_config.py`` from an
environment where zagg is installed (the gateway starts its schedulers and workers with
that environment's ``dask`` command). Everything listens on 127.0.0.1 only:

- ``ZAGG_GATEWAY_ADDRESS`` (default ``127.0.0.1:8000``): the proxy, the one address clients
  use (``zagg.cluster.connect(gateway="http://127.0.0.1:8000")``); it serves the gateway's
  API, the dashboards and, multiplexed on the same port, the schedulers' connections;
- ``ZAGG_GATEWAY_PASSWORD`` (default: none): a shared password of the simple
  authenticator; any user name is accepted.

The backend runs every cluster as processes of the server's own user (no separation
between users): fine on a machine of one's own, never on a shared one. A shared
deployment is Kubernetes: see ``helm-values.yaml`` beside this file.
"""

import os

from dask_gateway_server.options import Float, Integer, Mapping, Options

c = get_config()  # noqa: F821  (traitlets hands the config file this name)

address = os.environ.get("ZAGG_GATEWAY_ADDRESS", "127.0.0.1:8000")
if not address.startswith("127.0.0.1:"):
    raise ValueError(f"ZAGG_GATEWAY_ADDRESS={address!r}: this local gateway serves "
                     "127.0.0.1 only (host:port with host 127.0.0.1)")
c.Proxy.address = address  # the HTTP API, the dashboards and the scheduler proxy
c.DaskGateway.address = "127.0.0.1:0"  # the private API the proxy forwards to

c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"
if os.environ.get("ZAGG_GATEWAY_PASSWORD"):
    c.SimpleAuthenticator.password = os.environ["ZAGG_GATEWAY_PASSWORD"]

# distributed no longer installs the dask-scheduler / dask-worker commands the gateway
# calls by default; workers bind 127.0.0.1 too (the scheduler already does)
c.ClusterConfig.scheduler_cmd = ["dask", "scheduler"]
c.ClusterConfig.worker_cmd = ["dask", "worker", "--host", "127.0.0.1"]
c.ClusterConfig.idle_timeout = 3600  # a forgotten cluster goes away after an idle hour

# what a client may choose per cluster: cores and memory of each worker, and the
# environment of its processes (zagg.cluster.connect sends the deployment profile there)
MAX_CORES = os.cpu_count() or 1


def _options_handler(options, user):
    return {"worker_cores": options.worker_cores,
            "worker_memory": f"{options.worker_memory} G",
            "environment": dict(options.environment)}


c.Backend.cluster_options = Options(
    Integer("worker_cores", default=1, min=1, max=MAX_CORES, label="cores per worker"),
    Float("worker_memory", default=2, min=0.25, label="memory per worker (GiB)"),
    Mapping("environment", default={}, label="environment of the worker processes"),
    handler=_options_handler,
)
