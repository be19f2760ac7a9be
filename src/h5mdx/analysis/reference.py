"""What an RMSD is computed over: the atoms selected, their weights, the reference.

:func:`select_atoms` turns ``select=`` (an MDAnalysis selection, indices, a boolean mask)
into atom indices through the trajectory's topology (``topology=``, the file's own
modules, or ids); the reference (a frame, an array, a Universe, a Dataset) is read,
checked against the selection (names, units, absent atoms) and centred once, and travels
in the dask graph as a small array.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import xarray as xr

from h5mdx._optional import import_optional
from h5mdx.analysis.qcp import center
from h5mdx.engine.assembly import PARTICLE_ORDER_ATTR
from h5mdx.engine.topology import angstrom_frame, mda_box, warn_unplaced
from h5mdx.engine.topology import length_scale as _length_scale
from h5mdx.engine.topology import mda_dimensions as mda_dimensions
from h5mdx.errors import H5MDError, H5MDReadError, PositionsError, TopologyError
from h5mdx.errors import user_stacklevel as _user_stacklevel
from h5mdx.format.schema import ATOM_DIM, SPATIAL_DIM, TIME_DIM

__all__ = ["mda_dimensions", "select_atoms", "selection_frame", "topology_masses",
           "with_atom_data"]


def _centred_reference(position: xr.DataArray, sub: xr.DataArray, reference: Any,
                       idx: np.ndarray | None, w: np.ndarray | None,
                       select: Any = None) -> np.ndarray:
    """The reference frame of the selected atoms, centred (weighted by ``w``)."""
    ref = _reference(position, sub, reference, idx, select)
    _warn_absent_in_reference(ref, reference)
    return center(ref, w)


def _warn_absent_in_reference(ref: np.ndarray, reference: Any) -> None:
    """Say so where the reference has atoms without a position (NaN: absent particles,
    a fill value): every RMSD is then NaN."""
    missing = int(np.isnan(ref).any(axis=1).sum()) if ref.size else 0
    if missing:
        which = f"frame {reference}" if isinstance(reference, (int, np.integer)) \
            else "the reference"
        warnings.warn(
            f"{which} has no position for {missing} of the {ref.shape[0]} atoms selected "
            "(NaN: absent particles, or a fill value): every RMSD will be NaN; select the "
            "atoms present in the reference, or take another reference",
            RuntimeWarning, stacklevel=_user_stacklevel())


def _check_dims(position: xr.DataArray) -> None:
    if isinstance(position, xr.Dataset):
        raise TypeError("rmsd takes the positions, a DataArray (h5mdx.rmsd(ds.position, "
                        "...)), not a Dataset: or use ds.md.rmsd(...)")
    if not isinstance(position, xr.DataArray):
        raise TypeError("rmsd takes positions as an xarray.DataArray on (time, atom, "
                        f"spatial), not {type(position).__name__}: wrap an array with "
                        "xr.DataArray(frames, dims=('time', 'atom', 'spatial'))")
    missing = [d for d in (TIME_DIM, ATOM_DIM, SPATIAL_DIM) if d not in position.dims]
    if missing:
        raise PositionsError(
            f"rmsd needs positions on (time, atom, spatial); {position.name!r}"
            f"{_of_file(position)} has dims {position.dims} (missing {missing})"
        )
    if position.dtype.kind not in "biuf":  # text failed at the first read, deep in numpy
        what = "text" if position.dtype.kind in "SUO" else "values"
        raise PositionsError(f"rmsd needs positions that are numbers; {position.name!r}"
                             f"{_of_element(position)} holds {what} (dtype "
                             f"{position.dtype.str})")
    if not position.sizes[ATOM_DIM]:
        raise PositionsError(f"rmsd needs atoms to compare; the positions"
                             f"{_of_element(position)} hold none")
    if position.sizes[SPATIAL_DIM] != 3:  # said before a scheduler starts, not after
        raise PositionsError(f"rmsd needs 3 spatial dimensions, not "
                             f"{position.sizes[SPATIAL_DIM]}{_of_element(position)}: the "
                             "RMSD after superposition in 3-D")
    order = position.attrs.get(PARTICLE_ORDER_ATTR)
    if order is not None:
        raise PositionsError(
            f"rmsd needs each atom in one slot in every frame; {position.name!r} is served "
            f"{order}: the RMSD would compare different particles, or slots without one. "
            "Put the particles in "
            "one order by id first: ds.md.by_id().md.rmsd(...) (h5mdx.engine.order.by_id)"
        )


def _topology(position: xr.DataArray, topology: Any) -> Any:
    if topology is not None:
        return topology
    from h5mdx.engine.topology import attached_topology

    return attached_topology(position)


def _atom_ids(position: xr.DataArray) -> np.ndarray:
    """The 0-based topology index of each atom of ``position`` (its ``atom`` coordinate)."""
    n = position.sizes[ATOM_DIM]
    return (np.asarray(position[ATOM_DIM].values) if ATOM_DIM in position.coords
            else np.arange(n))


def _universe_of(position: xr.DataArray, topology: Any) -> Any:
    """The Universe of ``topology``, checked against the positions: as many atoms as the
    file they come from (or, where that is unknown, enough for their atom indices)."""
    from h5mdx.engine.topology import SUBSET_OF_ATTR, load_universe

    universe = load_universe(topology, _group_of(position))
    n_top = len(universe.atoms)
    ids = _atom_ids(position)
    shape = position.encoding.get("original_shape") or position.variable.encoding.get(
        "original_shape")
    n_file = int(shape[1]) if shape is not None and len(shape) >= 2 else None
    if ATOM_DIM in position.coords and SUBSET_OF_ATTR in position[ATOM_DIM].attrs:
        n_file = int(position[ATOM_DIM].attrs[SUBSET_OF_ATTR])  # a file of selected atoms
    elif n_file is None and np.array_equal(ids, np.arange(ids.size)):
        n_file = int(ids.size)  # no sign of a selection: all the file's atoms
    name = getattr(universe, "filename", None) or topology
    if n_file is not None and n_top != n_file:
        hint = ("; for a file of selected atoms, open it with the whole system's topology "
                "(xr.open_dataset(..., engine='h5md', topology=...) finds its atoms by their "
                "id) or pass their AtomGroup (u.atoms[ids])") if n_top > n_file else ""
        raise TopologyError(f"the topology {name} has {n_top} atoms but the positions come "
                            f"from a trajectory of {n_file}; they must describe the same "
                            f"system{hint}")
    if ids.size and int(ids.max()) >= n_top:
        raise TopologyError(f"the topology {name} has {n_top} atoms, fewer than the atom "
                            f"indices of the positions (up to {int(ids.max())})")
    return universe


def _group_of(position: xr.DataArray) -> str | None:
    """The particles group the positions come from (VMD's structure module describes a
    group's atoms), where they came from a file; None otherwise."""
    path = position.encoding.get("h5md_path")
    return str(path).rsplit("/", 1)[0] if path else None


def _of_file(position: xr.DataArray) -> str:
    """`` (of FILE)`` for a message, where the positions came from a file."""
    source = position.encoding.get("source")
    return f" (of {source})" if source else ""


def _of_element(position: xr.DataArray) -> str:
    """`` (of FILE [H5MD path])`` for a message, where the positions came from a file."""
    source, path = position.encoding.get("source"), position.encoding.get("h5md_path")
    if not source:
        return ""
    return f" (of {source} [{path}])" if path else f" (of {source})"


def _no_frames(position: xr.DataArray) -> PositionsError:
    """The error of positions of no frame, where a frame index is the reference."""
    return PositionsError(f"the positions{_of_element(position)} hold no frames (an empty "
                          "time slice, or a file written before its first frame): there is "
                          "no reference frame")


def _positions_of(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions along ``atom`` of the atom indices ``wanted``, found in ``ids`` (the
    ``atom`` coordinate); an index that is not there is an IndexError."""
    n = ids.size
    if n and ids[0] == 0 and ids[-1] == n - 1 and np.array_equal(ids, np.arange(n)):
        pos, missing = wanted, (wanted < 0) | (wanted >= n)  # every atom, in file order
    else:
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], wanted), max(n - 1, 0))
        missing = ids[order][at] != wanted if n else np.ones(wanted.shape, bool)
        pos = order[at] if n else wanted
    if missing.any():
        span = f", indices {int(ids.min())}-{int(ids.max())}" if n else ""
        raise IndexError(
            f"atom indices {wanted[missing][:5].tolist()} are not atoms of these positions "
            f"({n} atoms{span}): integers in select= are atom indices (the atom "
            "coordinate, as MDAnalysis' AtomGroup.indices), not positions along atom")
    return pos


def select_atoms(
    position: xr.DataArray, select: Any, topology: Any = None, reference: Any = 0,
    box: xr.DataArray | None = None,
) -> np.ndarray | None:
    """Positions along ``atom`` chosen by ``select``.

    Parameters
    ----------
    position : xarray.DataArray
        Positions; its ``atom`` coordinate holds 0-based topology indices.
    select : None, str, array of int or array of bool
        None (all atoms), an MDAnalysis selection string (in the topology, or without
        one in the positions' own ``name``, ``resname``, ... coordinates),
        integer atom indices (values of the ``atom`` coordinate, as MDAnalysis'
        ``AtomGroup.indices``), or a boolean mask on ``atom``.
    topology : str, path-like or MDAnalysis.Universe, optional
        Defaults to the topology the ``h5md`` engine attached (``topology=``).
    reference : int, array_like, xarray.DataArray or Dataset, MDAnalysis Universe, default 0
        The RMSD's reference (as :func:`h5mdx.analysis.rmsd.rmsd` takes it): a selection
        by position (``around``, ``point``, ``sphzone``, ``cyzone``, ``isolayer``,
        ``prop x/y/z``) is made once, on its positions (see :func:`selection_frame`).
    box : xarray.DataArray, optional
        The box (``ds.box_edges``) of a selection by distance at a frame index
        ``reference``; periodic where its ``boundary`` is. Without one, distances are
        not periodic.

    Returns
    -------
    numpy.ndarray or None
        Integer positions along ``atom`` (None for all atoms); those of a selection
        string in the order of the atoms' indices (MDAnalysis' order).
    """
    if select is None:
        return None
    if hasattr(select, "indices") and hasattr(select, "select_atoms"):  # an AtomGroup
        _check_group(position, select, _topology(position, topology))
        select = np.asarray(select.indices)
    n = position.sizes[ATOM_DIM]
    if isinstance(select, str):
        from h5mdx.engine.topology import select_indices

        topology = _topology(position, topology)
        ids = _atom_ids(position)
        if topology is None:  # the positions' own names, where they carry them (Zarr)
            return _select_in_coords(position, select, reference, box)
        universe = _universe_of(position, topology)
        wanted = select_indices(universe, select, position.encoding.get("source"),
                                frame=lambda: selection_frame(position, reference, ids,
                                                              len(universe.atoms), box))
        where = np.flatnonzero(np.isin(ids, wanted))
        if where.size == 0:
            raise TopologyError(
                f"the selection {select!r} matches no atom of these positions"
                + _of_file(position)
            )
        # in the topology's order, as MDAnalysis' AtomGroup (and a reference selected with
        # the string) has them, where the file holds its atoms in another
        return where[np.argsort(ids[where], kind="stable")]
    sel = np.asarray(select)
    if sel.size == 0:
        raise TopologyError("the selection is empty: no atom to compare")
    if sel.dtype == bool:
        if sel.shape != (n,):
            raise ValueError(f"a boolean mask must have {n} entries, not {sel.shape}")
        idx = np.flatnonzero(sel)
    elif sel.dtype.kind in "iu":
        idx = _positions_of(_atom_ids(position), sel.reshape(-1).astype(np.int64))
    else:
        raise TypeError(f"select must be a string, integers or a boolean mask, not {sel.dtype}")
    if idx.size == 0:
        raise TopologyError("the selection is empty: no atom to compare")
    return idx


def _check_group(position: xr.DataArray, group: Any, topology: Any) -> None:
    """Refuse an AtomGroup as ``select=`` whose Universe is not the positions' system: of
    another atom count than the topology (without one, than the file), or whose atoms
    have other names there; its indices would pick other atoms (they were taken as they
    are)."""
    whole = getattr(group, "universe", None)
    n_group = len(whole.atoms) if whole is not None else None
    universe = None
    if topology is not None:
        universe = _universe_of(position, topology)
        universe = getattr(universe, "universe", universe)
        n_top: int | None = len(universe.atoms)
    else:
        shape = position.encoding.get("original_shape")
        n_top = int(shape[1]) if shape is not None and len(shape) >= 2 else None
    where = _of_file(position)
    if n_group is not None and n_top is not None and n_group != n_top:
        raise TopologyError(
            f"select= is an AtomGroup of a Universe of {n_group} atoms, and the positions"
            f"{where} are of a system of {n_top}: its indices would pick other atoms; select "
            "in a Universe of the same system (ds.md.topology, or the topology file), or "
            "pass a selection string")
    theirs = _names_of(group)
    ours, in_ours = _own_names(position, group, universe)
    if theirs is not None and ours is not None and not np.array_equal(theirs, ours):
        i = int(np.flatnonzero(theirs != ours)[0])
        raise TopologyError(
            f"select= is an AtomGroup of another system than the positions'{where}: its "
            f"atom {int(group.indices[i])} is {str(theirs[i])!r} there and {str(ours[i])!r} "
            f"in {in_ours}; select in a Universe of the same system (ds.md.topology), or "
            "pass a selection string")


def _own_names(position: xr.DataArray, group: Any, universe: Any
               ) -> tuple[np.ndarray | None, str]:
    """The names of the atoms of ``group`` (by index) in the topology, else in the
    positions' own ``name`` coordinate (a Zarr copy's), and where they come from."""
    if universe is not None:
        return _names_of(universe.atoms[group.indices]), "the topology"
    if "name" not in position.coords or position["name"].dims != (ATOM_DIM,):
        return None, ""
    try:
        at = _positions_of(_atom_ids(position), np.asarray(group.indices, dtype=np.int64))
    except IndexError:  # said by the selection itself, next
        return None, ""
    return np.asarray(position["name"].values).astype(str)[at], "the positions' names"


def with_atom_data(ds: xr.Dataset, position: xr.DataArray, topology: Any = None
                   ) -> xr.DataArray:
    """``position`` with the per-atom ``mass`` and ``charge`` variables of ``ds`` as
    coordinates, where no topology is attached: selection strings are then made in the
    positions' own coordinates (a Zarr copy's names, see
    :func:`h5mdx.engine.topology.coords_topology`), masses and charges included
    (``"prop mass > 12"``)."""
    if _topology(position, topology) is not None or ATOM_DIM not in position.dims:
        return position
    extra = {key: ds[key] for key in ("mass", "charge")
             if key in ds.data_vars and key not in position.coords
             and ds[key].dims == (ATOM_DIM,)
             and ds[key].sizes[ATOM_DIM] == position.sizes[ATOM_DIM]}
    return position.assign_coords(extra) if extra else position


def _select_in_coords(position: xr.DataArray, select: str, reference: Any = 0,
                      box: xr.DataArray | None = None) -> np.ndarray:
    """Positions along ``atom`` of a selection string made in the positions' own per-atom
    coordinates (:func:`h5mdx.engine.topology.coords_topology`: a Zarr copy's names), in
    their order, by position on the reference's frame (as with a topology); an error
    saying how to pass a topology where they have no names."""
    from h5mdx.engine.topology import coords_topology, select_indices

    universe = coords_topology(position)
    n = int(position.sizes[ATOM_DIM])
    if universe is None and _by_position(select, n):  # no names needed, positions alone
        universe = _nameless_universe(position)
    if universe is None:
        raise TopologyError(
            f"select={select!r} needs a topology: open the file with "
            "xr.open_dataset(..., engine='h5md', topology='system.psf') and use "
            "ds.md.rmsd(...), or pass topology= to h5mdx.rmsd"
        )
    return select_indices(universe, select, position.encoding.get("source"),
                          frame=lambda: selection_frame(position, reference, np.arange(n),
                                                        n, box))


def _by_position(select: str, n: int) -> bool:
    """Whether ``select`` is a selection by position alone, which needs no atom names
    (``prop z < 0``, ``point 0 0 0 10``): made on atoms of no property but positions."""
    from h5mdx.engine.topology import needs_positions

    mda = import_optional("MDAnalysis", "atom selections")
    try:
        mda.Universe.empty(max(n, 1), trajectory=False).select_atoms(select)
    except Exception as err:  # noqa: BLE001 - MDAnalysis' SelectionError and others
        return needs_positions(err)
    return False


def _nameless_universe(position: xr.DataArray) -> Any:
    """A Universe of the atoms of ``position`` without any property (one residue, one
    segment), for selections by position alone."""
    mda = import_optional("MDAnalysis", "atom selections")
    universe = mda.Universe.empty(int(position.sizes[ATOM_DIM]), trajectory=False)
    universe.filename = position.encoding.get("source") or "the positions"
    return universe


def selection_frame(position: xr.DataArray, reference: Any, ids: np.ndarray, n: int,
                    box: xr.DataArray | None = None) -> tuple[np.ndarray, Any]:
    """The frame a selection by position is made on: the RMSD's reference's.

    As MDAnalysis' ``rms.RMSD`` makes a selection once, on the frame its Universe is at
    when the RMSD is made: a frame index's frame of ``position`` (with that frame of
    ``box``), a Universe's or AtomGroup's current frame (its box), a frame of another
    Dataset (its ``box_edges``), a DataArray or array of all the atoms (a ``box`` without
    time). Positions in the positions' unit are converted to Angstrom, as MDAnalysis
    takes them (without a unit, taken to be Angstrom).

    Parameters
    ----------
    position : xarray.DataArray
        The positions on ``(time, atom, spatial)``.
    reference : Any
        The RMSD's reference.
    ids : numpy.ndarray
        The topology index of each atom of ``position``.
    n : int
        The topology's atom count.
    box : xarray.DataArray, optional
        The positions' box (``ds.box_edges``).

    Returns
    -------
    tuple
        Positions in Angstrom of the ``n`` atoms of the topology (NaN for those not in
        ``position``), and MDAnalysis' box ``[a, b, c, alpha, beta, gamma]`` or None.
    """
    reference = _frame_index(reference)
    if hasattr(reference, "atoms") and hasattr(reference.atoms, "positions"):
        atoms = reference.atoms
        if len(atoms) != n:
            raise TopologyError(
                f"a selection by position is made on the reference's positions; the "
                f"reference holds {len(atoms)} atoms, the topology {n}: pass a reference "
                "of the same atoms, a frame index, or the atoms' indices as select=")
        dims = getattr(reference, "dimensions", None)
        xyz = np.asarray(atoms.positions, dtype=np.float64)
        _warn_unplaced(xyz, np.asarray(atoms.indices), "the reference's frame")
        return xyz, mda_box(dims)
    xyz, unit, edges = _frame_of(position, reference, box)
    _warn_unplaced(xyz, ids, (f"frame {reference}" if isinstance(reference, (int, np.integer))
                              else "the reference") + _of_file(position))
    return angstrom_frame(xyz, unit, ids, n, edges)


def _warn_unplaced(xyz: np.ndarray, ids: np.ndarray, where: str) -> None:
    """:func:`h5mdx.engine.topology.warn_unplaced`, pointed at the caller outside h5mdx."""
    warn_unplaced(xyz, ids, where, stacklevel=_user_stacklevel())


def _frame_of(position: xr.DataArray, reference: Any, box: xr.DataArray | None
              ) -> tuple[np.ndarray, Any, xr.DataArray | None]:
    """The reference's positions of every atom of ``position`` (in their order), their
    unit and the box of that frame (None where there is none)."""
    n_atoms = position.sizes[ATOM_DIM]
    held: int | None = None
    fixed = box if box is not None and TIME_DIM not in box.dims else None
    if isinstance(reference, (int, np.integer)) and not isinstance(reference, bool):
        n_frames = position.sizes[TIME_DIM]
        if not -n_frames <= int(reference) < n_frames:
            raise IndexError(f"reference frame {reference} out of range for {n_frames} "
                             f"frames{_of_file(position)}")
        frame = position.isel({TIME_DIM: int(reference)}).transpose(ATOM_DIM, SPATIAL_DIM)
        import dask

        xyz = np.asarray(frame.compute(scheduler=dask.get).values, dtype=np.float64)
        if box is not None and TIME_DIM in box.dims:
            fixed = box.isel({TIME_DIM: int(reference)})
        return xyz, position.attrs.get("units"), fixed
    if isinstance(reference, xr.Dataset):
        fixed = reference.get("box_edges")
        reference = _dataset_positions(reference)
    if isinstance(reference, xr.DataArray):
        ref_da = _one_frame(reference).transpose(ATOM_DIM, SPATIAL_DIM)
        if ATOM_DIM in ref_da.coords and ATOM_DIM in position.coords \
                and np.isin(position[ATOM_DIM].values, ref_da[ATOM_DIM].values).all():
            ref_da = ref_da.sel({ATOM_DIM: position[ATOM_DIM].values})
        if ref_da.sizes[ATOM_DIM] == n_atoms:
            return (np.asarray(ref_da.values, dtype=np.float64),
                    ref_da.attrs.get("units", position.attrs.get("units")), fixed)
        held = ref_da.sizes[ATOM_DIM]
    else:
        ref = np.asarray(reference, dtype=np.float64) if np.ndim(reference) else None
        if ref is not None and ref.shape == (n_atoms, 3):
            return ref, position.attrs.get("units"), fixed
        held = None if ref is None or ref.ndim != 2 else ref.shape[0]
    raise TopologyError(
        "a selection by position is made on the reference's positions, and this reference "
        + (f"holds {held} atoms, not all the {n_atoms} of the positions" if held is not None
           else "gives none")
        + ": pass a frame index (reference=0), a frame of all the atoms, or the atoms' "
        "indices as select=")


def _weights(position: xr.DataArray, weights: Any, idx: np.ndarray | None,
             topology: Any) -> np.ndarray | None:
    if weights is None:
        return None
    n_sel = position.sizes[ATOM_DIM] if idx is None else idx.size
    if isinstance(weights, str):
        if weights != "mass":
            raise ValueError(f"weights must be None, 'mass' or an array, not {weights!r}")
        if "mass" in position.coords and position["mass"].dims == (ATOM_DIM,):
            m = np.asarray(position["mass"].values, dtype=np.float64)
            return m if idx is None else m[idx]
        topology = _topology(position, topology)
        if topology is None:
            raise TopologyError(
                "weights='mass' needs masses: open the file with topology=..., pass an array, "
                "or use the file's own masses (ds.md.rmsd(weights='mass') or weights=ds.mass)"
            )
        masses = topology_masses(position, topology)
        if masses is None:
            raise TopologyError(
                f"weights='mass' needs masses: the topology {_label(topology)} has none "
                f"(MDAnalysis holds no masses of its atoms){_of_file(position)}; pass the "
                "masses as weights=<array, or DataArray on atom> (the file's own: "
                "weights=ds.mass)")
        return masses if idx is None else masses[idx]
    if isinstance(weights, xr.DataArray) and weights.dims == (ATOM_DIM,) \
            and ATOM_DIM in weights.coords and ATOM_DIM in position.coords:
        chosen = position if idx is None else position.isel({ATOM_DIM: idx})
        return np.asarray(_by_atom(weights, chosen, "weights").values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size == n_sel and _ambiguous(position.sizes[ATOM_DIM], idx):
        raise ValueError(
            f"weights has {w.size} entries, as many as the positions and as the selection, "
            "which orders them otherwise: h5mdx cannot tell which it holds; pass them as a "
            "DataArray on atom (e.g. ds.mass), matched by atom")
    if w.size == n_sel:
        return w
    if idx is not None and w.size == position.sizes[ATOM_DIM]:
        return w[idx]
    dims = f" on {weights.dims}" if isinstance(weights, xr.DataArray) else ""
    raise ValueError(f"weights has {w.size} entries{dims}; expected {n_sel}, one per atom"
                     + (" (select one row along the other dimensions)" if dims and
                        weights.ndim > 1 else ""))


def topology_masses(position: xr.DataArray, topology: Any) -> np.ndarray | None:
    """The masses the topology gives the atoms of ``position`` (by their ``atom``
    indices); None where it holds none (MDAnalysis' ``NoDataError``: a file's own VMD
    structure or GROMACS module without masses, a Universe built without them).

    Parameters
    ----------
    position : xarray.DataArray
        Positions; its ``atom`` coordinate holds 0-based topology indices.
    topology : str, path-like or MDAnalysis.Universe
        The topology (see :func:`select_atoms`).

    Returns
    -------
    numpy.ndarray or None
        float64 masses, one per atom of ``position``.
    """
    atoms = _universe_of(position, topology).atoms
    try:
        masses = atoms.masses
    except (AttributeError, ValueError):  # MDAnalysis' NoDataError subclasses both
        return None
    return np.asarray(masses, dtype=np.float64)[_atom_ids(position)]


def _label(topology: Any) -> str:
    """How a message names a topology: its file, else ``given``."""
    name = topology if isinstance(topology, str) else getattr(topology, "filename", None)
    return repr(str(name)) if name else "given"


def _by_atom(values: xr.DataArray, sub: xr.DataArray, what: str) -> xr.DataArray:
    """``values`` (on ``atom``) for the atoms of ``sub``, matched by the ``atom``
    coordinate where ``values`` holds them all; else as given, in order (a frame of
    another file), where it has as many atoms."""
    if ATOM_DIM not in values.coords or ATOM_DIM not in sub.coords:
        return values
    want = np.asarray(sub[ATOM_DIM].values)
    have = np.asarray(values[ATOM_DIM].values)
    if np.unique(have).size == have.size and np.isin(want, have).all():
        return values.sel({ATOM_DIM: want})
    if values.sizes[ATOM_DIM] == want.size:
        return values
    raise ValueError(f"the {what} holds {values.sizes[ATOM_DIM]} atoms, not all of the "
                     f"{want.size} atoms compared (matched by the atom coordinate)")


def _from_universe(reference: Any, position: xr.DataArray, sub: xr.DataArray,
                   select: Any) -> xr.DataArray | np.ndarray:
    """The current frame of an MDAnalysis Universe or AtomGroup as a reference, in the
    positions' length unit.

    With a selection string, as MDAnalysis' ``rms.RMSD`` does: the selection applied to
    the reference too, its atoms taken in order (an array); they must be as many as the
    compared atoms. Otherwise a DataArray on ``atom`` (the atoms' indices), matched by
    atom index. Either way, where both name their atoms, the names must agree (a crystal
    structure or another force field's file orders atoms otherwise).
    """
    atoms = reference.atoms
    if isinstance(select, str):
        try:
            atoms = atoms.select_atoms(select)
        except Exception as err:  # noqa: BLE001 - MDAnalysis' SelectionError and others
            raise TopologyError(f"the selection {select!r} fails on the reference "
                                f"({type(err).__name__}: {err})") from err
        if len(atoms) != sub.sizes[ATOM_DIM]:
            raise TopologyError(
                f"the selection {select!r} matches {sub.sizes[ATOM_DIM]} atoms of the "
                f"positions and {len(atoms)} of the reference: they must be the same atoms")
    values = np.asarray(atoms.positions, dtype=np.float64)  # MDAnalysis: Å
    unit = position.attrs.get("units")
    if unit is not None:
        values = values * _length_scale("Angstrom", str(unit), "an MDAnalysis reference")
    names = _names_of(atoms)
    if isinstance(select, str):
        _check_names(names, sub)
        return values
    coords: dict[str, Any] = {ATOM_DIM: np.asarray(atoms.indices)}
    if names is not None:
        coords["reference_name"] = (ATOM_DIM, names)
    return xr.DataArray(values, dims=(ATOM_DIM, SPATIAL_DIM), coords=coords)


def _names_of(atoms: Any) -> np.ndarray | None:
    """The atom names of an MDAnalysis AtomGroup (None where its topology has none)."""
    try:
        return np.asarray(atoms.names).astype(str)
    except Exception:  # noqa: BLE001 - MDAnalysis' NoDataError
        return None


def _names_on_atom(ref: xr.DataArray) -> np.ndarray | None:
    """The atom names a reference DataArray carries on ``atom``: those of the MDAnalysis
    object it was made of, else its own ``name`` coordinate (a frame of another Dataset
    opened with a topology); None where it has neither."""
    for key in ("reference_name", "name"):
        if key in ref.coords and ref[key].dims == (ATOM_DIM,):
            return np.asarray(ref[key].values).astype(str)
    return None


def _check_names(ref_names: np.ndarray | None, sub: xr.DataArray) -> None:
    """Refuse a reference whose atoms have other names than the compared atoms, where both
    have names (the positions' ``name`` coordinate, from the topology opened with them)."""
    if ref_names is None or "name" not in sub.coords:
        return
    have = np.asarray(sub["name"].values).astype(str)
    if have.shape != ref_names.shape:
        return
    bad = np.flatnonzero(have != ref_names)
    if bad.size:
        i = int(bad[0])
        raise TopologyError(
            f"the reference is not the same atoms: {bad.size} of the {have.size} atoms "
            f"compared have another name in it (atom {int(sub[ATOM_DIM].values[i])} is "
            f"{str(have[i])!r} in the positions and {str(ref_names[i])!r} in the "
            "reference); a selection string is applied to a Universe or AtomGroup "
            "reference too, in its atom order, else the reference's atoms (a DataArray's: "
            "its atom coordinate) are matched by atom index")


def _ambiguous(n: int, idx: np.ndarray | None) -> bool:
    """Whether an array of ``n`` entries could be either all atoms or the selected ones,
    in another order: a selection of as many atoms as there are, not in order."""
    return idx is not None and idx.size == n and not np.array_equal(idx, np.arange(n))


def _dataset_positions(reference: xr.Dataset) -> xr.DataArray:
    if "position" not in reference.variables:
        raise TypeError("a reference Dataset must hold 'position' (a frame of another "
                        "trajectory, ds.isel(time=i)); it holds "
                        f"{', '.join(map(str, reference.data_vars)) or 'no variable'}")
    return reference["position"]


def _frame_index(reference: Any) -> Any:
    """A 0-d integer array or DataArray (``series.argmax("time")``) as the frame index
    it holds; anything else as given."""
    if isinstance(reference, (np.ndarray, xr.DataArray)) and reference.ndim == 0 \
            and reference.dtype.kind in "iu":
        return int(reference)
    return reference


def _one_frame(reference: xr.DataArray) -> xr.DataArray:
    """A reference DataArray as one frame on ``(atom, spatial)`` (a one-frame ``time``
    dropped); a ValueError that names its dimensions otherwise."""
    if TIME_DIM in reference.dims:
        if reference.sizes[TIME_DIM] != 1:
            raise ValueError("a reference DataArray must hold one frame (isel(time=i))")
        reference = reference.isel({TIME_DIM: 0})
    if set(reference.dims) != {ATOM_DIM, SPATIAL_DIM}:
        raise ValueError(
            f"a reference DataArray must be a frame of positions on ({ATOM_DIM}, "
            f"{SPATIAL_DIM}), not {reference.name or 'one'} on {reference.dims}"
            + (": a frame index is an integer" if reference.ndim == 0 else ""))
    return reference


def _reference(position: xr.DataArray, sub: xr.DataArray, reference: Any,
               idx: np.ndarray | None, select: Any = None) -> np.ndarray:
    n_sel = sub.sizes[ATOM_DIM]
    if isinstance(reference, (bool, np.bool_)):
        raise TypeError(f"reference must be a frame index, a frame of positions or an "
                        f"MDAnalysis Universe/AtomGroup, not {reference!r}")
    if isinstance(reference, str):
        raise TypeError(f"reference must be a frame index, a frame of positions or an "
                        f"MDAnalysis Universe/AtomGroup, not the string {reference!r}: did "
                        f"you mean select={reference!r}? (the first argument is the "
                        "reference)")
    if hasattr(reference, "atoms") and hasattr(reference.atoms, "positions"):
        reference = _from_universe(reference, position, sub, select)
        if isinstance(reference, np.ndarray):
            return reference
    if isinstance(reference, (int, np.integer)):
        n_frames = sub.sizes[TIME_DIM]
        if n_frames == 0:
            raise _no_frames(position)
        if not -n_frames <= int(reference) < n_frames:
            raise IndexError(f"reference frame {reference} out of range for {n_frames} "
                             f"frames{_of_file(position)}")
        frame = sub.isel({TIME_DIM: int(reference)}).transpose(ATOM_DIM, SPATIAL_DIM)
        # one frame, read here like a lazily indexed one: not through a process pool or a
        # cluster, which would ship the whole block that holds it
        # (dask's synchronous get itself: given a scheduler's name, dask imports
        # distributed, 0.1-0.4 s, to look for a client)
        import dask

        try:
            return np.asarray(frame.compute(scheduler=dask.get).values, dtype=np.float64)
        except (H5MDError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 - a codec's, zarr's or the store's own
            i = int(reference) % n_frames
            name = None if position.name is None else str(position.name)
            raise H5MDReadError(position.encoding.get("source"),
                                position.encoding.get("h5md_path") or name,
                                f"cannot read the reference frame {i}: "
                                f"{type(err).__name__}: {err}") from err
    if isinstance(reference, xr.Dataset):  # a frame of another Dataset: its positions
        reference = _dataset_positions(reference)
    if isinstance(reference, xr.DataArray):
        ref_da = _one_frame(reference)
        ref_unit, unit = ref_da.attrs.get("units"), position.attrs.get("units")
        if ref_unit is not None and unit is not None:  # a frame of another Dataset
            ref_da = ref_da * _length_scale(str(ref_unit), str(unit), "the reference")
        ref_da = _by_atom(ref_da.transpose(ATOM_DIM, SPATIAL_DIM), sub, "reference")
        _check_names(_names_on_atom(ref_da), sub)
        ref = np.asarray(ref_da.values, dtype=np.float64)
        if ref.shape[0] == n_sel:
            return ref
    else:
        if np.ndim(reference) == 0:
            raise TypeError(f"reference must be a frame index (int), a frame of positions "
                            f"(n_atoms, 3) or an MDAnalysis Universe/AtomGroup, not "
                            f"{reference!r}")
        ref = np.asarray(reference, dtype=np.float64)
    if ref.ndim != 2 or ref.shape[1] != 3:
        raise ValueError(f"the reference must have shape (n_atoms, 3), not {ref.shape}")
    if ref.shape[0] == n_sel and _ambiguous(position.sizes[ATOM_DIM], idx):
        raise ValueError(
            f"the reference has {ref.shape[0]} atoms, as many as the positions and as the "
            "selection, which orders them otherwise: h5mdx cannot tell which it holds; "
            "pass it as a DataArray with its atom coordinate (matched by atom)")
    if ref.shape[0] == n_sel:
        return ref
    if idx is not None and ref.shape[0] == position.sizes[ATOM_DIM]:
        return ref[idx]
    raise ValueError(
        f"the reference has {ref.shape[0]} atoms but {n_sel} atoms are compared"
    )
