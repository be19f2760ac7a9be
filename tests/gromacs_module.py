"""Write GROMACS' topology module into an H5MD file, as GROMACS' writer lays it out.

From ``src/gromacs/fileio/h5md/h5md_topologyutils.cpp`` (``writeMoleculeTypes``,
``writeMoleculeBlocks``, GROMACS 2026): one group per molecule type under
``/h5md/modules/gromacs_topology`` with the atoms of one molecule (``particle_name`` and
``residue_name`` index fixed-size UTF-8 string tables; ``residue_id`` is 1-based within
the molecule), and the molecule blocks as two attributes. The topology comes from an
MDAnalysis Universe of the run's TPR file, whose segments are GROMACS' molecule blocks.
"""

from __future__ import annotations

import h5py
import numpy as np

MODULE = "/h5md/modules/gromacs_topology"


def _fixed(strings: list[str]) -> np.ndarray:
    """Fixed-size UTF-8 strings, strlen + 1 bytes (GROMACS' hdf5DataTypeForFixedSizeString)."""
    width = max(len(s.encode()) for s in strings) + 1
    return np.array([s.encode() for s in strings], dtype=f"S{width}")


def _table(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(indices, table) of ``values``, the table in order of first appearance."""
    table = list(dict.fromkeys(values))
    return np.array([table.index(v) for v in values], dtype=np.int32), _fixed(table)


def molecule_types(universe) -> tuple[dict[str, object], list[tuple[str, int]]]:
    """The first molecule of each molecule type (AtomGroups), and the blocks
    (molecule type, number of molecules) of ``universe`` (read from a TPR file)."""
    types: dict[str, object] = {}
    blocks: list[tuple[str, int]] = []
    for seg in universe.segments:
        atoms = seg.atoms
        name = str(atoms.moltypes[0])
        first = atoms.molnums[0]
        types.setdefault(name, atoms[atoms.molnums == first])
        blocks.append((name, len(np.unique(atoms.molnums))))
    return types, blocks


def write_module(path, universe, *, system_name: str = "adenylate kinase in water",
                 bonds: bool = True) -> None:
    """Add GROMACS' topology module of ``universe`` to the H5MD file ``path``, and its
    bonds as ``/connectivity/bonds`` (``H5md::setupBondConnectivity``)."""
    from MDAnalysis.guesser.tables import SYMB2Z

    types, blocks = molecule_types(universe)
    with h5py.File(path, "r+") as f:
        mod = f.require_group("/h5md/modules").create_group("gromacs_topology")
        for name, atoms in types.items():
            g = mod.create_group(name)
            n = len(atoms)
            g.create_dataset("id", data=np.arange(1, n + 1, dtype=np.int64))
            g.create_dataset("species", data=np.array(
                [SYMB2Z.get(e.capitalize(), 0) for e in atoms.elements], dtype=np.int32))
            g.create_dataset("charge", data=atoms.charges.astype(np.float32))
            g["charge"].attrs["unit"] = np.bytes_("e")
            g.create_dataset("mass", data=atoms.masses.astype(np.float32))
            g["mass"].attrs["unit"] = np.bytes_("u")
            idx, table = _table([str(x) for x in atoms.names])
            g.create_dataset("particle_name", data=idx)
            g.create_dataset("particle_name_table", data=table)
            g.attrs["particle_count"] = np.int64(n)
            resindex = atoms.resindices - atoms.resindices[0]
            g.create_dataset("residue_id", data=(resindex + 1).astype(np.int32))
            idx, table = _table([str(x) for x in atoms.resnames])
            g.create_dataset("residue_name", data=idx)
            g.create_dataset("residue_name_table", data=table)
            first = np.unique(resindex, return_index=True)[1]
            g.create_dataset("sequence", data=idx[first])
            g.attrs["residue_count"] = np.int32(first.size)
        mod.attrs["molecule_block_names"] = _fixed([name for name, _ in blocks])
        mod.attrs["molecule_block_counts"] = np.array([c for _, c in blocks], dtype=np.int32)
        mod.attrs["version"] = np.array([0, 1], dtype=np.int32)
        mod.attrs["system_name"] = np.bytes_(system_name)
        if bonds:  # writeBonds(): 0-based indices of the whole system, int64, no particles_group
            pairs = np.asarray(universe.bonds.indices, dtype=np.int64).reshape(-1, 2)
            conn = f.require_group("/connectivity")
            conn.create_dataset("bonds", data=pairs)
            conn.attrs["bond_count"] = np.int64(len(pairs))
