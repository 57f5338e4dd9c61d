"""What zagg's own output lines look like, to find any line a library wrote instead.

On stdout a command writes its summary: rows of a lowercase label in a column 16 wide or
followed by two or more spaces, then a value (``points          3,014,261``, ``cells with
data 9,412``), indented under a heading that ends with a colon (``pyramid sweep:``), and the
demo's lines that start with ``zagg``. On stderr it
writes ``zagg: warning: ...`` / ``zagg: error: ...`` lines, each progress bar's label (a few
lowercase words) and its bar, redrawn in place after a carriage return
(``[####    ] 12/46 | 3.1 s``). A library's log line (a timestamp, an ANSI colour code, a
level word), a warning as Python shows it (``path.py:12: SomeWarning: ...`` and its source
line) and a traceback fit none of these.
"""

from __future__ import annotations

import re

SUMMARY_ROW = re.compile(r"^ {0,6}[a-z][a-z0-9 +\-/()]*?( {2,}\S.*|:)$")
LABEL_COLUMN = re.compile(r"^ {0,6}(?P<label>[a-z][a-z0-9 +\-/()]{14} )\S")
ZAGG = re.compile(r"^zagg\b")
BAR = re.compile(r"^\[[# ]+\] \d+/\d+ \| [\d.]+ s$")
BAR_LABEL = re.compile(r"^[a-z][a-z0-9 ]*$")


def foreign_stdout(text: str) -> list[str]:
    """The non-empty lines of a command's stdout that are not zagg's."""
    return [
        line
        for line in text.splitlines()
        if line.strip()
        and not (SUMMARY_ROW.match(line) or LABEL_COLUMN.match(line) or ZAGG.match(line))
    ]


def foreign_stderr(text: str) -> list[str]:
    """The non-empty lines (and carriage-return segments) of a command's stderr that are
    not zagg's."""
    out = []
    for line in text.split("\n"):
        for part in line.split("\r"):
            if part.strip() and not (ZAGG.match(part) or BAR.match(part) or BAR_LABEL.match(part)):
                out.append(part)
    return out
