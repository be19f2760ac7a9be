"""Reading runs of frames of a lazily opened variable without xarray's indexing per read.

An RMSD task reads its frames a few MiB at a time (see :mod:`h5mdx.analysis.rmsd`).
Through ``variable[a:b].values`` each of those reads passes xarray's lazy-indexing
machinery (key composition, indexer decomposition, wrapper arrays): ~100 µs of Python
per read, a tenth of the task's time or more with 4 MiB reads. :func:`frame_reader` composes
the variable's key once and then hands each run of frames straight to the
:class:`~h5mdx.engine.backend.H5MDArray`, which reads it as before (direct or through
h5py, with its unit scaling and fill values).

Only the plain case qualifies: a variable of the ``h5md`` engine, opened lazily, sliced
(or not) with unit steps along time and slices elsewhere. ``MemoryCachedArray``,
``CopyOnWriteArray`` and ``LazilyIndexedArray`` are xarray's internal wrappers (no public
API exposes the backend array of a lazily indexed variable); anything else -- another
backend, data in memory, a transpose, a vectorised or integer index, or a future change
of those wrappers -- gives None, and the caller indexes through xarray as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import xarray as xr
from xarray.core import indexing

from h5mdx.engine.backend import H5MDArray

__all__ = ["FrameReader", "frame_reader"]

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
    """

    def __init__(self, array: H5MDArray, first: int, rest: tuple[slice, ...]) -> None:
        self.array = array
        self.first = first
        self.rest = rest

    def warm(self) -> None:
        """Plan the direct reads of the dataset now (see
        :meth:`h5mdx.engine.backend.H5MDArray.warm`)."""
        self.array.warm()

    def bind(self) -> Callable[[int, int], np.ndarray]:
        """A reader of the variable's frames for one task's run of reads.

        Each read is what calling the FrameReader gives; the dataset's direct reader is
        looked up once (see :meth:`h5mdx.engine.backend.H5MDArray.rows_reader`), which
        spares each 4 MiB read ~30 µs (a check of the file on disk, the key's
        normalisation and split into a box, the look-up of the reader). Bind again in
        each task: a file rewritten on disk is only noticed here.

        Returns
        -------
        callable
            ``read(start, stop)``, as calling the FrameReader.
        """
        return self.array.rows_reader(self.first, self.rest)

    def __call__(self, start: int, stop: int) -> np.ndarray:
        """The variable's frames ``start`` to ``stop`` (0 <= start <= stop <= its length)."""
        return self.array._getitem((slice(self.first + start, self.first + stop, 1),
                                    *self.rest))


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
        None for anything but unit-step slices of an :class:`H5MDArray`.

    Examples
    --------
    >>> ds = xr.open_dataset("adk.h5md", engine="h5md")  # doctest: +SKIP
    >>> read = frame_reader(ds.position.variable[100:200])  # doctest: +SKIP
    >>> read(0, 10).shape  # frames 100-109 of the file  # doctest: +SKIP
    (10, 3341, 3)
    """
    data = getattr(variable, "_data", None)  # no public way to the lazily indexed array
    while _WRAPPERS and isinstance(data, _WRAPPERS):
        data = data.array
    if _LAZY is None or type(data) is not _LAZY:
        return None
    array = getattr(data, "array", None)
    key = getattr(getattr(data, "key", None), "tuple", None)
    if not isinstance(array, H5MDArray) or not isinstance(data.key, _KEYS) or key is None:
        return None
    if len(key) != len(array.shape) or len(key) != variable.ndim or not key:
        return None
    if not all(isinstance(k, slice) for k in key):
        return None
    bounds = [k.indices(n) for k, n in zip(key, array.shape, strict=True)]
    if any(step != 1 for _, _, step in bounds):
        return None
    start, rest = bounds[0][0], tuple(slice(a, b, 1) for a, b, _ in bounds[1:])
    shape = tuple(max(0, b - a) for a, b, _ in bounds)
    if shape != tuple(variable.shape):
        return None
    return FrameReader(array, start, rest)
