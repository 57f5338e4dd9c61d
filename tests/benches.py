"""What the tests of the benchmark scripts share: the scripts' folder (importable, so a test
may use a script's own helpers), their default small size, a script run in a fresh process,
the counts it prints and the counts mortie alone gives for the same synthetic points."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import mortie
import numpy as np

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from common import verdict  # noqa: E402, F401  (the scripts' verdict line, tested as is)

#: the synthetic points each script is asked to aggregate
N = 20_000


@functools.cache
def expected_counts() -> tuple[int, int]:
    """(shards, cells with data) of the scripts' synthetic points, keyed by mortie alone."""
    from zagg.sources.synthetic import DEFAULT_REGION, synthetic_photons

    ds = synthetic_photons(N, tuple(DEFAULT_REGION), chunk_size=1 << 20, seed=1).compute()
    lat, lon = ds["lat_ph"].values, ds["lon_ph"].values
    ok = np.isfinite(lat) & np.isfinite(lon)
    cells = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=19))
    shards = np.unique(mortie.geo2mort(lat[ok], lon[ok], order=9))
    return len(shards), len(cells)


def run_bench(*args: str) -> str:
    """A benchmark script run from the benchmarks folder; its standard output."""
    out = subprocess.run(
        [sys.executable, *args], cwd=BENCH, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def counts_printed(text: str) -> tuple[int, int]:
    """The (shards, cells with data) a script printed for its points."""
    m = re.search(r"points(?: on \d+ core\(s\))?: (\d+) shards, ([\d,]+) cells with data", text)
    assert m, text
    return int(m.group(1)), int(m.group(2).replace(",", ""))
