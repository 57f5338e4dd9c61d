"""Storage options (s3fs credentials and endpoints) that never show their secrets, and the
Earthdata login a process reads from its own environment.

Validated once where a config names them, and masked wherever they could be printed: in a
repr, an error message, or the config a Dataset records in its attrs. An Earthdata login
is never part of a config: each process that reaches NASA's archive (every dask worker)
reads it from its environment (:func:`earthdata_login`). Importable without dask, h5py or
numba, so checking a config stays light.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import time
from collections.abc import Mapping

from zagg.checks.validation import check_keys, fail
from zagg.errors import ZaggError

_SECRET_KEYS = ("key", "secret", "token")
_STORAGE_KEYS = {  # s3fs options accepted here, with the type each must have
    "anon": bool,
    "key": str,
    "secret": str,
    "token": str,
    "profile": str,
    "endpoint_url": str,
    "requester_pays": bool,
    "use_ssl": bool,
    "client_kwargs": Mapping,
    "config_kwargs": Mapping,
}


class StorageOptions(dict):
    """s3fs options whose repr hides credentials, so they never reach a log or a message.

    A credential is ``key``, ``secret``, ``token`` or any option (also inside
    ``client_kwargs``/``config_kwargs``) whose name mentions a secret, token, password or
    access key.
    """

    def __repr__(self) -> str:
        return f"StorageOptions({_masked(self)!r})"

    __str__ = __repr__

    def redact(self, text: str) -> str:
        """``text`` with every credential value replaced by ``***``."""
        for value in sorted(_secret_values(self), key=len, reverse=True):
            text = text.replace(value, "***")
        return text


def _is_secret(name) -> bool:
    name = str(name).lower()
    return name in _SECRET_KEYS or any(
        w in name for w in ("secret", "token", "password", "access_key", "credential")
    )


def _masked(options: Mapping) -> dict:
    return {
        k: "***" if _is_secret(k) else _masked(v) if isinstance(v, Mapping) else v
        for k, v in options.items()
    }


def _secret_values(options: Mapping):
    for k, v in options.items():
        if isinstance(v, Mapping):
            yield from _secret_values(v)
        elif _is_secret(k) and isinstance(v, str) and v:
            yield v


def parse_storage_options(value, path: str) -> StorageOptions:
    """Validate s3fs options at config key ``path``: known keys, their types, key and secret
    together, an http(s) endpoint; values of credentials never appear in a refusal."""
    if value is None:
        return StorageOptions()
    check_keys(value, tuple(_STORAGE_KEYS), path)
    for key, kind in _STORAGE_KEYS.items():
        if key not in value:
            continue
        v = value[key]
        ok = isinstance(v, kind) and (kind is not str or v.strip())
        if not ok:
            shown = "(value not shown)" if _is_secret(key) or kind is Mapping else f"got {v!r}"
            fail(f"{path}.{key}", f"expected {_kind_name(kind)}, {shown}")
    if ("key" in value) != ("secret" in value):
        fail(path, "'key' and 'secret' go together; give both or neither (or use 'profile')")
    url = value.get("endpoint_url")
    if url is not None and not url.startswith(("http://", "https://")):
        fail(f"{path}.endpoint_url", f"expected an http:// or https:// URL, got {url!r}")
    return StorageOptions(value)


def _kind_name(kind) -> str:
    return {bool: "true or false", str: "a non-empty string", Mapping: "a mapping"}[kind]


def redacted(raw: Mapping) -> dict:
    """A config mapping with the values of credentials in every ``storage_options`` block
    replaced by ``***`` (what a Dataset's attrs may show in a notebook)."""
    out = {}
    for k, v in raw.items():
        if k == "storage_options" and isinstance(v, Mapping):
            out[k] = _masked(v)
        elif isinstance(v, Mapping):
            out[k] = redacted(v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------- Earthdata


#: the environment variables an Earthdata login is read from (earthaccess reads the same)
EARTHDATA_TOKEN = "EARTHDATA_TOKEN"
EARTHDATA_USERNAME = "EARTHDATA_USERNAME"
EARTHDATA_PASSWORD = "EARTHDATA_PASSWORD"
_GET_TOKEN = (
    f"set {EARTHDATA_TOKEN} to an Earthdata Login token (urs.earthdata.nasa.gov, "
    f"'Generate Token'), or {EARTHDATA_USERNAME} and {EARTHDATA_PASSWORD}"
)


class EarthdataLoginError(ZaggError, PermissionError):
    """No Earthdata login, or one that cannot work (an expired token); the message names
    the environment variables to set, never a secret."""


class EarthdataLogin:
    """An Earthdata login as this process's environment gives it: a bearer ``token``, or a
    ``username`` and ``password`` to get one with. Its repr shows neither secret; it is
    read where it is used (each dask worker reads its own) and never sent elsewhere."""

    __slots__ = ("token", "username", "password")

    def __init__(self, token: str | None = None, username=None, password=None):
        self.token, self.username, self.password = token, username, password

    def __repr__(self) -> str:
        if self.token:
            return "EarthdataLogin(token=***)"
        return f"EarthdataLogin(username={self.username!r}, password=***)"

    __str__ = __repr__

    def redact(self, text: str) -> str:
        """``text`` with the token and password replaced by ``***``."""
        for value in (self.token, self.password):
            if value:
                text = text.replace(value, "***")
        return text


def earthdata_login(environ: Mapping[str, str] | None = None) -> EarthdataLogin:
    """The Earthdata login of this process's environment: ``EARTHDATA_TOKEN`` (checked not
    to have expired, when it carries its expiry as Earthdata Login tokens do), else
    ``EARTHDATA_USERNAME`` with ``EARTHDATA_PASSWORD``; an EarthdataLoginError if neither."""
    env = os.environ if environ is None else environ
    token = env.get(EARTHDATA_TOKEN, "").strip()
    if token:
        expiry = token_expiry(token)
        if expiry is not None and expiry <= time.time():
            when = dt.datetime.fromtimestamp(expiry, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            raise EarthdataLoginError(
                f"the Earthdata token in {EARTHDATA_TOKEN} expired at {when}; "
                f"generate a new one (urs.earthdata.nasa.gov, 'Generate Token') and set "
                f"{EARTHDATA_TOKEN} where zagg runs (on every dask worker too)"
            )
        return EarthdataLogin(token=token)
    user = env.get(EARTHDATA_USERNAME, "").strip()
    password = env.get(EARTHDATA_PASSWORD, "")
    if user and password:
        return EarthdataLogin(username=user, password=password)
    raise EarthdataLoginError(
        f"no Earthdata login in this process's environment; {_GET_TOKEN} (on every dask "
        "worker too: each worker reads its own)"
    )


def token_expiry(token: str) -> float | None:
    """The expiry (POSIX seconds) an Earthdata Login token carries: its ``exp`` claim (the
    token is a JWT, whose middle part is base64url JSON); None for a token of another
    shape. The signature is not checked: the services that accept the token do that."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    body = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(body))
    except (ValueError, TypeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)
