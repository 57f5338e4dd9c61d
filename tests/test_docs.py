"""The README's Python examples run as written (on fewer points, into a temporary store)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 2  # the quick start, then reading the store it wrote
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for code in blocks:
        exec(code.replace("5_000_000", "50_000"), scope)
    assert scope["summary"].leaves_written > 0
    assert int(scope["cells"]["count"].sum()) == scope["summary"].points
    occupied = scope["store"]["count"].values > 0
    assert int(scope["median"].notnull().sum()) == int(occupied.sum())
