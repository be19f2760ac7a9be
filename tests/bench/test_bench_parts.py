"""``benchmarks/bench_parts.py``: the RMSD of a run in several files, three ways."""

from __future__ import annotations

import json


def test_a_run_times_every_way_on_the_same_series(bench_parts, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_parts.bench_scale, "RESULTS", str(tmp_path / "results"))
    assert bench_parts.main(["--data", str(tmp_path), "--frames", "600", "--parts", "3",
                             "--repeats", "1", "--name", "t"]) == 0
    with open(tmp_path / "results" / "parts-t.json") as fh:
        got = json.load(fh)
    assert [r["way"] for r in got["rows"]] == ["whole", "parts", "mfdataset", "floor"]
    assert all(r["seconds"] > 0 and r["vs_floor"] > 0 for r in got["rows"])
    assert got["meta"]["parts"] == 3 and len(got["seconds"]["parts"]) == 1
    assert "| parts |" in (tmp_path / "results" / "parts-t.md").read_text()
    assert sorted(p.name for p in tmp_path.glob("part-600-*")) == [
        f"part-600-{i}-of-3.h5md" for i in (1, 2, 3)]
