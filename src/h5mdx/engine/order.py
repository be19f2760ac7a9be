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

import numpy as np
import xarray as xr

from h5mdx.engine.backend import PARTICLE_ORDER_ATTR
from h5mdx.format.schema import ATOM_DIM, TIME_DIM

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
        A particles group with a time-dependent ``id`` on ``(time, atom)``.

    Returns
    -------
    xarray.Dataset
        Every variable on ``time`` and ``atom`` with its slots in increasing ``id``,
        without the ``particle_order`` mark; ``id`` becomes the ids in that order, on
        ``atom`` alone. Variables on ``atom`` but not on ``time`` (a topology's names, a
        mass per slot) are per slot, not per particle: they are left out, with a warning.

    Raises
    ------
    ValueError
        Where ``ds`` has no time-dependent ``id``, or an id appears twice in a frame.
    """
    ids = ds.get("id")
    if ids is None or TIME_DIM not in ids.dims or ATOM_DIM not in ids.dims:
        raise ValueError("by_id needs a time-dependent 'id' on (time, atom) (H5MD's id "
                         "element of a particles group)")
    values = np.asarray(ids.transpose(TIME_DIM, ATOM_DIM).values)
    fill = ids.encoding.get("_FillValue")
    present = np.ones(values.shape, bool) if fill is None else values != fill
    every = np.unique(values[present])
    rows, cols = np.nonzero(present)
    at = np.searchsorted(every, values[rows, cols])
    slots = np.full((values.shape[0], every.size), -1, dtype=np.int64)
    slots[rows, at] = cols
    if np.count_nonzero(slots >= 0) != rows.size:  # two slots of a frame wrote one place
        where = f"{ds.attrs.get('source', 'the Dataset')} [{ds.attrs.get('h5md_group', '')}/id]"
        raise ValueError(f"{where}: an id appears twice in a frame")
    held = slots >= 0
    index = xr.DataArray(np.where(held, slots, 0), dims=(TIME_DIM, ATOM_DIM))
    mask = None if held.all() else xr.DataArray(held, dims=(TIME_DIM, ATOM_DIM))
    # per slot, not per particle: they cannot follow the particles (a topology's names,
    # a fixed mass per slot where the order changes); left out, said once
    static = sorted(str(n) for n, v in ds.variables.items()
                    if ATOM_DIM in v.dims and TIME_DIM not in v.dims and n not in (ATOM_DIM, "id"))
    if static:
        warnings.warn(f"by_id: {static} are per slot, not per particle, and cannot follow the "
                      "particles: left out", UserWarning, stacklevel=3)
    base = ds.drop_vars(static)
    out = base.drop_dims(ATOM_DIM) if every.size != values.shape[1] else base.copy()
    for name, var in ds.data_vars.items():
        if name == "id" or TIME_DIM not in var.dims or ATOM_DIM not in var.dims:
            continue
        moved = var.drop_vars(ATOM_DIM, errors="ignore").isel({ATOM_DIM: index})
        if mask is not None:
            moved = moved.where(mask)
        moved.attrs = {k: v for k, v in var.attrs.items() if k != PARTICLE_ORDER_ATTR}
        moved.encoding = dict(var.encoding)
        out[name] = moved.transpose(*var.dims)
    out["id"] = xr.Variable((ATOM_DIM,), every, dict(ids.attrs))
    return out
