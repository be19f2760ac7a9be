"""The read floor: how fast plain h5py streams a trajectory's positions, in N processes.

What h5mdx's speed is measured against (``h5mdx example``, ``benchmarks/``): N reader
processes, each reading one contiguous slab of whole chunks with plain h5py into one buffer
of its own (:func:`floor_reader`, :func:`read_floor`), and raw reads of the same bytes
(``os.preadv`` of the chunks' byte ranges, no HDF5: the most the file system hands over).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator

import h5py
import numpy as np

from h5mdx._signals import interrupts_deferred

__all__ = ["POSITION", "floor_figures", "floor_reader", "floor_slabs", "frame_slabs",
           "read_floor"]

#: The positions the floor reads: those of the default particles group of h5mdx's writers.
POSITION = "particles/trajectory/position/value"


def _ignore_interrupts() -> None:
    """A reader process leaves Ctrl-C to its caller, which stops it (no tracebacks);
    where signal masks exist they are born deaf to it already (h5mdx._signals)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ping(_: int) -> int:
    time.sleep(0.05)  # keep the first workers busy so the pool starts all of them
    return os.getpid()


#: The read floor's buffer in a reader process, kept between its reads (see _read_slab).
_SLAB: dict[str, np.ndarray] = {}


def _read_slab(path: str, start: int, stop: int) -> int:
    """Read frames ``[start, stop)`` of the positions with plain h5py; bytes read.

    The fastest way plain h5py streams a dataset: whole chunks of about 4 MiB at a time
    (:func:`h5mdx.engine.chunking.read_step`, the pieces RMSD tasks read) into one buffer
    this process keeps. Each read lands in memory that is mapped and in the CPU cache,
    so what is timed is h5py reading the file. One call into a new array would time the
    kernel handing over a fresh page every 4 KiB as well; on the 2-core VM that made the
    floor anything from 11,000 to 121,000 frames/s for the same file, depending on what
    the machine had done before. One call into a large buffer kept between reads ran
    42,000-187,000 frames/s (``benchmarks/bench_scale.py``; docs/performance.md, "Where
    the time goes").
    """
    from h5mdx.engine.chunking import read_step

    with h5py.File(path, "r") as f:
        d = f[POSITION]
        frame_bytes = d.dtype.itemsize * math.prod(d.shape[1:])
        step = read_step(frame_bytes, d.chunks[0] if d.chunks else 1)
        buf = _SLAB.get("buffer")
        if buf is None or buf.shape != (step, *d.shape[1:]) or buf.dtype != d.dtype:
            buf = _SLAB["buffer"] = np.empty((step, *d.shape[1:]), dtype=d.dtype)
        for a in range(start, stop, step):
            b = min(stop, a + step)
            d.read_direct(buf, np.s_[a:b], np.s_[0:b - a])
    return (stop - start) * frame_bytes


#: The most bytes of one raw read (a contiguous slab is read in pieces of this size).
_RAW_PIECE = 64 * 2**20


def _read_spans(path: str, spans: list[tuple[int, int]]) -> int:
    """Read the byte ``spans`` (offset, length) of ``path`` with ``os.preadv`` into one
    buffer this process keeps, no HDF5: what the file system hands over at best.

    Each span is read to its last byte, at most ``_RAW_PIECE`` bytes at a time: one
    ``preadv`` hands over what it can (Linux at most 2 GiB less 4 KiB, nothing past the
    end of the file), and the bytes it did not were counted as read, and a contiguous
    slab took a buffer of its size.
    """
    need = min(max((n for _, n in spans), default=0), _RAW_PIECE)
    buf = _SLAB.get("raw")
    if buf is None or buf.size < need:
        buf = _SLAB["raw"] = np.empty(need, dtype=np.uint8)
    view = memoryview(buf)  # type: ignore[arg-type]
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, n in spans:
            done = 0
            while done < n:
                got = os.preadv(fd, [view[:min(n - done, buf.size)]], offset + done)
                if got == 0:
                    raise OSError(f"{path}: {n - done} bytes of the positions at byte "
                                  f"{offset + done} lie past the end of the file (truncated?)")
                done += got
    finally:
        os.close(fd)
    return sum(n for _, n in spans)


def _byte_spans(path: str, slabs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Where each slab's frames lie in ``path``: (offset, length) of every chunk of it
    (the example's positions are stored uncompressed), or one run if contiguous."""
    from h5mdx.format.chunk_index import index_all_chunks

    with h5py.File(path, "r") as f:
        d = f[POSITION]
        frame_bytes = d.dtype.itemsize * math.prod(d.shape[1:])
        if d.chunks is None:
            at = int(d.id.get_offset())
            return [[(at + a * frame_bytes, (b - a) * frame_bytes)] for a, b in slabs]
        n_frames, rows = d.shape[0], d.chunks[0]
        # HDF5's index in one pass (get_chunk_info(i) walks it again for every i: hours
        # for 100,000 one-frame chunks), else chunk by chunk on HDF5 before 1.12.3
        index = index_all_chunks(d)
        if index is None:
            index = {tuple(int(x) for x in c.chunk_offset): (int(c.byte_offset), int(c.size), 0)
                     for c in (d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks()))}
    # chunks of whole frames: the last one holds fewer frames than it stores
    located = sorted((coord[0], at, min(size, (min(n_frames, coord[0] + rows) - coord[0])
                                         * frame_bytes))
                     for coord, (at, size, _mask) in index.items())
    return [[(at, n) for row, at, n in located if a <= row < b] for a, b in slabs]


def frame_slabs(n_frames: int, chunk: int, workers: int) -> list[tuple[int, int]]:
    """``workers`` contiguous frame ranges, split at chunk boundaries.

    Parameters
    ----------
    n_frames : int
        Frames in all.
    chunk : int
        Frames per chunk (1: any frame is a boundary).
    workers : int
        Ranges wanted; fewer come back where there are fewer chunks.

    Returns
    -------
    list of (int, int)
        ``(start, stop)`` of each range, in order, none empty.

    Examples
    --------
    >>> frame_slabs(250, 100, 2)
    [(0, 200), (200, 250)]
    """
    n_chunks = math.ceil(n_frames / chunk)
    edges = [min(n_frames, chunk * round(k * n_chunks / workers)) for k in range(workers + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def floor_slabs(path: str, workers: int) -> list[tuple[int, int]]:
    """The floor's slabs of the positions of ``path``: one per reading process.

    Fewer than ``workers`` where the positions have fewer chunks: the processes that
    read are as many as the slabs (the figures of :func:`floor_figures` count them).

    Chunked: split at chunk boundaries, as the RMSD's blocks are. Contiguous: any frame
    is a boundary (a contiguous dataset is not one chunk of all its frames: read as one,
    a single process read the whole file at every N, and the floor of a contiguous
    layout stayed flat from 1 to 16 cores).
    """
    with h5py.File(path, "r") as f:
        d = f.get(POSITION)
        if not isinstance(d, h5py.Dataset) or d.ndim != 3:
            # h5py's KeyError ('component not found') from deep in h5o
            from h5mdx.errors import H5MDFormatError

            raise H5MDFormatError(path, f"/{POSITION}", "the read floor reads the "
                                  "positions of /particles/trajectory, as h5mdx's writers "
                                  "name them: (time, atom, spatial) positions are not here")
        n_frames, chunk = d.shape[0], d.chunks[0] if d.chunks else 1
    # one process at least, as floor_reader starts (read_floor(workers=0) divided by 0)
    return frame_slabs(n_frames, chunk, max(1, workers))


@contextlib.contextmanager
def floor_reader(path: str | os.PathLike[str], workers: int = 1
                 ) -> Iterator[Callable[..., tuple[float, int]]]:
    """Inside the block, a function that reads the positions of ``path`` once with plain h5py.

    The function returns the seconds the read took and the bytes read. Each of
    ``workers`` processes (started on entry, not timed) reads one contiguous slab of
    whole chunks, as the RMSD's workers do; one process reads them all where
    ``workers`` is 1, not this one, whose memory and threads are those of whatever else
    it runs. Each process reads its slab a few MiB of whole chunks at a time into one
    buffer of its own (``_read_slab``): h5py's best way to stream a file. Kept
    open, the same readers can be timed between other runs, so that the floor and what
    is compared with it see the same spell of a shared machine
    (``benchmarks/bench_scale.py``).

    Parameters
    ----------
    path : path-like
        An H5MD file with ``particles/trajectory/position``.
    workers : int, default 1
        Reading processes.

    Yields
    ------
    callable
        ``read(raw=False) -> (seconds, bytes)``; ``raw=True`` reads the same bytes with
        ``os.preadv``, no HDF5 (the chunks' byte ranges located once, at the first such
        read, not timed): the most the file system hands over, the ceiling above h5py's
        floor.
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    path = os.fspath(path)
    workers = max(1, workers)
    slabs = floor_slabs(path, workers)
    spans: list[list[tuple[int, int]]] = []  # located at the first raw read, not before
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                             initializer=_ignore_interrupts) as pool:
        with interrupts_deferred():  # the readers are born deaf to Ctrl-C, even importing
            list(pool.map(_ping, range(workers)))

        def read(raw: bool = False) -> tuple[float, int]:
            t0 = time.perf_counter()
            if raw:
                if not spans:
                    spans.extend(_byte_spans(path, slabs))
                    t0 = time.perf_counter()
                nbytes = sum(pool.map(_read_spans, [path] * len(spans), spans))
            else:
                nbytes = sum(pool.map(_read_slab, *zip(*((path, a, b) for a, b in slabs),
                                                       strict=True)))
            return time.perf_counter() - t0, nbytes

        yield read


def read_floor(path: str | os.PathLike[str], workers: int = 1, repeats: int = 2
               ) -> dict[str, float]:
    """How fast this machine reads the positions of ``path`` with plain h5py.

    One untimed read warms the page cache; then the best of ``repeats`` reads
    (:func:`floor_reader`: each of ``workers`` processes, started beforehand and not
    timed, reads one contiguous slab of whole chunks, as the RMSD's workers do).

    Parameters
    ----------
    path, workers
        As for :func:`floor_reader`.
    repeats : int, default 2
        Timed reads.

    Returns
    -------
    dict
        ``workers, frames, bytes, seconds, frames_per_s, gb_per_s`` (GB = 1e9 bytes).
    """
    slabs = floor_slabs(os.fspath(path), workers)  # one a reading process, all the frames
    with floor_reader(path, workers) as read:
        times = [read() for _ in range(repeats + 1)][1:]
    seconds, nbytes = min(times)
    return floor_figures(len(slabs), slabs[-1][1] if slabs else 0, nbytes, seconds)


def floor_figures(workers: int, n_frames: int, nbytes: int, seconds: float
                  ) -> dict[str, float]:
    """:func:`read_floor`'s dict for a read of ``n_frames`` frames (``nbytes``) in ``seconds``.

    Parameters
    ----------
    workers : int
        Processes that read (those with a slab, :func:`floor_slabs`).
    n_frames, nbytes : int
        Frames and bytes read.
    seconds : float
        Time the read took.

    Returns
    -------
    dict
        ``workers, frames, bytes, seconds, frames_per_s, gb_per_s`` (GB = 1e9 bytes).
    """
    return {"workers": float(max(1, workers)), "frames": float(n_frames),
            "bytes": float(nbytes), "seconds": seconds,
            "frames_per_s": n_frames / seconds, "gb_per_s": nbytes / seconds / 1e9}

