"""The store benchmarks (a store's first run and memory, its S3 requests, the readers, the
re-run gate, the Icechunk companion) run, count what they wrote and read correctly and state
their verdict; timings are never asserted."""

from __future__ import annotations

import re

from benches import N, counts_printed, expected_counts, run_bench


def test_bench_store_counts_memory_and_verdict():
    text = run_bench("bench_store.py", "--sizes", str(N), "--runs", "1", "--no-cli")
    assert counts_printed(text) == expected_counts()
    peak = float(re.search(r"peak RSS\s+([\d.]+) GiB", text).group(1))
    assert 0.05 < peak < 3.0
    line = next(s for s in text.splitlines() if s.strip().startswith("verdict"))
    assert re.search(r"first run \d\.\d\d (meets|below) the target 0\.50", line), line


def test_bench_s3_counts_requests_per_leaf():
    text = run_bench("bench_s3.py", "--size", str(N), "--reps", "1", "--latency", "0.005")
    shards = expected_counts()[0]
    new = re.search(r"new store: (\d+) leaves.*\(([^)]*)", text)
    again = re.search(r"existing store: (\d+) leaves.*\(([^)]*)", text)
    assert new and again, text
    assert int(new.group(1)) == int(again.group(1)) == shards
    # versioned leaves are never cleared (a replacement writes a new version beside the old);
    # a replaced leaf's pyramid column, rewritten at its key, clears with one bulk delete
    assert "POST" not in new.group(2)
    assert re.search(rf"POST {shards}\b", again.group(2)), again.group(2)
    assert len(re.findall(r"round trips per leaf, one after another: -?\d+\.\d\d", text)) == 2


def test_bench_read_counts_both_readers_and_prints_the_ratios():
    text = run_bench("bench_read.py", "--sizes", str(N))
    assert counts_printed(text) == expected_counts()
    cells = expected_counts()[1]
    zagg_line = next(s for s in text.splitlines() if s.strip().startswith("zagg "))
    assert re.search(r"open \+ median map\s+\d+\.\d\d s .* peak RSS \d+\.\d\d GiB", zagg_line)
    mz = next(s for s in text.splitlines() if s.strip().startswith("moczarr "))
    assert f"({cells:,} cells)" in mz  # moczarr maps the same cells
    assert re.search(r"store \d+\.\d MiB on disk", text)
    assert re.search(r"memory +zagg's peak / \(2 x store \+ interpreter\) = \d+\.\d\d", text)
    assert re.search(r"speed +moczarr wall / zagg wall = \d+\.\d \(target >= 3\)", text)


def test_bench_reruns_writes_only_what_changed():
    """bench_reruns on small granules: what each re-run printed it wrote is what the gate
    must do (nothing when unchanged, the lost leaves on resume), never its times."""
    text = run_bench(
        "bench_reruns.py", "--size", "40000", "--per-granule", "10000", "--workers", "1"
    )
    rows = {
        m.group(1).strip(): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(
            r"^(.+?)\s+\d+\.\d\d s\s+(\d+) leaves written,\s+(\d+) current", text, flags=re.M
        )
    }
    first, _ = rows["first run (catalog)"]
    assert first > 0 and rows["unchanged re-run (catalog)"] == (0, first)
    lost = max(1, first // 10)
    assert rows["resume, a tenth of leaves lost"] == (lost, first - lost)
    listed, _ = rows["first run (granule list)"]
    assert listed == first and rows["unchanged re-run (granule list)"] == (0, first)
    syn, _ = rows["first run"]
    assert syn > 0 and rows["unchanged re-run"] == (0, syn)
    assert (
        len(
            re.findall(
                r"unchanged re-run ÷ first run, [\w ]+: \d\.\d{3} \((meets|misses) "
                r"the target 0\.05\)",
                text,
            )
        )
        == 3
    )


def test_bench_icechunk_gathers_each_leaf_from_its_carrier(tmp_path):
    """bench_icechunk on two small granules: the fresh commit takes every leaf and its
    column from their carriers and reads only the overviews; without carriers it reads
    them all; an unchanged commit reads nothing; the repository is a small fraction of
    the hive."""
    text = run_bench(
        "bench_icechunk.py",
        "--size",
        "2e5",
        "--per-granule",
        "1e5",
        "--s3-size",
        "0",
        "--splits",
        "--keep",
        str(tmp_path),
    )
    leaves = int(re.search(r"leaves\s+(\d+) \(", text).group(1))
    fresh = re.search(
        r"carriers\s+[\d.]+ s\s+\(([\d,]+) objects from carriers, ([\d,]+) read", text
    )
    bare = re.search(r"no carrier\s+[\d.]+ s\s+\(([\d,]+) objects read\)", text)
    assert leaves > 1 and fresh and bare, text
    carried, read = (int(g.replace(",", "")) for g in fresh.groups())
    assert carried == 2 * leaves and read > 0
    assert int(bare.group(1).replace(",", "")) == carried + read
    assert re.search(r"unchanged commit\s+[\d.]+ s\s+\(0 objects read\)", text)
    assert re.search(r"of the run \((meets|misses) the target 10%\)", text)
    share = float(re.search(r"repo / hive bytes\s+([\d.]+)%", text).group(1))
    assert 0 < share < 5
