"""RMSD time series of a trajectory as a lazy dask computation.

:func:`rmsd` turns a ``position`` DataArray on ``(time, atom, spatial)`` into a
lazy ``rmsd`` DataArray on ``time``: one dask task per block of frames, each
reading its block (only the selected atoms) and running the batched QCP kernel
of :mod:`h5mdx.analysis.qcp`. The reference is read and centred once, and travels in the
graph as a small array. Each task times its read and its kernel with
:class:`h5mdx.timing.phases.BlockTimer`, so :func:`h5mdx.timing.capture` sees
the I/O and compute split of every block.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, cast

import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from h5mdx.analysis._dask_source import dask_source
from h5mdx.analysis.qcp import center, normalize_weights, prepare, rmsd_qcp, warm_up
from h5mdx.analysis.series import write_series  # noqa: F401 - re-exported (its old home)
from h5mdx.engine.arrays import backend_array
from h5mdx.engine.assembly import PARTICLE_ORDER_ATTR
from h5mdx.engine.chunking import (
    DEFAULT_TARGET_MIB,
    READ_STEP_BYTES,
    balanced_block,
    read_step,
    stream_target_mib,
    time_block,
)
from h5mdx.engine.frames import (
    FrameReader,
    frame_reader,
    read_ahead,
    read_ahead_depth,
    stored_start,
)
from h5mdx.errors import H5MDError, H5MDReadError, TopologyError
from h5mdx.format import mapped as _mapped
from h5mdx.format.schema import ATOM_DIM, SPATIAL_DIM, TIME_DIM
from h5mdx.timing.phases import BlockTimer

__all__ = ["FUSED_READ_BYTES", "FUSED_READ_ENV", "MAPPED_READ_ENV", "fused_read",
           "join_parts", "mapped_read", "reference_of_parts", "rmsd", "select_atoms",
           "write_series"]


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside h5mdx.

    ``sys._getframe`` because ``warnings.warn(skip_file_prefixes=...)``, the public way,
    needs Python 3.12 and h5mdx supports 3.10.
    """
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("h5mdx"):
        frame = frame.f_back
        level += 1
    return level


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


#: Atom-frames below which ``kernel="auto"`` runs the numpy kernel where the compiled one
#: is not loaded in this process yet: loading it costs 0.5-0.8 s, and numpy computes
#: 10-20 million atom-frames a second (2-core VM), so 2 million take ~0.1-0.2 s. A first
#: C-alpha RMSD of the 98 adk frames took 0.5-0.7 s, against 0.02 s (found by an audit).
_SMALL_WORK = 2_000_000


def _small_work_kernel(kernel: str, work: int) -> str:
    """The kernel for ``work`` atom-frames: numpy for a small first job under "auto"."""
    from h5mdx.analysis.qcp import _WARM

    if kernel == "auto" and work < _SMALL_WORK and "numba" not in _WARM \
            and _default_client(dask.config.get("scheduler", None)) is None:
        return "numpy"  # (a cluster's workers have loaded the compiled kernel as they started)
    return kernel


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
        raise ValueError(
            f"rmsd needs positions on (time, atom, spatial); {position.name!r} has dims "
            f"{position.dims} (missing {missing})"
        )
    order = position.attrs.get(PARTICLE_ORDER_ATTR)
    if order is not None:
        raise ValueError(
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
        raise TopologyError(f"the topology {name} has {n_top} atoms but the positions come "
                            f"from a trajectory of {n_file}; they must describe the same system")
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
    position: xr.DataArray, select: Any, topology: Any = None
) -> np.ndarray | None:
    """Positions along ``atom`` chosen by ``select``.

    Parameters
    ----------
    position : xarray.DataArray
        Positions; its ``atom`` coordinate holds 0-based topology indices.
    select : None, str, array of int or array of bool
        None (all atoms), an MDAnalysis selection string (needs a topology),
        integer atom indices (values of the ``atom`` coordinate, as MDAnalysis'
        ``AtomGroup.indices``), or a boolean mask on ``atom``.
    topology : str, path-like or MDAnalysis.Universe, optional
        Defaults to the topology the ``h5md`` engine attached (``topology=``).

    Returns
    -------
    numpy.ndarray or None
        Integer positions along ``atom`` (None for all atoms).
    """
    if select is None:
        return None
    if hasattr(select, "indices") and hasattr(select, "select_atoms"):  # an AtomGroup
        select = np.asarray(select.indices)
    n = position.sizes[ATOM_DIM]
    if isinstance(select, str):
        from h5mdx.engine.topology import select_indices

        topology = _topology(position, topology)
        if topology is None:
            raise TopologyError(
                f"select={select!r} needs a topology: open the file with "
                "xr.open_dataset(..., engine='h5md', topology='system.psf') and use "
                "ds.md.rmsd(...), or pass topology= to h5mdx.rmsd"
            )
        wanted = select_indices(_universe_of(position, topology), select,
                                position.encoding.get("source"))
        where = np.flatnonzero(np.isin(_atom_ids(position), wanted))
        if where.size == 0:
            raise TopologyError(
                f"the selection {select!r} matches no atom of these positions"
                + _of_file(position)
            )
        return where
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
        masses = np.asarray(_universe_of(position, topology).atoms.masses, dtype=np.float64)
        m = masses[_atom_ids(position)]
        return m if idx is None else m[idx]
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
            f"{have[i]!r} in the positions and {ref_names[i]!r} in the reference); with "
            "a selection string it is applied to the reference too, in its atom order, "
            "else the reference's atoms are matched by atom index")


def _length_scale(unit: str, to: str, what: str) -> float:
    """The factor that takes lengths in ``unit`` to ``to`` (1 where they are the same)."""
    if unit == to:
        return 1.0
    from h5mdx.format.units import conversion

    have, want = conversion(unit), conversion(to)
    if have is None or want is None or have[1] != "Angstrom" or want[1] != "Angstrom":
        raise ValueError(f"{what} is in {unit!r} and the positions in {to!r}: h5mdx cannot "
                         "convert one to the other as lengths")
    return have[0] / want[0]


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
            raise ValueError("the positions hold no frames (an empty time slice?)")
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
        ref_da = reference
        ref_unit, unit = ref_da.attrs.get("units"), position.attrs.get("units")
        if ref_unit is not None and unit is not None:  # a frame of another Dataset
            ref_da = ref_da * _length_scale(str(ref_unit), str(unit), "the reference")
        if TIME_DIM in ref_da.dims:
            if ref_da.sizes[TIME_DIM] != 1:
                raise ValueError("a reference DataArray must hold one frame (isel(time=i))")
            ref_da = ref_da.isel({TIME_DIM: 0})
        ref_da = _by_atom(ref_da.transpose(ATOM_DIM, SPATIAL_DIM), sub, "reference")
        if "reference_name" in ref_da.coords:
            _check_names(np.asarray(ref_da["reference_name"].values), sub)
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


def _lazy_block(block: xr.Variable | FrameReader, ref_c: np.ndarray, w: np.ndarray | None,
                superposition: bool, kernel: str, start: int, stop: int,
                atoms: np.ndarray | None = None, step: int | None = None,
                host_threads: int | None = None,
                process_threads: int | None = None, lead: int = 0,
                where: tuple[str | None, str | None] = (None, None)) -> np.ndarray:
    """RMSD of one task's frames, read ``step`` frames at a time (the first read ``lead``
    frames, up to the first stored chunk boundary, where the task's frames start inside
    a chunk: every other read then holds whole chunks).

    Reading a few MiB at a time into the same buffer keeps the frames in the CPU cache
    between the read and the kernel; the task's block stays large for the scheduler.
    ``block`` is the task's frames as a lazily indexed Variable, or, for the ``h5md``
    engine's plain slices, a :class:`~h5mdx.engine.frames.FrameReader` of them that
    spares each read xarray's indexing (~0.1 ms a read). ``host_threads``: tasks the
    scheduler runs at once on this machine, ``process_threads`` in this process; with a
    spare core for each and few sharing the GIL, the reads run ahead of the kernel in a
    reader thread (:func:`~h5mdx.engine.frames.read_ahead`). Without (every core busy,
    or many threads to a process), a task whose frames are stored as served reads and
    computes them in one compiled call without the GIL (:func:`_fused_block`). Where
    mapped reads are chosen (:func:`mapped_read`), such a task runs the kernel on a
    mapping of the file instead (:func:`_mapped_block`), whatever the cores. ``where``:
    the store and the variable, named in a read error (a damaged Zarr chunk failed deep
    inside its codec, or as a reshape, naming nothing).
    """
    n = stop - start
    step = n if not step else step
    out = np.empty(n, dtype=np.float64)

    def read_variable(a: int, b: int) -> np.ndarray:
        try:
            return np.asarray((block[a:b] if b - a < n else block).values)  # type: ignore[union-attr,index]
        except (H5MDError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 - a codec's, zarr's or the store's own
            raise H5MDReadError(where[0], where[1], f"cannot read frames {start + a}-"
                                f"{start + b - 1}: {type(err).__name__}: {err}") from err

    read: Callable[[int, int], np.ndarray] = read_variable
    with BlockTimer(start, stop, kind="rmsd") as timer:
        with timer.phase("warmup"):  # once per process: the kernel, where the chunks lie
            warm_up(kernel)
            if isinstance(block, FrameReader):
                block.warm()
                read = block.bind()  # the direct reader found once per task
        # ``atoms``: the selected atoms of whole frames, read in place
        qcp = prepare(ref_c, w, superposition, kernel, reference_centered=True, atoms=atoms)
        # the next reads run in a reader thread while the kernel runs on these frames;
        # each buffer is read into again only after its frames are done with
        depth = read_ahead_depth(host_threads, process_threads)
        done = 0
        if qcp.reads_files and isinstance(block, FrameReader):
            if mapped_read() and block.step == 1:  # strided: a mapping a frame, 3.6x slower
                done = _mapped_block(block, qcp, out, timer)
            if not done and fused_read(depth, strided=block.step != 1):  # or not mappable
                done = _fused_block(block, qcp, out, timer)
        first = min(n, lead) if lead and not done else done
        spans = [(done, first)] if first > done else []
        spans += [(a, min(n, a + step)) for a in range(first, n, step)]
        with contextlib.closing(read_ahead(read, spans, depth)) as frames:
            for a, b in spans:
                with timer.phase("io"):  # the wait for the frames
                    data = next(frames)
                    timer.bytes_read += data.nbytes
                with timer.phase("compute"):
                    out[a:b] = qcp(data)
        if done:  # the frames the fused kernel could not trust, again by the exact path
            for f in np.flatnonzero(out[:done] < 0.0).tolist():
                out[f] = qcp(read(f, f + 1))[0]
    return out


#: Environment variable: ``0`` never reads with the fused kernel, ``1`` always (where
#: it can), unset: where no reads run ahead (:func:`fused_read`).
FUSED_READ_ENV = "H5MDX_FUSED_READ"
#: Bytes of whole frames the fused kernel reads at a time (at least one frame): a few
#: hundred KiB, so that the kernel finds the frames still in the core's cache (L2: 512
#: KiB-2 MiB a core on current x86 servers) instead of memory, which 16 cores copying
#: from the page cache keep busy. On 2 cores, 256 KiB, 1 MiB and 4 MiB differed by no
#: more than the VM's spread between runs (benchmarks/bench_threads.py,
#: results/threads-2core-fused.md); 16 cores have not measured them yet.
FUSED_READ_BYTES = 1 << 20


def fused_read(depth: int, strided: bool = False) -> bool:
    """Whether a task reads and computes in one compiled call (``_fused_block``).

    ``$H5MDX_FUSED_READ`` where set; otherwise where reads do not run ahead
    (``depth`` 0: no spare core per task, or too many tasks sharing a process), since a
    reader thread with a spare core overlaps the reads with the kernel, which one
    compiled loop cannot; and always for ``strided`` frames, which each other read
    would take as a strided box through h5py or the backend.
    """
    on = _switch(FUSED_READ_ENV)
    return (depth == 0 or strided) if on is None else on


def _switch(variable: str) -> bool | None:
    """An on/off environment variable: True for ``1``, False for ``0``, None where unset
    or empty; anything else is refused."""
    value = os.environ.get(variable, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{variable} must be 0 or 1, not {value!r}")
    return None if not value else value == "1"


def _stored_runs(block: FrameReader, n: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """Where the task's ``n`` frames lie in the file, as runs of whole frames stored as
    served (file descriptor, offsets, byte counts); None where they are not so stored."""
    runs = block.bind_runs()
    return runs(0, n) if runs is not None else None


def _fused_block(block: FrameReader, qcp: Any, out: np.ndarray, timer: BlockTimer) -> int:
    """RMSD of the task's frames read by the compiled kernel itself; the frames done.

    One call, without the GIL: ``pread`` of :data:`FUSED_READ_BYTES` at a time into one
    buffer, then the kernel on it (:meth:`h5mdx.analysis.qcp.PreparedQCP.from_file`).
    Per read, no Python runs: with 16 threads of one process, each 4 MiB read cost
    ~50 µs of Python under the GIL, which they queued for. The kernel applies a unit
    conversion of the backend to each read as the backend would (``scale``). 0 where the
    frames are not stored as bytes of the served values
    (:meth:`h5mdx.engine.arrays.H5MDArray.rows_runs`); fewer than all where a read
    failed: the caller reads the rest by the ordinary path, which says why.
    """
    located = _stored_runs(block, len(out))
    if located is None:
        return 0
    fd, offsets, nbytes = located
    shape = block.array.shape[1:]
    frame_bytes = block.array.dtype.itemsize * int(np.prod(shape))
    frames = np.empty((max(1, FUSED_READ_BYTES // max(1, frame_bytes)), *shape),
                      dtype=block.array.dtype)
    done, t_io, t_compute = qcp.from_file(fd, offsets, nbytes, frames, out,
                                          scale=block.array.scale)
    timer.add("io", t_io)
    timer.add("compute", t_compute)
    timer.bytes_read += done * frame_bytes
    return done


#: Environment variable: ``1`` runs the kernel on a mapping of the file where the frames
#: are stored as served (``_mapped_block``); ``0`` or unset, never.
MAPPED_READ_ENV = "H5MDX_MAPPED_READ"


def mapped_read() -> bool:
    """Whether a task runs the kernel on a mapping of the file (``_mapped_block``).

    ``$H5MDX_MAPPED_READ`` set to ``1``, on a system that can map files. Off by default:
    a file truncated by another program while it is mapped kills the process
    (``h5mdx.format.mapped``); on 2 cores the RMSD tasks ran slower with it
    (``benchmarks/results/mapped-read-2core.md``), and on 16 cores only the kernel on
    the mapping alone is measured (1.08-1.89x the fused read's ``pread``,
    ``benchmarks/results/mapped-16core.md``), not the tasks.
    """
    return bool(_switch(MAPPED_READ_ENV)) and _mapped.available()


def _mapped_block(block: FrameReader, qcp: Any, out: np.ndarray, timer: BlockTimer) -> int:
    """RMSD of the task's frames computed on a mapping of the file; the frames done.

    No copy: the kernel runs on the page cache's own pages, a window of
    :data:`h5mdx.format.mapped.WINDOW_BYTES` at a time, one call per window (the GIL
    released in the kernel). Timed as ``io`` (making each mapping, which fills its page
    tables and reads from disk what the page cache lacks) and ``compute``. 0 where the
    frames are not stored as served (a unit conversion would have to write to the
    mapping); fewer than all where a mapping failed (the file shorter than when it was
    opened): the caller reads the rest by the ordinary path, which says why.
    """
    if block.array.scale != 1.0:
        return 0
    located = _stored_runs(block, len(out))
    if located is None:
        return 0
    fd, offsets, nbytes = located
    shape = block.array.shape[1:]
    done = 0

    def each(frames: np.ndarray) -> None:
        nonlocal done
        with timer.phase("compute"):
            out[done:done + len(frames)] = qcp(frames)
        done += len(frames)

    with contextlib.suppress(OSError):
        timer.add("io", _mapped.map_rows(fd, offsets, nbytes, shape, block.array.dtype, each,
                                         filename=block.array.filename))
    timer.bytes_read += done * block.array.dtype.itemsize * int(np.prod(shape))
    return done


def _dask_block(data: np.ndarray, ref_c: np.ndarray, w: np.ndarray | None,
                superposition: bool, kernel: str, start: int, stop: int,
                atoms: np.ndarray | None = None) -> np.ndarray:
    with BlockTimer(start, stop, kind="rmsd") as timer:
        # the block arrives already read by dask (the read is fused into this task)
        timer.bytes_read = data.nbytes
        with timer.phase("warmup"):
            warm_up(kernel)
        with timer.phase("compute"):
            out = rmsd_qcp(ref_c, data, w, superposition, kernel, reference_centered=True,
                           atoms=atoms)
    return out


def _read_plan(position: xr.DataArray,
               idx: np.ndarray | None) -> tuple[xr.DataArray, np.ndarray | None]:
    """What each lazy task reads, and which atoms of it the kernel compares.

    Where the HDF5 chunks hold whole frames (or the dataset is contiguous), every
    chunk that holds a selected atom holds every atom of its frames too, so reading
    whole frames costs no extra disk I/O; the kernel then reads the selected atoms in
    place (no gathered copy). Elsewhere (atoms split across chunks, e.g. pyh5md's
    (32, 128, 3)) the selection goes to the backend, which reads only the chunks
    that hold selected atoms.
    """
    ordered = (TIME_DIM, ATOM_DIM, SPATIAL_DIM)
    if idx is None:
        return position.transpose(*ordered), None
    selected = position.isel({ATOM_DIM: idx}).transpose(*ordered)
    if "source" not in position.encoding or _in_memory(position):
        return selected, None
    chunks = position.encoding.get("chunksizes")
    if chunks is not None and chunks[position.dims.index(ATOM_DIM)] < position.sizes[ATOM_DIM]:
        return selected, None
    return position.transpose(*ordered), idx


def _dask_plan(position: xr.DataArray, sub: xr.DataArray,
               idx: np.ndarray | None) -> tuple[da.Array, np.ndarray | None]:
    """The dask array each task takes, and which atoms of it the kernel compares.

    Blocks that hold whole frames are handed to the kernel as they are read, with
    the selected atoms read in place; a dask-level selection would copy them first.
    """
    full = position.transpose(TIME_DIM, ATOM_DIM, SPATIAL_DIM).data
    if idx is not None and len(full.chunks[1]) == 1 and len(full.chunks[2]) == 1:
        return full, idx
    return sub.data, None


def _opened_lazily(position: xr.DataArray) -> tuple[xr.DataArray, tuple[int, ...] | None]:
    """The lazily read positions behind ``open_dataset(..., chunks=...)``, and its time blocks.

    A getter task of the dask array reads its whole block through the backend, which a
    task then computes on; reading the same frames through the lazy path instead reads a
    few MiB at a time into a reused buffer, with only the selected atoms, and no block
    travels between processes. Positions as opened or sliced since
    (:func:`~h5mdx.analysis._dask_source.dask_source`: ``isel``/``sel`` with slices)
    qualify, where each block holds whole frames. Returns ``(position, None)``
    otherwise: any other dask operation keeps the dask path, never a wrong result.
    """
    if position.chunks is None:  # lazily indexed or in memory (``.data`` would read it all)
        return position, None
    data = position.data
    source = dask_source(data)
    if source is None:
        return position, None
    time_axis = position.dims.index(TIME_DIM)
    whole = all(len(c) == 1 for i, c in enumerate(data.chunks) if i != time_axis)
    if backend_array(source[0]) is None or not whole:
        return position, None
    opened = xr.DataArray(_source_variable(position.variable, source),
                          coords=position.coords, name=position.name)
    opened.encoding = dict(position.encoding)  # "source", "chunksizes": the read plan uses them
    return opened, tuple(int(c) for c in data.chunks[time_axis])


def _time_coords(sub: xr.DataArray) -> dict[str, xr.Variable]:
    """The result's coordinates: ``sub``'s on ``time`` alone, each read where it is computed.

    A coordinate opened with ``chunks=`` is a dask array of getter tasks: computing the
    result would run them on the workers and ship the values back (one task per stored
    chunk of ``step`` in a Zarr store: 962 for one written in 104-frame chunks). Such a
    coordinate, as opened or sliced since, goes back to the lazily indexed array it was
    made from, which the result's ``compute`` reads in the calling process; any other
    stays as it is.
    """
    coords = {}
    for name, coord in sub.coords.items():
        if coord.dims != (TIME_DIM,):
            continue
        var = coord.variable
        source = dask_source(var.data) if var.chunks is not None else None
        coords[str(name)] = var if source is None else _source_variable(var, source)
    return coords


def _source_variable(var: xr.Variable, source: tuple[Any, tuple[slice, ...]]) -> xr.Variable:
    """``var`` (dask-backed) as the lazily indexed array and slices it was made from
    (:func:`~h5mdx.analysis._dask_source.dask_source`'s ``source``)."""
    lazy, key = source
    lazily = xr.Variable(var.dims, lazy, var.attrs, encoding=var.encoding)
    return lazily[key] if any(k != slice(None) for k in key) else lazily


def _in_memory(position: xr.DataArray) -> bool:
    # xarray has no public test for "already loaded"; ``_in_memory`` is what its own
    # ``load``/``compute`` paths consult
    return bool(position.variable._in_memory)


#: Threads of one process (one GIL) up to which a task reads :data:`READ_STEP_BYTES` at a
#: time. Each read and kernel call costs a task ~50 µs of Python under the GIL; with more
#: threads, they queue for it, and the reads grow in proportion (up to 4x) so that the
#: GIL's share per frame stays that of 4 threads. Measured on 16 cores (threaded
#: scheduler, (100, n, 3), C-alpha; benchmarks/results/threads-16core.md): 16 threads ran
#: 420,000 frames/s (0.66x the 16-process read floor) with 4 MiB reads, 709,000 (1.13x)
#: with 16 MiB; at 1-4 threads 16 MiB was 4-13 % slower than 4 MiB.
GIL_THREADS = 4


def _stored_chunks(source: xr.DataArray) -> tuple[int, ...] | None:
    """The chunk shape ``source`` is stored in: HDF5's ``chunksizes`` (``h5md`` engine,
    None where contiguous) or Zarr's ``chunks``."""
    chunks = source.encoding.get("chunksizes") or source.encoding.get("chunks")
    return tuple(int(c) for c in chunks) if chunks else None


def _zarr_frames(source: xr.DataArray) -> bool:
    """Whether ``source`` is a Zarr array (opened by xarray's ``zarr`` engine) stored in
    chunks of whole frames: any run of whole chunks is then read and decoded once."""
    enc = source.encoding
    chunks = _stored_chunks(source)
    if "source" in enc or "preferred_chunks" not in enc or chunks is None \
            or len(chunks) != source.ndim:
        return False
    return all(c >= n for d, c, n in zip(source.dims, chunks, source.shape, strict=True)
               if d != TIME_DIM)


def _read_step(source: xr.DataArray, process_threads: int | None = None) -> int | None:
    """Frames a task reads at a time: whole stored chunks of about :data:`READ_STEP_BYTES`,
    times ``process_threads / GIL_THREADS`` (1 to 4) where that many tasks share a process.

    None (the whole block at once) where the data are not read straight from an HDF5
    file or from Zarr chunks of whole frames (decoded whole, each read a run of them).
    A read of compressed HDF5 chunks spans whole chunks, each decoded once, into a
    buffer the task reuses: a task's block decoded at once into a new array took
    twice as long (page faults, and frames out of the CPU cache by the kernel's turn).
    """
    enc = source.encoding
    if _in_memory(source):
        return None
    if "source" not in enc and not _zarr_frames(source):
        return None
    frame_bytes = source.dtype.itemsize * int(np.prod(source.shape[1:]))
    chunks = _stored_chunks(source)
    scale = min(4, max(1, (process_threads or 1) // GIL_THREADS))
    # the module's name, read now: benchmarks/bench_steps.py sets it to try other sizes
    return read_step(frame_bytes, int(chunks[0]) if chunks else 1, READ_STEP_BYTES * scale)


def _block_frames(position: xr.DataArray, frames_per_block: int | None,
                  chunk_mib: float | None, workers: int | None) -> int:
    if frames_per_block is not None:
        if frames_per_block < 1:
            raise ValueError("frames_per_block must be at least 1")
        return int(frames_per_block)
    if chunk_mib is not None and not chunk_mib > 0:
        raise ValueError(f"chunk_mib must be positive, not {chunk_mib!r}")
    pref = position.encoding.get("preferred_chunks", {}).get(TIME_DIM)
    chunks = _stored_chunks(position)
    # a task that streams its block from the file holds one read at a time: a large block
    # costs no memory, and fewer tasks cost the scheduler less (STREAM_TARGET_MIB)
    # where the workers are unknown, the open's preferred block (its ``chunk_mib``) stands
    if chunk_mib is None and workers is not None and _read_step(position) is not None:
        chunk_mib = stream_target_mib(position.size * position.dtype.itemsize, workers)
    if chunk_mib is None and isinstance(pref, (int, np.integer)) and pref > 0:
        block = int(pref)
    else:  # blocks of whole frames, as the engine's preferred block is
        block = time_block(
            (position.sizes[TIME_DIM], position.sizes[ATOM_DIM], position.sizes[SPATIAL_DIM]),
            position.dtype.itemsize, chunks,
            DEFAULT_TARGET_MIB if chunk_mib is None else chunk_mib,
        )
    if workers is None:
        return block
    chunk = int(chunks[position.dims.index(TIME_DIM)]) if chunks else 1
    return balanced_block(position.sizes[TIME_DIM], block, chunk, workers)


def _open_block_ends(position: xr.DataArray, blocks: tuple[int, ...],
                     frames_per_block: int | None, chunk_mib: float | None,
                     workers: int | None) -> list[int]:
    """Where the tasks end on positions opened with ``chunks=`` (``blocks``: the open's
    blocks along time): runs of whole blocks, each up to the frames a lazily opened file
    would give a task (:func:`_block_frames`; a larger block stays alone, none is split).

    Only where the tasks stream their frames a few MiB at a time (an HDF5 file, or Zarr
    chunks of whole frames: a task then holds one read, whatever its size;
    :func:`_read_step`) and the tasks are sized
    for known workers or by ``frames_per_block``/``chunk_mib``; elsewhere one task per
    block, as opened. Each task costs the scheduler a few ms: the engine's 128 MiB blocks
    made 30 tasks of a 4 GB file for 2 workers, 0.61x the read floor against 0.73x for
    the same frames opened lazily (8 tasks; ``results/scale-2core-zen4-opens.md``).
    """
    ends = np.cumsum(blocks).tolist() or [0]
    sized = workers is not None or frames_per_block is not None or chunk_mib is not None
    if not sized or _read_step(position) is None:
        return ends
    frames = _block_frames(position, frames_per_block, chunk_mib, workers)
    merged: list[int] = []
    start = 0
    for a, b in zip([0, *ends[:-1]], ends, strict=True):
        if b - start > frames and a > start:  # the run so far is full: it ends here
            merged.append(a)
            start = a
    merged.append(ends[-1])
    return merged


def _threads_by_host() -> dict[str, list[int]] | None:
    """Tasks the default scheduler runs at once: per machine, the threads of each of its
    worker processes; None if unknown.

    A ``distributed`` client that is the default: each worker's threads, by host (None
    while its cluster has no worker yet); the synchronous scheduler: one thread; dask's
    threads: its ``num_workers`` setting (else the CPU count, its default) in this one
    process; dask's processes: as many processes of one thread each; all on this machine
    (``""``). Asked once per graph: a client answers over the network.
    """
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("sync", "synchronous", "single-threaded"):
        return {"": [1]}
    client = _default_client(scheduler)
    if client is not None:
        if getattr(client, "status", None) != "running":
            return None  # a closed (or closing) client: its workers are not known
        try:
            from distributed.comm import get_address_host

            per_host: dict[str, list[int]] = {}
            for address, n in client.nthreads().items():
                if int(n) > 0:
                    per_host.setdefault(get_address_host(address), []).append(int(n))
        except Exception:  # noqa: BLE001 - any failure to ask: workers unknown
            return None
        return per_host or None
    if scheduler not in (None, "threads", "threading", "processes", "multiprocessing"):
        return None
    workers = dask.config.get("num_workers", None)
    n = int(workers) if workers else (os.cpu_count() or 0)
    if not n:
        return None
    return {"": [1] * n if scheduler in ("processes", "multiprocessing") else [n]}


def _worker_count(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once in all (``by_host``: see
    :func:`_threads_by_host`), or None if unknown."""
    return sum(sum(p) for p in by_host.values()) if by_host else None


def _threads_per_host(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once on its busiest machine, or None if unknown.

    What a task needs to know to read ahead (:func:`~h5mdx.engine.frames.read_ahead_depth`):
    only where its machine has a spare core for every task running on it.
    """
    return max(sum(p) for p in by_host.values()) if by_host else None


def _threads_per_process(by_host: dict[str, list[int]] | None) -> int | None:
    """Tasks the default scheduler runs at once in its busiest process (one GIL), or None.

    Each read and kernel call of a task costs it some Python under its process's GIL
    (~50 µs); where many of its threads read at once they queue for it (see
    :data:`GIL_THREADS`).
    """
    return max(max(p) for p in by_host.values()) if by_host else None


def _default_client(scheduler: Any) -> Any:
    """The ``distributed`` client that computes by default, if any (only if imported)."""
    dist = sys.modules.get("distributed")
    if dist is None:
        return None
    if isinstance(scheduler, dist.Client):
        return scheduler
    if scheduler not in (None, "dask.distributed", "distributed"):
        return None
    try:
        return dist.default_client()
    except ValueError:  # no client
        return None


def _whole_frames_hint(position: xr.DataArray) -> str:
    """How to get blocks of whole frames, for where ``position`` comes from."""
    enc = position.encoding
    if "h5md_path" in enc:
        return ("Open the file with chunks={} (the h5md engine keeps whole frames in a "
                "block) or chunks={'atom': -1, 'spatial': -1}.")
    if "chunks" in enc or "preferred_chunks" in enc:  # a Zarr store's
        return (f"The store's chunks {tuple(enc.get('chunks') or ())} split the frames: "
                "write it with ds.md.to_zarr (whole frames per chunk), or open it with "
                "chunks={'atom': -1, 'spatial': -1}.")
    return "Chunk the positions with .chunk({'atom': -1, 'spatial': -1}) once."


def _dask_tasks(name: str, plan: tuple[da.Array, np.ndarray | None],
                kernel_args: tuple, hint: str = "") -> da.Array:
    """One task per dask block of ``plan``'s array, taking the block as it is read."""
    data, atoms = plan
    if len(data.chunks[1]) > 1 or len(data.chunks[2]) > 1:
        warnings.warn(
            "the positions are split into several dask chunks along atom/spatial; "
            f"rechunking once. {hint}".rstrip(),
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
        data = data.rechunk({1: -1, 2: -1})
    # one task per block, each taking its (time, atom, spatial) block as it is:
    # map_blocks with drop_axis would pass every block through np.concatenate, a full
    # copy of the positions read
    bounds = np.cumsum((0, *data.chunks[0]))
    dsk = {
        (name, i): (_dask_block, (data.name, i, 0, 0), *kernel_args,
                    int(bounds[i]), int(bounds[i + 1]), atoms)
        for i in range(len(data.chunks[0]))
    }
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[data])  # type: ignore[arg-type,list-item]
    return da.Array(graph, name, chunks=(data.chunks[0],), dtype=np.float64,
                    meta=np.array((), dtype=np.float64))


def _chunk_grid(source: xr.DataArray) -> tuple[int, int] | None:
    """``(stored frame of source's frame 0, frames per stored chunk)`` where ``source``
    is stored in chunks of several frames and starts at a known frame; None elsewhere
    (reads need no aligning)."""
    chunks = _stored_chunks(source)
    if not chunks or int(chunks[0]) <= 1:
        return None
    start = stored_start(source.variable)
    return None if start is None else (start, int(chunks[0]))


def _lead(grid: tuple[int, int] | None, frame: int) -> int:
    """Frames from ``source``'s ``frame`` to the next stored chunk boundary (``grid``:
    :func:`_chunk_grid`; 0 where unknown or on a boundary)."""
    return (-(grid[0] + frame)) % grid[1] if grid else 0


def _lazy_tasks(name: str, plan: tuple[xr.DataArray, np.ndarray | None], ends: list[int],
                kernel_args: tuple, host_threads: int | None = None,
                process_threads: int | None = None) -> da.Array:
    """One task per block of frames ending at ``ends``, each reading its frames itself,
    whole stored chunks at a read where it can (a task starting inside a chunk first
    reads up to the chunk's end: a read straddling two Zarr chunks decodes both)."""
    source, atoms = plan
    where = (source.encoding.get("source"), source.encoding.get("h5md_path") or source.name)
    step = _read_step(source, process_threads)
    grid = _chunk_grid(source) if step is not None else None
    dsk: dict[tuple[str, int], tuple[Any, ...]] = {}
    sizes = []
    for i, b in enumerate(ends):
        a = ends[i - 1] if i else 0
        lead = _lead(grid, a)
        # a Variable on (time, atom, spatial): no coordinates travel with the task
        block: Any = source.variable[a:b]
        block = frame_reader(block) or block
        dsk[(name, i)] = (_lazy_block, block, *kernel_args, a, b, atoms, step, host_threads,
                          process_threads, lead, where)
        sizes.append(b - a)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[])  # type: ignore[arg-type]
    return da.Array(graph, name, chunks=(tuple(sizes),), dtype=np.float64,
                    meta=np.array((), dtype=np.float64))


def rmsd(
    position: xr.DataArray | Sequence[xr.DataArray | xr.Dataset],
    reference: Any = 0,
    *,
    select: Any = None,
    weights: Any = None,
    superposition: bool = True,
    topology: Any = None,
    kernel: str = "auto",
    frames_per_block: int | None = None,
    chunk_mib: float | None = None,
) -> xr.DataArray:
    """RMSD of every frame to a reference after optimal superposition (QCP), lazily.

    Parameters
    ----------
    position : xarray.DataArray, or a list of them (or of Datasets)
        Positions on ``(time, atom, spatial)``: from the ``h5md`` engine (lazy or
        dask-backed), Zarr or memory. A list holds the parts of one trajectory in the
        order of their frames (a run in several files, each opened on its own): one
        series over all of them, each part read as it would be alone (an
        ``open_mfdataset`` of them is dask-backed and read through dask's getter tasks,
        whole frames at a time), ``reference`` a frame of them all. Positions opened with ``chunks=`` and not
        changed since, or only sliced (``isel``/``sel`` with slices), are read by the
        tasks themselves (a few MiB at a time, whole stored chunks at a read, selected
        atoms only), not through dask's getter tasks: one task per run of whole
        blocks of the open, as large as a lazily opened file's tasks would be where
        the frames are read from an HDF5 file (compressed or not) or from Zarr chunks
        of whole frames (each task costs the scheduler a few ms), else one task per
        block.
    reference : int, array_like, xarray.DataArray or MDAnalysis Universe/AtomGroup, default 0
        A frame index of ``position`` (counted from its first frame), an ``(atom,
        spatial)`` array (of the selected or of all atoms), a one-frame DataArray of
        another Dataset, or the current frame of a Universe or AtomGroup. With a selection
        string, a Universe or AtomGroup is selected with it too, its atoms in order (as
        MDAnalysis' ``rms.RMSD``); otherwise DataArrays and MDAnalysis objects are matched
        to the compared atoms by atom index. Atom names, where both have them, must agree.
    select : None, str, AtomGroup, array of int or array of bool
        Atoms to compare: an MDAnalysis selection string (needs a topology), an
        MDAnalysis AtomGroup (its indices), atom indices (values of the ``atom`` coordinate, as MDAnalysis' ``AtomGroup.indices``;
        on a Dataset of all atoms, their positions) or a boolean mask on ``atom``. Only
        these atoms are read.
    weights : None, "mass" or array_like
        Per-atom weights for centring and superposition.
    superposition : bool, default True
        False gives the RMSD after centring only.
    topology : str, path-like or MDAnalysis.Universe, optional
        For selection strings and masses; defaults to the topology the ``h5md``
        engine attached when the file was opened with ``topology=``.
    kernel : {"auto", "numpy", "numba"}
        The QCP implementation (see :func:`h5mdx.analysis.qcp.rmsd_qcp`). ``"auto"``
        takes numba where installed, except for a small job (under 2 million
        atom-frames) in a process that has not loaded it yet and with no distributed
        client: loading it costs more (0.5-0.8 s) than numpy takes for such a job.
    frames_per_block : int, optional
        Frames per task where ``position`` is not dask-backed; default: where the tasks
        stream their frames from the file a few MiB at a time (positions read from an
        HDF5 file, compressed or not), whole HDF5 chunks of 128-512 MiB, the largest that gives each
        worker 4 rounds of tasks (:func:`h5mdx.engine.chunking.stream_target_mib`); else,
        or where the scheduler's workers are unknown, the engine's preferred block
        (~``chunk_mib`` MiB of ``open_dataset``); made smaller where that gives the
        default scheduler's workers (a default ``distributed`` client's threads, dask's
        ``num_workers``, or the CPU count) an equal number of tasks each
        (:func:`h5mdx.engine.chunking.balanced_block`).
    chunk_mib : float, optional
        Target block size in MiB of whole frames (then shared out as above), in place of
        the default above. Larger blocks mean fewer tasks, each costing the scheduler a
        few ms (``benchmarks/bench_tasks.py``); smaller ones, finer load balance.

    Returns
    -------
    xarray.DataArray
        Lazy float64 ``rmsd`` on ``time`` with the ``time``/``step`` coordinates of
        ``position`` and its length ``units``. Compute it with ``.compute()`` on any
        dask scheduler: on one machine dask's threads are the fastest where h5mdx reads
        the positions itself (uncompressed, or deflate, LZF, Blosc, LZ4, Zstandard), and
        worker processes where HDF5 must (other filters: it runs one call at a time in a
        process); :func:`h5mdx.parallel.schedulers.local_scheduler` says which.

    Examples
    --------
    >>> ds = xr.open_dataset("adk.h5md", engine="h5md", topology="adk.psf")  # doctest: +SKIP
    >>> h5mdx.rmsd(ds.position, select="name CA").compute()  # doctest: +SKIP
    """
    if isinstance(position, (list, tuple)):
        return _rmsd_of_parts(position, reference, select=select, weights=weights,
                              superposition=superposition, topology=topology, kernel=kernel,
                              frames_per_block=frames_per_block, chunk_mib=chunk_mib)
    position = cast(xr.DataArray, position)
    _check_dims(position)
    position, dask_blocks = _opened_lazily(position)
    idx = select_atoms(position, select, topology)
    w = _weights(position, weights, idx, topology)
    sub = (position if idx is None else position.isel({ATOM_DIM: idx})).transpose(
        TIME_DIM, ATOM_DIM, SPATIAL_DIM)
    if sub.sizes[SPATIAL_DIM] != 3:
        raise ValueError(f"rmsd needs 3 spatial dimensions, not {sub.sizes[SPATIAL_DIM]}"
                         f"{_of_file(position)}: the RMSD after superposition in 3-D")
    w = normalize_weights(w, sub.sizes[ATOM_DIM])
    ref_c = _centred_reference(position, sub, reference, idx, w, select)
    n_frames = sub.sizes[TIME_DIM]
    kernel = _small_work_kernel(kernel, n_frames * sub.sizes[ATOM_DIM])
    # never touch ``sub.data`` on a lazily indexed array: that would read it all.
    # ``Variable._data`` is private; xarray has no public way to reach the lazily indexed
    # array (or the dask array) without loading it, and tokenizing it is what identifies
    # the file, element and selection.
    is_dask = sub.chunks is not None
    ends: list[int] = []
    host_threads = process_threads = None
    if not is_dask:
        by_host = _threads_by_host()  # one question to the scheduler, for both uses
        if dask_blocks is not None:  # the blocks of open_dataset(chunks=...)
            ends = _open_block_ends(position, dask_blocks, frames_per_block, chunk_mib,
                                    _worker_count(by_host))
        else:
            fpb = _block_frames(position, frames_per_block, chunk_mib,
                                _worker_count(by_host))
            # tasks end on stored chunk boundaries (the first takes the frames before
            # the first one too): a task never reads part of a chunk another reads
            grid = _chunk_grid(position) if frames_per_block is None else None
            lead = _lead(grid, 0) if grid and fpb % grid[1] == 0 else 0
            ends = [*range(lead + fpb, n_frames, fpb), n_frames] if n_frames else [0]
        # tasks at once on a machine: no more than there are tasks
        host_threads = _threads_per_host(by_host)
        host_threads = host_threads and min(host_threads, len(ends))
        if _zarr_frames(position):
            # zarr reads with I/O threads of its own: a reader thread beside them made one
            # worker slower, not faster (31,200 frames: 1.63-1.77 s, 1.12-1.28 s without);
            # unknown threads read nothing ahead (read_ahead_depth)
            host_threads = None
        process_threads = _threads_per_process(by_host)
        process_threads = process_threads and min(process_threads, len(ends))
    # the blocks are in the name: the same RMSD split otherwise (another chunk_mib, another
    # worker count) must not reuse the keys of the first with other tasks behind them
    token = tokenize(sub.variable._data, ref_c, w, superposition, kernel, frames_per_block,
                     ends or None, host_threads, process_threads)
    name = f"rmsd-{token}"

    kernel_args = (ref_c, w, superposition, kernel)
    if is_dask:
        result = _dask_tasks(name, _dask_plan(position, sub, idx), kernel_args,
                             _whole_frames_hint(position))
    else:
        result = _lazy_tasks(name, _read_plan(position, idx), ends, kernel_args, host_threads,
                             process_threads)

    return xr.DataArray(result, dims=(TIME_DIM,), coords=_time_coords(sub), name="rmsd",
                        attrs=_result_attrs(position, sub, reference, select, weights,
                                            superposition))


def reference_of_parts(positions: Sequence[xr.DataArray],
                       reference: Any) -> tuple[Any, int | None]:
    """The reference of a trajectory in parts, for each part's RMSD.

    Parameters
    ----------
    positions : sequence of xarray.DataArray
        The parts' positions, in the order of their frames.
    reference : Any
        As :func:`rmsd` takes it; an integer is a frame of all the parts together.

    Returns
    -------
    tuple
        The reference for each part (a frame index made the one-frame DataArray of the
        part that holds it; anything else as given), and that frame's index (None where
        the reference is no frame index).
    """
    if not isinstance(reference, (int, np.integer)):
        return reference, None
    ends = np.cumsum([p.sizes.get(TIME_DIM, 0) for p in positions])
    n_frames = int(ends[-1]) if ends.size else 0
    if not -n_frames <= reference < n_frames:
        raise IndexError(f"reference frame {reference} out of range for {n_frames} "
                         f"frames (of {len(positions)} parts)")
    frame = int(reference) % n_frames
    k = int(np.searchsorted(ends, frame, side="right"))
    return positions[k].isel({TIME_DIM: frame - (int(ends[k - 1]) if k else 0)}), frame


def join_parts(series: Sequence[xr.DataArray], frame: int | None) -> xr.DataArray:
    """The RMSD series of a trajectory's parts as one, along ``time`` (``frame``: the
    reference frame of them all, as :func:`reference_of_parts` gave it)."""
    out = xr.concat(series, dim=TIME_DIM, combine_attrs="override")
    if frame is not None:
        out.attrs["reference_frame"] = frame
    return out


def _rmsd_of_parts(parts: Sequence[xr.DataArray | xr.Dataset], reference: Any,
                   **options: Any) -> xr.DataArray:
    """The RMSD of a trajectory in parts (see :func:`rmsd`): one lazy series per part,
    joined along ``time``, to the same reference."""
    positions = [p["position"] if isinstance(p, xr.Dataset) else p for p in parts]
    if not positions:
        raise ValueError("no positions: the list of parts is empty")
    ref, frame = reference_of_parts(positions, reference)
    return join_parts([rmsd(p, ref, **options) for p in positions], frame)


def _result_attrs(position: xr.DataArray, sub: xr.DataArray, reference: Any, select: Any,
                  weights: Any, superposition: bool) -> dict[str, Any]:
    """What the RMSD series says of how it was computed."""
    attrs: dict[str, Any] = {"long_name": "RMSD after optimal superposition" if superposition
             else "RMSD after centring"}
    if "units" in position.attrs:
        attrs["units"] = position.attrs["units"]
    if isinstance(select, str):
        attrs["selection"] = select
    attrs["n_atoms"] = int(sub.sizes[ATOM_DIM])
    attrs["superposition"] = int(bool(superposition))  # netCDF attributes hold no bools
    attrs["weights"] = weights if isinstance(weights, str) else (
        "none" if weights is None else "given")
    if isinstance(reference, (int, np.integer)):
        attrs["reference_frame"] = int(reference)
    return attrs
