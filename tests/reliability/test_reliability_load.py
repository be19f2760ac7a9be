"""Many readers at once, many opens in one session, file systems without locking."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDReadError

pytestmark = pytest.mark.slow  # in the full run (scripts/test.sh, CI), not in plain `pytest`

psutil = pytest.importorskip("psutil")

READER = """
import hashlib, sys, warnings
warnings.simplefilter("ignore")
import xarray as xr
with xr.open_dataset(sys.argv[1], engine="h5md", chunks={}, chunk_mib=0.5) as ds:
    pos = ds.position.values
print(hashlib.sha256(pos.tobytes()).hexdigest(), float(pos.astype("f8").sum()))
"""


def _record(section, data):
    out = os.environ.get("H5MDX_RELIABILITY_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"section": section, **data}) + "\n")


def _env(**extra):
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **extra)


def test_eight_subprocesses_read_identically(adk_h5md, adk_positions):
    expected = hashlib.sha256(adk_positions.tobytes()).hexdigest()
    procs = [subprocess.Popen([sys.executable, "-c", READER, adk_h5md], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e for _, e in outs]
    digests = {o.split()[0] for o, _ in outs}
    assert digests == {expected}
    _record("load", {"concurrent_subprocess_readers": 8, "identical": True})


def test_eight_dask_processes_identical(adk_h5md, adk_positions):
    import dask

    expected = adk_positions.astype(np.float64).sum(axis=(1, 2))
    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.1) as ds:
        assert len(ds.position.chunks[0]) >= 8
        with dask.config.set(scheduler="processes", num_workers=8):
            got = ds.position.astype(np.float64).sum(("atom", "spatial")).compute()
    np.testing.assert_allclose(got.values, expected, rtol=1e-12)
    _record("load", {"dask_processes_readers": 8, "identical": True})


def _fds():
    return len(os.listdir("/proc/self/fd"))


def _open_on(path):
    """This process's descriptors open on ``path``."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own, closed by now
            if os.path.samefile(os.readlink(f"/proc/self/fd/{fd}"), path):
                fds.append(int(fd))
    return fds


def test_open_close_500_no_leaks(adk_h5md, adk_positions):
    proc = psutil.Process()

    def cycle():
        with xr.open_dataset(adk_h5md, engine="h5md") as ds:
            assert float(ds.position[7, 11, 1]) == float(adk_positions[7, 11, 1])
    for _ in range(50):  # warm caches, imports and allocator pools
        cycle()
    gc.collect()
    fd0, rss0 = _fds(), proc.memory_info().rss
    for _ in range(500):
        cycle()
    gc.collect()
    fd1, rss1 = _fds(), proc.memory_info().rss
    growth = (rss1 - rss0) / 2**20
    _record("load", {"open_close_cycles": 500, "fds_before": fd0, "fds_after": fd1,
                     "rss_growth_mib": round(growth, 2)})
    # fewer is not a leak: a cluster left by an earlier test may close a socket meanwhile
    assert fd1 <= fd0, f"{fd1 - fd0} file descriptors more after 500 open/close cycles"
    assert _open_on(adk_h5md) == []
    assert growth < 25, f"RSS grew by {growth:.1f} MiB over 500 open/close cycles"


WRITER_HOLDS = """
import sys, time, h5py
f = h5py.File(sys.argv[1], "a")  # held open for writing (not SWMR): HDF5 locks the file
print("holding", flush=True)
sys.stdin.readline()
f.close()
"""

LOCKED_READER = """
import sys, warnings
warnings.simplefilter("ignore")
import xarray as xr
from h5mdx.errors import H5MDReadError
try:
    with xr.open_dataset(sys.argv[1], engine="h5md") as ds:
        print("ok", float(ds.position[3, 5, 0]))
except H5MDReadError as err:
    print("H5MDReadError", err)
"""


def test_file_locking_variable(tmp_path, adk_h5md, adk_positions):
    path = tmp_path / "held.h5md"
    path.write_bytes(open(adk_h5md, "rb").read())
    holder = subprocess.Popen([sys.executable, "-c", WRITER_HOLDS, str(path)], env=_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        runs = {}
        for label, extra in (("default", {}), ("no_locking", {"HDF5_USE_FILE_LOCKING": "FALSE"})):
            env = _env(**extra)
            if not extra:
                env.pop("HDF5_USE_FILE_LOCKING", None)
            out = subprocess.run([sys.executable, "-c", LOCKED_READER, str(path)], env=env,
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            runs[label] = out.stdout.strip()
    finally:
        holder.communicate("\n", timeout=60)
    # HDF5's lock refuses a reader while a writer holds the file: a clear error naming
    # the way out; with HDF5_USE_FILE_LOCKING=FALSE the (flushed) file is read
    assert runs["default"].startswith("H5MDReadError"), runs
    assert "HDF5_USE_FILE_LOCKING=FALSE" in runs["default"]
    assert str(path) in runs["default"]
    assert runs["no_locking"] == f"ok {float(adk_positions[3, 5, 0])}"
    _record("load", {"file_locking_false_read_ok": True, "locked_error_clear": True})


def test_lock_error_class():
    assert issubclass(H5MDReadError, OSError)
    assert h5py.version.hdf5_version_tuple >= (1, 10, 0)
