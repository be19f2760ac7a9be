"""``benchmarks/bench_kernel.py`` rebuilds the shipped kernel with other accumulator lanes;
each build computes the shipped kernel's RMSD."""

from __future__ import annotations

import numpy as np
import pytest

from h5mdx.analysis import _qcp_numba
from h5mdx.analysis.qcp import PreparedQCP, center


@pytest.mark.parametrize("n_lanes", [24, 6])
def test_other_lane_counts_give_the_shipped_kernels_rmsd(bench_kernel, tmp_path, n_lanes):
    rng = np.random.default_rng(3)
    frames = (rng.normal(size=(20, 3341, 3)) * 10).astype(np.float32)
    ref = center(frames[0].astype(np.float64))
    variant = bench_kernel.kernel_variant("stack", False, str(tmp_path), n_lanes=n_lanes)
    assert variant._LANES == n_lanes
    got = PreparedQCP(ref, None, True, variant, None)(frames)
    shipped = PreparedQCP(ref, None, True, _qcp_numba, None)(frames)
    np.testing.assert_allclose(got, shipped, rtol=1e-12, atol=1e-9)


def test_lane_counts_keep_an_axis_per_lane(bench_kernel, tmp_path):
    with pytest.raises(RuntimeError, match="multiple of 3"):
        bench_kernel.kernel_variant("stack", False, str(tmp_path), n_lanes=8)
