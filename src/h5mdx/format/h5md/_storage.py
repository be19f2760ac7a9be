"""What the scan asks of one HDF5 object, and the context of a walk (``_Ctx``).

Attributes and units, filters (and the plugins that decode them), links that reach into
other files, and the checks of declared against stored data that refuse absurd shapes
(:data:`MAX_ABSENT_ELEMENTS`) or find where a live or stopped writer's frames end.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.chunk_index import chunk_grid
from h5mdx.format.h5md._model import Problem, Sampling
from h5mdx.format.text import decode as _decode
from h5mdx.format.text import is_utf8, one_string, unit_text

#: How many declared elements of a dataset may lack stored data (never written,
#: e.g. a writer that died after a resize) before :func:`scan` refuses the file. Opening
#: builds arrays proportional to the number of frames and atoms (``step``, ``time``, the
#: ``atom`` index), so a shape declared far beyond the stored data must not be trusted.
MAX_ABSENT_ELEMENTS = 2**22


#: Largest dataset :func:`scan` reads whole at open time (``step``/``time`` of explicit
#: sampling, box attributes stored as datasets), in bytes.
MAX_SMALL_READ = 2**30


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

    def __post_init__(self) -> None:
        # a string is truthy: scan(path, allow_external="no") followed external links
        if not isinstance(self.allow_external, (bool, np.bool_)):
            raise TypeError(
                f"allow_external= takes True or False, not {self.allow_external!r}")

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

    def note(self, path: str, message: str, assumed: str, *, minor: bool = False,
             departure: bool = True) -> None:
        """Record a departure from H5MD (once per path and message: the first note of a
        problem stands, as a module's reader notes a dataset of ``/parameters`` the scan
        of it noted); ``departure=False``: a problem where H5MD leaves the file free (see
        :class:`Problem`)."""
        if not any((p.path, p.message, p.assumed) == (path, message, assumed)
                   for p in self.problems):
            self.problems.append(Problem(path, message, assumed, minor, departure=departure))

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


#: The root groups H5MD defines the content of: an attribute there that cannot be read
#: is a departure (``strict=True`` refuses it); elsewhere (``/parameters``, the root
#: groups H5MD does not define) the file is free, and it is warned about only.
_DEFINED_ROOTS = frozenset({"h5md", "particles", "observables", "connectivity"})

#: What reading an attribute h5py has no conversion for (HDF5's opaque type, ...) raises.
ATTRIBUTE_ERRORS = (OSError, RuntimeError, KeyError, TypeError, ValueError)


def attribute_problem(path: str, name: str | None, err: BaseException) -> Problem:
    """The problem of the attribute ``name`` of the object at ``path`` that h5py cannot
    read (``err``; ``name`` None: its attributes cannot be listed): left out, said once
    naming it and why; these were left out in silence."""
    what = f"its attribute {name!r} cannot be read" if name is not None else \
        "its attributes cannot be listed"
    return Problem(path, f"{what} ({type(err).__name__}: {err})",
                   "attribute left out" if name is not None else "attributes left out",
                   departure=path.strip("/").partition("/")[0] in _DEFINED_ROOTS)


def _attr(obj: h5py.HLObject, name: str, default: Any = None) -> Any:
    raw = _raw_attr(obj, name, default)
    return default if raw is default else _decode(raw)


def _raw_attr(obj: h5py.HLObject, name: str, default: Any = None) -> Any:
    """The attribute ``name`` of ``obj`` as h5py reads it (bytes undecoded), else
    ``default``: also for one of no value (HDF5's null dataspace, h5py's ``Empty``),
    which was read as the text "Empty(dtype=dtype('S1'))" (an empty
    ``/h5md/author/email`` became that author e-mail)."""
    try:
        if name not in obj.attrs:
            return default
        value = obj.attrs[name]
    except (OSError, TypeError, ValueError, KeyError, RuntimeError):
        return default
    return default if isinstance(value, h5py.Empty) else value


def unit_attribute(obj: h5py.HLObject) -> str | None:
    """The ``unit`` attribute of ``obj`` as text (:func:`unit_text`); None where it has
    none. Raises ValueError where it is not text."""
    return unit_text(_raw_attr(obj, "unit"))


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
    _note_latin1(c, obj, where, unit)
    try:
        return scaled_unit(unit, _attr(obj, "unit_factor"))
    except ValueError as err:
        c.note(where, str(err), f"unit_factor ignored: unit {unit!r}")
        return unit


def _note_latin1(c: _Ctx, obj: h5py.HLObject, where: str, unit: str | None) -> None:
    """Note a ``unit`` attribute whose bytes are not UTF-8 (read as Latin-1)."""
    raw = one_string(_raw_attr(obj, "unit"))
    if isinstance(raw, bytes) and not is_utf8(raw):
        c.note(where, f"the 'unit' attribute {bytes(raw)!r} is not UTF-8 text",
               f"read as Latin-1: {unit!r}")


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
    which walks a chunked dataset's whole index (68 ms for 100,000 chunks;
    an open did it four times)."""
    return _object_number(obj.id)


def _object_number(oid: Any) -> tuple[int, ...]:
    """:func:`object_address` of an HDF5 identifier (``obj.id``, or one of
    ``h5py.h5f.get_obj_ids``)."""
    return tuple(int(x) for x in h5py.h5g.get_objinfo(oid, b".").objno)


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


def dataset_problem(dset: h5py.Dataset) -> str | None:
    """Why a dataset of ``/parameters`` or of a root group H5MD does not define cannot be
    served as a variable, or None: a null dataspace, object references, variable-length
    sequences other than strings."""
    dtype = dset.dtype
    if dset.shape is None:
        return "an empty dataset (null dataspace) holds no value"
    if h5py.check_ref_dtype(dtype) is not None:
        return "object references, which h5mdx does not follow"
    if h5py.check_vlen_dtype(dtype) is not None and h5py.check_string_dtype(dtype) is None:
        return f"variable-length data ({h5py.check_vlen_dtype(dtype)} sequences)"
    return None


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
    if c.live or not value.chunks or frames == 0:
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
        refresh_alone(dset)


def refresh_alone(dset: h5py.Dataset) -> bool:
    """Refresh ``dset`` of a live (SWMR) file where it is the one open handle of its dataset.

    HDF5's ``H5Drefresh`` (1.10 to 2.0) corrupts every open handle of a dataset where
    there is more than one, also through another ``h5py.File`` of the same file: their
    reads then find the wrong chunks (a step dataset ``[0, 1, 2, 3]`` in chunks of 2 read
    ``[0, 1, 0, 1]``), or fail. Where another is open, ``dset`` reads what that handle's
    last refresh saw.

    Returns
    -------
    bool
        Whether it was refreshed.
    """
    try:
        fid = dset.file.id
        # one dataset open in the file (the usual case): no handle to compare, and the
        # cost of a read does not grow with the datasets open
        if h5py.h5f.get_obj_count(fid, h5py.h5f.OBJ_DATASET) <= 1:
            dset.refresh()
            return True
        me = object_address(dset)
        # the open datasets of the file, also those opened through its other Files; the
        # list holds a reference to each, dropped before the refresh (which reopens the
        # handle: a reference dropped after it closed the reopened one)
        handles = h5py.h5f.get_obj_ids(fid, h5py.h5f.OBJ_DATASET)
        alone = sum(1 for i in handles if _same_object(i, me)) <= 1
        del handles
        if not alone:
            return False
        dset.refresh()
    except (OSError, RuntimeError, ValueError, AttributeError, TypeError):
        return False
    return True


def _same_object(oid: Any, address: tuple[int, ...]) -> bool:
    try:
        return _object_number(oid) == address
    except (OSError, RuntimeError, ValueError, TypeError):
        return False


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
