"""The lazy arrays of the ``h5md`` engine: :class:`H5MDArray`, an H5MD dataset read
only when indexed.

A read goes lock-free through :mod:`h5mdx.format.direct` where the layout allows it
(else through h5py under the HDF5 lock), scales by the unit conversion and turns the
fill value into NaN. LAMMPS' bounds are served as edges and offset by ``_BoundsArray``.
:func:`why_reads_take_turns` says why a variable's reads are serialised.
"""

from __future__ import annotations

import threading
import traceback
import warnings
import zlib
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np
import xarray as xr
from xarray.backends import BackendArray, CachingFileManager
from xarray.backends.locks import HDF5_LOCK
from xarray.core import indexing

from h5mdx.engine.files import _LIVE_HINT
from h5mdx.errors import H5MDReadError
from h5mdx.format import direct as _direct
from h5mdx.format import reader_cache as _readers
from h5mdx.format import samples as _samples
from h5mdx.format import scratch as _scratch
from h5mdx.format.chunk_index import locate_chunks
from h5mdx.format.h5md import ensure_filters, refresh_alone


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
        :func:`h5mdx.format.reader_cache.file_stamp` of the file when opened, in this process: a
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
        stamp: tuple[int, int, int, int, int] | None = None,
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
        stamp = None if filename is None else _readers.file_stamp(filename)
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
            # into a reused buffer inside scratch.scratch_buffers (rmsd tasks), not a fresh
            # array of every read (see scratch.empty)
            shape = tuple(len(range(*k.indices(n))) for k, n in zip(key, dset.shape,
                                                                    strict=True))
            out = _scratch.empty(shape, dset.dtype)
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
        now = _readers.file_stamp(self.filename)
        if now is not None and now[:2] == self.stamp[:2] and now[2:] != self.stamp[2:]:
            if _samples.attributes_only(self.filename, self.stamp, now):  # chmod, ln
                self.stamp = now
                return
            raise H5MDReadError(
                self.filename, self.path, "was rewritten since it was opened (its size, "
                f"modification or change time changed: {self.stamp[2:]} -> {now[2:]}, as "
                "(bytes, ns, ns)); the data read would not be those the Dataset describes: "
                "open it again"
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
        _readers.forget(failed.reader)
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
        :mod:`h5mdx.analysis.blocks`): the rows are the stored bytes, in the served dtype,
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
            except H5MDReadError as err:  # the file itself (replaced since it was opened)
                _let_go(err)
                raise
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
                _let_go(err)
                raise H5MDReadError(
                    self._filename(), self.path,
                    f"reading {_describe_key(key, self.shape)} failed: {err}",
                ) from err
            except BaseException as err:  # an interrupt
                _let_go(err)
                raise
            finally:
                dset = None  # closed under the lock (a live file's: see _dataset)

    def _dataset(self) -> h5py.Dataset:
        """The h5py dataset, looked up once per open file (the caller holds the HDF5 lock).

        The file manager hands out the same ``h5py.File`` until it closes or evicts it; a
        new one is looked up again. A live (SWMR) file's is looked up for each read and
        not kept: HDF5's refresh corrupts every open handle of a dataset where two are open
        (:func:`~h5mdx.format.h5md.refresh_alone`), so that no handle of this process may
        outlive its read (the caller drops it before it lets go of the lock). A handle kept
        between reads was refreshed no more once a second one was open (another Dataset of
        the file: a later open or ``live.refresh`` saw no new frame), and one shared
        between the Datasets of a file was closed under a read of one by the close of
        another.
        """
        f = self.manager.acquire(needs_lock=False)
        if f.swmr_mode:
            dset = f[self.path]
            ensure_filters(dset)  # this process may not have loaded hdf5plugin (a worker)
            refresh_alone(dset)  # a live file: see the chunks written since open
            return dset
        held = self._open
        if held is not None and held[0] is f and f.id.valid and held[1].id.valid:
            return held[1]
        dset = f[self.path]
        ensure_filters(dset)  # this process may not have loaded hdf5plugin (a worker)
        self._open = (f, dset)
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
       ."""
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
        pool = _scratch.scratch_pool()  # one buffer for every frame (not one each)
        for k, i in enumerate(range(start, last + 1, step)):
            with _scratch.scratch_buffers(pool):
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
                    try:
                        located = locate_chunks(self._dataset(), missing)
                    except BaseException as err:
                        _let_go(err)  # the dataset, held by the traceback's frames
                        raise
                reader.add_locations(located)
            return then(reader)
        except _direct.NotAllocated:
            return None  # this read through h5py (the fill value), the others direct
        except _direct.Unsupported:
            _readers.forget(reader)
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
        return _readers.why_not_direct(filename, self.path)

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
        reader = _readers.cached(filename, self.path)
        if reader is not _readers.UNPLANNED:
            return reader
        with self.lock:
            reader = _readers.cached(filename, self.path)  # planned while this thread waited
            if reader is not _readers.UNPLANNED:
                return reader
            try:
                return _readers.plan_cached(self._dataset(), filename, self.path)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError):
                return None  # h5py's own read reports the problem with its context


class FieldArray(H5MDArray):
    """One field of a compound (structured) dataset, read when indexed: through h5py,
    the field alone (``h5py.Dataset.fields``), never by the direct reads, which read
    whole records. ``field``: the field's name, and those of the fields within it for a
    nested compound; a field of a sub-array type adds its axes after the dataset's. A
    text field (fixed-size or variable-length strings: ``dtype`` str of as many
    characters, or object) is served as str, its bytes decoded as UTF-8."""

    def __init__(self, manager: CachingFileManager, path: str, shape: tuple[int, ...],
                 dtype: np.dtype, *, field: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(manager, path, shape, dtype, **kwargs)
        self.field = field

    def __dask_tokenize__(self) -> tuple:
        return (*super().__dask_tokenize__(), self.field)

    def _finish(self, data: np.ndarray) -> np.ndarray:
        if self.dtype.kind not in "UO":
            return super()._finish(data)
        text = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in data.ravel().tolist()]
        return np.array(text, dtype=self.dtype).reshape(data.shape)

    def _direct_reader(self) -> _direct.DirectReader | None:
        return None

    def _read(self, dset: h5py.Dataset, key: tuple) -> np.ndarray:
        stored = key[:dset.ndim]
        data = np.asarray(dset.fields(self.field[0])[stored])
        for name in self.field[1:]:
            data = data[name]
        rest = key[dset.ndim:]
        if rest:  # the axes of a sub-array field, after those the integers dropped
            kept = sum(not isinstance(k, (int, np.integer)) for k in stored)
            data = data[(slice(None),) * kept + tuple(rest)]
        return np.array(data, order="C")  # a view of the records: a copy of its own


def _let_go(err: BaseException) -> None:
    """Clear the locals of the frames ``err``'s traceback holds (those that have
    returned), so that the h5py dataset a failed read looked up closes now, under the
    HDF5 lock, not when the exception goes (IPython keeps the last one): a live file's
    handle kept open made the next read's and a later open's handles second handles,
    which :func:`~h5mdx.format.h5md.refresh_alone` does not refresh (no new frame seen)."""
    traceback.clear_frames(err.__traceback__)


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
