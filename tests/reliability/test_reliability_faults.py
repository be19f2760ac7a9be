"""Faults: a distributed worker killed mid-run, a worker that cannot open the file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import numpy as np
import pytest
import xarray as xr

from h5mdx.analysis.rmsd import rmsd
from h5mdx.errors import H5MDReadError
from h5mdx.parallel import local_cluster

pytestmark = pytest.mark.slow  # in the full run (scripts/test.sh, CI), not in plain `pytest`

distributed = pytest.importorskip("distributed")

DELAY_FRAME = 50


def _record(section, data):
    out = os.environ.get("H5MDX_RELIABILITY_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"section": section, **data}) + "\n")


@pytest.fixture(scope="module")
def client():
    # the delay hook reaches the workers through their inherited environment
    old = os.environ.get("H5MDX_TIMING_DELAY")
    os.environ["H5MDX_TIMING_DELAY"] = f"{DELAY_FRAME}:4:compute"
    try:
        with local_cluster(2) as cluster, \
                distributed.Client(cluster) as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("H5MDX_TIMING_DELAY", None)
        else:
            os.environ["H5MDX_TIMING_DELAY"] = old


def _kill_worker_running(client, predicate, timeout=60):
    """SIGKILL the worker process that is running a task whose key matches."""
    pids = client.run(os.getpid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for addr, keys in client.processing().items():
            if any(predicate(str(k)) for k in keys) and addr in pids:
                os.kill(pids[addr], signal.SIGKILL)
                return pids[addr]
        time.sleep(0.05)
    raise AssertionError("no worker was seen running the slow task")


def test_killed_worker_rmsd_still_complete(client, adk_h5md, adk_positions):
    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.4) as ds:
        lazy = rmsd(ds.position, 0, frames_per_block=10, kernel="numpy", chunk_mib=0.4)
        starts = np.cumsum((0,) + lazy.data.chunks[0][:-1])
        assert DELAY_FRAME in starts, lazy.data.chunks
        with xr.set_options(), __import__("dask").config.set(scheduler="threads"):
            os.environ.pop("H5MDX_TIMING_DELAY")  # the reference run needs no delay
            try:
                expected = lazy.compute()
            finally:
                os.environ["H5MDX_TIMING_DELAY"] = f"{DELAY_FRAME}:4:compute"
        t0 = time.monotonic()
        fut = client.compute(lazy)
        time.sleep(1.0)  # let the workers start on the blocks; the frame-50 block sleeps 4 s
        killed = _kill_worker_running(client, lambda k: True)
        got = fut.result(timeout=120)
        wall = time.monotonic() - t0
    np.testing.assert_array_equal(got.values, expected.values)
    assert got.sizes["time"] == adk_positions.shape[0]
    client.wait_for_workers(2, timeout=60)
    _record("faults", {"kind": "SIGKILL distributed worker during RMSD", "killed_pid": killed,
                       "result_identical": True, "wall_s": round(wall, 2)})


def test_killed_worker_reduction_still_complete(client, adk_h5md, adk_positions):
    def slow(block):
        time.sleep(0.4)
        return block.astype(np.float64)

    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.2) as ds:
        data = ds.position.data.map_blocks(slow, dtype=np.float64)
        fut = client.compute(data.sum(axis=(1, 2)))
        time.sleep(0.8)
        killed = _kill_worker_running(client, lambda k: True)
        got = fut.result(timeout=120)
    np.testing.assert_allclose(got, adk_positions.astype(np.float64).sum(axis=(1, 2)),
                               rtol=1e-12)
    client.wait_for_workers(2, timeout=60)
    _record("faults", {"kind": "SIGKILL distributed worker during map_blocks reduction",
                       "killed_pid": killed, "result_identical": True})


def test_worker_cannot_open_file(client, tmp_path, adk_h5md):
    path = tmp_path / "vanishing.h5md"
    shutil.copy(adk_h5md, path)
    ds = xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.2)
    graph = ds.position.sum(("atom", "spatial"))
    ds.close()
    os.rename(path, tmp_path / "moved.h5md")  # after graph construction
    t0 = time.monotonic()
    with pytest.raises(H5MDReadError) as err:
        client.compute(graph).result(timeout=120)
    wall = time.monotonic() - t0
    assert str(path) in str(err.value)
    assert "No such file" in str(err.value)
    assert wall < 60
    _record("faults", {"kind": "file renamed after graph construction",
                       "error": "H5MDReadError", "names_file_and_reason": True,
                       "seconds_to_fail": round(wall, 2)})
