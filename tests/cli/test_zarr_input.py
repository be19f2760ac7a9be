"""``h5mdx info`` and ``h5mdx rmsd`` on a Zarr store written by ``h5mdx convert``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import h5mdx
from h5mdx.cli import main
from h5mdx.errors import TopologyError

mda = pytest.importorskip("MDAnalysis")
pytest.importorskip("zarr")
d = pytest.importorskip("MDAnalysisTests.datafiles")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("zarr") / "adk.zarr"
    assert main(["convert", d.PSF, d.DCD, str(path), "--no-progress"]) == 0
    return path


def test_info_describes_the_store(store, capsys):
    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    assert "Zarr store, creator h5mdx" in text
    assert "position     98×3341×3" in text and "Angstrom" in text
    assert main(["info", str(store), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n_frames"] == 98 and got["variables"]["position"]["shape"] == [98, 3341, 3]
    assert got["variables"]["position"]["chunks"][1:] == [3341, 3]


def test_rmsd_of_the_store_equals_mdanalysis(store, tmp_path, capsys):
    from MDAnalysis.analysis import rms

    u = mda.Universe(d.PSF, d.DCD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {w: rms.RMSD(u, select="name CA", weights=w).run().results.rmsd[:, 2]
                for w in (None, "mass")}
    for weights in (None, "mass"):
        out = tmp_path / f"r-{weights}.csv"
        argv = ["rmsd", str(store), "--topology", d.PSF, "--select", "name CA",
                "--no-progress", "--out", str(out)]
        assert main(argv + (["--weights", "mass"] if weights else [])) == 0
        got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
        np.testing.assert_allclose(got, want[weights], atol=1e-4)


def test_a_topology_of_other_atoms_is_one_clear_line(store, capsys):
    assert main(["rmsd", str(store), "--topology", d.GRO, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "has 3341" in err and "Traceback" not in err
    assert main(["rmsd", str(store), "--group", "x", "--no-progress"]) == 1
    # one line, without the --debug hint it ended with: the message says all there is
    assert capsys.readouterr().err == (f"h5mdx rmsd: error: the Zarr store {store} has no "
                                       "particles group 'x'; it has: 'trajectory'\n")


def test_a_store_of_selected_atoms_takes_the_whole_systems_topology(tmp_path, capsys):
    """``convert --select`` into Zarr keeps the atoms' indices in ``id``: ``h5mdx rmsd``
    with the whole system's PSF finds them in it (it was "3341 atoms; the store has 214"),
    as the h5md engine does for an H5MD file; a store written from such a Dataset keeps
    the indices in its ``atom`` coordinate."""
    from MDAnalysis.analysis import rms

    path = tmp_path / "ca.zarr"
    assert main(["convert", d.PSF, d.DCD, str(path), "--select", "name CA",
                 "--no-progress"]) == 0
    u = mda.Universe(d.PSF, d.DCD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rms.RMSD(u, select="name CA and resid 1:50", weights="mass").run()
    out = tmp_path / "r.csv"
    assert main(["rmsd", str(path), "--topology", d.PSF, "--select", "resid 1:50",
                 "--weights", "mass", "--no-progress", "--out", str(out)]) == 0
    got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
    np.testing.assert_allclose(got, want.results.rmsd[:, 2], atol=1e-4)
    with xr.open_dataset(str(path), engine="zarr") as z:
        ids = z["id"].values
    with _store_with_topology(path, d.PSF) as ds:
        np.testing.assert_array_equal(ds.atom.values, ids)
        ds.md.to_zarr(tmp_path / "again.zarr")
    assert main(["rmsd", str(tmp_path / "again.zarr"), "--topology", d.PSF, "--select",
                 "resid 1:50", "--weights", "mass", "--no-progress", "--out", str(out)]) == 0
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1),
                               want.results.rmsd[:, 2], atol=1e-4)


def _store_with_topology(path, topology):
    from h5mdx.cli.rmsd import _open_zarr

    return _open_zarr(str(path), topology, None)


def test_a_store_of_several_groups_is_described_and_read_whole(tmp_path, capsys):
    """rechunk copies a file of two particles groups and observables into a store, the
    first group at its root: info lists them all (it showed the root alone) and
    rmsd --group reads either (it refused, saying a store holds one)."""
    from h5mdx.testing import write_h5md

    rng = np.random.default_rng(3)
    # other atoms in each group, an observable of other frames: a group that does not
    # line up with the root (opened as a tree, it raised)
    pos = {g: rng.random((4, n, 3)) * 10 for g, n in (("solute", 5), ("solvent", 7))}
    src = write_h5md(tmp_path / "two.h5md", {
        g: {"position": {"value": p, "step": np.arange(4), "unit": "Angstrom"}}
        for g, p in pos.items()}, observables={"energy": {"value": np.arange(6.0),
                                                          "step": np.arange(6)}})
    store = tmp_path / "two.zarr"
    assert main(["rechunk", src, str(store), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    text = capsys.readouterr().out
    assert "particles/solute (at the root)" in text
    assert "\nparticles/solvent\n    position     4×7×3" in text, text
    assert "\nobservables\n    energy       6" in text, text
    assert main(["info", str(store), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert set(groups) == {"particles/solvent", "observables"}
    for g in ("solute", "solvent", "particles/solvent"):
        out = tmp_path / f"{g.replace('/', '_')}.csv"
        assert main(["rmsd", str(store), "--group", g, "--no-progress", "--kernel", "numpy",
                     "--out", str(out)]) == 0
        with xr.open_dataset(src, engine="h5md", group=g.split("/")[-1]) as ds:
            want = h5mdx.rmsd(ds.position, 0).values
        got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
        np.testing.assert_allclose(got, want, atol=1e-10)


def test_rmsd_of_a_store_in_nm_is_reported_in_angstrom_like_its_h5md(tmp_path):
    """A Zarr copy keeps the file's units (cobrotoxin: nm, ps); ``h5mdx rmsd`` reports an
    H5MD file in Å (it opens it with convert_units=True), and so the store's series too:
    the same numbers for the same trajectory (they were 10x apart)."""
    store = tmp_path / "cobro.zarr"
    assert main(["rechunk", d.H5MD_xvf, str(store)]) == 0
    series = {}
    for name, src in (("h5md", d.H5MD_xvf), ("zarr", str(store))):
        out = tmp_path / f"{name}.csv"
        assert main(["rmsd", src, "--out", str(out), "--no-progress", "--scheduler",
                     "threads", "--workers", "1"]) == 0
        series[name] = np.genfromtxt(out, delimiter=",", names=True)
    np.testing.assert_allclose(series["zarr"]["rmsd"], series["h5md"]["rmsd"], atol=1e-4)
    np.testing.assert_allclose(series["zarr"]["time"], series["h5md"]["time"])
    assert series["h5md"]["rmsd"].max() > 20  # Å, not nm


def test_rmsd_of_a_store_without_times_writes_its_series(tmp_path):
    """A file without time: its frames are numbered by their steps (units "step"), which
    the store keeps; the series is written, not lost to a unit error after the run."""
    import h5py

    from h5mdx.testing import write_h5md

    src = tmp_path / "notime.h5md"
    rng = np.random.default_rng(0)
    write_h5md(src, {"t": {"position": {"value": rng.random((6, 5, 3)), "unit": "nm",
                                        "step": np.arange(6) * 10}}})
    with h5py.File(src, "r+") as f:
        f["particles/t/position"].pop("time", None)
    store = tmp_path / "notime.zarr"
    assert main(["rechunk", str(src), str(store)]) == 0
    out = tmp_path / "r.csv"
    assert main(["rmsd", str(store), "--out", str(out), "--no-progress", "--scheduler",
                 "threads", "--workers", "1"]) == 0
    got = np.genfromtxt(out, delimiter=",", names=True)
    np.testing.assert_array_equal(got["time"], np.arange(6) * 10.0)
    assert got["rmsd"][0] < 1e-6 and got["rmsd"][1] > 0.5  # Å: positions of 0-10 Å in nm


def _mda_rmsd(select, weights=None):
    from MDAnalysis.analysis import rms

    u = mda.Universe(d.PSF, d.DCD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(u, select=select, weights=weights).run().results.rmsd[:, 2]


@pytest.mark.parametrize("select, weights", [("name CA", None), ("prop mass > 14", "mass"),
                                             ("backbone and resid 10-50", None)])
def test_a_selection_is_made_in_the_stores_own_names(store, tmp_path, select, weights):
    """A store converted from a PSF holds the atoms' names, residues, masses and charges:
    --select needs no --topology there (it was refused, the names being coordinates)."""
    out = tmp_path / "r.csv"
    argv = ["rmsd", str(store), "--select", select, "--no-progress", "--out", str(out)]
    assert main(argv + (["--weights", weights] if weights else [])) == 0
    got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)
    np.testing.assert_allclose(got, _mda_rmsd(select, weights), atol=1e-4)


def test_ds_md_rmsd_selects_in_a_stores_coordinates(store):
    """``xr.open_zarr`` of the store and ``ds.md.rmsd(select=...)``: the selection is made
    in the store's name, resname, resid, segid, mass and charge (MDAnalysis' values)."""
    with xr.open_zarr(store) as ds:
        assert ds.md.topology is None and "mass" in ds.data_vars
        for select, weights in (("name CA", None), ("prop charge < -0.5", "mass"),
                                ("segid 4AKE and resname ALA", None)):
            got = ds.md.rmsd(select=select, weights=weights).values
            np.testing.assert_allclose(got, _mda_rmsd(select, weights), atol=1e-4)
        with pytest.raises(TopologyError, match="'name XX' matches no atom"):
            ds.md.rmsd(select="name XX")


def test_a_store_without_names_still_needs_a_topology(tmp_path, capsys):
    """A store whose atoms have no names: --select without --topology says so, before
    a scheduler starts."""
    from h5mdx.testing import write_h5md

    src = tmp_path / "plain.h5md"
    rng = np.random.default_rng(1)
    write_h5md(src, {"t": {"position": {"value": rng.random((4, 5, 3)), "unit": "nm",
                                        "step": np.arange(4)}}})
    store = tmp_path / "plain.zarr"
    assert main(["rechunk", str(src), str(store)]) == 0
    capsys.readouterr()
    assert main(["rmsd", str(store), "--select", "name CA", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs --topology" in err and "holds no name coordinate" in err
    assert "Traceback" not in err and "scheduler" not in err
    with xr.open_zarr(store) as ds, pytest.raises(TopologyError, match="needs a topology"):
        ds.md.rmsd(select="name CA")


@pytest.fixture(scope="module")
def ca_with_fill(tmp_path_factory):
    """``convert --select "name CA"`` to H5MD, its ``id`` given HDF5's fill value -1 (H5MD's
    mark of an absent particle, as other writers set it), and its Zarr copy by rechunk:
    the copy keeps -1 as CF's ``_FillValue``, which xarray's decoding reads as floats."""
    import h5py

    where = tmp_path_factory.mktemp("fill")
    src = where / "ca.h5md"
    assert main(["convert", d.PSF, d.DCD, str(src), "--select", "name CA",
                 "--no-progress"]) == 0
    with h5py.File(src, "r+") as f:
        group = f["particles/trajectory"]
        ids, attrs = group["id"][()], dict(group["id"].attrs)
        del group["id"]
        group.create_dataset("id", data=ids, fillvalue=-1).attrs.update(attrs)
    store = where / "ca.zarr"
    assert main(["rechunk", str(src), str(store)]) == 0
    return store


def _rmsd_with_psf(store, out):
    assert main(["rmsd", str(store), "--topology", d.PSF, "--select", "resid 1:50",
                 "--weights", "mass", "--scheduler", "threads", "--no-progress",
                 "--out", str(out)]) == 0
    return np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1)


def test_an_id_with_a_fill_value_stays_integer_and_finds_the_atoms(ca_with_fill, tmp_path):
    """open_zarr_store serves such an ``id`` as the h5md engine does: int64, -1 in its
    encoding (CF decoding gave float64 [4., 21., ...], and h5mdx rmsd with the whole
    system's PSF refused the store: "the topology has 3341 atoms; the store has 214")."""
    from h5mdx.layout.export import open_zarr_store

    want = _mda_rmsd("name CA and resid 1:50", "mass")
    with open_zarr_store(ca_with_fill) as ds:
        assert ds["id"].dtype == np.int64 and ds["id"].encoding["_FillValue"] == -1
        u = mda.Universe(d.PSF, d.DCD)
        np.testing.assert_array_equal(ds["id"].values, u.select_atoms("name CA").indices)
        assert "_FillValue" not in ds["id"].attrs
    np.testing.assert_allclose(_rmsd_with_psf(ca_with_fill, tmp_path / "r.csv"), want,
                               atol=1e-4)


def test_a_copy_of_an_opened_store_keeps_its_id_integer(ca_with_fill, tmp_path):
    """``xr.open_zarr(store).md.to_zarr(copy)``: the id CF decoding made float64 is
    written as int64 again, its fill value kept (the copy stored float64 ids, and
    h5mdx rmsd with the whole system's PSF refused it)."""
    copy = tmp_path / "copy.zarr"
    with xr.open_zarr(ca_with_fill) as ds:
        assert ds["id"].dtype == np.float64  # xarray's decoding, as the user sees it
        ds.md.to_zarr(copy)
    import zarr

    stored = zarr.open_group(str(copy), mode="r")["id"]
    assert stored.dtype == np.int64 and stored.attrs["_FillValue"] == -1
    np.testing.assert_allclose(_rmsd_with_psf(copy, tmp_path / "r.csv"),
                               _mda_rmsd("name CA and resid 1:50", "mass"), atol=1e-4)


def test_to_zarr_of_selected_atoms_writes_their_id(adk_h5md, tmp_path):
    """``ds.md.to_zarr`` of a ``select=`` (or ``isel(atom=...)``) writes H5MD's ``id``
    of the atoms kept, as ``to_h5md`` does: h5mdx rmsd with the whole system's PSF finds
    them (it refused: "the topology has 3341 atoms; the store has 214")."""
    store = tmp_path / "ca.zarr"
    with xr.open_dataset(adk_h5md, engine="h5md", topology=d.PSF, select="name CA") as ds:
        ds.md.to_zarr(store)
    with xr.open_zarr(store) as z:
        np.testing.assert_array_equal(z["id"].values,
                                      mda.Universe(d.PSF, d.DCD).select_atoms("name CA").indices)
    np.testing.assert_allclose(_rmsd_with_psf(store, tmp_path / "r.csv"),
                               _mda_rmsd("name CA and resid 1:50", "mass"), atol=1e-4)


def test_rmsd_says_a_stores_missing_step_chunk(store, tmp_path, capsys):
    """A store that lost its ``step`` chunk reads every step as 0 (Zarr's fill value):
    h5mdx rmsd says so before the run (it wrote step 0 for every frame to the series,
    silently)."""
    import shutil

    from h5mdx.errors import H5MDConformanceWarning

    lost = tmp_path / "lost.zarr"
    shutil.copytree(store, lost)
    shutil.rmtree(lost / "step" / "c")
    out = tmp_path / "r.csv"
    with pytest.warns(H5MDConformanceWarning,
                      match=r"lost\.zarr \[step\]: stores 0 of its 1 chunks .* read as 0"):
        assert main(["rmsd", str(lost), "--scheduler", "threads", "--no-progress",
                     "--out", str(out)]) == 0
    assert (np.genfromtxt(out, delimiter=",", names=True)["step"] == 0).all()


def test_dask_mpi_refuses_a_store_before_its_cluster(store, capsys):
    """--scheduler dask-mpi reads H5MD files: a store is refused before the cluster
    starts, saying what runs it (under mpirun the client rank's engine refused it after,
    saying "h5mdx rmsd reads it")."""
    assert main(["rmsd", str(store), "--scheduler", "dask-mpi", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler dask-mpi reads H5MD files, not Zarr stores" in err, err


def test_a_rechunked_store_selects_without_the_file_it_was_copied_from(tmp_path, capsys):
    """rechunk of a file holding its own topology (VMD's structure module) recorded that
    file's path as the store's topology: selections on the store read the file, not the
    store's own names, and failed once it was moved ("No such topology file"), or took
    another file's atoms where one replaced it. They are made in the store's names."""
    import os

    src = tmp_path / "adk.h5md"
    assert main(["convert", d.PSF, d.DCD, str(src), "--no-progress"]) == 0
    store = tmp_path / "adk.zarr"
    assert main(["rechunk", str(src), str(store), "--frames-per-chunk", "10"]) == 0
    os.rename(src, tmp_path / "moved.h5md")
    out = tmp_path / "r.csv"
    argv = ["rmsd", str(store), "--select", "name CA", "--weights", "mass",
            "--scheduler", "threads", "--no-progress", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    want = _mda_rmsd("name CA", "mass")
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1),
                               want, atol=1e-4)
    with xr.open_zarr(store) as ds:
        assert ds.md.topology is None
        np.testing.assert_allclose(ds.md.rmsd(select="name CA", weights="mass").values,
                                   want, atol=1e-4)


def test_a_store_opened_by_h5mdx_is_read_as_zarr(store, adk_h5md):
    """open_zarr_store names the store in each variable's encoding ("source", for the
    errors): the RMSD took it for an HDF5 file and ran a reader thread beside zarr's own
    I/O threads, which made a worker slower where measured for xr.open_zarr (see
    h5mdx.analysis.rmsd); it reads the store's chunks of whole frames as Zarr."""
    from h5mdx.analysis.plan import _zarr_frames
    from h5mdx.layout.export import open_zarr_store

    with open_zarr_store(store) as ds:
        assert _zarr_frames(ds["position"])
        np.testing.assert_allclose(ds.md.rmsd(select="name CA").values,
                                   _mda_rmsd("name CA"), atol=1e-4)
    with xr.open_dataset(adk_h5md, engine="h5md") as h5md:  # HDF5's own reads
        assert not _zarr_frames(h5md["position"])


def test_a_store_copied_with_its_files_path_selects_in_its_own_names(tmp_path, capsys):
    """A store rechunked before the copy left out the file's path keeps
    topology=<the H5MD file> on its atoms: h5mdx rmsd selects in the store's own names
    (it failed "No such topology file" once the file was moved)."""
    import os

    import zarr

    src = tmp_path / "adk.h5md"
    assert main(["convert", d.PSF, d.DCD, str(src), "--no-progress"]) == 0
    store = tmp_path / "old.zarr"
    assert main(["rechunk", str(src), str(store), "--frames-per-chunk", "10"]) == 0
    with warnings.catch_warnings():  # zarr's note on the names' string dtype
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(store), mode="r+")  # as rechunk wrote it before
        assert root.attrs["source"] == str(src)
        root.attrs["topology"] = root["atom"].attrs["topology"] = str(src)
        zarr.consolidate_metadata(str(store))
    os.rename(src, tmp_path / "moved.h5md")
    out = tmp_path / "r.csv"
    assert main(["rmsd", str(store), "--select", "name CA", "--scheduler", "threads",
                 "--no-progress", "--out", str(out)]) == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1),
                               _mda_rmsd("name CA"), atol=1e-4)


def test_select_in_a_group_without_names_asks_for_a_topology(tmp_path, capsys):
    """A store of two groups, only one with names (a file's VMD structure module): --select
    on the other says before the run that its group holds no names (it passed the check,
    another group having them, and failed after with the Python API's advice, "open the
    file with xr.open_dataset(..., engine='h5md', topology=...)")."""
    import h5py

    src = tmp_path / "two.h5md"
    assert main(["convert", d.PSF, d.DCD, str(src), "--no-progress"]) == 0
    with h5py.File(src, "r+") as f:
        position = f["particles/trajectory/position"]
        other = f.create_group("particles/other/position")
        other["value"] = position["value"][()][:, ::-1]
        other["value"].attrs["unit"] = "Angstrom"
        other["step"], other["time"] = position["step"][()], position["time"][()]
        other["time"].attrs["unit"] = "ps"
        f.copy(f["particles/trajectory/box"], "particles/other/box")
    store = tmp_path / "two.zarr"
    from h5mdx.errors import H5MDConformanceWarning

    with pytest.warns(H5MDConformanceWarning, match="no name, type, mass for /particles/other"):
        assert main(["rechunk", str(src), str(store)]) == 0
    capsys.readouterr()
    assert main(["rmsd", str(store), "--group", "other", "--select", "name CA",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs --topology" in err, err
    assert "the particles group 'other' of the Zarr store" in err, err
    out = tmp_path / "r.csv"
    assert main(["rmsd", str(store), "--group", "trajectory", "--select", "name CA",
                 "--scheduler", "threads", "--no-progress", "--out", str(out)]) == 0
    np.testing.assert_allclose(np.loadtxt(out, delimiter=",", skiprows=1, usecols=-1),
                               _mda_rmsd("name CA"), atol=1e-4)


def test_a_store_without_consolidated_metadata_opens_without_xarrays_note(tmp_path):
    """A store whose consolidated metadata is gone (copied by hand, or written by another
    tool) opens as well; h5mdx info and rmsd printed xarray's 5-line RuntimeWarning about
    it."""
    import json
    import shutil
    import warnings

    from h5mdx.layout.export import open_zarr_store

    path = tmp_path / "plain.zarr"
    assert main(["convert", d.PSF, d.DCD, str(path), "--stop", "3", "--no-progress"]) == 0
    meta = json.loads((path / "zarr.json").read_text())
    meta.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps(meta))
    shutil.rmtree(path / ".zmetadata", ignore_errors=True)  # a version 2 store's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with open_zarr_store(path) as ds:
            assert ds.sizes["time"] == 3 and ds["position"].shape == (3, 3341, 3)


def test_a_stores_reference_time_is_in_the_series_time_unit(tmp_path):
    """h5mdx rmsd of a Zarr store converts its times to ps (ns here): the reference's time
    must be converted with them, not left in ns beside a time axis in ps."""
    import xarray as xr

    from h5mdx.testing import write_h5md

    src = tmp_path / "ns.h5md"
    xyz = np.random.default_rng(1).random((6, 5, 3))
    write_h5md(src, {"t": {"position": {"value": xyz, "unit": "nm", "step": np.arange(6) * 5,
                                        "time": np.arange(6) * 0.002, "time_unit": "ns"}}})
    store = tmp_path / "ns.zarr"
    assert main(["rechunk", str(src), str(store)]) == 0
    out = tmp_path / "r.nc"
    assert main(["rmsd", str(store), "--reference", "3", "--out", str(out), "--no-progress",
                 "--scheduler", "threads", "--workers", "1"]) == 0
    with xr.open_dataarray(out) as back:
        assert back.time.attrs["units"] == "ps" and float(back.time[3]) == 6.0
        assert back.attrs["reference_step"] == 15 and back.attrs["reference_time"] == 6.0
