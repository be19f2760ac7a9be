"""The ``ds.md`` accessor: MD analyses on any Dataset in h5mdx's data model.

Importing ``h5mdx`` registers it. It works on Datasets from the ``h5md``
engine, from Zarr stores written by h5mdx, or built in memory, as long as they
hold ``position`` on ``(time, atom, spatial)``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["MDAccessor"]


@xr.register_dataset_accessor("md")
class MDAccessor:
    """Molecular-dynamics methods on a Dataset: ``ds.md.rmsd(...)``, ``ds.md.to_h5md(...)``."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    @property
    def topology(self) -> Any:
        """The topology attached by ``topology=`` when the file was opened: the Universe
        passed, or the path of the file passed (None without one)."""
        from h5mdx.engine.topology import attached_topology

        return attached_topology(self._ds)

    def rmsd(
        self,
        reference: Any = 0,
        *,
        select: Any = None,
        weights: Any = None,
        superposition: bool = True,
        **kwargs: Any,
    ) -> xr.DataArray:
        """RMSD of ``position`` after optimal superposition; see :func:`h5mdx.analysis.rmsd.rmsd`.

        Parameters
        ----------
        reference : int, array_like, xarray.DataArray or MDAnalysis Universe/AtomGroup, default 0
            Frame index, ``(atom, spatial)`` array, one-frame DataArray, or the current
            frame of a Universe or AtomGroup (selected with ``select`` as MDAnalysis'
            ``rms.RMSD`` does; see :func:`h5mdx.rmsd`).
        select : None, str, AtomGroup, array of int or array of bool
            Atoms to compare (selection strings use the attached topology). A selection
            by position (``around``, ``prop z``, ``sphzone``, ...) is made once, on the
            reference's positions (frame ``reference``, with the Dataset's box there;
            a Universe's current frame), as MDAnalysis' ``rms.RMSD`` does.
        weights : None, "mass" or array_like
            Per-atom weights. ``"mass"`` takes the masses of the topology where there is
            one, else the file's own ``mass`` element (which ``h5mdx convert`` writes).
        superposition : bool, default True
            False gives the RMSD after centring only.
        **kwargs
            Passed to :func:`h5mdx.analysis.rmsd.rmsd` (``kernel``, ``frames_per_block``, ...).

        Returns
        -------
        xarray.DataArray
            Lazy ``rmsd`` on ``time``.
        """
        from h5mdx.analysis.rmsd import rmsd

        position = _position_of(self._ds)
        kwargs.setdefault("topology", self.topology)
        if isinstance(select, str):
            from h5mdx.analysis.reference import with_atom_data

            position = with_atom_data(self._ds, position, kwargs["topology"])
            if "box_edges" in self._ds.variables:  # for a selection by distance
                kwargs.setdefault("box", self._ds["box_edges"])
        if isinstance(weights, str) and weights == "mass":
            weights = self._masses(position, kwargs["topology"])
        return rmsd(position, reference, select=select, weights=weights,
                    superposition=superposition, **kwargs)

    def _masses(self, position: xr.DataArray, topology: Any) -> Any:
        """``"mass"`` where the positions or a topology give masses, else the Dataset's
        own ``mass`` on ``atom`` (the file's element); without any, a TopologyError that
        names the file."""
        # where rmsd looks for a topology, and the masses it gives
        from h5mdx.analysis.reference import _topology, topology_masses

        if "mass" in position.coords:
            return "mass"
        mass = self._ds.get("mass")
        topology = _topology(position, topology)
        if topology is not None and (mass is None
                                     or topology_masses(position, topology) is not None):
            return "mass"  # the topology's masses (or its error, without the file's)
        if mass is not None and "atom" in mass.dims and mass.ndim > 1:
            mass = _fixed_along(mass, "atom")
        if mass is not None and mass.dims == ("atom",) and "atom" in position.dims \
                and mass.sizes["atom"] == position.sizes["atom"]:
            return mass.values
        if mass is None:
            from h5mdx.errors import TopologyError

            source = self._ds.encoding.get("source")
            raise TopologyError(
                "weights='mass' needs masses: "
                + (f"{source} has" if source else "the Dataset has")
                + " no 'mass' element and no topology is attached; open it with "
                "topology=... (any file MDAnalysis reads: PSF, TPR, PDB, ...), or pass the "
                "masses as weights=<array, or DataArray on atom>")
        return "mass"

    def by_id(self) -> xr.Dataset:
        """The Dataset with its particles in the order of their ``id`` in every frame (a
        writer that stores each frame in its own order, such as ESPResSo); see
        :func:`h5mdx.engine.order.by_id`."""
        from h5mdx.engine.order import by_id

        return by_id(self._ds)

    def to_h5md(self, path: str | os.PathLike[str], **kwargs: Any) -> Any:
        """Write the Dataset as an H5MD file; see :func:`h5mdx.layout.export.to_h5md`.

        Parameters
        ----------
        path : str or path-like
            The file to write (written aside and renamed into place).
        **kwargs
            ``frames_per_chunk``, ``chunk_mib``, ``contiguous``, ``compression``,
            ``group``, ``overwrite``, ``author``, ``author_email``: as
            :func:`h5mdx.layout.export.to_h5md`.

        Returns
        -------
        str
            The path written.
        """
        from h5mdx.layout.export import to_h5md

        return to_h5md(self._ds, path, **kwargs)

    def to_zarr(self, store: str | os.PathLike[str], **kwargs: Any) -> Any:
        """Write the Dataset as a Zarr store in chunks of whole frames; see
        :func:`h5mdx.layout.export.to_zarr` (``ds.to_zarr`` of a lazily opened Dataset
        lets Zarr split the frames).

        Parameters
        ----------
        store : str or path-like
            The store to write (written aside and renamed into place).
        **kwargs
            ``frames_per_chunk``, ``chunk_mib``, ``contiguous``, ``compression``,
            ``overwrite``, ``progress``: as :func:`h5mdx.layout.export.to_zarr`.

        Returns
        -------
        str
            The store written.
        """
        from h5mdx.layout.export import to_zarr

        return to_zarr(self._ds, store, **kwargs)


def _position_of(ds: xr.Dataset) -> xr.DataArray:
    """``ds.position``; a :class:`~h5mdx.errors.PositionsError` that says what the
    Dataset holds instead (the file and its group), or that it was opened without the
    ``h5md`` engine, where it has none."""
    if "position" not in ds:
        from h5mdx.errors import PositionsError

        raise PositionsError("ds.md.rmsd needs a 'position' variable on (time, atom, spatial)"
                             + (_engine_hint(ds) or _holds(ds)))
    return ds["position"]


def _fixed_along(values: xr.DataArray, keep: str) -> xr.DataArray:
    """``values`` on ``keep`` alone, where its other dimensions repeat one row: the first
    and last rows of each are compared, not all of it (``mass`` concatenated along time by
    ``open_mfdataset(data_vars="all")``); a ValueError that names them otherwise."""
    other = [d for d in values.dims if d != keep]
    first = values.isel({d: 0 for d in other})
    last = values.isel({d: -1 for d in other})
    if not np.array_equal(np.asarray(first.values), np.asarray(last.values), equal_nan=True):
        raise ValueError(
            f"weights='mass': {values.name!r} is on {values.dims} and changes along "
            f"{other}; pick the masses to weigh by (e.g. weights=ds.{values.name}.isel("
            f"{other[0]}=0)), or open the parts with data_vars='minimal'")
    return first.drop_vars([c for c in first.coords if c not in first.dims])


def _holds(ds: xr.Dataset) -> str:
    """What a Dataset opened from a file holds instead of positions, naming the file and
    its group (``h5mdx rmsd FILE --group observables`` said neither); "" for others."""
    source, group = ds.encoding.get("source"), ds.attrs.get("h5md_group")
    if not isinstance(source, str) or not ds.data_vars:
        return ""
    where = f"{source} [{group}]" if group else source
    return f": {where} holds {', '.join(map(str, ds.data_vars))}, no position"


def _engine_hint(ds: xr.Dataset) -> str:
    """Where a Dataset without variables came from an H5MD file: the hint that it was not
    opened with the ``h5md`` engine (xarray's default for HDF5, h5netcdf, sees no variable
    in an H5MD file)."""
    source = ds.encoding.get("source")
    if ds.data_vars or not isinstance(source, str) or not os.path.isfile(source):
        return ""
    try:
        import h5py

        with h5py.File(source, "r") as f:
            is_h5md = "h5md" in f
    except (OSError, ValueError):
        return ""
    return (f": {source} is an H5MD file opened without the h5md engine; open it with "
            "xr.open_dataset(path, engine='h5md')") if is_h5md else ""
