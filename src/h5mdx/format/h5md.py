"""The H5MD format layer: walk an HDF5 file into plain descriptions.

This module knows h5py and numpy only (no xarray, no dask). :func:`scan`
reads the metadata of an H5MD 1.x file -- groups, elements, shapes, chunk
layouts, units and the small ``step``/``time`` arrays -- and never the
``value`` data of an element. Everything that is wrong with the file raises
:class:`~h5mdx.errors.H5MDFormatError` naming the file, the H5MD path and the
problem.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDError, H5MDFormatError, H5MDReadError
from h5mdx.format.schema import H5MD_SIGNATURE, SUPPORTED_VERSIONS, Path

__all__ = [
    "BoxInfo",
    "ElementInfo",
    "FileInfo",
    "ParticlesGroupInfo",
    "Sampling",
    "is_h5md",
    "open_h5md",
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


@dataclass(frozen=True, eq=False)
class Sampling:
    """When a time-dependent element was sampled.

    Attributes
    ----------
    kind : {"explicit", "fixed"}
        ``explicit``: ``step``/``time`` datasets with one entry per frame;
        ``fixed``: scalar intervals with an ``offset`` attribute.
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
        """Whether two samplings describe the same frames (shared link or equal values)."""
        if self.key == other.key:
            return True
        if self.step.shape != other.step.shape or not np.array_equal(self.step, other.step):
            return False
        if (self.time is None) != (other.time is None):
            return False
        return self.time is None or bool(np.array_equal(self.time, other.time))


@dataclass(frozen=True, eq=False)
class ElementInfo:
    """One H5MD element (time-dependent group or time-independent dataset)."""

    name: str
    path: str
    value_path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...] | None
    compression: str | None
    compression_opts: Any
    filters: tuple[str, ...]
    unit: str | None
    time_dependent: bool
    sampling: Sampling | None
    fillvalue: Any
    storage_size: int

    @property
    def n_frames(self) -> int | None:
        """Number of frames, or None for a time-independent element."""
        return self.shape[0] if self.time_dependent else None

    @property
    def nbytes(self) -> int:
        """Size of the uncompressed data in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True, eq=False)
class BoxInfo:
    """The simulation box of a particles group."""

    path: str
    dimension: int
    boundary: tuple[str, ...]
    edges: ElementInfo | None


@dataclass(frozen=True, eq=False)
class ParticlesGroupInfo:
    """A group under ``/particles``."""

    name: str
    path: str
    elements: dict[str, ElementInfo]
    box: BoxInfo | None


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
    file_size: int = 0


# ----------------------------------------------------------------------------- opening


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
        elif swmr:
            problem = (
                f"HDF5 cannot open the file with swmr=True ({text}); SWMR reading needs a "
                "file written with libver='latest' (HDF5 >= 1.10 format): open it without "
                "swmr=True, or it is truncated or corrupt"
            )
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

    @property
    def filename(self) -> str:
        return self.f.filename


_EXTERNAL_HINT = (
    "h5mdx does not follow references to other files unless you opt in with "
    "allow_external=True (xr.open_dataset(..., engine='h5md', allow_external=True)); "
    "do so only for files you trust"
)


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [_decode(v) for v in value.tolist()]
        if value.ndim == 0:
            return value.item()
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attr(obj: h5py.HLObject, name: str, default: Any = None) -> Any:
    try:
        if name not in obj.attrs:
            return default
        return _decode(obj.attrs[name])
    except (OSError, TypeError, ValueError, KeyError, RuntimeError):
        return default


def _unit_attr(c: _Ctx, obj: h5py.HLObject, where: str) -> str | None:
    """The ``unit`` attribute as a string (a one-element string array is accepted)."""
    unit = _attr(obj, "unit")
    if isinstance(unit, list) and len(unit) == 1:
        unit = unit[0]
    if unit is None or isinstance(unit, str):
        return unit
    raise H5MDFormatError(c.filename, where, f"the 'unit' attribute must be a string, not {unit!r}")


def _addr(obj: h5py.HLObject) -> int:
    return int(h5py.h5o.get_info(obj.id).addr)


def _fill_value(dset: h5py.Dataset) -> Any:
    try:
        plist = dset.id.get_create_plist()
        if plist.fill_value_defined() != h5py.h5d.FILL_VALUE_USER_DEFINED:
            return None
        if dset.dtype.kind not in "iufb":
            return None
        value = dset.fillvalue
    except (OSError, TypeError, ValueError, RuntimeError):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _filters(dset: h5py.Dataset) -> tuple[str, ...]:
    names = []
    try:
        plist = dset.id.get_create_plist()
        for i in range(plist.get_nfilters()):
            code, _flags, _vals, name = plist.get_filter(i)
            names.append(name.decode("ascii", "replace") if name else str(code))
    except (OSError, ValueError, RuntimeError):
        pass
    return tuple(names)


def _link_type(group: h5py.Group, name: str) -> int | None:
    """The HDF5 link type of ``group/name`` without following the link (None: no link)."""
    key = name.encode("utf-8")
    try:
        if not group.id.links.exists(key):
            return None
        return int(group.id.links.get_info(key).type)
    except (KeyError, OSError, RuntimeError, ValueError):
        return None


def _has(group: h5py.Group, name: str) -> bool:
    """``name in group`` that never opens another file (external links count as present)."""
    return _link_type(group, name) is not None


def _fileno(obj: h5py.HLObject) -> int:
    return int(h5py.h5o.get_info(obj.id).fileno)


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
        obj = group[name]
    except (KeyError, OSError, RuntimeError, ValueError) as err:
        raise H5MDFormatError(
            c.filename, where, f"{name!r} is a dangling, looping or unreadable link ({err})"
        ) from None
    if not c.allow_external and kind == h5py.h5l.TYPE_SOFT:
        # a soft link can still reach another file through an external link on its way
        try:
            same = _fileno(obj) == _fileno(c.f["/"])
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


def _capacity(dset: h5py.Dataset) -> int:
    """Upper bound on the number of elements of ``dset`` that have stored data."""
    size = int(dset.size or 0)
    itemsize = max(1, int(dset.dtype.itemsize))
    try:
        storage = int(dset.id.get_storage_size())
    except (OSError, ValueError, RuntimeError):
        return size  # cannot tell: do not refuse on this ground
    if storage >= size * itemsize:
        return size
    chunks = dset.chunks
    if not chunks:
        return storage // itemsize
    try:
        n_chunks = int(dset.id.get_num_chunks())
    except (OSError, ValueError, RuntimeError, AttributeError):
        return size
    return min(size, n_chunks * math.prod(int(x) for x in chunks))


def _check_declared(c: _Ctx, dset: h5py.Dataset, where: str) -> None:
    """Refuse a dataset whose declared shape goes far beyond its stored data."""
    shape = dset.shape
    if not shape:
        return
    size = math.prod(int(s) for s in shape)
    chunk = math.prod(int(x) for x in dset.chunks) if dset.chunks else 0
    allowed = max(MAX_ABSENT_ELEMENTS, chunk)
    if size <= allowed:
        return
    absent = size - _capacity(dset)
    if absent > allowed:
        raise H5MDFormatError(
            c.filename,
            where,
            f"declares shape {tuple(int(s) for s in shape)} but stores data for at most "
            f"{size - absent} of its {size} elements: the data were never written (an "
            "absurd declared size, or a writer that died); h5mdx refuses to trust the "
            "declared size",
        )


def _refresh(c: _Ctx, dset: h5py.Dataset) -> None:
    if c.live:
        try:
            dset.refresh()
        except (OSError, RuntimeError, ValueError, AttributeError):
            pass


# ----------------------------------------------------------------------------- sampling


def _read_small(c: _Ctx, dset: h5py.Dataset, where: str, n: int | None = None) -> np.ndarray:
    _check_declared(c, dset, where)
    count = dset.size if n is None else n
    if int(count or 0) * max(1, dset.dtype.itemsize) > MAX_SMALL_READ:
        raise H5MDFormatError(
            c.filename, where, f"{dset.name} is too large to read at open time ({dset.shape})"
        )
    try:
        return np.asarray(dset[()] if n is None else dset[:n])
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as err:
        raise H5MDFormatError(c.filename, where, f"cannot read {dset.name}: {err}") from None


def _sampling(c: _Ctx, grp: h5py.Group, n_frames: int, where: str) -> Sampling:
    """The sampling of an element whose value has ``n_frames`` frames.

    In a live (SWMR) file the element may hold fewer steps/times than values (or more)
    while a writer appends: the sampling is then cut to the frames all three hold.
    """
    if not _has(grp, "step"):
        raise H5MDFormatError(
            c.filename,
            where,
            "time-dependent element has a 'value' dataset but no 'step' "
            "(H5MD requires 'step' next to 'value')",
        )
    step_ds = _get(c, grp, "step", where)
    if not isinstance(step_ds, h5py.Dataset):
        raise H5MDFormatError(c.filename, f"{where}/step", "'step' must be a dataset")
    time_ds = _get(c, grp, "time", where) if _has(grp, "time") else None
    if time_ds is not None and not isinstance(time_ds, h5py.Dataset):
        raise H5MDFormatError(c.filename, f"{where}/time", "'time' must be a dataset")
    _check_dataset(c, step_ds, f"{where}/step")
    if time_ds is not None:
        _check_dataset(c, time_ds, f"{where}/time")
        _refresh(c, time_ds)
    _refresh(c, step_ds)
    key = (_addr(step_ds), _addr(time_ds) if time_ds is not None else None)
    time_unit = _unit_attr(c, time_ds, f"{where}/time") if time_ds is not None else None

    if step_ds.shape == ():
        # fixed interval: s_i = offset + i * step
        if n_frames > MAX_FRAMES:
            raise H5MDFormatError(
                c.filename, where, f"declares {n_frames} frames, more than h5mdx accepts"
            )
        interval = _read_small(c, step_ds, f"{where}/step")
        offset = _attr(step_ds, "offset", 0) or 0
        if np.asarray(interval).dtype.kind not in "iu" or not isinstance(offset, int):
            raise H5MDFormatError(
                c.filename, f"{where}/step", "'step' and its 'offset' must be integers"
            )
        step = int(offset) + int(interval) * np.arange(n_frames, dtype=np.int64)
        time = None
        if time_ds is not None:
            if time_ds.shape != ():
                raise H5MDFormatError(
                    c.filename,
                    f"{where}/time",
                    f"'step' is a fixed interval (scalar) but 'time' has shape {time_ds.shape}",
                )
            t_raw = _read_small(c, time_ds, f"{where}/time")
            t_off = _attr(time_ds, "offset", 0.0) or 0.0
            if t_raw.dtype.kind not in "iuf" or not isinstance(t_off, (int, float)):
                raise H5MDFormatError(
                    c.filename, f"{where}/time", "'time' and its 'offset' must be numbers"
                )
            time = float(t_off) + float(t_raw) * np.arange(n_frames, dtype=np.float64)
        return Sampling("fixed", step, time, time_unit, key)

    if step_ds.shape is None or step_ds.ndim != 1 or (
        step_ds.shape[0] != n_frames and not c.live
    ):
        raise H5MDFormatError(
            c.filename,
            f"{where}/step",
            f"'step' has shape {step_ds.shape} but 'value' has {n_frames} frames",
        )
    if step_ds.dtype.kind not in "iu":
        raise H5MDFormatError(
            c.filename, f"{where}/step", f"'step' must be integer, not {step_ds.dtype}"
        )
    n = min(n_frames, int(step_ds.shape[0]))
    if time_ds is not None:
        if time_ds.shape is None or time_ds.ndim != 1 or (
            time_ds.shape[0] != n_frames and not c.live
        ):
            raise H5MDFormatError(
                c.filename,
                f"{where}/time",
                f"'time' has shape {time_ds.shape} but 'value' has {n_frames} frames",
            )
        if time_ds.dtype.kind not in "iuf":
            raise H5MDFormatError(
                c.filename, f"{where}/time", f"'time' must be numeric, not {time_ds.dtype}"
            )
        n = min(n, int(time_ds.shape[0]))
    step = _read_small(c, step_ds, f"{where}/step", n).astype(np.int64, copy=False)
    time = None
    if time_ds is not None:
        time = _read_small(c, time_ds, f"{where}/time", n).astype(np.float64, copy=False)
    return Sampling("explicit", step, time, time_unit, key)


# ----------------------------------------------------------------------------- elements


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
) -> ElementInfo:
    value_path = dset.name
    if link_path is not None:
        try:
            if _fileno(dset) != _fileno(c.f["/"]):
                value_path = link_path  # reached through an external link: read it by that
        except (KeyError, OSError, RuntimeError, ValueError):
            pass
    try:
        dtype = dset.dtype
        shape = tuple(int(s) for s in dset.shape) if dset.shape is not None else ()
        chunks = dset.chunks
        compression = dset.compression
        compression_opts = dset.compression_opts
    except (OSError, TypeError, ValueError, RuntimeError, KeyError) as err:
        raise H5MDFormatError(c.filename, path, f"cannot read dataset metadata: {err}") from None
    if sampling is not None and shape and sampling.step.shape[0] != shape[0]:
        shape = (int(sampling.step.shape[0]), *shape[1:])  # live file: frames written so far
    try:
        storage = int(dset.id.get_storage_size())
    except (OSError, ValueError, RuntimeError):
        storage = 0
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
    )


def _element(c: _Ctx, name: str, obj: h5py.HLObject, path: str) -> ElementInfo:
    """Describe the element ``obj`` found at H5MD path ``path``."""
    if isinstance(obj, h5py.Dataset):
        _check_dataset(c, obj, obj.name or path)
        _check_declared(c, obj, obj.name or path)
        return _dataset_info(
            c, name, path, obj, time_dependent=False, sampling=None,
            unit=_unit_attr(c, obj, path), link_path=path,
        )
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
    if value.shape is None or len(value.shape) == 0:
        raise H5MDFormatError(
            c.filename,
            f"{path}/value",
            "'value' of a time-dependent element must have a time axis, but it is a scalar",
        )
    _check_declared(c, value, f"{path}/value")
    sampling = _sampling(c, obj, int(value.shape[0]), path)
    unit = _unit_attr(c, value, f"{path}/value")
    return _dataset_info(c, name, path, value, time_dependent=True, sampling=sampling, unit=unit,
                         link_path=f"{path}/value")


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


def _box(c: _Ctx, grp: h5py.Group, path: str) -> BoxInfo:
    dimension = _attr(grp, "dimension")
    boundary = _attr(grp, "boundary")
    # some writers (ZnH5MD) also store them as datasets
    for key in ("dimension", "boundary"):
        if (dimension if key == "dimension" else boundary) is not None or not _has(grp, key):
            continue
        obj = _get(c, grp, key, path)
        if isinstance(obj, h5py.Dataset) and (obj.size or 0) <= 16:
            val = _decode(_read_small(c, obj, f"{path}/{key}"))
            if key == "dimension":
                dimension = val
            else:
                boundary = val
    if dimension is None:
        raise H5MDFormatError(c.filename, path, "box has no 'dimension' attribute")
    if isinstance(dimension, list) and len(dimension) == 1:
        dimension = dimension[0]
    try:
        if isinstance(dimension, (list, dict, complex)) or float(dimension) != int(dimension):
            raise TypeError
        dimension = int(dimension)
    except (TypeError, ValueError, OverflowError):
        raise H5MDFormatError(
            c.filename, path, f"box 'dimension' must be an integer, not {dimension!r}"
        ) from None
    if not 1 <= dimension <= 3:
        raise H5MDFormatError(c.filename, path, f"box 'dimension' is {dimension}; must be 1-3")
    if boundary is None:
        boundary = ["none"] * dimension
    if isinstance(boundary, str):
        boundary = [boundary] * dimension
    if not isinstance(boundary, list) or len(boundary) != dimension:
        raise H5MDFormatError(
            c.filename,
            path,
            f"box 'boundary' must hold {dimension} strings ('periodic' or 'none'), "
            f"not {boundary!r}",
        )
    edges = None
    if _has(grp, "edges"):
        edges = _element(c, "box_edges", _get(c, grp, "edges", path), f"{path}/edges")
        tail = edges.shape[1:] if edges.time_dependent else edges.shape
        if tail not in ((dimension,), (dimension, dimension)):
            raise H5MDFormatError(
                c.filename,
                f"{path}/edges",
                f"box edges have shape {edges.shape}; expected (…, {dimension}) or "
                f"(…, {dimension}, {dimension}) for a {dimension}-dimensional box",
            )
    return BoxInfo(
        path=path, dimension=dimension, boundary=tuple(str(b) for b in boundary), edges=edges
    )


def _particles_group(c: _Ctx, name: str, grp: h5py.Group) -> ParticlesGroupInfo:
    path = grp.name or f"/particles/{name}"
    elements: dict[str, ElementInfo] = {}
    box = None
    for child in grp:
        obj = _get(c, grp, child, path)
        if child == "box":
            if isinstance(obj, h5py.Group):
                box = _box(c, obj, f"{path}/box")
            continue
        elements[child] = _element(c, child, obj, f"{path}/{child}")
    if c.live:
        every = list(elements.values())
        if box is not None and box.edges is not None:
            every.append(box.edges)
        trimmed = _trim_live(every)
        elements = {k: trimmed[el.path] for k, el in elements.items()}
        if box is not None and box.edges is not None:
            box = replace(box, edges=trimmed[box.edges.path])
    return ParticlesGroupInfo(name=name, path=path, elements=elements, box=box)


def _observables(
    c: _Ctx,
    grp: h5py.Group,
    prefix: str,
    out: dict[str, ElementInfo],
    groups: list[str],
    seen: set[int],
) -> None:
    seen.add(_addr(grp))
    for child in grp:
        obj = _get(c, grp, child, grp.name)
        key = f"{prefix}{child}"
        path = f"/observables/{key}"
        if isinstance(obj, h5py.Group) and not _has(obj, "value"):
            if _addr(obj) in seen:
                raise H5MDFormatError(
                    c.filename, path, "links back to a group that contains it (a cycle)"
                )
            groups.append(key)
            _observables(c, obj, f"{key}/", out, groups, seen)
        else:
            out[key] = _element(c, child, obj, path)


def _parameters(c: _Ctx) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if not _has(c.f, "parameters"):
        return params
    grp = _get(c, c.f, "parameters", "/")
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
        _check_dataset(c, obj, obj.name)
        _check_declared(c, obj, obj.name)
        params[name] = {"shape": obj.shape, "dtype": str(obj.dtype), "path": obj.name}
    return params


def scan(
    source: str | os.PathLike[str] | h5py.File, *, allow_external: bool = False
) -> FileInfo:
    """Describe an H5MD file without reading element data.

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file, or an open :class:`h5py.File`. A file opened with ``swmr=True`` is
        treated as live: elements are cut to the frames written so far.
    allow_external : bool, default False
        Follow external links and accept datasets whose data live in other files
        (external raw storage, virtual datasets). Refused by default.

    Returns
    -------
    FileInfo

    Raises
    ------
    H5MDFormatError
        If the file is not H5MD, an element in it is malformed, or it refers to other
        files and ``allow_external`` is False.
    """
    if isinstance(source, h5py.File):
        return _scan_safely(source, allow_external)
    with open_h5md(source) as f:
        return _scan_safely(f, allow_external)


def _scan_safely(f: h5py.File, allow_external: bool) -> FileInfo:
    try:
        live = bool(f.swmr_mode)
    except (AttributeError, ValueError, OSError):
        live = False
    c = _Ctx(f, allow_external=allow_external, live=live)
    try:
        return _scan(c)
    except H5MDError:
        raise
    except RecursionError:
        raise H5MDFormatError(
            c.filename, None, "the group structure is too deeply nested"
        ) from None
    except (KeyError, RuntimeError, TypeError, OSError, ValueError, AttributeError,
            IndexError, OverflowError) as err:
        # h5py/HDF5 failures on a structure no check above anticipated
        raise H5MDFormatError(
            c.filename, None, f"unreadable H5MD structure ({type(err).__name__}: {err})"
        ) from None


def _version(c: _Ctx) -> tuple[int, int]:
    h5md = _get(c, c.f, "h5md", "/") if _has(c.f, "h5md") else None
    if not isinstance(h5md, h5py.Group):
        raise H5MDFormatError(
            c.filename,
            "/h5md",
            "an HDF5 file but not an H5MD file: there is no /h5md group "
            "(open generic HDF5/netCDF files with engine='h5netcdf')",
        )
    raw = _attr(h5md, "version")
    if raw is None:
        raise H5MDFormatError(c.filename, "/h5md", "the /h5md group has no 'version' attribute")
    try:
        major, minor = (int(v) for v in list(np.ravel(raw))[:2])
    except (TypeError, ValueError, OverflowError):
        raise H5MDFormatError(
            c.filename, "/h5md", f"cannot understand H5MD version {raw!r}"
        ) from None
    if (major, minor) not in SUPPORTED_VERSIONS:
        supported = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_VERSIONS)
        raise H5MDFormatError(
            c.filename,
            "/h5md",
            f"H5MD version {major}.{minor} is not supported (h5mdx reads {supported})",
        )
    return major, minor


def _meta(c: _Ctx, h5md: h5py.Group, name: str, keys: tuple[str, ...]) -> dict[str, str]:
    if not _has(h5md, name):
        return {}
    try:
        grp = _get(c, h5md, name, "/h5md")
    except H5MDFormatError:
        return {}  # author/creator are informative only
    if not isinstance(grp, h5py.Group):
        return {}
    return {k: str(_attr(grp, k)) for k in keys if _attr(grp, k) is not None}


def _scan(c: _Ctx) -> FileInfo:
    version = _version(c)
    h5md = c.f["h5md"]
    author = _meta(c, h5md, "author", ("name", "email"))
    creator = _meta(c, h5md, "creator", ("name", "version"))
    particles: dict[str, ParticlesGroupInfo] = {}
    if _has(c.f, "particles"):
        pgrp = _get(c, c.f, "particles", "/")
        if not isinstance(pgrp, h5py.Group):
            raise H5MDFormatError(c.filename, "/particles", "must be a group")
        for name in pgrp:
            obj = _get(c, pgrp, name, "/particles")
            if not isinstance(obj, h5py.Group):
                raise H5MDFormatError(
                    c.filename, f"/particles/{name}", "a particles group must be a group"
                )
            particles[name] = _particles_group(c, name, obj)
    observables: dict[str, ElementInfo] = {}
    obs_groups: list[str] = []
    if _has(c.f, "observables"):
        ogrp = _get(c, c.f, "observables", "/")
        if isinstance(ogrp, h5py.Group):
            _observables(c, ogrp, "", observables, obs_groups, set())
    try:
        size = os.path.getsize(c.filename)
    except OSError:
        size = 0
    return FileInfo(
        filename=c.filename,
        version=version,
        author=author,
        creator=creator,
        particles=particles,
        observables=observables,
        observable_groups=tuple(obs_groups),
        parameters=_parameters(c),
        file_size=size,
    )
