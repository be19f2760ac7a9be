"""Files in the layout of VMD's H5MD plugin samples (h5md/VMD-h5mdplugin), with its
structure module ``/parameters/vmd_structure``: written by tests of the engine and of MPI."""

from __future__ import annotations

import h5py
import numpy as np


def header(f):
    h = f.create_group("h5md")
    h.attrs["version"] = np.array([1, 0], dtype=np.int32)
    h.create_group("author").attrs["name"] = "tests"
    c = h.create_group("creator")
    c.attrs["name"], c.attrs["version"] = "run_h5md", "0"


def particles_group(f, name, positions, species):
    g = f.create_group(f"particles/{name}")
    pos = g.create_group("position")
    pos["value"] = positions
    pos["value"].attrs["unit"] = "Angstrom"
    pos["step"] = np.arange(len(positions), dtype=np.int32) * 10
    pos["time"] = np.arange(len(positions), dtype=np.float64)
    pos["time"].attrs["unit"] = "ps"
    g["species"] = species
    box = g.create_group("box")
    box.attrs["dimension"] = np.int32(3)
    box.attrs["boundary"] = np.array([b"none"] * 3)
    return g


def species_of(universe):
    """A species per distinct (name, type, mass) of the atoms, numbered 100, 103, ...
    (not 0..S-1: indexOfSpecies maps them), and the module's per-species arrays, listed
    in reverse order of the species."""
    atoms = universe.atoms
    keys = list(zip(atoms.names, atoms.types, atoms.masses, strict=True))
    distinct = list(dict.fromkeys(keys))
    number = {k: 100 + 3 * i for i, k in enumerate(distinct)}
    species = np.array([number[k] for k in keys], dtype=np.int32)
    listed = distinct[::-1]
    return species, {
        "indexOfSpecies": np.array([number[k] for k in listed], dtype=np.int32),
        "name": np.array([k[0] for k in listed], dtype="S16"),
        "type": np.array([k[1] for k in listed], dtype="S16"),
        "mass": np.array([k[2] for k in listed], dtype=np.float32)}


def write_adk_vmd(path, universe, positions):
    """adk with every property of the module: per species (name, type, mass), per atom
    (0-based resid, segid, charge), per residue (resname, chain), and the PSF's bonds
    (1-based, as VMD numbers atoms)."""
    u = universe
    species, per_species = species_of(u)
    with h5py.File(path, "w") as f:
        header(f)
        particles_group(f, "atoms", positions, species)
        vmd = f.create_group("parameters/vmd_structure")
        for k, v in per_species.items():
            vmd[k] = v
        vmd["resid"] = u.atoms.resindices.astype(np.int32)
        vmd["segid"] = np.array(u.atoms.segids, dtype="S8")
        vmd["charge"] = u.atoms.charges.astype(np.float32)
        vmd["resname"] = np.array(u.residues.resnames, dtype="S8")
        vmd["chain"] = np.array(["A" if i < 100 else "B" for i in range(len(u.residues))],
                                dtype="S2")
        vmd["bond_from"] = (u.bonds.indices[:, 0] + 1).astype(np.int32)
        vmd["bond_to"] = (u.bonds.indices[:, 1] + 1).astype(np.int32)
    return str(path)
