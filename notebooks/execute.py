"""Execute the notebooks in place, so the outputs committed with them (their maps too) are
those of the code beside them: ``python notebooks/execute.py [NAME ...]`` (``make
notebooks``).

Each notebook runs top to bottom in a fresh kernel, in a scratch folder of its own (the
stores and granules it writes are thrown away); the figures it saves are copied to
docs/images/, where the README and the docs link them. No per-cell timing metadata is kept,
so re-running an unchanged notebook changes only what its code really prints.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
IMAGES = HERE.parent / "docs" / "images"


def execute(path: Path, work: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` executed with ``work`` as its working directory."""
    nb = nbformat.read(path, as_version=4)
    # the kernel on local sockets (over TCP it warns that its traffic is not encrypted)
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(work / ".kernel"))
    client = NotebookClient(
        nb,
        km=kernel,
        timeout=900,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(work)}},
    )
    client.execute()
    return nb


def main(names: list[str]) -> None:
    os.environ.pop("ZAGG_GATEWAY_URL", None)  # the committed outputs are a local cluster's
    paths = [HERE / f"{n}.ipynb" for n in names] if names else sorted(HERE.glob("*.ipynb"))
    IMAGES.mkdir(parents=True, exist_ok=True)
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"executing {path.name}", flush=True)
            nb = execute(path, Path(tmp))
            nbformat.write(nb, path)
            for png in sorted(Path(tmp).glob("*.png")):
                shutil.copyfile(png, IMAGES / png.name)
                print(f"  figure {IMAGES.relative_to(HERE.parent) / png.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
