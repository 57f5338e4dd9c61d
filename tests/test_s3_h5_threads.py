"""HDF5 granules on S3 open while other threads collect garbage holding h5py objects.

h5py holds its global lock while HDF5 reads through a Python file object; a file object
served by another thread hangs the process when the cyclic collector runs on that thread
and frees an h5py object. The script below makes that collection likely (a low collector
threshold, and a thread that keeps leaving h5py objects in reference cycles) and walks
every dataset's chunk index of a granule on the local S3 server, in a process of its own
so that a hang fails the test instead of the suite.
"""

import subprocess
import sys
import textwrap

import h5py
import numpy as np

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys, threading
    import h5py
    from zagg.sources.scan import open_h5

    options, url, local, datasets = json.loads(sys.argv[1])
    stop = False

    def litter():
        while not stop:
            with h5py.File(local, "r") as f:
                junk = [f["g0/x"].id, f.id.get_access_plist()]
                junk.append(junk)  # a cycle: only the cyclic collector frees it
            del junk

    littering = threading.Thread(target=litter)
    littering.start()
    gc.set_threshold(200)
    chunks = 0
    with open_h5(url, options, 4096) as f:
        for i in range(datasets):
            chunks += f[f"g{i}/x"].id.get_num_chunks()
    stop = True
    littering.join()
    print(chunks)
    """
)


def test_s3_granule_opens_while_other_threads_collect_h5py_garbage(moto_s3, tmp_path):
    import json

    options, fs = moto_s3
    datasets, rows, chunk = 40, 20_000, 1_000
    local = tmp_path / "granule.h5"
    with h5py.File(local, "w") as f:
        for i in range(datasets):
            f.create_dataset(
                f"g{i}/x", data=np.arange(rows, dtype="f8"), chunks=(chunk,), compression="gzip"
            )
    fs.mkdir("h5threads")
    fs.put(str(local), "h5threads/granule.h5")
    args = json.dumps([options, "s3://h5threads/granule.h5", str(local), datasets])
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, args], capture_output=True, text=True, timeout=180
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "opening an S3 granule hung while other threads collected h5py garbage"
        ) from None
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == datasets * rows // chunk
