"""The errors of the granule sources, in a module of their own so that every part of the
reading (config block, scanning, the lazy arrays' tasks) raises the same types."""

from __future__ import annotations

from zagg.errors import ZaggError

__all__ = [
    "ArchiveError",
    "ArchiveLoginError",
    "ArchiveUnreachable",
    "EmptySearch",
    "GranuleError",
    "GranuleReadError",
]


class GranuleError(ZaggError, ValueError):
    """A granule that cannot be read as configured; the message names the file and path."""


class GranuleReadError(GranuleError):
    """Reading rows of a granule failed (a damaged chunk, a truncated file, a lost
    connection). ``granule`` and ``href`` name the file, so a run under ``on_error: skip``
    can leave it out (:func:`zagg.sources.granules.skip_damaged`)."""

    def __init__(self, msg: str, granule: str, href: str):
        super().__init__(msg)
        self.granule = granule
        self.href = href

    def __reduce__(self):  # keep granule and href across processes
        return (type(self), (str(self), self.granule, self.href))


class ArchiveError(ZaggError, OSError):
    """NASA's Earthdata archive (its search, its login, its S3 or HTTPS reads) refused a
    request or could not be reached; the message names the service and the fix. (One
    builtin family, OSError, so that dask carries it between processes intact.)"""


class ArchiveLoginError(ArchiveError, PermissionError):
    """The archive refused the Earthdata login or the S3 keys issued for it."""


class ArchiveUnreachable(ArchiveError, ConnectionError):
    """A service of the archive did not answer."""


class EmptySearch(ArchiveError):
    """A granule search that found nothing; the message names the query."""
