"""The batched QCP kernel against MDAnalysis' qcprot, and its properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from MDAnalysis.analysis import rms

from h5mdx.analysis.qcp import has_numba, rmsd_qcp

KERNELS = ["numpy"] + (["numba"] if has_numba() else [])


@pytest.fixture(scope="module")
def ca(adk_universe):
    sel = adk_universe.select_atoms("name CA")
    xyz = np.stack([sel.positions.copy() for _ in adk_universe.trajectory])
    return sel, xyz


@pytest.mark.parametrize("kernel", KERNELS)
def test_equals_mdanalysis_rmsd(ca, kernel):
    sel, xyz = ca
    ref = xyz[0]
    expected = np.array([rms.rmsd(x, ref, center=True, superposition=True) for x in xyz])
    np.testing.assert_allclose(rmsd_qcp(ref, xyz, kernel=kernel), expected, rtol=0, atol=1e-5)
    w = np.random.default_rng(3).uniform(1, 16, size=len(sel))
    expected_w = np.array([rms.rmsd(x, ref, weights=w, center=True, superposition=True)
                           for x in xyz])
    np.testing.assert_allclose(rmsd_qcp(ref, xyz, weights=w, kernel=kernel), expected_w,
                               rtol=0, atol=1e-5)
    plain = np.array([rms.rmsd(x, ref, center=True, superposition=False) for x in xyz])
    np.testing.assert_allclose(rmsd_qcp(ref, xyz, superposition=False, kernel=kernel), plain,
                               rtol=0, atol=1e-6)


@pytest.mark.skipif(not has_numba(), reason="numba not installed")
def test_numpy_and_numba_agree(ca):
    _, xyz = ca
    w = np.linspace(1, 2, xyz.shape[1])
    for kw in ({}, {"weights": w}, {"superposition": False}):
        a = rmsd_qcp(xyz[5], xyz, kernel="numpy", **kw)
        b = rmsd_qcp(xyz[5], xyz, kernel="numba", **kw)
        # near RMSD 0 the square root amplifies rounding: agree to 1e-6 Å there
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
        far = a > 0.1
        np.testing.assert_allclose(a[far], b[far], rtol=1e-9)


def _rotation(q):
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q)
    a, b, c, d = q
    return np.array([
        [a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
        [2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)],
        [2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d],
    ])


coords = st.integers(3, 40).flatmap(
    lambda n: st.lists(st.floats(-50, 50, allow_nan=False), min_size=3 * n, max_size=3 * n)
).map(lambda v: np.asarray(v).reshape(-1, 3))
quats = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 0.1)


@settings(max_examples=80, deadline=None)
@given(x=coords, q=quats, shift=st.lists(st.floats(-100, 100), min_size=3, max_size=3),
       kernel=st.sampled_from(KERNELS))
def test_rigid_copy_has_zero_rmsd(x, q, shift, kernel):
    y = x @ _rotation(q).T + np.asarray(shift)
    scale = max(1.0, float(np.abs(x).max()))
    assert rmsd_qcp(x, y[None], kernel=kernel)[0] < 1e-4 * scale


@settings(max_examples=80, deadline=None)
@given(data=st.data(), kernel=st.sampled_from(KERNELS))
def test_symmetric_and_bounded(data, kernel):
    x = data.draw(coords)
    noise = data.draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=x.size,
                               max_size=x.size))
    y = x + np.asarray(noise).reshape(x.shape)
    ab = rmsd_qcp(x, y[None], kernel=kernel)[0]
    ba = rmsd_qcp(y, x[None], kernel=kernel)[0]
    plain = rmsd_qcp(x, y[None], superposition=False, kernel=kernel)[0]
    # QCP takes the RMSD as sqrt(2 (E0 - lambda) / n): where the two are equal up to
    # rounding (y = x), the error is ~sqrt(1e-15 E0), 2e-6 A for coordinates of 43 A
    tol = 1e-6 * max(1.0, float(np.abs(y).max()))
    assert ab == pytest.approx(ba, abs=tol)
    assert ab <= plain + tol


@pytest.mark.parametrize("kernel", KERNELS)
def test_degenerate_cases(kernel):
    x = np.random.default_rng(0).normal(size=(20, 3))
    assert rmsd_qcp(x, x[None], kernel=kernel)[0] == pytest.approx(0, abs=1e-6)
    single = np.array([[1.0, 2.0, 3.0]])
    assert rmsd_qcp(single, single[None] + 7, kernel=kernel)[0] == pytest.approx(0, abs=1e-9)
    line = np.c_[np.arange(10.0), np.zeros(10), np.zeros(10)]
    flipped = line[::-1] * 1.0
    assert np.isfinite(rmsd_qcp(line, flipped[None], kernel=kernel)).all()
    assert rmsd_qcp(line, line[None] + 1, kernel=kernel)[0] == pytest.approx(0, abs=1e-6)
    w = np.zeros(20)
    w[:3] = 1.0  # zero weights for most atoms: only the first three count
    y = x.copy()
    y[3:] += 100.0
    assert rmsd_qcp(x, y[None], weights=w, kernel=kernel)[0] < 1e-5 * np.sqrt(20)
    assert rmsd_qcp(x, np.empty((0, 20, 3)), kernel=kernel).shape == (0,)


def test_bad_input():
    x = np.zeros((5, 3))
    with pytest.raises(ValueError, match="weights are all zero"):
        rmsd_qcp(x, x[None], weights=np.zeros(5))
    with pytest.raises(ValueError, match="frames must have shape"):
        rmsd_qcp(x, np.zeros((2, 4, 3)))
    with pytest.raises(ValueError, match="weights has 4 entries"):
        rmsd_qcp(x, x[None], weights=np.ones(4))


@pytest.mark.skipif(not has_numba(), reason="numba kernel not installed")
@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 16, 17, 214])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_lanes_runs_and_gathers_agree_with_numpy(n, dtype):
    """Atom counts around the kernel's 24-lane blocks (3 n = 24, 27, 48, ...), read in place
    (a contiguous run of atoms, at any offset) or gathered (any other selection)."""
    rng = np.random.default_rng(n)
    n_all = n + 11
    ref = rng.normal(size=(n, 3)) * 10
    frames = (rng.normal(size=(6, n_all, 3)) * 10).astype(dtype)
    run = np.arange(5, 5 + n)
    picked = rng.permutation(n_all)[:n]
    w = rng.uniform(0.5, 2.0, n)
    for atoms in (run, picked):
        for kw in ({}, {"weights": w}):
            a = rmsd_qcp(ref, frames[:, atoms], kernel="numpy", **kw)
            b = rmsd_qcp(ref, frames, kernel="numba", atoms=atoms, **kw)
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)
