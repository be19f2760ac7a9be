"""``benchmarks/bench_layouts.py``: its result files."""

from __future__ import annotations

import os

import pytest


def _rows():
    return [{"layout": "c100", "chunks": "(100, 3341, 3)", "size_bytes": 2**20, "write_s": 0.5,
             "warm_read_s": 0.1, "warm_read_GBps": 1.0, "warm_frames_per_s_fbf": 900.0,
             "warm_rmsd_s": 0.2, "n_frames": 100}]


def test_result_files_are_renamed_over_the_earlier_ones(bench_layouts, tmp_path):
    """The layout experiment's .md and .png results were written straight into their
    files: a run stopped while writing them (a full disk, Ctrl-C) left the earlier
    results cut short, and a copy of them elsewhere by a hard link changed too. Now each
    is written beside its file and renamed over it: the earlier file, and every other
    name of it, stays whole until the new one is complete."""
    pytest.importorskip("matplotlib")
    meta = {"machine": "m", "cpus": 2, "h5py": "3", "hdf5": "1.14", "cold_cache": False,
            "frame_by_frame_frames": 10, "rmsd_column": "rmsd_s"}
    for name, write in (("layouts.md", lambda p: bench_layouts.write_markdown(p, meta, _rows())),
                        ("layouts.png", lambda p: bench_layouts.plot(p, _rows()))):
        path = tmp_path / name
        path.write_text("earlier")
        kept = tmp_path / f"kept-{name}"
        os.link(path, kept)
        with pytest.warns(UserWarning, match="other hard link"):
            write(str(path))
        assert kept.read_text() == "earlier"  # not written in place
        assert path.read_bytes() != b"earlier" and path.stat().st_size > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kept-layouts.md", "kept-layouts.png", "layouts.md", "layouts.png"]
