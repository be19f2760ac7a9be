"""RMSD time series of a trajectory as a lazy dask computation.

:func:`rmsd` turns a ``position`` DataArray on ``(time, atom, spatial)`` into a
lazy ``rmsd`` DataArray on ``time``: one dask task per block of frames, each
reading its block (only the selected atoms) and running the batched QCP kernel
of :mod:`h5mdx.analysis.qcp`. The reference is read and centred once, and travels in the
graph as a small array. Each task times its read and its kernel with
:class:`h5mdx.timing.phases.BlockTimer`, so :func:`h5mdx.timing.capture` sees
the I/O and compute split of every block.

The selection and the reference are :mod:`h5mdx.analysis.reference`'s, what one task
computes :mod:`h5mdx.analysis.blocks`'s, and how frames are cut into tasks
:mod:`h5mdx.analysis.plan`'s; this module puts them together.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import xarray as xr
from dask.base import tokenize

# `name as name`: names of this module before it was split (h5mdx 0.1.0)
from h5mdx.analysis.blocks import FUSED_READ_BYTES as FUSED_READ_BYTES
from h5mdx.analysis.blocks import FUSED_READ_ENV as FUSED_READ_ENV
from h5mdx.analysis.blocks import MAPPED_READ_ENV as MAPPED_READ_ENV
from h5mdx.analysis.blocks import fused_read as fused_read
from h5mdx.analysis.blocks import mapped_read as mapped_read
from h5mdx.analysis.plan import (
    _block_frames,
    _chunk_grid,
    _dask_plan,
    _dask_tasks,
    _lazy_tasks,
    _lead,
    _open_block_ends,
    _opened_lazily,
    _read_plan,
    _small_work_kernel,
    _threads_by_host,
    _threads_per_host,
    _threads_per_process,
    _time_coords,
    _whole_frames_hint,
    _worker_count,
    _zarr_frames,
)
from h5mdx.analysis.qcp import normalize_weights
from h5mdx.analysis.reference import (
    _centred_reference,
    _check_dims,
    _frame_index,
    _user_stacklevel,
    _weights,
    select_atoms,
)
from h5mdx.analysis.series import write_series  # noqa: F401 - re-exported (its old home)
from h5mdx.format.schema import ATOM_DIM, SPATIAL_DIM, TIME_DIM

__all__ = ["join_parts", "reference_of_frame", "reference_of_parts", "rmsd", "seam", "seams"]


def _check_options(superposition: Any, kernel: Any, frames_per_block: Any = None,
                   chunk_mib: Any = None) -> None:
    """Refuse a ``superposition`` other than a bool, 0 or 1 (a string, "no" or "False", is
    truthy, and superposed in silence), an unknown ``kernel`` here, not in every task at
    compute time, a ``frames_per_block`` that is no whole number or under 1, and a
    ``chunk_mib`` that is no positive number (dask-backed positions, which they do not
    apply to, took 2.5, 0, -3 and "5" in silence; a lazy open's ``chunk_mib="5"`` failed
    comparing a str with an int)."""
    if not isinstance(superposition, (bool, np.bool_, int)) or superposition not in (0, 1):
        raise TypeError(f"superposition must be True or False, not {superposition!r}")
    if kernel not in ("auto", "numpy", "numba"):
        raise ValueError(f"kernel must be 'auto', 'numpy' or 'numba', not {kernel!r}")
    if frames_per_block is not None and (isinstance(frames_per_block, (bool, np.bool_))
                                         or not isinstance(frames_per_block,
                                                           (int, np.integer))):
        raise TypeError(f"frames_per_block must be a whole number of frames, not "
                        f"{frames_per_block!r}")
    if frames_per_block is not None and frames_per_block < 1:
        raise ValueError(f"frames_per_block must be at least 1, not {frames_per_block}")
    if chunk_mib is not None and (isinstance(chunk_mib, (bool, np.bool_))
                                  or not isinstance(chunk_mib, (int, float, np.number))
                                  or not 0 < chunk_mib < np.inf):
        raise ValueError(f"chunk_mib must be positive and finite, not {chunk_mib!r}")


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
    box: xr.DataArray | None = None,
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
        A frame index of ``position`` (counted from its first frame; an integer, or a
        0-d integer array or DataArray such as ``series.argmax("time")``), an ``(atom,
        spatial)`` array (of the selected or of all atoms), a one-frame DataArray of
        another Dataset, or the current frame of a Universe or AtomGroup. With a selection
        string, a Universe or AtomGroup is selected with it too, its atoms in order (as
        MDAnalysis' ``rms.RMSD``); otherwise DataArrays and MDAnalysis objects are matched
        to the compared atoms by atom index. Atom names, where both have them, must agree.
    select : None, str, AtomGroup, array of int or array of bool
        Atoms to compare: an MDAnalysis selection string (in the topology, or without
        one in the positions' own ``name``, ``resname``, ... coordinates), an
        MDAnalysis AtomGroup of the same system (its indices; one of a Universe of
        another atom count, or of other atom names, is refused), atom indices (values of the ``atom`` coordinate, as MDAnalysis' ``AtomGroup.indices``;
        on a Dataset of all atoms, their positions) or a boolean mask on ``atom``. Only
        these atoms are read. A selection by position (``around``, ``point``,
        ``sphzone``, ``cyzone``, ``isolayer``, ``prop x/y/z``) is made once, as
        MDAnalysis' ``rms.RMSD`` makes it on the frame its Universe is at: on the
        reference's positions (the frame ``reference`` of ``position``, the current
        frame of a Universe reference, a frame of another Dataset, an array of all the
        atoms), in Angstrom (converted from the positions' unit), periodic where ``box``
        (or a reference Universe's or Dataset's box) is.
    weights : None, "mass" or array_like
        Per-atom weights for centring and superposition.
    superposition : bool, default True
        False gives the RMSD after centring only (anything but a bool, 0 or 1 is a
        TypeError).
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
    box : xarray.DataArray, optional
        The box of a selection by distance (``ds.box_edges``, which ``ds.md.rmsd``
        passes): taken at the reference frame, periodic where its ``boundary`` is;
        without one, distances are not periodic. With parts that are DataArrays (which
        carry no box), the box of every frame of them all (``xr.concat`` of their
        ``box_edges``) or of one frame; without it a selection by distance says (a
        warning) that it is not periodic. Parts that are Datasets carry their own.

    Returns
    -------
    xarray.DataArray
        Lazy float64 ``rmsd`` on ``time`` with the ``time``/``step`` coordinates of
        ``position`` and its length ``units``; its attrs say how it was computed
        (``selection``, ``n_atoms``, ``weights``, ``superposition``) and, for a frame
        index, ``reference_frame`` (an index into ``position``: on
        ``ds.isel(time=slice(10, None))`` its 0 is the file's frame 10) with
        ``reference_step`` and ``reference_time`` (in the unit of ``time``), which
        name that frame unambiguously; for another reference, ``reference`` says what
        it was (a frame of another file with its step and time, a Universe's frame, an
        array). Compute it with ``.compute()`` on any
        dask scheduler: on one machine dask's threads are the fastest where h5mdx reads
        the positions itself (uncompressed, or deflate, LZF, Blosc, LZ4, Zstandard), and
        worker processes where HDF5 must (other filters: it runs one call at a time in a
        process); :func:`h5mdx.parallel.schedulers.local_scheduler` says which.

    Examples
    --------
    >>> ds = xr.open_dataset("adk.h5md", engine="h5md", topology="adk.psf")  # doctest: +SKIP
    >>> h5mdx.rmsd(ds.position, select="name CA").compute()  # doctest: +SKIP
    """
    reference = _frame_index(reference)
    _check_options(superposition, kernel, frames_per_block, chunk_mib)
    if isinstance(position, (list, tuple)):
        return _rmsd_of_parts(position, reference, select=select, weights=weights,
                              superposition=superposition, topology=topology, kernel=kernel,
                              frames_per_block=frames_per_block, chunk_mib=chunk_mib, box=box)
    position = cast(xr.DataArray, position)
    _check_dims(position)
    position, dask_blocks = _opened_lazily(position)
    idx = select_atoms(position, select, topology, reference, box)
    w = _weights(position, weights, idx, topology)
    sub = (position if idx is None else position.isel({ATOM_DIM: idx})).transpose(
        TIME_DIM, ATOM_DIM, SPATIAL_DIM)
    w = normalize_weights(w, sub.sizes[ATOM_DIM])
    ref_c = _centred_reference(position, sub, reference, idx, w, select)
    n_frames = sub.sizes[TIME_DIM]
    kernel = _small_work_kernel(kernel, n_frames * sub.sizes[ATOM_DIM])
    # never touch ``sub.data`` on a lazily indexed array: that would read it all.
    # ``Variable._data`` is private; xarray has no public way to reach the lazily indexed
    # array (or the dask array) without loading it, and tokenizing it is what identifies
    # the file, element and selection.
    is_dask = _dask_backed(sub, frames_per_block, chunk_mib)
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


def _dask_backed(sub: xr.DataArray, frames_per_block: Any, chunk_mib: Any) -> bool:
    """Whether ``sub`` is dask-backed (one task per dask chunk along time); if so, say that
    ``frames_per_block``/``chunk_mib`` do not apply (they were dropped in silence)."""
    if sub.chunks is None or (frames_per_block is None and chunk_mib is None):
        return sub.chunks is not None
    given = " and ".join(f"{name}={value!r}" for name, value in (
        ("frames_per_block", frames_per_block), ("chunk_mib", chunk_mib)) if value is not None)
    sizes = sorted(set(sub.chunks[0])) if sub.chunks else []
    warnings.warn(f"{given} does not apply to dask-backed positions: one task per dask "
                  f"chunk along time (here of {', '.join(map(str, sizes[:3]))} frames); "
                  "rechunk them (position.chunk(time=N)) for other blocks", RuntimeWarning,
                  stacklevel=_user_stacklevel())
    return True


def reference_of_parts(positions: Sequence[xr.DataArray | xr.Dataset],
                       reference: Any) -> tuple[Any, int | None]:
    """The reference of a trajectory in parts, for each part's RMSD.

    Parameters
    ----------
    positions : sequence of xarray.DataArray or xarray.Dataset
        The parts' positions (or the Datasets that hold them, whose frame then carries
        its box too), in the order of their frames.
    reference : Any
        As :func:`rmsd` takes it; an integer is a frame of all the parts together.

    Returns
    -------
    tuple
        The reference for each part (a frame index made that frame of the part that
        holds it, a DataArray or Dataset as the parts are; anything else as given), and that frame's index (None where
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
    reference frame of them all, as :func:`reference_of_parts` gave it). A part whose RMSD
    or time is in another unit than the first part's with frames (files opened on their own
    keep their units) is converted to that part's."""
    series = _timed_by_step(series)
    # a part of no frames has no RMSD in any unit: the first part with frames sets them (a
    # first part of none labelled the series with its units, or none, and a part of none
    # was warned of as 'in no unit')
    full = [(k, s) for k, s in enumerate(series) if s.sizes.get(TIME_DIM, 0)] \
        or [(0, series[0])]
    first = full[0][1]
    series = [first, *(_in_units_of(s, first, k) for k, s in full[1:])]
    out = xr.concat(series, dim=TIME_DIM, combine_attrs="override")
    if frame is not None:
        out.attrs["reference_frame"] = frame
        out.attrs.update(reference_of_frame(out, frame))
    return out


def reference_of_frame(series: xr.DataArray | xr.Dataset, frame: int) -> dict[str, Any]:
    """``reference_step`` and ``reference_time`` (in the ``time`` coordinate's unit) of the
    reference frame ``frame`` of ``series`` (an index into its ``time``), where it has
    ``step`` or ``time`` on ``time``: ``reference_frame`` alone is an index into the
    positions given, so that on ``ds.isel(time=slice(10, None))`` its 0 is the file's
    frame 10, which the step and the time say unambiguously."""
    attrs: dict[str, Any] = {}
    for name, cast_to in (("step", int), ("time", float)):
        coord = series.coords.get(name)
        if coord is None or coord.dims != (TIME_DIM,) or not coord.size:
            continue
        one = coord.isel({TIME_DIM: frame}).variable
        if one.chunks is not None:  # dask's own getter, in this process: a compute with
            import dask  # the default scheduler imports distributed (0.3-0.4 s)

            one = one.compute(scheduler=dask.get)
        value = np.asarray(one.values)
        if name == "time" and coord.attrs.get("units") == _STEP_UNIT:
            continue  # frames timed by their steps: no time of their own
        if np.issubdtype(value.dtype, np.number) and np.isfinite(value):
            attrs[f"reference_{name}"] = cast_to(value)
    return attrs


#: The unit of the time of frames a file gives no time: their steps (h5mdx.engine)
_STEP_UNIT = "step"


def _timed_by_step(series: Sequence[xr.DataArray]) -> list[xr.DataArray]:
    """The parts' RMSD series, each timed by its steps where one part has no times (its
    time is its steps, in unit ``step``) and another has them, with a warning: their
    times cannot be joined (``'step'`` is no unit of time; it failed as "cannot parse
    unit 'step'"). As they are where every part has times, or none."""
    units = [s[TIME_DIM].attrs.get("units") if TIME_DIM in s.coords else None
             for s in series]
    if _STEP_UNIT not in units or all(u == _STEP_UNIT for u in units) or not all(
            "step" in s.coords for s in series):
        return list(series)
    k, timed = units.index(_STEP_UNIT), next(u for u in units if u != _STEP_UNIT)
    warnings.warn(f"part {k} of the trajectory has no times (its frames are timed by their "
                  f"steps), another has them (in {timed or 'no unit'}): the series is timed "
                  "by the steps of every part", RuntimeWarning, stacklevel=_user_stacklevel())
    attrs = dict(series[k][TIME_DIM].attrs)
    return [s.assign_coords({TIME_DIM: (TIME_DIM, np.asarray(s["step"].values, np.float64),
                                        attrs)}) for s in series]


def _unit_factor(have: str, want: str, what: str) -> float:
    """The factor that takes values in ``have`` to ``want`` (1 where they are the same);
    a ValueError naming ``what`` where they are not of one dimension."""
    if have == want:
        return 1.0
    from h5mdx.format.units import conversion

    a, b = conversion(have), conversion(want)
    if a is None or b is None or a[1] != b[1]:
        raise ValueError(f"{what} is in {have!r} and the first part's in {want!r}: h5mdx "
                         "cannot convert one to the other")
    return a[0] / b[0]


def _in_units_of(part: xr.DataArray, first: xr.DataArray, k: int) -> xr.DataArray:
    """The RMSD series of part ``k`` in the length and time units of the ``first`` part's
    (concatenated as they are, a part in Å after one in nm was labelled nm, 10x too large);
    where only one of them names a unit, it is taken to be the other's, with a warning."""
    from h5mdx.format.units import scaled

    for name, have, want in (
            ("RMSD", part.attrs.get("units"), first.attrs.get("units")),
            ("time", *(x[TIME_DIM].attrs.get("units") if TIME_DIM in x.coords else None
                       for x in (part, first)))):
        if have is None and want is None or have == want:
            continue
        if have is None or want is None:
            warnings.warn(f"part {k} of the trajectory has its {name} in "
                          f"{have or 'no unit'!s}, the first part in {want or 'no unit'!s}: "
                          "taken to be the same unit", RuntimeWarning,
                          stacklevel=_user_stacklevel())
            continue
        factor = _unit_factor(str(have), str(want), f"part {k}'s {name}")
        if name == "RMSD":
            part = scaled(part, factor).assign_attrs({**part.attrs, "units": want})
        else:
            time = part[TIME_DIM]
            part = part.assign_coords({TIME_DIM: (TIME_DIM, scaled(time.values, factor, decimals=True),
                                                  {**time.attrs, "units": want})})
    return part


def seams(parts: Sequence[Any]) -> Iterator[tuple[int, int]]:
    """Each part after the first with the part it follows, ``(j, i)``: the last part
    before it with frames (a part without frames, a run stopped before its first, is no
    seam: the repeated frame around it was kept twice). ``parts`` is read as
    the caller leaves it: a part the caller cut to no frame is then none."""
    last = 0
    for i in range(1, len(parts)):
        yield last, i
        if parts[i].sizes.get(TIME_DIM) or not parts[last].sizes.get(TIME_DIM):
            last = i


def seam(before: Any, part: Any) -> tuple[str, Any, Any] | None:
    """How ``part`` (a Dataset or DataArray of a part of a trajectory) follows ``before``:
    ``(what, last, first)``, the coordinate compared (``step`` where both parts have
    steps, else ``time``) with the last value of ``before`` and the first of ``part``;
    None where either holds no frame. Steps numbered anew (a run restarted from step 0,
    or frames numbered 0..n-1 for want of steps) that go back are compared by time where
    the times follow (``_times_of``). ``first == last``: the part begins with the
    frame ``before`` ends with (a run continued from its last frame), which ``h5mdx
    rmsd`` of the files keeps once; ``first < last``: the parts are not in order."""
    what = "step" if "step" in part.coords and "step" in before.coords else "time"
    if not before.sizes.get(TIME_DIM) or not part.sizes.get(TIME_DIM):
        return None
    last, first = before[what].values[-1], part[what].values[0]
    if first < last and what == "step":  # steps numbered anew: the times may follow
        by_time = _times_of(before, part)
        if by_time is not None:
            what, (last, first) = "time", by_time
    return what, last, first


def _times_of(before: Any, part: Any) -> tuple[float, float] | None:
    """The last time of ``before`` and the first of ``part`` where both parts have times
    in one unit and ``part``'s do not go back: their steps numbered anew (a run
    restarted from step 0, or frames numbered 0..n-1 for want of steps) do not order
    the parts, their times do (they were refused as out of order). None
    otherwise."""
    if TIME_DIM not in before.coords or TIME_DIM not in part.coords:
        return None
    units = [ds[TIME_DIM].attrs.get("units") for ds in (before, part)]
    if units[0] != units[1] or units[0] == "step":  # "step": a file without times
        return None
    last, first = float(before[TIME_DIM].values[-1]), float(part[TIME_DIM].values[0])
    return (last, first) if first >= last else None


def _note_repeated_seams(positions: Sequence[xr.DataArray]) -> None:
    """Warn where a part begins with the frame the part before it (with frames) ends with
    (:func:`seam`, as ``h5mdx rmsd`` of the files finds it): a run continued from its last
    frame, whose frame is then in the series twice, and the frames after it one further
    on than ``h5mdx rmsd`` of the same files counts them (it keeps that frame once); it
    was said nowhere."""
    for j, k in seams(positions):
        found = seam(positions[j], positions[k])
        if found is not None and found[1] == found[2]:
            warnings.warn(f"part {k} of the trajectory begins with the frame the part before "
                          f"it ends with ({found[0]} {found[2]}): that frame is in the series "
                          "twice (h5mdx rmsd of the files keeps it once; "
                          "part.isel(time=slice(1, None)) leaves it out)", RuntimeWarning,
                          stacklevel=_user_stacklevel())


def _rmsd_of_parts(parts: Sequence[xr.DataArray | xr.Dataset], reference: Any,
                   **options: Any) -> xr.DataArray:
    """The RMSD of a trajectory in parts (see :func:`rmsd`): one lazy series per part,
    joined along ``time``, to the same reference."""
    positions = [p["position"] if isinstance(p, xr.Dataset) else p for p in parts]
    if not positions:
        raise ValueError("no positions: the list of parts is empty")
    _note_repeated_seams(positions)
    # Datasets: the reference a frame of one (its box, for a selection by distance)
    whole = all(isinstance(p, xr.Dataset) for p in parts)
    ref, frame = reference_of_parts(list(parts) if whole else positions, reference)
    if not whole:
        options["box"] = _box_of_parts(options.get("box"), options.get("select"), frame,
                                       sum(p.sizes.get(TIME_DIM, 0) for p in positions))
    return join_parts([rmsd(p, ref, **options) for p in positions], frame)


#: MDAnalysis' selections by distance, periodic where the box is (``prop z`` takes none)
_BY_DISTANCE = frozenset({"around", "point", "sphzone", "sphlayer", "cyzone", "cylayer",
                          "isolayer"})


def _box_of_parts(box: xr.DataArray | None, select: Any, frame: int | None,
                  n_frames: int) -> xr.DataArray | None:
    """The box for each part where the parts are DataArrays (which carry no box): a
    ``box=`` of every frame of them all taken at the reference ``frame`` (a part's rmsd
    took a box on ``time`` of another length as no box: not periodic, in silence); without
    one, a selection by distance is not periodic, which a warning says."""
    if box is None:
        words = set(select.replace("(", " ").replace(")", " ").split()) \
            if isinstance(select, str) else set()
        if words & _BY_DISTANCE:
            warnings.warn(f"the parts are DataArrays, which carry no box: the selection "
                          f"{select!r} is made without one (distances not periodic); pass "
                          "the parts' Datasets, or box= (ds.box_edges of every frame of "
                          "them all, or of the reference frame)", RuntimeWarning,
                          stacklevel=_user_stacklevel())
        return None
    if TIME_DIM not in box.dims:
        return box
    if box.sizes[TIME_DIM] != n_frames:
        raise ValueError(f"box= has {box.sizes[TIME_DIM]} frames, the parts {n_frames} in "
                         "all: give the box of every frame of them all, or of one frame")
    return box.isel({TIME_DIM: frame}) if frame is not None else None


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
    if isinstance(reference, (int, np.integer)):  # as an index from the first frame (-1: n-1)
        attrs["reference_frame"] = int(reference) % max(int(position.sizes[TIME_DIM]), 1)
        if position.sizes[TIME_DIM]:
            attrs.update(reference_of_frame(position, attrs["reference_frame"]))
    else:  # no frame of these positions: it said nothing of what the reference was
        attrs["reference"] = _described(reference)
    return attrs


def _described(reference: Any) -> str:
    """What a reference that is no frame index of the positions was, for the result's
    ``reference`` attr: a frame of another file (its step and time where it has them), a
    Universe's current frame, or an array."""
    if hasattr(reference, "atoms") and hasattr(reference.atoms, "positions"):
        universe = getattr(reference, "universe", reference)
        ts = getattr(getattr(universe, "trajectory", None), "ts", None)
        index = getattr(ts, "frame", None)
        frame = f"frame {index} " if index is not None else ""
        return (f"{frame}of the MDAnalysis Universe "
                f"{getattr(universe, 'filename', None) or '(no file)'}")
    if isinstance(reference, (xr.DataArray, xr.Dataset)):
        var = reference["position"] if isinstance(reference, xr.Dataset) \
            and "position" in reference else reference
        where = [f"{name} {var.coords[name].values.item()}" for name in ("step", "time")
                 if name in var.coords and var.coords[name].size == 1]
        source = var.encoding.get("source") or reference.encoding.get("source")
        return ", ".join([f"a frame of {source or 'a Dataset in memory'}", *where])
    return "an array of positions"
