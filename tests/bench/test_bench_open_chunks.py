"""``benchmarks/bench_open_chunks.py`` times RMSD on positions opened with ``chunks=``
against the read floor, a row per open."""

from __future__ import annotations

import pytest


def test_a_round_gives_a_row_per_open(bench_open_chunks, tmp_path):
    pytest.importorskip("distributed")
    bs = bench_open_chunks.bs
    path = bs.build(str(tmp_path / "scale-c100-300.h5md"), 300, "c100")
    store = bench_open_chunks.zarr_copy(path)
    assert bench_open_chunks.zarr_copy(path) == store  # written once
    rows = bench_open_chunks.run(path, 1, repeats=1, zarr=store)
    assert [r["open"] for r in rows] == [*bench_open_chunks.OPENS,
                                         *bench_open_chunks.ZARR_OPENS]
    # 300 frames, one worker: every open gives one task (blocks and chunks run together)
    assert [r["tasks"] for r in rows] == [1, 1, 1, 1, 1]
    assert all(r["vs_floor"] > 0 and len(r["rounds"]) == 1 for r in rows)
    assert [("vs_zarr_floor" in r) for r in rows] == [False] * 3 + [True] * 2
    assert all(r["vs_zarr_floor"] > 0 for r in rows[3:])


def test_the_report_has_a_row_per_open(bench_open_chunks):
    results = {"frames": 100000, "layout": "c100", "repeats": 3, "cores": 2, "versions": {},
               "rows": [{"workers": 2, "open": "chunks={'time': 100}", "tasks": 8,
                         "vs_floor": 1.62, "rounds": [1.5, 1.62, 1.7]}]}
    text = bench_open_chunks.markdown(results)
    assert "| 2 | `chunks={'time': 100}` | 8 | 1.62 | 1.50, 1.62, 1.70 | - |" in text
    results["rows"][0].update(open="zarr, lazy", vs_zarr_floor=0.91)
    assert "| 2 | `zarr, lazy` | 8 | 1.62 | 1.50, 1.62, 1.70 | 0.91 |" in \
        bench_open_chunks.markdown(results)


def test_skip_times_the_rmsd_of_the_frames_after_it(bench_open_chunks, tmp_path):
    """``--skip``: the RMSD of the frames after the first ``skip`` (positions sliced after
    the open, still one task for one worker), said in the report."""
    pytest.importorskip("distributed")
    bs = bench_open_chunks.bs
    path = bs.build(str(tmp_path / "scale-c100-300.h5md"), 300, "c100")
    rows = bench_open_chunks.run(path, 1, repeats=1, skip=120)
    assert [r["tasks"] for r in rows] == [1, 1, 1]
    assert all(r["vs_floor"] > 0 for r in rows)
    results = {"frames": 300, "layout": "c100", "repeats": 1, "cores": 2, "versions": {},
               "skip": 120, "rows": rows}
    assert "`position.isel(time=slice(120, None))`" in bench_open_chunks.markdown(results)
    results.update(skip=0, stride=4)
    assert "`position.isel(time=slice(0, None, 4))`" in bench_open_chunks.markdown(results)
