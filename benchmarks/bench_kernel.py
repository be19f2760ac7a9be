"""The RMSD kernels alone, in memory, one core: h5mdx against MDTraj, MDAnalysis and a copy.

What a task does after each read: the kernel (``h5mdx.analysis.qcp.prepare(...)``, once)
on the 4 MiB of frames (``READ_STEP_BYTES``) that the read just left in the CPU cache.
This times that on ``--frames`` in-memory float32 frames of ``bench_scale``'s synthetic
structure (3341 atoms), 4 MiB at a time, for all atoms (one contiguous run, read in
place) and for the 214 C-alpha-like indices (gathered per frame):

- ``copy (the read's floor)``: each 4 MiB copied from the (uncached) frames into one
  reused block, the least any read of them from the page cache costs;
- each h5mdx kernel on that block as the copy leaves it, and ``copy + kernel`` (both in
  turn, as a task runs them): the serial bound of a task;

- the numba kernel eight ways, each rebuilt here from ``_qcp_numba``'s own source: with its
  accumulator lanes on the stack (``_qcp_numba._stack_zeros``, as shipped) or on the heap
  (``np.zeros``, the build before), and either loaded from numba's on-disk cache (how a
  worker usually gets it; ``h5mdx numba``) or compiled in this process (a first run, or no
  writable cache); with 24 lanes of separate multiplies and adds (``24 lanes,
  unfused``, the build before 12 fused lanes): the before/after of those changes, in one
  run; and with 12 and 24 fused lanes, one frame a pass over the reference, and 24 two
  frames a pass: the shipped kernel takes 12 lanes and one frame where LLVM vectorises
  256 bits wide (AVX2, Intel's AVX-512) and 24 lanes and two frames where it vectorises
  512 bits wide (AMD Zen 4 and later; ``_qcp_numba._wide_vectors``), so one of these is
  the shipped build and the others what the other kind of CPU runs, or spills;
- ``h5mdx numpy``: the kernel without numba;
- ``mdtraj.rmsd`` (one thread, its own float32 SSE code), where installed, and
  ``MDAnalysis qcprot`` (``MDAnalysis.analysis.rms.rmsd`` per frame, on at most 2,000
  frames: it is ~50x slower), where installed: each on an in-memory trajectory of just
  the compared atoms, as their users would call them.

``--sizes`` adds a table of the shipped numba kernel on the first N atoms of each frame
(a contiguous run, read in place) for each N: atoms per second, beside the size of the
reference as the kernel lays it out (3 x 3N float64, streamed once per frame). Where the
atoms per second stay the same from a layout that fits the core's L1 cache to one that
does not, the kernel is bound by its arithmetic, not by reading the reference.

Each figure is the median over ``--repeats`` interleaved rounds (every kernel once per
round, after one warm-up). Results: ``benchmarks/results/kernel{--tag}.{json,md}``.
Run: ``.venv/bin/python benchmarks/bench_kernel.py``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_scale as bs  # noqa: E402 - the benchmark next to this one

STEP_BYTES = 4 << 20
#: The line of ``_qcp_numba`` that sets its lane count, which the variants replace.
SHIPPED_LANES = "_LANES = 24 if _WIDE else 12\n"
#: The line that sets whether it takes two frames a pass over the reference.
SHIPPED_PAIRS = "_PAIRS = _WIDE\n"
MDA_FRAMES = 2000


def step_frames(n_atoms: int) -> int:
    """Frames of ``n_atoms`` float32 atoms in one ``STEP_BYTES`` read (at least one)."""
    return max(1, STEP_BYTES // (n_atoms * 12))


def kernel_variant(lanes: str, cached: bool, workdir: str, fused: bool = True,
                   n_lanes: int | None = None, pairs: bool | None = None) -> types.ModuleType:
    """A build of ``h5mdx.analysis._qcp_numba`` from its own source, with its accumulator
    lanes on the ``"stack"`` (as shipped) or the ``"heap"`` (``np.zeros``, the build
    before ``_stack_zeros``), either compiled in this process or loaded from numba's
    on-disk cache (written by a subprocess first), which is how worker processes usually
    get it; ``fused=False``: 24 lanes without fused multiply-adds (the build before
    ``fastmath={"contract"}``); ``n_lanes``: that many accumulator lanes (a multiple of 3;
    24 fills AVX-512's 32 registers as 12 fills AVX2's 16); ``pairs``: two frames a pass
    over the reference or one (default: as shipped, two where LLVM vectorises 512 bits
    wide). ``PreparedQCP`` runs any of them as tasks run the shipped one."""
    from h5mdx.analysis import _qcp_numba

    source = inspect.getsource(_qcp_numba)
    if lanes == "heap":
        if "_stack_zeros(_LANES)" not in source:
            raise RuntimeError("_qcp_numba no longer builds its lanes with _stack_zeros(_LANES)")
        source = source.replace("_stack_zeros(_LANES)", "np.zeros(_LANES)")
    if not fused:
        fma = ', fastmath={"contract"})'
        if source.count(fma) != 2 or source.count(SHIPPED_LANES) != 1:
            raise RuntimeError("_qcp_numba no longer has two kernels of fused lanes, whose "
                               "count it sets in one line")
        source = source.replace(fma, ")").replace(SHIPPED_LANES, "_LANES = 24\n")
    if n_lanes is not None:
        if n_lanes % 3 or source.count(SHIPPED_LANES) != 1:
            raise RuntimeError("lanes must be a multiple of 3, and _qcp_numba set them in "
                               "one line")
        source = source.replace(SHIPPED_LANES, f"_LANES = {n_lanes}\n")
    if pairs is not None:
        if source.count(SHIPPED_PAIRS) != 1:
            raise RuntimeError("_qcp_numba no longer sets _PAIRS in one line")
        source = source.replace(SHIPPED_PAIRS, f"_PAIRS = {pairs}\n")
    name = (f"_qcp_numba_{lanes}{'' if fused else '_unfused'}"
            f"{'' if n_lanes is None else f'_{n_lanes}'}"
            f"{'' if pairs is None else ('_pairs' if pairs else '_single')}")
    if not cached:
        module = types.ModuleType(name)
        source = source.replace("cache=True, ", "")
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
        return module
    with open(os.path.join(workdir, name + ".py"), "w") as fh:
        fh.write(source)
    call = (f"import sys; sys.path.insert(0, {workdir!r}); import numpy as np; "
            f"from h5mdx.analysis.qcp import PreparedQCP; import {name} as m; "
            "PreparedQCP(np.zeros((2, 3)), None, True, m, None)(np.zeros((1, 2, 3), np.float32))")
    subprocess.run([sys.executable, "-c", call], check=True)  # compiles, writes the cache
    if workdir not in sys.path:
        sys.path.insert(0, workdir)
    return importlib.import_module(name)  # loads it from the cache


def kernels(frames: np.ndarray, atoms: np.ndarray | None,
            workdir: str) -> dict[str, Callable[[], Any]]:
    """Each kernel as a callable that computes the RMSD of as many frames as ``frames`` has."""
    from h5mdx.analysis.qcp import PreparedQCP, center, has_numba, prepare

    n_all = frames.shape[1]
    cols = np.arange(n_all) if atoms is None else atoms
    ref = center(frames[0, cols])
    step = step_frames(n_all)
    starts = range(0, len(frames) - step + 1, step)
    block = frames[:step].copy()  # what a task's read leaves in the CPU cache

    def copy() -> None:
        for i in starts:
            np.copyto(block, frames[i:i + step])

    def on_block(fn: Callable[[np.ndarray], Any], with_copy: bool) -> Callable[[], None]:
        def run() -> None:
            for i in starts:
                if with_copy:
                    np.copyto(block, frames[i:i + step])
                fn(block)
        return run

    fns: dict[str, Callable[[np.ndarray], Any]] = {}
    if has_numba():
        for label, lanes, cached, fused, n_lanes, pairs in (
                ("h5mdx numba", "stack", True, True, None, None),
                ("h5mdx numba, 12 fused lanes, one frame a pass", "stack", True, True, 12, False),
                ("h5mdx numba, 24 fused lanes, one frame a pass", "stack", True, True, 24, False),
                ("h5mdx numba, 24 fused lanes, two frames a pass", "stack", True, True, 24, True),
                ("h5mdx numba, compiled in this process", "stack", False, True, None, None),
                ("h5mdx numba, 24 lanes, unfused, from the cache", "stack", True, False, None,
                 False),
                ("h5mdx numba, heap lanes, from the cache", "heap", True, True, None, None),
                ("h5mdx numba, heap lanes, compiled in this process", "heap", False, True,
                 None, None)):
            fns[label] = PreparedQCP(ref, None, True, kernel_variant(
                lanes, cached, workdir, fused, n_lanes, pairs), atoms)
    fns["h5mdx numpy"] = prepare(ref, None, True, "numpy", reference_centered=True,
                                 atoms=atoms)
    runs: dict[str, Callable[[], Any]] = {"copy (the read's floor)": copy}
    for name, fn in fns.items():
        runs[name] = on_block(fn, False)
    for name in ("h5mdx numba", "h5mdx numba, 24 lanes, unfused, from the cache",
                 "h5mdx numba, heap lanes, compiled in this process"):
        if name in fns:
            runs[f"copy + {name}"] = on_block(fns[name], True)
    picked = frames if atoms is None else np.ascontiguousarray(frames[:, atoms])
    try:
        import mdtraj

        traj = mdtraj.Trajectory(picked / 10.0, topology=None)
        runs["mdtraj.rmsd (1 thread)"] = lambda: mdtraj.rmsd(traj, traj, 0, parallel=False)
    except ImportError:
        pass
    try:
        from MDAnalysis.analysis.rms import rmsd as mda_rmsd

        few = picked[:MDA_FRAMES]
        runs["MDAnalysis qcprot"] = lambda: [mda_rmsd(x, ref, center=True, superposition=True)
                                             for x in few]
    except ImportError:
        pass
    return runs


def size_scan(frames: np.ndarray, sizes: list[int],
              repeats: int) -> dict[int, dict[str, float]]:
    """The shipped kernel on the first ``n`` atoms of each frame, for each ``n`` of ``sizes``.

    Returns, per ``n``: ``atoms_per_s`` (median over ``repeats`` interleaved rounds, on the
    4 MiB block a read leaves in the cache) and ``layout_kib``, the reference as the
    kernel streams it (``_qcp_numba._reference_layout``: 3 x 3n float64).
    """
    from h5mdx.analysis.qcp import center, prepare

    step = step_frames(frames.shape[1])
    block = frames[:step].copy()
    timers = {}
    for n in sizes:
        kernel = prepare(center(frames[0, :n]), None, True, "numba", reference_centered=True,
                         atoms=np.arange(n))

        def timed(kernel: Callable[[np.ndarray], Any] = kernel) -> float:
            t = time.perf_counter()
            for _ in range(8):
                kernel(block)
            return time.perf_counter() - t

        timers[n] = timed
    times = bs.interleaved(timers, repeats)
    return {n: {"atoms_per_s": 8 * step * n / statistics.median(times[n]),
                "layout_kib": 9 * n * 8 / 1024} for n in sizes}


def frames_of(name: str, n_frames: int) -> int:
    """How many frames one call of ``name`` computes."""
    if name == "MDAnalysis qcprot":
        return min(n_frames, MDA_FRAMES)
    if name == "mdtraj.rmsd (1 thread)":
        return n_frames
    step = step_frames(bs.N_ATOMS)
    return n_frames // step * step


def prefer_512_features() -> str:
    """The host's LLVM features with ``-prefer-256-bit``: LLVM then vectorises 512 bits
    wide on any AVX-512 CPU, as it does by default only on AMD's Zen 4 and later."""
    from numba.core.codegen import get_host_cpu_features

    flags = [f for f in get_host_cpu_features().split(",")
             if f and f[1:] != "prefer-256-bit"]
    return ",".join([*flags, "-prefer-256-bit"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=5000, help="in-memory frames (default 5000)")
    p.add_argument("--sizes", default="",
                   help="comma-separated atom counts: the shipped kernel against the "
                        "selection's size (e.g. 100,400,1600,3341)")
    p.add_argument("--prefer-512", action="store_true",
                   help="run with LLVM told to use 512-bit vectors on an AVX-512 CPU "
                        "(NUMBA_CPU_FEATURES: the host's and -prefer-256-bit), which Intel's "
                        "tuning does not by default")
    bs.run_arguments(p, repeats=9)
    args = p.parse_args()
    if args.prefer_512 and "NUMBA_CPU_FEATURES" not in os.environ:
        # numba reads it once, when imported, and it keys numba's cache: the whole run
        # (and the subprocesses that write the variants' caches) must have it
        os.environ["NUMBA_CPU_FEATURES"] = prefer_512_features()
        os.execv(sys.executable, [sys.executable, *sys.argv])
    tpl = bs.templates()
    frames = np.ascontiguousarray(np.resize(tpl, (args.frames,) + tpl.shape[1:]))
    from h5mdx.analysis import _qcp_numba

    results: dict[str, Any] = {"frames": args.frames, "n_atoms": bs.N_ATOMS,
                               "repeats": args.repeats, **bs.machine(),
                               "shipped_lanes": _qcp_numba._LANES,
                               "shipped_pairs": _qcp_numba._PAIRS,
                               "numba_cpu_features": os.environ.get("NUMBA_CPU_FEATURES"),
                               "fps": {}}
    workdir = tempfile.mkdtemp(prefix="h5mdx-bench-kernel-")
    for label, atoms in (("all atoms", None), ("C-alpha", bs.ca_indices())):
        runs = kernels(frames, atoms, workdir)

        def timer(fn: Callable[[], Any]) -> Callable[[], float]:
            def timed() -> float:
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t
            return timed

        times = bs.interleaved({k: timer(v) for k, v in runs.items()}, args.repeats)
        results["fps"][label] = {k: frames_of(k, args.frames) / statistics.median(v)
                                 for k, v in times.items()}
        print(label, {k: f"{v:,.0f}" for k, v in results["fps"][label].items()})
    if args.sizes:
        sizes = [min(int(n), frames.shape[1]) for n in args.sizes.split(",")]
        results["sizes"] = {str(n): v for n, v in
                            size_scan(frames, sizes, args.repeats).items()}
        print("sizes", {n: f"{v['atoms_per_s'] / 1e6:,.0f} M atoms/s"
                        for n, v in results["sizes"].items()})
    bs.save_results("kernel", args.tag, results, markdown)
    return 0


def shipped_text(results: dict[str, Any]) -> str:
    """The shipped kernel's layout on the CPU of ``results`` (empty for results from before
    it was recorded), and whether LLVM was told to use 512-bit vectors."""
    text = ""
    if "shipped_lanes" in results:
        pairs = ", and takes two frames a pass" if results.get("shipped_pairs") else ""
        text += (f" The shipped kernel (`h5mdx numba`) has {results['shipped_lanes']} "
                 f"accumulator lanes on this CPU{pairs}.")
    if (results.get("numba_cpu_features") or "").endswith("-prefer-256-bit"):
        text += (" Built with LLVM told to use 512-bit vectors (`--prefer-512`: "
                 "`NUMBA_CPU_FEATURES` ending in `-prefer-256-bit`).")
    return text


def markdown(results: dict[str, Any]) -> str:
    fps = results["fps"]
    names = list(dict.fromkeys(k for case in fps.values() for k in case))
    lines = [f"RMSD kernels alone: {results['frames']:,} in-memory float32 frames of "
             f"{results['n_atoms']} atoms, 4 MiB at a time, one core; medians of "
             f"{results['repeats']} interleaved rounds. {results['platform']}, "
             f"{bs.cores_text(results)}; {bs.versions_text(results)}."
             + shipped_text(results), "",
             "| kernel | " + " | ".join(f"{c} (frames/s)" for c in fps)
             + " | " + " | ".join(f"{c}: x h5mdx numba" for c in fps) + " |",
             "|---" * (1 + 2 * len(fps)) + "|"]
    for name in names:
        rate = [fps[c].get(name) for c in fps]
        ratio = [fps[c].get(name, 0) / fps[c]["h5mdx numba"] if "h5mdx numba" in fps[c]
                 and name in fps[c] else None for c in fps]
        lines.append(f"| {name} | " + " | ".join("" if r is None else f"{r:,.0f}" for r in rate)
                     + " | " + " | ".join("" if r is None else f"{r:.2f}" for r in ratio) + " |")
    if results.get("sizes"):
        cpu = results.get("cpu") or {}
        caches = ", ".join(f"{name} {cpu[key]} KiB" for name, key in
                           (("L1d", "l1d_kib"), ("L2", "l2_kib")) if cpu.get(key))
        lines += ["", "The shipped numba kernel on the first N atoms of each frame (one "
                  "contiguous run), against the reference as the kernel streams it (3 x 3N "
                  f"float64){f'; this CPU: {caches} a core' if caches else ''}:", "",
                  "| atoms | reference layout (KiB) | atoms/s (millions) |", "|---|---|---|"]
        for n, v in results["sizes"].items():
            lines.append(f"| {int(n):,} | {v['layout_kib']:,.0f} | "
                         f"{v['atoms_per_s'] / 1e6:,.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
