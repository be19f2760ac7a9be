"""RMSD of a trajectory as an SPMD program over MPI ranks, reading through MPI-IO.

This is the split-apply-combine benchmark of the published MPI studies, as a
tool: every rank

1. opens the topology and resolves the selection (``t_init_top``); with
   ``topology_on_root`` only rank 0 does and broadcasts the selected indices and
   masses, the studies' proposed fix for the shared-topology opening cost (the
   others' time until it arrives is ``t_wait``);
2. loads the QCP kernel (numba's cache, or its compilation: ``t_warmup``, one-off
   start-up cost that the straggler analysis leaves out, as it does for dask tasks),
   waits for the others at a barrier (``t_wait``: opening with MPI-IO is collective,
   so a rank there first would wait inside the open), then opens the shared H5MD
   file with ``driver="mpio"`` and reads the reference frame (``t_init_traj``);
3. reads its balanced, chunk-aligned block of frames (``t_io``): by default a few
   MiB of whole chunks at a time into one reused buffer (``read="step"``), or the
   studies' ways, the whole block at once or frame by frame; optionally only the
   selected atoms and with collective MPI-IO;
4. computes the RMSD after optimal superposition with the batched QCP kernel
   (``t_compute``), which reads the selected atoms of whole frames in place;
5. waits for the others at a barrier (``t_wait``, added to the waits before) and
   sends its RMSD to rank 0 with ``Gatherv`` (``t_comm_gather``).

Rank 0 writes the time series and one timing record per rank (the common
schema of :mod:`h5mdx.timing.records`, backend ``"mpi-io"``). A failure of the
start-up that every rank meets alike (a bad selection, a file that is not H5MD)
is reported once, by rank 0, naming the ranks, and every rank exits with status 1; an
option that does not fit the file (:class:`OptionError`: a selection without a topology,
mass weights without masses, a reference frame out of range) is said once, by rank 0,
as it is, and every rank exits with status 2, as for a usage error.
A rank that fails alone prints its rank and the reason and aborts the whole job
(``MPI_Abort``) so that ``mpirun`` exits non-zero at once instead of hanging in a
collective call.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h5mdx.engine.chunking import READ_STEP_BYTES, read_step
from h5mdx.mpi import (
    comm_world,
    launched_by_mpirun,
    ranks_by_text,
    ranks_phrase,
    require_parallel_h5py,
)
from h5mdx.mpi.decompose import Block
from h5mdx.mpi.io import (
    PositionSource,
    SlabReader,
    open_parallel,
    position_source,
    rank_blocks,
    skips_a_filter,
)
from h5mdx.timing.phases import injected_delay
from h5mdx.timing.records import (
    PHASES,  # the one record schema, re-exported here
    spmd_wall,
)
from h5mdx.timing.report import task_table

__all__ = ["BACKEND", "PHASES", "READ_MODES", "MPIRMSDOptions", "MPIRMSDResult", "OptionError",
           "main", "run_rmsd"]

#: Value of the ``backend`` column of the timing records.
BACKEND = "mpi-io"

#: How a rank reads its block (``MPIRMSDOptions.read``); the first is the default.
READ_MODES = ("step", "block", "frame")

class OptionError(ValueError):
    """An option that does not fit the file (a selection without a topology, mass weights
    without masses, a reference frame out of range): the user's mistake, said once, by
    rank 0, in one line, with exit status 2 as a usage error (it was said as a failure
    of every rank, with status 1)."""


class ReferenceOutOfRange(OptionError, IndexError):
    """``reference`` is not a frame of the file (an ``IndexError`` too, as before)."""


@dataclass
class MPIRMSDOptions:
    """What ``h5mdx mpi-rmsd`` computes and how it reads.

    Parameters
    ----------
    trajectory : str
        The H5MD file (on a file system every rank sees).
    topology : str or None
        A topology MDAnalysis reads, for ``select`` and mass weights.
    select : str or None
        MDAnalysis selection string; None uses every atom.
    reference : int
        Frame index of the reference structure (negative counts from the end).
    out : str or None
        Output directory for ``rmsd.csv``/``rmsd.nc`` and the timing records.
    read : {"step", "block", "frame"}
        ``step`` (default): whole HDF5 chunks of about 4 MiB at a time
        (:func:`h5mdx.engine.chunking.read_step`) into one reused buffer, which the
        kernel reads while it is still in the CPU cache; ``block``: the rank's whole
        block at once (the studies' "load into memory"); ``frame``: one frame at a time.
    read_mib : float
        The size of a piece of ``read="step"``, in MiB (rounded to whole chunks, at
        least one).
    selected_only : bool
        Read only the selected atoms (hyperslabs) instead of all atoms.
    collective : bool
        Collective MPI-IO transfers instead of independent ones.
    topology_on_root : bool
        Only rank 0 reads the topology; the selection is broadcast.
    weights : {None, "mass"}
        Mass-weighted RMSD and superposition.
    superposition : bool
        Superpose before measuring (False: centre only).
    group : str or None
        The particles group (default: the only one with positions).
    out_format : {"csv", "nc"}
        Format of the RMSD file.
    convert_units : bool
        Report the RMSD in h5mdx's canonical length unit (Angstrom, as ``h5mdx rmsd``
        does) rather than in the file's unit.
    run_id : str or None
        Identifier of the run in the timing records (default: a random one).
    extra : dict
        More entries for the run's metadata (saved with the timing records), e.g. what
        launched it.
    """

    trajectory: str
    topology: str | None = None
    select: str | None = None
    reference: int = 0
    out: str | None = None
    read: str = "step"
    read_mib: float = READ_STEP_BYTES / 2**20
    selected_only: bool = False
    collective: bool = False
    topology_on_root: bool = False
    weights: str | None = None
    superposition: bool = True
    group: str | None = None
    out_format: str = "csv"
    convert_units: bool = True
    run_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raise ValueError on inconsistent options. A selection or mass weights without
        a topology take the trajectory's own, where it holds one (GROMACS' module); mass
        weights without either take the file's ``mass`` element, as ``h5mdx rmsd`` does."""
        if self.read not in READ_MODES:
            raise ValueError(f"read must be one of {READ_MODES}, got {self.read!r}")
        if not 0 < self.read_mib < float("inf"):
            raise ValueError(f"read_mib must be positive and finite, got {self.read_mib!r}")
        if self.out_format not in ("csv", "nc"):
            raise ValueError(f"out_format must be 'csv' or 'nc', got {self.out_format!r}")
        if self.weights not in (None, "mass"):
            raise ValueError(f"weights must be None or 'mass', got {self.weights!r}")
        if (self.select is not None or self.weights == "mass") and self.topology is None:
            from h5mdx.engine.topology import holds_topology

            if holds_topology(self.trajectory):  # GROMACS' H5MD: its own topology
                self.topology = self.trajectory
        if self.select is not None and self.topology is None:
            raise OptionError(
                f"a selection ({self.select!r}) needs a topology: pass --topology FILE"
            )
        if self.out is not None:  # before the run, not after it
            from h5mdx.analysis.series import check_outputs

            check_outputs(directory=self.out)


@dataclass
class MPIRMSDResult:
    """What rank 0 holds at the end of :func:`run_rmsd` (other ranks get None)."""

    rmsd: np.ndarray
    frames: np.ndarray
    time: np.ndarray | None
    step: np.ndarray | None
    unit: str | None
    records: list[dict[str, Any]]
    files: dict[str, str]
    chunks: tuple[int, ...] | None = None
    time_unit: str | None = None


class _Timer:
    """Per-rank phase accumulator (perf_counter based)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0


def _select(topology: str | None, select: str | None, weights: str | None,
            filename: str, group: str | None = None, reference: int = 0
            ) -> tuple[np.ndarray | None, np.ndarray | None, int | None]:
    """(indices or None, masses or None, the topology's atoms in the file or None). A file
    of selected atoms (h5mdx's ``id``) finds them in a topology of the whole system, as
    the h5md engine does: the selection and masses are then of those atoms. A selection
    by position is made on the ``reference`` frame (:func:`_file_frame`), as h5mdx rmsd
    makes it."""
    if topology is None:
        return None, _file_masses(filename, group) if weights == "mass" else None, None
    from h5mdx.engine.topology import load_universe, select_indices

    u = load_universe(topology, group)  # VMD's structure module: per group
    ids = _input_ids(u, filename, group)
    atoms = u if ids is None else u.atoms[ids]
    idx = select_indices(atoms, select, filename, frame=lambda: _file_frame(
        filename, group, reference, len(atoms.atoms))) if select else None
    masses = None
    if weights == "mass":
        try:
            all_masses = np.asarray(atoms.atoms.masses, dtype=np.float64)
        except (AttributeError, ValueError):  # NoDataError: a topology without masses
            all_masses = _file_masses(filename, group)  # (a structure module's), as h5mdx
        masses = all_masses[idx] if idx is not None else all_masses  # rmsd takes them
    return idx, masses, len(atoms.atoms)


def _file_frame(filename: str, group: str | None, reference: int, n_atoms: int
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """The frame ``reference`` of the file's positions in Angstrom (MDAnalysis' unit; in
    the file's own without a unit) and its box as MDAnalysis takes it (None where the
    file has none, or not periodic): what a selection by position is made on. Lengths
    are put in Angstrom by the h5md engine's rule (``length_scale``): a unit that is no
    length is an error naming the dataset, not a factor of another dimension."""
    from h5mdx.engine.topology import length_scale, mda_dimensions
    from h5mdx.format.h5md import open_h5md

    with open_h5md(filename) as f:
        source = position_source(f, group)
        el = source.element
        if source.n_atoms != n_atoms:
            raise ValueError(f"{filename} [{el.path}]: {source.n_atoms} atoms, the topology "
                             f"{n_atoms}: a selection by position needs them all")
        frame = reference % max(source.n_frames, 1)
        xyz = np.asarray(f[el.value_path][frame], dtype=np.float64)
        box = source.info.particles[source.group].box
        edges = None
        if box is not None and box.edges is not None and "periodic" in box.boundary:
            e = box.edges
            edges = np.asarray(e.data if e.data is not None else (
                f[e.value_path][frame] if e.time_dependent else f[e.value_path][()]),
                dtype=np.float64)
            if e.unit:
                edges = edges * length_scale(e.unit, "Angstrom", f"{filename} [{e.path}]")
    if el.unit:
        xyz = xyz * length_scale(el.unit, "Angstrom", f"{filename} [{el.path}]")
    return xyz, None if edges is None else mda_dimensions(edges)


def _file_masses(filename: str, group: str | None) -> np.ndarray:
    """The masses of the file's ``mass`` element (one per atom), for mass weights without a
    topology, as ``h5mdx rmsd`` takes them."""
    from h5mdx.format.h5md import open_h5md

    with open_h5md(filename) as f:
        source = position_source(f, group)
        el = source.info.particles[source.group].elements.get("mass")
        if el is None or el.time_dependent or el.shape != (source.n_atoms,):
            raise OptionError(
                f"{filename}: mass weights need masses: pass --topology FILE (/particles/"
                f"{source.group} has no mass element of one mass per atom)")
        return np.asarray(f[el.value_path][()], dtype=np.float64)


def _input_ids(universe: Any, filename: str, group: str | None) -> np.ndarray | None:
    """The file's atoms' indices in ``universe`` where the file holds a selection of its
    atoms (read with h5py, one process at a time: a small ``id`` and ``mass``); None where
    it holds them all in the topology's order."""
    from h5mdx.engine.topology import indices_in
    from h5mdx.format.h5md import open_h5md

    with open_h5md(filename) as f:
        source = position_source(f, group)
        if len(universe.atoms) < source.n_atoms:
            return None
        elements = source.info.particles[source.group].elements
        found = {}
        for name in ("id", "mass"):
            el = elements.get(name)
            if el is not None and not el.time_dependent and el.shape == (source.n_atoms,):
                found[name] = (f[el.value_path][()], el.attrs.get("long_name"))
    ids, long_name = found.get("id", (None, None))
    return indices_in(universe, source.n_atoms, ids, long_name,
                      found.get("mass", (None, None))[0], filename,
                      f"/particles/{source.group}")


def _pieces(block: Block, read: str, step: int) -> list[tuple[int, int]]:
    """The frame ranges a rank reads one after the other (``step``: frames per piece)."""
    if block.n_frames == 0:
        return []
    if read == "frame":
        step = 1
    elif read == "block":
        step = block.n_frames
    return [(a, min(block.stop, a + step)) for a in range(block.start, block.stop, step)]


def _step_frames(source: PositionSource, n_atoms_read: int, itemsize: int,
                 mib: float = READ_STEP_BYTES / 2**20) -> int:
    """Frames per piece of ``read="step"``: whole chunks of about ``mib`` MiB of what is read."""
    return read_step(n_atoms_read * int(source.element.shape[2]) * itemsize,
                     source.chunk_frames, int(mib * 2**20))


def run_rmsd(options: MPIRMSDOptions, comm: Any = None) -> MPIRMSDResult | None:
    """Run the MPI-IO RMSD program on every rank of ``comm`` (collective call).

    Parameters
    ----------
    options : MPIRMSDOptions
        What to compute; identical on every rank.
    comm : mpi4py.MPI.Intracomm, optional
        Default ``MPI.COMM_WORLD``.

    Returns
    -------
    MPIRMSDResult or None
        The RMSD series and the timing records on rank 0; None on other ranks.
    """
    require_parallel_h5py()
    if comm is None:
        comm = comm_world()
    rank = comm.Get_rank()
    # every rank checks the same options: a bad one is reported once, by rank 0
    _together(comm, _Timer(), "check", options.check)
    run_id = comm.bcast(options.run_id or uuid.uuid4().hex[:12], root=0)
    timer = _Timer()
    comm.Barrier()
    t_start = time.time()
    p0 = time.perf_counter()
    # 1. topology and selection
    idx, masses, n_top = _selection(options, comm, timer)
    # 2. the kernel, then the trajectory
    with timer.phase("warmup"):
        from h5mdx.analysis.qcp import warm_up

        warm_up()
    # opening with MPI-IO is collective: a rank there first waits for the others, which
    # is waiting, not opening (the fast rank would be the one to blame)
    with timer.phase("wait"):
        comm.Barrier()
    f = _together(comm, timer, "init_traj", open_parallel, options.trajectory, comm)
    job = _together(comm, timer, "init_traj", _open, options, comm, f, idx, masses, n_top,
                    on_fail=f.close)
    # 3 + 4. read and compute
    try:
        rmsd = _read_and_compute(options, job, timer)
    except BaseException:
        if comm.Get_size() == 1:  # the error goes up as it is (several ranks: an abort):
            job.file.close()  # closed before MPI ends, not by h5py after it
        raise
    # 5. wait and gather
    with timer.phase("wait"):
        comm.Barrier()
    with timer.phase("comm_gather"):
        result = _gather(comm, rmsd, job.blocks, job.source.n_frames)
    wall = time.perf_counter() - p0
    job.file.close()  # collective with MPI-IO; after the timed phases
    record = _record(run_id, comm, job.block, t_start, wall, timer.phases,
                     job.reader.bytes_read)
    records = comm.gather(record, root=0)
    if rank != 0:
        return None
    assert result is not None  # rank 0 holds the series
    res = _result(options, job.source, result, records)
    if options.out:
        res.files = write_outputs(res, options)
    return res


@dataclass
class _Job:
    """What a rank reads and computes: the open file, its positions, its block, the kernel."""

    file: Any
    source: Any
    blocks: list[Block]
    block: Block
    reader: SlabReader
    kernel: Any  # h5mdx.analysis.qcp.PreparedQCP, the selected atoms picked in place
    step: int  # frames per piece of read="step"


def _selection(options: MPIRMSDOptions, comm: Any, timer: _Timer
               ) -> tuple[np.ndarray | None, np.ndarray | None, int | None]:
    """The selected atoms, their masses and the topology's atom count, on every rank
    (timed as ``init_top``; with ``topology_on_root`` the other ranks' time until rank 0
    sends it is ``wait``)."""
    args = (options.topology, options.select, options.weights, options.trajectory,
            options.group, options.reference)
    if not options.topology_on_root:
        return _together(comm, timer, "init_top", _select, *args)
    payload = failure = None
    if comm.Get_rank() == 0:
        payload, failure = _attempt(comm, timer, "init_top", _select, *args)
    with timer.phase("wait"):
        payload, failure = comm.bcast((payload, failure), root=0)
    if failure is not None:
        if comm.Get_rank() == 0:
            _report([failure], comm.Get_size())
        raise _Reported(failure, _status([failure]))
    return payload


class _Reported(Exception):
    """A failure of a stage every rank runs alike, reported once by rank 0: every rank
    leaves with ``status`` (2 for an :class:`OptionError`, else 1)."""

    def __init__(self, failure: str | None, status: int = 1) -> None:
        super().__init__(failure)
        self.status = status


#: The start of a failure's text that is an :class:`OptionError`'s (said as it is).
_OPTION = "OptionError: "


def _status(seen: list[str | None]) -> int:
    """2 where every failure of ``seen`` is an :class:`OptionError`, else 1."""
    failures = [text for text in seen if text]
    return 2 if failures and all(t.startswith(_OPTION) for t in failures) else 1


def _together(comm: Any, timer: _Timer, phase: str, stage: Callable[..., Any], *args: Any,
              on_fail: Callable[[], Any] | None = None) -> Any:
    """``stage(*args)`` on every rank (timed as ``phase``), the ranks agreeing on whether
    it failed (timed as ``wait``).

    A stage every rank runs alike (the topology and selection, the open of the file) fails
    alike: rank 0 reports it once, naming the ranks, and every rank calls ``on_fail`` and
    raises :class:`_Reported` (64 ranks printed the same line 64 times). Where only some
    ranks failed, the others cannot go on without them: rank 0 reports and aborts the job.
    On one rank the error propagates as it is.
    """
    out, failure = _attempt(comm, timer, phase, stage, *args)
    with timer.phase("wait"):
        seen = comm.allgather(failure)
    if all(text is None for text in seen):
        return out
    if comm.Get_rank() == 0:
        _report(seen, comm.Get_size())
    if None in seen:  # the ranks that did not fail hold what the others lack
        if comm.Get_rank() == 0:
            comm.Abort(1)
        comm.Barrier()  # until rank 0's abort ends this rank too
    if on_fail is not None:
        on_fail()  # every rank: a collective close of the file
    raise _Reported(failure, _status(seen))


def _attempt(comm: Any, timer: _Timer, phase: str, stage: Callable[..., Any],
             *args: Any) -> tuple[Any, str | None]:
    """``(stage(*args), None)``, timed as ``phase``, or ``(None, "Type: message")`` where
    it failed; on one rank the error propagates as it is."""
    with timer.phase(phase):
        try:
            return stage(*args), None
        except Exception as err:
            if comm.Get_size() == 1:
                raise
            kind = "OptionError" if isinstance(err, OptionError) else type(err).__name__
            return None, f"{kind}: {err}"


def _report(seen: list[str | None], size: int) -> None:
    """One line per distinct failure, naming its ranks (``seen``: one entry per rank, or
    one entry for a failure of rank 0's that every rank shares)."""
    for text, ranks in ranks_by_text(seen).items():
        if text.startswith(_OPTION):  # the user's mistake, not a failure of the ranks
            print(f"h5mdx mpi-rmsd: {text[len(_OPTION):]}", file=sys.stderr, flush=True)
            continue
        who = ranks_phrase(ranks, size) if len(seen) == size else f"rank 0 of {size}"
        print(f"h5mdx mpi-rmsd: {who} failed: {text}", file=sys.stderr, flush=True)


def _open(options: MPIRMSDOptions, comm: Any, f: Any, idx: np.ndarray | None,
          masses: np.ndarray | None, n_top: int | None) -> _Job:
    """Find the positions in the open file ``f``, read the reference frame and find this
    rank's block."""
    source = position_source(f, options.group)
    if comm.Get_rank() == 0:
        _warn_problems(source, options.trajectory)
    if n_top is not None and n_top != source.n_atoms:
        from h5mdx.errors import TopologyError

        raise TopologyError(
            f"{options.trajectory}: the topology {options.topology!r} has {n_top} atoms "
            f"but the trajectory has {source.n_atoms}; pass the topology of the file's "
            "atoms (or of the whole system, where the file holds selected atoms with "
            "h5mdx's id)")
    dset = f[source.element.value_path]
    ref_index = options.reference
    if not source.n_frames:
        from h5mdx.errors import H5MDFormatError

        raise H5MDFormatError(options.trajectory, source.element.path,
                              "the positions have no frames: there is no RMSD to compute")
    if not -source.n_frames <= ref_index < source.n_frames:
        raise ReferenceOutOfRange(  # naming the file and its positions
            f"{options.trajectory} [{source.element.value_path}]: reference frame "
            f"{ref_index} is out of range for {source.n_frames} frames (0 to "
            f"{source.n_frames - 1}, or -{source.n_frames} to -1 from the end)")
    ref_index %= source.n_frames
    from h5mdx.analysis.qcp import prepare

    sel_reader = SlabReader(dset, idx)
    reference = np.asarray(sel_reader.read(ref_index, ref_index + 1)[0], dtype=np.float64)
    blocks = rank_blocks(source, comm.Get_size())
    if options.collective:
        skips = skips_a_filter(dset)
        if skips is not False:
            _independent_reads(options, source, comm, known=skips is not None)
    reader = SlabReader(
        dset, idx if options.selected_only else None, collective=options.collective
    )
    # whole frames are read: the kernel takes the selected atoms of them in place
    pick = idx if (idx is not None and not options.selected_only) else None
    kernel = prepare(reference, masses, options.superposition, atoms=pick)
    step = _step_frames(source, reader.n_sel, reader.dtype.itemsize, options.read_mib)
    return _Job(f, source, blocks, blocks[comm.Get_rank()], reader, kernel, step)


def _warn_problems(source: PositionSource, trajectory: str) -> None:
    """Warn, once, of what the scan of the file assumed to read its positions (no
    ``step``: frames numbered 0..n-1; a ``time`` of other length: ignored), as the h5md
    engine does: the series went out with those steps and times and no word."""
    import warnings

    from h5mdx.errors import H5MDConformanceWarning

    own = source.element.path.rstrip("/")
    for p in source.info.problems:
        if p.minor or not any(path == own or path.startswith(own + "/")
                              for path in (p.path, *p.shared_by)):
            continue
        warnings.warn(H5MDConformanceWarning(f"{trajectory} [{p.path}]: {p.message}; "
                                             f"{p.assumed}"), stacklevel=2)


def _independent_reads(options: MPIRMSDOptions, source: PositionSource, comm: Any,
                       known: bool = True) -> None:
    """Turn ``--collective`` off (every rank alike; rank 0 says so) for positions with a
    chunk stored without its filter, which collective reads fail on, or where that is not
    ``known`` (too many chunks to look up one by one: :func:`~h5mdx.mpi.io.skips_a_filter`);
    the records say what ran."""
    options.collective = False
    if comm.Get_rank() == 0:
        import warnings

        why = ("some chunks are stored without their compression filter (it could not "
               "shrink them), which HDF5's collective reads cannot read" if known else
               "this HDF5 cannot tell at little cost whether a chunk is stored without "
               "its compression filter, which HDF5's collective reads cannot read (HDF5 "
               ">= 1.12.3, or pyfive for this file's index, can)")
        warnings.warn(f"{options.trajectory} [{source.element.value_path}]: {why}; "
                      "reading independently instead of --collective", stacklevel=2)


def _read_and_compute(options: MPIRMSDOptions, job: _Job, timer: _Timer) -> np.ndarray:
    """The RMSD of this rank's frames, read piece by piece (phases ``io`` and ``compute``)."""
    block = job.block
    pieces = _pieces(block, options.read, job.step)
    n_loops = len(pieces)
    if options.collective:  # every rank takes part in every collective read
        n_loops = max(len(_pieces(b, options.read, job.step)) for b in job.blocks)
    rmsd = np.empty(block.n_frames, dtype=np.float64)
    # one buffer for every piece (all but "block" read the same size again and again)
    buffer = job.reader.buffer(max((b - a for a, b in pieces), default=0))
    for i in range(n_loops):
        if i >= len(pieces):
            with timer.phase("io"):
                job.reader.read_none()
            continue
        a, b = pieces[i]
        with timer.phase("io"):
            frames = job.reader.read(a, b, out=buffer[:b - a])
        with timer.phase("compute"):
            rmsd[a - block.start:b - block.start] = job.kernel(frames)
    delay = injected_delay(block.start)  # a straggler on purpose (H5MDX_TIMING_DELAY)
    if delay is not None:
        with timer.phase(delay[0]):
            time.sleep(delay[1])
    return rmsd


def _gather(comm: Any, rmsd: np.ndarray, blocks: list[Block], n_frames: int
            ) -> np.ndarray | None:
    """The whole series on rank 0 (None elsewhere)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    counts = [b.n_frames for b in blocks]
    displs = [b.start for b in blocks]
    result = np.empty(n_frames, dtype=np.float64) if rank == 0 else None
    comm.Gatherv(rmsd, [result, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0)
    return result


def _record(run_id: str, comm: Any, block: Block, t_start: float, wall: float,
            phases: dict[str, float], bytes_read: int) -> dict[str, Any]:
    """This rank's timing record (schema of :mod:`h5mdx.timing.records`)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    return {
        "run_id": run_id,
        "backend": BACKEND,
        "n_workers": size,
        "worker": f"rank-{rank}",
        "host": socket.gethostname(),
        "rank": rank,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "task_key": f"mpi-rmsd-{run_id}-{rank}",
        "kind": "rmsd",
        "frame_start": block.start,
        "frame_stop": block.stop,
        "t_start": t_start,
        "t_stop": t_start + wall,
        "wall": wall,
        "t_init_top": phases.get("init_top", 0.0),
        "t_init_traj": phases.get("init_traj", 0.0),
        "t_warmup": phases.get("warmup", 0.0),
        "t_io": phases.get("io", 0.0),
        "t_compute": phases.get("compute", 0.0),
        "t_wait": phases.get("wait", 0.0),
        "t_comm_gather": phases.get("comm_gather", 0.0),
        "bytes_read": int(bytes_read),
    }


def _result(options: MPIRMSDOptions, source: Any, result: np.ndarray,
            records: list[dict[str, Any]]) -> MPIRMSDResult:
    """Rank 0's result: the series in h5mdx's units (if asked), its time and step."""
    sampling = source.element.sampling
    unit = source.element.unit
    where = f"{options.trajectory} [{source.element.path}"
    if options.convert_units and unit is not None:
        result, unit = _in_base_unit(result, unit, f"{where}/value]", "the RMSD is")
    times = None if sampling is None or sampling.time is None else np.asarray(sampling.time)
    time_unit = None if sampling is None else sampling.time_unit
    if options.convert_units and times is not None and time_unit:
        times, time_unit = _in_base_unit(times, time_unit, f"{where}/time]", "the times are",
                                         decimals=True)
    return MPIRMSDResult(
        rmsd=result,
        frames=np.arange(source.n_frames),
        time=times,
        step=None if sampling is None else np.asarray(sampling.step),
        unit=unit,
        time_unit=time_unit,
        records=records,
        files={},
        chunks=source.element.chunks,
    )


def _in_base_unit(values: np.ndarray, unit: str, where: str, what: str, *,
                  decimals: bool = False) -> tuple[np.ndarray, str]:
    """``values`` in h5mdx's base unit for ``unit``; as they are, with a warning naming the
    file and the dataset (``where``) and ``what`` ("the RMSD is") left so, where the unit cannot be read
    (the run is done: its result is not thrown away for a label). The warning named the
    file alone, and said "the series" of the times too.
    ``decimals``: as :func:`h5mdx.format.units.scaled`'s, for times (0.0041 ns is 4.1 ps,
    as the h5md engine gives it, not 4.1000000000000005)."""
    import warnings

    from h5mdx.format.units import base_factor, scaled

    factor, base, problem = base_factor(unit)
    if problem is not None:
        warnings.warn(f"{where}: {problem}; {what} left in {unit!r}", stacklevel=2)
    return scaled(values, factor, decimals=decimals), base


def _metadata(options: MPIRMSDOptions, n_ranks: int, run_id: str,
              source_chunks: Any = None) -> dict[str, Any]:
    from h5mdx.timing import records as rec

    opts = {k: v for k, v in asdict(options).items() if k not in ("extra", "run_id")}
    extra: dict[str, Any] = {"options": opts, **options.extra}
    try:
        import mpi4py
        from mpi4py import MPI

        extra["mpi4py"] = mpi4py.__version__
        extra["mpi_library"] = MPI.Get_library_version().splitlines()[0].strip(" \t\x00")
    except ImportError:  # pragma: no cover - run_rmsd already imported it
        pass
    return rec.run_metadata(
        backend=BACKEND, n_workers=n_ranks, run_id=run_id, file=options.trajectory,
        layout={"chunks": source_chunks}, selection=options.select, **extra,
    )


def write_outputs(result: MPIRMSDResult, options: MPIRMSDOptions) -> dict[str, str]:
    """Write the RMSD series and the timing records to ``options.out`` (rank 0).

    Returns
    -------
    dict
        ``{"rmsd": path, "timing": path}``, and ``"removed"``: the series an earlier run
        left in ``out`` in the other format (``rmsd.csv`` beside a new ``rmsd.nc``), which
        would otherwise be read as this run's.
    """
    assert options.out is not None
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    import xarray as xr

    from h5mdx.analysis.series import sidecar_path, write_series

    coords: dict[str, Any] = {"frame": ("time", result.frames)}
    if result.time is not None:
        coords["time"] = ("time", result.time, {"units": result.time_unit or ""})
    if result.step is not None:
        coords["step"] = ("time", result.step)
    attrs: dict[str, Any] = {"units": result.unit} if result.unit else {}
    attrs.update(selection=options.select or "all", backend=BACKEND,  # as h5mdx.rmsd says
                 reference_frame=options.reference % max(len(result.rmsd), 1))
    da = xr.DataArray(result.rmsd, dims=("time",), coords=coords, name="rmsd", attrs=attrs)
    if len(result.rmsd):  # the reference frame's step and time, as h5mdx.rmsd says them
        from h5mdx.analysis.rmsd import reference_of_frame

        da.attrs.update(reference_of_frame(da, da.attrs["reference_frame"]))
    fmt, other = ("nc", "csv") if options.out_format == "nc" else ("csv", "nc")
    path = write_series(out / f"rmsd.{fmt}", da)
    files["rmsd"] = str(path)
    if fmt == "csv":  # its units and reference (write_series)
        files["rmsd_meta"] = str(sidecar_path(path))
    stale = out / f"rmsd.{other}"
    if fmt == "nc":  # an earlier CSV's sidecar (rmsd.meta.json): not this run's either
        sidecar_path(stale).unlink(missing_ok=True)
    if stale.is_file():  # an earlier run's series in the other format: not this run's
        stale.unlink()
        files["removed"] = str(stale)
    meta = _metadata(options, len(result.records), result.records[0]["run_id"], result.chunks)
    files["timing"] = save_records(result.records, out, meta)
    return files


def save_records(records: list[dict[str, Any]], out: Path, metadata: dict[str, Any]) -> str:
    """Validate records with :mod:`h5mdx.timing.records` and save them as ``out/timing.csv``.

    The run's metadata goes to the sidecar ``timing.meta.json``.
    """
    from h5mdx.timing import records as rec

    frame = rec.to_frame(records, metadata)
    path = rec.save(frame, Path(out) / "timing.csv", metadata)
    return str(path)


def _fail(rank: int, size: int, err: BaseException, comm: Any) -> None:
    print(
        f"h5mdx mpi-rmsd: rank {rank} of {size} failed: {type(err).__name__}: {err}",
        file=sys.stderr,
        flush=True,
    )
    comm.Abort(1)


def main(options: MPIRMSDOptions, *, verbose: bool = True) -> int:
    """Run :func:`run_rmsd` with the error handling of the command line.

    On a single rank errors propagate (the CLI prints them). On several ranks a failure
    of the start-up is printed once by rank 0 and every rank returns 1 (2 for an
    :class:`OptionError`, the user's mistake); a rank that fails
    later prints its rank and the reason and calls ``MPI_Abort(1)``.
    """
    comm = comm_world()
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1 and not launched_by_mpirun() and verbose:
        print("h5mdx mpi-rmsd: running on 1 MPI rank (not started by mpirun); for N ranks "
              "use: mpirun -n N h5mdx mpi-rmsd ...", file=sys.stderr)
    try:
        res = run_rmsd(options, comm)
    except _Reported as reported:
        return reported.status
    except Exception as err:
        if size == 1:
            raise
        _fail(rank, size, err, comm)
        return 1  # pragma: no cover - Abort does not return
    if res is not None and verbose:
        _summary(res, options)
    return 0


def _summary(res: MPIRMSDResult, options: MPIRMSDOptions) -> None:
    recs = res.records
    wall = spmd_wall(r["wall"] for r in recs)  # the longest rank's
    n = len(res.rmsd)
    unit = f" {res.unit}" if res.unit else ""
    # the reads and the kernel alone: on a short run, opening the topology and loading the
    # kernel (init_top, warmup) take most of the wall time
    work = max(float(r.get("t_io", 0.0) or 0.0) + float(r.get("t_compute", 0.0) or 0.0)
               for r in recs)
    rate = (f"; {n / work:,.0f} frames/s in the busiest rank's io + compute, the rest "
            "being start-up and the gather" if work > 0 else "")
    print(f"RMSD of {n} frames on {len(recs)} rank(s) in {wall:.3f} s "
          f"({n / wall if wall > 0 else float('inf'):,.0f} frames/s{rate}); "
          f"mean {res.rmsd.mean():.4f}{unit}, max {res.rmsd.max():.4f}{unit}")
    print(task_table(recs, ("rank", "frames", "init_top", "warmup", "init_traj", "io",
                            "compute", "wait", "gather", "other", "total")))
    for kind, path in res.files.items():
        print(f"removed {path}: an earlier run's series, in the other format" if kind == "removed"
              else f"wrote {kind}: {path}")
    if not res.files:  # as h5mdx rmsd says it
        print("the series and the per-rank timings: --out DIR")
