"""A particles group: its elements and box, and what is checked across them.

The same particles in every element, the order of a time-dependent ``id`` (ESPResSo's
cell order, ESPResSo++'s empty slots), vectors of the box's dimension, and plain datasets
sampled by a ``step`` beside them (Sarkas).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.h5md._box import _box
from h5mdx.format.h5md._elements import (
    _SAMPLING_NAMES,
    _as_time_series,
    _element,
    _holds_element_groups,
    _plain_element,
    _shared_sampling,
    _trim_live,
)
from h5mdx.format.h5md._model import BoxInfo, ElementInfo, ParticlesGroupInfo, Sampling
from h5mdx.format.h5md._sampling import _NO_STEP, _sampling, _sampling_dataset, _times
from h5mdx.format.h5md._storage import _addr, _Ctx, _get, _has, _unit_attr
from h5mdx.format.schema import ATOM_DIM, BOX_VECTOR_DIM, SPATIAL_DIM, STEP_COORD, TIME_DIM


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
    """Note vector elements whose frames are not (particles, dimension) of 1-3, or whose
    values are not numbers (text, read by the scan as any element is, was served without
    a word and failed in the first analysis): served as stored, but an analysis of
    positions cannot use them (rmsd refuses them later)."""
    for name in (*_VECTORS, "mass", "charge"):
        el = elements.get(name)
        if el is not None and not el.in_subgroup and el.dtype.kind not in "iuf":
            c.note(el.path, f"{name!r} holds {'text' if el.dtype.kind in 'SUO' else 'values'}"
                   f" of dtype {el.dtype}, not numbers", "served as stored (analyses that "
                   "need its numbers cannot use it)", departure=False)
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
