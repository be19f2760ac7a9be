"""The compiled kernel's building blocks: stack scratch arrays and the one-pass frame sums."""

from __future__ import annotations

import numpy as np
import pytest

from h5mdx.analysis.qcp import has_numba

pytestmark = pytest.mark.skipif(not has_numba(), reason="numba not installed")


def test_stack_zeros_are_zeroed_independent_arrays():
    from numba import njit

    from h5mdx.analysis._qcp_numba import _stack_zeros

    @njit
    def use(x):
        a = _stack_zeros(5)
        b = _stack_zeros(5)
        before = a.sum() + b.sum()
        for i in range(5):
            a[i] = x * i
        return before, a.sum(), b.sum(), a.shape[0], a[4]

    assert use(2.0) == (0.0, 20.0, 0.0, 5, 8.0)
    # a fresh call starts from zeros again, not from the last call's stack
    assert use(3.0) == (0.0, 30.0, 0.0, 5, 12.0)


def test_stack_zeros_needs_a_literal_size():
    from numba import njit
    from numba.core.errors import TypingError

    from h5mdx.analysis._qcp_numba import _stack_zeros

    @njit
    def dynamic(n):
        return _stack_zeros(n).sum()

    with pytest.raises(TypingError):
        dynamic(4)


@pytest.mark.parametrize("n_atoms", [1, 7, 8, 9, 214, 3341])
@pytest.mark.parametrize("weighted", [False, True])
def test_frame_sums_equal_numpy(n_atoms, weighted):
    """Every sum of the one-pass kernel, including the lanes' tail (3 n not a multiple of
    the lane count), against numpy in float64."""
    from h5mdx.analysis._qcp_numba import _frame_sums

    rng = np.random.default_rng(n_atoms)
    ref = rng.normal(scale=20, size=(n_atoms, 3))
    y = rng.normal(scale=20, size=(n_atoms, 3)).astype(np.float32)
    w = rng.uniform(0.5, 2, size=n_atoms) if weighted else np.ones(n_atoms)
    a = np.repeat((w[:, None] * ref).T, 3, axis=1)  # a[k, 3 i + j] = w_i x_ik
    wf = np.repeat(w, 3)
    r = np.full(13, np.nan)
    _frame_sums(a, wf, y.reshape(-1), weighted, r)
    y64 = y.astype(np.float64)
    expected = np.concatenate([
        np.einsum("i,ik,ij->kj", w, ref, y64).reshape(-1),
        (w[:, None] * y64).sum(axis=0),
        [(w * (y64 ** 2).sum(axis=1)).sum()],
    ])
    np.testing.assert_allclose(r, expected, rtol=1e-12, atol=1e-9)


def test_prepared_kernel_lays_out_the_reference_once(monkeypatch):
    """Per call, only the frames' work: the reference layout (~100 bytes per atom, which a
    distributed worker would hand back to the OS and fault in again) is made once."""
    from h5mdx.analysis import _qcp_numba
    from h5mdx.analysis.qcp import prepare, rmsd_qcp

    made = []
    layout = _qcp_numba._reference_layout

    def counting(*args):
        made.append(args[0].shape)
        return layout(*args)

    monkeypatch.setattr(_qcp_numba, "_reference_layout", counting)
    rng = np.random.default_rng(5)
    frames = rng.normal(scale=10, size=(12, 40, 3)).astype(np.float32)
    atoms = np.array([3, 1, 4, 15, 9, 26, 5, 35])
    for sel in (None, atoms):
        made.clear()
        ref = frames[0] if sel is None else frames[0, sel]
        prepared = prepare(ref, kernel="numba", atoms=sel)
        got = np.concatenate([prepared(frames[i:i + 4]) for i in range(0, 12, 4)])
        assert made == [ref.shape]
        expected = rmsd_qcp(ref, frames if sel is None else frames[:, sel], kernel="numpy")
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_kernel_runs_as_plain_python_with_numba_disabled():
    """NUMBA_DISABLE_JIT=1 (how one steps through the kernel in a debugger) still works."""
    import os
    import subprocess
    import sys

    code = ("import numpy as np; from h5mdx.analysis.qcp import rmsd_qcp; "
            "x = np.random.default_rng(0).normal(size=(3, 20, 3)); "
            "a = rmsd_qcp(x[0], x, kernel='numba'); b = rmsd_qcp(x[0], x, kernel='numpy'); "
            "assert np.allclose(a, b, atol=1e-6), (a, b); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_DISABLE_JIT": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize(("features", "lanes"), [
    ("+64bit,+avx,+avx2,+fma,-avx512f", 12),   # AVX2 (Zen 3, Haswell...)
    ("+64bit,+avx2,+avx512f,+avx512bw", 24),   # AVX-512 (Zen 4, Xeon)
    ("+neon", 12),                             # AArch64
    ("", 12),                                  # LLVM could not tell
])
def test_lanes_follow_the_vector_width(features, lanes):
    from h5mdx.analysis._qcp_numba import _host_lanes

    assert _host_lanes(features) == lanes


def test_lanes_follow_the_features_numba_compiles_for():
    """``NUMBA_CPU_FEATURES`` (which is in the key of numba's cache) sets the lanes too."""
    import os
    import subprocess
    import sys

    code = "from h5mdx.analysis import _qcp_numba as q; print(q._LANES)"
    got = {}
    for features in ("+avx2,+fma,-avx512f", "+avx2,+fma,+avx512f"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "NUMBA_CPU_FEATURES": features}, timeout=120)
        assert out.returncode == 0, out.stderr
        got[features] = int(out.stdout)
    assert list(got.values()) == [12, 24]
