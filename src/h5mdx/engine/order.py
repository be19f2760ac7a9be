"""Particles put in one order by their ``id``.

H5MD lets a writer store each frame's particles in an order of its own, with a
time-dependent ``id`` saying which particle each slot holds (ESPResSo writes each frame in
its cell order). The engine serves such elements as stored and marks them
(``attrs["particle_order"]``, a :class:`~h5mdx.errors.ParticleOrderWarning`);
:func:`by_id` gives the Dataset with every per-particle time series in the order of the
ids, the same in every frame, which per-atom analyses such as the RMSD need.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from h5mdx.engine.backend import PARTICLE_ORDER_ATTR
from h5mdx.format.schema import ATOM_DIM, TIME_DIM

__all__ = ["by_id"]


def by_id(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its per-particle time series in the order of the particles' ``id``.

    Reads ``id`` (one integer per particle and frame); the other variables stay as lazy
    as they were (a dask array, or the engine's lazily indexed one).

    Parameters
    ----------
    ds : xarray.Dataset
        A particles group with a time-dependent ``id`` on ``(time, atom)``.

    Returns
    -------
    xarray.Dataset
        Every variable on ``time`` and ``atom`` with its slots in increasing ``id`` in
        every frame, without the ``particle_order`` mark; ``id`` becomes the ids in that
        order, on ``atom`` alone.

    Raises
    ------
    ValueError
        Where ``ds`` has no time-dependent ``id``, or its frames hold different particles
        (an absent particle, a particle count that changes), or an id twice in a frame:
        no one order then holds every frame.
    """
    ids = ds.get("id")
    if ids is None or TIME_DIM not in ids.dims or ATOM_DIM not in ids.dims:
        raise ValueError("by_id needs a time-dependent 'id' on (time, atom) (H5MD's id "
                         "element of a particles group)")
    values = np.asarray(ids.transpose(TIME_DIM, ATOM_DIM).values)
    fill = ids.encoding.get("_FillValue")
    where = f"{ds.attrs.get('source', 'the Dataset')} [{ds.attrs.get('h5md_group', '')}/id]"
    if fill is not None and np.any(values == fill):
        first = int(np.flatnonzero((values == fill).any(axis=1))[0])
        raise ValueError(f"{where}: frame {first} has an absent particle (id = fill value "
                         f"{fill}): by_id needs the same particles in every frame")
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    differs = np.flatnonzero((ordered != ordered[:1]).any(axis=1))
    if differs.size:
        raise ValueError(f"{where}: frames 0 and {int(differs[0])} hold different particles: "
                         "by_id needs the same particles in every frame")
    if ordered.shape[1] > 1 and np.any(np.diff(ordered[0]) == 0):
        raise ValueError(f"{where}: an id appears twice in a frame")
    slots = xr.DataArray(order, dims=(TIME_DIM, ATOM_DIM))
    out = ds.copy()
    for name, var in ds.data_vars.items():
        if name == "id" or TIME_DIM not in var.dims or ATOM_DIM not in var.dims:
            continue
        moved = var.drop_vars(ATOM_DIM, errors="ignore").isel({ATOM_DIM: slots})
        moved.attrs = {k: v for k, v in var.attrs.items() if k != PARTICLE_ORDER_ATTR}
        moved.encoding = dict(var.encoding)
        out[name] = moved.transpose(*var.dims)
    out["id"] = xr.Variable((ATOM_DIM,), ordered[0], dict(ids.attrs))
    return out
