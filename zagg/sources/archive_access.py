"""How a process reads an archive granule: straight from the DAAC's S3 bucket with temporary
keys, or over HTTPS with an Earthdata bearer token.

An archive granule keeps one href, its ``s3://BUCKET/KEY`` (its id, its catalog entry and
the re-run gate's records never depend on where it is read from). Its storage options
say how it is read, and hold no secret: ``{"archive": {"access", "https", "credentials",
"endpoint_url", "region"}}`` (:func:`access_options`). With ``access: s3`` the process
reads the bucket with keys from the ``credentials`` endpoint, refreshed before they expire
(:mod:`zagg.sources.archive_login`); with ``access: https`` it reads
``{https}/BUCKET/KEY`` in ranged requests with the bearer token of its own environment.

``auto`` (the default) reads S3 directly inside the archive's AWS region and over HTTPS
anywhere else (:func:`zagg.sources.archive_endpoints.in_region`); a search's ``access``
key overrides it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from zagg.checks.credentials import StorageOptions
from zagg.sources.archive_endpoints import Endpoints, endpoints, in_region
from zagg.sources.archive_login import bearer_token, refreshing_session, s3_keys
from zagg.sources.archive_query import ACCESS
from zagg.sources.errors import ArchiveError, ArchiveLoginError, ArchiveUnreachable

__all__ = [
    "ACCESS",
    "ARCHIVE_KEY",
    "access_options",
    "choose_access",
    "filesystem_kwargs",
    "is_archive",
    "preflight",
    "read_url",
]

#: the storage-options key that marks an archive granule's access
ARCHIVE_KEY = "archive"


def choose_access(access: str = "auto", environ=None) -> str:
    """``s3`` or ``https``: ``access`` itself, or for ``auto`` S3 inside the archive's
    region and HTTPS elsewhere."""
    if access == "auto":
        return "s3" if in_region(environ) else "https"
    return access


def access_options(
    access: str, https: str, where: Endpoints | None = None, environ=None
) -> StorageOptions:
    """The storage options of archive granules read by ``access`` (``auto`` decided
    here), whose HTTPS host root is ``https`` (its ``/s3credentials`` issues S3 keys)."""
    where = where or endpoints(environ)
    https = https.rstrip("/")
    return StorageOptions(
        {
            ARCHIVE_KEY: {
                "access": choose_access(access, environ),
                "https": https,
                "credentials": f"{https}/s3credentials",
                "endpoint_url": where.s3,
                "region": where.region,
            }
        }
    )


def is_archive(options: Mapping | None) -> bool:
    return bool(options) and ARCHIVE_KEY in options


def read_url(href: str, options: Mapping) -> str:
    """Where an archive granule ``s3://BUCKET/KEY`` is read: itself, or its HTTPS URL."""
    spec = options[ARCHIVE_KEY]
    if spec["access"] == "https" and href.startswith("s3://"):
        return f"{spec['https']}/{href[len('s3://') :]}"
    return href


_sessions: dict[str, object] = {}  # credentials endpoint -> fsspec's loop's session
_sessions_lock = threading.Lock()


def filesystem_kwargs(options: Mapping, own_loop: bool) -> tuple[str, dict]:
    """``(protocol, fsspec keyword arguments)`` reading archive granules under
    ``options``. The token and keys are this process's own. ``own_loop``: the filesystem
    runs on an event loop of its own thread (a fresh S3 session, since botocore's refresh
    lock belongs to one loop), else on fsspec's shared loop (one session per process)."""
    spec = options[ARCHIVE_KEY]
    if spec["access"] == "https":
        headers = {"Authorization": f"Bearer {bearer_token()}"}
        return "https", {"client_kwargs": {"headers": headers}}
    url = spec["credentials"]
    if own_loop:
        session = refreshing_session(url)
    else:
        with _sessions_lock:
            session = _sessions.get(url)
            if session is None:
                session = _sessions[url] = refreshing_session(url)
    kwargs = {"session": session, "client_kwargs": {"region_name": spec["region"]}}
    if spec.get("endpoint_url"):
        kwargs["endpoint_url"] = spec["endpoint_url"]
    return "s3", kwargs


def preflight(href: str, options: Mapping) -> None:
    """Refuse, before anything is read, an archive access that cannot work: no or an
    expired Earthdata login, a token the credentials endpoint refuses, keys or a token
    the granule's store refuses, a service that does not answer. One request for the
    first bytes of ``href`` (after the keys, under ``access: s3``)."""
    import fsspec

    spec = options[ARCHIVE_KEY]
    if spec["access"] == "s3":
        s3_keys(spec["credentials"])
    else:
        bearer_token()
    protocol, kwargs = filesystem_kwargs(options, own_loop=False)
    url = read_url(href, options)
    try:
        fs = fsspec.filesystem(protocol, **kwargs)
        fs.cat_file(url, start=0, end=8)
    except ArchiveError:
        raise
    except Exception as exc:  # botocore, aiohttp and OS errors of many kinds
        raise _refusal(exc, url, spec) from None


def _refusal(exc: Exception, url: str, spec: Mapping) -> ArchiveError:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    status = getattr(exc, "status", None)
    denied = (
        isinstance(exc, PermissionError)
        or status in (401, 403)
        or any(
            w in text for w in ("AccessDenied", "ExpiredToken", "InvalidAccessKeyId", "Signature")
        )
    )
    if spec["access"] == "https":
        fix = "set EARTHDATA_TOKEN to a valid Earthdata token on the client and every worker"
    else:
        fix = (
            "direct S3 reads work only inside AWS us-west-2 with keys from "
            f"{spec['credentials']}; elsewhere read over HTTPS (access: https)"
        )
    if denied:
        return ArchiveLoginError(f"the archive refused to read {url} ({text}); {fix}")
    if isinstance(exc, FileNotFoundError):
        return ArchiveError(
            f"the archive has no granule at {url}, though the search listed it; search again"
        )
    return ArchiveUnreachable(f"the archive did not answer for {url} ({text}); {fix}")
