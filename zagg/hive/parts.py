"""A stored object given as consecutive buffers (:class:`Parts`), and what stores need of it."""

from __future__ import annotations


class Parts(tuple):
    """One object's bytes as consecutive buffers, stored in order without being joined.
    A leaf's shard object is tens of MB: a joined copy would be new memory for every
    leaf (glibc maps blocks that big afresh), faulted in page by page."""

    @property
    def nbytes(self) -> int:
        return sum(memoryview(p).nbytes for p in self)

    def __bytes__(self) -> bytes:
        return b"".join(self)


def object_bytes(data) -> bytes:
    """``data`` (bytes-like or :class:`Parts`) as one ``bytes``."""
    return data if isinstance(data, bytes) else bytes(data)


def object_size(data) -> int:
    """The size in bytes of ``data`` (bytes-like or :class:`Parts`)."""
    return data.nbytes if isinstance(data, Parts) else memoryview(data).nbytes
