"""Whole rows of a dataset as views of the file's own pages: a mapping, no copy.

A read (``os.pread``, h5py) copies each byte from the operating system's page cache
into a buffer, and a kernel that then runs on the buffer goes over the bytes a second
time. A mapping of the file (``mmap``) lets the kernel run on the page cache's pages
themselves: one pass, and only over the cache lines it touches (for adk's C-alpha atoms,
about a third of each frame). :func:`map_rows` maps the runs of whole rows that
:meth:`h5mdx.format.direct.DirectReader.row_runs` locates, a window of
:data:`WINDOW_BYTES` at a time, with the page tables filled as each window is made
(``MAP_POPULATE`` on Linux: no page fault inside the kernel), and unmaps each window
before the next, so a worker holds no more than one window whatever the file's length.

What a mapping risks that a read does not: a file truncated by another program while a
window of it is mapped kills the process (``SIGBUS``) when the kernel touches a page
past the new end, where a read returns an error to report. Files replaced by h5mdx's
writers are never truncated in place (they write a new file and rename it over the
old), and the size of the file is checked as each window is made. Callers make the
mapped path a choice (``H5MDX_MAPPED_READ`` in :mod:`h5mdx.analysis.blocks`).

This module knows numpy and the standard library only.
"""

from __future__ import annotations

import math
import mmap
import os
import time
from collections.abc import Callable

import numpy as np

__all__ = ["MAP_POPULATE", "WINDOW_BYTES", "available", "map_rows"]

#: Linux fills a mapping's page tables as the mapping is made; 0 elsewhere (the pages
#: are then mapped as the kernel first touches them).
MAP_POPULATE: int = getattr(mmap, "MAP_POPULATE", 0)

#: Bytes of whole rows mapped at a time (at least one row): 64 MiB, as measured on 2
#: cores (``benchmarks/bench_mapped.py``, ``results/mapped-2core.md``: 1.06-1.32x the
#: fused ``pread``, 0.68-1.06x in a second run) and 16 (``results/mapped-16core.md``:
#: 1.08-1.89x). Each mapping and unmapping costs a few µs of system calls and, on
#: unmapping, the flush of the mapping's entries from the TLBs of the cores that ran
#: this process.
WINDOW_BYTES = 64 << 20


def available() -> bool:
    """Whether files can be mapped here (POSIX ``mmap`` with ``MAP_SHARED``)."""
    return hasattr(mmap, "MAP_SHARED") and hasattr(mmap, "PROT_READ")


def map_rows(fd: int, offsets: np.ndarray, nbytes: np.ndarray, row_shape: tuple[int, ...],
             dtype: np.dtype, each: Callable[[np.ndarray], None], *,
             window_bytes: int | None = None, filename: str | None = None) -> float:
    """Call ``each`` on the rows of the runs, a mapped window at a time, in order.

    Parameters
    ----------
    fd : int
        A file descriptor open for reading.
    offsets, nbytes : numpy.ndarray of int
        Byte offset and length of each run of whole rows (as
        :meth:`h5mdx.format.direct.DirectReader.row_runs` gives them).
    row_shape : tuple of int
        The shape of one row (every axis but the first).
    dtype : numpy.dtype
        The stored type, native byte order.
    each : callable
        ``each(rows)`` with a read-only ``(k, *row_shape)`` view of the next ``k`` rows.
        The view is valid only during the call: it must not keep it (or a view of it).
    window_bytes : int, optional
        Bytes of rows mapped at a time (at least one row); default :data:`WINDOW_BYTES`.
    filename : str, optional
        The file's name, for errors.

    Returns
    -------
    float
        Seconds spent making the mappings (filling their page tables, which reads the
        pages from disk that are not in the page cache), apart from the calls of ``each``.

    Raises
    ------
    OSError
        If a run lies past the end of the file, or the mapping fails; the rows before it
        have been passed to ``each``.
    ValueError
        If a run is not a whole number of rows.
    """
    dtype = np.dtype(dtype)
    per_row = math.prod(row_shape)
    row = dtype.itemsize * per_row
    if row <= 0:
        raise ValueError(f"rows of shape {row_shape} and {dtype} hold no bytes")
    window = max(1, int(WINDOW_BYTES if window_bytes is None else window_bytes) // row)
    name = filename or f"file descriptor {fd}"
    spent = 0.0
    for offset, size in zip(np.asarray(offsets).tolist(), np.asarray(nbytes).tolist(),
                            strict=True):
        if size % row:
            raise ValueError(f"{name}: a run of {size} bytes at {offset} is not whole rows "
                             f"of {row} bytes")
        rows = size // row
        for first in range(0, rows, window):
            k = min(window, rows - first)
            t0 = time.perf_counter()
            mm, start = _map(fd, offset + first * row, k * row, name)
            spent += time.perf_counter() - t0
            try:
                view = np.frombuffer(mm, dtype=dtype, count=k * per_row, offset=start)
                each(view.reshape(k, *row_shape))
                del view
            finally:
                _unmap(mm)
    return spent


def _map(fd: int, at: int, length: int, name: str) -> tuple[mmap.mmap, int]:
    """A read-only mapping of bytes ``at:at + length`` of ``fd``, and where they start in it.

    The file's size is checked first: mapping past the end succeeds, and the first touch
    of a page past it kills the process (``SIGBUS``).
    """
    end = os.fstat(fd).st_size
    if at + length > end:
        raise OSError(f"{name}: bytes {at}-{at + length} lie past the end of the file "
                      f"({end} bytes): truncated since it was opened?")
    base = at - at % mmap.ALLOCATIONGRANULARITY
    try:
        mm = mmap.mmap(fd, at - base + length, flags=mmap.MAP_SHARED | MAP_POPULATE,
                       prot=mmap.PROT_READ, offset=base)
    except (OSError, ValueError) as err:
        raise OSError(f"{name}: mapping bytes {at}-{at + length} failed: {err}") from err
    return mm, at - base


def _unmap(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        # a view outlived its call (``each`` kept it, or a traceback holds it): the
        # mapping goes when the last view does
        pass
