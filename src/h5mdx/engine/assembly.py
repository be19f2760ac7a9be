"""The scan of one group (:class:`~h5mdx.format.h5md.FileInfo`) turned into an
``xr.Dataset``.

``_Builder`` makes a variable of each element (lazy :class:`~h5mdx.engine.arrays.H5MDArray`,
units, chunk-aligned ``preferred_chunks``) and the ``time``/``step`` coordinates of each
sampling; the particles group gets its box, topology coordinates (``topology=``,
GROMACS' and VMD's modules) and particle-order marks; problems found are warned about
once per open, or raised with ``strict=True`` (``_Report``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import h5py
import numpy as np
import xarray as xr
from xarray.backends import CachingFileManager
from xarray.core import indexing

from h5mdx.engine.arrays import H5MDArray, _BoundsArray
from h5mdx.engine.chunking import time_block
from h5mdx.engine.files import _STAMPS, _normalize_path
from h5mdx.errors import (
    H5MDConformanceWarning,
    H5MDFormatError,
    ParticleOrderWarning,
    TopologyError,
)
from h5mdx.format import units as _units
from h5mdx.format.gromacs_topology import ModuleTopology
from h5mdx.format.h5md import (
    ATTRIBUTE_ERRORS,
    BoxInfo,
    ElementInfo,
    FileInfo,
    ParticlesGroupInfo,
    Problem,
    Sampling,
    attribute_problem,
    reference_paths,
    scalar_text,
)
from h5mdx.format.schema import (
    ATOM_DIM,
    BOX_VECTOR_DIM,
    BOX_VECTOR_LABELS,
    PER_PARTICLE_SCALARS,
    SPATIAL_DIM,
    SPATIAL_LABELS,
    TIME_DIM,
    is_time_dim,
)


class _Report:
    """The conformance problems of one open: warned once each, or raised (``strict``)."""

    def __init__(self, filename: str, strict: bool) -> None:
        self.filename = filename
        self.strict = strict
        self.problems: list[Problem] = []

    def add(self, problem: Problem) -> None:
        """Record ``problem``; with ``strict`` raise it as an :class:`H5MDFormatError`
        (where it is a departure from H5MD: ``Problem.departure``)."""
        if self.strict and problem.departure:
            raise H5MDFormatError(self.filename, problem.path, problem.message)
        if problem not in self.problems:
            self.problems.append(problem)

    def note(self, path: str, message: str, assumed: str, *, departure: bool = True) -> None:
        """Record a problem found while assembling the Dataset (``departure=False``: where
        H5MD leaves the file free, warned but never refused)."""
        self.add(Problem(path, message, assumed, departure=departure))

    def scanned(self, info: FileInfo, under: str | None = None, subtree: bool = True,
                dropped: Iterable[str] = ()) -> None:
        """Take the problems of the scan: all, or those of ``under`` and the whole file;
        ``subtree=False`` (an open of one group as a Dataset): not those of the
        observables or connectivity groups nested in ``under``, each a Dataset of its
        own; nor, unless strict, those of the elements at paths ``dropped`` alone (an
        element left out with ``drop_variables``: it warned of what it was not read)."""
        # /particles read as one particles group (Sarkas): its problems are that group's
        flat = any(pg.path == "/particles" for pg in info.particles.values())
        gone = tuple(f"{path.rstrip('/')}/" for path in dropped)
        for problem in info.problems:
            paths = (problem.path, *problem.shared_by)
            if gone and not self.strict and all(f"{path.rstrip('/')}/".startswith(gone)
                                                for path in paths):
                continue
            if (self.strict and problem.departure) or under is None or any(
                    _concerns(path, under, flat)
                    and (subtree or _of_its_own_elements(path, under, info))
                    for path in paths):
                self.add(problem)

    def emit(self) -> None:
        """Warn once per problem, naming the file, the path and what was assumed (minor
        problems, missing metadata, only with ``strict``)."""
        for p in self.problems:
            if p.minor:
                continue
            # a step or time hard-linked into other elements: the path is one of its names
            shared = (f" (the same dataset serves {len(p.shared_by)} other element(s), "
                      "hard links)") if p.shared_by else ""
            warnings.warn(
                H5MDConformanceWarning(
                    f"{self.filename} [{p.path}]: {p.message}; {p.assumed}{shared}"
                ),
                stacklevel=2,
            )


def _concerns(path: str, group_path: str, flat: bool = False) -> bool:
    """Whether a problem at ``path`` concerns an open of ``group_path`` (or the whole file:
    a problem outside the roots that hold groups, such as ``/h5md``'s). A problem of
    ``/particles`` itself concerns the opens of particles only where ``flat`` (``/particles``
    read as one particles group, as Sarkas writes it), every open otherwise (the particles
    left out: no open of them would say so)."""
    if path.startswith("/parameters/") and (group_path == "/parameters"
                                            or group_path.startswith("/parameters/")):
        # each group of /parameters is a Dataset of its own: a problem of a dataset or
        # link concerns the open of the group that holds it, not of those above it
        return path.rpartition("/")[0] == group_path.rstrip("/") or path == group_path
    if path.strip("/").split("/")[0] not in ("particles", "observables", "parameters",
                                             "connectivity") or (
            path.rstrip("/") == "/particles" and not flat):
        return True
    return (path == group_path or path.startswith(group_path.rstrip("/") + "/")
            or group_path.startswith(path.rstrip("/") + "/"))


def _of_its_own_elements(path: str, group_path: str, info: FileInfo) -> bool:
    """Whether a problem at ``path`` below the observables or connectivity group
    ``group_path`` is of that group's own elements, not of a group nested in it (the
    deepest of the file's groups on the way to ``path`` is ``group_path``); True for any
    other path."""
    root, _, rest = path.strip("/").partition("/")
    groups = {"observables": info.observable_groups,
              "connectivity": info.connectivity_groups}.get(root)
    if groups is None or not path.startswith(group_path.rstrip("/") + "/"):
        return True
    owner = max((g for g in groups if rest == g or rest.startswith(f"{g}/")), key=len,
                default="")
    return f"/{root}/{owner}".rstrip("/") == group_path.rstrip("/")


#: String datasets up to this size (bytes) are read at open time; larger ones are left out.
_STRING_READ_BYTES = 2**24


class _Builder:
    """Turns the :class:`FileInfo` of one group into xarray variables."""

    def __init__(
        self,
        info: FileInfo,
        manager: CachingFileManager,
        *,
        convert_units: bool,
        chunk_mib: float,
        lock: Any,
        report: _Report | None = None,
        allow_external: bool = False,
    ) -> None:
        self.info = info
        #: what the open allows: the groups walked when served are walked so too
        self.allow_external = allow_external
        self.manager = manager
        self.convert_units = convert_units
        self.chunk_mib = chunk_mib
        self.lock = lock
        self.report = report if report is not None else _Report(info.filename, strict=True)
        #: the file's stamp when opened (:func:`h5mdx.format.reader_cache.file_stamp`; None:
        #: a live file)
        self.stamp = _STAMPS.get(manager)
        #: the H5MD paths of the elements built that a writer can append frames to
        self.growable: set[str] = set()

    # -- units -------------------------------------------------------------------------
    def _unit(self, unit: str | None, where: str) -> tuple[float, str | None]:
        if unit is None or not self.convert_units:
            return 1.0, unit
        factor, unit, problem = _units.base_factor(unit)
        if problem is not None:
            self.report.note(where, problem, "left unconverted")
        return factor, unit

    # -- data variables -----------------------------------------------------------------
    def _eager(self, el: ElementInfo) -> np.ndarray | None:
        """The values of a non-numeric element read now (strings), or None (noted)."""
        if el.data is not None:
            return el.data
        string = h5py.check_string_dtype(el.dtype) is not None or el.dtype.kind in "SU"
        if not string or el.nbytes > _STRING_READ_BYTES:
            what = ("object references, which h5mdx does not follow"
                    if h5py.check_ref_dtype(el.dtype) is not None else f"dtype {el.dtype}")
            self.report.note(el.value_path, f"unsupported {what} (h5mdx reads numeric "
                             "and string elements)", "left out")
            return None
        with self.lock:
            f = self.manager.acquire(needs_lock=False)
            if not el.shape:
                try:
                    return scalar_text(f, el.value_path, el.dtype)
                except (OSError, RuntimeError, ValueError, TypeError, KeyError, AttributeError):
                    pass  # read again the usual way, which says why it cannot
            dset = f[el.value_path]
            try:
                return np.asarray(dset.asstr()[()], dtype=str)
            except (OSError, RuntimeError, ValueError, TypeError, UnicodeDecodeError) as err:
                self.report.note(el.value_path, f"cannot read the strings: {err}", "left out")
                return None

    def variable(
        self, el: ElementInfo, dims: tuple[str, ...], attrs: dict[str, Any] | None = None
    ) -> xr.Variable | None:
        """The variable of element ``el``, or None where it is left out (noted)."""
        if len(dims) != len(el.shape):
            raise H5MDFormatError(
                self.info.filename,
                el.path,
                f"value has shape {el.shape}; expected dimensions {dims}",
            )
        if el.data is not None or el.dtype.kind not in "biufc":
            values = self._eager(el)
            if values is None:
                return None
            var_attrs = {**el.attrs, **dict(attrs or {})}
            unit = el.unit
            if values.dtype.kind in "iuf":
                scale, unit = self._unit(el.unit, el.value_path)
                values = values * scale if scale != 1.0 else values
            if unit is not None:
                var_attrs["units"] = unit
            return xr.Variable(dims, values, var_attrs, {"source": self.info.filename,
                                                         "h5md_path": el.path})
        scale, unit = self._unit(el.unit, el.value_path)
        dtype = el.dtype
        if scale != 1.0 and dtype.kind in "iub":
            dtype = np.dtype(np.float64)
        full_atoms = bool(
            el.chunks and len(el.shape) > 1 and el.time_dependent and el.chunks[1] == el.shape[1]
        )
        raw = H5MDArray(
            self.manager,
            el.value_path,
            el.shape if el.stored_tail is None else (el.shape[0], *el.stored_tail),
            dtype,
            scale=scale,
            fillvalue=el.fillvalue,
            lock=self.lock,
            full_atom_chunks=full_atoms and not el.bounds,
            filename=self.info.filename,
            stamp=self.stamp,
        )
        # edges or offset of LAMMPS' bounds: computed frame by frame
        array = _BoundsArray(raw, el.bounds, dtype) if el.bounds else raw
        data = indexing.LazilyIndexedArray(array)
        var_attrs = {**el.attrs, **dict(attrs or {})}
        if unit is not None:
            var_attrs["units"] = unit
        encoding: dict[str, Any] = {
            "source": self.info.filename,
            "h5md_path": el.path,
            # the dtype served (a unit conversion makes integers floats): what a netCDF
            # or Zarr writer stores; the file's own is original_dtype
            "dtype": dtype,
            "original_dtype": el.dtype,
            "chunksizes": el.chunks,
            "contiguous": el.chunks is None,
            "compression": el.compression,
            "compression_opts": el.compression_opts,
            "shuffle": el.shuffled,
            "fletcher32": el.fletcher32,
            "original_shape": el.shape,
        }
        if el.fillvalue is not None:
            encoding["_FillValue"] = el.fillvalue
        if el.growable:
            self.growable.add(el.path)
        if el.time_dependent and el.shape:
            block = time_block(el.shape, el.dtype.itemsize, el.chunks, self.chunk_mib)
            preferred = {dims[0]: block}
            preferred.update({d: int(s) for d, s in zip(dims[1:], el.shape[1:], strict=True)})
            encoding["preferred_chunks"] = preferred
        elif el.shape:
            encoding["preferred_chunks"] = {
                d: int(s) for d, s in zip(dims, el.shape, strict=True)
            }
        return xr.Variable(dims, data, var_attrs, encoding)

    # -- time coordinates --------------------------------------------------------------
    def time_coords(self, sampling: Sampling, tdim: str, where: str) -> dict[str, xr.Variable]:
        suffix = tdim[len(TIME_DIM):]
        step_name = f"step{suffix}"
        coords: dict[str, xr.Variable] = {
            step_name: xr.Variable((tdim,), sampling.step, {"long_name": "MD integration step"})
        }
        if sampling.time is not None:
            scale, unit = self._unit(sampling.time_unit, f"{where}/time")
            time = _units.scaled(sampling.time, scale, decimals=True)
            attrs = {"long_name": "simulation time"}
            if unit is not None:
                attrs["units"] = unit
        else:
            time = sampling.step.astype(np.float64)
            attrs = {
                "long_name": "simulation time (the file stores no time: the step is used)",
                "units": "step",
            }
        coords[tdim] = xr.Variable((tdim,), time, attrs)
        return coords


def _main_sampling(elements: Iterable[ElementInfo], preferred: str | None) -> Sampling | None:
    tds = [(e.name, e.sampling) for e in elements
           if e.time_dependent and e.sampling is not None]
    if not tds:
        return None
    for name, chosen in tds:
        if name == preferred:
            # its times (or their unit) where another element on its steps has them
            for _, other in tds:
                if other.same_as(chosen):
                    chosen = _fuller(chosen, other)
            return chosen
    # the sampling most elements share
    groups: list[tuple[Sampling, int]] = []
    for _, sampling in tds:
        for i, (s, n) in enumerate(groups):
            if s.same_as(sampling):
                # the group's times come from a sampling that has them
                groups[i] = (_fuller(s, sampling), n + 1)
                break
        else:
            groups.append((sampling, 1))
    # a sampling the file gives beats frames numbered for want of one (another element's
    # problem); then the most elements; ties go to the sampling with the most frames
    return max(groups, key=lambda sn: (sn[0].kind != "implicit", sn[1], sn[0].step.size))[0]


def _fuller(sampling: Sampling, other: Sampling) -> Sampling:
    """Of two samplings of the same frames, the one that says more: ``other`` where it has
    times and ``sampling`` none, or the unit of equal times that ``sampling`` leaves
    unsaid (the shared axis took the first element's, and lost the unit)."""
    if other.time is not None and (sampling.time is None or (
            sampling.time_unit is None and other.time_unit is not None)):
        return other
    return sampling


def _time_dims(b: _Builder, el: ElementInfo, name: str, main: Sampling | None,
               coords: dict[str, xr.Variable]) -> tuple[str, ...]:
    """The leading dimension of element ``name``: ``time`` where it follows the main
    sampling, ``time_<name>`` (its coordinates added to ``coords``) where it has its own,
    none where it is time-independent."""
    if not el.time_dependent:
        return ()
    assert el.sampling is not None
    if main is not None and el.sampling.same_as(main):
        return (TIME_DIM,)
    tdim = f"{TIME_DIM}_{name}"
    coords.update(b.time_coords(el.sampling, tdim, el.path))
    return (tdim,)


def _tail_dims(el: ElementInfo, name: str, first: tuple[str, ...], *, particles: bool,
               dimension: int | None) -> tuple[str, ...]:
    shape = el.shape[len(first):]
    dims: list[str] = []
    for i, size in enumerate(shape):
        if particles and i == 0:
            dims.append(ATOM_DIM)
        elif particles and i == 1 and len(shape) == 2 and (dimension is None or size == dimension):
            dims.append(SPATIAL_DIM)
        else:
            dims.append(f"{name}_dim_{len(first) + i}")
    return tuple(dims)


def _note_edges_without_unit(b: _Builder, edges: ElementInfo,
                             position: ElementInfo | None) -> None:
    """Note box ``edges`` without a unit beside positions whose unit ``convert_units``
    converts: the positions are scaled (nm to Angstrom: x10), the edges served as stored,
    in silence they no longer matched. H5MD's units are optional: no departure."""
    unit = position.unit if position is not None else None
    if edges.unit is not None or unit is None or not b.convert_units:
        return
    factor, base, problem = _units.base_factor(unit)
    if problem is None and factor != 1.0:
        b.report.note(edges.path, f"the box edges have no unit, the positions {unit!r}: "
                      f"with convert_units=True the positions are in {base!r}, the edges "
                      "as stored", "box edges left unconverted", departure=False)


def _box_variables(b: _Builder, box: BoxInfo, main: Sampling | None, drop: set[str],
                   variables: dict[str, xr.Variable], coords: dict[str, xr.Variable],
                   position: ElementInfo | None = None) -> None:
    """Add ``box_edges`` (and the ``box_vector``/``spatial`` coordinates) of ``box``
    (``position``: the group's positions, whose unit the edges' is compared with)."""
    attrs = {"boundary": list(box.boundary), "dimension": box.dimension}
    if box.edges is not None and "box_edges" not in drop:
        el = box.edges
        _note_edges_without_unit(b, el, position)
        first = _time_dims(b, el, "box_edges", main, coords)
        tail = el.shape[len(first):]
        box_dims = (SPATIAL_DIM,) if len(tail) == 1 else (BOX_VECTOR_DIM, SPATIAL_DIM)
        edges_var = b.variable(el, first + box_dims, attrs)
        if edges_var is not None:
            variables["box_edges"] = edges_var
        if edges_var is not None and len(tail) == 2:
            coords[BOX_VECTOR_DIM] = xr.Variable(
                (BOX_VECTOR_DIM,), np.array(BOX_VECTOR_LABELS[: tail[0]])
            )
    for name, extra in (("box_offset", box.offset), ("box_pbc", box.pbc)):
        if extra is None or name in drop:
            continue  # other writers' members: the lower corner; periodicity per frame
        var = b.variable(extra, _time_dims(b, extra, name, main, coords) + (SPATIAL_DIM,))
        if var is not None:
            variables[name] = var
    coords[SPATIAL_DIM] = xr.Variable((SPATIAL_DIM,), np.array(SPATIAL_LABELS[:box.dimension]))


def _group_dimension(pg: ParticlesGroupInfo) -> int | None:
    """The spatial dimension of a particles group: its box's; without a box, the number of
    components of its positions (or velocities, forces, images), so that an element of
    another width (quaternions) gets an axis of its own rather than a clashing ``spatial``."""
    if pg.box is not None:
        return pg.box.dimension
    for name in ("position", "velocity", "force", "image"):
        el = pg.elements.get(name)
        if el is None:
            continue
        tail = el.shape[1:] if el.time_dependent else el.shape
        if len(tail) == 2:
            return int(tail[1])
    return None


def _particles_dataset(
    b: _Builder,
    pg: ParticlesGroupInfo,
    *,
    topology: Any,
    select: str | None,
    drop: set[str],
) -> xr.Dataset:
    info = b.info
    dimension = _group_dimension(pg)
    main = _main_sampling(pg.elements.values(), "position")
    variables: dict[str, xr.Variable] = {}
    coords: dict[str, xr.Variable] = {}
    if main is not None:
        coords.update(b.time_coords(main, TIME_DIM, pg.path))

    n_atoms: int | None = None
    for name, el in pg.elements.items():
        if name in drop:
            continue
        first = _time_dims(b, el, name, main, coords)
        dims = first + _tail_dims(el, name, first, particles=not el.in_subgroup,
                                  dimension=dimension)
        if ATOM_DIM in dims:
            size = el.shape[dims.index(ATOM_DIM)]
            if n_atoms is None:
                n_atoms = size
            elif size != n_atoms:
                b.report.note(el.path, f"has {size} particles but other elements of "
                              f"{pg.path} have {n_atoms}", "left out")
                continue
        var = b.variable(el, dims)
        if var is not None and len(dims) == len(first) + 2 and el.shape[-1] == 1 and \
                dims[len(first)] == ATOM_DIM and (name in PER_PARTICLE_SCALARS
                                                  or dims[-1] != SPATIAL_DIM):
            # one value per particle with an axis of length 1 after it (ESPResSo++'s
            # parallel writer: id, mass, charge, type, ...), not a 1-D vector
            var = _without_last_axis(b, el, var)
        if var is not None:
            variables[name] = var

    _mark_particle_order(b, pg, variables)
    if pg.box is not None:
        _box_variables(b, pg.box, main, drop, variables, coords,
                       pg.elements.get("position"))
    if SPATIAL_DIM not in coords and any(SPATIAL_DIM in v.dims for v in variables.values()):
        size = next(v.sizes[SPATIAL_DIM] for v in variables.values() if SPATIAL_DIM in v.dims)
        if size <= 3:
            coords[SPATIAL_DIM] = xr.Variable((SPATIAL_DIM,), np.array(SPATIAL_LABELS[:size]))

    attrs = _file_attrs(info)
    attrs["h5md_group"] = pg.path
    if n_atoms is not None:
        coords[ATOM_DIM] = xr.Variable((ATOM_DIM,), np.arange(n_atoms, dtype=np.int64),
                                       {"long_name": "0-based atom index"})
    ds = _dataset(variables, coords, attrs, info, pg.path, b.report)

    own = topology is None or (isinstance(topology, (str, os.PathLike))
                               and _normalize_path(topology) == info.filename)
    if own and info.topology is not None and n_atoms is not None and (
            topology is None or info.topology.n_atoms == n_atoms):
        ds = _with_module_topology(b, ds, info.topology, n_atoms, pg.path)
        if topology is None and "topology" in ds.attrs:
            topology = info.filename
    elif own and info.vmd_structure is not None and n_atoms is not None:
        ds = _with_vmd_structure(b, ds, n_atoms, pg.path)
        if topology is None and "topology" in ds.attrs:
            topology = info.filename
    elif topology is not None:
        ds = _with_topology(ds, topology, n_atoms, info.filename, pg.path,
                            drop & set(pg.elements))
    if select is not None:
        ds = _selected(ds, info, pg.path, topology, select,
                       dropped="position" in drop and "position" in pg.elements,
                       box=_dropped_box(b, pg, main, drop, coords))
    return ds


def _dropped_box(b: _Builder, pg: ParticlesGroupInfo, main: Sampling | None,
                 drop: set[str], coords: dict[str, xr.Variable]) -> xr.Variable | None:
    """The box edges of ``pg`` where ``drop_variables`` left them out, for a selection by
    position at open, made in the file's box all the same (it was made without a box,
    its distances not periodic, in silence); None where they are served or absent."""
    if "box_edges" not in drop or pg.box is None or pg.box.edges is None:
        return None
    found: dict[str, xr.Variable] = {}
    _box_variables(b, pg.box, main, {"box_offset", "box_pbc"}, found, dict(coords),
                   pg.elements.get("position"))
    return found.get("box_edges")


def _selected(ds: xr.Dataset, info: FileInfo, group: str, topology: Any,
              select: str, dropped: bool = False, box: xr.Variable | None = None
              ) -> xr.Dataset:
    """The atoms of ``ds`` that the MDAnalysis selection ``select`` picks (``select=``);
    a selection by position (``around``, ``prop z``, ...) on the file's first frame, in
    Angstrom, in its box (:func:`h5mdx.engine.topology.first_frame`); ``dropped``: the
    positions were left out with ``drop_variables``; ``box``: the box edges, where they
    were."""
    from h5mdx.engine.topology import (
        SUBSET_OF_ATTR,
        first_frame,
        load_universe,
        select_indices,
    )

    n_atoms = ds.sizes.get(ATOM_DIM)
    if topology is None:
        module = info.topology
        raise TopologyError(
            f"{info.filename}: select={select!r} needs a topology: pass "
            "topology='system.psf' (any file MDAnalysis reads)" + (
                f"; the file's {module.path} describes {module.n_atoms} atoms, not the "
                f"{n_atoms} of {group}" if module is not None else "")
        )
    universe = load_universe(topology, group)
    subset = SUBSET_OF_ATTR in ds[ATOM_DIM].attrs  # the topology's indices of the atoms held
    ids = ds[ATOM_DIM].values if subset else np.arange(n_atoms or 0)
    indices = select_indices(universe, select, info.filename, frame=lambda: first_frame(
        ds, ids, len(universe.atoms), f"{info.filename} [{group}]", dropped, box))
    if subset:
        indices = np.flatnonzero(np.isin(ds[ATOM_DIM].values, indices))
        if not indices.size:
            raise TopologyError(f"{info.filename}: the selection {select!r} matches "
                                f"none of the {n_atoms} atoms of {group}")
    ds = ds.isel({ATOM_DIM: indices})
    ds.attrs["selection"] = select
    return ds


def _without_last_axis(b: _Builder, el: ElementInfo, var: xr.Variable) -> xr.Variable:
    """A per-particle scalar element stored with a trailing axis of length 1 (ESPResSo++'s
    parallel writer stores ``id``, ``mass``, ``charge`` as ``(1, N, 1)``), served without
    it, noted: per-atom comparisons and ``ds.md.by_id()`` need one number per particle."""
    b.report.note(el.path, f"holds one value per particle in a trailing axis of length 1 "
                  f"(shape {el.shape}; ESPResSo++'s parallel writer stores them so)",
                  "served per particle, without that axis")
    return _without_axes(var, [str(var.dims[-1])])


def _without_axes(var: xr.Variable, dims: Iterable[str]) -> xr.Variable:
    """``var`` without its axes ``dims`` of length 1 (lazily: the first entry of each),
    its preferred chunks without them too."""
    gone = set(dims)
    out = var.isel({d: 0 for d in gone})
    pref = out.encoding.get("preferred_chunks")
    if pref:
        out.encoding["preferred_chunks"] = {d: n for d, n in pref.items() if d not in gone}
    return out


def _with_topology(ds: xr.Dataset, topology: Any, n_atoms: int | None, filename: str,
                   group: str, dropped: Iterable[str] = ()) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of ``topology`` and ``attrs["topology"]``;
    ``dropped``: the group's elements left out with ``drop_variables`` (named where no
    per-atom element is left)."""
    from h5mdx.engine.topology import (
        SUBSET_OF_ATTR,
        UNIVERSE_ENCODING,
        input_indices,
        load_universe,
        topology_coords,
        topology_label,
    )

    if n_atoms is None:
        gone = ", ".join(repr(name) for name in sorted(dropped))
        raise TopologyError(f"{filename}: {group} has no per-atom element" + (
            f" left: drop_variables left out {gone}; keep one of them to attach a topology"
            if gone else ""))
    universe = load_universe(topology, group)
    ids = input_indices(ds, universe, n_atoms, filename, group)
    where = f"{filename} [{group}]"  # which group: of a tree, another may fit
    if ids is None:
        tcoords = topology_coords(universe, n_atoms, where)
    else:  # a selection's atoms, found in the whole system's topology by their id
        tcoords = topology_coords(universe.atoms[ids], n_atoms, where)
        ds = ds.assign_coords({ATOM_DIM: xr.Variable((ATOM_DIM,), ids, {
            "long_name": "0-based atom index in the topology (the file's id)",
            SUBSET_OF_ATTR: len(universe.atoms)})})
    ds = ds.assign_coords(
        {k: (ATOM_DIM, v) for k, v in tcoords.items() if k not in ds.variables}
    )
    ds.attrs["topology"] = topology_label(topology, universe)
    # the atom coordinate travels with every DataArray: it names its topology, and holds
    # a Universe passed as such, which analyses use (its masses, as edited)
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    if not isinstance(topology, (str, os.PathLike)):
        ds[ATOM_DIM].encoding[UNIVERSE_ENCODING] = universe
    return ds


def _with_module_topology(b: _Builder, ds: xr.Dataset, module: ModuleTopology, n_atoms: int,
                          group: str) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of GROMACS' topology module (names, residues,
    masses, charges: :func:`h5mdx.engine.topology.module_coords`), and
    ``attrs["topology"]`` naming the file itself, where the module describes the group's
    atoms; ``ds`` as it is (noted) where it describes another number of atoms."""
    from h5mdx.engine.topology import module_coords

    if module.n_atoms != n_atoms:
        b.report.note(module.path, f"describes {module.n_atoms} atoms but {group} has "
                      f"{n_atoms} (GROMACS writes the whole system's topology beside a "
                      "group of selected atoms, without their indices)",
                      "no per-atom topology attached: pass topology= one of the group's "
                      "atoms")
        return ds
    ds = ds.assign_coords({k: xr.Variable((ATOM_DIM,), v, attrs)
                           for k, (v, attrs) in module_coords(module).items()
                           if k not in ds.variables})
    ds.attrs["topology"] = b.info.filename
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    if module.system_name:
        ds.attrs["system_name"] = module.system_name
    return ds


def _with_vmd_structure(b: _Builder, ds: xr.Dataset, n_atoms: int, group: str) -> xr.Dataset:
    """``ds`` with the per-atom coordinates of VMD's structure module (names, types,
    residues, segments, chains, masses, charges, radii, atomic numbers:
    :func:`h5mdx.format.vmd_structure.per_atom`), and ``attrs["topology"]`` naming the file
    itself, where the module describes any of the group's atoms; each property that
    does not fit the group is noted and left out."""
    from h5mdx.format.vmd_structure import COORD_ATTRS, bonds, per_atom

    structure = b.info.vmd_structure
    if structure is None:
        return ds
    for problem in b.info.problems:  # a dataset of the module the scan left out
        if _of_module(problem.path, structure.path):
            b.report.add(problem)
    coords = per_atom(structure, _fixed_species(ds.variables.get("species")), n_atoms, group,
                      b.report.note)
    bonds(structure, n_atoms, b.report.note)  # said here: the Universe's leave them out
    coords = {k: v for k, v in coords.items() if k not in ds.variables}
    if not coords:
        return ds
    ds = ds.assign_coords({k: xr.Variable((ATOM_DIM,), v, COORD_ATTRS.get(k, {}))
                           for k, v in coords.items()})
    ds.attrs["topology"] = b.info.filename
    ds[ATOM_DIM].attrs["topology"] = ds.attrs["topology"]
    return ds


def _fixed_species(species: xr.Variable | None) -> np.ndarray | None:
    """The ``species`` of a group's atoms, one per atom: a time series (ESPResSo writes
    them per frame, and VMD's plugin reads the first frame's) where its first and last
    frames agree (those two read); None otherwise."""
    if species is None or species.dims == (ATOM_DIM,):
        return None if species is None else species.values
    if species.ndim != 2 or species.dims[1] != ATOM_DIM \
            or not str(species.dims[0]).startswith(TIME_DIM) or not species.shape[0]:
        return None
    first, last = species[0].values, species[-1].values
    return first if np.array_equal(first, last) else None


def _of_module(path: str, module: str) -> bool:
    """Whether a problem at ``path`` concerns a dataset of VMD's structure module at
    ``module`` (a property the atoms then lack): the module's group (a link of one of its
    datasets), or one of the datasets it reads."""
    from h5mdx.format.vmd_structure import DATASETS

    parent, _, name = path.rpartition("/")
    return path == module or parent == module and name in DATASETS


#: the attribute on per-particle variables of a group whose particle order varies
PARTICLE_ORDER_ATTR = "particle_order"


def _mark_particle_order(b: _Builder, pg: ParticlesGroupInfo,
                         variables: dict[str, xr.Variable]) -> None:
    """Warn once, and mark the per-particle time series, where the group's ``id`` holds
    other particles in a slot in some frames (:attr:`ParticlesGroupInfo.order_varies`),
    or no particle (its fill value: :attr:`ParticlesGroupInfo.empty_slots`)."""
    if pg.order_varies is not None:
        first, other = pg.order_varies
        note = (f"as stored: the slots hold other particles in some frames (see {pg.path}/id, "
                f"frames {first} and {other})")
        said = (f"frames {first} and {other} hold other particles in the same slots (a writer "
                "that stores each frame in its own order, such as ESPResSo)")
    elif pg.empty_slots is not None:
        frame, count = pg.empty_slots
        fill = pg.elements["id"].fillvalue
        note = (f"as stored: some slots hold no particle (see {pg.path}/id, frame {frame}: "
                f"{count} slots of id {fill})")
        said = (f"frame {frame} has {count} slot(s) that hold no particle (id {fill}, its "
                "fill value: a writer that pads the particle axis, as ESPResSo++ does, or "
                "particles absent in some frames; their positions are placeholders)")
    else:
        return
    for name, var in variables.items():
        if name != "id" and TIME_DIM in var.dims and ATOM_DIM in var.dims:
            var.attrs[PARTICLE_ORDER_ATTR] = note
    warnings.warn(ParticleOrderWarning(
        f"{b.info.filename} [{pg.path}/id]: {said}; the elements are served as stored, slot "
        f"by slot, marked {PARTICLE_ORDER_ATTR!r}: put them in one order by id before "
        "per-atom analyses (ds.md.by_id(); the RMSD refuses them as they are)"),
        stacklevel=2)


def _plain_attrs(obj: h5py.HLObject, report: _Report) -> dict[str, Any]:
    """The attributes of ``obj`` as plain values: text decoded, object references as the
    paths they point to (``""`` for a null one), as an element's are; one of no value
    (HDF5's null dataspace) left out, one that h5py cannot read left out and said to
    ``report`` (it was in silence). They were served as h5py's ``Empty`` and
    ``Reference`` objects, which no writer takes."""
    out: dict[str, Any] = {}
    try:
        names = list(obj.attrs)
    except ATTRIBUTE_ERRORS as err:
        report.add(attribute_problem(str(obj.name), None, err))
        return out
    for name in names:
        try:
            value = obj.attrs[name]
        except ATTRIBUTE_ERRORS as err:
            report.add(attribute_problem(str(obj.name), name, err))
            continue
        if isinstance(value, h5py.Empty):
            continue
        if isinstance(value, h5py.Reference) or (
                isinstance(value, np.ndarray) and value.dtype.kind == "O"
                and any(isinstance(v, h5py.Reference) for v in value.ravel())):
            paths = reference_paths(obj, value)
            value = ([p or "" for p in paths.ravel()] if isinstance(paths, np.ndarray)
                     else paths or "")
        out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype.kind in "SO":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value.tolist()]
    return value


def _file_attrs(info: FileInfo) -> dict[str, Any]:
    attrs: dict[str, Any] = {"h5md_version": f"{info.version[0]}.{info.version[1]}"}
    for k, v in info.author.items():
        attrs[f"author_{k}"] = v
    for k, v in info.creator.items():
        attrs[f"creator_{k}"] = v
    for k, v in info.program.items():
        attrs[f"program_{k}"] = v
    if info.modules:
        attrs["h5md_modules"] = ", ".join(f"{name} {mod['version']}" if "version" in mod
                                          else name for name, mod in info.modules.items())
    attrs["source"] = info.filename
    return attrs


def _observables_dataset(b: _Builder, prefix: str, drop: set[str],
                         root: str = "observables") -> xr.Dataset:
    """The elements directly under ``/<root>/<prefix>`` (``root``: ``observables`` or
    ``connectivity``), with the group's own attributes (H5MD defines none; writers add
    theirs), as those of ``/parameters`` are: they were left out;
    ``h5md_group`` stays the engine's."""
    where = f"/{root}/{prefix}".rstrip("/")
    ds = _elements_dataset(b, b.info.elements_under(root, prefix), where, drop)
    with b.lock:
        grp = b.manager.acquire(needs_lock=False).get(where)
        own = _plain_attrs(grp, b.report) if isinstance(grp, h5py.Group) else {}
    ds.attrs = {**ds.attrs, **own, "h5md_group": where}
    return ds


def _elements_dataset(b: _Builder, elements: dict[str, ElementInfo], where: str,
                      drop: set[str]) -> xr.Dataset:
    """The Dataset of elements that are not per particle (observables, connectivity)."""
    info = b.info
    main = _main_sampling(elements.values(), None)
    variables: dict[str, xr.Variable] = {}
    coords: dict[str, xr.Variable] = {}
    if main is not None:
        coords.update(b.time_coords(main, TIME_DIM, where))
    for name, el in elements.items():
        if name in drop:
            continue
        first = _time_dims(b, el, name, main, coords)
        dims = first + _tail_dims(el, name, first, particles=False, dimension=None)
        if el.axis is not None:
            dims = _function_axis(b, el, name, dims, coords, variables)
        var = b.variable(el, dims)
        if var is not None and el.time_dependent and el.axis is None and \
                len(el.shape) == 3 and el.shape[1:] == (1, 1):
            # one number per frame in a (T, 1, 1) value: GROMACS' writer gives every
            # element three axes (its lambda), not a 1 x 1 tensor
            b.report.note(el.path, f"holds one number per frame in a value of shape "
                          f"{el.shape} (GROMACS' writer stores its scalar observables so)",
                          "served per frame, without the two axes of length 1")
            var = _without_axes(var, dims[1:])
        if var is not None:
            variables[name] = var
    attrs = _file_attrs(info)
    attrs["h5md_group"] = where
    return _dataset(variables, coords, attrs, info, where, b.report)


def _function_axis(b: _Builder, el: ElementInfo, name: str, dims: tuple[str, ...],
                   coords: dict[str, xr.Variable],
                   variables: dict[str, xr.Variable]) -> tuple[str, ...]:
    """``dims`` of an H5MD-NOMAD ensemble average or correlation function with its first
    dimension the axis it is a function of (``<name>_bins``, ``<name>_times``), added to
    ``coords``; its other datasets of that length (``errors``) added to ``variables`` as
    ``<name>_<dataset>``, in the value's unit where they have none (errors do not)."""
    assert el.axis is not None
    axis, values, unit = el.axis
    dim = f"{name}_{axis}"

    def variable(data: np.ndarray, unit: str | None, path: str) -> xr.Variable:
        scale, unit = b._unit(unit, path)
        data = data * scale if scale != 1.0 else data
        return xr.Variable((dim,), data, {"units": unit} if unit is not None else {},
                           {"source": b.info.filename, "h5md_path": path})

    coords[dim] = variable(values, unit, f"{el.path}/{axis}")
    for key, (data, unit) in el.beside.items():
        variables[f"{name}_{key}"] = variable(data, unit if unit is not None else el.unit,
                                              f"{el.path}/{key}")
    return (dim, *dims[1:])


def _dataset(variables: dict[str, xr.Variable], coords: dict[str, xr.Variable],
             attrs: dict[str, Any], info: FileInfo, where: str, report: _Report) -> xr.Dataset:
    """``xr.Dataset`` that reports elements with clashing dimension sizes as a format error.

    An element named as a coordinate or dimension (``time``, ``step``, ``atom``) is
    served as ``<name>_element`` (noted)."""
    taken = set(coords) | {d for v in (*variables.values(), *coords.values()) for d in v.dims}
    for name in [n for n in variables if n in taken]:
        new = f"{name}_element"
        report.note(variables[name].encoding.get("h5md_path", f"{where}/{name}"),
                    f"an element named {name!r} clashes with the coordinate or dimension of "
                    "that name", f"served as {new!r}")
        variables[new] = variables.pop(name)
    _same_time_blocks({**variables, **coords})
    try:
        return xr.Dataset(variables, coords, attrs)
    except ValueError as err:
        raise H5MDFormatError(
            info.filename, where, f"its elements do not fit together: {err}"
        ) from None


def _same_time_blocks(variables: Mapping[str, xr.Variable]) -> None:
    """One preferred block length per time axis, the largest variable's, for every variable
    on it (coordinates too): with ``chunks={}`` elements of other HDF5 chunks, and ``step``,
    had other blocks, and ``ds.chunks`` and ``xr.map_blocks`` raised."""
    block: dict[str, int] = {}
    for var in sorted(variables.values(), key=lambda v: v.size * v.dtype.itemsize,
                      reverse=True):
        for dim, n in (var.encoding.get("preferred_chunks") or {}).items():
            if is_time_dim(dim):
                block.setdefault(str(dim), int(n))
    for var in variables.values():
        on = [d for d in var.dims if d in block]
        if not on:
            continue
        pref = dict(var.encoding.get("preferred_chunks")
                    or {d: int(n) for d, n in zip(var.dims, var.shape, strict=True)})
        pref.update({d: block[d] for d in on})
        var.encoding["preferred_chunks"] = pref


#: Errors of h5py/numpy/xarray that a malformed file can still provoke while the
#: Dataset is assembled; they are reported as :class:`H5MDFormatError`.
_STRUCTURE_ERRORS = (KeyError, RuntimeError, TypeError, AttributeError, IndexError, OverflowError)


def _set_unlimited_dims(ds: xr.Dataset, growable: set[str]) -> None:
    """Serve the time axes of the elements in ``growable`` (H5MD paths) as xarray's netCDF
    engines serve unlimited dimensions, in ``ds.encoding["unlimited_dims"]``:
    ``ds.to_netcdf()`` then writes them unlimited, so that frames can be appended."""
    ds.encoding["unlimited_dims"] = {
        var.dims[0] for var in ds.variables.values()
        if var.dims and var.encoding.get("h5md_path") in growable}


def _drop_coordinates(ds: xr.Dataset, drop: set[str]) -> xr.Dataset:
    """``ds`` without the coordinates named in ``drop_variables`` (``step``, ``time``,
    ``species``...): built with the elements they index, dropped once built, as xarray's
    own engines drop any variable named."""
    names = [name for name in drop if name in ds.coords]
    return ds.drop_vars(names) if names else ds
