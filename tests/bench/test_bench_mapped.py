"""``benchmarks/bench_mapped.py`` times the fused read against the kernel on a mapping of
the file, with the floor in the same rounds, and checks that every way gives the same RMSD."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_every_way_gives_the_rmsd_of_h5mdx(bench_mapped, tmp_path, mode):
    import xarray as xr

    import h5mdx

    path = bench_mapped.build(str(tmp_path / "contig.h5md"), 90, "contig")
    select = bench_mapped.ca_indices()
    with xr.open_dataset(path, engine="h5md") as ds:
        expected = h5mdx.rmsd(ds.position, select=select).values
    with bench_mapped.workers(mode, 2, path, select, 0.25, 0.5) as pool:
        parts = bench_mapped.frame_slabs(90, 1, 2)
        for way in bench_mapped.WAYS:
            got = np.concatenate(list(pool.map(
                bench_mapped._slab, [way] * 2, *zip(*parts, strict=True), [True] * 2)))
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9, err_msg=way)
    row = bench_mapped.measure(path, 90, mode, 2, select, 0.25, 2, 0.5)
    assert row["equal"] is True
    assert set(row["times"]) == {"floor", *bench_mapped.WAYS}
    assert all(len(t) == 2 for t in row["times"].values())
    for way in bench_mapped.WAYS:
        ratios = [f / t for f, t in zip(row["times"]["floor"], row["times"][way], strict=True)]
        assert row[f"{way}_vs_floor"] == pytest.approx(float(np.median(ratios)))
    text = bench_mapped.markdown({"frames": 90, "cores": 2, "repeats": 2, "step_mib": 0.25,
                                  "versions": {}, "complete": True,
                                  "rows": [{"mode": mode, "n": 2, "select": "ca", **row}]})
    assert f"| {mode} | 2 | ca |" in text and text.rstrip().endswith("| yes |")


def test_a_chunked_file_is_refused(bench_mapped, tmp_path):
    path = bench_mapped.build(str(tmp_path / "c1.h5md"), 20, "c1")
    with pytest.raises(ValueError, match="not contiguous"):
        bench_mapped._setup(path, None, 1.0)
