"""Lock-free reads of HDF5 datasets: locate the bytes once, then ``os.pread`` them.

h5py serialises every call of a process (HDF5 is not thread-safe), so threads
that read one file through h5py take turns. Most trajectories are stored in the
simplest layouts HDF5 has: contiguous, or chunked without filters or with
deflate/shuffle. For those, the bytes of a chunk lie at a known place in the file
and the HDF5 library is not needed to read them: :class:`DirectReader` asks
HDF5 (once, under the caller's lock) where each chunk is, then reads the bytes
with ``os.pread`` into the output array and decodes them with zlib and numpy,
all of which release the GIL. Threads then read in parallel. Where numcodecs is
installed (it comes with zarr), chunks of the HDF5 Blosc (32001) and Zstandard
(32015) plugin filters are decoded with it too, and the byte shuffle is undone by its
compiled loop (7x numpy's); where imagecodecs is installed (the ``compress`` extra),
chunks of h5py's LZF (32000) and of the HDF5 LZ4 plugin (32004) are, and deflate is
inflated by zlib-ng (2.5-3.5x zlib) (the codecs of both release the GIL).

Chunk addresses come from :mod:`h5mdx.format.chunk_index`: for datasets of many chunks
(or any, where HDF5 is older than 1.12.3) the chunk B-tree read from the file with
pyfive's help, a range of rows at a time as reads need them; otherwise HDF5's one pass
over the whole index (``chunk_iter``, 1.12.3 and later). Without either, HDF5 can only
look chunks up one by one, each look-up walking the index; datasets with too many small
chunks for that (``MANY_CHUNKS``, ``LOOKUP_BYTES_PER_CHUNK``: MDAnalysis' one-frame
chunks of a long trajectory) are then read through h5py.

Anything unusual -- external or virtual storage, a userblock, a file driver
other than the default, unallocated chunks, other filters (bitshuffle, scale-offset,
Fletcher-32, ...; LZF and LZ4 without imagecodecs), non-numeric types -- is not
planned (:func:`plan_direct` gives the reason) and the caller reads through h5py.

Each process keeps one reader per dataset (:mod:`h5mdx.format.reader_cache`), and reads
inside a task land in buffers its thread reuses (:mod:`h5mdx.format.scratch`).

This module knows h5py, numpy and the standard library only, and numcodecs and
imagecodecs where installed.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import sys
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx.format.chunk_index import chunk_grid, chunk_tree, index_all_chunks
from h5mdx.format.scratch import empty

__all__ = [
    "DirectReader",
    "NotAllocated",
    "Unsupported",
    "box_of",
    "enabled",
    "plan_direct",
    "row_offsets",
    "within",
]

#: Environment variable that turns direct reads off (``0``): every read goes through h5py.
ENV_VAR = "H5MDX_DIRECT_READ"

#: Largest factor by which a bounding box may exceed what an index array or a stride
#: asks for; beyond it h5py's own selection reads less.
MAX_OVERREAD = 4

#: Chunks a dataset may have for its addresses to be looked up one by one
#: (``H5Dget_chunk_info_by_coord``) where HDF5 cannot iterate over them (before 1.12.3).
#: That look-up walks the chunk index: ~7.5 ns per chunk in the dataset (226 µs per call
#: for 30,000 chunks, HDF5 1.10.8; 635 µs for the last of 30,000 with HDF5 2.0). A
#: dataset with at most this many chunks is always read directly.
MANY_CHUNKS = 256
#: Beyond ``MANY_CHUNKS``, bytes per chunk needed per chunk in the dataset for the
#: look-ups to cost under ~10 % of reading the chunks from the page cache (~5 GB/s):
#: 7.5 ns x n_chunks <= 0.1 x chunk_bytes / 5 GB/s. (100, 3341, 3) float32 chunks (4 MB)
#: qualify up to ~10,000 chunks; (1, 3341, 3) chunks (40 kB) up to 256.
LOOKUP_BYTES_PER_CHUNK = 400

#: Chunks along axis 0 located at once from a chunk B-tree when a read finds some unknown
#: (~2.5 ms of walking for 4,096 one-frame chunks): a process locates about what it reads.
LOCATE_ROWS_CHUNKS = 4096
#: Chunks beyond which a dataset's chunk B-tree is read (:func:`chunk_tree`) rather than
#: HDF5's whole index (``chunk_iter``, ~2 µs per chunk in every process: 33 ms for
#: 16,384 chunks, about what importing pyfive costs once).
TREE_CHUNKS = 16384
#: Above this many chunks declared, a dataset storing fewer than 1/64 of them is read
#: through h5py: the reader's tables grow with the chunks declared (a file grown ahead to
#: 10^12 frames, 10 of them written, would need terabytes)
SPARSE_CHUNKS = 65536

#: Chunks of a read up to which its runs are found in a Python loop rather than numpy
_FEW = 16
#: Bytes of rows a read of part of each row reads at a time (:meth:`DirectReader.read`),
#: and a strided read of compressed chunks decodes into at a time: one atom's time
#: series of a 20 GB trajectory read every row at once, 20 GB for 0.2 MB
ROWS_BLOCK = 8 << 20
#: Bytes of decoded chunks this process keeps for reads of part of a chunk's rows
#: (:meth:`DirectReader._decoded`), the least recently used dropped first; a chunk of more
#: than a quarter of it is not kept. Frames read one by one from gzip chunks of 100
#: frames decoded each chunk 100 times, 7 ms a frame, where HDF5's chunk cache served
#: 0.01 ms.
KEPT_BYTES = 64 << 20
#: Bytes per row from which a read of at most a quarter of each row reads that part of
#: each row alone, a ``pread`` per row (~2 us), rather than the whole rows (~7 us for the
#: 40 KB of 3341 atoms' positions from the page cache)
_ROW_PART_BYTES = 16 << 10
#: Entries of a chunk offset table per window whose runs and unlocated chunks are listed
#: at once (``DirectReader._window``): ~10 µs to list, a few reads' worth of chunks
_WINDOW = 4096

_DEFLATE = h5py.h5z.FILTER_DEFLATE
_SHUFFLE = h5py.h5z.FILTER_SHUFFLE
#: Registered ids of the HDF5 plugin filters whose chunks are plain codec frames.
_LZF = 32000
_BLOSC = 32001
_LZ4 = 32004
_ZSTD = 32015
#: Filters whose decoder must be told the decoded size (the chunk's bytes): they may
#: only follow shuffle in the pipeline, which keeps the size.
_SIZED = {_LZF}


def _sized(filters: tuple[int, ...]) -> tuple[bool, ...]:
    """Per filter of the pipeline (in the order applied on write): whether its decoded
    size is the chunk's, known ahead, which is so where only shuffles come before it."""
    return tuple(all(c == _SHUFFLE for c in filters[:i]) for i in range(len(filters)))


@functools.cache
def _decoders() -> dict[int, Any]:
    """Filter id -> ``decode(data, out) -> buffer`` for the filters read directly.

    ``out`` is a uint8 array the size of the decoded bytes, to decode into, where that
    size is known (None otherwise; LZF, whose frames do not record it, always has one);
    a decoder may return another buffer (zlib's). Made at the first compressed dataset
    planned: numcodecs and imagecodecs cost ~25 ms to import, which an uncompressed file
    (and every ``xr.open_dataset``, where xarray loads each engine) need not pay.
    """
    decoders: dict[int, Any] = {_DEFLATE: lambda data, out: zlib.decompress(data)}
    try:
        from numcodecs import Shuffle, Zstd, blosc
    except ImportError:  # optional: those filters are then read through h5py
        pass
    else:
        zstd = Zstd()
        decoders[_BLOSC] = lambda data, out: blosc.decompress(data, out)
        decoders[_ZSTD] = lambda data, out: zstd.decode(data, out=out)
        # HDF5's byte shuffle is numcodecs' (byte i of every element, then byte i + 1):
        # its compiled loop takes 1.3 ms for a 4 MB chunk, numpy's transposed copy 9.5 ms
        decoders[_SHUFFLE] = lambda data, out, size: Shuffle(size).decode(data, out=out)
    try:
        import imagecodecs
    except ImportError:
        return decoders
    # LZF: h5py's filter (lzf_filter.c) stores bare liblzf frames; LZ4: the HDF5 LZ4
    # plugin's framing (sizes in big-endian headers), imagecodecs' "lz4h5"
    decoders[_LZF] = lambda data, out: imagecodecs.lzf_decode(data, out=out)
    decoders[_LZ4] = lambda data, out: imagecodecs.lz4h5_decode(data, out=out)
    if imagecodecs.ZLIBNG.available:
        # HDF5's deflate filter writes zlib streams, which zlib-ng inflates 2.5-3.5x faster
        # than zlib (3 against 10 ms for a 4 MB chunk)
        decoders[_DEFLATE] = lambda data, out: imagecodecs.zlibng_decode(data, out=out)
    return decoders


#: Chunks of up to this many bytes are read and decoded into buffers each thread keeps
#: (:func:`_chunk_buffer`): a new buffer of a few MiB can be a new ``mmap`` whose pages
#: the kernel zeroes as they are first touched; it always is where
#: ``MALLOC_TRIM_THRESHOLD_`` is set (distributed's nanny sets it for its workers), and
#: reading and decoding a 4 MB gzip+shuffle chunk into new buffers there ran at a third
#: of the speed (9,500 against 25,000 frames/s). The worker processes of dask's process
#: pool and of ``distributed`` read gzip+shuffle at 0.68-0.79x the h5py floor with new
#: buffers, 1.43-1.95x with kept ones (2 cores; threads: 2.1x either way).
CHUNK_BUFFER_BYTES = 16 * 2**20
_CHUNK_BUFFERS = threading.local()


def _chunk_buffer(slot: int, nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` that this thread reuses: slot 0 for a chunk's stored
    bytes, 1 and 2 for the stages of its decoding in turn (each reads the other's). A
    chunk larger than :data:`CHUNK_BUFFER_BYTES` gets new buffers, kept by none."""
    if nbytes > CHUNK_BUFFER_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    held = getattr(_CHUNK_BUFFERS, "held", None)
    if held is None:
        held = _CHUNK_BUFFERS.held = [np.empty(0, dtype=np.uint8)] * 3
    if held[slot].nbytes < nbytes:
        held[slot] = np.empty(nbytes, dtype=np.uint8)
    return held[slot][:nbytes]


class Unsupported(Exception):  # noqa: N818 - a reason, not an error to report
    """The dataset cannot be read directly; the message says why."""


class NotAllocated(Unsupported):
    """A chunk of the rows read is not allocated (it reads as the fill value, which HDF5
    supplies): that read goes through h5py, the others of the dataset stay direct."""


@dataclass
class DirectReader:
    """Read boxes of one dataset straight from the file's bytes.

    Build it with :func:`plan_direct`. :meth:`read` needs no HDF5 call for a
    contiguous dataset, and for a chunked one only where a chunk's address is
    not known yet: ``locate(coord)`` (run by the caller under its HDF5 lock)
    gives it, and it is kept.

    Attributes
    ----------
    filename : str
        The file, opened with ``os.open`` per process.
    shape : tuple of int
    dtype : numpy.dtype
        The stored dtype (byte order included).
    chunks : tuple of int or None
        The chunk shape; None for contiguous storage.
    offset : int or None
        Byte offset of contiguous data.
    filters : tuple of int
        The filter pipeline (deflate, shuffle, Blosc, Zstandard, LZF, LZ4), in the order applied
        on write.
    """

    filename: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...] | None
    offset: int | None = None
    filters: tuple[int, ...] = ()
    #: chunk coordinate -> (byte offset, size, filter mask: bit i set = filter i skipped)
    _index: dict[tuple[int, ...], tuple[int, int, int]] = field(default_factory=dict,
                                                               repr=False)
    _fd: int | None = field(default=None, repr=False)
    #: ``(device, inode)`` of the file planned from; a descriptor opened by name on
    #: another file (replaced since) is refused
    file_id: tuple[int, int] | None = field(default=None, repr=False)
    _fd_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Where a chunk B-tree can be read (:class:`~h5mdx.format.chunk_index.ChunkTree`):
    #: ``locate(lo, hi)`` gives the chunks whose first row lies in ``[lo, hi)`` as arrays
    #: (coordinates; byte offset, size, filter mask), as ``ChunkTree.arrays``
    locate: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False)
    #: Chunks spanning whole rows, unfiltered: the byte offset of each chunk along axis 0
    #: (-1: not located yet), from which a read finds its runs of adjacent chunks
    _starts: np.ndarray | None = field(default=None, repr=False)
    #: Counts the changes of ``_starts``: with its identity, the key of ``_runs``
    _version: int = field(default=0, repr=False)
    #: window -> ``(key, ends, holes)`` derived from ``_starts`` (see :meth:`_window`)
    _runs: dict[int, tuple[Any, np.ndarray, np.ndarray]] = field(default_factory=dict,
                                                                repr=False)
    #: Whether the storage holds whole rows of axis 0: contiguous, or unfiltered chunks
    #: spanning every other axis (read by runs of rows)
    _by_rows: bool = field(default=False, repr=False)
    #: :func:`_sized` of ``filters``: which stages decode into a buffer of the chunk's size
    _sized: tuple[bool, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.chunks is not None and not self.filters and self._whole_row_chunks():
            self._starts = np.full(-(-self.shape[0] // self.chunks[0]), -1, dtype=np.int64)
        self._by_rows = self.chunks is None or self._starts is not None
        self._sized = _sized(self.filters)

    # -- file descriptor ------------------------------------------------------------------
    def _descriptor(self) -> int:
        fd = self._fd
        if fd is None:
            with self._fd_lock:
                if self._fd is None:
                    self._fd = self._open()
                fd = self._fd
        return fd

    def _open(self) -> int:
        try:
            fd = os.open(self.filename, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError as err:
            raise Unsupported(f"{self.filename} is no longer on disk") from err
        except OSError as err:  # too many open files, no permission: HDF5 holds it open
            raise Unsupported(f"{self.filename} cannot be opened again: {err}") from err
        if self.file_id is not None:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self.file_id:
                os.close(fd)
                raise Unsupported(f"{self.filename} was replaced on disk since it was planned")
        return fd

    def close(self) -> None:
        """Close the file descriptor (reopened on the next read).

        Only where no other thread reads through this reader: h5mdx itself never calls it
        on a reader others may hold (they close with the reader, when no one holds it).
        """
        with self._fd_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to do at collection time
            pass

    def _pread_into(self, out: memoryview, offset: int) -> None:
        fd = self._descriptor()
        done = 0
        while done < len(out):
            n = os.preadv(fd, [out[done:]], offset + done)
            if n <= 0:
                raise OSError(
                    f"{self.filename}: unexpected end of file reading {len(out)} bytes "
                    f"at offset {offset}"
                )
            done += n

    # -- chunk index ----------------------------------------------------------------------
    def missing(self, box: tuple[slice, ...]) -> list[tuple[int, ...]]:
        """Chunk coordinates (element offsets) in ``box`` whose address is not known yet.

        Where the chunk B-tree can be read (``locate``), the chunks of at least
        ``LOCATE_ROWS_CHUNKS`` chunks along axis 0 from the first missing one are located
        first, and nothing is left missing.

        Raises
        ------
        Unsupported
            If the tree cannot be read there, or does not list a chunk in ``box`` (not
            allocated: its values are the fill value): the caller reads through h5py.
        """
        if self.chunks is None:
            return []
        coords = self._missing(box)
        if coords and self.locate is not None:
            c0 = self.chunks[0]
            lo = min(c[0] for c in coords)
            hi = max(max(c[0] for c in coords) + c0, lo + LOCATE_ROWS_CHUNKS * c0)
            try:
                located = self.locate(lo, min(hi, self.shape[0]))
            except (OSError, ValueError) as err:  # HDF5 reads what the tree could not
                raise Unsupported(f"chunk B-tree of rows {lo}-{hi}: {err}") from err
            self._add_arrays(*located)
            coords = self._missing(box)
            if coords:  # the tree lists every allocated chunk of the rows it was asked for
                raise NotAllocated(f"chunk at {coords[0]} is not allocated (fill value)")
        return coords

    def _missing(self, box: tuple[slice, ...]) -> list[tuple[int, ...]]:
        assert self.chunks is not None
        if self._starts is not None:
            c0, n = self.chunks[0], box[0].stop - box[0].start
            if n <= 0:
                return []
            i0, i1 = box[0].start // c0, (box[0].stop - 1) // c0
            tail = (0,) * (len(self.shape) - 1)
            if i1 - i0 < _FEW:  # numpy's fixed cost is more than a few chunks' loop
                seg = self._starts[i0:i1 + 1].tolist()
                if -1 not in seg:
                    return []
                return [((i + i0) * c0, *tail) for i, at in enumerate(seg) if at < 0]
            return [(i * c0, *tail) for i in self._among(1, i0, i1 + 1)]
        return [c for c in self._chunk_coords(box) if c not in self._index]

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ends, holes)`` among the chunks ``w * _WINDOW`` to ``(w + 1) * _WINDOW - 1``.

        Sorted chunk indices. ``ends``: chunks that end a run of chunks lying end to end on
        disk (the next one does not start where it ends, or either is not located yet);
        ``holes``: chunks not located yet. A read then finds its runs and its missing
        chunks by binary searches, not by a pass over its chunks (~100 for a 4 MiB read of
        one-frame chunks). Derived from ``_starts`` once per window, and again where the
        table changed since (once per batch of chunks located), at ~10 µs a window however
        long the table. A thread that derives them while another adds chunks keeps ends
        and holes that are too many, never too few (new offsets count from the next
        version on), so its reads stay correct.
        """
        starts = self._starts
        assert starts is not None and self.chunks is not None
        key = (id(starts), self._version)
        hit = self._runs.get(w)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        lo = w * _WINDOW
        hi = min(lo + _WINDOW, len(starts))
        seg = starts[lo:hi + 1]  # and the next window's first: does the last chunk end a run?
        step = self.chunks[0] * math.prod(self.shape[1:]) * self.dtype.itemsize
        unlocated = seg < 0
        ends = np.flatnonzero((np.diff(seg) != step) | unlocated[:-1] | unlocated[1:]) + lo
        holes = np.flatnonzero(unlocated[:hi - lo]) + lo
        self._runs[w] = (key, ends, holes)
        return ends, holes

    def _among(self, which: int, i0: int, i1: int) -> list[int]:
        """Chunks ``i0 <= k < i1`` of the windows' ``ends`` (0) or ``holes`` (1)."""
        found: list[int] = []
        for w in range(i0 // _WINDOW, (i1 - 1) // _WINDOW + 1):
            listed = self._window(w)[which]
            a, b = listed.searchsorted((i0, i1)).tolist()
            found += listed[a:b].tolist()
        return found

    def add_locations(self,
                      located: Mapping[tuple[int, ...], tuple[int, int, int] | None]) -> None:
        """Record chunk addresses ``coord -> (byte offset, size, filter mask)``.

        Raises
        ------
        Unsupported
            If a chunk is not allocated (its values are the fill value).
        """
        if not located:
            return
        assert self.chunks is not None
        nbytes = math.prod(self.chunks) * self.dtype.itemsize
        starts, c0 = self._starts, self.chunks[0]
        for coord, where in located.items():
            if where is None:
                raise NotAllocated(f"chunk at {coord} is not allocated (fill value)")
            unfiltered = where[2] == (1 << len(self.filters)) - 1  # also: no filters
            if unfiltered and where[1] != nbytes:
                raise Unsupported(f"chunk at {coord} holds {where[1]} bytes, not {nbytes}")
            self._index[coord] = where
            if starts is not None:
                starts[coord[0] // c0] = where[0]
        self._version += 1  # after the table's new entries (see _window)

    def _add_arrays(self, coords: np.ndarray, where: np.ndarray) -> None:
        """:meth:`add_locations` of chunks given as arrays (``ChunkTree.arrays``)."""
        if not len(coords):
            return
        assert self.chunks is not None
        if self._starts is None:
            self.add_locations(dict(zip(map(tuple, coords.tolist()),
                                        map(tuple, where.tolist()), strict=True)))
            return
        nbytes = math.prod(self.chunks) * self.dtype.itemsize  # whole chunks, unfiltered
        wrong = np.flatnonzero(where[:, 1] != nbytes)
        if len(wrong):
            raise Unsupported(f"chunk at {tuple(coords[wrong[0]].tolist())} holds "
                              f"{where[wrong[0], 1]} bytes, not {nbytes}")
        self._starts[coords[:, 0] // self.chunks[0]] = where[:, 0]  # no Python per chunk
        self._version += 1  # after the table's new entries (see _window)

    def _chunk_coords(self, box: tuple[slice, ...]) -> list[tuple[int, ...]]:
        assert self.chunks is not None
        ranges = [
            range((s.start // c) * c, s.stop, c) if s.stop > s.start else range(0)
            for s, c in zip(box, self.chunks, strict=True)
        ]
        return list(itertools.product(*ranges))

    # -- reading --------------------------------------------------------------------------
    def read(self, box: tuple[slice, ...], *, keep: bool = True, step: int = 1) -> np.ndarray:
        """The values in ``box`` (one ``slice(start, stop)`` per axis, step 1; every
        ``step``-th row of axis 0 from its start, where the chunks are not read by rows:
        each chunk decoded once, into the rows wanted).

        Call :meth:`missing` and :meth:`add_locations` first for a chunked dataset.
        Where the storage holds whole rows of axis 0 (contiguous, or uncompressed
        chunks spanning every other axis), the rows are read in as few ``pread``
        calls as they are runs on disk, and a view of them is returned; where the box
        holds only part of each row, that part of each row alone, or the rows a block
        at a time (bounded memory). A filtered chunk of whose rows the box holds part
        is kept decoded for the next read (a frame loop), unless ``keep`` is False (a
        caller that will not come back for the others).
        """
        if any(s.stop <= s.start for s in box):  # every ``step``-th row, even of none
            return np.empty((len(range(box[0].start, box[0].stop, step)),
                             *(max(0, s.stop - s.start) for s in box[1:])), dtype=self.dtype)
        if self._by_rows:
            if all((t.start, t.stop) == (0, n) for t, n in zip(box[1:], self.shape[1:],
                                                               strict=True)):
                return self._rows(box[0].start, box[0].stop)
            return self._part_of_rows(box)
        rows = len(range(box[0].start, box[0].stop, step))
        out = empty((rows, *(s.stop - s.start for s in box[1:])), self.dtype)
        for coord in self._chunk_coords(box):
            self._read_chunk(coord, box, out, keep, step)
        return out

    def _whole_row_chunks(self) -> bool:
        assert self.chunks is not None
        return all(c == n for c, n in zip(self.chunks[1:], self.shape[1:], strict=True))

    def _rows(self, first: int, stop: int, into: np.ndarray | None = None) -> np.ndarray:
        """Rows ``first:stop`` of axis 0, every other axis whole (read into the first rows
        of ``into``, where given)."""
        rows = (empty((stop - first, *self.shape[1:]), self.dtype) if into is None
                else into[:stop - first])
        flat = memoryview(rows).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
        at = 0
        for file_at, nbytes in self._spans(first, stop):
            self._pread_into(flat[at:at + nbytes], file_at)
            at += nbytes
        return rows

    def _part_of_rows(self, box: tuple[slice, ...]) -> np.ndarray:
        """``box`` where the storage holds whole rows but the box only part of each: read
        in bounded memory (only the part of each row: axis 1's slice, the other axes
        whole; or whole rows, a block at a time where they would be far more than the
        box), never every row at once."""
        first, stop = box[0].start, box[0].stop
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        inner = math.prod(self.shape[2:]) * self.dtype.itemsize  # bytes per entry of axis 1
        part = (box[1].stop - box[1].start) * inner
        if row >= _ROW_PART_BYTES and 4 * part <= row:
            held = empty((stop - first, box[1].stop - box[1].start, *self.shape[2:]),
                         self.dtype)
            flat = memoryview(held).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
            skip = box[1].start * inner
            for k, at in enumerate(self._row_offsets(first, stop).tolist()):
                self._pread_into(flat[k * part:(k + 1) * part], at + skip)
            return held[(slice(None), slice(None), *box[2:])]
        if (stop - first) * row <= max(ROWS_BLOCK, 2 * (stop - first) * part):
            # few rows, or most of each (a selection's bounding box): whole rows into a
            # reused buffer, as a read of whole rows
            return self._rows(first, stop)[(slice(None), *box[1:])]
        out = empty(tuple(t.stop - t.start for t in box), self.dtype)
        step = min(stop - first, max(1, ROWS_BLOCK // row))
        block = np.empty((step, *self.shape[1:]), self.dtype)
        for a in range(first, stop, step):
            b = min(stop, a + step)
            out[a - first:b - first] = self._rows(a, b, block)[(slice(None), *box[1:])]
        return out

    def _row_offsets(self, first: int, stop: int) -> np.ndarray:
        """The byte offset of each of rows ``first:stop`` in the file."""
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        return row_offsets(*self.row_runs(first, stop), row)

    def row_runs(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Where rows ``first:stop`` of axis 0 lie in the file, as runs of whole rows.

        For a reader that reads the bytes itself (the fused read-and-compute kernel of
        :mod:`h5mdx.analysis.blocks`): the rows, every other axis whole, are the bytes of
        the runs one after the other, in order. Call :meth:`missing` and
        :meth:`add_locations` first for a chunked dataset.

        Parameters
        ----------
        first, stop : int
            ``0 <= first <= stop <=`` the number of rows.

        Returns
        -------
        offsets, nbytes : numpy.ndarray of int64
            Byte offset in the file and length of each run, as few runs as lie apart on disk.

        Raises
        ------
        Unsupported
            If the storage does not hold whole rows (filtered chunks, chunks that split a
            row).
        """
        if not self._by_rows:
            raise Unsupported("the chunks are filtered or do not hold whole rows")
        runs = list(self._spans(first, stop)) if stop > first else []
        table = np.array(runs, dtype=np.int64).reshape(-1, 2)
        return table[:, 0].copy(), table[:, 1].copy()

    @property
    def by_rows(self) -> bool:
        """Whether the storage holds whole rows of axis 0 (contiguous, or unfiltered chunks
        spanning every other axis): what :meth:`row_runs` needs."""
        return self._by_rows

    def fileno(self) -> int:
        """The file descriptor this reader reads with (opened on first use, per process)."""
        return self._descriptor()

    def _spans(self, first: int, stop: int) -> Iterator[tuple[int, int]]:
        """``(byte offset, bytes)`` of rows ``first:stop`` (``first < stop``), one per run
        of chunks adjacent on disk.

        With one-frame chunks a 4 MiB read spans ~100 chunks: looked up one by one in
        the index and merged in a loop, they kept a read holding the GIL for 118 µs (23 %
        of a C-alpha task's time on one thread); from ``_starts`` with numpy over the
        read's chunks, 48 µs; from the runs listed per window of the table
        (:meth:`_window`), 32 µs in all, with the task's per-read work
        (``benchmarks/bench_runs.py``).
        """
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        if self.chunks is None:
            assert self.offset is not None
            yield self.offset + first * row, (stop - first) * row
            return
        assert self._starts is not None
        c0 = self.chunks[0]
        i0, i1 = first // c0, (stop - 1) // c0
        step, table = c0 * row, self._starts
        # chunk k ends a run where chunk k + 1 does not start right after it
        if i1 - i0 < _FEW:  # numpy's fixed cost is more than a few chunks' loop
            seg = table[i0:i1 + 1].tolist()
            ends = [i0 + k for k in range(len(seg) - 1) if seg[k + 1] != seg[k] + step]
        else:  # from the runs of the table's windows (_window): binary searches
            ends = self._among(0, i0, i1)
        a = i0
        for b in [*ends, i1]:  # chunks a .. b lie end to end on disk
            lo, hi = max(a * c0, first), min((b + 1) * c0, stop)
            yield table.item(a) + (lo - a * c0) * row, (hi - lo) * row
            a = b + 1

    def _chunk(self, coord: tuple[int, ...]) -> np.ndarray:
        """The values of the chunk at ``coord``, read and decoded into this thread's
        buffers (valid until its next chunk)."""
        offset, size, mask = self._index[coord]
        raw = _chunk_buffer(0, size)
        self._pread_into(memoryview(raw), offset)  # type: ignore[arg-type]  # numpy arrays are buffers
        return self._decode(raw, mask)

    def _decoded(self, coord: tuple[int, ...]) -> np.ndarray:
        """The values of a filtered chunk of whose rows a read wants part: kept decoded
        (:data:`KEPT_BYTES` in this process) for the next reads of it (a frame loop reads
        a chunk of 100 frames 100 times)."""
        global _KEPT_NBYTES
        key = (id(self), coord)
        with _KEPT_LOCK:
            held = _KEPT.get(key)
            if held is not None and held[0]() is self:
                _KEPT.move_to_end(key)
                return held[1]
        chunk = self._chunk(coord)
        if 4 * chunk.nbytes > KEPT_BYTES:
            return chunk  # too large to keep: this thread's buffers, as any chunk
        chunk = chunk.copy()
        with _KEPT_LOCK:
            old = _KEPT.pop(key, None)
            _KEPT_NBYTES -= 0 if old is None else old[1].nbytes
            _KEPT[key] = (weakref.ref(self), chunk)
            _KEPT_NBYTES += chunk.nbytes
            while _KEPT_NBYTES > KEPT_BYTES:
                _KEPT_NBYTES -= _KEPT.popitem(last=False)[1][1].nbytes
        return chunk

    def _decode(self, raw: Any, mask: int = 0) -> np.ndarray:
        """A chunk's values from its stored bytes; ``mask`` bit i: filter i was skipped.

        Each stage decodes into one of this thread's buffers (:func:`_chunk_buffer`):
        the values returned are valid until the thread decodes its next chunk.
        """
        assert self.chunks is not None
        nbytes = math.prod(self.chunks) * self.dtype.itemsize
        data: Any = raw
        slot = 1
        for i in reversed(range(len(self.filters))):
            code = self.filters[i]
            if mask & (1 << i):
                continue
            if code == _SHUFFLE:  # keeps the size of what it is given
                size = memoryview(data).nbytes
                data = _unshuffle(data, self.dtype.itemsize, _chunk_buffer(slot, size))
            else:  # into a buffer of the chunk's size, where that size is known
                data = _decode_one(code, data,
                                   _chunk_buffer(slot, nbytes) if self._sized[i] else None)
            slot = 3 - slot
        values = np.frombuffer(data, dtype=np.uint8)
        if values.nbytes != nbytes:
            raise ValueError(f"a chunk decoded to {values.nbytes} bytes, not {nbytes}")
        return values.view(self.dtype).reshape(self.chunks)

    def _read_chunk(self, coord: tuple[int, ...], box: tuple[slice, ...],
                    out: np.ndarray, keep: bool = True, step: int = 1) -> None:
        assert self.chunks is not None
        s0, c0 = box[0], coord[0]
        lo, hi = max(c0, s0.start), min(c0 + self.chunks[0], s0.stop)
        lo = s0.start + -(-(lo - s0.start) // step) * step  # the chunk's first row taken
        if lo >= hi:
            return  # none of its rows is taken
        # a read of part of the chunk's rows (a frame loop) will come back for the others
        rows = s0.start <= c0 and min(c0 + self.chunks[0], self.shape[0]) <= s0.stop
        kept = keep and step == 1 and bool(self.filters) and not rows
        chunk = self._decoded(coord) if kept else self._chunk(coord)
        src = [slice(lo - c0, hi - c0, step)]
        dst = [slice((lo - s0.start) // step, (lo - s0.start) // step + len(range(lo, hi, step)))]
        for c, s, n in zip(coord[1:], box[1:], self.chunks[1:], strict=True):
            a, b = max(c, s.start), min(c + n, s.stop)
            src.append(slice(a - c, b - c))
            dst.append(slice(a - s.start, b - s.start))
        out[tuple(dst)] = chunk[tuple(src)]


@functools.cache
def _compiled_unshuffle() -> Callable[[Any, np.ndarray, int], np.ndarray] | None:
    """numba's unshuffle (:mod:`h5mdx.format._shuffle_numba`), asked for only where numba
    is loaded already (the RMSD kernel loads it): 10x faster than numcodecs' loop for 4-
    and 8-byte elements, and free of the GIL, it costs ~10 ms to load there, but ~1 s
    in a process that has not imported numba, more than it saves on a small file."""
    try:
        from h5mdx.format._shuffle_numba import unshuffle
    except ImportError:
        return None
    return unshuffle


def _unshuffle(data: Any, size: int, out: np.ndarray) -> Any:
    """HDF5's byte shuffle undone into ``out`` (as many bytes as ``data``): each
    element's ``size`` bytes back together."""
    if size == 1:
        return data
    if "numba" in sys.modules and (compiled := _compiled_unshuffle()) is not None:
        return compiled(data, out, size)
    decode = _decoders().get(_SHUFFLE)
    if decode is not None and out.nbytes % size == 0:
        return decode(data, out, size)
    a = np.frombuffer(data, dtype=np.uint8)
    n = len(a) // size  # HDF5 leaves the bytes past the last whole element as they are
    out[:n * size].reshape(n, size)[...] = a[:n * size].reshape(size, n).T
    out[n * size:] = a[n * size:]
    return out


def _decode_one(code: int, data: Any, out: np.ndarray | None) -> Any:
    """One filter's decoding; a codec's own error becomes a ValueError (a corrupt chunk).

    ``out``: a buffer of the decoded size, where it is known (None where a filter that
    changes the size comes before this one).
    """
    try:
        return _decoders()[code](data, out)
    except (ValueError, zlib.error):
        raise
    except Exception as err:  # numcodecs/imagecodecs raise RuntimeError or their own
        raise ValueError(f"decoding filter {code} failed: {err}") from err


def plan_direct(dset: h5py.Dataset) -> DirectReader:
    """A :class:`DirectReader` for ``dset``, or :class:`Unsupported` saying why not.

    Parameters
    ----------
    dset : h5py.Dataset
        An open dataset (the caller holds its HDF5 lock).

    Returns
    -------
    DirectReader

    Raises
    ------
    Unsupported
        For storage that only HDF5 can read: the caller reads through h5py.
    """
    f = dset.file
    if f.driver not in ("sec2", "stdio"):
        raise Unsupported(f"file driver {f.driver!r}")
    if f.userblock_size:
        raise Unsupported("the file has a userblock")
    if f.swmr_mode or f.mode != "r":
        raise Unsupported("the file is open for writing or in SWMR mode")
    dtype = dset.dtype
    if dtype.kind not in "biuf" or dtype.hasobject or dtype.itemsize not in (1, 2, 4, 8):
        raise Unsupported(f"dtype {dtype}")
    if dset.id.get_type() != h5py.h5t.py_create(dtype, logical=True):
        # numpy's nearest type, which HDF5 converts the stored values to: another
        # precision, bit offset, exponent bias or size (a float32 of another bias reads
        # as float64), whose bytes are not the values
        raise Unsupported(f"the stored type is not {dtype} as numpy lays it out")
    if dset.is_virtual:
        raise Unsupported("virtual dataset")
    if dset.external:
        raise Unsupported("external storage")
    if not dset.shape or math.prod(dset.shape) == 0:
        raise Unsupported("empty or scalar dataset")
    plist = dset.id.get_create_plist()
    layout = plist.get_layout()
    filename = os.path.abspath(f.filename)
    if layout == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        if offset is None:
            raise Unsupported("contiguous storage not allocated")
        return DirectReader(filename, dset.shape, dtype, None, offset=int(offset))
    if layout != h5py.h5d.CHUNKED:
        raise Unsupported("compact storage")
    if not hasattr(dset.id, "get_chunk_info_by_coord"):
        raise Unsupported("this HDF5 cannot report chunk addresses")
    filters = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    if any(code not in _decoders() and code != _SHUFFLE for code in filters):
        raise Unsupported(f"filters {filters}")
    for code, sized in zip(filters, _sized(filters), strict=True):
        if code in _SIZED and not sized:
            raise Unsupported(f"filters {filters}: filter {code} after one that resizes")
    if filters and _partial_chunks_unfiltered(plist):
        raise Unsupported("its partial edge chunks are stored unfiltered "
                          "(H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS), with a filter mask that "
                          "does not say so")
    few, n_chunks = _few_chunks(dset)
    if n_chunks > SPARSE_CHUNKS:  # a table per chunk row: sized by what is stored
        stored = int(dset.id.get_num_chunks())
        if n_chunks > 64 * max(stored, 1):
            raise Unsupported(f"it declares {n_chunks} chunks and stores {stored} (space "
                              "allocated ahead, or an absurd declared size)")
    reader = DirectReader(filename, dset.shape, dtype, tuple(dset.chunks), filters=filters)
    if n_chunks > TREE_CHUNKS or not (few or hasattr(dset.id, "chunk_iter")):
        tree = chunk_tree(dset)
        if tree is not None:  # the chunks of the rows read, located as reads need them
            reader.locate = tree.arrays
            return reader
    located = index_all_chunks(dset)
    if located is not None:
        reader.add_locations(located)
    elif not few:  # few chunks are looked up one by one through HDF5 as reads need them
        raise Unsupported(
            f"{n_chunks} chunks: HDF5 {h5py.version.hdf5_version} has no chunk iteration "
            "(1.12.3 and later have), pyfive (the 'fast' extra) is not installed or finds "
            "no version-1 chunk B-tree, and finding a chunk's address one by one takes "
            "time proportional to the number of chunks"
        )
    return reader


#: ``H5Pset_chunk_opts``' option: partial edge chunks are stored without the filters
_DONT_FILTER_PARTIAL_CHUNKS = 0x0002


@functools.cache
def _hdf5_library() -> Any:
    """The HDF5 library h5py runs on, through ctypes, for a call h5py does not wrap
    (``H5Pget_chunk_opts``); None where it cannot be found.

    First the symbol as h5py's own extension module resolves it (``dlsym`` on its handle
    searches the libraries it was linked with): a process may hold another copy of
    HDF5 (netCDF4's wheel brings its own), listed before h5py's in the process' maps,
    which knows none of h5py's identifiers and so could not tell.
    """
    import ctypes
    import glob

    from h5py import h5p

    with contextlib.suppress(OSError, AttributeError):  # Windows: a module's own exports
        lib = ctypes.CDLL(h5p.__file__)
        return _with_chunk_opts(lib)
    paths: list[str] = []
    with contextlib.suppress(OSError):  # Linux: the copy this process loaded
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if line.count("/") else ""
                name = os.path.basename(path)
                if name.startswith("libhdf5") and path not in paths:
                    paths.append(path)
    here = os.path.dirname(os.path.dirname(h5py.__file__))
    paths += glob.glob(os.path.join(here, "h5py.libs", "libhdf5*"))
    paths += glob.glob(os.path.join(os.path.dirname(h5py.__file__), ".dylibs", "libhdf5*"))
    for path in paths:
        if "_hl" in os.path.basename(path):  # the high-level library, not HDF5's own
            continue
        try:
            return _with_chunk_opts(ctypes.CDLL(path))
        except (OSError, AttributeError):
            continue
    return None


def _with_chunk_opts(lib: Any) -> Any:
    """``lib`` (a ``ctypes.CDLL``) with ``H5Pget_chunk_opts`` typed; AttributeError where
    it has no such function."""
    import ctypes

    call = lib.H5Pget_chunk_opts
    call.argtypes = (ctypes.c_int64, ctypes.POINTER(ctypes.c_uint))
    call.restype = ctypes.c_int
    return lib


def _partial_chunks_unfiltered(plist: Any) -> bool | None:
    """Whether a chunked dataset's creation properties ``plist`` store partial edge chunks
    without its filters (HDF5's ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``, which h5py does
    not expose). HDF5 then reports those chunks' filter mask as 0 all the same: decoded
    as filtered, they read as garbage. None where it cannot be told."""
    import ctypes

    lib = _hdf5_library()
    if lib is None:
        return None
    try:  # h5py's own lock around HDF5 calls (a library built without thread safety)
        from h5py._objects import phil
    except ImportError:
        phil = contextlib.nullcontext()
    opts = ctypes.c_uint(0)
    with phil:
        status = lib.H5Pget_chunk_opts(plist.id, ctypes.byref(opts))
    if status < 0:
        return None
    return bool(opts.value & _DONT_FILTER_PARTIAL_CHUNKS)


def _few_chunks(dset: h5py.Dataset) -> tuple[bool, int]:
    """Whether HDF5's one-by-one look-ups of the chunks of ``dset`` cost little; how many."""
    n_chunks, chunk_bytes = chunk_grid(dset.shape, dset.chunks, dset.dtype.itemsize)
    return n_chunks <= max(MANY_CHUNKS, chunk_bytes // LOOKUP_BYTES_PER_CHUNK), n_chunks


def enabled() -> bool:
    """Whether direct reads are on (the default; ``H5MDX_DIRECT_READ=0`` turns them off)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def row_offsets(offsets: Any, nbytes: Any, row: int) -> np.ndarray:
    """The byte offset of every row of ``row`` bytes in runs of whole rows (``offsets``,
    ``nbytes``: :meth:`DirectReader.row_runs`), in order.

    >>> row_offsets([100, 1000], [24, 8], 8).tolist()
    [100, 108, 116, 1000]
    """
    counts = np.asarray(nbytes, dtype=np.int64) // row
    within = np.arange(int(counts.sum()), dtype=np.int64) \
        - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(np.asarray(offsets, dtype=np.int64), counts) + within * row


def box_of(key: tuple, shape: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple] | None:
    """Split an outer-indexing key into a bounding box and the indexing left inside it.

    Parameters
    ----------
    key : tuple
        One entry per axis: a slice, an int, or a 1-D integer array (at most one).
    shape : tuple of int
        The dataset's shape.

    Returns
    -------
    (box, rest) or None
        ``box`` has one ``slice(start, stop)`` per axis; ``within(data[box], rest)``
        equals ``data[key]``. None where the box would read more than ``MAX_OVERREAD``
        times what the key asks for, or the key is of another kind.

    Examples
    --------
    >>> box_of((slice(2, 8, 2), 1), (10, 3))
    ((slice(2, 7, None), slice(1, 2, None)), (slice(None, None, 2), 0))
    """
    if len(key) != len(shape):
        return None
    box: list[slice] = []
    rest: list[Any] = []
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step < 1 or step > MAX_OVERREAD:
                return None
            stop = max(start, stop)
            if step > 1 and stop > start:
                stop = start + ((stop - start - 1) // step) * step + 1
            box.append(slice(start, stop))
            rest.append(slice(None, None, step) if step > 1 else slice(None))
        elif isinstance(k, (int, np.integer)):
            i = int(k) + n if k < 0 else int(k)
            box.append(slice(i, i + 1))
            rest.append(0)
        elif isinstance(k, np.ndarray) and k.ndim == 1 and k.dtype.kind in "iu":
            if k.size == 0:
                return None
            idx = np.where(k < 0, k + n, k)
            lo, hi = int(idx.min()), int(idx.max()) + 1
            if hi - lo > MAX_OVERREAD * k.size:
                return None
            box.append(slice(lo, hi))
            rest.append(idx - lo)
        else:
            return None
    return tuple(box), tuple(rest)


def within(block: np.ndarray, rest: tuple) -> np.ndarray:
    """``block`` (a box of :func:`box_of`) indexed by its ``rest``, axis by axis.

    numpy would take an integer and the array together as one advanced index (an
    integer on ``time`` and a list on ``spatial`` would broadcast against each other and
    move to the front); outer indexing keeps every axis apart, so the integers (0 in
    their one-long box axis) are applied after the rest.

    Examples
    --------
    >>> block = np.arange(12).reshape(1, 4, 3)
    >>> within(block, (0, slice(None), np.array([2, 0]))).shape
    (4, 2)
    """
    ints = [isinstance(r, (int, np.integer)) for r in rest]
    if not any(ints):
        return block[rest]
    kept = block[tuple(slice(None) if i else r for i, r in zip(ints, rest, strict=True))]
    return kept[tuple(int(r) if i else slice(None) for i, r in zip(ints, rest, strict=True))]


#: (id of a reader, chunk coordinate) -> (a weak reference to the reader, the decoded
#: chunk), the latest used last; their bytes in all
_KEPT: OrderedDict[tuple[int, tuple[int, ...]], tuple[Any, np.ndarray]] = OrderedDict()
_KEPT_NBYTES = 0
_KEPT_LOCK = threading.Lock()


#: Names that moved to :mod:`h5mdx.format.scratch` and :mod:`h5mdx.format.reader_cache`,
#: still reachable here for code written before.
_MOVED = {
    **dict.fromkeys(("empty", "scratch_buffers", "scratch_pool"), "h5mdx.format.scratch"),
    **dict.fromkeys(("UNPLANNED", "MAX_READERS", "cached", "file_stamp", "forget", "hold",
                     "plan_cached", "release_soon", "why_not_direct"),
                    "h5mdx.format.reader_cache"),
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
