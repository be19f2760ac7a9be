"""Reading runs of frames of a lazily opened variable without xarray's indexing per read.

An RMSD task reads its frames a few MiB at a time (see :mod:`h5mdx.analysis.blocks`).
Through ``variable[a:b].values`` each of those reads passes xarray's lazy-indexing
machinery (key composition, indexer decomposition, wrapper arrays): ~100 µs of Python
per read, a tenth of the task's time or more with 4 MiB reads. :func:`frame_reader` composes
the variable's key once and then hands each run of frames straight to the
:class:`~h5mdx.engine.arrays.H5MDArray`, which reads it as before (direct or through
h5py, with its unit scaling and fill values).

Only the plain case qualifies: a variable of the ``h5md`` engine, opened lazily, sliced
(or not) with a positive step along time and unit-step slices elsewhere. ``MemoryCachedArray``,
``CopyOnWriteArray`` and ``LazilyIndexedArray`` are xarray's internal wrappers (no public
API exposes the backend array of a lazily indexed variable); anything else -- another
backend, data in memory, a transpose, a vectorised or integer index, or a future change
of those wrappers -- gives None, and the caller indexes through xarray as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import xarray as xr
from xarray.core import indexing

from h5mdx._machine import usable_cpus
from h5mdx.engine.arrays import H5MDArray
from h5mdx.format.direct import row_offsets
from h5mdx.format.scratch import scratch_buffers, scratch_pool

__all__ = ["READ_AHEAD", "READ_AHEAD_ENV", "READ_AHEAD_MAX_PROCESS_THREADS", "FrameReader",
           "frame_reader", "read_ahead", "read_ahead_depth", "stored_start"]

#: Environment variable: how many reads :func:`read_ahead` keeps in flight (``0``: none,
#: every read in the caller's thread, one after the other).
READ_AHEAD_ENV = "H5MDX_READ_AHEAD"
#: Reads in flight by default. One is not enough on a VM: handing a read to the reader
#: thread and its frames back costs ~80 µs of futex wake-ups each way, which the reader
#: spends idle unless the next read is already queued.
READ_AHEAD = 2
#: Tasks sharing one process (one GIL) above which none reads ahead: a reader thread per
#: task doubles the threads that queue for the GIL. On 16 cores, 8 threads of dask's
#: threaded scheduler ran 341,000 frames/s reading ahead and 587,000 without; 1-4
#: threads gained 16-24 % (benchmarks/results/threads-16core.md).
READ_AHEAD_MAX_PROCESS_THREADS = 4

# xarray's internal wrappers, looked up once; a release without one of them turns the fast
# path off (frame_reader gives None) instead of failing
_WRAPPERS = tuple(c for c in (getattr(indexing, "MemoryCachedArray", None),
                              getattr(indexing, "CopyOnWriteArray", None)) if c is not None)
_LAZY = getattr(indexing, "LazilyIndexedArray", None)
_KEYS = tuple(c for c in (getattr(indexing, "BasicIndexer", None),
                          getattr(indexing, "OuterIndexer", None)) if c is not None)


class FrameReader:
    """Frames ``[start, stop)`` of a variable, read straight from its :class:`H5MDArray`.

    Parameters
    ----------
    array : H5MDArray
        The engine's lazily read dataset.
    first : int
        The dataset's frame that is the variable's frame 0.
    rest : tuple of slice
        The variable's slices along the other axes, in the dataset's coordinates.
    step : int, default 1
        Stored frames from one of the variable's frames to the next
        (``isel(time=slice(None, None, step))``).
    """

    def __init__(self, array: H5MDArray, first: int, rest: tuple[slice, ...],
                 step: int = 1) -> None:
        self.array = array
        self.first = first
        self.rest = rest
        self.step = step

    def warm(self) -> None:
        """Plan the direct reads of the dataset now (see
        :meth:`h5mdx.engine.arrays.H5MDArray.warm`)."""
        self.array.warm()

    def bind(self) -> Callable[[int, int], np.ndarray]:
        """A reader of the variable's frames for one task's run of reads.

        Each read is what calling the FrameReader gives; the dataset's direct reader is
        looked up once (see :meth:`h5mdx.engine.arrays.H5MDArray.rows_reader`), which
        spares each 4 MiB read ~30 µs (a check of the file on disk, the key's
        normalisation and split into a box, the look-up of the reader). Bind again in
        each task: a file rewritten on disk is only noticed here.

        Returns
        -------
        callable
            ``read(start, stop)``, as calling the FrameReader.
        """
        if self.step != 1:  # strided rows: the backend's own read of the strided box
            return self
        return self.array.rows_reader(self.first, self.rest)

    def bind_runs(self) -> Callable[[int, int], tuple[int, np.ndarray, np.ndarray] | None] | None:
        """Where the variable's frames lie in the file, for a task that reads the bytes itself.

        Returns
        -------
        callable or None
            ``runs(start, stop) -> (fd, offsets, nbytes)`` (see
            :meth:`h5mdx.engine.arrays.H5MDArray.rows_runs`); None where the frames are
            not whole stored rows served as stored. Strided frames come as a run each.
        """
        runs = self.array.rows_runs(self.first, self.rest)
        if runs is None or self.step == 1:
            return runs
        step = self.step
        frame_bytes = self.array.dtype.itemsize * int(np.prod(self.array.shape[1:]))

        def strided(start: int, stop: int) -> tuple[int, np.ndarray, np.ndarray] | None:
            if stop <= start:
                return runs(0, 0)
            located = runs(start * step, (stop - 1) * step + 1)
            if located is None:
                return None
            fd, offsets, nbytes = located
            # every stored frame's offset, run by run, then every step-th of them
            each = row_offsets(offsets, nbytes, frame_bytes)[::step]
            return fd, each, np.full(each.size, frame_bytes, dtype=np.int64)

        return strided

    def __call__(self, start: int, stop: int) -> np.ndarray:
        """The variable's frames ``start`` to ``stop`` (0 <= start <= stop <= its length)."""
        a = self.first + start * self.step
        b = self.first + (stop - 1) * self.step + 1 if stop > start else a
        return self.array._getitem((slice(a, b, self.step), *self.rest))


def _lazy_key(variable: xr.Variable) -> tuple[object, tuple] | None:
    """``(backend array, key)`` of a lazily indexed variable, one key entry per axis of
    ``variable``; None for anything else (in memory, dask, a vectorised index, or
    xarray's wrappers changed)."""
    data: Any = getattr(variable, "_data", None)  # no public way to the lazily indexed array
    while _WRAPPERS and isinstance(data, _WRAPPERS):
        data = data.array
    if _LAZY is None or type(data) is not _LAZY or not isinstance(data.key, _KEYS):
        return None
    key = getattr(data.key, "tuple", None)
    if not key or len(key) != variable.ndim:
        return None
    return getattr(data, "array", None), key


def frame_reader(variable: xr.Variable) -> FrameReader | None:
    """A :class:`FrameReader` of ``variable``, or None where it is not a plain lazy slice.

    Parameters
    ----------
    variable : xarray.Variable
        A variable of a Dataset opened with ``engine="h5md"`` (without ``chunks=``),
        time first.

    Returns
    -------
    FrameReader or None
        None for anything but slices of an :class:`H5MDArray` (positive steps along
        time, unit steps elsewhere).

    Examples
    --------
    >>> ds = xr.open_dataset("adk.h5md", engine="h5md")  # doctest: +SKIP
    >>> read = frame_reader(ds.position.variable[100:200])  # doctest: +SKIP
    >>> read(0, 10).shape  # frames 100-109 of the file  # doctest: +SKIP
    (10, 3341, 3)
    """
    lazy = _lazy_key(variable)
    if lazy is None:
        return None
    array, key = lazy
    if not isinstance(array, H5MDArray) or len(key) != len(array.shape):
        return None
    if not all(isinstance(k, slice) for k in key):
        return None
    bounds = [k.indices(n) for k, n in zip(key, array.shape, strict=True)]
    if bounds[0][2] < 1 or any(step != 1 for _, _, step in bounds[1:]):
        return None
    start, rest = bounds[0][0], tuple(slice(a, b, 1) for a, b, _ in bounds[1:])
    shape = tuple(len(range(*b)) for b in bounds)
    if shape != tuple(variable.shape):
        return None
    return FrameReader(array, start, rest, bounds[0][2])


def stored_start(variable: xr.Variable) -> int | None:
    """The stored frame that is ``variable``'s frame 0, for any backend.

    Parameters
    ----------
    variable : xarray.Variable
        A lazily indexed variable (``h5md``, ``zarr`` or another engine, opened without
        ``chunks=``), time first, sliced (or not) with a unit step along time.

    Returns
    -------
    int or None
        The index along the stored array's first axis; None where ``variable`` is not
        such a slice (in memory, dask, a strided or vectorised index, a transpose).
    """
    lazy = _lazy_key(variable)
    shape = getattr(lazy[0], "shape", None) if lazy is not None else None
    if lazy is None or not shape or not isinstance(lazy[1][0], slice):
        return None
    start, _stop, step = lazy[1][0].indices(int(shape[0]))
    return start if step == 1 else None


def _cpus() -> int:
    return usable_cpus()  # a worker bound to cores sees only those


def read_ahead_depth(host_threads: int | None = None,
                     process_threads: int | None = None) -> int:
    """Reads :func:`read_ahead` keeps in flight for a task: 0 (none) or ``READ_AHEAD``.

    ``$H5MDX_READ_AHEAD`` where set. Otherwise read ahead only where this process's
    CPUs hold a spare core for each of the ``host_threads`` tasks running at once on the
    machine: a reader thread is a second busy thread per task, and where every core
    already runs a task it only takes turns with them (measured on 2 cores with 2
    workers: 0.55-0.77x the read floor fell to 0.49-0.64x). And only where at most
    :data:`READ_AHEAD_MAX_PROCESS_THREADS` of them share this process's GIL.

    Parameters
    ----------
    host_threads : int, optional
        Tasks the scheduler runs at once on this machine; None (unknown): no read-ahead.
    process_threads : int, optional
        Tasks it runs at once in this process (None: as ``host_threads``).
    """
    value = os.environ.get(READ_AHEAD_ENV, "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            raise ValueError(f"{READ_AHEAD_ENV} must be a whole number of reads (0 for "
                             f"none), not {value!r}") from None
    if host_threads is None or host_threads < 1:
        return 0
    shared = host_threads if process_threads is None else process_threads
    if shared > READ_AHEAD_MAX_PROCESS_THREADS:
        return 0
    return READ_AHEAD if 2 * host_threads <= _cpus() else 0


class _Reader(threading.local):
    """This thread's reader thread, and a buffer pool per read in flight."""

    pid: int | None = None
    executor: ThreadPoolExecutor | None = None
    pools: list[dict] | None = None
    busy: bool = False


_READER = _Reader()


def _executor() -> ThreadPoolExecutor:
    # a fork (the processes scheduler) copies the executor but not its thread
    if _READER.executor is None or _READER.pid != os.getpid():
        _READER.executor = ThreadPoolExecutor(1, thread_name_prefix="h5mdx-read-ahead")
        _READER.pid, _READER.pools = os.getpid(), None
    return _READER.executor


def _read_into(pool: dict, read: Callable[[int, int], np.ndarray], a: int,
               b: int) -> np.ndarray:
    with scratch_buffers(pool):
        return read(a, b)


def read_ahead(read: Callable[[int, int], np.ndarray], spans: Sequence[tuple[int, int]],
               depth: int = READ_AHEAD) -> Generator[np.ndarray, None, None]:
    """``read(a, b)`` for each span, read up to ``depth`` spans ahead in another thread.

    An RMSD task alternates a read (the kernel's copy from the page cache, no GIL) and
    the kernel (numba, no GIL). Read one after the other in one thread, the two add up;
    here a reader thread reads the next spans while the caller computes, so a task runs
    at the speed of the slower of the two. A thread of this one's reads for it, so
    threads of a scheduler never wait on each other's reads.

    Each array is read into a buffer that is read into again ``depth + 1`` spans later:
    use it before asking for the next one, and keep nothing of it (copy what must stay).

    Parameters
    ----------
    read : callable
        ``read(a, b)`` returns the frames ``a`` to ``b``; it must be safe to call from
        another thread (:meth:`FrameReader.bind` and xarray's lazy indexing of the
        ``h5md`` engine are).
    spans : sequence of (int, int)
        The ``(a, b)`` to read, in order.
    depth : int, optional
        Reads in flight (:func:`read_ahead_depth` decides it for a task). ``0``, a
        single span, or a nested call (a caller already reading ahead) reads in the
        caller's thread.

    Yields
    ------
    numpy.ndarray
        ``read(a, b)`` of each span in turn. An error of a read is raised where its
        frames are asked for; the reads still in flight are waited for first.
    """
    if depth <= 0 or len(spans) < 2 or _READER.busy:
        for a, b in spans:
            with scratch_buffers():
                yield read(a, b)
        return
    executor = _executor()
    if _READER.pools is None or len(_READER.pools) != depth + 1:
        _READER.pools = [scratch_pool() for _ in range(depth + 1)]
    pools = _READER.pools
    pending: dict[int, Future] = {}

    def submit(i: int) -> None:
        if i < len(spans):
            pending[i] = executor.submit(_read_into, pools[i % (depth + 1)], read, *spans[i])

    _READER.busy = True
    try:
        for i in range(depth):
            submit(i)
        for i in range(len(spans)):
            data = pending.pop(i).result()
            submit(i + depth)  # into the pool of span i - 1, whose frames are done with
            yield data
    finally:
        for future in pending.values():  # nothing may still write into the pools
            if not future.cancel():
                future.exception()
        _READER.busy = False
