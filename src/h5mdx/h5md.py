"""The H5MD format layer: walk an HDF5 file into plain descriptions.

This module knows h5py and numpy only (no xarray, no dask). :func:`scan`
reads the metadata of an H5MD 1.x file -- groups, elements, shapes, chunk
layouts, units and the small ``step``/``time`` arrays -- and never the
``value`` data of an element. Everything that is wrong with the file raises
:class:`~h5mdx.errors.H5MDFormatError` naming the file, the H5MD path and the
problem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.schema import H5MD_SIGNATURE, SUPPORTED_VERSIONS, Path

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
        if not _signature_ok(path):
            problem = "not an HDF5 file (no HDF5 signature): H5MD files are HDF5 files"
        else:
            problem = f"HDF5 cannot open the file; it is truncated or corrupt ({err})"
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
    except (OSError, TypeError, ValueError):
        return default


def _addr(obj: h5py.HLObject) -> int:
    return int(h5py.h5o.get_info(obj.id).addr)


def _fill_value(dset: h5py.Dataset) -> Any:
    try:
        plist = dset.id.get_create_plist()
        if plist.fill_value_defined() != h5py.h5d.FILL_VALUE_USER_DEFINED:
            return None
        value = dset.fillvalue
    except (OSError, TypeError, ValueError):
        return None
    if dset.dtype.kind not in "iufb":
        return None
    return value.item() if isinstance(value, np.generic) else value


def _filters(dset: h5py.Dataset) -> tuple[str, ...]:
    names = []
    try:
        plist = dset.id.get_create_plist()
        for i in range(plist.get_nfilters()):
            code, _flags, _vals, name = plist.get_filter(i)
            names.append(name.decode("ascii", "replace") if name else str(code))
    except (OSError, ValueError):
        pass
    return tuple(names)


def _get(f: h5py.File, group: h5py.Group, name: str, where: str) -> Any:
    """``group[name]`` that reports dangling and external links clearly."""
    try:
        link = group.get(name, getlink=True)
    except (KeyError, OSError, RuntimeError) as err:
        raise H5MDFormatError(f.filename, where, f"cannot read link {name!r}: {err}") from None
    if isinstance(link, h5py.ExternalLink):
        raise H5MDFormatError(
            f.filename,
            where,
            f"{name!r} is an external link to {link.filename}:{link.path}; external links "
            "are not followed (they could point anywhere); copy the data into the file",
        )
    try:
        return group[name]
    except (KeyError, OSError, RuntimeError) as err:
        raise H5MDFormatError(
            f.filename, where, f"{name!r} is a dangling or unreadable link ({err})"
        ) from None


def _check_dataset(f: h5py.File, dset: h5py.Dataset, where: str) -> None:
    try:
        if dset.is_virtual:
            raise H5MDFormatError(
                f.filename,
                where,
                "virtual datasets (data mapped from other files) are not read by h5mdx",
            )
    except (OSError, AttributeError):
        pass
    try:
        if dset.external:
            raise H5MDFormatError(
                f.filename,
                where,
                "the dataset stores its raw data in external files, which h5mdx does not read",
            )
    except (OSError, AttributeError):
        pass


# ----------------------------------------------------------------------------- sampling


def _read_small(f: h5py.File, dset: h5py.Dataset, where: str) -> np.ndarray:
    try:
        return np.asarray(dset[()])
    except (OSError, RuntimeError, ValueError, TypeError) as err:
        raise H5MDFormatError(f.filename, where, f"cannot read {dset.name}: {err}") from None


def _sampling(f: h5py.File, grp: h5py.Group, n_frames: int, where: str) -> Sampling:
    if "step" not in grp:
        raise H5MDFormatError(
            f.filename,
            where,
            "time-dependent element has a 'value' dataset but no 'step' "
            "(H5MD requires 'step' next to 'value')",
        )
    step_ds = _get(f, grp, "step", where)
    if not isinstance(step_ds, h5py.Dataset):
        raise H5MDFormatError(f.filename, f"{where}/step", "'step' must be a dataset")
    time_ds = _get(f, grp, "time", where) if "time" in grp else None
    if time_ds is not None and not isinstance(time_ds, h5py.Dataset):
        raise H5MDFormatError(f.filename, f"{where}/time", "'time' must be a dataset")
    key = (_addr(step_ds), _addr(time_ds) if time_ds is not None else None)
    time_unit = _attr(time_ds, "unit") if time_ds is not None else None

    if step_ds.shape == ():
        # fixed interval: s_i = offset + i * step
        if n_frames > MAX_FRAMES:
            raise H5MDFormatError(
                f.filename, where, f"declares {n_frames} frames, more than h5mdx accepts"
            )
        interval = _read_small(f, step_ds, f"{where}/step")
        offset = _attr(step_ds, "offset", 0) or 0
        if np.asarray(interval).dtype.kind not in "iu":
            raise H5MDFormatError(f.filename, f"{where}/step", "'step' must be an integer")
        step = int(offset) + int(interval) * np.arange(n_frames, dtype=np.int64)
        time = None
        if time_ds is not None:
            if time_ds.shape != ():
                raise H5MDFormatError(
                    f.filename,
                    f"{where}/time",
                    f"'step' is a fixed interval (scalar) but 'time' has shape {time_ds.shape}",
                )
            t_int = float(_read_small(f, time_ds, f"{where}/time"))
            t_off = float(_attr(time_ds, "offset", 0.0) or 0.0)
            time = t_off + t_int * np.arange(n_frames, dtype=np.float64)
        return Sampling("fixed", step, time, time_unit, key)

    if step_ds.ndim != 1 or step_ds.shape[0] != n_frames:
        raise H5MDFormatError(
            f.filename,
            f"{where}/step",
            f"'step' has shape {step_ds.shape} but 'value' has {n_frames} frames",
        )
    if step_ds.dtype.kind not in "iu":
        raise H5MDFormatError(
            f.filename, f"{where}/step", f"'step' must be integer, not {step_ds.dtype}"
        )
    step = _read_small(f, step_ds, f"{where}/step").astype(np.int64, copy=False)
    time = None
    if time_ds is not None:
        if time_ds.ndim != 1 or time_ds.shape[0] != n_frames:
            raise H5MDFormatError(
                f.filename,
                f"{where}/time",
                f"'time' has shape {time_ds.shape} but 'value' has {n_frames} frames",
            )
        if time_ds.dtype.kind not in "iuf":
            raise H5MDFormatError(
                f.filename, f"{where}/time", f"'time' must be numeric, not {time_ds.dtype}"
            )
        time = _read_small(f, time_ds, f"{where}/time").astype(np.float64, copy=False)
    return Sampling("explicit", step, time, time_unit, key)


# ----------------------------------------------------------------------------- elements


def _dataset_info(
    f: h5py.File,
    name: str,
    path: str,
    dset: h5py.Dataset,
    *,
    time_dependent: bool,
    sampling: Sampling | None,
    unit: str | None,
) -> ElementInfo:
    _check_dataset(f, dset, dset.name)
    try:
        dtype = dset.dtype
        shape = tuple(int(s) for s in dset.shape) if dset.shape is not None else ()
        chunks = dset.chunks
        compression = dset.compression
        compression_opts = dset.compression_opts
    except (OSError, TypeError, ValueError) as err:
        raise H5MDFormatError(f.filename, path, f"cannot read dataset metadata: {err}") from None
    try:
        storage = int(dset.id.get_storage_size())
    except (OSError, ValueError):
        storage = 0
    return ElementInfo(
        name=name,
        path=path,
        value_path=dset.name,
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


def _element(f: h5py.File, name: str, obj: h5py.HLObject, path: str) -> ElementInfo:
    """Describe the element ``obj`` found at H5MD path ``path``."""
    if isinstance(obj, h5py.Dataset):
        return _dataset_info(
            f, name, path, obj, time_dependent=False, sampling=None, unit=_attr(obj, "unit")
        )
    if not isinstance(obj, h5py.Group):
        raise H5MDFormatError(f.filename, path, "is neither a group nor a dataset")
    if "value" not in obj:
        raise H5MDFormatError(
            f.filename,
            path,
            "element has no 'value' dataset (a time-dependent H5MD element is a group "
            "with 'value' and 'step')",
        )
    value = _get(f, obj, "value", path)
    if not isinstance(value, h5py.Dataset):
        raise H5MDFormatError(f.filename, f"{path}/value", "'value' must be a dataset")
    if value.shape is None or len(value.shape) == 0:
        raise H5MDFormatError(
            f.filename,
            f"{path}/value",
            "'value' of a time-dependent element must have a time axis, but it is a scalar",
        )
    sampling = _sampling(f, obj, int(value.shape[0]), path)
    unit = _attr(value, "unit")
    return _dataset_info(
        f, name, path, value, time_dependent=True, sampling=sampling, unit=unit
    )


def _box(f: h5py.File, grp: h5py.Group, path: str) -> BoxInfo:
    dimension = _attr(grp, "dimension")
    boundary = _attr(grp, "boundary")
    # some writers (ZnH5MD) also store them as datasets
    if dimension is None and isinstance(grp.get("dimension"), h5py.Dataset):
        dimension = _decode(grp["dimension"][()])
    if boundary is None and isinstance(grp.get("boundary"), h5py.Dataset):
        boundary = _decode(grp["boundary"][()])
    if dimension is None:
        raise H5MDFormatError(f.filename, path, "box has no 'dimension' attribute")
    try:
        dimension = int(dimension)
    except (TypeError, ValueError):
        raise H5MDFormatError(
            f.filename, path, f"box 'dimension' must be an integer, not {dimension!r}"
        ) from None
    if not 1 <= dimension <= 3:
        raise H5MDFormatError(f.filename, path, f"box 'dimension' is {dimension}; must be 1-3")
    if boundary is None:
        boundary = ["none"] * dimension
    if isinstance(boundary, str):
        boundary = [boundary] * dimension
    edges = None
    if "edges" in grp:
        edges = _element(f, "box_edges", _get(f, grp, "edges", path), f"{path}/edges")
        tail = edges.shape[1:] if edges.time_dependent else edges.shape
        if tail not in ((dimension,), (dimension, dimension)):
            raise H5MDFormatError(
                f.filename,
                f"{path}/edges",
                f"box edges have shape {edges.shape}; expected (…, {dimension}) or "
                f"(…, {dimension}, {dimension}) for a {dimension}-dimensional box",
            )
    return BoxInfo(
        path=path, dimension=dimension, boundary=tuple(str(b) for b in boundary), edges=edges
    )


def _particles_group(f: h5py.File, name: str, grp: h5py.Group) -> ParticlesGroupInfo:
    path = grp.name or f"/particles/{name}"
    elements: dict[str, ElementInfo] = {}
    box = None
    for child in grp:
        obj = _get(f, grp, child, path)
        if child == "box":
            if isinstance(obj, h5py.Group):
                box = _box(f, obj, f"{path}/box")
            continue
        elements[child] = _element(f, child, obj, f"{path}/{child}")
    return ParticlesGroupInfo(name=name, path=path, elements=elements, box=box)


def _observables(
    f: h5py.File, grp: h5py.Group, prefix: str, out: dict[str, ElementInfo], groups: list[str]
) -> None:
    for child in grp:
        obj = _get(f, grp, child, grp.name)
        key = f"{prefix}{child}"
        path = f"/observables/{key}"
        if isinstance(obj, h5py.Group) and "value" not in obj:
            groups.append(key)
            _observables(f, obj, f"{key}/", out, groups)
        else:
            out[key] = _element(f, child, obj, path)


def _parameters(f: h5py.File) -> dict[str, Any]:
    params: dict[str, Any] = {}
    grp = f.get("parameters")
    if not isinstance(grp, h5py.Group):
        return params

    def visit(name: str, obj: h5py.HLObject) -> None:
        if isinstance(obj, h5py.Dataset):
            params[name] = {"shape": obj.shape, "dtype": str(obj.dtype), "path": obj.name}

    grp.visititems(visit)
    return params


def scan(source: str | os.PathLike[str] | h5py.File) -> FileInfo:
    """Describe an H5MD file without reading element data.

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file, or an open :class:`h5py.File`.

    Returns
    -------
    FileInfo

    Raises
    ------
    H5MDFormatError
        If the file is not H5MD or an element in it is malformed.
    """
    if isinstance(source, h5py.File):
        return _scan(source)
    with open_h5md(source) as f:
        return _scan(f)


def _version(f: h5py.File) -> tuple[int, int]:
    h5md = f.get("h5md")
    if not isinstance(h5md, h5py.Group):
        raise H5MDFormatError(
            f.filename,
            "/h5md",
            "an HDF5 file but not an H5MD file: there is no /h5md group "
            "(open generic HDF5/netCDF files with engine='h5netcdf')",
        )
    raw = _attr(h5md, "version")
    if raw is None:
        raise H5MDFormatError(f.filename, "/h5md", "the /h5md group has no 'version' attribute")
    try:
        major, minor = (int(v) for v in list(np.ravel(raw))[:2])
    except (TypeError, ValueError):
        raise H5MDFormatError(
            f.filename, "/h5md", f"cannot understand H5MD version {raw!r}"
        ) from None
    if (major, minor) not in SUPPORTED_VERSIONS:
        supported = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_VERSIONS)
        raise H5MDFormatError(
            f.filename,
            "/h5md",
            f"H5MD version {major}.{minor} is not supported (h5mdx reads {supported})",
        )
    return major, minor


def _scan(f: h5py.File) -> FileInfo:
    version = _version(f)
    author = {k: str(_attr(f["h5md"]["author"], k)) for k in ("name", "email")
              if "author" in f["h5md"] and _attr(f["h5md"]["author"], k) is not None}
    creator = {k: str(_attr(f["h5md"]["creator"], k)) for k in ("name", "version")
               if "creator" in f["h5md"] and _attr(f["h5md"]["creator"], k) is not None}
    particles: dict[str, ParticlesGroupInfo] = {}
    if "particles" in f:
        pgrp = _get(f, f, "particles", "/")
        if not isinstance(pgrp, h5py.Group):
            raise H5MDFormatError(f.filename, "/particles", "must be a group")
        for name in pgrp:
            obj = _get(f, pgrp, name, "/particles")
            if not isinstance(obj, h5py.Group):
                raise H5MDFormatError(
                    f.filename, f"/particles/{name}", "a particles group must be a group"
                )
            particles[name] = _particles_group(f, name, obj)
    observables: dict[str, ElementInfo] = {}
    obs_groups: list[str] = []
    if "observables" in f:
        ogrp = _get(f, f, "observables", "/")
        if isinstance(ogrp, h5py.Group):
            _observables(f, ogrp, "", observables, obs_groups)
    try:
        size = os.path.getsize(f.filename)
    except OSError:
        size = 0
    return FileInfo(
        filename=f.filename,
        version=version,
        author=author,
        creator=creator,
        particles=particles,
        observables=observables,
        observable_groups=tuple(obs_groups),
        parameters=_parameters(f),
        file_size=size,
    )
