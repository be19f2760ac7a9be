"""Batched RMSD after optimal superposition: the QCP method (numpy, with a numba fast path).

The quaternion characteristic polynomial (QCP) method finds the minimum RMSD
between two structures over all rotations without building the rotation: the
largest eigenvalue of Horn's 4x4 key matrix is the largest root of a quartic
whose coefficients come from the 3x3 inner-product matrix of the centred
coordinates, and Newton's method from the upper bound ``E0 = (G_a + G_b) / 2``
converges to it in a few steps.

This module does that for a whole block of frames at once: the inner-product
matrices of all frames come from one ``einsum``, and the Newton iteration runs
vectorised over frames. Everything accumulates in float64 (MDAnalysis found
that float32 gives RMSD errors up to 1e-3 Å). The optional numba kernel gives
the same numbers in a single compiled pass.

Where the two largest roots of the quartic (nearly) coincide (near-collinear
structures, or a best fit with det(S) < 0 and two equal singular values),
Newton's method stops ~sqrt(eps) short of the root; MDAnalysis' qcprot then
returns errors up to 1e-3 Å, or NaN. Both kernels flag such frames (``|P'(λ)|``
small against ``λ³``, or no convergence) and solve them with a symmetric 4x4
eigensolver on Horn's key matrix instead, which is exact to round-off.

References:

- D. L. Theobald. Rapid calculation of RMSDs using a quaternion-based
  characteristic polynomial. Acta Cryst. A 61 (2005), 478-480.
- P. Liu, D. K. Agrafiotis, D. L. Theobald. Fast determination of the
  optimal rotational matrix for macromolecular superpositions.
  J. Comput. Chem. 31 (2010), 1561-1563.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

__all__ = ["PreparedQCP", "center", "has_numba", "kernel_layout", "normalize_weights",
           "prepare", "rmsd_qcp", "warm_up"]

_EVALPREC = 1e-11
_MAX_NEWTON = 50
#: A root is "near-double" when |P'(lambda)| <= _GAP_TOL * |lambda|**3, i.e. the two largest
#: eigenvalues of the key matrix lie within ~1 % of lambda (near-collinear structures, or
#: det(S) < 0 with two equal singular values). Newton's method loses up to half the
#: digits there, so those frames are solved with an eigenvalue routine instead.
_GAP_TOL = 1e-2


def normalize_weights(weights: Any, n_atoms: int) -> np.ndarray | None:
    """Weights as float64 scaled to mean 1 (as MDAnalysis does), or None.

    Raises
    ------
    ValueError
        If the length is wrong, a weight is negative, or all are zero.
    """
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape[0] != n_atoms:
        raise ValueError(f"weights has {w.shape[0]} entries but there are {n_atoms} atoms")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    mean = w.mean()
    if mean == 0:
        raise ValueError("weights are all zero: no atom would count")
    return w / mean


def center(coords: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Subtract the (weighted) centre of each frame; returns float64.

    Parameters
    ----------
    coords : array, shape (..., n_atoms, 3)
    weights : array of shape (n_atoms,), optional
    """
    x = np.asarray(coords, dtype=np.float64)
    c = np.average(x, axis=-2, weights=weights)
    return x - c[..., None, :]


def _quartic_max_root(a: np.ndarray, e0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest eigenvalue of the key matrix for inner-product matrices ``a`` (f, 3, 3).

    Returns the eigenvalues and a mask of the frames whose Newton iteration did not
    converge or converged to a (near-)double root; :func:`_key_max_eigenvalue` solves
    those exactly.
    """
    sxx, sxy, sxz = a[:, 0, 0], a[:, 0, 1], a[:, 0, 2]
    syx, syy, syz = a[:, 1, 0], a[:, 1, 1], a[:, 1, 2]
    szx, szy, szz = a[:, 2, 0], a[:, 2, 1], a[:, 2, 2]
    sxx2, syy2, szz2 = sxx * sxx, syy * syy, szz * szz
    sxy2, syz2, sxz2 = sxy * sxy, syz * syz, sxz * sxz
    syx2, szy2, szx2 = syx * syx, szy * szy, szx * szx
    syzszymsyyszz2 = 2.0 * (syz * szy - syy * szz)
    sxx2syy2szz2syz2szy2 = syy2 + szz2 - sxx2 + syz2 + szy2
    c2 = -2.0 * (sxx2 + syy2 + szz2 + sxy2 + syx2 + sxz2 + szx2 + syz2 + szy2)
    c1 = 8.0 * (sxx * syz * szy + syy * szx * sxz + szz * sxy * syx
                - sxx * syy * szz - syz * szx * sxy - szy * syx * sxz)
    sxzpszx, syzpszy, sxypsyx = sxz + szx, syz + szy, sxy + syx
    syzmszy, sxzmszx, sxymsyx = syz - szy, sxz - szx, sxy - syx
    sxxpsyy, sxxmsyy = sxx + syy, sxx - syy
    sxy2sxz2syx2szx2 = sxy2 + sxz2 - syx2 - szx2
    c0 = (
        sxy2sxz2syx2szx2 * sxy2sxz2syx2szx2
        + (sxx2syy2szz2syz2szy2 + syzszymsyyszz2) * (sxx2syy2szz2syz2szy2 - syzszymsyyszz2)
        + (-sxzpszx * syzmszy + sxymsyx * (sxxmsyy - szz))
        * (-sxzmszx * syzpszy + sxymsyx * (sxxmsyy + szz))
        + (-sxzpszx * syzpszy - sxypsyx * (sxxpsyy - szz))
        * (-sxzmszx * syzmszy - sxypsyx * (sxxpsyy + szz))
        + (sxypsyx * syzpszy + sxzpszx * (sxxmsyy + szz))
        * (-sxymsyx * syzmszy + sxzpszx * (sxxpsyy + szz))
        + (sxypsyx * syzmszy + sxzmszx * (sxxmsyy - szz))
        * (-sxymsyx * syzpszy + sxzmszx * (sxxpsyy - szz))
    )
    lam = e0.copy()
    active = np.ones(lam.shape, dtype=bool)
    for _ in range(_MAX_NEWTON):
        x = lam[active]
        x2 = x * x
        b = (x2 + c2[active]) * x
        aa = b + c1[active]
        denom = 2.0 * x2 * x + b + aa
        with np.errstate(divide="ignore", invalid="ignore"):
            delta = np.where(denom != 0.0, (aa * x + c0[active]) / denom, 0.0)
        x = x - delta
        lam[active] = x
        done = np.abs(delta) <= np.abs(_EVALPREC * x)
        idx = np.flatnonzero(active)
        active[idx[done]] = False
        if not active.any():
            break
    dp = (4.0 * lam * lam + 2.0 * c2) * lam + c1  # P'(lambda)
    suspect = active | (np.abs(dp) <= _GAP_TOL * np.abs(lam) ** 3)
    return lam, suspect


def _inner_products(ref_c: np.ndarray, frames: np.ndarray,
                    w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``E0 = (G_a + G_b) / 2`` and ``S[f, i, j] = sum_n w_n x_ni y_fnj`` (x reference).

    The frames are centred (float64) before ``G_b = sum w |y - c|^2`` is summed: the
    one-pass form ``sum w |y|^2 - W |c|^2`` loses the digits of a small RMSD to
    cancellation where the atoms lie far from the origin (3.5e-4 Å for a frame against
    itself at 2000 Å; the compiled kernel hands such frames here). ``einsum``, not a BLAS
    product: BLAS results changed in the last digits between a dask worker process and
    the client, and the same task must give the same numbers wherever it runs.
    """
    y = np.array(frames, dtype=np.float64)  # a copy, centred in place
    wref = ref_c if w is None else ref_c * w[:, None]
    g_a = float(np.einsum("ij,ij->", wref, ref_c))
    if w is None:
        c = y.sum(axis=1) / float(y.shape[1])
    else:
        c = np.einsum("n,fni->fi", w, y) / float(w.sum())
    y -= c[:, None, :]
    g_b = (np.einsum("fni,fni->f", y, y) if w is None
           else np.einsum("n,fni,fni->f", w, y, y))
    a = np.einsum("nj,fni->fji", wref, y)  # sum_n w_n x_n (y_n - c)^T per frame
    return 0.5 * (g_a + g_b), a


def _key_max_eigenvalue(s: np.ndarray) -> np.ndarray:
    """Largest eigenvalue of Horn's symmetric 4x4 key matrix of each ``s`` (f, 3, 3).

    The QCP quartic is the characteristic polynomial of this matrix; a symmetric
    eigensolver is accurate to round-off of ``|K|`` even where the largest root is
    (near-)double, where Newton's method on the quartic is not.
    """
    sxx, sxy, sxz = s[:, 0, 0], s[:, 0, 1], s[:, 0, 2]
    syx, syy, syz = s[:, 1, 0], s[:, 1, 1], s[:, 1, 2]
    szx, szy, szz = s[:, 2, 0], s[:, 2, 1], s[:, 2, 2]
    k = np.empty((s.shape[0], 4, 4), dtype=np.float64)
    k[:, 0, 0] = sxx + syy + szz
    k[:, 1, 1] = sxx - syy - szz
    k[:, 2, 2] = -sxx + syy - szz
    k[:, 3, 3] = -sxx - syy + szz
    k[:, 0, 1] = k[:, 1, 0] = syz - szy
    k[:, 0, 2] = k[:, 2, 0] = szx - sxz
    k[:, 0, 3] = k[:, 3, 0] = sxy - syx
    k[:, 1, 2] = k[:, 2, 1] = sxy + syx
    k[:, 1, 3] = k[:, 3, 1] = szx + sxz
    k[:, 2, 3] = k[:, 3, 2] = syz + szy
    # a frame with a NaN (a fill value read as NaN) has no eigenvalues: its RMSD is NaN,
    # not an error for the whole call (LAPACK does not converge on it)
    finite = np.isfinite(k).all(axis=(1, 2))
    lam = np.full(len(k), np.nan)
    if finite.any():
        lam[finite] = np.linalg.eigvalsh(k[finite])[:, -1]
    return lam


def _rmsd_exact(ref_c: np.ndarray, frames: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """RMSD after superposition from the key matrix's eigenvalues (degenerate frames, and
    frames the compiled kernel could not resolve), one frame at a time: a frame's value
    then does not depend on the frames computed with it (``einsum`` sums a batch in
    another order), which near zero shows in the leading digits."""
    out = np.empty(len(frames), dtype=np.float64)
    for f in range(len(frames)):
        e0, s = _inner_products(ref_c, frames[f:f + 1], w)
        lam = _key_max_eigenvalue(s)
        out[f] = np.sqrt(max(2.0 * float(e0[0] - lam[0]) / ref_c.shape[0], 0.0))
    return out


def _rmsd_numpy(ref_c: np.ndarray, frames: np.ndarray, w: np.ndarray | None,
                superposition: bool) -> np.ndarray:
    n = ref_c.shape[0]
    if not superposition:
        d2 = (center(frames, w) - ref_c) ** 2
        if w is not None:
            d2 = d2 * w[:, None]
        return np.sqrt(d2.sum(axis=(1, 2)) / n)
    e0, s = _inner_products(ref_c, frames, w)
    lam, suspect = _quartic_max_root(s, e0)
    out = np.sqrt(np.maximum(2.0 * (e0 - lam) / n, 0.0))
    if suspect.any():
        out[suspect] = _rmsd_exact(ref_c, frames[suspect], w)
    return out


def has_numba() -> bool:
    """Whether the compiled kernel is available."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_layout() -> str:
    """How the compiled kernel is laid out for the CPU numba compiles for, in words.

    24 accumulator lanes a sum and two frames a pass over the reference where LLVM
    vectorises 512 bits wide (AVX-512 on AMD Zen 4 and later, or where numba's CPU
    features end in ``-prefer-256-bit``), else 12 lanes and one frame. Loads numba but
    compiles nothing.

    Returns
    -------
    str
        E.g. ``"24 lanes a sum, two frames a pass (512-bit vectors)"``; without numba,
        that the numpy kernel runs.
    """
    if not has_numba():
        return "the numpy kernel (numba not installed: pip install numba)"
    from h5mdx.analysis import _qcp_numba as k

    frames = "two frames" if k._PAIRS else "one frame"
    width = "512-bit vectors" if k._WIDE else "256-bit vectors or narrower"
    return f"{k._LANES} lanes a sum, {frames} a pass ({width})"


_WARM: set[str] = set()
#: Whether the compiled kernel can read files itself (:meth:`PreparedQCP.from_file`)
_PREAD = hasattr(os, "pread") and hasattr(time, "CLOCK_MONOTONIC")


def warm_up(kernel: str = "auto") -> float:
    """Load (or compile) the QCP kernel in this process, once; returns the seconds spent.

    The numba kernel is loaded from numba's on-disk cache (compiled on first use
    anywhere) for float32 and float64 frames, writable or read-only (a mapping of the
    file, ``h5mdx.format.mapped``). Call it when a worker starts (h5mdx's
    clusters do) so that the first task does not pay for it; :func:`h5mdx.rmsd`
    tasks call it too and record the time as their ``warmup`` phase, apart from
    ``compute``.

    Parameters
    ----------
    kernel : {"auto", "numpy", "numba"}

    Returns
    -------
    float
        Seconds spent now (0.0 when the kernel was warm already, or is numpy).
    """
    if not _uses_numba(kernel) or "numba" in _WARM:
        return 0.0
    t0 = time.perf_counter()
    ref = np.zeros((3, 3), dtype=np.float64)
    ref[1, 0] = ref[2, 1] = 1.0
    prepared = PreparedQCP(ref, None, True, _numba_kernel(), None)
    none = np.zeros(0, dtype=np.int64)
    for dtype in (np.float32, np.float64):
        frames = ref[None].astype(dtype)
        prepared(frames)
        frames.flags.writeable = False  # numba compiles read-only arrays (mappings) apart
        prepared(frames)
        if prepared.reads_files:  # the fused read-and-compute kernel too; no runs: no read
            prepared.from_file(-1, none, none, np.empty((1, 3, 3), dtype=dtype),
                               np.empty(0, dtype=np.float64))
    _WARM.add("numba")
    return time.perf_counter() - t0


def _uses_numba(kernel: str) -> bool:
    return kernel == "numba" or (kernel == "auto" and has_numba())


def _numba_kernel() -> Any:
    try:
        from h5mdx.analysis import _qcp_numba
    except ImportError as err:
        raise ImportError(
            "kernel='numba' needs numba: pip install numba"
        ) from err
    return _qcp_numba


def rmsd_qcp(
    reference: Any,
    frames: Any,
    weights: Any = None,
    superposition: bool = True,
    kernel: str = "auto",
    *,
    reference_centered: bool = False,
    atoms: Any = None,
) -> np.ndarray:
    """RMSD of every frame to a reference after optimal superposition.

    Both structures are centred (weighted by ``weights``) first; with
    ``superposition=True`` the RMSD is then minimised over rotations by the QCP
    method (Theobald 2005; Liu, Agrafiotis and Theobald 2010), as ``MDAnalysis.analysis.rms.rmsd(..., center=True,
    superposition=True)`` does for one frame.

    Parameters
    ----------
    reference : array_like, shape (n_atoms, 3)
        The reference structure.
    frames : array_like, shape (n_frames, n_atoms, 3) or (n_atoms, 3)
        The structures to compare (any float dtype; computed in float64).
    weights : array_like of shape (n_atoms,), optional
        Per-atom weights (e.g. masses); scaled to mean 1.
    superposition : bool, default True
        False: RMSD after centring only.
    kernel : {"auto", "numpy", "numba"}
        ``auto`` uses numba where installed.
    reference_centered : bool, default False
        Set when ``reference`` is already centred with the same weights.
    atoms : array_like of int, optional
        Compare only these atoms (positions along axis 1) of ``frames``, in this
        order, with the rows of ``reference``: ``frames`` may then hold more atoms.
        The numba kernel reads them in place, with no gathered copy of the frames.

    Returns
    -------
    numpy.ndarray
        float64 RMSD per frame, shape (n_frames,) (a scalar array for one frame).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(10, 3))
    >>> float(rmsd_qcp(x, x + 5.0)[0]) < 1e-6
    True
    """
    fr = np.asarray(frames)
    single = fr.ndim == 2
    if single:
        fr = fr[None]
    out = prepare(reference, weights, superposition, kernel,
                  reference_centered=reference_centered, atoms=atoms)(fr)
    return out[0:1] if single else out


class PreparedQCP:
    """:func:`rmsd_qcp` with everything but the frames checked and converted once.

    An RMSD task calls it on every few MiB it reads: the checks of the reference, the
    weights and the atoms (and the choice of kernel) are made here once, not per call.
    Make one with :func:`prepare`.
    """

    def __init__(self, ref_c: np.ndarray, w: np.ndarray | None, superposition: bool,
                 numba_kernel: Any, atoms: np.ndarray | None) -> None:
        self.ref_c = np.ascontiguousarray(ref_c, dtype=np.float64)
        self.w = w
        self.superposition = bool(superposition)
        self.atoms = atoms
        # the compiled kernel's module (h5mdx.analysis._qcp_numba), or None: the numpy kernel
        self._kernel = numba_kernel
        n = self.ref_c.shape[0]
        self._cols = np.arange(n, dtype=np.intp) if atoms is None else atoms
        self._wk = w if w is not None else np.ones(1, dtype=np.float64)
        if self._kernel is not None:
            # laid out once here, not per call: every call would otherwise allocate ~100 bytes
            # per atom, which a distributed worker hands back to the OS after each call
            self._layout = self._kernel._reference_layout(self.ref_c, self._wk, w is not None)
            self._buffers: dict[np.dtype, np.ndarray] = {}
        # frames need at least this many atoms
        self._min_atoms = n if atoms is None else (int(atoms.max()) + 1 if atoms.size else 0)

    def __call__(self, frames: Any) -> np.ndarray:
        """float64 RMSD of each frame of ``frames`` (shape ``(n_frames, n_atoms, 3)``)."""
        fr = np.asarray(frames)
        n = self.ref_c.shape[0]
        if fr.ndim != 3 or fr.shape[2] != 3 or (
                fr.shape[1] != n if self.atoms is None else fr.shape[1] < self._min_atoms):
            if self.atoms is not None and fr.ndim == 3 and fr.shape[2:] == (3,):
                raise IndexError(f"atoms out of range for frames of {fr.shape[1]} atoms")
            raise ValueError(
                f"frames must have shape (n_frames, {n}, 3), not {np.shape(frames)}"
            )
        if fr.shape[0] == 0:
            return np.zeros(0, dtype=np.float64)
        atoms, w = self.atoms, self.w
        if self._kernel is None:
            return _rmsd_numpy(self.ref_c, fr if atoms is None else fr[:, atoms], w,
                               self.superposition)
        out = np.empty(fr.shape[0], dtype=np.float64)
        data = fr if fr.dtype in (np.float32, np.float64) else fr.astype(np.float64)
        self._kernel._qcp_frames(self.ref_c, np.ascontiguousarray(data), self._cols, self._wk,
                                 w is not None, self.superposition, *self._layout,
                                 self._gather_buffer(data.dtype), out)
        suspect = out < 0.0  # the kernel flags (near-)double roots with -1
        if suspect.any():
            picked = fr[suspect] if atoms is None else fr[suspect][:, atoms]
            out[suspect] = _rmsd_exact(self.ref_c, picked, w)
        return out

    def _gather_buffer(self, dtype: np.dtype) -> np.ndarray:
        """Where the kernel gathers a selection: two frames' worth of ``dtype``, kept."""
        buf = self._buffers.get(dtype)
        if buf is None:
            buf = self._buffers[dtype] = np.empty((2, 3 * self.ref_c.shape[0]), dtype=dtype)
        return buf

    @property
    def reads_files(self) -> bool:
        """Whether :meth:`from_file` can run: the numba kernel, on a system with ``pread``."""
        return self._kernel is not None and _PREAD

    def from_file(self, fd: int, offsets: np.ndarray, nbytes: np.ndarray, frames: np.ndarray,
                  out: np.ndarray, scale: float = 1.0) -> tuple[int, float, float]:
        """RMSD of frames read from a file descriptor, read and computed in compiled code.

        The numba kernel reads the runs ``offsets``, ``nbytes`` (whole frames as stored,
        in order) with ``pread``, ``len(frames)`` frames at a time into ``frames``, and
        runs on each read while it is in the CPU cache; the GIL is released throughout.
        Frames whose RMSD the fast kernel cannot trust come back negative: compute them
        again with a call on the frames (which takes the exact path for them).

        Parameters
        ----------
        fd : int
            An open file descriptor.
        offsets, nbytes : numpy.ndarray of int64
            Byte offset and length of each run of frames.
        frames : numpy.ndarray
            C-contiguous ``(k, n_atoms, 3)`` buffer of the stored dtype (float32 or
            float64, native byte order), ``n_atoms`` the frames' atoms.
        out : numpy.ndarray
            float64, one entry per frame of the runs.
        scale : float, optional
            Factor every value read is multiplied by in the frames' dtype before the
            kernel sees it (the backend's unit conversion, ``np.multiply(frames, scale,
            out=frames)``: the same values bit for bit); 1 reads the values as stored.

        Returns
        -------
        tuple
            ``(frames done, seconds reading, seconds computing)``; fewer frames than the
            runs hold where a read failed or met the end of the file.
        """
        if not self.reads_files:
            raise RuntimeError("from_file needs the numba kernel and pread (POSIX)")
        if frames.ndim != 3 or frames.shape[1] < self._min_atoms or frames.shape[2] != 3:
            raise ValueError(f"frames buffer of shape {frames.shape} for "
                             f"{self._min_atoms} atoms")
        spent = np.zeros(4, dtype=np.int64)
        factor = np.array([scale], dtype=frames.dtype)  # rounded as numpy rounds it
        done = self._kernel._qcp_pread(
            fd, offsets, nbytes, frames, factor, self.ref_c, self._cols, self._wk,
            self.w is not None, self.superposition, *self._layout, self._gather_buffer(frames.dtype), out,
            time.CLOCK_MONOTONIC, spent)
        return int(done), spent[2] * 1e-9, spent[3] * 1e-9


def prepare(
    reference: Any,
    weights: Any = None,
    superposition: bool = True,
    kernel: str = "auto",
    *,
    reference_centered: bool = False,
    atoms: Any = None,
) -> PreparedQCP:
    """Check the arguments of :func:`rmsd_qcp` but the frames once; call the result on frames.

    Parameters
    ----------
    reference, weights, superposition, kernel, reference_centered, atoms
        As for :func:`rmsd_qcp`.

    Returns
    -------
    PreparedQCP
        ``prepared(frames)`` equals ``rmsd_qcp(reference, frames, ...)`` for frames of
        shape ``(n_frames, n_atoms, 3)``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(10, 3))
    >>> rmsd = prepare(x)
    >>> float(rmsd(np.stack([x + 1.0, x]))[0]) < 1e-6
    True
    """
    ref = np.asarray(reference)
    if ref.ndim != 2 or ref.shape[-1] != 3:
        raise ValueError(f"reference must have shape (n_atoms, 3), not {ref.shape}")
    n = ref.shape[0]
    if atoms is not None:
        atoms = np.asarray(atoms, dtype=np.intp).reshape(-1)
        if atoms.size != n:
            raise ValueError(f"atoms has {atoms.size} entries; the reference has {n} atoms")
        if atoms.size and atoms.min() < 0:
            raise IndexError("atoms out of range: negative index")
    if n == 0:
        raise ValueError("no atoms to compare")
    w = normalize_weights(weights, n)
    ref_c = np.asarray(ref, dtype=np.float64) if reference_centered else center(ref, w)
    if kernel not in ("auto", "numpy", "numba"):
        raise ValueError(f"kernel must be 'auto', 'numpy' or 'numba', not {kernel!r}")
    return PreparedQCP(ref_c, w, superposition,
                       _numba_kernel() if _uses_numba(kernel) else None, atoms)
