"""GROMACS' topology module of an H5MD file: per-atom names, residues, masses, charges.

GROMACS' H5MD writer (2026 on, ``src/gromacs/fileio/h5md/h5md_topologyutils.cpp``)
stores no ``species``, ``mass`` or ``charge`` under ``/particles``. It keeps the
topology in ``/h5md/modules/gromacs_topology`` instead, as molecule types and the blocks
they are repeated in::

    /h5md/modules/gromacs_topology       version, system_name,
                                         molecule_block_names, molecule_block_counts
        <moltype>/                       particle_count, residue_count
            particle_name (n,) int32     indices into particle_name_table
            particle_name_table          fixed-size UTF-8 strings
            residue_name (n,) int32      indices into residue_name_table
            residue_name_table
            residue_id (n,) int32        1-based residue index within the molecule
            mass (n,) "u", charge (n,) "e", species (n,) atomic numbers, id, sequence

:func:`read_module` reads it into a :class:`ModuleTopology`; its
:meth:`~ModuleTopology.per_atom` expands the blocks to one entry per atom of the system,
numbered as MDAnalysis numbers a TPR file's atoms (residues 1..N across molecules,
molecules 0..M-1). The reader is tolerant: a dataset that is absent or does not fit
leaves out that one property, noted; a block that names no molecule type leaves out the
module. :func:`module_from_atoms` finds the molecule types and blocks of a system's atoms,
and :func:`write_module` writes them as GROMACS does (``h5mdx convert`` of a TPR file's
trajectory). This module knows h5py and numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.text import c_string, decode, unit_text

__all__ = ["MODULE", "MODULE_PATH", "MoleculeType", "ModuleTopology", "module_from_atoms",
           "read_module", "write_module"]

#: The module's name under ``/h5md/modules``.
MODULE = "gromacs_topology"
#: Its path.
MODULE_PATH = f"/h5md/modules/{MODULE}"

#: The per-atom properties served, by name, with the dataset(s) they come from: a value
#: dataset, or an index dataset and the table of strings it indexes.
_NUMBERS = {"mass": "mass", "charge": "charge", "species": "species",
            "residue_id": "residue_id"}
_STRINGS = {"name": ("particle_name", "particle_name_table"),
            "resname": ("residue_name", "residue_name_table")}

#: ``note(path, message, assumed)``: how the reader reports a problem.
Note = Callable[[str, str, str], None]
#: ``load(group, name, where)``: one dataset of a group read whole (it raises
#: :class:`~h5mdx.errors.H5MDFormatError` where it cannot be: a link into another file,
#: too large to read at open time, unreadable).
Load = Callable[[h5py.Group, str, str], np.ndarray]


@dataclass(frozen=True)
class MoleculeType:
    """One molecule type of the module: its atoms' properties, one entry per atom."""

    name: str
    n_atoms: int
    #: property name (``name``, ``resname``, ``residue_id``, ``mass``, ``charge``,
    #: ``species``) to array of ``n_atoms``
    properties: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_residues(self) -> int:
        """Residues per molecule (the largest 1-based ``residue_id``; 1 without one)."""
        ids = self.properties.get("residue_id")
        return int(ids.max()) if ids is not None and ids.size else 1


@dataclass(frozen=True)
class ModuleTopology:
    """The topology of ``/h5md/modules/gromacs_topology``."""

    path: str
    system_name: str
    molecule_types: dict[str, MoleculeType]
    #: (molecule type, number of molecules) of each block, in the order of the atoms
    blocks: tuple[tuple[str, int], ...]
    #: the properties every molecule type of the blocks has
    properties: tuple[str, ...]
    #: the ``unit`` attribute of a property's dataset (``mass``: ``"u"``)
    units: dict[str, str] = field(default_factory=dict)

    @property
    def n_atoms(self) -> int:
        """Atoms of the whole system."""
        return sum(self.molecule_types[name].n_atoms * count for name, count in self.blocks)

    @property
    def n_molecules(self) -> int:
        return sum(count for _, count in self.blocks)

    def per_atom(self) -> dict[str, np.ndarray]:
        """One array of :attr:`n_atoms` entries per property, the blocks expanded.

        Returns
        -------
        dict
            ``name``, ``resname`` (str), ``resid`` (1-based residue number across the
            system), ``mass``, ``charge``, ``species`` (those the module has), and always
            ``moltype`` (str), ``molnum`` (0-based molecule number) and ``block``
            (0-based block number).
        """
        parts: dict[str, list[np.ndarray]] = {}
        residues = molecules = 0
        for b, (name, count) in enumerate(self.blocks):
            mt = self.molecule_types[name]
            n = mt.n_atoms
            for prop in self.properties:
                values = mt.properties[prop]
                if prop == "residue_id":
                    per_mol = np.arange(count, dtype=np.int64)[:, None] * mt.n_residues
                    values = (residues + per_mol + values[None, :]).ravel()
                    prop = "resid"
                else:
                    values = np.tile(values, count)
                parts.setdefault(prop, []).append(values)
            parts.setdefault("moltype", []).append(np.full(n * count, name))
            parts.setdefault("molnum", []).append(
                np.repeat(np.arange(molecules, molecules + count, dtype=np.int64), n))
            parts.setdefault("block", []).append(np.full(n * count, b, dtype=np.int64))
            residues += mt.n_residues * count
            molecules += count
        return {prop: np.concatenate(arrays) for prop, arrays in parts.items()}


def _names_and_counts(grp: h5py.Group, where: str,
                      note: Note) -> tuple[tuple[str, int], ...] | None:
    """The blocks from ``molecule_block_names`` and ``molecule_block_counts``; None
    (noted) where they are missing or do not fit together."""
    try:
        names = np.atleast_1d(grp.attrs["molecule_block_names"])
        counts = np.atleast_1d(grp.attrs["molecule_block_counts"])
    except (KeyError, OSError, RuntimeError, TypeError, ValueError) as err:
        note(where, f"GROMACS' topology module has no readable molecule_block_names and "
             f"molecule_block_counts attributes ({err})", "the module left out")
        return None
    if (names.ndim != 1 or counts.shape != names.shape or counts.dtype.kind not in "iu"
            or (counts < 0).any()):
        note(where, f"molecule_block_names {names.tolist()!r} and molecule_block_counts "
             f"{counts.tolist()!r} do not fit together (as many names as counts, counts "
             "integers >= 0)", "the module left out")
        return None
    return tuple((c_string(n), int(c)) for n, c in zip(names.tolist(), counts.tolist(),
                                                     strict=True))


def _count_attr(grp: h5py.Group) -> int | None:
    try:
        value = np.asarray(grp.attrs["particle_count"])
    except (KeyError, OSError, RuntimeError, TypeError, ValueError):
        return None
    if value.size != 1 or value.dtype.kind not in "iu" or int(value.ravel()[0]) < 0:
        return None
    return int(value.ravel()[0])


def _read(grp: h5py.Group, name: str, where: str, load: Load,
          note: Note) -> np.ndarray | None:
    """The 1-D dataset ``name`` of a molecule type; None (noted) where it cannot be read
    or is not 1-D, None without a note where it is absent."""
    if name not in grp:
        return None
    try:
        values = np.asarray(load(grp, name, where))
    except H5MDFormatError as err:
        note(err.h5path or f"{where}/{name}", err.problem, "left out")
        return None
    if values.ndim != 1:
        note(f"{where}/{name}", f"must be one-dimensional (one entry per atom), not of "
             f"shape {values.shape}", "left out")
        return None
    return values


def _strings(grp: h5py.Group, index: str, table: str, where: str, load: Load,
             note: Note) -> np.ndarray | None:
    """``table[index]`` as text, one entry per atom; None (noted) where they do not fit."""
    idx = _read(grp, index, where, load, note)
    tab = _read(grp, table, where, load, note)
    if idx is None or tab is None:
        if (idx is None) != (tab is None):
            missing = table if tab is None else index
            note(f"{where}/{missing}", f"is missing or unreadable, so {where}/"
                 f"{index if tab is None else table} cannot be read", "left out")
        return None
    if idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= tab.size)):
        note(f"{where}/{index}", f"must hold indices into {table} (0..{tab.size - 1})",
             "left out")
        return None
    if tab.dtype.kind not in "SOU":
        note(f"{where}/{table}", f"must hold strings, not {tab.dtype}", "left out")
        return None
    text = np.array([c_string(v) for v in tab.tolist()], dtype=str)
    return text[idx.astype(np.intp)] if idx.size else np.array([], dtype=str)


def _unit(grp: h5py.Group, name: str) -> str | None:
    try:
        return unit_text(grp[name].attrs.get("unit"))
    except (KeyError, OSError, RuntimeError, TypeError, ValueError):
        return None


def _molecule_type(grp: h5py.Group, name: str, where: str, load: Load, note: Note,
                   units: dict[str, str]) -> MoleculeType | None:
    """One molecule type; None (noted) where its atom count is unknown."""
    props: dict[str, np.ndarray] = {}
    for prop, (index, table) in _STRINGS.items():
        if (values := _strings(grp, index, table, where, load, note)) is not None:
            props[prop] = values
    for prop, dset in _NUMBERS.items():
        values = _read(grp, dset, where, load, note)
        if values is None:
            continue
        if values.dtype.kind not in ("iu" if prop in ("species", "residue_id") else "iuf"):
            note(f"{where}/{dset}", f"must hold numbers, not {values.dtype}", "left out")
            continue
        if prop == "residue_id" and values.size and values.min() < 1:
            note(f"{where}/{dset}", "must hold 1-based residue numbers", "left out")
            continue
        props[prop] = values
        if (unit := _unit(grp, dset)) is not None:
            units.setdefault(prop, unit)
    n = _count_attr(grp)
    if n is None:
        if not props:
            note(where, "a molecule type with neither a particle_count attribute nor a "
                 "readable per-atom dataset", "the module left out")
            return None
        n = len(next(iter(props.values())))
    for prop in list(props):
        if len(props[prop]) != n:
            dset = _STRINGS[prop][0] if prop in _STRINGS else _NUMBERS[prop]
            note(f"{where}/{dset}", f"has {len(props[prop])} entries but the molecule "
                 f"type has {n} atoms", "left out")
            del props[prop]
    return MoleculeType(name, n, props)


def read_module(grp: h5py.Group, load: Load, note: Note) -> ModuleTopology | None:
    """The topology of GROMACS' module group ``grp`` (``/h5md/modules/gromacs_topology``).

    Parameters
    ----------
    grp : h5py.Group
        The module's group.
    load : callable
        ``load(group, name, where)``: a dataset read whole, or
        :class:`~h5mdx.errors.H5MDFormatError`.
    note : callable
        ``note(path, message, assumed)``: called once per problem.

    Returns
    -------
    ModuleTopology or None
        None where the module is unusable (noted): blocks missing or naming a molecule
        type it does not hold.
    """
    where = MODULE_PATH
    blocks = _names_and_counts(grp, where, note)
    if blocks is None:
        return None
    types: dict[str, MoleculeType] = {}
    units: dict[str, str] = {}
    for name in dict.fromkeys(name for name, _ in blocks):
        if not isinstance(grp.get(name, getlink=True), h5py.HardLink) or not isinstance(
                grp.get(name), h5py.Group):
            note(f"{where}/{name}", "a molecule block names this molecule type, which "
                 "the module does not hold as a group of this file", "the module left out")
            return None
        mt = _molecule_type(grp[name], name, f"{where}/{name}", load, note, units)
        if mt is None:
            return None
        types[name] = mt
    props = [p for p in (*_STRINGS, *_NUMBERS)
             if types and all(p in mt.properties for mt in types.values())]
    for p in (*_STRINGS, *_NUMBERS):
        lacking = [mt.name for mt in types.values() if p not in mt.properties]
        if types and p not in props and len(lacking) < len(types):
            note(where, f"molecule type(s) {', '.join(lacking)} lack the {p} of their atoms",
                 f"no atom's {p} served")
    system = grp.attrs.get("system_name", "")
    if isinstance(system, np.ndarray) and system.size == 1:
        system = system.ravel()[0]
    return ModuleTopology(where, str(decode(system)), types, blocks, tuple(props),
                          {p: u for p, u in units.items() if p in props})


def module_from_atoms(per_atom: dict[str, np.ndarray], moltype: np.ndarray,
                      molnum: np.ndarray, resindex: np.ndarray,
                      system_name: str = "") -> ModuleTopology | None:
    """The module of a system's atoms: each molecule type once, the blocks of molecules.

    Parameters
    ----------
    per_atom : dict
        ``name``, ``resname`` (str), ``mass``, ``charge``, ``species`` (those known), one
        entry per atom.
    moltype, molnum : numpy.ndarray
        Each atom's molecule type and molecule number (MDAnalysis' ``moltypes``,
        ``molnums`` of a TPR file).
    resindex : numpy.ndarray
        Each atom's residue index (any numbering in which a residue's atoms share one).
    system_name : str, optional
        The module's ``system_name``.

    Returns
    -------
    ModuleTopology or None
        None where the atoms do not fit GROMACS' layout: a molecule's atoms not
        consecutive, or molecules of one type that differ.
    """
    n = len(molnum)
    if n == 0:
        return None
    starts = np.flatnonzero(np.r_[True, molnum[1:] != molnum[:-1]])
    if starts.size != np.unique(molnum).size:
        return None  # a molecule in several runs
    lengths = np.diff(np.r_[starts, n])
    mol_type = np.asarray(moltype)[starts]
    types: dict[str, MoleculeType] = {}
    for name in dict.fromkeys(mol_type.tolist()):  # the molecules of each type, at once
        mols = np.flatnonzero(mol_type == name)
        size = int(lengths[mols[0]])
        if (lengths[mols] != size).any():
            return None
        atoms = starts[mols][:, None] + np.arange(size)[None, :]  # (molecules, atoms)
        if (np.asarray(moltype)[atoms] != name).any():
            return None
        local = resindex[atoms] - resindex[atoms[:, :1]]
        props = {k: v[atoms] for k, v in per_atom.items()}
        props["residue_id"] = local
        if any(not (a == a[:1]).all() for a in props.values()):
            return None  # molecules of one type that differ
        props = {k: v[0] for k, v in props.items()}
        props["residue_id"] = (np.unique(props["residue_id"], return_inverse=True)[1]
                               .ravel() + 1).astype(np.int32)
        types[str(name)] = MoleculeType(str(name), size, props)
    run = np.flatnonzero(np.r_[True, mol_type[1:] != mol_type[:-1]])
    counts = np.diff(np.r_[run, mol_type.size])
    blocks = tuple((str(mol_type[r]), int(c)) for r, c in zip(run, counts, strict=True))
    props_all = tuple(p for p in (*_STRINGS, *_NUMBERS) if p in per_atom or p == "residue_id")
    units = {p: u for p, u in (("mass", "u"), ("charge", "e")) if p in per_atom}
    return ModuleTopology(MODULE_PATH, system_name, types, blocks, props_all, units)


def _fixed_strings(values: list[str]) -> np.ndarray:
    """Fixed-size UTF-8 strings of strlen + 1 bytes (GROMACS' fixed-size strings)."""
    data = [v.encode("utf-8") for v in values]
    return np.array(data, dtype=f"S{max((len(d) for d in data), default=0) + 1}")


def _table(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices, table of fixed-size strings in order of first appearance) of ``values``."""
    table = list(dict.fromkeys(values.tolist()))
    index = {v: i for i, v in enumerate(table)}
    return np.array([index[v] for v in values.tolist()], dtype=np.int32), _fixed_strings(table)


def write_module(modules: h5py.Group, module: ModuleTopology,
                 filters: Callable[[np.ndarray], Mapping[str, Any]] | None = None) -> None:
    """Write ``module`` into ``modules`` (``/h5md/modules``) as GROMACS' writer lays it out
    (``h5md_topologyutils.cpp``: ``writeMoleculeTypes``, ``writeMoleculeBlocks``).

    Parameters
    ----------
    modules : h5py.Group
        The file's ``/h5md/modules`` group.
    module : ModuleTopology
        The topology (:func:`module_from_atoms`).
    filters : callable, optional
        ``create_dataset`` keyword arguments of each dataset's values (chunks and a
        compression: :meth:`h5mdx.format.writer.Layout.other_filters`); none by default.
    """
    def put(g: h5py.Group, name: str, data: np.ndarray) -> None:
        g.create_dataset(name, data=data, **(filters(data) if filters else {}))

    grp = modules.create_group(MODULE)
    for mt in module.molecule_types.values():
        g = grp.create_group(mt.name)
        p = mt.properties
        put(g, "id", np.arange(1, mt.n_atoms + 1, dtype=np.int64))
        if "species" in p:
            put(g, "species", np.asarray(p["species"], dtype=np.int32))
        for prop in ("charge", "mass"):
            if prop in p:
                put(g, prop, np.asarray(p[prop], dtype=np.float64))
                g[prop].attrs["unit"] = np.bytes_(module.units.get(prop, ""))
        if "name" in p:
            index, table = _table(p["name"])
            put(g, "particle_name", index)
            put(g, "particle_name_table", table)
        g.attrs["particle_count"] = np.int64(mt.n_atoms)
        if "residue_id" in p:
            put(g, "residue_id", np.asarray(p["residue_id"], dtype=np.int32))
        if "resname" in p:
            index, table = _table(p["resname"])
            put(g, "residue_name", index)
            put(g, "residue_name_table", table)
            if "residue_id" in p:
                first = np.unique(p["residue_id"], return_index=True)[1]
                put(g, "sequence", index[first])
        g.attrs["residue_count"] = np.int32(mt.n_residues)
    grp.attrs["molecule_block_names"] = _fixed_strings([name for name, _ in module.blocks])
    grp.attrs["molecule_block_counts"] = np.array([c for _, c in module.blocks], dtype=np.int32)
    grp.attrs["version"] = np.array([0, 1], dtype=np.int32)
    grp.attrs["system_name"] = np.bytes_(module.system_name.encode("utf-8"))
