"""Selections by position (``around``, ``prop z``, ``point``, ...) in ``select=``: made once,
on the reference's frame, in Angstrom, periodic where a box is, as MDAnalysis'
``rms.RMSD`` makes them on the frame its Universe is at. Every series is compared with
MDAnalysis 2.x on the adk PSF/DCD."""

from __future__ import annotations

import warnings

import MDAnalysis as mda
import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysis.transformations.boxdimensions import set_dimensions
from MDAnalysisTests.datafiles import DCD, PSF

import h5mdx
from h5mdx.analysis.reference import select_atoms
from h5mdx.errors import TopologyError

ATOL = 1e-4  # Angstrom; float32 positions


def _universe(box=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
    if box is not None:
        u.trajectory.add_transformations(set_dimensions(box))
    return u


def _mda_rmsd(select, ref_frame, box=None):
    """MDAnalysis' RMSD with the selection made at ``ref_frame`` (the frame its Universe
    is at when the RMSD is made), in Angstrom, and the atoms it selected."""
    u = _universe(box)
    u.trajectory[ref_frame]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = rms.RMSD(u, select=select, ref_frame=ref_frame).run()
    return run.results.rmsd[:, 2], run.mobile_atoms.indices


def _cli_around_is_mdanalysis(files, ref_frame, tmp_path, capsys):
    """``h5mdx rmsd FILES --select 'around 3 resid 1' --reference REF_FRAME`` writes the
    series MDAnalysis gives in a 35 Angstrom cubic box."""
    from h5mdx.cli import main as cli_main

    expected, _ = _mda_rmsd("around 3 resid 1", ref_frame, [35.0, 35.0, 35.0, 90.0, 90.0, 90.0])
    out = tmp_path / "rmsd.csv"
    assert cli_main(["rmsd", *files, "--topology", PSF, "--select", "around 3 resid 1",
                     "--reference", str(ref_frame), "--scheduler", "threads", "--workers",
                     "1", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    with open(out) as fh:
        header = fh.readline().strip().split(",")
        rows = np.array([[float(v) for v in line.split(",")] for line in fh])
    np.testing.assert_allclose(rows[:, header.index("rmsd")], expected, atol=ATOL)


@pytest.fixture(scope="module")
def adk_nm(tmp_path_factory):
    """adk written by MDAnalysis' H5MDWriter in nm (the unit of GROMACS' files)."""
    path = tmp_path_factory.mktemp("adk_nm") / "adk_nm.h5md"
    u = _universe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mda.Writer(str(path), n_atoms=u.atoms.n_atoms, lengthunit="nm") as w:
            for _ts in u.trajectory:
                w.write(u.atoms)
    return str(path)


@pytest.mark.parametrize("select", ["around 5 resid 1", "prop z < 0"])
@pytest.mark.parametrize("ref_frame", [0, 40])
def test_selection_by_position_is_mdanalysis(adk_nm, select, ref_frame):
    """Failed with "AtomGroup has no attribute dimensions" (the topology has no frame)."""
    expected, atoms = _mda_rmsd(select, ref_frame)
    with xr.open_dataset(adk_nm, engine="h5md", topology=PSF, chunks={}) as ds:
        assert ds.position.attrs["units"] == "nm"
        got = ds.md.rmsd(ref_frame, select=select).compute()
        idx = select_atoms(ds.position, select, reference=ref_frame)
    assert got.attrs["n_atoms"] == atoms.size
    np.testing.assert_array_equal(np.asarray(ds.atom.values)[idx], atoms)
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)  # nm -> Angstrom


@pytest.mark.parametrize("select", ["point 0 0 0 10", "sphzone 10 resid 1",
                                    "cyzone 10 5 -5 resid 1", "isolayer 2 5 resid 1"])
def test_other_selections_by_position(adk_nm, select):
    expected, _ = _mda_rmsd(select, 0)
    with xr.open_dataset(adk_nm, engine="h5md", topology=PSF) as ds:
        got = ds.md.rmsd(select=select).compute()
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)


def test_selection_by_distance_is_periodic_in_the_box(adk_positions):
    """A box of 35 Angstrom: ``around`` across its faces, as MDAnalysis with that box."""
    box = [35.0, 35.0, 35.0, 90.0, 90.0, 90.0]
    select = "around 3 resid 1"
    expected, atoms = _mda_rmsd(select, 0, box)
    plain, plain_atoms = _mda_rmsd(select, 0)
    assert atoms.size != plain_atoms.size  # the box matters here
    position = xr.DataArray(adk_positions, dims=("time", "atom", "spatial"),
                            attrs={"units": "Angstrom"})
    edges = xr.DataArray(np.full((adk_positions.shape[0], 3), 3.5), dims=("time", "spatial"),
                         attrs={"units": "nm", "boundary": ["periodic"] * 3})
    got = h5mdx.rmsd(position, select=select, topology=PSF, box=edges).compute()
    assert got.attrs["n_atoms"] == atoms.size
    np.testing.assert_allclose(got.values, expected, atol=ATOL)
    edges.attrs["boundary"] = ["none"] * 3  # not periodic: the distances as they are
    got = h5mdx.rmsd(position, select=select, topology=PSF, box=edges).compute()
    np.testing.assert_allclose(got.values, plain, atol=ATOL)


def test_universe_passed_is_not_moved(adk_nm):
    """A Universe with a trajectory as topology: the selection is made on the reference
    frame of the positions, not on the frame the Universe is at, which stays as it is."""
    expected, _ = _mda_rmsd("around 5 resid 1", 0)
    u = _universe()
    u.trajectory[30]
    with xr.open_dataset(adk_nm, engine="h5md", topology=u) as ds:
        got = ds.md.rmsd(select="around 5 resid 1").compute()
    assert u.trajectory.ts.frame == 30
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)


def test_universe_reference_gives_the_frame(adk_nm):
    """A Universe as the reference: the selection is made on its current frame (MDAnalysis'
    RMSD makes it on the reference's and on the mobile Universe's: both at frame 20;
    h5mdx takes the positions of a Universe reference at its current frame)."""
    ref = _universe()
    ref.trajectory[20]
    u = _universe()
    u.trajectory[20]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(u, ref, select="around 5 resid 1",
                            ref_frame=20).run().results.rmsd[:, 2]
    with xr.open_dataset(adk_nm, engine="h5md", topology=PSF) as ds:
        got = ds.md.rmsd(ref, select="around 5 resid 1").compute()
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)


def test_in_the_positions_own_names(adk_positions, adk_universe):
    """Without a topology (a Zarr copy's names): the same selection, on the same frame."""
    expected, _ = _mda_rmsd("around 5 resid 1", 0)
    position = xr.DataArray(
        adk_positions, dims=("time", "atom", "spatial"), attrs={"units": "Angstrom"},
        coords={"name": ("atom", adk_universe.atoms.names.astype(str)),
                "resname": ("atom", adk_universe.atoms.resnames.astype(str)),
                "resid": ("atom", adk_universe.atoms.resids),
                "segid": ("atom", adk_universe.atoms.segids.astype(str))})
    got = h5mdx.rmsd(position, select="around 5 resid 1").compute()
    np.testing.assert_allclose(got.values, expected, atol=ATOL)
    bare = position.drop_vars(["name", "resname", "resid", "segid"])
    expected, _ = _mda_rmsd("prop z < 0", 0)
    got = h5mdx.rmsd(bare, select="prop z < 0").compute()  # positions alone: no names
    np.testing.assert_allclose(got.values, expected, atol=ATOL)
    with pytest.raises(TopologyError, match="needs a topology"):
        h5mdx.rmsd(bare, select="around 5 resid 1")


def test_reference_without_all_atoms_is_a_clear_error(adk_nm, adk_positions):
    with xr.open_dataset(adk_nm, engine="h5md", topology=PSF) as ds:
        with pytest.raises(TopologyError, match="holds 10 atoms, not all the 3341"):
            ds.md.rmsd(adk_positions[0, :10] / 10, select="around 5 resid 1")


@pytest.mark.parametrize("select", ["around 5 resid 1", "prop z < 0"])
def test_selection_by_position_at_open_is_on_the_files_first_frame(adk_nm, select):
    """select= at open makes a selection by position on the file's first frame, in
    Angstrom (the file is in nm), as MDAnalysis does on the Universe at frame 0. Before,
    a Universe as topology gave the atoms of the frame it was at (here 30), and a topology
    file refused the selection."""
    expected = _universe().select_atoms(select).indices  # MDAnalysis, at frame 0
    u = _universe()
    u.trajectory[30]
    assert not np.array_equal(u.select_atoms(select).indices, expected)  # frames differ
    for topology in (u, PSF):
        with xr.open_dataset(adk_nm, engine="h5md", topology=topology, select=select) as ds:
            np.testing.assert_array_equal(ds.atom.values, expected)
            assert ds.attrs["selection"] == select
    assert u.trajectory.ts.frame == 30  # the user's Universe is not moved


@pytest.fixture(scope="module")
def adk_boxed(tmp_path_factory, adk_positions):
    """adk in nm in a fixed periodic box of 3.5 nm (written with h5mdx.testing)."""
    from h5mdx.testing import write_h5md

    path = tmp_path_factory.mktemp("adk_boxed") / "adk_boxed.h5md"
    return write_h5md(
        path, {"all": {"position": {"value": adk_positions / 10, "step": 1, "time": 1.0,
                                    "unit": "nm"}}},
        box={"all": {"dimension": 3, "edges": {"value": np.full(3, 3.5), "unit": "nm"}}})


def test_selection_by_distance_at_open_takes_the_files_box(adk_boxed):
    """select= at open measures distances in the file's periodic box (3.5 nm), as
    MDAnalysis does with that box on frame 0."""
    box = [35.0, 35.0, 35.0, 90.0, 90.0, 90.0]
    expected = _universe(box).select_atoms("around 3 resid 1").indices
    unboxed = _universe().select_atoms("around 3 resid 1").indices
    assert len(expected) > len(unboxed)  # the box brings atoms across its faces
    with xr.open_dataset(adk_boxed, engine="h5md", topology=PSF,
                         select="around 3 resid 1") as ds:
        np.testing.assert_array_equal(ds.atom.values, expected)


def test_selection_by_position_at_open_without_frames_or_lengths_is_a_clear_error(tmp_path):
    """A file without frames, or whose positions are in a unit that is no length, gives a
    TopologyError naming the file and the group (a unit of time was a ValueError from the
    unit conversion, naming neither)."""
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "empty.h5md", {"all": {"position": {
        "value": np.zeros((0, 3341, 3), np.float32), "step": 1, "time": 1.0}}})
    with pytest.raises(TopologyError, match=r"empty.h5md \[/particles/all\]: a selection "
                       r"by position is made on the first frame .* they hold no frame"):
        xr.open_dataset(path, engine="h5md", topology=PSF, select="around 5 resid 1")
    path = write_h5md(tmp_path / "ps.h5md", {"all": {"position": {
        "value": np.zeros((2, 3341, 3), np.float32), "step": 1, "time": 1.0, "unit": "ps"}}})
    with pytest.raises(TopologyError, match=r"ps.h5md \[/particles/all\]: a selection by "
                       r"position is made in Angstrom, and h5mdx cannot convert these "
                       r"positions to it \(the first frame is in 'ps'"):
        xr.open_dataset(path, engine="h5md", topology=PSF, select="around 5 resid 1")


def test_accessor_takes_the_files_box(adk_boxed):
    expected, atoms = _mda_rmsd("around 3 resid 1", 5, [35.0, 35.0, 35.0, 90.0, 90.0, 90.0])
    with xr.open_dataset(adk_boxed, engine="h5md", topology=PSF) as ds:
        got = ds.md.rmsd(5, select="around 3 resid 1").compute()
    assert got.attrs["n_atoms"] == atoms.size
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)


def test_cli_select_by_position(adk_boxed, tmp_path, capsys):
    _cli_around_is_mdanalysis([adk_boxed], 40, tmp_path, capsys)


def test_atomgroup_of_another_system_is_refused(adk_nm, adk_universe):
    """An AtomGroup's indices were taken as they are, whatever its Universe: those of a
    Universe of 214 C-alphas picked the first 50 atoms of adk."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ca_only = mda.Merge(adk_universe.select_atoms("name CA"))
    renamed = _universe()
    renamed.atoms[:10].names = "XX"  # the same count, other atoms
    with xr.open_dataset(adk_nm, engine="h5md", topology=PSF) as ds:
        with pytest.raises(TopologyError, match="Universe of 214 atoms.*system of 3341"):
            ds.md.rmsd(select=ca_only.atoms[:50])
        with pytest.raises(TopologyError, match="atom 0 is 'XX' there and 'N'"):
            ds.md.rmsd(select=renamed.atoms[:20])
        ordered = _universe().atoms[[30, 10, 20, 5]]  # the same system: its atoms, in order
        got = ds.md.rmsd(select=ordered).compute()
        np.testing.assert_allclose(got.values, ds.md.rmsd(select=[30, 10, 20, 5]).values)
    expected = _universe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(expected.atoms[[30, 10, 20, 5]]).run().results.rmsd[:, 2]
    np.testing.assert_allclose(got.values * 10, expected, atol=ATOL)


def test_cli_select_by_position_alone_needs_no_topology(adk_nm, tmp_path, capsys):
    """Was refused: "--select 'prop z < 0' needs --topology" (no names are needed)."""
    from h5mdx.cli import main as cli_main

    expected, _ = _mda_rmsd("prop z < 0", 0)
    out = tmp_path / "rmsd.csv"
    assert cli_main(["rmsd", adk_nm, "--select", "prop z < 0", "--scheduler", "threads",
                     "--workers", "1", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    with open(out) as fh:
        header = fh.readline().strip().split(",")
        rows = np.array([[float(v) for v in line.split(",")] for line in fh])
    np.testing.assert_allclose(rows[:, header.index("rmsd")], expected, atol=ATOL)
    assert cli_main(["rmsd", adk_nm, "--select", "around 5 resid 1", "--no-progress"]) == 2
    assert "needs --topology" in capsys.readouterr().err


@pytest.fixture(scope="module")
def boxed_parts(tmp_path_factory, adk_positions):
    """adk in nm in a periodic box of 3.5 nm stored per frame, in two files (0-49, 50-97)."""
    from h5mdx.testing import write_h5md

    d = tmp_path_factory.mktemp("boxed_parts")
    paths = []
    for k, frames in enumerate((slice(0, 50), slice(50, 98))):
        xyz = adk_positions[frames] / 10
        first = frames.start
        paths.append(write_h5md(
            d / f"part{k}.h5md",
            {"all": {"position": {"value": xyz, "step": 1, "step_offset": first,
                                  "time": 1.0, "time_offset": float(first), "unit": "nm"}}},
            box={"all": {"dimension": 3, "edges": {
                "value": np.full((len(xyz), 3), 3.5), "step": 1, "step_offset": first,
                "time": 1.0, "time_offset": float(first), "unit": "nm"}}}))
    return paths


def test_parts_take_the_box_of_the_reference_frame(boxed_parts, tmp_path, capsys):
    """A trajectory in parts with a box per frame: the selection by distance was made
    without the box (the reference a frame of positions alone), not as on one file."""
    _cli_around_is_mdanalysis(boxed_parts, 60, tmp_path, capsys)


def test_atomgroup_of_another_system_without_topology(adk_positions, adk_universe):
    """Without a topology (a Zarr copy's names), the AtomGroup's names are checked against
    the positions' own: another system's atoms of the same count were taken by index."""
    position = xr.DataArray(adk_positions[:5], dims=("time", "atom", "spatial"),
                            coords={"name": ("atom", adk_universe.atoms.names.astype(str))})
    renamed = _universe()
    renamed.atoms[:10].names = "XX"
    with pytest.raises(TopologyError, match="atom 0 is 'XX' there and 'N' in the positions'"):
        h5mdx.rmsd(position, select=renamed.atoms[:20])
    got = h5mdx.rmsd(position, select=_universe().atoms[:20]).compute()
    np.testing.assert_allclose(got.values, h5mdx.rmsd(position, select=np.arange(20)).values)


def test_atomgroup_of_the_whole_system_and_a_file_of_selected_atoms(tmp_path):
    """A file of selected atoms (h5mdx convert --select): opened with only the topology it
    holds, its atoms are 0..213, and an AtomGroup of the whole system (whose indices picked
    other atoms of it, in silence) is refused; opened with the whole system's topology,
    the group picks its atoms by their index, as MDAnalysis does."""
    from h5mdx.layout.convert import convert

    path = tmp_path / "ca.h5md"
    convert(PSF, [DCD], path, select="name CA", progress=False)
    group = _universe().select_atoms("resid 1-20 and name CA")
    with xr.open_dataset(path, engine="h5md") as ds:
        with pytest.raises(TopologyError, match="Universe of 3341 atoms.*system of 214"):
            ds.md.rmsd(select=group)
    with xr.open_dataset(path, engine="h5md", topology=PSF) as ds:
        got = ds.md.rmsd(select=group).compute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(group).run().results.rmsd[:, 2]
    assert got.sizes["time"] == 98
    np.testing.assert_allclose(got.values, expected, atol=ATOL)


def test_atoms_without_a_position_in_the_reference_frame_are_said(tmp_path):
    """Atoms with NaN positions at the reference frame match no selection by position:
    they were left out in silence; a warning names how many and which."""
    from h5mdx.testing import write_h5md

    xyz = np.random.default_rng(3).random((3, 6, 3)) * 10
    xyz[0, [1, 4]] = np.nan
    path = tmp_path / "gaps.h5md"
    write_h5md(path, {"all": {"position": {"value": xyz, "unit": "Angstrom",
                                           "step": np.arange(3)}}})
    with xr.open_dataset(path, engine="h5md") as ds:
        with pytest.warns(RuntimeWarning, match=r"made on frame 0 \(of .*gaps.h5md\), where "
                          r"2 of its 6 atoms have no position .*atom indices 1, 4\)"):
            r = ds.md.rmsd(0, select="prop z < 100")
        assert r.attrs["n_atoms"] == 4
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ds.md.rmsd(2, select="prop z < 100").attrs["n_atoms"] == 6


def test_parts_as_dataarrays_say_they_have_no_box_or_take_box(boxed_parts):
    """h5mdx.rmsd([DataArray, ...]) of files with a box per frame: the selection by distance
    was not periodic, in silence (a list of Datasets is). It is said; box= of every frame
    makes it periodic, as on one file."""
    box = [35.0, 35.0, 35.0, 90.0, 90.0, 90.0]
    periodic, _ = _mda_rmsd("around 3 resid 1", 60, box)
    flat, _ = _mda_rmsd("around 3 resid 1", 60)
    assert np.abs(periodic - flat).max() > 1e-3  # the box changes the atoms selected
    opened = [xr.open_dataset(p, engine="h5md", topology=PSF) for p in boxed_parts]
    try:
        arrays = [ds.position for ds in opened]
        with pytest.warns(RuntimeWarning, match="the parts are DataArrays, which carry no "
                          "box: the selection 'around 3 resid 1' is made without one"):
            got = h5mdx.rmsd(arrays, 60, select="around 3 resid 1").compute()
        np.testing.assert_allclose(got.values * 10, flat, atol=ATOL)
        edges = xr.concat([ds.box_edges for ds in opened], dim="time")
        got = h5mdx.rmsd(arrays, 60, select="around 3 resid 1", box=edges).compute()
        np.testing.assert_allclose(got.values * 10, periodic, atol=ATOL)
        with pytest.raises(ValueError, match="box= has 50 frames, the parts 98 in all"):
            h5mdx.rmsd(arrays, 60, select="around 3 resid 1", box=opened[0].box_edges)
    finally:
        for ds in opened:
            ds.close()


def test_the_cli_says_unplaced_atoms_once_and_the_step_of_its_largest_value(tmp_path,
                                                                            capsys):
    """h5mdx rmsd made the selection twice (a check before the scheduler starts, then the
    run's), and said the warning twice; and a file without times said "at time 10 step"
    of its largest value (its frames are timed by their steps)."""
    from h5mdx.cli import main as cli_main
    from h5mdx.testing import write_h5md

    xyz = np.random.default_rng(3).random((3, 6, 3)) * 10
    xyz[0, [1, 4]] = np.nan
    path = tmp_path / "gaps.h5md"
    write_h5md(path, {"all": {"position": {"value": xyz, "unit": "Angstrom",
                                           "step": np.arange(3) * 5}}})
    with pytest.warns(RuntimeWarning, match="have no position") as said:
        assert cli_main(["rmsd", str(path), "--select", "prop z < 100", "--no-progress",
                         "--scheduler", "threads", "--workers", "1"]) == 0
    assert sum("have no position" in str(w.message) for w in said) == 1
    out = capsys.readouterr().out
    assert " at step 10 (frame 2)" in out and "at time" not in out
