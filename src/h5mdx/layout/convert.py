"""Convert any trajectory MDAnalysis reads into H5MD (or Zarr), streaming.

:func:`convert` reads frames with MDAnalysis (DCD, XTC, TRR, NetCDF, H5MD,
multi-frame PDB, ...; several trajectory files are concatenated in order; not a GRO
file of several frames, of which MDAnalysis reads the first alone)
and writes them through :class:`h5mdx.format.writer.H5MDWriter` (or
:class:`h5mdx.layout.export.ZarrWriter` for an output ending in ``.zarr``). Memory holds
one output chunk of frames. The output appears under its name only when it is
complete (see :mod:`h5mdx.layout._atomic`).

Units are MDAnalysis' base units: Å, ps, Å/ps, kJ/(mol·Å); the box is written
as the (3, 3) matrix of box vectors, as MDAnalysis' H5MDWriter does.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import time as _time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from h5mdx._optional import import_optional
from h5mdx._progress import progress_bar  # noqa: F401 - used here, and re-exported
from h5mdx.errors import H5MDReadError, TopologyError
from h5mdx.format.checksums import dataset_checksums
from h5mdx.format.h5md import scaled_unit, unit_attribute
from h5mdx.format.schema import ZARR_MARKERS
from h5mdx.format.writer import (
    ELEMENT_UNITS,
    ElementSpec,
    H5MDWriter,
    Layout,
    check_group_name,
    id_element,
)
from h5mdx.layout._atomic import (
    atomic_output,
    check_target,
    raise_if_interrupted,
)
from h5mdx.layout._input_checks import (
    check_unit_factors,
    check_units_converted,
    check_whole_frames,
    frames_before,
    h5md_inputs,
    without_empty,
)

__all__ = ["ConvertStats", "convert", "is_zarr_path", "is_zarr_store", "progress_bar"]


@dataclass
class ConvertStats:
    """What :func:`convert` (or :func:`h5mdx.layout.rechunk.rechunk`) did."""

    output: str
    n_frames: int
    n_atoms: int
    elements: list[str]
    seconds: float
    bytes_written: int
    layout: str
    verified: bool = False
    steps_renumbered: bool = False
    missing: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def frames_per_second(self) -> float:
        """Frames written per second."""
        return self.n_frames / self.seconds if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        """One line for the command line."""
        mib = self.bytes_written / 2**20
        what = ", ".join(self.elements) or "no time series: the file's data copied as stored"
        frames = f"{self.n_frames} frame{'' if self.n_frames == 1 else 's'}"
        text = (f"wrote {self.output}: {frames} x {self.n_atoms} atoms "
                f"({what}), {mib:.1f} MiB, {self.layout}; "
                f"{self.seconds:.2f} s, {_rate(self.frames_per_second)} frames/s")
        if self.verified:
            text += "; verified"
        return text

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        d = asdict(self)
        d["frames_per_second"] = self.frames_per_second
        return d


def _rate(per_second: float) -> str:
    """Frames a second as the summary shows them: whole from 10 up, else 2 significant
    digits (a frame written in 2 s read "0 frames/s")."""
    return f"{per_second:.0f}" if per_second >= 10 or per_second == 0 \
        or not math.isfinite(per_second) else f"{per_second:.2g}"


def is_zarr_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a Zarr store (``*.zarr`` in any case, ``OUT.ZARR`` too, or an
    existing Zarr directory)."""
    p = os.fspath(path).rstrip("/")
    if p.lower().endswith(".zarr"):
        return True
    return os.path.isdir(p) and any(os.path.exists(os.path.join(p, m)) for m in ZARR_MARKERS)


def is_zarr_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an existing Zarr store to read (a directory; :func:`is_zarr_path`
    also takes the name of one to write)."""
    return os.path.isdir(path) and is_zarr_path(path)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f))
                   for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path) if os.path.exists(path) else 0


def _universe(topology: Any, trajectories: Sequence[Any], *, format: str | None = None,
              topology_format: str | None = None) -> Any:
    mda = import_optional("MDAnalysis", "reading trajectories to convert")
    if hasattr(topology, "trajectory") and hasattr(topology, "atoms"):
        if trajectories:
            raise ValueError("pass trajectories either in the Universe or as files, not both")
        if format or topology_format:
            raise ValueError("format= and topology_format= apply to files, not a Universe")
        return topology
    if not isinstance(topology, (str, os.PathLike)):
        raise TypeError(_not_a_topology(topology))
    kwargs = {k: v for k, v in (("format", format), ("topology_format", topology_format)) if v}
    trajs = [os.fspath(t) for t in trajectories]
    for t in [topology, *trajs]:
        if isinstance(t, (str, os.PathLike)) and not os.path.exists(t):
            raise FileNotFoundError(f"No such file: {os.fspath(t)!r}")
        if isinstance(t, (str, os.PathLike)) and os.path.isdir(t):
            raise TopologyError(_directory_input(os.fspath(t)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if not trajs:
                u = mda.Universe(os.fspath(topology), **kwargs)
            else:
                u = mda.Universe(os.fspath(topology), trajs if len(trajs) > 1 else trajs[0],
                                 **kwargs)
        except Exception as err:  # MDAnalysis raises many kinds of errors
            _release_quietly(err)
            what = f" with {', '.join(repr(t) for t in trajs)}" if trajs else ""
            unknown = _unknown_format(str(err))
            # the hint where the format was the trouble, not for a damaged or locked file
            hint = ("" if unknown or kwargs or "format" not in str(err).lower() else
                    "; where MDAnalysis cannot tell a format from the file name, give it "
                    "(format=, topology_format=; --format, --topology-format)")
            # not for atoms of another count: no other reader of the file helps there
            hint += "" if "number of atoms" in str(err) else _h5md_hint(trajs)
            # some say nothing (an H5MD file of 0 frames); some say it in several lines
            reason = unknown or _one_line(str(err)) or type(err).__name__
            other = _other_hdf5(trajs)
            if other is not None:  # MDTraj's file, said as such, not as 'H5MD?'
                raise TopologyError(f"MDAnalysis cannot read {other}") from err
            raise TopologyError(
                f"MDAnalysis cannot read {os.fspath(topology)!r}{what}: {reason}{hint}"
            ) from err
    if not hasattr(u, "trajectory"):
        raise TopologyError(f"{os.fspath(topology)!r} holds no coordinates MDAnalysis reads: "
                            "give a trajectory file after it")
    return u


def _not_a_topology(topology: Any) -> str:
    """What to say of a topology that is neither a file nor a Universe (an AtomGroup,
    given for the atoms to write, failed with 'expected str, bytes or os.PathLike object,
    not AtomGroup' from the message of the error that said so)."""
    if hasattr(topology, "universe") and hasattr(topology, "indices"):
        return (f"convert takes a topology file or a Universe, not an "
                f"{type(topology).__name__} ({len(topology.indices)} atoms): give its "
                "Universe and select the atoms with select= (convert(ag.universe, out=..., "
                "select='protein'); --select on the command line)")
    return (f"convert takes a topology file (a path) or an MDAnalysis Universe, not "
            f"{type(topology).__name__}")


def _inputs(topology: Any, trajectories: Sequence[Any]) -> list[str]:
    """The files convert reads, which it never writes over: those named, or those the
    Universe given reads."""
    inputs = [os.fspath(t) for t in trajectories]
    if isinstance(topology, (str, os.PathLike)):
        return [*inputs, os.fspath(topology)]
    return [*inputs, *_universe_files(topology)]


def _universe_files(u: Any) -> list[str]:
    """The files a Universe reads: its topology's and its trajectory's (each one of a
    chain); none for one built in memory."""
    traj = getattr(u, "trajectory", None)
    chain = getattr(traj, "filenames", None)  # a ChainReader's, as an array
    files = [getattr(u, "filename", None),
             *(list(chain) if chain is not None else [getattr(traj, "filename", None)])]
    return [str(os.fspath(f)) for f in files if isinstance(f, (str, os.PathLike))]


def _directory_input(path: str) -> str:
    """What to say of a directory given as a topology or trajectory (MDAnalysis said it
    knew no format '' of it, and listed its formats)."""
    if is_zarr_store(path):
        return (f"{path!r} is a Zarr store, not a file MDAnalysis reads: "
                f"xr.open_zarr({path!r}).md.to_h5md(OUT) writes it as H5MD (after import "
                "h5mdx, which gives Datasets .md), and h5mdx info "
                "and h5mdx rmsd read it as it is")
    return f"{path!r} is a directory, not a topology or trajectory file"


def _other_hdf5(trajectories: Sequence[str]) -> str | None:
    """What the scan says of the first input that is an HDF5 file of no H5MD (MDTraj's,
    MDANSE's: which program reads it); None where there is none."""
    from h5mdx.errors import H5MDFormatError
    from h5mdx.format.h5md import scan

    others = [f.filename for f in h5md_inputs(trajectories)
              if "h5md" not in f and "particles" not in f]
    for name in others:
        try:
            scan(name)
        except H5MDFormatError as err:
            return str(err)
        except (OSError, ValueError):
            continue
    return None


def _one_line(message: str) -> str:
    """MDAnalysis' message of several lines (the atom counts of a topology and a
    trajectory that differ) in one.

    >>> _one_line("files don't have the same number of atoms!\\nTopology number of atoms 3")
    "files don't have the same number of atoms!; Topology number of atoms 3"
    """
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


#: Formats named by a file's suffix that MDAnalysis knows by another name
_FORMAT_ALIASES = {"LAMMPSTRJ": "LAMMPSDUMP", "DUMP": "LAMMPSDUMP", "NETCDF": "NCDF",
                   "H5": "H5MD", "HDF5": "H5MD"}


def _unknown_format(message: str) -> str | None:
    """MDAnalysis' many-line error for a format it does not know (named by a file's suffix,
    or given), said in one line with the keyword to give it and the nearest format it knows;
    None for other errors.

    >>> print(_unknown_format("Unknown coordinate trajectory format 'LAMMPSTRJ' for 'a.lammpstrj'."
    ...       " The FORMATs dict_keys(['DCD', 'LAMMPSDUMP', 'XTC']) are implemented"))
    it knows no trajectory format 'LAMMPSTRJ' (of 'a.lammpstrj'); give one with --format (format=): LAMMPSDUMP?
    """
    import ast
    import difflib
    import re

    traj = re.search(r"Unknown coordinate trajectory format '([^']*)' for '([^']*)'", message)
    top = re.search(r"'([^']*)' isn't a valid topology format", message)
    if traj is None and top is None:
        return None
    known: list[str] = []
    listed = re.search(r"dict_keys\((\[[^\]]*\])\)", message)
    if listed is not None:
        with contextlib.suppress(ValueError, SyntaxError):
            known = [str(k) for k in ast.literal_eval(listed.group(1))]
    if traj is not None:
        fmt, what = traj.group(1), f"trajectory format {traj.group(1)!r} (of {traj.group(2)!r})"
        option = "--format (format=)"
    else:
        assert top is not None
        fmt, what = top.group(1), f"topology format {top.group(1)!r}"
        option = "--topology-format (topology_format=)"
    alias = _FORMAT_ALIASES.get(fmt.upper())
    near = [alias] if alias else difflib.get_close_matches(fmt.upper(), known, n=2, cutoff=0.6)
    guess = ": " + " or ".join(near) + "?" if near else ""
    listing = f" (MDAnalysis' formats: {', '.join(known)})" if known and not near else ""
    return f"it knows no {what}; give one with {option}{guess}{listing}"


def _h5md_hint(trajectories: Sequence[str]) -> str:
    """Where MDAnalysis failed on H5MD inputs (other programs' files often lack what its
    reader needs: units it knows, a box), what reads them: h5mdx itself."""
    import h5py

    h5md, empty = [], []
    for f in h5md_inputs(trajectories):
        with contextlib.suppress(OSError, TypeError):
            if "h5md" in f or "particles" in f:
                h5md.append(f.filename)
                positions = [obj for obj in f.get("particles", {}).values()
                             if isinstance(obj, h5py.Group) and "position/value" in obj]
                if positions and all(g["position/value"].shape[:1] == (0,)
                                     for g in positions):
                    empty.append(f.filename)
    if empty:
        return f" ({', '.join(empty)}: the positions hold no frames; there is nothing to convert)"
    if not h5md:
        return ""
    return (f". h5mdx reads {', '.join(h5md)} itself: h5mdx rechunk IN OUT copies an H5MD "
            "file to another layout (or Zarr), and xr.open_dataset(IN, engine='h5md') with "
            "ds.md.to_h5md(OUT) writes a selection of it")


def _species(atoms: Any) -> tuple[np.ndarray, list[str]] | None:
    for attr in ("types", "elements", "names"):
        try:
            labels = np.asarray(getattr(atoms, attr)).astype(str)
        except (AttributeError, ValueError):
            continue
        uniq, first, codes = np.unique(labels, return_index=True, return_inverse=True)
        order = np.argsort(first)  # codes in order of first appearance
        remap = np.empty_like(order)
        remap[order] = np.arange(order.size)
        return remap[codes].astype(np.int32), [str(u) for u in uniq[order]]
    return None


def _module_topology(atoms: Any) -> tuple[Any, np.ndarray | None]:
    """GROMACS' topology module of ``atoms`` and their bonds (0-based indices among
    them), where the atoms come from a topology with molecule types and numbers (a TPR
    file) and the module gives MDAnalysis' reading of it back exactly (names, residues,
    segments, masses, charges, molecules: :func:`h5mdx.engine.topology.module_of`);
    (None, None) otherwise. The written file then selects atoms by name without the
    topology file."""
    from h5mdx.engine.topology import module_of

    coords: dict[str, Any] = {}
    for coord, attr in (("name", "names"), ("resname", "resnames"), ("resid", "resids"),
                        ("segid", "segids"), ("mass", "masses"), ("charge", "charges"),
                        ("moltype", "moltypes"), ("molnum", "molnums")):
        try:
            coords[coord] = np.asarray(getattr(atoms, attr))
        except (AttributeError, ValueError):  # MDAnalysis' NoDataError: not a TPR's atoms
            return None, None
    numbers = _atomic_numbers(atoms)
    if numbers is not None:
        coords["species"] = numbers
    module = module_of(coords)
    if module is None:
        return None, None
    return module, _bonds_among(atoms)


def _atomic_numbers(atoms: Any) -> np.ndarray | None:
    """The atomic numbers of MDAnalysis ``atoms`` from their elements (0 for none: a
    virtual site); None where the topology gives no elements."""
    try:
        from MDAnalysis.guesser.tables import SYMB2Z

        return np.array([SYMB2Z.get(str(e).capitalize(), 0) for e in atoms.elements],
                        dtype=np.int32)
    except (AttributeError, ValueError, ImportError):  # MDAnalysis' NoDataError: none
        return None


def _bonds_among(atoms: Any) -> np.ndarray | None:
    """The bonds between ``atoms`` as ``(n, 2)`` 0-based indices among them; None where
    the topology has none."""
    try:
        pairs = np.asarray(atoms.bonds.indices, dtype=np.int64).reshape(-1, 2)
    except (AttributeError, ValueError):  # MDAnalysis' NoDataError: no bonds
        return None
    if not pairs.size:
        return None
    where = np.full(int(atoms.universe.atoms.n_atoms), -1, dtype=np.int64)
    where[atoms.indices] = np.arange(atoms.n_atoms)
    local = where[pairs]
    return local[(local >= 0).all(axis=1)]


def _vmd_structure(atoms: Any, out: str | os.PathLike[str] = "") -> tuple[np.ndarray, Any] | None:
    """The species and VMD's structure module of ``atoms`` whose topology names them
    (a PSF, PDB, GRO: :func:`h5mdx.format.vmd_structure.from_atoms`), so that the
    written file selects atoms by name, residue or segment without the topology file,
    and VMD shows them; None without names. What the module cannot hold is warned about
    (naming ``out``)."""
    from h5mdx.format.vmd_structure import from_atoms

    per_atom: dict[str, np.ndarray] = {}
    for coord, attr in (("name", "names"), ("type", "types"), ("mass", "masses"),
                        ("charge", "charges"), ("resid", "resids"), ("resname", "resnames"),
                        ("segid", "segids"), ("chainID", "chainIDs")):
        try:
            values = np.asarray(getattr(atoms, attr))
        except (AttributeError, ValueError):  # MDAnalysis' NoDataError: not in this topology
            continue
        per_atom[coord] = values.astype(str) if values.dtype == object else values
    def note(path: str, problem: str, assumed: str) -> None:
        # note < _residues < from_atoms < _vmd_structure < _writer < convert < its caller
        warnings.warn(f"{os.fspath(out)} [{path}]: {problem}; {assumed}", UserWarning,
                      stacklevel=7)

    return from_atoms(per_atom, _bonds_among(atoms), note=note)


def _static(atoms: Any) -> dict[str, tuple[Any, str | None, dict[str, Any]]]:
    out: dict[str, tuple[Any, str | None, dict[str, Any]]] = {}
    sp = _species(atoms)
    if sp is not None:
        out["species"] = (sp[0], None, {"labels": sp[1]})
    for name, attr in (("mass", "masses"), ("charge", "charges")):
        try:
            values = np.asarray(getattr(atoms, attr), dtype=np.float64)
        except (AttributeError, ValueError):
            continue
        out[name] = (values, ELEMENT_UNITS[name], {})
    return out


class _Observables:
    """The numbers a trajectory reader gives per frame besides step and time (MDAnalysis'
    ``ts.data``: a TRR's ``lambda``, a TRZ's energies, which it gives as arrays of one
    value), written as ``/observables/<name>`` on the frames' steps and times, as
    MDAnalysis' H5MDWriter does. One value per frame only: a PDB's per-atom occupancy is
    no per-frame value, and other arrays (a TRZ's pressure tensor) are noted as left out
    (``n_atoms``: the atoms' count, which tells per-atom arrays); one a frame lacks is
    left out."""

    SKIP = frozenset({"step", "time", "dt", "time_offset"})

    def __init__(self, n_atoms: int | None = None) -> None:
        self.values: dict[str, list[Any]] = {}
        self.left_out: set[str] = set()
        self.not_one: dict[str, tuple[int, ...]] = {}
        self.n_atoms = n_atoms
        self.steps: list[int] = []
        self.times: list[float] = []

    def add(self, ts: Any, step: int, time: float) -> None:
        n = len(self.steps)
        for key, value in getattr(ts, "data", {}).items():
            if key in self.SKIP or key in self.left_out:
                continue
            if np.asarray(value).dtype.kind not in "biuf":
                continue
            if np.size(value) != 1:  # an array: per atom, or several values a frame
                shape = np.shape(value)
                if shape and shape[0] != self.n_atoms:
                    self.not_one.setdefault(str(key), shape)
                continue
            got = self.values.setdefault(str(key), [])
            got.append(np.asarray(value).reshape(()))  # a TRZ's (1,) arrays: the value
        for key in [k for k, got in self.values.items() if len(got) != n + 1]:
            self.left_out.add(key)  # missing from a frame, or new after the first
            del self.values[key]
        self.steps.append(step)
        self.times.append(time)

    def write(self, writer: Any, zarr_out: bool, units: dict[str, str]) -> list[str]:
        """Write them (H5MD), each with its unit in ``units`` (an H5MD input's); the notes
        on what was left out."""
        notes = [f"observable {k!r} left out: not in every frame" for k in sorted(self.left_out)]
        notes += [f"observable {k!r} left out: {int(np.prod(shape))} values a frame "
                  f"(shape {shape}); convert writes those of one value"
                  for k, shape in sorted(self.not_one.items()) if k not in self.values]
        if zarr_out and self.values:
            return [*notes, f"observables {sorted(self.values)} not written (a Zarr output "
                    "holds the particles group only)"]
        for key, got in self.values.items():
            value = np.asarray(got)
            writer.add_element(ElementSpec(key, (), value.dtype, units.get(key)), value,
                               self.steps, self.times, time_unit="ps", observable=True)
        return notes


class _Steps:
    """Integer steps from ``ts.data['step']`` and times from ``ts.time``, kept strictly
    increasing.

    Concatenated files that restart at 0 (or files without steps) continue from the
    last step by the last observed increment; their times continue the same way, by the
    last time increment, so that ``time`` stays an increasing index (``ds.sel(time=...)``).
    """

    def __init__(self) -> None:
        self.prev: int | None = None
        self.delta = 1
        self.offset = 0
        self.prev_time: float | None = None
        self.dt = 0.0
        self.time_offset = 0.0
        self.renumbered = False

    def __call__(self, ts: Any) -> tuple[int, float]:
        raw = ts.data.get("step")
        value = int(raw) if raw is not None else int(ts.frame)
        value += self.offset
        time = float(ts.time) + self.time_offset
        if self.prev is not None:
            if value <= self.prev:
                self.offset += self.prev + self.delta - value
                value = self.prev + self.delta
                self.renumbered = True
                if self.prev_time is not None and time <= self.prev_time:
                    # no increment seen yet (one frame before the restart): the reader's
                    dt = self.dt if self.dt > 0 else _reader_dt(ts)
                    later = self.prev_time + dt
                    self.time_offset += later - time
                    time = later
            else:
                self.delta = value - self.prev
                if self.prev_time is not None:
                    self.dt = time - self.prev_time
        self.prev = value
        self.prev_time = time
        return value, time


def _reader_dt(ts: Any) -> float:
    """The time between frames the trajectory reader gives (1 where it gives none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Reader has no dt information, set to 1.0 ps"
        try:
            dt = float(ts.dt)
        except (AttributeError, TypeError, ValueError):
            return 1.0
    return dt if np.isfinite(dt) and dt > 0 else 1.0


def _atoms(u: Any, select: str | None) -> tuple[Any, np.ndarray | None]:
    """The atoms to write, and their indices (None: all atoms, in order)."""
    if select:
        # the topology it selects in, named (the error said neither file nor atoms)
        of = f"{getattr(u, 'filename', None) or 'the Universe'} ({u.atoms.n_atoms} atoms)"
        try:
            atoms = u.select_atoms(select)
        except Exception as err:  # MDAnalysis SelectionError and friends
            raise TopologyError(f"cannot use the selection {select!r} on {of}: {err}"
                                ) from err
        if atoms.n_atoms == 0:
            raise TopologyError(f"the selection {select!r} matches none of the atoms of {of}")
    else:
        atoms = u.atoms
    indices = None if atoms.n_atoms == u.atoms.n_atoms and not select else atoms.indices
    return atoms, indices


class NoFramesError(ValueError):
    """``start``, ``stop`` and ``step`` select none of the ``n_frames`` frames of the
    trajectory (the command line says it with its options)."""

    def __init__(self, n_frames: int, start: int | None, stop: int | None,
                 step: int | None) -> None:
        super().__init__(f"no frames to write: the trajectory has {n_frames} frames "
                         f"(start={start}, stop={stop}, step={step})")
        self.n_frames, self.start, self.stop, self.step = n_frames, start, stop, step


def _frames(u: Any, start: int | None, stop: int | None, step: int | None
            ) -> tuple[Any, Any, list[warnings.WarningMessage]]:
    """The frames to write, the first of them (the Timestep that decides the elements), and
    what MDAnalysis warned reading it (said once, in the notes, with the other frames')."""
    if step is not None and step < 1:
        raise ValueError(f"step must be a positive number of frames, not {step}: H5MD stores "
                         "frames in the order of their steps")
    frames = u.trajectory[slice(start, stop, step)]
    if len(frames) == 0:
        raise NoFramesError(len(u.trajectory), start, stop, step)
    first = range(*slice(start, stop, step).indices(u.trajectory.n_frames))[0]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ts0 = u.trajectory[first]
    if _single_frame(u.trajectory):
        # its frame as the Universe holds it: iterating a single-frame reader reads its
        # file again, and the box set (u.dimensions = ...) or the atoms moved since were
        # lost, the box written as zeros; MDAnalysis' writers write it so
        frames = [ts0]
    return frames, ts0, said


def _single_frame(reader: Any) -> bool:
    """Whether ``reader`` is one of MDAnalysis' single-frame readers (a PDB, GRO, CRD
    file's: ``SingleFrameReaderBase``)."""
    from MDAnalysis.coordinates.base import SingleFrameReaderBase

    return isinstance(reader, SingleFrameReaderBase)


def _element_specs(ts0: Any, n: int, velocities: bool | None, forces: bool | None
                   ) -> tuple[list[ElementSpec], dict[str, bool], bool]:
    """The time-dependent elements to write, which of velocity/force, and whether a box."""
    want = {}
    for name, flag, has in (("velocity", velocities, ts0.has_velocities),
                            ("force", forces, ts0.has_forces)):
        if flag and not has:
            option = {"velocity": "velocities", "force": "forces"}[name]
            raise ValueError(
                f"the trajectory has no {option} in its first frame; drop --{option} "
                f"({option}=True)"
            )
        want[name] = bool(has) if flag is None else bool(flag)
    specs = [ElementSpec("position", (n, 3), np.float32, ELEMENT_UNITS["position"])]
    for name in ("velocity", "force"):
        if want[name]:
            specs.append(ElementSpec(name, (n, 3), np.float32, ELEMENT_UNITS[name]))
    dims = ts0.dimensions
    has_box = dims is not None and bool(np.all(np.asarray(dims[:3]) > 0))
    if has_box:
        specs.append(ElementSpec("box_edges", (3, 3), np.float32, ELEMENT_UNITS["box_edges"]))
    return specs, want, has_box


#: The names an output may have: H5MD (HDF5) or Zarr; or no extension.
_OUTPUT_SUFFIXES = (".h5md", ".h5", ".hdf5", ".hdf", ".zarr", "")


def _check_output_name(out: str, zarr_out: bool, trajectories: bool,
                       command: str = "convert") -> None:
    """Refuse an output named as another format (``out.dcd`` was written as HDF5; and
    ``h5mdx convert top.gro traj.xtc``, the output forgotten, took the trajectory as it);
    ``command`` names the writer in the message."""
    if not out:
        raise ValueError("give the output path (out=...)")
    suffix = os.path.splitext(out.rstrip("/"))[1].lower()
    if zarr_out or suffix in _OUTPUT_SUFFIXES:
        return
    hint = "" if trajectories else (
        "; did you forget the output? (h5mdx convert TOPOLOGY [TRAJECTORY ...] OUT.h5md: "
        "the last path is the output)")
    raise ValueError(f"the output {out!r} is named as a {suffix} file: {command} writes "
                     f"H5MD (.h5md, .h5, .hdf5) or Zarr (.zarr){hint}")


def _check_target(out: str, overwrite: bool, inputs: list[str], zarr_out: bool,
                  trajectories: bool) -> None:
    """Refuse the output early, before MDAnalysis spends time on the input
    (:func:`h5mdx.layout._atomic.check_target`); an existing one given with no trajectory
    may be the trajectory, the output forgotten (``h5mdx convert top.pdb traj.h5md``):
    said so, where the error advised --overwrite, which wrote the topology's frame over it."""
    try:
        check_target(out, overwrite=overwrite, inputs=inputs, directory=zarr_out,
                     hdf5=not zarr_out)
    except FileExistsError as err:
        if trajectories:
            raise
        raise FileExistsError(
            f"{out!r} already exists, and with no trajectory given convert writes the "
            "topology's own frames: did you forget the output? (h5mdx convert TOPOLOGY "
            "[TRAJECTORY ...] OUT.h5md: the last path is the output); to replace it with "
            "the topology's frames, pass overwrite=True (--overwrite on the command line)"
        ) from err


def _writer(tmp: str, zarr_out: bool, specs: list[ElementSpec], n_frames: int,
            layout: Layout, group: str, static: dict[str, Any], verify: bool,
            atoms: Any, out: str | os.PathLike[str] = "") -> Any:
    """An H5MD or a Zarr writer of the elements (an H5MD file also holds GROMACS'
    topology module of ``atoms``, where they have one: :func:`_module_topology`, else
    VMD's structure module, where their topology names them: :func:`_vmd_structure`)."""
    topology, bonds = _module_topology(atoms)
    structure = None
    found = _vmd_structure(atoms, out) if topology is None else None
    if found is not None:  # species one per name, type and mass, as the module holds them
        species, structure = found
        static = {**static, "species": (species, None, {
            "labels": list(structure.datasets["name"].tolist())})}
    if zarr_out:  # the store holds the coordinates the engine serves from the module
        from h5mdx.engine.topology import module_coords
        from h5mdx.format.vmd_structure import COORD_ATTRS, per_atom
        from h5mdx.layout.export import ZarrWriter

        coords = {} if structure is None else {
            k: (v, COORD_ATTRS.get(k, {})) for k, v in per_atom(
                structure, static["species"][0], len(static["species"][0]), group,
                lambda *_: None).items() if k not in static}
        if topology is not None:  # GROMACS' module (a TPR's atoms): its names, residues
            coords = {k: v for k, v in module_coords(topology).items() if k not in static}
        return ZarrWriter(tmp, specs, n_frames=n_frames, layout=layout, group=group,
                          static=static, checksum=verify, atom_coords=coords)
    return H5MDWriter(tmp, specs, n_frames=n_frames, layout=layout, group=group,
                      static=static, checksum=verify, topology=topology, bonds=bonds,
                      structure=structure)


def _frame_arrays(ts: Any, indices: np.ndarray | None, want: dict[str, bool], has_box: bool,
                  nan: np.ndarray, missing: dict[str, int],
                  unwritten: dict[str, int] | None = None) -> dict[str, Any]:
    """The arrays of one frame; a velocity, force or box the frame lacks counts in ``missing``,
    one it has that is not written (the first frame lacked it) in ``unwritten``."""
    unwritten = {} if unwritten is None else unwritten
    arrays: dict[str, Any] = {}
    pos = ts.positions
    arrays["position"] = pos if indices is None else pos[indices]
    for name, attr in (("velocity", "velocities"), ("force", "forces")):
        if want[name]:
            if getattr(ts, f"has_{attr}"):
                v = getattr(ts, attr)
                arrays[name] = v if indices is None else v[indices]
            else:
                arrays[name] = nan
                missing[name] += 1
        elif name in unwritten and getattr(ts, f"has_{attr}"):
            unwritten[name] += 1
    d = ts.dimensions
    boxed = d is not None and bool(np.all(np.asarray(d[:3]) > 0))
    if has_box:
        if not boxed:
            arrays["box_edges"] = np.zeros((3, 3), np.float32)
            missing["box_edges"] += 1
        else:
            arrays["box_edges"] = ts.triclinic_dimensions
    elif boxed and "box_edges" in unwritten:
        unwritten["box_edges"] += 1
    return arrays


def _unwritten(want: dict[str, bool], has_box: bool, velocities: bool | None,
               forces: bool | None) -> dict[str, int]:
    """A count for each element the first frame lacks, so not written, that was not
    refused (``velocities``/``forces`` False): frames that have it count there."""
    flags = {"velocity": velocities, "force": forces}
    counts = {name: 0 for name in ("velocity", "force")
              if not want[name] and flags[name] is None}
    if not has_box:
        counts["box_edges"] = 0
    return counts


def _unwritten_notes(unwritten: dict[str, int]) -> list[str]:
    """What :func:`_unwritten` counted, said: frames whose velocities, forces or box were
    not written, because the first frame written has none."""
    what = {"velocity": "velocities", "force": "forces", "box_edges": "a box"}
    return [f"{n} frame{'' if n == 1 else 's'} had {what[name]}, not written: the first "
            f"frame written has none, and it decides the elements written (--start at a "
            f"frame with {what[name]} to write them)"
            for name, n in unwritten.items() if n]


def _verify(expected: dict[str, str], tmp: str, out: str, zarr_out: bool) -> None:
    """Read the output back and compare its checksums with the writer's."""
    if zarr_out:
        from h5mdx.layout.export import zarr_checksums

        got = zarr_checksums(tmp, expected)
    else:
        got = dataset_checksums(tmp, expected)
    bad = [p for p in expected if expected[p] != got[p]]
    if bad:
        raise H5MDReadError(out, bad[0], "verification failed: the data read back "
                            "differs from the data written")


def convert(
    topology: Any,
    trajectories: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    out: str | os.PathLike[str] = "",
    *,
    select: str | None = None,
    start: int | None = None,
    stop: int | None = None,
    step: int | None = None,
    frames_per_chunk: int | None = None,
    chunk_mib: float | None = None,
    contiguous: bool = False,
    compression: str | None = None,
    velocities: bool | None = None,
    forces: bool | None = None,
    group: str = "trajectory",
    progress: bool = True,
    overwrite: bool = False,
    verify: bool = False,
    format: str | None = None,
    topology_format: str | None = None,
    partial: bool = False,
) -> ConvertStats:
    """Convert a trajectory MDAnalysis reads into an H5MD 1.1 file or a Zarr store.

    Parameters
    ----------
    topology : str, path-like or MDAnalysis.Universe
        Any topology file MDAnalysis reads (PSF, PDB, GRO, TPR, PRMTOP, ...), or
        a Universe (then ``trajectories`` must be empty).
    trajectories : path or sequence of paths
        Trajectory files, concatenated in order (empty: the topology's own frames,
        e.g. a multi-frame PDB).
    out : str or path-like
        Output file; a name ending in ``.zarr`` writes a Zarr store.
    select : str, optional
        MDAnalysis selection of the atoms to write.
    start, stop, step : int, optional
        Frame slice.
    frames_per_chunk, chunk_mib, contiguous, compression
        The layout (see :class:`h5mdx.format.writer.Layout`); default chunks of whole
        frames of about 4 MiB, no compression.
    velocities, forces : bool, optional
        Write velocities/forces: None writes them when the first frame has them,
        True requires them, False skips them. Frames without them get NaN.
    group : str, default "trajectory"
        Name of the particles group.
    progress : bool, default True
        Show a progress bar.
    overwrite : bool, default False
        Replace an existing output.
    verify : bool, default False
        Re-read the output and compare per-element checksums with what was written.
    format, topology_format : str, optional
        MDAnalysis' ``format`` and ``topology_format`` of :class:`MDAnalysis.core.universe.Universe`,
        where it cannot tell them from the file names (``"LAMMPSDUMP"``, ``"DATA"``).
    partial : bool, default False
        Convert the frames MDAnalysis reads of an input that ends inside a frame or is
        damaged after them (a run that crashed while writing), with a warning; without
        it such an input is refused, before anything is written.

    Returns
    -------
    ConvertStats

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    TopologyError
        If MDAnalysis cannot read the input or the selection is empty.
    TypeError
        If ``topology`` is neither a path nor a Universe (an AtomGroup: give its Universe
        and ``select``).
    H5MDUnitError
        If an H5MD input scales its particles' values by a ``unit_factor`` (which
        MDAnalysis' reader ignores).
    H5MDReadError
        If an input ends inside a frame, or is damaged after the frames MDAnalysis reads,
        and ``partial`` is False.
    ValueError
        If velocities/forces are required but absent, the layout is invalid, or the
        Universe given reads its file with ``convert_units=False`` (in units other than
        MDAnalysis').
    """
    if isinstance(trajectories, (str, os.PathLike)):
        trajectories = [trajectories]
    out = os.fspath(out)
    layout = Layout(frames_per_chunk=frames_per_chunk, chunk_mib=chunk_mib,
                    contiguous=contiguous, compression=compression)
    check_group_name(group)
    zarr_out = is_zarr_path(out)
    _check_output_name(out, zarr_out, bool(trajectories))
    inputs = _inputs(topology, trajectories)
    _check_target(out, overwrite, inputs, zarr_out, bool(trajectories))
    trajectories = without_empty(trajectories, out, partial)
    u = _universe(topology, list(trajectories), format=format, topology_format=topology_format)
    check_units_converted(u, out)
    check_unit_factors(inputs, out)
    check_whole_frames(u, out, partial)
    atoms, indices = _atoms(u, select)
    frames, ts0, early = _frames(u, start, stop, step)
    n_frames = len(frames)
    n = atoms.n_atoms
    specs, want, has_box = _element_specs(ts0, n, velocities, forces)
    static = _static(atoms)
    if indices is not None:  # H5MD's id: which atoms of the input these are
        static["id"] = id_element(indices)
    steps, observables = _Steps(), _Observables(u.atoms.n_atoms)  # per-atom: all atoms
    missing = {"velocity": 0, "force": 0, "box_edges": 0}
    unwritten = _unwritten(want, has_box, velocities, forces)
    t0 = _time.perf_counter()
    with atomic_output(out, overwrite=overwrite, inputs=inputs, directory=zarr_out,
                       hdf5=not zarr_out) as tmp:
        writer = _writer(tmp, zarr_out, specs, n_frames, layout, group, static, verify, atoms, out)
        bar = progress_bar(n_frames, f"convert -> {os.path.basename(out)}", progress)
        with writer, bar as advance, warnings.catch_warnings(record=True) as caught:
            # MDAnalysis warns per frame (e.g. "no dt information"); report them once
            warnings.simplefilter("always")
            reads = _FramesRead(frames, out, partial and not layout.contiguous)
            written = _write_frames(reads, writer, advance, steps, observables,
                                    (indices, want, has_box, missing, unwritten, n))
            short = _check_all_read(written, n_frames, trajectories, u, topology, out,
                                    partial and not layout.contiguous) or reads.problem
            n_frames = written
            obs_notes = observables.write(writer, zarr_out, _observable_units(trajectories, u))
        if short:  # outside the warnings MDAnalysis gave, which go to the notes
            warnings.warn(short, UserWarning, stacklevel=2)
        _warn_no_box(trajectories or inputs, missing["box_edges"], n_frames,
                     f"; their /particles/{group}/box/edges are written as zeros")
        if verify:  # raises where the data read back differ
            _verify(writer.checksums, tmp, out, zarr_out)
        seconds = _time.perf_counter() - t0
        size = _size(tmp)
    return ConvertStats(
        output=out, n_frames=n_frames, n_atoms=n, elements=[s.name for s in specs], seconds=seconds,
        bytes_written=size, verified=verify, layout=layout.describe(n_frames, specs[0].frame_bytes),
        steps_renumbered=steps.renumbered, missing={k: v for k, v in missing.items() if v},
        notes=list(dict.fromkeys(f"MDAnalysis: {w.message}" for w in [*early, *caught]))
        + obs_notes + _unwritten_notes(unwritten) + _unknown_units(u, specs)
        + _left_behind(list(dict.fromkeys(inputs)), observables.values),
    )


def _warn_no_box(inputs: Sequence[Any], count: int, n_frames: int, written: str) -> None:
    """Say that ``count`` of ``n_frames`` frames of ``inputs`` (files; none: a Dataset)
    had no box and were ``written`` as zeros, MDAnalysis' mark of no box, to the caller of
    :func:`convert` or :func:`~h5mdx.layout.export.to_h5md` (said by the command line
    alone before, so a library call wrote them in silence)."""
    if not count:
        return
    names = ", ".join(dict.fromkeys(os.fspath(p) for p in inputs)) or "the Dataset"
    warnings.warn(f"{names}: {count} of {n_frames} frames have no box{written}, MDAnalysis' "
                  "mark of no box (its readers give such a frame no dimensions); do not take "
                  "them as a box", UserWarning, stacklevel=3)


def _write_frames(frames: Any, writer: Any, advance: Callable[[int], Any], steps: _Steps,
                  observables: _Observables, selected: tuple[Any, ...]) -> int:
    """Append every frame of ``frames`` to ``writer`` (``selected``: the atoms' indices,
    what :func:`_frame_arrays` takes of each frame and the atoms' number); the number
    written."""
    indices, want, has_box, missing, unwritten, n = selected
    nan = np.full((n, 3), np.nan, dtype=np.float32)
    written = 0
    for ts in frames:
        raise_if_interrupted()  # a Ctrl-C Python dropped in a callback
        arrays = _frame_arrays(ts, indices, want, has_box, nan, missing, unwritten)
        sampled = steps(ts)
        writer.append(*sampled, **arrays)
        observables.add(ts, *sampled)
        written += 1
        advance(1)
    return written


class _FramesRead:
    """The Timesteps of ``frames``, read by MDAnalysis. Where its reader fails on one (a
    LAMMPS dump or a DL_POLY HISTORY cut inside a frame: 'list index out of range', 'could
    not broadcast input array from shape (0,) into shape (3,)'; an Amber TRJ cut inside
    the frame after the 7 it counts: 'FixedcolumnEntry(16,24,'F'): Failed to read&convert',
    said with neither file nor frame), an H5MDReadError names the file and the frame; with
    ``partial`` the frames end there, and :attr:`problem` holds the warning to give."""

    def __init__(self, frames: Any, out: str, partial: bool) -> None:
        self.frames, self.out, self.partial = frames, out, partial
        self.problem: str | None = None

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.frames)
        k = 0
        while True:
            try:
                ts = next(it)
            except StopIteration:
                return
            except Exception as err:  # MDAnalysis' readers raise many kinds of errors
                self._failed(err, k)
                return
            k += 1
            yield ts

    def _failed(self, err: Exception, k: int) -> None:
        """Raise for ``err``, MDAnalysis' error reading frame ``k`` (0-based); with
        ``partial``, note the warning instead."""
        traj = self.frames.trajectory
        reader = getattr(traj, "active_reader", traj)  # a chain's: the file read
        name = getattr(reader, "filename", None) or getattr(traj, "filename", None)
        n = len(self.frames)
        which = (f"frame {k + 1} of the {n} to convert" if k < n else
                 f"frame {k + 1}, after the {n} it counts,")
        problem = (f"MDAnalysis cannot read {which} ({type(err).__name__}: "
                   f"{_one_line(str(err)) or 'no message'}): the file is damaged or cut there")
        if self.partial:
            self.problem = f"{name}: {problem}; {frames_before(k)} before it " \
                f"{'is' if k == 1 else 'are'} converted (partial=True)"
            return
        raise H5MDReadError(
            None if name is None else str(name), None,
            f"{problem}; nothing written to {self.out}: pass partial=True (--partial on the "
            f"command line) to convert {frames_before(k)} before it") from err


def _check_all_read(written: int, n_frames: int, trajectories: Sequence[Any], u: Any,
                    topology: Any, out: str, partial: bool) -> str | None:
    """Raise where MDAnalysis gave fewer frames than it announced: it ends a trajectory
    at a read error (a truncated or damaged file) instead of raising it. With
    ``partial``, return the warning that the frames read are written instead."""
    if written == n_frames:
        return None
    source = (", ".join(os.fspath(t) for t in trajectories)
              or str(getattr(u.trajectory, "filename", None) or topology))
    problem = (f"MDAnalysis read {written} of the {n_frames} frames it announced: the "
               f"trajectory is truncated or damaged after frame {written}")
    if partial:
        read = "the frame read is" if written == 1 else f"the {written} frames read are"
        return f"{source}: {problem}; {read} converted (partial=True)"
    raise H5MDReadError(source, None, f"{problem}; nothing written to {out}: pass "
                        "partial=True (--partial on the command line) to convert "
                        f"{frames_before(written)} before it (into chunked storage)")


def _release_quietly(err: BaseException) -> None:
    """Free what the failed ``Universe`` left in ``err``'s frames now, without the
    "Exception ignored in ReaderBase.__del__" block an MDAnalysis reader that failed to
    open prints as it goes (it has no ``_file`` to close)."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        traceback.clear_frames(err.__traceback__)
        gc.collect()
    finally:
        sys.unraisablehook = hook


#: the quantity MDAnalysis' reader states the unit of, for each element written
_READER_UNIT = {"position": "length", "box_edges": "length", "velocity": "velocity",
                "force": "force"}


#: The units MDAnalysis gives each quantity it reads (base units of MDAnalysis.units)
_MDA_UNITS = {"length": "Angstrom", "time": "ps", "velocity": "Angstrom/ps",
              "force": "kJ/(mol*Angstrom)"}


def _unknown_units(u: Any, specs: list[ElementSpec]) -> list[str]:
    """A note where MDAnalysis' reader does not know some of the input's units (a LAMMPS
    dump: none; a GRO file: the time's): those quantities are written as read, under the
    units MDAnalysis assumes (Å, Å/ps, kJ/(mol Å), ps); the others were converted.

    A Universe in memory (``in_memory=True``, ``transfer_to_memory()``) holds what the
    reader of its file gave: the units are that reader's (:func:`_reader_units`)."""
    lammps = _lammps_dcd_notes(u)
    units = _reader_units(u.trajectory)
    quantities = {_READER_UNIT[s.name] for s in specs if s.name in _READER_UNIT} | {"time"}
    unknown = sorted(q for q in quantities if q in units and units[q] is None)
    if not unknown:
        return lammps
    known = sorted(q for q in quantities if units.get(q) is not None)
    labels = ", ".join(f"{q} as {_MDA_UNITS.get(q, '?')}" for q in unknown)
    converted = ("; converted: " + ", ".join(f"{q} from {units[q]}" for q in known)
                 if known else "")
    return [f"MDAnalysis does not know the {', '.join(unknown)} units of "
            f"{getattr(u.trajectory, 'filename', 'the input')}: those values are written as "
            f"read, labelled in MDAnalysis' units ({labels}); check them against the units "
            f"the simulation used{converted}", *lammps]


def _lammps_dcd_notes(u: Any) -> list[str]:
    """A note for each LAMMPS DCD read in MDAnalysis' default units, those of LAMMPS'
    'real' style (Å, fs): a DCD does not say its units, and a run in another style
    (metal: ps) had its times written 1000 times too small without a word."""
    notes = []
    for reader in getattr(u.trajectory, "readers", None) or [u.trajectory]:
        units = getattr(reader, "units", None) or {}
        name = getattr(reader, "filename", None) or "a DCD"
        if getattr(reader, "format", None) == "DCD" and _lammps_topology(u):
            notes.append(
                f"{name}: read as CHARMM's DCD (times in AKMA, 48.9 fs), beside a LAMMPS "
                "data file: a DCD LAMMPS wrote keeps its times in LAMMPS' units, so its "
                "times are off (48.9 times too large for the 'real' style); give "
                "format='LAMMPS' (--format LAMMPS) for LAMMPS' DCD reader")
        if getattr(reader, "format", None) == "LAMMPS" and hasattr(reader, "_file") \
                and units.get("time") == "fs" and units.get("length") == "Angstrom":
            notes.append(
                f"{name}: a LAMMPS DCD does not say "
                "its units; MDAnalysis reads it in LAMMPS' 'real' style (lengths in "
                "Angstrom, times in fs, converted to ps): for a run in another style, "
                "convert a Universe opened with its units (mda.Universe(TOP, DCD, "
                "format='LAMMPS', timeunit='ps') for 'metal')")
    return notes


def _lammps_topology(u: Any) -> bool:
    """Whether the Universe's topology is a LAMMPS data file (by its name, as MDAnalysis
    tells its format)."""
    from MDAnalysis.lib.util import guess_format

    name = getattr(u, "filename", None)
    try:
        return bool(name) and guess_format(name) == "DATA"
    except (ValueError, TypeError):  # a name MDAnalysis tells no format from
        return False


def _reader_units(reader: Any) -> dict[str, Any]:
    """The units ``reader`` converted from (None: one it does not know); for MDAnalysis'
    MemoryReader, which states none, those of the reader of the file it was filled from
    (none where MDAnalysis cannot tell it from the name: then nothing is said). The
    note said a DCD loaded in memory was written as read, its lengths and times
    unconverted, where the DCD reader had converted its times from AKMA."""
    from MDAnalysis.coordinates.memory import MemoryReader

    if not isinstance(reader, MemoryReader):
        return dict(getattr(reader, "units", None) or {})
    from MDAnalysis.coordinates.core import get_reader_for

    name = getattr(reader, "filename", None)
    try:
        return dict(get_reader_for(name).units) if name else {}
    except (ValueError, TypeError, AttributeError):  # a format named by no suffix
        return {}


def _observable_units(trajectories: Sequence[Any], u: Any) -> dict[str, str]:
    """The units of the observables of H5MD inputs (MDAnalysis gives their values alone,
    as stored): the files given, else the Universe's; one they give otherwise is left out."""
    import h5py

    found: dict[str, set[str]] = {}
    # a Universe's: every file of its chain (the first alone gave its units to all)
    for f in h5md_inputs(list(trajectories) or _universe_files(u)):
        for name, el in f.get("observables", {}).items():
            try:
                unit = scaled_unit(unit_attribute(el["value"]),
                                   el["value"].attrs.get("unit_factor")) \
                    if isinstance(el, h5py.Group) and "value" in el else None
            except (OSError, KeyError, TypeError, ValueError):
                continue
            if unit is not None:
                found.setdefault(str(name), set()).add(unit)
    return {name: units.pop() for name, units in found.items() if len(units) == 1}


def _left_behind(trajectories: Sequence[Any], copied: Iterable[str] = ()) -> list[str]:
    """A note for each H5MD input: that ``h5mdx rechunk`` copies it faster (measured 5.9 s
    against 98.5 s for 1.5 GiB into Zarr: convert reads it frame by frame through
    MDAnalysis), and which observables or parameters the copy leaves out (convert writes
    what MDAnalysis reads: particles, and the scalar observables it gives per frame:
    ``copied``; ``h5mdx rechunk`` copies a file whole)."""
    copied = set(copied)
    notes = []
    for f in h5md_inputs(trajectories):
        notes.append(f"{f.filename} is H5MD already: h5mdx rechunk copies it to a new layout "
                     "(or to Zarr) 10-20x faster than convert, which reads it through "
                     "MDAnalysis frame by frame")
        try:
            left = [g for g in ("observables", "parameters")
                    if set(f.get(g, ())) - (copied if g == "observables" else set())]
        except (OSError, KeyError, TypeError):
            continue
        if left:
            notes.append(f"{f.filename}: /{' and /'.join(left)} not copied (convert writes "
                         "the particles MDAnalysis reads; h5mdx rechunk copies an H5MD file "
                         "whole)")
    return notes
