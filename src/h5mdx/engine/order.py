"""Particles put in one order by their ``id``.

H5MD lets a writer store each frame's particles in an order of its own, with a
time-dependent ``id`` saying which particle each slot holds (ESPResSo writes each frame in
its cell order). The engine serves such elements as stored and marks them
(``attrs["particle_order"]``, a :class:`~h5mdx.errors.ParticleOrderWarning`);
:func:`by_id` gives the Dataset with every per-particle time series in the order of the
ids, the same in every frame, which per-atom analyses such as the RMSD need.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

from h5mdx.engine.assembly import PARTICLE_ORDER_ATTR
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError
from h5mdx.format.schema import ATOM_DIM, STEP_COORD, TIME_DIM, is_time_dim

__all__ = ["by_id"]


def by_id(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its per-particle time series in the order of the particles' ``id``.

    Reads ``id`` (one integer per particle and frame); the other variables stay as lazy
    as they were (a dask array, or the engine's lazily indexed one). Slot ``j`` of every
    frame then holds the particle with the ``j``-th smallest id of the whole file; a frame
    without that particle (an ``id`` equal to its fill value elsewhere: grand-canonical
    runs) has NaN there.

    Parameters
    ----------
    ds : xarray.Dataset
        A particles group with a time-dependent ``id`` on ``(time, atom)`` (or on a time
        axis of its own, ``time_id``, where it is sampled at other steps).

    Returns
    -------
    xarray.Dataset
        Every variable on ``time`` and ``atom`` with its slots in increasing ``id``,
        without the ``particle_order`` mark; ``id`` becomes the ids in that order, on
        ``atom`` alone. A variable sampled on a time axis of its own (``time_velocity``:
        velocities every 10th frame) follows the ids of the frames of its steps; where
        ``id`` has no frame of one of them, it is left out, with a warning. Variables on
        ``atom`` but on no time axis (a topology's names, a mass per slot) are per slot,
        not per particle: they are left out, with a warning.

    Raises
    ------
    ValueError
        Where ``ds`` has no time-dependent ``id``.
    h5mdx.errors.H5MDFormatError
        Where an id appears twice in a frame (naming the frame, the id and its slots).

    Warns
    -----
    h5mdx.errors.H5MDConformanceWarning
        Where an ``id`` without a fill value of its own holds 0 in several slots of a
        frame: slots of a particle axis grown after that frame, never written, read as
        HDF5's default fill value 0 (ESPResSo 5 sets none). The first 0 of each such
        frame is taken for particle 0, the others as absent.
    """
    ids = ds.get("id")
    tid = None if ids is None else next((str(d) for d in ids.dims if is_time_dim(d)), None)
    if ids is None or tid is None or ATOM_DIM not in ids.dims:
        raise ValueError("by_id needs a time-dependent 'id' on (time, atom) or (time_id, "
                         "atom) (H5MD's id element of a particles group)")
    values = np.asarray(ids.transpose(tid, ATOM_DIM).values)
    source = ids.encoding.get("source", ds.attrs.get("source"))
    path = ids.encoding.get("h5md_path", f"{ds.attrs.get('h5md_group', '')}/id")
    if values.dtype.kind == "f" and ids.encoding.get("_FillValue") is not None:
        # decoded by CF (a Zarr store opened by xarray): the fill value's slots are NaN
        present = ~np.isnan(values)
        values = np.where(present, values, 0).astype(ids.encoding.get("dtype", np.int64))
    else:
        present = _present(values, ids.encoding.get("_FillValue"), source, path)
    every = np.unique(values[present])
    rows, cols = np.nonzero(present)
    at = np.searchsorted(every, values[rows, cols])
    slots = np.full((values.shape[0], every.size), -1, dtype=np.int64)
    slots[rows, at] = cols
    if np.count_nonzero(slots >= 0) != rows.size:  # two slots of a frame wrote one place
        raise _twice(values, present, source, path)
    # the frames of id at each time axis's frames (a velocity every 10th frame: its own)
    frames = {str(d): _frames(ds, str(d), tid) for d in ds.dims if is_time_dim(str(d))}
    # per slot, not per particle: they cannot follow the particles (a topology's names,
    # a fixed mass per slot where the order changes); left out, said once
    static = sorted(str(n) for n, v in ds.variables.items() if ATOM_DIM in v.dims
                    and not any(map(is_time_dim, v.dims)) and n not in (ATOM_DIM, "id"))
    if static:
        warnings.warn(f"by_id: {static} are per slot, not per particle, and cannot follow the "
                      "particles: left out", UserWarning, stacklevel=3)
    unmatched = sorted(str(n) for n, v in ds.data_vars.items() if ATOM_DIM in v.dims
                       and any(is_time_dim(d) and frames[str(d)] is None for d in v.dims))
    if unmatched:
        warnings.warn(f"by_id: {unmatched} are sampled at steps of which 'id' has no frame, "
                      "so the particles they hold are unknown: left out", UserWarning,
                      stacklevel=3)
    base = ds.drop_vars([*static, *unmatched])
    out = base.drop_dims(ATOM_DIM) if every.size != values.shape[1] else base.copy()
    for name, var in base.data_vars.items():
        tdim = next((str(d) for d in var.dims if is_time_dim(d)), None)
        if name == "id" or tdim is None or ATOM_DIM not in var.dims:
            continue
        out[name] = _moved(var, tdim, slots[frames[tdim]])
    out["id"] = xr.Variable((ATOM_DIM,), every, dict(ids.attrs))
    return out if tid == TIME_DIM else out.drop_dims(tid)  # id's own axis, now unused


def _frames(ds: xr.Dataset, tdim: str, tid: str) -> np.ndarray | None:
    """The frames of ``id`` (on time axis ``tid``) at the frames of time axis ``tdim``,
    matched by step; None where ``id`` has no frame of one of its steps. A step stored
    twice (a restarted run appended) is matched occurrence by occurrence: the k-th frame
    of a step takes the k-th frame of ``id`` at that step (the last where ``id`` has
    fewer); each took the last before, the order of the other run's frame."""
    if tdim == tid:
        return np.arange(ds.sizes[tid])
    own = ds.coords.get(STEP_COORD + tdim[len(TIME_DIM):])
    main = ds.coords.get(STEP_COORD + tid[len(TIME_DIM):])
    if own is None or main is None:
        return None
    where: dict[int, list[int]] = {}
    for i, s in enumerate(np.asarray(main.values)):
        where.setdefault(int(s), []).append(i)
    seen: dict[int, int] = {}
    found = []
    for s in map(int, np.asarray(own.values)):
        frames = where.get(s)
        if frames is None:
            return None
        found.append(frames[min(seen.get(s, 0), len(frames) - 1)])
        seen[s] = seen.get(s, 0) + 1
    return np.array(found, dtype=np.int64)


def _moved(var: xr.DataArray, tdim: str, slots: np.ndarray) -> xr.DataArray:
    """``var`` (on ``tdim`` and ``atom``) with slot ``j`` of frame ``t`` taken from slot
    ``slots[t, j]`` (-1: absent, NaN), without the ``particle_order`` mark."""
    held = slots >= 0
    index = xr.DataArray(np.where(held, slots, 0), dims=(tdim, ATOM_DIM))
    moved = var.drop_vars(ATOM_DIM, errors="ignore").isel({ATOM_DIM: index})
    if not held.all():
        moved = moved.where(xr.DataArray(held, dims=(tdim, ATOM_DIM)))
    moved.attrs = {k: v for k, v in var.attrs.items() if k != PARTICLE_ORDER_ATTR}
    moved.encoding = dict(var.encoding)
    return moved.transpose(*var.dims)


def _present(values: np.ndarray, fill: Any, source: Any, path: str) -> np.ndarray:
    """Which slots of ``values`` (ids on time x atom) hold a particle: not the fill value;
    without a fill value of its own, not a second 0 of a frame (HDF5's default fill)."""
    if fill is not None:
        return values != fill
    present = np.ones(values.shape, bool)
    if values.dtype.kind not in "iu" or not values.size:
        return present
    zeros = values == 0
    again = zeros & (np.cumsum(zeros, axis=1) > 1)
    if again.any():
        frames = np.flatnonzero(again.any(axis=1))
        warnings.warn(H5MDConformanceWarning(
            f"{source} [{path}]: id 0 is in {int(zeros[frames[0]].sum())} slots of frame "
            f"{int(frames[0])} ({frames.size} such frame(s)): slots of a particle axis grown "
            "after those frames, never written, and read as HDF5's default fill value 0 "
            "(the id has no fill value of its own; ESPResSo 5 sets none); the first 0 of "
            "each frame taken for particle 0, the others as absent (NaN by id)"),
            stacklevel=4)
        present &= ~again
    return present


def _twice(values: np.ndarray, present: np.ndarray, source: Any, path: str
           ) -> H5MDFormatError:
    """The error for the first frame of ``values`` holding one id in two slots."""
    for frame, (row, held) in enumerate(zip(values, present, strict=True)):
        seen, counts = np.unique(row[held], return_counts=True)
        if (counts > 1).any():
            twice = seen[counts > 1][0]
            where = np.flatnonzero(held & (row == twice))
            return H5MDFormatError(source, path, (
                f"frame {frame} holds id {twice.item()} in slots "
                f"{', '.join(str(int(i)) for i in where)}: one particle in two places, so "
                "no order by id can be made"))
    return H5MDFormatError(source, path, "an id appears twice in a frame")
