"""Where each chunk of a chunked HDF5 dataset lies in its file.

A direct read (:mod:`h5mdx.format.direct`) needs every chunk's byte offset, stored size
and filter mask. HDF5 1.12.3 and later list them all in one pass over the chunk index
(``H5Dchunk_iter``, h5py's ``DatasetID.chunk_iter``): 30,000 chunks in 72 ms (HDF5 2.0).
Older libraries -- Debian 12's parallel HDF5 1.10.8, which ``setup.sh --mpi`` builds
h5py against, and many HPC modules -- answer one chunk at a time, each answer walking
the index: 1.6 ms per chunk of a 30,000-chunk dataset (HDF5 1.10.8), 48 s for the
whole of MDAnalysis' one-frame chunks of a 30,000-frame trajectory.

For those, :func:`index_all_chunks` reads the index from the file itself where `pyfive
<https://github.com/NCAS-CMS/pyfive>`_, a maintained pure-Python HDF5 reader, is
installed (the ``fast`` extra). pyfive parses the dataset's object header and gives the
root of the version-1 B-tree that indexes the chunks of every file written in HDF5's
default (earliest) format; :func:`_walk` reads the tree's nodes, each in one ``pread``
and one numpy view: 30,000 chunks in 23 ms (pyfive's own index, one Python object per
chunk, took 0.1 s; importing pyfive takes 40-110 ms once). The list is used only where
it agrees with HDF5 on the number of allocated chunks and on the first, middle and last
chunk (each one HDF5 look-up); anything else -- pyfive missing, the newer chunk indexes
of ``libver="latest"`` files, any error or disagreement -- gives None, and the caller
looks chunks up through HDF5 (or reads through h5py) as before.

This module knows h5py, numpy and the standard library only, and pyfive where installed.
"""

from __future__ import annotations

import importlib
import logging
import os
import struct
from typing import Any

import h5py
import numpy as np

__all__ = ["index_all_chunks", "index_with_pyfive", "locate_chunks"]

log = logging.getLogger(__name__)

#: ``coord -> (byte offset, stored size, filter mask)``; coord is the chunk's first
#: element along each axis.
Locations = dict[tuple[int, ...], tuple[int, int, int]]


def index_all_chunks(dset: h5py.Dataset, *, use_pyfive: bool = True) -> Locations | None:
    """Byte offset, size and filter mask of every allocated chunk, in one pass.

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset of a file opened by name (the caller holds h5py's lock).
    use_pyfive : bool, default True
        Where HDF5 cannot iterate over chunks (before 1.12.3), read the index with
        :func:`index_with_pyfive`.

    Returns
    -------
    dict or None
        ``coord -> (offset, size, filter_mask)`` of every allocated chunk; None where
        neither HDF5 nor pyfive can list them in one pass.
    """
    chunk_iter = getattr(dset.id, "chunk_iter", None)
    if chunk_iter is None:
        return index_with_pyfive(dset) if use_pyfive else None
    located: Locations = {}

    def visit(info: Any) -> None:
        located[tuple(int(c) for c in info.chunk_offset)] = _location(info)

    chunk_iter(visit)
    return located


def index_with_pyfive(dset: h5py.Dataset) -> Locations | None:
    """The chunk index of ``dset`` as read from the file with pyfive, checked against HDF5.

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset of a file opened by name.

    Returns
    -------
    dict or None
        As :func:`index_all_chunks`; None where pyfive is not installed, cannot read the
        dataset's chunk index, or disagrees with HDF5 on any checked chunk.
    """
    try:
        pyfive = importlib.import_module("pyfive")
    except ImportError:
        return None
    filename, name = dset.file.filename, dset.name
    if not name or not os.path.isfile(filename):
        return None
    try:
        with pyfive.File(filename) as f:
            located = _read_index(f, name, filename, dset.ndim)
        _check(dset, located)
    except Exception as err:  # noqa: BLE001 - an optimisation: HDF5's look-ups remain
        log.debug("%s: %s: pyfive gave no chunk index (%s: %s); looking chunks up "
                  "through HDF5", filename, name, type(err).__name__, err)
        return None
    return located


def _read_index(f: Any, name: str, filename: str, rank: int) -> Locations:
    """The chunks of dataset ``name`` of the open pyfive file ``f``.

    pyfive parses the dataset's object header and finds the root of its chunk B-tree
    without reading the tree (``get_lazy_view``). The tree's nodes are then read here, a
    node per ``pread`` and its entries in one numpy view: ~0.3 µs per chunk, where
    pyfive's own index (``DatasetID.index``, one Python object per chunk) takes ~3 µs.
    Where this pyfive has no root to give, its own index is used.
    """
    parent, _, leaf = name.rstrip("/").rpartition("/")
    pid = (f[parent] if parent else f).get_lazy_view(leaf).id  # lazy for the last step only
    params = getattr(pid, "_index_params", None)  # pyfive 1.x: (B-tree address, dims)
    if params is None or getattr(params, "chunk_address", None) is None:
        return {coord: (info.byte_offset, info.size, info.filter_mask)
                for coord, info in f[name].id.index.items()}
    if params.chunk_dims != rank + 1:  # the chunk B-tree's keys carry one more axis
        raise ValueError(f"chunk B-tree keys of {params.chunk_dims} axes for rank {rank}")
    if params.chunk_address == _UNDEFINED:  # no chunk written yet
        return {}
    fd = os.open(filename, os.O_RDONLY)
    try:
        return _walk(fd, params.chunk_address, rank)
    finally:
        os.close(fd)


#: An HDF5 address that points nowhere.
_UNDEFINED = 0xFFFFFFFFFFFFFFFF
#: A version-1 B-tree node's header: "TREE", node type, level, entries used, siblings.
_NODE_HEADER = struct.Struct("<4sBBHQQ")


def _walk(fd: int, root: int, rank: int) -> Locations:
    """Every chunk listed under the version-1 B-tree node at ``root`` (HDF5 format spec,
    III.A.1: entries of key ``(size u4, filter mask u4, offset u8 x (rank + 1))`` and
    child address ``u8``; a leaf's children are the chunks)."""
    entry = np.dtype([("size", "<u4"), ("mask", "<u4"), ("offset", "<u8", (rank + 1,)),
                      ("address", "<u8")])
    located: Locations = {}
    nodes, seen = [root], set()
    while nodes:
        at = nodes.pop()
        if at in seen or len(seen) > 1 << 24:
            raise ValueError(f"chunk B-tree revisits node {at}")
        seen.add(at)
        head = os.pread(fd, _NODE_HEADER.size, at)
        if len(head) < _NODE_HEADER.size:
            raise ValueError(f"chunk B-tree node {at} lies past the end of the file")
        sig, kind, level, used, _, _ = _NODE_HEADER.unpack(head)
        if sig != b"TREE" or kind != 1:
            raise ValueError(f"no raw-data B-tree node at {at}")
        raw = os.pread(fd, used * entry.itemsize, at + _NODE_HEADER.size)
        if len(raw) < used * entry.itemsize:
            raise ValueError(f"chunk B-tree node {at} lies past the end of the file")
        entries = np.frombuffer(raw, dtype=entry, count=used)
        if level:
            nodes.extend(reversed(entries["address"].tolist()))
            continue
        located.update(zip(map(tuple, entries["offset"][:, :rank].tolist()),
                           zip(entries["address"].tolist(), entries["size"].tolist(),
                               entries["mask"].tolist(), strict=True), strict=True))
    return located


def _check(dset: h5py.Dataset, located: Locations) -> None:
    """Raise ValueError unless HDF5 agrees on the number of chunks and on the first,
    middle and last one (in HDF5's order: each look-up walks its index once)."""
    n = len(located)
    if n != dset.id.get_num_chunks():
        raise ValueError(f"{n} chunks (HDF5: {dset.id.get_num_chunks()})")
    for i in sorted({0, n // 2, n - 1}) if n else ():
        info = dset.id.get_chunk_info(i)
        coord = tuple(int(c) for c in info.chunk_offset)
        if located.get(coord) != _location(info):
            raise ValueError(f"chunk {i} at {coord}: {located.get(coord)} (HDF5: "
                             f"{_location(info)})")


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
    """``(byte offset, size, filter mask)`` of a chunk's ``StoreInfo`` (h5py's or pyfive's)."""
    return int(info.byte_offset), int(info.size), int(info.filter_mask)
