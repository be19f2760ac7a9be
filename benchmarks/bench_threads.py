"""Where the threaded scheduler's time goes on many cores: one process, T threads.

``bench_scale`` on the 16-core machine found dask's threaded scheduler (one process, T
threads) stopping at ~340,000 frames/s from T=4 on, where T single-threaded worker
processes reached 590,000-720,000. This benchmark takes the read apart, per layout
(``--layouts``: c100, c1, contig), in paired rounds (every variant once per round, the
order rotating), each against the T-process h5py read floor of its own round:

``floor``
    T processes read their slab with h5py (:func:`h5mdx.floor.floor_reader`).
``pread, processes`` / ``pread+qcp, processes``
    T processes read their spans' bytes with ``os.preadv`` (100 frames a read, runs of
    adjacent chunks located from the chunk index), each into one buffer it keeps: the
    operating system's floor; then with the QCP kernel (C-alpha) on each span as it
    arrives: what a worker process does with the least Python around it.
``mmap+qcp, processes (mapped per pass)``
    The kernel on the spans in place, from a mapping of the file each process makes per
    pass (no copy; the pages fault in as the kernel first touches them).
``pread, threads, one fd`` / ``fd per thread`` / ``pread+qcp, threads, one fd``
    The plain reads from T threads of this process, sharing one file descriptor (what
    h5mdx's direct reader does) or each with its own; then with the kernel.
``h5mdx, threads``
    ``h5mdx.rmsd`` (C-alpha, lazy open) on dask's threaded scheduler with T threads, as it
    is: each task reads and computes in one compiled call (``fused``) where it does not
    read ahead. Then fused whatever T, reading 256 KiB, 1 MiB (the default) or 4 MiB at
    a time; and ``not fused`` (reads from Python, as before the fused kernel): as it was
    (reads grow past 4 threads, no read-ahead there), with 4 MiB reads whatever T,
    16 MiB reads whatever T, read-ahead forced on, and read-ahead off.

Run::

    python benchmarks/bench_threads.py [--frames 50000] [--threads 1,2,4,8,16]
                                       [--layouts c100,c1,contig]

Writes ``benchmarks/results/threads<tag>.{json,md}`` after every T. Needs numpy, h5py,
numba, dask, xarray and h5mdx; no MDAnalysis.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import mmap
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scale import (  # noqa: E402
    DSET,
    HERE,
    N_ATOMS,
    build,
    ca_indices,
    cores_text,
    h5mdx_run,
    interleaved,
    machine,
    round_ratios,
    save_results,
)

from h5mdx.analysis.rmsd import FUSED_READ_ENV  # noqa: E402
from h5mdx.engine.frames import READ_AHEAD_ENV  # noqa: E402
from h5mdx.floor import frame_slabs  # noqa: E402

# ------------------------------------------------------------------- plain reads
_LOCAL = threading.local()
#: Frames per plain read: one 100-frame chunk, or as many frames of the other layouts
SPAN_FRAMES = 100


def span_table(path: str, frames: int = SPAN_FRAMES) -> np.ndarray:
    """``(offset, bytes, frames)`` of each read of the positions, in frame order.

    Contiguous: runs of ``frames`` frames. Chunked (whole frames per chunk): each chunk's
    frames inside the dataset (an edge chunk is stored whole, past the last frame), and
    chunks adjacent in the file merged up to ``frames`` frames a read (one-frame chunks:
    one read of 100 frames where the file holds them in order).
    """
    with h5py.File(path, "r") as f:
        d = f[DSET]
        n, frame = d.shape[0], d.dtype.itemsize * int(np.prod(d.shape[1:]))
        if d.chunks is None:
            offset = d.id.get_offset()
            return np.array([(offset + a * frame, (min(n, a + frames) - a) * frame,
                              min(n, a + frames) - a) for a in range(0, n, frames)],
                            dtype=np.int64)
        info: list[Any] = []
        try:  # one pass over the chunk index (HDF5 >= 1.12.3)
            d.id.chunk_iter(info.append)
        except (AttributeError, RuntimeError, NotImplementedError):
            # by index: each call walks the index again, fine for the tests' small files
            info = [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())]
        info.sort(key=lambda c: c.chunk_offset[0])
    rows: list[list[int]] = []
    for c in info:
        m = min(d.chunks[0], n - c.chunk_offset[0])
        last = rows[-1] if rows else None
        if last and last[0] + last[1] == c.byte_offset and last[2] + m <= frames:
            last[1] += m * frame
            last[2] += m
        else:
            rows.append([c.byte_offset, m * frame, m])
    return np.array(rows, dtype=np.int64)


def _buffer(nbytes: int) -> np.ndarray:
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _LOCAL.buf = np.empty(nbytes, dtype=np.uint8)
    return buf


def read_spans(path: str, table: np.ndarray, fd: int | None = None,
               kernel: Any = None) -> int:
    """Read the spans of ``table`` with ``os.preadv`` into one buffer of this thread;
    with ``kernel``, run it on each span's frames. ``fd``: shared; else one of this thread."""
    if fd is None:
        fd = getattr(_LOCAL, "fd", None)
        if fd is None or getattr(_LOCAL, "path", None) != path:
            fd = _LOCAL.fd = os.open(path, os.O_RDONLY)
            _LOCAL.path = path
    buf = _buffer(int(table[:, 1].max()))
    for off, size, m in table:
        view = memoryview(buf)[:size]
        done = 0
        while done < size:
            done += os.preadv(fd, [view[done:]], int(off) + done)
        if kernel is not None:
            kernel(buf[:size].view(np.float32).reshape(int(m), N_ATOMS, 3))
    return int(table[:, 1].sum())


def map_spans(path: str, table: np.ndarray, kernel: Any) -> int:
    """The kernel on each span's frames read in place from a mapping of the file (made for
    this call: its pages fault in as the kernel first touches them), no copy."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mm:
        data = np.frombuffer(mm, dtype=np.uint8)
        try:
            for off, size, m in table:
                kernel(data[off:off + size].view(np.float32).reshape(int(m), N_ATOMS, 3))
        finally:
            del data  # the mapping closes only once no array views it
    return int(table[:, 1].sum())


def _qcp_kernel(path: str) -> Callable[[np.ndarray], np.ndarray]:
    from h5mdx.analysis.qcp import prepare

    ca = ca_indices()
    with h5py.File(path, "r") as f:
        ref = np.asarray(f[DSET][0], dtype=np.float64)[ca]
    kernel = prepare(ref - ref.mean(axis=0), atoms=ca, reference_centered=True,
                     kernel="numba")
    kernel(np.zeros((1, N_ATOMS, 3), dtype=np.float32))  # compiled before timing
    return kernel


_TABLES: dict[str, np.ndarray] = {}
_KERNELS: dict[str, Any] = {}


def _process_read(path: str, lo: int, hi: int, how: str = "pread") -> int:
    """One process's part of a plain-read variant (``pread``, ``pread+qcp``, ``mmap+qcp``)."""
    table = _TABLES.get(path)
    if table is None:  # once per process, outside the timed reads after the first
        table = _TABLES[path] = span_table(path)
    kernel = None
    if how != "pread":
        kernel = _KERNELS.get(path)
        if kernel is None:
            kernel = _KERNELS[path] = _qcp_kernel(path)
    if how == "mmap+qcp":
        return map_spans(path, table[lo:hi], kernel)
    return read_spans(path, table[lo:hi], None, kernel)


@contextlib.contextmanager
def pread_timers(path: str, n: int) -> Iterator[dict[str, Callable[[], float]]]:
    """Timers of the plain-read variants with ``n`` threads or processes."""
    table = span_table(path)
    parts = frame_slabs(len(table), 1, n)  # the floor's split, in spans instead of frames
    kernel = _qcp_kernel(path)
    shared = os.open(path, os.O_RDONLY)
    with cf.ThreadPoolExecutor(n) as threads, cf.ProcessPoolExecutor(
            n, mp_context=mp.get_context("spawn")) as procs:
        for how in ("pread", "pread+qcp"):  # started, the table read, the kernel compiled
            list(procs.map(_process_read, [path] * n, [0] * n, [1] * n, [how] * n))

        def on_threads(fd: int | None, k: Any) -> Callable[[], float]:
            def timer() -> float:
                t0 = time.perf_counter()
                futures = [threads.submit(read_spans, path, table[a:b], fd, k)
                           for a, b in parts]
                for fut in futures:
                    fut.result()
                return time.perf_counter() - t0
            return timer

        def on_processes(how: str) -> Callable[[], float]:
            def timer() -> float:
                t0 = time.perf_counter()
                list(procs.map(_process_read, [path] * len(parts), *zip(*parts, strict=True),
                               [how] * len(parts)))
                return time.perf_counter() - t0
            return timer

        try:
            yield {"pread, processes": on_processes("pread"),
                   "pread+qcp, processes": on_processes("pread+qcp"),
                   "mmap+qcp, processes (mapped per pass)": on_processes("mmap+qcp"),
                   "pread, threads, one fd": on_threads(shared, None),
                   "pread, threads, fd per thread": on_threads(None, None),
                   "pread+qcp, threads, one fd": on_threads(shared, kernel)}
        finally:
            os.close(shared)


# ------------------------------------------------------------------------- h5mdx
def h5mdx_timers(path: str, n: int) -> dict[str, Callable[[], float]]:
    """Timers of ``h5mdx.rmsd`` on the threaded scheduler, as it is and patched."""
    import dask

    import h5mdx.analysis.rmsd as rmsd

    run = h5mdx_run(path, "lazy", ca_indices())

    def timed(patch: Callable[[], Any] = contextlib.nullcontext) -> Callable[[], float]:
        def timer() -> float:
            with dask.config.set(scheduler="threads", num_workers=n), patch():
                t0 = time.perf_counter()
                run()
                return time.perf_counter() - t0
        return timer

    def env(**values: str) -> Any:
        return mock.patch.dict(os.environ, values)

    def unfused(**values: str) -> Any:  # the reads in Python, as before the fused kernel
        return env(**{FUSED_READ_ENV: "0"}, **values)

    def fused(nbytes: int) -> Any:
        @contextlib.contextmanager
        def patch() -> Iterator[None]:
            with env(**{FUSED_READ_ENV: "1"}), mock.patch.object(rmsd, "FUSED_READ_BYTES",
                                                                  nbytes):
                yield
        return patch

    # GIL_THREADS out of reach: the reads of 1-4 threads whatever the threads
    return {"h5mdx, threads": timed(),
            "h5mdx, threads, fused, 256 KiB": timed(fused(2**18)),
            "h5mdx, threads, fused, 1 MiB": timed(fused(2**20)),
            "h5mdx, threads, fused, 4 MiB": timed(fused(2**22)),
            "h5mdx, threads, not fused": timed(unfused),
            "h5mdx, threads, not fused, 4 MiB reads": timed(
                lambda: _stack(unfused(), mock.patch.object(rmsd, "GIL_THREADS", 10**6))),
            "h5mdx, threads, not fused, 16 MiB reads": timed(
                lambda: _stack(unfused(), mock.patch.multiple(
                    rmsd, GIL_THREADS=10**6, READ_STEP_BYTES=16 * 2**20))),
            "h5mdx, threads, not fused, read-ahead": timed(
                lambda: unfused(**{READ_AHEAD_ENV: "2"})),
            "h5mdx, threads, not fused, no read-ahead": timed(
                lambda: unfused(**{READ_AHEAD_ENV: "0"}))}


@contextlib.contextmanager
def _stack(*patches: Any) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


# ------------------------------------------------------------------------ the run
def run_n(path: str, n: int, repeats: int, frames: int) -> dict[str, Any]:
    from h5mdx.floor import floor_reader

    with floor_reader(path, n) as floor, pread_timers(path, n) as plain:
        timers: dict[str, Callable[[], float]] = {"floor": lambda: floor()[0]}
        timers.update(plain)
        timers.update(h5mdx_timers(path, n))
        times = interleaved(timers, repeats, rotate=True)
    rows = {}
    for name, ts in times.items():
        ratios = round_ratios(times["floor"], ts)
        rows[name] = {"times": ts, "frames_per_s": frames / statistics.median(ts),
                      "vs_floor": statistics.median(ratios)}
        print(f"  T={n:2d} {name:40s} {rows[name]['frames_per_s']:12,.0f} frames/s "
              f"{rows[name]['vs_floor']:5.2f}x the floor", flush=True)
    return rows


_LAYOUT_NAMES = {"c100": "(100, n, 3) chunks", "c1": "(1, n, 3) chunks",
                 "contig": "contiguous"}


def render(results: dict[str, Any]) -> str:
    # results of before the layouts (threads-16core.json): one c100 grid at the top
    layouts = results.get("layouts") or {"c100": {"runs": results["runs"]}}
    out = ["# One process, T threads: where the threaded RMSD's time goes", "",
           f"Machine: {results['platform']}, {cores_text(results)}; "
           f"{results['frames']:,} frames x {N_ATOMS} atoms, warm page "
           f"cache; C-alpha (214 atoms); medians of {results['repeats']} paired rounds. "
           f"Versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}.", "",
           "frames/s (ratio to the T-process h5py read floor of the same rounds).", ""]
    for layout, entry in layouts.items():
        runs = entry["runs"]
        if not runs:
            continue
        ns = sorted(int(n) for n in runs)
        names = list(runs[str(ns[0])])
        out += [f"## {layout}: {_LAYOUT_NAMES.get(layout, layout)}", "",
                "| variant | " + " | ".join(f"T={n}" for n in ns) + " |",
                "|---|" + "---|" * len(ns)]
        for name in names:
            cells = []
            for n in ns:
                r = runs[str(n)].get(name)
                cells.append("" if r is None else
                             f"{r['frames_per_s']:,.0f} ({r['vs_floor']:.2f})")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("")
    if results.get("partial"):
        out += ["Partial: the run stopped before every layout and T was measured.", ""]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=50_000)
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--layouts", default="c100", help="c100, c1, contig (comma-separated)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data", default=os.path.join(HERE, "data"))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ns = [n for n in (int(x) for x in args.threads.split(",")) if n <= (cores or 1)]
    layouts = args.layouts.split(",")
    results: dict[str, Any] = {**machine(), "frames": args.frames, "repeats": args.repeats,
                               "switch_interval": sys.getswitchinterval(),
                               "layouts": {name: {"runs": {}} for name in layouts},
                               "partial": True}
    for layout in layouts:
        path = build(os.path.join(args.data, f"scale-{layout}-{args.frames}.h5md"),
                     args.frames, layout)
        print(f"{layout}: {path}", flush=True)
        for n in ns:
            results["layouts"][layout]["runs"][str(n)] = run_n(path, n, args.repeats,
                                                               args.frames)
            results["partial"] = (layout, n) != (layouts[-1], ns[-1])
            save_results("threads", args.tag, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
