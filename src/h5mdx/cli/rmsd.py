"""``h5mdx rmsd TRAJ``: the RMSD time series on a local or cluster dask scheduler."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from h5mdx._machine import usable_cpus
from h5mdx.analysis.series import check_outputs, write_outputs
from h5mdx.parallel.schedulers import SCHEDULERS as _ALL
from h5mdx.parallel.schedulers import canonical, compute_rmsd, local_scheduler

#: The scheduler chosen for the file at hand (:func:`h5mdx.parallel.schedulers.local_scheduler`).
AUTO = "auto"
#: The schedulers of ``h5mdx rmsd`` (the MPI-IO path is ``h5mdx mpi-rmsd``).
SCHEDULERS = (AUTO, *(s for s in _ALL if s != "mpi-io"))
#: Workers of ``--scheduler slurm`` without ``--workers`` (one per SLURM job, ``--jobs``).
SLURM_WORKERS = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rmsd",
        help="RMSD after optimal superposition (QCP) of a trajectory, in parallel",
        description=(
            "Compute the RMSD of every frame to a reference after optimal superposition. "
            "The default scheduler (auto) runs threads where h5mdx reads the file's "
            "positions without HDF5 (uncompressed, or deflate, LZF, Blosc, LZ4, Zstandard: "
            "threads then read in parallel), else a local cluster of worker processes "
            "(HDF5 runs one call at a time in a process)."
        ),
    )
    p.add_argument("trajectory", nargs="+",
                   help="an H5MD file, or a Zarr store written by h5mdx; several H5MD files "
                        "(or a quoted pattern, 'run-*.h5md') are one trajectory, joined "
                        "along time in their order")
    p.add_argument("--topology", help="topology file (PSF, PDB, GRO, TPR, ...)")
    p.add_argument("--select", default=None, help='MDAnalysis selection, e.g. "name CA"')
    p.add_argument("--reference", type=int, default=0, help="reference frame (default 0)")
    p.add_argument("--weights", choices=["mass"], default=None, help="mass-weighted RMSD")
    p.add_argument("--no-superposition", action="store_true",
                   help="RMSD after centring only")
    p.add_argument("--group", default=None, help="particles group (default: the only one)")
    p.add_argument("--workers", type=int, default=None,
                   help="number of workers (default: the cores this process may use, "
                        "and at most those with a local scheduler; "
                        f"{SLURM_WORKERS} with --scheduler slurm)")
    p.add_argument("--scheduler", choices=SCHEDULERS, default=AUTO, type=canonical,
                   help="dask scheduler (default auto: threads where the positions are read "
                        "in parallel, else distributed, a local cluster of worker processes; "
                        "dask-mpi, formerly 'mpi', under mpirun)")
    p.add_argument("--chunk-mib", type=float, default=None, metavar="M",
                   help="target size of one task's block in MiB, in whole HDF5 chunks "
                        "along time (default: 128-512, the largest that leaves each worker "
                        "4 rounds of tasks, where tasks stream an uncompressed file; "
                        "else 128)")
    p.add_argument("--frames-per-block", type=int, default=None,
                   help="frames per task (overrides --chunk-mib)")
    p.add_argument("--kernel", choices=["auto", "numpy", "numba"], default="auto",
                   help="QCP implementation: numba where installed (auto), or numpy")
    p.add_argument("--out", default=None, help="write the series to a file: .nc netCDF, else CSV "
                   "(.csv, .txt or no suffix); RMSD in Angstrom, time in ps, where the file "
                   "says its units (a CSV's units and reference in <stem>.meta.json "
                   "beside it)")
    p.add_argument("--plot", default=None, help="write a plot of the series (PNG)")
    p.add_argument("--timing", default=None,
                   help="capture per-task timing records into this directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # SLURM options (with --scheduler slurm): the same group as every command's
    from h5mdx.parallel.cluster import add_cli_arguments

    add_cli_arguments(p)
    p.set_defaults(func=run)
    return p


def run_rmsd_job(ds: Any, *, select: str, workers: int, out_dir: str) -> int:
    """The example's RMSD job: C-alpha RMSD on a local cluster, CSV + plot."""
    print(f"C-alpha RMSD ({select!r}) on a local cluster of {workers} worker processes")
    result, seconds, workers = compute_rmsd(ds, select=select, scheduler="distributed",
                                            workers=workers)
    csv = os.path.join(out_dir, "rmsd.csv")
    png = os.path.join(out_dir, "rmsd.png")
    write_outputs(result, csv, png)
    n = result.sizes["time"]
    print(f"rmsd: {n} frames in {seconds:.2f} s ({n / seconds:,.0f} frames/s); "
          f"min {float(result.min()):.3f}, max {float(result.max()):.3f} "
          f"{result.attrs.get('units', '')}")
    print(f"wrote {csv} and {png}")
    return 0


def _open_zarr(path: str, topology: str | None, group: str | None) -> Any:
    """A Zarr store (as ``h5mdx convert OUT.zarr`` writes it) opened lazily, with the
    topology attached for selections and masses."""
    from h5mdx.errors import NoSuchGroupError
    from h5mdx.layout.export import open_zarr_store, zarr_particles_groups

    where = None
    if group is not None:  # the first particles group at the root, the others under it
        groups = zarr_particles_groups(path)
        name = group.strip("/").removeprefix("particles/")
        if name not in groups:
            raise NoSuchGroupError(f"the Zarr store {path} has no particles group {group!r}; "
                                   f"it has: {', '.join(map(repr, groups)) or 'none'}")
        where = groups[name]
    # chunks missing (a copy that did not finish) said before the run: the frames of a
    # missing chunk of step read as 0, and of time as NaN, in the series written
    ds = open_zarr_store(path, group=where, check_chunks=True)
    if topology is not None:
        from h5mdx.engine.topology import SUBSET_OF_ATTR, load_universe, topology_label

        universe = load_universe(topology, group)
        n, n_store = universe.atoms.n_atoms, ds.sizes.get("atom")
        atom = ds.get("atom")
        if n != n_store and atom is not None and atom.attrs.get(SUBSET_OF_ATTR) != n:
            ds = _found_by_id(ds, universe, path, n, n_store)
        ds.attrs["topology"] = topology_label(topology, universe)
    return ds


def _found_by_id(ds: Any, universe: Any, path: str, n: int, n_store: int | None) -> Any:
    """A store of selected atoms, its ``atom`` coordinate their indices in ``universe``
    (found by h5mdx's ``id``, as the h5md engine finds them); an error where it has none."""
    from h5mdx.engine.topology import SUBSET_OF_ATTR, input_indices
    from h5mdx.errors import TopologyError

    try:
        ids = input_indices(ds, universe, int(n_store or 0), path, "the store")
    except TopologyError:
        ds.close()
        raise
    if ids is None:
        ds.close()
        raise TopologyError(f"the topology {universe.filename or 'given'} has {n} atoms; the "
                            f"store {path} has {n_store}")
    return ds.assign_coords(atom=("atom", ids, {
        "long_name": "0-based atom index in the topology (the store's id)",
        SUBSET_OF_ATTR: n}))


def _canonical_units(result: Any) -> Any:
    """The RMSD of a Zarr store (stored in the file's units) in the units ``h5mdx rmsd``
    reports for an H5MD file, which it opens with ``convert_units=True``: Å, and time in
    ps. The RMSD scales with the positions, so the series is converted, not the store."""
    import numpy as np

    from h5mdx.format.units import base_factor, scaled

    def scale(attrs: dict, what: str) -> tuple[float, dict]:
        unit = attrs.get("units")
        if not unit or unit == "step":  # frames numbered by their steps: no time unit
            return 1.0, attrs
        factor, base, problem = base_factor(str(unit))
        if problem is not None:  # the run is done: its result is kept, as it is
            print(f"h5mdx rmsd: warning: {problem}; the {what} is left in {unit!r}",
                  file=sys.stderr)
        return factor, {**attrs, "units": base}

    factor, attrs = scale(result.attrs, "RMSD")
    out = scaled(result, factor).assign_attrs(attrs) if factor != 1.0 else result
    if "time" in out.coords:
        t_factor, t_attrs = scale(out["time"].attrs, "time")
        if t_factor != 1.0:
            out = out.assign_coords(time=("time", scaled(out["time"].values, t_factor, decimals=True),
                                          t_attrs))
            if "reference_time" in out.attrs:  # the reference's time in the series' unit
                out.attrs["reference_time"] = float(scaled(
                    np.array([out.attrs["reference_time"]], np.float64), t_factor,
                    decimals=True)[0])
    return out.rename(result.name)


def _note_missing(result: Any, trajectory: str) -> None:
    """Say on stderr how many frames have no RMSD (NaN): positions that read as NaN (a
    fill value, or chunks missing from a store) give no number, and a series file alone
    would not say so."""
    import numpy as np

    n_nan = int(np.isnan(result.values).sum())
    if n_nan:
        print(f"h5mdx rmsd: warning: {n_nan} of {result.sizes['time']} frames have no RMSD "
              "(NaN): their positions read as NaN (a fill value, or chunks missing from "
              f"the store; see h5mdx info {trajectory})", file=sys.stderr)


def _run_dask_mpi(args: argparse.Namespace) -> int:
    """``--scheduler dask-mpi``: every rank runs this (under mpirun); the client prints.
    Too few ranks, or --workers not the ranks less two, are usage errors, said by rank 0
    (every rank finds the same): they were said with exit status 1 and a --debug hint,
    and --workers 5 on one rank as '1 ranks give -1 workers'."""
    from h5mdx.mpi import comm_world
    from h5mdx.mpi.launch import ranks_problem, rmsd_dask_mpi

    comm = comm_world()
    problem = ranks_problem(comm.Get_size(), args.workers)
    if problem:
        if comm.Get_rank() == 0:
            from h5mdx.cli._usage import UsageError

            raise UsageError(problem)
        return 2

    values = rmsd_dask_mpi(
        args.trajectory, topology=args.topology, select=args.select,
        reference=args.reference, weights=args.weights,
        superposition=not args.no_superposition, group=args.group,
        frames_per_block=args.frames_per_block, chunk_mib=args.chunk_mib,
        kernel=args.kernel, workers=args.workers, rmsd_file=args.out, plot=args.plot,
        timing=args.timing)
    if values is not None:
        print(f"rmsd: {values.size} frames (dask-mpi); mean {values.mean():.4f}")
        _print_written(args)
    return 0


def _summary(result: Any) -> str:
    """The series in one line, as ``gmx rms`` users look for it: the first and last
    frames' values (``nan`` where a frame has none), and the mean and the largest value
    and its time of the frames that have one.

    >>> import xarray as xr
    >>> print(_summary(xr.DataArray([0.0, 2.0, float("nan")], dims="time",
    ...                             attrs={"units": "nm"})))
    rmsd (nm): first 0.0000, last nan, mean 1.0000, max 2.0000 (frame 1); 1 of 3 frames without a value
    >>> print(_summary(xr.DataArray([0.0, 2.0], dims="time", coords={"time": (
    ...     "time", [0.0, 10.0], {"units": "step"})}, attrs={"units": "Angstrom"})))
    rmsd (Å): first 0.0000, last 2.0000, mean 1.0000, max 2.0000 at step 10 (frame 1)
    >>> print(_summary(xr.DataArray([0.0, 2.0], dims="time")))
    rmsd (the file's length unit, which it does not name): first 0.0000, last 2.0000, mean 1.0000, max 2.0000 (frame 1)
    """
    import numpy as np

    values = np.asarray(result.values, dtype=np.float64)
    unit = str(result.attrs.get("units") or "")
    # "rmsd ():" said nothing of a file without units: its own length unit, unknown
    unit = {"Angstrom": "Å", "": "the file's length unit, which it does not name"}.get(
        unit, unit)
    ok = np.flatnonzero(np.isfinite(values))
    if ok.size == 0:
        return "rmsd: no frame has a value (NaN: absent atoms)"
    top = int(ok[np.argmax(values[ok])])
    when = ""
    if "time" in result.coords:
        t = result["time"].values[top]
        t_unit = result["time"].attrs.get("units", "")
        # a file without times: its frames are timed by their steps ("at time 2 step")
        when = f" at step {t:g}" if t_unit == "step" else \
            f" at time {t:g}{f' {t_unit}' if t_unit else ''}"
    missing = "" if ok.size == values.size else \
        f"; {values.size - ok.size} of {values.size} frames without a value"
    return (f"rmsd ({unit}): first {values[0]:.4f}, last {values[-1]:.4f}, "
            f"mean {values[ok].mean():.4f}, max {values[top]:.4f}{when} (frame {top}){missing}")


def _print_written(args: argparse.Namespace) -> None:
    """Name the files written: the series (and a CSV's sidecar), the plot, the timing
    records."""
    from h5mdx.analysis.series import sidecar_path

    meta = args.out and not str(args.out).lower().endswith(".nc")
    for written in (args.out, sidecar_path(args.out) if meta else None, args.plot,
                    os.path.join(args.timing, "timing.csv") if args.timing else None):
        if written:
            print(f"wrote {written}")


def _why_no_names(path: str, group: str | None = None) -> str:
    """Why ``path`` (its particles ``group``) gives no atom names to select by."""
    from h5mdx.layout.convert import is_zarr_store

    if is_zarr_store(path):
        where = f"particles group {group!r} of the Zarr store" if group else "Zarr store"
        return f"the {where} {path} holds no name coordinate"
    return (f"{path} holds no atom names (GROMACS' H5MD files hold their topology, and "
            "files with VMD's structure module; others do not)")


def _by_position_alone(select: str) -> bool:
    """Whether ``select`` selects by position alone (``prop z < 0``, ``point 0 0 0 10``):
    made on the reference frame's positions, it needs no atom names."""
    from h5mdx.analysis.reference import _by_position

    return _by_position(select, 1)


def _holds_names(path: str, group: str | None = None) -> bool:
    """Whether ``path`` gives atom names to select by: an H5MD file holding its topology,
    or a Zarr store whose particles groups have a ``name`` coordinate (a copy of such a
    file; selections are made in its coordinates)."""
    from h5mdx.engine.topology import holds_topology
    from h5mdx.layout.convert import is_zarr_store

    if not is_zarr_store(path):
        return holds_topology(path)
    from h5mdx.layout.export import zarr_group_holds

    return zarr_group_holds(path, "name", group)


def _one_trajectory(args: argparse.Namespace) -> str | None:
    """``args.trajectory`` as one name (``args.parts``: the files it joins), or None after
    saying why the files given are not one trajectory."""
    from h5mdx.cli.parts import expand
    from h5mdx.layout.convert import is_zarr_store

    given = args.trajectory if isinstance(args.trajectory, list) else [args.trajectory]
    try:
        args.parts = expand(given)
    except FileNotFoundError as err:
        print(f"h5mdx rmsd: {err}", file=sys.stderr)
        return None
    if len(args.parts) > 1:
        why = ("joins H5MD files, not Zarr stores" if any(map(is_zarr_store, args.parts))
               else "--scheduler dask-mpi reads one file" if args.scheduler == "dask-mpi"
               else None)
        if why:
            print(f"h5mdx rmsd: {len(args.parts)} trajectories given; h5mdx rmsd {why} "
                  "(h5mdx convert joins trajectories into one file)", file=sys.stderr)
            return None
    args.trajectory = args.parts[0]
    if args.scheduler == "dask-mpi" and is_zarr_store(args.trajectory):
        # said before the cluster starts: the client rank's h5md engine refused the store
        # after it, saying "h5mdx rmsd reads it"
        print(f"h5mdx rmsd: --scheduler dask-mpi reads H5MD files, not Zarr stores "
              f"({args.trajectory}): run h5mdx rmsd without mpirun (--scheduler "
              "distributed, threads or processes), or on the H5MD file it was copied from",
              file=sys.stderr)
        return None
    return args.trajectory


def _open(args: argparse.Namespace, chunk_mib: float | None) -> Any:
    """The trajectory (one file or store, or the files of ``args.parts`` joined)."""
    import xarray as xr

    from h5mdx.engine.chunking import DEFAULT_TARGET_MIB
    from h5mdx.layout.convert import is_zarr_store

    options = {"group": args.group, "topology": args.topology, "convert_units": True,
               "chunk_mib": DEFAULT_TARGET_MIB if chunk_mib is None else chunk_mib}
    if len(args.parts) > 1:
        from h5mdx.cli.parts import open_parts

        return open_parts(args.parts, **options)
    if is_zarr_store(args.trajectory):
        return _open_zarr(args.trajectory, args.topology, args.group)
    return xr.open_dataset(args.trajectory, engine="h5md", **options)


def _reference_in_range(opened: Any, reference: int) -> bool:
    """Whether ``--reference`` is a frame of the trajectory (a Dataset, or the Datasets
    of its parts), said before a scheduler starts."""
    parts = opened if isinstance(opened, list) else [opened]
    n_frames = sum(ds.sizes.get("time", 0) for ds in parts)
    if "position" not in parts[0] or not n_frames or -n_frames <= reference < n_frames:
        return True
    print(f"h5mdx rmsd: --reference {reference} is out of range: the trajectory has "
          f"{n_frames} frames (0 to {n_frames - 1}, or -1 for the last)", file=sys.stderr)
    return False


def _check_selection(opened: Any, select: str, reference: int) -> None:
    """Make ``--select`` on the first part as the RMSD will (a selection by position on
    the reference frame, of the part that holds it), so that a bad one is said before a
    scheduler starts. A selection MDAnalysis refuses, or one matching no atom, is the
    option's mistake: a usage error (exit 2; it was exit 1, as a file's problem)."""
    from h5mdx.analysis.reference import select_atoms, with_atom_data
    from h5mdx.analysis.rmsd import reference_of_parts
    from h5mdx.cli._usage import UsageError
    from h5mdx.errors import TopologyError

    ds = opened[0] if isinstance(opened, list) else opened
    topology = ds.md.topology
    ref = reference
    if isinstance(opened, list):  # the frame of the part that holds it, as compute_rmsd
        ref = reference_of_parts(opened, reference)[0]
    import warnings

    position = with_atom_data(ds, ds["position"], topology)
    with warnings.catch_warnings():  # the run's own selection says them: once, not twice
        warnings.simplefilter("ignore")
        try:
            select_atoms(position, select, topology, ref, ds.get("box_edges"))
        except TopologyError as err:
            if err.unexpected:
                raise
            raise UsageError(str(err)) from err


def _check_positions(opened: Any) -> None:
    """Raise the error the RMSD would, before a scheduler starts (a local cluster was
    started for a file of no frames), where a part holds no positions, positions that
    are not numbers (text failed at the first read, with the --debug hint), or where the
    trajectory has no frame."""
    from h5mdx.accessor import _position_of
    from h5mdx.analysis.reference import _check_dims, _no_frames

    parts = opened if isinstance(opened, list) else [opened]
    positions = [_position_of(ds) for ds in parts]
    for position in positions:
        _check_dims(position)
    if not sum(p.sizes.get("time", 0) for p in positions):  # no reference frame
        raise _no_frames(positions[0])


def _masses_problem(ds: Any, args: argparse.Namespace) -> str | None:
    """Why ``--weights mass`` has no masses to weigh by (None: it has, or it is not
    given), in the command's terms: the library's error spoke of topology=... and
    weights=<array>."""
    if args.weights != "mass" or args.topology is not None or ds.md.topology is not None:
        return None
    if "mass" in ds or "mass" in ds["position"].coords:
        return None
    return (f"--weights mass needs masses: {args.trajectory} has no 'mass' element; give "
            "--topology FILE (a PSF, TPR, PDB, ... of the same atoms, with their masses)")


def _ready(opened: Any, args: argparse.Namespace) -> bool:
    """Whether the options fit the trajectory opened (said on stderr where not), before a
    scheduler starts: --reference a frame of it, --weights mass masses to weigh by, and
    --select atoms to select."""
    ds = opened[0] if isinstance(opened, list) else opened  # the first of the parts
    _check_positions(opened)
    if not _reference_in_range(opened, args.reference):
        return False
    problem = _masses_problem(ds, args)
    if problem:
        print(f"h5mdx rmsd: {problem}", file=sys.stderr)
        return False
    if isinstance(args.select, str):
        _check_selection(opened, args.select, args.reference)
    return True


#: The schedulers whose workers are threads or processes of this machine.
_LOCAL = (AUTO, "threads", "processes", "distributed")

#: The options of the SLURM group (``--scheduler slurm``) that default to None.
_SLURM_OPTIONS = ("jobs", "cores", "memory", "walltime", "queue", "account", "interface",
                  "job_log_dir")


def _options_apply(args: argparse.Namespace) -> bool:
    """Whether ``--workers`` is possible (at least 1; with a local scheduler, at most
    the CPUs this process may use) and the SLURM options given go with
    ``--scheduler slurm`` (said on stderr where not): with another scheduler they were
    ignored, and the run was local."""
    if args.workers is not None and (args.workers < 1 or args.scheduler in _LOCAL):
        from h5mdx.cli._usage import workers_problem

        problem = workers_problem(args.workers, f"--scheduler {args.scheduler} runs its "
                                  "workers on this machine (--scheduler slurm elsewhere)")
        if problem:
            print(f"h5mdx rmsd: {problem}", file=sys.stderr)
            return False
    from h5mdx.parallel.cluster import DEFAULT_TIMEOUT

    given = [name for name in _SLURM_OPTIONS if getattr(args, name, None) is not None]
    if getattr(args, "wait_timeout", DEFAULT_TIMEOUT) != DEFAULT_TIMEOUT:
        given.append("wait_timeout")
    if given and args.scheduler != "slurm":
        names = ", ".join("--" + name.replace("_", "-") for name in given)
        verb = "applies" if len(given) == 1 else "apply"
        print(f"h5mdx rmsd: {names} {verb} to --scheduler slurm, not {args.scheduler}: add "
              "--scheduler slurm, or leave them out", file=sys.stderr)
        return False
    if args.scheduler == "slurm":
        _check_slurm_options(args)
    return True


def _check_slurm_options(args: argparse.Namespace) -> None:
    """Raise a usage error for a SLURM option value no job can have: --cores 0, --jobs 0,
    a --memory or --walltime SLURM does not take, a --wait-timeout not above 0, a
    --job-log-dir that cannot be written. They were found when the cluster started,
    after the file was opened (or after SLURM was asked, for --wait-timeout), said with
    exit status 1 and a --debug hint."""
    import warnings
    from pathlib import Path

    from h5mdx.analysis.series import check_writable
    from h5mdx.cli._usage import UsageError
    from h5mdx.parallel.cluster import slurm_options

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}: without a worker job "
                         "the computation would wait for a worker forever")
    if not args.wait_timeout > 0:  # nan, 0, -1
        raise UsageError(f"--wait-timeout must be a positive number of seconds, not "
                         f"{args.wait_timeout:g}")
    try:  # as the cluster will take them, without starting it (its start warns)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            slurm_options(cores=args.cores, memory=args.memory, walltime=args.walltime,
                          interface=None)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.job_log_dir is not None:
        try:
            check_writable(Path(args.job_log_dir) / "slurm-JOBID.out",
                           "the worker jobs' output")
        except (ValueError, PermissionError) as err:
            raise UsageError(f"--job-log-dir {args.job_log_dir!r}: {err}") from None


def _refused(args: argparse.Namespace) -> bool:
    """Check the options and the outputs before any work; print why where refused."""
    from h5mdx.cli._usage import mib_problem

    if _one_trajectory(args) is None:
        return True
    if isinstance(args.select, str) and args.topology is None and not _holds_names(
            args.trajectory, args.group) and not _by_position_alone(args.select):
        print(f"h5mdx rmsd: --select {args.select!r} needs --topology (a PSF, PDB, GRO, "
              f"TPR, ... of the same atoms): {_why_no_names(args.trajectory, args.group)}",
              file=sys.stderr)
        return True
    if not _options_apply(args):
        return True
    chunk_mib = getattr(args, "chunk_mib", None)  # None: h5mdx.rmsd's default blocks
    if chunk_mib is not None and not 0 < chunk_mib < float("inf"):  # nan, inf: exit 1
        print(f"h5mdx rmsd: --chunk-mib must be a positive, finite number of MiB, not "
              f"{chunk_mib:g}", file=sys.stderr)
        return True
    if chunk_mib is not None and (problem := mib_problem(chunk_mib)):
        print(f"h5mdx rmsd: --chunk-mib {problem}", file=sys.stderr)
        return True
    fpb = getattr(args, "frames_per_block", None)
    if fpb is not None and fpb < 1:  # it was found after the scheduler was chosen (exit 1)
        print(f"h5mdx rmsd: --frames-per-block must be at least 1, not {fpb}",
              file=sys.stderr)
        return True
    try:  # before the run, not after hours of it
        check_outputs(args.out, args.plot, args.timing)
    except (ValueError, PermissionError) as err:
        print(f"h5mdx rmsd: {err}", file=sys.stderr)
        return True
    return False


def _refused_by_a_rank(args: argparse.Namespace) -> bool:
    """:func:`_refused` on every rank of a dask-mpi job, said once by rank 0 (each rank
    printed the same refusal)."""
    import contextlib
    import io

    from h5mdx.mpi import launched_ranks

    if launched_ranks() < 2:
        return _refused(args)
    from h5mdx.mpi.launch import refused_on_any_rank

    said = io.StringIO()
    failed: BaseException | None = None
    try:
        with contextlib.redirect_stderr(said):
            refused = _refused(args)
    except BaseException as err:  # raised after the others heard: they waited for it (hung)
        failed, refused = err, True
    if not refused:
        sys.stderr.write(said.getvalue())  # notes of a check that passed
    # a rank that raised says its own error after (h5mdx.cli.main): "" tells the others
    refused = refused_on_any_rank(said.getvalue() if refused else None)
    if failed is not None:
        raise failed
    return refused


def run(args: argparse.Namespace) -> int:
    import h5mdx  # noqa: F401 - registers the ds.md accessor

    if args.scheduler == "dask-mpi":
        return 2 if _refused_by_a_rank(args) else _run_dask_mpi(args)
    if _refused(args):
        return 2
    chunk_mib = getattr(args, "chunk_mib", None)  # None: h5mdx.rmsd's default blocks
    from h5mdx.mpi import launched_ranks

    if (ranks := launched_ranks()) > 1:  # each rank would run the whole RMSD alone
        print(f"h5mdx rmsd: started by mpirun with {ranks} ranks, each of which would "
              "compute the whole RMSD and write the same outputs: run it under mpirun "
              "with --scheduler dask-mpi, or use mpirun -n N h5mdx mpi-rmsd (MPI-IO), or "
              "run h5mdx rmsd without mpirun", file=sys.stderr)
        return 2

    from h5mdx.cli.parts import NotOneTrajectory
    from h5mdx.layout.convert import is_zarr_store

    t0 = time.perf_counter()
    try:
        opened = _open(args, chunk_mib)
    except NotOneTrajectory as err:
        print(f"h5mdx rmsd: {err}", file=sys.stderr)
        return 2
    with opened:
        t_open = time.perf_counter() - t0
        parts = opened if isinstance(opened, list) else [opened]
        # the first part with frames: a part of none (a run stopped before its first
        # frame) chose a local cluster of processes ("empty or scalar dataset")
        ds = next((p for p in parts if p.sizes.get("time", 0)), parts[0])
        if not _ready(opened, args):
            return 2
        scheduler = args.scheduler
        if scheduler == AUTO:
            scheduler, why = local_scheduler(ds)
            print(f"h5mdx rmsd: scheduler {scheduler} ({why})", file=sys.stderr)
        workers = args.workers
        if workers is None:
            workers = SLURM_WORKERS if scheduler == "slurm" else usable_cpus()
        result, seconds, workers = compute_rmsd(
            opened, select=args.select, reference=args.reference, weights=args.weights,
            superposition=not args.no_superposition, scheduler=scheduler,
            workers=workers, frames_per_block=args.frames_per_block,
            chunk_mib=chunk_mib, kernel=args.kernel, progress=not args.no_progress,
            timing=args.timing, args=args,
        )
    if is_zarr_store(args.trajectory):
        result = _canonical_units(result)
    write_outputs(result, args.out, args.plot)
    _note_missing(result, args.trajectory)
    n = result.sizes["time"]
    files = f" of {len(args.parts)} files" if len(args.parts) > 1 else ""
    print(f"rmsd: {n} frame{'s' if n != 1 else ''}{files} in {seconds:.3f} s "
          f"({n / max(seconds, 1e-9):,.0f} frames/s) on {scheduler} with {workers} "
          f"worker{'s' if workers != 1 else ''} (open {t_open * 1e3:.0f} ms)")
    print(_summary(result) + ("" if args.out else "; the series: --out rmsd.csv"))
    _print_written(args)
    return 0
