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


def test_results_stopped_while_written_leave_the_earlier_ones(bench_everyday, tmp_path,
                                                              monkeypatch):
    """everyday-NAME.json was written straight into its file: a run stopped while
    writing it (a full disk, Ctrl-C) left the earlier results cut short, which the docs
    then included. Now each file is written beside it and renamed over it: the earlier
    results stay whole and nothing is left beside them."""
    results = tmp_path / "results"
    monkeypatch.setattr(bench_everyday, "RESULTS", str(results))
    args = ["--data", str(tmp_path), "--frames", "400", "--repeats", "1", "--layouts",
            "c100", "--name", "t"]
    assert bench_everyday.main(args) == 0
    before = (results / "everyday-t.json").read_text()
    real = json.dump

    def full_disk(obj, fh, **kwargs):
        fh.write(json.dumps(obj, **kwargs)[:30])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench_everyday.json, "dump", full_disk)
    try:
        bench_everyday.main(args)
    except OSError as err:
        assert "No space left" in str(err)
    else:
        raise AssertionError("the write did not fail")
    finally:
        monkeypatch.setattr(bench_everyday.json, "dump", real)
    assert (results / "everyday-t.json").read_text() == before
    assert sorted(p.name for p in results.iterdir()) == ["everyday-t.json", "everyday-t.md"]
