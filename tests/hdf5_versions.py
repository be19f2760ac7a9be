"""Datasets as HDF5 of other versions show them, to test both of h5mdx's paths on any HDF5.

``H5Dchunk_iter`` (h5py's ``DatasetID.chunk_iter``) exists from HDF5 1.12.3; Debian's
parallel HDF5 1.10.8, which CI's MPI build of h5py uses, lacks it. Tests import these with
``from hdf5_versions import WithChunkIter, WithoutChunkIter`` (pytest puts ``tests/`` on
``sys.path``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["WithChunkIter", "WithoutChunkIter"]


class WithChunkIter:
    """A dataset whose ``id`` offers ``chunk_iter`` (HDF5 >= 1.12.3) on any HDF5: built on
    ``get_chunk_info`` here, to test what h5mdx does with it."""

    def __init__(self, dset: Any) -> None:
        self._dset = dset
        self.id = self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dset.id if name.startswith("get_") else self._dset, name)

    def chunk_iter(self, visit: Any) -> None:
        for i in range(self._dset.id.get_num_chunks()):
            visit(self._dset.id.get_chunk_info(i))


class WithoutChunkIter:
    """A dataset whose ``id`` lacks ``chunk_iter``, as with HDF5 before 1.12.3."""

    def __init__(self, dset: Any) -> None:
        self._dset = dset
        self.id = _IdWithout(dset.id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dset, name)


class _IdWithout:
    def __init__(self, dsid: Any) -> None:
        self._dsid = dsid

    def __getattr__(self, name: str) -> Any:
        if name == "chunk_iter":
            raise AttributeError(name)
        return getattr(self._dsid, name)
