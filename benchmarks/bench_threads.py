"""Where the threaded scheduler's time goes on many cores: one process, T threads.

``bench_scale`` on the 16-core machine found dask's threaded scheduler (one process, T
threads) stopping at ~340,000 frames/s from T=4 on, where T single-threaded worker
processes reached 590,000-720,000. This benchmark takes the threaded read apart on
the (100, n, 3) layout, in paired rounds (every variant once per round, the order
rotating), each against the T-process h5py read floor of its own round:

``floor``
    T processes read their slab of whole chunks with h5py (:func:`h5mdx.examples.floor_reader`).
``pread, processes``
    T processes read their chunks' bytes with ``os.preadv`` (one call per 4 MB chunk,
    from the chunk index), each into one buffer it keeps: the operating system's floor.
``pread, threads, one fd`` / ``fd per thread``
    The same reads from T threads of this process, sharing one file descriptor (what
    h5mdx's direct reader does) or each with its own.
``pread+qcp, threads, ...``
    As above, and the QCP kernel (C-alpha) on each chunk as it arrives: the least Python
    per chunk a threaded RMSD can have (two calls that release the GIL).
``h5mdx, threads``
    ``h5mdx.rmsd`` (C-alpha, lazy open) on dask's threaded scheduler with T threads; then the
    same with each thread reading through a file descriptor of its own, with 16 MiB
    reads instead of 4 MiB (a quarter of the Python per frame), and with read-ahead off.

Run::

    python benchmarks/bench_threads.py [--frames 50000] [--threads 1,2,4,8,16]

Writes ``benchmarks/results/threads<tag>.{json,md}``. Needs numpy, h5py, numba, dask,
xarray and h5mdx; no MDAnalysis.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scale import (  # noqa: E402
    DSET,
    HERE,
    N_ATOMS,
    build,
    ca_indices,
    h5mdx_run,
    interleaved,
    machine,
    round_ratios,
    save_results,
)

# ------------------------------------------------------------------- plain reads
_LOCAL = threading.local()


def chunk_table(path: str) -> np.ndarray:
    """``(offset, bytes)`` of every chunk of the positions, in frame order: the bytes of
    its frames inside the dataset (an edge chunk is stored whole, past the last frame)."""
    with h5py.File(path, "r") as f:
        d = f[DSET]
        n_frames, frame = d.shape[0], d.dtype.itemsize * int(np.prod(d.shape[1:]))
        info = [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())]
    info.sort(key=lambda c: c.chunk_offset[0])
    return np.array([(c.byte_offset, min(c.size, (n_frames - c.chunk_offset[0]) * frame))
                     for c in info], dtype=np.int64)


def _slices(n: int, parts: int) -> list[tuple[int, int]]:
    edges = [round(k * n / parts) for k in range(parts + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _buffer(nbytes: int) -> np.ndarray:
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _LOCAL.buf = np.empty(nbytes, dtype=np.uint8)
    return buf


def read_chunks(path: str, table: np.ndarray, fd: int | None = None,
                kernel: Any = None) -> int:
    """Read the chunks of ``table`` with ``os.preadv`` into one buffer of this thread;
    with ``kernel``, run it on each chunk's frames. ``fd``: shared; else one of this thread."""
    own = fd is None
    if own:
        fd = getattr(_LOCAL, "fd", None)
        if fd is None or getattr(_LOCAL, "path", None) != path:
            fd = _LOCAL.fd = os.open(path, os.O_RDONLY)
            _LOCAL.path = path
    buf = _buffer(int(table[:, 1].max()))
    frame = N_ATOMS * 3 * 4
    for off, size in table:
        view = memoryview(buf)[:size]
        done = 0
        while done < size:
            done += os.preadv(fd, [view[done:]], int(off) + done)
        if kernel is not None:
            kernel(buf[:size].view(np.float32).reshape(size // frame, N_ATOMS, 3))
    return int(table[:, 1].sum())


def _qcp_kernel(path: str) -> Callable[[np.ndarray], np.ndarray]:
    from h5mdx.analysis.qcp import prepare

    ca = ca_indices()
    with h5py.File(path, "r") as f:
        ref = np.asarray(f[DSET][0], dtype=np.float64)[ca]
    return prepare(ref - ref.mean(axis=0), atoms=ca, reference_centered=True,
                   kernel="numba")


_TABLES: dict[str, np.ndarray] = {}


def _process_read(path: str, lo: int, hi: int) -> int:
    table = _TABLES.get(path)
    if table is None:  # once per process, outside the timed reads after the first
        table = _TABLES[path] = chunk_table(path)
    return read_chunks(path, table[lo:hi])


@contextlib.contextmanager
def pread_timers(path: str, n: int) -> Iterator[dict[str, Callable[[], float]]]:
    """Timers of the plain-read variants with ``n`` threads or processes."""
    table = chunk_table(path)
    parts = _slices(len(table), n)
    kernel = _qcp_kernel(path)
    kernel(np.zeros((1, N_ATOMS, 3), dtype=np.float32))  # compiled before timing
    shared = os.open(path, os.O_RDONLY)
    with cf.ThreadPoolExecutor(n) as threads, cf.ProcessPoolExecutor(
            n, mp_context=mp.get_context("spawn")) as procs:
        list(procs.map(_process_read, [path] * n, [0] * n, [1] * n))  # started, warm

        def on_threads(fd: int | None, k: Any) -> Callable[[], float]:
            def timer() -> float:
                t0 = time.perf_counter()
                futures = [threads.submit(read_chunks, path, table[a:b], fd, k)
                           for a, b in parts]
                for fut in futures:
                    fut.result()
                return time.perf_counter() - t0
            return timer

        def on_processes() -> float:
            t0 = time.perf_counter()
            list(procs.map(_process_read, [path] * len(parts), *zip(*parts, strict=True)))
            return time.perf_counter() - t0

        try:
            yield {"pread, processes": on_processes,
                   "pread, threads, one fd": on_threads(shared, None),
                   "pread, threads, fd per thread": on_threads(None, None),
                   "pread+qcp, threads, one fd": on_threads(shared, kernel),
                   "pread+qcp, threads, fd per thread": on_threads(None, kernel)}
        finally:
            os.close(shared)


# ------------------------------------------------------------------------- h5mdx
@contextlib.contextmanager
def _fd_per_thread() -> Iterator[None]:
    """The direct reader opens the file once per thread instead of once per process."""
    from h5mdx.format.direct import DirectReader

    original = DirectReader._descriptor

    def descriptor(self: Any) -> int:
        fds = _LOCAL.__dict__.setdefault("fds", {})
        fd = fds.get(self.filename)
        if fd is None:
            fd = fds[self.filename] = os.open(self.filename, os.O_RDONLY)
        return fd

    DirectReader._descriptor = descriptor
    try:
        yield
    finally:
        DirectReader._descriptor = original


@contextlib.contextmanager
def _read_step(nbytes: int) -> Iterator[None]:
    import h5mdx.analysis.rmsd as rmsd

    original = rmsd.READ_STEP_BYTES
    rmsd.READ_STEP_BYTES = nbytes
    try:
        yield
    finally:
        rmsd.READ_STEP_BYTES = original


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def h5mdx_timers(path: str, n: int) -> dict[str, Callable[[], float]]:
    """Timers of ``h5mdx.rmsd`` on the threaded scheduler, as it is and patched."""
    import dask

    run = h5mdx_run(path, "lazy", ca_indices())

    def timed(patch: Callable[[], Any] = contextlib.nullcontext) -> Callable[[], float]:
        def timer() -> float:
            with dask.config.set(scheduler="threads", num_workers=n), patch():
                t0 = time.perf_counter()
                run()
                return time.perf_counter() - t0
        return timer

    return {"h5mdx, threads": timed(),
            "h5mdx, threads, fd per thread": timed(_fd_per_thread),
            "h5mdx, threads, 16 MiB reads": timed(lambda: _read_step(16 * 2**20)),
            "h5mdx, threads, no read-ahead": timed(lambda: _env("H5MDX_READ_AHEAD", "0"))}


# ------------------------------------------------------------------------ the run
def run_n(path: str, n: int, repeats: int, frames: int) -> dict[str, Any]:
    from h5mdx.examples import floor_reader

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
        print(f"  T={n:2d} {name:36s} {rows[name]['frames_per_s']:12,.0f} frames/s "
              f"{rows[name]['vs_floor']:5.2f}x the floor", flush=True)
    return rows


def render(results: dict[str, Any]) -> str:
    ns = sorted(int(n) for n in results["runs"])
    names = list(results["runs"][str(ns[0])])
    out = ["# One process, T threads: where the threaded RMSD's time goes", "",
           f"Machine: {results['platform']}, {results['cores']} cores; "
           f"{results['frames']:,} frames x {N_ATOMS} atoms, (100, n, 3) chunks, warm page "
           f"cache; C-alpha (214 atoms); medians of {results['repeats']} paired rounds. "
           f"Versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}.", "",
           "frames/s (ratio to the T-process h5py read floor of the same rounds).", "",
           "| variant | " + " | ".join(f"T={n}" for n in ns) + " |",
           "|---|" + "---|" * len(ns)]
    for name in names:
        cells = []
        for n in ns:
            r = results["runs"][str(n)].get(name)
            cells.append("" if r is None else
                         f"{r['frames_per_s']:,.0f} ({r['vs_floor']:.2f})")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    if results.get("partial"):
        out += ["", "Partial: the run stopped before every T was measured."]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=50_000)
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data", default=os.path.join(HERE, "data"))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ns = [n for n in (int(x) for x in args.threads.split(",")) if n <= (cores or 1)]
    path = build(os.path.join(args.data, f"scale-c100-{args.frames}.h5md"), args.frames, "c100")
    results: dict[str, Any] = {**machine(), "frames": args.frames, "repeats": args.repeats,
                               "switch_interval": sys.getswitchinterval(), "runs": {},
                               "partial": True}
    for n in ns:
        results["runs"][str(n)] = run_n(path, n, args.repeats, args.frames)
        results["partial"] = n != ns[-1]
        save_results("threads", args.tag, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
