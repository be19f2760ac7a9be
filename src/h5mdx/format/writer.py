"""Write H5MD 1.1 files frame block by frame block (h5py and numpy only).

:class:`H5MDWriter` streams frames into ``/particles/<group>``: time-dependent
elements (``position``, ``velocity``, ``force``, box ``edges``, any other
per-frame array) that share one ``step`` and one ``time`` dataset through hard
links, as MDAnalysis' H5MDWriter does, plus time-independent elements
(``species``, ``mass``, ``charge``). It buffers at most one output chunk of
frames per element, so memory stays bounded whatever the trajectory length.

:class:`Layout` describes how the ``value`` datasets are stored on disk:
chunks of whole frames (``frames_per_chunk`` or a target ``chunk_mib``), or
contiguous, and a compression filter (``none``, ``gzip[:level]``, ``lzf``, and
``blosc[:codec[:level]]`` / ``zstd[:level]`` where :mod:`hdf5plugin` is
installed).

Layout of the file written::

    /h5md                    version=[1, 1]; author(name); creator(name="h5mdx", version)
    /particles/<group>
        box                  dimension=3, boundary=[periodic|none]*3
            edges/value      (n_frames, 3, 3) matrix from the triclinic box, or (n_frames, 3)
            edges/step, edges/time
        position/value       (n_frames, n_atoms, 3), unit "Angstrom"
        position/step, time  hard links to the first element's step and time
        velocity, force      likewise ("Angstrom ps-1", "kJ mol-1 Angstrom-1")
        species, mass, charge  (n_atoms,) time-independent datasets
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import h5py
import numpy as np

from h5mdx.format.checksums import Digests, dataset_checksums
from h5mdx.format.compression import compression_kwargs, parse_compression
from h5mdx.format.gromacs_topology import ModuleTopology, write_module
from h5mdx.format.schema import INPUT_INDEX_LONG_NAME
from h5mdx.format.vmd_structure import VMDStructure, write_structure

__all__ = [
    "DEFAULT_CHUNK_MIB",
    "BOX_MEMBERS",
    "ELEMENT_UNITS",
    "ElementSpec",
    "H5MDWriter",
    "Layout",
    "check_element_names",
    "check_frame_shapes",
    "check_group_name",
    "check_steps_increase",
    "compression_kwargs",
    "dataset_checksums",
    "ensure_room",
    "id_element",
]

#: Default target size of one chunk (whole frames), in MiB.
DEFAULT_CHUNK_MIB = 4.0

#: Smallest chunk, in bytes, for elements with tiny frames (box edges, observables).
SMALL_CHUNK_BYTES = 64 * 1024

#: H5MD units of the data MDAnalysis delivers (its base units).
ELEMENT_UNITS = {
    "position": "Angstrom",
    "velocity": "Angstrom ps-1",
    "force": "kJ mol-1 Angstrom-1",
    "box_edges": "Angstrom",
    "mass": "u",
    "charge": "e",
}

#: Frames of ``step``/``time`` per chunk when they are resizable.
_SAMPLING_CHUNK = 8192
#: A dataset that is no time series (fixed-in-time data, bonds) smaller than this stays
#: unchunked and unfiltered with a compression asked: a chunk index costs about as much
#: as compression could save.
SMALL_UNCHUNKED_BYTES = 4096

#: Elements written inside the box group, as the h5md engine reads them back: H5MD's
#: ``edges``, and the members other writers add that it serves as ``box_<name>``
#: (HALMD's ``offset``, the lower corner, also LAMMPS' ``lo`` bounds; znh5md's ``pbc``)
BOX_MEMBERS = {"box_edges": "edges", "box_offset": "offset", "box_pbc": "pbc"}


def _version() -> str:
    from h5mdx._version import __version__

    return __version__


@dataclass(frozen=True)
class Layout:
    """How the ``value`` datasets of time-dependent elements are stored.

    At most one of ``frames_per_chunk``, ``chunk_mib`` and ``contiguous`` may be
    given; with none, chunks of whole frames of about :data:`DEFAULT_CHUNK_MIB` MiB.

    Parameters
    ----------
    frames_per_chunk : int, optional
        Frames per chunk (every other axis whole).
    chunk_mib : float, optional
        Target chunk size in MiB; frames per chunk follow from the frame size.
    contiguous : bool, default False
        No chunks (needs the number of frames in advance; no compression).
    compression : str, optional
        A spec of :func:`~h5mdx.format.compression.parse_compression`. ``None`` means no compression for writers
        and "keep the source's" for :func:`h5mdx.layout.rechunk.rechunk`.
    """

    frames_per_chunk: int | None = None
    chunk_mib: float | None = None
    contiguous: bool = False
    compression: str | None = None

    def other_filters(self, values: np.ndarray) -> dict[str, Any]:
        """``create_dataset`` keyword arguments of a dataset ``values`` that is no time
        series (fixed-in-time data, bonds): chunked (HDF5's guess) with the compression,
        where one is asked and it holds rows of fixed-size values of at least
        ``SMALL_UNCHUNKED_BYTES``; none otherwise. Before, a ``--compression``
        compressed the time series alone."""
        kwargs = compression_kwargs(self.compression)
        if not kwargs or self.contiguous or values.ndim == 0 or values.dtype.hasobject \
                or values.nbytes < SMALL_UNCHUNKED_BYTES:
            return {}
        return {"chunks": True, **kwargs}

    def __post_init__(self) -> None:
        given = [
            n for n, v in (("frames_per_chunk", self.frames_per_chunk),
                           ("chunk_mib", self.chunk_mib),
                           ("contiguous", self.contiguous or None)) if v is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"choose one of frames_per_chunk, chunk_mib and contiguous, not {given} "
                "(--frames-per-chunk, --chunk-mib, --contiguous)"
            )
        if self.frames_per_chunk is not None and self.frames_per_chunk < 1:
            raise ValueError(f"frames_per_chunk must be >= 1, not {self.frames_per_chunk}")
        if self.chunk_mib is not None and not 0 < self.chunk_mib < math.inf:
            raise ValueError(f"chunk_mib must be a finite number > 0, not {self.chunk_mib}")
        if self.contiguous and parse_compression(self.compression).enabled:
            raise ValueError(
                f"compression {self.compression!r} needs chunked storage: drop --contiguous "
                "or use --compression none"
            )
        compression_kwargs(self.compression)  # validate early (and find hdf5plugin)

    def frames(self, frame_bytes: int, n_frames: int | None, *, small: bool = False) -> int:
        """Frames per chunk (or per write buffer when contiguous) for a frame size.

        Parameters
        ----------
        frame_bytes : int
            Bytes of one frame of the element.
        n_frames : int or None
            Number of frames, if known (chunks never exceed it).
        small : bool, default False
            An element with tiny frames (box, observables): chunks of at least
            ``SMALL_CHUNK_BYTES``.
        """
        frame_bytes = max(1, int(frame_bytes))
        if self.frames_per_chunk is not None and not small:
            frames = int(self.frames_per_chunk)
        else:
            mib = self.chunk_mib if self.chunk_mib is not None else DEFAULT_CHUNK_MIB
            frames = max(1, int(mib * 2**20 // frame_bytes))
            if self.frames_per_chunk is not None:
                frames = max(int(self.frames_per_chunk),
                             math.ceil(SMALL_CHUNK_BYTES / frame_bytes))
        if n_frames is not None and n_frames > 0:
            frames = min(frames, int(n_frames))
        return max(1, frames)

    def element_frames(self, frame_bytes: int, block: int, n_frames: int | None, *,
                       small: bool) -> int:
        """Frames per chunk of an element written in blocks of ``block`` frames (those of
        the largest element, :meth:`frames`): whole blocks, so that a flush writes whole
        chunks; for an element of ``small`` frames (the box) as many blocks as make
        :meth:`frames`' chunk of it; never more than ``n_frames`` (where known) but one.

        Parameters
        ----------
        frame_bytes : int
            Bytes of one frame of the element.
        block : int
            Frames a flush writes.
        n_frames : int or None
            Number of frames, if known.
        small : bool
            The element's frames are smaller than the largest element's.
        """
        frames = self.frames(frame_bytes, n_frames, small=small)
        frames = block * max(1, math.ceil(frames / block))
        return min(frames, max(1, n_frames)) if n_frames is not None else frames

    def describe(self, n_frames: int | None = None, frame_bytes: int | None = None) -> str:
        """A short text such as ``"chunks of 100 frames, gzip:1"`` (``n_frames``: the
        frames written, which chunks never exceed; ``frame_bytes``: the bytes of one
        frame of the positions, which turn a ``chunk_mib`` into the frames of a chunk)."""
        if self.contiguous:
            what = "contiguous"
        elif self.frames_per_chunk is None and frame_bytes:
            frames = self.frames(frame_bytes, n_frames)
            what = (f"chunks of {frames} frame{'s' if frames != 1 else ''} "
                    f"({frames * frame_bytes / 2**20:.3g} MiB)")
        elif self.frames_per_chunk is not None:
            frames = self.frames_per_chunk
            if n_frames is not None and 0 < n_frames < frames:
                frames = n_frames
            what = f"chunks of {frames} frame{'s' if frames != 1 else ''}"
        else:
            what = f"chunks of about {self.chunk_mib or DEFAULT_CHUNK_MIB:g} MiB of whole frames"
        return f"{what}, compression {self.compression or 'none'}"


@dataclass
class ElementSpec:
    """A time-dependent element to write.

    Parameters
    ----------
    name : str
        Element name (``"position"``, ...); ``"box_edges"`` writes ``box/edges``, and
        ``"box_offset"`` and ``"box_pbc"`` the box members other writers add
        (:data:`BOX_MEMBERS`).
    frame_shape : tuple of int
        Shape of one frame.
    dtype : numpy dtype
        Stored dtype.
    unit : str, optional
        H5MD ``unit`` attribute of ``value``.
    attrs : dict, optional
        More attributes of ``value``.
    fillvalue : optional
        The fill value of ``value`` (H5MD marks absent particles with it: an ``id`` of
        -1 in a grand-canonical run).
    """

    name: str
    frame_shape: tuple[int, ...]
    dtype: Any = np.float32
    unit: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    fillvalue: Any = None

    @property
    def stored_dtype(self) -> np.dtype:
        """The dtype written: unicode strings as fixed-length UTF-8 bytes (H5MD's strings;
        HDF5 has no UCS-4)."""
        return _stored_dtype(np.dtype(self.dtype))

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.stored_dtype.itemsize


def _set_text(attrs: Any, name: str, text: str) -> None:
    """A string attribute as H5MD asks for it: fixed-length (UTF-8). Not ``unit``, which
    stays variable-length: MDAnalysis' reader looks its str up in a table, and h5py
    reads a fixed-length string as bytes."""
    data = str(text).encode("utf-8")
    attrs.create(name, data, dtype=h5py.string_dtype("utf-8", max(1, len(data))))


def _stored_dtype(dtype: np.dtype) -> np.dtype:
    """Unicode text as fixed-length strings of HDF5's UTF-8 character set (4 bytes per
    character of room), where plain ``S`` would be ASCII: a reader then refused the
    UTF-8 bytes of ``Å``; other dtypes as they are."""
    if dtype.kind != "U":
        return dtype
    return h5py.string_dtype("utf-8", max(1, dtype.itemsize))


def check_element_names(given: Iterable[str], specs: Iterable[str], where: str = "") -> None:
    """Refuse a frame whose elements are not the writer's ``specs``, naming the missing
    and the unexpected ones (``where``: the output, said first where given).

    Raises
    ------
    ValueError
    """
    given, specs = set(given), set(specs)
    if given != specs:
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}elements missing: {sorted(specs - given)}, "
                         f"unexpected: {sorted(given - specs)}")


def check_frame_shapes(frames: Mapping[str, Any], specs: Mapping[str, ElementSpec],
                       where: str = "", *, block: bool = False) -> None:
    """Refuse a frame (``block``: a block of frames, leading axis = frames) of an element
    whose shape is not the element's: numpy broadcast it into the frame without a word (a
    box given as its 3 lengths was written as a (3, 3) matrix of 3 equal rows; one
    position for every atom), or said only 'could not broadcast input array from shape
    (5,3) into shape (4,3)' (``where``: the output, said first where given).

    Raises
    ------
    ValueError
    """
    for name, values in frames.items():
        shape = tuple(np.shape(values))
        got = shape[1:] if block else shape
        want = tuple(specs[name].frame_shape)
        if got != want or (block and not shape):
            prefix = f"{where}: " if where else ""
            what = "frames" if block else "a frame"
            raise ValueError(f"{prefix}{name}: {what} of shape {got}, not {want}: give each "
                             f"frame whole, as the element was declared (ElementSpec"
                             f"({name!r}, {want}, ...))")


def _create_value(grp: h5py.Group, spec: ElementSpec, shape: tuple[int, ...],
                  **kwargs: Any) -> h5py.Dataset:
    """``grp/value`` of ``spec``: its stored dtype, fill value, unit and attributes."""
    if spec.fillvalue is not None:
        kwargs["fillvalue"] = spec.fillvalue
    dset = grp.create_dataset("value", shape=shape, dtype=spec.stored_dtype, **kwargs)
    if spec.unit is not None:
        dset.attrs["unit"] = spec.unit
    for k, v in spec.attrs.items():
        dset.attrs[k] = v
    return dset


def _where(part: h5py.Group, box: h5py.Group, name: str) -> tuple[h5py.Group, str]:
    """The group and key of element ``name`` of particles group ``part``: a member of
    ``box`` for :data:`BOX_MEMBERS`, else ``part/name``."""
    return (box, BOX_MEMBERS[name]) if name in BOX_MEMBERS else (part, name)


def _stored(values: Any) -> np.ndarray:
    """``values`` as written: unicode strings encoded to fixed-length UTF-8 bytes."""
    arr = np.asarray(values)
    if arr.dtype.kind != "U":
        return arr
    data = np.char.encode(arr, "utf-8")
    return data.astype(h5py.string_dtype("utf-8", max(1, data.dtype.itemsize)))


def check_steps_increase(steps: Any, where: str, *, after: int | None = None) -> None:
    """Refuse steps that do not increase strictly (H5MD's ``step``; readers take the
    frames for a time series), also against a step ``after`` written before them.

    Raises
    ------
    ValueError
        Naming ``where``, the step and the one it follows; or a step that is no integer
        (NaN, a fraction).
    """
    raw = np.asarray(steps).reshape(-1)
    if raw.dtype.kind == "f":  # NaN was said as step -9223372036854775808, 1.5 taken as 1
        bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw))
                             | (np.abs(raw) >= 2.0**63))
        if bad.size:
            raise ValueError(
                f"{where}: step {raw[bad[0]]} (the {_ordinal(int(bad[0]) + 1)} given) is no "
                "integer: H5MD's steps count integration steps (a step coordinate made float "
                "with NaN where frames lacked it, by xr.concat or reindex? give each frame "
                "its step)")
    steps = raw.astype(np.int64)
    if not steps.size:
        return
    if after is not None and steps[0] <= after:
        at, prev = int(steps[0]), after
    else:
        back = np.flatnonzero(np.diff(steps) <= 0)
        if not back.size:
            return
        at, prev = int(steps[back[0] + 1]), int(steps[back[0]])
    raise ValueError(f"{where}: step {at} after step {prev}: H5MD's steps increase strictly "
                     "(sort the frames by step, e.g. ds.sortby('step'), and drop repeated "
                     "ones, e.g. ds.drop_duplicates('time'))")


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def check_group_name(group: str) -> str:
    """``group`` if it can name a particles group (``/particles/<group>``), else raise.

    Raises
    ------
    ValueError
        If ``group`` is empty, contains ``/``, or is ``.`` or ``..``.
    """
    if not isinstance(group, str) or not group.strip() or "/" in group \
            or group in (".", ".."):
        raise ValueError(f"the particles group is named by one non-empty name without '/' "
                         f"(it becomes /particles/<name>), not {group!r}")
    return group


#: Room kept free on the output's disk beyond the next block (HDF5's metadata, and a
#: margin): HDF5 fails badly where the disk fills under it (h5py can crash at close).
ROOM_MARGIN = 4 * 2**20


def ensure_room(filename: str | os.PathLike[str], nbytes: int) -> None:
    """Refuse to write ``nbytes`` more to ``filename`` where its disk has not that much
    free (and ``ROOM_MARGIN``, 4 MiB): a clean error before the write, not HDF5's after.

    Raises
    ------
    OSError
        ``ENOSPC``, saying what the block needs and what is free.
    """
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(filename))).free
    except OSError:
        return  # cannot tell: let the write say
    if free < int(nbytes) + ROOM_MARGIN:
        raise OSError(errno.ENOSPC, f"No space left on device: the next {int(nbytes) / 2**20:.1f} "
                      f"MiB to write (and {ROOM_MARGIN // 2**20} MiB to spare) do not fit in "
                      f"the {free / 2**20:.1f} MiB free", os.fspath(filename))


def _close_written(f: h5py.File, filename: str) -> None:
    """Close a file written by h5py; a failure of its last writes (HDF5 holds some until
    then) is an ``OSError`` naming the file, not a RuntimeError from inside h5py.

    Where the disk is full, the file cannot be complete: it is emptied first, so that
    HDF5's close can land what it holds (a close that fails leaves HDF5 holding the file,
    and the process crashed at exit), and the error is raised after.
    """
    def no_space(err: BaseException) -> bool:  # HDF5's text, or an OSError's errno
        return "errno = 28" in str(err) or getattr(err, "errno", None) == errno.ENOSPC

    failure: BaseException | None = None
    try:
        f.flush()
    except (RuntimeError, OSError) as err:
        failure = err
        if no_space(err):
            with contextlib.suppress(OSError):
                os.truncate(filename, 0)
    try:
        f.close()
    except (RuntimeError, OSError) as err:
        failure = failure or err
    if failure is not None:
        full = no_space(failure)
        reason = "No space left on device" if full else str(failure).split("\n")[0]
        raise OSError(errno.ENOSPC if full else errno.EIO,
                      f"{reason} (the last writes, at closing)", os.fspath(filename)
                      ) from None


@contextlib.contextmanager
def written_file(filename: str | os.PathLike[str], **kwargs: Any) -> Iterator[h5py.File]:
    """``h5py.File(filename, "w", **kwargs)``, closed as :class:`H5MDWriter` closes its
    file: a failure of the last writes is an ``OSError`` naming the file (after an error
    in the block, that error is the one raised)."""
    filename = os.fspath(filename)
    f = h5py.File(filename, "w", **kwargs)
    try:
        yield f
    except BaseException:
        with contextlib.suppress(OSError):
            _close_written(f, filename)
        raise
    _close_written(f, filename)


def id_element(indices: Any) -> tuple[np.ndarray, None, dict[str, str]]:
    """The time-independent H5MD ``id`` element of a selection of atoms (which atoms of
    the input these are), as :class:`H5MDWriter`'s ``static`` takes it."""
    return (np.asarray(indices, dtype=np.int64), None,
            {"long_name": INPUT_INDEX_LONG_NAME})


class H5MDWriter:
    """Stream frames into a new H5MD 1.1 file.

    Parameters
    ----------
    target : str, path-like or h5py.File
        Output path (created, truncated) or an open writable file.
    elements : iterable of ElementSpec
        Time-dependent particle elements; a spec named ``"box_edges"`` stores the
        box edges (frame shape ``(3, 3)`` or ``(3,)``), ``"box_offset"`` the box's lower
        corner (:data:`BOX_MEMBERS`).
    n_frames : int, optional
        Number of frames, when known (needed for ``Layout(contiguous=True)``).
    layout : Layout, optional
        Storage of the ``value`` datasets.
    group : str, default "trajectory"
        Name of the particles group.
    boundary : sequence of str, optional
        Box boundary per dimension; default ``periodic`` with box edges, else ``none``.
    static : mapping, optional
        ``name -> (array, unit, attrs)`` time-independent elements (``species``, ...);
        an ``attrs`` key ``"_FillValue"`` is the dataset's fill value, not an attribute.
    time_unit : str, default "ps"
        Unit of ``time``.
    with_time : bool, default True
        Store ``time`` beside ``step`` (it is optional in H5MD 1.1); the times given to
        :meth:`append` and :meth:`extend` are then ignored.
    dimension : int, optional
        The box's spatial dimension (default: the last axis of ``position``, else 3).
    author : str, optional
        ``/h5md/author`` name (default: the user name).
    author_email : str, optional
        ``/h5md/author`` email (H5MD's optional ``email`` attribute); none by default.
    checksum : bool, default False
        Keep a BLAKE2 digest of everything written (see :attr:`checksums`).
    topology : ModuleTopology, optional
        The atoms' names, residues, masses and charges, written as GROMACS' topology
        module (``/h5md/modules/gromacs_topology``,
        :func:`h5mdx.format.gromacs_topology.write_module`).
    bonds : array of int, optional
        ``(n_bonds, 2)`` 0-based indices of bonded atoms of the particles group, written
        as ``/connectivity/bonds`` (its ``particles_group`` attribute names the group).
    structure : VMDStructure, optional
        The atoms' names, types, residues and bonds, written as VMD's structure module
        (``/parameters/vmd_structure``, :func:`h5mdx.format.vmd_structure.write_structure`).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.h5md")
    >>> with H5MDWriter(path, [ElementSpec("position", (2, 3), unit="Angstrom")]) as w:
    ...     w.append(0, 0.0, position=np.zeros((2, 3)))
    >>> w.n_written
    1
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | h5py.File,
        elements: Iterable[ElementSpec],
        *,
        n_frames: int | None = None,
        layout: Layout | None = None,
        group: str = "trajectory",
        boundary: Iterable[str] | None = None,
        static: Mapping[str, tuple[Any, str | None, Mapping[str, Any]]] | None = None,
        time_unit: str | None = "ps",
        author: str | None = None,
        author_email: str | None = None,
        checksum: bool = False,
        with_time: bool = True,
        dimension: int | None = None,
        topology: ModuleTopology | None = None,
        bonds: Any = None,
        structure: VMDStructure | None = None,
    ) -> None:
        self.layout = layout or Layout()
        self.with_time = bool(with_time)
        self.dimension = dimension
        self.n_frames = None if n_frames is None else int(n_frames)
        check_group_name(group)
        if self.layout.contiguous and self.n_frames is None:
            raise ValueError(
                "contiguous storage needs the number of frames in advance; use chunks "
                "(--frames-per-chunk/--chunk-mib) when it is unknown"
            )
        self.specs = {e.name: e for e in elements}
        if not self.specs:
            raise ValueError("nothing to write: give at least one time-dependent element")
        self._own = not isinstance(target, h5py.File)
        self.file: Any = h5py.File(os.fspath(target), "w") if self._own \
            else cast(h5py.File, target)
        self.filename = self.file.filename
        self.group = group
        self.n_written = 0
        self._last_step: int | None = None
        self._digests = Digests(enabled=checksum)
        try:
            self._create(boundary, static or {}, time_unit, author)
            if author_email:
                _set_text(self.file["h5md/author"].attrs, "email", str(author_email))
            if topology is not None:
                write_module(self.file["h5md"].require_group("modules"), topology,
                             self.layout.other_filters)
            if bonds is not None:
                conn = self.file.require_group("connectivity")
                pairs_of = np.asarray(bonds, dtype=np.int64).reshape(-1, 2)
                pairs = conn.create_dataset("bonds", data=pairs_of,
                                            **self.layout.other_filters(pairs_of))
                pairs.attrs["particles_group"] = self.particles.ref
            if structure is not None:
                write_structure(self.file.require_group("parameters"), structure,
                                self.layout.other_filters)
        except BaseException:
            if self._own:
                self.file.close()
            raise

    # ------------------------------------------------------------------ creation
    def _create(self, boundary: Iterable[str] | None, static: Mapping[str, Any],
                time_unit: str | None, author: str | None) -> None:
        f = self.file
        h5md = f.require_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        a = h5md.require_group("author")
        _set_text(a.attrs, "name", author or os.environ.get("USER")
                  or os.environ.get("USERNAME") or "unknown")
        c = h5md.require_group("creator")
        _set_text(c.attrs, "name", "h5mdx")
        _set_text(c.attrs, "version", _version())
        part = f.require_group("particles").require_group(self.group)
        self.particles = part
        box = self._create_box(part, boundary, "box_edges" in self.specs or "box_edges" in static)

        # bytes a frame takes in the file: every element, and its step and time
        self._frame_bytes = sum(e.frame_bytes for e in self.specs.values()) + 16
        if self.layout.contiguous:  # HDF5 allocates it whole at the first write
            ensure_room(self.filename, int(self.n_frames or 0) * self._frame_bytes)
        # the flush unit: chunk frames of the largest element
        big = max(self.specs.values(), key=lambda e: e.frame_bytes)
        self.block = self.layout.frames(big.frame_bytes, self.n_frames)
        self._dsets: dict[str, h5py.Dataset] = {}
        self._buf: dict[str, np.ndarray] = {}
        order = sorted(self.specs, key=lambda n: n != "box_edges")  # box first, like MDAnalysis
        step: h5py.Dataset | None = None
        time: h5py.Dataset | None = None
        n_frames = self.n_frames
        for name in order:
            spec = self.specs[name]
            where, key = _where(part, box, name)
            grp = where.require_group(key)
            small = spec.frame_bytes < big.frame_bytes
            kwargs: dict[str, Any] = {}
            shape: tuple[int, ...]
            maxshape: tuple[int | None, ...] | None
            if self.layout.contiguous:
                shape = (int(n_frames or 0), *spec.frame_shape)
                maxshape = None
            else:
                frames = self.layout.element_frames(spec.frame_bytes, self.block, n_frames,
                                                    small=small)
                kwargs["chunks"] = (frames, *spec.frame_shape)
                kwargs.update(compression_kwargs(self.layout.compression))
                shape = (0, *spec.frame_shape)
                maxshape = (None, *spec.frame_shape)
            dset = _create_value(grp, spec, shape, maxshape=maxshape, **kwargs)
            if step is None:
                if self.layout.contiguous:
                    sk = {"shape": (self.n_frames,)}
                else:
                    sk = {"shape": (0,), "maxshape": (None,), "chunks": (_SAMPLING_CHUNK,),
                          **compression_kwargs(self.layout.compression)}
                step = grp.create_dataset("step", dtype=np.int64, **sk)
                if self.with_time:
                    time = grp.create_dataset("time", dtype=np.float64, **sk)
                    if time_unit is not None:
                        time.attrs["unit"] = time_unit
            else:
                grp["step"] = step
                if time is not None:
                    grp["time"] = time
            self._dsets[name] = dset
            self._buf[name] = np.empty((self.block, *spec.frame_shape), dtype=spec.stored_dtype)
        assert step is not None  # the first element made it
        self._step, self._time = step, time
        self._buf_step = np.empty(self.block, dtype=np.int64)
        self._buf_time = np.empty(self.block, dtype=np.float64)
        self._fill = 0
        for name, (data, unit, attrs) in static.items():
            # a fixed box: box/edges, a dataset of the box group (H5MD 1.1)
            self._create_static(*_where(part, box, name), data, unit, attrs)

    def _create_static(self, where: h5py.Group, key: str, data: Any, unit: str | None,
                       attrs: Mapping[str, Any] | None) -> None:
        """A time-independent element (``attrs["_FillValue"]``: its fill value)."""
        arr = _stored(data)
        attrs = dict(attrs or {})
        fill = attrs.pop("_FillValue", None)
        dset = where.create_dataset(key, data=arr, **self.layout.other_filters(arr),
                                    **({} if fill is None else {"fillvalue": fill}))
        if unit is not None:
            dset.attrs["unit"] = unit
        for k, v in attrs.items():
            dset.attrs[k] = v
        self._digests.update(dset.name, arr)

    def _create_box(self, part: h5py.Group, boundary: Iterable[str] | None,
                    has_edges: bool) -> h5py.Group:
        """The box group H5MD requires: its dimension (given, else the positions') and
        its boundary (given, else periodic with edges and none without)."""
        box = part.require_group("box")
        boundary = None if boundary is None else [str(b) for b in boundary]
        dimension = self.dimension
        if dimension is None:
            position = self.specs.get("position")
            dimension = int(position.frame_shape[-1]) if position is not None \
                and position.frame_shape else (len(boundary) if boundary else 3)
        box.attrs["dimension"] = np.int32(dimension)
        if boundary is None:
            boundary = ["periodic" if has_edges else "none"] * dimension
        if len(boundary) != dimension:
            raise ValueError(f"{len(boundary)} boundaries for a box of dimension {dimension}")
        # fixed-length strings, as H5MD asks of its string attributes
        box.attrs["boundary"] = np.array([b.encode() for b in boundary],
                                         dtype=f"S{max(len(b) for b in boundary)}")
        return box

    # ------------------------------------------------------------------ writing
    def append(self, step: int, time: float, **frames: Any) -> None:
        """Add one frame: ``append(step, time, position=xyz, box_edges=m, ...)``.

        Every element given at construction must be passed.
        """
        self._check_names(frames)
        check_frame_shapes(frames, self.specs, self.filename)
        self._check_sampling(np.asarray([step]), time)
        i = self._fill
        for name, arr in frames.items():
            self._buf[name][i] = _stored(arr)
        self._buf_step[i] = step
        self._buf_time[i] = np.nan if time is None else time
        self._last_step = int(step)
        self._fill += 1
        if self._fill == self.block:
            self._flush()

    def extend(self, step: Any, time: Any, **blocks: Any) -> None:
        """Add a block of frames (leading axis = frames) for every element."""
        self._check_names(blocks)
        check_frame_shapes(blocks, self.specs, self.filename, block=True)
        self._check_sampling(np.asarray(step).reshape(-1), time)
        step = np.asarray(step, dtype=np.int64).reshape(-1)
        n = step.size
        time = np.full(n, np.nan) if time is None else \
            np.asarray(time, dtype=np.float64).reshape(-1)
        if time.size != n or any(np.shape(b)[0] != n for b in blocks.values()):
            raise ValueError("step, time and every element block need the same number of frames")
        pos = 0
        while pos < n:
            take = min(self.block - self._fill, n - pos)
            i = self._fill
            self._buf_step[i:i + take] = step[pos:pos + take]
            self._buf_time[i:i + take] = time[pos:pos + take]
            for name, b in blocks.items():
                self._buf[name][i:i + take] = _stored(b[pos:pos + take])
            self._fill += take
            pos += take
            if self._fill == self.block:
                self._flush()
        if n:
            self._last_step = int(step[-1])

    def add_element(self, spec: ElementSpec, value: Any, step: Any, time: Any = None, *,
                    time_unit: str | None = None, observable: bool = False) -> None:
        """Write a whole element sampled on a time axis of its own, with its own ``step``
        (and ``time``), beside the elements that share the writer's sampling.

        Parameters
        ----------
        spec : ElementSpec
            The element (``"box_edges"`` writes ``box/edges``); not one of the writer's
            shared-sampling elements.
        value : array-like
            All its frames, leading axis = frames; anything sliced by frames into numpy
            (an xarray or dask array is read a block of whole chunks at a time).
        step : array-like of int
            One step per frame.
        time : array-like of float, optional
            One time per frame; none is written without it.
        time_unit : str, optional
            Unit of ``time``.
        observable : bool, default False
            Write it as ``/observables/<name>`` (a value per frame, not per particle).
        """
        if self.file is None:
            raise ValueError(f"{self.filename}: the writer is closed")
        n = int(np.shape(value)[0])
        if tuple(np.shape(value)[1:]) != tuple(spec.frame_shape):
            raise ValueError(f"{spec.name}: frames of shape {tuple(np.shape(value)[1:])}, "
                             f"not {tuple(spec.frame_shape)}")
        steps = np.asarray(step, dtype=np.int64).reshape(-1)
        times = None if time is None else np.asarray(time, dtype=np.float64).reshape(-1)
        if steps.size != n or (times is not None and times.size != n):
            raise ValueError(f"{spec.name}: {n} frames but {steps.size} steps"
                             + ("" if times is None else f" and {times.size} times"))
        part = self.particles
        where, key = (self.file.require_group("observables"), spec.name) if observable \
            else _where(part, part["box"], spec.name)
        if spec.name in self.specs or key in where:
            raise ValueError(f"{self.filename}: element {spec.name!r} is already written")
        ensure_room(self.filename, n * (spec.frame_bytes + 16))
        chunk = self.layout.frames(spec.frame_bytes, n, small=True)
        kwargs: dict[str, Any] = {} if self.layout.contiguous else {
            "chunks": (chunk, *spec.frame_shape), "maxshape": (None, *spec.frame_shape),
            **compression_kwargs(self.layout.compression)}
        grp = where.create_group(key)
        dset = _create_value(grp, spec, (n, *spec.frame_shape), **kwargs)
        for a in range(0, n, chunk * 16):
            block = _stored(np.asarray(value[a:a + chunk * 16])).astype(spec.stored_dtype)
            dset[a:a + block.shape[0]] = block
            self._digests.update(dset.name, block)
        for name, data in (("step", steps), ("time", times)):
            if data is not None:
                written = grp.create_dataset(name, data=data,
                                             **self.layout.other_filters(data))
                self._digests.update(written.name, data)
        if times is not None and time_unit is not None:
            grp["time"].attrs["unit"] = time_unit

    def _check_sampling(self, steps: np.ndarray, time: Any) -> None:
        """Refuse steps that do not increase (H5MD's ``step`` is strictly increasing;
        readers take the frames for a time series) and a missing time where the file
        has a ``time`` (it was written as NaN)."""
        if time is None and self.with_time:
            raise ValueError(
                f"{self.filename}: time is None, but the writer writes a 'time' dataset "
                "(give the times, or create it with with_time=False)")
        check_steps_increase(steps, self.filename, after=self._last_step)

    def _check_names(self, given: Mapping[str, Any]) -> None:
        check_element_names(given, self.specs)

    def _flush(self) -> None:
        n = self._fill
        if n == 0:
            return
        a, b = self.n_written, self.n_written + n
        if self.n_frames is not None and b > self.n_frames and self.layout.contiguous:
            raise ValueError(f"more frames than the {self.n_frames} announced")
        if not self.layout.contiguous:
            ensure_room(self.filename, n * self._frame_bytes)
        sampling: list[tuple[h5py.Dataset, np.ndarray]] = [(self._step, self._buf_step)]
        if self._time is not None:
            sampling.append((self._time, self._buf_time))
        for dset, buf in sampling:
            if not self.layout.contiguous:
                dset.resize((b,))
            dset[a:b] = buf[:n]
            self._digests.update(dset.name, buf[:n])
        for name, dset in self._dsets.items():
            if not self.layout.contiguous:
                dset.resize(b, axis=0)
            dset[a:b] = self._buf[name][:n]
            self._digests.update(dset.name, self._buf[name][:n])
        self.n_written = b
        self._fill = 0

    def close(self) -> None:
        """Write the buffered frames and close the file (if this writer opened it)."""
        if self.file is None:
            return
        try:
            self._flush()
            if (self.layout.contiguous and self.n_frames is not None
                    and self.n_written != self.n_frames):
                raise ValueError(
                    f"{self.filename}: {self.n_written} frames written but {self.n_frames} "
                    "announced for contiguous storage"
                )
        finally:
            f, self.file = self.file, None
            if self._own:
                _close_written(f, self.filename)

    @property
    def checksums(self) -> dict[str, str]:
        """HDF5 path -> hex digest of everything written (``checksum=True`` only)."""
        return self._digests.hexdigests()

    def __enter__(self) -> H5MDWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
            return
        if self.file is None:
            return
        # after a failure (an interrupt, a read error, a full disk), write no more and
        # count no frames: the failure is the error, not "0 frames written but N
        # announced" of a contiguous file, nor one of closing it
        f, self.file = self.file, None
        self._fill = 0
        if self._own:
            with contextlib.suppress(OSError):
                _close_written(f, self.filename)
