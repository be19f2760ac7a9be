"""One direct reader per dataset and process, planned once, released with the file's opens.

Planning a :class:`~h5mdx.format.direct.DirectReader` asks HDF5 where the dataset's
chunks lie; the tasks that read a dataset (thousands of them, on the threads and
processes of a dask scheduler) should ask once. This module keeps each process's
readers by file and dataset path (:func:`plan_cached`, :func:`cached`), checks that the
file on disk is still the one planned (:func:`file_stamp`), tells why a dataset is read
through h5py instead (:func:`why_not_direct`), and lets go of a file's readers (and so of
their descriptors) when the last open of the file closes (:func:`hold`).

This module knows h5py and the standard library only.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import h5py

from h5mdx.format.direct import ENV_VAR, DirectReader, Unsupported, enabled, plan_direct

__all__ = [
    "UNPLANNED",
    "cached",
    "file_stamp",
    "forget",
    "hold",
    "plan_cached",
    "release_soon",
    "why_not_direct",
]

#: Marks a dataset not planned yet in this process.
UNPLANNED: Any = object()

#: Readers kept per process, the least recently used dropped first. Each holds the file
#: open (one descriptor per dataset read directly); a session that reads thousands of files
#: would otherwise run out of descriptors (``ulimit -n`` is often 1024) and keep deleted
#: files on disk. A dropped reader closes once no read holds it; the next read plans again.
MAX_READERS = 256

#: (file, dataset) -> (the file's stamp (:func:`file_stamp`), its reader or None, why
#: None: what only HDF5 reads)
_CACHE: OrderedDict[tuple[str, str],
                    tuple[tuple[int, ...], DirectReader | None, str | None]] = OrderedDict()
#: Why a dataset that a read found unusual (:func:`forget`) is read through h5py.
_FORGOTTEN = "a read found storage that only HDF5 reads"
_CACHE_LOCK = threading.Lock()


#: Files held open through the engine in this process, with the number of opens of each.
_HELD: Counter[str] = Counter()
#: Files whose opens in this process were all closed: a read after the close (xarray
#: reopens the file; a lazy result computed after its ``with`` block) plans a reader for
#: that task alone, cached nowhere, so that its descriptor closes with the task.
_CLOSED: set[str] = set()


#: Releases a finalizer could not run at once (the lock was held, perhaps by the very
#: thread the garbage collector interrupted); run by the next hold or release_soon.
_PENDING: list[Callable[[], None]] = []


def release_soon(release: Callable[[], None]) -> None:
    """Run ``release`` (of :func:`hold`) from a finalizer: now where the cache's lock is
    free, else at the next :func:`hold` or :func:`release_soon` (a collection inside a
    cached read would otherwise wait on a lock its own thread holds)."""
    _PENDING.append(release)
    if not _CACHE_LOCK.acquire(blocking=False):
        return
    _CACHE_LOCK.release()
    _run_pending()


def _run_pending() -> None:
    while _PENDING:
        try:
            release = _PENDING.pop()
        except IndexError:  # another thread took the last
            return
        release()


def hold(filename: str) -> Callable[[], None]:
    """Note that an open holds ``filename``; returns its release, for when it closes.

    When the last open of a file in this process releases it, the file's readers leave
    the cache: their descriptors close once no read holds them, so that a closed Dataset
    keeps no file open (nor a deleted file's space in use). Readers that no open holds
    (a dask worker's) stay, up to ``MAX_READERS``. The release may be called more
    than once; it counts once.
    """
    _run_pending()
    with _CACHE_LOCK:
        _HELD[filename] += 1
        _CLOSED.discard(filename)
    released = threading.Event()

    def release() -> None:
        with _CACHE_LOCK:
            if released.is_set():
                return
            released.set()
            _HELD[filename] -= 1
            if _HELD[filename] > 0:
                return
            del _HELD[filename]
            _CLOSED.add(filename)
            for key in [k for k in _CACHE if k[0] == filename]:
                del _CACHE[key]

    return release


def file_stamp(filename: str) -> tuple[int, int, int, int, int] | None:
    """``(device, inode, size, mtime_ns, ctime_ns)`` of ``filename``, or None if it cannot
    be stat'ed.

    A file rewritten since has another stamp: one rewritten in place with the same size
    keeps its modification time where that is set back (``cp -p``, ``touch -r``,
    ``os.utime``), but its change time (``st_ctime_ns``) cannot be set back.
    """
    try:
        st = os.stat(filename)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _held_file(dset: h5py.Dataset) -> tuple[int, int] | None:
    """``(device, inode)`` of the file HDF5 has open for ``dset``; None where it cannot
    tell (a driver without a POSIX descriptor)."""
    f = dset.file
    if f.driver != "sec2":
        return None
    try:
        st = os.fstat(int(f.id.get_vfd_handle()))
    except (OSError, ValueError, TypeError, RuntimeError):
        return None
    return (st.st_dev, st.st_ino)


def cached(filename: str, path: str) -> DirectReader | None:
    """This process's reader of ``path`` in ``filename``: a reader, None (read through
    h5py), or ``UNPLANNED`` (not planned yet, or the file changed since)."""
    entry = _entry(filename, path)
    return UNPLANNED if entry is None else entry[1]


def _entry(filename: str, path: str) -> tuple | None:
    """The cache's entry of ``path`` in ``filename``; None where not planned for the file
    as it is on disk now."""
    with _CACHE_LOCK:
        entry = _CACHE.get((filename, path))
        if entry is not None:
            _CACHE.move_to_end((filename, path))
    if entry is None or entry[0] != file_stamp(filename):
        return None
    return entry


def plan_cached(dset: h5py.Dataset, filename: str, path: str) -> DirectReader | None:
    """Plan the reader of ``dset`` once per process (the caller holds the HDF5 lock).

    Where another thread planned the same file (unchanged) in the meantime, its reader is
    the one kept and returned: the tasks of one dataset, started at once, all find it
    unplanned, and each must end up reading through the same reader.

    A reader this replaces (the file changed on disk) is not closed here: a thread may be
    reading through it still. Its descriptor closes with it, once no one holds it.
    """
    stamp = file_stamp(filename)
    held = _held_file(dset)
    if held is not None and (stamp is None or stamp[:2] != held):
        # replaced or deleted since HDF5 opened it: its offsets are not those of the
        # file by that name now; HDF5 reads what it holds open (nothing is cached)
        return None
    why = None
    try:
        reader: DirectReader | None = plan_direct(dset)
    except Unsupported as err:
        reader, why = None, str(err)
    if reader is not None:
        reader.file_id = held
    if stamp is not None and filename not in _CLOSED:
        with _CACHE_LOCK:
            old = _CACHE.get((filename, path))
            if old is not None and old[0] == stamp:
                return old[1]  # planned by another thread first
            _CACHE[(filename, path)] = (stamp, reader, why)
            _CACHE.move_to_end((filename, path))
            while len(_CACHE) > MAX_READERS:
                _CACHE.popitem(last=False)
    return reader


def why_not_direct(filename: str, path: str) -> str | None:
    """Why reads of ``path`` in ``filename`` would go through h5py; None where they are direct.

    Reads through h5py take turns in a process (one HDF5 call at a time), so threads
    of one process read in parallel only where the reads are direct. The answer is this
    process's plan (:func:`plan_cached`): the file is opened to plan it only where it is
    not planned yet, and the reads that follow use that plan.

    Parameters
    ----------
    filename : str
        The HDF5 file.
    path : str
        The dataset's path in the file.

    Returns
    -------
    str or None
        The reason, e.g. ``"filters (2,)"`` or ``"H5MDX_DIRECT_READ=0"``; None where the
        dataset is read directly.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> name = os.path.join(tempfile.mkdtemp(), "t.h5")
    >>> with h5py.File(name, "w") as f:
    ...     _ = f.create_dataset("plain", data=np.zeros((4, 3)))
    ...     _ = f.create_dataset("sums", data=np.zeros((4, 3)), chunks=(2, 3), fletcher32=True)
    >>> why_not_direct(name, "plain") is None
    True
    >>> why_not_direct(name, "sums")
    'filters (3,)'
    """
    if not enabled():
        return f"{ENV_VAR}=0"
    filename = os.path.abspath(filename)
    entry = _entry(filename, path)
    if entry is None:  # not planned in this process yet
        try:
            with h5py.File(filename, "r") as f:
                dset = f[path]
                if not isinstance(dset, h5py.Dataset):
                    return f"{path} is not a dataset"
                reader = plan_cached(dset, filename, path)
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as err:
            return f"{type(err).__name__}: {err}"
        entry = _entry(filename, path)
        if entry is None:  # pragma: no cover - the file cannot be stat'ed, or changed
            return None if reader is not None else "the file changed while it was planned"
    return None if entry[1] is not None else (entry[2] or _FORGOTTEN)


def forget(reader: DirectReader) -> None:
    """Read this dataset through h5py from now on (something unusual was found).

    The reader is not closed: other threads may be reading through it (a descriptor
    closed under them would fail their reads, or, reused by the next file opened, read
    another file's bytes). It closes once the last of them lets go of it.
    """
    with _CACHE_LOCK:
        for key, (stamp, r, _) in list(_CACHE.items()):
            if r is reader:
                _CACHE[key] = (stamp, None, _FORGOTTEN)
