"""Where NASA's Earthdata archive answers: the one place that names its addresses.

Production defaults are NASA's own services: the CMR search API, Earthdata Login (EDL),
and AWS S3 in us-west-2 where the DAACs' cloud buckets live. The S3 credentials endpoint of
a granule's archive and its HTTPS host are not configured here: they are read from the
granule's own links (``https://HOST/BUCKET/KEY`` and ``s3://BUCKET/KEY``; a DAAC's HTTPS
host serves ``/s3credentials``). Environment variables override addresses only, so a run
against local stand-ins (the tests' archive server) takes the production code path:

``ZAGG_CMR_URL``          the CMR search root (``.../search``)
``ZAGG_EDL_URL``          the Earthdata Login root (tokens from a username and password)
``ZAGG_S3_ENDPOINT_URL``  an S3 endpoint other than AWS's

Credentials never live here: :mod:`zagg.sources.archive_login` reads them from the
environment of the process that needs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ARCHIVE_REGION",
    "CMR_URL",
    "EDL_URL",
    "Endpoints",
    "endpoints",
    "in_region",
]

#: NASA's CMR search root
CMR_URL = "https://cmr.earthdata.nasa.gov/search"
#: Earthdata Login
EDL_URL = "https://urs.earthdata.nasa.gov"
#: the AWS region of the Earthdata cloud's buckets: direct S3 access only works from there
ARCHIVE_REGION = "us-west-2"
#: seconds one request to a service may take before it counts as unreachable
TIMEOUT = 60.0


@dataclass(frozen=True)
class Endpoints:
    """The addresses a search and its reads use (no credentials): the CMR search root,
    Earthdata Login, and the S3 endpoint (None: AWS's own, in ``region``)."""

    cmr: str = CMR_URL
    edl: str = EDL_URL
    s3: str | None = None
    region: str = ARCHIVE_REGION


def endpoints(environ: Mapping[str, str] | None = None) -> Endpoints:
    """The production addresses, each overridden by its environment variable if set."""
    env = os.environ if environ is None else environ

    def pick(name: str, default):
        value = env.get(name, "").strip()
        return value.rstrip("/") if value else default

    return Endpoints(
        cmr=pick("ZAGG_CMR_URL", CMR_URL),
        edl=pick("ZAGG_EDL_URL", EDL_URL),
        s3=pick("ZAGG_S3_ENDPOINT_URL", None),
    )


def in_region(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in the archive's AWS region, as the standard AWS
    variables say (``AWS_REGION``, else ``AWS_DEFAULT_REGION``; hubs in AWS set them).
    No request is made: a machine elsewhere must not wait on a metadata service."""
    env = os.environ if environ is None else environ
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ""
    return region.strip() == ARCHIVE_REGION
