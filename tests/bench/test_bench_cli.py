"""``benchmarks/bench_cli.py`` times ``h5mdx rmsd`` as a user runs it, per scheduler."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.slow  # 8 runs of the command
def test_one_round_times_every_scheduler_and_says_what_auto_chose(bench_cli, tmp_path):
    bs = bench_cli.bs
    path = bs.build(str(tmp_path / "scale-c100-200.h5md"), 200, "c100")
    rows = bench_cli.layout_rows(path, "c100", 2, {"all": None}, repeats=1)
    by = {r["scheduler"]: r for r in rows}
    assert set(by) == set(bench_cli.SCHEDULERS)
    assert by["threads"]["ran_on"] == ["threads"]
    assert by["distributed"]["ran_on"] == ["distributed"]
    assert by["auto"]["ran_on"] == ["threads"]  # the file is read without HDF5's lock
    for r in rows:
        assert r["frames"] == 200 and r["workers"] == 2
        assert len(r["walls"]) == len(r["computes"]) == len(r["floors"]) == 1  # warm-up dropped
        assert 0 < r["compute_s"] < r["wall_s"]
        assert np.isclose(r["compute_vs_floor"], r["floor_s"] / r["compute_s"])


def test_the_report_pairs_threads_with_distributed(bench_cli):
    rows = [{"layout": "contig", "selection": "ca", "scheduler": s, "ran_on": [s],
             "workers": 2, "frames": 30000, "floor_s": 0.08, "wall_s": w, "compute_s": c,
             "compute_vs_floor": 0.08 / c}
            for s, w, c in (("threads", 2.5, 0.1), ("distributed", 5.0, 0.4))]
    text = bench_cli.markdown({"frames": 30000, "repeats": 5, "cores": 2, "versions": {},
                               "rows": rows})
    assert "| contig | ca | threads | threads | 2.50 | 0.100 | 0.80 | 0.080 |" in text
    assert "| contig | ca | 0.50 | 0.25 |" in text
