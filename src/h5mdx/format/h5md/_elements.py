"""One element (an H5MD element group, or a plain dataset) as an :class:`ElementInfo`.

Its dtype, shape, chunks, filters, unit and sampling; H5MD-NOMAD's ensemble averages as
functions of their axis; the ``step`` and ``time`` a group's elements share.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.h5md._model import ElementInfo, Problem, Sampling
from h5mdx.format.h5md._sampling import _NUMBERED, _beside_value, _read_small, _sampling
from h5mdx.format.h5md._storage import (
    ATTRIBUTE_ERRORS,
    MAX_SMALL_READ,
    _check_dataset,
    _check_declared,
    _check_filters,
    _check_written,
    _compression,
    _Ctx,
    _fileno,
    _fill_value,
    _filters,
    _frames_stored,
    _get,
    _has,
    _no_attrs,
    _refresh,
    _storage_size,
    _unit_attr,
    attribute_problem,
)
from h5mdx.format.schema import KNOWN_PARTICLE_ELEMENTS, PER_PARTICLE_SCALARS
from h5mdx.format.text import decode as _decode


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
        attrs={**(_other_attrs(group, None, c) if group is not None else {}),
               **_other_attrs(dset, dtype, c)},
    )


#: Attributes that say how a dataset is stored, not what it holds (HDF5 dimension
#: scales, netCDF-4's bookkeeping), or that h5mdx serves otherwise (``unit``).
_STORAGE_ATTRS = frozenset({"unit", "unit_factor", "DIMENSION_LIST", "REFERENCE_LIST",
                            "CLASS", "NAME", "_Netcdf4Dimid", "_Netcdf4Coordinates",
                            "_FillValue"})


def _other_attrs(dset: h5py.HLObject, dtype: np.dtype | None, c: _Ctx) -> dict[str, Any]:
    """The attributes of an element's ``value`` beyond its unit, as plain values (the
    names of an enum dtype as CF's ``flag_values``/``flag_meanings``); those that cannot
    be read are left out, noted (:func:`attribute_problem`)."""
    out: dict[str, Any] = {}
    try:
        names = [] if _no_attrs(dset) else list(dset.attrs)
    except ATTRIBUTE_ERRORS as err:
        _note_attribute(c, attribute_problem(str(dset.name), None, err))
        names = []
    for name in names:
        if name in _STORAGE_ATTRS:
            continue
        try:
            value = dset.attrs[name]
        except ATTRIBUTE_ERRORS as err:
            _note_attribute(c, attribute_problem(str(dset.name), name, err))
            continue
        if isinstance(value, h5py.Empty):  # no value (null dataspace): none to give
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


def _note_attribute(c: _Ctx, problem: Problem) -> None:
    """Note ``problem`` (an attribute that cannot be read) with the scan's."""
    c.note(problem.path, problem.message, problem.assumed, departure=problem.departure)


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
    _note_beside(c, obj, path)
    unit = _unit_attr(c, value, f"{path}/value")
    if unit is None and "unit" in obj.attrs:
        unit = _unit_attr(c, obj, path)
        if unit is not None:
            c.note(path, "the 'unit' attribute is on the element group, not on its 'value'",
                   f"unit {unit!r} read from the group")
    return _dataset_info(c, name, path, value, time_dependent=True, sampling=sampling, unit=unit,
                         link_path=f"{path}/value", group=obj)


def _note_beside(c: _Ctx, grp: h5py.Group, path: str) -> None:
    """Note the datasets beside the ``value``, ``step`` and ``time`` of time-dependent
    element ``grp`` (H5MD's time-averaged data keeps its ``error`` and ``count`` there):
    left out (they were, in silence). H5MD does not forbid them: no departure. An element
    without ``step`` names them in the note of its missing step."""
    names = _beside_value(grp) if _has(grp, "step") else []
    if names:
        c.note(path, f"datasets beside 'value', 'step' and 'time': "
               f"{', '.join(repr(n) for n in names)} (H5MD's time-averaged data keeps its "
               "'error' and 'count' so)", "left out", departure=False)


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
