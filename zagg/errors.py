"""The base of every error zagg raises for bad input or a refused operation, and of every
warning it gives.

A :class:`ZaggError` says what was wrong and how to fix it in its message, so the command
line prints it as one line (exit status 2) instead of a traceback. Each stage keeps its
own subclass (``ConfigError``, ``GranuleError``, ``SweepRefused``, ...), and each also
derives from the builtin it has always been (``ValueError``, ``RuntimeError``), so code that
catches those keeps working.

A :class:`ZaggWarning` reports a problem zagg worked around (a leaf left out of a read, a
sidecar not written). :func:`brief_warnings` shows them as one ``zagg: warning: <text>``
line each, without the source line Python adds; the command line turns it on for each
command, a notebook or script calls it. Imports nothing of zagg, so every floor of the
package can use it.
"""

import sys
import warnings

PREFIX = "zagg: warning: "


class ZaggError(Exception):
    """An error zagg raises on purpose: bad config, data or store, or a refused operation."""


class ZaggWarning(UserWarning):
    """A problem zagg reports and works around; filter them as one category."""


def brief(previous):
    """A ``warnings.showwarning`` that prints a :class:`ZaggWarning` as one
    ``zagg: warning: <text>`` line (on ``file``, else stderr) and hands every other warning
    to ``previous``."""

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, ZaggWarning):
            return previous(message, category, filename, lineno, file, line)
        print(f"{PREFIX}{message}", file=file or sys.stderr)

    show.zagg_previous = previous
    return show


def brief_warnings(on: bool = True) -> None:
    """Show zagg's own warnings as one ``zagg: warning: <text>`` line each (``on``), or as
    Python shows warnings, with the line of code that gave them (``on=False``). Other
    packages' warnings are shown as before either way. The command line does this for
    each command (``--verbose`` does not); call it once in a notebook or script."""
    current = warnings.showwarning
    ours = hasattr(current, "zagg_previous")
    if on and not ours:
        warnings.showwarning = brief(current)
    elif not on and ours:
        warnings.showwarning = current.zagg_previous
