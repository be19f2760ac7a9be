"""Contiguous positions read into a buffer (the fused read) against computed on a mapping of
the file, N workers, paired with the read floor, in one run.

Where every core runs a task, an RMSD task on contiguous positions copies each frame from
the page cache (``pread``) and then runs the kernel on it, one after the other on one core,
while the floor only copies. A task that ran the kernel on a mapping of the file instead
(``numpy.memmap``: the page cache's own pages, no copy) would read only what the kernel
touches: about a third of the cache lines of a frame for adk's C-alpha atoms, and for all
atoms no second pass. h5mdx does not do this (a file truncated under a mapping kills the
process with SIGBUS, and page faults would fall inside the kernel's time); this measures
what it would gain, to decide whether to build it.

Each of N workers (``--modes``: threads of this process, or processes) takes one slab of
frames and runs, per round, the same prepared QCP kernel (:func:`h5mdx.analysis.qcp.prepare`)
three ways:

- ``pread``: the fused read as h5mdx's tasks run it
  (:meth:`~h5mdx.analysis.qcp.PreparedQCP.from_file`: 1 MiB of frames a ``pread``);
- ``mapped``: the kernel on the worker's slab of a mapping of the file made once per
  worker, ``--step-mib`` at a time;
- the N-process h5py read floor (:func:`h5mdx.floor.floor_reader`).

The order rotates from round to round. Every figure is a median of ``--repeats`` rounds
after one untimed round; ratios are medians of the rounds' ratios. The RMSD of the two ways
are compared bit for bit after the timed rounds. The trajectory is ``bench_scale``'s
synthetic one, contiguous (``--frames`` x 3341 atoms). Results:
``benchmarks/results/mapped{--tag}.{json,md}``. Run: ``.venv/bin/python
benchmarks/bench_mapped.py``.
"""

from __future__ import annotations

import argparse
import functools
import mmap
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_scale import (  # noqa: E402 - the benchmark next to this one
    DSET,
    N_ATOMS,
    _timed,
    build,
    ca_indices,
    cores_text,
    interleaved,
    machine,
    round_ratios,
    run_arguments,
    save_results,
    versions_text,
)

from h5mdx.floor import _ping, floor_reader, frame_slabs  # noqa: E402

#: Linux fills the page tables of a mapping as it is made (no fault per page); 0 elsewhere.
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
WAYS = ("pread", "mapped", "mapped-kept")

#: What one worker (a thread or a process) holds: the prepared kernel, the file and its
#: mapping; set by :func:`_setup` (per process for processes, once for threads).
_STATE: dict[str, Any] = {}


def _setup(path: str, select: np.ndarray | None, step_mib: float,
           window_mib: float = 64.0) -> None:
    """Open the file, map its positions and prepare the kernel, once per process."""
    from h5mdx.analysis.qcp import prepare, warm_up

    warm_up("numba")
    with h5py.File(path, "r") as f:
        d = f[DSET]
        if d.chunks is not None or d.id.get_offset() is None:
            raise ValueError(f"{path}: {DSET} is not contiguous (or not allocated)")
        offset, shape, dtype = int(d.id.get_offset()), d.shape, d.dtype
        ref = d[0].astype(np.float64)
    ref = ref if select is None else ref[select]
    ref_c = ref - ref.mean(axis=0)
    frame_bytes = dtype.itemsize * int(np.prod(shape[1:]))
    _STATE.clear()
    _STATE.update(
        # a kernel per call, as each h5mdx task prepares its own (it keeps scratch arrays)
        prepare=lambda: prepare(ref_c, None, True, "numba", reference_centered=True,
                                atoms=select),
        fd=os.open(path, os.O_RDONLY), offset=offset, frame_bytes=frame_bytes,
        view=np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape),
        buf_frames=max(1, (1 << 20) // frame_bytes),
        step=max(1, int(step_mib * 2**20) // frame_bytes),
        window=max(1, int(window_mib * 2**20) // frame_bytes), shape=shape, dtype=dtype)


def _slab(way: str, a: int, b: int, keep: bool = False) -> np.ndarray | None:
    """RMSD of frames ``a:b`` one ``way`` in this worker: ``pread``, ``mapped`` (a mapping
    of the slab made and unmapped here) or ``mapped-kept`` (the worker's one mapping)."""
    s = _STATE
    qcp, out = s["prepare"](), np.empty(b - a)
    if way == "pread":
        # the buffer is the task's own, made per task as h5mdx's fused read makes it
        buf = np.empty((s["buf_frames"], *s["shape"][1:]), dtype=s["dtype"])
        offsets = np.array([s["offset"] + a * s["frame_bytes"]], dtype=np.int64)
        nbytes = np.array([(b - a) * s["frame_bytes"]], dtype=np.int64)
        done, _io, _compute = qcp.from_file(s["fd"], offsets, nbytes, buf, out)
        if done < b - a:
            raise OSError(f"pread stopped after {done} of {b - a} frames")
        flagged = np.flatnonzero(out < 0.0)
        for f in flagged.tolist():  # near-double roots: the exact path, as tasks do
            out[f] = qcp(s["view"][a + f:a + f + 1])[0]
    elif way == "mapped-kept":
        _steps(qcp, s["view"][a:b], out, s["step"])
    else:  # a window of the slab at a time, its page tables filled at once (MAP_POPULATE)
        per = int(np.prod(s["shape"][1:]))
        for w in range(a, b, s["window"]):
            e = min(b, w + s["window"])
            start = s["offset"] + w * s["frame_bytes"]
            base = start - start % mmap.ALLOCATIONGRANULARITY
            mm = mmap.mmap(s["fd"], start - base + (e - w) * s["frame_bytes"],
                           flags=mmap.MAP_SHARED | MAP_POPULATE, prot=mmap.PROT_READ,
                           offset=base)
            try:
                frames = np.frombuffer(mm, dtype=s["dtype"], count=(e - w) * per,
                                       offset=start - base).reshape(e - w, *s["shape"][1:])
                _steps(qcp, frames, out[w - a:e - a], s["step"])
                del frames  # no view of the mapping may outlive it
            finally:
                mm.close()
    return out if keep else None


def _steps(qcp: Any, frames: np.ndarray, out: np.ndarray, step: int) -> None:
    for c in range(0, len(frames), step):
        out[c:c + step] = qcp(frames[c:c + step])


@contextmanager
def workers(mode: str, n: int, path: str, select: np.ndarray | None,
            step_mib: float, window_mib: float = 64.0) -> Iterator[Executor]:
    """N workers that hold the kernel and the mapping: threads here, or processes."""
    if mode == "threads":
        _setup(path, select, step_mib, window_mib)
        with ThreadPoolExecutor(n) as pool:
            yield pool
        os.close(_STATE["fd"])
        _STATE.clear()
    else:
        with ProcessPoolExecutor(n, mp_context=get_context("spawn"), initializer=_setup,
                                 initargs=(path, select, step_mib, window_mib)) as pool:
            list(pool.map(_ping, range(n)))  # every process started and set up, untimed
            yield pool


def every_slab(pool: Executor, way: str, parts: list[tuple[int, int]],
               keep: bool = False) -> list[np.ndarray | None]:
    """Every slab done one ``way`` by the workers; the RMSD of each where ``keep``."""
    return list(pool.map(_slab, [way] * len(parts), *zip(*parts, strict=True),
                         [keep] * len(parts)))


def measure(path: str, frames: int, mode: str, n: int, select: np.ndarray | None,
            step_mib: float, repeats: int, window_mib: float = 64.0) -> dict[str, Any]:
    """The floor and every way in the same rounds; then the ways' RMSD compared."""
    parts = frame_slabs(frames, 1, n)  # the floor's split of a contiguous dataset
    with floor_reader(path, n) as floor, workers(mode, n, path, select, step_mib,
                                                  window_mib) as pool:
        timers: dict[str, Callable[[], float]] = {"floor": lambda: floor()[0]}
        timers.update({way: functools.partial(_timed, functools.partial(
            every_slab, pool, way, parts)) for way in WAYS})
        times = interleaved(timers, repeats, rotate=True)
        got = {way: np.concatenate(every_slab(pool, way, parts, keep=True)) for way in WAYS}
    fl = times["floor"]
    row: dict[str, Any] = {"times": times, "floor_fps": frames / statistics.median(fl)}
    for way in WAYS:
        row[f"{way}_fps"] = frames / statistics.median(times[way])
        row[f"{way}_vs_floor"] = statistics.median(round_ratios(fl, times[way]))
        if way != "pread":
            row[f"{way}_vs_pread"] = statistics.median(round_ratios(times["pread"],
                                                                    times[way]))
    # every way runs the same kernel on the same frames: the same numbers, bit for bit
    row["equal"] = all(np.array_equal(got["pread"], got[way]) for way in WAYS)
    return row


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Contiguous positions: pread into a buffer against a mapping of the file", "",
             f"{results['frames']:,} frames x {N_ATOMS} atoms, contiguous, warm page cache; "
             f"{cores_text(results)}; medians of {results['repeats']} rounds (the floor "
             f"and each way; the order rotating), after one untimed round. The mapped ways "
             f"run the kernel on {results['step_mib']:g} MiB of the mapping at a time. "
             f"Versions: {versions_text(results)}.", "",
             "pread: the fused read as h5mdx's tasks run it (1 MiB of frames a pread, then "
             f"the kernel). mapped: each slab mapped {results.get('window_mib', 64):g} MiB at "
             "a time (page tables filled at once, MAP_POPULATE), each window unmapped "
             "before the next: what a task's memory would hold. mapped-kept: one "
             "`numpy.memmap` of the whole file per worker, kept between rounds (its pages "
             "stay mapped, and count in the worker's RSS). Ratios: medians of the rounds' "
             "ratios, to the floor and to pread. same: every way's RMSD equal bit for bit.",
             "",
             "| workers | N | atoms | floor frames/s | pread / floor | mapped / floor "
             "| mapped-kept / floor | mapped / pread | mapped-kept / pread | same |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['mode']} | {r['n']} | {r['select']} | {r['floor_fps']:,.0f} | "
                     f"{r['pread_vs_floor']:.2f} | {r['mapped_vs_floor']:.2f} | "
                     f"{r['mapped-kept_vs_floor']:.2f} | {r['mapped_vs_pread']:.2f} | "
                     f"{r['mapped-kept_vs_pread']:.2f} | {'yes' if r['equal'] else 'no'} |")
    if not results.get("complete", True):
        lines += ["", "Partial: the run stopped before every case was measured."]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--modes", default="threads,processes")
    p.add_argument("--selections", default="ca,all")
    p.add_argument("--step-mib", type=float, default=4.0,
                   help="MiB of the mapping the kernel runs on per call")
    p.add_argument("--window-mib", type=float, default=64.0,
                   help="MiB of the file the mapped way maps at a time")
    run_arguments(p, repeats=5)
    args = p.parse_args()
    path = build(os.path.join(args.data, f"scale-contig-{args.frames}.h5md"), args.frames,
                 "contig")
    results: dict[str, Any] = {**machine(), "frames": args.frames, "repeats": args.repeats,
                               "step_mib": args.step_mib, "window_mib": args.window_mib,
                               "rows": [], "complete": False}
    cases = [(mode, int(n), sel) for mode in args.modes.split(",")
             for n in args.workers.split(",") for sel in args.selections.split(",")]
    for i, (mode, n, sel) in enumerate(cases):
        select = ca_indices() if sel == "ca" else None
        row = {"mode": mode, "n": n, "select": sel,
               **measure(path, args.frames, mode, n, select, args.step_mib, args.repeats,
                        args.window_mib)}
        results["rows"].append(row)
        results["complete"] = i == len(cases) - 1
        print(f"{mode:9s} N={n:2d} {sel:3s} x the floor: pread {row['pread_vs_floor']:.2f}, "
              f"mapped {row['mapped_vs_floor']:.2f}, mapped-kept "
              f"{row['mapped-kept_vs_floor']:.2f}; same: {row['equal']}", flush=True)
        save_results("mapped", args.tag, results, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
