"""Files found in the wild: tolerant by default, strict on request (issue #12).

Every kind of departure from H5MD seen in files written by other programs gets a file
built here with h5py (from a conformant base file) and two tests: the tolerant default
opens it with one :class:`~h5mdx.errors.H5MDConformanceWarning` naming the file, the
H5MD path and what was assumed, with the right values; ``strict=True`` refuses it with
an :class:`~h5mdx.errors.H5MDFormatError` naming the file and the path. Files written
by MDAnalysis, pyh5md and znh5md, and the H5MD files that ship with MDAnalysisTests,
open with the positions MDAnalysis' own H5MD reader gives.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError
from h5mdx.format.h5md import scan
from hdf5_versions import WithoutChunkIter

N_FRAMES, N_ATOMS = 3, 4
POS = np.arange(N_FRAMES * N_ATOMS * 3, dtype=np.float64).reshape(N_FRAMES, N_ATOMS, 3) / 10
STEPS = np.array([0, 10, 20])
TIMES = np.array([0.0, 0.5, 1.0])
EDGES = np.array([[5.0, 6.0, 7.0]] * N_FRAMES)
ENERGY = np.array([1.0, 2.0, 3.0])
G = "/particles/g"


def _base(path: str) -> str:
    """A small conformant H5MD 1.1 file: position, box edges and energy share step/time."""
    with h5py.File(path, "w") as f:
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h5md.create_group("author").attrs["name"] = "tests"
        creator = h5md.create_group("creator")
        creator.attrs["name"] = "h5py"
        creator.attrs["version"] = "1"
        pos = f.create_group(f"{G}/position")
        pos.create_dataset("value", data=POS).attrs["unit"] = "nm"
        pos["step"] = STEPS
        pos.create_dataset("time", data=TIMES).attrs["unit"] = "ps"
        box = f[G].create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = np.array([b"periodic"] * 3)
        edges = box.create_group("edges")
        edges.create_dataset("value", data=EDGES).attrs["unit"] = "nm"
        edges["step"], edges["time"] = pos["step"], pos["time"]  # hard links
        energy = f.create_group("observables/energy")
        energy.create_dataset("value", data=ENERGY).attrs["unit"] = "kJ mol-1"
        energy["step"], energy["time"] = pos["step"], pos["time"]
    return path


def _replace(grp: h5py.Group, name: str, data: Any) -> None:
    del grp[name]
    grp[name] = data


@dataclass
class Trouble:
    """One kind of trouble: how to make it, where it is, what h5mdx assumes."""

    mutate: Callable[[h5py.File], None]
    path: str
    assumed: str
    check: Callable[[xr.Dataset], None] = lambda ds: None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: the trouble is outside the particles group: open the whole file as a DataTree
    tree: bool = False


def _no_step(f):
    del f[f"{G}/position/step"], f[f"{G}/position/time"]


def _check_numbered(ds):
    np.testing.assert_array_equal(ds.step, [0, 1, 2])
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.box_edges, EDGES)  # keeps its own steps
    np.testing.assert_array_equal(ds.step_box_edges, STEPS)


def _short_step(f):
    _replace(f[f"{G}/position"], "step", np.array([0]))
    del f[f"{G}/position/time"]


def _check_short_step(ds):
    """The frame with a step, at its step; the two without one left out (all three were
    served numbered 0..2 before, with no step or time of the file)."""
    np.testing.assert_array_equal(ds.step, [0])
    np.testing.assert_array_equal(ds.position, POS[:1])
    np.testing.assert_array_equal(ds.step_box_edges, STEPS)  # the box keeps its own


def _value_ahead(f):
    """A writer that grew 'value' two frames ahead of 'step' and 'time' (or stopped
    between writing them): the whole element was served numbered 0..n-1, its steps and
    times lost."""
    pos = f[f"{G}/position"]
    attrs = dict(pos["value"].attrs)
    _replace(pos, "value", np.concatenate([POS, np.zeros((2, N_ATOMS, 3))]))
    pos["value"].attrs.update(attrs)


def _value_ahead_of_step_only(f):
    """As :func:`_value_ahead`, with a 'time' of as many entries as 'value': one warning,
    of the step, not a second of the time."""
    _value_ahead(f)
    pos = f[f"{G}/position"]
    _replace(pos, "time", np.concatenate([TIMES, [1.5, 2.0]]))
    pos["time"].attrs["unit"] = "ps"


def _stopped_mid_frame(f):
    """ESPResSo and GROMACS extend 'value' before 'step' and 'time': a writer stopped in
    between leaves one frame more in 'value' (never written: the fill value)."""
    value = f[f"{G}/position/value"]
    attrs = dict(value.attrs)
    _replace(f[f"{G}/position"], "value", np.concatenate([POS, np.zeros((1, N_ATOMS, 3))]))
    f[f"{G}/position/value"].attrs.update(attrs)


def _check_stopped_mid_frame(ds):
    np.testing.assert_array_equal(ds.step, STEPS)  # the steps the file holds, not 0..n-1
    np.testing.assert_array_equal(ds.time, TIMES)
    np.testing.assert_array_equal(ds.position, POS)  # the frame without a step left out
    np.testing.assert_array_equal(ds.box_edges, EDGES)
    assert "step_box_edges" not in ds  # one time axis, as the file means


def _espresso_leading_entry(f):
    """ESPResSo's writer (until a fix of June 2026) creates 'step' and 'time' with one
    entry (its fill value) and writes frame k's at k + 1; every element links them."""
    f["h5md/creator"].attrs["name"] = "ESPResSo"
    step = f.create_dataset("espresso_step", data=np.concatenate([[-10], STEPS]))
    time = f.create_dataset("espresso_time", data=np.concatenate([[-10.0], TIMES]))
    time.attrs["unit"] = "ps"
    for el in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
        _replace(f[el], "step", step)
        _replace(f[el], "time", time)


def _check_steps_and_times(ds):
    np.testing.assert_array_equal(ds.step, STEPS)
    np.testing.assert_array_equal(ds.time, TIMES)
    np.testing.assert_array_equal(ds.position, POS)


def _step_one_longer(f):
    """Another writer's 'step' one entry ahead of 'value' (it stopped before the value)."""
    _replace(f[f"{G}/position"], "step", np.concatenate([STEPS, [30]]))


def _flat_positions(f):
    """Positions of one number per particle (an audit's 2-D 'value'): not H5MD's vectors."""
    _replace(f[f"{G}/position"], "value", POS[..., 0])


def _check_flat_positions(ds):
    assert ds.position.dims == ("time", "atom")
    np.testing.assert_array_equal(ds.position, POS[..., 0])


def _box_no_step(f):
    del f[f"{G}/box/edges/step"], f[f"{G}/box/edges/time"]


def _check_box_follows_position(ds):
    """As many frames as position: position's steps and times (GROMACS writes so)."""
    assert ds.box_edges.dims == ("time", "spatial")
    np.testing.assert_array_equal(ds.box_edges, EDGES)
    np.testing.assert_array_equal(ds.step, STEPS)


def _box_no_step_other_length(f):
    edges = f[f"{G}/box/edges"]
    del edges["step"], edges["time"], edges["value"]
    edges["value"] = EDGES[:2]


def _check_box_numbered(ds):
    np.testing.assert_array_equal(ds.box_edges, EDGES[:2])
    np.testing.assert_array_equal(ds.step_box_edges, [0, 1])
    np.testing.assert_array_equal(ds.step, STEPS)


def _observable_no_step(f):
    del f["observables/energy/step"], f["observables/energy/time"]


def _check_energy_numbered(ds):
    np.testing.assert_array_equal(ds.energy, ENERGY)
    np.testing.assert_array_equal(ds.step, [0, 1, 2])


def _species_no_step(f):
    f.create_dataset(f"{G}/species/value", data=np.ones((N_FRAMES, N_ATOMS), dtype=np.int32))


def _check_species(ds):
    assert ds.species.dims == ("time", "atom")
    np.testing.assert_array_equal(ds.species, 1)
    np.testing.assert_array_equal(ds.position, POS)


def _id_short_step(f):
    el = f.create_group(f"{G}/id")
    el["value"] = np.tile(np.arange(N_ATOMS), (N_FRAMES, 1))
    el["step"] = np.array([0])


def _check_id(ds):
    np.testing.assert_array_equal(ds["id"], [np.arange(N_ATOMS)])  # the frame at step 0
    np.testing.assert_array_equal(ds["step_id"], [0])


def _malformed_observable(f):
    del f["observables/energy/value"]


def _check_particles_fine(ds):
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.step, STEPS)


def _scalar_observable(f):
    _replace(f["observables/energy"], "value", 1.0)


def _no_h5md(f):
    del f["h5md"]


def _pre10_meta(f):
    h5md = f["h5md"]
    del h5md["author"], h5md["creator"]
    h5md.attrs["author"] = "A. Author"
    h5md.attrs["creator"] = "pyh5md"
    h5md.attrs["creator_version"] = "0.1"


def _check_pre10(ds):
    assert ds.attrs["author_name"] == "A. Author"
    assert ds.attrs["creator_name"] == "pyh5md"
    assert ds.attrs["creator_version"] == "0.1"
    np.testing.assert_array_equal(ds.position, POS)


def _no_version(f):
    del f["h5md"].attrs["version"]


def _box_no_dimension(f):
    del f[f"{G}/box"].attrs["dimension"]


def _check_box(ds):
    assert ds.box_edges.attrs["dimension"] == 3
    assert ds.box_edges.attrs["boundary"] == ["periodic"] * 3
    np.testing.assert_array_equal(ds.box_edges, EDGES)


def _boundary_nan(f):
    f[f"{G}/box"].attrs["boundary"] = np.full(3, np.nan)


def _dimensions_misspelled(f):
    box = f[f"{G}/box"]
    del box.attrs["dimension"]
    box.attrs["dimensions"] = 3


def _no_boundary(f):
    del f[f"{G}/box"].attrs["boundary"]


def _odd_boundary(f):
    f[f"{G}/box"].attrs["boundary"] = np.array([b"periodic", b"open", b"wall"])


def _boundary_flags(f):
    """Periodicity as flags (ASE's ``pbc``), booleans or integers."""
    f[f"{G}/box"].attrs["boundary"] = np.array([True, True, False])


def _check_boundary(expected):
    def check(ds):
        assert list(ds.box_edges.attrs["boundary"]) == expected
    return check


def _edges_attribute(f):
    box = f[f"{G}/box"]
    del box["edges"]
    box.attrs["edges"] = np.array([5.0, 6.0, 7.0])


def _check_edges_attr(ds):
    assert ds.box_edges.dims == ("spatial",)
    np.testing.assert_array_equal(ds.box_edges, [5.0, 6.0, 7.0])


def _edges_bad_shape(f):
    _replace(f[f"{G}/box/edges"], "value", np.ones((N_FRAMES, 2)))


def _edges_text(f):
    """Box edges written as text: served as a variable of strings, with no warning (and
    opened by strict=True), they failed in the first use of the box."""
    _replace(f[f"{G}/box/edges"], "value", np.array([[b"5", b"6", b"7"]] * N_FRAMES))


def _fixed_edges_text(f):
    del f[f"{G}/box/edges"]
    f[f"{G}/box/edges"] = np.array([b"5", b"6", b"7"])


def _check_no_edges(ds):
    assert "box_edges" not in ds
    np.testing.assert_array_equal(ds.position, POS)


def _plain_series(f):
    del f[f"{G}/position"]
    f[f"{G}/position"] = POS


def _check_plain_series(ds):
    assert ds.position.dims == ("time", "atom", "spatial")  # position sets the time axis
    np.testing.assert_array_equal(ds.step, [0, 1, 2])
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.step_box_edges, STEPS)


def _time_wrong_length(f):
    _replace(f[f"{G}/position"], "time", np.arange(1.0))


def _time_one_short(f):
    """GROMACS' new writer writes a frame's value, then its step, then its time
    (h5md_timedatablock.cpp): a run stopped before the time leaves it one entry short."""
    _replace(f[f"{G}/position"], "time", TIMES[:2])


def _check_time_one_short(ds):
    np.testing.assert_array_equal(ds.position, POS[:2])  # the frame without a time left out
    np.testing.assert_array_equal(ds.step, STEPS[:2])
    np.testing.assert_array_equal(ds.time, TIMES[:2])
    assert ds.time.attrs.get("units") != "step"  # its times, not steps standing in
    # the box keeps its whole time (only position's was replaced): an axis of its own
    assert ds.box_edges.dims[0] == "time_box_edges" and ds.sizes["time_box_edges"] == 3


def _check_time_ignored(ds):
    np.testing.assert_array_equal(ds.time, STEPS)  # no time: the step stands in
    assert ds.time.attrs["units"] == "step"


def _float_step(f):
    _replace(f[f"{G}/position"], "step", STEPS.astype(np.float64))


def _check_float_step(ds):
    np.testing.assert_array_equal(ds.step, STEPS)
    assert ds.step.dtype == np.int64


def _unknown_unit(f):
    f[f"{G}/position/value"].attrs["unit"] = "blorp"


def _check_unconverted(ds):
    assert ds.position.attrs["units"] == "blorp"
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_allclose(ds.box_edges, EDGES * 10)  # nm -> Angstrom still converted


def _steps_back(f):
    f[f"{G}/position/step"][...] = [10, 10, 5]  # shared with the box and the observable


def _check_steps_as_stored(ds):
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.step, [10, 10, 5])


def _unit_not_string(f):
    f[f"{G}/position/value"].attrs["unit"] = 3


def _references(f):
    g = f[G]
    refs = g.create_dataset("ref", shape=(N_ATOMS,), dtype=h5py.ref_dtype)
    refs[0] = g["position"].ref


def _check_no_ref(ds):
    assert "ref" not in ds
    np.testing.assert_array_equal(ds.position, POS)


def _atom_mismatch(f):
    f[f"{G}/mass"] = np.ones(N_ATOMS + 1)


def _check_no_mass(ds):
    assert "mass" not in ds
    np.testing.assert_array_equal(ds.position, POS)


def _dangling(f):
    f[f"{G}/velocity"] = h5py.SoftLink("/nowhere")


def _check_no_velocity(ds):
    assert "velocity" not in ds
    np.testing.assert_array_equal(ds.position, POS)


def _empty_huge(f):
    el = f.create_group(f"{G}/velocity")
    el.create_dataset("value", shape=(0, 10**9, 3), dtype="f4")
    el["step"] = np.arange(0)


def _no_box(f):
    del f[f"{G}/box"]


def _check_no_box(ds):
    assert "box_edges" not in ds
    np.testing.assert_array_equal(ds.position, POS)
    assert ds.position.dims == ("time", "atom", "spatial")


def _box_dimension_unlike_positions(f):
    f[f"{G}/box"].attrs["dimension"] = np.int32(2)


def _check_box_and_positions(ds):
    _check_box(ds)
    assert ds.position.dims == ("time", "atom", "spatial")
    assert list(ds.spatial.values) == ["x", "y", "z"]


def _box_other_steps(f):
    edges = f[f"{G}/box/edges"]
    del edges["step"], edges["time"]
    edges["step"] = np.array([0, 5, 10])


def _check_box_own_axis(ds):
    assert ds.box_edges.dims == ("time_box_edges", "spatial")
    np.testing.assert_array_equal(ds.box_edges, EDGES)
    np.testing.assert_array_equal(ds.step_box_edges, [0, 5, 10])
    np.testing.assert_array_equal(ds.step, STEPS)


def _image_other_steps(f):
    image = f.create_group(f"{G}/image")
    image.create_dataset("value", data=np.zeros((N_FRAMES, N_ATOMS, 3), dtype=np.int32))
    image["step"] = STEPS + 1
    image["time"] = f[f"{G}/position/time"]


def _check_image_own_axis(ds):
    assert ds.image.dims == ("time_image", "atom", "spatial")
    np.testing.assert_array_equal(ds.step_image, STEPS + 1)
    np.testing.assert_array_equal(ds.position, POS)


def _element_named_time(f):
    el = f.create_group(f"{G}/time")
    el.create_dataset("value", data=TIMES * 2)
    el["step"] = f[f"{G}/position/step"]


def _check_time_element(ds):
    np.testing.assert_array_equal(ds.time_element, TIMES * 2)
    np.testing.assert_array_equal(ds.time, TIMES)
    np.testing.assert_array_equal(ds.position, POS)


def _unit_on_group(f):
    del f[f"{G}/position/value"].attrs["unit"]
    f[f"{G}/position"].attrs["unit"] = "nm"


def _check_unit_from_group(ds):
    assert ds.position.attrs["units"] == "Angstrom"
    np.testing.assert_allclose(ds.position, POS * 10)


def _box_offset(f):
    f[f"{G}/box/offset"] = np.array([-1.0, -2.0, -3.0])


def _check_box_offset(ds):
    assert ds.box_offset.dims == ("spatial",)
    np.testing.assert_array_equal(ds.box_offset, [-1.0, -2.0, -3.0])
    _check_box(ds)


def _unwritten_frames(f):
    el = f.create_group(f"{G}/velocity")
    dset = el.create_dataset("value", shape=(N_FRAMES, N_ATOMS, 3), dtype="f8",
                             chunks=(1, N_ATOMS, 3))
    dset[:2] = POS[:2]  # the writer stopped before the last frame
    el["step"] = f[f"{G}/position/step"]


def _check_unwritten(ds):
    np.testing.assert_array_equal(ds.velocity[:2], POS[:2])
    np.testing.assert_array_equal(ds.velocity[2], 0.0)


def _no_box_quaternions(f):
    """No box, and an element of 4 components beside positions of 3 (found by an audit:
    every such element was given the 'spatial' axis, and the whole group failed)."""
    del f[f"{G}/box"]
    el = f.create_group(f"{G}/orientation")
    el["value"], el["step"] = np.tile([1.0, 0, 0, 0], (N_FRAMES, N_ATOMS, 1)), STEPS


def _check_quaternions(ds):
    assert ds.position.dims == ("time", "atom", "spatial")
    assert ds.orientation.dims == ("time", "atom", "orientation_dim_2")
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.orientation[..., 0], 1.0)


def _null_mass(f):
    f[f"{G}"].create_dataset("mass", data=h5py.Empty("f8"))


def _never_written(f):
    """A contiguous 'value' created, never written: no storage, zeros (said nothing)."""
    el = f.create_group(f"{G}/velocity")
    el.create_dataset("value", shape=POS.shape, dtype="f8")
    el["step"] = f[f"{G}/position/step"]


def _check_never_written(ds):
    np.testing.assert_array_equal(ds.velocity, 0.0)
    np.testing.assert_array_equal(ds.position, POS)


def _grown_ahead(f):
    """A writer that grew 'value' to 20 frames ahead, wrote 3 (and their steps), and
    stopped: the 3 frames at their steps (it served 20 frames numbered, 17 of zeros)."""
    pos = f[f"{G}/position"]
    del pos["value"]
    value = pos.create_dataset("value", shape=(20, N_ATOMS, 3), maxshape=(None, N_ATOMS, 3),
                               dtype="f8", chunks=(1, N_ATOMS, 3))
    value[:N_FRAMES] = POS
    value.attrs["unit"] = "nm"


def _grown_ahead_with_fill(f):
    """As :func:`_grown_ahead`, the value created with a fill value of its own (NaN): its
    17 frames never written read as 20 frames numbered 0..19, NaN after the third, and the
    times dropped."""
    pos = f[f"{G}/position"]
    del pos["value"]
    value = pos.create_dataset("value", shape=(20, N_ATOMS, 3), maxshape=(None, N_ATOMS, 3),
                               dtype="f8", chunks=(1, N_ATOMS, 3), fillvalue=np.nan)
    value[:N_FRAMES] = POS
    value.attrs["unit"] = "nm"


def _gromacs_chunk_ahead(f):
    """GROMACS grows 'value', 'step' and 'time' a chunk (20 frames) at a time, with fill
    value -1 (``writeData`` in ``src/gromacs/fileio/h5md_util.cpp``): 3 frames written of
    20 allocated read as 20 frames of steps -1, NaN positions."""
    for el, values in ((f"{G}/position", POS), (f"{G}/box/edges", EDGES),
                       ("observables/energy", ENERGY)):
        grp = f[el]
        unit = grp["value"].attrs["unit"]
        for name, data in (("value", values), ("step", STEPS), ("time", TIMES)):
            del grp[name]
            dset = grp.create_dataset(name, shape=(20, *data.shape[1:]), dtype=data.dtype,
                                      maxshape=(None, *data.shape[1:]), fillvalue=-1,
                                      chunks=(20, *data.shape[1:]))
            dset[:N_FRAMES] = data
        grp["value"].attrs["unit"] = unit


def _gromacs_nothing_written_yet(f):
    """A GROMACS file as it starts: 'value', 'step' and 'time' of 20 frames allocated with
    fill value -1, none written yet; read as 20 frames of step -1 and positions -1, said
    only as steps that do not increase."""
    for el in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
        grp = f[el]
        unit = grp["value"].attrs["unit"]
        for name in ("value", "step", "time"):
            data = grp[name][()]
            del grp[name]
            grp.create_dataset(name, shape=(20, *data.shape[1:]), dtype=data.dtype,
                               maxshape=(None, *data.shape[1:]), fillvalue=-1,
                               chunks=(20, *data.shape[1:]))
        grp["value"].attrs["unit"] = unit


def _check_no_frames(ds):
    assert ds.sizes["time"] == 0 and ds.position.shape == (0, *POS.shape[1:])
    assert ds.step.values.tolist() == [] and ds.time.values.tolist() == []


def _fixed_as_arrays_of_one(f):
    """Fixed-interval sampling with its interval written as an array of one entry, not a
    scalar, beside its ``offset``: read as one explicit step it numbered the frames 0..n-1
    and dropped the times (or, beside 2 frames, dropped the last frame; found by an
    audit)."""
    pos = f[f"{G}/position"]
    for name, interval, offset in (("step", [10], np.int64(0)), ("time", [0.5], 0.0)):
        del pos[name]
        pos.create_dataset(name, data=np.array(interval)).attrs["offset"] = offset
    pos["time"].attrs["unit"] = "ps"


def _check_fixed_as_arrays_of_one(ds):
    _check_steps_and_times(ds)
    np.testing.assert_array_equal(ds.box_edges, EDGES)
    assert "step_box_edges" not in ds  # the same steps as the box's own


@pytest.mark.parametrize("offset", [np.nan, "x", np.array([1, 2])])
def test_a_step_of_one_entry_with_an_unusable_offset_is_one_problem(tmp_path, offset):
    """A step of one entry whose ``offset`` is no number is not taken for a fixed interval:
    one warning (the frames without a step left out), not "read as fixed-interval" and
    then another."""
    path = _base(str(tmp_path / "one.h5md"))
    with h5py.File(path, "r+") as f:
        _replace(f[f"{G}/position"], "step", np.array([10]))
        f[f"{G}/position/step"].attrs["offset"] = offset
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.step, [10])
        np.testing.assert_array_equal(ds.position, POS[:1])
    [found] = _matching(record, path, f"{G}/position/step")
    assert "'step' has 1 entries but 'value' has 3 frames" in found


def _box_behind(f):
    """GROMACS' writer (src/gromacs/fileio/h5md/h5md.cpp) links the box's step and time to
    the position's and writes the box's frame after the position's: a run stopped in
    between leaves the box a frame behind. The whole file failed ("its elements do not
    fit together"). One warning, of the step: the linked time, as long, was warned
    about a second time."""
    _replace(f[f"{G}/box/edges"], "value", EDGES[:2])


def _check_box_behind(ds):
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.step, STEPS)
    assert ds.box_edges.dims[0] == "time_box_edges"
    np.testing.assert_array_equal(ds.box_edges, EDGES[:2])
    np.testing.assert_array_equal(ds.step_box_edges, STEPS[:2])
    np.testing.assert_array_equal(ds.time_box_edges, TIMES[:2])


def _pre_h5md_trajectory(f):
    """HALMD until 2013 (H5MD's drafts before 1.0) kept its particles groups under
    /trajectory: the positions were not read, and nothing said so."""
    f.move("particles", "trajectory")


def _check_positions(ds):
    np.testing.assert_array_equal(ds.position, POS)
    np.testing.assert_array_equal(ds.step, STEPS)


def _subgroup_clash(f):
    """lees/offset (served as lees_offset) beside an element named lees_offset."""
    for name, v in (("lees/offset", 1.0), ("lees/direction", 0), ("lees_offset", 7.0)):
        el = f.create_group(f"{G}/{name}")
        el["value"], el["step"] = np.full(N_FRAMES, v), STEPS


def _check_lees(ds):
    np.testing.assert_array_equal(ds.lees_offset, 7.0)  # the element's, not the subgroup's
    np.testing.assert_array_equal(ds.lees_direction, 0)


def _units_plural(f):
    value = f[f"{G}/position/value"]
    del value.attrs["unit"]
    value.attrs["units"] = "nm"


def _check_converted(ds):
    assert ds.position.attrs["units"] == "Angstrom"
    np.testing.assert_allclose(ds.position, POS * 10)


TROUBLES = {
    "no step": Trouble(_no_step, f"{G}/position", "no step: frames numbered 0..n-1",
                       _check_numbered),
    "step shorter than value": Trouble(_short_step, f"{G}/position/step",
                                       r"'step' has 1 entries but 'value' has 3 frames.*"
                                       r"the last 2 frame\(s\) of 'value', which have no "
                                       "step, left out", _check_short_step),
    "empty step beside frames": Trouble(
        lambda f: (_replace(f[f"{G}/position"], "step", np.zeros(0, int)),
                   f[f"{G}/position"].pop("time")),
        f"{G}/position/step", r"'step' has shape \(0,\) but 'value' has 3 frames; frames "
        "numbered 0..n-1", _check_numbered),
    "value two frames ahead": Trouble(_value_ahead, f"{G}/position/step",
                                      r"the first 3 frame\(s\) read at their steps; the "
                                      r"last 2 frame\(s\)", _check_stopped_mid_frame),
    "value and time two frames ahead of step": Trouble(
        _value_ahead_of_step_only, f"{G}/position/", r"'step' has 3 entries but 'value' has "
        r"5 frames.*the last 2 frame\(s\)", _check_stopped_mid_frame),
    "positions not vectors": Trouble(_flat_positions, f"{G}/position",
                                     r"holds frames of shape \(4,\).*served as stored",
                                     _check_flat_positions),
    "writer stopped mid-frame": Trouble(_stopped_mid_frame, f"{G}/position/step",
                                        "stopped in the middle of a frame.*last frame of "
                                        "'value' left out", _check_stopped_mid_frame),
    "ESPResSo's leading step": Trouble(_espresso_leading_entry, f"{G}/position/",
                                       "ESPResSo.*entry k \\+ 1.*entries 1..3 used",
                                       _check_steps_and_times),
    "step one longer": Trouble(_step_one_longer, f"{G}/position/step",
                               "the first 3 steps used", _check_steps_and_times),
    "box edges without step": Trouble(_box_no_step, f"{G}/box/edges",
                                      f"no step: sampled as {G}/position",
                                      _check_box_follows_position),
    "box edges without step, fewer frames": Trouble(
        _box_no_step_other_length, f"{G}/box/edges", "no step: frames numbered",
        _check_box_numbered),
    "observable without step": Trouble(_observable_no_step, "/observables/energy",
                                       "no step: frames numbered", _check_energy_numbered,
                                       {"group": "observables"}),
    "species without step": Trouble(_species_no_step, f"{G}/species",
                                    f"no step: sampled as {G}/position", _check_species),
    "id with a step of length 1": Trouble(_id_short_step, f"{G}/id/step",
                                          r"the last 2 frame\(s\) of 'value'", _check_id),
    "malformed observable": Trouble(_malformed_observable, "/observables/energy", "left out",
                                    _check_particles_fine, tree=True),
    "scalar observable value": Trouble(_scalar_observable, "/observables/energy/value",
                                       "left out", _check_particles_fine, tree=True),
    "no /h5md group": Trouble(_no_h5md, "/h5md", "read as H5MD 1.1", _check_particles_fine),
    "author/creator as /h5md attributes": Trouble(_pre10_meta, "/h5md/author",
                                                  "read from the attributes", _check_pre10),
    "no version": Trouble(_no_version, "/h5md", "read as H5MD 1.1", _check_particles_fine),
    "box without dimension": Trouble(_box_no_dimension, f"{G}/box",
                                     r"no box dimension: taken from edges shape \(3\)", _check_box),
    "boundary as NaN floats": Trouble(_boundary_nan, f"{G}/box", "boundary 'periodic' assumed",
                                      _check_box),
    "misspelled dimensions": Trouble(_dimensions_misspelled, f"{G}/box",
                                     "read from 'dimensions'", _check_box),
    "no box group": Trouble(_no_box, f"{G}/box", "no box: positions read without periodic",
                            _check_no_box),
    "box dimension unlike the positions": Trouble(
        _box_dimension_unlike_positions, f"{G}/box", "dimension 3 taken from the positions",
        _check_box_and_positions),
    "box edges sampled at other steps": Trouble(_box_other_steps, f"{G}/box/edges",
                                                "kept on its own time axis 'time_box_edges'",
                                                _check_box_own_axis),
    "image sampled at other steps": Trouble(_image_other_steps, f"{G}/image",
                                            "kept on its own time axis 'time_image'",
                                            _check_image_own_axis),
    "a box member H5MD does not define": Trouble(
        lambda f: f.create_dataset(f"{G}/box/origin", data=np.zeros(3)), f"{G}/box/origin",
        "left out", _check_box),
    "frames never written": Trouble(_unwritten_frames, f"{G}/velocity/value",
                                    "read as HDF5's default fill value", _check_unwritten),
    "an element named time": Trouble(_element_named_time, f"{G}/time",
                                     "served as 'time_element'", _check_time_element),
    # found by an audit: a missing boundary was 'none' in silence, other values accepted
    "no boundary": Trouble(_no_boundary, f"{G}/box", "boundary 'periodic' assumed",
                           _check_boundary(["periodic"] * 3)),
    "boundary as flags": Trouble(_boundary_flags, f"{G}/box",
                                 r"\['periodic', 'periodic', 'none'\] \(periodic where set\)",
                                 _check_boundary(["periodic", "periodic", "none"])),
    "boundary neither periodic nor none": Trouble(
        _odd_boundary, f"{G}/box", "served as stored",
        _check_boundary(["periodic", "open", "wall"])),
    "edges as an attribute": Trouble(_edges_attribute, f"{G}/box/edges",
                                     "read as fixed", _check_edges_attr),
    "edges of the wrong shape": Trouble(_edges_bad_shape, f"{G}/box/edges", "left out",
                                        _check_no_edges),
    "edges as text": Trouble(_edges_text, f"{G}/box/edges", r"box edges hold values of "
                             r"dtype \|S1, not numbers \(H5MD: Float or Integer\); left out",
                             _check_no_edges),
    "fixed edges as text": Trouble(_fixed_edges_text, f"{G}/box/edges", "not numbers.*left "
                                   "out", _check_no_edges),
    "positions as a plain time series": Trouble(_plain_series, f"{G}/position",
                                                "read as a time series, frames numbered",
                                                _check_plain_series),
    "time one short": Trouble(_time_one_short, f"{G}/position/time",
                              "stopped in the middle of a frame.*last frame of 'value' "
                              "left out", _check_time_one_short),
    "time of another length": Trouble(_time_wrong_length, f"{G}/position/time",
                                      "'time' ignored", _check_time_ignored),
    "NaN in time": Trouble(lambda f: _replace(f[f"{G}/position"], "time",
                                              np.array([0.0, np.nan, 1.0])),
                           f"{G}/position/time", "'time' ignored", _check_time_ignored),
    "float step": Trouble(_float_step, f"{G}/position/step", "converted to integers",
                          _check_float_step),
    "unknown unit": Trouble(_unknown_unit, f"{G}/position/value", "left unconverted",
                            _check_unconverted, {"convert_units": True}),
    "unit on the element group": Trouble(_unit_on_group, f"{G}/position",
                                         "unit 'nm' read from the group", _check_unit_from_group,
                                         {"convert_units": True}),
    "unit not a string": Trouble(_unit_not_string, f"{G}/position/value", "unit ignored",
                                 _check_particles_fine),
    "steps that do not increase": Trouble(_steps_back, f"{G}", "kept in the order stored",
                                          _check_steps_as_stored),
    "references": Trouble(_references, f"{G}/ref", "left out", _check_no_ref),
    "particle count mismatch": Trouble(_atom_mismatch, f"{G}/mass", "left out", _check_no_mass),
    "dangling link": Trouble(_dangling, f"{G}", "left out", _check_no_velocity),
    # found by an audit of defective files (/tmp/audit31)
    "no box, quaternions": Trouble(_no_box_quaternions, f"{G}/box", "no box: positions read",
                                   _check_quaternions),
    "null dataspace": Trouble(_null_mass, f"{G}/mass", r"null dataspace\) holds no value; "
                              "left out", _check_no_mass),
    "value never written": Trouble(_never_written, f"{G}/velocity/value",
                                   "never written.*read as HDF5's default fill value",
                                   _check_never_written),
    "value grown ahead": Trouble(_grown_ahead, f"{G}/position/value",
                                 "declares 20 frames but stores none after frame 2.*its first "
                                 "3 frames read", _check_steps_and_times),
    "value grown ahead, with a fill value": Trouble(
        _grown_ahead_with_fill, f"{G}/position/value", "declares 20 frames but stores none "
        "after frame 2.*its first 3 frames read", _check_steps_and_times),
    "GROMACS's chunk of frames ahead": Trouble(
        _gromacs_chunk_ahead, f"{G}/position/step", r"holds its fill value -1 from frame 3 "
        r"on \(17 frame\(s\)\): allocated but never written.*the 3 frame\(s\) before",
        _check_stopped_mid_frame),
    "GROMACS's chunk allocated, nothing written yet": Trouble(
        _gromacs_nothing_written_yet, f"{G}/position/step", r"holds only its fill value -1 "
        r"\(20 frame\(s\)\): allocated but never written.*no frames read", _check_no_frames),
    "fixed step and time as arrays of one": Trouble(
        _fixed_as_arrays_of_one, f"{G}/position/step", "an array of one entry with an "
        "'offset' attribute.*read as fixed-interval sampling", _check_fixed_as_arrays_of_one),
    "box a frame behind its linked step": Trouble(
        _box_behind, f"{G}/box/edges/", "'step' has 3 entries but 'value' has 2 frames; "
        "the first 2 steps used", _check_box_behind),
    "particles under /trajectory": Trouble(
        _pre_h5md_trajectory, "/trajectory", "H5MD's drafts before 1.0.*read as /particles",
        _check_positions),
    "subgroup element named as an element": Trouble(
        _subgroup_clash, f"{G}/lees", "served as 'lees_offset', the name of the "
        f"element {G}/lees_offset; left out", _check_lees),
    "units, not unit": Trouble(_units_plural, f"{G}/position/value",
                               "unit 'nm' read from 'units'", _check_converted,
                               {"convert_units": True}),
    "zero-size element declaring 10^9 particles": Trouble(
        _empty_huge, f"{G}/velocity/value", "left out", _check_no_velocity),
}


def _trouble_file(tmp_path, kind: str) -> str:
    path = _base(str(tmp_path / f"{re.sub(r'[^a-z0-9]+', '_', kind)}.h5md"))
    with h5py.File(path, "r+") as f:
        TROUBLES[kind].mutate(f)
    return path


def _matching(record, path: str, hpath: str) -> list[str]:
    return [str(w.message) for w in record
            if issubclass(w.category, H5MDConformanceWarning)
            and str(w.message).startswith(f"{path} [{hpath}")]


@pytest.mark.parametrize("kind", list(TROUBLES))
def test_tolerant(tmp_path, kind):
    trouble = TROUBLES[kind]
    path = _trouble_file(tmp_path, kind)
    with pytest.warns(H5MDConformanceWarning) as record:
        if trouble.tree:
            tree = xr.open_datatree(path, engine="h5md", **trouble.kwargs)
            ds = tree["particles/g"].to_dataset()
            ds.set_close(tree.close)
        else:
            ds = xr.open_dataset(path, engine="h5md", **trouble.kwargs)
    found = _matching(record, path, trouble.path)
    assert len(found) == 1, [str(w.message) for w in record]
    assert re.search(trouble.assumed, found[0]), found[0]
    with ds:
        trouble.check(ds)


@pytest.mark.parametrize("kind", list(TROUBLES))
def test_strict(tmp_path, kind):
    trouble = TROUBLES[kind]
    path = _trouble_file(tmp_path, kind)
    with pytest.raises(H5MDFormatError) as err:
        xr.open_dataset(path, engine="h5md", strict=True, **trouble.kwargs)
    assert path in str(err.value)
    assert err.value.h5path.startswith(trouble.path.rstrip("/")), err.value.h5path
    with pytest.raises(H5MDFormatError):
        xr.open_datatree(path, engine="h5md", strict=True, **trouble.kwargs)


#: troubles that only matter for some keywords of the open (found by the backend)
_OPEN_TIME = {"unknown unit"}


@pytest.mark.parametrize("kind", [k for k in TROUBLES if k not in _OPEN_TIME])
def test_scan_lists_problem(tmp_path, kind):
    info = scan(_trouble_file(tmp_path, kind))
    assert any(p.path.startswith(TROUBLES[kind].path.rstrip("/")) for p in info.problems)


@pytest.mark.parametrize("name", ["position", "mass"])
def test_text_where_numbers_belong_is_said(tmp_path, name):
    """Positions (or masses) stored as text were served without a word and failed in the
    first analysis ("could not convert string to float"); they are served as stored, with
    one warning naming the element and its dtype, strict or not (H5MD does not prescribe
    their type: no departure)."""
    path = _base(str(tmp_path / "text.h5md"))
    with h5py.File(path, "r+") as f:
        if name == "position":
            _replace(f[f"{G}/position"], "value", np.full(POS.shape, b"x"))
        else:
            f[G]["mass"] = np.array([b"C", b"O", b"H", b"N"])
    hpath = f"{G}/position" if name == "position" else f"{G}/mass"
    for strict in (False, True):
        with pytest.warns(H5MDConformanceWarning) as record:
            ds = xr.open_dataset(path, engine="h5md", strict=strict)
        assert _matching(record, path, hpath) == [
            f"{path} [{hpath}]: {name!r} holds text of dtype |S1, not numbers; served as "
            "stored (analyses that need its numbers cannot use it)"]
        with ds:
            expected = np.full(POS.shape, "x") if name == "position" else ["C", "O", "H", "N"]
            np.testing.assert_array_equal(ds[name].values, expected)  # as text
            np.testing.assert_array_equal(ds.box_edges, EDGES)


def test_particles_open_quietly_beside_a_malformed_observable(tmp_path):
    """Opening one group warns about that group (and the file), not about the others."""
    path = _trouble_file(tmp_path, "malformed observable")
    with _no_warning_open(path) as ds:
        _check_particles_fine(ds)


def test_an_observables_group_opens_quietly_above_a_troubled_nested_one(tmp_path):
    """A group nested in an observables group is a Dataset of its own: the open of
    /observables/thermo warned of /observables/thermo/box/volume, which it does not hold
   . The open of the nested group, and the tree, warn once."""
    path = _base(str(tmp_path / "nested.h5md"))
    with h5py.File(path, "r+") as f:
        thermo = f.create_group("observables/thermo")
        thermo["pressure/value"] = ENERGY
        thermo["pressure/step"], thermo["pressure/time"] = f[f"{G}/position/step"], f[
            f"{G}/position/time"]
        thermo["box/volume/value"] = ENERGY  # no step: frames numbered
    hpath = "/observables/thermo/box/volume"
    with _no_warning_open(path, group="observables/thermo") as ds:
        assert list(ds.data_vars) == ["pressure"]
        np.testing.assert_array_equal(ds.step, STEPS)
    with _no_warning_open(path, group="observables") as ds:
        np.testing.assert_array_equal(ds.energy, ENERGY)
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md", group="observables/thermo/box")
    with ds:
        np.testing.assert_array_equal(ds.volume, ENERGY)
    assert len(_matching(record, path, hpath)) == 1
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    tree.close()
    assert len(_matching(record, path, hpath)) == 1
    with pytest.raises(H5MDFormatError, match=re.escape(hpath)):  # strict: the whole file
        xr.open_dataset(path, engine="h5md", group="observables/thermo", strict=True)


def test_malformed_observable_leaves_the_rest_of_the_tree(tmp_path):
    path = _trouble_file(tmp_path, "malformed observable")
    with pytest.warns(H5MDConformanceWarning, match=r"\[/observables/energy\].*left out"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        np.testing.assert_array_equal(tree["particles/g"].position, POS)
        assert "observables" not in tree.children


def test_warned_once_per_problem(tmp_path):
    """A step shared by hard links is one problem, not one per element using it."""
    path = _base(str(tmp_path / "shared.h5md"))
    with h5py.File(path, "r+") as f:
        for el in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
            del f[f"{el}/time"]
        step = f.create_dataset("shared_step", data=STEPS.astype(np.float64))
        for el in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
            _replace(f[el], "step", step)
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(path, engine="h5md")
    messages = [str(w.message) for w in record]
    assert len(messages) == 1, messages  # one step dataset, one problem
    assert re.search(r"/step\]: 'step' must be integer, not float64; converted to integers",
                     messages[0])
    with tree:
        np.testing.assert_array_equal(tree["particles/g"].step, STEPS)
        np.testing.assert_array_equal(tree["observables"].step, STEPS)
        np.testing.assert_array_equal(tree["observables"].energy, ENERGY)


# ----------------------------------------------------------------------------- no trouble


def _no_warning_open(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        return xr.open_dataset(path, engine="h5md", **kwargs)


def test_conformant_variants_open_without_warning(tmp_path):
    """H5MD 1.0, uint64 steps, hard-linked step/time, (3, 3) edges, strings: all fine."""
    path = _base(str(tmp_path / "variants.h5md"))
    with h5py.File(path, "r+") as f:
        f["h5md"].attrs["version"] = np.array([1, 0])
        pos = f[f"{G}/position"]
        _replace(pos, "step", STEPS.astype(np.uint64))
        box = f[f"{G}/box"]
        del box["edges"]
        box["edges"] = np.diag([5.0, 6.0, 7.0])
        f[f"{G}/names"] = np.array([b"C", b"O", b"N", b"H"])
        f.create_dataset(f"{G}/labels", data=["a", "bb", "ccc", "dddd"],
                         dtype=h5py.string_dtype())
        # an array of one string, as some writers store every attribute (an audit found
        # it served as the text "['lammps']")
        f["h5md/creator"].attrs["name"] = np.array([b"lammps"])
    assert scan(path).creator["name"] == "lammps"
    with _no_warning_open(path, strict=True) as ds:
        assert ds.attrs["h5md_version"] == "1.0"
        np.testing.assert_array_equal(ds.step, STEPS)
        assert ds.box_edges.dims == ("box_vector", "spatial")
        np.testing.assert_array_equal(ds.box_edges, np.diag([5.0, 6.0, 7.0]))
        assert ds.names.values.tolist() == ["C", "O", "N", "H"]
        assert ds.labels.values.tolist() == ["a", "bb", "ccc", "dddd"]
        assert ds.labels.dims == ("atom",)


def test_base_file_is_conformant(tmp_path):
    path = _base(str(tmp_path / "base.h5md"))
    assert scan(path).problems == ()
    with _no_warning_open(path, strict=True) as ds:
        np.testing.assert_array_equal(ds.position, POS)
        np.testing.assert_array_equal(ds.time, TIMES)


def test_a_plain_open_reads_the_only_particles_group_with_positions(tmp_path):
    """A particles group of species alone beside the trajectory's: a plain open reads the
    one with positions (it asked for group=, where VMD's structure module took the group
    with positions for its atoms); two with positions still need group=."""
    path = _base(str(tmp_path / "ions.h5md"))
    with h5py.File(path, "r+") as f:
        f.create_dataset("/particles/ions/species", data=np.arange(POS.shape[1]))
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position, POS)
        assert ds.attrs["h5md_group"] == G
    with h5py.File(path, "r+") as f:
        f.copy(f[G], "/particles/solvent")
    with pytest.raises(ValueError, match=r"several particles groups"):
        xr.open_dataset(path, engine="h5md")


def test_several_particle_groups(tmp_path):
    path = _base(str(tmp_path / "two.h5md"))
    with h5py.File(path, "r+") as f:
        f.copy(f[G], "/particles/solvent")
    with pytest.raises(ValueError, match=r"several particles groups.*'particles/g'.*"
                       r"'particles/solvent'.*open_datatree"):
        xr.open_dataset(path, engine="h5md")
    tree = xr.open_datatree(path, engine="h5md")
    with tree:
        for name in ("g", "solvent"):
            np.testing.assert_array_equal(tree[f"particles/{name}"].position, POS)


def test_not_h5md_at_all_is_still_an_error(tmp_path):
    path = str(tmp_path / "plain.h5")
    with h5py.File(path, "w") as f:
        f["x"] = 1
    with pytest.raises(H5MDFormatError, match="no /h5md group"):
        xr.open_dataset(path, engine="h5md")


def test_an_mdtraj_file_is_named_with_the_way_to_convert_it(tmp_path):
    """MDTraj's HDF5 format (OpenMM's HDF5Reporter of mdtraj, ``Trajectory.save_hdf5``) is
    not H5MD: the error says what it is and how to convert it, not only that it is not H5MD
    (its root attributes and datasets as MDTraj 1.11 writes them with PyTables)."""
    path = str(tmp_path / "traj.h5")
    with h5py.File(path, "w") as f:
        f.attrs.update(conventions="Pande", conventionVersion="1.1", program="MDTraj",
                       programVersion="1.11.1", application="OpenMM")
        f["coordinates"] = np.zeros((3, 4, 3), dtype=np.float32)
        f["coordinates"].attrs["units"] = "nanometers"
        f["time"], f["topology"] = np.arange(3.0), '{"chains": []}'
    with pytest.raises(H5MDFormatError, match=r"no /h5md group \(it is MDTraj's HDF5 "
                       r"format: mdtraj.load\(\) reads it; to convert it, save it as DCD or XTC "
                       r"with MDTraj, then h5mdx convert\)"):
        xr.open_dataset(path, engine="h5md")
    with h5py.File(path, "r+") as f:
        del f.attrs["conventions"]  # recognised by its datasets too
    with pytest.raises(H5MDFormatError, match="MDTraj's HDF5 format"):
        xr.open_dataset(path, engine="h5md")


def test_unsupported_major_version_is_still_an_error(tmp_path):
    path = _base(str(tmp_path / "v2.h5md"))
    with h5py.File(path, "r+") as f:
        f["h5md"].attrs["version"] = np.array([2, 0])
    with pytest.raises(H5MDFormatError, match="version 2.0 is not supported"):
        xr.open_dataset(path, engine="h5md")


def test_external_link_is_left_out_never_followed(tmp_path):
    """A part reaching into another file is not read without allow_external: it is left
    out with a warning (the rest of the file opens), and strict=True refuses the file."""
    path = _base(str(tmp_path / "ext.h5md"))
    with h5py.File(path, "r+") as f:
        f[f"{G}/velocity"] = h5py.ExternalLink("other.h5", "/v")
    with pytest.warns(H5MDConformanceWarning, match=r"external link.*allow_external.*left out"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert "velocity" not in ds
        np.testing.assert_array_equal(ds.position, POS)
    with pytest.raises(H5MDFormatError, match="allow_external"):
        xr.open_dataset(path, engine="h5md", strict=True)


@pytest.mark.parametrize("shape", [(N_FRAMES, 3, 3), (N_FRAMES, 3, 2)], ids=["matrix", "bounds"])
def test_complex_box_edges_give_no_numpy_warning(tmp_path, shape):
    """Complex box edges (a mutation fuzz): the check of the first box matrix
    (or [lo, hi] bounds) cast them to float, and numpy's ComplexWarning, naming neither
    the file nor the path, came out of every open and of h5mdx info."""
    path = _base(str(tmp_path / "complex.h5md"))
    with h5py.File(path, "r+") as f:
        _replace(f[f"{G}/box/edges"], "value", np.ones(shape, dtype=np.complex128))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        xr.open_datatree(path, engine="h5md").close()
    assert all(isinstance(w.message, H5MDConformanceWarning) for w in record), \
        [str(w.message) for w in record]


@pytest.mark.parametrize(("element", "step"), [
    ("observables/energy", np.uint64(2**63 + 1)),  # fixed interval: an OverflowError
    ("observables/energy", np.int64(2**62)),  # fixed interval: 2 * 2**62 wrapped
    (f"{G}/position", np.arange(3, dtype=np.uint64) + np.uint64(2**63)),  # wrapped
    (f"{G}/position", np.array([0, 1, 2**63], dtype=np.float64)),
], ids=["fixed-uint64", "fixed-overflowing", "explicit-uint64", "explicit-float"])
def test_steps_beyond_64_bit_integers_are_said_not_wrapped(tmp_path, element, step):
    """Steps no int64 holds (a mutation fuzz): a fixed interval of uint64 refused
    the whole file with an OverflowError naming no path; one whose later steps overflow,
    or explicit uint64 steps beyond 2**63, were served wrapped to negative steps, in
    silence. The frames are numbered 0..n-1, said; the rest of the file is as stored."""
    path = _base(str(tmp_path / "huge.h5md"))
    with h5py.File(path, "r+") as f:
        for el in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
            _replace(f[el], "step", STEPS)  # each its own, not hard links
        _replace(f[element], "step", step)
        if np.ndim(step) == 0:
            f[element]["step"].attrs["offset"] = 0
            _replace(f[element], "time", 0.5)
    with pytest.warns(H5MDConformanceWarning, match=rf"\[/?{element}/step\]: .*64-bit"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        group = tree["observables" if element.startswith("obs") else "particles/g"]
        np.testing.assert_array_equal(group.step, np.arange(N_FRAMES))
        np.testing.assert_array_equal(tree["particles/g"].position, POS)
        np.testing.assert_array_equal(tree["observables"].energy, ENERGY)


def test_float16_steps_are_converted_without_a_numpy_warning(tmp_path):
    """Whole steps stored as float16 (a mutation fuzz): the check that they fit
    int64 compared them with 2**63 in float16, and numpy warned of an overflow."""
    path = _base(str(tmp_path / "f16.h5md"))
    with h5py.File(path, "r+") as f:
        _replace(f[f"{G}/position"], "step", STEPS.astype(np.float16))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with xr.open_dataset(path, engine="h5md") as ds:
            np.testing.assert_array_equal(ds.step, STEPS)
    assert all(isinstance(w.message, H5MDConformanceWarning) for w in record), \
        [str(w.message) for w in record]


@pytest.mark.parametrize("link", [h5py.SoftLink("/nowhere"), h5py.ExternalLink("other.h5", "/")],
                         ids=["dangling", "external"])
def test_a_parameters_link_that_cannot_be_followed_leaves_out_parameters_alone(tmp_path, link):
    """/parameters as a dangling or external link (a mutation fuzz) refused the
    whole file, h5mdx info too, where a dangling or external /observables is left out with
    a warning: /parameters is left out so, the particles open, and strict=True refuses."""
    from h5mdx.cli import main

    path = _base(str(tmp_path / "par.h5md"))
    with h5py.File(path, "r+") as f:
        f["parameters"] = link
    with pytest.warns(H5MDConformanceWarning, match=r"\[/\]: 'parameters' is .*; left out"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.position, POS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        with xr.open_datatree(path, engine="h5md") as tree:
            assert "parameters" not in tree.children
    assert main(["info", path]) == 0
    with pytest.raises(H5MDFormatError, match="'parameters'"):
        xr.open_dataset(path, engine="h5md", strict=True)


# ----------------------------------------------------------------------------- MDAnalysis


def _mda_positions(path: str) -> np.ndarray | None:
    """All positions MDAnalysis' H5MD reader gives (Å), or None where it cannot open it."""
    reader_mod = pytest.importorskip("MDAnalysis.coordinates.H5MD")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = reader_mod.H5MDReader(path)
            try:
                return np.stack([ts.positions.copy() for ts in reader])
            finally:
                reader.close()
    except Exception:  # noqa: BLE001 - any failure means MDAnalysis does not open it
        return None


def _h5mdx_positions(path: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        tree = xr.open_datatree(path, engine="h5md", convert_units=True)
    with tree:
        groups = [n for n in tree["particles"].children.values() if "position" in n]
        return groups[0]["position"].values


def _znh5md_file(path: str) -> str:
    znh5md = pytest.importorskip("znh5md")
    ase = pytest.importorskip("ase")
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(3)
    frames = []
    for i in range(5):
        atoms = ase.Atoms("H2O", positions=rng.normal(size=(3, 3)),
                          cell=np.diag([5.0, 6.0, 7.0 + i]), pbc=True)
        atoms.calc = SinglePointCalculator(atoms, energy=float(i),
                                           forces=rng.normal(size=(3, 3)))
        frames.append(atoms)
    znh5md.IO(path).extend(frames)
    return path


def _public_files() -> dict[str, str]:
    datafiles = pytest.importorskip("MDAnalysisTests.datafiles")
    return {name: getattr(datafiles, name)
            for name in ("H5MD_xvf", "H5MD_energy", "H5MD_malformed", "COORDINATES_H5MD")}


@pytest.fixture(scope="module")
def wild_files(tmp_path_factory, adk_h5md, adk_pyh5md):
    """Files of other writers and every trouble file: {label: path}."""
    tmp = tmp_path_factory.mktemp("wild")
    files = dict(_public_files())
    files["MDAnalysis H5MDWriter"] = adk_h5md
    files["pyh5md"] = adk_pyh5md
    files["znh5md"] = _znh5md_file(str(tmp / "znh5md.h5"))
    for kind in TROUBLES:
        # no 3-D positions to compare; MDAnalysis reads step[k] for frame k (no fixed
        # interval): it stops after the one entry
        if kind not in ("positions not vectors", "fixed step and time as arrays of one"):
            files[f"trouble: {kind}"] = _trouble_file(tmp, kind)
    return files


def test_every_file_mdanalysis_opens_h5mdx_opens_alike(wild_files):
    opened_by_mda = 0
    for label, path in wild_files.items():
        mine = _h5mdx_positions(path)  # h5mdx opens every one of them
        assert mine.shape[-1] == 3, label
        theirs = _mda_positions(path)
        if theirs is None:
            continue
        opened_by_mda += 1
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-5, err_msg=label)
    assert opened_by_mda >= 7  # the public files and the other writers' files at least


# ----------------------------------------------------------------------------- h5mdx info


def test_info_lists_conformance_problems(tmp_path, capsys):
    from h5mdx.cli import main

    path = _trouble_file(tmp_path, "box without dimension")
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "conformance: 1 problem(s)" in out
    assert f"{G}/box: box has no 'dimension' attribute" in out
    assert "assumed: no box dimension: taken from edges shape (3)" in out
    assert main(["info", "--json", path]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == [{
        "path": f"{G}/box", "problem": "box has no 'dimension' attribute",
        "assumed": "no box dimension: taken from edges shape (3)", "minor": False,
        "departure": True,
    }]


def test_info_of_a_conformant_file_lists_none(tmp_path, capsys):
    from h5mdx.cli import main

    assert main(["info", "--json", _base(str(tmp_path / "ok.h5md"))]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


# ----------------------------------------------------------------------------- author, creator


def _no_author(f):
    del f["h5md/author"]


def _author_without_name(f):
    del f["h5md/author"].attrs["name"]


def _creator_without_version(f):
    del f["h5md/creator"].attrs["version"]


def _no_creator(f):
    del f["h5md/creator"]


@pytest.mark.parametrize("mutate, hpath, message", [
    (_no_author, "/h5md/author", "the /h5md group has no 'author' group"),
    (_author_without_name, "/h5md/author", "/h5md/author has no 'name' attribute"),
    (_creator_without_version, "/h5md/creator", "/h5md/creator has no 'version' attribute"),
    (_no_creator, "/h5md/creator", "the /h5md group has no 'creator' group"),
])
def test_missing_author_or_creator_is_minor(tmp_path, capsys, mutate, hpath, message):
    """H5MD requires /h5md/author (name) and /h5md/creator (name, version). Their lack
    costs no data: the file opens without a warning, strict=True refuses it, and
    ``h5mdx info`` lists it."""
    from h5mdx.cli import main

    path = _base(str(tmp_path / "meta.h5md"))
    with h5py.File(path, "r+") as f:
        mutate(f)
    with _no_warning_open(path) as ds:
        np.testing.assert_array_equal(ds.position, POS)
    with pytest.raises(H5MDFormatError, match=re.escape(message)) as err:
        xr.open_dataset(path, engine="h5md", strict=True)
    assert err.value.h5path == hpath and path in str(err.value)
    [problem] = scan(path).problems
    assert problem.minor and problem.path == hpath
    assert main(["info", path]) == 0
    assert "(minor: not warned)" in capsys.readouterr().out


def _h5md_10_without_time(f):
    f["h5md"].attrs["version"] = np.array([1, 0], dtype=np.int32)
    for where in (f"{G}/position", f"{G}/box/edges", "observables/energy"):
        del f[where]["time"]


def _h5md_10_fixed_step(f):
    f["h5md"].attrs["version"] = np.array([1, 0], dtype=np.int32)
    pos = f[f"{G}/position"]
    del pos["step"]
    pos.create_dataset("step", data=np.int64(10)).attrs["offset"] = np.int64(0)
    for where in (f"{G}/box/edges", "observables/energy"):
        _replace(f[where], "step", pos["step"])


def _boundary_one_string(f):
    f[f"{G}/box"].attrs["boundary"] = "periodic"  # what ESPResSo writes


def _dimension_float(f):
    f[f"{G}/box"].attrs["dimension"] = 3.0


def _version_of_three(f):
    f["h5md"].attrs["version"] = np.array([1, 1, 0])


@pytest.mark.parametrize("mutate, hpath, message", [
    (_h5md_10_without_time, f"{G}/position", "H5MD 1.0 asks for a 'time'"),
    (_h5md_10_fixed_step, f"{G}/position/step", "fixed-interval sampling"),
    (_boundary_one_string, f"{G}/box", "box 'boundary' is one string ('periodic')"),
    # strict=True let these through
    (_dimension_float, f"{G}/box", "box 'dimension' is 3.0, not an integer"),
    (_version_of_three, "/h5md", "the H5MD version is [1, 1, 0], not two integers"),
])
def test_departures_that_cost_no_data_are_minor(tmp_path, mutate, hpath, message):
    """A file that says it is H5MD 1.0 is held to 1.0's rules where they differ from 1.1's
    (a 'time' beside every 'step'; no fixed-interval sampling), and a box 'boundary' of
    one string is one for every dimension: minor departures, read quietly, refused by
    strict (found by audits)."""
    path = _base(str(tmp_path / "v10.h5md"))
    with h5py.File(path, "r+") as f:
        mutate(f)
    with _no_warning_open(path) as ds:
        np.testing.assert_array_equal(ds.step, STEPS)
    [problem] = scan(path).problems
    assert problem.minor and problem.path == hpath and message in problem.message
    with pytest.raises(H5MDFormatError, match=re.escape(message)):
        xr.open_dataset(path, engine="h5md", strict=True)


@pytest.mark.parametrize("step_offset, time_offset", [
    (np.array([100]), np.array([2.0])), (100.0, 2.0), (np.array([100.0]), np.float32(2.0)),
], ids=["arrays of one", "float step offset", "array of one float"])
def test_fixed_sampling_offsets_of_other_forms_are_minor(tmp_path, step_offset, time_offset):
    """A fixed interval's ``offset`` as an array of one value, or a step's as a float of a
    whole number, says the same as H5MD's scalar: read quietly (refused by strict). Each
    numbered the frames 0..n-1 and dropped the times."""
    path = _base(str(tmp_path / "fixed.h5md"))
    with h5py.File(path, "r+") as f:
        pos = f[f"{G}/position"]
        del pos["step"], pos["time"]
        pos.create_dataset("step", data=np.int64(10)).attrs["offset"] = step_offset
        pos.create_dataset("time", data=0.5).attrs["offset"] = time_offset
        for where in (f"{G}/box/edges", "observables/energy"):
            _replace(f[where], "step", pos["step"])
            _replace(f[where], "time", pos["time"])
    with _no_warning_open(path) as ds:
        np.testing.assert_array_equal(ds.step, [100, 110, 120])
        assert ds.step.dtype == np.int64
        np.testing.assert_array_equal(ds.time, [2.0, 2.5, 3.0])
        np.testing.assert_array_equal(ds.position, POS)
    problems = scan(path).problems
    assert problems and all(p.minor for p in problems), problems
    with pytest.raises(H5MDFormatError, match=re.escape(f"[{G}/position/step]: the 'offset' "
                                                        "of 'step'")):
        xr.open_dataset(path, engine="h5md", strict=True)


def test_step_and_time_as_columns_are_read_as_such(tmp_path):
    """``step`` and ``time`` stored as columns, shape ``(n, 1)``, hold one per frame as
    ``(n,)`` would: read quietly (refused by strict). The frames were numbered 0..n-1 and
    the times dropped."""
    path = _base(str(tmp_path / "columns.h5md"))
    with h5py.File(path, "r+") as f:
        pos = f[f"{G}/position"]
        _replace(pos, "step", STEPS.reshape(-1, 1))
        _replace(pos, "time", TIMES.reshape(-1, 1))
        for where in (f"{G}/box/edges", "observables/energy"):
            _replace(f[where], "step", pos["step"])
            _replace(f[where], "time", pos["time"])
    with _no_warning_open(path) as ds:
        np.testing.assert_array_equal(ds.step, STEPS)
        np.testing.assert_array_equal(ds.time, TIMES)
        np.testing.assert_array_equal(ds.position, POS)
    problems = scan(path).problems
    assert {p.path for p in problems} == {f"{G}/position/step", f"{G}/position/time"}
    assert all(p.minor for p in problems), problems
    with pytest.raises(H5MDFormatError, match=re.escape("'step' has shape (3, 1), not (3,)")):
        xr.open_dataset(path, engine="h5md", strict=True)


def _version_string(f):
    f["h5md"].attrs["version"] = "1.0"


def _version_dataset(f):
    """H5MD's drafts before 1.0: "'version' is a dimension [2] integer dataset"."""
    del f["h5md"].attrs["version"]
    f["h5md"].create_dataset("version", data=np.array([1, 0], dtype=np.int32))


@pytest.mark.parametrize("mutate, message", [
    (_version_string, "the H5MD version is the string '1.0'"),
    (_version_dataset, "the H5MD version is a dataset /h5md/version"),
])
def test_a_version_as_text_or_dataset_is_that_version(tmp_path, mutate, message):
    """A version written as the text "1.0", or as a dataset, is H5MD 1.0: it was read as
    1.1 ("cannot understand", "no 'version' attribute") and served as h5md_version 1.1
   . A minor departure: strict refuses it."""
    path = _base(str(tmp_path / "version.h5md"))
    with h5py.File(path, "r+") as f:
        mutate(f)
    with _no_warning_open(path) as ds:
        assert ds.attrs["h5md_version"] == "1.0"
        np.testing.assert_array_equal(ds.step, STEPS)
    info = scan(path)
    assert info.version == (1, 0)
    [problem] = info.problems
    assert problem.minor and problem.path == "/h5md" and message in problem.message
    with pytest.raises(H5MDFormatError, match=re.escape(message)):
        xr.open_dataset(path, engine="h5md", strict=True)


def test_datasets_beside_a_timed_value_are_said_to_be_left_out(tmp_path):
    """H5MD's time-averaged data (its discussion of extensions) keeps a mean's ``error``
    and ``count`` beside ``value``, ``step`` and ``time``: they were left out in silence.
    Warned once, naming them; H5MD does not forbid them, so strict opens the file."""
    path = _base(str(tmp_path / "averaged.h5md"))
    with h5py.File(path, "r+") as f:
        f["observables/energy/error"] = ENERGY / 10
        f["observables/energy/count"] = np.array([50, 50, 50])
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md", group="observables")
    with ds:
        np.testing.assert_array_equal(ds.energy, ENERGY)
        np.testing.assert_array_equal(ds.step, STEPS)
    [found] = _matching(record, path, "/observables/energy")
    assert "'count', 'error'" in found and found.endswith("left out"), found
    with pytest.warns(H5MDConformanceWarning, match="left out"):
        ds = xr.open_dataset(path, engine="h5md", group="observables", strict=True)
    with ds:
        np.testing.assert_array_equal(ds.energy, ENERGY)
    with _no_warning_open(path) as ds:  # the particles: nothing of theirs to say
        np.testing.assert_array_equal(ds.position, POS)


def test_frames_numbered_for_want_of_a_step_do_not_take_the_time_axis(tmp_path):
    """The group's ``time`` comes from an element whose file gives its sampling, not from
    one numbered 0..n-1 because it has no ``step``."""
    path = _base(str(tmp_path / "obs.h5md"))
    with h5py.File(path, "r+") as f:
        f.create_dataset("observables/density/value", data=ENERGY * 2)  # sorts first
    with pytest.warns(H5MDConformanceWarning, match=r"\[/observables/density\]"):
        ds = xr.open_dataset(path, engine="h5md", group="observables")
    with ds:
        assert ds.energy.dims == ("time",) and ds.density.dims == ("time_density",)
        np.testing.assert_array_equal(ds.time, TIMES)
        np.testing.assert_array_equal(ds.step, STEPS)


def _box_pbc(f):
    """znh5md writes ASE's per-frame ``pbc`` as a time-dependent ``box/pbc`` of 0/1 floats,
    sampled as the positions."""
    pbc = f[f"{G}/box"].create_group("pbc")
    pbc["value"] = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    pbc["step"], pbc["time"] = f[f"{G}/position/step"], f[f"{G}/position/time"]


def _check_box_pbc(ds):
    assert ds.box_pbc.dims == ("time", "spatial")
    np.testing.assert_array_equal(ds.box_pbc, [[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    _check_box(ds)


@pytest.mark.parametrize("mutate, check, name", [
    (_box_offset, _check_box_offset, "offset"), (_box_pbc, _check_box_pbc, "pbc")])
def test_other_writers_box_members_are_read_as_minor_departures(tmp_path, mutate, check,
                                                                name):
    """HALMD writes the box's lower corner as ``box/offset``, znh5md the periodicity of
    each frame as ``box/pbc``; H5MD 1.1 has neither: they are served as ``box_offset`` and
    ``box_pbc`` without a warning (listed by scan, refused by strict). znh5md's was left
    out with a warning."""
    path = _base(str(tmp_path / f"{name}.h5md"))
    with h5py.File(path, "r+") as f:
        mutate(f)
    with _no_warning_open(path) as ds:
        check(ds)
    [problem] = scan(path).problems
    assert problem.minor and problem.path == f"{G}/box/{name}"
    with pytest.raises(H5MDFormatError, match=name):
        xr.open_dataset(path, engine="h5md", strict=True)
    out = tmp_path / f"{name}_copy.h5md"  # ds.md.to_h5md keeps it where it was
    with _no_warning_open(path) as ds, pytest.warns(UserWarning,
                                                    match=f"box_{name} as box/{name}"):
        ds.md.to_h5md(out)
    with _no_warning_open(out) as copy:
        check(copy)


def test_a_filter_this_hdf5_cannot_load_is_named_at_open(tmp_path):
    """An element compressed with a filter HDF5 lacks opens with a warning naming the
    filter and how to get it; the rest of the group reads."""
    from h5mdx.errors import H5MDReadError

    path = _base(str(tmp_path / "filter.h5md"))
    with h5py.File(path, "r+") as f:
        el = f.create_group(f"{G}/velocity")
        dset = el.create_dataset("value", shape=POS.shape, dtype="f8", chunks=POS.shape,
                                 compression=32999, allow_unknown_filter=True)
        dset.id.write_direct_chunk((0, 0, 0), POS.tobytes())
        el["step"] = f[f"{G}/position/step"]
    with pytest.warns(H5MDConformanceWarning, match=r"\[/particles/g/velocity/value\]: "
                      r"compressed with HDF5 filter 32999 .*pip install hdf5plugin"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.position, POS)
        with pytest.raises(H5MDReadError, match="velocity"):
            ds.velocity.values  # noqa: B018


def test_stored_chunks_are_counted_once_per_dataset(tmp_path, monkeypatch):
    """HDF5 walks a dataset's whole chunk index to count its stored chunks; the size
    check and the unwritten-frames check of a compressed, partly written ``value``
    share one count (the scan remembers it), and both still judge by it."""
    from h5mdx.format.h5md import _storage as h5md

    monkeypatch.setattr(h5md, "MAX_ABSENT_ELEMENTS", 1)  # let the size check ask too
    calls: list[tuple[str, bool]] = []
    count = h5md._stored_chunks

    def counting(c, dset):
        calls.append((dset.name, h5md._addr(dset) in c.stored_chunks))
        return count(c, dset)

    monkeypatch.setattr(h5md, "_stored_chunks", counting)
    path = _base(str(tmp_path / "gz.h5md"))
    with h5py.File(path, "r+") as f:
        el = f.create_group(f"{G}/velocity")
        dset = el.create_dataset("value", shape=POS.shape, dtype="f8",
                                 chunks=(1, N_ATOMS, 3), compression="gzip")
        dset[:2] = POS[:2]  # the writer stopped before the last frame
        el["step"] = f[f"{G}/position/step"]
    [problem] = scan(path).problems
    assert problem.path == f"{G}/velocity/value"
    assert "stores 2 of its 3 chunks" in problem.message
    # asked by every check (the frames stored, the size, the unwritten chunks), counted
    # by HDF5 the first time only
    assert len(calls) >= 2 and {name for name, _ in calls} == {f"{G}/velocity/value"}
    assert [hit for _, hit in calls] == [False] + [True] * (len(calls) - 1)


def test_a_problem_of_a_shared_step_reaches_every_group_that_uses_it(tmp_path):
    """A float ``step`` hard-linked into an observable is noted once, under the first
    link's path; an open of the observables alone still warns of it (it converted their
    steps too), and the whole tree warns once."""
    path = _base(str(tmp_path / "shared.h5md"))
    with h5py.File(path, "r+") as f:
        _replace(f[f"{G}/position"], "step", STEPS.astype(np.float64))
        for other in (f"{G}/box/edges", "observables/energy"):  # hard links again
            _replace(f[other], "step", f[f"{G}/position/step"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with xr.open_dataset(path, engine="h5md", group="observables") as ds:
            np.testing.assert_array_equal(ds.step, STEPS)
    assert [str(w.message) for w in caught] == [
        f"{path} [{G}/position/step]: 'step' must be integer, not float64; converted to "
        "integers (the same dataset serves 2 other element(s), hard links)"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xr.open_datatree(path, engine="h5md").close()
    assert len(caught) == 1


def test_the_frames_stored_are_found_without_chunk_iter(tmp_path):
    """Debian's HDF5 1.10 (the MPI build) has no H5Dchunk_iter: the last stored chunk row
    is found by a binary search over the rows' first chunks (the first CI run found
    'value grown ahead' read whole there)."""
    from h5mdx.format.h5md import _storage as h5md

    path = _trouble_file(tmp_path, "value grown ahead")
    with h5py.File(path, "r") as f:
        value = f[f"{G}/position/value"]
        # exact where this HDF5 iterates chunks (>= 1.12.3; not Debian's 1.10)
        assert h5md._end_of_stored_rows(value) == (N_FRAMES,
                                                   hasattr(value.id, "chunk_iter"))
        assert h5md._end_of_stored_rows(WithoutChunkIter(value)) == (N_FRAMES, False)


@pytest.mark.parametrize("direct_read", ["1", "0"])
def test_a_value_grown_ahead_absurdly_reads_its_frames(tmp_path, monkeypatch, direct_read):
    """Grown to 10^9 frames, 3 written: the 3 frames, read without tables sized by the
    declared chunks (the direct reader's would take 8 GB); nothing written at all is still
    refused (the fuzzer found a MemoryError when a lone step stood for a frame)."""
    monkeypatch.setenv("H5MDX_DIRECT_READ", direct_read)
    path = _base(str(tmp_path / "absurd.h5md"))
    with h5py.File(path, "r+") as f:
        pos = f[f"{G}/position"]
        del pos["value"]
        value = pos.create_dataset("value", shape=(10**9, N_ATOMS, 3),
                                   maxshape=(None, N_ATOMS, 3), dtype="f8",
                                   chunks=(1, N_ATOMS, 3))
        value[:N_FRAMES] = POS
        value.attrs["unit"] = "nm"
    with pytest.warns(H5MDConformanceWarning, match="declares 1000000000 frames but stores "
                      "none after frame 2"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.position.values, POS)
        np.testing.assert_array_equal(ds.step, STEPS)
    with h5py.File(path, "r+") as f:
        del f[f"{G}/position/value"]
        f[f"{G}/position"].create_dataset("value", shape=(10**9, N_ATOMS, 3), dtype="f8",
                                          chunks=(1, N_ATOMS, 3))
    with pytest.warns(H5MDConformanceWarning, match="refuses to trust the declared size"):
        xr.open_dataset(path, engine="h5md").close()


def test_frames_stored_where_chunks_overhang_or_rows_are_missing(tmp_path, monkeypatch):
    """Chunks that overhang the atoms (stored bytes above the data's) hid frames grown
    ahead; HDF5 1.10's binary search cannot see a missing middle row, and then reads the
    value whole rather than cut real frames; nested elements served by one name: one
    left out, with a note."""
    from h5mdx.format.h5md import _storage as h5md

    path = str(tmp_path / "overhang.h5md")
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group(G)
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        value = g.create_dataset("position/value", shape=(100, 5, 3), dtype="f8",
                                 chunks=(10, 4, 3), maxshape=(None, 5, 3))
        value[:80] = 1.0
        gap = g.create_dataset("velocity/value", shape=(40, 5, 3), dtype="f8",
                               chunks=(4, 5, 3))
        gap[:16], gap[20:] = 1.0, 2.0  # chunk row 4 never written
        for name, (a, b) in (("lees/edwards_offset", (1.0, 1.0)),
                             ("lees_edwards/offset", (2.0, 2.0))):
            g[f"{name}/value"] = np.array([a, b])
    info = scan(path)
    assert info.particles["g"].elements["position"].shape[0] == 80
    assert info.particles["g"].elements["velocity"].shape[0] == 40
    assert info.particles["g"].elements["lees_edwards_offset"].path.endswith(
        "lees/edwards_offset")
    assert any("it would be served as 'lees_edwards_offset'" in p.message
               for p in info.problems)

    with h5py.File(path, "r") as f:  # HDF5 1.10's search, stopped at the gap
        monkeypatch.setattr(h5md, "_end_of_stored_rows", lambda value: (16, False))
        c = h5md._Ctx(f)
        # 9 chunks stored, not the 4 before row 16: rows missing before it, not cut
        assert h5md._frames_stored(c, f[f"{G}/velocity/value"], None) is None
        monkeypatch.setattr(h5md, "_end_of_stored_rows", lambda value: (80, False))
        assert h5md._frames_stored(c, f[f"{G}/position/value"], None) == 80  # a prefix


def test_chunks_missing_within_rows_cost_no_look_up(tmp_path, monkeypatch):
    """ESPResSo grows the particle axis: frames of fewer particles leave chunks unwritten
    within their rows. Fewer missing chunks than a chunk row holds cannot leave the last
    row out, so no look-up of it (a version-1 B-tree walk, 10 ms at 100k chunks) is made;
    a whole row missing still is looked up and cut."""
    from h5mdx.format.h5md import _storage as h5md

    path = str(tmp_path / "rows.h5")
    with h5py.File(path, "w") as f:
        within = f.create_dataset("within", shape=(6, 4, 3), dtype="f8", chunks=(1, 2, 3))
        within[1:], within[0, :2] = 1.0, 1.0  # frame 0 held 2 particles
        ahead = f.create_dataset("ahead", shape=(6, 4, 3), dtype="f8", chunks=(1, 2, 3))
        ahead[:5] = 1.0  # grown to 6 frames, 5 written
    looked = []
    real = h5md._chunk_row_stored
    monkeypatch.setattr(h5md, "_chunk_row_stored",
                        lambda value, k: looked.append(value.name) or real(value, k))
    with h5py.File(path, "r") as f:
        c = h5md._Ctx(f)
        assert h5md._frames_stored(c, f["within"], None) is None
        assert looked == []
        assert h5md._frames_stored(c, f["ahead"], None) == 5
        assert looked[0] == "/ahead"


def test_unfiltered_chunks_are_counted_from_their_bytes(tmp_path):
    """HDF5 walks the whole chunk index to count the chunks stored, and again to sum their
    bytes (16 ms each at 100k chunks, per element, per open). Unfiltered chunks each take
    a chunk's bytes: their count is the bytes over that, with no second walk; filtered
    ones are counted."""
    from h5mdx.format.h5md import _storage as h5md

    path = str(tmp_path / "count.h5")
    with h5py.File(path, "w") as f:
        for name, filters in (("plain", {}), ("gzip", {"compression": "gzip"})):
            dset = f.create_dataset(name, shape=(7, 5, 3), dtype="f4", chunks=(2, 3, 3),
                                    **filters)  # 4 x 2 chunks, overhanging both axes
            dset[2:] = 1.0
            dset[:2, :3] = 1.0  # one chunk of frames 0-1 never written
    with h5py.File(path, "r") as f:
        c = h5md._Ctx(f)
        assert h5md._chunk_count(c, f["plain"], f["plain"].shape) == (8, 7)
        assert f["plain"].id.get_num_chunks() == 7
        assert c.stored_chunks == {}  # not counted by HDF5
        assert h5md._chunk_count(c, f["gzip"], f["gzip"].shape) == (8, 7)
        assert list(c.stored_chunks.values()) == [7]


def test_nomad_unit_factor_and_program(tmp_path, capsys):
    """H5MD-NOMAD writes a ``unit_factor`` beside each ``unit`` (energies in 1000 joule:
    nomad-coe/nomad docs/examples/computational_data/h5md_howto.md). It was ignored:
    converted values were off by that factor, with no warning. Its
    ``/h5md/program`` (the MD program) is served beside the creator."""
    path = _base(str(tmp_path / "nomad.h5md"))
    with h5py.File(path, "r+") as f:
        f[f"{G}/position/value"].attrs.update({"unit": "nanometer", "unit_factor": 0.1})
        f["observables/energy/value"].attrs.update({"unit": "joule", "unit_factor": 1000.0})
        f["parameters/cutoff"] = 12.0
        f["parameters/cutoff"].attrs.update({"unit": "nanometer", "unit_factor": 0.1})
        f[f"{G}/box/edges/value"].attrs["unit_factor"] = "ten"  # not a number
        program = f["h5md"].create_group("program")  # the MD program; creator: h5py
        program.attrs.update({"name": "OpenMM", "version": "7.7.0"})
    with pytest.warns(H5MDConformanceWarning, match=r"box/edges/value\]: 'unit_factor' "
                      r"'ten' is not a finite number; unit_factor ignored: unit 'nm'"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.position.attrs["units"] == "0.1 nanometer"  # as stored
        assert (ds.attrs["program_name"], ds.attrs["program_version"]) == ("OpenMM", "7.7.0")
        assert "unit_factor" not in ds.position.attrs
        np.testing.assert_array_equal(ds.position, POS)
    with pytest.warns(H5MDConformanceWarning, match="unit_factor ignored"):
        tree = xr.open_datatree(path, engine="h5md", convert_units=True)
    with tree:
        ds = tree["particles/g"]
        assert ds.position.attrs["units"] == "Angstrom"
        np.testing.assert_allclose(ds.position, POS)  # 0.1 nm = 1 Angstrom
        np.testing.assert_allclose(ds.box_edges, EDGES * 10)  # nm, its factor ignored
        energy = tree["observables"].energy
        assert energy.attrs["units"] == "kJ mol-1"
        np.testing.assert_allclose(energy, ENERGY * 6.02214076e23)  # kJ each: x N_A
        assert float(tree["parameters"].cutoff) == pytest.approx(12.0)
        assert tree["parameters"].cutoff.attrs["units"] == "Angstrom"
    from h5mdx.cli import main

    assert main(["info", path]) == 0
    assert "program: OpenMM 7.7.0" in capsys.readouterr().out


def test_datasets_beside_a_value_without_step_are_named(tmp_path):
    """Datasets beside a 'value' with no 'step' that is not a function of them (H5MD-NOMAD's
    'bins', here of another length: tests/engine/test_nomad.py has those that are): served
    on numbered frames, and the datasets left out are named (they went in silence; found
    by an audit)."""
    path = _base(str(tmp_path / "rdf.h5md"))
    with h5py.File(path, "r+") as f:
        rdf = f.create_group("observables/rdf")
        rdf["value"], rdf["bins"] = np.ones(5), np.linspace(0.0, 1.0, 4)
        rdf["frame_start"] = 0
    with pytest.warns(H5MDConformanceWarning, match=r"\[/observables/rdf\]: .*no step: frames "
                      r"numbered 0\.\.n-1; beside 'value', 'bins', 'frame_start' left out"):
        xr.open_dataset(path, engine="h5md", group="observables").close()


def test_a_time_of_absurd_declared_size_leaves_the_frames(tmp_path):
    """A 'time' grown to 10^8 entries, 3 written: the positions were left out with it;
    now only 'time' is ignored, with a warning (found reviewing the GROMACS fix)."""
    path = _base(str(tmp_path / "long_time.h5md"))
    with h5py.File(path, "r+") as f:
        pos = f[f"{G}/position"]
        del pos["time"]
        time = pos.create_dataset("time", shape=(10**8,), maxshape=(None,), chunks=(1000,),
                                  dtype="f8", fillvalue=-1.0)
        time[:N_FRAMES] = TIMES
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md")
    assert [re.sub(r".*\]: ", "", str(w.message)) for w in record] == [
        "'time' has 100000000 entries but 'value' has 3 frames; the first 3 times used",
        "declares shape (100000000,) but stores data for at most 1000 of its 100000000 "
        "elements: the data were never written (an absurd declared size, or a writer that "
        "died); h5mdx refuses to trust the declared size; 'time' ignored"]
    with ds:
        np.testing.assert_array_equal(ds.position, POS)
        np.testing.assert_array_equal(ds.step, STEPS)


def test_a_time_not_yet_written_past_the_steps_is_no_time(tmp_path):
    """GROMACS writes a frame's value, step, then time, into datasets grown 20 frames at a
    time with fill value -1: a run stopped (or a live file read) before the last time was
    served with time -1 for that frame, without a warning. Now the
    frame is left out, as for a ``time`` one short; two short in a finished file, ``time``
    is ignored; a live file is cut to the frames with times."""
    path = str(tmp_path / "gmx.h5md")
    steps, times, values = np.arange(5) * 10, np.arange(5) * 0.5, np.arange(5.0)

    def write(n_times):
        with h5py.File(path, "w", libver="latest") as f:
            f.create_group("h5md").attrs["version"] = np.array([1, 1])
            for role in ("author", "creator"):
                f.create_group(f"h5md/{role}").attrs["name"] = "GROMACS"
            f["h5md/creator"].attrs["version"] = "2026"
            f.create_group(f"{G}/box").attrs["dimension"] = 3
            f[f"{G}/box"].attrs["boundary"] = np.array([b"none"] * 3)
            for name, data, n in (("value", values, 5), ("step", steps, 5),
                                  ("time", times, n_times)):
                shape = (20, 1, 3) if name == "value" else (20,)
                dset = f.create_dataset(f"{G}/position/{name}", shape=shape, dtype=data.dtype,
                                        maxshape=(None, *shape[1:]), fillvalue=-1,
                                        chunks=shape)
                dset[:n] = data[:n, None, None] if name == "value" else data[:n]

    write(4)
    with pytest.warns(H5MDConformanceWarning) as record:  # the step's fill too
        ds = xr.open_dataset(path, engine="h5md")
    assert any(re.search(r"position/time\]: 'time' holds its fill value -1.0 from frame 4 on"
                         r".*the last frame of 'value' left out", str(w.message))
               for w in record)
    with ds:
        np.testing.assert_array_equal(ds.time, times[:4])
        np.testing.assert_array_equal(ds.step, steps[:4])
        np.testing.assert_array_equal(ds.position[:, 0, 0], values[:4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)  # the step's fill
        with xr.open_dataset(path, engine="h5md", swmr=True) as ds:
            np.testing.assert_array_equal(ds.time, times[:4])
            np.testing.assert_array_equal(ds.position[:, 0, 0], values[:4])
        write(3)
        with xr.open_dataset(path, engine="h5md", swmr=True) as ds:
            np.testing.assert_array_equal(ds.time, times[:3])
            np.testing.assert_array_equal(ds.step, steps[:3])
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md")
    assert any(re.search(r"time\]: .* from frame 3 on \(2 frame\(s\)\).*'time' ignored",
                         str(w.message)) for w in record)
    with ds:
        assert ds.sizes["time"] == 5 and (ds.time >= 0).all()


def test_creation_properties_are_read_from_the_list_h5py_keeps(tmp_path):
    """The scan reads a dataset's filters, fill value and layout from the creation
    property list h5py keeps for it (HDF5 copies the list at each ask, up to seven per
    element), and asks HDF5 for one where h5py keeps none."""
    from types import SimpleNamespace

    from h5mdx.format.h5md._storage import (
        _creation_plist,
        _fill_value,
        _filters,
        _layout,
        ensure_filters,
    )

    with h5py.File(tmp_path / "c.h5", "w") as f:
        d = f.create_dataset("x", data=np.arange(4.0), chunks=(2,), compression="gzip",
                             fillvalue=-1.0)
        assert _creation_plist(d) is _creation_plist(d)
        bare = SimpleNamespace(id=d.id, dtype=d.dtype, fillvalue=d.fillvalue)
        assert _filters(bare) == _filters(d) == ("deflate",)
        assert _fill_value(bare) == _fill_value(d) == -1.0
        assert _layout(bare) == _layout(d) == "chunked"
        assert ensure_filters(bare) == ensure_filters(d) == []


def test_a_scalar_observable_of_shape_t_1_1_is_served_per_frame(tmp_path):
    """GROMACS' writer gives every time-dependent block three axes: its lambda is
    ``/observables/lambda/value`` of shape (T, 1, 1), chunks of 20 frames (audit35 F5,
    from gmx_h5md_io.cpp). It came out as (time, lambda_dim_1, lambda_dim_2); now one
    number per frame on ``time``, lazily, with one warning, its blocks along time kept;
    a (T, 1, 3) value keeps its axes."""
    path = _base(str(tmp_path / "lambda.h5md"))
    lam = np.array([0.0, 0.25, 0.5])
    with h5py.File(path, "r+") as f:
        grp = f.create_group("observables/lambda")
        grp.create_dataset("value", data=lam.reshape(3, 1, 1), chunks=(2, 1, 1),
                           maxshape=(None, 1, 1))
        grp["step"], grp["time"] = f[f"{G}/position/step"], f[f"{G}/position/time"]
        f["observables/vector/value"] = np.ones((3, 1, 3))
        f["observables/vector/step"] = f[f"{G}/position/step"]
    with pytest.warns(H5MDConformanceWarning, match=r"/observables/lambda\]: holds one number "
                      r"per frame in a value of shape \(3, 1, 1\).*served per frame"):
        ds = xr.open_dataset(path, engine="h5md", group="observables", chunks={})
    with ds:
        assert ds["lambda"].dims == ("time",)
        assert len(ds["lambda"].chunks) == 1 and ds["lambda"].encoding["preferred_chunks"] \
            .keys() == {"time"}  # blocks of whole chunks along time
        np.testing.assert_array_equal(ds["lambda"].values, lam)
        np.testing.assert_array_equal(ds["lambda"].time, TIMES)
        assert ds["vector"].dims == ("time", "vector_dim_1", "vector_dim_2")
