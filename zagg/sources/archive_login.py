"""Logging in to the Earthdata archive from the process that reads: a bearer token, and the
temporary S3 keys a DAAC issues for it, refreshed before they expire.

Every process that reads granules (each dask worker, the client that scans them) logs in
by itself: it reads its Earthdata login from its own environment
(:func:`zagg.checks.credentials.earthdata_login`) and asks the DAAC's ``/s3credentials``
endpoint for keys. Nothing secret is in a task graph, a config or a log: a graph carries
only the endpoint's address.

S3 keys last an hour in production. :class:`S3Keys` keeps one set per endpoint for the
whole process and fetches new ones once less than a fraction of their life is left;
:func:`refreshing_session` hands botocore (through a credential provider, its documented
extension point) credentials that refresh themselves from that cache before they expire,
so a run longer than the keys' life never reads with stale ones.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass

from zagg.checks.credentials import (
    EARTHDATA_TOKEN,
    EarthdataLogin,
    EarthdataLoginError,
    earthdata_login,
)
from zagg.sources.archive_endpoints import TIMEOUT, Endpoints, endpoints
from zagg.sources.errors import ArchiveError, ArchiveLoginError, ArchiveUnreachable

__all__ = [
    "EarthdataKeys",
    "S3Keys",
    "bearer_token",
    "keys_held",
    "refreshing_session",
    "s3_keys",
]

#: a set of keys is replaced once less than this share of its life is left
REFRESH_SHARE = 0.5
#: ... or less than this many seconds (whichever comes first)
REFRESH_SECONDS = 15 * 60

_tokens: dict[str, str] = {}  # Earthdata usernames -> the token EDL gave for them
_lock = threading.Lock()


def bearer_token(environ=None, where: Endpoints | None = None) -> str:
    """The Earthdata bearer token of this process: ``EARTHDATA_TOKEN``, or the token
    Earthdata Login gives for ``EARTHDATA_USERNAME``/``EARTHDATA_PASSWORD`` (asked once
    per process). An :class:`ArchiveLoginError` names what to set when there is none, it
    has expired, or the login is refused."""
    try:
        login = earthdata_login(environ)
    except EarthdataLoginError as exc:
        raise ArchiveLoginError(str(exc)) from None
    if login.token:
        return login.token
    with _lock:
        token = _tokens.get(login.username)
        if token is None:
            token = _tokens[login.username] = _edl_token(login, where or endpoints(environ))
    return token


def _edl_token(login: EarthdataLogin, where: Endpoints) -> str:
    """A token from Earthdata Login for a username and password (its documented
    ``find_or_create_token`` API: an existing valid token, else a new one)."""
    import requests

    url = f"{where.edl}/api/users/find_or_create_token"
    try:
        r = requests.post(url, auth=(login.username, login.password), timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise ArchiveUnreachable(
            f"Earthdata Login at {where.edl} did not answer ({type(exc).__name__}); "
            "check the network, or set EARTHDATA_TOKEN instead of a username and password"
        ) from None
    if r.status_code in (401, 403):
        raise ArchiveLoginError(
            f"Earthdata Login refused the username and password of {login.username!r} "
            f"(HTTP {r.status_code}); check EARTHDATA_USERNAME and EARTHDATA_PASSWORD, or set "
            f"{EARTHDATA_TOKEN}"
        )
    try:
        r.raise_for_status()
        token = r.json()["access_token"]
    except (requests.RequestException, ValueError, KeyError, TypeError):
        raise ArchiveError(
            f"Earthdata Login at {url} answered HTTP {r.status_code} without a token; "
            f"set {EARTHDATA_TOKEN} instead"
        ) from None
    return str(token)


@dataclass(frozen=True)
class S3Keys:
    """One set of temporary S3 keys: valid until ``expires`` (POSIX seconds); ``life`` is
    how long they were valid for when issued. Never printed: the repr hides them."""

    key: str
    secret: str
    token: str
    expires: float
    life: float

    def __repr__(self) -> str:
        left = self.expires - time.time()
        return f"S3Keys(***, expires in {left:.0f} s)"

    @property
    def margin(self) -> float:
        """Seconds before expiry at which these keys are replaced."""
        return min(self.life * REFRESH_SHARE, REFRESH_SECONDS)

    def fresh(self, now: float | None = None) -> bool:
        return self.expires - (time.time() if now is None else now) > self.margin

    def metadata(self) -> dict:
        """The keys as botocore's refreshable credentials take them."""
        when = dt.datetime.fromtimestamp(self.expires, dt.UTC)
        return {
            "access_key": self.key,
            "secret_key": self.secret,
            "token": self.token,
            "expiry_time": when.isoformat(),
        }


_keys: dict[tuple[str, str], S3Keys] = {}  # (endpoint, token) -> this process's keys
_keys_lock = threading.Lock()


def s3_keys(url: str) -> S3Keys:
    """Fresh S3 keys from the credentials endpoint ``url`` for this process's Earthdata
    login: its current ones while more than their margin is left, else new ones (one
    request for all threads)."""
    token = bearer_token()
    with _keys_lock:
        keys = _keys.get((url, token))
        if keys is None or not keys.fresh():
            keys = _keys[(url, token)] = _fetch_keys(url, token)
    return keys


def keys_held() -> list[str]:
    """The credentials endpoints this process holds keys of (what a worker fetched for
    itself; never the keys)."""
    with _keys_lock:
        return sorted({url for url, _ in _keys})


def _fetch_keys(url: str, token: str) -> S3Keys:
    """Ask a DAAC's ``/s3credentials`` endpoint for keys with the bearer ``token`` (its
    JSON: ``accessKeyId``, ``secretAccessKey``, ``sessionToken``, ``expiration``)."""
    import requests

    asked = time.time()
    try:
        r = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise ArchiveUnreachable(
            f"the S3 credentials endpoint {url} did not answer ({type(exc).__name__}); "
            "check the network (direct S3 access works only in AWS us-west-2: elsewhere "
            "read over HTTPS, access: https)"
        ) from None
    if r.status_code in (401, 403):
        raise ArchiveLoginError(
            f"the S3 credentials endpoint {url} refused the Earthdata token (HTTP "
            f"{r.status_code}: {_said(r, token)}); set {EARTHDATA_TOKEN} to a valid token "
            "(urs.earthdata.nasa.gov, 'Generate Token') on the client and every worker"
        )
    try:
        r.raise_for_status()
        doc = r.json()
        keys = (doc["accessKeyId"], doc["secretAccessKey"], doc["sessionToken"])
        expires = _instant(doc["expiration"])
    except (requests.RequestException, ValueError, KeyError, TypeError):
        raise ArchiveError(
            f"the S3 credentials endpoint {url} answered HTTP {r.status_code} without "
            "keys (accessKeyId, secretAccessKey, sessionToken, expiration); read over "
            "HTTPS instead (access: https)"
        ) from None
    life = expires - asked
    if life <= 0:
        raise ArchiveError(
            f"the S3 credentials endpoint {url} issued keys that had already expired "
            f"({doc['expiration']}); check this machine's clock"
        )
    return S3Keys(*(str(k) for k in keys), expires, life)


def _instant(text) -> float:
    """POSIX seconds of an ISO 8601 time (``2024-01-01 12:00:00+00:00``; UTC if bare)."""
    t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _said(r, token: str) -> str:
    """The first line of an error response, shortened, without the token."""
    text = (r.text or r.reason or "").strip().splitlines()
    line = text[0][:160] if text else ""
    return line.replace(token, "***") or "no message"


def refreshing_session(url: str):
    """An aiobotocore session whose credentials come from the S3 credentials endpoint
    ``url`` through this process's :func:`s3_keys`, and refresh themselves once their
    margin is reached. One session serves one event loop (botocore's refresh lock is an
    asyncio lock)."""
    from aiobotocore.session import AioSession

    session = AioSession()
    resolver = session.get_component("credential_provider")
    resolver.insert_before("env", EarthdataKeys(url))
    return session


class EarthdataKeys:
    """A botocore credential provider (its resolver asks ``METHOD`` and ``load``): the
    credentials endpoint's keys, refreshed before they expire. Every refresh is
    mandatory, so a failure is raised, never only logged."""

    METHOD = "earthdata-s3credentials"
    CANONICAL_NAME = "customEarthdataS3Credentials"  # botocore: custom providers say custom

    def __init__(self, url: str):
        self.url = url

    async def load(self):
        from aiobotocore.credentials import AioRefreshableCredentials

        keys = s3_keys(self.url)
        return AioRefreshableCredentials.create_from_metadata(
            keys.metadata(),
            refresh_using=self.refresh,
            method=self.METHOD,
            advisory_timeout=keys.margin,
            mandatory_timeout=keys.margin,
        )

    async def refresh(self) -> dict:
        return s3_keys(self.url).metadata()
