"""h5mdx.analysis.qcp: the batched QCP kernel, numpy and numba, against MDAnalysis and on geometry.

The kernel-level comparisons with MDAnalysis' ``qcprot`` on C-alpha atoms live in
``test_qcp_kernel.py``; this module adds all-atom and mass-weighted comparisons, the
numpy/numba agreement to round-off, block invariance (what dask relies on) and
geometric properties.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from MDAnalysis.analysis import rms

import h5mdx
from h5mdx.analysis.qcp import center, has_numba, normalize_weights, prepare, rmsd_qcp

KERNELS = ["numpy"] + (["numba"] if has_numba() else [])
needs_numba = pytest.mark.skipif(not has_numba(), reason="numba not installed")


def rotation(q) -> np.ndarray:
    """The rotation matrix of a (not necessarily unit) quaternion."""
    a, b, c, d = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
        [2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)],
        [2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d],
    ])


def kabsch_rmsd(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    """Reference answer by SVD (Kabsch, with the reflection correction), not by QCP."""
    w = np.ones(len(x)) if w is None else np.asarray(w, dtype=np.float64)
    w = w / w.mean()
    xc, yc = center(x, w), center(y, w)
    u, _, vt = np.linalg.svd((yc * w[:, None]).T @ xc)
    d = np.sign(np.linalg.det(u @ vt)) or 1.0
    r = u @ np.diag([1.0, 1.0, d]) @ vt
    return float(np.sqrt(np.sum(w * np.sum((yc @ r - xc) ** 2, axis=1)) / len(x)))


@pytest.fixture(scope="module")
def adk_masses(adk_universe):
    return np.asarray(adk_universe.atoms.masses, dtype=np.float64)


def _mda(frames, ref, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([rms.rmsd(x, ref, center=True, **kw) for x in frames])


def test_public_name():
    assert h5mdx.rmsd_qcp is rmsd_qcp


@pytest.mark.parametrize("kernel", KERNELS)
def test_all_atoms_mass_weighted_equals_mdanalysis(adk_positions, adk_masses, kernel):
    xyz = adk_positions[::7]  # float32, as read from the file
    ref = adk_positions[20]
    expected = _mda(xyz, ref, weights=adk_masses, superposition=True)
    got = rmsd_qcp(ref, xyz, weights=adk_masses, kernel=kernel)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    plain = _mda(xyz, ref, weights=adk_masses, superposition=False)
    np.testing.assert_allclose(
        rmsd_qcp(ref, xyz, weights=adk_masses, superposition=False, kernel=kernel),
        plain, rtol=0, atol=1e-5,
    )


@needs_numba
@pytest.mark.parametrize("atoms", ["ca", "all"])
@pytest.mark.parametrize("options", [{}, {"weights": "mass"}, {"superposition": False}],
                         ids=["plain", "mass", "no-superposition"])
def test_numpy_and_numba_agree_to_round_off(adk_universe, adk_positions, adk_masses, atoms,
                                            options):
    sel = adk_universe.select_atoms("name CA").indices if atoms == "ca" else slice(None)
    xyz = adk_positions[:, sel]
    kw = dict(options)
    if kw.get("weights") == "mass":
        kw["weights"] = adk_masses[sel]
    a = rmsd_qcp(xyz[3], xyz, kernel="numpy", **kw)
    b = rmsd_qcp(xyz[3], xyz, kernel="numba", **kw)
    far = a > 1e-3
    assert far.sum() == len(a) - 1  # every frame but the reference itself
    np.testing.assert_allclose(b[far], a[far], rtol=1e-10, atol=0)
    # at the reference, E0 - lambda_max cancels: both stay within float64 round-off of 0
    scale = np.sqrt(np.mean(np.sum(center(xyz[3]) ** 2, axis=-1)))
    assert a[3] <= 1e-8 * scale * np.sqrt(xyz.shape[1]) + 1e-12
    assert b[3] <= 1e-8 * scale * np.sqrt(xyz.shape[1]) + 1e-12


@pytest.mark.parametrize("kernel", KERNELS)
def test_blocks_give_the_same_numbers_as_one_call(adk_universe, adk_positions, kernel):
    ca = adk_universe.select_atoms("name CA").indices
    xyz = adk_positions[:, ca]
    whole = rmsd_qcp(xyz[0], xyz, kernel=kernel)
    edges = [0, 1, 17, 40, 41, 90, 98]
    parts = np.concatenate([rmsd_qcp(xyz[0], xyz[a:b], kernel=kernel)
                            for a, b in zip(edges[:-1], edges[1:], strict=True)])
    far = whole > 1e-3
    np.testing.assert_allclose(parts[far], whole[far], rtol=1e-12, atol=0)
    # the numpy kernel's einsum may sum in another order for another block shape: near 0
    # (the reference frame) that shows as sqrt(round-off) ~ 1e-7 A; numba loops per frame
    np.testing.assert_allclose(parts[~far], whole[~far], rtol=0,
                               atol=1e-6 if kernel == "numpy" else 0)


@pytest.mark.parametrize("kernel", KERNELS)
def test_dtypes_and_single_frame(adk_universe, adk_positions, kernel):
    ca = adk_universe.select_atoms("name CA").indices
    xyz32 = adk_positions[:10, ca]
    r32 = rmsd_qcp(xyz32[0], xyz32, kernel=kernel)
    r64 = rmsd_qcp(xyz32[0].astype(np.float64), xyz32.astype(np.float64), kernel=kernel)
    np.testing.assert_allclose(r32, r64, rtol=1e-12, atol=1e-12)
    one = rmsd_qcp(xyz32[0], xyz32[4], kernel=kernel)
    assert one.shape == (1,)
    assert one[0] == pytest.approx(r64[4], abs=1e-12)
    ints = np.round(xyz32 * 10).astype(np.int32)
    expected = _mda(ints.astype(np.float64), ints[0].astype(np.float64), superposition=True)
    np.testing.assert_allclose(rmsd_qcp(ints[0], ints, kernel=kernel), expected, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_reference_centered_flag(kernel):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(30, 3))
    frames = x[None] + rng.normal(scale=0.3, size=(5, 30, 3))
    w = rng.uniform(0.5, 2.0, size=30)
    nw = normalize_weights(w, 30)
    np.testing.assert_allclose(
        rmsd_qcp(center(x, nw), frames, weights=w, kernel=kernel, reference_centered=True),
        rmsd_qcp(x + 100.0, frames, weights=w, kernel=kernel), rtol=1e-12,
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_degenerate_geometries(kernel):
    rng = np.random.default_rng(11)
    # all atoms at one point: nothing to superpose, RMSD 0 against any shifted copy
    point = np.tile([[1.0, -2.0, 3.0]], (6, 1))
    assert rmsd_qcp(point, point[None] + 4.0, kernel=kernel)[0] == pytest.approx(0, abs=1e-12)
    # two atoms: a rotated and shifted copy fits exactly
    pair = np.array([[0.0, 0.0, 0.0], [1.5, 0.0, 0.0]])
    moved = pair @ rotation([0.3, 0.2, -0.9, 0.1]).T + 10.0
    assert rmsd_qcp(pair, moved[None], kernel=kernel)[0] == pytest.approx(0, abs=1e-7)
    # a planar structure and its mirror image differ by a rotation of pi
    plane = np.c_[rng.normal(size=(12, 2)), np.zeros(12)]
    mirror = plane * np.array([1.0, 1.0, -1.0])
    assert rmsd_qcp(plane, mirror[None], kernel=kernel)[0] == pytest.approx(0, abs=1e-7)
    # a chiral structure and its mirror image do not (compare with MDAnalysis)
    body = rng.normal(size=(12, 3))
    image = body * np.array([1.0, 1.0, -1.0])
    expected = _mda(image[None], body, superposition=True)[0]
    assert expected > 0.1
    assert rmsd_qcp(body, image[None], kernel=kernel)[0] == pytest.approx(expected, abs=1e-6)
    # zero-length block and zero-weight atoms
    assert rmsd_qcp(body, np.empty((0, 12, 3), np.float32), kernel=kernel).shape == (0,)
    w = np.r_[np.ones(4), np.zeros(8)]
    far = body.copy()
    far[4:] += rng.normal(scale=50.0, size=(8, 3))
    np.testing.assert_allclose(
        rmsd_qcp(body, far[None], weights=w, kernel=kernel) * np.sqrt(12 / 4),
        rmsd_qcp(body[:4], far[None, :4], kernel=kernel), atol=1e-7,
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_near_double_root_uses_the_eigensolver(kernel):
    """Collinear structures and det(S) < 0 with equal singular values: exact answers.

    There the two largest roots of the QCP quartic (nearly) coincide and Newton's
    method stalls ~sqrt(eps) short of the root: MDAnalysis' qcprot gives up to 1e-3 A
    (or NaN) for a rigidly moved rod; h5mdx flags such frames and solves them with a
    symmetric eigensolver.
    """
    rng = np.random.default_rng(5)
    rod = np.c_[np.linspace(0.0, 10.0, 20), np.zeros(20), np.zeros(20)]
    moved = np.stack([rod @ rotation(rng.normal(size=4)).T + rng.normal(size=3) * 5
                      for _ in range(50)])
    assert rmsd_qcp(rod, moved, kernel=kernel).max() < 1e-6
    w = rng.uniform(0.1, 20.0, size=20)
    assert rmsd_qcp(rod, moved, weights=w, kernel=kernel).max() < 1e-6
    # a longer rod: the optimum is any rotation about the axis; RMSD from the centred rods
    longer = rod * 1.1
    exact = np.sqrt(np.mean(np.sum((center(longer) - center(rod)) ** 2, axis=-1)))
    assert rmsd_qcp(rod, longer[None], kernel=kernel)[0] == pytest.approx(exact, rel=1e-10)
    # two atoms turned by pi with unequal weights (a hypothesis find)
    pair = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    flipped = pair * np.array([-1.0, -1.0, 1.0])
    assert rmsd_qcp(pair, flipped[None], weights=[3.0, 17.0], kernel=kernel)[0] < 1e-7
    # reflection of a body with two equal principal moments: det(S) < 0, sigma_2 = sigma_3
    disc = np.c_[np.cos(np.linspace(0, 2 * np.pi, 12, endpoint=False)),
                 np.sin(np.linspace(0, 2 * np.pi, 12, endpoint=False)), np.zeros(12)]
    body = np.r_[disc, [[0.0, 0.0, 3.0], [0.0, 0.0, -1.0]]]
    image = body * np.array([1.0, 1.0, -1.0])
    assert rmsd_qcp(body, image[None], kernel=kernel)[0] == pytest.approx(
        kabsch_rmsd(body, image), abs=1e-9)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_frame_with_nan_gives_nan_and_leaves_the_others(adk_positions, kernel):
    """A fill value read as NaN spoils its frame only: no LinAlgError for the whole call."""
    frames = adk_positions[:6].astype(np.float64)
    frames[2, 7, 1] = np.nan
    got = rmsd_qcp(adk_positions[0], frames, kernel=kernel)
    assert np.isnan(got[2])
    clean = rmsd_qcp(adk_positions[0], np.delete(frames, 2, axis=0), kernel=kernel)
    np.testing.assert_array_equal(np.delete(got, 2), clean)


@needs_numba
def test_both_kernels_flag_the_same_frames():
    rng = np.random.default_rng(9)
    rod = np.c_[np.linspace(0.0, 10.0, 20), np.zeros(20), np.zeros(20)]
    frames = np.concatenate([
        np.stack([rod @ rotation(rng.normal(size=4)).T for _ in range(10)]),
        rod[None] + rng.normal(scale=2.0, size=(10, 20, 3)),
    ])
    np.testing.assert_allclose(rmsd_qcp(rod, frames, kernel="numba"),
                               rmsd_qcp(rod, frames, kernel="numpy"), rtol=1e-10, atol=1e-9)


def test_bad_arguments():
    x = np.zeros((4, 3))
    with pytest.raises(ValueError, match="kernel must be"):
        rmsd_qcp(x, x[None], kernel="fortran")
    with pytest.raises(ValueError, match=r"reference must have shape \(n_atoms, 3\)"):
        rmsd_qcp(np.zeros((4, 2)), x[None])
    with pytest.raises(ValueError, match="finite and non-negative"):
        rmsd_qcp(x, x[None], weights=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        rmsd_qcp(x, x[None], weights=[1.0, np.nan, 1.0, 1.0])
    with pytest.raises(ValueError, match="no atoms"):
        rmsd_qcp(np.zeros((0, 3)), np.zeros((1, 0, 3)))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("selected", [False, True])
def test_prepared_equals_rmsd_qcp(adk_universe, adk_positions, adk_masses, kernel, selected):
    """``prepare(...)`` checks everything but the frames once (an RMSD task calls it per
    read); its numbers are rmsd_qcp's, bit for bit, with and without weights and atoms."""
    ca = adk_universe.select_atoms("name CA").indices
    atoms = ca if selected else None
    n = ca.size if selected else adk_positions.shape[1]
    ref = adk_positions[0, ca] if selected else adk_positions[0]
    for w in (None, adk_masses[ca] if selected else adk_masses):
        qcp = prepare(ref, w, True, kernel, atoms=atoms)
        for a, b in ((0, 1), (3, 40), (40, 98)):
            np.testing.assert_array_equal(
                qcp(adk_positions[a:b]),
                rmsd_qcp(ref, adk_positions[a:b], w, True, kernel, atoms=atoms))
        assert qcp(adk_positions[:0]).shape == (0,)
    centred = prepare(ref, None, False, kernel, atoms=atoms)
    np.testing.assert_array_equal(
        centred(adk_positions[5:9]),
        rmsd_qcp(ref, adk_positions[5:9], None, False, kernel, atoms=atoms))
    with pytest.raises(ValueError, match=f"frames must have shape \\(n_frames, {n}, 3\\)"):
        qcp(adk_positions[0])
    if selected:
        with pytest.raises(IndexError, match="atoms out of range"):
            qcp(adk_positions[:2, :10])
    else:
        with pytest.raises(ValueError, match="frames must have shape"):
            qcp(adk_positions[:2, :10])


def test_prepare_bad_arguments():
    x = np.zeros((4, 3))
    with pytest.raises(ValueError, match="kernel must be"):
        prepare(x, kernel="fortran")
    with pytest.raises(ValueError, match="atoms has 2 entries"):
        prepare(x, atoms=[0, 1])
    with pytest.raises(IndexError, match="out of range"):
        prepare(x, atoms=[0, 1, 2, -1])


# --- properties -----------------------------------------------------------------------

_coords = st.integers(2, 30).flatmap(
    lambda n: st.lists(st.floats(-30, 30, allow_nan=False), min_size=3 * n, max_size=3 * n)
).map(lambda v: np.asarray(v, dtype=np.float64).reshape(-1, 3))
_quats = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 0.1)


@settings(max_examples=60, deadline=None)
@given(x=_coords, q=_quats, shift=st.lists(st.floats(-50, 50), min_size=3, max_size=3),
       seed=st.integers(0, 2**16), kernel=st.sampled_from(KERNELS))
def test_weighted_rigid_copy_has_zero_rmsd(x, q, shift, seed, kernel):
    w = np.random.default_rng(seed).uniform(0.1, 20.0, size=len(x))
    y = x @ rotation(q).T + np.asarray(shift)
    scale = max(1.0, float(np.abs(x).max()))
    assert rmsd_qcp(x, y[None], weights=w, kernel=kernel)[0] < 1e-4 * scale


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kernel=st.sampled_from(KERNELS))
def test_permutation_and_scale_covariance(data, kernel):
    x = data.draw(_coords)
    noise = np.asarray(data.draw(st.lists(st.floats(-3, 3, allow_nan=False),
                                          min_size=x.size, max_size=x.size)))
    y = x + noise.reshape(x.shape)
    s = data.draw(st.floats(0.1, 10.0))
    perm = np.asarray(data.draw(st.permutations(range(len(x)))))
    r = rmsd_qcp(x, y[None], kernel=kernel)[0]
    tol = 1e-5 * max(1.0, float(np.abs(y).max()))
    assert rmsd_qcp(x[perm], y[perm][None], kernel=kernel)[0] == pytest.approx(r, abs=tol)
    assert rmsd_qcp(s * x, s * y[None], kernel=kernel)[0] == pytest.approx(s * r,
                                                                          abs=s * tol)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), kernel=st.sampled_from(KERNELS))
def test_matches_kabsch_svd(data, kernel):
    x = data.draw(_coords)
    y = np.asarray(data.draw(st.lists(st.floats(-30, 30, allow_nan=False), min_size=x.size,
                                      max_size=x.size))).reshape(x.shape)
    if data.draw(st.booleans()):
        y = x * np.array([1.0, 1.0, -1.0]) + y * 1e-3  # near mirror images: det(S) < 0
    w = np.random.default_rng(data.draw(st.integers(0, 99))).uniform(0.1, 5.0, size=len(x))
    scale = max(1.0, float(np.abs(x).max()), float(np.abs(y).max()))
    assert rmsd_qcp(x, y[None], weights=w, kernel=kernel)[0] == pytest.approx(
        kabsch_rmsd(x, y, w), abs=1e-6 * scale)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_matches_mdanalysis_on_random_structures(data):
    x = data.draw(_coords)
    noise = np.asarray(data.draw(st.lists(st.floats(-5, 5, allow_nan=False),
                                          min_size=x.size, max_size=x.size)))
    y = x + noise.reshape(x.shape)
    expected = _mda(y[None], x, superposition=True)[0]
    assume(np.isfinite(expected))  # qcprot gives NaN where all atoms coincide; we give 0
    exact = kabsch_rmsd(x, y, np.ones(len(x)))
    if abs(expected - exact) > 1e-6:
        # qcprot loses digits at (near-)degenerate structures, e.g. a collinear reference
        # (found by hypothesis: MDAnalysis 1.2e-5 A off the SVD answer); judge by Kabsch there
        expected = exact
    for kernel in KERNELS:
        assert rmsd_qcp(x, y[None], kernel=kernel)[0] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shift", [0.0, 500.0, 2000.0])
def test_atoms_far_from_the_origin_keep_small_rmsds_exact(adk_positions, adk_masses, kernel,
                                                         shift):
    """The one-pass sum of |y|^2 cancels away a small RMSD where atoms lie far from the
    origin (3.5e-4 Å for the reference frame at +2000 Å): both kernels
    give the exact Kabsch RMSD to 1e-6 Å, frames near the reference included, with and
    without weights that are zero for some atoms (virtual sites)."""
    frames = adk_positions[:6].astype(np.float64) + shift
    near = frames[0] + np.random.default_rng(1).normal(scale=1e-4, size=frames[0].shape)
    frames = np.concatenate([frames, near[None]])
    w = adk_masses.copy()
    w[::70] = 0.0
    for weights in (None, w):
        got = rmsd_qcp(frames[0], frames, weights=weights, kernel=kernel)
        want = [kabsch_rmsd(frames[0], y, weights) for y in frames]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shift", [1e5, 1e6])
def test_atoms_very_far_from_the_origin_keep_every_rmsd_exact(adk_universe,
                                                                   adk_positions, kernel,
                                                                   shift):
    """Frames ~0.1-1 Å from the reference with atoms 1e5-1e6 Å from the origin (float64):
    the compiled kernel's one-pass sum of |y|^2 trusted RMSDs its cancellation had made
    up to 6e-4 Å wrong (C-alpha at +1e6 Å: 2.4333 Å for 2.4331; the check re-summed only
    square RMSDs under 4096 eps sum|y|^2/n). Both kernels now agree with
    Kabsch to 1e-6 Å."""
    ca = adk_universe.select_atoms("name CA").indices
    base = adk_positions[0, ca].astype(np.float64)
    rng = np.random.default_rng(7)
    frames = np.stack([base + rng.normal(scale=s, size=base.shape)
                       for s in np.geomspace(0.01, 3.0, 12)] + [adk_positions[21, ca]]) + shift
    got = rmsd_qcp(base + shift, frames, kernel=kernel)
    want = [kabsch_rmsd(base, y - shift) for y in frames]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
