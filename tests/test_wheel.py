"""A wheel built from the tree installs into a fresh venv and runs its shipped configs.

The fresh venv gets the wheel alone (``--no-deps``); its dependencies come from this test
run's environment through a path entry, so nothing is downloaded. The commands run from an
empty directory, so only what the wheel ships (configs, regions, the profile) is found.
"""

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
#: the fresh venv's processes see no source tree a PYTHONPATH names (pip would take the
#: tree's egg-info for an installed zagg, and the probe would import the tree)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(base / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (base / "dist").glob("zagg-*.whl")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        env=ENV,
    )
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=ENV,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "zagg-test-deps.pth").write_text("\n".join(ours) + "\n")
    work = base / "work"
    work.mkdir()
    return env_dir / "bin", work


def _run(bindir: Path, work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bindir / "zagg"), *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )


def test_the_wheel_is_the_package_and_ships_its_data(installed):
    bindir, work = installed
    probe = (
        "import json, zagg, zagg.packaged as p, zagg.cluster.profile as d; print(json.dumps("
        "[zagg.__file__, p.names('config'), p.names('region'), d.PROFILE.is_file()]))"
    )
    out = subprocess.run(
        [str(bindir / "python"), "-c", probe],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
        env=ENV,
    )
    where, configs, regions, profile = json.loads(out.stdout)
    assert str(bindir.parent) in where  # not the source tree
    assert {"atl03_synthetic", "atl03_tdigest", "atl03_strata", "atl06_elevation"} <= set(configs)
    assert {"pine_island", "thwaites"} <= set(regions) and profile


def test_the_installed_script_runs_the_demo_and_a_shipped_config(installed):
    bindir, work = installed
    demo = _run(bindir, work, "demo", "--store", "demo-store", "--points", "100000")
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert (work / "demo-store" / "morton_hive.json").is_file()
    # three of the shards its photons cover: the shipped config as shipped, a few leaves
    # to write and verify
    shards = "-5121114443,-5121114444,-5121123332"
    args = ["--store", "synthetic-store", "--quiet", "--shards", shards]
    run = _run(bindir, work, "run", "atl03_synthetic", *args)
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r"shards +3 \(3 leaves written\)", run.stdout), run.stdout
    verify = _run(bindir, work, "verify", "synthetic-store")
    assert verify.returncode == 0, verify.stdout[-3000:]
