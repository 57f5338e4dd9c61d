"""The notebooks in notebooks/ are committed with their outputs, and those outputs are
current: each notebook, run from top to bottom in a fresh kernel (in a folder of its own),
prints and shows what its committed copy does, and saves the figures it promises.

"Current" means: the same code cells have outputs, of the same kinds (stream, display,
result) and MIME types, in the same order (consecutive stream outputs taken as one text,
however the kernel flushed them); every text output (stdout and ``text/plain``)
is equal once run-to-run noise is masked — durations, rates, percentages, byte sizes,
memory addresses, hex run ids, timestamps and network addresses (a line carrying a
duration, a size or a percentage is compared with its numbers masked and its spacing
collapsed, so its labels still count); and every image has the same pixel size, within 2 px. HTML renderings
(dask's widgets, xarray's reprs) are compared by presence only. Counts, cell totals,
quantiles and file names are compared exactly, so a change to the code that changes what
a notebook prints fails here until ``make notebooks`` is run.
"""

from __future__ import annotations

import base64
import difflib
import re
import shutil
import struct
from pathlib import Path

import nbformat
import numpy as np
import pytest
from own_lines import foreign_stderr, foreign_stdout

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FIGURES = {
    "quickstart": ["quickstart-map.png"],
    "granules_on_a_cluster": ["granules-map.png"],
    "season_from_the_archive": ["season-map.png"],
    "reading_a_store": ["reading-quantiles.png", "reading-level.png"],
    "strata_and_composition": ["strata-maps.png"],
}
TEXT = ("text/plain",)

_MASKS = [
    (re.compile(r"\bstage-\d{8}T\d{6}Z-[0-9a-f]{6}\b"), "<sweep id>"),
    (re.compile(r"0x[0-9a-f]+"), "0x…"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{6,}\b"), "<hex>"),
    (re.compile(r"\d{8}T\d{6}Z"), "<time>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.]+(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b(tcp|tls|inproc|ws|http|https)://[\w.\-]+(:\d+)?"), "<address>"),
]
_TELEMETRY = re.compile(
    r"\d\s?(s|ms|µs|us|min|[kKMGT]i?B|bytes)\b|%|points/s|\bGiB\b|\bMiB\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d[\d,.]*")


def normalized(text: str) -> str:
    """``text`` with run-to-run noise masked (see the module docstring)."""
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    lines = [
        " ".join(_NUMBER.sub("#", line).split()) if _TELEMETRY.search(line) else line
        for line in text.split("\n")
    ]
    return "\n".join(lines)


def _png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def signature(nb) -> list[list]:
    """What the notebook's code cells show, noise masked: one list per code cell."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for out in cell.outputs:
            kind = out["output_type"]
            if kind == "stream":
                if shown and shown[-1][:2] == ("stream", out["name"]):  # one text, however
                    text = shown.pop()[3] + out["text"]  # the kernel happened to flush it
                else:
                    text = out["text"]
                shown.append(("stream", out["name"], normalized(text), text))
            elif kind == "error":
                shown.append(("error", out["ename"]))
            else:
                data = out.get("data", {})
                texts = {m: normalized(data[m]) for m in TEXT if m in data}
                images = {m: _png_size(data[m]) for m in data if m == "image/png"}
                shown.append((kind, sorted(data), texts, images))
        cells.append(shown)
    return cells


def _diff(a: str, b: str) -> str:
    lines = difflib.unified_diff(a.split("\n"), b.split("\n"), "committed", "now", lineterm="")
    return "\n".join(lines)


def _same(committed: list, fresh: list, name: str) -> None:
    assert len(committed) == len(fresh), name
    for i, (a, b) in enumerate(zip(committed, fresh, strict=True)):
        where = f"{name}: code cell {i}"
        assert [o[:2] for o in a] == [o[:2] for o in b], where
        for x, y in zip(a, b, strict=True):
            if x[0] == "stream" or x[0] == "error":
                assert x[:3] == y[:3], (
                    f"{where} prints other text now (run `make notebooks`):\n" + _diff(x[2], y[2])
                )
                continue
            assert x[2] == y[2], f"{where} shows other text now (run `make notebooks`):\n" + _diff(
                str(x[2]), str(y[2])
            )
            for mime, (w, h) in x[3].items():
                fw, fh = y[3][mime]
                assert abs(w - fw) <= 2 and abs(h - fh) <= 2, (where, (w, h), (fw, fh))


def _first_sentence_only(markdown: str) -> bool:
    lines = [line for line in markdown.strip().split("\n") if line.strip()]
    body = " ".join(lines[1:])
    inner = re.findall(r"[.!?](\s|$)", body)
    return lines[0].startswith("# ") and body.endswith(".") and len(inner) == 1


def test_every_notebook_is_listed_committed_executed_and_opens_and_ends_as_promised():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FIGURES)
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        # executed top to bottom in one kernel, every output kept
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), path.name
        assert all("outputs" in c for c in code)
        # one sentence of what it shows, under its title
        first = nb.cells[0]
        assert first.cell_type == "markdown" and _first_sentence_only(first.source), path.name
        # and a map at the end, shown in the notebook itself
        last = nb.cells[-1]
        assert last.cell_type == "code", path.name
        assert any("image/png" in o.get("data", {}) for o in last.outputs), path.name


def test_noise_is_masked_and_data_is_not():
    a = "wall time       3.0 s\nrun id          c9f21269624e4c9d8cab27090e3736c9\ncells 27,203"
    b = "wall time       12.4 s\nrun id          3f87f46287dd42029a7e7b34e6fa77ea\ncells 27,203"
    assert normalized(a) == normalized(b)
    assert normalized("cells 27,203") != normalized("cells 27,204")
    assert normalized("<Client: 'tcp://127.0.0.1:39847' memory=37.66 GiB>") == normalized(
        "<Client: 'tcp://127.0.0.1:40111' memory=15.50 GiB>"
    )
    assert normalized("order 11:      56 cells") != normalized("order 11:      57 cells")


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_notebook_runs_shows_its_committed_outputs_and_saves_its_figures(
    name, tmp_path, monkeypatch, capfd
):
    import matplotlib.image as mpimg
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    monkeypatch.delenv("ZAGG_GATEWAY_URL", raising=False)  # the local cluster
    monkeypatch.delenv("ICECHUNK_LOG", raising=False)  # the libraries' defaults
    work = tmp_path / name
    work.mkdir()
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", work)
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nb = nbformat.read(work / f"{name}.ipynb", as_version=4)
    # the kernel on local sockets (over TCP it warns that its traffic is not encrypted)
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    capfd.readouterr()
    NotebookClient(
        nb, km=kernel, timeout=600, resources={"metadata": {"path": str(work)}}
    ).execute()
    # what the kernel process wrote outside the cells (a library's log lines, a warning
    # from a worker thread) reaches the notebook's terminal: zagg's lines only
    out, err = capfd.readouterr()
    assert foreign_stdout(out) == [] and foreign_stderr(err) == [], (out, err)
    _same(signature(committed), signature(nb), name)
    for png in FIGURES[name]:
        data = (work / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png
        image = mpimg.imread(work / png)
        assert image.ndim == 3 and min(image.shape[:2]) > 100, (png, image.shape)
        assert np.unique(image.reshape(-1, image.shape[-1]), axis=0).shape[0] > 50, png
    if name == "granules_on_a_cluster":
        # a distributed run shows its progress as an HTML bar in the cell
        html = [
            o.get("data", {}).get("text/html", "")
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
        ]
        assert any("<progress" in h for h in html)
