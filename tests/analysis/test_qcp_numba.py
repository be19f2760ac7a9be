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
