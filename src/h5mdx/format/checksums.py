"""Checksums of array data: the one BLAKE2 digest of h5mdx (numpy and h5py only).

A digest covers the values in C order and nothing else: not the chunk layout,
not the compression, not the file format. So the digest a writer keeps while
it writes (:class:`Digests`), the digest of an HDF5 dataset read back
(:func:`dataset_checksums`) and the digest of a Zarr array
(:func:`h5mdx.layout.export.zarr_checksums`) agree when the data do; ``convert
--verify`` and ``rechunk --verify`` compare them.

>>> import numpy as np
>>> d = Digests()
>>> d.update("x", np.arange(4))
>>> d.update("x", np.arange(4, 6))
>>> d.hexdigests()["x"] == array_digest(np.arange(6))
True
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

import h5py
import numpy as np

__all__ = ["Digests", "array_digest", "dataset_checksums", "new_digest"]

#: Bytes read at a time by :func:`array_digest`.
BLOCK_BYTES = 64 * 2**20


def new_digest() -> Any:
    """A fresh ``hashlib.blake2b`` of 16 bytes, the digest every h5mdx checksum uses."""
    return hashlib.blake2b(digest_size=16)


def _values_bytes(values: np.ndarray) -> Any:
    """The bytes a digest covers: the array's own (C order), or for an array of objects
    (HDF5's variable-length strings, read as bytes) each object's, after its length.
    ``tobytes`` of such an array gives the objects' addresses in memory, which differ from
    one read to the next: ``rechunk --verify`` failed on every copy of a
    variable-length string array.

    >>> a = np.array([b"Ar", b"Kr"], dtype=object)
    >>> _values_bytes(a) == _values_bytes(np.array([b"Ar", b"K" + b"r"], dtype=object))
    True
    """
    values = np.ascontiguousarray(values)
    little = values.dtype.newbyteorder("<")
    if values.dtype.kind in "biufc" and values.dtype != little:
        # the values' bytes in one byte order: an HDF5 dataset of big-endian floats and
        # its Zarr copy (native) hold the same values (rechunk --verify failed on them)
        return values.astype(little)
    if values.dtype.kind != "O":
        return values  # its own bytes, not a copy of them (a block of 64 MiB otherwise)
    out = bytearray()
    for v in values.ravel().tolist():
        data = v.encode("utf-8") if isinstance(v, str) else \
            v if isinstance(v, bytes) else np.ascontiguousarray(v).tobytes()
        out += len(data).to_bytes(8, "little") + data
    return bytes(out)


class Digests:
    """Running digests of arrays written piece by piece, one per name.

    Parameters
    ----------
    enabled : bool, optional
        False makes :meth:`update` do nothing (a writer without ``checksum=True``).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._hash: dict[str, Any] = {}

    def update(self, name: str, values: Any) -> None:
        """Add the next values (C order) of ``name``."""
        if self.enabled:
            h = self._hash.get(name)
            if h is None:
                h = self._hash[name] = new_digest()
            h.update(_values_bytes(values))

    def hexdigests(self) -> dict[str, str]:
        """Name -> hex digest of everything added so far."""
        return {k: h.hexdigest() for k, h in self._hash.items()}


def array_digest(array: Any, *, block_bytes: int = BLOCK_BYTES, dtype: Any = None) -> str:
    """Hex digest of an array's values, read in blocks of whole chunks along the first axis.

    Parameters
    ----------
    array : array-like
        Anything with ``shape``, ``dtype``, numpy-style slicing and, optionally,
        ``chunks`` (an h5py dataset, a Zarr array, a numpy array); an h5py dataset of
        HDF5's null dataspace (``shape`` None, ``h5py.Empty``) has a digest of its own.
    block_bytes : int, optional
        Size of the blocks read at a time (bounds memory).
    dtype : dtype-like, optional
        Cast to this before hashing (default: the array's).

    Returns
    -------
    str
    """
    h = new_digest()
    dtype = np.dtype(array.dtype if dtype is None else dtype)
    if array.shape is None:  # HDF5's null dataspace (h5py.Empty): no values
        h.update(b"null")
        return h.hexdigest()
    shape = tuple(array.shape)
    if shape == ():
        h.update(_values_bytes(np.asarray(array[()], dtype=dtype)))
    elif shape[0] and all(shape):
        row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(array.dtype).itemsize)
        step = max(1, block_bytes // row)
        chunks = getattr(array, "chunks", None)
        if chunks:
            first = int(chunks[0])
            step = max(first, (step // first) * first)
        for a in range(0, shape[0], step):
            h.update(_values_bytes(np.asarray(array[a:a + step], dtype=dtype)))
    return h.hexdigest()


def dataset_checksums(
    source: str | os.PathLike[str] | h5py.File,
    paths: Iterable[str],
    *,
    block_bytes: int = BLOCK_BYTES,
    dtypes: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """BLAKE2 digest of the data of each dataset, read in blocks of frames.

    The digest depends only on the values (C order) and the dtype, not on the
    chunk layout, compression or byte order, so an input and its rechunked copy agree.

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file.
    paths : iterable of str
        Dataset paths.
    block_bytes : int, optional
        Size of the blocks read at a time (bounds memory).
    dtypes : mapping, optional
        Path -> dtype to cast to before hashing.

    Returns
    -------
    dict
        Path -> hex digest.
    """
    if not isinstance(source, h5py.File):
        with h5py.File(os.fspath(source), "r") as f:
            return dataset_checksums(f, paths, block_bytes=block_bytes, dtypes=dtypes)
    return {path: array_digest(source[path], block_bytes=block_bytes,
                               dtype=(dtypes or {}).get(path))
            for path in paths}
