"""The H5MD format layer: walk an HDF5 file into plain descriptions.

This module knows h5py and numpy only (no xarray, no dask). :func:`scan`
reads the metadata of an H5MD 1.x file -- groups, elements, shapes, chunk
layouts, units and the small ``step``/``time`` arrays -- and never the
``value`` data of an element. The scan is tolerant: where a file departs from
H5MD but still carries usable data, :func:`scan` records a :class:`Problem` (the
H5MD path, what is wrong and what was assumed) on ``FileInfo.problems`` and
goes on; an element that cannot be read at all is left out with a problem saying
so, as is a part that reaches into other files without ``allow_external`` (never
followed). Only a file that is not H5MD (or HDF5) at all raises
:class:`~h5mdx.errors.H5MDFormatError`.
The backend turns problems into warnings, or into errors with ``strict=True``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDError, H5MDFormatError, H5MDReadError
from h5mdx.format.chunk_index import chunk_grid
from h5mdx.format.gromacs_topology import MODULE as GROMACS_TOPOLOGY
from h5mdx.format.gromacs_topology import ModuleTopology, read_module
from h5mdx.format.schema import (
    ATOM_DIM,
    BOX_VECTOR_DIM,
    H5MD_SIGNATURE,
    KNOWN_PARTICLE_ELEMENTS,
    PER_PARTICLE_SCALARS,
    SPATIAL_DIM,
    STEP_COORD,
    SUPPORTED_VERSIONS,
    TIME_DIM,
    Path,
)
from h5mdx.format.text import decode as _decode
from h5mdx.format.text import unit_text
from h5mdx.format.vmd_structure import STRUCTURE_PATH, VMDStructure, read_structure

__all__ = [
    "BoxInfo",
    "ElementInfo",
    "FileInfo",
    "ParticlesGroupInfo",
    "scan_free_form",
    "Problem",
    "Sampling",
    "compression_name",
    "ensure_filters",
    "is_h5md",
    "objects_below",
    "open_h5md",
    "reference_paths",
    "scalar_text",
    "scan",
]

#: Largest number of frames for which a fixed-interval step/time array is built at
#: open time; above this a file is refused as implausible (an absurd declared shape).
MAX_FRAMES = 2**36

#: How many declared elements of a dataset may lack stored data (never written,
#: e.g. a writer that died after a resize) before :func:`scan` refuses the file. Opening
#: builds arrays proportional to the number of frames and atoms (``step``, ``time``, the
#: ``atom`` index), so a shape declared far beyond the stored data must not be trusted.
MAX_ABSENT_ELEMENTS = 2**22

#: Largest dataset :func:`scan` reads whole at open time (``step``/``time`` of explicit
#: sampling, box attributes stored as datasets), in bytes.
MAX_SMALL_READ = 2**30


@dataclass(frozen=True)
class Problem:
    """One way a file departs from H5MD, and what h5mdx assumed to read it anyway.

    Attributes
    ----------
    path : str
        The H5MD path concerned (``/particles/trajectory/box``).
    message : str
        What is wrong (the error a strict reader raises).
    assumed : str
        What h5mdx did instead (``frames numbered 0..n-1``, ``left out``).
    minor : bool
        Missing metadata that costs no data (an author without a name): listed by
        ``h5mdx info`` and an error with ``strict=True``, but not warned about.
    shared_by : tuple of str
        Other elements that use the part at ``path`` (a ``step`` or ``time`` hard-linked
        into them), so that an open of their group hears of it too.
    """

    path: str
    message: str
    assumed: str
    minor: bool = False
    shared_by: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return f"[{self.path}] {self.message}; {self.assumed}"


@dataclass(frozen=True, eq=False)
class Sampling:
    """When a time-dependent element was sampled.

    Attributes
    ----------
    kind : {"explicit", "fixed", "implicit"}
        ``explicit``: ``step``/``time`` datasets with one entry per frame;
        ``fixed``: scalar intervals with an ``offset`` attribute; ``implicit``: the
        file has no usable ``step``, frames are numbered 0..n-1.
    step : numpy.ndarray
        Integer step of every frame.
    time : numpy.ndarray or None
        Time of every frame, or None where the element has no ``time``.
    time_unit : str or None
        The unit of ``time``.
    key : tuple
        Identity of the stored step/time objects (file addresses); elements that
        share their step/time through hard links have equal keys.
    """

    kind: str
    step: np.ndarray
    time: np.ndarray | None
    time_unit: str | None
    key: tuple

    def same_as(self, other: Sampling) -> bool:
        """Whether two samplings describe the same frames (shared link or equal values).

        Equal steps given by the file are the same frames even where only one of the two
        has times (pyh5md's ``step_from=`` links another element's ``step`` and writes no
        ``time``): the element without times follows the frames of the one with them.
        """
        if self.key == other.key and self.step.shape == other.step.shape:
            return True  # (one linked step of fewer frames: a writer stopped between two)
        if self.step.shape != other.step.shape or not np.array_equal(self.step, other.step):
            return False
        if self.time is None or other.time is None:
            # the same steps; numbered frames (implicit) only match numbered frames
            return (self.time is None and other.time is None) or (
                "implicit" not in (self.kind, other.kind))
        return bool(np.array_equal(self.time, other.time))


@dataclass(frozen=True, eq=False)
class ElementInfo:
    """One H5MD element (time-dependent group or time-independent dataset)."""

    name: str
    path: str
    value_path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...] | None
    #: h5py's name of the compression filter (``"gzip"``, ``"lzf"``), or the registered id
    #: of a plugin filter (32001 for Blosc; see :func:`compression_name`), with its
    #: options: what ``create_dataset(compression=..., compression_opts=...)`` takes back
    compression: str | int | None
    compression_opts: Any
    filters: tuple[str, ...]
    unit: str | None
    time_dependent: bool
    sampling: Sampling | None
    fillvalue: Any
    storage_size: int
    #: values read at scan time (an element stored as an attribute), else None
    data: np.ndarray | None = None
    #: the other attributes of ``value`` (``labels``, a charge's ``type``, an enum's
    #: names as ``flag_values``/``flag_meanings``): strings decoded, references named
    attrs: dict[str, Any] = field(default_factory=dict)
    #: an element of a group inside a particles group (ESPResSo's ``lees_edwards/offset``),
    #: named ``<group>_<element>``: H5MD defines none there, and it is not per particle
    in_subgroup: bool = False
    #: a time-dependent ``value`` whose first axis has no maximum (``maxshape`` None): a
    #: writer can append frames to it
    growable: bool = False
    #: the axis an H5MD-NOMAD ensemble average or correlation function is a function of
    #: (its first axis): name (``bins``, ``times``), values and unit, read at scan time
    axis: tuple[str, np.ndarray, str | None] | None = None
    #: the other datasets of such an element of its first axis's length (``errors``):
    #: values and unit, by name
    beside: dict[str, tuple[np.ndarray, str | None]] = field(default_factory=dict)
    #: an element computed from LAMMPS' box bounds ``(…, 3, 2)`` rows ``[lo, hi]`` stored at
    #: ``value_path`` (H5MD_Analysis writes them so): ``"extent"`` (``hi - lo``, the edges) or
    #: ``"lower"`` (``lo``, the offset), read lazily, frame by frame; None otherwise
    bounds: str | None = None

    @property
    def n_frames(self) -> int | None:
        """Number of frames, or None for a time-independent element."""
        return self.shape[0] if self.time_dependent else None

    @property
    def nbytes(self) -> int:
        """Size of the uncompressed data in bytes."""
        return int(math.prod(self.shape)) * self.dtype.itemsize

    @property
    def shuffled(self) -> bool:
        """Whether HDF5's byte shuffle filter is in the pipeline (named, or by its id 2
        where the writer left the name out)."""
        return bool({"shuffle", "2"} & set(self.filters))

    @property
    def fletcher32(self) -> bool:
        """Whether the chunks carry HDF5's Fletcher-32 checksum (filter id 3)."""
        return bool({"fletcher32", "3"} & set(self.filters))


@dataclass(frozen=True, eq=False)
class BoxInfo:
    """The simulation box of a particles group."""

    path: str
    dimension: int
    boundary: tuple[str, ...]
    edges: ElementInfo | None
    #: the lower corner of the box (``box/offset``, written by HALMD; not in H5MD 1.1)
    offset: ElementInfo | None = None
    #: periodicity flags per dimension, per frame where time-dependent (``box/pbc``,
    #: written by znh5md from ASE's ``pbc``; not in H5MD 1.1): nonzero is periodic
    pbc: ElementInfo | None = None

    @property
    def from_bounds(self) -> bool:
        """Whether the edges and the lower corner are computed from one dataset of LAMMPS'
        bounds ``[lo, hi]`` (read as H5MD_Analysis stores them), not stored each."""
        return (self.edges is not None and self.offset is not None
                and self.offset.value_path == self.edges.value_path)


@dataclass(frozen=True, eq=False)
class ParticlesGroupInfo:
    """A group under ``/particles``."""

    name: str
    path: str
    elements: dict[str, ElementInfo]
    box: BoxInfo | None
    #: two frames whose time-dependent ``id`` holds other particles in a slot (ESPResSo
    #: writes each frame in its cell order): the elements hold the particles in stored
    #: order, which then differs between frames; None where the frames looked at agree
    order_varies: tuple[int, int] | None = None
    #: a frame whose time-dependent ``id`` holds its fill value in some slots, and how
    #: many: slots that hold no particle (ESPResSo++ pads the particle axis to 256 slots
    #: of id -1, positions 0); None where the frames looked at have none
    empty_slots: tuple[int, int] | None = None

    @property
    def group(self) -> str:
        """The group that opens it (``group=``, the node of the datatree):
        ``particles/<name>``, or ``particles`` where ``/particles`` holds the elements
        itself."""
        return "particles" if self.path == "/particles" else f"particles/{self.name}"


@dataclass(frozen=True, eq=False)
class FileInfo:
    """Everything :func:`scan` learnt about a file."""

    filename: str
    version: tuple[int, int]
    author: dict[str, str]
    creator: dict[str, str]
    particles: dict[str, ParticlesGroupInfo]
    observables: dict[str, ElementInfo]
    observable_groups: tuple[str, ...]
    parameters: dict[str, Any] = field(default_factory=dict)
    #: the root groups H5MD does not define (RMPCDMD's ``/fields``, Mosaic's
    #: ``/mosaic``), by name; their datasets are walked only where they are served
    #: (:func:`scan_free_form`)
    other_groups: tuple[str, ...] = ()
    #: H5MD-NOMAD's ``/h5md/program``: the MD program (``creator``: the writing library)
    program: dict[str, str] = field(default_factory=dict)
    file_size: int = 0
    problems: tuple[Problem, ...] = ()
    #: the tuples of particles under ``/connectivity`` (bonds, angles, ...), by their path
    #: below it (``"bonds"``, ``"trajectory/bonds"``), and the groups that hold them
    connectivity: dict[str, ElementInfo] = field(default_factory=dict)
    connectivity_groups: tuple[str, ...] = ()
    #: the H5MD modules the file declares (``/h5md/modules/<name>``, e.g. ``units``,
    #: GROMACS' ``gromacs``), by name: their attributes as text (``version`` as
    #: ``"1.0"``)
    modules: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the per-atom topology of GROMACS' ``/h5md/modules/gromacs_topology`` (names,
    #: residues, masses, charges); None where the file has none, or it is unusable
    topology: ModuleTopology | None = None
    #: VMD's structure module, ``/parameters/vmd_structure`` (names, types, residues,
    #: segments and bonds, per species, atom or residue); None where the file has none
    vmd_structure: VMDStructure | None = None

    def particles_group(self, group: str) -> str | None:
        """The name of the particles group ``group`` names (``"particles/all"`` or
        ``"all"``; ``"particles"`` where ``/particles`` holds the elements itself), or
        None."""
        group = group.strip("/")
        return next((name for name, pg in self.particles.items()
                     if group in (pg.group, name, f"particles/{name}")), None)

    def elements_under(self, root: str, sub: str = "") -> dict[str, ElementInfo]:
        """The elements directly under ``/<root>/<sub>`` (``root``: ``observables`` or
        ``connectivity``), by name."""
        return dict(self._by_group[root].get(sub, {}))

    @functools.cached_property
    def _by_group(self) -> dict[str, dict[str, dict[str, ElementInfo]]]:
        """The observables and the connectivity by group, then name: built once (H5MD-NOMAD
        files hold ten thousand groups of connectivity; a walk per group was quadratic)."""
        out: dict[str, dict[str, dict[str, ElementInfo]]] = {}
        for root, found in (("observables", self.observables),
                            ("connectivity", self.connectivity)):
            groups: dict[str, dict[str, ElementInfo]] = {}
            for key, el in found.items():
                sub, _, name = key.rpartition("/")
                groups.setdefault(sub, {})[name] = el
            out[root] = groups
        return out

    @property
    def parameter_groups(self) -> list[str]:
        """The groups of ``/parameters`` that hold datasets, below it (``""``: itself)."""
        return sorted({name.rpartition("/")[0] for name in self.parameters})


# ----------------------------------------------------------------------------- opening


#: Trajectory formats people try to open as H5MD (the error then says how to convert).
_TRAJECTORY_SUFFIXES = frozenset({
    ".dcd", ".xtc", ".trr", ".tng", ".nc", ".ncdf", ".netcdf", ".mdcrd", ".crd", ".trj",
    ".lammpstrj", ".lammpsdump", ".dump", ".xyz", ".pdb", ".gro", ".arc", ".dtr", ".binpos",
    ".xdatcar", ".history", ".gsd", ".txyz"})


def _signature_ok(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(8)
    return head == H5MD_SIGNATURE


def open_h5md(
    path: str | os.PathLike[str], *, swmr: bool = False, **kwargs: Any
) -> h5py.File:
    """Open ``path`` read-only with h5py, turning low-level failures into clear errors.

    Parameters
    ----------
    path : str or path-like
        The file to open.
    swmr : bool, optional
        Open in single-writer/multiple-reader mode (for files being written).
    **kwargs
        Passed to :class:`h5py.File` (e.g. ``driver``, ``comm``).

    Returns
    -------
    h5py.File

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    H5MDFormatError
        If the file is empty, not HDF5, or truncated/corrupt.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path!r}")
    if os.path.isdir(path):
        raise H5MDFormatError(path, None, "is a directory, not an H5MD file")
    if os.path.getsize(path) == 0:
        raise H5MDFormatError(path, None, "the file is empty (0 bytes), not an H5MD file")
    # A userblock can move the signature to 512, 1024, ... ; h5py handles those, so only
    # reject outright when the file is too small to hold an HDF5 superblock.
    if os.path.getsize(path) < 8:
        raise H5MDFormatError(path, None, "the file is too small to be HDF5")
    try:
        return h5py.File(path, "r", swmr=swmr, **kwargs)
    except OSError as err:
        text = str(err)
        if "unable to lock" in text.lower() or "file locking" in text.lower():
            raise H5MDReadError(
                path,
                None,
                f"HDF5 cannot lock the file ({text}): another process has it open for "
                "writing, or the file system does not support locking. For a file being "
                "written in SWMR mode open it with swmr=True; on file systems without "
                "locking (some NFS/Lustre mounts) set HDF5_USE_FILE_LOCKING=FALSE in the "
                "environment before starting Python",
            ) from None
        if not _signature_ok(path):
            problem = "not an HDF5 file (no HDF5 signature): H5MD files are HDF5 files"
            suffix = os.path.splitext(path)[1].lower()
            if suffix in _TRAJECTORY_SUFFIXES:
                stem = os.path.splitext(os.path.basename(path))[0]
                problem += (f"; a {suffix} trajectory converts to H5MD once with: "
                            f"h5mdx convert TOPOLOGY {os.path.basename(path)} {stem}.h5md")
        elif swmr and "swmr read access flag not the same" in text.lower():
            problem = (
                f"HDF5 cannot open the file with swmr=True ({text}): this process has it "
                "open without swmr=True already (another Dataset of the file, or an h5py "
                "File); close that one first (ds.close()), or open this one without swmr"
            )
        elif swmr:
            problem = (
                f"HDF5 cannot open the file with swmr=True ({text}); SWMR reading needs a "
                "file written with libver='latest' (HDF5 >= 1.10 format): open it without "
                "swmr=True, or it is truncated or corrupt"
            )
        elif "already open for write" in text.lower():  # a writer holds it (SWMR)
            problem = (f"HDF5 cannot open the file ({text}): a writer has it open; for a "
                       "file being written in SWMR mode open it with swmr=True")
        else:
            problem = f"HDF5 cannot open the file; it is truncated or corrupt ({text})"
        raise H5MDFormatError(path, None, problem) from None


def is_h5md(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an HDF5 file with an ``/h5md`` group (never raises)."""
    try:
        if not _signature_ok(path):
            return False
        with h5py.File(path, "r") as f:
            return isinstance(f.get(Path.H5MD.value, getlink=False), h5py.Group)
    except Exception:  # noqa: BLE001 - sniffing must never raise
        return False


# ----------------------------------------------------------------------------- helpers


@dataclass
class _Ctx:
    """What a scan knows while it walks one file."""

    f: h5py.File
    allow_external: bool = False
    live: bool = False
    #: the name of the program that wrote the file (``/h5md/creator``), for its quirks
    creator: str = ""
    problems: list[Problem] = field(default_factory=list)
    #: samplings already read, by (step address, time address, frames): a step/time
    #: shared by hard links is read, and its problems noted, once
    samplings: dict[tuple, Sampling] = field(default_factory=dict)
    #: the problems noted while reading each of those samplings (indices in problems)
    sampling_problems: dict[tuple, range] = field(default_factory=dict)
    #: the H5MD version the file declares (its rules differ: 1.0 asks for a time and has
    #: no fixed-interval sampling)
    version: tuple[int, int] = (1, 1)
    #: stored-chunk counts and stored bytes by dataset address: HDF5 walks the whole
    #: chunk index for either, and several checks ask for the same dataset's
    stored_chunks: dict[tuple[int, ...], int | None] = field(default_factory=dict)
    storage_sizes: dict[tuple[int, ...], int | None] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return self.f.filename

    @functools.cached_property
    def readonly(self) -> bool:
        """Whether the file is open read-only (h5py's ``mode == "r"``), asked once per scan:
        h5py builds a File for each dataset it opens to ask (:func:`_open`)."""
        return bool(self.f.mode == "r")

    @functools.cached_property
    def root_fileno(self) -> Any:
        """The file number of the root group, asked once per scan (``c.f["/"]`` builds
        an h5py File each time: 20 us per element of fifty thousand)."""
        return _fileno(self.f["/"])

    def note(self, path: str, message: str, assumed: str, *, minor: bool = False) -> None:
        """Record a departure from H5MD (once per path and message)."""
        problem = Problem(path, message, assumed, minor)
        if problem not in self.problems:
            self.problems.append(problem)

    def left_out(self, err: H5MDFormatError, path: str) -> None:
        """Record that the part at ``path`` was left out because of ``err``."""
        self.note(err.h5path or path, err.problem, "left out")


_EXTERNAL_HINT = (
    "h5mdx does not follow references to other files unless you opt in with "
    "allow_external=True (xr.open_dataset(..., engine='h5md', allow_external=True)); "
    "do so only for files you trust"
)


def _no_attrs(obj: h5py.HLObject) -> bool:
    """Whether ``obj`` has no attribute at all: one question to HDF5, where a lookup by
    name costs one each (H5MD-NOMAD's connectivity holds fifty thousand datasets without
    any). False where HDF5 cannot tell."""
    try:
        return h5py.h5a.get_num_attrs(obj.id) == 0
    except (OSError, RuntimeError, TypeError, ValueError, AttributeError):
        return False


def _attr(obj: h5py.HLObject, name: str, default: Any = None) -> Any:
    try:
        if name not in obj.attrs:
            return default
        return _decode(obj.attrs[name])
    except (OSError, TypeError, ValueError, KeyError, RuntimeError):
        return default


def unit_attribute(obj: h5py.HLObject) -> str | None:
    """The ``unit`` attribute of ``obj`` as text (:func:`unit_text`); None where it has
    none. Raises ValueError where it is not text."""
    return unit_text(_attr(obj, "unit"))


def _unit_attr(c: _Ctx, obj: h5py.HLObject, where: str) -> str | None:
    """The ``unit`` attribute as a string (:func:`unit_attribute`), else None (noted);
    without one, a ``units`` attribute (netCDF's name), noted; scaled by a ``unit_factor``
    (:func:`scaled_unit`)."""
    if _no_attrs(obj):
        return None
    try:
        unit = unit_attribute(obj)
        if unit is None and "units" in obj.attrs and "unit" not in obj.attrs:
            unit = unit_text(_attr(obj, "units"))
            if unit is not None:
                c.note(where, "the unit is in a 'units' attribute (netCDF's name), not in "
                       "H5MD's 'unit'", f"unit {unit!r} read from 'units'")
    except ValueError as err:
        c.note(where, str(err), "unit ignored")
        return None
    try:
        return scaled_unit(unit, _attr(obj, "unit_factor"))
    except ValueError as err:
        c.note(where, str(err), f"unit_factor ignored: unit {unit!r}")
        return unit


def scaled_unit(unit: str | None, factor: Any) -> str | None:
    """``unit`` scaled by H5MD-NOMAD's ``unit_factor`` attribute (values stored in units of
    ``factor`` x ``unit``: ``1000.0`` beside ``joule`` for kJ), written as H5MD's unit
    strings write a factor, before the unit (``"1000.0 joule"``); ``unit`` where
    ``factor`` is None or 1.

    Raises
    ------
    ValueError
        Where ``factor`` is not one finite number.
    """
    if factor is None:
        return unit
    value = np.asarray(factor)
    if value.size != 1 or value.dtype.kind not in "iuf" or not np.isfinite(value).all():
        raise ValueError(f"'unit_factor' {factor!r} is not a finite number")
    number = float(value.reshape(()))
    if number == 1.0:
        return unit
    return f"{number!r} {unit}" if unit else repr(number)


def object_address(obj: h5py.HLObject) -> tuple[int, ...]:
    """Where ``obj`` lies in its file: one key per object, however many links name it.

    ``H5Gget_objinfo``, not ``H5Oget_info``: the latter sizes the object's storage too,
    which walks a chunked dataset's whole index (68 ms for 100,000 chunks; an audit
    found an open doing it four times)."""
    return tuple(int(x) for x in h5py.h5g.get_objinfo(obj.id, b".").objno)


_addr = object_address


def _creation_plist(dset: h5py.Dataset) -> Any:
    """The creation property list of ``dset``: the one h5py keeps for the dataset object
    (its ``chunks``, ``compression``, ``is_virtual`` and ``fillvalue`` read it) where it
    has one, else asked for. HDF5 copies the list at each ask (30 us: the scan asked up to
    seven times per element: 5 s of the scan of H5MD-NOMAD's fifty thousand datasets)."""
    plist = getattr(dset, "_dcpl", None)  # h5py's, private: checked, never required
    if isinstance(plist, h5py.h5p.PropDCID):
        return plist
    return dset.id.get_create_plist()


def _fill_value(dset: h5py.Dataset) -> Any:
    try:
        plist = _creation_plist(dset)
        if plist.fill_value_defined() != h5py.h5d.FILL_VALUE_USER_DEFINED:
            return None
        if dset.dtype.kind not in "iufb":
            return None
        value = dset.fillvalue
    except (OSError, TypeError, ValueError, RuntimeError):
        return None
    return value.item() if isinstance(value, np.generic) else value


#: HDF5's built-in filters (deflate, shuffle, Fletcher-32, SZIP, N-bit, scale-offset) and
#: LZF, which h5py names itself
_NAMED_FILTERS = {1, 2, 3, 4, 5, 6, 32000}
#: Names of registered plugin filters that compress (``hdf5plugin``'s)
PLUGIN_FILTERS = {307: "bzip2", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
                  32013: "zfp", 32015: "zstd", 32017: "sz", 32024: "sz3", 32026: "blosc2"}


def _compression(dset: h5py.Dataset) -> tuple[str | int | None, Any]:
    """The compression and its options of ``dset`` as ``create_dataset`` takes them: h5py's
    own, except for a plugin filter, which h5py calls ``"unknown"`` (and no writer could
    take back): its registered id and values."""
    compression, opts = dset.compression, dset.compression_opts
    if compression != "unknown":
        return compression, opts
    plist = _creation_plist(dset)
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        if code not in _NAMED_FILTERS:
            return int(code), tuple(int(v) for v in values)
    return compression, opts


def compression_name(compression: str | int | None) -> str | None:
    """A compression of :class:`ElementInfo` by name: a plugin filter's id as its name
    (``32001`` -> ``"blosc"``), or ``"filter <id>"``.

    >>> compression_name(32015), compression_name("gzip"), compression_name(40000)
    ('zstd', 'gzip', 'filter 40000')
    """
    if isinstance(compression, int):
        return PLUGIN_FILTERS.get(compression, f"filter {compression}")
    return compression


def _filters(dset: h5py.Dataset) -> tuple[str, ...]:
    names = []
    try:
        plist = _creation_plist(dset)
        for i in range(plist.get_nfilters()):
            code, _flags, _vals, name = plist.get_filter(i)
            names.append(name.decode("ascii", "replace") if name else str(code))
    except (OSError, ValueError, RuntimeError):
        pass
    return tuple(names)


@functools.lru_cache(maxsize=1)
def _load_filter_plugins() -> bool:
    """Register the HDF5 filters of :mod:`hdf5plugin` (blosc, zstd, lz4, bitshuffle...) with
    HDF5, where it is installed: h5py decodes them only once it is imported."""
    try:
        import hdf5plugin  # noqa: F401 - registers the filters as it is imported
    except ImportError:
        return False
    return True


def ensure_filters(dset: h5py.Dataset) -> list[tuple[int, bytes]]:
    """Make HDF5 able to apply the filters of ``dset`` where it can (loading hdf5plugin,
    which registers its filters as it is imported); return the ``(id, name)`` of those it
    still cannot. Every process that reads the dataset through h5py needs this once (a
    dask worker unpickles an array without opening the file the way :func:`scan` does)."""
    try:
        plist = _creation_plist(dset)
        found = [plist.get_filter(i) for i in range(plist.get_nfilters())]
    except (OSError, ValueError, RuntimeError):
        return []
    missing = [(code, name) for code, _flags, _vals, name in found
               if not h5py.h5z.filter_avail(code)]
    if missing and _load_filter_plugins():
        missing = [(code, name) for code, name in missing if not h5py.h5z.filter_avail(code)]
    return missing


def _check_filters(c: _Ctx, dset: h5py.Dataset, path: str) -> None:
    """Note the filters of ``dset`` this HDF5 cannot apply (loading hdf5plugin first)."""
    for code, name in ensure_filters(dset):
        label = name.decode("ascii", "replace") if name else "unnamed"
        c.note(path, f"compressed with HDF5 filter {code} ({label}), which this HDF5 cannot "
               "load", "kept, but reading it fails until the filter is installed (pip install "
               "hdf5plugin has the common ones)")


def _link_type(group: h5py.Group, name: str) -> int | None:
    """The HDF5 link type of ``group/name`` without following the link (None: no link)."""
    try:  # one question (H5Lexists, then H5Lget_info, took three times as long)
        return int(group.id.links.get_info(name.encode("utf-8")).type)
    except (KeyError, OSError, RuntimeError, ValueError):
        return None


def _has(group: h5py.Group, name: str) -> bool:
    """``name in group`` that never opens another file (external links count as present)."""
    return _link_type(group, name) is not None


def _fileno(obj: h5py.HLObject) -> Any:
    return obj.id.fileno  # (not H5Oget_info's: see object_address)


def _open(group: h5py.Group, name: str, readonly: bool) -> Any:
    """``group[name]`` of h5py, the dataset told whether its file is read-only
    (``readonly``) rather than asking it through a new h5py File (a third of the cost of
    opening each of H5MD-NOMAD's fifty thousand datasets)."""
    lapl = getattr(group, "_lapl", None)  # h5py's own for external links (private: optional)
    oid = h5py.h5o.open(group.id, name.encode("utf-8"), lapl=lapl)
    kind = h5py.h5i.get_type(oid)
    if kind == h5py.h5i.DATASET:
        return h5py.Dataset(oid, readonly=readonly)
    if kind == h5py.h5i.GROUP:
        return h5py.Group(oid)
    if kind == h5py.h5i.DATATYPE:
        return h5py.Datatype(oid)
    raise TypeError("Unknown object type")


def scalar_text(f: h5py.File, path: str, dtype: np.dtype) -> np.ndarray:
    """The scalar string dataset at ``path`` in ``f``, as ``dset.asstr()[()]`` reads it.

    Four calls to HDF5 instead of h5py's Dataset and its checks before a read (170 us of
    each 250 us: H5MD-NOMAD's file holds 31,349 scalar strings).

    Parameters
    ----------
    f : h5py.File
        The open file.
    path : str
        The dataset's absolute path.
    dtype : numpy.dtype
        Its dtype as h5py reports it (a string dtype).

    Returns
    -------
    numpy.ndarray
        A 0-d array of ``str``, decoded by the dataset's own encoding, strictly.

    Raises
    ------
    TypeError, ValueError, OSError, KeyError
        Where it is not a readable scalar string (``UnicodeDecodeError`` for bad bytes):
        the caller reads it the usual way, which says why.
    """
    info = h5py.check_string_dtype(dtype)
    if info is None:
        raise TypeError(f"dtype {dtype} is not a string")
    dsid = h5py.h5o.open(f.id, path.encode("utf-8"))
    value = np.zeros((), dtype=dtype)
    # a scalar memory space: a dataset of more elements than one is refused by HDF5
    dsid.read(h5py.h5s.create(h5py.h5s.SCALAR), h5py.h5s.ALL, value)
    return np.asarray(value.item().decode(info.encoding, "strict"), dtype=str)


def _get(c: _Ctx, group: h5py.Group, name: str, where: str) -> Any:
    """``group[name]`` that reports dangling, looping and external links clearly."""
    kind = _link_type(group, name)
    if kind is None:
        raise H5MDFormatError(c.filename, where, f"cannot read link {name!r}")
    if kind == h5py.h5l.TYPE_EXTERNAL:
        try:
            link = group.get(name, getlink=True)
            target = f"{link.filename}:{link.path}"
        except (KeyError, OSError, RuntimeError, ValueError, AttributeError):
            target = "another file"
        if not c.allow_external:
            raise H5MDFormatError(
                c.filename, where, f"{name!r} is an external link to {target}; {_EXTERNAL_HINT}"
            )
    elif kind not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT):
        raise H5MDFormatError(
            c.filename, where, f"{name!r} is a user-defined link (type {kind}), not followed"
        )
    try:
        obj = _open(group, name, c.readonly)
    except (KeyError, OSError, RuntimeError, ValueError) as err:
        raise H5MDFormatError(
            c.filename, where, f"{name!r} is a dangling, looping or unreadable link ({err})"
        ) from None
    if not c.allow_external and kind == h5py.h5l.TYPE_SOFT:
        # a soft link can still reach another file through an external link on its way
        try:
            same = _fileno(obj) == c.root_fileno
        except (KeyError, OSError, RuntimeError, ValueError):
            same = True
        if not same:
            raise H5MDFormatError(
                c.filename, where, f"{name!r} leads into another file; {_EXTERNAL_HINT}"
            )
    return obj


def _check_dataset(c: _Ctx, dset: h5py.Dataset, where: str) -> None:
    if c.allow_external:
        return
    try:
        virtual = dset.is_virtual
    except (OSError, AttributeError, RuntimeError, ValueError):
        virtual = False
    if virtual:
        try:
            files = sorted({src.file_name for src in dset.virtual_sources()})
        except (OSError, RuntimeError, ValueError) as err:
            raise H5MDFormatError(
                c.filename, where, f"cannot read the sources of a virtual dataset ({err})"
            ) from None
        others = [name for name in files if name != "."]
        if others:
            raise H5MDFormatError(
                c.filename,
                where,
                f"a virtual dataset mapping data from other files ({', '.join(others)}); "
                + _EXTERNAL_HINT,
            )
    try:
        external = dset.external
    except (OSError, AttributeError, RuntimeError, ValueError):
        external = None
    if external:
        names = ", ".join(sorted({str(e[0]) for e in external}))
        raise H5MDFormatError(
            c.filename,
            where,
            f"the dataset stores its raw data in external files ({names}); " + _EXTERNAL_HINT,
        )


def _asked_once(cache: dict[tuple[int, ...], int | None], dset: h5py.Dataset,
                ask: Callable[[], Any]) -> int | None:
    """``int(ask())`` for ``dset``, kept in ``cache`` by its address (None where HDF5
    cannot tell): HDF5 walks a chunked dataset's whole index to answer."""
    key = _addr(dset)
    if key not in cache:
        try:
            cache[key] = int(ask())
        except (OSError, ValueError, RuntimeError, AttributeError):
            cache[key] = None
    return cache[key]


def _stored_chunks(c: _Ctx, dset: h5py.Dataset) -> int | None:
    """The number of chunks of ``dset`` that HDF5 has stored: its stored bytes over a
    chunk's where no filter changes their size (HDF5 walks the whole chunk index for each
    answer, 16 ms at 100k chunks), else counted once per scan."""
    if not _filters(dset):
        storage = _storage_size(c, dset)
        if storage is not None:
            return storage // chunk_grid(dset.shape, dset.chunks, dset.dtype.itemsize)[1]
    return _asked_once(c.stored_chunks, dset, lambda: dset.id.get_num_chunks())


def _chunk_count(c: _Ctx, dset: h5py.Dataset, shape: tuple[int, ...]
                   ) -> tuple[int, int | None]:
    """How many chunks of ``dset`` cover its first rows ``shape``, and how many of them HDF5
    stores: None where all are (uncompressed data filling them: no count asked) or it
    cannot tell."""
    expected, chunk_bytes = chunk_grid(shape, dset.chunks, dset.dtype.itemsize)
    if expected == 0:
        return 0, None
    if not _filters(dset):
        storage = _storage_size(c, dset)
        if storage is None or storage >= expected * chunk_bytes:
            return expected, None
    return expected, _stored_chunks(c, dset)


def _storage_size(c: _Ctx, dset: h5py.Dataset) -> int | None:
    """The bytes HDF5 has stored for ``dset``, asked once per scan."""
    return _asked_once(c.storage_sizes, dset, lambda: dset.id.get_storage_size())


def _capacity(c: _Ctx, dset: h5py.Dataset) -> int:
    """Upper bound on the number of elements of ``dset`` that have stored data."""
    size = int(dset.size or 0)
    itemsize = max(1, int(dset.dtype.itemsize))
    storage = _storage_size(c, dset)
    if storage is None:
        return size  # cannot tell: do not refuse on this ground
    if storage >= size * itemsize:
        return size
    chunks = dset.chunks
    if not chunks:
        return storage // itemsize
    n_chunks = _stored_chunks(c, dset)
    if n_chunks is None:
        return size
    return min(size, n_chunks * math.prod(int(x) for x in chunks))


def _check_declared(c: _Ctx, dset: h5py.Dataset, where: str, frames: int | None = None
                    ) -> None:
    """Refuse a dataset whose declared shape (its first ``frames`` rows where given) goes
    far beyond its stored data."""
    shape = dset.shape
    if not shape:
        return
    if frames is not None:
        shape = (frames, *shape[1:])
    size = math.prod(int(s) for s in shape)
    if size == 0 and max(int(s) for s in shape) > MAX_ABSENT_ELEMENTS:
        # opening builds per-frame and per-atom arrays: a zero-size dataset's declared
        # axis lengths are not evidence of frames or atoms
        raise H5MDFormatError(
            c.filename, where, f"declares shape {tuple(int(s) for s in shape)} but stores "
            "no element (a zero-length axis); h5mdx refuses to trust the declared size",
        )
    chunk = math.prod(int(x) for x in dset.chunks) if dset.chunks else 0
    allowed = max(MAX_ABSENT_ELEMENTS, chunk)
    if size <= allowed:
        return
    absent = size - min(size, _capacity(c, dset))
    if absent > allowed:
        raise H5MDFormatError(
            c.filename,
            where,
            f"declares shape {tuple(int(s) for s in shape)} but stores data for at most "
            f"{size - absent} of its {size} elements: the data were never written (an "
            "absurd declared size, or a writer that died); h5mdx refuses to trust the "
            "declared size",
        )


def _check_written(c: _Ctx, dset: h5py.Dataset, where: str, frames: int | None = None
                   ) -> None:
    """Note a ``value`` (its first ``frames`` rows where given) whose chunks are not all
    stored (a writer that stopped after growing it), or a contiguous one never written:
    without a fill value of its own, those frames read as zeros."""
    if not dset.shape or _fill_value(dset) is not None:
        return
    shape = dset.shape if frames is None else (frames, *dset.shape[1:])
    if not dset.chunks:
        if math.prod(shape) and _never_written(c, dset):
            c.note(where, "was created but never written (no storage allocated)",
                   f"its values read as HDF5's default fill value ({dset.fillvalue})")
        return
    expected, stored = _chunk_count(c, dset, shape)
    if stored is not None and stored < expected:
        # chunks split across particles too: frames with fewer particles than the largest
        # leave theirs unwritten (ESPResSo grows the particle axis as particles come)
        why = "a writer that stopped early, or space allocated ahead" + (
            ", or frames holding fewer particles than others"
            if len(dset.shape) > 1 and int(dset.chunks[1]) < int(dset.shape[1]) else "")
        c.note(where, f"stores {stored} of its {expected} chunks: the others were never "
               f"written ({why})",
               f"their values read as HDF5's default fill value ({dset.fillvalue})")


def _layout(dset: h5py.Dataset) -> str | None:
    """HDF5's layout of ``dset``: ``"contiguous"``, ``"compact"``, ``"chunked"``,
    ``"virtual"``; None where it cannot tell."""
    try:
        layout = _creation_plist(dset).get_layout()
    except (OSError, ValueError, RuntimeError, AttributeError):
        return None
    return {h5py.h5d.CONTIGUOUS: "contiguous", h5py.h5d.COMPACT: "compact",
            h5py.h5d.CHUNKED: "chunked", h5py.h5d.VIRTUAL: "virtual"}.get(layout)


def _frames_stored(c: _Ctx, value: h5py.Dataset, n_steps: int | None) -> int | None:
    """The frames of a time-dependent ``value`` to read where its last rows were never
    stored (space allocated ahead by a writer that stopped): up to its last stored chunk,
    or to its ``n_steps`` steps where more; None where its chunks are all stored (or it
    cannot tell)."""
    frames = int(value.shape[0])
    if c.live or not value.chunks or frames == 0 or _fill_value(value) is not None:
        return None
    expected, stored = _chunk_count(c, value, value.shape)
    rows = math.ceil(frames / int(value.chunks[0]))
    per_row = expected // rows
    if stored is None or expected - stored < per_row:
        return None  # every chunk there (or it cannot tell), or too few missing to leave
        # a chunk row out: nothing grown ahead
    if _chunk_row_stored(value, rows - 1):
        return None  # its last chunk row is there: nothing grown ahead (one look-up)
    last, exact = _end_of_stored_rows(value)
    if not last or (not exact and stored != last // int(value.chunks[0]) * per_row):
        return None  # nothing stored, or rows missing before the last (HDF5 1.10 cannot
        # tell where they end without walking the index): refused or read whole, as it was
    keep = min(frames, max(last, n_steps or 0))
    return keep if keep < frames else None


def _end_of_stored_rows(value: h5py.Dataset) -> tuple[int | None, bool]:
    """The row after the last chunk of ``value`` HDF5 has stored (None where it cannot
    tell), and whether that is known for sure.

    The chunk index walked once where HDF5 can (>= 1.12.3): sure; else (Debian's 1.10) a
    binary search over the chunks at the start of each chunk row, which takes the stored
    rows for a prefix (a writer that grew ahead and stopped): to be checked."""
    rows = int(value.chunks[0])
    last = [0]

    def visit(info: Any) -> None:
        last[0] = max(last[0], int(info.chunk_offset[0]) + rows)

    try:
        value.id.chunk_iter(visit)
        return last[0], True
    except AttributeError:
        pass  # this HDF5 has no H5Dchunk_iter
    except (OSError, ValueError, RuntimeError):
        return None, False
    try:
        lo, hi = 0, math.ceil(int(value.shape[0]) / rows)  # chunk rows: [0, lo) stored
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if _chunk_row_stored(value, mid) else (lo, mid)
    except (OSError, ValueError, RuntimeError, AttributeError, TypeError):
        return None, False
    return lo * rows, False


def _chunk_row_stored(value: Any, k: int) -> bool:
    """Whether the first chunk of chunk row ``k`` of ``value`` is stored (False where HDF5
    cannot tell)."""
    if k < 0:
        return False
    offset = (k * int(value.chunks[0]), *(0,) * (len(value.shape) - 1))
    try:
        return value.id.get_chunk_info_by_coord(offset).byte_offset is not None
    except (OSError, ValueError, RuntimeError, AttributeError, TypeError):
        return False


def _refresh(c: _Ctx, dset: h5py.Dataset) -> None:
    if c.live:
        try:
            dset.refresh()
        except (OSError, RuntimeError, ValueError, AttributeError):
            pass


# ----------------------------------------------------------------------------- sampling


def _read_small(c: _Ctx, dset: h5py.Dataset, where: str, n: int | None = None,
                start: int = 0) -> np.ndarray:
    """``dset`` whole, or its entries ``start .. start + n - 1`` along axis 0."""
    _check_declared(c, dset, where)
    count = dset.size if n is None else n
    if int(count or 0) * max(1, dset.dtype.itemsize) > MAX_SMALL_READ:
        raise H5MDFormatError(
            c.filename, where, f"{dset.name} is too large to read at open time ({dset.shape})"
        )
    try:
        return np.asarray(dset[()] if n is None else dset[start:start + n])
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as err:
        raise H5MDFormatError(c.filename, where, f"cannot read {dset.name}: {err}") from None


_NUMBERED = "frames numbered 0..n-1"


def _sampled_rows(c: _Ctx, name: str, m: int, n: int, path: str
                  ) -> tuple[int, int] | None:
    """Which entries of a ``step`` or ``time`` of ``m`` entries go with ``n`` frames of
    ``value`` in a finished file: ``(first, count)``, or None where they cannot be told
    (noted by the caller).

    As many: all. One more, from ESPResSo: all but the first (its writer, until a fix
    of June 2026, creates ``step`` and ``time`` with one entry and writes frame k's at
    k + 1: ``File::write`` in ``src/core/io/writer/h5md_core.cpp``). More: the first
    ``n`` (the writer stopped before the value). One fewer: all of them, the last frame
    of ``value`` left out (a writer stopped mid-frame: ESPResSo and GROMACS extend
    ``value`` before ``step`` and ``time``; GROMACS' new writer writes a frame's ``time``
    last, so a ``time`` one short beside a whole ``step`` is the same stop).
    """
    shape = f"{name!r} has {m} entries but 'value' has {n} frames"
    if m == n or c.live:
        return 0, min(m, n)
    if m == n + 1 and c.creator.lower().startswith("espresso"):
        c.note(path, f"{shape} (ESPResSo's writer, until its fix of June 2026, wrote "
               f"frame k's {name} at entry k + 1, after one it created empty)",
               f"entries 1..{n} used")
        return 1, n
    if m > n:
        c.note(path, shape, f"the first {n} {name}s used")
        return 0, n
    if m == n - 1:
        c.note(path, f"{shape} (a writer stopped in the middle of a frame)",
               "the last frame of 'value' left out")
        return 0, m
    return None


def _sampling_dataset(c: _Ctx, grp: h5py.Group, name: str, where: str) -> h5py.Dataset | None:
    """``grp/step`` or ``grp/time`` as a dataset, or None (absent or unusable: noted)."""
    if not _has(grp, name):
        return None
    try:
        obj = _get(c, grp, name, where)
    except H5MDFormatError as err:
        c.note(f"{where}/{name}", err.problem, f"{name!r} ignored")
        return None
    if not isinstance(obj, h5py.Dataset):
        c.note(f"{where}/{name}", f"{name!r} must be a dataset", f"{name!r} ignored")
        return None
    _check_dataset(c, obj, f"{where}/{name}")
    _refresh(c, obj)
    return obj


def _fixed_steps(c: _Ctx, step_ds: h5py.Dataset, n: int, where: str) -> np.ndarray | None:
    """Steps of fixed-interval sampling (scalar ``step`` with an ``offset``), or None."""
    interval = _read_small(c, step_ds, f"{where}/step")
    offset = _attr(step_ds, "offset", 0) or 0
    if interval.dtype.kind not in "iu" or not isinstance(offset, int):
        c.note(f"{where}/step", "'step' and its 'offset' must be integers", _NUMBERED)
        return None
    return int(offset) + int(interval) * np.arange(n, dtype=np.int64)


def _explicit_steps(c: _Ctx, step_ds: h5py.Dataset, n: int, where: str) -> np.ndarray | None:
    """Steps of explicit sampling (one per frame), or None where unusable (noted)."""
    path = f"{where}/step"
    if step_ds.shape is None or step_ds.ndim != 1:
        c.note(path, f"'step' has shape {step_ds.shape} but 'value' has {n} frames", _NUMBERED)
        return None
    if step_ds.dtype.kind not in "iuf":
        c.note(path, f"'step' must be integer, not {step_ds.dtype}", _NUMBERED)
        return None
    rows = _sampled_rows(c, "step", int(step_ds.shape[0]), n, path)
    if rows is None:
        c.note(path, f"'step' has shape {step_ds.shape} but 'value' has {n} frames",
               _NUMBERED)
        return None
    raw = _unwritten_steps_cut(c, step_ds, _read_small(c, step_ds, path, rows[1],
                                                      start=rows[0]), path)
    if raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or not np.array_equal(raw, np.round(raw)):
            c.note(path, f"'step' must be integer, not {step_ds.dtype}", _NUMBERED)
            return None
        c.note(path, f"'step' must be integer, not {step_ds.dtype}", "converted to integers")
    return raw.astype(np.int64, copy=False)


def _unwritten_steps_cut(c: _Ctx, step_ds: h5py.Dataset, raw: np.ndarray, path: str
                         ) -> np.ndarray:
    """``raw`` steps without the last entries that hold the fill value of ``step_ds``
    where it cannot be a step (not above the step before them): frames allocated but
    never written. GROMACS grows ``value``, ``step`` and ``time`` a chunk (20 frames) at a
    time, with fill value -1, and its reader counts the frames the same way
    (``GmxH5mdTimeDataBlock::getNumberOfFrames``)."""
    fill = _fill_value(step_ds)
    if fill is None or raw.ndim != 1 or not raw.size:
        return raw
    written = np.flatnonzero(raw != fill)
    if not written.size:
        return raw  # no step but the fill value: nothing to tell the frames by
    keep = int(written[-1]) + 1
    if keep == raw.size or not fill <= raw[keep - 1]:
        return raw
    c.note(path, f"'step' holds its fill value {fill} from frame {keep} on "
           f"({raw.size - keep} frame(s)): allocated but never written (GROMACS grows its "
           "datasets a chunk at a time)", f"the {keep} frame(s) before them read")
    return raw[:keep]


def _only_fill(c: _Ctx, dset: h5py.Dataset, start: int, path: str) -> bool:
    """Whether the entries of ``dset`` from ``start`` on all hold its own fill value."""
    fill = _fill_value(dset)
    if fill is None:
        return False
    try:
        tail = _read_small(c, dset, path, int(dset.shape[0]) - start, start=start)
    except H5MDFormatError:  # too long to read at open time: not a chunk grown ahead
        return False
    return bool(np.all(tail == fill))


def _times(c: _Ctx, time_ds: h5py.Dataset | None, n: int, where: str) -> np.ndarray | None:
    """Times of the frames (fixed or explicit), or None (absent or unusable: noted)."""
    if time_ds is None:
        return None
    path = f"{where}/time"
    if time_ds.dtype.kind not in "iuf":
        c.note(path, f"'time' must be numeric, not {time_ds.dtype}", "'time' ignored")
        return None
    if time_ds.shape == ():
        t_raw = _read_small(c, time_ds, path)
        t_off = _attr(time_ds, "offset", 0.0) or 0.0
        if not isinstance(t_off, (int, float)) or not math.isfinite(float(t_raw)) \
                or not math.isfinite(t_off):
            c.note(path, "'time' and its 'offset' must be finite numbers", "'time' ignored")
            return None
        return float(t_off) + float(t_raw) * np.arange(n, dtype=np.float64)
    if time_ds.ndim != 1:
        c.note(path, f"'time' has shape {time_ds.shape} but 'value' has {n} frames",
               "'time' ignored")
        return None
    m = int(time_ds.shape[0])
    # beyond n, the fill value: frames never written, said of 'step' already
    rows = (0, n) if m > n and _only_fill(c, time_ds, n, path) else _sampled_rows(
        c, "time", m, n, path)
    if rows is None:
        c.note(path, f"'time' has shape {time_ds.shape} but 'value' has {n} frames",
               "'time' ignored")
        return None
    try:
        time = _read_small(c, time_ds, path, rows[1], start=rows[0]).astype(np.float64,
                                                                             copy=False)
    except H5MDFormatError as err:  # its declared size absurd: the frames stay, untimed
        c.note(path, err.problem, "'time' ignored")
        return None
    bad = np.flatnonzero(~np.isfinite(time))
    if bad.size:
        c.note(path, f"'time' holds {time[bad[0]]} at frame {int(bad[0])} ({bad.size} "
               "such frame(s))", "'time' ignored")
        return None
    return time


_NO_STEP = ("time-dependent element has a 'value' but no 'step' (H5MD requires 'step' "
            "next to 'value')")


def _sampling(c: _Ctx, grp: h5py.Group, n_frames: int, where: str) -> Sampling:
    """The sampling of an element whose value has ``n_frames`` frames.

    In a live (SWMR) file the element may hold fewer steps/times than values (or more)
    while a writer appends: the sampling is then cut to the frames all three hold. A
    missing or unusable ``step`` is noted and the frames numbered 0..n-1.
    """
    if n_frames > MAX_FRAMES:
        raise H5MDFormatError(
            c.filename, where, f"declares {n_frames} frames, more than h5mdx accepts"
        )
    step_ds = _sampling_dataset(c, grp, "step", where)
    time_ds = _sampling_dataset(c, grp, "time", where)
    key = (_addr(step_ds) if step_ds is not None else ("implicit", where),
           _addr(time_ds) if time_ds is not None else None)
    if (*key, n_frames) in c.samplings:
        for i in c.sampling_problems[(*key, n_frames)]:  # they concern this element too
            p = c.problems[i]
            c.problems[i] = replace(p, shared_by=(*p.shared_by, where))
        return c.samplings[(*key, n_frames)]
    first = len(c.problems)
    c.samplings[(*key, n_frames)] = sampling = _read_sampling(
        c, grp, step_ds, time_ds, n_frames, where, key
    )
    c.sampling_problems[(*key, n_frames)] = range(first, len(c.problems))
    return sampling


def _left_beside(grp: h5py.Group) -> str:
    """The datasets of element group ``grp`` other than ``value``, ``step`` and ``time``,
    which are left out, as words to add to a note (H5MD-NOMAD's ensemble averages keep
    their axis there: ``bins``, ``times``, with no ``step``); "" where none."""
    try:
        names = sorted(k for k in grp if k not in ("value", "step", "time")
                       and isinstance(grp.get(k, getlink=True), h5py.HardLink)
                       and isinstance(grp[k], h5py.Dataset))
    except (OSError, KeyError, RuntimeError, ValueError):
        return ""
    if not names:
        return ""
    return f"; beside 'value', {', '.join(repr(n) for n in names)} left out"


def _read_sampling(c: _Ctx, grp: h5py.Group, step_ds: h5py.Dataset | None,
                   time_ds: h5py.Dataset | None, n_frames: int, where: str,
                   key: tuple) -> Sampling:
    time_unit = _unit_attr(c, time_ds, f"{where}/time") if time_ds is not None else None
    if step_ds is None:
        if not _has(grp, "step"):
            c.note(where, _NO_STEP, f"no step: {_NUMBERED}{_left_beside(grp)}")
        step = None
    elif step_ds.shape == ():
        step = _fixed_steps(c, step_ds, n_frames, where)
    else:
        step = _explicit_steps(c, step_ds, n_frames, where)
    n = n_frames if step is None else min(n_frames, step.shape[0])
    time = _times(c, time_ds, n, where)
    if time is not None and time.shape[0] < n:  # times lag behind (live, or stopped)
        n = time.shape[0]
        step = None if step is None else step[:n]
    if c.version == (1, 0) and step_ds is not None:  # minor: no value is in doubt
        if time_ds is None:
            c.note(where, "H5MD 1.0 asks for a 'time' beside 'step'", "frames timed by "
                   "their steps", minor=True)
        if step_ds.shape == ():
            c.note(f"{where}/step", "fixed-interval sampling (a scalar 'step' with an "
                   "offset) is H5MD 1.1's, not 1.0's", "read as H5MD 1.1 defines it",
                   minor=True)
    if step is None:
        kind, step = "implicit", np.arange(n, dtype=np.int64)
    else:
        kind = "fixed" if step_ds is not None and step_ds.shape == () else "explicit"
        back = np.flatnonzero(np.diff(step) <= 0)
        if back.size:  # H5MD: the steps of successive frames increase
            i = int(back[0]) + 1
            c.note(f"{where}/step", f"'step' does not increase: frame {i} has step "
                   f"{int(step[i])} after {int(step[i - 1])} ({back.size} such frame(s))",
                   "frames kept in the order stored")
    return Sampling(kind, step, time, time_unit if time is not None else None, key)


# ----------------------------------------------------------------------------- elements


def _check_dtype(c: _Ctx, dtype: np.dtype, where: str) -> None:
    """Refuse element types h5mdx cannot read: numbers and strings are read."""
    if dtype.kind in "biufcSU" or h5py.check_string_dtype(dtype) is not None:
        return
    what = ("object references, which h5mdx does not follow"
            if h5py.check_ref_dtype(dtype) is not None else f"dtype {dtype}")
    raise H5MDFormatError(
        c.filename, where, f"unsupported {what} (h5mdx reads numeric and string elements)"
    )


def _dataset_info(
    c: _Ctx,
    name: str,
    path: str,
    dset: h5py.Dataset,
    *,
    time_dependent: bool,
    sampling: Sampling | None,
    unit: str | None,
    link_path: str | None = None,
    group: h5py.Group | None = None,
) -> ElementInfo:
    value_path = dset.name
    if link_path is not None:
        try:
            if _fileno(dset) != c.root_fileno:
                value_path = link_path  # reached through an external link: read it by that
        except (KeyError, OSError, RuntimeError, ValueError):
            pass
    if dset.shape is None:  # HDF5's null dataspace: not a scalar, no value at all
        raise H5MDFormatError(c.filename, link_path or path,
                              "an empty dataset (null dataspace) holds no value")
    try:
        dtype = dset.dtype
        shape = tuple(int(s) for s in dset.shape)
        chunks = dset.chunks
        growable = bool(time_dependent and dset.maxshape and dset.maxshape[0] is None)
        compression, compression_opts = _compression(dset)
    except (OSError, TypeError, ValueError, RuntimeError, KeyError) as err:
        raise H5MDFormatError(c.filename, path, f"cannot read dataset metadata: {err}") from None
    _check_dtype(c, dtype, link_path or path)
    _check_filters(c, dset, link_path or path)
    if sampling is not None and shape and sampling.step.shape[0] != shape[0]:
        # the frames with a step: a live file's so far, or a stopped writer's
        shape = (int(sampling.step.shape[0]), *shape[1:])
    storage = _storage_size(c, dset) or 0
    return ElementInfo(
        name=name,
        path=path,
        value_path=value_path,
        shape=shape,
        dtype=dtype,
        chunks=tuple(chunks) if chunks else None,
        compression=compression,
        compression_opts=compression_opts,
        filters=_filters(dset),
        unit=unit,
        time_dependent=time_dependent,
        sampling=sampling,
        fillvalue=_fill_value(dset),
        storage_size=storage,
        growable=growable,
        # the element group's attributes (H5MD's particles_group) under its value's
        attrs={**(_other_attrs(group, None) if group is not None else {}),
               **_other_attrs(dset, dtype)},
    )


#: Attributes that say how a dataset is stored, not what it holds (HDF5 dimension
#: scales, netCDF-4's bookkeeping), or that h5mdx serves otherwise (``unit``).
_STORAGE_ATTRS = frozenset({"unit", "unit_factor", "DIMENSION_LIST", "REFERENCE_LIST",
                            "CLASS", "NAME", "_Netcdf4Dimid", "_Netcdf4Coordinates",
                            "_FillValue"})


def _other_attrs(dset: h5py.HLObject, dtype: np.dtype | None) -> dict[str, Any]:
    """The attributes of an element's ``value`` beyond its unit, as plain values (the
    names of an enum dtype as CF's ``flag_values``/``flag_meanings``); those that cannot
    be read are skipped."""
    out: dict[str, Any] = {}
    try:
        names = [] if _no_attrs(dset) else list(dset.attrs)
    except (OSError, RuntimeError, KeyError, TypeError):
        names = []
    for name in names:
        if name in _STORAGE_ATTRS:
            continue
        try:
            value = dset.attrs[name]
        except (OSError, RuntimeError, KeyError, TypeError, ValueError):
            continue
        if isinstance(value, h5py.Reference) or (
                isinstance(value, np.ndarray) and value.dtype.kind == "O"
                and any(isinstance(v, h5py.Reference) for v in value.ravel())):
            value = _ref_names(dset, value)
        out[name] = _decode(value)
    enum = h5py.check_enum_dtype(dtype) if dtype is not None else None
    if enum:
        out["flag_values"] = [int(v) for v in enum.values()]
        out["flag_meanings"] = " ".join(str(k) for k in enum)
    return out


def reference_paths(obj: h5py.HLObject, value: Any) -> Any:
    """The paths in ``obj``'s file that the object reference(s) ``value`` point to:
    a str, or an object array of the same shape; None for a null or unreadable one.

    Parameters
    ----------
    obj : h5py object
        Any object of the file the references belong to.
    value : h5py.Reference or numpy.ndarray of them
        An attribute's value (H5MD's ``particles_group``).
    """
    def path(ref: Any) -> str | None:
        try:
            return str(obj.file[ref].name) if ref else None
        except (KeyError, OSError, RuntimeError, TypeError, ValueError):
            return None

    if isinstance(value, np.ndarray):
        return np.array([path(r) for r in value.ravel()], dtype=object).reshape(value.shape)
    return path(value)


def _ref_names(dset: h5py.HLObject, value: Any) -> Any:
    """:func:`reference_paths` as attribute values: "" for a null one, arrays as lists."""
    paths = reference_paths(dset, value)
    if isinstance(paths, np.ndarray):
        return [p or "" for p in paths.ravel()]
    return paths or ""


def _element(c: _Ctx, name: str, obj: h5py.HLObject, path: str,
             per_particle: bool = False) -> ElementInfo:
    """Describe the element ``obj`` found at H5MD path ``path`` (``per_particle``: an
    element of a particles group)."""
    if isinstance(obj, h5py.Dataset):
        return _plain_element(c, name, obj, path)
    if not isinstance(obj, h5py.Group):
        raise H5MDFormatError(c.filename, path, "is neither a group nor a dataset")
    if not _has(obj, "value"):
        raise H5MDFormatError(
            c.filename,
            path,
            "element has no 'value' dataset (a time-dependent H5MD element is a group "
            "with 'value' and 'step')",
        )
    value = _get(c, obj, "value", path)
    if not isinstance(value, h5py.Dataset):
        raise H5MDFormatError(c.filename, f"{path}/value", "'value' must be a dataset")
    _check_dataset(c, value, f"{path}/value")
    _refresh(c, value)
    if not _has(obj, "step") and not _has(obj, "time"):
        function = _function_of(c, name, obj, value, path)
        if function is not None:
            return function
        if per_particle and name in PER_PARTICLE_SCALARS and value.ndim == 1:
            c.note(path, "a per-particle element stored as a group with a one-dimensional "
                   "'value' and no 'step' (ESPResSo 3's h5md.tcl writes its masses so)",
                   "read as time-independent, one value per particle")
            return _dataset_info(c, name, path, value, time_dependent=False, sampling=None,
                                 unit=_unit_attr(c, value, f"{path}/value"),
                                 link_path=f"{path}/value", group=obj)
    if value.shape is None or len(value.shape) == 0:
        raise H5MDFormatError(
            c.filename,
            f"{path}/value",
            "'value' of a time-dependent element must have a time axis, but it is a scalar",
        )
    frames = _frames_stored(c, value, _n_steps(obj))
    if frames is not None:
        c.note(f"{path}/value", f"declares {value.shape[0]} frames but stores none after "
               f"frame {frames - 1} (space allocated ahead by a writer that stopped)",
               f"its first {frames} frames read")
    _check_declared(c, value, f"{path}/value", frames)
    if not c.live:
        _check_written(c, value, f"{path}/value", frames)
    sampling = _sampling(c, obj, int(value.shape[0]) if frames is None else frames, path)
    unit = _unit_attr(c, value, f"{path}/value")
    if unit is None and "unit" in obj.attrs:
        unit = _unit_attr(c, obj, path)
        if unit is not None:
            c.note(path, "the 'unit' attribute is on the element group, not on its 'value'",
                   f"unit {unit!r} read from the group")
    return _dataset_info(c, name, path, value, time_dependent=True, sampling=sampling, unit=unit,
                         link_path=f"{path}/value", group=obj)


def _plain_element(c: _Ctx, name: str, dset: h5py.Dataset, path: str,
                   sampling: Sampling | None = None) -> ElementInfo:
    """A dataset as an element: time-independent, or (``sampling`` given) a time series
    sampled by a ``step`` and ``time`` it shares (:func:`_shared_series`)."""
    where = dset.name or path
    _check_dataset(c, dset, where)
    _check_declared(c, dset, where)
    if not c.live:
        _check_written(c, dset, where)
    return _dataset_info(c, name, path, dset, time_dependent=sampling is not None,
                         sampling=sampling, unit=_unit_attr(c, dset, path), link_path=path)


#: The axes H5MD-NOMAD's observables without ``step`` are functions of: ``bins`` (ensemble
#: averages: radial distribution functions) and ``times`` (correlation functions: mean
#: squared displacements).
FUNCTION_AXES = ("bins", "times")


def _function_of(c: _Ctx, name: str, grp: h5py.Group, value: h5py.Dataset,
                 path: str) -> ElementInfo | None:
    """H5MD-NOMAD's ensemble averages and correlation functions (group attribute ``type``
    ``ensemble_average``, ``correlation_function``; no ``step``, no ``time``): a ``value``
    beside the axis it is a function of (:data:`FUNCTION_AXES`, as long as its first
    axis), or a scalar ``value`` (a diffusion constant), read as a time-independent
    element. The axis, and the group's other datasets of its length (``errors``), are read
    into :attr:`ElementInfo.axis` and :attr:`ElementInfo.beside`; its scalar datasets
    (``n_bins``, ``frame_start``, ``type``, ``error_type``) into its ``attrs``, the group's
    ``type`` attribute as ``observable_type``. None for any other group."""
    shape = value.shape
    if shape is None:
        return None
    axis_name = next((k for k in FUNCTION_AXES if _has(grp, k)), None)
    if shape != () and axis_name is None:
        return None
    n = int(shape[0]) if shape else None
    axis: tuple[str, np.ndarray, str | None] | None = None
    beside: dict[str, tuple[np.ndarray, str | None]] = {}
    scalars: dict[str, Any] = {}
    for key in grp:
        if key == "value" or not isinstance(grp.get(key, getlink=True), h5py.HardLink):
            continue
        dset = grp[key]
        where = f"{path}/{key}"
        if not isinstance(dset, h5py.Dataset) or dset.shape is None:
            continue
        if dset.shape == ():
            scalars[key] = _decode(_read_small(c, dset, where)[()])
        elif (n is not None and dset.shape == (n,) and dset.dtype.kind in "iuf"
              and dset.size * dset.dtype.itemsize <= MAX_SMALL_READ):
            values = (_read_small(c, dset, where), _unit_attr(c, dset, where))
            if key == axis_name:
                axis = (key, *values)
            else:
                beside[key] = values
    if shape != () and axis is None:  # an axis of another length, or not numbers
        return None
    info = _dataset_info(c, name, path, value, time_dependent=False, sampling=None,
                         unit=_unit_attr(c, value, f"{path}/value"),
                         link_path=f"{path}/value", group=grp)
    attrs = dict(info.attrs)
    if "type" in attrs:
        attrs["observable_type"] = attrs.pop("type")
    attrs.update(scalars)
    c.note(path, "a 'value' without 'step' (H5MD-NOMAD's ensemble averages and "
           "correlation functions)", f"read as a function of {axis_name!r}" if axis
           else "read as a time-independent scalar", minor=True)
    return replace(info, attrs=attrs, axis=axis, beside=beside)


def _n_steps(grp: h5py.Group) -> int | None:
    """The number of entries of ``grp``'s ``step`` where it is a 1-D dataset, else None."""
    try:
        step = grp.get("step")
        return int(step.shape[0]) if isinstance(step, h5py.Dataset) and step.ndim == 1 else None
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return None


def _trim_live(elements: list[ElementInfo]) -> dict[str, ElementInfo]:
    """Cut elements that share one ``step`` dataset to the frames they all hold (SWMR)."""
    shortest: dict[tuple, int] = {}
    for el in elements:
        if el.time_dependent and el.sampling is not None and el.sampling.kind == "explicit":
            k = el.sampling.key
            shortest[k] = min(shortest.get(k, el.shape[0]), el.shape[0])
    out = {}
    for el in elements:
        s = el.sampling
        if s is not None and s.kind == "explicit" and el.shape[0] > shortest[s.key]:
            n = shortest[s.key]
            s = replace(s, step=s.step[:n], time=None if s.time is None else s.time[:n])
            el = replace(el, shape=(n, *el.shape[1:]), sampling=s)
        out[el.path] = el
    return out


#: Particle elements that hold one number per particle (a vector for the others).
_SCALAR_ELEMENTS = ("species", "id", "mass", "charge")


def _as_time_series(c: _Ctx, el: ElementInfo) -> ElementInfo:
    """A plain dataset holding one axis more than its per-particle form: a time series."""
    if el.time_dependent or el.name not in KNOWN_PARTICLE_ELEMENTS or el.data is not None:
        return el
    per_particle = 1 if el.name in _SCALAR_ELEMENTS else 2
    if len(el.shape) != per_particle + 1 or el.dtype.kind not in "biuf":
        return el
    c.note(el.path, f"a plain dataset of shape {el.shape} where H5MD expects a time-dependent "
           "element (a group with 'value' and 'step')", f"read as a time series, {_NUMBERED}")
    n = el.shape[0]
    sampling = Sampling("implicit", np.arange(n, dtype=np.int64), None, None,
                        ("implicit", el.path))
    return replace(el, time_dependent=True, sampling=sampling)


def _box_value(c: _Ctx, grp: h5py.Group, key: str, path: str) -> Any:
    """A box property stored as an attribute or (ZnH5MD) as a small dataset."""
    value = _attr(grp, key)
    if value is None and _has(grp, key):
        obj = _get(c, grp, key, path)
        if isinstance(obj, h5py.Dataset) and (obj.size or 0) <= 16:
            value = _decode(_read_small(c, obj, f"{path}/{key}"))
    if isinstance(value, list) and len(value) == 1 and key != "boundary":
        value = value[0]
    return value


def _edges_from_attr(c: _Ctx, grp: h5py.Group, path: str) -> ElementInfo | None:
    """Box edges stored as an attribute of the box group instead of a dataset."""
    raw = grp.attrs.get("edges") if "edges" in grp.attrs else None
    arr = np.asarray(raw) if raw is not None else None
    if arr is None or arr.dtype.kind not in "iuf" or arr.ndim not in (1, 2) or arr.size > 9:
        return None
    c.note(f"{path}/edges", "box edges stored as an attribute of the box group, not as a "
           "dataset or element", "read as fixed (time-independent) edges")
    return ElementInfo(
        name="box_edges", path=f"{path}/edges", value_path=f"{path}/edges",
        shape=tuple(int(x) for x in arr.shape), dtype=arr.dtype, chunks=None,
        compression=None, compression_opts=None, filters=(), unit=_unit_attr(c, grp, path),
        time_dependent=False, sampling=None, fillvalue=None, storage_size=0, data=arr,
    )


def _box_edges(c: _Ctx, grp: h5py.Group, path: str) -> ElementInfo | None:
    if not _has(grp, "edges"):
        return _edges_from_attr(c, grp, path)
    try:
        obj = _get(c, grp, "edges", path)
        if _never_written(c, obj):
            # ESPResSo 3's h5md.tcl creates a (3, 3) edges dataset it never writes: its
            # zeros are no box, and must not make a periodic one of size 0
            c.note(f"{path}/edges", "was created but never written (no storage allocated)",
                   "left out: the box has no edges")
            return None
        edges = _element(c, "box_edges", obj, f"{path}/edges")
    except H5MDFormatError as err:
        c.left_out(err, f"{path}/edges")
        return None
    unit = _group_unit(grp) if edges.unit is None else None
    if unit is not None:  # Sarkas writes the length unit on the box group (init_box_group)
        c.note(f"{path}/edges", "no unit of its own; the box group has one (Sarkas "
               "writes the length unit there)", f"unit {unit!r}, the box group's")
        edges = replace(edges, unit=unit)
    return edges


def _group_unit(grp: h5py.Group) -> str | None:
    """The text of a group's ``unit`` (or netCDF's ``units``) attribute; None where it
    has none, or none that is text."""
    if _no_attrs(grp):
        return None
    try:
        return unit_text(_attr(grp, "unit", _attr(grp, "units"))) or None
    except ValueError:
        return None


def _never_written(c: _Ctx, obj: h5py.HLObject) -> bool:
    """Whether ``obj`` (a dataset, or an element's ``value``) holds no stored data at all
    and no fill value of its own: every value it reads is HDF5's default 0."""
    try:
        if isinstance(obj, h5py.Group):
            if not isinstance(obj.get("value", getlink=True), h5py.HardLink):
                return False  # linked: the element's reading says what is wrong with it
            obj = obj.get("value")
        if not isinstance(obj, h5py.Dataset) or not obj.shape or not math.prod(obj.shape):
            return False
        return (_layout(obj) in ("contiguous", "chunked") and _fill_value(obj) is None
                and _storage_size(c, obj) == 0)
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return False


def _edges_dimension(edges: ElementInfo | None) -> int | None:
    """The dimension an edges shape of H5MD's forms, ``(D,)`` or ``(D, D)`` (per frame),
    says; None for any other."""
    if edges is None:
        return None
    tail = edges.shape[1:] if edges.time_dependent else edges.shape
    if len(tail) == 2 and tail[0] != tail[1]:
        return None
    return int(tail[-1]) if tail and len(tail) <= 2 and 1 <= tail[-1] <= 3 else None


def _valid_dimension(value: Any) -> int | None:
    try:
        if isinstance(value, (list, dict, complex, str)) or float(value) != int(value):
            return None
        dim = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return dim if 1 <= dim <= 3 else None


def _box_dimension(c: _Ctx, grp: h5py.Group, path: str, edges: ElementInfo | None) -> int:
    raw = _box_value(c, grp, "dimension", path)
    if raw is None and "dimensions" in grp.attrs:
        raw = _box_value(c, grp, "dimensions", path)
        if _valid_dimension(raw) is not None:
            c.note(path, "box has a 'dimensions' attribute instead of 'dimension'",
                   f"dimension {_valid_dimension(raw)} read from 'dimensions'")
            return int(raw)
    dim = _valid_dimension(raw)
    if dim is not None:
        if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)):
            c.note(path, f"box 'dimension' is {raw!r}, not an integer", f"dimension {dim}",
                   minor=True)
        return dim
    problem = ("box has no 'dimension' attribute" if raw is None else
               f"box 'dimension' must be an integer 1-3, not {raw!r}")
    from_edges = _edges_dimension(edges)
    if from_edges is not None:
        c.note(path, problem, f"no box dimension: taken from edges shape ({from_edges})")
        return from_edges
    c.note(path, problem, "dimension 3 assumed")
    return 3


def _box_boundary(c: _Ctx, grp: h5py.Group, path: str, dimension: int,
                  edges: ElementInfo | None) -> tuple[str, ...]:
    boundary = _box_value(c, grp, "boundary", path)
    guess = "periodic" if edges is not None else "none"
    if boundary is None:
        what = ("has no 'boundary' (H5MD requires one per dimension)"
                if "boundary" not in grp.attrs and "boundary" not in grp
                else "has a 'boundary' that cannot be read")
        c.note(path, f"the box {what}", f"boundary {guess!r} assumed")
        return (guess,) * dimension
    if isinstance(boundary, str):  # ESPResSo writes one string for every dimension
        c.note(path, f"box 'boundary' is one string ({boundary!r}), not one per dimension",
               f"{boundary!r} in each of the {dimension} dimensions", minor=True)
        boundary = [boundary] * dimension
    if (isinstance(boundary, list) and len(boundary) == dimension and boundary
            and all(isinstance(b, (bool, int, np.bool_, np.integer)) and int(b) in (0, 1)
                    for b in boundary)):  # periodicity flags, as ASE's pbc
        flags = boundary
        boundary = ["periodic" if b else "none" for b in flags]
        c.note(path, f"box 'boundary' holds flags ({[int(b) for b in flags]}), not "
               "'periodic' or 'none'", f"{boundary} (periodic where set)")
    if (isinstance(boundary, list) and len(boundary) == dimension
            and all(isinstance(b, str) for b in boundary)):
        odd = sorted({b for b in boundary if b not in ("periodic", "none")})
        if odd:
            c.note(path, f"box 'boundary' values are 'periodic' or 'none', not "
                   f"{', '.join(repr(b) for b in odd)}", "served as stored")
        return tuple(boundary)
    c.note(path, f"box 'boundary' must hold {dimension} strings ('periodic' or 'none'), "
           f"not {boundary!r}", f"boundary {guess!r} assumed")
    return (guess,) * dimension


def _box(c: _Ctx, grp: h5py.Group, path: str, components: int | None = None) -> BoxInfo:
    """The box at ``path``; ``components``: the number of spatial components of the
    group's positions, which the box ``dimension`` must equal."""
    edges = _box_edges(c, grp, path)
    dimension = _box_dimension(c, grp, path, edges)
    if components is not None and components != dimension:
        c.note(path, f"box 'dimension' is {dimension} but the positions have {components} "
               "components per particle", f"dimension {components} taken from the positions")
        dimension = components
    edges, lower = _usable_edges(c, grp, edges, path, dimension)
    boundary = _box_boundary(c, grp, path, dimension, edges)
    if edges is None and "periodic" in boundary and not _has(grp, "edges") \
            and "edges" not in grp.attrs:
        c.note(path, f"the boundary is {list(boundary)} but the box has no edges (a run "
               "without a box, as MindSPONGE and glsim write it)", "no edges: positions cannot be wrapped")
    extras = _box_extras(c, grp, path, dimension)
    return BoxInfo(path=path, dimension=dimension, boundary=boundary, edges=edges,
                   offset=extras.get("offset", lower), pbc=extras.get("pbc"))


def _usable_edges(c: _Ctx, grp: h5py.Group, edges: ElementInfo | None, path: str,
                  dimension: int) -> tuple[ElementInfo | None, ElementInfo | None]:
    """The edges of a ``dimension``-dimensional box as served, and the box's lower corner
    where the file gave bounds instead (:func:`_from_bounds`); edges of no usable form
    are noted and left out (None)."""
    if edges is None:
        return None, None
    tail = edges.shape[1:] if edges.time_dependent else edges.shape
    if dimension == 3 and tail in ((3, 2), (1, 3, 2)):
        return _from_bounds(c, grp, edges, path)
    if not edges.time_dependent and edges.shape in ((1, dimension),
                                                    (1, dimension, dimension)):
        return _one_box(c, grp, edges, path), None
    if edges.time_dependent and edges.shape == (dimension,):
        return _no_frame_axis(c, edges, path), None
    if tail not in ((dimension,), (dimension, dimension)):
        c.note(f"{path}/edges", f"box edges have shape {edges.shape}; expected "
               f"(…, {dimension}) or (…, {dimension}, {dimension}) for a "
               f"{dimension}-dimensional box", "left out")
        return None, None
    if tail == (dimension, dimension) and not _valid_matrix(c, grp, edges, path):
        return None, None
    return edges, None


def _valid_matrix(c: _Ctx, grp: h5py.Group, edges: ElementInfo, path: str) -> bool:
    """Whether the first box of ``edges`` (box vectors as rows) is no LAMMPS triclinic
    ``BOX BOUNDS`` block (rows ``[lo, hi, tilt]``, stored as edges by converters such as
    H5MD_Analysis); noted where it is one."""
    n = 1 if edges.time_dependent else None
    try:
        dset = grp.file[edges.value_path] if edges.data is None else None
        first = edges.data if dset is None else _read_small(c, dset, f"{path}/edges", n)
        box = np.asarray(first, dtype=np.float64).reshape(edges.shape[-2:])
    except (H5MDFormatError, KeyError, OSError, RuntimeError, TypeError, ValueError):
        return True  # unread here: the reads of the data will say what is wrong
    if box.shape != (3, 3) or not np.isfinite(box).all():
        return True  # NaN padding, another dimension: served as stored
    det = float(np.linalg.det(box))
    # box vectors as rows span a right-handed cell, or a slab (a zero vector), or a
    # left-handed one: all served as stored. Bounds rows [lo, hi, tilt] have lo < hi in
    # every row, and span no right-handed cell
    if det > 0 or not (box[:, 0] < box[:, 1]).all():
        return True
    c.note(f"{path}/edges", f"the first box matrix {box.tolist()} reads as LAMMPS' "
           "triclinic bounds, rows [lo, hi, tilt] (lo < hi in every row, determinant "
           f"{det:.6g}), not as box vectors", "left out")
    return False


def _from_bounds(c: _Ctx, grp: h5py.Group, edges: ElementInfo,
                 path: str) -> tuple[ElementInfo | None, ElementInfo | None]:
    """Edges of shape ``(…, 3, 2)``: LAMMPS' orthogonal ``BOX BOUNDS`` rows ``[lo, hi]``
    per dimension, as converters such as H5MD_Analysis store them. Served, noted, as the
    edges ``hi - lo`` and the lower corner ``lo`` (``box_offset``), both in the unit of
    the edges (``replace`` keeps it); None where the bounds cannot be read or ``hi < lo``
    (in the first frame: the others are read lazily, ``ElementInfo.bounds``; fixed
    bounds are read whole)."""
    where = f"{path}/edges"
    timed = edges.time_dependent
    try:
        bounds = np.asarray(_read_small(c, grp.file[edges.value_path], where,
                                        1 if timed else None), dtype=np.float64)
        bounds = bounds if timed else bounds.reshape(3, 2)
    except (H5MDFormatError, KeyError, OSError, RuntimeError, ValueError) as err:
        c.note(where, f"box edges of shape {edges.shape} cannot be read ({err})", "left out")
        return None, None
    lo, hi = bounds[..., 0], bounds[..., 1]
    if (hi < lo).any():
        c.note(where, f"box edges have shape {edges.shape} but are no [lo, hi] bounds "
               f"({'in the first frame, ' if timed else ''}some hi < lo)", "left out")
        return None, None
    c.note(where, f"box edges have shape {edges.shape}: LAMMPS' bounds [lo, hi] per "
           "dimension, not H5MD's edges", "edges hi - lo, and lo as the box offset")
    if timed:  # (T, 3, 2) or (T, 1, 3, 2): served (T, 3), frame by frame
        shape: tuple[int, ...] = (int(edges.shape[0]), 3)
        dtype = edges.dtype if edges.dtype.kind == "f" else np.dtype(np.float64)
        chunks = None if edges.chunks is None else (int(edges.chunks[0]), 3)
        lower = replace(edges, name="box_offset", path=f"{path}/offset", shape=shape,
                        dtype=dtype, chunks=chunks, bounds="lower")
        return replace(edges, shape=shape, dtype=dtype, chunks=chunks, bounds="extent"), lower
    shape = tuple(int(n) for n in lo.shape)
    lower = replace(edges, name="box_offset", path=f"{path}/offset", shape=shape,
                    dtype=lo.dtype, data=lo)
    return replace(edges, shape=shape, dtype=lo.dtype, data=hi - lo), lower


def _one_box(c: _Ctx, grp: h5py.Group, edges: ElementInfo, path: str) -> ElementInfo | None:
    """Fixed box edges stored with a leading axis of length 1 (MindSPONGE writes one box
    per walker, ``(walkers, 3)``, also for one walker): its one box, noted; None (noted)
    where it cannot be read."""
    try:
        row = _read_small(c, grp.file[edges.value_path], f"{path}/edges")[0]
    except H5MDFormatError as err:
        c.left_out(err, f"{path}/edges")
        return None
    c.note(f"{path}/edges", f"box edges have shape {edges.shape}: a leading axis of length "
           "1 (MindSPONGE writes one box per walker)", "read as fixed edges, its one box")
    return replace(edges, shape=tuple(int(n) for n in row.shape), data=row)


def _no_frame_axis(c: _Ctx, edges: ElementInfo, path: str) -> ElementInfo:
    """Box edges stored as an element (``value`` with ``step`` and ``time``) whose
    ``value`` is one box of shape ``(D,)``, with no axis of frames (MDMC's exporter writes
    its fixed box so, with the scalar step and time of its positions): fixed edges,
    noted. (A value of shape ``(D, D)`` is D frames of edges, and stays so.)

    Parameters
    ----------
    c : _Ctx
        The scan's context, which records the note.
    edges : ElementInfo
        The edges as read: time-dependent, of shape ``(D,)``.
    path : str
        The H5MD path of the box group.

    Returns
    -------
    ElementInfo
        The same edges, time-independent.
    """
    c.note(f"{path}/edges", f"box edges are an element with step and time but a value of "
           f"shape {edges.shape}, one box with no axis of frames (MDMC writes its fixed "
           "box so)", "read as fixed edges")
    return replace(edges, time_dependent=False, sampling=None, growable=False)


#: Box members other writers add, one value per dimension (per frame where
#: time-dependent): what each holds, for the note that reads them
_BOX_EXTRAS = {"offset": "an 'offset' (its lower corner, as HALMD writes it)",
               "pbc": "'pbc' (periodicity flags per dimension, as znh5md writes ASE's pbc)"}


def _box_extras(c: _Ctx, grp: h5py.Group, path: str,
                dimension: int) -> dict[str, ElementInfo]:
    """The box's members of :data:`_BOX_EXTRAS` found, by name (served as ``box_<name>``);
    other members H5MD does not define are noted and left out."""
    extras: dict[str, ElementInfo] = {}
    for child in grp:
        where = f"{path}/{child}"
        if child in ("edges", "dimension", "dimensions", "boundary"):
            continue  # read (a ZnH5MD box keeps its attributes as small datasets)
        if child not in _BOX_EXTRAS:
            c.note(where, "the box holds a member H5MD does not define (only 'edges')",
                   "left out")
            continue
        try:
            el = _element(c, f"box_{child}", _get(c, grp, child, path), where)
        except H5MDFormatError as err:
            c.left_out(err, where)
            continue
        tail = el.shape[1:] if el.time_dependent else el.shape
        if tail != (dimension,):
            c.note(where, f"box {child} has shape {el.shape}; expected (…, {dimension})",
                   "left out")
            continue
        c.note(where, f"the box has {_BOX_EXTRAS[child]}, which H5MD 1.1 does not define",
               f"read as box_{child}", minor=True)
        extras[child] = el
    return extras


def _n_particles(el: ElementInfo) -> int | None:
    tail = el.shape[1:] if el.time_dependent else el.shape
    return int(tail[0]) if tail else None


#: rows of a time-dependent ``id`` compared with its first (evenly spread, last included)
ORDER_ROWS = 9


def _order_rows(el: ElementInfo) -> list[int]:
    """The frames of a time-dependent ``id`` looked at: :data:`ORDER_ROWS`, spread."""
    return sorted({int(i) for i in np.linspace(0, el.shape[0] - 1, ORDER_ROWS)})


def _sampled_ids(grp: h5py.Group, el: ElementInfo | None) -> np.ndarray | None:
    """The ids of :func:`_order_rows`, ``(rows, particles)`` (a trailing axis of length 1,
    ESPResSo++'s ``(1, N, 1)``, dropped), read once for :func:`_order_varies` and
    :func:`_empty_slots`; None where there is no ``id``, where it is fixed, of another
    shape, or cannot be read (its own problem)."""
    if el is None or not el.time_dependent or len(el.shape) not in (2, 3) or (
            len(el.shape) == 3 and el.shape[2] != 1):
        return None
    try:
        ids = np.asarray(grp.file[el.value_path][_order_rows(el)])
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return ids.reshape(ids.shape[0], -1)


def _order_varies(el: ElementInfo | None, ids: np.ndarray | None) -> tuple[int, int] | None:
    """Frames ``(0, k)`` whose time-dependent ``id`` (``ids``: :func:`_sampled_ids`)
    differs in a slot where neither holds the fill value (an absent particle), among
    :data:`ORDER_ROWS` rows; None where they agree, or where there are no ``ids``."""
    if el is None or ids is None:
        return None
    rows = _order_rows(el)
    fill = el.fillvalue
    for k in range(1, len(rows)):
        both = np.ones(ids.shape[1], bool) if fill is None else (
            (ids[0] != fill) & (ids[k] != fill))
        if np.any(ids[0][both] != ids[k][both]):
            return rows[0], rows[k]
    return None


def _empty_slots(el: ElementInfo | None, ids: np.ndarray | None) -> tuple[int, int] | None:
    """The first of :data:`ORDER_ROWS` frames whose time-dependent ``id`` (``ids``:
    :func:`_sampled_ids`) holds its fill value in some slots, and how many; None where
    none does, where ``id`` has no fill value of its own, or where there are no ``ids``."""
    if el is None or ids is None or el.fillvalue is None:
        return None
    rows = _order_rows(el)
    empty = (ids == el.fillvalue).sum(axis=1)
    hit = np.flatnonzero(empty)
    return (rows[int(hit[0])], int(empty[hit[0]])) if hit.size else None


def _same_particles(c: _Ctx, elements: dict[str, ElementInfo], path: str) -> None:
    """Leave out elements whose number of particles differs from the group's."""
    counts = [n for el in elements.values()
              if not el.in_subgroup and (n := _n_particles(el)) is not None]
    if not counts:
        return
    position = elements.get("position")
    n_atoms = _n_particles(position) if position is not None else None
    if n_atoms is None:
        n_atoms = max(set(counts), key=counts.count)
    for key, el in list(elements.items()):
        n = _n_particles(el)
        if n is not None and n != n_atoms and not el.in_subgroup:
            c.note(el.path, f"has {n} particles but other elements of {path} have {n_atoms}",
                   "left out")
            del elements[key]


#: Per-particle vector elements H5MD defines: (frames,) particles x dimension
_VECTORS = ("position", "velocity", "force", "image")


def _check_vectors(c: _Ctx, elements: dict[str, ElementInfo]) -> None:
    """Note vector elements whose frames are not (particles, dimension) of 1-3: served as
    stored, but an analysis of positions cannot use them (rmsd refuses them later)."""
    for name in _VECTORS:
        el = elements.get(name)
        if el is None or el.in_subgroup or _components(el) is not None:
            continue
        tail = el.shape[1:] if el.time_dependent else el.shape
        c.note(el.path, f"{name!r} holds frames of shape {tuple(tail)}; H5MD's are (particles, "
               "dimension), the dimension 1 to 3", "served as stored")


def _components(el: ElementInfo | None) -> int | None:
    """The number of spatial components of a per-particle vector element (1-3)."""
    if el is None:
        return None
    tail = el.shape[1:] if el.time_dependent else el.shape
    return int(tail[1]) if len(tail) == 2 and 1 <= tail[1] <= 3 else None


def _holds_elements(obj: h5py.HLObject) -> bool:
    """A group that is no element (no ``value``, ``step`` or ``time``) but holds some."""
    if not isinstance(obj, h5py.Group) or any(_has(obj, k) for k in ("value", "step", "time")):
        return False
    try:
        return any(isinstance(obj.get(k), h5py.Group) and _has(obj[k], "value") for k in obj)
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return False


def _subgroup_elements(c: _Ctx, name: str, grp: h5py.Group,
                       path: str) -> dict[str, ElementInfo]:
    """The elements of a group inside a particles group, as ``<name>_<element>``
    (ESPResSo writes the Lees-Edwards offset, direction and normal so); one level."""
    c.note(path, "a group of elements inside a particles group (H5MD defines none there)",
           f"its elements read as {name}_<element>, not per particle", minor=True)
    out: dict[str, ElementInfo] = {}
    for child in grp:
        where = f"{path}/{child}"
        try:
            el = _element(c, child, _get(c, grp, child, path), where)
            out[f"{name}_{child}"] = replace(_as_time_series(c, el), in_subgroup=True)
        except H5MDFormatError as err:
            c.left_out(err, where)
    return out


#: Names of the coordinates and dimensions a Dataset of a group is given
_SERVED_NAMES = {TIME_DIM, STEP_COORD, ATOM_DIM, SPATIAL_DIM, BOX_VECTOR_DIM}


def _note_clashes(c: _Ctx, elements: Mapping[str, ElementInfo]) -> None:
    """Note the elements named as a coordinate or dimension of their Dataset (``time``,
    ``step``, ``atom``): the engine serves them as ``<name>_element``, and ``info`` lists
    what ``strict=True`` refuses."""
    for name, el in elements.items():
        if name in _SERVED_NAMES:
            c.note(el.path, f"an element named {name!r} clashes with the coordinate or "
                   "dimension of that name", f"served as {name + '_element'!r}")


def _particles_group(c: _Ctx, name: str, grp: h5py.Group) -> ParticlesGroupInfo:
    path = grp.name or f"/particles/{name}"
    elements: dict[str, ElementInfo] = {}
    nested: dict[str, ElementInfo] = {}
    box = None
    box_grp: h5py.Group | None = None
    series = _shared_series(c, grp, path)
    for child in grp:
        try:
            obj = _get(c, grp, child, path)
            if child in series:
                served = _series_name(c, grp, child, f"{path}/{child}")
                elements[served] = _plain_element(
                    c, served, obj, f"{path}/{child}",
                    _series_sampling(c, grp, int(obj.shape[0]), path))
                continue
            if series and child in _SAMPLING_NAMES and isinstance(obj, h5py.Dataset):
                continue
            if child == "box":
                if isinstance(obj, h5py.Group):
                    box_grp = obj
                else:
                    c.note(f"{path}/box", "the box must be a group", "left out")
                continue
            if child in _SAMPLING_NAMES and _shared_sampling(c, grp, obj, f"{path}/{child}"):
                continue
            if _holds_elements(obj):
                for served, el in _subgroup_elements(c, child, obj, f"{path}/{child}").items():
                    if served in nested:  # lees/edwards_offset and lees_edwards/offset
                        c.note(el.path, f"it would be served as {served!r}, the name of "
                               f"{nested[served].path}", "left out")
                    else:
                        nested[served] = el
                continue
            elements[child] = _as_time_series(c, _element(c, child, obj, f"{path}/{child}",
                                                          per_particle=True))
        except H5MDFormatError as err:
            c.left_out(err, f"{path}/{child}")
    for served, el in nested.items():
        if served in elements:  # lees/offset beside an element named lees_offset
            c.note(el.path, f"it would be served as {served!r}, the name of the element "
                   f"{elements[served].path}", "left out")
        else:
            elements[served] = el
    _same_particles(c, elements, path)
    _check_vectors(c, elements)
    _note_clashes(c, elements)
    if box_grp is not None:
        try:
            box = _box(c, box_grp, f"{path}/box", _components(elements.get("position")))
        except H5MDFormatError as err:
            c.left_out(err, f"{path}/box")
    elif not _has(grp, "box"):
        c.note(f"{path}/box", "a particles group must contain a 'box' group",
               "no box: positions read without periodic boundaries")
    if c.live:
        trimmed = _trim_live([*elements.values(), *_box_elements(box)])
        elements = {k: trimmed[el.path] for k, el in elements.items()}
        box = _box_with(box, lambda el: trimmed[el.path])
    else:
        elements, box = _follow_position(c, elements, box)
    _check_position_sampling(c, elements, box)
    id_el = elements.get("id")
    ids = _sampled_ids(grp, id_el)  # read once for both checks
    return ParticlesGroupInfo(name=name, path=path, elements=elements, box=box,
                              order_varies=_order_varies(id_el, ids),
                              empty_slots=_empty_slots(id_el, ids))


def _shared_series(c: _Ctx, grp: h5py.Group, path: str) -> dict[str, h5py.Dataset]:
    """The plain datasets of a group without element groups that share a ``step`` or
    ``time`` dataset beside them (Sarkas: ``/particles/{step,time,pos,vel,acc}``), by
    name, noted once; empty where there are none.

    They are the datasets of 3 or more axes with about as many rows as that ``step``
    (or ``time``): one more or one fewer (a writer stopped within a frame), and those of
    2 axes of the same rows and particles (``(frames, particles)``)."""
    try:  # links that cannot be followed: no series (the walk of the group says why)
        sampled = [k for k in _SAMPLING_NAMES if _has(grp, k)
                   and isinstance(grp.get(k, getlink=True), h5py.HardLink)
                   and isinstance(grp.get(k), h5py.Dataset) and grp[k].ndim == 1]
        if not sampled or _holds_element_groups(grp):
            return {}
        n = int(grp[sampled[0]].shape[0])
        plain = {k: grp[k] for k in sorted(grp) if k not in _SAMPLING_NAMES
                 and isinstance(grp.get(k, getlink=True), h5py.HardLink)
                 and isinstance(grp[k], h5py.Dataset) and len(grp[k].shape or ()) >= 2
                 and abs(int(grp[k].shape[0]) - n) <= 1}
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return {}
    particles = next((int(d.shape[1]) for d in plain.values() if d.ndim >= 3), None)
    if not n or particles is None:
        return {}
    members = {k: d for k, d in plain.items() if int(d.shape[1]) == particles}
    shared = " and ".join(repr(k) for k in sampled)
    c.note(path, f"plain datasets beside a shared {shared} (Sarkas writes its particles "
           "so), not elements with their own", f"{', '.join(members)} read as time "
           f"series sampled by {shared}")
    return members


def _series_sampling(c: _Ctx, grp: h5py.Group, n_frames: int, path: str) -> Sampling:
    """The sampling of a dataset of ``n_frames`` rows in a shared series of ``grp``
    (:func:`_shared_series`): its ``step`` (and ``time``), or, with only a ``time``, the
    frames numbered 0..n-1 at those times."""
    if _has(grp, "step"):
        return _sampling(c, grp, n_frames, path)
    time_ds = _sampling_dataset(c, grp, "time", path)
    time = _times(c, time_ds, n_frames, path)
    n = n_frames if time is None else min(n_frames, int(time.shape[0]))
    unit = _unit_attr(c, time_ds, f"{path}/time") if time_ds is not None else None
    key = (("implicit", path), _addr(time_ds) if time_ds is not None else None)
    return Sampling("implicit", np.arange(n, dtype=np.int64),
                    None if time is None else time[:n], unit if time is not None else None,
                    key)


#: Sarkas' names of particle data and the H5MD names they are served as.
_SERIES_NAMES = {"pos": "position", "vel": "velocity"}


def _series_name(c: _Ctx, grp: h5py.Group, name: str, path: str) -> str:
    """The name a dataset of a shared series is served as (:data:`_SERIES_NAMES`,
    noted, where H5MD's name is not taken)."""
    served = _SERIES_NAMES.get(name, name)
    if served != name and not _has(grp, served):
        c.note(path, f"Sarkas' name {name!r}", f"served as {served!r}", minor=True)
        return served
    return name


def _follow_position(c: _Ctx, elements: dict[str, ElementInfo],
                     box: BoxInfo | None) -> tuple[dict[str, ElementInfo], BoxInfo | None]:
    """Elements of a particles group with no ``step`` but as many frames as ``position``
    (GROMACS writes box edges so) take the steps and times of ``position``."""
    position = elements.get("position")
    if position is None or position.sampling is None or position.sampling.kind == "implicit":
        return elements, box
    n = int(position.sampling.step.shape[0])

    def follow(el: ElementInfo) -> ElementInfo:
        if el.sampling is None or el.sampling.kind != "implicit" or el.shape[0] != n:
            return el
        for i, p in enumerate(c.problems):
            if p.path == el.path and p.message == _NO_STEP:
                c.problems[i] = replace(p, assumed=f"no step: sampled as {position.path} "
                                        f"(as many frames, {n})")
                return replace(el, sampling=position.sampling)
        return el

    elements = {k: follow(el) if k != "position" else el for k, el in elements.items()}
    return elements, _box_with(box, follow)


def _box_elements(box: BoxInfo | None) -> list[ElementInfo]:
    """The box's elements stored in the file: its edges, and HALMD's ``offset`` and
    znh5md's ``pbc`` (not a lower corner computed from LAMMPS' bounds)."""
    if box is None:
        return []
    offset = None if box.from_bounds else box.offset
    return [el for el in (box.edges, offset, box.pbc) if el is not None]


def _box_with(box: BoxInfo | None, change: Callable[[ElementInfo], ElementInfo]
              ) -> BoxInfo | None:
    """``box`` with ``change`` applied to each of its stored elements (cut to the frames a
    live file holds, or sampled as the positions), and its lower corner computed from
    LAMMPS' bounds (``_from_bounds``) sampled as the edges it comes from: it kept a time
    axis of its own, or more frames than the edges."""
    if box is None:
        return None
    new = {el.path: change(el) for el in _box_elements(box)}
    edges = None if box.edges is None else new[box.edges.path]
    offset, pbc = (None if el is None else new.get(el.path, el) for el in (box.offset, box.pbc))
    if box.from_bounds:
        assert offset is not None and edges is not None  # (from_bounds says so)
        offset = replace(offset, shape=edges.shape, sampling=edges.sampling)
    return replace(box, edges=edges, offset=offset, pbc=pbc)


def _check_position_sampling(c: _Ctx, elements: dict[str, ElementInfo],
                             box: BoxInfo | None) -> None:
    """H5MD requires ``image`` and time-dependent box ``edges`` to share the steps and
    times of ``position`` (by hard links): note those sampled otherwise."""
    position = elements.get("position")
    if position is None or position.sampling is None:
        return
    others = [("image", elements.get("image"))]
    if box is not None:
        others.append(("box_edges", box.edges))
    for name, el in others:
        if (el is None or el.sampling is None or el.sampling.kind == "implicit"
                or el.sampling.key == position.sampling.key
                or el.sampling.same_as(position.sampling)):
            continue  # implicit: its missing step is the problem already noted; the same
            # step and time (linked) of fewer frames: noted where they were cut
        c.note(el.path, f"sampled at other steps or times than {position.path} (H5MD "
               "requires the same 'step' and 'time', hard-linked)",
               f"kept on its own time axis 'time_{name}'")


def _observables(
    c: _Ctx,
    grp: h5py.Group,
    prefix: str,
    out: dict[str, ElementInfo],
    groups: list[str],
    seen: set[tuple[int, ...]],
    root: str = "/observables",
    deep: bool = True,
    within: str | None = None,
    subtree: bool = False,
) -> None:
    """The elements under ``root`` (``/observables`` or ``/connectivity``) by their path
    below it, and the groups that hold them (``deep=False``: the groups below ``grp`` by
    name, without walking them; ``within``, a group's path below ``root``: only the
    children on the way to it, and its own elements, are read; with ``subtree``, those
    of every group below it too)."""
    seen.add(_addr(grp))
    where = None  # grp.name: asked at the first child, not at each (7 us)
    if within is not None and prefix == f"{within}/":  # the group sought: its elements
        within, deep = None, subtree
    for child in grp:
        key = f"{prefix}{child}"
        if within is not None and key != within and not within.startswith(f"{key}/"):
            continue  # not on the way to the group sought: not even opened
        path = f"{root}/{key}"
        where = where or grp.name
        try:
            obj = _get(c, grp, child, where)
            if child in _SAMPLING_NAMES and _shared_sampling(c, grp, obj, path):
                continue
            subgroup = isinstance(obj, h5py.Group) and not _has(obj, "value")
            if subgroup and (_has(obj, "step") or _has(obj, "time")
                             ) and not _holds_element_groups(obj):
                raise H5MDFormatError(
                    c.filename, path, "element has 'step'/'time' but no 'value' dataset"
                )
            if subgroup:
                if _addr(obj) in seen:
                    raise H5MDFormatError(
                        c.filename, path, "links back to a group that contains it (a cycle)"
                    )
                groups.append(key)
                if deep:
                    _observables(c, obj, f"{key}/", out, groups, seen, root, True, within,
                                 subtree)
            else:
                out[key] = _element(c, child, obj, path)
        except H5MDFormatError as err:
            c.left_out(err, path)


#: The datasets that sample an element (its ``step`` and ``time``).
_SAMPLING_NAMES = ("step", "time")


def _holds_element_groups(grp: h5py.Group) -> bool:
    """Whether a group holds element groups (groups with a ``value``)."""
    try:
        return any(isinstance(grp.get(k, getlink=True), h5py.HardLink)
                   and isinstance(grp[k], h5py.Group) and _has(grp[k], "value") for k in grp)
    except (OSError, KeyError, RuntimeError, ValueError):
        return False


def _shared_sampling(c: _Ctx, grp: h5py.Group, obj: h5py.HLObject, path: str) -> bool:
    """Whether ``obj`` (named ``step`` or ``time``) is a dataset directly in a group of
    elements (MindSPONGE keeps the step and time its elements share, as hard links, in
    their particles or observables group): not an element, noted (minor) and passed
    over."""
    if not isinstance(obj, h5py.Dataset) or not _holds_element_groups(grp):
        return False
    c.note(path, "a 'step' or 'time' dataset directly in a group of elements (MindSPONGE "
           "keeps the sampling its elements share there)", "not read as an element",
           minor=True)
    return True


#: The root groups H5MD defines (``trajectory``: its drafts' particles, before 1.0).
_H5MD_ROOTS = ("h5md", "particles", "observables", "connectivity", "parameters",
               "trajectory")


def _other_groups(c: _Ctx) -> tuple[str, ...]:
    """The root groups H5MD does not define (:attr:`FileInfo.other_groups`): H5MD allows
    such groups, and writers keep data there (RMPCDMD its fields, Mosaic its universe).
    Only their names: what they hold is walked where it is served."""
    try:
        return tuple(n for n in c.f if n not in _H5MD_ROOTS
                     and isinstance(c.f.get(n, getlink=True), h5py.HardLink)
                     and isinstance(c.f.get(n), h5py.Group))
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return ()


def scan_free_form(source: str | os.PathLike[str] | h5py.File, root: str, *,
                   allow_external: bool = False) -> tuple[dict[str, Any], tuple[Problem, ...]]:
    """The datasets below a root group H5MD does not define (or ``/parameters``).

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file.
    root : str
        The root group's name (an entry of :attr:`FileInfo.other_groups`).
    allow_external : bool, default False
        As for :func:`scan`.

    Returns
    -------
    datasets : dict
        By path below ``/<root>``: their ``shape``, ``dtype`` and ``path``, as
        ``FileInfo.parameters`` holds those of ``/parameters``.
    problems : tuple of Problem
        What was found wrong with them (those datasets are left out).
    """
    if not isinstance(source, h5py.File):
        with open_h5md(source) as f:
            return scan_free_form(f, root, allow_external=allow_external)
    c = _Ctx(source, allow_external=allow_external)
    return _parameters(c, root), tuple(c.problems)


def _parameters(c: _Ctx, root: str = "parameters") -> dict[str, Any]:
    """The datasets below ``/<root>`` (``/parameters``, or another free-form group), by
    path below it, with their shape, dtype and path."""
    params: dict[str, Any] = {}
    if not _has(c.f, root):
        return params
    grp = _get(c, c.f, root, "/")
    if not isinstance(grp, h5py.Group):
        return params
    found: list[tuple[str, h5py.Dataset]] = []

    def visit(name: str, obj: h5py.HLObject) -> None:
        if isinstance(obj, h5py.Dataset):
            found.append((name, obj))

    # visititems (H5Ovisit) visits every object once and does not follow soft or
    # external links, so cycles and links to other files are not walked
    grp.visititems(visit)
    for name, obj in found:
        try:
            _check_dataset(c, obj, obj.name)
            _check_declared(c, obj, obj.name)
        except H5MDFormatError as err:
            c.left_out(err, obj.name)
            continue
        params[name] = {"shape": obj.shape, "dtype": str(obj.dtype), "path": obj.name}
    return params


def scan(
    source: str | os.PathLike[str] | h5py.File, *, allow_external: bool = False,
    deep_connectivity: bool | str = True, connectivity_subtree: bool = False,
) -> FileInfo:
    """Describe an H5MD file without reading element data.

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file, or an open :class:`h5py.File`. A file opened with ``swmr=True`` is
        treated as live: elements are cut to the frames written so far.
    allow_external : bool, default False
        Follow external links and accept datasets whose data live in other files
        (external raw storage, virtual datasets). By default such parts are never
        followed: they are left out, each with a problem naming ``allow_external``.
    deep_connectivity : bool or str, default True
        Walk the groups below ``/connectivity`` (H5MD-NOMAD writes one per molecule:
        ten thousand in a small protein's file). False: only the elements directly in
        ``/connectivity`` are read, and the groups below it named
        (``connectivity_groups``) without their elements; an open of a particles group
        needs no more. A group's path below ``/connectivity``
        (``"particles_group/group_water"``): only the groups on the way to it are named,
        and only its own elements read (the groups below it named); an open of that
        group needs no more.
    connectivity_subtree : bool, default False
        With a path for ``deep_connectivity``: every group below that group is walked
        too (its elements read); an open of its subtree (``open_datatree(group=...)``)
        needs no more.

    Returns
    -------
    FileInfo
        With ``problems``: every departure from H5MD found, what was assumed to read
        the file anyway, and the parts left out because they cannot be read.

    Raises
    ------
    H5MDFormatError
        If the file is not H5MD at all (no ``/h5md``, ``/particles`` or
        ``/observables``) or is of an unsupported major version.
    """
    if isinstance(source, h5py.File):
        return _scan_safely(source, allow_external, deep_connectivity, connectivity_subtree)
    with open_h5md(source) as f:
        return _scan_safely(f, allow_external, deep_connectivity, connectivity_subtree)


def objects_below(source: str | os.PathLike[str] | h5py.File,
                  root: str) -> dict[str, tuple[int, int]]:
    """The groups and datasets below each group directly in ``/<root>``, counted.

    One visit of HDF5's objects (each counted once, however many links lead to it), with
    no dataset opened: 0.9 s for the 62,750 objects of H5MD-NOMAD's OpenMM test file
    against 14 s to scan them. ``h5mdx info`` counts them to decide whether to walk
    ``/connectivity`` (``scan(deep_connectivity=...)``).

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file, or the file open (``h5mdx info`` then scans it open).
    root : str
        A group of the root (``"connectivity"``).

    Returns
    -------
    dict
        ``{group name: (groups, datasets)}``; empty where there is no such group, or where
        it cannot be read (a scan of the file says why).
    """
    found: dict[str, tuple[int, int]] = {}
    try:
        if not isinstance(source, h5py.File):
            with open_h5md(source) as f:
                return objects_below(f, root)
        top = source.get(root)
        if not isinstance(top, h5py.Group):
            return found
        for name in top:
            grp = top.get(name)
            if not isinstance(grp, h5py.Group):
                continue
            counts = [0, 0]

            def count(_name: bytes, info: Any, counts: list[int] = counts) -> None:
                counts[0 if info.type == h5py.h5o.TYPE_GROUP else 1] += 1

            h5py.h5o.visit(grp.id, count, info=True)
            found[name] = (counts[0], counts[1])  # (h5py visits all but the group)
    except (H5MDError, OSError, RuntimeError, ValueError, KeyError, TypeError):
        return {}
    return found


def _scan_safely(f: h5py.File, allow_external: bool, deep_connectivity: bool | str = True,
                 connectivity_subtree: bool = False) -> FileInfo:
    try:
        live = bool(f.swmr_mode)
    except (AttributeError, ValueError, OSError):
        live = False
    c = _Ctx(f, allow_external=allow_external, live=live)
    try:
        return _scan(c, deep_connectivity, connectivity_subtree)
    except H5MDError:
        raise
    except RecursionError:
        raise H5MDFormatError(
            c.filename, None, "the group structure is too deeply nested"
        ) from None
    except (KeyError, RuntimeError, TypeError, OSError, ValueError, AttributeError,
            IndexError, OverflowError) as err:
        # h5py/HDF5 failures on a structure no check above anticipated
        error = H5MDFormatError(
            c.filename, None, f"unreadable H5MD structure ({type(err).__name__}: {err})")
        error.unexpected = True
        raise error from None


def _h5md_group(c: _Ctx) -> h5py.Group | None:
    """The ``/h5md`` group; None (noted) where a file without it still holds H5MD data."""
    h5md = None
    if _has(c.f, "h5md"):
        try:
            h5md = _get(c, c.f, "h5md", "/")
        except H5MDFormatError as err:
            c.left_out(err, "/h5md")
            h5md = None
    if isinstance(h5md, h5py.Group):
        return h5md
    if not (_has(c.f, "particles") or _has(c.f, "observables")):
        try:  # a root group HDF5 cannot read is damage, not a file of another kind
            c.f.id.links.exists(b"h5md")
        except (OSError, RuntimeError, ValueError) as err:
            raise H5MDFormatError(c.filename, "/", "the file is damaged: HDF5 cannot read "
                                  f"its root group ({err})") from None
        raise H5MDFormatError(
            c.filename,
            "/h5md",
            "an HDF5 file but not an H5MD file: there is no /h5md group " + _other_format(c),
        )
    c.note("/h5md", "there is no /h5md group (an old or hand-made file)", "read as H5MD 1.1")
    return None


def _other_format(c: _Ctx) -> str:
    """What to do with an HDF5 file of a format known not to be H5MD, in parentheses."""
    try:
        conventions = _decode(c.f.attrs.get("conventions"))
        mdtraj = conventions == "Pande" or (_has(c.f, "coordinates") and _has(c.f, "topology"))
    except (OSError, RuntimeError, ValueError, TypeError, KeyError):
        mdtraj = False
    if mdtraj:  # MDTraj's HDF5Reporter and Trajectory.save_hdf5 (PyTables)
        return ("(it is MDTraj's HDF5 format: mdtraj.load() reads it; to convert it, save it "
                "as DCD or XTC with MDTraj, then h5mdx convert)")
    # MDANSE's TrajectoryWriter: its system in /composition (/chemical_system before 2025);
    # _has never raises
    if _has(c.f, "configuration") and (_has(c.f, "composition")
                                       or _has(c.f, "chemical_system")):
        return ("(it is MDANSE's trajectory format (.mdt), not H5MD: MDANSE reads it; its "
                "positions are /configuration/coordinates, its cell /unit_cell, its times "
                "/time, which xarray's engine='h5netcdf' opens with phony_dims='sort' and "
                "group='configuration' or the root)")
    return "(open generic HDF5/netCDF files with engine='h5netcdf')"


def _version(c: _Ctx, h5md: h5py.Group | None) -> tuple[int, int]:
    if h5md is None:
        return 1, 1
    raw = _attr(h5md, "version")
    if raw is None:
        c.note("/h5md", "the /h5md group has no 'version' attribute", "read as H5MD 1.1")
        return 1, 1
    try:
        major, minor = (int(v) for v in list(np.ravel(raw))[:2])
    except (TypeError, ValueError, OverflowError):
        c.note("/h5md", f"cannot understand H5MD version {raw!r}", "read as H5MD 1.1")
        return 1, 1
    values = list(np.ravel(raw))
    if _array_typed(h5md, "version"):
        c.note("/h5md", "the H5MD version is one value of an array type in a "
               "scalar dataspace (VOTCA writes it so), not a dataspace of 2 integers",
               f"read as H5MD {major}.{minor}", minor=True)
    elif len(values) != 2 or not all(isinstance(v, (int, np.integer)) for v in values):
        c.note("/h5md", f"the H5MD version is {raw!r}, not two integers (H5MD: [major, "
               "minor])", f"read as H5MD {major}.{minor}", minor=True)
    if (major, minor) in SUPPORTED_VERSIONS:
        return major, minor
    supported = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_VERSIONS)
    if major > 1:
        raise H5MDFormatError(
            c.filename,
            "/h5md",
            f"H5MD version {major}.{minor} is not supported (h5mdx reads {supported})",
        )
    nearest = (1, 0) if major < 1 else (1, 1)
    c.note("/h5md", f"H5MD version {major}.{minor} is not one h5mdx knows ({supported})",
           f"read as H5MD {nearest[0]}.{nearest[1]}")
    return nearest


def _array_typed(obj: h5py.HLObject, name: str) -> bool:
    """Whether attribute ``name`` of ``obj`` is stored with an HDF5 array type (read as
    an array all the same)."""
    try:
        return obj.attrs.get_id(name).dtype.subdtype is not None
    except (KeyError, OSError, RuntimeError, TypeError, ValueError):
        return False


def _h5md_subgroup(c: _Ctx, parent: h5py.Group, name: str, where: str = "/h5md",
                   what: str | None = None) -> h5py.Group | None:
    """``<where>/<name>`` (metadata under ``/h5md``) as a group; None (a minor problem,
    noted) where it is not one (``what``: the thing that must be a group, in the note)."""
    path = f"{where}/{name}"
    try:
        grp = _get(c, parent, name, where)
    except H5MDFormatError as err:
        c.note(err.h5path or path, err.problem, "left out", minor=True)
        return None
    if not isinstance(grp, h5py.Group):
        c.note(path, f"{what or path} must be a group", "left out", minor=True)
        return None
    return grp


def _meta_text(value: Any) -> str:
    """An author/creator attribute as text: an array of one string (as some writers
    store every attribute) is that string, not ``"['lammps']"``."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value)


def _meta(c: _Ctx, h5md: h5py.Group | None, name: str,
          keys: tuple[str, ...]) -> dict[str, str]:
    """``/h5md/author`` or ``/h5md/creator``; pre-1.0 files keep them as attributes."""
    if h5md is None:
        return {}
    where = f"/h5md/{name}"
    if _has(h5md, name):
        grp = _h5md_subgroup(c, h5md, name)
        if grp is None:
            return {}
        found = {k: _meta_text(_attr(grp, k)) for k in keys if _attr(grp, k) is not None}
        missing = [k for k in _REQUIRED_META[name] if k not in found]
        if missing:
            c.note(where, f"{where} has no {' or '.join(repr(k) for k in missing)} "
                   "attribute (H5MD requires it)", "not recorded", minor=True)
        return found
    # pre-1.0 pyh5md: attributes "author", "author_email", "creator", "creator_version"
    found = {k: _attr(h5md, name if k == "name" else f"{name}_{k}") for k in keys}
    found = {k: _meta_text(v) for k, v in found.items() if v is not None}
    if found:
        c.note(where, f"{name} stored as attributes of /h5md (pre-1.0 layout), "
               f"not as a {where} group", "read from the attributes")
    else:
        c.note(where, f"the /h5md group has no '{name}' group (H5MD requires one)",
               "not recorded", minor=True)
    return found


def _program(c: _Ctx, h5md: h5py.Group | None) -> dict[str, str]:
    """H5MD-NOMAD's ``/h5md/program`` (the MD program, where ``creator`` names the library
    that wrote the file: OpenMM beside h5py): its ``name`` and ``version``; {} without."""
    if h5md is None or not _has(h5md, "program"):
        return {}
    grp = _h5md_subgroup(c, h5md, "program")
    if grp is None:
        return {}
    return {k: _meta_text(v) for k in ("name", "version") if (v := _attr(grp, k)) is not None}


def _module_attr(name: str, value: Any) -> str:
    """A module attribute as text; a ``version`` of integers is ``"major.minor"``."""
    if name == "version":
        try:
            return ".".join(str(int(v)) for v in np.ravel(value))
        except (TypeError, ValueError, OverflowError):
            pass
    return _meta_text(value)


def _modules(c: _Ctx, h5md: h5py.Group | None) -> dict[str, dict[str, str]]:
    """The modules under ``/h5md/modules``, by name, with their attributes as text."""
    where = "/h5md/modules"
    if h5md is None or not _has(h5md, "modules"):
        return {}
    grp = _h5md_subgroup(c, h5md, "modules")
    if grp is None:
        return {}
    modules: dict[str, dict[str, str]] = {}
    for name in grp:
        mod = _h5md_subgroup(c, grp, name, where, "a module")
        if mod is None:
            continue
        attrs = {k: _module_attr(k, v) for k in mod.attrs
                 if (v := _attr(mod, k)) is not None}
        if "version" not in attrs:
            c.note(f"{where}/{name}", "the module has no 'version' attribute (H5MD "
                   "requires one)", "read without a version", minor=True)
        modules[name] = attrs
    return modules


def _module_topology(c: _Ctx, h5md: h5py.Group | None,
                     modules: Mapping[str, Any]) -> ModuleTopology | None:
    """GROMACS' topology module (:mod:`h5mdx.format.gromacs_topology`), its problems
    noted; None without one."""
    if h5md is None or GROMACS_TOPOLOGY not in modules:
        return None
    grp = h5md["modules"][GROMACS_TOPOLOGY]  # opened by _modules: a group of this file

    return read_module(grp, functools.partial(_load_whole, c), c.note)


def _vmd_structure(c: _Ctx) -> VMDStructure | None:
    """VMD's structure module (:mod:`h5mdx.format.vmd_structure`), its problems noted;
    None without one."""
    try:  # /parameters' own problems are _parameters' to note
        params = _get(c, c.f, "parameters", "/") if _has(c.f, "parameters") else None
    except H5MDFormatError:
        return None
    if not isinstance(params, h5py.Group) or not _has(params, "vmd_structure"):
        return None
    try:
        grp = _get(c, params, "vmd_structure", "/parameters")
    except H5MDFormatError as err:
        c.left_out(err, STRUCTURE_PATH)
        return None
    if not isinstance(grp, h5py.Group):
        return None
    return read_structure(grp, functools.partial(_load_whole, c), c.note)


def _load_whole(c: _Ctx, group: h5py.Group, name: str, where: str) -> np.ndarray:
    """A module's dataset ``group[name]`` read whole (``where``: the group's path), or
    H5MDFormatError: not a dataset of this file, too large to read at open time,
    unreadable."""
    path = f"{where}/{name}"
    dset = _get(c, group, name, where)
    if not isinstance(dset, h5py.Dataset):
        raise H5MDFormatError(c.filename, path, "must be a dataset")
    _check_dataset(c, dset, path)
    return _read_small(c, dset, path)


#: The attributes H5MD requires of ``/h5md/author`` and ``/h5md/creator``.
_REQUIRED_META = {"author": ("name",), "creator": ("name", "version")}


def _particles(c: _Ctx) -> dict[str, ParticlesGroupInfo]:
    particles: dict[str, ParticlesGroupInfo] = {}
    root = "particles" if _has(c.f, "particles") else _pre_h5md_particles(c)
    if root is None:
        return particles
    try:
        pgrp = _get(c, c.f, root, "/")
    except H5MDFormatError as err:
        c.left_out(err, f"/{root}")
        return particles
    if not isinstance(pgrp, h5py.Group):
        c.note(f"/{root}", f"/{root} must be a group", "left out")
        return particles
    if _flat_particles(pgrp):
        c.note(f"/{root}", f"elements stored directly in /{root}, with no particles group "
               "below it (Sarkas writes its pos, vel, acc there; the first release of "
               "castep_outputs_tools' md_to_h5md its elements)",
               f"/{root} read as one particles group, {_FLAT_GROUP!r}")
        try:
            particles[_FLAT_GROUP] = _particles_group(c, _FLAT_GROUP, pgrp)
        except H5MDFormatError as err:
            c.left_out(err, f"/{root}")
        return particles
    for name in pgrp:
        try:
            obj = _get(c, pgrp, name, f"/{root}")
            if not isinstance(obj, h5py.Group):
                raise H5MDFormatError(
                    c.filename, f"/{root}/{name}", "a particles group must be a group"
                )
            particles[name] = _particles_group(c, name, obj)
        except H5MDFormatError as err:
            c.left_out(err, f"/{root}/{name}")
    return particles


#: The name of the particles group read from a ``/particles`` that holds elements itself
#: (:func:`_flat_particles`); its path is ``/particles``.
_FLAT_GROUP = "particles"


def _flat_particles(pgrp: h5py.Group) -> bool:
    """Whether ``pgrp`` (``/particles``) holds elements itself, not particles groups: some
    member is an element (a group with ``value``) or a dataset of 3 or more axes (frames,
    particles, components), and no member is a group other than ``box`` that is not an
    element (links to other files are not looked at)."""
    element_like = False
    try:
        for name in pgrp:
            if isinstance(pgrp.get(name, getlink=True), h5py.ExternalLink):
                continue  # not opened here: its reading says what it is
            obj = pgrp.get(name)  # None where a soft link dangles
            if isinstance(obj, h5py.Group) and _has(obj, "value"):
                element_like = True
            elif isinstance(obj, h5py.Dataset):
                element_like = element_like or len(obj.shape or ()) >= 3
            elif isinstance(obj, h5py.Group) and name != "box":
                return False
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return False
    return element_like


def _pre_h5md_particles(c: _Ctx) -> str | None:
    """``"trajectory"`` where the file keeps its particles groups there, as H5MD's drafts
    before 1.0 did (HALMD until 2013: ``/trajectory/<group>/position``), noted; else None."""
    grp = c.f.get("trajectory") if _has(c.f, "trajectory") else None
    if not isinstance(grp, h5py.Group) or not any(
            isinstance(sub, h5py.Group) and _has(sub, "position") for sub in grp.values()):
        return None
    c.note("/trajectory", "particles groups under /trajectory (H5MD's drafts before 1.0; "
           "HALMD wrote them so until 2013), not /particles", "read as /particles")
    return "trajectory"


def _element_tree(c: _Ctx, root: str, deep: bool | str = True, subtree: bool = False
                  ) -> tuple[dict[str, ElementInfo], list[str]]:
    """The elements under ``/<root>`` (``observables``, ``connectivity``) by their path
    below it, and the groups that hold them (``deep=False``: the elements directly in
    ``/<root>``, and the groups below it by name only; a path below ``/<root>``: the
    groups on the way to it, and its elements, with ``subtree`` those of every group
    below it too)."""
    elements: dict[str, ElementInfo] = {}
    groups: list[str] = []
    if not _has(c.f, root):
        return elements, groups
    try:
        grp = _get(c, c.f, root, "/")
    except H5MDFormatError as err:
        c.left_out(err, f"/{root}")
        return elements, groups
    if isinstance(grp, h5py.Group):
        within = deep.strip("/") if isinstance(deep, str) else None
        _observables(c, grp, "", elements, groups, set(), f"/{root}", bool(deep),
                     within or None, subtree)
    return elements, groups


def _named_particles_groups(c: _Ctx, connectivity: dict[str, ElementInfo],
                            particles: dict[str, ParticlesGroupInfo]
                            ) -> dict[str, ElementInfo]:
    """The connectivity, where an element's ``particles_group`` is a string (RMPCDMD
    writes the group's name, ``"janus"``, with fortran_h5md's string attribute) instead of
    H5MD's object reference: noted as a minor departure, and served as the path of the
    particles group it names (as a reference is served); as stored where it names none.
    The scan reads a reference as the absolute path it points to, so a string that is one
    is taken for a reference (served the same).

    Parameters
    ----------
    c : _Ctx
        The scan's context, which records the notes.
    connectivity : dict of str to ElementInfo
        The elements under ``/connectivity``, by their path below it.
    particles : dict of str to ParticlesGroupInfo
        The particles groups, by name.

    Returns
    -------
    dict of str to ElementInfo
        ``connectivity``, with such ``particles_group`` attributes replaced by paths.
    """
    out = dict(connectivity)
    for key, el in connectivity.items():
        named = el.attrs.get("particles_group")
        if not isinstance(named, str) or named.startswith("/"):
            continue  # a reference, read as the path it points to (or a path written so)
        group = particles.get(named.strip("/").removeprefix("particles/"))
        if group is None:
            c.note(el.path, f"'particles_group' is the string {named!r}, not an object "
                   "reference to a particles group, and names none", "served as stored",
                   minor=True)
            continue
        c.note(el.path, f"'particles_group' is the string {named!r}, not an object "
               "reference (RMPCDMD writes the group's name so)",
               f"served as {group.path!r}, the particles group it names", minor=True)
        out[key] = replace(el, attrs={**el.attrs, "particles_group": group.path})
    return out


def _scan(c: _Ctx, deep_connectivity: bool | str = True,
          connectivity_subtree: bool = False) -> FileInfo:
    h5md = _h5md_group(c)
    version = c.version = _version(c, h5md)
    author = _meta(c, h5md, "author", ("name", "email"))
    creator = _meta(c, h5md, "creator", ("name", "version"))
    c.creator = str(creator.get("name") or "")
    modules = _modules(c, h5md)
    topology = _module_topology(c, h5md, modules)
    program = _program(c, h5md)
    particles = _particles(c)
    observables, obs_groups = _element_tree(c, "observables")
    try:
        size = os.path.getsize(c.filename)
    except OSError:
        size = 0
    parameters = _parameters(c)
    vmd_structure = _vmd_structure(c)
    other_groups = _other_groups(c)
    connectivity, connectivity_groups = _element_tree(c, "connectivity", deep_connectivity,
                                                      connectivity_subtree)
    connectivity = _named_particles_groups(c, connectivity, particles)
    return FileInfo(
        filename=c.filename,
        version=version,
        author=author,
        creator=creator,
        program=program,
        particles=particles,
        observables=observables,
        observable_groups=tuple(obs_groups),
        parameters=parameters,
        other_groups=other_groups,
        file_size=size,
        problems=tuple(c.problems),
        connectivity=connectivity,
        connectivity_groups=tuple(connectivity_groups),
        modules=modules,
        topology=topology,
        vmd_structure=vmd_structure,
    )
