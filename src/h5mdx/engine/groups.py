"""Every group of a file at once: :func:`open_groups`, which
``xr.open_datatree(path, engine="h5md")`` uses.

The particles groups, observables, connectivity, ``/parameters`` and the root groups H5MD
does not define (read as free-form datasets), each a Dataset; dimensions that would not
align with an ancestor's are renamed ``<dim>_<node>``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import h5py
import numpy as np
import xarray as xr
from xarray.backends.locks import HDF5_LOCK
from xarray.core import indexing

from h5mdx.engine.arrays import FieldArray, H5MDArray
from h5mdx.engine.assembly import (
    _STRUCTURE_ERRORS,
    _Builder,
    _drop_coordinates,
    _elements_dataset,
    _file_attrs,
    _observables_dataset,
    _particles_dataset,
    _plain_attrs,
    _Report,
    _set_unlimited_dims,
)
from h5mdx.engine.chunking import DEFAULT_TARGET_MIB
from h5mdx.engine.files import _Closer, _manager, _scan_with
from h5mdx.errors import H5MDFormatError, NoSuchGroupError
from h5mdx.format.h5md import (
    ElementInfo,
    FileInfo,
    ParticlesGroupInfo,
    free_form,
    root_links,
    scaled_unit,
)
from h5mdx.format.text import unit_text


def open_groups(
    filename: str,
    *,
    drop_variables: str | Iterable[str] | None = None,
    topology: Any = None,
    convert_units: bool = False,
    chunk_mib: float = DEFAULT_TARGET_MIB,
    swmr: bool = False,
    allow_external: bool = False,
    strict: bool = False,
    group: str | None = None,
) -> dict[str, xr.Dataset]:
    """Open every group of an H5MD file (every particles group, observables, parameters).

    Where an ancestor's dimension would not align with a descendant's, the
    ancestor's dimension is renamed ``<dim>_<node>`` (e.g. ``time_observables``).
    This is what ``xr.open_datatree(path, engine="h5md")`` uses: the way to open a
    file with several particles groups at once.

    Parameters
    ----------
    filename : str
        The H5MD file.
    drop_variables, topology, convert_units, chunk_mib, swmr, allow_external
        As for ``xr.open_dataset(..., engine="h5md")``.
    strict : bool, default False
        Raise :class:`~h5mdx.errors.H5MDFormatError` on any departure from H5MD
        instead of one :class:`~h5mdx.errors.H5MDConformanceWarning` per problem.
    group : str, optional
        Only the subtree of this group (``"observables"``, ``"particles/solvent"``), with
        ``"/"``: only that is scanned and built (H5MD-NOMAD's ten thousand groups of
        connectivity are not walked for the observables).

    Returns
    -------
    dict of str to xarray.Dataset
        ``{"/": file attrs, "/particles/<g>": ..., "/observables": ...,
        "/observables/<sub>": ..., "/parameters": ...}``.

    Raises
    ------
    ValueError
        Where the file has no group ``group``.
    """
    manager = _manager(filename, swmr)
    lock = HDF5_LOCK
    report = _Report(filename, strict)
    root = "/" + group.strip("/") if group is not None and group.strip("/") else None
    try:
        info = _scan_with(manager, lock, allow_external,
                          deep_connectivity=_connectivity_walked(root), subtree=True)
        report.scanned(info, root)
        b = _Builder(info, manager, convert_units=convert_units, chunk_mib=chunk_mib, lock=lock,
                     report=report, allow_external=allow_external)
        drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        out = _group_datasets(b, info, topology, drop, root)
    except _STRUCTURE_ERRORS as err:
        manager.close()
        raise H5MDFormatError(
            filename, None, f"cannot assemble a DataTree ({type(err).__name__}: {err})"
        ) from None
    except BaseException:
        manager.close()
        raise
    # the parameters (and other free-form variables) named too, as open_dataset drops
    # them: an open_datatree kept them (xarray's engines drop a name in every group)
    out = {path: _drop_coordinates(ds, drop).drop_vars([v for v in drop if v in ds.data_vars])
           for path, ds in out.items()}
    _dealign(out)
    out = _unclashed(out, report)
    report.emit()
    file_attrs = out["/"].attrs
    for path, ds in out.items():
        if path != "/":  # the file's, said once at the root; a group's own of that name kept
            ds.attrs = {k: v for k, v in ds.attrs.items()
                        if k not in file_attrs or not _same_value(v, file_attrs[k])}
    close = _Closer(manager, filename)
    for ds in out.values():
        ds.set_close(close)
        _set_unlimited_dims(ds, b.growable)
    return out


def _unclashed(groups: dict[str, xr.Dataset], report: _Report) -> dict[str, xr.Dataset]:
    """``groups`` with each group named as a variable of its parent (``/observables/time``
    beside the observables' ``time``) served as ``<name>_group``, said once: xarray's
    DataTree refused the whole file with a bare KeyError ("parent observables already
    contains a variable named time")."""
    renames: dict[str, str] = {}  # old path: new path, of each group below a renamed one
    taken = set(groups)
    for path in sorted(groups, key=lambda p: p.count("/")):  # a parent before its groups
        above, _, name = path.rpartition("/")
        above = above or "/"
        parent = renames.get(above, above)
        new = name
        if path != "/" and above in groups:
            while new in groups[above].variables or (
                    new != name and f"{parent.rstrip('/')}/{new}" in taken):
                new += "_group"
            if new != name:
                report.note(path, f"the group's name is that of a variable of {above}",
                            f"served as the node {new!r}", departure=False)
        if parent != above or new != name:
            renames[path] = f"{parent.rstrip('/')}/{new}"
            taken.add(renames[path])
    return {renames.get(path, path): ds for path, ds in groups.items()}


def _same_value(a: Any, b: Any) -> bool:
    """Whether two attribute values are equal (arrays too)."""
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):
        return False


def _particles_fitting(b: _Builder, pg: ParticlesGroupInfo, topology: Any, drop: set[str],
                       misfits: list[Exception]) -> xr.Dataset:
    """The Dataset of ``pg``, with ``topology`` where its atoms are the group's: a file's
    groups differ in atoms (a protein's and its solvent's), and a topology of one of them
    refused the whole tree. One it does not fit opens without it, said once;
    the error goes to ``misfits``."""
    from h5mdx.engine.topology import AtomCountError

    try:
        return _particles_dataset(b, pg, topology=topology, select=None, drop=drop)
    except AtomCountError as err:
        misfits.append(err)
        b.report.note(pg.path, f"has {err.n_atoms} atoms, the topology {err.topology} "
                      f"{err.n_topology}", "opened without the topology", departure=False)
        return _particles_dataset(b, pg, topology=None, select=None, drop=drop)


def _connectivity_walked(root: str | None) -> bool | str:
    """What of ``/connectivity`` an open of the subtree of ``root`` (None: the whole file)
    walks (``scan(deep_connectivity=..., connectivity_subtree=True)``): all of it for the
    whole file or ``/connectivity``; for a group below it, the way to that group and all
    below it (not H5MD-NOMAD's ten thousand other groups); else its groups' names."""
    if root is not None and root.startswith("/connectivity/"):
        return root.removeprefix("/connectivity/")
    return root in (None, "/connectivity")


def _group_datasets(b: _Builder, info: FileInfo, topology: Any, drop: set[str],
                    root: str | None) -> dict[str, xr.Dataset]:
    """The Dataset of every group of :func:`open_groups` (``root``: only those of its
    subtree, and ``"/"``), by path; a ValueError where ``root`` is none of them."""
    makers: dict[str, Callable[[], xr.Dataset]] = {
        "/": lambda: xr.Dataset(attrs=_file_attrs(info))}
    if info.particles:
        makers["/particles"] = xr.Dataset
    misfits: list[Exception] = []  # groups the topology does not fit, opened without it
    for pg in info.particles.values():
        makers[f"/{pg.group}"] = functools.partial(
            _particles_fitting, b, pg, topology, drop, misfits)
    for kind, elements, subs in (("observables", info.observables, info.observable_groups),
                                 ("connectivity", info.connectivity,
                                  info.connectivity_groups)):
        # a subtree of /connectivity is scanned alone: the others' elements are not seen
        if elements or (subs and root is not None and root.startswith("/connectivity/")):
            for sub in ("", *subs):
                makers[f"/{kind}/{sub}".rstrip("/")] = functools.partial(
                    _observables_dataset, b, sub, drop, kind)
    free_roots = ("parameters", *info.other_groups)

    def wanted(path: str) -> bool:
        return root is None or path == "/" or path == root or path.startswith(f"{root}/")

    out = {path: make() for path, make in makers.items() if wanted(path)}
    if misfits and len(misfits) == sum(f"/{pg.group}" in out for pg in info.particles.values()):
        raise misfits[0]  # it fits no group: a wrong topology, not one of a group
    for free in free_roots:  # walked only where root is one or below one
        if root is None or f"{root}/".startswith(f"/{free}/"):
            for sub, params in _free_form_datasets(b, free).items():
                path = f"/{free}" + (f"/{sub}" if sub else "")
                if wanted(path):
                    out[path] = params
    links = _root_links(b, root)
    if root is not None and len(out) == 1:  # "/" alone: no group of that path
        groups = [*(p for p in makers if p != "/"), *_free_form_nodes(b, free_roots)]
        free, _, sub = root.lstrip("/").partition("/")
        hint = (_element_hint(b, free, sub) if free in ("parameters", *info.other_groups)
                else f" ({links[free]}, which h5mdx does not follow)" if free in links
                else _element_of(info, root))
        listing = ", ".join(groups[:_LISTED])
        if len(groups) > _LISTED:
            listing += f" and {len(groups) - _LISTED} more (h5mdx info lists them)"
        raise NoSuchGroupError(f"{info.filename} has no group {root.lstrip('/')!r}{hint}; "
                               f"its groups: {listing or 'none'}")
    return out


def _root_links(b: _Builder, root: str | None) -> dict[str, str]:
    """The soft and external links at the file's root beside H5MD's groups
    (:func:`~h5mdx.format.h5md.root_links`), noted where the whole file is opened (an
    external one only without ``allow_external``, where it is often the way soft links
    take to the other file's groups): they were left out of the tree without a word."""
    with b.lock:
        links = root_links(b.manager.acquire(needs_lock=False))
    if root is None:
        for name, what in links.items():
            if b.allow_external and what.startswith("an external"):
                continue  # opted in: a way to the other file's groups (a soft link's)
            b.report.note(f"/{name}", f"{what}, which h5mdx does not follow at the "
                          "file's root", "left out", departure=False)
    return links


#: The groups the error of a group not found lists at most (the rest counted).
_LISTED = 30


def _free_form_nodes(b: _Builder, roots: Iterable[str]) -> list[str]:
    """The paths of the nodes the free-form roots ``roots`` give a DataTree: each of their
    groups that is no element (those of ``/parameters`` were left out of the listing of a
    group not found)."""
    out: list[str] = []
    with b.lock:
        f = b.manager.acquire(needs_lock=False)
        for root in roots:
            try:
                grp = f.get(root)
            except (OSError, KeyError, RuntimeError, TypeError, ValueError):
                continue
            if not isinstance(grp, h5py.Group) or _elsewhere(grp, f, b.allow_external):
                continue
            found = free_form(f, root, allow_external=b.allow_external, info=b.info)
            out.extend(f"/{root}/{sub}".rstrip("/") for sub in found.groups)
    return out


#: Parameters larger than this (bytes) are opened lazily rather than read at open time.
_PARAMETER_READ_BYTES = 2**20


def _free_form_datasets(b: _Builder, root: str = "parameters",
                        only: str | None = None) -> dict[str, xr.Dataset]:
    """``/parameters`` (or ``/<root>``, a root group H5MD does not define) and each group
    under it (or only ``only``) as a Dataset, by path relative to it (``""`` for the
    group itself): its elements (a group laid out as one: :func:`free_form`) and datasets
    as variables (string scalars as attributes), its attributes as the Dataset's. A ``unit`` attribute is served as ``units``, converted
    with ``convert_units`` as elements' are."""
    elements: dict[str, ElementInfo] = {}
    with b.lock:
        f = b.manager.acquire(needs_lock=False)
        # walked now, where served: its problems said here (/parameters' plain datasets'
        # were the scan's too: said once); a group of /parameters laid out as an element
        # (value, step, time) is one, as elsewhere: it was three unrelated variables
        found = free_form(f, root, allow_external=b.allow_external, info=b.info)
        params, elements, names = found.datasets, found.elements, found.groups
        for problem in found.problems:  # those of the group opened, not its subgroups'
            if only is None or _served_in(problem.path, root, names) == only:
                b.report.add(problem)
        grp = f.get(root)
        if not isinstance(grp, h5py.Group) or _elsewhere(grp, f, b.allow_external):
            return {}
        groups: dict[str, h5py.Group] = {"": grp}
        groups.update((name, grp[name]) for name in names if name and
                      (only is None or name == only))
        if only is not None:
            groups = {k: g for k, g in groups.items() if k == only}
        attrs = {sub: _plain_attrs(g, b.report) for sub, g in groups.items()}
    # outside the lock: the builder takes it where it reads (an element of strings)
    by_group: dict[str, dict[str, ElementInfo]] = {}
    for name, el in elements.items():
        sub, _, leaf = name.rpartition("/")
        by_group.setdefault(sub, {})[leaf] = el
    out = {sub: _free_form_elements(b, by_group.get(sub, {}), f"/{root}/{sub}".rstrip("/"))
           .assign_attrs(attrs[sub]) for sub in groups}
    taken = {sub: {*ds.variables, *ds.dims} for sub, ds in out.items()}  # the elements'
    with b.lock:
        grp = b.manager.acquire(needs_lock=False)[root]
        for name, meta in params.items():
            sub, _, leaf = name.rpartition("/")
            if sub not in out:
                continue  # another group, or one reached only through a link not followed
            dset = grp[name]  # (the scan and free_form left out what cannot be served)
            try:
                value = _parameter(b, dset, leaf, meta["path"])
            except H5MDFormatError as err:
                b.report.note(meta["path"], err.problem, "left out")
                continue
            if isinstance(value, str):
                out[sub].attrs[leaf] = value
                continue
            for key, var in (value if isinstance(value, dict) else {leaf: value}).items():
                _add_parameter(b, out[sub], key, var, meta["path"], taken[sub])
        dset = None  # closed under the lock (a live file's: see H5MDArray._dataset)
    return out


def _add_parameter(b: _Builder, ds: xr.Dataset, name: str, var: xr.Variable, path: str,
                   taken: set[Any]) -> None:
    """``var`` (the dataset at ``path``, or a field of it) as the variable ``name`` of
    ``ds``: as ``<name>_dataset`` where its group's elements have a coordinate or dimension
    of that name; left out, said once, where it clashes with what ``ds`` holds."""
    if name in taken:  # its elements' step, time
        new = f"{name}_dataset"
        b.report.note(path, f"a dataset named {name!r} clashes with the coordinate or "
                      "dimension of that name of the elements of its group",
                      f"served as {new!r}", departure=False)
        name = new
    if name in ds.variables:  # a compound's field named as another dataset
        b.report.note(path, f"{name!r} is the name of another variable of its group",
                      "left out", departure=False)
        return
    try:
        ds[name] = var
    except ValueError as err:  # its axes clash with another parameter's names
        b.report.note(path, f"it does not fit beside the other parameters of its group: "
                      f"{err}", "left out", departure=False)


def _elsewhere(grp: h5py.Group, f: h5py.File, allow_external: bool) -> bool:
    """Whether ``grp`` lies in another file than ``f`` (reached through an external
    link) where ``allow_external`` does not allow it: the scan left it out, said so, and
    its groups and attributes were served all the same."""
    return not allow_external and grp.file.filename != f.filename


def _served_in(path: str, root: str, groups: tuple[str, ...]) -> str:
    """The group of ``groups`` (relative to ``/<root>``, ``""`` for it) whose Dataset
    serves what lies at ``path``: the deepest that holds it."""
    rel = path[len(root) + 2:] if path.startswith(f"/{root}/") else ""
    return max((g for g in groups if not g or rel == g or rel.startswith(f"{g}/")),
               key=len, default="")


def _free_form_elements(b: _Builder, elements: dict[str, ElementInfo], where: str
                        ) -> xr.Dataset:
    """The elements of the group ``where`` (by name) as the variables of a Dataset,
    sampled by their ``step`` and ``time`` as the observables are
    (:func:`~h5mdx.format.h5md.free_form`)."""
    if not elements:
        return xr.Dataset()
    ds = _elements_dataset(b, elements, where, set())
    ds.attrs = {}  # the group's own are served
    return ds


def _free_form_group(b: _Builder, sub: str, group: str | None, drop: set[str],
                     root: str = "parameters") -> xr.Dataset:
    """The Dataset of ``/<root>/<sub>`` (``group=`` as given, for the error), with the
    file's attributes (version, author, creator, ``source``) under the group's own, and
    ``h5md_group``, as a particles or observables group opened alone has them."""
    found = _free_form_datasets(b, root, only=sub)
    if sub not in found:
        with b.lock:
            f = b.manager.acquire(needs_lock=False)
            grp = f.get(root)
            elsewhere = isinstance(grp, h5py.Group) and _elsewhere(grp, f, b.allow_external)
        if elsewhere:
            raise H5MDFormatError(b.info.filename, f"/{root}", (
                "a link to a group of another file, not followed: pass allow_external=True "
                "to read it"))
        found = _free_form_datasets(b, root)  # for the listing
        listing = ", ".join(repr(root + (f"/{k}" if k else "")) for k in found)
        raise NoSuchGroupError(f"{b.info.filename} has no group {group!r}"
                               f"{_element_hint(b, root, sub)}; the groups of "
                               f"/{root}: {listing or 'none'}")
    ds = found[sub].drop_vars([v for v in drop if v in found[sub].variables])
    ds.attrs = {**_file_attrs(b.info), **ds.attrs, "h5md_group": f"/{root}/{sub}".rstrip("/")}
    return ds


def _element_of(info: FileInfo, path: str) -> str:
    """Where ``path`` (a group sought) is an element of the observables, connectivity or a
    particles group, which is a variable, not a group: a hint naming the variable and
    the group serving it (``group="observables/temperature"`` was told only "no group");
    else ""."""
    root, _, rest = path.strip("/").partition("/")
    elements: dict[str, Any] = {}
    if root in ("observables", "connectivity"):
        elements = dict(info.observables if root == "observables" else info.connectivity)
    pg = info.particles_group(rest.rpartition("/")[0]) if root == "particles" else None
    if pg is not None:
        root, rest = f"particles/{pg}", rest.rpartition("/")[2]
        elements = dict(info.particles[pg].elements)
    if rest not in elements:
        return ""
    parent, _, leaf = rest.rpartition("/")
    return (f" (it is an H5MD element: the variable {leaf!r} of group "
            f"{'/'.join(p for p in (root, parent) if p)!r})")


def _element_hint(b: _Builder, root: str, sub: str) -> str:
    """Where ``/<root>/<sub>`` is an element of a free-form group (a group of the file,
    but no group of the DataTree), where it is served; else ""."""
    if not sub:
        return ""
    with b.lock:
        f = b.manager.acquire(needs_lock=False)
        elements = free_form(f, root, allow_external=b.allow_external, info=b.info).elements
    if sub not in elements:
        return ""
    parent, _, leaf = sub.rpartition("/")
    return (f" (it is an H5MD element: the variable {leaf!r} of group "
            f"{'/'.join(p for p in (root, parent) if p)!r})")


def _parameter(b: _Builder, dset: h5py.Dataset, leaf: str, path: str
               ) -> xr.Variable | str | dict[str, xr.Variable]:
    """One parameter dataset: a Variable (lazy when large), the text of a string scalar,
    or a compound's fields by name (:func:`_fields`)."""
    attrs = _plain_attrs(dset, b.report)
    try:  # as an element's (a one-element string array too)
        unit = scaled_unit(unit_text(attrs.pop("unit", None)), attrs.pop("unit_factor", None))
    except ValueError as err:
        b.report.note(path, str(err), "unit ignored")
        unit = None
    scale, unit = b._unit(unit, path) if dset.dtype.kind in "iuf" else (1.0, unit)
    if unit is not None:
        attrs["units"] = unit
    dims = tuple(f"{leaf}_dim_{i}" for i in range(dset.ndim))
    encoding = {"source": b.info.filename, "h5md_path": path}
    if dset.shape and dset.size * dset.dtype.itemsize > _PARAMETER_READ_BYTES:
        if dset.dtype.names:
            return _lazy_fields(b, dset, leaf, dims, attrs, encoding, path)
        if dset.dtype.kind not in "biufc":
            raise H5MDFormatError(
                b.info.filename, path,
                f"a {dset.dtype} dataset of shape {dset.shape} is too large to read",
            )
        dtype = np.dtype(np.float64) if scale != 1.0 and dset.dtype.kind in "iub" else dset.dtype
        lazy = H5MDArray(b.manager, path, tuple(dset.shape), dtype, scale=scale, lock=b.lock,
                         filename=b.info.filename)
        return xr.Variable(dims, indexing.LazilyIndexedArray(lazy), attrs, encoding)
    try:
        value = dset[()]
    except (OSError, RuntimeError, ValueError, TypeError) as err:
        raise H5MDFormatError(
            b.info.filename, path, f"cannot read the parameter: {err}"
        ) from None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    arr = np.asarray(value)
    if arr.dtype.names:
        return _fields(b, arr, leaf, dims, attrs, encoding, path)
    return xr.Variable(dims, _texts(arr) if arr.dtype.kind in "SO" else
                       arr * scale if scale != 1.0 else arr, attrs, encoding)


def _texts(arr: np.ndarray) -> np.ndarray:
    """Bytes and objects as str: bytes as UTF-8 (GROMACS' fixed-size strings), not ASCII."""
    return np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                     for v in arr.ravel().tolist()], dtype=str).reshape(arr.shape)


def _fields(b: _Builder, arr: np.ndarray, leaf: str, dims: tuple[str, ...],
            attrs: dict[str, Any], encoding: dict[str, Any], path: str
            ) -> dict[str, xr.Variable]:
    """A compound (structured) parameter as one variable per field, ``<leaf>_<field>``
    (nested compounds' fields joined so, ``<leaf>_<field>_<inner>``), said once: served
    as a structured dtype no writer takes (netCDF, Zarr) and few operations do."""
    out: dict[str, xr.Variable] = {}
    todo: list[tuple[str, np.ndarray]] = [(leaf, arr)]
    while todo:
        name, a = todo.pop(0)
        if a.dtype.names:
            todo.extend((f"{name}_{field}", a[field]) for field in a.dtype.names)
            continue
        if a.dtype.kind == "O" and any(isinstance(v, h5py.Reference) for v in a.ravel()):
            b.report.note(path, f"its field {name[len(leaf) + 1:]!r} holds object "
                          "references, which h5mdx does not follow", "field left out",
                          departure=False)
            continue
        extra = tuple(f"{name}_dim_{i}" for i in range(len(dims), a.ndim))
        out[name] = xr.Variable(dims + extra, _texts(a) if a.dtype.kind in "SO" else a,
                                dict(attrs), dict(encoding))
    _say_fields(b, path, arr.dtype, out)
    return out


def _say_fields(b: _Builder, path: str, dtype: np.dtype, out: dict[str, xr.Variable]) -> None:
    """Say once how a compound parameter is served: one variable per field."""
    b.report.note(path, f"a compound dataset of fields {', '.join(dtype.names or ())}",
                  f"served as one variable per field: {', '.join(out) or 'none'}",
                  departure=False)


def _lazy_fields(b: _Builder, dset: h5py.Dataset, leaf: str, dims: tuple[str, ...],
                 attrs: dict[str, Any], encoding: dict[str, Any], path: str
                 ) -> dict[str, xr.Variable]:
    """A compound parameter too large to read at open as one variable per field, named
    as :func:`_fields` names them, each read when indexed (:class:`FieldArray`); a text
    field decoded when read, as :func:`_fields` decodes a small one's (it was left out);
    a field of another kind (references, variable-length arrays) is left out, said."""
    out: dict[str, xr.Variable] = {}
    todo: list[tuple[tuple[str, ...], np.dtype]] = [((), dset.dtype)]
    while todo:
        names, dt = todo.pop(0)
        if dt.names:
            todo.extend(((*names, f), dt[f]) for f in dt.names)
            continue
        base, sub = dt.subdtype or (dt, ())
        name = "_".join((leaf, *names))
        if base.kind == "S":  # fixed-size: at most as many characters as bytes
            base = np.dtype(f"U{max(base.itemsize, 1)}")
        elif base.kind == "O" and h5py.check_string_dtype(base) is not None:
            base = np.dtype(object)
        elif base.kind not in "biufc":
            b.report.note(path, f"its field {name[len(leaf) + 1:]!r} is of type {base}, "
                          f"and the dataset ({dset.size * dset.dtype.itemsize} bytes) too "
                          "large to read at open", "field left out", departure=False)
            continue
        lazy = FieldArray(b.manager, path, (*dset.shape, *sub), base, field=names,
                          lock=b.lock, filename=b.info.filename)
        extra = tuple(f"{name}_dim_{i}" for i in range(len(dims), len(dims) + len(sub)))
        out[name] = xr.Variable(dims + extra, indexing.LazilyIndexedArray(lazy),
                                dict(attrs), dict(encoding))
    _say_fields(b, path, dset.dtype, out)
    return out


def _below(paths: Iterable[str]) -> dict[str, list[str]]:
    """The paths below each of ``paths`` (``"/a/b"`` is below ``"/a"`` and ``"/"``), in
    the order given: one pass over each path's ancestors, not a walk of every path per
    path (H5MD-NOMAD's ten thousand groups of connectivity made that quadratic)."""
    paths = list(paths)
    by_stem: dict[str, list[str]] = {}
    for path in paths:
        by_stem.setdefault(path.rstrip("/"), []).append(path)
    below: dict[str, list[str]] = {path: [] for path in paths}
    for path in paths:
        for i, char in enumerate(path):
            if char == "/":
                for above in by_stem.get(path[:i], ()):
                    if above != path:
                        below[above].append(path)
    return below


def _dealign(groups: dict[str, xr.Dataset]) -> None:
    """Rename ancestor dims that descendants would fail to align with."""
    paths = sorted(groups, key=lambda p: p.count("/"))
    below = _below(groups)
    for path in paths:
        ds = groups[path]
        descendants = [groups[p] for p in below[path]]
        renames = {}
        node = path.rstrip("/").rsplit("/", 1)[-1] or "root"
        for dim in ds.dims:
            for child in descendants:
                if dim not in child.dims:
                    continue
                if child.sizes[dim] != ds.sizes[dim] or (
                    dim in ds.coords and dim in child.coords
                    and (not ds.indexes[dim].equals(child.indexes[dim])
                         # equal values, other attrs (times in fs, in ps): xarray keeps
                         # the parent's alone, the child's unit was lost
                         or not _same_attrs(ds[dim].attrs, child[dim].attrs))
                ):
                    renames[dim] = f"{dim}_{node}"
                    break
        if renames:
            extra = {  # the coordinates on them (step_pressure: step_pressure_observables)
                c: f"{c}_{node}"
                for c in ds.coords
                if c not in renames and ds[c].ndim == 1 and ds[c].dims[0] in renames
                and c not in groups
            }
            groups[path] = _renamed(ds, {**renames, **extra}, renames)


def _same_attrs(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    """Whether two coordinates' attributes are the same (array values too)."""
    return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)


def _renamed(ds: xr.Dataset, names: dict[Any, str], dims: dict[Any, str]) -> xr.Dataset:
    """``ds.rename(names)``, with the dimensions ``dims`` renamed in its variables'
    ``preferred_chunks`` too (else ``chunks={}`` found none for them: one dask block)."""
    out = ds.rename(names)
    for var in out.variables.values():
        pref = var.encoding.get("preferred_chunks")
        if pref:
            var.encoding["preferred_chunks"] = {dims.get(d, d): n for d, n in pref.items()}
    return out
