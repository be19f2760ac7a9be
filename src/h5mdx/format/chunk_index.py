"""Where each chunk of a chunked HDF5 dataset lies in its file.

A direct read (:mod:`h5mdx.format.direct`) needs each chunk's byte offset, stored size
and filter mask. There are three ways to learn them:

- :class:`ChunkTree`: read the version-1 B-tree that indexes the chunks of every file
  written in HDF5's default (earliest) format -- MDAnalysis', h5py's by default --
  from the file, for the frames a process reads and no others. `pyfive
  <https://github.com/NCAS-CMS/pyfive>`_, a maintained pure-Python HDF5 reader (the
  ``fast`` extra), parses the dataset's object header and gives the tree's root; each
  node is then one ``pread`` and one numpy view. 30,000 one-frame chunks in 23 ms, and a
  worker that reads a sixteenth of them locates only those. Importing pyfive costs
  20-35 ms once per process.
- :func:`index_all_chunks`: HDF5's own pass over the whole index (``H5Dchunk_iter``,
  h5py's ``DatasetID.chunk_iter``, HDF5 1.12.3 and later): 30,000 chunks in 57-92 ms,
  in every process, whatever part of the file it reads; any kind of chunk index.
- :func:`locate_chunks`: HDF5's look-up of one chunk. Before 1.12.3 (Debian 12's
  parallel HDF5 1.10.8, many HPC modules) each look-up walks the index: 0.2-1.6 ms per
  chunk of a 30,000-chunk dataset (near the last look-up, or anywhere), 7-48 s for all
  of MDAnalysis' one-frame chunks of a 30,000-frame trajectory.

A tree is used only where what it gives for the dataset's first and last chunk equals
HDF5's answer; any node that is not one, or an entry off the chunk grid, stops it
(:class:`ValueError`) and the caller reads through h5py.

This module knows h5py, numpy and the standard library only, and pyfive where installed.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import struct
from typing import Any

import h5py
import numpy as np

__all__ = ["ChunkTree", "chunk_grid", "chunk_tree", "index_all_chunks", "locate_chunks"]

log = logging.getLogger(__name__)

#: ``coord -> (byte offset, stored size, filter mask)``; coord is the chunk's first
#: element along each axis.
Locations = dict[tuple[int, ...], tuple[int, int, int]]

#: An HDF5 address that points nowhere.
_UNDEFINED = 0xFFFFFFFFFFFFFFFF
#: A version-1 B-tree node's header: "TREE", node type, level, entries used, siblings.
_NODE_HEADER = struct.Struct("<4sBBHQQ")


class ChunkTree:
    """The version-1 B-tree of one dataset's chunks, read a range of rows at a time.

    Build it with :func:`chunk_tree`. Nodes are re-read on each call (the few above the
    leaves are in the page cache); call it for large ranges.

    Parameters
    ----------
    filename : str
        The file, opened per call.
    root : int
        Byte offset of the tree's root node.
    shape, chunks : tuple of int
        The dataset's shape and chunk shape.
    """

    def __init__(self, filename: str, root: int, shape: tuple[int, ...],
                 chunks: tuple[int, ...]) -> None:
        self.filename = filename
        self.root = root
        self.shape = tuple(shape)
        self.chunks = tuple(chunks)
        rank = len(self.shape)
        # the HDF5 file format, III.A.1: a key is the chunk's stored size (u4), filter
        # mask (u4) and first element along each axis plus one more (u8 each); each key
        # but the last is followed by a child's address: a node, or in a leaf the chunk
        self._entry = np.dtype([("size", "<u4"), ("mask", "<u4"),
                                ("offset", "<u8", (rank + 1,)), ("address", "<u8")])
        self._key = np.dtype([("size", "<u4"), ("mask", "<u4"), ("offset", "<u8", (rank + 1,))])

    def rows(self, lo: int, hi: int) -> Locations:
        """Every allocated chunk whose first row (along axis 0) lies in ``[lo, hi)``.

        As :meth:`arrays`, as ``coord -> (byte offset, size, filter mask)``.
        """
        coords, where = self.arrays(lo, hi)
        return dict(zip(map(tuple, coords.tolist()), map(tuple, where.tolist()), strict=True))

    def arrays(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Every allocated chunk whose first row (along axis 0) lies in ``[lo, hi)``.

        Returns
        -------
        coords : numpy.ndarray
            ``(k, rank)`` int64: each chunk's first element along each axis.
        where : numpy.ndarray
            ``(k, 3)`` int64: its byte offset, stored size and filter mask.

        Raises
        ------
        ValueError
            Where the tree is not a chunk B-tree of this dataset.
        OSError
            Where the file cannot be read.
        """
        fd = os.open(self.filename, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            leaves = self._walk(fd, lo, hi)
        finally:
            os.close(fd)
        entries = np.concatenate(leaves) if leaves else np.empty(0, dtype=self._entry)
        coords = entries["offset"][:, :len(self.shape)].astype(np.int64)
        where = np.stack([entries["address"], entries["size"], entries["mask"]],
                         axis=1).astype(np.int64)
        return coords, where

    def _walk(self, fd: int, lo: int, hi: int) -> list[np.ndarray]:
        """The entries of the leaves for rows ``[lo, hi)``, leaf by leaf."""
        rank = len(self.shape)
        leaves: list[np.ndarray] = []
        nodes: list[tuple[int, int | None]] = [(self.root, None)]
        seen: set[int] = set()
        while nodes:
            at, level_above = nodes.pop()
            if at in seen:
                raise ValueError(f"the chunk B-tree visits node {at} twice")
            seen.add(at)
            level, entries, last = self._node(fd, at)
            if level_above is not None and level != level_above - 1:
                raise ValueError(f"chunk B-tree node {at} is at level {level}, not "
                                 f"{level_above - 1}")
            first_rows = entries["offset"][:, 0].astype(np.int64)
            if level:
                # child i holds chunks from key i up to key i + 1 (compared on all axes,
                # axis 0 first): it may hold rows in [lo, hi) if it starts before hi and
                # the next key is not before lo
                upper = np.append(first_rows[1:], last)
                keep = np.flatnonzero((first_rows < hi) & (upper >= lo))
                nodes.extend((int(a), level) for a in entries["address"][keep[::-1]].tolist())
                continue
            sel = entries[(first_rows >= lo) & (first_rows < hi)]
            coords = sel["offset"][:, :rank]
            if ((coords % self.chunks) != 0).any() or (coords >= self.shape).any():
                raise ValueError(f"chunk B-tree node {at} lists a chunk off the chunk grid")
            leaves.append(sel)
        return leaves

    def _node(self, fd: int, at: int) -> tuple[int, np.ndarray, int]:
        """A node's level, entries, and its last key's first row."""
        head = os.pread(fd, _NODE_HEADER.size, at)
        if len(head) < _NODE_HEADER.size:
            raise ValueError(f"chunk B-tree node {at} lies past the end of the file")
        sig, kind, level, used, _, _ = _NODE_HEADER.unpack(head)
        if sig != b"TREE" or kind != 1:
            raise ValueError(f"no chunk B-tree node at {at}")
        nbytes = used * self._entry.itemsize + self._key.itemsize
        raw = os.pread(fd, nbytes, at + _NODE_HEADER.size)
        if len(raw) < nbytes:
            raise ValueError(f"chunk B-tree node {at} lies past the end of the file")
        entries = np.frombuffer(raw, dtype=self._entry, count=used)
        last = np.frombuffer(raw, dtype=self._key, count=1, offset=used * self._entry.itemsize)
        return level, entries, int(last["offset"][0, 0])


def chunk_tree(dset: h5py.Dataset) -> ChunkTree | None:
    """The :class:`ChunkTree` of ``dset``, or None.

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset of a file opened by name (the caller holds h5py's lock).

    Returns
    -------
    ChunkTree or None
        None where pyfive is not installed or finds no version-1 chunk B-tree (files
        written with ``libver="latest"`` index chunks otherwise), and where the tree's
        first and last chunk differ from HDF5's.
    """
    try:
        pyfive = importlib.import_module("pyfive")
    except ImportError:
        return None
    filename, name = dset.file.filename, dset.name
    if not name or not dset.chunks or 0 in dset.shape or not os.path.isfile(filename):
        return None
    try:
        with pyfive.File(filename) as f:
            root = _root(f, name, dset.ndim)
        tree = ChunkTree(filename, root, dset.shape, dset.chunks)
        _check(dset, tree)
    except Exception as err:  # noqa: BLE001 - an optimisation: HDF5's index remains
        log.debug("%s: %s: no chunk B-tree to read (%s: %s); HDF5 finds the chunks",
                  filename, name, type(err).__name__, err)
        return None
    return tree


def _root(f: Any, name: str, rank: int) -> int:
    """The address of the chunk B-tree of dataset ``name`` in the open pyfive file ``f``."""
    parent, _, leaf = name.rstrip("/").rpartition("/")
    pid = (f[parent] if parent else f).get_lazy_view(leaf).id  # the tree is not read
    params = getattr(pid, "_index_params", None)  # pyfive 1.x: (B-tree address, dims)
    if params is None or getattr(params, "chunk_address", None) is None:
        raise ValueError("pyfive gives no chunk B-tree address")
    if params.chunk_dims != rank + 1:  # the chunk B-tree's keys carry one more axis
        raise ValueError(f"chunk B-tree keys of {params.chunk_dims} axes for rank {rank}")
    if params.chunk_address == _UNDEFINED:
        raise ValueError("no chunk written yet")
    return int(params.chunk_address)


def _check(dset: h5py.Dataset, tree: ChunkTree) -> None:
    """Raise ValueError unless HDF5 agrees on the first and the last chunk of the dataset."""
    c0 = dset.chunks[0]
    last_row = ((dset.shape[0] - 1) // c0) * c0
    for row in dict.fromkeys((0, last_row)):
        coord = (row,) + (0,) * (dset.ndim - 1)
        ours = tree.rows(row, row + 1).get(coord)
        theirs = locate_chunks(dset, [coord])[coord]
        if ours != theirs:
            raise ValueError(f"chunk at {coord}: {ours} (HDF5: {theirs})")


def chunk_grid(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int
               ) -> tuple[int, int]:
    """How many chunks of shape ``chunks`` cover an array of ``shape`` (HDF5's chunk grid:
    edge chunks overhang), and the bytes of one chunk of ``itemsize``-byte elements."""
    n_chunks = math.prod(-(-int(n) // int(c)) for n, c in zip(shape, chunks, strict=True))
    return n_chunks, math.prod(int(c) for c in chunks) * int(itemsize)


def index_all_chunks(dset: h5py.Dataset) -> Locations | None:
    """Byte offset, size and filter mask of every allocated chunk, from HDF5 in one pass.

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset (the caller holds h5py's lock).

    Returns
    -------
    dict or None
        ``coord -> (offset, size, filter_mask)`` of every allocated chunk; None where
        this HDF5 cannot iterate over chunks (before 1.12.3).
    """
    chunk_iter = getattr(dset.id, "chunk_iter", None)
    if chunk_iter is None:
        return None
    located: Locations = {}

    def visit(info: Any) -> None:
        located[tuple(int(c) for c in info.chunk_offset)] = _location(info)

    chunk_iter(visit)
    return located


def locate_chunks(dset: h5py.Dataset, coords: list[tuple[int, ...]]
                  ) -> dict[tuple[int, ...], tuple[int, int, int] | None]:
    """Byte offset, size and filter mask of the chunks at ``coords`` (None: not allocated).

    Bit ``i`` of the mask is set where HDF5 stored the chunk without filter ``i`` (an
    optional filter, such as Blosc, that did not make the chunk smaller).
    """
    located: dict[tuple[int, ...], tuple[int, int, int] | None] = {}
    for coord in coords:
        info = dset.id.get_chunk_info_by_coord(coord)
        located[coord] = None if info.byte_offset is None else _location(info)
    return located


def _location(info: Any) -> tuple[int, int, int]:
    """``(byte offset, size, filter mask)`` of h5py's ``StoreInfo`` for one chunk."""
    return int(info.byte_offset), int(info.size), int(info.filter_mask)
