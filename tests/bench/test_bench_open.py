"""``benchmarks/bench_open.py``: its result files."""

from __future__ import annotations

import json

import pytest


def test_results_stopped_while_written_leave_the_earlier_ones(bench_open, tmp_path,
                                                              monkeypatch):
    """open.json was written straight into its file: a run stopped while writing it (a
    full disk, Ctrl-C) left the earlier results cut short, which the docs then
    included. Now it is written beside its file and renamed over it: the earlier
    results stay whole and nothing is left beside them."""
    rows = [{"frames": n, "file_mib": n / 10, "h5md_open_s": 0.01, "h5md_tasks": 3,
             "h5netcdf_open_s": 0.02, "h5netcdf_tasks": 9} for n in (100, 1000)]
    table = bench_open.write_results(rows, 3, str(tmp_path))
    assert "| 1000 | 100 | 10.0 | 3 | 20.0 | 9 |" in table
    before = (tmp_path / "open.json").read_text()
    assert json.loads(before)["open_time_ratio_10x_frames"] == 1.0

    def full_disk(obj, fh, **kwargs):
        fh.write(json.dumps(obj, **kwargs)[:30])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench_open.json, "dump", full_disk)
    with pytest.raises(OSError, match="No space left"):
        bench_open.write_results([{**r, "h5md_open_s": 0.5} for r in rows], 3, str(tmp_path))
    monkeypatch.undo()
    assert (tmp_path / "open.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["open.json", "open.md"]
