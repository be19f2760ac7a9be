"""The compiled QCP kernel (numba); imported only when used.

It lives in a module of its own, at module level, so that numba's on-disk cache
(``cache=True``) serves every worker process after the first compilation.

The inner products of a frame with the reference come from one pass over the
frame's coordinates as a flat run of ``3 n`` numbers (``x0 y0 z0 x1 ...``), summed
into ``_LANES`` independent accumulators per quantity: lane ``k`` adds the
elements ``k, k + _LANES, k + 2 _LANES, ...``, so lane ``k`` only ever sees the
axis ``k % 3``. Independent lanes let LLVM keep them in SIMD registers without
reordering any floating-point sum: the pass runs 2x faster than one accumulator per
sum (numba 0.68, AVX2, 3341 atoms; ``benchmarks/bench_scale.py``).

The one liberty :func:`_frame_sums` takes is contraction (``fastmath={"contract"}``,
nothing else of fastmath): each ``lane += a * y`` is one fused multiply-add where the
CPU has FMA, rounded once instead of twice, so the sums differ from unfused ones by
~1e-14 relative (the frames are float32: 6e-8). It also needs no register for the
product. Twelve lanes of five sums then fill 15 of AVX2's 16 registers; 24 lanes
(30 registers) spilled to the stack on every addition. On the 2-core AMD EPYC (Zen 3,
AVX2) 12 fused lanes ran all-atom frames 1.4-1.7x faster than 24 unfused ones, and
C-alpha frames 1.03-1.18x (``benchmarks/bench_kernel.py``: "24 lanes, unfused", same runs).
Where LLVM vectorises 512 bits wide (AVX-512 on AMD Zen 4 and later:
:func:`_wide_vectors`) the kernel takes 24 lanes (12 there ran 2.8x slower) and two
frames a pass over the reference (:func:`_pair_sums`, 1.2-1.6x). The lane count sets
the order of the sums, so the RMSD there differs from other machines' by ~1e-12 Å; two
frames a pass change no bit.

The accumulators are arrays on the stack (:func:`_stack_zeros`), not on the heap.
LLVM cannot tell heap arrays from numba's allocator apart from the frame and the
reference, so where it compiled :func:`_frame_sums` on its own it stored every lane back
to memory after every addition. Only the object code numba writes to its on-disk cache
(optimised as one module, :func:`_frame_sums` inlined) had them in registers: the same
kernel ran 133k-200k frames/s in a process that compiled it and 325k-332k in one that
loaded it from the cache (3341 atoms, an AMD EPYC with AVX2, no AVX-512). A stack array that never leaves the
function aliases nothing, so its lanes stay in registers however the kernel was built:
339k-347k either way, with the same sums in the same order, bit for bit
(``benchmarks/bench_kernel.py``).

The pass is bound by its arithmetic, not by reading the reference's layout (3 x 3 n
float64, 235 KiB for 3341 atoms): on that EPYC the kernel ran ~1.0 billion atoms/s with
the layout at 120 and 235 KiB as at 60 (in a 32 KiB L1 it ran fewer: 0.83 billion at
30 KiB, where each frame's QCP solve weighs more; ``bench_kernel.py --sizes``). Walking
the atoms in L1-sized spans over a batch of frames (the lanes carried from span to span,
bit for bit the same sums) ran 0.6-0.9x as fast, and a float32 layout (half the bytes,
three more conversions per element) 0.85x (one-off scripts, 2026-11-26, not kept).
"""

import numpy as np
from numba import config as _numba_config
from numba import njit as _njit
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic
from numba.np.arrayobj import make_array as _make_array
from numba.np.arrayobj import populate_array as _populate_array

#: The C library's ``pread(fd, buf, count, offset)`` and ``clock_gettime(clock, ts)``,
#: called by name from compiled code (the symbols are the process's own libc), so that the
#: object code in numba's on-disk cache holds no address of this process. Pointers are
#: passed as integers (``uintp``), which the x86-64 and AArch64 calling conventions pass
#: as they pass pointers.
_pread = _types.ExternalFunction(
    "pread", _types.int64(_types.intc, _types.uintp, _types.uintp, _types.int64))
_clock_gettime = _types.ExternalFunction(
    "clock_gettime", _types.intc(_types.intc, _types.uintp))

__all__ = ["_qcp_frames", "_qcp_pread", "_reference_layout"]

def _wide_vectors(features: str | None = None, cpu: str | None = None) -> bool:
    """Whether LLVM vectorises 512 bits wide for the CPU numba compiles for.

    That is AVX-512 on AMD's Zen 4 and later (``znver4``, ``znver5``). LLVM tunes Intel's
    AVX-512 CPUs (``skylake-avx512`` to ``sapphirerapids``) to 256-bit vectors, as it does
    AVX2 ones, unless the features say otherwise: ``-prefer-256-bit`` (512-bit vectors on
    any AVX-512 CPU) or ``+prefer-256-bit`` (256-bit on Zen 4). ``features`` and ``cpu``:
    LLVM's feature string (``+avx2,+avx512f,...``) and CPU name; by default the ones numba
    compiles for (``NUMBA_CPU_FEATURES`` and ``NUMBA_CPU_NAME``, else the host's). Both are
    in the key of numba's on-disk cache, so a cached build always has the layout this gives.
    """
    from numba.core import config

    if features is None:
        from numba.core.codegen import get_host_cpu_features

        given = config.CPU_FEATURES  # type: ignore[attr-defined]  # set at numba's import
        features = given if given is not None else get_host_cpu_features()
    if cpu is None:
        cpu = config.CPU_NAME  # type: ignore[attr-defined]
    if cpu is None or cpu == "host":
        import llvmlite.binding as ll

        cpu = ll.get_host_cpu_name()
    flags = features.split(",")
    if "+avx512f" not in flags:
        return False
    if "-prefer-256-bit" in flags or "+prefer-256-bit" in flags:
        return "-prefer-256-bit" in flags
    return cpu.startswith("znver")


#: 512-bit vectors (:func:`_wide_vectors`): a compile-time constant of the kernel, which
#: sets the two below.
_WIDE = _wide_vectors()

#: Accumulator lanes per sum: a multiple of 3 (so a lane keeps one axis) and of the
#: vector's doubles. 5 sums x 12 lanes fit AVX2's 16 registers of 4 doubles; with fused
#: multiply-adds 12 lanes ran 1.4-1.7x faster than 24 on Zen 3 (AVX2). Where LLVM
#: vectorises 512 bits wide, 12 lanes are one and a half registers: on Zen 4 12 lanes ran
#: all-atom frames at 125k frames/s and 24 at 356k, 2.8x (C-alpha 1.2x). With Intel's
#: tuning 12 and 24 ran alike (``benchmarks/bench_kernel.py``, ``kernel-2core-zen4.md``,
#: ``kernel-16core.md``).
_LANES = 24 if _WIDE else 12
#: A square RMSD below ``_CANCEL * sum w |y|^2 / n`` may be round-off of the one-pass
#: G_b (:func:`_qcp_rmsd`): such frames are summed again, centred first (:func:`_centred_sums`).
#: The round-off is ~10-30 eps sum w |y|^2 / n, so a square RMSD just above the bound is
#: off by ~30 / (_CANCEL / eps) of itself: 4096 eps left 6e-4 Å in frames ~2 Å from the
#: reference with atoms 1e6 Å from the origin; 2^24 eps keeps it under 1e-6 Å there, and
#: re-sums only frames within 0.06 Å of the reference where the atoms lie within 1000 Å
#: of the origin (adk: 0.001 Å, the reference frame alone).
_CANCEL = 2.0 ** 24 * 2.220446049250313e-16

#: Two frames a pass over the reference (:func:`_pair_sums`) where 512-bit vectors give
#: the 2 x 5 sums x 24 lanes their 30 registers: the reference's layout (9 doubles an
#: atom, 235 KiB for 3341 atoms) is then read once for two frames. On Zen 4 the kernel ran
#: 1.2-1.6x as fast; with 256-bit vectors the 60 registers it would need spill, and it
#: ran 0.3-0.6x. The sums are the same, bit for bit, as one frame at a time.
_PAIRS = _WIDE


@_intrinsic
def _stack_zeros(typingctx, size):  # pragma: no cover - compiled
    """A float64 array of ``size`` (a literal int) zeros on the caller's stack.

    For small scratch arrays inside one compiled function only: the memory is gone
    when that function returns, so the array must never be returned or stored.
    """
    if not isinstance(size, _types.IntegerLiteral):
        return None
    n = size.literal_value
    arrty = _types.Array(_types.float64, 1, "C")

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(_types.intp)
        data = _cgutils.alloca_once(builder, context.get_value_type(_types.float64), size=n)
        _cgutils.memset(builder, data, intp(8 * n), 0)
        ary = _make_array(arrty)(context, builder)
        _populate_array(ary, data=data, shape=_cgutils.pack_array(builder, [intp(n)]),
                        strides=_cgutils.pack_array(builder, [intp(8)]), itemsize=intp(8),
                        meminfo=None)
        return ary._getvalue()

    return arrty(size), codegen


_NO_JIT: bool = bool(getattr(_numba_config, "DISABLE_JIT", False))
if _NO_JIT:  # NUMBA_DISABLE_JIT=1 (debugging): plain Python, plain arrays
    def _stack_zeros(size):  # type: ignore[misc]  # noqa: F811
        return np.zeros(size)


@_njit(cache=True, nogil=True, fastmath={"contract"})  # fused multiply-adds only
def _frame_sums(a, wf, y, use_w, r):  # pragma: no cover - compiled
    """``r[3 k + j] = sum_i a[k, 3 i + j] y[3 i + j]``, ``r[9 + j] = sum_i w_i y_ij``, ``r[12] = sum w |y|^2``."""
    m = y.shape[0]
    nb = m // _LANES
    l0 = _stack_zeros(_LANES)  # on the stack: the lanes stay in registers (module docstring)
    l1 = _stack_zeros(_LANES)
    l2 = _stack_zeros(_LANES)
    ls = _stack_zeros(_LANES)
    lg = _stack_zeros(_LANES)
    for blk in range(nb):
        base = blk * _LANES
        for k in range(_LANES):
            v = np.float64(y[base + k])  # float32 products lose digits
            l0[k] += a[0, base + k] * v
            l1[k] += a[1, base + k] * v
            l2[k] += a[2, base + k] * v
            if use_w:
                wv = wf[base + k] * v
                ls[k] += wv
                lg[k] += wv * v
            else:
                ls[k] += v
                lg[k] += v * v
    base = nb * _LANES  # a multiple of 3: lane j - base keeps axis j % 3
    for j in range(base, m):
        k = j - base
        v = np.float64(y[j])
        l0[k] += a[0, j] * v
        l1[k] += a[1, j] * v
        l2[k] += a[2, j] * v
        wv = wf[j] * v if use_w else v
        ls[k] += wv
        lg[k] += wv * v
    r[:] = 0.0
    for k in range(_LANES):
        j = k % 3
        r[j] += l0[k]
        r[3 + j] += l1[k]
        r[6 + j] += l2[k]
        r[9 + j] += ls[k]
        r[12] += lg[k]


@_njit(cache=True, nogil=True, fastmath={"contract"})  # fused multiply-adds only
def _pair_sums(a, wf, y, z, use_w, r, q):  # pragma: no cover - compiled
    """:func:`_frame_sums` of two frames ``y``, ``z`` into ``r``, ``q``, in one pass over ``a``.

    Each frame's lanes add the same products in the same order as :func:`_frame_sums`:
    the sums are the same, bit for bit. The lanes are folded into ``r``, ``q`` here as
    there, written out: a helper taking the lanes would take their addresses, and where
    LLVM did not inline it they could no longer live in registers (module docstring).
    """
    m = y.shape[0]
    nb = m // _LANES
    l0 = _stack_zeros(_LANES)
    l1 = _stack_zeros(_LANES)
    l2 = _stack_zeros(_LANES)
    ls = _stack_zeros(_LANES)
    lg = _stack_zeros(_LANES)
    k0 = _stack_zeros(_LANES)
    k1 = _stack_zeros(_LANES)
    k2 = _stack_zeros(_LANES)
    ks = _stack_zeros(_LANES)
    kg = _stack_zeros(_LANES)
    for blk in range(nb):
        base = blk * _LANES
        for k in range(_LANES):
            a0 = a[0, base + k]
            a1 = a[1, base + k]
            a2 = a[2, base + k]
            v = np.float64(y[base + k])
            u = np.float64(z[base + k])
            l0[k] += a0 * v
            l1[k] += a1 * v
            l2[k] += a2 * v
            k0[k] += a0 * u
            k1[k] += a1 * u
            k2[k] += a2 * u
            if use_w:
                wv = wf[base + k] * v
                wu = wf[base + k] * u
                ls[k] += wv
                lg[k] += wv * v
                ks[k] += wu
                kg[k] += wu * u
            else:
                ls[k] += v
                lg[k] += v * v
                ks[k] += u
                kg[k] += u * u
    base = nb * _LANES
    for j in range(base, m):
        k = j - base
        v = np.float64(y[j])
        u = np.float64(z[j])
        l0[k] += a[0, j] * v
        l1[k] += a[1, j] * v
        l2[k] += a[2, j] * v
        k0[k] += a[0, j] * u
        k1[k] += a[1, j] * u
        k2[k] += a[2, j] * u
        wv = wf[j] * v if use_w else v
        wu = wf[j] * u if use_w else u
        ls[k] += wv
        lg[k] += wv * v
        ks[k] += wu
        kg[k] += wu * u
    r[:] = 0.0
    q[:] = 0.0
    for k in range(_LANES):
        j = k % 3
        r[j] += l0[k]
        r[3 + j] += l1[k]
        r[6 + j] += l2[k]
        r[9 + j] += ls[k]
        r[12] += lg[k]
        q[j] += k0[k]
        q[3 + j] += k1[k]
        q[6 + j] += k2[k]
        q[9 + j] += ks[k]
        q[12] += kg[k]


@_njit(cache=True, nogil=True)
def _qcp_rmsd(r, g_a, rs, wsum, n, check):  # pragma: no cover - compiled
    """RMSD from one frame's sums (:func:`_frame_sums`); -1 where Newton's method is unsafe,
    and (``check``) -2 where the RMSD is too small for the one-pass sums to resolve (the
    frame's sums are then made again centred, :func:`_centred_sums`)."""
    cx = r[9] / wsum
    cy = r[10] / wsum
    cz = r[11] / wsum
    g_b = r[12] - wsum * (cx * cx + cy * cy + cz * cz)
    # centring the frame afterwards is exact algebra: sum w x (y - c)^T = sum w x y^T - (sum w x) c^T
    sxx = r[0] - rs[0] * cx
    sxy = r[1] - rs[0] * cy
    sxz = r[2] - rs[0] * cz
    syx = r[3] - rs[1] * cx
    syy = r[4] - rs[1] * cy
    syz = r[5] - rs[1] * cz
    szx = r[6] - rs[2] * cx
    szy = r[7] - rs[2] * cy
    szz = r[8] - rs[2] * cz
    e0 = 0.5 * (g_a + g_b)
    sxx2 = sxx * sxx
    syy2 = syy * syy
    szz2 = szz * szz
    sxy2 = sxy * sxy
    syz2 = syz * syz
    sxz2 = sxz * sxz
    syx2 = syx * syx
    szy2 = szy * szy
    szx2 = szx * szx
    syzszymsyyszz2 = 2.0 * (syz * szy - syy * szz)
    sxx2syy2szz2syz2szy2 = syy2 + szz2 - sxx2 + syz2 + szy2
    c2 = -2.0 * (sxx2 + syy2 + szz2 + sxy2 + syx2 + sxz2 + szx2 + syz2 + szy2)
    c1 = 8.0 * (sxx * syz * szy + syy * szx * sxz + szz * sxy * syx
                - sxx * syy * szz - syz * szx * sxy - szy * syx * sxz)
    sxzpszx = sxz + szx
    syzpszy = syz + szy
    sxypsyx = sxy + syx
    syzmszy = syz - szy
    sxzmszx = sxz - szx
    sxymsyx = sxy - syx
    sxxpsyy = sxx + syy
    sxxmsyy = sxx - syy
    sxy2sxz2syx2szx2 = sxy2 + sxz2 - syx2 - szx2
    c0 = (sxy2sxz2syx2szx2 * sxy2sxz2syx2szx2
          + (sxx2syy2szz2syz2szy2 + syzszymsyyszz2)
          * (sxx2syy2szz2syz2szy2 - syzszymsyyszz2)
          + (-sxzpszx * syzmszy + sxymsyx * (sxxmsyy - szz))
          * (-sxzmszx * syzpszy + sxymsyx * (sxxmsyy + szz))
          + (-sxzpszx * syzpszy - sxypsyx * (sxxpsyy - szz))
          * (-sxzmszx * syzmszy - sxypsyx * (sxxpsyy + szz))
          + (sxypsyx * syzpszy + sxzpszx * (sxxmsyy + szz))
          * (-sxymsyx * syzmszy + sxzpszx * (sxxpsyy + szz))
          + (sxypsyx * syzmszy + sxzmszx * (sxxmsyy - szz))
          * (-sxymsyx * syzpszy + sxzmszx * (sxxpsyy - szz)))
    lam = e0
    converged = False
    for _ in range(50):
        x2 = lam * lam
        b = (x2 + c2) * lam
        aa = b + c1
        denom = 2.0 * x2 * lam + b + aa
        if denom == 0.0:
            break
        delta = (aa * lam + c0) / denom
        lam -= delta
        if abs(delta) <= abs(1e-11 * lam):
            converged = True
            break
    # no convergence, or a (near-)double largest root (h5mdx.analysis.qcp._GAP_TOL): flag the
    # frame with -1; h5mdx.analysis.qcp.rmsd_qcp solves it with a symmetric eigensolver
    dp = (4.0 * lam * lam + 2.0 * c2) * lam + c1
    if not converged or abs(dp) <= 1e-2 * abs(lam) ** 3:
        return -1.0
    v = 2.0 * (e0 - lam) / n
    # G_b's one-pass form (sum w |y|^2 - W |c|^2) cancels away ~1e-16 of sum w |y|^2: a
    # square RMSD within _CANCEL of it (a frame near the reference, atoms far from the
    # origin) is not to be trusted
    if check and v < _CANCEL * r[12] / n:
        return -2.0
    return np.sqrt(v) if v > 0.0 else 0.0


@_njit(cache=True, nogil=True)
def _reference_layout(ref_c, w, use_w):  # pragma: no cover - compiled
    """The centred reference laid out for :func:`_frame_sums`, made once per reference.

    Returns ``a`` (3, 3 n) with ``a[k, 3 i + j] = w_i x_ik``, ``wf`` (3 n) with
    ``wf[3 i + j] = w_i``, and ``sums`` = the reference's weighted sums (~0, kept so
    frames need no centring pass), ``G_a = sum w |x|^2`` and ``W = sum w``.
    """
    n = ref_c.shape[0]
    m = 3 * n
    a = np.empty((3, m))
    wf = np.empty(m)
    sums = np.zeros(5)
    for i in range(n):
        wi = w[i] if use_w else 1.0
        sums[4] += wi
        for k in range(3):
            x = ref_c[i, k]
            sums[3] += wi * x * x
            sums[k] += wi * x
            wf[3 * i + k] = wi
            for j in range(3):
                a[k, 3 * i + j] = wi * x
    return a, wf, sums


@_njit(cache=True, nogil=True)
def _qcp_frames(ref_c, frames, atoms, w, use_w, superposition, a, wf, sums, buf,
                out):  # pragma: no cover - compiled
    """RMSD of every frame of ``frames[:, atoms]`` to the centred reference ``ref_c``.

    ``frames`` is C-contiguous (n_frames, n_all, 3); ``atoms`` picks the columns to
    compare (one per row of ``ref_c``); ``a``, ``wf``, ``sums`` are the reference's
    :func:`_reference_layout`. A contiguous run of atoms is read in place; any other
    selection is gathered into ``buf`` ((2, 3 n) of the frames' dtype: two frames, where
    :data:`_PAIRS` has the kernel take them two at a time) first.
    Allocates nothing of the reference's size: a worker of ``distributed`` frees (and
    the OS zeroes again) every allocation over 64 KiB (``MALLOC_TRIM_THRESHOLD_``).
    """
    n_frames, n_all = frames.shape[0], frames.shape[1]
    n = atoms.shape[0]
    m = 3 * n
    rs = sums[:3]
    g_a = sums[3]
    wsum = sums[4]
    start = atoms[0] if n else 0
    run = True
    for i in range(n):
        if atoms[i] != start + i:
            run = False
            break
    flat = frames.reshape(n_frames, n_all * 3)
    r = np.empty(13)
    q = np.empty(13)
    if not superposition:
        for c in range(n_frames):
            _centred_rmsd(ref_c, frames, atoms, c, w, use_w, wsum, out)
        return
    f = 0
    if _PAIRS:  # two frames a pass over the reference (_PAIRS)
        while f + 1 < n_frames:
            if run:
                _pair_sums(a, wf, flat[f, 3 * start:3 * start + m],
                           flat[f + 1, 3 * start:3 * start + m], use_w, r, q)
            else:
                _gather(frames, atoms, f, buf[0])
                _gather(frames, atoms, f + 1, buf[1])
                _pair_sums(a, wf, buf[0], buf[1], use_w, r, q)
            out[f] = _qcp_rmsd(r, g_a, rs, wsum, n, True)
            out[f + 1] = _qcp_rmsd(q, g_a, rs, wsum, n, True)
            f += 2
    for g in range(f, n_frames):  # all frames, or the last of an odd number
        if run:
            _frame_sums(a, wf, flat[g, 3 * start:3 * start + m], use_w, r)
        else:
            _gather(frames, atoms, g, buf[0])
            _frame_sums(a, wf, buf[0], use_w, r)
        out[g] = _qcp_rmsd(r, g_a, rs, wsum, n, True)
    for g in range(n_frames):
        if out[g] == -2.0:  # a small RMSD: the frame's sums again, centred first
            _centred_sums(ref_c, frames, atoms, g, w, use_w, wsum, r)
            out[g] = _qcp_rmsd(r, g_a, rs, wsum, n, False)


@_njit(cache=True, nogil=True)
def _centred_sums(ref_c, frames, atoms, f, w, use_w, wsum, r):  # pragma: no cover - compiled
    """:func:`_frame_sums` of frame ``f`` centred first (two passes, float64): no
    cancellation, at twice the work; for the few frames :func:`_qcp_rmsd` cannot resolve.
    ``r[9:12]`` (the frame's weighted sums) are then 0."""
    n = atoms.shape[0]
    cx = cy = cz = 0.0
    for i in range(n):
        wi = w[i] if use_w else 1.0
        cx += wi * np.float64(frames[f, atoms[i], 0])
        cy += wi * np.float64(frames[f, atoms[i], 1])
        cz += wi * np.float64(frames[f, atoms[i], 2])
    cx /= wsum
    cy /= wsum
    cz /= wsum
    r[:] = 0.0
    for i in range(n):
        wi = w[i] if use_w else 1.0
        y0 = np.float64(frames[f, atoms[i], 0]) - cx
        y1 = np.float64(frames[f, atoms[i], 1]) - cy
        y2 = np.float64(frames[f, atoms[i], 2]) - cz
        for k in range(3):
            wx = wi * ref_c[i, k]
            r[3 * k] += wx * y0
            r[3 * k + 1] += wx * y1
            r[3 * k + 2] += wx * y2
        r[12] += wi * (y0 * y0 + y1 * y1 + y2 * y2)


@_njit(cache=True, nogil=True)
def _gather(frames, atoms, f, into):  # pragma: no cover - compiled
    """Frame ``f``'s ``atoms`` into ``into`` (3 n elements): ``x0 y0 z0 x1 ...``."""
    for i in range(atoms.shape[0]):
        src = atoms[i]
        into[3 * i] = frames[f, src, 0]
        into[3 * i + 1] = frames[f, src, 1]
        into[3 * i + 2] = frames[f, src, 2]


@_njit(cache=True, nogil=True)
def _centred_rmsd(ref_c, frames, atoms, f, w, use_w, wsum, out):  # pragma: no cover - compiled
    """RMSD of frame ``f`` after centring only (no superposition)."""
    n = atoms.shape[0]
    cx = cy = cz = 0.0
    for i in range(n):
        wi = w[i] if use_w else 1.0
        cx += wi * frames[f, atoms[i], 0]
        cy += wi * frames[f, atoms[i], 1]
        cz += wi * frames[f, atoms[i], 2]
    cx /= wsum
    cy /= wsum
    cz /= wsum
    s = 0.0
    for i in range(n):
        wi = w[i] if use_w else 1.0
        dx = frames[f, atoms[i], 0] - cx - ref_c[i, 0]
        dy = frames[f, atoms[i], 1] - cy - ref_c[i, 1]
        dz = frames[f, atoms[i], 2] - cz - ref_c[i, 2]
        s += wi * (dx * dx + dy * dy + dz * dz)
    out[f] = np.sqrt(s / n)


@_njit(cache=True, nogil=True)
def _now_ns(clock, ts):  # pragma: no cover - compiled
    _clock_gettime(clock, ts.ctypes.data)
    return ts[0] * 1_000_000_000 + ts[1]


@_njit(cache=True, nogil=True)
def _scale_span(x, factor):  # pragma: no cover - compiled
    """``x *= factor`` in ``x``'s dtype (a contiguous 1-D view)."""
    for i in range(x.shape[0]):
        x[i] = x[i] * factor


@_njit(cache=True, nogil=True)
def _qcp_pread(fd, offsets, nbytes, frames, scale, ref_c, atoms, w, use_w, superposition, a,
               wf, sums, buf, out, clock, spent):  # pragma: no cover - compiled
    """Read frames from the file into ``frames`` and run :func:`_qcp_frames` on them, in turn.

    The runs ``offsets[r]``, ``nbytes[r]`` (bytes of whole frames, one after the other
    in order, as stored) are read with ``pread`` on ``fd``, ``frames.shape[0]`` frames at
    a time, into the same buffer ``frames`` (a few hundred KiB: the frames are still in
    the CPU's cache when the kernel reads them); ``out`` gets the RMSD of every frame.
    The whole loop runs without the GIL and without a Python call.

    ``scale`` (one value of the frames' dtype): where it is not 1, every value of the
    ``atoms`` read (of whole frames where an atom comes twice) is multiplied by it in
    that dtype before the kernel runs, as numpy's
    ``np.multiply(frames, scale, out=frames)`` does (a unit conversion of the backend:
    the same values, bit for bit); the multiplication counts as reading.

    ``clock`` is ``time.CLOCK_MONOTONIC``; ``spent`` (int64, 4) gets the nanoseconds spent
    reading and computing in ``spent[2]``, ``spent[3]`` (``spent[:2]`` is scratch for
    ``clock_gettime``).

    Returns the frames done: all of them, or fewer where a read failed or found the end
    of the file (the caller reads the rest again through its ordinary path, which says
    what is wrong).
    """
    frame_bytes = frames.shape[1] * frames.shape[2] * frames.itemsize
    per = frames.shape[0]
    at_buf = frames.ctypes.data
    factor = scale[0]
    scaled = factor != 1
    increasing = True
    for i in range(1, atoms.shape[0]):
        if atoms[i] <= atoms[i - 1]:
            increasing = False
            break
    run = atoms.shape[0] > 0 and atoms[atoms.shape[0] - 1] - atoms[0] == atoms.shape[0] - 1 \
        and increasing
    first = 3 * atoms[0] if atoms.shape[0] else 0
    span = 3 * atoms.shape[0]
    per_frame = frames.shape[1] * frames.shape[2]
    flat = frames.reshape(frames.size)
    done = 0
    t_io = 0
    t_compute = 0
    for r in range(offsets.shape[0]):
        at = offsets[r]
        left = nbytes[r]
        while left > 0:
            size = min(left, per * frame_bytes)
            t0 = _now_ns(clock, spent)
            got = 0
            while got < size:
                k = _pread(fd, at_buf + got, size - got, at + got)
                if k <= 0:
                    spent[2] = t_io + _now_ns(clock, spent) - t0
                    spent[3] = t_compute
                    return done
                got += k
            nf = size // frame_bytes
            if scaled and run:  # a run of atoms (all of them): one flat span a frame
                for f in range(nf):
                    _scale_span(flat[f * per_frame + first:f * per_frame + first + span], factor)
            elif scaled and increasing:  # the atoms the kernel reads, each once
                for f in range(nf):
                    for i in range(atoms.shape[0]):
                        row = atoms[i]
                        for c in range(frames.shape[2]):
                            frames[f, row, c] = frames[f, row, c] * factor
            elif scaled:  # an atom twice in the selection: the whole frames, once
                _scale_span(flat[:nf * per_frame], factor)
            t1 = _now_ns(clock, spent)
            _qcp_frames(ref_c, frames[:nf], atoms, w, use_w, superposition, a, wf, sums, buf,
                        out[done:done + nf])
            t_io += t1 - t0
            t_compute += _now_ns(clock, spent) - t1
            done += nf
            at += size
            left -= size
    spent[2] = t_io
    spent[3] = t_compute
    return done
