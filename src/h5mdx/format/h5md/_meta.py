"""The ``/h5md`` group: version, author, creator, program and modules.

Also the topologies modules carry (GROMACS' molecule types, VMD's structure), and the
message for HDF5 files of other formats (MDTraj's, MDANSE's).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.gromacs_topology import MODULE as GROMACS_TOPOLOGY
from h5mdx.format.gromacs_topology import ModuleTopology, read_module
from h5mdx.format.h5md._sampling import _read_small
from h5mdx.format.h5md._storage import (
    ATTRIBUTE_ERRORS,
    _attr,
    _check_dataset,
    _Ctx,
    _get,
    _has,
    attribute_problem,
    dataset_problem,
)
from h5mdx.format.schema import SUPPORTED_VERSIONS
from h5mdx.format.text import decode as _decode
from h5mdx.format.vmd_structure import STRUCTURE_PATH, VMDStructure, read_structure


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


#: A version written as text: ``"1.0"``, ``"1 1"``, ``"1,1"``
_VERSION_TEXT = re.compile(r"^\s*v?(\d+)\s*[.,\s]\s*(\d+)\s*$")


def _version_dataset(c: _Ctx, h5md: h5py.Group) -> Any:
    """The H5MD version of a file that keeps it as a dataset ``/h5md/version`` (H5MD's
    drafts before 1.0: "a dimension [2] integer dataset"), noted as a minor departure;
    None where there is no such small dataset."""
    try:
        obj = _get(c, h5md, "version", "/h5md") if _has(h5md, "version") else None
        if not isinstance(obj, h5py.Dataset) or (obj.size or 0) > 4:
            return None
        raw = _decode(_read_small(c, obj, "/h5md/version"))
    except H5MDFormatError:
        return None
    c.note("/h5md", "the H5MD version is a dataset /h5md/version (H5MD's drafts before "
           "1.0), not an attribute", f"{raw!r} read from the dataset", minor=True)
    return raw


def _version(c: _Ctx, h5md: h5py.Group | None) -> tuple[int, int]:
    if h5md is None:
        return 1, 1
    raw = _attr(h5md, "version")
    if raw is None and _unreadable(c, h5md, "version", "/h5md", "read as H5MD 1.1"):
        return 1, 1
    if raw is None:
        raw = _version_dataset(c, h5md)
    if raw is None:
        c.note("/h5md", "the /h5md group has no 'version' attribute", "read as H5MD 1.1")
        return 1, 1
    text = _VERSION_TEXT.match(raw) if isinstance(raw, str) else None
    if text is not None:  # "1.0": the version the writer meant, as text
        c.note("/h5md", f"the H5MD version is the string {raw!r}, not two integers (H5MD: "
               "[major, minor])", f"read as H5MD {int(text[1])}.{int(text[2])}", minor=True)
        raw = [int(text[1]), int(text[2])]
    try:
        major, minor = (int(v) for v in list(np.ravel(raw))[:2])
    except (TypeError, ValueError, OverflowError):
        c.note("/h5md", f"cannot understand H5MD version {raw!r}", "read as H5MD 1.1")
        return 1, 1
    values = list(np.ravel(raw))
    if text is None and _array_typed(h5md, "version"):
        c.note("/h5md", "the H5MD version is one value of an array type in a "
               "scalar dataspace (VOTCA writes it so), not a dataspace of 2 integers",
               f"read as H5MD {major}.{minor}", minor=True)
    elif text is None and (len(values) != 2
                           or not all(isinstance(v, (int, np.integer)) for v in values)):
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


def _unreadable(c: _Ctx, obj: h5py.HLObject, name: str, where: str, assumed: str) -> bool:
    """Whether ``obj`` has the attribute ``name`` but h5py cannot read it (an opaque
    type): noted as such, ``assumed``; it was said to be missing."""
    try:
        if name not in obj.attrs:
            return False
        obj.attrs[name]
    except ATTRIBUTE_ERRORS as err:
        problem = attribute_problem(where, name, err)
        c.note(where, problem.message, assumed, departure=problem.departure)
        return True
    return False


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
        missing = [k for k in _REQUIRED_META[name] if k not in found
                   and not _unreadable(c, grp, k, where, "not recorded")]
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
    unreadable, or of what no property is (object references, sequences of numbers:
    their text would stand for each atom's name)."""
    path = f"{where}/{name}"
    dset = _get(c, group, name, where)
    if not isinstance(dset, h5py.Dataset):
        raise H5MDFormatError(c.filename, path, "must be a dataset")
    _check_dataset(c, dset, path)
    problem = dataset_problem(dset)
    if problem is not None:
        raise H5MDFormatError(c.filename, path, problem)
    return _read_small(c, dset, path)


#: The attributes H5MD requires of ``/h5md/author`` and ``/h5md/creator``.
_REQUIRED_META = {"author": ("name",), "creator": ("name", "version")}
