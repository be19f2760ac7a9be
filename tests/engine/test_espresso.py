"""What ESPResSo writes (src/core/io/writer/h5md_core.cpp): particles stored in another
order in some frames (its cell order; a time-dependent ``id`` says which particle each slot
holds), and elements in a group inside the particles group (the Lees-Edwards shear)."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx  # noqa: F401  (registers ds.md)
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, ParticleOrderWarning
from h5mdx.testing import write_h5md

# the order ESPResSo might write five particles in, frame by frame
ORDERS = np.array([[2, 0, 1, 3, 4], [0, 3, 1, 2, 4], [1, 0, 4, 3, 2], [4, 3, 2, 1, 0]])


def _write(path, orders, *, fillvalue=None):
    rng = np.random.default_rng(7)
    by_id = rng.random((5, 3)) * 10
    moved = by_id[None] + 0.01 * np.arange(len(orders))[:, None, None]  # every frame, by id
    slots = np.take_along_axis(moved, np.asarray(orders)[..., None], axis=1)
    sampling = {"step": np.arange(len(orders)) * 10, "time": np.arange(len(orders)) * 0.1}
    id_kwargs = {"value": np.asarray(orders, dtype=np.int32), **sampling}
    if fillvalue is not None:
        id_kwargs["fillvalue"] = fillvalue
    write_h5md(path, {"atoms": {"position": {"value": slots, **sampling}, "id": id_kwargs}})
    return moved


def test_varying_order_warns_once_and_marks_the_per_particle_series(tmp_path):
    path = tmp_path / "espresso.h5"
    _write(path, ORDERS)
    with pytest.warns(ParticleOrderWarning, match=r"espresso\.h5 \[/particles/atoms/id\]: "
                      r"frames 0 and 1 hold other particles") as record:
        ds = xr.open_dataset(path, engine="h5md")
    assert sum(isinstance(w.message, ParticleOrderWarning) for w in record) == 1
    with ds:
        assert "particles/atoms/id, frames 0 and 1" in ds.position.attrs["particle_order"]
        assert "particle_order" not in ds.id.attrs
        np.testing.assert_array_equal(ds.id.values, ORDERS)  # served as stored


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
def test_rmsd_refuses_positions_in_varying_order_and_takes_them_in_one(tmp_path, chunks):
    """Slot by slot, the RMSD compares different particles (4.6 A here where the truth is
    about 0): refused, with a recipe that gives the RMSD of the particles by id."""
    path = tmp_path / "espresso.h5"
    moved = _write(path, ORDERS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md", chunks=chunks)
    with ds, pytest.raises(ValueError, match="particles in one order by id"):
        ds.md.rmsd()
    with ds:  # what the error says to do
        ordered = ds.md.by_id()
        assert "particle_order" not in ordered.position.attrs
        assert (chunks is None) == (ordered.position.chunks is None)  # as lazy as it was
        np.testing.assert_allclose(ordered.position.values, moved)
        np.testing.assert_array_equal(ordered.id.values, np.arange(5))
        # rigid shifts only: every RMSD after superposition is 0
        np.testing.assert_allclose(ordered.md.rmsd().values, 0.0, atol=1e-6)


def test_by_id_gives_a_slot_to_every_particle_of_the_file(tmp_path):
    """Frames of other particles (one leaves, another comes: grand-canonical runs, an id
    equal to its fill value where absent): a slot per id of the whole file, NaN in the
    frames without that particle."""
    orders = ORDERS.copy()
    orders[2, 1] = 7  # frame 2 holds particle 7 instead of 0
    path = tmp_path / "other.h5"
    moved = _write(path, np.minimum(orders, 4))
    with h5py.File(path, "r+") as f:
        f["particles/atoms/id/value"][2, 1] = 7
        f["particles/atoms/position/value"][2, 1] = [70.0, 71.0, 72.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        ordered = ds.md.by_id()
        np.testing.assert_array_equal(ordered.id.values, [0, 1, 2, 3, 4, 7])
        pos = ordered.position.values
        assert pos.shape == (4, 6, 3)
        np.testing.assert_allclose(pos[[0, 1, 3], :5], moved[[0, 1, 3]])
        assert np.isnan(pos[2, 0]).all() and np.isnan(pos[[0, 1, 3], 5]).all()
        np.testing.assert_allclose(pos[2, 5], [70.0, 71.0, 72.0])
        np.testing.assert_allclose(pos[2, 1:5], moved[2, 1:5])
    with ds, pytest.raises(ValueError, match="time-dependent 'id'"):
        ds.drop_vars("id").md.by_id()
    with h5py.File(path, "r+") as f:
        f["particles/atoms/id/value"][1, 0] = 1  # frame 1 holds particle 1 twice
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        with xr.open_dataset(path, engine="h5md") as ds, \
                pytest.raises(H5MDFormatError, match=r"other\.h5 \[/particles/atoms/id\]: "
                              r"frame 1 holds id 1 in slots 0, 2: one particle in two"):
            ds.md.by_id()


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
def test_by_id_orders_an_element_sampled_on_its_own_time_axis(tmp_path, chunks):
    """A velocity written every other frame (its own ``time_velocity``) follows the ids of
    the frames of its steps; it was left out as 'per slot, not per particle'. One sampled
    at a step without an id frame is left out, saying so."""
    path = tmp_path / "every_other.h5"
    moved = _write(path, ORDERS)
    slots = np.take_along_axis(moved, ORDERS[..., None], axis=1)
    with h5py.File(path, "r+") as f:
        g = f["particles/atoms"].create_group("velocity")
        g["value"], g["step"], g["time"] = -slots[::2], [0, 20], [0.0, 0.2]
        g = f["particles/atoms"].create_group("force")
        g["value"], g["step"], g["time"] = slots[:2], [0, 5], [0.0, 0.05]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md", chunks=chunks)
    with ds, pytest.warns(UserWarning, match=r"\['force'\] are sampled at steps of which "
                          "'id' has no frame"):
        ordered = ds.md.by_id()
    assert ordered.velocity.dims == ("time_velocity", "atom", "spatial")
    assert (chunks is None) == (ordered.velocity.chunks is None)
    np.testing.assert_allclose(ordered.velocity.values, -moved[::2])
    np.testing.assert_allclose(ordered.position.values, moved)
    assert "force" not in ordered


def test_by_id_with_an_id_sampled_more_often_than_the_positions(tmp_path):
    """An id written every step and positions every other one: id on its own ``time_id``
    was refused ('by_id needs a time-dependent id'); the positions now follow the ids of
    their steps, by hand: sorted slot by slot with numpy."""
    path = tmp_path / "id_every_step.h5"
    moved = _write(path, ORDERS)
    with h5py.File(path, "r+") as f:
        pos = f["particles/atoms/position"]
        slots = pos["value"][::2]
        for name in ("value", "step", "time"):
            del pos[name]
        pos["value"], pos["step"], pos["time"] = slots, [0, 20], [0.0, 0.2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.id.dims == ("time_id", "atom")
        ordered = ds.md.by_id()
    by_hand = np.take_along_axis(slots, np.argsort(ORDERS[::2], axis=1)[..., None], axis=1)
    np.testing.assert_allclose(ordered.position.values, by_hand)
    np.testing.assert_allclose(ordered.position.values, moved[::2])
    assert ordered.id.dims == ("atom",) and "time_id" not in ordered.dims


def test_by_id_matches_a_step_stored_twice_frame_by_frame(tmp_path):
    """A restarted run appended: id every 10 steps (0, 10, 20 | 10, 20, 30), positions
    every 20 (0, 20 | 20, 30), each frame in its own order. The first step 20 of the
    positions took the order of the second run's id frame (a step-to-frame lookup where
    the last frame won): its particles came out swapped. Now the k-th frame of a step
    takes the k-th id frame of that step."""
    orders = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]])
    by_id = np.random.default_rng(1).random((6, 3, 3))  # frame, particle by id, xyz
    slots = np.take_along_axis(by_id, orders[..., None], axis=1)
    steps = np.array([0, 10, 20, 10, 20, 30])
    taken = [0, 2, 4, 5]  # the id frames at the positions' steps
    path = tmp_path / "restarted.h5"
    write_h5md(path, {"atoms": {
        "id": {"value": orders.astype(np.int32), "step": steps, "time": steps * 0.1},
        "position": {"value": slots[taken], "step": steps[taken],
                     "time": steps[taken] * 0.1}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        warnings.simplefilter("ignore", H5MDConformanceWarning)  # the steps go back
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.id.dims == ("time_id", "atom")
        np.testing.assert_array_equal(ds.step.values, [0, 20, 20, 30])
        ordered = ds.md.by_id()
    np.testing.assert_allclose(ordered.position.values, by_id[taken])


def test_slots_grown_without_a_fill_value_are_absent_by_id(tmp_path):
    """ESPResSo 5 (its HighFive writer) sets no fill value and grows the particle axis as
    particles come: the slots of earlier frames never written read as id 0 at the origin.
    by_id takes the first 0 of a frame for particle 0 and the others as absent, with one
    warning; it raised a bare ValueError."""
    path = tmp_path / "grown.h5"
    orders = ORDERS.copy()
    orders[0] = [2, 0, 1, 0, 0]  # frame 0 held 3 particles; slots 3, 4 came later
    orders[1] = [1, 2, 0, 0, 0]
    moved = _write(path, orders)
    with h5py.File(path, "r+") as f:
        f["particles/atoms/position/value"][:2, 3:] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        with pytest.warns(H5MDConformanceWarning, match=r"grown\.h5 \[/particles/atoms/id\]: "
                          r"id 0 is in 3 slots of frame 0 \(2 such frame\(s\)\)") as record:
            ordered = ds.md.by_id()
        assert len(record) == 1
        pos = ordered.position.values
    np.testing.assert_array_equal(ordered.id.values, np.arange(5))
    np.testing.assert_allclose(pos[:2, :3], moved[:2, :3])  # particles 0, 1, 2 by id
    assert np.isnan(pos[:2, 3:]).all()  # not yet there
    np.testing.assert_allclose(pos[2:], moved[2:])


def test_absent_particles_are_no_change_of_order_but_empty_slots(tmp_path):
    """A slot holding the fill value (an absent particle, grand-canonical runs) is no
    change of order, but a slot without a particle: its position is a placeholder that
    the RMSD would count (ESPResSo++ pads its particle axis so: audit37 found an RMSD of
    1.25 where the particles' is 4.68, in silence). One warning, the series marked."""
    orders = np.tile(np.arange(5), (4, 1))
    orders[1, 3] = orders[2, 0] = -1
    path = tmp_path / "gcmc.h5"
    moved = _write(path, orders, fillvalue=-1)  # an absent particle's position: a placeholder
    with pytest.warns(ParticleOrderWarning, match=r"gcmc\.h5 \[/particles/atoms/id\]: frame 1 "
                      r"has 1 slot\(s\) that hold no particle \(id -1, its fill value") as said:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(said) == 1
    with ds:
        assert "frame 1: 1 slots of id -1" in ds.position.attrs["particle_order"]
        with pytest.raises(ValueError, match="or slots without one"):
            ds.md.rmsd()
        # by id, the placeholders are NaN (ds.position serves them as stored)
        pos = ds.md.by_id().position.values
    assert np.isnan(pos[1, 3]).all() and np.isnan(pos[2, 0]).all()
    np.testing.assert_allclose(pos[0], moved[0])


def test_fixed_order_neither_warns_nor_marks(tmp_path):
    path = tmp_path / "fixed.h5"
    _write(path, np.tile(np.arange(5), (4, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md") as ds:
            assert "particle_order" not in ds.position.attrs
            np.testing.assert_allclose(ds.md.rmsd().values, 0.0, atol=1e-6)


def test_a_group_of_elements_inside_a_particles_group_is_read(tmp_path, capsys):
    """ESPResSo writes the Lees-Edwards shear as ``particles/atoms/lees_edwards/{offset,
    direction,normal}``, elements of a group H5MD does not define there: served as
    ``lees_edwards_offset`` ... (not per particle), noted as a minor departure (no
    warning; an error with strict=True), and so named by ``h5mdx info``. They were left
    out with a warning."""
    path = tmp_path / "le.h5"
    _write(path, np.tile(np.arange(5), (4, 1)))
    offset = np.arange(4, dtype=np.float64)[:, None] * 0.5
    with h5py.File(path, "r+") as f:
        le = f.create_group("particles/atoms/lees_edwards")
        for name, value in (("offset", offset), ("direction", np.zeros((4, 1), np.int32))):
            el = le.create_group(name)
            el.create_dataset("value", data=value)
            el["step"] = f["particles/atoms/position/step"]
            el["time"] = f["particles/atoms/position/time"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md") as ds:
            assert ds.lees_edwards_offset.dims == ("time", "lees_edwards_offset_dim_1")
            np.testing.assert_array_equal(ds.lees_edwards_offset.values, offset)
            assert ds.lees_edwards_direction.dtype.kind == "i"
            assert ds.position.sizes["atom"] == 5
    with pytest.raises(H5MDFormatError, match="a group of elements inside a particles group"):
        xr.open_dataset(path, engine="h5md", strict=True)
    from h5mdx.cli import main

    assert main(["info", str(path)]) == 0  # named as served, not as bare "offset"
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[0] == "lees_edwards_offset" for line in lines), lines
    assert not any(line.split()[0] == "offset" for line in lines if line.strip())


def test_by_id_leaves_out_what_is_per_slot(tmp_path):
    """A fixed ``species`` is per slot: it cannot follow the particles, so by_id leaves it
    out with one warning (it kept it in stored order beside positions by id)."""
    path = tmp_path / "species.h5"
    _write(path, ORDERS)
    with h5py.File(path, "r+") as f:
        f["particles/atoms/species"] = np.arange(5, dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        ds = xr.open_dataset(path, engine="h5md")
    with ds, pytest.warns(UserWarning, match=r"by_id: \['species'\] are per slot"):
        ordered = ds.md.by_id()
    assert "species" not in ordered and "position" in ordered


def test_absent_particles_survive_a_copy_to_zarr_and_back(tmp_path):
    """The id's fill value (H5MD's mark of an absent particle) was lost in a copy to Zarr
    (every encoding cleared): by_id on the store raised "holds id -1 in slots 1, 2"; with
    one absent slot per frame it would have taken -1 for a particle (helper audit64). It
    is kept as CF's _FillValue (xarray reads it back as NaN), and to_h5md from the store
    writes the ids as integers again, the fill value in its place."""
    orders = np.tile(np.arange(5), (4, 1))
    orders[1, 3] = orders[2, 0] = orders[2, 4] = -1
    path = tmp_path / "gcmc.h5"
    _write(path, orders, fillvalue=-1)
    store, back = tmp_path / "gcmc.zarr", tmp_path / "back.h5"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParticleOrderWarning)
        with xr.open_dataset(path, engine="h5md") as ds:
            want = ds.md.by_id()
            ds.md.to_zarr(store)
        with xr.open_dataset(store, engine="zarr") as z:
            assert np.isnan(z.id.values[2, [0, 4]]).all()  # CF: the fill value's slots
            got = z.md.by_id()
            with pytest.warns(UserWarning, match="position written without a unit"):
                z.md.to_h5md(back)  # the test file has none
        with h5py.File(back, "r") as f:
            ids = f["particles/atoms/id/value"]
            assert ids.dtype.kind == "i" and ids.fillvalue == -1
            np.testing.assert_array_equal(ids[()], orders)
        with xr.open_dataset(back, engine="h5md") as again:
            np.testing.assert_allclose(again.md.by_id().position.values,
                                       want.position.values)
    np.testing.assert_array_equal(got.id.values, want.id.values)
    assert got.id.dtype.kind == "i"
    np.testing.assert_allclose(got.position.values, want.position.values)
    assert np.isnan(got.position.values[2, [0, 4]]).all()
