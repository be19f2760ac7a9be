"""What a scan returns: plain, frozen descriptions of an H5MD file.

:class:`FileInfo` holds the file's particles groups (:class:`ParticlesGroupInfo`),
their elements (:class:`ElementInfo`) and boxes (:class:`BoxInfo`), the sampling of
each time series (:class:`Sampling`) and every departure from H5MD found on the way
(:class:`Problem`). Nothing here reads a file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5mdx.format.gromacs_topology import ModuleTopology
from h5mdx.format.vmd_structure import VMDStructure


@functools.lru_cache(maxsize=64)
def _same_unit(a: str, b: str) -> bool:
    """Whether units ``a`` and ``b`` are one: the same text, or spellings of one unit
    (``ps`` and ``picosecond``, which were two time axes)."""
    if a == b:
        return True
    from h5mdx.format.units import base_factor

    (fa, ba, pa), (fb, bb, pb) = base_factor(a), base_factor(b)
    return pa is None and pb is None and ba == bb and math.isclose(fa, fb, rel_tol=1e-12)


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
    departure : bool
        Whether the file departs from H5MD here (``strict=True`` refuses it). False for
        what H5MD leaves free: a group of a root group H5MD does not define that looks
        like an element but cannot be read as one is warned about, never refused.
    """

    path: str
    message: str
    assumed: str
    minor: bool = False
    shared_by: tuple[str, ...] = field(default=(), compare=False)
    departure: bool = True

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
        Equal times in two units (``fs`` and ``ps``) are not the same times; equal times
        of which only one has a unit are (the other's unit left unsaid).
        """
        if self.key == other.key and self.step.shape == other.step.shape:
            return True  # (one linked step of fewer frames: a writer stopped between two)
        if self.step.shape != other.step.shape or not np.array_equal(self.step, other.step):
            return False
        if self.time is None or other.time is None:
            # the same steps; numbered frames (implicit) only match numbered frames
            return (self.time is None and other.time is None) or (
                "implicit" not in (self.kind, other.kind))
        if None not in (self.time_unit, other.time_unit) and not _same_unit(
                str(self.time_unit), str(other.time_unit)):
            return False
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
    #: the axes after the first of the dataset at ``value_path`` where the element is
    #: computed from it (LAMMPS' bounds: ``(3, 2)`` or ``(1, 3, 2)``, served ``(3,)``);
    #: None where they are those of ``shape``
    stored_tail: tuple[int, ...] | None = None

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
        """The groups of ``/parameters`` that hold datasets, below it (``""``: itself),
        as the engine serves them: a group laid out as an element (a ``value`` with a
        ``step`` or a ``time``, nothing else) is a variable of the group above it, which
        is listed in its place (it was listed as a group no open found)."""
        leaves: dict[str, set[str]] = {}
        for name in self.parameters:
            sub, _, leaf = name.rpartition("/")
            leaves.setdefault(sub, set()).add(leaf)
            while sub:  # the groups on the way hold more than datasets
                sub = sub.rpartition("/")[0]
                leaves.setdefault(sub, set()).add("/")
        elements = {g for g, held in leaves.items() if g and "value" in held
                    and held & {"step", "time"} and held <= {"value", "step", "time"}}
        return sorted({g for g, held in leaves.items() if held - {"/"} and g not in elements}
                      | {g.rpartition("/")[0] for g in elements})


@dataclass(frozen=True)
class FreeFormInfo:
    """What a root group H5MD does not define holds (:func:`free_form`), from one walk.

    Attributes
    ----------
    root : str
        The root group's name (``"fields"``).
    groups : tuple of str
        Its groups that are no element, by path below it (``""``: the root itself
        first), each once (a group reached by several hard links under its first name).
    elements : dict of ElementInfo
        Its groups laid out as H5MD elements (a ``value`` with a ``step`` or a ``time``,
        and nothing else: RMPCDMD's ``/fields``), by path below it.
    datasets : dict
        Its other datasets, by path below it: their ``shape``, ``dtype`` and ``path``.
    problems : tuple of Problem
        What was found wrong (those datasets and elements are left out, or served as
        plain datasets).
    """

    root: str
    groups: tuple[str, ...] = ("",)
    elements: dict[str, ElementInfo] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
