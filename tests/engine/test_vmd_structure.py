"""VMD's structure module (``/parameters/vmd_structure``, read by VMD's H5MD plugin and
written by ESPResSo's first H5MD writer, HyMD and pyh5md's examples): names, types,
residues, segments, charges and bonds of the particles, per species, atom or residue.
The files here are written in the layout of the plugin's samples (h5md/VMD-h5mdplugin
``samples/full_vmd_structure.h5``, ``binary_mixture.h5``), from the adk PSF/DCD."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx  # registers ds.md
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, TopologyError
from vmd_files import header, particles_group, write_adk_vmd  # tests/ is on sys.path


@pytest.fixture(scope="module")
def adk_vmd(tmp_path_factory, adk_universe, adk_positions):
    """adk with every property of the module (:func:`vmd_files.write_adk_vmd`)."""
    return write_adk_vmd(tmp_path_factory.mktemp("vmd") / "adk_vmd.h5", adk_universe,
                         adk_positions)


def test_the_module_gives_the_atoms_their_topology(adk_vmd, adk_universe):
    """Every property as the PSF has it, per atom; the file is its own topology."""
    u = adk_universe
    with xr.open_dataset(adk_vmd, engine="h5md") as ds:
        assert ds.attrs["topology"] == adk_vmd
        np.testing.assert_array_equal(ds.name.values, u.atoms.names)
        np.testing.assert_array_equal(ds.type.values, u.atoms.types)
        np.testing.assert_allclose(ds.mass.values, u.atoms.masses, rtol=1e-6)
        np.testing.assert_allclose(ds.charge.values, u.atoms.charges, rtol=1e-6)
        np.testing.assert_array_equal(ds.resid.values, u.atoms.resindices)
        np.testing.assert_array_equal(ds.resname.values, u.atoms.resnames)
        np.testing.assert_array_equal(ds.segid.values, u.atoms.segids)
        assert list(np.unique(ds.chainID.values)) == ["A", "B"]
        assert ds.chainID.values[u.select_atoms("resid 101").indices[0]] == "B"
    from h5mdx.engine.topology import load_universe

    mine = load_universe(adk_vmd)
    assert len(mine.atoms) == len(u.atoms) and len(mine.residues) == len(u.residues)
    np.testing.assert_array_equal(np.sort(mine.bonds.indices, axis=0),
                                  np.sort(u.bonds.indices, axis=0))


def test_selections_and_rmsd_need_no_topology_file(adk_vmd, adk_universe):
    """select= at open and ds.md.rmsd(select=, weights="mass") use the module: equal to
    MDAnalysis on the PSF (the module's resid are 0-based: resid 10:49 is the PSF's
    11:50)."""
    from MDAnalysis.analysis.rms import RMSD

    u = adk_universe
    with xr.open_dataset(adk_vmd, engine="h5md", select="name CA") as ds:
        np.testing.assert_array_equal(ds.atom.values, u.select_atoms("name CA").indices)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(u, select="name CA and resid 11:50",
                        weights="mass").run().results.rmsd[:, 2]
    with xr.open_dataset(adk_vmd, engine="h5md", chunks={}) as ds:
        got = ds.md.rmsd(select="name CA and resid 10:49", weights="mass").values
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_rmsd_on_the_command_line_needs_no_topology(adk_vmd, adk_universe, tmp_path, capsys):
    from MDAnalysis.analysis.rms import RMSD

    from h5mdx.cli import main

    out = tmp_path / "rmsd.csv"
    assert main(["rmsd", adk_vmd, "--select", "name CA", "--no-progress", "--out",
                 str(out)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(adk_universe, select="name CA").run().results.rmsd[:, 2]
    got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    assert main(["info", adk_vmd]) == 0
    assert ("topology: VMD's structure module: name, type, mass per species; resid, charge, "
            "segid per atom; resname, chain per residue; 3365 bond(s), from "
            "/parameters/vmd_structure") in capsys.readouterr().out


def _mixture(path, rng):
    """HALMD's binary mixture as the plugin's sample holds it: two groups, the names per
    species alone."""
    a = rng.random((5, 6, 3)).astype(np.float32)
    b = rng.random((5, 4, 3)).astype(np.float32)
    with h5py.File(path, "w") as f:
        header(f)
        particles_group(f, "A", a, np.full(6, 1, dtype=np.int32))
        particles_group(f, "B", b, np.full(4, 2, dtype=np.int32))
        vmd = f.create_group("parameters/vmd_structure")
        vmd["indexOfSpecies"] = np.array([1, 2], dtype=np.int32)
        vmd["name"] = np.array([b"He", b"Li"], dtype="S16")
    return a, b


def test_each_group_takes_the_names_of_its_species(tmp_path):
    """Per-species names serve every group; a selection of group B (opened, or in
    ds.md.rmsd) uses B's species, not A's."""
    from h5mdx.analysis.qcp import rmsd_qcp
    from h5mdx.engine.topology import load_universe

    path = tmp_path / "mixture.h5"
    _, b = _mixture(path, np.random.default_rng(5))
    with xr.open_dataset(path, engine="h5md", group="particles/A") as ds:
        assert list(ds.name.values) == ["He"] * 6
    with xr.open_dataset(path, engine="h5md", group="particles/B", select="name Li") as ds:
        assert ds.sizes["atom"] == 4 and list(ds.name.values) == ["Li"] * 4
        got = ds.md.rmsd(select="name Li").values
    expected = np.ravel([rmsd_qcp(f.astype(np.float64), b[0].astype(np.float64)) for f in b])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    with pytest.raises(TopologyError, match=r"2 groups have positions \(A, B\): open one "
                       "with group="):
        load_universe(path)
    assert len(load_universe(path, "particles/B").select_atoms("name Li")) == 4


def test_a_copy_of_the_file_is_the_topology_of_its_group(tmp_path):
    """topology= another file with the module (a copy) of the positions of group B: its
    group B's atoms, at open and in ds.md.rmsd. It took the group only where the topology
    was the positions' own file, and failed: "2 groups have positions"."""
    import shutil

    from h5mdx.analysis.qcp import rmsd_qcp
    from h5mdx.engine.topology import load_universe

    path, copy = tmp_path / "mixture.h5", tmp_path / "structure.h5"
    _, b = _mixture(path, np.random.default_rng(7))
    shutil.copy(path, copy)
    with xr.open_dataset(path, engine="h5md", group="B", topology=str(copy),
                         select="name Li") as ds:
        assert ds.sizes["atom"] == 4 and list(ds.name.values) == ["Li"] * 4
        assert ds.attrs["topology"] == str(copy)
        got = ds.md.rmsd(select="name Li", topology=str(copy)).values
    expected = np.ravel([rmsd_qcp(f.astype(np.float64), b[0].astype(np.float64)) for f in b])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    with pytest.raises(TopologyError, match=r"none named 'C', and 2 groups have positions"):
        load_universe(copy, "C")


def _tiny(path, **vmd):
    with h5py.File(path, "w") as f:
        header(f)
        particles_group(f, "atoms", np.zeros((2, 3, 3), dtype=np.float32),
               np.array([7, 8, 7], dtype=np.int32))
        grp = f.create_group("parameters/vmd_structure")
        for k, v in vmd.items():
            grp[k] = v


GOOD = {"indexOfSpecies": np.array([7, 8], dtype=np.int32),
        "name": np.array([b"O", b"H"]), "type": np.array([b"OW", b"HW"]),
        "resid": np.array([0, 0, 1], dtype=np.int32),
        "resname": np.array([b"SOL", b"ION"])}


@pytest.mark.parametrize(("change", "said", "kept", "lost"), [
    ({"name": np.array([b"O"])},
     r"\[/parameters/vmd_structure/name\]: holds 1 entries, not one per species of "
     r"indexOfSpecies \(2\); left out", "type", "name"),
    ({"indexOfSpecies": np.array([7, 9], dtype=np.int32)},
     r"\[/parameters/vmd_structure/indexOfSpecies\]: lists no species \[8\] of "
     "/particles/atoms; no name, type for /particles/atoms", "resname", "type"),
    ({"resname": np.array([b"SOL"])},
     r"\[/parameters/vmd_structure/resname\]: holds one entry per residue, indexed by "
     r"resid, but /particles/atoms's resid 0..1 do not index its 1 entries", "name",
     "resname"),
    ({"bond_from": np.array([0, 1], dtype=np.int32), "bond_to": np.array([1, 2], dtype=np.int32)},
     r"\[/parameters/vmd_structure/bond_from\]: the bonds' atoms 0..2 are not 1-based "
     "numbers of 3 atoms", "name", None),
], ids=["name-per-species-short", "species-unlisted", "resname-short", "bonds-0-based"])
def test_a_part_that_does_not_fit_is_said_and_left_out(tmp_path, change, said, kept, lost):
    """One warning naming the file, the dataset and what was left out; the other
    properties served; strict=True refuses the file."""
    path = tmp_path / "tiny.h5"
    _tiny(path, **{**GOOD, **change})
    with pytest.warns(H5MDConformanceWarning, match=said) as record:
        ds = xr.open_dataset(path, engine="h5md")
    assert sum("vmd_structure" in str(w.message) for w in record) == 1
    with ds:
        assert kept in ds.coords and (lost is None or lost not in ds.coords)
    with pytest.raises(H5MDFormatError, match="vmd_structure"):
        xr.open_dataset(path, engine="h5md", strict=True)


@pytest.mark.parametrize("stored", ["references", "sequences"])
def test_names_of_references_or_sequences_are_left_out_not_served_as_text(tmp_path, stored):
    """A ``name`` of object references or variable-length numbers (a mutation fuzz,
    audit65) was served as the text of each Python object ('<HDF5 object reference>',
    '[0. 1.]') for every atom, in silence; the scan had said it left it out. It is left
    out, said once per open, and the other properties are served."""
    path = tmp_path / "tiny.h5"
    _tiny(path, **GOOD)
    with h5py.File(path, "r+") as f:
        grp = f["parameters/vmd_structure"]
        del grp["name"]
        if stored == "references":
            grp.create_dataset("name", data=np.array([f.ref, f.ref], dtype=h5py.ref_dtype))
        else:
            name = grp.create_dataset("name", (2,), dtype=h5py.vlen_dtype(np.float64))
            name[0], name[1] = np.zeros(1), np.zeros(2)
    for open_ in (xr.open_dataset, xr.open_datatree):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with open_(path, engine="h5md") as opened:
                atoms = opened if open_ is xr.open_dataset else opened["particles/atoms"]
                assert "name" not in atoms.coords
                assert atoms.type.values.tolist() == ["OW", "HW", "OW"]
        said = [str(w.message) for w in record if "vmd_structure/name" in str(w.message)]
        assert len(said) == 1 and said[0].endswith("left out"), said


@pytest.mark.parametrize("name", [np.array([[b"O", b"O"], [b"H", b"H"]]), "group"],
                         ids=["2-d", "group"])
def test_a_property_the_scan_leaves_out_is_said_at_the_open_of_the_atoms(tmp_path, name):
    """A ``name`` of shape (2, 2), or a group (a mutation fuzz): the particles'
    Dataset came without names and without a warning, where strict=True refused it and
    a ``name`` of the wrong length is said at that open. Said once, the others served."""
    path = tmp_path / "tiny.h5"
    _tiny(path, **{**GOOD, "name": name if not isinstance(name, str) else np.zeros(1)})
    if isinstance(name, str):
        with h5py.File(path, "r+") as f:
            del f["parameters/vmd_structure/name"]
            f.create_group("parameters/vmd_structure/name")
    for open_ in (xr.open_dataset, xr.open_datatree):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with open_(path, engine="h5md") as opened:
                atoms = opened if open_ is xr.open_dataset else opened["particles/atoms"]
                assert "name" not in atoms.coords and "type" in atoms.coords
        said = [str(w.message) for w in record if "vmd_structure" in str(w.message)]
        assert len(said) == 1 and "[/parameters/vmd_structure/name]" in said[0], said
    with pytest.raises(H5MDFormatError, match="vmd_structure/name"):
        xr.open_dataset(path, engine="h5md", strict=True)


def test_a_module_of_no_property_is_no_topology(tmp_path):
    """indexOfSpecies alone (the plugin's half_complete_vmd_structure.h5): nothing to
    serve, and a selection still asks for a topology."""
    path = tmp_path / "half.h5"
    _tiny(path, indexOfSpecies=np.array([7, 8], dtype=np.int32))
    with xr.open_dataset(path, engine="h5md") as ds:
        assert "name" not in ds.coords and "topology" not in ds.attrs
    with pytest.raises(TopologyError, match="needs a topology"):
        xr.open_dataset(path, engine="h5md", select="name O")


def test_to_h5md_writes_the_module_again(adk_vmd, adk_universe, tmp_path):
    """A selection of a file with the module, written with ds.md.to_h5md, keeps its
    atoms' names, types, masses (per its species), residues and segments; a file's own
    species (the mixture's 2) keep their numbers."""
    ca = adk_universe.select_atoms("name CA or name CB").indices
    with xr.open_dataset(adk_vmd, engine="h5md") as ds:
        ds.isel(atom=ca, time=slice(0, 5)).md.to_h5md(tmp_path / "cut.h5")
    with xr.open_dataset(tmp_path / "cut.h5", engine="h5md", select="name CB") as cut:
        atoms = adk_universe.select_atoms("name CB")
        np.testing.assert_array_equal(cut.resname.values, atoms.resnames)
        np.testing.assert_array_equal(cut.resid.values, atoms.resindices)
        np.testing.assert_array_equal(cut.segid.values, atoms.segids)
        np.testing.assert_allclose(cut.mass.values, atoms.masses, rtol=1e-6)
        assert set(cut.type.values.tolist()) == set(atoms.types.tolist())
    path = tmp_path / "mixture.h5"
    _mixture(path, np.random.default_rng(2))
    with xr.open_dataset(path, engine="h5md", group="particles/B") as ds:
        ds.md.to_h5md(tmp_path / "b.h5")
    with xr.open_dataset(tmp_path / "b.h5", engine="h5md", select="name Li") as b:
        assert b.sizes["atom"] == 4 and (b.species.values == 2).all()


def test_to_h5md_keeps_a_topology_passed_at_open(adk_h5md, adk_universe, tmp_path):
    """A file without names (MDAnalysis' H5MDWriter) opened with topology= the PSF and
    written with ds.md.to_h5md names its atoms itself: the module is written from the
    attached coordinates, with species one per name, type and mass."""
    from h5mdx.testing import adk_topology

    with xr.open_dataset(adk_h5md, engine="h5md", topology=adk_topology()) as ds:
        assert "species" not in ds
        ds.isel(time=slice(0, 3)).md.to_h5md(tmp_path / "named.h5")
    with xr.open_dataset(tmp_path / "named.h5", engine="h5md", select="name CA") as ca:
        np.testing.assert_array_equal(ca.atom.values,
                                      adk_universe.select_atoms("name CA").indices)
        np.testing.assert_array_equal(ca.resid.values,
                                      adk_universe.select_atoms("name CA").resids)


def test_mass_weights_from_the_files_masses_where_the_module_has_none(
        tmp_path, adk_universe, adk_positions):
    """A structure module without ``mass`` beside the group's own ``mass`` element:
    ``weights="mass"`` took the module as the topology and failed with MDAnalysis'
    bare NoDataError ("This Universe does not contain mass information"). It takes the
    file's masses now, as MDAnalysis weighs by the PSF's; positions alone say what to
    pass."""
    from MDAnalysis.analysis import rms

    path = write_adk_vmd(tmp_path / "adk_vmd.h5", adk_universe, adk_positions)
    with h5py.File(path, "r+") as f:
        del f["parameters/vmd_structure/mass"]
        f["particles/atoms/mass"] = adk_universe.atoms.masses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = adk_universe.copy()
        u.load_new(adk_positions[:5].copy())
        want = rms.RMSD(u, select="name CA", weights="mass").run().results.rmsd[:, 2]
    with xr.open_dataset(path, engine="h5md") as ds:
        ds = ds.isel(time=slice(0, 5))
        assert "mass" not in ds.position.coords and ds.attrs["topology"] == str(path)
        got = ds.md.rmsd(select="name CA", weights="mass").compute(scheduler="sync")
        np.testing.assert_allclose(got.values, want, rtol=0, atol=2e-5)
        with pytest.raises(TopologyError, match=r"the topology .*adk_vmd.h5' has none .*"
                           r"weights=ds.mass"):
            h5mdx.rmsd(ds.position, weights="mass")



def test_mpi_mass_weights_from_the_files_masses_where_the_module_has_none(
        tmp_path, adk_universe, adk_positions):
    """The MPI program's selection and masses (``h5mdx mpi-rmsd --topology FILE``, the
    file itself, whose structure module has no mass) failed the same way, with
    MDAnalysis' NoDataError: they are the file's masses of the selected atoms now."""
    from h5mdx.mpi.rmsd import _select

    path = write_adk_vmd(tmp_path / "adk_vmd.h5", adk_universe, adk_positions[:2])
    with h5py.File(path, "r+") as f:
        del f["parameters/vmd_structure/mass"]
        f["particles/atoms/mass"] = adk_universe.atoms.masses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idx, masses, n = _select(path, "name CA", "mass", path, "atoms")
    ca = adk_universe.select_atoms("name CA")
    np.testing.assert_array_equal(idx, ca.indices)
    np.testing.assert_allclose(masses, ca.masses)
    assert n == adk_universe.atoms.n_atoms


def test_a_name_ends_at_its_first_nul_as_vmd_reads_it(tmp_path):
    """Fixed-length names of a C writer that copies them into an unzeroed buffer
    (b"O\\x00\\x7fq"): VMD's plugin reads them as C strings (H5T_C_S1), "O"; h5mdx served
    "O\\x00\\x7fq", so that select="name O" picked one atom of two."""
    path = tmp_path / "tiny.h5"
    _tiny(path, **{**GOOD, "name": np.array([b"O\x00\x7fq", b"H"], dtype="S4"),
                   "resname": np.array([b"SOL\x00\x01", b"ION"], dtype="S5")})
    with xr.open_dataset(path, engine="h5md", select="name O") as ds:
        assert ds.name.values.tolist() == ["O", "O"]
        assert ds.resname.values.tolist() == ["SOL", "ION"]


def test_a_name_of_latin1_bytes_is_read_as_latin1(tmp_path):
    """A name stored in Latin-1 (b"C\xe91", an older writer's) was served as "C\ufffd1",
    which no selection can name; now "Cé1"."""
    path = tmp_path / "latin1.h5"
    _tiny(path, **{**GOOD, "name": np.array([b"C\xe91", b"H"], dtype="S4")})
    with xr.open_dataset(path, engine="h5md", select="name Cé1") as ds:
        assert ds.name.values.tolist() == ["Cé1", "Cé1"]


def test_convert_keeps_negative_residue_numbers(tmp_path, adk_universe):
    """A topology numbering its first residues -2, -1, 0 (a PDB's leader peptide):
    ``h5mdx convert`` wrote no resid, resname or chain at all, without a word, so that
    select="resid 5" failed on the written file. resid is written as given now (VMD
    reads it per atom); resname and chain, which VMD reads as resname[resid], are left
    out with a warning naming the file and the dataset."""
    from h5mdx.layout.convert import convert

    u = adk_universe.copy()
    resids = u.residues.resids.copy()
    resids[:3] = [-2, -1, 0]
    u.residues.resids = resids
    out = tmp_path / "negative.h5"
    with pytest.warns(UserWarning, match=r"negative\.h5 \[/parameters/vmd_structure/resid\]"
                      r": residue numbers down to -2: .*resid written as given, resname"):
        convert(u, [], out, stop=1, progress=False)
    with xr.open_dataset(out, engine="h5md", select="resid -1 or resid 5") as ds:
        want = u.select_atoms("resid -1 or resid 5")
        np.testing.assert_array_equal(ds.resid.values, want.resids)
        np.testing.assert_array_equal(ds.name.values, want.names.astype(str))
        assert "resname" not in ds.coords


def test_the_module_as_espresso_writes_it_one_column_a_dataset(tmp_path):
    """ESPResSo's Python H5MD writer creates every dataset of the module with shape
    (rows, 1), maxshape (None, 1): indexOfSpecies int64, name 'S30', resid, charge.
    VMD's plugin reads them a row an entry; h5mdx left out every one ("not one entry
    per species, atom, residue or bond"), so the file had no names at all. They are
    read as the plugin reads them, without a warning."""
    path = tmp_path / "espresso.h5"
    _tiny(path)
    with h5py.File(path, "r+") as f:
        grp = f["parameters/vmd_structure"]
        for name, values, dtype in (("indexOfSpecies", [7, 8], "int64"),
                                    ("name", [b"O", b"H"], "S30"),
                                    ("resid", [0, 0, 1], "int64"),
                                    ("charge", [-0.8, 0.4, 0.4], "f8"),
                                    ("resname", [b"SOL", b"ION"], "S30")):
            dset = grp.create_dataset(name, (1, 1), maxshape=(None, 1), dtype=dtype)
            dset.resize((len(values), 1))
            dset[:, 0] = values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md", select="name O", strict=True) as ds:
            assert ds.name.values.tolist() == ["O", "O"]
            assert ds.resid.values.tolist() == [0, 1]
            assert ds.resname.values.tolist() == ["SOL", "ION"]
            np.testing.assert_allclose(ds.charge.values, [-0.8, 0.4])


def _per_frame_species(path, species):
    """ESPResSo's layout: /particles/atoms/species a time series (value, step, time)
    beside the structure module's names per species."""
    frames = len(species)
    with h5py.File(path, "w") as f:
        header(f)
        g = particles_group(f, "atoms", np.random.default_rng(3).random(
            (frames, species.shape[1], 3)).astype(np.float32), np.zeros(1, np.int32))
        del g["species"]
        el = g.create_group("species")
        el["value"] = species
        el["step"] = np.arange(frames, dtype=np.int32) * 10
        el["time"] = np.arange(frames, dtype=np.float64)
        vmd = f.create_group("parameters/vmd_structure")
        vmd["indexOfSpecies"] = np.array([7, 8], dtype=np.int32)
        vmd["name"] = np.array([b"O", b"H"])


def test_species_stored_per_frame_give_the_atoms_their_names(tmp_path):
    """ESPResSo writes species per frame; VMD's plugin names the atoms by the first
    frame's. h5mdx served no names ("has no species of integers, one per atom") and
    load_universe failed. The first frame's species name the atoms where the last
    frame's agree (two frames read); species that change still leave the names out,
    said."""
    from h5mdx.engine.topology import load_universe

    path = tmp_path / "espresso.h5"
    _per_frame_species(path, np.tile(np.array([7, 8, 8, 7], dtype=np.int32), (3, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md", select="name O") as ds:
            assert ds.name.values.tolist() == ["O", "O"]
            np.testing.assert_array_equal(ds.atom.values, [0, 3])
    assert load_universe(path).atoms.names.tolist() == ["O", "H", "H", "O"]
    changing = tmp_path / "changing.h5"
    _per_frame_species(changing, np.array([[7, 8, 8, 7]] * 2 + [[7, 8, 8, 8]],
                                          dtype=np.int32))
    with pytest.warns(H5MDConformanceWarning, match=r"\[/particles/atoms/species\]: "
                      r"/parameters/vmd_structure holds name per species.* no name"):
        ds = xr.open_dataset(changing, engine="h5md")
    with ds:
        assert "name" not in ds.coords


def test_numbers_stored_as_floats_or_text(tmp_path):
    """VMD's plugin reads indexOfSpecies and resid as integers (H5T_NATIVE_INT), mass
    as floats. indexOfSpecies of whole floats [7.0, 8.0] left every name out ('absent
    or not integers'); resid of floats served float residue numbers and left the
    resnames out ('resid (none) do not index'); a mass of booleans or text was served
    as the atoms' masses (True, '12'). Whole floats are read as integers now, noted;
    a mass that is no number is left out, noted."""
    path = tmp_path / "tiny.h5"
    _tiny(path, **{**GOOD, "indexOfSpecies": np.array([7.0, 8.0]),
                   "resid": np.array([0.0, 0.0, 1.0]), "mass": np.array([b"16", b"1"])})
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md")
    said = sorted(str(w.message).split(" [", 1)[1] for w in record
                  if "vmd_structure" in str(w.message))
    assert said == [
        "/parameters/vmd_structure/indexOfSpecies]: holds float64 of whole numbers, not "
        "integers; read as the integers they are, as VMD's plugin reads them",
        "/parameters/vmd_structure/mass]: holds <U2, not numbers (VMD's plugin reads "
        "mass as such); left out",
        "/parameters/vmd_structure/resid]: holds float64 of whole numbers, not integers; "
        "read as the integers they are, as VMD's plugin reads them"]
    with ds:
        assert ds.name.values.tolist() == ["O", "H", "O"]
        assert ds.resid.values.tolist() == [0, 0, 1] and ds.resid.dtype.kind == "i"
        assert ds.resname.values.tolist() == ["SOL", "SOL", "ION"]
        assert "mass" not in ds.coords
