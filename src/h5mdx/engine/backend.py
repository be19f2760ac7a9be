"""The ``h5md`` xarray backend: H5MD files as lazy, chunk-aligned Datasets.

``xr.open_dataset(path, engine="h5md")`` (:class:`H5MDBackendEntrypoint`) checks its
keywords, scans the file (:func:`h5mdx.format.h5md.scan`), chooses the group and
assembles it (:mod:`h5mdx.engine.assembly`) into variables backed by
:class:`~h5mdx.engine.arrays.H5MDArray`, which reads from disk only when indexed. Each
variable declares ``encoding["preferred_chunks"]``: whole HDF5 chunks along ``time``
sized near a target (128 MiB by default, dask's own) and every other axis whole, so
``chunks={}`` gives one dask task per few tens of MiB, never one per frame. Files are
held by xarray's :class:`~xarray.backends.CachingFileManager`
(:mod:`h5mdx.engine.files`), so datasets pickle to dask workers.
``xr.open_datatree`` opens every group (:func:`h5mdx.engine.groups.open_groups`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import xarray as xr
from xarray.backends import BackendEntrypoint
from xarray.backends.common import datatree_from_dict_with_io_cleanup
from xarray.backends.locks import HDF5_LOCK

# `name as name`: names this module held before the engine was split (h5mdx 0.1.0)
from h5mdx.engine.arrays import H5MDArray as H5MDArray
from h5mdx.engine.arrays import backend_array as backend_array
from h5mdx.engine.arrays import why_reads_take_turns as why_reads_take_turns
from h5mdx.engine.assembly import (
    _STRUCTURE_ERRORS,
    _Builder,
    _drop_coordinates,
    _observables_dataset,
    _particles_dataset,
    _Report,
    _set_unlimited_dims,
)
from h5mdx.engine.assembly import PARTICLE_ORDER_ATTR as PARTICLE_ORDER_ATTR
from h5mdx.engine.chunking import DEFAULT_TARGET_MIB
from h5mdx.engine.files import _Closer, _manager, _normalize_path, _scan_with
from h5mdx.engine.groups import _element_of, _free_form_group, open_groups
from h5mdx.errors import H5MDFormatError, NoSuchGroupError
from h5mdx.format.h5md import FileInfo, is_h5md

__all__ = ["H5MDBackendEntrypoint"]


def _default_group(info: FileInfo, listing: str) -> str:
    """The group a plain open reads: the only particles group, or the only one with
    positions (as VMD's structure module finds its atoms, :mod:`h5mdx.engine.topology`);
    without one, the observables (the only group of them where none lie directly under
    /observables)."""
    with_positions = [pg for pg in info.particles.values() if "position" in pg.elements]
    if len(info.particles) == 1 or len(with_positions) == 1:
        return (with_positions or list(info.particles.values()))[0].group
    if info.particles:
        raise NoSuchGroupError(
            f"{info.filename} has several particles groups; choose one with group=... "
            f"(--group on the command line): "
            f"{listing}; or open them all with xr.open_datatree(..., engine='h5md')"
        )
    if not info.observables:
        raise H5MDFormatError(info.filename, "/particles", (
            "the file has no particles group and no observables" + (
                f"; open one of its groups with group=...: {listing}" if listing != "none"
                else "")))
    if not info.elements_under("observables") and len(info.observable_groups) == 1:
        return f"observables/{info.observable_groups[0]}"
    return "observables"


#: The groups an error lists at most (the rest counted).
_LISTED = 30


def _resolve_group(info: FileInfo, group: str | None) -> tuple[str, str]:
    """Return (kind, name): ("particles", group), ("observables", prefix),
    ("connectivity", ""), ("parameters", subgroup) or ("other", path): a root group H5MD
    does not define, or a group below it."""
    available = [pg.group for pg in info.particles.values()]
    if info.observables:
        available.append("observables")
        available.extend(f"observables/{g}" for g in info.observable_groups)
    if info.connectivity:
        available.append("connectivity")
    # (where a group below was sought, the groups on the way to it)
    available.extend(f"connectivity/{g}" for g in info.connectivity_groups)
    available.extend("parameters" + (f"/{sub}" if sub else "") for sub in info.parameter_groups)
    available.extend(sorted(info.other_groups))
    listing = ", ".join(repr(a) for a in available[:_LISTED]) or "none"
    if len(available) > _LISTED:  # H5MD-NOMAD: ten thousand groups of connectivity
        listing += f" and {len(available) - _LISTED} more (h5mdx info lists them)"
    g = (group if group is not None else _default_group(info, listing)).strip("/")
    particles = info.particles_group(g)
    if particles is not None:
        return "particles", particles
    if g == "observables" and info.observables:
        if not info.elements_under("observables"):
            subs = ", ".join(repr(f"observables/{s}") for s in info.observable_groups)
            raise NoSuchGroupError(f"{info.filename} has no observables directly under "
                                   f"/observables; open one of its groups: {subs}")
        return "observables", ""
    if g.startswith("observables/") and g[len("observables/"):] in info.observable_groups:
        return "observables", g[len("observables/"):]
    if g == "connectivity" and info.connectivity:
        return "connectivity", ""
    if g.startswith("connectivity/") and g[len("connectivity/"):] in info.connectivity_groups:
        return "connectivity", g[len("connectivity/"):]
    if g == "parameters" or g.startswith("parameters/"):
        return "parameters", g[len("parameters/"):]
    if g.partition("/")[0] in info.other_groups:
        return "other", g
    # a group whose every element was left out (compound values, ...): it was "no group"
    left = [p for p in info.problems if f"{p.path.rstrip('/')}/".startswith(f"/{g}/")]
    why = ("; ".join(f"{p.path}: {p.message}, {p.assumed}" for p in left[:3])
           + (f"; and {len(left) - 3} more" if len(left) > 3 else ""))
    raise NoSuchGroupError(f"{info.filename} has no group {group!r}"
                           + (f" that h5mdx reads ({why})" if left else _element_of(info, g))
                           + f"; available: {listing}")


def _checked_keywords(topology: Any, convert_units: Any, chunk_mib: Any,
                      select: Any = None, flags: Mapping[str, Any] | None = None) -> Any:
    """The open's keywords, checked before the file is read (a wrong type failed deep
    inside, reported as a file that cannot be assembled); the topology's path with ``~``
    expanded, as the file's is. ``flags``: the other switches by name (``swmr``,
    ``allow_external``, ``strict``), True or False as ``convert_units`` (a string was
    taken for True: ``allow_external="no"`` followed external links)."""
    if isinstance(topology, (str, os.PathLike)):
        topology = os.path.expanduser(os.fspath(topology))
    elif topology is not None and not hasattr(topology, "atoms"):
        raise TypeError("topology= takes a topology file's path or an MDAnalysis Universe, "
                        f"not {type(topology).__name__}")
    for name, value in {"convert_units": convert_units, **(flags or {})}.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name}= takes True or False, not {value!r}")
    if isinstance(chunk_mib, (bool, np.bool_)) or not isinstance(
            chunk_mib, (int, float, np.integer, np.floating)):
        raise TypeError(f"chunk_mib= takes a number of MiB, not {chunk_mib!r}")
    if not 0 < chunk_mib < float("inf"):
        raise ValueError(f"chunk_mib= must be a positive number of MiB, not {chunk_mib!r}")
    if select is not None and not isinstance(select, str):
        raise TypeError("select= at open takes an MDAnalysis selection string (atoms by "
                        f"index: ds.isel(atom=...) or ds.sel(atom=...)), not "
                        f"{type(select).__name__}")
    return topology


def _open_one(
    filename: str,
    *,
    group: str | None,
    topology: Any,
    select: str | None,
    convert_units: bool,
    chunk_mib: float,
    swmr: bool,
    drop_variables: str | Iterable[str] | None,
    allow_external: bool = False,
    strict: bool = False,
) -> xr.Dataset:
    drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
    manager = _manager(filename, swmr)
    lock = HDF5_LOCK
    report = _Report(filename, strict)
    try:
        # the groups below /connectivity (ten thousand in H5MD-NOMAD's files) are not
        # walked: an open of one of them reads the groups on the way to it
        sought = (group or "").strip("/")
        info = _scan_with(manager, lock, allow_external, deep_connectivity=sought.startswith(
            "connectivity/") and sought[len("connectivity/"):])
        kind, name = _resolve_group(info, group)
        where = (info.particles[name].path if kind == "particles" else
                 f"/{name}" if kind == "other" else f"/{kind}/{name}".rstrip("/"))
        report.scanned(info, where, subtree=False, dropped=[
            f"{where}/box/edges" if v == "box_edges" else f"{where}/{v}" for v in drop])
        b = _Builder(info, manager, convert_units=convert_units, chunk_mib=chunk_mib, lock=lock,
                     report=report, allow_external=allow_external)
        if kind == "particles":
            ds = _particles_dataset(
                b, info.particles[name], topology=topology, select=select, drop=drop
            )
        else:
            if select is not None or topology is not None:
                raise ValueError("topology= and select= apply to particles groups only")
            if kind == "observables":
                ds = _observables_dataset(b, name, drop)
            elif kind == "connectivity":
                ds = _observables_dataset(b, name, drop, "connectivity")
            elif kind == "other":
                root, _, sub = name.partition("/")
                ds = _free_form_group(b, sub, group, drop, root)
            else:
                ds = _free_form_group(b, name, group, drop)
    except _STRUCTURE_ERRORS as err:
        manager.close()
        error = H5MDFormatError(
            filename, None, f"cannot assemble a Dataset ({type(err).__name__}: {err})")
        error.unexpected = True
        raise error from None
    except BaseException:
        manager.close()
        raise
    report.emit()
    ds = _drop_coordinates(ds, drop)
    _set_unlimited_dims(ds, b.growable)
    ds.set_close(_Closer(manager, filename))
    # the engine's keywords of this open, which h5mdx.engine.live.refresh opens again with
    ds.encoding["h5md_open"] = {
        "group": group, "select": select, "convert_units": convert_units,
        "chunk_mib": chunk_mib, "swmr": swmr, "allow_external": allow_external,
        "strict": strict, "drop_variables": sorted(drop) or None}
    return ds


class H5MDBackendEntrypoint(BackendEntrypoint):
    """Open H5MD 1.1 molecular-dynamics files with xarray: ``engine="h5md"``.

    Examples
    --------
    >>> ds = xr.open_dataset("traj.h5md", engine="h5md", chunks={})  # doctest: +SKIP
    >>> ds.position  # (time, atom, spatial), lazily read  # doctest: +SKIP
    """

    description: ClassVar[str] = (
        "Open H5MD molecular-dynamics trajectories (particles, box, observables) lazily"
    )
    url: ClassVar[str] = "https://github.com/h5mdx/h5mdx"
    supports_groups: ClassVar[bool] = True
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj",
        "drop_variables",
        "group",
        "topology",
        "select",
        "convert_units",
        "chunk_mib",
        "swmr",
        "allow_external",
        "strict",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Claim only HDF5 files that have an ``/h5md`` group."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        path = _normalize_path(filename_or_obj)
        return os.path.isfile(path) and is_h5md(path)

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        topology: Any = None,
        select: str | None = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> xr.Dataset:
        """Open one particles group (or observables group) as a Dataset.

        Parameters
        ----------
        filename_or_obj : str or path-like
            The H5MD file.
        drop_variables : str or iterable of str, optional
            Elements not to open.
        group : str, optional
            ``"trajectory"``/``"particles/trajectory"``, ``"observables"`` or a nested
            observables group such as ``"observables/atoms"``. Default: the only
            particles group.
        topology : str, path-like or MDAnalysis.Universe, optional
            Adds per-atom coordinates (``name``, ``resname``, ``resid``, ``segid``,
            ``type``, ``mass``, ``charge``).
        select : str, optional
            MDAnalysis selection restricting the ``atom`` dimension (needs ``topology``,
            or a file holding its own). A selection by position (``around``,
            ``prop z``, ...) is made on the file's first frame, in Å, in that frame's
            box; a Universe passed as ``topology`` keeps its frame, unused.
        convert_units : bool, default False
            Convert to Å, ps, Å/ps, kJ/(mol·Å), kJ/mol, u, e.
        chunk_mib : float, default 128
            Target size of the preferred dask blocks along ``time``.
        swmr : bool, default False
            Open a file that is being written in SWMR mode: the Dataset shows the
            frames written so far; ``h5mdx.engine.live.refresh(ds)`` (or closing it and
            opening again: two open Datasets of one live file break each other's reads in
            HDF5) shows more.
        allow_external : bool, default False
            Follow external links and read datasets whose data live in other files
            (external raw storage, virtual datasets mapping other files). Refused by
            default, with an :class:`~h5mdx.errors.H5MDFormatError` naming this keyword.
        strict : bool, default False
            Refuse any departure from H5MD with an
            :class:`~h5mdx.errors.H5MDFormatError` naming the file, the H5MD path and
            the problem. By default h5mdx reads what carries usable data and emits one
            :class:`~h5mdx.errors.H5MDConformanceWarning` per problem (saying what it
            assumed, or that a part was left out).
        **kwargs
            None: any keyword is a ``TypeError``, xarray's CF decoders (``decode_times``,
            ``mask_and_scale``, ...) with a word on why they do not apply.

        Returns
        -------
        xarray.Dataset
        """
        _no_other_keywords("open_dataset", kwargs)
        filename = _normalize_path(filename_or_obj)
        topology = _checked_keywords(topology, convert_units, chunk_mib, select, {
            "swmr": swmr, "allow_external": allow_external, "strict": strict})
        return _open_one(
            filename,
            group=group,
            topology=topology,
            select=select,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            drop_variables=drop_variables,
            allow_external=allow_external,
            strict=strict,
        )

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        topology: Any = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> dict[str, xr.Dataset]:
        """Every group of the file as ``{path: Dataset}`` (see :func:`open_groups`);
        ``group=``: those of that group's subtree, with paths relative to it, the file's
        attributes (``h5md_version``, ``author_*``, ``creator_*``, ``source``) at its root
        as at the whole file's.

        Parameters
        ----------
        filename_or_obj : str or path-like
            The H5MD file.
        drop_variables : str or iterable of str, optional
            Elements not to open, in every group.
        topology : str, path-like or MDAnalysis.Universe, optional
            Per-atom coordinates for the particles groups (as :meth:`open_dataset`).
        convert_units : bool, default False
            Convert to Å, ps, Å/ps, kJ/(mol·Å), kJ/mol, u, e.
        chunk_mib : float, default 128
            Target size of the preferred dask blocks along ``time``.
        swmr : bool, default False
            Open a file that is being written in SWMR mode (see :meth:`open_dataset`).
        allow_external : bool, default False
            Follow external links and read data that live in other files.
        strict : bool, default False
            Refuse any departure from H5MD with an :class:`~h5mdx.errors.H5MDFormatError`;
            by default one :class:`~h5mdx.errors.H5MDConformanceWarning` per problem.
        **kwargs
            ``group``: the path of a group (``"particles"``, ``"observables"``, ...)
            whose subtree alone is opened. Any other keyword is a ``TypeError``.

        Returns
        -------
        dict of str to xarray.Dataset
            One Dataset per group, by path (``"/"`` holds the file's metadata).
        """
        group = kwargs.pop("group", None)
        _no_other_keywords("open_groups", kwargs)
        filename = _normalize_path(filename_or_obj)
        topology = _checked_keywords(topology, convert_units, chunk_mib, None, {
            "swmr": swmr, "allow_external": allow_external, "strict": strict})
        groups = open_groups(
            filename,
            drop_variables=drop_variables,
            topology=topology,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            allow_external=allow_external,
            strict=strict,
            group=group,
        )
        if group is None or not group.strip("/"):
            return groups
        root = "/" + group.strip("/")
        out = {path[len(root):] or "/": ds for path, ds in groups.items()
               if path == root or path.startswith(root + "/")}
        # the file's attributes are said at the root of the tree, the whole file's or a
        # subtree's (they were lost with the file's node: group="observables" had no
        # h5md_version, author, creator, source); the group's own of those names kept
        top = out["/"]
        top.attrs = {**groups["/"].attrs, **top.attrs}
        return out

    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        topology: Any = None,
        convert_units: bool = False,
        chunk_mib: float = DEFAULT_TARGET_MIB,
        swmr: bool = False,
        allow_external: bool = False,
        strict: bool = False,
        **kwargs: Any,
    ) -> xr.DataTree:
        """The whole file as a DataTree mirroring its groups (``group=``: the subtree of
        that group, e.g. ``"particles"`` or ``"observables"``).

        Parameters
        ----------
        filename_or_obj, drop_variables, topology, convert_units, chunk_mib, swmr
            As :meth:`open_groups_as_dict`.
        allow_external, strict
            As :meth:`open_groups_as_dict`.
        **kwargs
            ``group``, as :meth:`open_groups_as_dict`.

        Returns
        -------
        xarray.DataTree
            Closing it (or leaving its ``with`` block) closes the file.
        """
        group = kwargs.pop("group", None)
        _no_other_keywords("open_datatree", kwargs)
        groups = self.open_groups_as_dict(
            filename_or_obj,
            drop_variables=drop_variables,
            topology=topology,
            convert_units=convert_units,
            chunk_mib=chunk_mib,
            swmr=swmr,
            allow_external=allow_external,
            strict=strict,
            group=group,
        )
        # each node closes the file (one close, however many nodes): tree.close() and
        # `with xr.open_datatree(...)` release it, as xarray's own engines do
        return datatree_from_dict_with_io_cleanup(groups)


def _no_other_keywords(what: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse keywords the engine does not take (xarray's CF decoders among them), as
    ``open_dataset`` does, instead of ignoring them."""
    if not kwargs:
        return
    cf = sorted(set(kwargs) & _CF_KEYWORDS)
    why = (" (CF decoding does not apply to H5MD: times and steps are numbers with a unit, "
           "served as they are, and a fill value reads as NaN; leave "
           f"{'it' if len(cf) == 1 else 'them'} out)") if cf else ""
    raise TypeError(f"the h5md engine's {what} got unexpected keyword(s) "
                    f"{', '.join(sorted(kwargs))}{why}")


#: xarray's CF-decoding keywords, which H5MD files do not need.
_CF_KEYWORDS = frozenset({"mask_and_scale", "decode_times", "decode_timedelta", "use_cftime",
                          "concat_characters", "decode_coords"})
