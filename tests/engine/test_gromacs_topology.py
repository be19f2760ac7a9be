"""GROMACS' H5MD files hold their own topology (``/h5md/modules/gromacs_topology``:
molecule types and blocks, GROMACS' new writer, ``h5md_topologyutils.cpp``) and no
``mass``, ``charge`` or ``species`` under ``/particles``. h5mdx serves it as per-atom
coordinates and as the Universe of selections, numbered as MDAnalysis numbers the run's
TPR file: the tests compare both with MDAnalysis' reading of that TPR."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx  # noqa: F401  (registers ds.md)
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, TopologyError

mda = pytest.importorskip("MDAnalysis")
datafiles = pytest.importorskip("MDAnalysisTests.datafiles")
TPR, XTC = datafiles.TPR, datafiles.XTC  # adenylate kinase in water, 47,681 atoms

MODULE = "/h5md/modules/gromacs_topology"


def _gromacs_like(path, select=None):
    """The TPR's XTC as GROMACS' new writer lays it out: /particles/system without mass,
    charge or species, and the topology module beside it."""
    from gromacs_module import write_module
    from h5mdx.layout.convert import convert

    convert(TPR, XTC, path, group="system", select=select, progress=False)
    with h5py.File(path, "r+") as f:
        for name in ("mass", "charge", "species", "id"):  # GROMACS: no atom indices
            if name in f["/particles/system"]:
                del f["/particles/system"][name]
        for written in (MODULE, "/connectivity"):  # h5mdx's own, where it wrote them
            if written in f:
                del f[written]
    write_module(path, mda.Universe(TPR))
    return str(path)


@pytest.fixture(scope="module")
def tpr():
    return mda.Universe(TPR, XTC)


@pytest.fixture(scope="module")
def gmx(tmp_path_factory):
    return _gromacs_like(tmp_path_factory.mktemp("gmx") / "adk_water.h5md")


@pytest.fixture
def gmx_copy(gmx, tmp_path):
    path = tmp_path / "copy.h5md"
    shutil.copy(gmx, path)
    return str(path)


def test_per_atom_coordinates_are_mdanalysis_reading_of_the_tpr(gmx, tpr):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_dataset(gmx, engine="h5md")
    atoms = tpr.atoms
    with ds:
        assert "mass" not in ds.data_vars  # from the module, not /particles
        for coord, want in (("name", atoms.names), ("resname", atoms.resnames),
                            ("resid", atoms.resids), ("segid", atoms.segids),
                            ("moltype", atoms.moltypes), ("molnum", atoms.molnums)):
            np.testing.assert_array_equal(ds[coord].values, want.astype(ds[coord].dtype),
                                          err_msg=coord)
        np.testing.assert_allclose(ds.mass.values, atoms.masses, rtol=1e-6)
        np.testing.assert_allclose(ds.charge.values, atoms.charges, atol=1e-6)
        assert ds.mass.attrs["units"] == "u" and ds.charge.attrs["units"] == "e"
        assert set(ds.species.values[atoms.names == "OW"]) == {8}
        assert ds.attrs["topology"] == os.path.abspath(gmx)
        assert ds.atom.attrs["topology"] == os.path.abspath(gmx)
        assert ds.attrs["system_name"] == "adenylate kinase in water"


@pytest.mark.parametrize("selection", [
    "name CA", "protein and backbone", "resname SOL and name OW", "element O",
    "segid seg_1_SOL", "molnum 5", "moltype NA+", "resid 200:220", "resnum 214",
    "same residue as (protein and resid 10)"])
def test_the_module_universe_selects_what_the_tpr_selects(gmx, tpr, selection):
    from h5mdx.engine.topology import load_universe

    universe = load_universe(gmx)
    assert universe.filename == os.path.abspath(gmx)
    got = universe.select_atoms(selection).indices
    assert got.size
    np.testing.assert_array_equal(got, tpr.select_atoms(selection).indices)


def test_the_bonds_of_the_file_are_the_topology_s(gmx, tpr):
    """/connectivity/bonds (GROMACS' writeBonds: 0-based indices of the whole system)
    give the Universe its bonds: fragments and bond-based selections as with the TPR."""
    from h5mdx.engine.topology import load_universe

    universe = load_universe(gmx)
    np.testing.assert_array_equal(np.sort(universe.bonds.indices, axis=0),
                                  np.sort(tpr.bonds.indices, axis=0))
    got, want = universe.atoms.fragments, tpr.atoms.fragments
    assert len(got) == len(want) == 22173  # 11,084 TIP4P virtual sites stand alone
    assert all(np.array_equal(a.indices, b.indices) for a, b in zip(got, want, strict=True))
    np.testing.assert_array_equal(universe.select_atoms("bonded name CA").indices,
                                  tpr.select_atoms("bonded name CA").indices)


def test_bonds_beyond_the_atoms_are_left_out_with_a_warning(gmx_copy):
    from h5mdx.engine.topology import load_universe

    with h5py.File(gmx_copy, "r+") as f:
        f["/connectivity/bonds"][0] = (0, 47681)
    with pytest.warns(H5MDConformanceWarning, match=(
            r"copy\.h5md \[/connectivity/bonds\]: holds atom indices 0\.\.47681, beyond the "
            rf"47681 atoms of {MODULE}; the topology's bonds left out")):
        universe = load_universe(gmx_copy)
    assert not hasattr(universe, "bonds") or len(universe.bonds) == 0
    assert len(universe.select_atoms("name CA")) == 214


def test_select_and_rmsd_need_no_topology_file(gmx, tpr):
    """Selections and mass weights come from the file: the RMSD equals MDAnalysis' with
    the TPR."""
    from MDAnalysis.analysis import rms

    ca = tpr.select_atoms("name CA").indices
    with xr.open_dataset(gmx, engine="h5md", select="name CA") as ds:
        np.testing.assert_array_equal(ds.atom.values, ca)
        assert set(ds.name.values) == {"CA"}
    with xr.open_dataset(gmx, engine="h5md", chunks={}) as ds:
        for weights in (None, "mass"):
            want = rms.RMSD(tpr, select="name CA", weights=weights).run().results.rmsd[:, 2]
            got = ds.md.rmsd(select="name CA", weights=weights).values
            np.testing.assert_allclose(got, want, atol=1e-4)


def test_a_topology_passed_wins(gmx, tpr):
    with xr.open_dataset(gmx, engine="h5md", topology=TPR) as ds:
        assert ds.attrs["topology"] == TPR
        assert "type" in ds.coords and "moltype" not in ds.coords  # the TPR's, as read
    with xr.open_dataset(gmx, engine="h5md", topology=gmx, select="resname NA+") as ds:
        assert ds.sizes["atom"] == 4 and "moltype" in ds.coords  # the file itself


def test_a_group_of_selected_atoms_gets_no_topology_of_the_whole_system(tmp_path):
    """GROMACS writes the whole system's module beside a group of selected atoms, without
    their indices: the module cannot be mapped onto them."""
    path = _gromacs_like(tmp_path / "protein.h5md", select="protein")
    with pytest.warns(H5MDConformanceWarning, match=(
            rf"protein\.h5md \[{MODULE}\]: describes 47681 atoms but /particles/system has "
            r"3341 .*no per-atom topology attached")) as record:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(record) == 1
    with ds:
        assert "name" not in ds.coords and "topology" not in ds.attrs
        assert ds.position.shape == (10, 3341, 3)
    with pytest.raises(TopologyError, match=rf"needs a topology: .*; the file's {MODULE} "
                       "describes 47681 atoms, not the 3341 of /particles/system"):
        xr.open_dataset(path, engine="h5md", select="name CA")
    with pytest.raises(TopologyError, match="47681 atoms but the trajectory has 3341"):
        xr.open_dataset(path, engine="h5md", topology=path)


def _opened(path, *patterns):
    """The Dataset of ``path``, and exactly the warnings ``patterns`` heard."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
    messages = [str(w.message) for w in record]
    assert len(messages) == len(patterns), messages
    for pattern, message in zip(patterns, messages, strict=True):
        assert pattern in message, (pattern, message)
    return ds


def test_a_mass_of_the_wrong_length_leaves_out_the_masses_only(gmx_copy, tpr):
    with h5py.File(gmx_copy, "r+") as f:
        sol = f[f"{MODULE}/SOL"]
        del sol["mass"]
        sol["mass"] = np.ones(2, dtype=np.float32)
    ds = _opened(gmx_copy,
                 # TIP4P water: OW, HW1, HW2 and the virtual site MW
                 f"[{MODULE}/SOL/mass]: has 2 entries but the molecule type has 4 atoms; "
                 "left out",
                 f"[{MODULE}]: molecule type(s) SOL lack the mass of their atoms; no atom's "
                 "mass served")
    with ds:
        assert "mass" not in ds.coords
        np.testing.assert_array_equal(ds.name.values, tpr.atoms.names)
    with pytest.raises(H5MDFormatError, match=r"SOL/mass\]: has 2 entries"):
        xr.open_dataset(gmx_copy, engine="h5md", strict=True)


def test_names_indexing_beyond_their_table_are_left_out(gmx_copy, tpr):
    with h5py.File(gmx_copy, "r+") as f:
        f[f"{MODULE}/NA+/particle_name"][0] = 7
    ds = _opened(gmx_copy,
                 f"[{MODULE}/NA+/particle_name]: must hold indices into particle_name_table "
                 "(0..0); left out",
                 "molecule type(s) NA+ lack the name of their atoms; no atom's name served")
    with ds:
        assert "name" not in ds.coords
        np.testing.assert_array_equal(ds.resname.values, tpr.atoms.resnames)


def test_a_name_table_of_references_is_left_out_not_served_as_text(gmx_copy, tpr):
    """A name table of object references (a mutation fuzz) named every atom
    '<HDF5 object reference>', in silence: it is left out, as an unreadable table is."""
    table = f"{MODULE}/NA+/particle_name_table"
    with h5py.File(gmx_copy, "r+") as f:
        del f[table]
        f.create_dataset(table, data=np.array([f.ref], dtype=h5py.ref_dtype))
    ds = _opened(gmx_copy,
                 f"[{table}]: object references, which h5mdx does not follow; left out",
                 f"[{table}]: is missing or unreadable, so {MODULE}/NA+/particle_name cannot",
                 "molecule type(s) NA+ lack the name of their atoms; no atom's name served")
    with ds:
        assert "name" not in ds.coords
        np.testing.assert_array_equal(ds.resname.values, tpr.atoms.resnames)


def test_a_block_of_a_molecule_type_not_held_leaves_out_the_module(gmx_copy, tpr):
    with h5py.File(gmx_copy, "r+") as f:
        del f[f"{MODULE}/NA+"]
    ds = _opened(gmx_copy, f"[{MODULE}/NA+]: a molecule block names this molecule type, "
                 "which the module does not hold as a group of this file; the module left out")
    with ds:
        assert "name" not in ds.coords
        np.testing.assert_allclose(ds.position.values[0], tpr.trajectory[0].positions,
                                   atol=1e-3)


def test_blocks_that_do_not_fit_together_leave_out_the_module(gmx_copy):
    with h5py.File(gmx_copy, "r+") as f:
        f[MODULE].attrs["molecule_block_counts"] = np.array([1, 11084], dtype=np.int32)
    ds = _opened(gmx_copy, "do not fit together (as many names as counts, counts integers "
                 ">= 0); the module left out")
    with ds:
        assert "name" not in ds.coords


def test_info_and_the_rmsd_command_use_it(gmx, tpr, tmp_path):
    from MDAnalysis.analysis import rms

    from h5mdx.mpi.rmsd import MPIRMSDOptions

    out = subprocess.run([sys.executable, "-m", "h5mdx", "info", gmx], capture_output=True,
                         text=True, check=True).stdout
    assert ("topology: 'adenylate kinase in water': 47681 atoms in 11089 molecules (AKeco "
            "x1, SOL x11084, NA+ x4); name, resname, mass, charge, species, resid per atom"
            ) in out
    csv = tmp_path / "rmsd.csv"
    subprocess.run([sys.executable, "-m", "h5mdx", "rmsd", gmx, "--select", "name CA",
                    "--scheduler", "threads", "--workers", "2", "--no-progress",
                    "--out", str(csv)], capture_output=True, text=True, check=True)
    got = np.loadtxt(csv, delimiter=",", skiprows=1, usecols=-1)
    want = rms.RMSD(tpr, select="name CA").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got, want, atol=1e-4)
    options = MPIRMSDOptions(gmx, select="name CA")
    options.check()  # what each rank of mpi-rmsd does first
    assert options.topology == gmx


# ----------------------------------------------------------------------------- writing


def test_convert_writes_the_module_of_a_tpr_s_atoms(tmp_path, tpr):
    """h5mdx convert of a TPR's trajectory writes GROMACS' module and the bonds: the file
    then selects atoms, and weighs them, without the TPR."""
    from MDAnalysis.analysis import rms

    from h5mdx.engine.topology import load_universe
    from h5mdx.layout.convert import convert

    path = str(tmp_path / "converted.h5md")
    convert(TPR, XTC, path, progress=False)
    with h5py.File(path, "r") as f:
        mod = f[MODULE]
        assert mod.attrs["molecule_block_names"].tolist() == [b"AKeco", b"SOL", b"NA+"]
        assert mod.attrs["molecule_block_counts"].tolist() == [1, 11084, 4]
        sol = mod["SOL"]  # GROMACS' types (h5md_topologyutils.cpp)
        assert sol.attrs["particle_count"] == 4 and sol.attrs["residue_count"] == 1
        assert sol["particle_name"].dtype == np.int32 and sol["id"].dtype == np.int64
        assert sol["particle_name_table"][()].tolist() == [b"OW", b"HW1", b"HW2", b"MW"]
        assert sol["mass"].attrs["unit"] == b"u" and sol["charge"].attrs["unit"] == b"e"
        assert f["/connectivity/bonds"].shape == (len(tpr.bonds), 2)
        assert f[f["/connectivity/bonds"].attrs["particles_group"]].name == \
            "/particles/trajectory"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_dataset(path, engine="h5md", chunks={})
    with ds:
        for coord, want in (("name", tpr.atoms.names), ("resid", tpr.atoms.resids),
                            ("segid", tpr.atoms.segids), ("molnum", tpr.atoms.molnums)):
            np.testing.assert_array_equal(ds[coord].values, want.astype(ds[coord].dtype))
        want = rms.RMSD(tpr, select="backbone", weights="mass").run().results.rmsd[:, 2]
        np.testing.assert_allclose(ds.md.rmsd(select="backbone", weights="mass").values,
                                   want, atol=1e-4)
    universe = load_universe(path)
    np.testing.assert_array_equal(np.sort(universe.bonds.indices, axis=0),
                                  np.sort(tpr.bonds.indices, axis=0))


@pytest.mark.parametrize(("select", "module"), [
    ("name CA", True),  # part of one molecule: its atoms are the molecule type
    ("resname SOL", False),  # the module would number the waters' residues 1..N
])
def test_convert_writes_the_module_only_where_it_reads_back_exactly(tmp_path, tpr, select,
                                                                    module):
    from h5mdx.layout.convert import convert

    path = str(tmp_path / "selected.h5md")
    convert(TPR, XTC, path, select=select, progress=False)
    with h5py.File(path, "r") as f:
        assert (MODULE in f) is module
        assert ("parameters/vmd_structure" in f) is not module  # VMD's module instead
    with xr.open_dataset(path, engine="h5md") as ds:
        atoms = tpr.select_atoms(select)
        np.testing.assert_array_equal(ds.resid.values, atoms.resids)
        np.testing.assert_array_equal(ds.name.values, atoms.names.astype(str))
        assert ("moltype" in ds.coords) is module


def test_convert_of_a_topology_without_molecules_writes_no_module(tmp_path):
    """A PSF has no molecule types: the module would rename its segments."""
    from h5mdx.layout.convert import convert

    path = str(tmp_path / "adk.h5md")
    convert(datafiles.PSF, datafiles.DCD, path, stop=3, progress=False)
    with h5py.File(path, "r") as f:
        assert MODULE not in f and "connectivity" not in f


def test_to_h5md_writes_the_module_again(gmx, tpr, tmp_path):
    """A GROMACS file cut in time, or to its protein (molecule 0), written with
    ds.md.to_h5md keeps its topology; the waters alone (molecules renumbered) do not: they
    keep their names and residues in VMD's structure module."""
    with xr.open_dataset(gmx, engine="h5md") as ds:
        ds.isel(time=slice(0, 4)).md.to_h5md(tmp_path / "cut.h5md")
        protein = (ds.moltype == "AKeco").values
        ds.isel(atom=protein).md.to_h5md(tmp_path / "protein.h5md")
        ds.isel(atom=(ds.moltype == "SOL").values).md.to_h5md(tmp_path / "water.h5md")
    with xr.open_dataset(tmp_path / "cut.h5md", engine="h5md") as cut:
        assert cut.sizes["time"] == 4
        for coord, want in (("name", tpr.atoms.names), ("resid", tpr.atoms.resids),
                            ("segid", tpr.atoms.segids), ("moltype", tpr.atoms.moltypes)):
            np.testing.assert_array_equal(cut[coord].values, want.astype(cut[coord].dtype))
        np.testing.assert_allclose(cut.mass.values, tpr.atoms.masses, rtol=1e-6)
        assert cut.attrs["system_name"] == "adenylate kinase in water"
    with xr.open_dataset(tmp_path / "protein.h5md", engine="h5md") as prot:
        np.testing.assert_array_equal(prot.name.values, tpr.select_atoms("protein").names)
    with xr.open_dataset(tmp_path / "water.h5md", engine="h5md") as water:
        sol = tpr.atoms[tpr.atoms.moltypes == "SOL"]
        assert "moltype" not in water.coords  # GROMACS' module would renumber them
        # VMD's structure module keeps their names and residues instead
        np.testing.assert_array_equal(water.name.values, sol.names.astype(str))
        np.testing.assert_array_equal(water.resid.values, sol.resids)


def test_to_h5md_of_atoms_whose_names_share_a_species_says_the_names_are_not_written(
        tmp_path, tpr):
    """A file ``h5mdx convert`` wrote of a TPR's atoms has species by atom type; three
    of its waters (molecules renumbered: no GROMACS module) written with ds.md.to_h5md
    lost their names, residues and segments without a word (HW1 and HW2 share a type,
    and VMD's structure module holds one name per species). The loss is said now,
    naming the file, the module and a species."""
    from h5mdx.layout.convert import convert

    path = tmp_path / "adk_water.h5md"
    convert(TPR, XTC, path, stop=2, progress=False)
    ids = tpr.select_atoms("resname SOL and resid 300-302").indices
    out = tmp_path / "waters.h5md"
    with xr.open_dataset(path, engine="h5md") as ds:
        assert list(ds.name.values[ids[:3]]) == ["OW", "HW1", "HW2"]
        assert ds.species.values[ids[1]] == ds.species.values[ids[2]]
        with pytest.warns(UserWarning, match=r"waters\.h5md \[/parameters/vmd_structure\]: "
                          r"the atoms' names are not one per species \(species \d+: 'HW1', "
                          r"'HW2'\).* no names, residues or segments written"):
            ds.isel(atom=ids).md.to_h5md(out)
    with xr.open_dataset(out, engine="h5md", topology=tpr.atoms[ids]) as back:
        np.testing.assert_array_equal(back.name.values, tpr.atoms[ids].names.astype(str))


def test_a_name_ends_at_its_first_nul_as_gromacs_reads_it(gmx_copy, tpr):
    """Fixed-size name tables read as C strings (H5T_C_S1, as GROMACS reads its own): a
    table entry with bytes after its NUL (b"NA\\x00\\x7f", an unzeroed buffer) is "NA";
    h5mdx served "NA\\x00\\x7f", and select="name NA" missed the ion."""
    table = f"{MODULE}/NA+/particle_name_table"
    with h5py.File(gmx_copy, "r+") as f:
        assert f[table][()].tolist() == [b"NA"]
        del f[table]
        f[table] = np.array([b"NA\x00\x7f"], dtype="S4")
        names = f[MODULE].attrs["molecule_block_names"]
        f[MODULE].attrs["molecule_block_names"] = np.array(
            [n + b"\x00\x01" if n == b"SOL" else n for n in names.tolist()],
            dtype=f"S{names.dtype.itemsize + 2}")
    with xr.open_dataset(gmx_copy, engine="h5md", select="name NA") as ds:
        want = tpr.select_atoms("name NA")
        np.testing.assert_array_equal(ds.name.values, want.names.astype(str))
        np.testing.assert_array_equal(ds.segid.values, want.segids.astype(str))
    with xr.open_dataset(gmx_copy, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.segid.values, tpr.atoms.segids.astype(str))


def test_a_module_left_out_is_named_when_the_file_is_passed_as_topology(gmx_copy, tpr):
    """The file itself as topology= (or load_universe, --topology) where its module was
    left out: the error was MDAnalysis' "MDAnalysis cannot read this topology: Unable to
    open object (object 'trajectory' doesn't exist)", about a group nobody named. It
    names the module's problem and what to pass now."""
    from h5mdx.engine.topology import load_universe

    with h5py.File(gmx_copy, "r+") as f:
        del f[f"{MODULE}/NA+"]
    said = (rf"copy\.h5md: its topology cannot be read: {MODULE}/NA\+: a molecule block "
            r"names this molecule type, which the module does not hold .*; pass topology= "
            "a file MDAnalysis reads")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TopologyError, match=said):
            load_universe(gmx_copy)
        with pytest.raises(TopologyError, match=said):
            xr.open_dataset(gmx_copy, engine="h5md", topology=gmx_copy)


def test_a_selection_by_atom_types_says_the_module_holds_none(gmx):
    """GROMACS' module holds no atom types: select="type opls_135" was refused as an
    "invalid selection ...: 'Topology' object has no attribute 'types'", though the
    selection is valid. The error says the topology does not hold the atoms' types
    and what to pass; a selection of bad syntax is still called invalid. Found by an
    audit."""
    with pytest.raises(TopologyError, match=r"adk_water\.h5md: the selection 'type "
                       r"opls_135' needs the atoms' types, which the topology "
                       r"'.*adk_water\.h5md' does not hold; pass topology= a file"):
        xr.open_dataset(gmx, engine="h5md", select="type opls_135")
    with pytest.raises(TopologyError, match=r"invalid selection 'name CA and'"):
        xr.open_dataset(gmx, engine="h5md", select="name CA and")
