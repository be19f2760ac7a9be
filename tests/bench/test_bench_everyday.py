"""``benchmarks/bench_everyday.py``: everyday reads against h5py, time and peak memory."""

from __future__ import annotations

import json


def test_a_run_gives_a_row_per_layout_and_read(bench_everyday, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_everyday, "RESULTS", str(tmp_path / "results"))
    assert bench_everyday.main(["--data", str(tmp_path), "--frames", "400", "--repeats", "1",
                                "--layouts", "c100,gz100", "--name", "t"]) == 0
    with open(tmp_path / "results" / "everyday-t.json") as fh:
        rows = json.load(fh)["rows"]
    assert [(r["layout"], r["read"]) for r in rows] == [
        (layout, read) for layout in ("c100", "gz100") for read in bench_everyday.READS]
    for r in rows:  # the reads agreed with h5py's (checked in the run) and were timed
        assert r["floor_ms"] > 0 and r["h5mdx_ms"] > 0 and r["ratio"] > 0
        assert r["result_mib"] > 0 and r["h5mdx_peak_mib"] >= 0
    text = (tmp_path / "results" / "everyday-t.md").read_text()
    assert "| gz100 | 100 frames one by one |" in text
