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


@pytest.mark.parametrize(("features", "cpu", "wide"), [
    ("+64bit,+avx,+avx2,+fma,-avx512f", "znver3", False),   # AVX2
    ("+64bit,+avx2,+avx512f,+avx512bw", "znver4", True),    # AVX-512, 512-bit vectors
    ("+64bit,+avx2,+avx512f,+avx512bw", "sapphirerapids", False),  # tuned to 256 bits
    ("+64bit,+avx2,+avx512f", "generic", False),
    ("+64bit,+avx2,+avx512f,-prefer-256-bit", "sapphirerapids", True),  # asked for 512
    ("+64bit,+avx2,+avx512f,+prefer-256-bit", "znver4", False),         # asked for 256
    ("+64bit,+avx2,-avx512f,-prefer-256-bit", "znver3", False),         # no AVX-512
    ("+neon", "neoverse-v2", False),                          # AArch64
    ("", "znver4", False),                                    # LLVM could not tell
])
def test_wide_vectors_only_where_llvm_vectorises_512_bits(features, cpu, wide):
    from h5mdx.analysis._qcp_numba import _wide_vectors

    assert _wide_vectors(features, cpu) is wide


def test_the_layout_follows_the_cpu_numba_compiles_for():
    """``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` (in the key of numba's cache) set the
    lanes and the frames a pass, and every layout gives the same RMSD to 1e-10 Å."""
    import os
    import subprocess
    import sys

    from numba.core.codegen import get_host_cpu_features

    host = get_host_cpu_features().split(",")
    no512 = ",".join("-" + f[1:] if f[1:].startswith("avx512") else f for f in host)
    with512 = ",".join(f for f in host if not f[1:].startswith("avx512")) + ",+avx512f"
    code = ("import numpy as np; from h5mdx.analysis import _qcp_numba as q; "
            "from h5mdx.analysis.qcp import rmsd_qcp; "
            "x = np.random.default_rng(0).normal(size=(7, 3341, 3)).astype(np.float32); "
            "r = rmsd_qcp(x[0], x, kernel='numba'); "
            "a = np.arange(0, 3341, 7); s = rmsd_qcp(x[0, a], x, kernel='numba', atoms=a); "
            "print(q._LANES, q._PAIRS, *r.tolist(), *s.tolist())")
    got = {}
    for cpu, features in (("znver3", no512), ("sapphirerapids", with512),
                          ("znver4", with512)):
        if "+avx512f" in features and "+avx512f" not in host:
            continue  # this CPU cannot run AVX-512 code
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "NUMBA_CPU_NAME": cpu,
                                  "NUMBA_CPU_FEATURES": features}, timeout=300)
        assert out.returncode == 0, out.stderr
        lanes, pairs, *values = out.stdout.split()
        got[cpu] = (int(lanes), pairs == "True", np.array(values, dtype=float))
    assert got["znver3"][:2] == (12, False)
    if "sapphirerapids" in got:
        assert got["sapphirerapids"][:2] == (12, False)
        assert got["znver4"][:2] == (24, True)
    for _lanes, _pairs, values in got.values():
        np.testing.assert_allclose(values, got["znver3"][2], rtol=0, atol=1e-10)
