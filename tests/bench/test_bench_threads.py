"""``benchmarks/bench_threads.py`` reads exactly the positions' frames, and reports per T."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest


@pytest.fixture(scope="module", params=["c100", "c1", "contig"])
def trajectory(request, bench_threads, tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / f"{request.param}.h5md"
    return request.param, bench_threads.build(str(path), 250, request.param)


def _frames(bench_threads, path):
    with h5py.File(path, "r") as f:
        return f[bench_threads.DSET][:]


def test_the_spans_cover_every_frame_once_in_reads_of_100(bench_threads, trajectory):
    layout, path = trajectory
    table = bench_threads.span_table(path)
    frames = _frames(bench_threads, path)
    assert table[:, 1].sum() == frames.nbytes and table[:, 2].sum() == 250
    assert (table[:, 2] <= 100).all()
    if layout != "c1":  # 100 + 100 + 50; c100's edge chunk, stored whole, read to frame 250
        assert table[:, 2].tolist() == [100, 100, 50]
    else:  # runs of one-frame chunks adjacent in the file (HDF5 puts index nodes between)
        assert (np.diff(table[:, 0]) > 0).all()


@pytest.mark.parametrize("how", ["one fd", "fd per thread", "mapped"])
def test_the_plain_reads_hand_the_kernel_every_frame_in_order(bench_threads, trajectory, how):
    _, path = trajectory
    table = bench_threads.span_table(path)
    frames = _frames(bench_threads, path)
    seen = []

    def kernel(x):
        seen.append(x.copy())

    if how == "mapped":
        nbytes = bench_threads.map_spans(path, table, kernel)
    else:
        fd = os.open(path, os.O_RDONLY) if how == "one fd" else None
        try:
            nbytes = bench_threads.read_spans(path, table, fd, kernel)
        finally:
            if fd is not None:
                os.close(fd)
    assert nbytes == frames.nbytes
    np.testing.assert_array_equal(np.concatenate(seen), frames)


def test_the_qcp_kernel_on_the_spans_gives_the_rmsd(bench_threads, trajectory):
    from h5mdx.analysis.qcp import rmsd_qcp

    _, path = trajectory
    kernel = bench_threads._qcp_kernel(path)
    got = []
    bench_threads.read_spans(path, bench_threads.span_table(path), None,
                             lambda x: got.append(kernel(x)))
    ca = bench_threads.ca_indices()
    frames = _frames(bench_threads, path)
    expected = rmsd_qcp(frames[0][ca].astype(np.float64), frames[:, ca])
    np.testing.assert_allclose(np.concatenate(got), expected, atol=1e-5)
    n = len(bench_threads.span_table(path))
    assert bench_threads._process_read(path, 0, n, "mmap+qcp") == frames.nbytes


def test_the_report_has_a_column_per_thread_count(bench_threads):
    row = {"times": [1.0], "frames_per_s": 1000.0, "vs_floor": 1.0}
    base = {"platform": "p", "cores": 4, "frames": 1000, "repeats": 1,
            "versions": {"h5mdx": "0"}, "partial": True}
    runs = {"1": {"floor": row, "h5mdx, threads": {**row, "vs_floor": 0.5}},
            "4": {"floor": row}}
    text = bench_threads.render({**base, "layouts": {"c1": {"runs": runs},
                                                     "contig": {"runs": {}}}})
    assert "## c1: (1, n, 3) chunks" in text and "## contig" not in text
    assert "| variant | T=1 | T=4 |" in text
    assert "| h5mdx, threads | 1,000 (0.50) |  |" in text
    assert "Partial" in text
    # the first results, of one c100 grid before the layouts, still render
    assert "## c100" in bench_threads.render({**base, "runs": runs})
