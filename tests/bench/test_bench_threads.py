"""``benchmarks/bench_threads.py`` reads exactly the positions' chunks, and reports per T."""

from __future__ import annotations

import importlib
import os
import sys

import h5py
import numpy as np
import pytest

pytest.importorskip("numba")

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.fixture(scope="module")
def bench_threads():
    sys.path.insert(0, BENCHMARKS)
    try:
        yield importlib.import_module("bench_threads")
    finally:
        sys.path.remove(BENCHMARKS)


@pytest.fixture(scope="module")
def c100(bench_threads, tmp_path_factory):
    return bench_threads.build(str(tmp_path_factory.mktemp("threads") / "c100.h5md"), 250,
                               "c100")


@pytest.mark.parametrize("shared", [True, False], ids=["one fd", "fd per thread"])
def test_the_plain_reads_hand_the_kernel_every_frame_in_order(bench_threads, c100, shared):
    table = bench_threads.chunk_table(c100)
    with h5py.File(c100, "r") as f:
        frames = f[bench_threads.DSET][:]
    assert len(table) == 3 and table[:, 1].sum() == frames.nbytes  # 100 + 100 + 50 frames
    seen = []
    fd = os.open(c100, os.O_RDONLY) if shared else None
    try:
        nbytes = bench_threads.read_chunks(c100, table, fd, lambda x: seen.append(x.copy()))
    finally:
        if fd is not None:
            os.close(fd)
    assert nbytes == frames.nbytes
    np.testing.assert_array_equal(np.concatenate(seen), frames)


def test_the_qcp_kernel_on_the_chunks_gives_the_rmsd(bench_threads, c100):
    from h5mdx.analysis.qcp import rmsd_qcp

    kernel = bench_threads._qcp_kernel(c100)
    got = []
    bench_threads.read_chunks(c100, bench_threads.chunk_table(c100), None,
                              lambda x: got.append(kernel(x)))
    ca = bench_threads.ca_indices()
    with h5py.File(c100, "r") as f:
        frames = f[bench_threads.DSET][:]
    expected = rmsd_qcp(frames[0][ca].astype(np.float64), frames[:, ca])
    np.testing.assert_allclose(np.concatenate(got), expected, atol=1e-5)


def test_the_report_has_a_column_per_thread_count(bench_threads):
    row = {"times": [1.0], "frames_per_s": 1000.0, "vs_floor": 1.0}
    results = {"platform": "p", "cores": 4, "frames": 1000, "repeats": 1,
               "versions": {"h5mdx": "0"}, "partial": True,
               "runs": {"1": {"floor": row, "h5mdx, threads": {**row, "vs_floor": 0.5}},
                        "4": {"floor": row}}}
    text = bench_threads.render(results)
    assert "| variant | T=1 | T=4 |" in text
    assert "| h5mdx, threads | 1,000 (0.50) |  |" in text
    assert "Partial" in text
