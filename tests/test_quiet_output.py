"""A command prints only zagg's own lines (tests/own_lines.py says what they look like):
``zagg demo`` and a granule ``zagg run``, each in a process of its own with the libraries'
defaults (no ICECHUNK_LOG), write no library log line and no warning with its source
line; zagg's own warning is one ``zagg: warning: ...`` line, and ``--verbose`` shows it as
Python does. The notebooks' kernels are held to the same in tests/test_notebooks.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from own_lines import foreign_stderr, foreign_stdout

import zagg
from zagg.cluster.clients import OversubscribedWarning, usable_cores
from zagg.errors import ZaggWarning, brief

SHIPPED = Path(zagg.__file__).parent / "data" / "configs" / "atl03_tdigest.yaml"


def zagg_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ICECHUNK_LOG", "PYTHONWARNINGS")}
    out = subprocess.run(
        [sys.executable, "-m", "zagg", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    return out


def test_brief_warnings_shows_zaggs_warnings_as_one_line_and_hands_on_the_others():
    handed = []
    show = brief(lambda message, category, *rest: handed.append((message, category)))
    out = io.StringIO()
    show("a leaf was left out", ZaggWarning, "/somewhere/mod.py", 7, out)
    show("9 threads on 2 cores", OversubscribedWarning, "/somewhere/mod.py", 8, out)
    show("not ours", UserWarning, "/somewhere/mod.py", 9, out)
    assert out.getvalue().splitlines() == [
        "zagg: warning: a leaf was left out",
        "zagg: warning: 9 threads on 2 cores",
    ]
    assert handed == [("not ours", UserWarning)]

    before = warnings.showwarning
    try:
        zagg.brief_warnings()
        installed = warnings.showwarning
        assert installed is not before and installed.zagg_previous is before
        zagg.brief_warnings()  # a second call changes nothing
        assert warnings.showwarning is installed
        zagg.brief_warnings(False)
        assert warnings.showwarning is before
    finally:
        warnings.showwarning = before


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("quiet")
    return work, zagg_cli("demo", "--points", "400000", cwd=work)


@pytest.mark.slow
def test_the_demo_prints_only_zaggs_lines(demo):
    work, out = demo
    assert foreign_stdout(out.stdout) == []
    assert foreign_stderr(out.stderr) == []
    assert "keying and reducing input chunks" in out.stderr.splitlines()
    assert "shards          " in out.stdout  # the summary is there, on stdout
    assert (work / "demo-store" / "icechunk").is_dir()  # and Icechunk was written to


@pytest.mark.slow
def test_a_granule_run_prints_only_zaggs_lines_and_its_warning_as_one_line(demo):
    work, _ = demo
    config = yaml.safe_load(SHIPPED.read_text())
    config["data_source"]["granules"] = str(work / "demo-store-granules")
    (work / "granules.yaml").write_text(yaml.safe_dump(config))
    threads = usable_cores() + 1  # more threads than cores: zagg warns
    argv = ["run", "granules.yaml", "--store", "run-store", "--workers", "1"]
    argv += ["--threads", str(threads)]
    out = zagg_cli(*argv, cwd=work)
    assert foreign_stdout(out.stdout) == []
    assert foreign_stderr(out.stderr) == []
    warned = [line for line in out.stderr.splitlines() if line.startswith("zagg: warning: ")]
    assert len(warned) == 1
    assert warned[0].startswith(f"zagg: warning: 1 worker x {threads} threads = {threads} ")
    granules = len(list((work / "demo-store-granules").glob("*.h5")))
    assert f"granules        {granules} read, 0 failed" in out.stdout.splitlines()

    # --verbose: the same warning as Python shows it, with the line of code that gave it
    again = zagg_cli(*argv, "--quiet", "--verbose", cwd=work)
    assert "zagg: warning:" not in again.stderr
    shown = [line for line in again.stderr.splitlines() if "OversubscribedWarning: " in line]
    assert len(shown) == 1 and shown[0].split(":")[0].endswith(".py")
    assert foreign_stderr(again.stderr) != []
