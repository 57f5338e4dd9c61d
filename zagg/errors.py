"""The base of every error zagg raises for bad input or a refused operation.

A :class:`ZaggError` says what was wrong and how to fix it in its message, so the command
line prints it as one line (exit status 2) instead of a traceback. Each stage keeps its
own subclass (``ConfigError``, ``GranuleError``, ``SweepRefused``, ...), and each also
derives from the builtin it has always been (``ValueError``, ``RuntimeError``), so code that
catches those keeps working. Imports nothing, so every floor of the package can use it.
"""


class ZaggError(Exception):
    """An error zagg raises on purpose: bad config, data or store, or a refused operation."""
