"""Knowing when numba compiles: a fresh kernel cache is cold (and a run says so), one that
``python -m zagg warm`` filled is not."""

import io
import os
import subprocess
import sys


def test_an_empty_cache_is_cold_and_a_run_says_it_compiles(tmp_path, monkeypatch):
    from zagg.pipeline.warm import NOTICE, is_cold, notice_if_cold

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert is_cold()
    out = io.StringIO()
    assert notice_if_cold(out) and out.getvalue() == NOTICE + "\n"
    # a cache holding the t-digest kernels' index is warm
    (tmp_path / "zagg" / "kernels").mkdir(parents=True)
    (tmp_path / "zagg" / "kernels" / "tdigest._build-126.py311.nbi").write_bytes(b"x")
    assert not is_cold()
    out = io.StringIO()
    assert not notice_if_cold(out) and out.getvalue() == ""


def test_warm_fills_the_cache_a_run_then_loads(tmp_path):
    """``zagg warm`` on a warm cache reports it and finishes without compiling: the cache
    the test environment's set-up made is the one runs use."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-m", "zagg", "warm", "atl03_synthetic"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("warm atl03_synthetic ")
    assert lines[-1].startswith("numba kernels ")
    probe = "from zagg.pipeline.warm import is_cold; print(is_cold())"
    after = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert after.stdout.strip() == "False"
