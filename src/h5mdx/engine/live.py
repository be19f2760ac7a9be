"""Read H5MD files while a simulation is still writing them (HDF5 SWMR).

A writer that opens its file with ``libver="latest"``, sets ``f.swmr_mode = True``
and appends frames with ``resize`` + ``flush`` lets readers open the file at the
same time: ``xr.open_dataset(path, engine="h5md", swmr=True)`` shows the frames
written so far (every element cut to the frames its ``value``, ``step`` and
``time`` all hold). A Dataset never grows by itself: :func:`refresh` closes it and
opens the file again, :func:`follow` yields a new Dataset each time the file grew.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import xarray as xr

from h5mdx.engine.topology import attached_topology
from h5mdx.errors import H5MDFormatError, H5MDReadError
from h5mdx.format.schema import TIME_DIM

__all__ = ["follow", "n_frames", "refresh"]


def n_frames(ds: xr.Dataset) -> int:
    """Frames along ``time`` (0 when the Dataset has no time axis)."""
    return int(ds.sizes.get(TIME_DIM, 0))


def _reopen_kwargs(ds: xr.Dataset, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords ``ds`` was opened with (the engine's, recorded in its encoding; its
    dask blocks), ``swmr=True``, and ``kwargs`` over them."""
    out: dict[str, Any] = {"engine": "h5md"}
    opened = ds.encoding.get("h5md_open") or {}
    out.update({k: v for k, v in opened.items() if v is not None})
    if not opened:  # a Dataset from elsewhere: what its attributes say
        if ds.attrs.get("h5md_group"):
            out["group"] = ds.attrs["h5md_group"]
        if "selection" in ds.attrs:
            out["select"] = ds.attrs["selection"]
    out["swmr"] = True
    topology = attached_topology(ds)
    if topology is not None:
        out["topology"] = topology
    blocks = _blocks(ds)
    if blocks is not None:
        out["chunks"] = blocks
    out.update(kwargs)
    return out


def _blocks(ds: xr.Dataset) -> dict[str, int] | None:
    """The dask block length of each dimension of ``ds`` (its first block, in the largest
    dask-backed variable: what ``chunks=`` gave), ``{}`` where those are the engine's
    preferred blocks (``chunks={}``: they grow with the file), None where nothing is
    dask-backed. (``ds.chunks`` raises where variables' blocks differ.)"""
    dask_vars = [v for v in ds.variables.values() if v.chunks is not None]
    if not dask_vars:
        return None
    out: dict[str, int] = {}
    preferred = True  # the engine's own blocks (chunks={}), which grow with the file
    for var in sorted(dask_vars, key=lambda v: v.size, reverse=True):
        pref = var.encoding.get("preferred_chunks") or {}
        for dim, sizes in zip(var.dims, var.chunks or (), strict=True):
            if sizes:
                out.setdefault(str(dim), int(sizes[0]))
                want = pref.get(dim)
                preferred &= want is None or int(sizes[0]) == min(int(want), sum(sizes))
    return {} if preferred else out


def refresh(ds: xr.Dataset, **open_kwargs: Any) -> xr.Dataset:
    """Close ``ds`` and open its file again to see the frames appended since.

    Parameters
    ----------
    ds : xarray.Dataset
        A Dataset opened with ``engine="h5md"`` (usually with ``swmr=True``).
    **open_kwargs
        Override the arguments of :func:`xarray.open_dataset`. By default those ``ds``
        was opened with (group, topology, selection, ``convert_units``,
        ``drop_variables``, ``chunk_mib``, ``strict``, ``allow_external``, and the
        length of its dask blocks), with ``swmr=True``.

    Returns
    -------
    xarray.Dataset
        The file as it is now. ``ds`` is closed and must not be used any more.

    Examples
    --------
    >>> ds = xr.open_dataset("run.h5md", engine="h5md", swmr=True)  # doctest: +SKIP
    >>> ds = h5mdx.engine.live.refresh(ds)  # more frames, if the writer appended  # doctest: +SKIP
    """
    source = ds.encoding.get("source") or ds.attrs.get("source")
    if not source:
        raise ValueError("refresh needs a Dataset opened from a file with engine='h5md'")
    kwargs = _reopen_kwargs(ds, open_kwargs)
    ds.close()
    return xr.open_dataset(source, **kwargs)


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The ``(device, inode)`` of ``path``; None where it cannot be told."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _another_run(path: str | os.PathLike[str], ds: xr.Dataset, seen: int,
                 identity: tuple[int, int] | None) -> tuple[int, tuple[int, int] | None]:
    """``(seen, identity)`` for :func:`follow`'s next look: the frames seen set back to 0,
    with a warning, where the file at ``path`` is another one (replaced: a new run
    written beside it and renamed over it) or holds fewer frames (truncated, or written
    again). Such a file was yielded only once it held more frames than the old one, as
    if those were appended."""
    now = _identity(path)
    shrank = n_frames(ds) < seen
    if seen and (shrank or None not in (now, identity) and now != identity):
        what = f"holds {n_frames(ds)} frames, {seen} before" if shrank else "was replaced"
        warnings.warn(f"follow({os.fspath(path)!r}): the file {what}: another run, whose "
                      "frames are yielded from its first", RuntimeWarning, stacklevel=3)
        seen = 0
    return seen, now


def follow(
    path: str | os.PathLike[str],
    *,
    interval: float = 1.0,
    timeout: float | None = 60.0,
    until: Callable[[xr.Dataset], bool] | None = None,
    min_new_frames: int = 1,
    **open_kwargs: Any,
) -> Iterator[xr.Dataset]:
    """Yield the file as a Dataset each time a writer has appended frames.

    Parameters
    ----------
    path : str or path-like
        The H5MD file being written in SWMR mode (it may not exist yet).
    interval : float, default 1.0
        Seconds between looks at the file.
    timeout : float or None, default 60
        Stop after this many seconds without new frames (None: never).
    until : callable, optional
        Stop after yielding a Dataset for which ``until(ds)`` is true (asked when the
        next Dataset is asked for, before this one is closed: it may read its data).
    min_new_frames : int, default 1
        Yield only when at least this many frames were added.
    **open_kwargs
        Passed to :func:`xarray.open_dataset` (``swmr=True``, ``engine="h5md"`` are set).

    Yields
    ------
    xarray.Dataset
        The frames written so far. Each Dataset is closed when the next one is
        produced (or the generator ends): load what you need before asking for more.
        A file replaced (a new run renamed over it) or holding fewer frames than the
        last one yielded is another run: it is yielded as soon as it holds
        ``min_new_frames``, with a :class:`RuntimeWarning`.
    """
    kwargs = {"engine": "h5md", "swmr": True, **open_kwargs}
    seen = 0
    identity: tuple[int, int] | None = None  # the file's (device, inode) at the last look
    last_growth = time.monotonic()
    failed: Exception | None = None  # why the last look found no Dataset
    while True:
        ds = None
        try:
            ds = xr.open_dataset(os.fspath(path), **kwargs)
        except (FileNotFoundError, H5MDFormatError, H5MDReadError) as err:
            if "without swmr=True already" in str(err):
                raise  # this process holds the file open otherwise: no wait mends that
            ds, failed = None, err  # not created yet, or the writer has not finished its header
        if ds is not None:
            seen, identity = _another_run(path, ds, seen, identity)
        if ds is not None and n_frames(ds) >= seen + min_new_frames:
            seen = n_frames(ds)
            last_growth = time.monotonic()
            try:
                yield ds
                # asked before the close: a read of the closed Dataset reopened its file
                # and held it open
                done = until is not None and until(ds)
            finally:
                ds.close()
            if done:
                return
        elif ds is not None:
            ds.close()
        if timeout is not None and time.monotonic() - last_growth > timeout:
            if not seen and failed is not None:
                warnings.warn(f"follow({os.fspath(path)!r}) stopped after {timeout} s "
                              f"without a frame; the last look found: {failed}",
                              RuntimeWarning, stacklevel=2)
            return
        time.sleep(interval)
