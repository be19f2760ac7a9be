"""Exceptions raised by h5mdx.

Every error that concerns a file names the file, the H5MD path inside it and
what is wrong, so that a user can act on it without reading a traceback.
"""

from __future__ import annotations

import sys
from types import FrameType

__all__ = [
    "H5MDConformanceWarning",
    "H5MDError",
    "H5MDFormatError",
    "H5MDReadError",
    "ParticleOrderWarning",
    "H5MDUnitError",
    "MissingDependencyError",
    "NoSuchGroupError",
    "PositionsError",
    "TopologyError",
    "user_stacklevel",
]


class H5MDError(Exception):
    """Base class of all h5mdx errors."""

    #: True where the error wraps one that no check anticipated (an h5py, xarray or
    #: MDAnalysis failure): its message says what failed, its traceback why, and the
    #: command line offers it (``--debug``)
    unexpected: bool = False


def _where(filename: object | None, h5path: str | None) -> str:
    parts = []
    if filename is not None:
        parts.append(f"{filename}")
    if h5path:
        parts.append(f"[{h5path}]")
    return " ".join(parts)


class H5MDFormatError(H5MDError, ValueError):
    """A file is not valid H5MD, or an element in it is malformed.

    Parameters
    ----------
    filename : str or path-like, optional
        The file concerned.
    h5path : str, optional
        The HDF5 path inside the file (e.g. ``/particles/trajectory/position``).
    problem : str
        What is wrong, in words a user can act on.
    """

    def __init__(self, filename: object | None, h5path: str | None, problem: str) -> None:
        self.filename = filename
        self.h5path = h5path
        self.problem = problem
        where = _where(filename, h5path)
        super().__init__(f"{where}: {problem}" if where else problem)

    def __reduce__(self) -> tuple:
        return (type(self), (self.filename, self.h5path, self.problem))


class H5MDReadError(H5MDError, OSError):
    """Reading the data of an element failed (e.g. a corrupt compressed chunk)."""

    def __init__(self, filename: object | None, h5path: str | None, problem: str) -> None:
        where = _where(filename, h5path)
        self.message = f"{where}: {problem}" if where else problem
        super().__init__(self.message)
        self.filename = filename
        self.h5path = h5path
        self.problem = problem

    def __reduce__(self) -> tuple:
        return (type(self), (self.filename, self.h5path, self.problem))

    def __str__(self) -> str:
        return self.message


class H5MDUnitError(H5MDError, ValueError):
    """A unit string cannot be understood or converted."""


class TopologyError(H5MDError, ValueError):
    """A topology does not fit the trajectory, or a selection is unusable."""


class NoSuchGroupError(H5MDError, ValueError):
    """The group asked for (``group=``, ``--group``) is not one the file has, or a file
    of several groups was opened without one; the message names the file and lists the
    groups there are. A ``ValueError``, as before this class: ``except ValueError`` still
    catches it."""


class PositionsError(H5MDError, ValueError):
    """The positions an analysis needs are not there or not usable: a Dataset (a group)
    without ``position``, positions of no frames, or positions stored as text; the
    message names the file, the H5MD path and what is wrong. A ``ValueError``, as before
    this class: ``except ValueError`` still catches it."""


class MissingDependencyError(H5MDError, ImportError):
    """An optional dependency needed for the requested feature is not installed."""


class H5MDConformanceWarning(UserWarning):
    """A file departs from H5MD but h5mdx could still read it.

    The message names the file, the H5MD path, the problem and what h5mdx assumed
    (e.g. "no step: frames numbered 0..n-1"), or that the part was left out. Pass
    ``strict=True`` to :func:`xarray.open_dataset` to make each of these an
    :class:`H5MDFormatError` instead.
    """


class ParticleOrderWarning(UserWarning):
    """A particles group stores its particles in another order in some frames.

    H5MD allows it: a time-dependent ``id`` then says which particle each slot holds
    (ESPResSo writes each frame in the order of its cells). h5mdx serves the elements as
    stored, slot by slot, and marks their variables with a ``particle_order`` attribute;
    per-atom analyses such as the RMSD refuse such positions until they are put in one
    order (``ds.md.by_id()``, :func:`h5mdx.engine.order.by_id`).
    """


def user_stacklevel(outside: tuple[str, ...] = ("h5mdx",)) -> int:
    """The ``stacklevel`` that points a warning warned by the caller at the first caller
    outside the packages ``outside`` (h5mdx; at open also xarray, which calls the engine).

    ``sys._getframe`` because ``warnings.warn(skip_file_prefixes=...)``, the public way,
    needs Python 3.12 and h5mdx supports 3.10.
    """
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] \
            in outside:
        frame = frame.f_back
        level += 1
    return level
