"""The files behind the ``h5md`` engine: one xarray
:class:`~xarray.backends.CachingFileManager` per open, and the checks that a handle
still reads the file first opened.

A file replaced or rewritten under its name since it was opened is refused rather than
read under the old description; HDF5 opens a file once per process, so a file rewritten
while another Dataset of it is open is refused too. Closing a Dataset closes its file
and releases its direct readers (``_Closer``).
"""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Callable
from typing import Any

import h5py
from xarray.backends import CachingFileManager

from h5mdx.errors import H5MDReadError
from h5mdx.format import reader_cache as _readers
from h5mdx.format import samples as _samples
from h5mdx.format.h5md import FileInfo, scan
from h5mdx.format.h5md import open_h5md as _open_file


def _file_state(stamp: tuple[int, int, int, int, int] | None) -> tuple[int, int] | None:
    """``(size, modification time in ns)`` of a file's stamp
    (:func:`h5mdx.format.reader_cache.file_stamp`): what a file replaced or rewritten under the
    same name changes. Not the inode: some network and FUSE file systems number a file
    otherwise on each node or mount; size and time come from the file server."""
    return None if stamp is None else (stamp[2], stamp[3])


#: (device, inode) -> the size, modification and change times of each file this process
#: opened, as they were at its latest open
_OPENED: dict[tuple[int, int], tuple[int, ...]] = {}


def _stale_handle(filename: str, stamp: tuple[int, int, int, int, int]) -> None:
    """Refuse to open a file rewritten in place while this process holds it open
    (``stamp``: the file's now).

    HDF5 opens a file once per process: a new ``h5py.File`` of a file some Dataset still
    holds open (read-only) shares that open, with its metadata as it was then: the new
    Dataset described and read the old frames, or the new bytes through the old chunk
    index. Where the file changed since (same inode, another size or time), only closing
    the other Dataset lets HDF5 read it afresh.
    """
    key, now = (stamp[0], stamp[1]), stamp[2:]  # in this process: the change time too
    then = _OPENED.get(key)
    # a chmod, chown or hard link moves the change time alone: the bytes sampled at the
    # last open tell it from a rewrite with the modification time set back (cp -p)
    if then is not None and then != now and not _samples.attributes_only(
            filename, (*key, *then), stamp):
        for fid in h5py.h5f.get_obj_ids(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE):
            try:  # a POSIX descriptor only where the driver is sec2 (MPI-IO's is not)
                if fid.get_access_plist().get_driver() != h5py.h5fd.SEC2:
                    continue
                held = os.fstat(int(fid.get_vfd_handle()))
                read_only = fid.get_intent() == h5py.h5f.ACC_RDONLY
            except (OSError, ValueError, TypeError, RuntimeError, OverflowError):
                continue
            if read_only and (held.st_dev, held.st_ino) == key:
                raise H5MDReadError(
                    filename, None, "was rewritten while another Dataset of it is open in "
                    "this process, and HDF5 opens a file once per process: this open would "
                    "read that one's stale metadata. Close the other Dataset (ds.close()) "
                    "and open it again")
    _samples.note(filename, stamp)
    _OPENED[key] = now


#: Said of a file that changed since it was opened: most often a writer still at work
_LIVE_HINT = ("; a file a program is still writing changes so: open it with swmr=True "
              "where it is written in SWMR mode, or once the writer has finished")


def _live_state(stamp: tuple[int, int, int, int, int] | None
                ) -> tuple[str, int, int, int] | None:
    """``(host, device, inode, size)`` of a live file (opened with ``swmr=True``) at its
    open: SWMR writes it in place and it only grows, so another inode on the same host, or
    fewer bytes anywhere, is another file (its inode is not compared on other hosts,
    whose mounts may number it otherwise)."""
    return None if stamp is None else (socket.gethostname(), *stamp[:3])


def _check_live(filename: str, live: tuple[str, int, int, int],
                stamp: tuple[int, int, int, int, int]) -> None:
    """Refuse a live file replaced since it was opened (see :func:`_live_state`): a new run
    renamed over it was read through the first run's shapes and paths when xarray's
    file cache, or a worker process, opened it again by name."""
    host, dev, ino, size = live
    replaced = host == socket.gethostname() and (dev, ino) != (stamp[0], stamp[1])
    if replaced or stamp[2] < size:
        what = "another file took its name" if replaced else (
            f"it holds {stamp[2]} bytes, {size} when opened")
        raise H5MDReadError(
            filename, None, f"was replaced since it was opened with swmr=True ({what}; "
            "a file written in SWMR mode only grows, in place): the data read would not be "
            "those the Dataset describes: open it again (h5mdx.engine.live.refresh)")


def _opener(filename: str, mode: str = "r", swmr: bool = False,
            state: tuple[int, int] | None = None,
            live: tuple[str, int, int, int] | None = None) -> h5py.File:
    """Open ``filename`` for a :class:`CachingFileManager`, the first time or again after
    xarray's file cache closed it (or on a worker): a file no longer the one first opened
    (``state``, see :func:`_file_state`; ``live`` for a live file, which grows: see
    :func:`_live_state`) is refused, not read under the old coordinates, and so is a file
    rewritten while this process holds it open elsewhere."""
    stamp = _readers.file_stamp(filename)
    now = _file_state(stamp)
    if live is not None and stamp is not None:
        _check_live(filename, live, stamp)
    if state is not None and now is not None and now != state:
        raise H5MDReadError(
            filename, None, "was replaced or rewritten since it was opened (its size or "
            f"modification time changed: {state} -> {now}, as (bytes, ns)); the data read "
            f"would not be those the Dataset describes: open it again{_LIVE_HINT}")
    if not swmr and stamp is not None:
        _stale_handle(filename, stamp)
    return _open_file(filename, swmr=swmr)


def _manager(filename: str, swmr: bool) -> CachingFileManager:
    # a live file (SWMR) grows while it is read: only a plain file is held to its state
    stamp = _readers.file_stamp(filename)
    live = _live_state(stamp) if swmr else None
    stamp = None if swmr else stamp
    manager = CachingFileManager(_opener, filename, mode="r",
                                 kwargs={"swmr": swmr, "state": _file_state(stamp),
                                         "live": live})
    _STAMPS[manager] = stamp
    return manager


#: The stamp (:func:`h5mdx.format.reader_cache.file_stamp`) of the file each file manager of
#: this process opened, taken as it did; None for a live file.
_STAMPS: weakref.WeakKeyDictionary[CachingFileManager, tuple[int, int, int, int, int] | None] = (
    weakref.WeakKeyDictionary())


class _Closer:
    """What closing the Dataset (or each node of a tree) does: close the h5py file and
    release the direct readers of this open (:func:`h5mdx.format.reader_cache.hold`).

    A pickled copy (a Dataset sent to another process) closes its file there and holds
    nothing."""

    def __init__(self, manager: CachingFileManager, filename: str) -> None:
        self.manager = manager
        self._release: Callable[[], None] | None = _readers.hold(filename)
        # a Dataset dropped without close(): its readers' descriptors close with the file
        # (they stayed open, a deleted file's space in use)
        weakref.finalize(manager, _readers.release_soon, self._release)

    def __call__(self) -> None:
        self.manager.close()
        if self._release is not None:
            self._release()

    def __getstate__(self) -> dict[str, Any]:
        return {"manager": self.manager, "_release": None}


def _scan_with(manager: CachingFileManager, lock: Any, allow_external: bool,
               deep_connectivity: bool | str = True, subtree: bool = False) -> FileInfo:
    with lock:
        return scan(manager.acquire(needs_lock=False), allow_external=allow_external,
                    deep_connectivity=deep_connectivity, connectivity_subtree=subtree)


def _normalize_path(filename_or_obj: Any) -> str:
    if isinstance(filename_or_obj, (str, os.PathLike)):
        return os.path.abspath(os.path.expanduser(os.fspath(filename_or_obj)))
    raise TypeError(
        "the h5md engine opens files by path (str or os.PathLike), not "
        f"{type(filename_or_obj).__name__}"
    )
