"""The h5md engine against MDAnalysis' H5MDReader and the raw h5py datasets."""

from __future__ import annotations

import os
import pickle
import shutil
import time
import warnings

import cloudpickle
import h5py
import numpy as np
import pytest
import xarray as xr
from MDAnalysisTests.datafiles import (
    COORDINATES_H5MD,
    COORDINATES_TOPOLOGY,
    PSF,
    H5MD_energy,
    H5MD_xvf,
    PDB_small,
    TPR_xvf,
)

import h5mdx.engine.backend
from h5mdx.engine.backend import H5MDArray
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, H5MDReadError, TopologyError
from h5mdx.testing import write_h5md

mda = pytest.importorskip("MDAnalysis")


def _mda(top, traj, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mda.Universe(top, traj, **kw)


# ----------------------------------------------------------------------------- registration


def test_engine_registered():
    engines = xr.backends.list_engines()
    assert "h5md" in engines
    assert type(engines["h5md"]).__module__ == "h5mdx.engine.backend"


def test_guess_can_open(tmp_path, adk_h5md):
    ep = h5mdx.engine.backend.H5MDBackendEntrypoint()
    assert ep.guess_can_open(adk_h5md)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    assert not ep.guess_can_open(str(plain))
    text = tmp_path / "text.h5md"
    text.write_text("this is not HDF5 at all, just some text\n" * 10)
    assert not ep.guess_can_open(str(text))
    assert not ep.guess_can_open(str(tmp_path / "missing.h5md"))
    # without engine=, xarray asks the engines in order; ours claims H5MD files (h5netcdf,
    # when installed, is asked first and claims every HDF5 file)
    if "h5netcdf" not in xr.backends.list_engines():
        with xr.open_dataset(adk_h5md) as ds:
            assert "position" in ds


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "traj, top",
    [(COORDINATES_H5MD, COORDINATES_TOPOLOGY), (H5MD_xvf, TPR_xvf)],
    ids=["mda-test.h5md", "cobrotoxin.h5md"],
)
def test_values_equal_mdanalysis_shipped_files(traj, top):
    u = _mda(top, traj)
    with xr.open_dataset(traj, engine="h5md", convert_units=True) as ds:
        assert ds.sizes["time"] == u.trajectory.n_frames
        for i, ts in enumerate(u.trajectory):
            np.testing.assert_allclose(ds.position[i].values, ts.positions, rtol=1e-6, atol=1e-5)
            np.testing.assert_allclose(ds.velocity[i].values, ts.velocities, rtol=1e-6, atol=1e-5)
            np.testing.assert_allclose(ds.force[i].values, ts.forces, rtol=1e-6, atol=1e-5)
            assert ds.time[i].item() == pytest.approx(ts.time, rel=1e-6)
            assert int(ds.step[i]) == ts.data["step"]
            # MDAnalysis gives (a, b, c, alpha, beta, gamma); compare the box lengths
            edges = ds.box_edges[i].values
            np.testing.assert_allclose(
                np.linalg.norm(edges, axis=1), ts.dimensions[:3], rtol=1e-5
            )
        assert ds.position.attrs["units"] == "Angstrom"
        assert ds.velocity.attrs["units"] == "Angstrom ps-1"
        assert ds.force.attrs["units"] == "kJ mol-1 Angstrom-1"
        assert ds.time.attrs["units"] == "ps"


def test_units_kept_without_conversion():
    with xr.open_dataset(H5MD_xvf, engine="h5md") as ds, h5py.File(H5MD_xvf) as f:
        assert ds.position.attrs["units"] == "nm"
        assert ds.force.attrs["units"] == "kJ mol-1 nm-1"
        np.testing.assert_array_equal(
            ds.position.values, f["particles/trajectory/position/value"][()]
        )


@pytest.mark.parametrize("fixture", ["adk_h5md", "adk_h5md_blocked"])
def test_adk_equal_mdanalysis(request, fixture, adk_positions):
    path = request.getfixturevalue(fixture)
    u = _mda(PSF, path)
    with xr.open_dataset(path, engine="h5md", convert_units=True, chunks={}) as ds:
        np.testing.assert_array_equal(ds.position.values, adk_positions)
        times = np.array([ts.time for ts in u.trajectory])
        np.testing.assert_allclose(ds.time.values, times, rtol=1e-6)
        assert ds.position.dtype == np.float32


def test_pyh5md_file(adk_pyh5md, adk_positions):
    with xr.open_dataset(adk_pyh5md, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, adk_positions)
        np.testing.assert_array_equal(ds.step.values, np.arange(98) * 10)
        np.testing.assert_allclose(ds.time.values, np.arange(98) * 0.5)
        assert ds.position.encoding["chunksizes"] == (32, 128, 3)
        # a fixed (time-independent) box and species
        assert ds.box_edges.dims == ("spatial",)
        np.testing.assert_array_equal(ds.box_edges.values, [80.0, 90.0, 100.0])
        assert ds.species.dims == ("atom",)
        assert ds.box_edges.attrs["boundary"] == ["periodic"] * 3
        assert ds.attrs["creator_name"] == "pyh5md-test"
    # MDAnalysis cannot read this file: it needs a time-dependent box (box/edges/value)


def test_znh5md_file_and_observables():
    with xr.open_dataset(H5MD_energy, engine="h5md", convert_units=True) as ds, h5py.File(
        H5MD_energy
    ) as f:
        raw = f["particles/atoms/position/value"][()]
        np.testing.assert_array_equal(ds.position.values, raw)
        np.testing.assert_allclose(ds.time.values, np.arange(20) * 1e-3)  # fs -> ps
        assert ds.forces.attrs["units"] == "kJ mol-1 Angstrom-1"
        np.testing.assert_allclose(
            ds.forces.values, f["particles/atoms/forces/value"][()] * 96.4853321233
        )
    with xr.open_dataset(H5MD_energy, engine="h5md", group="observables/atoms") as obs:
        assert obs.energy.dims == ("time",)
        assert obs.energy.attrs["units"] == "eV"
        assert obs.sizes["time"] == 20


# ----------------------------------------------------------------------------- storage kinds


@pytest.fixture
def mixed_file(tmp_path):
    """Every storage kind: explicit, fixed-interval, time-independent, other sampling."""
    rng = np.random.default_rng(1)
    n, nf = 7, 12
    pos = rng.normal(size=(nf, n, 3)).astype(np.float32)
    vel = rng.normal(size=(nf // 2, n, 3))
    img = rng.integers(-2, 3, size=(nf, n, 3)).astype(np.int32)
    path = write_h5md(
        tmp_path / "mixed.h5md",
        particles={
            "trajectory": {
                "position": dict(value=pos, step=np.arange(nf) * 5, time=np.arange(nf) * 0.01,
                                 unit="nm", chunks=(4, n, 3)),
                "image": dict(value=img, link_sampling_from="position"),
                "velocity": dict(value=vel, step=10, step_offset=0, time=0.02,
                                 unit="nm ps-1"),
                "mass": dict(value=np.arange(1, n + 1, dtype=np.float64), unit="u"),
                "species": dict(value=np.arange(n, dtype=np.int32)),
                "charge": dict(value=rng.normal(size=(nf, n)), step=np.arange(nf) * 5,
                               time=np.arange(nf) * 0.01),
            },
            "solvent": {
                "position": dict(value=np.zeros((3, 2, 3)), step=1, time=1.0, unit="nm"),
            },
        },
        box={"trajectory": {"dimension": 3, "boundary": ["periodic"] * 3,
                            "edges": dict(value=np.full((nf, 3), 5.0), unit="nm",
                                          link_sampling_from="position")}},
        observables={
            "temperature": dict(value=rng.normal(size=nf), step=np.arange(nf) * 5,
                                time=np.arange(nf) * 0.01, unit="K"),
            "pressure": dict(value=rng.normal(size=3), step=np.array([0, 20, 40]),
                             time=np.array([0.0, 0.04, 0.08]), unit="bar"),
            "lattice": dict(value=np.eye(3), unit="nm"),
            "thermo/energy": dict(value=rng.normal(size=(4, 2)), step=15, time=0.03),
        },
        parameters={"temperature_target": 300.0, "ensemble": b"NVT"},
    )
    return path, dict(pos=pos, vel=vel, img=img)


def test_step_linked_without_time_follows_the_frames_with_times(tmp_path):
    """pyh5md's ``step_from=position`` without ``time=``: velocity hard-links position's
    ``step`` and has no ``time``. It is on the same frames, so on ``time`` (it used to get
    an axis of its own, and ``velocity * position`` broadcast to (5, n, 5))."""
    rng = np.random.default_rng(1)
    pos, vel = rng.random((5, 4, 3)), rng.random((5, 4, 3))
    path = tmp_path / "steponly.h5"
    write_h5md(path, {"atoms": {"position": {"value": pos, "step": np.arange(5) * 10,
                                             "time": np.arange(5) * 0.5}}})
    with h5py.File(path, "r+") as f:
        el = f.create_group("particles/atoms/velocity")
        el.create_dataset("value", data=vel)
        el["step"] = f["particles/atoms/position/step"]
    for order in ("velocity first", "position first"):
        with xr.open_dataset(path, engine="h5md") as ds:
            assert ds.velocity.dims == ("time", "atom", "spatial"), order
            assert "time_velocity" not in ds.coords
            np.testing.assert_allclose(ds.time.values, np.arange(5) * 0.5)
            np.testing.assert_array_equal(ds.velocity.values, vel)
            assert (ds.velocity * ds.position).sum("spatial").shape == (5, 4)
        with h5py.File(path, "r+") as f:  # the element without times read first
            f.move("particles/atoms/position", "particles/atoms/zposition")
            f.move("particles/atoms/velocity", "particles/atoms/position")
            f.move("particles/atoms/zposition", "particles/atoms/velocity")
        pos, vel = vel, pos


def test_storage_kinds(mixed_file):
    path, data = mixed_file
    with pytest.raises(ValueError, match="several particles groups.*particles/trajectory"):
        xr.open_dataset(path, engine="h5md")
    with xr.open_dataset(path, engine="h5md", group="trajectory") as ds:
        assert ds.position.dims == ("time", "atom", "spatial")
        np.testing.assert_array_equal(ds.position.values, data["pos"])
        np.testing.assert_array_equal(ds.step.values, np.arange(12) * 5)
        # hard-linked and equal-valued samplings share time
        assert ds.image.dims == ("time", "atom", "spatial")
        assert ds.charge.dims == ("time", "atom")
        assert ds.box_edges.dims == ("time", "spatial")
        # fixed interval sampling: step 10 from offset 0, other frames -> own dimension
        assert ds.velocity.dims == ("time_velocity", "atom", "spatial")
        np.testing.assert_array_equal(ds.step_velocity.values, [0, 10, 20, 30, 40, 50])
        np.testing.assert_allclose(ds.time_velocity.values, np.arange(6) * 0.02)
        np.testing.assert_array_equal(ds.velocity.values, data["vel"])
        # time-independent elements
        assert ds.mass.dims == ("atom",)
        assert ds.species.dims == ("atom",)
        assert ds.mass.attrs["units"] == "u"
        assert list(ds.spatial.values) == ["x", "y", "z"]
        assert ds.box_edges.attrs["dimension"] == 3
    with xr.open_dataset(path, engine="h5md", group="particles/solvent") as ds:
        np.testing.assert_array_equal(ds.step.values, [0, 1, 2])
    with xr.open_dataset(path, engine="h5md", group="trajectory", convert_units=True) as ds:
        np.testing.assert_allclose(ds.position.values, data["pos"] * 10, rtol=1e-6)
        assert ds.box_edges.values[0, 0] == pytest.approx(50.0)
        assert ds.velocity.attrs["units"] == "Angstrom ps-1"


def test_observables(mixed_file):
    path, _ = mixed_file
    with xr.open_dataset(path, engine="h5md", group="observables") as obs:
        assert obs.temperature.dims == ("time",)
        assert obs.pressure.dims == ("time_pressure",)
        np.testing.assert_array_equal(obs.step_pressure.values, [0, 20, 40])
        assert obs.lattice.dims == ("lattice_dim_0", "lattice_dim_1")
        assert "energy" not in obs  # it lives in the nested group
    with xr.open_dataset(path, engine="h5md", group="observables/thermo") as th:
        assert th.energy.dims == ("time", "energy_dim_1")
        np.testing.assert_array_equal(th.step.values, [0, 15, 30, 45])


def test_equal_times_keep_their_unit_and_other_units_get_their_own_axis(tmp_path):
    """Observables at the same steps and time values: ``a``'s time without a unit,
    ``b``'s in fs, ``c``'s in ps. The shared axis took ``a``'s sampling (the first by
    name): the times lost their unit, and ``c``'s ps shared the axis of ``b``'s fs. Now
    the shared axis has the unit one of them gives, and times in another unit are an axis
    of their own. A particles group likewise (positions' time without a unit)."""
    path = tmp_path / "units.h5md"
    same = dict(step=np.arange(3), time=np.arange(3.0))
    write_h5md(path, {"g": {
        "position": dict(value=np.zeros((3, 2, 3)), time_unit=None, **same),
        "velocity": dict(value=np.ones((3, 2, 3)), time_unit="ps", **same)}},
        observables={name: dict(value=np.arange(3.0) + i, time_unit=unit, **same)
                     for i, (name, unit) in enumerate((("a", None), ("b", "fs"),
                                                       ("c", "ps"), ("d", "femtosecond")))})
    with xr.open_datatree(path, engine="h5md") as tree:
        obs = tree["observables"]
        assert obs.a.dims == obs.b.dims == ("time",)
        assert obs.d.dims == ("time",)  # fs spelled out is fs: no axis of its own
        assert obs.time.attrs["units"] == "fs"
        assert obs.c.dims == ("time_c",) and obs.time_c.attrs["units"] == "ps"
        np.testing.assert_array_equal(obs.c.values, [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(obs.time_c.values, [0.0, 1.0, 2.0])
        g = tree["particles/g"]
        assert g.velocity.dims == g.position.dims == ("time", "atom", "spatial")
        assert g.time.attrs["units"] == "ps"


def test_datatree(mixed_file):
    path, data = mixed_file
    tree = xr.open_datatree(path, engine="h5md")
    assert set(tree.children) == {"particles", "observables", "parameters"}
    assert set(tree["particles"].children) == {"trajectory", "solvent"}
    np.testing.assert_array_equal(tree["particles/trajectory"].position.values, data["pos"])
    assert "thermo" in tree["observables"].children
    # the parent's time (12 frames) would not align with thermo's (4): renamed on the parent
    assert "time_observables" in tree["observables"].dims
    assert tree["observables/thermo"].sizes["time"] == 4
    assert float(tree["parameters"].temperature_target) == 300.0
    assert tree["parameters"].attrs["ensemble"] == "NVT"
    assert tree.attrs["h5md_version"] == "1.1"
    tree.close()


def test_datatree_renamed_time_keeps_its_hdf5_blocks(tmp_path):
    """A time axis renamed on a parent (``time_observables``, where a child's time does not
    align) keeps its preferred chunks: ``preferred_chunks`` kept the name ``time``, so
    ``chunks={}`` served the whole axis as one dask block."""
    n = 40
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "energy": dict(value=np.arange(n, dtype=np.float64), step=np.arange(n),
                       time=np.arange(n) * 0.5, chunks=(8,)),
        "thermo/t": dict(value=np.ones(3), step=np.arange(3) * 7)})
    with xr.open_datatree(path, engine="h5md", chunks={}, chunk_mib=64 / 2**20) as tree, \
            xr.open_dataset(path, engine="h5md", group="observables", chunks={},
                            chunk_mib=64 / 2**20) as ds:
        obs = tree["observables"]
        assert obs.energy.dims == ("time_observables",)
        assert obs.energy.encoding["preferred_chunks"] == {"time_observables": 8}
        assert obs.energy.chunks == ds.energy.chunks == ((8,) * 5,)
        assert obs.step_observables.chunks == ((8,) * 5,)
        np.testing.assert_array_equal(obs.energy.values, np.arange(n))
        np.testing.assert_array_equal(obs.time_observables.values, np.arange(n) * 0.5)


def test_datatree_topology_of_one_group_opens_the_others_without_it(mixed_file):
    """A topology passed to ``open_datatree`` of a file of several particles groups that
    fits one of them (a protein's, beside its solvent's): the whole tree was refused (an
    audit). The groups it fits take it; the others open without it, said once by group;
    a topology that fits no group is still an error, naming a group."""
    import MDAnalysis as mda

    from h5mdx.errors import H5MDConformanceWarning

    path, _ = mixed_file
    u = mda.Universe.empty(7, trajectory=True)
    u.add_TopologyAttr("name", [f"A{i}" for i in range(7)])
    with pytest.warns(H5MDConformanceWarning) as said, \
            xr.open_datatree(path, engine="h5md", topology=u) as tree:
        assert tree["particles/trajectory"]["name"].values.tolist() == [
            f"A{i}" for i in range(7)]
        solvent = tree["particles/solvent"].to_dataset()
        assert "name" not in solvent.coords and "topology" not in solvent.attrs
        assert solvent.sizes["atom"] == 2
        np.testing.assert_array_equal(solvent.position.values, np.zeros((3, 2, 3)))
    lines = [str(w.message) for w in said if "topology" in str(w.message)]
    assert len(lines) == 1 and lines[0].startswith(f"{path} [/particles/solvent]: has 2 "
                                                   "atoms, the topology ")
    assert lines[0].endswith(" 7; opened without the topology")
    with xr.open_datatree(path, engine="h5md", topology=u,
                          group="particles/trajectory") as tree:
        assert tree.to_dataset()["name"].values.tolist() == [f"A{i}" for i in range(7)]
    with pytest.raises(TopologyError, match=r"mixed\.h5md \[/particles/solvent\]: the "
                       r"topology .* has 7 atoms but the trajectory has 2"):
        xr.open_datatree(path, engine="h5md", topology=u, group="particles/solvent")
    wrong = mda.Universe.empty(5, trajectory=True)
    with pytest.raises(TopologyError, match=r"has 5 atoms but the trajectory has"):
        xr.open_datatree(path, engine="h5md", topology=wrong)


def test_datatree_renames_the_step_of_an_element_time_axis_once(tmp_path):
    """A parent's ``time_pressure`` renamed where a child's does not align with it is
    ``time_pressure_observables``, and its ``step_pressure`` ``step_pressure_observables``:
    it was ``step_pressure_pressure_observables``."""
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "energy": dict(value=np.arange(4.0), step=np.arange(4)),
        "pressure": dict(value=np.arange(3.0), step=np.array([0, 5, 9])),
        "sub/energy": dict(value=np.arange(4.0), step=np.arange(4)),
        "sub/pressure": dict(value=np.arange(2.0), step=np.array([0, 7]))})
    with xr.open_datatree(path, engine="h5md") as tree:
        obs = tree["observables"].to_dataset(inherit=False)
        assert set(obs.coords) == {"time", "step", "time_pressure_observables",
                                   "step_pressure_observables"}
        np.testing.assert_array_equal(obs.step_pressure_observables, [0, 5, 9])
        assert obs.pressure.dims == ("time_pressure_observables",)
        np.testing.assert_array_equal(tree["observables/sub"].step_pressure, [0, 7])


def test_datatree_child_times_of_equal_values_keep_their_own_unit(tmp_path):
    """/observables/a has times 0, 1, 2 ps; /observables/sub/b the same numbers in fs,
    /observables/sub2/c no times (its steps 0, 1, 2 serve). The children's ``time``
    aligned with the parent's, and xarray keeps one of aligned coordinates, the parent's:
    b's times read as ps, c's steps as a simulation time in ps. Now the parent's axis is
    renamed where the attributes differ, as where the values do."""
    same = dict(value=np.arange(3.0), step=np.arange(3))
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "a": dict(time=np.arange(3.0), time_unit="ps", **same),
        "sub/b": dict(time=np.arange(3.0), time_unit="fs", **same),
        "sub2/c": same})
    with xr.open_datatree(path, engine="h5md") as tree:
        assert tree["observables"].time_observables.attrs["units"] == "ps"
        assert tree["observables/sub"].time.attrs["units"] == "fs"
        assert tree["observables/sub2"].time.attrs["units"] == "step"
        for node in ("sub", "sub2"):
            np.testing.assert_array_equal(tree[f"observables/{node}"].time.values,
                                          [0.0, 1.0, 2.0])


def test_datatree_without_xarrays_default_indexes_is_the_same(mixed_file):
    """The engine builds every group's indexes itself, so create_default_indexes=False
    (which spares xarray a second build of a tree of ten thousand groups, as
    docs/guide/data-model.md advises) gives the same tree, indexes included."""
    path, _ = mixed_file
    with xr.open_datatree(path, engine="h5md") as tree, \
            xr.open_datatree(path, engine="h5md", create_default_indexes=False) as bare:
        assert bare.identical(tree)
        for node in tree.subtree:
            other = bare[node.path]
            assert set(other.xindexes) == set(node.xindexes)
            assert {d for d in node.dims if d in node.coords} <= set(other.xindexes)


def test_time_axes_a_writer_can_grow_are_unlimited(tmp_path, adk_h5md, mixed_file):
    """``value`` datasets with no maximum frame count (MDAnalysis', h5mdx's writers) serve
    their time axis as xarray's netCDF engines serve unlimited dimensions:
    ``to_netcdf`` writes it unlimited, so frames can be appended; a fixed one is not."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        assert ds.encoding["unlimited_dims"] == {"time"}
        ds.isel(time=slice(3)).to_netcdf(tmp_path / "adk.nc", engine="h5netcdf")
    with h5py.File(tmp_path / "adk.nc", "r") as f:
        assert f["position"].maxshape[0] is None
    with xr.open_dataset(tmp_path / "adk.nc", engine="h5netcdf") as nc:
        assert nc.encoding["unlimited_dims"] == {"time"}
    fixed = tmp_path / "fixed.h5md"
    shutil.copy(adk_h5md, fixed)
    with h5py.File(fixed, "r+") as f:
        element = f["particles/trajectory/position"]
        values = element["value"][()]
        del element["value"]
        element.create_dataset("value", data=values, chunks=(1, *values.shape[1:]))
    with xr.open_dataset(fixed, engine="h5md") as ds:
        assert ds.encoding["unlimited_dims"] == set()
    path, _ = mixed_file
    with h5py.File(path, "r+") as f:
        for name in ("observables/temperature", "observables/thermo/energy"):
            values = f[f"{name}/value"][()]
            del f[f"{name}/value"]
            f[name].create_dataset("value", data=values, maxshape=(None, *values.shape[1:]))
    with xr.open_datatree(path, engine="h5md") as tree:
        # the observables' time is renamed where it does not align with a child's
        assert tree["observables"].encoding["unlimited_dims"] == {"time_observables"}
        assert "time_pressure" in tree["observables"].dims  # not grown: not unlimited
        assert tree["observables/thermo"].encoding["unlimited_dims"] == {"time"}
        assert tree["particles/trajectory"].encoding["unlimited_dims"] == set()
        assert tree.encoding["unlimited_dims"] == set()


def _nested_parameters(path):
    write_h5md(path, {"g": {"position": dict(value=np.zeros((2, 3, 3)), step=np.arange(2))}},
               parameters={"temperature": 300.0, "ensemble": b"NVT", "x": np.arange(3)})
    with h5py.File(path, "r+") as f:
        par = f["parameters"]
        par.attrs["program"] = "md"
        par["temperature"].attrs["unit"] = "K"
        par["cutoff"] = np.float32(1.2)
        par["cutoff"].attrs["unit"] = "nm"
        par["thermostat/tau"] = 0.5
        par["thermostat/tau"].attrs["unit"] = "ps"
        par["thermostat"].attrs["kind"] = "nose-hoover"
        par["thermostat/x"] = np.arange(4)  # a name the parent has, of another size
        par["thermostat/coupling/strength"] = 2.0
        par["thermostat/coupling/strength"].attrs["unit"] = "bogons"
        par["names"] = np.array([b"a", b"b"])
    return path


def test_parameters_keep_their_groups_and_units(tmp_path):
    """Nested /parameters groups are DataTree nodes (and group= targets); ``unit`` is
    served as ``units`` and converted with convert_units; one unknown unit is one warning."""
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with pytest.warns(H5MDConformanceWarning,
                      match=r"\[/parameters/thermostat/coupling/strength\].*left unconverted"):
        tree = xr.open_datatree(path, engine="h5md", convert_units=True)
    with tree:
        par = tree["parameters"]
        assert set(par.children) == {"thermostat"}
        assert set(par["thermostat"].children) == {"coupling"}
        assert par.attrs == {"program": "md", "ensemble": "NVT"}
        assert float(par.temperature) == 300.0 and par.temperature.attrs == {"units": "K"}
        assert par.cutoff.dtype == np.float32 and par.cutoff.attrs == {"units": "Angstrom"}
        np.testing.assert_allclose(float(par.cutoff), 12.0, rtol=1e-6)
        assert par.names.values.tolist() == ["a", "b"]
        thermo = par["thermostat"]
        assert thermo.attrs == {"kind": "nose-hoover"}
        assert float(thermo.tau) == 0.5 and thermo.tau.attrs["units"] == "ps"
        np.testing.assert_array_equal(thermo.x, np.arange(4))
        np.testing.assert_array_equal(par.x, np.arange(3))
        strength = par["thermostat/coupling"].strength
        assert float(strength) == 2.0 and strength.attrs["units"] == "bogons"
    with xr.open_dataset(path, engine="h5md", group="parameters/thermostat") as ds:
        assert set(ds.data_vars) == {"tau", "x"} and ds.attrs["kind"] == "nose-hoover"
    with xr.open_dataset(path, engine="h5md", group="/parameters") as ds:
        assert float(ds.cutoff) == pytest.approx(1.2) and ds.cutoff.attrs["units"] == "nm"
    with pytest.raises(ValueError, match="no group 'parameters/nope'.*'parameters/thermostat'"):
        xr.open_dataset(path, engine="h5md", group="parameters/nope")


def test_a_group_attribute_named_as_a_file_attribute_is_kept(tmp_path):
    """The tree's nodes leave out the file's attributes, said once at the root; a group's
    own attribute of one of those names (``source``, ``creator_name``) was left out too,
    in silence. Now only a value equal to the root's is."""
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        f["parameters"].attrs["source"] = "charmm36.ff"
        f["parameters/thermostat"].attrs["creator_name"] = "charmm-gui"
    with xr.open_datatree(path, engine="h5md") as tree:
        assert tree.attrs["source"] == path
        assert tree["parameters"].attrs == {"program": "md", "ensemble": "NVT",
                                            "source": "charmm36.ff"}
        assert tree["parameters/thermostat"].attrs == {"kind": "nose-hoover",
                                                       "creator_name": "charmm-gui"}
        assert tree["particles/g"].attrs == {"h5md_group": "/particles/g"}


def test_parameter_attributes_of_no_value_or_references_are_plain(tmp_path):
    """/parameters attributes of HDF5's null dataspace were served as h5py's ``Empty``
    object, object references as h5py's ``Reference`` (neither written by to_netcdf or
    to_zarr). Now one of no value is absent and a reference is the path it points to, as
    an element's attributes are."""
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        group = f["particles/g"]
        f["parameters"].attrs["none"] = h5py.Empty("f8")
        f["parameters/thermostat"].attrs["group"] = group.ref
        f["parameters/cutoff"].attrs["of"] = group.ref
        f["parameters/cutoff"].attrs["none"] = h5py.Empty("S1")
    with xr.open_datatree(path, engine="h5md") as tree:
        assert tree["parameters"].attrs == {"program": "md", "ensemble": "NVT"}
        assert tree["parameters/thermostat"].attrs == {"kind": "nose-hoover",
                                                       "group": "/particles/g"}
        assert tree["parameters"].cutoff.attrs == {"units": "nm", "of": "/particles/g"}
        tree.to_netcdf(tmp_path / "par.nc", engine="h5netcdf")


def test_parameters_hard_linked_twice_are_served_under_each_name(tmp_path):
    """A group of /parameters hard-linked under a second name (``alias``), and a dataset
    in two groups: HDF5's visit of objects gave one name of each, and the other was left
    out in silence (here the whole group ``thermostat``, reached first as ``alias``).
    Now each name is a node, as h5py reads it; a link back to a group above is no cycle.
    A root group H5MD does not define likewise."""
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        par = f["parameters"]
        par["alias"] = par["thermostat"]
        par["thermostat/coupling/cutoff"] = par["cutoff"]
        par["thermostat/coupling/up"] = par["thermostat"]  # a cycle
        f["fields/a/rho"] = np.arange(3.0)
        f["fields/b"] = f["fields/a"]
    with xr.open_datatree(path, engine="h5md") as tree:
        par = tree["parameters"]
        assert set(par.children) == {"alias", "thermostat"}
        for node in ("thermostat", "alias"):
            assert par[node].attrs == {"kind": "nose-hoover"}
            assert float(par[node].tau) == 0.5
            coupling = par[f"{node}/coupling"]
            assert set(coupling.children) == set()
            assert float(coupling.strength) == 2.0
            assert float(coupling.cutoff) == pytest.approx(1.2)
            assert coupling.cutoff.attrs == {"units": "nm"}
        np.testing.assert_array_equal(tree["fields/a"].rho, [0.0, 1.0, 2.0])
        np.testing.assert_array_equal(tree["fields/b"].rho, [0.0, 1.0, 2.0])


def test_a_bad_parameter_leaves_the_rest(tmp_path):
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        f["parameters"].create_dataset("script", data=["x" * 10] * 200_000,
                                       dtype=h5py.string_dtype())
        par = f["parameters/thermostat"]
        par.create_dataset("null", data=h5py.Empty("f8"))
        par.create_dataset("ref", (1,), dtype=h5py.ref_dtype)[0] = f["particles"].ref
        par.create_dataset("vlen", (2,), dtype=h5py.vlen_dtype(np.int32))[0] = [1, 2]
        par["soft"] = h5py.SoftLink("/particles/g/position/value")
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    found = sorted(str(w.message).split(" [", 1)[1] for w in record)
    assert len(found) == 5, found
    for got, (where, why) in zip(found, [
        ("/parameters/script", "too large to read"),
        ("/parameters/thermostat/null", "null dataspace"),
        ("/parameters/thermostat/ref", "object references"),
        ("/parameters/thermostat/soft", "a soft link to /particles/g/position/value"),
        ("/parameters/thermostat/vlen", "variable-length data"),
    ], strict=True):
        assert got.startswith(where + "]") and why in got and got.endswith("left out"), got
    with tree:
        assert "script" not in tree["parameters"]
        assert float(tree["parameters"].temperature) == 300.0
        assert set(tree["parameters/thermostat"].data_vars) == {"tau", "x"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        xr.open_dataset(path, engine="h5md").close()  # the particles group: no warning
    with pytest.raises(H5MDFormatError, match=r"\[/parameters/"):
        xr.open_datatree(path, engine="h5md", strict=True)


def test_datatree_of_one_group_and_keywords_it_does_not_take(mixed_file):
    """``open_datatree(group=...)`` gives that group's subtree (it gave the whole file);
    a keyword the engine does not take is an error, as for ``open_dataset``."""
    path, data = mixed_file
    with xr.open_datatree(path, engine="h5md", group="particles") as tree:
        assert set(tree.children) == {"trajectory", "solvent"}
        np.testing.assert_array_equal(tree["trajectory"].position.values, data["pos"])
    with xr.open_datatree(path, engine="h5md", group="/observables/thermo") as tree:
        assert not tree.children and tree.sizes["time"] == 4
    with pytest.raises(ValueError, match="has no group 'nope'; its groups: /particles"):
        xr.open_datatree(path, engine="h5md", group="nope")
    with pytest.raises(TypeError, match=r"unexpected keyword.*decode_times \(CF decoding"):
        xr.open_datatree(path, engine="h5md", decode_times=False)
    with pytest.raises(TypeError, match=r"unexpected keyword\(s\) selct$"):
        xr.open_datatree(path, engine="h5md", selct="name CA")
    # open_groups takes group= too (it refused it as CF decoding), paths relative to it
    groups = xr.open_groups(path, engine="h5md", group="particles")
    assert set(groups) == {"/", "/trajectory", "/solvent"}
    np.testing.assert_array_equal(groups["/trajectory"].position.values, data["pos"])
    for ds in groups.values():
        ds.close()
    # open_dataset says why too (a bare "got an unexpected keyword argument")
    with pytest.raises(TypeError, match=r"decode_times \(CF decoding does not apply"):
        xr.open_dataset(path, engine="h5md", group="trajectory", decode_times=False)


def test_drop_variables_drops_coordinates_and_paths_expand_the_home(tmp_path, monkeypatch,
                                                                     mixed_file):
    """``drop_variables`` drops coordinates (``step``, ``time``) as xarray's engines do;
    ``~`` in a path is the user's home."""
    path, data = mixed_file
    with xr.open_dataset(path, engine="h5md", group="trajectory",
                         drop_variables=["step", "time"]) as ds:
        assert "step" not in ds.variables and "time" not in ds.coords
        np.testing.assert_array_equal(ds.position.values, data["pos"])
    with xr.open_datatree(path, engine="h5md", drop_variables="step") as tree:
        assert all("step" not in node.variables for node in tree.subtree)
    monkeypatch.setenv("HOME", os.path.dirname(path))
    home = "~/" + os.path.basename(path)
    assert xr.backends.list_engines()["h5md"].guess_can_open(home)
    with xr.open_dataset(home, engine="h5md", group="trajectory") as ds:
        assert ds.encoding["source"] == path


def test_fill_value_becomes_nan(tmp_path):
    value = np.arange(24, dtype=np.float64).reshape(2, 4, 3)
    value[1, 3] = -1.0
    path = write_h5md(
        tmp_path / "fill.h5md",
        particles={"g": {"position": dict(value=value, step=np.arange(2), fillvalue=-1.0)}},
    )
    with xr.open_dataset(path, engine="h5md") as ds:
        assert np.isnan(ds.position.values[1, 3]).all()
        assert not np.isnan(ds.position.values[0]).any()
        assert ds.position.encoding["_FillValue"] == -1.0


def test_integer_fill_value_becomes_nan_when_units_make_floats(tmp_path):
    """Integers in pm with fill -9999, served in Å as floats: the padding is NaN, not
    -99.99 Å. Served as stored, integers keep their fill value."""
    value = np.arange(24, dtype=np.int32).reshape(2, 4, 3) * 100
    value[1, 3] = -9999
    path = write_h5md(
        tmp_path / "ifill.h5md",
        particles={"g": {"position": dict(value=value, step=np.arange(2), fillvalue=-9999,
                                          unit="pm")}},
    )
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        got = ds.position.values
        assert got.dtype == np.float64 and ds.position.attrs["units"] == "Angstrom"
        assert np.isnan(got[1, 3]).all()
        np.testing.assert_allclose(got[0], value[0] / 100.0)
        np.testing.assert_allclose(ds.position.isel(atom=[3, 0]).values[1, 1], value[1, 0] / 100)
    with xr.open_dataset(path, engine="h5md") as ds:
        assert (ds.position.values[1, 3] == -9999).all()


@pytest.mark.filterwarnings("ignore:The data type")  # zarr 3 on the spatial labels
@pytest.mark.filterwarnings("ignore:Consolidated metadata")
def test_netcdf_and_zarr_writers_keep_served_values_and_filters(tmp_path):
    """``encoding`` tells xarray's writers the dtype served (integers in pm served as
    float Å, not written back as integer zeros) and the filters (shuffle kept), as
    h5netcdf's engine does."""
    value = np.arange(24, dtype=np.int32).reshape(2, 4, 3) + 5
    path = write_h5md(tmp_path / "int.h5md", particles={"g": {
        "position": dict(value=value, step=np.arange(2), unit="pm"),
        "velocity": dict(value=value.astype(np.float32), step=np.arange(2), chunks=(1, 4, 3),
                         compression="gzip", shuffle=True)}})
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        enc = ds.position.encoding
        assert enc["dtype"] == np.float64 and enc["original_dtype"] == np.int32
        assert ds.velocity.encoding["shuffle"] and not ds.position.encoding["shuffle"]
        ds.to_netcdf(tmp_path / "out.nc", engine="h5netcdf")
        ds.to_zarr(tmp_path / "out.zarr")
    for engine, out in (("h5netcdf", "out.nc"), ("zarr", "out.zarr")):
        with xr.open_dataset(tmp_path / out, engine=engine) as back:
            np.testing.assert_allclose(back.position.values, value / 100.0)
    with h5py.File(tmp_path / "out.nc", "r") as f:
        assert f["velocity"].shuffle and f["velocity"].chunks == (1, 4, 3)


@pytest.mark.parametrize("spec", ["blosc", "zstd:3"])
def test_netcdf_writer_keeps_a_plugin_filter(tmp_path, spec):
    """A Blosc or Zstandard file (as ``h5mdx rechunk --compression blosc`` writes it)
    written out with ``to_netcdf(engine="h5netcdf")`` failed: its encoding said
    ``compression="unknown"``, h5py's name for a plugin filter. It is
    now the filter's id and values, which h5py takes back; ``info`` names the filter."""
    from h5mdx.cli.info import element_dict
    from h5mdx.format.compression import compression_kwargs
    from h5mdx.format.h5md import scan

    value = np.random.default_rng(1).normal(size=(6, 40, 3)).round(2).astype(np.float32)
    path = write_h5md(tmp_path / "p.h5md", particles={"g": {"position": dict(
        value=value, step=np.arange(6), chunks=(3, 40, 3), **compression_kwargs(spec))}})
    code = 32001 if spec == "blosc" else 32015
    with xr.open_dataset(path, engine="h5md") as ds:
        assert ds.position.encoding["compression"] == code
        ds.to_netcdf(tmp_path / "out.nc", engine="h5netcdf")
    with h5py.File(tmp_path / "out.nc", "r") as f:
        plist = f["position"].id.get_create_plist()
        assert code in [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        np.testing.assert_array_equal(f["position"][()], value)
    el = scan(path).particles["g"].elements["position"]
    assert element_dict(el)["compression"] == spec.split(":")[0]


# ----------------------------------------------------------------------------- laziness, chunks


def test_open_reads_no_value_data(adk_h5md, monkeypatch):
    calls = []
    original = H5MDArray._getitem

    def spy(self, key):
        calls.append((self.path, key))
        return original(self, key)

    monkeypatch.setattr(H5MDArray, "_getitem", spy)
    ds = xr.open_dataset(adk_h5md, engine="h5md", chunks={})
    assert calls == []
    sub = ds.position.isel(time=slice(10, 12), atom=[5, 1, 700])
    assert calls == []
    values = sub.values
    assert values.shape == (2, 3, 3)
    reads = [key for path, key in calls if path.endswith("position/value")]
    assert len(reads) == 1
    # dask fuses the time slice into the read: only frames 10-11 are asked of h5py
    assert reads[0][0] == slice(10, 12, 1)
    ds.close()
    # without dask, xarray's lazy indexing passes the atom list down to the read as well
    calls.clear()
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        ds.position.isel(time=slice(10, 12), atom=[5, 1, 700]).values  # noqa: B018
    (path, key), = calls
    assert key[0] == slice(10, 12, 1)
    np.testing.assert_array_equal(key[1], [1, 5, 700])


def test_indexing_matches_numpy(adk_h5md, adk_positions):
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        pos = ds.position
        np.testing.assert_array_equal(pos.isel(time=5).values, adk_positions[5])
        np.testing.assert_array_equal(pos.isel(time=slice(3, 40, 7)).values, adk_positions[3:40:7])
        np.testing.assert_array_equal(pos.isel(time=slice(None, None, -5)).values,
                                      adk_positions[::-5])
        idx = [900, 3, 3, 17, 2000]
        np.testing.assert_array_equal(pos.isel(atom=idx).values, adk_positions[:, idx])
        np.testing.assert_array_equal(pos.isel(time=[7, 2, 50], atom=slice(0, 10)).values,
                                      adk_positions[[7, 2, 50], :10])
        np.testing.assert_array_equal(pos.isel(time=3, atom=idx).values, adk_positions[3, idx])
        np.testing.assert_array_equal(pos.isel(time=3, atom=idx, spatial=1).values,
                                      adk_positions[3, idx, 1])
        np.testing.assert_array_equal(pos.sel(spatial="y").isel(time=0).values,
                                      adk_positions[0, :, 1])
        t = float(ds.time[4])
        np.testing.assert_array_equal(pos.sel(time=t).values, adk_positions[4])


def test_default_chunks_align_with_hdf5(adk_h5md):
    # HDF5 chunks of one frame (the MDAnalysis default): never one task per frame
    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}) as ds:
        assert ds.position.encoding["chunksizes"] == (1, 3341, 3)
        assert ds.position.chunks[1:] == ((3341,), (3,))
        assert len(ds.position.chunks[0]) == 1  # 98 frames x 40 KB < 32 MiB
    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.5) as ds:
        blocks = ds.position.chunks[0]
        frame = 3341 * 3 * 4
        assert blocks[0] == (512 * 1024) // frame
        assert len(blocks) == -(-98 // blocks[0])


def test_default_chunks_whole_hdf5_chunks(tmp_path):
    n = 50
    path = write_h5md(
        tmp_path / "c.h5md",
        particles={"g": {"position": dict(value=np.zeros((100, n, 3), np.float32),
                                          step=np.arange(100), chunks=(7, 10, 3))}},
    )
    with xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.01) as ds:
        blocks = ds.position.chunks[0]
        assert all(b % 7 == 0 for b in blocks[:-1])
        assert ds.position.chunks[1] == (n,)
    with xr.open_dataset(path, engine="h5md", chunks="auto", chunk_mib=0.01) as ds:
        pref = ds.position.encoding["preferred_chunks"]["time"]
        assert all(b % pref == 0 for b in ds.position.chunks[0][:-1])
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        xr.open_dataset(path, engine="h5md", chunks={"time": 5}, chunk_mib=0.01).close()


def test_contiguous_blocks(tmp_path):
    path = write_h5md(
        tmp_path / "contig.h5md",
        particles={"g": {"position": dict(value=np.ones((200, 100, 3), np.float64),
                                          step=np.arange(200))}},
    )
    with xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.1) as ds:
        assert ds.position.encoding["chunksizes"] is None
        frames = int(0.1 * 2**20 // (100 * 3 * 8))
        assert ds.position.chunks[0][0] == frames
        assert float(ds.position.sum()) == 200 * 100 * 3


def test_pickle_roundtrip(adk_h5md, adk_positions):
    ds = xr.open_dataset(adk_h5md, engine="h5md", chunks={})
    for dumps, loads in ((cloudpickle.dumps, pickle.loads), (pickle.dumps, pickle.loads)):
        back = loads(dumps(ds))
        np.testing.assert_array_equal(back.position[3:5].values, adk_positions[3:5])
    ds.close()


def test_threads_and_processes_schedulers(adk_h5md, adk_positions):
    import dask

    with xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.3) as ds:
        expected = adk_positions.astype(np.float64).mean(axis=(1, 2))
        for scheduler in ("threads", "processes"):
            with dask.config.set(scheduler=scheduler, num_workers=2):
                got = ds.position.mean(("atom", "spatial")).compute()
            np.testing.assert_allclose(got.values, expected, rtol=0, atol=1e-6)


def test_distributed_local_cluster(adk_h5md, adk_positions):
    distributed = pytest.importorskip("distributed")
    from h5mdx.parallel import local_cluster

    with local_cluster(2) as cluster, \
            distributed.Client(cluster) as client, \
            xr.open_dataset(adk_h5md, engine="h5md", chunks={}, chunk_mib=0.3) as ds:
        got = client.compute(ds.position.max(("atom", "spatial"))).result()
        np.testing.assert_allclose(got.values, adk_positions.max(axis=(1, 2)))


def test_close_releases_file(tmp_path):
    path = write_h5md(tmp_path / "close.h5md",
                      particles={"g": {"position": dict(value=np.ones((3, 2, 3)),
                                                        step=np.arange(3))}})
    ds = xr.open_dataset(path, engine="h5md")
    assert float(ds.position[0, 0, 0]) == 1.0  # opens the file
    ds.close()
    # no open h5py file object on it remains: it can be opened for writing
    with h5py.File(path, "r+") as f:
        assert "particles" in f


# ----------------------------------------------------------------------------- topology


def test_topology_and_select(adk_h5md, adk_positions, adk_universe):
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF) as ds:
        assert ds.attrs["topology"] == PSF
        np.testing.assert_array_equal(ds.name.values, adk_universe.atoms.names)
        np.testing.assert_array_equal(ds.resid.values, adk_universe.atoms.resids)
        np.testing.assert_allclose(ds.mass.values, adk_universe.atoms.masses)
        assert set(ds.coords) >= {"name", "resname", "resid", "segid", "type", "mass", "charge"}
    ca = adk_universe.select_atoms("name CA").indices
    with xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, select="name CA",
                         chunks={}) as ds:
        assert ds.sizes["atom"] == 214
        np.testing.assert_array_equal(ds.atom.values, ca)
        assert set(ds.name.values) == {"CA"}
        np.testing.assert_array_equal(ds.position.values, adk_positions[:, ca])


def test_topology_atom_count_mismatch(adk_h5md):
    with pytest.raises(TopologyError, match=r"214|3341") as err:
        xr.open_dataset(adk_h5md, engine="h5md", topology=PDB_small.replace(".pdb", "_10res.pdb"))
    assert "3341" in str(err.value)
    assert adk_h5md in str(err.value)


def test_a_universe_passed_is_the_one_analyses_use(adk_h5md, adk_universe):
    """topology=<Universe>: its masses as edited, or a Universe without a file, are what
    ds.md.rmsd uses; h5mdx kept the file's name and read the file again (an edited mass
    was lost, and an in-memory Universe failed with "No such topology file: 'None'";
    found by an audit)."""
    import MDAnalysis as mda

    import h5mdx
    from h5mdx.engine.topology import IN_MEMORY

    u = mda.Universe(PSF)
    u.atoms.masses = np.where(u.atoms.names == "CA", 100.0, 1.0)
    with xr.open_dataset(adk_h5md, engine="h5md", topology=u) as ds:
        assert ds.attrs["topology"] == os.path.abspath(PSF)
        assert ds.md.topology is u
        ds = ds.isel(time=slice(0, 20))
        edited = h5mdx.rmsd(ds.position, weights=u.atoms.masses).values
        from_file = h5mdx.rmsd(ds.position, weights=adk_universe.atoms.masses).values
        assert not np.allclose(edited, from_file)
        np.testing.assert_allclose(ds.md.rmsd(weights="mass").values, edited, atol=1e-6)
    empty = mda.Universe.empty(adk_universe.atoms.n_atoms, trajectory=False)
    empty.add_TopologyAttr("name", adk_universe.atoms.names)
    with xr.open_dataset(adk_h5md, engine="h5md", topology=empty) as ds:
        assert ds.attrs["topology"] == IN_MEMORY
        by_name = ds.isel(time=slice(0, 5)).md.rmsd(select="name CA").values
        ca = adk_universe.select_atoms("name CA").indices
        np.testing.assert_allclose(
            by_name, h5mdx.rmsd(ds.position.isel(time=slice(0, 5)), select=ca).values)
        lost = ds.drop_vars("atom")
        with pytest.raises(TopologyError, match="a Universe without a file"):
            lost.md.rmsd(select="name CA", topology=lost.attrs["topology"])


def test_a_relative_topology_path_is_kept_absolute(adk_h5md, tmp_path, monkeypatch):
    """attrs['topology'] named 'adk.psf' as given: after a chdir (or in a worker started
    elsewhere) the analyses could not find it."""
    shutil.copy(PSF, tmp_path / "adk.psf")
    monkeypatch.chdir(tmp_path)
    with xr.open_dataset(adk_h5md, engine="h5md", topology="adk.psf") as ds:
        assert ds.attrs["topology"] == str(tmp_path / "adk.psf")
        monkeypatch.chdir(os.path.dirname(adk_h5md))
        assert ds.isel(time=slice(0, 3)).md.rmsd(select="name CA").sizes["time"] == 3


def test_select_matches_nothing(adk_h5md):
    with pytest.raises(TopologyError, match="matches no atom"):
        xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, select="name XYZ")
    with pytest.raises(TopologyError, match="needs a topology"):
        xr.open_dataset(adk_h5md, engine="h5md", select="name CA")


def test_a_selection_by_position_with_the_box_dropped_is_made_in_the_files_box(tmp_path):
    """drop_variables=['box_edges'] with select='around 2 resid 1' made the selection
    without the box, its distances not periodic, in silence: atom 1, 0.8 A from atom 0
    across the periodic boundary of a 10 A box, was left out (and, alone, the selection
    "matched no atom"). Now it is made in the file's box, as MDAnalysis makes it."""
    import MDAnalysis as mda

    from h5mdx.testing import write_h5md

    xyz = np.array([[0.5, 5, 5], [9.7, 5, 5], [5, 5, 5], [3, 5, 5]])
    path = write_h5md(tmp_path / "pbc.h5md", {"g": {"position": dict(
        value=np.stack([xyz, xyz]), step=np.arange(2), unit="Angstrom")}}, box={"g": dict(
            edges=dict(value=np.full((2, 3), 10.0), step=np.arange(2), unit="Angstrom"))})
    u = mda.Universe.empty(4, n_residues=4, atom_resindex=[0, 1, 2, 3], trajectory=True)
    u.add_TopologyAttr("resid", [1, 2, 3, 4])
    u.atoms.positions, u.dimensions = xyz, [10, 10, 10, 90, 90, 90]
    want = u.select_atoms("around 2 resid 1").indices
    assert want.tolist() == [1]
    for drop in (None, ["box_edges"]):
        with xr.open_dataset(path, engine="h5md", topology=u, select="around 2 resid 1",
                             drop_variables=drop) as ds:
            np.testing.assert_array_equal(ds.atom, want)
            assert ("box_edges" in ds) == (drop is None)
            np.testing.assert_array_equal(ds.position[0], xyz[want])


def test_a_selection_by_position_with_the_positions_dropped_says_so(adk_h5md, adk_universe,
                                                                     tmp_path):
    """drop_variables=['position'] with select='around 5 resid 1' said the group had no
    positions (or no per-atom element, where the positions were its only one), as if the
    file held none; now the error says drop_variables left them out. A selection by
    properties still works without them."""
    with pytest.raises(TopologyError, match=r"/particles/trajectory has no per-atom element "
                       "left: drop_variables left out 'position'; keep one"):
        xr.open_dataset(adk_h5md, engine="h5md", topology=PSF, select="around 5 resid 1",
                        drop_variables=["position"])
    path = shutil.copy(adk_h5md, tmp_path / "tagged.h5md")
    with h5py.File(path, "r+") as f:  # a per-atom element beside the positions
        f["particles/trajectory/tag"] = np.arange(adk_universe.atoms.n_atoms)
    with pytest.raises(TopologyError, match=r"\[/particles/trajectory\]: a selection by "
                       "position .* drop_variables left them out: keep 'position'"):
        xr.open_dataset(path, engine="h5md", topology=PSF, select="around 5 resid 1",
                        drop_variables=["position"])
    with xr.open_dataset(path, engine="h5md", topology=PSF, select="name CA",
                         drop_variables=["position"]) as ds:
        assert "position" not in ds
        ca = adk_universe.select_atoms("name CA").indices
        np.testing.assert_array_equal(ds.atom, ca)
        np.testing.assert_array_equal(ds.tag, ca)


# ----------------------------------------------------------------------------- bad input


def _expect(path, match, exc=H5MDFormatError, **kw):
    with pytest.raises(exc, match=match) as err:
        xr.open_dataset(path, engine="h5md", **kw)
    assert str(path) in str(err.value) or str(path) in repr(err.value)
    return err.value


def test_bad_files(tmp_path, adk_h5md):
    empty = tmp_path / "empty.h5md"
    empty.write_bytes(b"")
    _expect(empty, "empty")
    text = tmp_path / "text.h5md"
    text.write_text("not hdf5\n" * 100)
    _expect(text, "not an HDF5 file")
    dcd = tmp_path / "run1.dcd"  # an MDAnalysis user's first try
    dcd.write_bytes(b"\x54\x00\x00\x00CORD" + bytes(200))
    _expect(dcd, "a .dcd trajectory converts to H5MD once with: h5mdx convert TOPOLOGY "
                 "run1.dcd run1.h5md")
    truncated = tmp_path / "truncated.h5md"
    truncated.write_bytes(open(adk_h5md, "rb").read()[:5000])
    _expect(truncated, "truncated or corrupt")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    _expect(plain, "no /h5md group")
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "missing.h5md", engine="h5md")


def test_bad_structures(tmp_path):
    """strict=True refuses them (the tolerant default is in test_conformance.py)."""
    base = dict(value=np.zeros((4, 2, 3)), step=np.arange(4))
    path = write_h5md(tmp_path / "novalue.h5md", particles={"g": {"position": base}})
    with h5py.File(path, "r+") as f:
        del f["particles/g/position/value"]
    _expect(path, r"/particles/g/position.*no 'value'", strict=True)

    path = write_h5md(tmp_path / "steplen.h5md",
                      particles={"g": {"position": dict(value=np.zeros((4, 2, 3)),
                                                        step=np.arange(3))}})
    err = _expect(path, "'step' has 3 entries but 'value' has 4 frames", strict=True)
    assert err.h5path == "/particles/g/position/step"

    path = write_h5md(tmp_path / "timelen.h5md",
                      particles={"g": {"position": dict(value=np.zeros((4, 2, 3)),
                                                        step=np.arange(4),
                                                        time=np.arange(5.0))}})
    _expect(path, "'time' has 5 entries but 'value' has 4 frames", strict=True)

    path = write_h5md(tmp_path / "version.h5md", particles={"g": {"position": base}})
    with h5py.File(path, "r+") as f:
        f["h5md"].attrs["version"] = np.array([2, 0])
    _expect(path, "version 2.0 is not supported")

    path = write_h5md(tmp_path / "nostep.h5md", particles={"g": {"position": base}})
    with h5py.File(path, "r+") as f:
        del f["particles/g/position/step"]
    _expect(path, "no 'step'", strict=True)

    path = write_h5md(tmp_path / "dangling.h5md", particles={"g": {"position": base}})
    with h5py.File(path, "r+") as f:
        f["particles/g/velocity"] = h5py.SoftLink("/nowhere")
    _expect(path, "dangling", strict=True)

    path = write_h5md(tmp_path / "external.h5md", particles={"g": {"position": base}})
    with h5py.File(path, "r+") as f:
        f["particles/g/velocity"] = h5py.ExternalLink("/etc/other.h5", "/x")
    _expect(path, "external link", strict=True)

    path = write_h5md(tmp_path / "groups.h5md", particles={"g": {"position": base}})
    _expect(path, "no group 'nope'.*'particles/g'", exc=ValueError, group="nope")


@pytest.mark.parametrize("filters", [
    {"compression": "gzip"},
    {"compression": "lzf"},
    pytest.param("lz4", id="lz4"),
    pytest.param("blosc", id="blosc"),
    pytest.param("zstd", id="zstd"),
])
def test_corrupt_chunk_error_at_compute(tmp_path, filters):
    """A damaged compressed chunk: H5MDReadError naming the file, element and frames,
    on the direct path (each codec's own error) and through h5py alike."""
    import hdf5plugin

    if isinstance(filters, str):
        filters = dict({"lz4": hdf5plugin.LZ4(), "blosc": hdf5plugin.Blosc(),
                        "zstd": hdf5plugin.Zstd()}[filters])
    value = np.random.default_rng(0).normal(size=(40, 50, 3)).round(1)  # compressible
    path = write_h5md(
        tmp_path / "corrupt.h5md",
        particles={"g": {"position": dict(value=value, step=np.arange(40), chunks=(10, 50, 3),
                                          **filters)}},
    )
    with h5py.File(path, "r") as f:
        info = f["particles/g/position/value"].id.get_chunk_info(1)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(b"\xff" * min(info.size, 64))
    ds = xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.01)  # opens fine: lazy
    assert ds.position.chunks[0] == (10, 10, 10, 10)
    np.testing.assert_array_equal(ds.position[:10].values, value[:10])
    with pytest.raises(H5MDReadError, match=r"position/value.*frames 10-19") as err:
        ds.position[10:20].values  # noqa: B018
    assert isinstance(err.value, OSError)
    assert path in str(err.value)
    ds.close()


def test_a_chunk_hdf5_reads_but_the_direct_path_cannot_is_read_through_hdf5(
        tmp_path, monkeypatch):
    """A chunk that fails to decode without HDF5 is read again through HDF5 before an
    error is raised: where HDF5 reads it (a codec of ours disagrees with HDF5's), the
    values are served, one warning names the file and element, and the dataset is read
    through HDF5 from then on (it failed the whole read before)."""
    from h5mdx.format import direct, reader_cache

    monkeypatch.setenv("H5MDX_DIRECT_READ", "1")  # the suite's second run turns them off
    value = np.random.default_rng(0).normal(size=(40, 50, 3)).round(1).astype(np.float32)
    path = write_h5md(tmp_path / "t.h5md", particles={"g": {"position": dict(
        value=value, step=np.arange(40), chunks=(10, 50, 3), compression="gzip")}})
    decoded = []
    real = direct._decode_one

    def disagreeing(code, data, out):
        decoded.append(code)
        if len(decoded) > 1:  # the first chunk decodes, the second does not
            raise ValueError(f"decoding filter {code} failed: simulated")
        return real(code, data, out)

    monkeypatch.setattr(direct, "_decode_one", disagreeing)
    with xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=0.01) as ds:
        np.testing.assert_array_equal(ds.position[:10].values, value[:10])
        with pytest.warns(RuntimeWarning, match=r"t\.h5md \[/particles/g/position/value\]: "
                          r"reading frames 10-19.*simulated \(read without HDF5\), where "
                          r"HDF5 read it; this dataset is read through HDF5 from now on"):
            np.testing.assert_array_equal(ds.position[10:20].values, value[10:20])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per dataset
            np.testing.assert_array_equal(ds.position.values, value)
        assert len(decoded) == 2  # the rest through HDF5
        assert reader_cache.why_not_direct(path, "/particles/g/position/value") is not None
    # an RMSD task's reads (FrameReader.bind: rows_reader) are retried alike (they raised
    # the private error; found by a review)
    import dask

    path2 = write_h5md(tmp_path / "t2.h5md", particles={"g": {"position": dict(
        value=value, step=np.arange(40), chunks=(10, 50, 3), compression="gzip")}})
    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    with xr.open_dataset(path2, engine="h5md") as ds:
        want = h5mdx.rmsd(ds.position, 0, kernel="numpy").values
    monkeypatch.setenv("H5MDX_DIRECT_READ", "1")
    decoded.clear()
    with xr.open_dataset(path2, engine="h5md", chunks={}) as ds, pytest.warns(
            RuntimeWarning, match=r"t2\.h5md .*simulated \(read without HDF5\)"):
        got = h5mdx.rmsd(ds.position, 0, kernel="numpy").compute(scheduler=dask.get)
    np.testing.assert_allclose(got.values, want, atol=1e-6)


def test_h5py_reads_reuse_scratch_buffers(adk_h5md, adk_positions, monkeypatch):
    """Through h5py too, reads inside scratch.scratch_buffers land in this thread's reused
    buffer (a fresh array per read costs an mmap and zeroed pages where dask's nanny sets
    MALLOC_TRIM_THRESHOLD_); outside it every read gets its own array."""
    from h5mdx.format.scratch import scratch_buffers

    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        var = ds.position.variable
        pointers = []
        for a in (0, 40):
            with scratch_buffers():
                block = np.asarray(var[a:a + 40].values)
                np.testing.assert_array_equal(block, adk_positions[a:a + 40])
                pointers.append(block.__array_interface__["data"][0])
        assert pointers[0] == pointers[1]
        first, second = np.asarray(var[0:40].values), np.asarray(var[40:80].values)
        assert not np.shares_memory(first, second)
        np.testing.assert_array_equal(first, adk_positions[:40])


def test_h5py_dataset_looked_up_once_per_open_file(adk_h5md, adk_positions, monkeypatch):
    """Reads through h5py look the dataset up once per open file, not once per read (with
    one-frame chunks on HDF5 1.10 that lookup cost ~20% of the read), and a file the
    manager closed and reopened is looked up again; the held h5py objects never travel
    in a pickle."""
    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    lookups = []
    getitem = h5py.Group.__getitem__

    def counting(self, name):
        if isinstance(name, str) and name.endswith("position/value"):
            lookups.append(name)
        return getitem(self, name)

    monkeypatch.setattr(h5py.Group, "__getitem__", counting)
    ds = xr.open_dataset(adk_h5md, engine="h5md")
    var = ds.position.variable
    opened = len(lookups)
    for a in (0, 30, 60):
        np.testing.assert_array_equal(var[a:a + 30].values, adk_positions[a:a + 30])
    assert len(lookups) == opened + 1
    for dumps in (pickle.dumps, cloudpickle.dumps):
        back = pickle.loads(dumps(ds))
        np.testing.assert_array_equal(back.position[5:7].values, adk_positions[5:7])
    after_pickles = len(lookups)
    ds.close()  # the manager closes the file; the next read reopens it
    np.testing.assert_array_equal(var[90:95].values, adk_positions[90:95])
    np.testing.assert_array_equal(var[95:98].values, adk_positions[95:98])
    assert len(lookups) == after_pickles + 1
    ds.close()


def test_observables_only_in_subgroups_name_them(tmp_path):
    path = write_h5md(tmp_path / "sub.h5md",
                      {"g": {"position": dict(value=np.zeros((2, 3, 3)), step=np.arange(2))}},
                      observables={"thermo/energy": dict(value=np.arange(2.0), step=np.arange(2))})
    with pytest.raises(ValueError, match=r"no observables directly under /observables; open "
                       r"one of its groups: 'observables/thermo'"):
        xr.open_dataset(path, engine="h5md", group="observables")
    with xr.open_dataset(path, engine="h5md", group="observables/thermo") as ds:
        np.testing.assert_array_equal(ds.energy, [0.0, 1.0])


def test_an_observables_group_of_two_names_is_no_cycle(tmp_path):
    """A group of /observables hard-linked under a second name was refused at that name
    as "links back to a group that contains it (a cycle)" and left out: each group walked
    counted as one on the way. Now only a link back to a group above is a cycle."""
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "thermo/t": dict(value=np.arange(3.0), step=np.arange(3) * 7, unit="K")})
    with h5py.File(path, "r+") as f:
        f["observables/copy"] = f["observables/thermo"]
        f["observables/thermo/up"] = f["observables"]  # a cycle
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    assert sorted(str(w.message).split(" [")[1].split("]")[0] for w in record) == [
        "/observables/copy/up", "/observables/thermo/up"]
    with tree:
        assert set(tree["observables"].children) == {"copy", "thermo"}
        for node in ("copy", "thermo"):
            t = tree[f"observables/{node}"]
            np.testing.assert_array_equal(t.t.values, [0.0, 1.0, 2.0])
            np.testing.assert_array_equal(t.step.values, [0, 7, 14])
            assert t.t.attrs == {"units": "K"}


def test_groups_linked_over_and_over_end_the_walk(tmp_path, monkeypatch):
    """Since each name of a group hard-linked twice is served, groups linked under two
    names in a chain of n levels have 2**n paths: 30 levels did not end. The walks stop
    at a number of groups (/observables: with a warning), each group served once."""
    from h5mdx.format.h5md import _observables, _walk

    monkeypatch.setattr(_observables, "MAX_GROUPS", 60)
    monkeypatch.setattr(_walk, "MAX_NAMES", 60)
    path = write_h5md(tmp_path / "chain.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}})
    with h5py.File(path, "r+") as f:
        for root in ("observables", "parameters"):
            chain = [f.create_group(f"{root}/g{i}") for i in range(30)]
            for upper, lower in zip(chain[:-1], chain[1:], strict=True):
                upper["a"] = upper["b"] = lower
            chain[-1]["e"] = np.arange(3.0)
    with pytest.warns(H5MDConformanceWarning, match=r"more than 60 groups below "
                                                    r"/observables"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        nodes = [node.path for node in tree.subtree]
    assert 60 <= sum(p.startswith("/observables/") for p in nodes) <= 200
    assert "/parameters/g29" in nodes and sum(p.startswith("/parameters/") for p in nodes) <= 100


@pytest.mark.parametrize("root", ["observables", "connectivity", "parameters"])
def test_a_root_group_stored_as_a_dataset_is_said_left_out(tmp_path, root):
    """/observables (/connectivity, /parameters) stored as a dataset, not a group: the
    tree left it out without a word. Now one warning names it; strict refuses it."""
    path = write_h5md(tmp_path / "root.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}})
    with h5py.File(path, "r+") as f:
        f[root] = np.arange(3.0)
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    assert [str(w.message) for w in record] == [
        f"{path} [/{root}]: a dataset of shape (3,), not the group H5MD requires; left out"]
    with tree:
        assert set(tree.children) == {"particles"}
        np.testing.assert_array_equal(tree["particles/g"].position.values, np.zeros((2, 1, 3)))
    with pytest.raises(H5MDFormatError, match=rf"\[/{root}\]: a dataset"):
        xr.open_datatree(path, engine="h5md", strict=True)


def test_observables_and_connectivity_groups_keep_their_attributes(tmp_path):
    """The attributes of a group of observables or connectivity (a writer's description,
    a subgroup's ``particles_group``) were left out of its DataTree node, as those of the
    groups of /parameters are not. Now served, references as paths; ``h5md_group``
    stays the engine's."""
    path = write_h5md(tmp_path / "obs.h5md", {"g": {"position": dict(
        value=np.zeros((2, 1, 3)), step=np.arange(2))}}, observables={
        "e": dict(value=np.arange(2.0), step=np.arange(2)),
        "g/t": dict(value=np.arange(3.0), step=np.arange(3))})
    with h5py.File(path, "r+") as f:
        f["observables"].attrs["description"] = "thermo output"
        f["observables"].attrs["h5md_group"] = "mine"
        f["observables/g"].attrs["particles_group"] = f["particles/g"].ref
        f["connectivity/bonds"] = np.array([[0, 1]])
        f["connectivity"].attrs["kind"] = "bonds"
    with xr.open_datatree(path, engine="h5md") as tree:
        assert tree["observables"].attrs == {"h5md_group": "/observables",
                                             "description": "thermo output"}
        assert tree["observables/g"].attrs == {"h5md_group": "/observables/g",
                                               "particles_group": "/particles/g"}
        assert tree["connectivity"].attrs == {"h5md_group": "/connectivity", "kind": "bonds"}
        np.testing.assert_array_equal(tree["observables/g"].t.values, [0.0, 1.0, 2.0])
    # an open of one of them as a Dataset likewise (beside the file's attributes)
    for group, own in (("observables", {"description": "thermo output"}),
                       ("observables/g", {"particles_group": "/particles/g"}),
                       ("connectivity", {"kind": "bonds"})):
        with xr.open_dataset(path, engine="h5md", group=group) as ds:
            assert ds.attrs["h5md_group"] == f"/{group}"
            assert {k: ds.attrs[k] for k in own} == own
            assert ds.attrs["source"] == str(path)


@pytest.mark.parametrize(("group", "variable", "of"), [
    ("observables/temperature", "temperature", "observables"),
    ("observables/thermo/energy", "energy", "observables/thermo"),
    ("particles/trajectory/velocity", "velocity", "particles/trajectory"),
])
def test_a_group_that_is_an_element_says_where_it_is_served(mixed_file, group, variable,
                                                            of):
    """``group=`` naming an element (a variable of a group, not a group) was told only "no
    group"; now the error says which variable of which group it is, for open_dataset and
    open_datatree alike."""
    path, _ = mixed_file
    hint = (f"no group '{group}' (it is an H5MD element: the variable '{variable}' of "
            f"group '{of}')")
    for opener in (xr.open_dataset, xr.open_datatree):
        with pytest.raises(ValueError) as err:
            opener(path, engine="h5md", group=group)
        assert hint in str(err.value)


def test_connectivity_groups_are_served(tmp_path):
    """/connectivity (H5MD 1.1): time-independent and time-dependent tuples of particles,
    directly or in a group per particles group, as DataTree nodes and group= targets."""
    from h5mdx.cli import main
    from h5mdx.layout.rechunk import rechunk

    bonds = np.array([[0, 1], [1, 2]], dtype=np.int32)
    path = write_h5md(tmp_path / "conn.h5md",
                      {"g": {"position": dict(value=np.zeros((3, 3, 3)), step=np.arange(3))}})
    with h5py.File(path, "r+") as f:
        f["connectivity/bonds"] = bonds
        el = f.create_group("connectivity/g/contacts")
        el["value"] = np.stack([bonds, bonds[::-1], bonds])
        el["step"] = f["particles/g/position/step"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        np.testing.assert_array_equal(tree["connectivity"].bonds, bonds)
        contacts = tree["connectivity/g"].contacts
        assert contacts.dims[0] == "time" and contacts.shape == (3, 2, 2)
        np.testing.assert_array_equal(contacts[1], bonds[::-1])
    with xr.open_dataset(path, engine="h5md", group="connectivity/g") as ds:
        np.testing.assert_array_equal(ds.step, [0, 1, 2])
    assert main(["info", path]) == 0
    store = tmp_path / "conn.zarr"
    rechunk(path, store, verify=True)
    with xr.open_zarr(store, group="connectivity/g") as z:
        np.testing.assert_array_equal(z.contacts, np.stack([bonds, bonds[::-1], bonds]))


def test_a_process_that_unpickles_the_data_loads_the_filters_it_needs(tmp_path):
    """A dask worker unpickles the lazy array without scanning the file: reading a
    bitshuffle chunk (an hdf5plugin filter h5mdx does not decode itself) through h5py
    there loads hdf5plugin first (found by an audit: every task failed on workers)."""
    import subprocess
    import sys

    hdf5plugin = pytest.importorskip("hdf5plugin")
    value = np.random.default_rng(0).normal(size=(6, 5, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "bitshuffle.h5md", {"g": {"position": dict(
        value=value, step=np.arange(6), chunks=(2, 5, 3), **hdf5plugin.Bitshuffle())}})
    with xr.open_dataset(path, engine="h5md") as ds:
        blob = tmp_path / "ds.pickle"
        blob.write_bytes(pickle.dumps(ds))
    code = ("import pickle, sys; ds = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "assert 'hdf5plugin' not in sys.modules; "
            "print(repr(float(ds.position.values.astype('f8').sum())))")
    got = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert float(got.stdout) == pytest.approx(float(value.astype("f8").sum()), rel=1e-12)


def test_element_attributes_are_served(tmp_path):
    """An element's attributes beyond its unit reach the variable: species labels (which
    h5mdx's own convert writes), a charge's type, an enum's names as CF flags, and the
    particles group a connectivity element indexes (all dropped before; found by an
    audit). Storage bookkeeping (dimension scales) is not served."""
    path = write_h5md(tmp_path / "attrs.h5md", {"g": {
        "position": dict(value=np.zeros((2, 3, 3)), step=np.arange(2))}})
    with h5py.File(path, "r+") as f:
        g = f["particles/g"]
        kinds = h5py.enum_dtype({"C": 0, "O": 1}, basetype="i1")
        g.create_dataset("species", data=np.array([0, 1, 1], dtype="i1"), dtype=kinds)
        g.create_dataset("charge", data=np.array([0.1, -0.2, 0.1])).attrs["type"] = "effective"
        g["position/value"].attrs["labels"] = np.array([b"a", b"b"])
        bonds = f.create_group("connectivity/bonds")
        bonds.create_dataset("value", data=np.array([[[0, 1]], [[1, 2]]]))
        bonds["step"] = g["position/step"]
        bonds.attrs["particles_group"] = g.ref
    with xr.open_dataset(path, engine="h5md") as ds:
        species = ds["species"]
        assert species.attrs["flag_values"] == [0, 1]
        assert species.attrs["flag_meanings"] == "C O"
        assert ds["charge"].attrs["type"] == "effective"
        assert ds.position.attrs["labels"] == ["a", "b"]
    with xr.open_dataset(path, engine="h5md", group="connectivity") as ds:
        assert ds["bonds"].attrs["particles_group"] == "/particles/g"


def test_file_replaced_after_the_cache_closed_it_is_refused(tmp_path):
    """xarray's file cache closes a file when it holds too many, and reopens it by name at
    the next read: a file replaced meanwhile (a rerun renaming its output over the old
    one) is refused, where its frames were served under the first file's coordinates."""
    rng = np.random.default_rng(3)
    paths = [tmp_path / f"part{i}.h5md" for i in range(3)]
    for i, p in enumerate(paths):
        write_h5md(p, {"t": {"position": {"value": rng.random((6 + i, 4, 3)),
                                           "step": np.arange(6 + i)}}})
    with xr.set_options(file_cache_maxsize=1):
        dss = [xr.open_dataset(p, engine="h5md") for p in paths]
        try:
            first = dss[0].position[:2].values  # a part: xarray keeps no copy of it
            for ds in dss[1:]:  # the cache closes part0
                ds.position[:2].load()
            os.replace(paths[2], paths[0])
            with pytest.raises(H5MDReadError, match=r"part0\.h5md( \[\S+\])?: was replaced or "
                               "rewritten since it was opened"):
                dss[0].position.load()
            np.testing.assert_array_equal(dss[1].position.values.shape, (7, 4, 3))
        finally:
            for ds in dss:
                ds.close()
    assert first.shape == (2, 4, 3)


def _rewrite_in_place(src, dst, same_time=False):
    """Copy ``src`` over ``dst`` through the same inode (cp, a rerun writing the name);
    ``same_time``: its modification time set back (cp -p, rsync -t)."""
    then = os.stat(dst)
    shutil.copyfile(src, dst)
    st = os.stat(dst)
    os.utime(dst, ns=(st.st_atime_ns, then.st_mtime_ns if same_time
                      else st.st_mtime_ns + 1_000_000))  # a coarse clock


@pytest.mark.parametrize("same_time", [False, True])
@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_file_rewritten_in_place_while_open_is_refused(tmp_path, monkeypatch, direct,
                                                         same_time):
    """A file rewritten through the same inode while a Dataset of it is open: its reads
    served the new bytes under the old coordinates (direct reads), or garbage through the
    old chunk index; an open of it in the meantime shared HDF5's stale open and described
    the old frames. Both are refused now; so are those of a file of
    the same size whose modification time was set back (``cp -p``), by its change time."""
    monkeypatch.setenv("H5MDX_DIRECT_READ", direct)
    rng = np.random.default_rng(5)
    a, b, path = tmp_path / "a.h5md", tmp_path / "b.h5md", tmp_path / "t.h5md"
    write_h5md(a, {"t": {"position": {"value": rng.random((10, 4, 3)), "step": np.arange(10),
                                      "chunks": (2, 4, 3)}}})
    write_h5md(b, {"t": {"position": {"value": rng.random((10 if same_time else 12, 4, 3)),
                                      "step": np.arange(10 if same_time else 12),
                                      "chunks": (2 if same_time else 3, 4, 3)}}})
    assert a.stat().st_size == b.stat().st_size or not same_time
    shutil.copyfile(a, path)
    old = xr.open_dataset(path, engine="h5md")
    try:
        assert old.position[:2].values.shape == (2, 4, 3)
        time.sleep(0.01)  # a change time after the open's
        _rewrite_in_place(b, path, same_time)
        with pytest.raises(H5MDReadError, match=r"t\.h5md \[\S+position/value\]: was "
                           "rewritten since it was opened"):
            old.position.load()
        with pytest.raises(H5MDReadError, match="was rewritten while another Dataset of it "
                           r"is open in this process.*Close the other Dataset"):
            xr.open_dataset(path, engine="h5md")
    finally:
        old.close()
    with xr.open_dataset(path, engine="h5md") as new:  # the other one closed: read afresh
        with xr.open_dataset(b, engine="h5md") as want:
            np.testing.assert_array_equal(new.position.values, want.position.values)


@pytest.mark.parametrize("change", ["chmod", "same mode", "hard link"])
@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_file_whose_attributes_change_while_open_still_reads(tmp_path, monkeypatch, direct,
                                                              change):
    """chmod, chown or a hard link move a file's change time alone: an open Dataset
    refused every read of it as "rewritten since it was opened", and any new open of it
    as "rewritten while another Dataset of it is open", though its bytes were
    the same. Its bytes sampled at the open tell it from a rewrite (cp -p, refused by
    the test above): it reads as before."""
    monkeypatch.setenv("H5MDX_DIRECT_READ", direct)
    values = np.random.default_rng(6).random((10, 4, 3))
    path = tmp_path / "t.h5md"
    write_h5md(path, {"t": {"position": {"value": values, "step": np.arange(10),
                                         "chunks": (2, 4, 3)}}})
    with xr.open_dataset(path, engine="h5md") as old:
        np.testing.assert_array_equal(old.position[:2].values, values[:2])
        before = path.stat()
        time.sleep(0.01)  # a change time after the open's
        if change == "hard link":
            os.link(path, tmp_path / "backup.h5md")
        else:
            path.chmod(0o600 if change == "chmod" else before.st_mode & 0o7777)
        if path.stat().st_ctime_ns == before.st_ctime_ns:
            pytest.skip("the file system's change time is coarser than 10 ms")
        np.testing.assert_array_equal(old.position.values, values)
        with xr.open_dataset(path, engine="h5md") as again:
            np.testing.assert_array_equal(again.position.values, values)
        np.testing.assert_array_equal(old.position[3:].values, values[3:])


def test_a_file_replaced_by_one_of_the_same_size_and_time_reads_as_opened(tmp_path):
    """A file replaced (a new inode) by one of the same size and modification time
    (cp -p, rsync -t): once another Dataset of the new file had planned its direct reads,
    the first Dataset read the new file's bytes under its own coordinates."""
    rng = np.random.default_rng(9)
    a, b, path = tmp_path / "a.h5md", tmp_path / "b.h5md", tmp_path / "t.h5md"
    for p in (a, b):
        write_h5md(p, {"t": {"position": {"value": rng.random((10, 4, 3)),
                                          "step": np.arange(10), "chunks": (2, 4, 3)}}})
    assert a.stat().st_size == b.stat().st_size
    shutil.copyfile(a, path)
    want_a = h5py.File(a, "r")["particles/t/position/value"][()]
    want_b = h5py.File(b, "r")["particles/t/position/value"][()]
    with xr.open_dataset(path, engine="h5md") as first:
        np.testing.assert_array_equal(first.position[:2].values, want_a[:2])
        st = path.stat()
        os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(b, path)
        with xr.open_dataset(path, engine="h5md") as second:
            np.testing.assert_array_equal(second.position.values, want_b)
            np.testing.assert_array_equal(first.position.values, want_a)


def test_utf8_parameters_and_a_clash_of_names_leave_the_rest(tmp_path):
    """Fixed-size strings are UTF-8 (GROMACS writes them so), not ASCII; a parameter named
    like another's axis is left out with a warning (both raised bare from numpy and xarray,
    and the whole tree failed)."""
    path = _nested_parameters(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        f["parameters/labels"] = np.array(["Å".encode(), b"nm"])
        f["parameters/thermostat/x_dim_0"] = 5  # thermostat/x has an axis of that name
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    [clash] = [str(w.message) for w in record]
    assert clash.startswith(f"{path} [/parameters/thermostat/") and "left out" in clash
    with tree:
        assert tree["parameters"].labels.values.tolist() == ["Å", "nm"]
        thermo = tree["parameters/thermostat"]
        assert float(thermo.tau) == 0.5 and len(thermo.data_vars) == 2
    with warnings.catch_warnings():  # the clash is in a subgroup this open does not serve
        warnings.simplefilter("error")
        ds = xr.open_dataset(path, engine="h5md", group="parameters")
    with ds:
        assert ds.labels.values.tolist() == ["Å", "nm"]
    with pytest.warns(H5MDConformanceWarning, match="thermostat/x_dim_0"):
        xr.open_dataset(path, engine="h5md", group="parameters/thermostat").close()


def test_a_file_of_one_group_of_observables_opens_it(tmp_path):
    """No particles and no observables directly under /observables: a plain open gave an
    empty Dataset; it opens the only group of observables, and asks which of several."""
    path = str(tmp_path / "obs.h5md")
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        el = f.create_group("observables/thermo/energy")
        el["value"], el["step"] = np.arange(3.0), np.arange(3)
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.energy, np.arange(3.0))
    with h5py.File(path, "r+") as f:
        el = f.create_group("observables/other/pressure")
        el["value"], el["step"] = np.ones(3), np.arange(3)
    with pytest.raises(ValueError, match="no observables directly under /observables; open "
                       "one of its groups: 'observables/other', 'observables/thermo'"):
        xr.open_dataset(path, engine="h5md")


def test_a_parameter_unit_given_as_a_one_element_array_is_read(tmp_path):
    """``unit`` as a one-element string array, as accepted on elements: the parameter is
    converted and labelled (it was left unconverted and unlabelled, silently)."""
    path = tmp_path / "params.h5md"
    write_h5md(path, {"t": {"position": {"value": np.zeros((2, 3, 3)), "step": np.arange(2)}}},
               parameters={"cutoff": 1.2})
    with h5py.File(path, "r+") as f:
        f["parameters/cutoff"].attrs["unit"] = np.array([b"nm"])
    with xr.open_dataset(path, engine="h5md", group="parameters", convert_units=True) as ds:
        assert float(ds.cutoff) == pytest.approx(12.0)
        assert ds.cutoff.attrs["units"] == "Angstrom"


def test_wrong_keywords_are_the_callers_error_not_the_files(adk_h5md, tmp_path, monkeypatch):
    """chunk_mib="big" or topology=123 were reported as a file that cannot be assembled;
    chunk_mib=0 was taken; convert_units="no" converted. They are checked before the file
    is read; a topology's ``~`` is expanded as the file's is."""
    import shutil

    cases = [({"chunk_mib": "big"}, TypeError, "chunk_mib= takes a number of MiB"),
             ({"chunk_mib": 0}, ValueError, "chunk_mib= must be a positive number"),
             ({"chunk_mib": -1}, ValueError, "chunk_mib= must be a positive number"),
             ({"topology": 123}, TypeError, "topology= takes a topology file's path"),
             ({"convert_units": "no"}, TypeError, "convert_units= takes True or False"),
             ({"select": [1, 2]}, TypeError, "select= at open takes an MDAnalysis")]
    # a string was taken for True: allow_external="no" followed external links, swmr="no"
    # opened in SWMR mode, strict="false" refused the file
    flags = [({"allow_external": "no"}, TypeError, "allow_external= takes True or False"),
             ({"swmr": "no"}, TypeError, "swmr= takes True or False"),
             ({"strict": "false"}, TypeError, "strict= takes True or False")]
    for kwargs, err, message in cases + flags:
        with pytest.raises(err, match=message):
            xr.open_dataset(adk_h5md, engine="h5md", **kwargs)
    for kwargs, err, message in flags:
        with pytest.raises(err, match=message):
            xr.open_datatree(adk_h5md, engine="h5md", **kwargs)
    with pytest.raises(TypeError, match="chunk_mib= takes"):
        xr.open_datatree(adk_h5md, engine="h5md", chunk_mib="big")
    pytest.importorskip("MDAnalysis")
    from MDAnalysisTests.datafiles import PSF

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(PSF, tmp_path / "adk.psf")
    with xr.open_dataset(adk_h5md, engine="h5md", topology="~/adk.psf") as ds:
        assert "name" in ds.coords


def test_opening_does_not_walk_the_chunk_index_for_object_ids(adk_h5md, monkeypatch):
    """H5Oget_info sizes an object's storage, which walks a chunked dataset's whole index
    (68 ms for 100,000 chunks): an open called it and get_storage_size four times. Objects
    are told apart by H5Gget_objinfo now."""
    import h5py

    calls = []
    real = h5py.h5o.get_info
    monkeypatch.setattr(h5py.h5o, "get_info", lambda *a, **k: calls.append(a) or real(*a, **k))
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        assert ds.position.shape[0] == 98
    with xr.open_datatree(adk_h5md, engine="h5md"):
        pass
    assert calls == []


def test_a_dropped_element_warns_of_nothing(tmp_path):
    """``drop_variables=["velocity"]`` of a file whose velocity is broken (a 'step' of
    other length than its 'value') still warned of it, though it was not read;
    its problems are left out with it. strict=True refuses the file as before (the file
    departs from H5MD whatever is read of it)."""
    rng = np.random.default_rng(4)
    path = write_h5md(tmp_path / "v.h5md", {"g": {
        "position": dict(value=rng.random((6, 4, 3)), step=np.arange(6)),
        "velocity": dict(value=rng.random((6, 4, 3)), step=np.arange(6))}})
    with h5py.File(path, "r+") as f:
        del f["particles/g/velocity/step"]
        f["particles/g/velocity/step"] = np.array([3, 2, 1, 0, 5, 4])
    with pytest.warns(H5MDConformanceWarning, match=r"velocity/step\]"):
        xr.open_dataset(path, engine="h5md").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md", drop_variables=["velocity"]) as ds:
            assert "velocity" not in ds and ds.position.shape == (6, 4, 3)
    with pytest.raises(H5MDFormatError, match=r"velocity/step"):
        xr.open_dataset(path, engine="h5md", drop_variables=["velocity"], strict=True)


def test_a_time_that_goes_back_is_said_once(tmp_path):
    """Steps that increase with a time that goes back (0, 0.5, 0.0) were served in
    silence: the Dataset's time index is then not monotonic, and ``.sel(time=slice(...))``
    fails far from the cause. One warning names the frame; the frames stay in
    the order stored; strict=True does not refuse it (H5MD asks only the steps to
    increase); steps and times that both go back are said once, of the steps."""
    pos = np.zeros((3, 2, 3))
    path = write_h5md(tmp_path / "t.h5md", {"g": {"position": dict(
        value=pos, step=np.array([0, 10, 20]), time=np.array([0.0, 0.5, 0.0]))}})
    with pytest.warns(H5MDConformanceWarning) as said, \
            xr.open_dataset(path, engine="h5md") as ds:
        assert ds.time.values.tolist() == [0.0, 0.5, 0.0]
    lines = [str(w.message) for w in said if "/time]" in str(w.message)]
    assert lines == [f"{path} [/particles/g/position/time]: 'time' goes back: frame 2 has "
                     "time 0 after 0.5 (1 such frame(s)); the time index is not monotonic; "
                     "frames kept in the order stored"]
    with pytest.warns(H5MDConformanceWarning, match="'time' goes back"):
        xr.open_dataset(path, engine="h5md", strict=True).close()
    both = write_h5md(tmp_path / "b.h5md", {"g": {"position": dict(
        value=pos, step=np.array([0, 10, 0]), time=np.array([0.0, 0.5, 0.0]))}})
    with pytest.warns(H5MDConformanceWarning) as said:
        xr.open_dataset(both, engine="h5md").close()
    text = [str(w.message) for w in said]
    assert any("'step' does not increase" in t for t in text)
    assert not any("'time' goes back" in t for t in text)


def test_a_group_whose_elements_were_all_left_out_says_why(tmp_path):
    """An observables group holding only an element of compound values (left out: h5mdx
    reads numeric and string elements) was opened as "no group 'observables'", as if the
    file had none; the error now names what was left out and why."""
    path = write_h5md(tmp_path / "c.h5md", {"g": {"position": dict(
        value=np.zeros((3, 2, 3)), step=np.arange(3))}})
    with h5py.File(path, "r+") as f:
        g = f.create_group("observables/thermo")
        g.create_dataset("value", data=np.zeros(3, np.dtype([("e", "f8"), ("t", "f8")])))
        g.create_dataset("step", data=np.arange(3))
    with pytest.raises(ValueError, match=r"has no group 'observables' that h5mdx reads "
                       r"\(/observables/thermo/value: unsupported dtype .*left out\); "
                       r"available: 'particles/g'"):
        xr.open_dataset(path, engine="h5md", group="observables")
    with pytest.raises(ValueError, match=r"has no group 'nope'; available"):
        xr.open_dataset(path, engine="h5md", group="nope")


def test_a_file_of_parameters_alone_names_its_groups(tmp_path):
    """A plain open of a file with neither particles nor observables said "the file has
    no particles group" alone, where it has /parameters (or /connectivity) to open; it
    now lists them, and the group= that opens one."""
    path = tmp_path / "params.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        f["parameters/run/dt"] = 0.002
    with pytest.raises(H5MDFormatError, match=r"params.h5md \[/particles\]: the file has no "
                       r"particles group and no observables; open one of its groups with "
                       r"group=...: 'parameters/run'$"):
        xr.open_dataset(path, engine="h5md")
    with xr.open_dataset(path, engine="h5md", group="parameters/run") as ds:
        assert float(ds.dt) == 0.002
