"""Attach an MDAnalysis topology to the ``atom`` dimension, and resolve selections.

MDAnalysis is imported lazily: opening files without ``topology=`` never needs it.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from h5mdx._optional import import_optional
from h5mdx.errors import H5MDConformanceWarning, TopologyError, user_stacklevel
from h5mdx.format.gromacs_topology import ModuleTopology
from h5mdx.format.h5md import FileInfo, is_h5md, open_h5md, scan
from h5mdx.format.schema import ATOM_DIM, INPUT_INDEX_LONG_NAME, TIME_DIM
from h5mdx.format.vmd_structure import STRUCTURE_PATH

__all__ = ["angstrom_frame", "box_dimensions", "coords_topology", "first_frame",
           "holds_topology", "indices_in", "input_indices", "length_scale", "load_universe",
           "mda_dimensions", "module_coords", "module_of", "module_universe",
           "needs_positions", "select_indices", "topology_coords", "vmd_universe",
           "with_frame"]

#: (coordinate name, AtomGroup attribute) pairs attached when the topology has them.
TOPOLOGY_ATTRS = (
    ("name", "names"),
    ("resname", "resnames"),
    ("resid", "resids"),
    ("segid", "segids"),
    ("type", "types"),
    ("mass", "masses"),
    ("charge", "charges"),
)


@lru_cache(maxsize=16)
def _universe(path: str, mtime: float, group: str | None = None) -> Any:
    mda = import_optional("MDAnalysis", "topologies and atom selections")
    unusable = ""
    if is_h5md(path):  # its own topology, where GROMACS wrote one (or VMD's structure)
        info = scan(path, deep_connectivity=False)  # the bonds are in /connectivity itself
        if info.topology is not None:
            universe = module_universe(info.topology, path)
            _add_bonds(universe, info, path)
            return universe
        if info.vmd_structure is not None:
            return vmd_universe(info, group)
        unusable = _unusable_module(info)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return mda.Universe(path)
        except Exception as err:  # MDAnalysis raises many kinds of errors
            if unusable:  # not MDAnalysis' words on an H5MD file (no 'trajectory' group)
                raise TopologyError(unusable) from err
            first = str(err).splitlines()[0] if str(err) else ""
            if isinstance(err, ValueError) and "isn't a valid topology format" in first:
                # a format MDAnalysis does not know (by the file's suffix): its message
                # went on for 8 more lines (the list of formats), with the --debug hint
                raise TopologyError(f"{path}: MDAnalysis cannot read this topology: "
                                    f"{first}; give a file of a topology format it reads "
                                    "(PSF, PDB, GRO, TPR, ...)") from err
            error = TopologyError(f"{path}: MDAnalysis cannot read this topology: {err}")
            error.unexpected = True
            raise error from err


def _unusable_module(info: FileInfo) -> str:
    """The message for an H5MD file whose topology module the scan left out (GROMACS'
    module with blocks that name no molecule type it holds, VMD's structure without a
    property): what was wrong with it, and what to pass; "" where it has none."""
    from h5mdx.format.gromacs_topology import MODULE_PATH

    said = [p for p in info.problems
            if p.path == MODULE_PATH or p.path.startswith((MODULE_PATH + "/",
                                                            STRUCTURE_PATH))]
    if not said:
        return ""
    return (f"{info.filename}: its topology cannot be read: {said[0].path}: "
            f"{said[0].message}; pass topology= a file MDAnalysis reads (the run's TPR, "
            "a PSF, GRO, PDB)")


#: The key of the ``atom`` coordinate's ``encoding`` that holds a Universe passed as
#: ``topology=`` (analyses use it, not a new one read from its file).
UNIVERSE_ENCODING = "universe"

#: The attribute of an ``atom`` coordinate that holds the atoms' indices in a topology
#: of more atoms (a file of selected atoms, found by its ``id``): that topology's count.
SUBSET_OF_ATTR = "subset_of"

#: ``attrs["topology"]`` of a Universe that was not read from a file.
IN_MEMORY = "<MDAnalysis Universe in memory>"


def topology_label(topology: Any, universe: Any) -> str:
    """What ``attrs["topology"]`` says: the absolute path of the topology file (of the
    Universe passed), so that it still names the file after a ``chdir`` or in another
    process; :data:`IN_MEMORY` for a Universe without a file."""
    if isinstance(topology, (str, os.PathLike)):
        path: Any = topology
    else:
        path = getattr(universe, "filename", None)
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            return IN_MEMORY
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def attached_topology(position: Any) -> Any:
    """The topology attached to a DataArray or Dataset at open: the Universe passed as
    ``topology=`` (held by its ``atom`` coordinate), else the topology file it names,
    else None."""
    atom = position.coords.get("atom") if hasattr(position, "coords") else None
    if atom is not None:
        universe = atom.encoding.get(UNIVERSE_ENCODING)
        if universe is not None:
            return universe
        if "topology" in atom.attrs:
            return atom.attrs["topology"]
    return position.attrs.get("topology")


def holds_topology(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an H5MD file holding its own topology (GROMACS' module or
    VMD's structure module, as :func:`load_universe` reads them); never raises."""
    try:
        if not is_h5md(path):
            return False
        info = scan(path, deep_connectivity=False)
        return info.topology is not None or info.vmd_structure is not None
    except Exception:  # noqa: BLE001 - a question, not a check: opening says what is wrong
        return False


def load_universe(topology: str | os.PathLike[str] | Any, group: str | None = None) -> Any:
    """An MDAnalysis Universe for ``topology`` (a path, or a Universe passed through).

    Parameters
    ----------
    topology : str, path-like or MDAnalysis.Universe
        Any topology file MDAnalysis reads (PSF, PDB, GRO, TPR, ...), or an H5MD file
        holding GROMACS' topology module (:func:`module_universe`) or VMD's structure
        module (:func:`vmd_universe`).
    group : str, optional
        The particles group the Universe is for (the positions' own): VMD's structure
        module holds properties per species of a group, so an H5MD topology of several
        groups gives the atoms of its group of this name, where it has one, else of its
        only group with positions. Other topologies ignore it.

    Returns
    -------
    MDAnalysis.Universe
    """
    if hasattr(topology, "select_atoms") and hasattr(topology, "atoms"):
        return topology
    if topology == IN_MEMORY:
        raise TopologyError(
            "the topology attached at open was a Universe without a file, and it is not "
            "held here (a copy of the Dataset that lost its 'atom' coordinate, or another "
            "process): pass topology=<the Universe> to this call")
    path = os.path.expanduser(os.fspath(topology))
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such topology file: {path!r}")
    return _universe(os.path.abspath(path), os.path.getmtime(path), group)


class AtomCountError(TopologyError):
    """A topology of another number of atoms than the trajectory's (a group of a tree
    opened with a topology that fits another of its groups is opened without it)."""

    def __init__(self, message: str, topology: str = "", n_topology: int = 0,
                 n_atoms: int = 0) -> None:
        super().__init__(message)
        self.topology, self.n_topology, self.n_atoms = topology, n_topology, n_atoms


def topology_coords(universe: Any, n_atoms: int, filename: str) -> dict[str, np.ndarray]:
    """Per-atom arrays of the topology, checked against the trajectory's atom count.

    Parameters
    ----------
    universe : MDAnalysis.Universe
        The topology.
    n_atoms : int
        Number of atoms in the trajectory.
    filename : str
        The trajectory file (for the error message).

    Returns
    -------
    dict
        Coordinate name to array of length ``n_atoms``.

    Raises
    ------
    AtomCountError
        If the atom counts differ (a :class:`~h5mdx.errors.TopologyError`).
    """
    n_top = len(universe.atoms)
    if n_top != n_atoms:
        raise AtomCountError(
            f"{filename}: the topology {_name(universe)} has {n_top} atoms but the trajectory "
            f"has {n_atoms}; they must describe the same system", _name(universe), n_top, n_atoms)
    coords: dict[str, np.ndarray] = {}
    for coord, attr in TOPOLOGY_ATTRS:
        try:
            values = getattr(universe.atoms, attr)
        except (AttributeError, Exception):  # NoDataError subclasses ValueError/AttributeError
            continue
        values = np.asarray(values)
        if values.dtype == object:
            values = values.astype(str)
        coords[coord] = values
    return coords


#: (coordinate, per-atom array of :meth:`ModuleTopology.per_atom`) served from GROMACS'
#: topology module, in this order: MDAnalysis' names where it has one (as its TPR parser
#: numbers them: ``resid`` 1..N across molecules, ``segid`` ``seg_<block>_<moltype>``).
MODULE_COORDS = (("name", "name"), ("resname", "resname"), ("resid", "resid"),
                 ("segid", "block"), ("mass", "mass"), ("charge", "charge"),
                 ("species", "species"), ("moltype", "moltype"), ("molnum", "molnum"))

_MODULE_ATTRS = {"species": {"long_name": "atomic number"},
                 "molnum": {"long_name": "0-based molecule number"},
                 "moltype": {"long_name": "molecule type"},
                 "resid": {"long_name": "1-based residue number"}}


def module_coords(module: ModuleTopology) -> dict[str, tuple[np.ndarray, dict[str, str]]]:
    """Per-atom coordinates (array, attributes) of GROMACS' topology module, named as
    MDAnalysis names a TPR file's; MDAnalysis is not needed.

    Parameters
    ----------
    module : ModuleTopology
        The module, as :func:`h5mdx.format.h5md.scan` read it.

    Returns
    -------
    dict
        Coordinate name to (array of ``module.n_atoms``, attributes: ``units`` of
        ``mass`` and ``charge``).
    """
    per = module.per_atom()
    segids = np.array([f"seg_{i}_{name}" for i, (name, _) in enumerate(module.blocks)],
                      dtype=str)
    per["block"] = segids[per["block"]] if segids.size else per["block"].astype(str)
    out: dict[str, tuple[np.ndarray, dict[str, str]]] = {}
    for coord, key in MODULE_COORDS:
        if key in per:
            attrs = dict(_MODULE_ATTRS.get(coord, {}))
            if coord in module.units:
                attrs["units"] = module.units[coord]
            out[coord] = (per[key], attrs)
    return out


def module_of(coords: Mapping[str, Any], system_name: str = "") -> ModuleTopology | None:
    """GROMACS' topology module of atoms described by MDAnalysis-named per-atom arrays,
    where it reads back exactly as they are (:func:`module_coords`); None otherwise.

    Parameters
    ----------
    coords : mapping
        ``name``, ``resname``, ``resid``, ``segid``, ``mass``, ``charge``, ``moltype``,
        ``molnum`` (all needed), ``species`` (atomic numbers, optional): a TPR file's
        atoms as MDAnalysis reads them, or the coordinates the engine serves from a
        module.
    system_name : str, optional
        The module's ``system_name``.

    Returns
    -------
    ModuleTopology or None
        None where an array is missing, or the module would not read back as given: a
        topology without GROMACS' molecule types, or a selection of atoms that renumbers
        their residues or molecules.
    """
    from h5mdx.format.gromacs_topology import module_from_atoms

    need = ("name", "resname", "resid", "segid", "mass", "charge", "moltype", "molnum")
    if any(coords.get(k) is None for k in need):
        return None
    given = {k: np.asarray(coords[k]) for k in (*need, "species") if coords.get(k) is not None}
    for k in ("name", "resname", "segid", "moltype"):
        given[k] = given[k].astype(str)
    molnum, resid = given["molnum"], given["resid"]
    resindex = np.cumsum(np.r_[True, (molnum[1:] != molnum[:-1]) | (resid[1:] != resid[:-1])])
    per_atom: dict[str, np.ndarray] = {k: given[k] for k in ("name", "resname", "mass", "charge", "species")
                if k in given}
    module = module_from_atoms(per_atom, given["moltype"], molnum, resindex, system_name)
    if module is None:
        return None
    back = module_coords(module)
    if any(not np.array_equal(back[k][0], v.astype(back[k][0].dtype))
           for k, v in given.items()):
        return None
    return module


def module_universe(module: ModuleTopology, filename: str) -> Any:
    """An MDAnalysis Universe (no trajectory) of GROMACS' topology module: names,
    residues, segments (one per molecule block), masses, charges, elements, molecule
    types and numbers, as MDAnalysis reads them from the run's TPR file.

    Parameters
    ----------
    module : ModuleTopology
        The module.
    filename : str
        The H5MD file (the Universe's ``filename``, for labels and messages).

    Returns
    -------
    MDAnalysis.Universe
    """
    mda = import_optional("MDAnalysis", "topologies and atom selections")
    coords = {k: v for k, (v, _) in module_coords(module).items()}
    n = module.n_atoms
    if n == 0:
        raise TopologyError(f"{filename}: {module.path} describes no atom")
    molnum = coords["molnum"]
    starts = np.ones(n, dtype=bool)
    starts[1:] = molnum[1:] != molnum[:-1]
    if "resid" in coords:
        starts[1:] |= coords["resid"][1:] != coords["resid"][:-1]
    first = np.flatnonzero(starts)
    segids = coords["segid"]
    seg_names = list(dict.fromkeys(segids[first].tolist()))
    seg_index = {name: i for i, name in enumerate(seg_names)}
    universe = mda.Universe.empty(
        n, n_residues=first.size, n_segments=len(seg_names),
        atom_resindex=np.cumsum(starts) - 1,
        residue_segindex=np.array([seg_index[s] for s in segids[first].tolist()]),
        trajectory=False)
    for attr, coord, level in (("names", "name", "atom"), ("masses", "mass", "atom"),
                               ("charges", "charge", "atom"),
                               ("resnames", "resname", "residue"),
                               ("resids", "resid", "residue"), ("resnums", "resid", "residue"),
                               ("moltypes", "moltype", "residue"),
                               ("molnums", "molnum", "residue")):
        if coord in coords:
            values = coords[coord] if level == "atom" else coords[coord][first]
            universe.add_TopologyAttr(attr, values)
    if "resid" not in coords:
        universe.add_TopologyAttr("resids", np.arange(1, first.size + 1))
    universe.add_TopologyAttr("segids", np.array(seg_names, dtype=object))
    if "species" in coords:  # MDAnalysis' TPR parser: "" for no element (virtual sites)
        symbols = _z2symb()
        universe.add_TopologyAttr("elements", np.array(
            [symbols.get(int(z), "") for z in coords["species"].tolist()], dtype=object))
    universe.filename = filename
    return universe


def input_indices(ds: Any, universe: Any, n_atoms: int, filename: str,
                   group: str) -> np.ndarray | None:
    """The atoms' indices in ``universe`` where a file holds a selection of its atoms.

    Parameters
    ----------
    ds : xarray.Dataset
        The file's particles group as opened (its ``id`` variable).
    universe : MDAnalysis.Universe or MDAnalysis.AtomGroup
        The topology passed.
    n_atoms : int
        The group's atom count.
    filename, group : str
        The file (or store) and the group, for the messages.

    Returns
    -------
    numpy.ndarray or None
        The ``id`` of the group, where ``universe`` is a Universe of more atoms and the
        ``id`` is h5mdx's: distinct 0-based indices into it
        (``h5mdx.format.schema.INPUT_INDEX_LONG_NAME``), or of as many atoms and such an
        ``id`` that orders them otherwise (``ds.isel(atom=perm).md.to_h5md``). None
        otherwise (the same system in its order, an AtomGroup, no ``id``): the caller
        compares the counts.

    Raises
    ------
    TopologyError
        Where the ``id`` is another program's (particle tags, not indices), or holds
        indices beyond the topology, or the topology's atoms there have other masses
        than the file's: each says how to pass the atoms meant.
    """
    n_top = len(universe.atoms)
    if n_top < n_atoms or universe is not getattr(universe, "universe", universe):
        return None  # another system (or an AtomGroup: its own atoms, checked after)
    var = ds.variables.get("id")
    if var is None or var.dims != (ATOM_DIM,) or var.dtype.kind not in "iu":
        return None
    mass = ds.variables.get("mass")
    return indices_in(universe, n_atoms, var.values, var.attrs.get("long_name"),
                      mass.values if mass is not None and mass.dims == (ATOM_DIM,) else None,
                      filename, group)


#: How to pass the atoms of a file of selected atoms, from Python and on the command line
PASS_ATOMS = ("pass topology=u.atoms[ids] (an MDAnalysis AtomGroup of the file's atoms, in "
              "its order) or, on the command line, --topology a file of those atoms alone "
              "(u.atoms[ids].write('atoms.pdb'))")


def indices_in(universe: Any, n_atoms: int, ids: Any, long_name: Any, masses: Any,
               filename: str, group: str) -> np.ndarray | None:
    """The rules of :func:`input_indices` on a file's arrays, read by the caller (the MPI
    program reads them with h5py, without xarray).

    Parameters
    ----------
    universe : MDAnalysis.Universe or MDAnalysis.AtomGroup
        The topology passed.
    n_atoms : int
        The group's atom count.
    ids : array-like of int or None
        The group's ``id`` (one per atom), or None where it has none.
    long_name : str or None
        The ``id``'s ``long_name`` attribute.
    masses : array-like of float or None
        The group's ``mass`` (one per atom), or None.
    filename, group : str
        The file and the group, for the messages.

    Returns
    -------
    numpy.ndarray or None
        As :func:`input_indices`.

    Raises
    ------
    TopologyError
        As :func:`input_indices`.
    """
    n_top = len(universe.atoms)
    if n_top < n_atoms or universe is not getattr(universe, "universe", universe):
        return None
    if ids is None or np.asarray(ids).dtype.kind not in "iu" or np.shape(ids) != (n_atoms,):
        return None
    ids = np.asarray(ids, dtype=np.int64)
    if n_top == n_atoms and (long_name != INPUT_INDEX_LONG_NAME
                             or np.array_equal(ids, np.arange(n_atoms))
                             or not np.array_equal(np.sort(ids), np.arange(n_atoms))):
        return None  # the same system in its own order (or other labels): counts compared
    said = f"{filename}: the topology {_name(universe)} has {n_top} atoms but " \
           f"{group} has {n_atoms}"
    if long_name != INPUT_INDEX_LONG_NAME:
        raise TopologyError(
            f"{said}; its id ({ids[:3].tolist()}...) does not say which of the "
            "topology's atoms they are (h5mdx writes 0-based indices for a selection); "
            f"where they are such indices, {PASS_ATOMS}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n_top
                     or np.unique(ids).size != ids.size):
        raise TopologyError(
            f"{said}; its id, the selected atoms' indices in the system they come from, "
            f"holds {int(ids.min())}..{int(ids.max())}"
            f"{'' if np.unique(ids).size == ids.size else ', some twice'}: not atoms of "
            "this topology; pass the whole system's topology")
    _check_masses(masses, universe.atoms[ids], f"{filename}: the atoms of {group}'s id in "
                  f"the topology {_name(universe)}")
    return ids


def _check_masses(masses: Any, atoms: Any, said: str) -> None:
    """Refuse a topology whose atoms' masses are not the file's own (``masses``, where both
    have them, to 0.1 u): another system's, whose atoms an ``id`` would pair by chance."""
    if masses is None:
        return
    try:
        theirs = np.asarray(atoms.masses, dtype=np.float64)
    except Exception:  # noqa: BLE001 - MDAnalysis' NoDataError: a topology without masses
        return
    ours = np.asarray(masses, dtype=np.float64)
    off = np.flatnonzero(~(np.abs(ours - theirs) <= 0.1))
    if off.size:
        i = int(off[0])
        raise TopologyError(
            f"{said} have other masses than the file's: {off.size} of {ours.size} atoms "
            f"differ (atom {int(atoms.indices[i])}: {theirs[i]:g} u in the topology, "
            f"{ours[i]:g} u in the file): another system's topology? Where it is the right "
            f"one, {PASS_ATOMS}")


def _add_bonds(universe: Any, info: FileInfo, path: str) -> None:
    """The bonds of ``/connectivity/bonds`` (GROMACS: pairs of 0-based atom indices of the
    whole system) added to the Universe of the file's topology module; where they are not
    such pairs, none, with one :class:`~h5mdx.errors.H5MDConformanceWarning`."""
    el = info.connectivity.get("bonds")
    if el is None:
        return
    n = len(universe.atoms)
    problem = None
    if el.time_dependent or len(el.shape) != 2 or el.shape[1] != 2 or el.dtype.kind not in "iu":
        problem = (f"is not a (bonds, 2) array of atom indices (shape {el.shape}, "
                   f"{el.dtype}{', time-dependent' if el.time_dependent else ''})")
    else:
        with open_h5md(path) as f:
            pairs = np.asarray(f[el.value_path][()], dtype=np.int64)
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
            problem = (f"holds atom indices {int(pairs.min())}..{int(pairs.max())}, beyond "
                       f"the {n} atoms of {info.topology.path if info.topology else 'it'}")
    if problem is not None:
        warnings.warn(H5MDConformanceWarning(
            f"{path} [{el.path}]: {problem}; the topology's bonds left out"), stacklevel=4)
        return
    universe.add_TopologyAttr("bonds", [tuple(p) for p in pairs.tolist()])


def vmd_universe(info: FileInfo, group: str | None = None) -> Any:
    """An MDAnalysis Universe (no trajectory) of a particles group from VMD's structure
    module: names, types, residues (by ``resid``), segments, chains, masses, charges,
    radii, elements and bonds, where the module has them.

    Parameters
    ----------
    info : FileInfo
        The file, as :func:`h5mdx.format.h5md.scan` read it.
    group : str, optional
        The particles group, where the file has one of this name; else the only one with
        positions.

    Returns
    -------
    MDAnalysis.Universe

    Raises
    ------
    TopologyError
        Where the file has no group ``group`` and several groups have positions, or the
        module describes none of the group's atoms.
    """
    from h5mdx.format.vmd_structure import bonds, per_atom

    structure = info.vmd_structure
    if structure is None:
        raise TopologyError(f"{info.filename} holds no {STRUCTURE_PATH}")
    name = _vmd_group(info, group)
    pg = info.particles[name]
    n = _group_atoms(pg)
    species = _group_species(info, pg.elements.get("species"))

    def ignore(*_: Any) -> None:  # the open that attached them warned already
        return None

    coords = per_atom(structure, species, n, pg.path, ignore)
    if not coords:
        raise TopologyError(f"{info.filename}: {STRUCTURE_PATH} describes none of the {n} atoms "
                            f"of {pg.path}; pass topology= a file MDAnalysis reads")
    universe = coords_universe(coords, n, info.filename)
    pairs = bonds(structure, n, ignore)
    if pairs is not None and len(pairs):
        universe.add_TopologyAttr("bonds", [tuple(p) for p in pairs.tolist()])
    return universe


def _group_species(info: FileInfo, el: Any) -> np.ndarray | None:
    """A particles group's ``species`` element, one per atom: per frame (ESPResSo's,
    also with a trailing axis of length 1) the first frame's where the last frame's
    agree, as the h5md engine serves the structure module's properties."""
    if el is None:
        return None
    if not el.time_dependent:
        if el.data is not None:
            return np.asarray(el.data)
        with open_h5md(info.filename) as f:
            return np.asarray(f[el.value_path][()])
    if len(el.shape) not in (2, 3) or not el.shape[0] or (len(el.shape) == 3
                                                            and el.shape[2] != 1):
        return None
    with open_h5md(info.filename) as f:
        first, last = (np.asarray(f[el.value_path][i]).reshape(-1) for i in (0, -1))
    return first if np.array_equal(first, last) else None


def _vmd_group(info: FileInfo, group: str | None) -> str:
    """The name of the particles group ``group``, where the file has it, else of the only
    one with positions."""
    name = None if group is None else info.particles_group(group)
    if name is not None:
        return name
    with_positions = [n for n, pg in info.particles.items() if "position" in pg.elements]
    if len(with_positions) != 1:
        none_named = "" if group is None else f"none named {group!r}, and "
        raise TopologyError(
            f"{info.filename}: {STRUCTURE_PATH} describes the atoms of a particles group, "
            f"{none_named}{len(with_positions)} groups have positions "
            f"({', '.join(with_positions) or 'none'}): open one with group= and select "
            "there, or pass topology= a file MDAnalysis reads")
    return with_positions[0]


def _group_atoms(pg: Any) -> int:
    """The atom count of a particles group (its positions', else its species')."""
    for key in ("position", "species"):
        el = pg.elements.get(key)
        if el is not None and el.shape:
            return int(el.shape[1] if el.time_dependent and len(el.shape) > 1
                       else el.shape[0])
    return 0


def coords_universe(coords: Mapping[str, np.ndarray], n: int, filename: str) -> Any:
    """An MDAnalysis Universe (no trajectory) of ``n`` atoms from per-atom arrays named as
    the coordinates the engine serves (``name``, ``type``, ``resname``, ``resid``,
    ``segid``, ``chainID``, ``mass``, ``charge``, ``radius``; ``atomicnumber`` as
    ``elements``). A residue
    starts where ``resid``, ``resname`` or ``segid`` changes (as MDAnalysis' PDB parser
    splits them: residues of one number and insertion codes; one residue without any);
    a segment per ``segid`` (one, ``SYSTEM``, without)."""
    mda = import_optional("MDAnalysis", "topologies and atom selections")
    starts = np.zeros(n, dtype=bool)
    starts[:1] = True
    for key in ("resid", "resname", "segid"):
        if key in coords:
            starts[1:] |= coords[key][1:] != coords[key][:-1]
    first = np.flatnonzero(starts)
    segids = coords["segid"][first] if "segid" in coords else np.full(first.size, "SYSTEM")
    seg_names = list(dict.fromkeys(segids.tolist()))
    seg_index = {s: i for i, s in enumerate(seg_names)}
    universe = mda.Universe.empty(
        n, n_residues=first.size, n_segments=len(seg_names),
        atom_resindex=np.cumsum(starts) - 1,
        residue_segindex=np.array([seg_index[s] for s in segids.tolist()], dtype=np.int64),
        trajectory=False)
    for attr, key in _ATOM_ATTRS:
        if key in coords:
            universe.add_TopologyAttr(attr, coords[key])
    if "atomicnumber" in coords and coords["atomicnumber"].dtype.kind in "iu":
        symbols = _z2symb()
        universe.add_TopologyAttr("elements", np.array(
            [symbols.get(int(z), "") for z in coords["atomicnumber"].tolist()], dtype=object))
    resids = coords["resid"][first] if "resid" in coords else np.arange(1, first.size + 1)
    universe.add_TopologyAttr("resids", resids)
    universe.add_TopologyAttr("resnums", resids)
    if "resname" in coords:
        universe.add_TopologyAttr("resnames", coords["resname"][first])
    universe.add_TopologyAttr("segids", np.array(seg_names, dtype=object))
    universe.filename = filename
    return universe


#: The per-atom coordinates ``coords_universe`` takes as they are: (AtomGroup attribute,
#: coordinate name).
_ATOM_ATTRS = (("names", "name"), ("types", "type"), ("masses", "mass"),
               ("charges", "charge"), ("radii", "radius"), ("chainIDs", "chainID"))

#: Every per-atom coordinate ``coords_universe`` reads, and so
#: :func:`coords_topology` builds a Universe from: those above, the residues' and
#: segments', and atomic numbers (as elements).
UNIVERSE_COORDS = (*(key for _, key in _ATOM_ATTRS), "resname", "resid", "segid",
                   "atomicnumber")


def coords_topology(position: Any) -> Any:
    """A Universe (no trajectory) of the atoms of ``position`` built from its own per-atom
    coordinates (``name``, ``resname``, ``resid``, ...; see ``coords_universe``), or
    None where it has no ``name`` coordinate.

    A Zarr copy of an H5MD file (``h5mdx convert OUT.zarr``, ``ds.md.to_zarr``) holds
    its atoms' names as coordinates and no topology: selections are made in these. The
    Universe's atoms are the positions' own, in their order (index ``i``: position ``i``
    along ``atom``).
    """
    coords = {key: np.asarray(position.coords[key].values) for key in UNIVERSE_COORDS
              if key in position.coords and position.coords[key].dims == (ATOM_DIM,)}
    if "name" not in coords:
        return None
    for key, values in coords.items():  # MDAnalysis keeps text as Python strings
        if values.dtype.kind in "US":
            coords[key] = values.astype(str).astype(object)
    source = position.encoding.get("source") or "the positions' coordinates"
    return coords_universe(coords, int(position.sizes[ATOM_DIM]), str(source))


def _z2symb() -> dict[int, str]:
    """MDAnalysis' element symbols by atomic number."""
    try:
        from MDAnalysis.guesser.tables import Z2SYMB  # MDAnalysis >= 2.8
    except ImportError:  # pragma: no cover - older MDAnalysis
        from MDAnalysis.topology.tables import Z2SYMB
    return dict(Z2SYMB)


def _missing_attribute(err: Exception) -> str | None:
    """The atom property a selection needed and the Universe lacks, from MDAnalysis'
    error (``'Topology' object has no attribute 'types'``, a NoDataError's ``does not
    contain resid information``); None for other errors (a selection's syntax)."""
    text = str(err)
    if isinstance(err, AttributeError) and "'Topology' object" in text:
        found = re.search(r"has no attribute '(\w+)'", text)
    else:
        found = re.search(r"does not contain (\w+) information", text)
    return found.group(1) if found else None


def _name(universe: Any) -> str:
    return repr(getattr(universe, "filename", None) or "given")


#: The words of MDAnalysis' errors for a selection by position on atoms without them: a
#: distance selection (``around``, ``point``, ``sphzone``, ``isolayer``: "AtomGroup has no
#: attribute dimensions"), ``cyzone`` ("This Universe has no coordinates"), ``prop z``
#: ("does not contain positions information").
_NO_POSITIONS = ("attribute dimensions", "has no coordinates", "positions information")

#: A frame for a selection by position: the positions in Angstrom of the atoms of the
#: topology (of an AtomGroup: in its order), NaN for atoms without one, and MDAnalysis'
#: box ``[a, b, c, alpha, beta, gamma]`` or None (distances then not periodic).
Frame = tuple[np.ndarray, Any]


def needs_positions(err: Exception) -> bool:
    """Whether MDAnalysis' error says that a selection needs the atoms' positions (a
    selection by distance or ``prop x``/``y``/``z`` on a Universe without a trajectory)."""
    return any(words in str(err) for words in _NO_POSITIONS)


def _bare(universe: Any) -> Any:
    """``universe`` (or an AtomGroup) without its trajectory: a selection on it fails
    where it needs positions instead of taking those of the frame the Universe is at."""
    whole = getattr(universe, "universe", universe)
    if not hasattr(whole, "_topology") or not hasattr(whole, "trajectory"):
        return universe
    bare = _new_universe(whole._topology)
    return bare if universe is whole else bare.atoms[universe.indices]


def _new_universe(topology: Any, *args: Any, **kwargs: Any) -> Any:
    """A Universe of an MDAnalysis ``Topology`` that guesses nothing (no types or masses
    the topology does not hold, MDAnalysis >= 2.8), without MDAnalysis' notes."""
    mda = import_optional("MDAnalysis", "topologies and atom selections")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return mda.Universe(topology, *args, to_guess=(), **kwargs)
        except TypeError:  # pragma: no cover - MDAnalysis 2.7 has no to_guess
            return mda.Universe(topology, *args, **kwargs)


def length_scale(unit: str, to: str, what: str) -> float:
    """The factor that takes lengths in ``unit`` to ``to`` (1 where they are the same)."""
    if unit == to:
        return 1.0
    from h5mdx.format.units import conversion

    have, want = conversion(unit), conversion(to)
    if have is None or want is None or have[1] != "Angstrom" or want[1] != "Angstrom":
        raise ValueError(f"{what} is in {unit!r} and the positions in {to!r}: h5mdx cannot "
                         "convert one to the other as lengths")
    return have[0] / want[0]


def mda_dimensions(edges: np.ndarray) -> np.ndarray | None:
    """MDAnalysis' box ``[a, b, c, alpha, beta, gamma]`` of one frame's box edges.

    Parameters
    ----------
    edges : numpy.ndarray
        The edges in Angstrom: the three box vectors, ``(3, 3)`` (a triclinic box), or
        the three edge lengths, ``(3,)`` (a rectangular box).

    Returns
    -------
    numpy.ndarray or None
        The six numbers MDAnalysis' ``dimensions`` holds; None where the edges are of
        another shape or not usable (zero or NaN lengths).
    """
    if edges.shape == (3, 3):
        from MDAnalysis.lib.mdamath import triclinic_box

        return mda_box(triclinic_box(*edges))
    return mda_box(np.r_[edges, 90.0, 90.0, 90.0] if edges.shape == (3,) else None)


def mda_box(dims: Any) -> np.ndarray | None:
    """MDAnalysis' box, None where it is none or not usable (zero or NaN edges)."""
    if dims is None:
        return None
    dims = np.asarray(dims, dtype=np.float64)
    return dims if dims.shape == (6,) and np.all(dims[:3] > 0) else None


def box_dimensions(edges: Any) -> np.ndarray | None:
    """MDAnalysis' box of one frame's ``box_edges`` (a DataArray, in its ``units``): None
    where there is none, its boundary is not periodic, or its edges are not usable
    (zero, NaN)."""
    if edges is not None and TIME_DIM in edges.dims:  # a frame's box: one time, or none
        edges = edges.isel({TIME_DIM: 0}) if edges.sizes[TIME_DIM] == 1 else None
    if edges is None:
        return None
    boundary = edges.attrs.get("boundary")
    if boundary is not None and not any(str(b) == "periodic" for b in np.ravel(boundary)):
        return None
    values = np.asarray(edges.values, dtype=np.float64)
    unit = edges.attrs.get("units")
    if unit is not None:
        values = values * length_scale(str(unit), "Angstrom", "the box")
    return mda_dimensions(values)


def angstrom_frame(xyz: np.ndarray, unit: Any, ids: np.ndarray, n: int,
                   edges: Any, what: str = "the reference") -> Frame:
    """The ``Frame`` of a selection by position: the positions ``xyz`` (in ``unit``;
    without one, taken to be Angstrom) of the topology's atoms ``ids`` among its ``n``
    (NaN for the others), in Angstrom, with the box of one frame's ``box_edges``
    (:func:`box_dimensions`); ``what`` names the positions where their unit is no
    length."""
    full = np.full((n, 3), np.nan)
    full[ids] = xyz * length_scale(str(unit), "Angstrom", what) if unit is not None else xyz
    return full, box_dimensions(edges)


def warn_unplaced(xyz: np.ndarray, ids: np.ndarray, where: str, stacklevel: int) -> None:
    """Say so where atoms have no position (NaN) in the frame a selection by position is
    made on: no distance or coordinate of theirs matches, so the selection left them out
    in silence, whatever their positions in the other frames."""
    unplaced = np.flatnonzero(np.isnan(xyz).any(axis=1)) if xyz.size else np.empty(0, int)
    if unplaced.size:
        first = ", ".join(str(int(i)) for i in ids[unplaced][:5])
        warnings.warn(
            f"a selection by position is made on {where}, where {unplaced.size} of its "
            f"{xyz.shape[0]} atoms have no position (NaN: absent particles, or a fill "
            f"value; atom indices {first}{', ...' if unplaced.size > 5 else ''}): the "
            "selection leaves them out; take a reference frame where they are present, or "
            "select them by index", RuntimeWarning, stacklevel=stacklevel + 1)


def first_frame(ds: Any, ids: np.ndarray, n: int, where: str, dropped: bool = False,
                box: Any = None) -> Frame:
    """The frame a selection by position at open (``select=``) is made on: the first
    frame of the positions of ``ds`` as the file holds it (its box that frame's), in
    Angstrom, of the topology's atoms ``ids`` among its ``n``; the topology's own
    positions (a Universe's current frame) are never used. ``dropped``: the group's
    positions were left out with ``drop_variables`` (said so, rather than that there are
    none); ``box``: the group's box edges, where ``drop_variables`` left them out of
    ``ds`` (the selection is made in the file's box all the same).

    Raises
    ------
    TopologyError
        Where ``ds`` has no positions, or none in any frame.
    """
    position = ds.variables.get("position")
    if dropped and position is None:
        raise TopologyError(f"{where}: a selection by position is made on the first frame "
                            "of the positions, and drop_variables left them out: keep "
                            "'position' (it is read only when used; drop it after the "
                            "open), or select the atoms by their properties or indices")
    if position is None or ATOM_DIM not in position.dims:
        raise TopologyError(f"{where}: a selection by position is made on the first frame "
                            "of the positions, and there are none: select the atoms by "
                            "their properties or indices")
    box = ds.variables.get("box_edges") if box is None else box
    if TIME_DIM in position.dims:
        if position.sizes[TIME_DIM] == 0:
            raise TopologyError(f"{where}: a selection by position is made on the first "
                                "frame of the positions, and they hold no frame: select "
                                "the atoms by their properties or indices")
        position = position.isel({TIME_DIM: 0})
        if box is not None and TIME_DIM in box.dims:
            box = box.isel({TIME_DIM: 0})
    xyz = np.asarray(position.transpose(ATOM_DIM, ...).values, dtype=np.float64)
    warn_unplaced(xyz, ids, f"the first frame of {where}",
                  stacklevel=user_stacklevel(("h5mdx", "xarray")))
    try:
        return angstrom_frame(xyz, position.attrs.get("units"), ids, n, box,
                              "the first frame")
    except ValueError as err:  # a unit that is no length h5mdx converts
        raise TopologyError(f"{where}: a selection by position is made in Angstrom, and "
                            f"h5mdx cannot convert these positions to it ({err}): select "
                            "the atoms by their properties or indices") from err


def with_frame(universe: Any, frame: Frame) -> Any:
    """A new Universe of the topology of ``universe`` (a Universe or AtomGroup, left as
    it is) at one frame (MDAnalysis' ``MemoryReader``): the atoms of ``universe`` that
    have a position in ``frame``, as an AtomGroup of that Universe."""
    from MDAnalysis.coordinates.memory import MemoryReader

    xyz, box = frame
    whole = getattr(universe, "universe", universe)
    group = universe.atoms
    full = np.zeros((len(whole.atoms), 3), dtype=np.float32)
    present = ~np.isnan(xyz).any(axis=1)
    full[group.indices[present]] = xyz[present]
    new = _new_universe(whole._topology, full[None], format=MemoryReader,
                        dimensions=None if box is None else np.asarray(box, np.float32))
    return new.atoms[group.indices[present]]


def select_indices(universe: Any, selection: str, filename: str | None = None,
                   frame: Any = None) -> np.ndarray:
    """0-based atom indices of an MDAnalysis selection.

    Parameters
    ----------
    universe : MDAnalysis.Universe or MDAnalysis.AtomGroup
        The topology. An AtomGroup's atoms are the file's, in the group's order: the
        indices are positions in the group, not the indices of its Universe.
    selection : str
        An MDAnalysis selection string, e.g. ``"name CA"``.
    filename : str, optional
        The trajectory file (for the error message).
    frame : callable, optional
        Called without arguments where the selection is by position (``around``,
        ``point``, ``sphzone``, ``cyzone``, ``isolayer``, ``prop z``): the frame to make
        it on (``Frame``: positions in Angstrom, the box or None). The selection is
        then made on a new Universe at that frame (``universe`` is left as it is), of the
        atoms with a position there; a Universe's own trajectory is never used. Without
        it a selection by position is a TopologyError.

    Returns
    -------
    numpy.ndarray
        Sorted int64 indices.

    Raises
    ------
    TopologyError
        If the selection is invalid or matches no atom.
    """
    where = f"{filename}: " if filename else ""
    try:
        group = (universe if frame is None else _bare(universe)).select_atoms(selection)
    except Exception as err:
        if frame is not None and needs_positions(err):
            group = _select_on_frame(universe, selection, frame(), where)
        else:
            _selection_error(err, universe, selection, where, frame is None)
    if len(group) == 0:
        raise TopologyError(f"{where}the selection {selection!r} matches no atom")
    indices = np.asarray(group.indices, dtype=np.int64)
    if hasattr(universe, "universe") and universe is not universe.universe:
        # an AtomGroup (a subset file's atoms): the selected atoms' places in it (their
        # Universe's indices matched a few of the file's atoms by chance)
        order = np.asarray(universe.indices, dtype=np.int64)
        sorter = np.argsort(order, kind="stable")
        indices = sorter[np.searchsorted(order, indices, sorter=sorter)]
    return np.sort(indices)


def _select_on_frame(universe: Any, selection: str, frame: Frame, where: str) -> Any:
    """The atoms a selection by position picks at ``frame`` (see :func:`with_frame`)."""
    atoms = with_frame(universe, frame)
    try:
        return atoms.select_atoms(selection)
    except Exception as err:  # noqa: BLE001 - MDAnalysis' SelectionError and others
        _selection_error(err, universe, selection, where, False)
        raise  # pragma: no cover - _selection_error raises


def _selection_error(err: Exception, universe: Any, selection: str, where: str,
                     frameless: bool) -> None:
    """Raise the TopologyError that says why MDAnalysis refused ``selection``."""
    if frameless and needs_positions(err):
        raise TopologyError(
            f"{where}the selection {selection!r} selects by position, and there is no frame "
            "to make it on here: select after opening (ds.md.rmsd(select=...) and "
            "h5mdx rmsd --select make it on the reference frame), or pass the atoms' "
            "indices (an AtomGroup)") from err
    missing = _missing_attribute(err)
    if missing is not None:  # a selection by what this topology does not hold
        raise TopologyError(
            f"{where}the selection {selection!r} needs the atoms' {missing}, which the "
            f"topology {_name(universe)} does not hold; pass topology= a file that does "
            "(a PSF, PDB, the run's TPR)") from err
    raise TopologyError(f"{where}invalid selection {selection!r}: {err}") from err
