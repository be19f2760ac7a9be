"""The scan: a whole file walked into a :class:`FileInfo`.

:func:`scan` walks ``/h5md``, ``/particles`` (also flat or pre-1.0 ``/trajectory``
layouts), ``/observables``, ``/connectivity`` and ``/parameters``, and names the root
groups H5MD does not define; :func:`objects_below`, :func:`scan_free_form` and
:func:`free_form` walk one part. Failures h5py raises on structures no check anticipated
become one :class:`~h5mdx.errors.H5MDFormatError` (in :func:`free_form`, a group that
looks like an element and is read as datasets).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from typing import Any

import h5py

from h5mdx.errors import H5MDError, H5MDFormatError
from h5mdx.format.h5md._elements import _element
from h5mdx.format.h5md._meta import (
    _h5md_group,
    _meta,
    _module_topology,
    _modules,
    _program,
    _version,
    _vmd_structure,
)
from h5mdx.format.h5md._model import (
    ElementInfo,
    FileInfo,
    FreeFormInfo,
    ParticlesGroupInfo,
    Problem,
)
from h5mdx.format.h5md._observables import _H5MD_ROOTS, _observables
from h5mdx.format.h5md._opening import open_h5md
from h5mdx.format.h5md._particles import _particles_group
from h5mdx.format.h5md._storage import (
    _check_dataset,
    _check_declared,
    _Ctx,
    _get,
    _has,
    _link_type,
    dataset_problem,
    object_address,
)


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


def root_links(f: h5py.File) -> dict[str, str]:
    """The external and dangling soft links at the root of ``f`` beside the groups H5MD
    defines, by name, each as what it is (``"a dangling soft link to /gone"``): no group
    is served through them (:attr:`FileInfo.other_groups` holds hard links alone), and
    what they point to is not in the file (a soft link to a group of it is served
    under that group's own name)."""
    out: dict[str, str] = {}
    for name, link in _links_of(f, skip=_H5MD_ROOTS):
        if isinstance(link, h5py.ExternalLink):
            out[name] = _link_text(link)
            continue
        try:
            dangling = f.get(name) is None
        except (OSError, KeyError, RuntimeError, TypeError, ValueError):
            dangling = True
        if dangling:
            out[name] = f"a dangling {_link_text(link).removeprefix('a ')}"
    return out


def _links_of(grp: h5py.Group, skip: Collection[str] = ()
              ) -> Iterator[tuple[str, h5py.SoftLink | h5py.ExternalLink]]:
    """``(name, link)`` of the soft and external links ``grp`` holds, but for the names
    ``skip``; names or links that cannot be read are passed over."""
    try:
        names = [n for n in grp if n not in skip]
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return
    for name in names:
        try:
            link = grp.get(name, getlink=True)
        except (OSError, KeyError, RuntimeError, TypeError, ValueError):
            continue
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            yield name, link


def _link_text(link: h5py.SoftLink | h5py.ExternalLink) -> str:
    """A soft or external link in words: ``a soft link to /x``, ``an external link to
    other.h5:/x``."""
    if isinstance(link, h5py.SoftLink):
        return f"a soft link to {link.path}"
    return f"an external link to {link.filename}:{link.path}"


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


#: What is assumed of a group of a free-form root that looks like an element but cannot
#: be read as one: no departure from H5MD (which does not define the group), so
#: ``strict=True`` does not refuse the file for it (:class:`Problem`, its ``departure``).
NOT_AN_ELEMENT = "its datasets served as they are"


def free_form(source: str | os.PathLike[str] | h5py.File, root: str, *,
              allow_external: bool = False, info: FileInfo | None = None) -> FreeFormInfo:
    """What a root group H5MD does not define holds: its groups, elements and datasets.

    H5MD leaves such groups free-form, and writers keep time series there in H5MD's
    element layout: RMPCDMD's ``/fields`` (fortran_h5md's ``value`` with a fixed-interval
    ``step`` and ``time``). A group below ``/<root>`` holding a ``value`` dataset and a
    ``step`` or a ``time``, and nothing else, is described as the element it is (one
    holding other datasets or groups keeps them all, served as they are). One walk of
    the group finds all three.

    Parameters
    ----------
    source : str, path-like or h5py.File
        The file.
    root : str
        The root group's name (an entry of :attr:`FileInfo.other_groups`).
    allow_external : bool, default False
        As for :func:`scan`.
    info : FileInfo, optional
        The file's :func:`scan`: its H5MD version and creator decide the rules its
        elements are read by (H5MD 1.0's; ESPResSo's steps). Without it, H5MD 1.1's.

    Returns
    -------
    FreeFormInfo
        An element that cannot be described is not among ``elements``: its datasets are
        among ``datasets``, with a problem that is no departure
        (:class:`Problem`, its ``departure``).

    Examples
    --------
    >>> import os, tempfile
    >>> import h5py, numpy as np
    >>> name = os.path.join(tempfile.mkdtemp(), "fields.h5")
    >>> with h5py.File(name, "w") as f:
    ...     f.create_group("h5md").attrs["version"] = [1, 1]
    ...     _ = f.create_dataset("observables/e/value", data=np.zeros(3))
    ...     _ = f.create_dataset("fields/rho/value", data=np.zeros((3, 8)))
    ...     _ = f.create_dataset("fields/rho/step", data=10)
    ...     _ = f.create_dataset("fields/grid/x", data=np.arange(8.0))
    >>> found = free_form(name, "fields")
    >>> found.groups, list(found.elements), list(found.datasets)
    (('', 'grid'), ['rho'], ['grid/x'])
    >>> found.elements["rho"].shape
    (3, 8)
    """
    if not isinstance(source, h5py.File):
        with open_h5md(source) as f:
            return free_form(f, root, allow_external=allow_external, info=info)
    c = _Ctx(source, allow_external=allow_external, live=_live(source))
    if info is not None:
        c.version, c.creator = info.version, str(info.creator.get("name") or "")
    elements: dict[str, ElementInfo] = {}
    try:
        grp = _get(c, source, root, "/") if _has(source, root) else None
    except H5MDFormatError as err:
        c.left_out(err, f"/{root}")
        grp = None
    if not isinstance(grp, h5py.Group):
        return FreeFormInfo(root, (), problems=tuple(c.problems))
    groups, datasets = _below(grp)
    for name, obj in groups:
        if _laid_out_as_element(obj) and not _within(name, elements):
            path = f"/{root}/{name}"
            try:
                elements[name] = _element(c, name.rpartition("/")[2], obj, path)
            except H5MDFormatError as err:
                c.note(err.h5path or path, err.problem, NOT_AN_ELEMENT, departure=False)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as err:
                c.note(path, f"HDF5 cannot read it as an element ({type(err).__name__}: "
                       f"{err})", NOT_AN_ELEMENT, departure=False)
    plain = _plain_datasets(c, grp, [n for n in datasets if not _within(n, elements)])
    served = [("", grp), *((n, g) for n, g in groups if not _within(n, elements))]
    for _, g in served:
        _note_links(c, g, root)
    return FreeFormInfo(root, tuple(n for n, _ in served), elements, plain, tuple(c.problems))


def _below(grp: h5py.Group) -> tuple[list[tuple[str, h5py.Group]], list[str]]:
    """The groups below ``grp`` (path below it, group) and the paths of its datasets.

    Datasets by name only: a dataset held open while an element's is refreshed (a live
    file: HDF5's H5Drefresh) reads the chunks of another afterwards (steps [0, 1, 2, 3]
    read [0, 1, 0, 1]).
    """
    groups: list[tuple[str, h5py.Group]] = []
    datasets: list[str] = []
    for name, obj in groups_below(grp):
        if obj is None:
            datasets.append(name)
        else:
            groups.append((name, obj))
    return groups, datasets


#: Most names :func:`groups_below` gives: groups hard-linked under two names in a chain
#: of n levels have 2**n paths.
MAX_NAMES = 4_000


def groups_below(grp: h5py.Group) -> list[tuple[str, h5py.Group | None]]:
    """What ``grp`` holds by hard links, at every depth: (path below it, the group), or
    (path, None) for a dataset; a group before what it holds, level by level.

    Every name of an object hard-linked twice is given (a dataset of two groups, a group
    of two names): HDF5's visit of objects gave one of them, the others left out in
    silence. Soft and external links are not followed, nor a hard link back
    to a group on the way to it (a cycle).

    Parameters
    ----------
    grp : h5py.Group
        The group walked (``/parameters``, or a root group H5MD does not define).

    Returns
    -------
    list of (str, h5py.Group or None)
        Each group and dataset below ``grp``, by its path below it.
    """
    out: list[tuple[str, h5py.Group | None]] = []
    walked: set[tuple[int, ...]] = set()
    # level by level: where the names run out (groups named over and over, links in a
    # chain: 2**n paths), the shallow ones are given
    todo = collections.deque([(grp, "", frozenset({object_address(grp)}))])
    while todo and len(out) < MAX_NAMES:
        group, prefix, above = todo.popleft()
        for name, obj, addr in _hard_members(group):
            if len(out) >= MAX_NAMES:
                break
            if obj is None:
                out.append((prefix + name, None))
            elif addr not in above:
                out.append((prefix + name, obj))
                if addr not in walked or len(out) < MAX_NAMES // 2:  # past half the names,
                    walked.add(addr)  # a group's second name is served, not walked again
                    todo.append((obj, f"{prefix}{name}/", above | {addr}))
    return out


def _hard_members(group: h5py.Group) -> Iterator[tuple[str, h5py.Group | None, Any]]:
    """``(name, group, its address)`` of the groups ``group`` holds by hard links, and
    ``(name, None, None)`` of its datasets (by name, not opened); soft and external links
    are noted where the group is served."""
    try:
        names = list(group)
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return
    for name in names:
        if _link_type(group, name) != h5py.h5l.TYPE_HARD:
            continue
        try:
            kind = group.get(name, getclass=True)
            if kind is h5py.Dataset:
                yield name, None, None
                continue
            obj = group.get(name) if kind is h5py.Group else None
            addr = object_address(obj) if obj is not None else None
        except (OSError, KeyError, RuntimeError, TypeError, ValueError):
            continue
        if obj is not None and addr is not None:
            yield name, obj, addr


def _plain_datasets(c: _Ctx, grp: h5py.Group, names: list[str]) -> dict[str, Any]:
    """The datasets ``names`` below ``grp`` that can be served as they are, by name, with
    their shape, dtype and path; the others noted (those H5MD leaves free: no departure)."""
    out: dict[str, Any] = {}
    for name in names:
        path = f"{grp.name}/{name}"
        try:
            obj = _get(c, grp, name, path)
            _check_dataset(c, obj, path)
            _check_declared(c, obj, path)
            problem = dataset_problem(obj)
        except H5MDFormatError as err:
            c.left_out(err, path)
            continue
        if problem is not None:
            c.note(path, problem, "left out", departure=False)
            continue
        out[name] = {"shape": obj.shape, "dtype": str(obj.dtype), "path": path}
    return out


def _note_links(c: _Ctx, grp: h5py.Group, root: str) -> None:
    """Note the soft and external links of a group of ``/<root>``: not followed (a walk of
    the group visits each object once, by its hard links)."""
    for name, link in _links_of(grp):
        c.note(f"{grp.name}/{name}", f"{_link_text(link)}, which h5mdx does not follow in "
               f"/{root}", "left out", departure=False)


def _within(name: str, elements: Mapping[str, Any]) -> bool:
    """Whether ``name`` (a path below a free-form root) is an element of ``elements`` or
    lies inside one."""
    parts = name.split("/")
    return any("/".join(parts[:k]) in elements for k in range(1, len(parts) + 1))


#: What an element group holds (H5MD 1.1, section "Time-dependent data").
_ELEMENT_MEMBERS = frozenset({"value", "step", "time"})


def _laid_out_as_element(grp: h5py.Group) -> bool:
    """Whether ``grp`` holds a ``value`` with a ``step`` or a ``time``, and nothing else
    (a free-form group holding more is not read as an element: its other datasets and
    groups would be lost); one listing of its links."""
    try:
        members = set(grp)
    except (OSError, KeyError, RuntimeError, TypeError, ValueError):
        return False
    return ("value" in members and bool(members & {"step", "time"})
            and members <= _ELEMENT_MEMBERS)


def _live(f: h5py.File) -> bool:
    """Whether ``f`` is opened to read a file a program is still writing (SWMR)."""
    try:
        return bool(f.swmr_mode)
    except (AttributeError, ValueError, OSError):
        return False


def _parameters(c: _Ctx, root: str = "parameters") -> dict[str, Any]:
    """The datasets below ``/<root>`` (``/parameters``, or another free-form group), by
    path below it, with their shape, dtype and path; {} (noted) where ``/<root>`` is a link
    h5mdx does not follow, as an ``/observables`` so is left out."""
    if not _has(c.f, root):
        return {}
    try:
        grp = _get(c, c.f, root, "/")
    except H5MDFormatError as err:
        c.left_out(err, f"/{root}")
        return {}
    if not isinstance(grp, h5py.Group):
        if root == "parameters":
            _not_a_group(c, root, grp)
        return {}
    groups, datasets = _below(grp)
    for g in (grp, *(g for _, g in groups)):  # noted, as an open of the group warns of them
        _note_links(c, g, root)
    return _plain_datasets(c, grp, datasets)


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
    c = _Ctx(f, allow_external=allow_external, live=_live(f))
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
    else:  # it was left out in silence
        _not_a_group(c, root, grp)
    return elements, groups


def _not_a_group(c: _Ctx, root: str, obj: Any) -> None:
    """Note ``/<root>`` (``observables``, ``connectivity``, ``parameters``), which H5MD
    makes a group, found as a dataset (or another object): left out."""
    what = f"a dataset of shape {obj.shape}" if isinstance(obj, h5py.Dataset) else \
        f"a {type(obj).__name__}"
    c.note(f"/{root}", f"{what}, not the group H5MD requires", "left out")


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
    paths = {pg.path for pg in particles.values()}
    for key, el in connectivity.items():
        named = el.attrs.get("particles_group")
        if isinstance(named, str) and (named.startswith("/") or not named):
            # a reference, read as the path it points to (or a path written so): one to
            # no particles group was served without a word
            _check_reference(c, el.path, named, paths)
            continue
        if not isinstance(named, str):
            continue
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


def _check_reference(c: _Ctx, path: str, named: str, groups: set[str]) -> None:
    """Note a connectivity element's ``particles_group`` (the path of its reference,
    ``""`` for a null or dangling one) that is none of the particles groups ``groups``:
    H5MD requires a reference to one; served as stored."""
    if named in groups:
        return
    what = (f"points to {named}, which is no particles group h5mdx reads" if named else
            "is a null or dangling object reference")
    c.note(path, f"'particles_group' {what} (H5MD requires a reference to a particles "
           "group)", "served as stored")


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
