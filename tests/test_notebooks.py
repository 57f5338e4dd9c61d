"""The notebooks in notebooks/ run from top to bottom on small data (each in a folder of
its own, in a fresh Jupyter kernel), save the figures they promise as real PNG images,
and are kept in git without outputs."""

import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FIGURES = {
    "quickstart": ["quickstart-map.png"],
    "granules_on_a_cluster": ["granules-map.png"],
    "reading_a_store": ["reading-quantiles.png", "reading-level.png"],
    "strata_and_composition": ["strata-maps.png"],
}


def test_every_notebook_is_listed_and_stored_without_outputs():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FIGURES)
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


def _outputs(nb, mime: str) -> list[str]:
    return [
        o.get("data", {}).get(mime, "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") in ("display_data", "update_display_data", "execute_result")
    ]


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_notebook_runs_and_saves_its_figures(name, tmp_path, monkeypatch):
    import matplotlib.image as mpimg
    from nbclient import NotebookClient

    monkeypatch.delenv("ZAGG_GATEWAY_URL", raising=False)  # the local cluster
    work = tmp_path / name
    work.mkdir()
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", work)
    nb = nbformat.read(work / f"{name}.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    ).execute()
    for png in FIGURES[name]:
        data = (work / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png
        image = mpimg.imread(work / png)
        assert image.ndim == 3 and min(image.shape[:2]) > 100, (png, image.shape)
        assert np.unique(image.reshape(-1, image.shape[-1]), axis=0).shape[0] > 50, png
    if name == "granules_on_a_cluster":
        # a distributed run shows its progress as an HTML bar in the cell
        assert any("<progress" in h for h in _outputs(nb, "text/html"))
