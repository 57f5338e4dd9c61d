"""The ready-to-run configs and region files shipped inside the package.

``zagg run atl03_tdigest`` and ``zagg run CONFIG --region pine_island`` find them by name, so
they work from an installed wheel as well as from a checkout (where ``configs/`` and
``regions/`` point at the same files).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_KINDS = {"config": ("configs", (".yaml", ".yml")), "region": ("regions", (".geojson", ".json"))}


def _folder(kind: str):
    return resources.files("zagg") / "data" / _KINDS[kind][0]


def names(kind: str) -> list[str]:
    """The names of the shipped files of ``kind`` ("config" or "region"), sorted."""
    suffixes = _KINDS[kind][1]
    return sorted(Path(f.name).stem for f in _folder(kind).iterdir() if f.name.endswith(suffixes))


def find(kind: str, name: str) -> Path | None:
    """The shipped file called ``name`` (with or without its suffix), None if there is none.
    A name with a path separator is never a shipped file's."""
    if not name or "/" in name or "\\" in name:
        return None
    for suffix in ("", *_KINDS[kind][1]):
        candidate = _folder(kind) / f"{name}{suffix}"
        if candidate.is_file():
            return Path(str(candidate))
    return None


def summary(path: Path, width: int = 72) -> str:
    """What a shipped file is for, in at most ``width`` characters: a config's leading
    comment, a region's ``name`` property."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in _KINDS["region"][1]:
        import json

        geo = json.loads(text)
        feature = (geo.get("features") or [geo])[0]
        line = str((feature.get("properties") or {}).get("name", ""))
    else:
        lead = []
        for row in text.splitlines():
            if not row.startswith("#"):
                break
            lead.append(row.lstrip("#").strip())
        line = " ".join(lead).split(". ")[0].split(": ")[0]
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"
