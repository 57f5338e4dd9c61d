"""bench_scaling runs on local clusters and the local gateway it starts: the counts and the
ratio lines it prints, never its times."""

from __future__ import annotations

import re

from benches import N, counts_printed, expected_counts, run_bench


def test_bench_scaling_counts_every_cluster_and_prints_the_ratios():
    """bench_scaling on tiny data: the same store on 1 and 2 workers of a local cluster and
    of the local gateway it starts itself; counts and the ratio lines, never the times."""
    from zagg.sources.synthetic import DEFAULT_REGION

    text = run_bench(
        "bench_scaling.py", "--size", str(N), "--runs", "1", "--region", *map(str, DEFAULT_REGION)
    )
    assert counts_printed(text) == expected_counts()
    assert "same shards, cells and points in every run: True" in text
    runs = re.findall(r"^local (cluster|gateway) +(\d) workers? +run +\d+\.\d\d s", text, re.M)
    assert runs == [("cluster", "1"), ("cluster", "2"), ("gateway", "1"), ("gateway", "2")]
    for kind in ("local", "gateway"):
        assert re.search(
            rf"speed-up 1 -> 2 workers, {kind}: \d+\.\d\d \((meets|misses) the "
            r"target 1\.7\)",
            text,
        ), text
    assert (
        len(
            re.findall(
                r"gateway overhead, \d workers?: [+-]\d+\.\d % of the local run "
                r"\((meets|misses) the target 10 %\)",
                text,
            )
        )
        == 2
    )
