"""The VMD structure module of an H5MD file: atom names, types, residues, segments, bonds.

VMD's H5MD plugin (``h5md/VMD-h5mdplugin``) reads the structure of the particles from
``/parameters/vmd_structure``; ESPResSo's first H5MD writer, HyMD and pyh5md's examples
write it. Each dataset holds one entry per *species*, per *atom* or per *residue*::

    /parameters/vmd_structure
        indexOfSpecies (S,) int     the species values (of /particles/<group>/species)
        name, type (S,) str         per species: entry k is that of species indexOfSpecies[k]
        mass, radius (S,) float     per species
        atomicnumber (S,) int       per species
        resid (N,) int              per atom: its residue
        charge (N,) float           per atom
        segid (N,) str              per atom (or segid[indexOfSegid[i]], indexOfSegid (N,))
        resname, chain (R,) str     per residue: entry resid[i] is that of atom i
        bond_from, bond_to (B,) int the bonds' atoms, 1-based (VMD's numbering)

:func:`read_structure` reads the datasets; :func:`per_atom` expands them to one entry per
atom of a particles group, given its ``species``; :func:`bonds` gives the bonds as 0-based
pairs. The reader is tolerant: a dataset that is absent, unreadable or of another length
leaves out that one property, noted; one of shape ``(rows, 1)`` (ESPResSo's Python
writer creates every dataset so) is read a row an entry, as the plugin reads it.
:func:`from_atoms` finds the module (and the species) of atoms described per atom, and
:func:`write_structure` writes it as the plugin reads it (``h5mdx convert`` of a
trajectory whose topology names its atoms). This module knows h5py and numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5mdx.errors import H5MDFormatError
from h5mdx.format.gromacs_topology import Load, Note  # the readers' one interface
from h5mdx.format.text import c_string

__all__ = ["COORD_ATTRS", "DATASETS", "PER_ATOM", "PER_RESIDUE", "PER_SPECIES", "STRUCTURE_PATH",
           "VMDStructure", "bonds", "from_atoms", "per_atom", "read_structure",
           "write_structure"]

#: Where the module lives.
STRUCTURE_PATH = "/parameters/vmd_structure"

#: The properties held per species (entry k: the species ``indexOfSpecies[k]``), by
#: dataset name, with the name each is served under.
PER_SPECIES = {"name": "name", "type": "type", "mass": "mass", "radius": "radius",
               "atomicnumber": "atomicnumber"}
#: The properties held per atom, as :data:`PER_SPECIES`.
PER_ATOM = {"resid": "resid", "charge": "charge", "segid": "segid"}
#: The properties held per residue (entry ``resid[i]``: atom i's), as :data:`PER_SPECIES`
#: (``chain`` served as MDAnalysis names it, ``chainID``).
PER_RESIDUE = {"resname": "resname", "chain": "chainID"}

#: Every dataset of the module h5mdx reads: the properties, the indices into them, the bonds.
DATASETS = frozenset({*PER_SPECIES, *PER_ATOM, *PER_RESIDUE, "indexOfSpecies", "indexOfSegid",
                      "bond_from", "bond_to"})

#: The attributes of the coordinates served, where they have any.
COORD_ATTRS = {"resid": {"long_name": "residue number (VMD's structure module)"},
               "atomicnumber": {"long_name": "atomic number"}}


@dataclass(frozen=True)
class VMDStructure:
    """The datasets of ``/parameters/vmd_structure`` that are 1-D arrays, by name
    (strings decoded to ``str`` arrays)."""

    path: str
    datasets: dict[str, np.ndarray] = field(default_factory=dict)


def read_structure(grp: h5py.Group, load: Load, note: Note) -> VMDStructure | None:
    """The module's datasets (1-D arrays of numbers or strings); None without any.

    Parameters
    ----------
    grp : h5py.Group
        ``/parameters/vmd_structure``.
    load, note : callable
        As :func:`h5mdx.format.gromacs_topology.read_module` takes them: a dataset read
        whole (or :class:`~h5mdx.errors.H5MDFormatError`), and what is called once per
        problem.

    Returns
    -------
    VMDStructure or None
        None where it holds no property and no bond (``indexOfSpecies`` alone).
    """
    datasets: dict[str, np.ndarray] = {}
    for name in sorted(DATASETS & set(grp)):
        where = f"{STRUCTURE_PATH}/{name}"
        try:
            values = np.asarray(load(grp, name, STRUCTURE_PATH))
        except H5MDFormatError as err:
            note(err.h5path or where, err.problem, "left out")
            continue
        if values.ndim == 2 and values.shape[1] == 1:  # ESPResSo's writer: (rows, 1),
            values = values[:, 0]  # one entry a row, as VMD's plugin reads them
        if values.ndim != 1 or values.dtype.kind not in "biufSUO":
            note(where, f"holds {values.dtype} of shape {values.shape}, not one entry per "
                 "species, atom, residue or bond", "left out")
            continue
        if values.dtype.kind in "SO":
            values = np.array([c_string(v) for v in values.tolist()], dtype=str)
        read = _numbers(name, values, where, note)
        if read is not None:
            datasets[name] = read
    served = {*PER_SPECIES, *PER_ATOM, *PER_RESIDUE, "bond_from", "bond_to"}
    return VMDStructure(STRUCTURE_PATH, datasets) if served & set(datasets) else None


#: The datasets of numbers, with the kinds of numpy dtype each may hold.
_NUMBERS = {"mass": "iuf", "radius": "iuf", "charge": "iuf", "atomicnumber": "iu",
            "resid": "iu", "indexOfSpecies": "iu", "indexOfSegid": "iu", "bond_from": "iu",
            "bond_to": "iu"}


def _numbers(name: str, values: np.ndarray, where: str, note: Note) -> np.ndarray | None:
    """``values`` of a dataset of numbers (:data:`_NUMBERS`) as VMD's plugin reads them
    (H5T_NATIVE_INT, H5T_NATIVE_FLOAT): whole numbers stored as floats as integers
    (noted); None (noted) where they are no such numbers (text, booleans)."""
    kinds = _NUMBERS.get(name)
    if kinds is None or values.dtype.kind in kinds:
        return values
    if kinds == "iu" and values.dtype.kind == "f" and np.isfinite(values).all() \
            and (values == np.round(values)).all():
        note(where, f"holds {values.dtype} of whole numbers, not integers", "read as the "
             "integers they are, as VMD's plugin reads them")
        return values.astype(np.int64)
    note(where, f"holds {values.dtype}, not {'integers' if kinds == 'iu' else 'numbers'} "
         f"(VMD's plugin reads {name} as such)", "left out")
    return None


def per_atom(structure: VMDStructure, species: np.ndarray | None, n_atoms: int,
             group: str, note: Note) -> dict[str, np.ndarray]:
    """The module's properties, one entry per atom of a particles group.

    Parameters
    ----------
    structure : VMDStructure
        The module.
    species : numpy.ndarray or None
        The group's ``species`` (one per atom), needed for the properties per species.
    n_atoms : int
        The group's atom count.
    group : str
        The group's path, for the notes.
    note : callable
        ``note(path, message, assumed)``: called once per property that does not fit.

    Returns
    -------
    dict
        Served name (:data:`PER_SPECIES`, :data:`PER_ATOM`, :data:`PER_RESIDUE`) to an
        array of ``n_atoms``; the properties that do not fit the group are left out.
    """
    data = structure.datasets
    out: dict[str, np.ndarray] = {}
    out.update(_by_species(structure, species, n_atoms, group, note))
    for name, served in PER_ATOM.items():
        values = data.get(name)
        if name == "segid" and "indexOfSegid" in data and values is not None:
            values = _indexed(structure, "indexOfSegid", values, n_atoms, group, note)
        if values is not None and values.shape == (n_atoms,):
            out[served] = values
        elif values is not None:
            note(f"{structure.path}/{name}", f"holds {values.size} entries, not one per atom "
                 f"of {group} ({n_atoms})", f"no {served} for {group}")
    resid = out.get("resid")
    for name, served in PER_RESIDUE.items():
        values = data.get(name)
        if values is None:
            continue
        if resid is None or resid.dtype.kind not in "iu" or (
                resid.size and (resid.min() < 0 or resid.max() >= values.size)):
            note(f"{structure.path}/{name}", f"holds one entry per residue, indexed by resid, "
                 f"but {group}'s resid {_span(resid)} do not index its {values.size} entries",
                 f"no {served} for {group}")
            continue
        out[served] = values[resid]
    return {k: out[k] for k in _ORDER if k in out}


#: The order the properties are served in (MDAnalysis' order of a PSF's).
_ORDER = ("name", "type", "resname", "resid", "segid", "chainID", "mass", "charge", "radius",
          "atomicnumber")


def _by_species(structure: VMDStructure, species: np.ndarray | None, n_atoms: int,
                group: str, note: Note) -> dict[str, np.ndarray]:
    """The properties per species, expanded by the group's ``species``."""
    data = structure.datasets
    names = [n for n in PER_SPECIES if n in data]
    index = data.get("indexOfSpecies")
    if not names:
        return {}
    said = ", ".join(names)
    if index is None or index.dtype.kind not in "iu":
        note(f"{structure.path}/indexOfSpecies", f"absent or not integers: {said} (one entry "
             "per species) cannot be given to the atoms", f"no {said}")
        return {}
    if species is None or species.shape != (n_atoms,) or species.dtype.kind not in "iu":
        note(f"{group}/species", f"{structure.path} holds {said} per species, but {group} has "
             "no species of integers, one per atom", f"no {said} for {group}")
        return {}
    order = np.argsort(index, kind="stable")
    at = np.minimum(np.searchsorted(index[order], species), max(index.size - 1, 0))
    found = index[order][at] == species if index.size else np.zeros(n_atoms, bool)
    if not found.all():
        missing = np.unique(species[~found])[:5].tolist()
        note(f"{structure.path}/indexOfSpecies", f"lists no species {missing} of {group}",
             f"no {said} for {group}")
        return {}
    out = {}
    for name in names:
        values = data[name]
        if values.size != index.size:
            note(f"{structure.path}/{name}", f"holds {values.size} entries, not one per "
                 f"species of indexOfSpecies ({index.size})", "left out")
            continue
        out[PER_SPECIES[name]] = values[order[at]]
    return out


def _indexed(structure: VMDStructure, key: str, values: np.ndarray, n_atoms: int,
             group: str, note: Note) -> np.ndarray | None:
    """``values[<key>]``: a table indexed per atom by the dataset ``key``; None (noted)
    where the index does not fit."""
    index = structure.datasets[key]
    if index.shape != (n_atoms,) or index.dtype.kind not in "iu" or (
            index.size and (index.min() < 0 or index.max() >= values.size)):
        note(f"{structure.path}/{key}", f"does not index the {values.size} entries of "
             f"{structure.path} per atom of {group} ({index.size} entries, {_span(index)})",
             f"no {key.removeprefix('indexOf').lower()} for {group}")
        return None
    return values[index]


def bonds(structure: VMDStructure, n_atoms: int, note: Note) -> np.ndarray | None:
    """The bonds, as ``(bonds, 2)`` 0-based atom indices; None without any, or (noted)
    where ``bond_from``/``bond_to`` are not 1-based atom numbers of ``n_atoms`` atoms."""
    a, b = structure.datasets.get("bond_from"), structure.datasets.get("bond_to")
    if a is None and b is None:
        return None
    where = f"{structure.path}/bond_from"
    if a is None or b is None or a.shape != b.shape or a.dtype.kind not in "iu" \
            or b.dtype.kind not in "iu":
        note(where, "bond_from and bond_to are not two integer arrays of one length",
             "no bonds")
        return None
    pairs = np.stack([a, b], axis=1).astype(np.int64)
    if pairs.size and (pairs.min() < 1 or pairs.max() > n_atoms):
        note(where, f"the bonds' atoms {_span(pairs)} are not 1-based numbers of "
             f"{n_atoms} atoms (VMD numbers them from 1)", "no bonds")
        return None
    return pairs - 1


def _span(values: np.ndarray | None) -> str:
    if values is None or not values.size or values.dtype.kind not in "iu":
        return "(none)"
    return f"{int(values.min())}..{int(values.max())}"


def from_atoms(per_atom: Mapping[str, np.ndarray], pairs: np.ndarray | None = None,
               species: np.ndarray | None = None, note: Note | None = None,
               ) -> tuple[np.ndarray, VMDStructure] | None:
    """The species of atoms and the module that describes them, from per-atom arrays.

    Parameters
    ----------
    per_atom : mapping
        One array per atom, named as served (``name``, ``type``, ``mass``, ``radius``,
        ``atomicnumber``, ``charge``, ``resid``, ``resname``, ``segid``, ``chainID``);
        ``name`` is needed.
    pairs : array of int, optional
        ``(n_bonds, 2)`` 0-based indices of bonded atoms.
    species : array of int, optional
        The atoms' species, where they have them (a file's): the properties per species
        are those that are one value per species (``name`` must be).
    note : callable, optional
        Called ``note(path, problem, assumed)`` for each property the module cannot hold
        and leaves out: a ``resname`` or ``chainID`` that is not one value per ``resid``
        (the chains or segments of a PSF or PDB that number their residues alike).

    Returns
    -------
    (numpy.ndarray, VMDStructure) or None
        The species (``species``, else 0-based, numbered in order of first appearance:
        one per distinct ``name``, ``type`` and ``mass``, so that those are per species
        as the module holds them) and the module, which :func:`per_atom` reads back as
        given: ``resid`` as given, with ``resname`` and ``chainID`` per residue where
        no ``resid`` is negative and every atom of a ``resid`` has the same (else left
        out, noted); None without names, or where ``species`` do not give them.
    """
    names = per_atom.get("name")
    if names is None:
        return None
    n = len(names)
    found = _by_codes(per_atom, n) if species is None else _of_species(per_atom, n, species)
    if found is None:
        return None
    codes, data = found
    for k in ("charge", "segid"):
        if per_atom.get(k) is not None and len(per_atom[k]) == n:
            data[k] = np.asarray(per_atom[k])
    data.update(_residues(per_atom, n, note))
    if pairs is not None and len(pairs):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        data["bond_from"], data["bond_to"] = (pairs[:, 0] + 1).astype(np.int32), \
            (pairs[:, 1] + 1).astype(np.int32)
    return codes, VMDStructure(STRUCTURE_PATH, data)


def _by_codes(per_atom: Mapping[str, np.ndarray],
              n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Species numbered by distinct ``name``, ``type`` and ``mass``, and the datasets
    per species."""
    keyed = [k for k in ("name", "type", "mass") if per_atom.get(k) is not None
             and len(per_atom[k]) == n]
    keys = list(zip(*(np.asarray(per_atom[k]).tolist() for k in keyed), strict=True))
    first: dict[tuple, int] = {}
    codes = np.array([first.setdefault(key, len(first)) for key in keys], dtype=np.int32)
    rows = list(first)
    data: dict[str, np.ndarray] = {"indexOfSpecies": np.arange(len(rows), dtype=np.int32)}
    for i, k in enumerate(keyed):
        data[_DATASET.get(k, k)] = np.array([row[i] for row in rows],
                                            dtype=np.asarray(per_atom[k]).dtype)
    return codes, data


def _of_species(per_atom: Mapping[str, np.ndarray], n: int,
                species: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """The datasets per species of given species: the properties that are one value per
    species; None where the names are not."""
    species = np.asarray(species)
    if species.shape != (n,) or species.dtype.kind not in "iu":
        return None
    index, first, inverse = np.unique(species, return_index=True, return_inverse=True)
    data: dict[str, np.ndarray] = {"indexOfSpecies": index.astype(np.int32)}
    for k in PER_SPECIES:
        values = per_atom.get(k)
        if values is None or len(values) != n:
            continue
        values = np.asarray(values)
        if not (values[first][inverse] == values).all():  # not one value per species
            if k == "name":
                return None
            continue
        data[k] = values[first]
    return species, data


#: Served name -> dataset name, where they differ.
_DATASET = {"chainID": "chain"}


def _residues(per_atom: Mapping[str, np.ndarray], n: int,
              note: Note | None = None) -> dict[str, np.ndarray]:
    """``resid`` per atom and the tables per residue it indexes (``resname``,
    ``chain``), those that are one value per ``resid`` (the others noted)."""
    resid = per_atom.get("resid")
    if resid is None or len(resid) != n or np.asarray(resid).dtype.kind not in "iu":
        return {}
    resid = np.asarray(resid, dtype=np.int64)
    out = {"resid": resid.astype(np.int32)}
    if n and int(resid.min()) < 0:  # resid as given; no table row for a negative one
        _negative(per_atom, n, int(resid.min()), note)
        return out
    size = int(resid.max()) + 1 if n else 0
    for key in ("resname", "chainID"):
        values = per_atom.get(key)
        if values is None or len(values) != n:
            continue
        values = np.asarray(values).astype(str)
        table = np.full(size, "", dtype=values.dtype)
        table[resid] = values
        if (table[resid] == values).all():  # one per resid: the table reads back as given
            out[_DATASET.get(key, key)] = table
        elif note is not None:
            bad = np.flatnonzero(table[resid] != values)
            first = int(resid[bad[0]])
            names = sorted({str(v) for v in values[resid == first]})
            count = len(np.unique(resid[bad]))
            note(f"{STRUCTURE_PATH}/{_DATASET.get(key, key)}",
                 f"{count} residue number(s) stand for residues of other {key}s (resid "
                 f"{first}: {', '.join(repr(v) for v in names[:4])}): VMD's structure "
                 f"module holds one {key} per residue number, and chains or segments here "
                 "number their residues alike",
                 f"{key} left out (select by it with topology= the original topology file)")
    return out


def _negative(per_atom: Mapping[str, np.ndarray], n: int, lowest: int,
              note: Note | None) -> None:
    """Note the tables per residue left out where residue numbers are negative (a PDB's
    -2, -1, 0 before the first residue): VMD reads ``resname[resid[i]]``."""
    left = [k for k in ("resname", "chainID") if per_atom.get(k) is not None
            and len(per_atom[k]) == n]
    if left and note is not None:
        said = ", ".join(left)
        note(f"{STRUCTURE_PATH}/resid", f"residue numbers down to {lowest}: VMD's "
             f"structure module holds {said} per residue number, indexed by resid from 0",
             f"resid written as given, {said} left out (select by {said} with topology= "
             "the original topology file)")


def write_structure(parameters: h5py.Group, structure: VMDStructure,
                    filters: Callable[[np.ndarray], Mapping[str, Any]] | None = None) -> None:
    """Write the module into ``parameters`` (``/parameters``) as VMD's plugin reads it:
    strings as fixed-length ASCII (UTF-8) bytes, integers as int32.

    Parameters
    ----------
    parameters : h5py.Group
        The file's ``/parameters`` group.
    structure : VMDStructure
        The module (:func:`from_atoms`).
    filters : callable, optional
        ``create_dataset`` keyword arguments of each dataset's values (chunks and a
        compression: :meth:`h5mdx.format.writer.Layout.other_filters`); none by default.
    """
    grp = parameters.create_group(STRUCTURE_PATH.rsplit("/", 1)[1])
    for name, values in structure.datasets.items():
        if values.dtype.kind in "US":
            encoded = [str(v).encode("utf-8") for v in values.tolist()]
            width = max((len(v) for v in encoded), default=1) or 1
            data = np.array(encoded, dtype=f"S{width}")
        elif values.dtype.kind in "iu":
            data = values.astype(np.int32)
        else:
            data = values
        grp.create_dataset(name, data=data, **(filters(data) if filters else {}))
