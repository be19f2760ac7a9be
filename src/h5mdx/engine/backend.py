"""The ``h5md`` xarray backend: H5MD files as lazy, chunk-aligned Datasets.

``xr.open_dataset(path, engine="h5md")`` reads the metadata of a particles
group (or of ``/observables``) and returns variables backed by
:class:`H5MDArray`, which reads from disk only when indexed. Each variable
declares ``encoding["preferred_chunks"]``: whole HDF5 chunks along ``time``
sized near a target (128 MiB by default, dask's own) and every other axis whole, so
``chunks={}`` gives one dask task per few tens of MiB, never one per frame.
Files are held by xarray's :class:`~xarray.backends.CachingFileManager` and
read under the HDF5 lock, so datasets pickle to dask workers.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
import weakref
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import h5py
import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint, CachingFileManager
from xarray.backends.common import datatree_from_dict_with_io_cleanup
from xarray.backends.locks import HDF5_LOCK
from xarray.core import indexing

from h5mdx.engine.chunking import DEFAULT_TARGET_MIB, time_block
from h5mdx.errors import (
    H5MDConformanceWarning,
    H5MDFormatError,
    H5MDReadError,
    ParticleOrderWarning,
    TopologyError,
)
from h5mdx.format import direct as _direct
from h5mdx.format import units as _units
from h5mdx.format.chunk_index import locate_chunks
from h5mdx.format.gromacs_topology import ModuleTopology
from h5mdx.format.h5md import (
    BoxInfo,
    ElementInfo,
    FileInfo,
    ParticlesGroupInfo,
    Problem,
    Sampling,
    ensure_filters,
    is_h5md,
    scalar_text,
    scaled_unit,
    scan,
    scan_free_form,
)
from h5mdx.format.h5md import open_h5md as _open_file
from h5mdx.format.schema import (
    ATOM_DIM,
    BOX_VECTOR_DIM,
    BOX_VECTOR_LABELS,
    PER_PARTICLE_SCALARS,
    SPATIAL_DIM,
    SPATIAL_LABELS,
    TIME_DIM,
)
from h5mdx.format.text import unit_text

__all__ = ["H5MDArray", "H5MDBackendEntrypoint", "backend_array", "open_groups",
           "why_reads_take_turns"]


def _file_state(stamp: tuple[int, int, int, int] | None) -> tuple[int, int] | None:
    """``(size, modification time in ns)`` of a file's stamp
    (:func:`h5mdx.format.direct.file_stamp`): what a file replaced or rewritten under the
    same name changes. Not the inode: some network and FUSE file systems number a file
    otherwise on each node or mount; size and time come from the file server."""
    return None if stamp is None else (stamp[2], stamp[3])


#: (device, inode) -> the state (:func:`_file_state`) of each file this process opened,
#: as it was at its latest open
_OPENED: dict[tuple[int, int], tuple[int, int]] = {}


def _stale_handle(filename: str, stamp: tuple[int, int, int, int]) -> None:
    """Refuse to open a file rewritten in place while this process holds it open
    (``stamp``: the file's now).

    HDF5 opens a file once per process: a new ``h5py.File`` of a file some Dataset still
    holds open (read-only) shares that open, with its metadata as it was then: the new
    Dataset described and read the old frames, or the new bytes through the old chunk
    index. Where the file changed since (same inode, another size or time), only closing
    the other Dataset lets HDF5 read it afresh.
    """
    key, now = (stamp[0], stamp[1]), (stamp[2], stamp[3])
    then = _OPENED.get(key)
    if then is not None and then != now:
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
    _OPENED[key] = now


#: Said of a file that changed since it was opened: most often a writer still at work
_LIVE_HINT = ("; a file a program is still writing changes so: open it with swmr=True "
              "where it is written in SWMR mode, or once the writer has finished")


def _opener(filename: str, mode: str = "r", swmr: bool = False,
            state: tuple[int, int] | None = None) -> h5py.File:
    """Open ``filename`` for a :class:`CachingFileManager`, the first time or again after
    xarray's file cache closed it (or on a worker): a file no longer the one first opened
    (``state``, see :func:`_file_state`; None: a live file, which grows) is refused, not
    read under the old coordinates, and so is a file rewritten while this process holds
    it open elsewhere."""
    stamp = _direct.file_stamp(filename)
    now = _file_state(stamp)
    if state is not None and now is not None and now != state:
        raise H5MDReadError(
            filename, None, "was replaced or rewritten since it was opened (its size or "
            f"modification time changed: {state} -> {now}, as (bytes, ns)); the data read "
            f"would not be those the Dataset describes: open it again{_LIVE_HINT}")
    if not swmr and stamp is not None:
        _stale_handle(filename, stamp)
    return _open_file(filename, swmr=swmr)


class H5MDArray(BackendArray):
    """A lazily read H5MD dataset.

    Parameters
    ----------
    manager : CachingFileManager
        Opens the file on demand (also after unpickling on a worker).
    path : str
        HDF5 path of the dataset.
    shape, dtype
        Shape and dtype of the values returned.
    scale : float, optional
        Factor applied after reading (unit conversion).
    fillvalue : scalar, optional
        Stored fill value that becomes NaN where the values served are floating point
        (stored so, or integers scaled by a unit conversion).
    lock : lock, optional
        Lock held while h5py is called.
    full_atom_chunks : bool, optional
        The HDF5 chunks hold whole frames (a list of atoms is read as a slab).
    filename : str, optional
        The file (absolute path), for error messages and direct reads.
    stamp : tuple, optional
        :func:`h5mdx.format.direct.file_stamp` of the file when opened, in this process: a
        read of the file rewritten in place since is refused. None for a live (SWMR) file,
        which grows, and in another process (the inode is this machine's).
    """

    def __init__(
        self,
        manager: CachingFileManager,
        path: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        *,
        scale: float = 1.0,
        fillvalue: Any = None,
        lock: Any = HDF5_LOCK,
        full_atom_chunks: bool = False,
        filename: str | None = None,
        stamp: tuple[int, int, int, int] | None = None,
    ) -> None:
        self.manager = manager
        self.stamp = stamp
        self.path = path
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.scale = scale
        self.fillvalue = fillvalue
        self.lock = lock
        self.full_atom_chunks = full_atom_chunks
        self.filename = filename
        # (file, dataset) of the last h5py read: looking the dataset up again costs more than
        # reading a few MiB of one-frame chunks (see _dataset); never pickled
        self._open: tuple[h5py.File, h5py.Dataset] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = None  # h5py objects belong to this process
        state["stamp"] = None  # an inode of this machine (the opener checks the file there)
        return state

    def __dask_tokenize__(self) -> tuple:
        # the same data whenever the same file (unchanged on disk) is read the same way, so
        # graphs built after reopening a file tokenize equal (distributed otherwise warns of
        # a "different run_spec" for every block)
        filename = self._filename()
        stamp = None if filename is None else _direct.file_stamp(filename)
        return ("h5mdx.H5MDArray", filename, stamp, self.path, self.shape, str(self.dtype),
                self.scale, self.fillvalue, self.full_atom_chunks)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem
        )

    def _read(self, dset: h5py.Dataset, key: tuple) -> np.ndarray:
        # A list of atoms inside chunks that hold whole frames: read the bounding slab and
        # take in numpy. HDF5 reads the same chunks either way, and a memcpy beats
        # h5py's point-by-point selection.
        if self.full_atom_chunks and len(key) > 1 and isinstance(key[1], np.ndarray):
            idx = key[1]
            if idx.size == 0:
                return np.asarray(dset[key])
            lo, hi = int(idx.min()), int(idx.max()) + 1
            slab = dset[(key[0], slice(lo, hi), *key[2:])]
            axis = 0 if isinstance(key[0], (int, np.integer)) else 1  # an int drops time
            return np.take(slab, idx - lo, axis=axis)
        if len(key) == len(self.shape) and all(isinstance(k, slice) for k in key):
            # into a reused buffer inside direct.scratch_buffers (rmsd tasks), not a fresh
            # array of every read (see direct.empty)
            shape = tuple(len(range(*k.indices(n))) for k, n in zip(key, dset.shape,
                                                                    strict=True))
            out = _direct.empty(shape, dset.dtype)
            if out.size:
                dset.read_direct(out, source_sel=key)
            return out
        return np.asarray(dset[key])

    def _unchanged(self) -> None:
        """Refuse to read a file rewritten in place since it was opened (``self.stamp``,
        taken in this process; None: a live file, or another process).

        HDF5 holds the file it opened: one replaced by another under its name (renamed
        over it) or deleted still reads as opened. One rewritten through the same inode
        does not: its new bytes were read under the old coordinates, or through the old
        chunk index.
        """
        if self.stamp is None or self.filename is None:
            return
        now = _direct.file_stamp(self.filename)
        if now is not None and now[:2] == self.stamp[:2] and now[2:] != self.stamp[2:]:
            raise H5MDReadError(
                self.filename, self.path, "was rewritten since it was opened (its size or "
                f"modification time changed: {self.stamp[2:]} -> {now[2:]}, as (bytes, "
                "ns)); the data read would not be those the Dataset describes: open it again"
                f"{_LIVE_HINT}")

    def _getitem(self, key: tuple) -> np.ndarray:
        # bound open slices by our shape: a live (SWMR) dataset may have grown on disk
        key = tuple(
            slice(*k.indices(n)) if isinstance(k, slice) and k.step in (None, 1) else k
            for k, n in zip(key, self.shape, strict=False)
        ) + tuple(key[len(self.shape):])
        self._unchanged()
        try:
            data = self._read_direct(key)
        except _DirectReadFailed as failed:
            data = self._retried(key, failed)
        if data is None:
            data = self._read_locked(key)
        return self._finish(data)

    def _retried(self, key: tuple, failed: _DirectReadFailed) -> np.ndarray:
        """``key`` read through HDF5 after the direct read failed: HDF5's error where it
        fails too, else its values, one warning, and HDF5 for this dataset from now on."""
        data = self._read_locked(key)
        _direct.forget(failed.reader)
        _warn_direct_failed(failed)
        return data

    def _finish(self, data: np.ndarray) -> np.ndarray:
        """The values read, with fill values as NaN and the unit scaling applied."""
        # every read fills an array of its own (or a task's scratch buffer): change it
        # where it lies, as a fresh 4 MiB array per read costs a distributed worker an mmap
        # and its page faults each time (MALLOC_TRIM_THRESHOLD_)
        if self.fillvalue is not None and data.dtype.kind == "f":
            if data.flags.writeable:
                np.putmask(data, data == self.fillvalue, np.nan)
            else:
                data = np.where(data == self.fillvalue, np.nan, data).astype(data.dtype,
                                                                             copy=False)
        if self.scale != 1.0:
            if data.dtype == self.dtype and data.flags.writeable:
                np.multiply(data, self.scale, out=data)
            else:  # integers stored, floats served: the fill values become NaN too
                filled = (data == self.fillvalue if self.fillvalue is not None
                          and data.dtype.kind in "iub" else None)
                data = (data * self.scale).astype(self.dtype, copy=False)
                if filled is not None and data.dtype.kind == "f":
                    np.putmask(data, filled, np.nan)
        return data

    def rows_reader(self, first: int,
                    rest: tuple[slice, ...]) -> Callable[[int, int], np.ndarray]:
        """A reader of rows ``first + a`` to ``first + b`` (``rest`` on the other axes).

        For one task's run of reads (:class:`~h5mdx.engine.frames.FrameReader`): the
        dataset's direct reader is looked up once here, with the check that the file is
        unchanged on disk, instead of at every read; so is whether direct reads are on.
        Each read is then what ``_getitem`` of the same slices gives.

        Parameters
        ----------
        first : int
            The dataset's row that is the reader's row 0.
        rest : tuple of slice
            ``slice(start, stop, 1)`` within the shape, one per other axis.

        Returns
        -------
        callable
            ``read(a, b)``, ``0 <= a <= b``, ``first + b`` at most the number of rows.
        """
        self._unchanged()
        reader = self._direct_reader() if _direct.enabled() else None

        def read(a: int, b: int) -> np.ndarray:
            nonlocal reader
            box = (slice(first + a, first + b, 1), *rest)
            if reader is not None:
                try:
                    data = self._read_box(reader, box, box)
                except _DirectReadFailed as failed:
                    data = self._retried(box, failed)
                    reader = None
                    return self._finish(data)
                if data is not None:
                    return self._finish(data)
                reader = None  # something unusual: h5py reads the rest
            return self._finish(self._read_locked(box))

        return read

    def rows_runs(self, first: int, rest: tuple[slice, ...]
                  ) -> Callable[[int, int], tuple[int, np.ndarray, np.ndarray] | None] | None:
        """Where rows ``first + a`` to ``first + b`` lie in the file, for a reader of bytes.

        For a task that reads and computes in compiled code (the fused RMSD kernel of
        :mod:`h5mdx.analysis.rmsd`): the rows are the stored bytes, in the served dtype,
        and all ``_finish`` does to them is the unit conversion, ``np.multiply(rows,
        scale, out=rows)`` (``self.scale``; 1 where the values are served as stored), which
        the reader of the bytes does itself. So only where direct reads are on and read
        whole rows, ``rest`` spans every other axis, and the values are native floating
        point without a fill value.

        Parameters
        ----------
        first : int
            The dataset's row that is row 0.
        rest : tuple of slice
            ``slice(start, stop, 1)`` within the shape, one per other axis.

        Returns
        -------
        callable or None
            ``runs(a, b) -> (fd, offsets, nbytes)``: the file descriptor and the runs of
            :meth:`h5mdx.format.direct.DirectReader.row_runs`, the chunks located first
            (under the HDF5 lock); None from it where the dataset turns out to need h5py
            after all. None where the values need more than their bytes.
        """
        if self.fillvalue is not None or not _direct.enabled():
            return None
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            return None
        if any((s.start, s.stop) != (0, n) for s, n in zip(rest, self.shape[1:], strict=True)):
            return None
        self._unchanged()
        reader = self._direct_reader()
        if reader is None or not reader.by_rows or reader.dtype != self.dtype:
            return None

        def runs(a: int, b: int) -> tuple[int, np.ndarray, np.ndarray] | None:
            box = (slice(first + a, first + b, 1), *rest)
            return self._located(reader, box, box, lambda r: (
                r.fileno(), *r.row_runs(first + a, first + b)))

        return runs

    def _filename(self) -> str | None:
        return self.filename

    def _read_locked(self, key: tuple) -> np.ndarray:
        """Read through h5py, holding the HDF5 lock."""
        with self.lock:
            try:
                dset = self._dataset()
                return self._read(dset, key)
            except H5MDReadError:  # the file itself (replaced since it was opened)
                raise
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
                raise H5MDReadError(
                    self._filename(), self.path,
                    f"reading {_describe_key(key, self.shape)} failed: {err}",
                ) from err

    def _dataset(self) -> h5py.Dataset:
        """The h5py dataset, looked up once per open file (the caller holds the HDF5 lock).

        The file manager hands out the same ``h5py.File`` until it closes or evicts it; a
        new one is looked up again.
        """
        f = self.manager.acquire(needs_lock=False)
        held = self._open
        if held is not None and held[0] is f and f.id.valid:
            dset = held[1]
        else:
            dset = f[self.path]
            ensure_filters(dset)  # this process may not have loaded hdf5plugin (a worker)
            self._open = (f, dset)
        if f.swmr_mode:
            dset.refresh()  # a live file: see the chunks written since open
        return dset

    def _read_direct(self, key: tuple) -> np.ndarray | None:
        """Read without HDF5 (see :mod:`h5mdx.format.direct`); None where that path does not apply."""
        if not _direct.enabled():
            return None
        split = _direct.box_of(key, self.shape)
        if split is None:
            return self._read_strided(key)
        box, rest = split
        reader = self._direct_reader()
        if reader is None:
            return None
        data = self._read_box(reader, box, key)
        return None if data is None else _direct.within(data, rest)

    def _read_strided(self, key: tuple) -> np.ndarray | None:
        """Frames taken with a stride too long for one bounding box, read directly (the
        reader and the box of the other axes found once): one frame at a time from
        storage of whole rows, else each chunk decoded once into the frames taken from
        it; None where direct reads do not apply. h5py's strided selection on chunked data took ~1 ms a frame: every 10th
        frame of a 4 GB file took 34-47 s to export, where reading all of it took 3-6 s
        (found by an audit)."""
        if not key or not isinstance(key[0], slice):
            return None
        start, stop, step = key[0].indices(self.shape[0])
        if step <= _direct.MAX_OVERREAD or stop <= start:
            return None
        split = _direct.box_of((slice(start, start + 1), *key[1:]), self.shape)
        reader = self._direct_reader() if split is not None else None
        if split is None or reader is None:
            return None
        box, rest = split
        last = start + (stop - 1 - start) // step * step
        if not reader.by_rows:
            # chunks to decode: each once, into the frames taken (once per frame taken
            # from it before: every 10th frame of 100-frame gzip chunks, 3x h5py's time)
            strided = (slice(start, last + 1), *box[1:])
            data = self._located(reader, strided, key,
                                 lambda r: r.read(strided, keep=False, step=step))
            return None if data is None else _direct.within(data, rest)
        out: np.ndarray | None = None
        pool = _direct.scratch_pool()  # one buffer for every frame (not one each)
        for k, i in enumerate(range(start, last + 1, step)):
            with _direct.scratch_buffers(pool):
                data = self._read_box(reader, (slice(i, i + 1), *box[1:]), key)
                if data is None:
                    return None
                part = _direct.within(data, rest)
                if out is None:  # one array (views of each frame's rows held 10x it)
                    out = np.empty((len(range(start, stop, step)), *part.shape[1:]),
                                   part.dtype)
                out[k:k + 1] = part
        return out

    def _read_box(self, reader: _direct.DirectReader, box: tuple[slice, ...],
                  key: tuple, keep: bool = True) -> np.ndarray | None:
        """``box`` read by ``reader`` (for ``key``, named in errors; ``keep``: see
        :meth:`~h5mdx.format.direct.DirectReader.read`); None where the dataset turns out
        to need h5py."""
        return self._located(reader, box, key, lambda r: r.read(box, keep=keep))

    def _located(self, reader: _direct.DirectReader, box: tuple[slice, ...], key: tuple,
                 then: Callable[[_direct.DirectReader], Any]) -> Any:
        """``then(reader)`` once the chunks of ``box`` are located (under the HDF5 lock
        where some are not yet); None where the dataset turns out to need h5py (and reads
        through it from now on). Errors name the file, the element and ``key``."""
        try:
            missing = reader.missing(box)
            if missing:
                with self.lock:
                    located = locate_chunks(self._dataset(), missing)
                reader.add_locations(located)
            return then(reader)
        except _direct.NotAllocated:
            return None  # this read through h5py (the fill value), the others direct
        except _direct.Unsupported:
            _direct.forget(reader)
            return None
        except (OSError, ValueError, zlib.error) as err:
            raise _DirectReadFailed(
                self._filename(), self.path,
                f"reading {_describe_key(key, self.shape)} failed: {err}", reader,
            ) from err

    def warm(self) -> None:
        """Plan this dataset's direct reads in this process now, not in the first read.

        Planning finds where the chunks lie (:mod:`h5mdx.format.chunk_index`: importing
        pyfive and finding the chunk B-tree, or HDF5's pass over the whole index): a
        one-off cost per process, which an RMSD task records as warm-up, not I/O.
        """
        if _direct.enabled():
            self._direct_reader()

    def why_not_direct(self) -> str | None:
        """Why this dataset is read through h5py (a thread at a time); None where directly.

        Plans the direct reads of this process, as :meth:`warm` does, and answers from
        that plan.
        """
        filename = self._filename()
        if filename is None:
            return "the file has no name on disk"
        self.warm()
        return _direct.why_not_direct(filename, self.path)

    def _direct_reader(self) -> _direct.DirectReader | None:
        reader = self._planned_reader()
        if reader is not None and self.stamp is not None and reader.file_id is not None \
                and reader.file_id != self.stamp[:2]:
            # planned (by name) for another file than this open's: one that replaced it
            # with the same size and time (cp -p, rsync -t); HDF5 holds this one
            return None
        return reader

    def _planned_reader(self) -> _direct.DirectReader | None:
        filename = self._filename()
        if filename is None:
            return None
        reader = _direct.cached(filename, self.path)
        if reader is not _direct.UNPLANNED:
            return reader
        with self.lock:
            reader = _direct.cached(filename, self.path)  # planned while this thread waited
            if reader is not _direct.UNPLANNED:
                return reader
            try:
                return _direct.plan_cached(self._dataset(), filename, self.path)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError):
                return None  # h5py's own read reports the problem with its context


class _DirectReadFailed(H5MDReadError):
    """A read without HDF5 failed (a chunk that did not decode, a short read): the read
    is tried through HDF5 before it is reported, as HDF5's error where it fails too."""

    def __init__(self, filename: object | None, h5path: str | None, problem: str,
                 reader: _direct.DirectReader) -> None:
        super().__init__(filename, h5path, problem)
        self.reader = reader

    def __reduce__(self) -> tuple:  # an H5MDReadError beyond this process
        return (H5MDReadError, (self.filename, self.h5path, self.problem))


#: (file, dataset) whose reads without HDF5 failed where HDF5 read them: warned once
_DIRECT_FAILED: set[tuple[object, str | None]] = set()
_DIRECT_FAILED_LOCK = threading.Lock()


def _warn_direct_failed(failed: _DirectReadFailed) -> None:
    """Warn, once per dataset, that HDF5 read what the direct path could not."""
    with _DIRECT_FAILED_LOCK:  # threads reading the same chunk fail at once
        if (failed.filename, failed.h5path) in _DIRECT_FAILED:
            return
        _DIRECT_FAILED.add((failed.filename, failed.h5path))
    warnings.warn(
        f"{failed.filename} [{failed.h5path}]: {failed.problem} (read without HDF5), "
        "where HDF5 read it; this dataset is read through HDF5 from now on (a thread at a time). "
        "Please report it to h5mdx with the output of `h5mdx info` for the file",
        RuntimeWarning, stacklevel=2)


def why_reads_take_turns(variable: xr.DataArray | xr.Variable) -> str | None:
    """Why threads of one process would take turns reading ``variable``; None where they
    read it in parallel.

    HDF5 runs one call at a time in a process, so threads share its reads through h5py;
    direct reads (:mod:`h5mdx.format.direct`) run in parallel. A variable in memory, or
    not read from an H5MD file by this engine, is not read through h5py here (None).

    Parameters
    ----------
    variable : xarray.DataArray or xarray.Variable
        A variable of ``xr.open_dataset(..., engine="h5md")`` opened without ``chunks``.

    Returns
    -------
    str or None
        The reason (the layout or filter that only HDF5 reads, or ``H5MDX_DIRECT_READ=0``).
    """
    var = getattr(variable, "variable", variable)
    data = backend_array(var._data)
    if not isinstance(data, H5MDArray) or var._in_memory:
        return None
    return data.why_not_direct()


class _BoundsArray(BackendArray):
    """Box edges ``hi - lo`` (``column="extent"``) or the lower corner ``lo``
    (``"lower"``) of LAMMPS' bounds ``(T, …, 3, 2)`` rows ``[lo, hi]``
    (:attr:`~h5mdx.format.h5md.ElementInfo.bounds`), served ``(T, 3)`` and read frame by
    frame from ``raw``, the bounds as stored."""

    def __init__(self, raw: H5MDArray, column: str, dtype: np.dtype) -> None:
        self.raw = raw
        self.column = column
        self.shape = (raw.shape[0], 3)
        self.dtype = np.dtype(dtype)

    def __dask_tokenize__(self) -> tuple:
        return ("h5mdx.bounds", self.raw.__dask_tokenize__(), self.column)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem)

    def _getitem(self, key: tuple) -> np.ndarray:
        frames, spatial = key
        rest = (slice(None),) * (len(self.raw.shape) - 1)
        raw = np.asarray(self.raw._getitem((frames, *rest)))
        raw = raw.reshape(*raw.shape[: raw.ndim - len(rest)], 3, 2)
        values = raw[..., 1] - raw[..., 0] if self.column == "extent" else raw[..., 0].copy()
        return np.asarray(values[..., spatial], dtype=self.dtype)


def backend_array(data: Any) -> BackendArray | None:
    """The backend's array inside xarray's lazy-indexing and caching wrappers of ``data``
    (``._data`` of a lazily opened variable), or None where there is none."""
    while not isinstance(data, BackendArray) and hasattr(data, "array"):
        data = data.array
    return data if isinstance(data, BackendArray) else None


def _describe_key(key: tuple, shape: tuple[int, ...]) -> str:
    if not key or not shape:
        return "the data"
    first = key[0]
    if isinstance(first, slice):
        start, stop, step = first.indices(shape[0])
        span = f"frames {start}-{max(start, stop - 1)}" + (f" step {step}" if step != 1 else "")
    elif isinstance(first, np.ndarray):
        span = f"{first.size} frames between {first.min()} and {first.max()}" if first.size else "no frame"
    else:
        span = f"frame {first}"
    return span


# ----------------------------------------------------------------------------- assembly


class _Report:
    """The conformance problems of one open: warned once each, or raised (``strict``)."""

    def __init__(self, filename: str, strict: bool) -> None:
        self.filename = filename
        self.strict = strict
        self.problems: list[Problem] = []

    def add(self, problem: Problem) -> None:
        """Record ``problem``; with ``strict`` raise it as an :class:`H5MDFormatError`."""
        if self.strict:
            raise H5MDFormatError(self.filename, problem.path, problem.message)
        if problem not in self.problems:
            self.problems.append(problem)

    def note(self, path: str, message: str, assumed: str) -> None:
        """Record a problem found while assembling the Dataset."""
        self.add(Problem(path, message, assumed))

    def scanned(self, info: FileInfo, under: str | None = None) -> None:
        """Take the problems of the scan: all, or those of ``under`` and the whole file."""
        # /particles read as one particles group (Sarkas): its problems are that group's
        flat = any(pg.path == "/particles" for pg in info.particles.values())
        for problem in info.problems:
            if self.strict or under is None or any(
                    _concerns(path, under, flat)
                    for path in (problem.path, *problem.shared_by)):
                self.add(problem)

    def emit(self) -> None:
        """Warn once per problem, naming the file, the path and what was assumed (minor
        problems, missing metadata, only with ``strict``)."""
        for p in self.problems:
            if p.minor:
                continue
            # a step or time hard-linked into other elements: the path is one of its names
            shared = (f" (the same dataset serves {len(p.shared_by)} other element(s), "
                      "hard links)") if p.shared_by else ""
            warnings.warn(
                H5MDConformanceWarning(
                    f"{self.filename} [{p.path}]: {p.message}; {p.assumed}{shared}"
                ),
                stacklevel=2,
            )


def _concerns(path: str, group_path: str, flat: bool = False) -> bool:
    """Whether a problem at ``path`` concerns an open of ``group_path`` (or the whole file:
    a problem outside the roots that hold groups, such as ``/h5md``'s). A problem of
    ``/particles`` itself concerns the opens of particles only where ``flat`` (``/particles``
    read as one particles group, as Sarkas writes it), every open otherwise (the particles
    left out: no open of them would say so)."""
    if path.strip("/").split("/")[0] not in ("particles", "observables", "parameters",
                                             "connectivity") or (
            path.rstrip("/") == "/particles" and not flat):
        return True
    return (path == group_path or path.startswith(group_path.rstrip("/") + "/")
            or group_path.startswith(path.rstrip("/") + "/"))


#: String datasets up to this size (bytes) are read at open time; larger ones are left out.
_STRING_READ_BYTES = 2**24


class _Builder:
    """Turns the :class:`FileInfo` of one group into xarray variables."""

    def __init__(
        self,
        info: FileInfo,
        manager: CachingFileManager,
        *,
        convert_units: bool,
        chunk_mib: float,
        lock: Any,
        report: _Report | None = None,
        allow_external: bool = False,
    ) -> None:
        self.info = info
        #: what the open allows: the groups walked when served are walked so too
        self.allow_external = allow_external
        self.manager = manager
        self.convert_units = convert_units
        self.chunk_mib = chunk_mib
        self.lock = lock
        self.report = report if report is not None else _Report(info.filename, strict=True)
        #: the file's stamp when opened (:func:`h5mdx.format.direct.file_stamp`; None:
        #: a live file)
        self.stamp = _STAMPS.get(manager)
        #: the H5MD paths of the elements built that a writer can append frames to
        self.growable: set[str] = set()

    # -- units -------------------------------------------------------------------------
    def _unit(self, unit: str | None, where: str) -> tuple[float, str | None]:
        if unit is None or not self.convert_units:
            return 1.0, unit
        factor, unit, problem = _units.base_factor(unit)
        if problem is not None:
            self.report.note(where, problem, "left unconverted")
        return factor, unit

    # -- data variables -----------------------------------------------------------------
    def _eager(self, el: ElementInfo) -> np.ndarray | None:
        """The values of a non-numeric element read now (strings), or None (noted)."""
        if el.data is not None:
            return el.data
        string = h5py.check_string_dtype(el.dtype) is not None or el.dtype.kind in "SU"
        if not string or el.nbytes > _STRING_READ_BYTES:
            what = ("object references, which h5mdx does not follow"
                    if h5py.check_ref_dtype(el.dtype) is not None else f"dtype {el.dtype}")
            self.report.note(el.value_path, f"unsupported {what} (h5mdx reads numeric "
                             "and string elements)", "left out")
            return None
        with self.lock:
            f = self.manager.acquire(needs_lock=False)
            if not el.shape:
                try:
                    return scalar_text(f, el.value_path, el.dtype)
                except (OSError, RuntimeError, ValueError, TypeError, KeyError, AttributeError):
                    pass  # read again the usual way, which says why it cannot
            dset = f[el.value_path]
            try:
                return np.asarray(dset.asstr()[()], dtype=str)
            except (OSError, RuntimeError, ValueError, TypeError, UnicodeDecodeError) as err:
                self.report.note(el.value_path, f"cannot read the strings: {err}", "left out")
                return None

    def _stored_tail(self, el: ElementInfo) -> tuple[int, ...]:
        """The axes after time of the dataset ``el`` is computed from (LAMMPS' bounds:
        ``(3, 2)`` or ``(1, 3, 2)``)."""
        with self.lock:
            return tuple(self.manager.acquire(needs_lock=False)[el.value_path].shape[1:])

    def variable(
        self, el: ElementInfo, dims: tuple[str, ...], attrs: dict[str, Any] | None = None
    ) -> xr.Variable | None:
        """The variable of element ``el``, or None where it is left out (noted)."""
        if len(dims) != len(el.shape):
            raise H5MDFormatError(
                self.info.filename,
                el.path,
                f"value has shape {el.shape}; expected dimensions {dims}",
            )
        if el.data is not None or el.dtype.kind not in "biufc":
            values = self._eager(el)
            if values is None:
                return None
            var_attrs = {**el.attrs, **dict(attrs or {})}
            unit = el.unit
            if values.dtype.kind in "iuf":
                scale, unit = self._unit(el.unit, el.value_path)
                values = values * scale if scale != 1.0 else values
            if unit is not None:
                var_attrs["units"] = unit
            return xr.Variable(dims, values, var_attrs, {"source": self.info.filename,
                                                         "h5md_path": el.path})
        scale, unit = self._unit(el.unit, el.value_path)
        dtype = el.dtype
        if scale != 1.0 and dtype.kind in "iub":
            dtype = np.dtype(np.float64)
        full_atoms = bool(
            el.chunks and len(el.shape) > 1 and el.time_dependent and el.chunks[1] == el.shape[1]
        )
        raw = H5MDArray(
            self.manager,
            el.value_path,
            (el.shape[0], *self._stored_tail(el)) if el.bounds else el.shape,
            dtype,
            scale=scale,
            fillvalue=el.fillvalue,
            lock=self.lock,
            full_atom_chunks=full_atoms and not el.bounds,
            filename=self.info.filename,
            stamp=self.stamp,
        )
        # edges or offset of LAMMPS' bounds: computed frame by frame
        array = _BoundsArray(raw, el.bounds, dtype) if el.bounds else raw
        data = indexing.LazilyIndexedArray(array)
        var_attrs = {**el.attrs, **dict(attrs or {})}
        if unit is not None:
            var_attrs["units"] = unit
        encoding: dict[str, Any] = {
            "source": self.info.filename,
            "h5md_path": el.path,
            # the dtype served (a unit conversion makes integers floats): what a netCDF
            # or Zarr writer stores; the file's own is original_dtype
            "dtype": dtype,
            "original_dtype": el.dtype,
            "chunksizes": el.chunks,
            "contiguous": el.chunks is None,
            "compression": el.compression,
            "compression_opts": el.compression_opts,
            "shuffle": el.shuffled,
            "fletcher32": el.fletcher32,
            "original_shape": el.shape,
        }
        if el.fillvalue is not None:
            encoding["_FillValue"] = el.fillvalue
        if el.growable:
            self.growable.add(el.path)
        if el.time_dependent and el.shape:
            block = time_block(el.shape, el.dtype.itemsize, el.chunks, self.chunk_mib)
            preferred = {dims[0]: block}
            preferred.update({d: int(s) for d, s in zip(dims[1:], el.shape[1:], strict=True)})
            encoding["preferred_chunks"] = preferred
        elif el.shape:
            encoding["preferred_chunks"] = {
                d: int(s) for d, s in zip(dims, el.shape, strict=True)
            }
        return xr.Variable(dims, data, var_attrs, encoding)

    # -- time coordinates --------------------------------------------------------------
    def time_coords(self, sampling: Sampling, tdim: str, where: str) -> dict[str, xr.Variable]:
        suffix = tdim[len(TIME_DIM):]
        step_name = f"step{suffix}"
        coords: dict[str, xr.Variable] = {
            step_name: xr.Variable((tdim,), sampling.step, {"long_name": "MD integration step"})
        }
        if sampling.time is not None:
            scale, unit = self._unit(sampling.time_unit, f"{where}/time")
            time = _units.scaled(sampling.time, scale)
            attrs = {"long_name": "simulation time"}
            if unit is not None:
                attrs["units"] = unit
        else:
            time = sampling.step.astype(np.float64)
            attrs = {
                "long_name": "simulation time (the file stores no time: the step is used)",
                "units": "step",
            }
        coords[tdim] = xr.Variable((tdim,), time, attrs)
        return coords


def _main_sampling(elements: Iterable[ElementInfo], preferred: str | None) -> Sampling | None:
    tds = [(e.name, e.sampling) for e in elements
           if e.time_dependent and e.sampling is not None]
    if not tds:
        return None
    for name, chosen in tds:
        if name == preferred:
            if chosen.time is None:  # its times where another element on its steps has them
                chosen = next((o for _, o in tds if o.time is not None and o.same_as(chosen)),
                              chosen)
            return chosen
    # the sampling most elements share
    groups: list[tuple[Sampling, int]] = []
    for _, sampling in tds:
        for i, (s, n) in enumerate(groups):
            if s.same_as(sampling):
                # the group's times come from a sampling that has them
                groups[i] = (sampling if s.time is None and sampling.time is not None
                             else s, n + 1)
                break
        else:
            groups.append((sampling, 1))
    # a sampling the file gives beats frames numbered for want of one (another element's
    # problem); then the most elements; ties go to the sampling with the most frames
    return max(groups, key=lambda sn: (sn[0].kind != "implicit", sn[1], sn[0].step.size))[0]


def _time_dims(b: _Builder, el: ElementInfo, name: str, main: Sampling | None,
               coords: dict[str, xr.Variable]) -> tuple[str, ...]:
    """The leading dimension of element ``name``: ``time`` where it follows the main
    sampling, ``time_<name>`` (its coordinates added to ``coords``) where it has its own,
    none where it is time-independent."""
    if not el.time_dependent:
        return ()
    assert el.sampling is not None
    if main is not None and el.sampling.same_as(main):
        return (TIME_DIM,)
    tdim = f"{TIME_DIM}_{name}"
    coords.update(b.time_coords(el.sampling, tdim, el.path))
    return (tdim,)


def _tail_dims(el: ElementInfo, name: str, first: tuple[str, ...], *, particles: bool,
               dimension: int | None) -> tuple[str, ...]:
    shape = el.shape[len(first):]
    dims: list[str] = []
    for i, size in enumerate(shape):
        if particles and i == 0:
            dims.append(ATOM_DIM)
        elif particles and i == 1 and len(shape) == 2 and (dimension is None or size == dimension):
            dims.append(SPATIAL_DIM)
        else:
            dims.append(f"{name}_dim_{len(first) + i}")
    return tuple(dims)


def _box_variables(b: _Builder, box: BoxInfo, main: Sampling | None, drop: set[str],
                   variables: dict[str, xr.Variable], coords: dict[str, xr.Variable]) -> None:
    """Add ``box_edges`` (and the ``box_vector``/``spatial`` coordinates) of ``box``."""
    attrs = {"boundary": list(box.boundary), "dimension": box.dimension}
    if box.edges is not None and "box_edges" not in drop:
        el = box.edges
        first = _time_dims(b, el, "box_edges", main, coords)
        tail = el.shape[len(first):]
        box_dims = (SPATIAL_DIM,) if len(tail) == 1 else (BOX_VECTOR_DIM, SPATIAL_DIM)
        edges_var = b.variable(el, first + box_dims, attrs)
        if edges_var is not None:
            variables["box_edges"] = edges_var
        if edges_var is not None and len(tail) == 2:
            coords[BOX_VECTOR_DIM] = xr.Variable(
                (BOX_VECTOR_DIM,), np.array(BOX_VECTOR_LABELS[: tail[0]])
            )
    for name, extra in (("box_offset", box.offset), ("box_pbc", box.pbc)):
        if extra is None or name in drop:
            continue  # other writers' members: the lower corner; periodicity per frame
        var = b.variable(extra, _time_dims(b, extra, name, main, coords) + (SPATIAL_DIM,))
        if var is not None:
            variables[name] = var
    coords[SPATIAL_DIM] = xr.Variable((SPATIAL_DIM,), np.array(SPATIAL_LABELS[:box.dimension]))


def _group_dimension(pg: ParticlesGroupInfo) -> int | None:
    """The spatial dimension of a particles group: its box's; without a box, the number of
    components of its positions (or velocities, forces, images), so that an element of
    another width (quaternions) gets an axis of its own rather than a clashing ``spatial``."""
    if pg.box is not None:
        return pg.box.dimension
    for name in ("position", "velocity", "force", "image"):
        el = pg.elements.get(name)
        if el is None:
            continue
        tail = el.shape[1:] if el.time_dependent else el.shape
        if len(tail) == 2:
            return int(tail[1])
    return None


def _particles_dataset(
    b: _Builder,
    pg: ParticlesGroupInfo,
    *,
    topology: Any,
    select: str | None,
    drop: set[str],
) -> xr.Dataset:
    info = b.info
    dimension = _group_dimension(pg)
    main = _main_sampling(pg.elements.values(), "position")
    variables: dict[str, xr.Variable] = {}
    coords: dict[str, xr.Variable] = {}
    if main is not None:
        coords.update(b.time_coords(main, TIME_DIM, pg.path))

    n_atoms: int | None = None
    for name, el in pg.elements.items():
        if name in drop:
            continue
        first = _time_dims(b, el, name, main, coords)
        dims = first + _tail_dims(el, name, first, particles=not el.in_subgroup,
                                  dimension=dimension)
        if ATOM_DIM in dims:
            size = el.shape[dims.index(ATOM_DIM)]
            if n_atoms is None:
                n_atoms = size
            elif size != n_atoms:
                b.report.note(el.path, f"has {size} particles but other elements of "
                              f"{pg.path} have {n_atoms}", "left out")
                continue
        var = b.variable(el, dims)
        if var is not None and len(dims) == len(first) + 2 and el.shape[-1] == 1 and \
                dims[len(first)] == ATOM_DIM and (name in PER_PARTICLE_SCALARS
                                                  or dims[-1] != SPATIAL_DIM):
            # one value per particle with an axis of length 1 after it (ESPResSo++'s
            # parallel writer: id, mass, charge, type, ...), not a 1-D vector
            var = _without_last_axis(b, el, var)
        if var is not None:
            variables[name] = var

    _mark_particle_order(b, pg, variables)
    if pg.box is not None:
        _box_variables(b, pg.box, main, drop, variables, coords)
    if SPATIAL_DIM not in coords and any(SPATIAL_DIM in v.dims for v in variables.values()):
        size = next(v.sizes[SPATIAL_DIM] for v in variables.values() if SPATIAL_DIM in v.dims)
        if size <= 3:
            coords[SPATIAL_DIM] = xr.Variable((SPATIAL_DIM,), np.array(SPATIAL_LABELS[:size]))

    attrs = _file_attrs(info)
    attrs["h5md_group"] = pg.path
    if n_atoms is not None:
        coords[ATOM_DIM] = xr.Variable((ATOM_DIM,), np.arange(n_atoms, dtype=np.int64),
                                       {"long_name": "0-based atom index"})
    ds = _dataset(variables, coords, attrs, info, pg.path, b.report)

    own = topology is None or (isinstance(topology, (str, os.PathLike))
                               and _normalize_path(topology) == info.filename)
    if own and info.topology is not None and n_atoms is not None and (
            topology is None or info.topology.n_atoms == n_atoms):
        ds = _with_module_topology(b, ds, info.topology, n_atoms, pg.path)
        if topology is None and "topology" in ds.attrs:
            topology = info.filename
    elif own and info.vmd_structure is not None and n_atoms is not None:
        ds = _with_vmd_structure(b, ds, n_atoms, pg.path)
        if topology is None and "topology" in ds.attrs:
            topology = info.filename
    elif topology is not None:
        ds = _with_topology(ds, topology, n_atoms, info.filename, pg.path)
    if select is not None:
        ds = _selected(ds, info, pg.path, topology, select)
    return ds


def _selected(ds: xr.Dataset, info: FileInfo, group: str, topology: Any,
              select: str) -> xr.Dataset:
    """The atoms of ``ds`` that the MDAnalysis selection ``select`` picks (``select=``)."""
    from h5mdx.engine.topology import SUBSET_OF_ATTR, load_universe, select_indices

    n_atoms = ds.sizes.get(ATOM_DIM)
    if topology is None:
        module = info.topology
        raise TopologyError(
            f"{info.filename}: select={select!r} needs a topology: pass "
            "topology='system.psf' (any file MDAnalysis reads)" + (
                f"; the file's {module.path} describes {module.n_atoms} atoms, not the "
                f"{n_atoms} of {group}" if module is not None else "")
        )
    indices = select_indices(load_universe(topology, group), select, info.filename)
    if SUBSET_OF_ATTR in ds[ATOM_DIM].attrs:  # the topology's indices of the atoms held
        indices = np.flatnonzero(np.isin(ds[ATOM_DIM].values, indices))
        if not indices.size:
            raise TopologyError(f"{info.filename}: the selection {select!r} matches "
                                f"none of the {n_atoms} atoms of {group}")
    ds = ds.isel({ATOM_DIM: indices})
    ds.attrs["selection"] = select
    return ds


def _without_last_axis(b: _Builder, el: ElementInfo, var: xr.Variable) -> xr.Variable:
    """A per-particle scalar element stored with a trailing axis of length 1 (ESPResSo++'s
    parallel writer stores ``id``, ``mass``, ``charge`` as ``(1, N, 1)``), served without
    it, noted: per-atom comparisons and ``ds.md.by_id()`` need one number per particle."""
    b.report.note(el.path, f"holds one value per particle in a trailing axis of length 1 "
                  f"(shape {el.shape}; ESPResSo++'s parallel writer stores them so)",
                  "served per particle, without that axis")
    return _without_axes(var, [str(var.dims[-1])])


def _without_axes(var: xr.Variable, dims: Iterable[str]) -> xr.Variable:
    """``var`` without its axes ``dims`` of length 1 (lazily: the first entry of each),
    its preferred chunks without them too."""
    gone = set(dims)
    out = var.isel({d: 0 for d in gone})
    pref = out.encoding.get("preferred_chunks")
    if pref:
        out.encoding["preferred_chunks"] = {d: n for d, n in pref.items() if d not in gone}
    return out


def _with_topology(ds: xr.Dataset, topology: Any, n_atoms: int | None, filename: str,
                   group: str) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of ``topology`` and ``attrs["topology"]``."""
    from h5mdx.engine.topology import (
        SUBSET_OF_ATTR,
        UNIVERSE_ENCODING,
        input_indices,
        load_universe,
        topology_coords,
        topology_label,
    )

    if n_atoms is None:
        raise TopologyError(f"{filename}: {group} has no per-atom element")
    universe = load_universe(topology, group)
    ids = input_indices(ds, universe, n_atoms, filename, group)
    if ids is None:
        tcoords = topology_coords(universe, n_atoms, filename)
    else:  # a selection's atoms, found in the whole system's topology by their id
        tcoords = topology_coords(universe.atoms[ids], n_atoms, filename)
        ds = ds.assign_coords({ATOM_DIM: xr.Variable((ATOM_DIM,), ids, {
            "long_name": "0-based atom index in the topology (the file's id)",
            SUBSET_OF_ATTR: len(universe.atoms)})})
    ds = ds.assign_coords(
        {k: (ATOM_DIM, v) for k, v in tcoords.items() if k not in ds.variables}
    )
    ds.attrs["topology"] = topology_label(topology, universe)
    # the atom coordinate travels with every DataArray: it names its topology, and holds
    # a Universe passed as such, which analyses use (its masses, as edited)
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    if not isinstance(topology, (str, os.PathLike)):
        ds[ATOM_DIM].encoding[UNIVERSE_ENCODING] = universe
    return ds


def _with_module_topology(b: _Builder, ds: xr.Dataset, module: ModuleTopology, n_atoms: int,
                          group: str) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of GROMACS' topology module (names, residues,
    masses, charges: :func:`h5mdx.engine.topology.module_coords`), and
    ``attrs["topology"]`` naming the file itself, where the module describes the group's
    atoms; ``ds`` as it is (noted) where it describes another number of atoms."""
    from h5mdx.engine.topology import module_coords

    if module.n_atoms != n_atoms:
        b.report.note(module.path, f"describes {module.n_atoms} atoms but {group} has "
                      f"{n_atoms} (GROMACS writes the whole system's topology beside a "
                      "group of selected atoms, without their indices)",
                      "no per-atom topology attached: pass topology= one of the group's "
                      "atoms")
        return ds
    ds = ds.assign_coords({k: xr.Variable((ATOM_DIM,), v, attrs)
                           for k, (v, attrs) in module_coords(module).items()
                           if k not in ds.variables})
    ds.attrs["topology"] = b.info.filename
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    if module.system_name:
        ds.attrs["system_name"] = module.system_name
    return ds


def _with_vmd_structure(b: _Builder, ds: xr.Dataset, n_atoms: int, group: str) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of VMD's structure module (names, types,
    residues, segments, chains, masses, charges, radii, atomic numbers:
    :func:`h5mdx.format.vmd_structure.per_atom`), and ``attrs["topology"]`` naming the file
    itself, where the module describes any of the group's atoms; each property that
    does not fit the group is noted and left out."""
    from h5mdx.format.vmd_structure import COORD_ATTRS, bonds, per_atom

    structure = b.info.vmd_structure
    if structure is None:
        return ds
    species = ds.variables.get("species")
    values = species.values if species is not None and species.dims == (ATOM_DIM,) else None
    coords = per_atom(structure, values, n_atoms, group, b.report.note)
    bonds(structure, n_atoms, b.report.note)  # said here: the Universe's leave them out
    coords = {k: v for k, v in coords.items() if k not in ds.variables}
    if not coords:
        return ds
    ds = ds.assign_coords({k: xr.Variable((ATOM_DIM,), v, COORD_ATTRS.get(k, {}))
                           for k, v in coords.items()})
    ds.attrs["topology"] = b.info.filename
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    return ds


#: the attribute on per-particle variables of a group whose particle order varies
PARTICLE_ORDER_ATTR = "particle_order"


def _mark_particle_order(b: _Builder, pg: ParticlesGroupInfo,
                         variables: dict[str, xr.Variable]) -> None:
    """Warn once, and mark the per-particle time series, where the group's ``id`` holds
    other particles in a slot in some frames (:attr:`ParticlesGroupInfo.order_varies`),
    or no particle (its fill value: :attr:`ParticlesGroupInfo.empty_slots`)."""
    if pg.order_varies is not None:
        first, other = pg.order_varies
        note = (f"as stored: the slots hold other particles in some frames (see {pg.path}/id, "
                f"frames {first} and {other})")
        said = (f"frames {first} and {other} hold other particles in the same slots (a writer "
                "that stores each frame in its own order, such as ESPResSo)")
    elif pg.empty_slots is not None:
        frame, count = pg.empty_slots
        fill = pg.elements["id"].fillvalue
        note = (f"as stored: some slots hold no particle (see {pg.path}/id, frame {frame}: "
                f"{count} slots of id {fill})")
        said = (f"frame {frame} has {count} slot(s) that hold no particle (id {fill}, its "
                "fill value: a writer that pads the particle axis, as ESPResSo++ does, or "
                "particles absent in some frames; their positions are placeholders)")
    else:
        return
    for name, var in variables.items():
        if name != "id" and TIME_DIM in var.dims and ATOM_DIM in var.dims:
            var.attrs[PARTICLE_ORDER_ATTR] = note
    warnings.warn(ParticleOrderWarning(
        f"{b.info.filename} [{pg.path}/id]: {said}; the elements are served as stored, slot "
        f"by slot, marked {PARTICLE_ORDER_ATTR!r}: put them in one order by id before "
        "per-atom analyses (ds.md.by_id(); the RMSD refuses them as they are)"),
        stacklevel=2)


def _file_attrs(info: FileInfo) -> dict[str, Any]:
    attrs: dict[str, Any] = {"h5md_version": f"{info.version[0]}.{info.version[1]}"}
    for k, v in info.author.items():
        attrs[f"author_{k}"] = v
    for k, v in info.creator.items():
        attrs[f"creator_{k}"] = v
    for k, v in info.program.items():
        attrs[f"program_{k}"] = v
    if info.modules:
        attrs["h5md_modules"] = ", ".join(f"{name} {mod['version']}" if "version" in mod
                                          else name for name, mod in info.modules.items())
    attrs["source"] = info.filename
    return attrs


def _observables_dataset(b: _Builder, prefix: str, drop: set[str],
                         root: str = "observables") -> xr.Dataset:
    """The elements directly under ``/<root>/<prefix>`` (``root``: ``observables`` or
    ``connectivity``)."""
    return _elements_dataset(b, b.info.elements_under(root, prefix),
                             f"/{root}/{prefix}".rstrip("/"), drop)


def _elements_dataset(b: _Builder, elements: dict[str, ElementInfo], where: str,
                      drop: set[str]) -> xr.Dataset:
    """The Dataset of elements that are not per particle (observables, connectivity)."""
    info = b.info
    main = _main_sampling(elements.values(), None)
    variables: dict[str, xr.Variable] = {}
    coords: dict[str, xr.Variable] = {}
    if main is not None:
        coords.update(b.time_coords(main, TIME_DIM, where))
    for name, el in elements.items():
        if name in drop:
            continue
        first = _time_dims(b, el, name, main, coords)
        dims = first + _tail_dims(el, name, first, particles=False, dimension=None)
        if el.axis is not None:
            dims = _function_axis(b, el, name, dims, coords, variables)
        var = b.variable(el, dims)
        if var is not None and el.time_dependent and el.axis is None and \
                len(el.shape) == 3 and el.shape[1:] == (1, 1):
            # one number per frame in a (T, 1, 1) value: GROMACS' writer gives every
            # element three axes (its lambda), not a 1 x 1 tensor
            b.report.note(el.path, f"holds one number per frame in a value of shape "
                          f"{el.shape} (GROMACS' writer stores its scalar observables so)",
                          "served per frame, without the two axes of length 1")
            var = _without_axes(var, dims[1:])
        if var is not None:
            variables[name] = var
    attrs = _file_attrs(info)
    attrs["h5md_group"] = where
    return _dataset(variables, coords, attrs, info, where, b.report)


def _function_axis(b: _Builder, el: ElementInfo, name: str, dims: tuple[str, ...],
                   coords: dict[str, xr.Variable],
                   variables: dict[str, xr.Variable]) -> tuple[str, ...]:
    """``dims`` of an H5MD-NOMAD ensemble average or correlation function with its first
    dimension the axis it is a function of (``<name>_bins``, ``<name>_times``), added to
    ``coords``; its other datasets of that length (``errors``) added to ``variables`` as
    ``<name>_<dataset>``, in the value's unit where they have none (errors do not)."""
    assert el.axis is not None
    axis, values, unit = el.axis
    dim = f"{name}_{axis}"

    def variable(data: np.ndarray, unit: str | None, path: str) -> xr.Variable:
        scale, unit = b._unit(unit, path)
        data = data * scale if scale != 1.0 else data
        return xr.Variable((dim,), data, {"units": unit} if unit is not None else {},
                           {"source": b.info.filename, "h5md_path": path})

    coords[dim] = variable(values, unit, f"{el.path}/{axis}")
    for key, (data, unit) in el.beside.items():
        variables[f"{name}_{key}"] = variable(data, unit if unit is not None else el.unit,
                                              f"{el.path}/{key}")
    return (dim, *dims[1:])


def _default_group(info: FileInfo, listing: str) -> str:
    """The group a plain open reads: the only particles group; without one, the
    observables (the only group of them where none lie directly under /observables)."""
    if len(info.particles) == 1:
        return next(iter(info.particles.values())).group
    if info.particles:
        raise ValueError(
            f"{info.filename} has several particles groups; choose one with group=... "
            f"(--group on the command line): "
            f"{listing}; or open them all with xr.open_datatree(..., engine='h5md')"
        )
    if not info.observables:
        raise H5MDFormatError(info.filename, "/particles", "the file has no particles group")
    if not info.elements_under("observables") and len(info.observable_groups) == 1:
        return f"observables/{info.observable_groups[0]}"
    return "observables"


#: The groups an error lists at most (the rest counted).
_LISTED = 30


def _resolve_group(info: FileInfo, group: str | None) -> tuple[str, str]:
    """Return (kind, name): ("particles", group), ("observables", prefix),
    ("connectivity", ""), ("parameters", subgroup) or ("other", path): a root group H5MD
    does not define, or a group below it."""
    available = [pg.group for pg in info.particles.values()]
    if info.observables:
        available.append("observables")
        available.extend(f"observables/{g}" for g in info.observable_groups)
    if info.connectivity:
        available.append("connectivity")
    # (where a group below was sought, the groups on the way to it)
    available.extend(f"connectivity/{g}" for g in info.connectivity_groups)
    available.extend("parameters" + (f"/{sub}" if sub else "") for sub in info.parameter_groups)
    available.extend(sorted(info.other_groups))
    listing = ", ".join(repr(a) for a in available[:_LISTED]) or "none"
    if len(available) > _LISTED:  # H5MD-NOMAD: ten thousand groups of connectivity
        listing += f" and {len(available) - _LISTED} more (h5mdx info lists them)"
    g = (group if group is not None else _default_group(info, listing)).strip("/")
    particles = info.particles_group(g)
    if particles is not None:
        return "particles", particles
    if g == "observables" and info.observables:
        if not info.elements_under("observables"):
            subs = ", ".join(repr(f"observables/{s}") for s in info.observable_groups)
            raise ValueError(f"{info.filename} has no observables directly under "
                             f"/observables; open one of its groups: {subs}")
        return "observables", ""
    if g.startswith("observables/") and g[len("observables/"):] in info.observable_groups:
        return "observables", g[len("observables/"):]
    if g == "connectivity" and info.connectivity:
        return "connectivity", ""
    if g.startswith("connectivity/") and g[len("connectivity/"):] in info.connectivity_groups:
        return "connectivity", g[len("connectivity/"):]
    if g == "parameters" or g.startswith("parameters/"):
        return "parameters", g[len("parameters/"):]
    if g.partition("/")[0] in info.other_groups:
        return "other", g
    raise ValueError(f"{info.filename} has no group {group!r}; available: {listing}")


def _manager(filename: str, swmr: bool) -> CachingFileManager:
    # a live file (SWMR) grows while it is read: only a plain file is held to its state
    stamp = None if swmr else _direct.file_stamp(filename)
    state = _file_state(stamp)
    manager = CachingFileManager(_opener, filename, mode="r",
                                 kwargs={"swmr": swmr, "state": state})
    _STAMPS[manager] = stamp
    return manager


#: The stamp (:func:`h5mdx.format.direct.file_stamp`) of the file each file manager of
#: this process opened, taken as it did; None for a live file.
_STAMPS: weakref.WeakKeyDictionary[CachingFileManager, tuple[int, int, int, int] | None] = (
    weakref.WeakKeyDictionary())


class _Closer:
    """What closing the Dataset (or each node of a tree) does: close the h5py file and
    release the direct readers of this open (:func:`h5mdx.format.direct.hold`).

    A pickled copy (a Dataset sent to another process) closes its file there and holds
    nothing."""

    def __init__(self, manager: CachingFileManager, filename: str) -> None:
        self.manager = manager
        self._release: Callable[[], None] | None = _direct.hold(filename)
        # a Dataset dropped without close(): its readers' descriptors close with the file
        # (they stayed open, a deleted file's space in use; found by an audit)
        weakref.finalize(manager, _direct.release_soon, self._release)

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


def _dataset(variables: dict[str, xr.Variable], coords: dict[str, xr.Variable],
             attrs: dict[str, Any], info: FileInfo, where: str, report: _Report) -> xr.Dataset:
    """``xr.Dataset`` that reports elements with clashing dimension sizes as a format error.

    An element named as a coordinate or dimension (``time``, ``step``, ``atom``) is
    served as ``<name>_element`` (noted)."""
    taken = set(coords) | {d for v in (*variables.values(), *coords.values()) for d in v.dims}
    for name in [n for n in variables if n in taken]:
        new = f"{name}_element"
        report.note(variables[name].encoding.get("h5md_path", f"{where}/{name}"),
                    f"an element named {name!r} clashes with the coordinate or dimension of "
                    "that name", f"served as {new!r}")
        variables[new] = variables.pop(name)
    _same_time_blocks({**variables, **coords})
    try:
        return xr.Dataset(variables, coords, attrs)
    except ValueError as err:
        raise H5MDFormatError(
            info.filename, where, f"its elements do not fit together: {err}"
        ) from None


def _same_time_blocks(variables: Mapping[str, xr.Variable]) -> None:
    """One preferred block length per time axis, the largest variable's, for every variable
    on it (coordinates too): with ``chunks={}`` elements of other HDF5 chunks, and ``step``,
    had other blocks, and ``ds.chunks`` and ``xr.map_blocks`` raised (found by an audit)."""
    block: dict[str, int] = {}
    for var in sorted(variables.values(), key=lambda v: v.size * v.dtype.itemsize,
                      reverse=True):
        for dim, n in (var.encoding.get("preferred_chunks") or {}).items():
            if dim == TIME_DIM or str(dim).startswith(f"{TIME_DIM}_"):
                block.setdefault(str(dim), int(n))
    for var in variables.values():
        on = [d for d in var.dims if d in block]
        if not on:
            continue
        pref = dict(var.encoding.get("preferred_chunks")
                    or {d: int(n) for d, n in zip(var.dims, var.shape, strict=True)})
        pref.update({d: block[d] for d in on})
        var.encoding["preferred_chunks"] = pref


#: Errors of h5py/numpy/xarray that a malformed file can still provoke while the
#: Dataset is assembled; they are reported as :class:`H5MDFormatError`.
_STRUCTURE_ERRORS = (KeyError, RuntimeError, TypeError, AttributeError, IndexError, OverflowError)


def _checked_keywords(topology: Any, convert_units: Any, chunk_mib: Any,
                      select: Any = None) -> Any:
    """The open's keywords, checked before the file is read (a wrong type failed deep
    inside, reported as a file that cannot be assembled); the topology's path with ``~``
    expanded, as the file's is."""
    if isinstance(topology, (str, os.PathLike)):
        topology = os.path.expanduser(os.fspath(topology))
    elif topology is not None and not hasattr(topology, "atoms"):
        raise TypeError("topology= takes a topology file's path or an MDAnalysis Universe, "
                        f"not {type(topology).__name__}")
    if not isinstance(convert_units, (bool, np.bool_)):
        raise TypeError(f"convert_units= takes True or False, not {convert_units!r}")
    if isinstance(chunk_mib, (bool, np.bool_)) or not isinstance(
            chunk_mib, (int, float, np.integer, np.floating)):
        raise TypeError(f"chunk_mib= takes a number of MiB, not {chunk_mib!r}")
    if not 0 < chunk_mib < float("inf"):
        raise ValueError(f"chunk_mib= must be a positive number of MiB, not {chunk_mib!r}")
    if select is not None and not isinstance(select, str):
        raise TypeError("select= at open takes an MDAnalysis selection string (atoms by "
                        f"index: ds.isel(atom=...) or ds.sel(atom=...)), not "
                        f"{type(select).__name__}")
    return topology


def _normalize_path(filename_or_obj: Any) -> str:
    if isinstance(filename_or_obj, (str, os.PathLike)):
        return os.path.abspath(os.path.expanduser(os.fspath(filename_or_obj)))
    raise TypeError(
        "the h5md engine opens files by path (str or os.PathLike), not "
        f"{type(filename_or_obj).__name__}"
    )


def _open_one(
    filename: str,
    *,
    group: str | None,
    topology: Any,
    select: str | None,
    convert_units: bool,
    chunk_mib: float,
    swmr: bool,
    drop_variables: str | Iterable[str] | None,
    allow_external: bool = False,
    strict: bool = False,
) -> xr.Dataset:
    drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
    manager = _manager(filename, swmr)
    lock = HDF5_LOCK
    report = _Report(filename, strict)
    try:
        # the groups below /connectivity (ten thousand in H5MD-NOMAD's files) are not
        # walked: an open of one of them reads the groups on the way to it
        sought = (group or "").strip("/")
        info = _scan_with(manager, lock, allow_external, deep_connectivity=sought.startswith(
            "connectivity/") and sought[len("connectivity/"):])
        kind, name = _resolve_group(info, group)
        report.scanned(info, info.particles[name].path if kind == "particles" else
                       f"/{name}" if kind == "other" else f"/{kind}/{name}".rstrip("/"))
        b = _Builder(info, manager, convert_units=convert_units, chunk_mib=chunk_mib, lock=lock,
                     report=report, allow_external=allow_external)
        if kind == "particles":
            ds = _particles_dataset(
                b, info.particles[name], topology=topology, select=select, drop=drop
            )
        else:
            if select is not None or topology is not None:
                raise ValueError("topology= and select= apply to particles groups only")
            if kind == "observables":
                ds = _observables_dataset(b, name, drop)
            elif kind == "connectivity":
                ds = _observables_dataset(b, name, drop, "connectivity")
            elif kind == "other":
                root, _, sub = name.partition("/")
                ds = _free_form_group(b, sub, group, drop, root)
            else:
                ds = _free_form_group(b, name, group, drop)
    except _STRUCTURE_ERRORS as err:
        manager.close()
        error = H5MDFormatError(
            filename, None, f"cannot assemble a Dataset ({type(err).__name__}: {err})")
        error.unexpected = True
        raise error from None
    except BaseException:
        manager.close()
        raise
    report.emit()
    ds = _drop_coordinates(ds, drop)
    _set_unlimited_dims(ds, b.growable)
    ds.set_close(_Closer(manager, filename))
    # the engine's keywords of this open, which h5mdx.engine.live.refresh opens again with
    ds.encoding["h5md_open"] = {
        "group": group, "select": select, "convert_units": convert_units,
        "chunk_mib": chunk_mib, "swmr": swmr, "allow_external": allow_external,
        "strict": strict, "drop_variables": sorted(drop) or None}
    return ds


def _set_unlimited_dims(ds: xr.Dataset, growable: set[str]) -> None:
    """Serve the time axes of the elements in ``growable`` (H5MD paths) as xarray's netCDF
    engines serve unlimited dimensions, in ``ds.encoding["unlimited_dims"]``:
    ``ds.to_netcdf()`` then writes them unlimited, so that frames can be appended."""
    ds.encoding["unlimited_dims"] = {
        var.dims[0] for var in ds.variables.values()
        if var.dims and var.encoding.get("h5md_path") in growable}


def _drop_coordinates(ds: xr.Dataset, drop: set[str]) -> xr.Dataset:
    """``ds`` without the coordinates named in ``drop_variables`` (``step``, ``time``,
    ``species``...): built with the elements they index, dropped once built, as xarray's
    own engines drop any variable named."""
    names = [name for name in drop if name in ds.coords]
    return ds.drop_vars(names) if names else ds


class H5MDBackendEntrypoint(BackendEntrypoint):
    """Open H5MD 1.1 molecular-dynamics files with xarray: ``engine="h5md"``.

    Examples
    --------
    >>> ds = xr.open_dataset("traj.h5md", engine="h5md", chunks={})  # doctest: +SKIP
    >>> ds.position  # (time, atom, spatial), lazily read  # doctest: +SKIP
    """

    description: ClassVar[str] = (
        "Open H5MD molecular-dynamics trajectories (particles, box, observables) lazily"
    )
    url: ClassVar[str] = "https://github.com/h5mdx/h5mdx"
    supports_groups: ClassVar[bool] = True
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj",
        "drop_variables",
        "group",
        "topology",
        "select",
        "convert_units",
        "chunk_mib",
        "swmr",
        "allow_external",
        "strict",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Claim only HDF5 files that have an ``/h5md`` group."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        path = _normalize_path(filename_or_obj)
        return os.path.isfile(path) and is_h5md(path)

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        topology: Any = None,
        select: str | None = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> xr.Dataset:
        """Open one particles group (or observables group) as a Dataset.

        Parameters
        ----------
        filename_or_obj : str or path-like
            The H5MD file.
        drop_variables : str or iterable of str, optional
            Elements not to open.
        group : str, optional
            ``"trajectory"``/``"particles/trajectory"``, ``"observables"`` or a nested
            observables group such as ``"observables/atoms"``. Default: the only
            particles group.
        topology : str, path-like or MDAnalysis.Universe, optional
            Adds per-atom coordinates (``name``, ``resname``, ``resid``, ``segid``,
            ``type``, ``mass``, ``charge``).
        select : str, optional
            MDAnalysis selection restricting the ``atom`` dimension (needs ``topology``).
        convert_units : bool, default False
            Convert to Å, ps, Å/ps, kJ/(mol·Å), kJ/mol, u, e.
        chunk_mib : float, default 128
            Target size of the preferred dask blocks along ``time``.
        swmr : bool, default False
            Open a file that is being written in SWMR mode: the Dataset shows the
            frames written so far; ``h5mdx.engine.live.refresh(ds)`` (or closing it and
            opening again: two open Datasets of one live file break each other's reads in
            HDF5) shows more.
        allow_external : bool, default False
            Follow external links and read datasets whose data live in other files
            (external raw storage, virtual datasets mapping other files). Refused by
            default, with an :class:`~h5mdx.errors.H5MDFormatError` naming this keyword.
        strict : bool, default False
            Refuse any departure from H5MD with an
            :class:`~h5mdx.errors.H5MDFormatError` naming the file, the H5MD path and
            the problem. By default h5mdx reads what carries usable data and emits one
            :class:`~h5mdx.errors.H5MDConformanceWarning` per problem (saying what it
            assumed, or that a part was left out).
        **kwargs
            None: any keyword is a ``TypeError``, xarray's CF decoders (``decode_times``,
            ``mask_and_scale``, ...) with a word on why they do not apply.

        Returns
        -------
        xarray.Dataset
        """
        _no_other_keywords("open_dataset", kwargs)
        filename = _normalize_path(filename_or_obj)
        topology = _checked_keywords(topology, convert_units, chunk_mib, select)
        return _open_one(
            filename,
            group=group,
            topology=topology,
            select=select,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            drop_variables=drop_variables,
            allow_external=allow_external,
            strict=strict,
        )

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        topology: Any = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> dict[str, xr.Dataset]:
        """Every group of the file as ``{path: Dataset}`` (see :func:`open_groups`);
        ``group=``: those of that group's subtree, with paths relative to it.

        Parameters
        ----------
        filename_or_obj : str or path-like
            The H5MD file.
        drop_variables : str or iterable of str, optional
            Elements not to open, in every group.
        topology : str, path-like or MDAnalysis.Universe, optional
            Per-atom coordinates for the particles groups (as :meth:`open_dataset`).
        convert_units : bool, default False
            Convert to Å, ps, Å/ps, kJ/(mol·Å), kJ/mol, u, e.
        chunk_mib : float, default 128
            Target size of the preferred dask blocks along ``time``.
        swmr : bool, default False
            Open a file that is being written in SWMR mode (see :meth:`open_dataset`).
        allow_external : bool, default False
            Follow external links and read data that live in other files.
        strict : bool, default False
            Refuse any departure from H5MD with an :class:`~h5mdx.errors.H5MDFormatError`;
            by default one :class:`~h5mdx.errors.H5MDConformanceWarning` per problem.
        **kwargs
            ``group``: the path of a group (``"particles"``, ``"observables"``, ...)
            whose subtree alone is opened. Any other keyword is a ``TypeError``.

        Returns
        -------
        dict of str to xarray.Dataset
            One Dataset per group, by path (``"/"`` holds the file's metadata).
        """
        group = kwargs.pop("group", None)
        _no_other_keywords("open_groups", kwargs)
        filename = _normalize_path(filename_or_obj)
        topology = _checked_keywords(topology, convert_units, chunk_mib)
        groups = open_groups(
            filename,
            drop_variables=drop_variables,
            topology=topology,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            allow_external=allow_external,
            strict=strict,
            group=group,
        )
        if group is None or not group.strip("/"):
            return groups
        root = "/" + group.strip("/")
        return {path[len(root):] or "/": ds for path, ds in groups.items()
                if path == root or path.startswith(root + "/")}

    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        topology: Any = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> xr.DataTree:
        """The whole file as a DataTree mirroring its groups (``group=``: the subtree of
        that group, e.g. ``"particles"`` or ``"observables"``).

        Parameters
        ----------
        filename_or_obj, drop_variables, topology, convert_units, chunk_mib, swmr
            As :meth:`open_groups_as_dict`.
        allow_external, strict
            As :meth:`open_groups_as_dict`.
        **kwargs
            ``group``, as :meth:`open_groups_as_dict`.

        Returns
        -------
        xarray.DataTree
            Closing it (or leaving its ``with`` block) closes the file.
        """
        group = kwargs.pop("group", None)
        _no_other_keywords("open_datatree", kwargs)
        groups = self.open_groups_as_dict(
            filename_or_obj,
            drop_variables=drop_variables,
            topology=topology,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            allow_external=allow_external,
            strict=strict,
            group=group,
        )
        # each node closes the file (one close, however many nodes): tree.close() and
        # `with xr.open_datatree(...)` release it, as xarray's own engines do
        return datatree_from_dict_with_io_cleanup(groups)


def _no_other_keywords(what: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse keywords the engine does not take (xarray's CF decoders among them), as
    ``open_dataset`` does, instead of ignoring them."""
    if not kwargs:
        return
    cf = sorted(set(kwargs) & _CF_KEYWORDS)
    why = (" (CF decoding does not apply to H5MD: times and steps are numbers with a unit, "
           "served as they are, and a fill value reads as NaN; leave "
           f"{'it' if len(cf) == 1 else 'them'} out)") if cf else ""
    raise TypeError(f"the h5md engine's {what} got unexpected keyword(s) "
                    f"{', '.join(sorted(kwargs))}{why}")


#: xarray's CF-decoding keywords, which H5MD files do not need.
_CF_KEYWORDS = frozenset({"mask_and_scale", "decode_times", "decode_timedelta", "use_cftime",
                          "concat_characters", "decode_coords"})


def open_groups(
    filename: str,
    *,
    drop_variables: str | Iterable[str] | None = None,
    topology: Any = None,
    convert_units: bool = False,
    chunk_mib: float = DEFAULT_TARGET_MIB,
    swmr: bool = False,
    allow_external: bool = False,
    strict: bool = False,
    group: str | None = None,
) -> dict[str, xr.Dataset]:
    """Open every group of an H5MD file (every particles group, observables, parameters).

    Where an ancestor's dimension would not align with a descendant's, the
    ancestor's dimension is renamed ``<dim>_<node>`` (e.g. ``time_observables``).
    This is what ``xr.open_datatree(path, engine="h5md")`` uses: the way to open a
    file with several particles groups at once.

    Parameters
    ----------
    filename : str
        The H5MD file.
    drop_variables, topology, convert_units, chunk_mib, swmr, allow_external
        As for ``xr.open_dataset(..., engine="h5md")``.
    strict : bool, default False
        Raise :class:`~h5mdx.errors.H5MDFormatError` on any departure from H5MD
        instead of one :class:`~h5mdx.errors.H5MDConformanceWarning` per problem.
    group : str, optional
        Only the subtree of this group (``"observables"``, ``"particles/solvent"``), with
        ``"/"``: only that is scanned and built (H5MD-NOMAD's ten thousand groups of
        connectivity are not walked for the observables).

    Returns
    -------
    dict of str to xarray.Dataset
        ``{"/": file attrs, "/particles/<g>": ..., "/observables": ...,
        "/observables/<sub>": ..., "/parameters": ...}``.

    Raises
    ------
    ValueError
        Where the file has no group ``group``.
    """
    manager = _manager(filename, swmr)
    lock = HDF5_LOCK
    report = _Report(filename, strict)
    root = "/" + group.strip("/") if group is not None and group.strip("/") else None
    try:
        info = _scan_with(manager, lock, allow_external,
                          deep_connectivity=_connectivity_walked(root), subtree=True)
        report.scanned(info, root)
        b = _Builder(info, manager, convert_units=convert_units, chunk_mib=chunk_mib, lock=lock,
                     report=report, allow_external=allow_external)
        drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        out = _group_datasets(b, info, topology, drop, root)
    except _STRUCTURE_ERRORS as err:
        manager.close()
        raise H5MDFormatError(
            filename, None, f"cannot assemble a DataTree ({type(err).__name__}: {err})"
        ) from None
    except BaseException:
        manager.close()
        raise
    report.emit()
    out = {path: _drop_coordinates(ds, drop) for path, ds in out.items()}
    _dealign(out)
    file_attrs = set(out["/"].attrs)
    for path, ds in out.items():
        if path != "/":
            ds.attrs = {k: v for k, v in ds.attrs.items() if k not in file_attrs}
    close = _Closer(manager, filename)
    for ds in out.values():
        ds.set_close(close)
        _set_unlimited_dims(ds, b.growable)
    return out


def _connectivity_walked(root: str | None) -> bool | str:
    """What of ``/connectivity`` an open of the subtree of ``root`` (None: the whole file)
    walks (``scan(deep_connectivity=..., connectivity_subtree=True)``): all of it for the
    whole file or ``/connectivity``; for a group below it, the way to that group and all
    below it (not H5MD-NOMAD's ten thousand other groups); else its groups' names."""
    if root is not None and root.startswith("/connectivity/"):
        return root.removeprefix("/connectivity/")
    return root in (None, "/connectivity")


def _group_datasets(b: _Builder, info: FileInfo, topology: Any, drop: set[str],
                    root: str | None) -> dict[str, xr.Dataset]:
    """The Dataset of every group of :func:`open_groups` (``root``: only those of its
    subtree, and ``"/"``), by path; a ValueError where ``root`` is none of them."""
    makers: dict[str, Callable[[], xr.Dataset]] = {
        "/": lambda: xr.Dataset(attrs=_file_attrs(info))}
    if info.particles:
        makers["/particles"] = xr.Dataset
    for pg in info.particles.values():
        makers[f"/{pg.group}"] = functools.partial(
            _particles_dataset, b, pg, topology=topology, select=None, drop=drop)
    for kind, elements, subs in (("observables", info.observables, info.observable_groups),
                                 ("connectivity", info.connectivity,
                                  info.connectivity_groups)):
        # a subtree of /connectivity is scanned alone: the others' elements are not seen
        if elements or (subs and root is not None and root.startswith("/connectivity/")):
            makers[f"/{kind}"] = functools.partial(_observables_dataset, b, "", drop, kind)
            for sub in subs:
                makers[f"/{kind}/{sub}"] = functools.partial(
                    _observables_dataset, b, sub, drop, kind)
    free_roots = ("parameters", *info.other_groups)

    def wanted(path: str) -> bool:
        return root is None or path == "/" or path == root or path.startswith(f"{root}/")

    out = {path: make() for path, make in makers.items() if wanted(path)}
    for free in free_roots:  # walked only where root is one or below one
        if root is None or f"{root}/".startswith(f"/{free}/"):
            for sub, params in _free_form_datasets(b, free).items():
                path = f"/{free}" + (f"/{sub}" if sub else "")
                if wanted(path):
                    out[path] = params
    if root is not None and len(out) == 1:  # "/" alone: no group of that path
        groups = [*(p for p in makers if p != "/"),
                  *(f"/{r}" for r in free_roots if r != "parameters" or info.parameters)]
        raise ValueError(f"{info.filename} has no group {root.lstrip('/')!r}; its groups: "
                         f"{', '.join(groups)}")
    return out


#: Parameters larger than this (bytes) are opened lazily rather than read at open time.
_PARAMETER_READ_BYTES = 2**20


def _free_form_datasets(b: _Builder, root: str = "parameters",
                        only: str | None = None) -> dict[str, xr.Dataset]:
    """``/parameters`` (or ``/<root>``, a root group H5MD does not define) and each group
    under it (or only ``only``) as a Dataset, by path relative to it (``""`` for the
    group itself): its datasets as variables (string scalars as attributes), its
    attributes as the Dataset's. A ``unit`` attribute is served as ``units``, converted
    with ``convert_units`` as elements' are."""
    with b.lock:
        f = b.manager.acquire(needs_lock=False)
        params = b.info.parameters
        if root != "parameters":  # walked now, where served: its problems said here
            params, problems = scan_free_form(f, root, allow_external=b.allow_external)
            where = f"/{root}" + (f"/{only}" if only else "")
            for problem in problems:
                if only is None or problem.path.startswith(f"{where}/"):
                    b.report.add(problem)
        grp = f.get(root)
        if not isinstance(grp, h5py.Group):
            return {}
        groups: dict[str, h5py.Group] = {"": grp}

        def visit(name: str, obj: h5py.HLObject) -> None:
            if isinstance(obj, h5py.Group):
                groups[name] = obj

        # visititems (H5Ovisit) visits every object once, without following soft links
        grp.visititems(visit)
        if only is not None:
            groups = {k: g for k, g in groups.items() if k == only}
        out = {sub: xr.Dataset(attrs={k: _plain(v) for k, v in g.attrs.items()})
               for sub, g in groups.items()}
        for g in groups.values():
            _note_free_form_links(b, g, root)
        for name, meta in params.items():
            sub, _, leaf = name.rpartition("/")
            if sub not in out:
                continue  # another group, or one reached only through a link not followed
            try:
                value = _parameter(b, grp[name], leaf, meta["path"])
            except H5MDFormatError as err:
                b.report.note(meta["path"], err.problem, "left out")
                continue
            if isinstance(value, str):
                out[sub].attrs[leaf] = value
                continue
            try:
                out[sub][leaf] = value
            except ValueError as err:  # its axes clash with another parameter's names
                b.report.note(meta["path"], f"it does not fit beside the other parameters "
                              f"of its group: {err}", "left out")
    return out


def _free_form_group(b: _Builder, sub: str, group: str | None, drop: set[str],
                     root: str = "parameters") -> xr.Dataset:
    """The Dataset of ``/<root>/<sub>`` (``group=`` as given, for the error)."""
    found = _free_form_datasets(b, root, only=sub)
    if sub not in found:
        found = _free_form_datasets(b, root)  # for the listing
        listing = ", ".join(repr(root + (f"/{k}" if k else "")) for k in found)
        raise ValueError(f"{b.info.filename} has no group {group!r}; the groups of "
                         f"/{root}: {listing or 'none'}")
    return found[sub].drop_vars([v for v in drop if v in found[sub].variables])


def _note_free_form_links(b: _Builder, grp: h5py.Group, root: str) -> None:
    """Note the soft and external links of a group of ``/<root>`` (``/parameters``, or a
    root group H5MD does not define): they are not followed."""
    for name in grp:
        link = grp.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink):
            what = f"a soft link to {link.path}"
        elif isinstance(link, h5py.ExternalLink):
            what = f"an external link to {link.filename}:{link.path}"
        else:
            continue
        b.report.note(f"{grp.name}/{name}", f"{what}, which h5mdx does not follow in "
                      f"/{root}", "left out")


def _parameter_problem(dset: h5py.Dataset) -> str | None:
    """Why a parameter dataset cannot be served, or None."""
    dtype = dset.dtype
    if dset.shape is None:
        return "an empty dataset (null dataspace) holds no value"
    if h5py.check_ref_dtype(dtype) is not None:
        return "object references, which h5mdx does not follow"
    if h5py.check_vlen_dtype(dtype) is not None and h5py.check_string_dtype(dtype) is None:
        return f"variable-length data ({h5py.check_vlen_dtype(dtype)} sequences)"
    return None


def _parameter(b: _Builder, dset: h5py.Dataset, leaf: str, path: str) -> xr.Variable | str:
    """One parameter dataset: a Variable (lazy when large), or the text of a string scalar."""
    problem = _parameter_problem(dset)
    if problem is not None:
        raise H5MDFormatError(b.info.filename, path, problem)
    attrs = {k: _plain(v) for k, v in dset.attrs.items()}
    try:  # as an element's (a one-element string array too)
        unit = scaled_unit(unit_text(attrs.pop("unit", None)), attrs.pop("unit_factor", None))
    except ValueError as err:
        b.report.note(path, str(err), "unit ignored")
        unit = None
    scale, unit = b._unit(unit, path) if dset.dtype.kind in "iuf" else (1.0, unit)
    if unit is not None:
        attrs["units"] = unit
    dims = tuple(f"{leaf}_dim_{i}" for i in range(dset.ndim))
    encoding = {"source": b.info.filename, "h5md_path": path}
    if dset.shape and dset.size * dset.dtype.itemsize > _PARAMETER_READ_BYTES:
        if dset.dtype.kind not in "biufc":
            raise H5MDFormatError(
                b.info.filename, path,
                f"a {dset.dtype} dataset of shape {dset.shape} is too large to read",
            )
        dtype = np.dtype(np.float64) if scale != 1.0 and dset.dtype.kind in "iub" else dset.dtype
        lazy = H5MDArray(b.manager, path, tuple(dset.shape), dtype, scale=scale, lock=b.lock,
                         filename=b.info.filename)
        return xr.Variable(dims, indexing.LazilyIndexedArray(lazy), attrs, encoding)
    try:
        value = dset[()]
    except (OSError, RuntimeError, ValueError, TypeError) as err:
        raise H5MDFormatError(
            b.info.filename, path, f"cannot read the parameter: {err}"
        ) from None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    arr = np.asarray(value)
    if arr.dtype.kind in "SO":  # bytes as UTF-8 (GROMACS' fixed-size strings), not ASCII
        arr = np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                        for v in arr.ravel().tolist()], dtype=str).reshape(arr.shape)
    elif scale != 1.0:
        arr = arr * scale
    return xr.Variable(dims, arr, attrs, encoding)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype.kind in "SO":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value.tolist()]
    return value


def _below(paths: Iterable[str]) -> dict[str, list[str]]:
    """The paths below each of ``paths`` (``"/a/b"`` is below ``"/a"`` and ``"/"``), in
    the order given: one pass over each path's ancestors, not a walk of every path per
    path (H5MD-NOMAD's ten thousand groups of connectivity made that quadratic)."""
    paths = list(paths)
    by_stem: dict[str, list[str]] = {}
    for path in paths:
        by_stem.setdefault(path.rstrip("/"), []).append(path)
    below: dict[str, list[str]] = {path: [] for path in paths}
    for path in paths:
        for i, char in enumerate(path):
            if char == "/":
                for above in by_stem.get(path[:i], ()):
                    if above != path:
                        below[above].append(path)
    return below


def _dealign(groups: dict[str, xr.Dataset]) -> None:
    """Rename ancestor dims that descendants would fail to align with."""
    paths = sorted(groups, key=lambda p: p.count("/"))
    below = _below(groups)
    for path in paths:
        ds = groups[path]
        descendants = [groups[p] for p in below[path]]
        renames = {}
        for dim in ds.dims:
            for child in descendants:
                if dim not in child.dims:
                    continue
                if child.sizes[dim] != ds.sizes[dim] or (
                    dim in ds.coords and dim in child.coords
                    and not ds.indexes[dim].equals(child.indexes[dim])
                ):
                    node = path.rstrip("/").rsplit("/", 1)[-1] or "root"
                    renames[dim] = f"{dim}_{node}"
                    break
        if renames:
            extra = {
                c: f"{c}_{renames[ds[c].dims[0]].split('_', 1)[1]}"
                for c in ds.coords
                if c not in renames and ds[c].ndim == 1 and ds[c].dims[0] in renames
                and c not in groups
            }
            groups[path] = ds.rename({**renames, **extra})


