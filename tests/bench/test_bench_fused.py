"""``benchmarks/bench_fused.py`` times the fused read on and off in the same rounds, and
reports each against the floor and against the other."""

from __future__ import annotations

import os

import numpy as np
import pytest

from h5mdx.analysis import rmsd as rmsd_mod


def test_rounds_alternate_on_and_off_after_an_untimed_run_of_each(bench_fused):
    calls = []
    clock = iter(range(1, 100))

    def run(fused):
        calls.append(fused)
        return float(next(clock))

    def floor():
        calls.append("floor")
        return 1.0

    times = bench_fused.paired(floor, run, 3)
    assert calls == ["1", "0", "floor",
                     "floor", "1", "0", "floor", "0", "1", "floor", "1", "0"]
    assert {k: len(v) for k, v in times.items()} == {"floor": 3, "on": 3, "off": 3}


def test_summary_takes_medians_of_the_rounds_ratios(bench_fused):
    times = {"floor": [1.0, 2.0, 1.0], "on": [2.0, 2.0, 0.5], "off": [4.0, 2.0, 2.0]}
    s = bench_fused.summary(times, 1000)
    assert s["on_vs_floor"] == pytest.approx(1.0)  # 0.5, 1.0, 2.0
    assert s["off_vs_floor"] == pytest.approx(0.5)  # 0.25, 1.0, 0.5
    assert s["on_vs_off"] == pytest.approx(2.0)  # 2, 1, 4
    assert s["on_fps"] == pytest.approx(500.0)


@pytest.mark.slow
def test_both_schedulers_run_with_the_fused_read_on_and_off(bench_fused, tmp_path, monkeypatch):
    """A real (small) run on both schedulers, each way; the threaded runs leave this
    process's setting as it was; the report renders a row per run."""
    monkeypatch.delenv(rmsd_mod.FUSED_READ_ENV, raising=False)
    path = bench_fused.build(str(tmp_path / "c1.h5md"), 300, "c1")
    seen = []

    with bench_fused.runners(path, 2, bench_fused.ca_indices()) as runs:
        for sched in ("distributed", "threads"):
            for value in ("1", "0"):
                assert runs[sched](value) > 0
                seen.append((sched, value, os.environ.get(rmsd_mod.FUSED_READ_ENV)))
    # the threaded runs leave this process's setting as it was
    assert [s[2] for s in seen if s[0] == "threads"] == [None, None]
    results = {"platform": "test", "cores": 2, "versions": {"h5mdx": "x"}, "frames": 300,
               "workers": 2, "repeats": 1, "partial": False,
               "layouts": {"c1": {"ca": {"threads": bench_fused.summary(
                   {"floor": [1.0], "on": [0.5], "off": [1.0]}, 300)}}}}
    text = bench_fused.render(results)
    assert "| c1 | ca | threads | 300 | 600 | 300 | 2.00 | 1.00 | 2.00 |" in text
    assert np.isfinite(results["layouts"]["c1"]["ca"]["threads"]["on_vs_off"])
