"""``benchmarks/bench_blocks.py`` times block sizes of any layout against the read floor of
the same rounds."""

from __future__ import annotations

import argparse

import numpy as np
import pytest


@pytest.mark.parametrize("layout", ["contig", "c1"])
def test_block_sizes_of_a_layout_against_the_floor(bench_blocks, tmp_path, layout):
    path = bench_blocks.build(str(tmp_path / f"t-{layout}.h5md"), 60, layout)
    args = argparse.Namespace(frames=60, layout=layout, mib=[0.5, 1.0],
                              schedulers=["threads"], workers=[1], repeats=2)
    rows = bench_blocks.measure(args, path)
    # two selections x two block sizes; each block holds the frames of its MiB
    assert [(r["select"], r["mib"]) for r in rows] == [
        ("ca", 0.5), ("ca", 1.0), ("all", 0.5), ("all", 1.0)]
    frame_bytes = bench_blocks.N_ATOMS * 3 * 4
    for r in rows:
        assert r["frames_per_block"] == max(1, int(r["mib"] * 2**20) // frame_bytes)
        assert r["tasks"] == -(-60 // r["frames_per_block"])
        assert len(r["times"]) == len(r["floor_times"]) == 2
        # the ratio is the median of the rounds' floor-over-run ratios
        ratios = [f / t for f, t in zip(r["floor_times"], r["times"], strict=True)]
        assert r["vs_floor"] == pytest.approx(float(np.median(ratios)))
    text = bench_blocks.markdown({"frames": 60, "layout": layout, "cores": 2, "repeats": 2,
                                  "mib": [0.5, 1.0], "rows": rows, "versions": {}})
    assert bench_blocks.LAYOUT_TEXT[layout] in text
    assert text.count("x floor") == 4
