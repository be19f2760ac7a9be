"""The box of a particles group: dimension, boundary and edges.

Edges as a vector, a matrix, LAMMPS' bounds ``[lo, hi]`` (H5MD_Analysis), one box without
an axis of frames (MDMC) or an attribute; and the members other writers add beside them
(HALMD's ``offset``, znh5md's ``pbc``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.h5md._elements import _element
from h5mdx.format.h5md._model import BoxInfo, ElementInfo
from h5mdx.format.h5md._sampling import _read_small
from h5mdx.format.h5md._storage import (
    _attr,
    _Ctx,
    _get,
    _has,
    _never_written,
    _no_attrs,
    _unit_attr,
)
from h5mdx.format.text import decode as _decode
from h5mdx.format.text import unit_text


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
    if edges.dtype.kind not in "iufc":  # text, bools, references: served, they failed later
        c.note(f"{path}/edges", f"box edges hold values of dtype {edges.dtype}, not "
               "numbers (H5MD: Float or Integer)", "left out")
        return None, None
    real = edges.dtype.kind in "iuf"  # others (complex) are not cast to probe their form
    if dimension == 3 and tail in ((3, 2), (1, 3, 2)) and real:
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
    if tail == (dimension, dimension) and real and not _valid_matrix(c, grp, edges, path):
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
        tail = tuple(int(n) for n in edges.shape[1:])
        lower = replace(edges, name="box_offset", path=f"{path}/offset", shape=shape,
                        dtype=dtype, chunks=chunks, bounds="lower", stored_tail=tail)
        return replace(edges, shape=shape, dtype=dtype, chunks=chunks, bounds="extent",
                       stored_tail=tail), lower
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
