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


@pytest.mark.parametrize("atoms", [None, np.arange(0, 300, 4)])
def test_two_frames_a_pass_give_the_same_bits_as_one(bench_kernel, tmp_path, atoms):
    """``_pair_sums`` adds each frame's products in the order ``_frame_sums`` does, odd
    frame counts and gathered selections included (weighted too)."""
    rng = np.random.default_rng(4)
    frames = (rng.normal(size=(9, 300, 3)) * 10).astype(np.float32)
    cols = np.arange(300) if atoms is None else atoms
    ref = center(frames[0, cols].astype(np.float64))
    weights = rng.uniform(1, 16, size=len(cols))
    one = bench_kernel.kernel_variant("stack", False, str(tmp_path), n_lanes=24, pairs=False)
    two = bench_kernel.kernel_variant("stack", False, str(tmp_path), n_lanes=24, pairs=True)
    assert (one._PAIRS, two._PAIRS) == (False, True)
    for w in (None, weights):
        got = [PreparedQCP(ref, w, True, k, atoms)(frames) for k in (one, two)]
        assert np.array_equal(got[0], got[1])
        assert got[0].shape == (9,) and np.all(got[0][1:] > 0)


def test_lane_counts_keep_an_axis_per_lane(bench_kernel, tmp_path):
    with pytest.raises(RuntimeError, match="multiple of 3"):
        bench_kernel.kernel_variant("stack", False, str(tmp_path), n_lanes=8)


def test_the_size_scan_times_the_shipped_kernel_on_each_size(bench_kernel):
    rng = np.random.default_rng(5)
    frames = (rng.normal(size=(30, 400, 3)) * 10).astype(np.float32)
    scan = bench_kernel.size_scan(frames, [50, 400], repeats=1)
    assert list(scan) == [50, 400]
    assert scan[400]["layout_kib"] == 9 * 400 * 8 / 1024
    assert all(v["atoms_per_s"] > 0 for v in scan.values())


def test_the_report_shows_the_size_scan(bench_kernel):
    results = {"frames": 10, "n_atoms": 3341, "repeats": 1, "platform": "Linux", "cores": 2,
               "versions": {}, "cpu": {"l1d_kib": 32, "l2_kib": 512},
               "fps": {"all atoms": {"h5mdx numba": 1.0}},
               "sizes": {"428": {"atoms_per_s": 8.29e8, "layout_kib": 30.1}}}
    text = bench_kernel.markdown(results)
    assert "| 428 | 30 | 829 |" in text
    assert "L1d 32 KiB, L2 512 KiB a core" in text


def test_prefer_512_asks_llvm_for_512_bit_vectors(bench_kernel):
    """``--prefer-512``'s features are the host's with ``-prefer-256-bit`` last, which
    ``_wide_vectors`` reads as 512-bit vectors wherever the CPU has AVX-512."""
    from numba.core.codegen import get_host_cpu_features

    from h5mdx.analysis._qcp_numba import _wide_vectors

    features = bench_kernel.prefer_512_features()
    assert features.endswith(",-prefer-256-bit")
    assert features.count("prefer-256-bit") == 1
    host = get_host_cpu_features()
    assert _wide_vectors(features, "sapphirerapids") is ("+avx512f" in host.split(","))


def test_the_report_says_which_layout_it_timed(bench_kernel):
    assert bench_kernel.shipped_text({}) == ""
    text = bench_kernel.shipped_text({"shipped_lanes": 24, "shipped_pairs": True,
                                      "numba_cpu_features": "+avx512f,-prefer-256-bit"})
    assert text == (" The shipped kernel (`h5mdx numba`) has 24 accumulator lanes on this "
                    "CPU, and takes two frames a pass. Built with LLVM told to use 512-bit "
                    "vectors (`--prefer-512`: `NUMBA_CPU_FEATURES` ending in "
                    "`-prefer-256-bit`).")
    assert bench_kernel.shipped_text({"shipped_lanes": 12, "shipped_pairs": False,
                                      "numba_cpu_features": None}) == (
        " The shipped kernel (`h5mdx numba`) has 12 accumulator lanes on this CPU.")
