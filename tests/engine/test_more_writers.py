"""Layouts of MindSPONGE and ESPResSo++ (found by audit37, from their writers' sources):
each failed in its own way, a whole group of observables lost, a box left out, per-atom
scalars with an extra axis."""

from __future__ import annotations

import json
import re
import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx
from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, ParticleOrderWarning

STEPS = np.array([0, 10, 20, 30], dtype=np.int32)
TIMES = np.array([0.0, 0.02, 0.04, 0.06], dtype=np.float32)


def _h5md(f, creator):
    h = f.create_group("h5md")
    h.attrs["version"] = np.array([1, 1], dtype=np.int32)
    h.create_group("author").attrs["name"] = "tests"
    c = h.create_group("creator")
    c.attrs["name"], c.attrs["version"] = creator, "1.0"


def _mindsponge(path, n_atoms):
    """MindSPONGE's exporter (mindscience MindSPONGE/src/sponge/data/export/h5md.py):
    create_trajectory() and create_obs_group() put the shared step and time directly in
    the particles and observables groups, create_element() hard-links them into each
    element; a run without barostat writes box/edges of shape (walkers, 3)."""
    rng = np.random.default_rng(3)
    pos = rng.random((len(STEPS), n_atoms, 3)).astype(np.float32)
    with h5py.File(path, "w") as f:
        _h5md(f, "MindSPONGE")
        traj = f.create_group("particles/trajectory")
        traj["step"], traj["time"] = STEPS, TIMES
        traj["time"].attrs["unit"] = b"ps"
        position = traj.create_group("position")
        position["value"] = pos
        position["value"].attrs["unit"] = b"nm"
        position["step"], position["time"] = traj["step"], traj["time"]
        box = traj.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = np.array([b"periodic"] * 3)
        box["edges"] = np.full((1, 3), 3.0, dtype=np.float32)
        box["edges"].attrs["unit"] = b"nm"
        obs = f.create_group("observables/trajectory")
        obs["step"], obs["time"] = STEPS, TIMES
        obs["particle_number"] = np.array([n_atoms], dtype=np.int32)
        for name, values in (("potential_energy", -100.0 - np.arange(4)),
                             ("temperature", 300.0 + np.arange(4))):
            el = obs.create_group(name)
            el["value"] = values.astype(np.float32)
            el["step"], el["time"] = obs["step"], obs["time"]
    return pos


@pytest.mark.parametrize("n_atoms", [5, 4], ids=["atoms-unlike-frames", "atoms-like-frames"])
def test_mindsponge_keeps_its_observables_its_box_and_no_steps_per_atom(tmp_path, n_atoms):
    """The observables group holding its elements' step and time was taken for a broken
    element and dropped whole; the particles group's were served on the atom axis
    (``step_element``) or left out as a particle-count mismatch; the (1, 3) box left out."""
    path = tmp_path / "sponge.h5"
    pos = _mindsponge(path, n_atoms)
    with pytest.warns(H5MDConformanceWarning, match=r"box/edges\]: box edges have shape "
                      r"\(1, 3\): a leading axis of length 1 .*read as fixed edges") as said:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(said) == 1
    with ds:
        assert "step_element" not in ds and "time_element" not in ds
        np.testing.assert_array_equal(ds.position.values, pos)
        np.testing.assert_array_equal(ds.step.values, STEPS)
        np.testing.assert_array_equal(ds.box_edges.values, [3.0, 3.0, 3.0])
        assert ds.box_edges.dims == ("spatial",)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs = xr.open_dataset(path, engine="h5md", group="observables/trajectory")
    with obs:
        np.testing.assert_array_equal(obs.temperature.values, 300.0 + np.arange(4))
        assert obs.potential_energy.dims == ("time",)
        np.testing.assert_allclose(obs.time.values, TIMES)
        assert "step_element" not in obs and int(obs.particle_number[0]) == n_atoms
    with pytest.raises(H5MDFormatError, match=r"/step\]: a 'step' or 'time' dataset directly "
                       "in a group of elements"):
        xr.open_dataset(path, engine="h5md", strict=True)


def test_espressopp_parallel_scalars_per_particle(tmp_path):
    """ESPResSo++'s DumpH5MDParallel (src/io/DumpH5MDParallel.cpp writeId, writeMass,
    writeQ) stores id, mass and charge as (1, N, 1), particles in cell order: they had an
    axis of their own, and ds.md.by_id() raised a bare xarray error."""
    ids = np.array([4, 1, 6, 2, 5, 3])
    pos = np.stack([ids + 0.1 * k for k in range(3)], axis=-1)[None].astype(np.float64)
    path = tmp_path / "espp.h5"
    with h5py.File(path, "w") as f:
        _h5md(f, "espressopp")
        atoms = f.create_group("particles/atoms")
        box = atoms.create_group("box")
        box.attrs["dimension"], box.attrs["boundary"] = 3, np.array([b"periodic"] * 3)
        box.create_dataset("edges", data=np.full(3, 10.0))
        step = time = None
        for name, value in (("position", pos), ("id", ids[None, :, None]),
                            ("mass", (ids % 2 + 1.0)[None, :, None]),
                            ("type", (ids % 3)[None, :, None])):
            el = atoms.create_group(name)
            el["value"] = value
            if step is None:
                el["step"], el["time"] = np.array([0]), np.array([0.0])
                step, time = el["step"], el["time"]
            else:
                el["step"], el["time"] = step, time
    with pytest.warns(H5MDConformanceWarning) as said:
        ds = xr.open_dataset(path, engine="h5md")
    assert sorted(str(w.message).split("[")[1].split("]")[0] for w in said) == [
        "/particles/atoms/id", "/particles/atoms/mass", "/particles/atoms/type"]
    assert all("trailing axis of length 1 (shape (1, 6, 1)" in str(w.message) for w in said)
    with ds:
        assert ds.id.dims == ds.mass.dims == ds.type.dims == ("time", "atom")
        np.testing.assert_array_equal(ds.type.values, (ids % 3)[None])
        ordered = ds.md.by_id()
        np.testing.assert_array_equal(ordered.id.values, [1, 2, 3, 4, 5, 6])
        np.testing.assert_allclose(ordered.position.values[0, :, 0], [1, 2, 3, 4, 5, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)  # said above
        lazy = xr.open_dataset(path, engine="h5md", chunks={})
    with lazy:
        np.testing.assert_array_equal(lazy.mass.values, (ids % 2 + 1.0)[None])


def test_espressopp_padding_is_said_where_the_order_varies_too(tmp_path):
    """Cell order in frame 1 and padded slots: one warning (the order), the series marked."""
    ids = np.array([[1, 2, 3, -1], [3, 1, 2, -1]])
    path = tmp_path / "padded.h5"
    with h5py.File(path, "w") as f:
        _h5md(f, "espressopp")
        atoms = f.create_group("particles/atoms")
        atoms.create_group("box").attrs["dimension"] = 3
        atoms["box"].attrs["boundary"] = np.array([b"none"] * 3)
        for name, value, fill in (("position", np.zeros((2, 4, 3)), None), ("id", ids, -1)):
            el = atoms.create_group(name)
            el.create_dataset("value", data=value, fillvalue=fill)
            el["step"], el["time"] = np.array([0, 1]), np.array([0.0, 1.0])
    with pytest.warns(ParticleOrderWarning, match="frames 0 and 1 hold other particles") as w:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(w) == 1
    with ds:
        assert "particle_order" in ds.position.attrs


def test_a_periodic_box_without_edges_is_said(tmp_path):
    """MindSPONGE's create_box() tests ``use_pbc is None`` on a bool: a run without a box
    is written periodic, with no edges; nothing said so."""
    path = tmp_path / "nopbc.h5"
    _mindsponge(path, 5)
    with h5py.File(path, "r+") as f:
        del f["particles/trajectory/box/edges"]
    with pytest.warns(H5MDConformanceWarning, match=r"box\]: the boundary is \['periodic', "
                      r"'periodic', 'periodic'\] but the box has no edges") as said:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(said) == 1
    with ds:
        assert "box_edges" not in ds


def test_a_scalar_id_leaves_the_group_readable(tmp_path):
    """A fixed id stored as a scalar: the order checks must pass it over (an index of its
    empty shape would have failed the whole file)."""
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "scalar_id.h5md", {"g": {
        "position": dict(value=np.zeros((2, 1, 3)), step=np.array([0, 1])),
        "id": dict(value=np.int64(7))}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.position.shape == (2, 1, 3)


def test_espresso3_masses_are_per_particle(tmp_path):
    """ESPResSo 3.x's scripts/h5md.tcl (h5md_init) writes each particle's mass once, as
    particles/atoms/mass/value (N,) with no step: it was read as N frames of one number
    (time_mass, steps 0..N-1), off the atom axis."""
    from h5mdx.testing import write_h5md

    masses = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    path = write_h5md(tmp_path / "tcl.h5md", {"atoms": {
        "position": dict(value=np.zeros((2, 6, 3)), step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        f.create_group("particles/atoms/mass")["value"] = masses
    with pytest.warns(H5MDConformanceWarning, match=r"atoms/mass\]: a per-particle element "
                      r"stored as a group .*read as time-independent") as said:
        ds = xr.open_dataset(path, engine="h5md")
    assert len(said) == 1
    with ds:
        assert ds.mass.dims == ("atom",) and "time_mass" not in ds.dims
        np.testing.assert_array_equal(ds.mass.values, masses)


@pytest.mark.parametrize("chunks", [None, (3, 3)])
def test_box_edges_never_written_are_no_box(tmp_path, chunks):
    """ESPResSo 3.x's h5md.tcl creates box/edges (3, 3) and never writes it, with no
    'dimension' or 'boundary': its zeros were served as a periodic box of size 0
   . Now: no edges, boundary 'none', the never-written edges said once."""
    from h5mdx.format.h5md import scan
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "tcl.h5md", {"atoms": {
        "position": dict(value=np.ones((2, 4, 3)), step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        del f["particles/atoms/box"]
        f.create_dataset("particles/atoms/box/edges", shape=(3, 3), dtype="f8",
                         chunks=chunks)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
        box = scan(path).particles["atoms"].box
    texts = [str(w.message) for w in said]
    assert sum("box/edges]: was created but never written" in t for t in texts) == 1
    assert not any("chunks" in t for t in texts)
    assert box is not None and box.edges is None and box.boundary == ("none",) * 3
    with ds:
        assert "box_edges" not in ds
        np.testing.assert_array_equal(ds.position.values, np.ones((2, 4, 3)))


def _periodic_box(path, edges, dimension=3):
    """A file of group 'atoms' whose box is periodic, of ``dimension``, with fixed
    ``edges``."""
    from h5mdx.testing import write_h5md

    path = write_h5md(path, {"atoms": {
        "position": dict(value=np.ones((2, 4, dimension)), step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        del f["particles/atoms/box"]
        box = f.create_group("particles/atoms/box")
        box.attrs["dimension"] = dimension
        box.attrs["boundary"] = np.array([b"periodic"] * dimension)
        box["edges"] = np.asarray(edges)
    return path


def test_box_edges_written_as_zeros_are_kept(tmp_path):
    """Edges written (even as zeros) or with a fill value of their own are data."""
    from h5mdx.format.h5md import scan

    path = _periodic_box(tmp_path / "zero.h5md", np.zeros(3))
    box = scan(path).particles["atoms"].box
    assert box is not None and box.edges is not None and box.boundary == ("periodic",) * 3


def _two_frames(path, **kwargs):
    """A file of 3 atoms and 2 frames, for what other writers put beside them."""
    from h5mdx.testing import write_h5md

    return write_h5md(path, {"all": {
        "position": dict(value=np.ones((2, 3, 3)), step=np.array([0, 1]))}}, **kwargs)


def _sarkas(path, frames=5, n=6):
    """Sarkas (murillo-group/sarkas, sarkas/utilities/io.py, init_particles_group):
    plain datasets straight in /particles, sharing its step and time."""
    rng = np.random.default_rng(3)
    pos = rng.random((frames, n, 3)) * 1e-6
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 0])
        g = f.create_group("particles")
        g.create_dataset("time", data=np.arange(frames) * 1e-15, maxshape=(None,))
        g.create_dataset("step", data=np.arange(frames, dtype=np.int64) * 10,
                         maxshape=(None,))
        for key, data in (("pos", pos), ("vel", pos * 2), ("acc", pos * 3)):
            g.create_dataset(key, data=data, chunks=(1, n, 3), maxshape=(None, n, 3))
        g["pos"].attrs["units"] = "m"
        g["species"] = np.arange(n, dtype=np.int32) % 2
        g["masses"] = np.full(n, 1.6e-27)
        b = g.create_group("box")
        b.attrs["dimensions"], b.attrs["boundary"] = 3, "periodic"
        b["edges"] = np.eye(3) * 1e-5
        b.attrs["units"] = "m"  # the length unit, on the group (init_box_group)
    return pos


def test_sarkas_particles_straight_in_particles(tmp_path):
    """/particles holding pos/vel/acc beside a shared step and time, no particles group
    below it: the box group was read as the particles group (its 3 box vectors as 3
    atoms, no position) in silence."""

    path = tmp_path / "sarkas.h5"
    pos = _sarkas(path)
    with pytest.warns(H5MDConformanceWarning) as said:
        ds = xr.open_dataset(path, engine="h5md")
    texts = [str(w.message) for w in said]
    assert sum("[/particles]: elements stored directly in /particles" in t
               for t in texts) == 1
    assert not any("box/box" in t for t in texts)
    with ds:
        assert ds.attrs["h5md_group"] == "/particles"
        assert ds.position.dims == ("time", "atom", "spatial")
        np.testing.assert_array_equal(ds.position.values, pos)
        np.testing.assert_array_equal(ds.velocity.values, pos * 2)
        np.testing.assert_array_equal(ds.acc.values, pos * 3)
        np.testing.assert_array_equal(ds.step.values, np.arange(5) * 10)
        np.testing.assert_allclose(ds.time.values, np.arange(5) * 1e-15)
        np.testing.assert_array_equal(ds.species.values, np.arange(6) % 2)
        np.testing.assert_array_equal(ds.box_edges.values, np.eye(3) * 1e-5)
        assert ds.position.attrs["units"] == "m"
        assert ds.box_edges.attrs["units"] == "m"  # the box group's (it was left out)
        assert sum("[/particles/box/edges]: no unit of its own; the box group has one" in t
                   for t in texts) == 1
        centred = pos - pos.mean(axis=1, keepdims=True)
        rmsd = h5mdx.rmsd(ds.position, 0).values
        assert rmsd[0] == pytest.approx(0, abs=1e-12) and rmsd[1] > 1e-8
        ref = centred[0]
        for i in range(1, 5):  # Kabsch
            u, s, vt = np.linalg.svd(centred[i].T @ ref)
            d = np.sign(np.linalg.det(u @ vt))
            e = (centred[i] ** 2).sum() + (ref ** 2).sum() - 2 * (s[0] + s[1] + d * s[2])
            assert rmsd[i] == pytest.approx(np.sqrt(max(e, 0) / 6), rel=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        again = xr.open_dataset(path, engine="h5md", group="particles")
        tree = xr.open_datatree(path, engine="h5md")
    with again:
        np.testing.assert_array_equal(again.position.values, pos)
    with tree:
        np.testing.assert_array_equal(tree["/particles"].position.values, pos)


def _energy(f):
    """An observable, ``/observables/energy``, of 3 frames."""
    el = f.create_group("observables/energy")
    el["value"], el["step"] = np.arange(3.0), np.arange(3)


def _beside_energy(path, where, data):
    """An H5MD 1.1 file of ``data`` at ``where`` and :func:`_energy`."""
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        f[where] = data
        _energy(f)
    return path


def test_flat_particles_note_only_on_opens_of_particles(tmp_path):
    """The note on a flat /particles (its path is /particles, not below it) was given on
    every open, observables' too; it concerns the particles' opens (and the tree's)."""
    path = tmp_path / "sarkas.h5"
    _sarkas(path)
    with h5py.File(path, "r+") as f:
        _energy(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        with xr.open_dataset(path, engine="h5md", group="observables") as obs:
            np.testing.assert_array_equal(obs.energy.values, np.arange(3.0))
    for opened in (lambda: xr.open_dataset(path, engine="h5md"),
                   lambda: xr.open_datatree(path, engine="h5md")):
        with pytest.warns(H5MDConformanceWarning, match=r"\[/particles\]: elements stored"):
            opened().close()


def test_particles_left_out_is_said_on_every_open(tmp_path):
    """/particles that cannot be read (a dataset) leaves no particles group to open: its
    note is given on the opens of the observables (the rule for the flat note hid it from
    every open)."""
    path = _beside_energy(tmp_path / "bad.h5", "particles", np.arange(3))
    for group in (None, "observables"):
        with pytest.warns(H5MDConformanceWarning) as said:
            xr.open_dataset(path, engine="h5md", group=group).close()
        assert sum("[/particles]: /particles must be a group" in str(w.message)
                   for w in said) == 1, group


def test_castep_first_release_elements_straight_in_particles(tmp_path):
    """castep_outputs_tools' first md_to_h5md: H5MD elements in /particles itself, each
    offered as a particles group (the open refused the file)."""
    from h5mdx.testing import write_h5md

    rng = np.random.default_rng(4)
    pos = rng.random((4, 5, 3))
    path = write_h5md(tmp_path / "castep.h5md", {"all": {
        "position": dict(value=pos, step=np.arange(4), time=np.arange(4) * 0.5),
        "velocity": dict(value=pos * 2, step=np.arange(4), time=np.arange(4) * 0.5)}})
    with h5py.File(path, "r+") as f:
        for key in f["particles/all"]:
            f.move(f"particles/all/{key}", f"particles/{key}")
        del f["particles/all"]
    with pytest.warns(H5MDConformanceWarning, match=r"\[/particles\]: elements stored "
                      "directly in /particles"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        assert ds.position.dims == ("time", "atom", "spatial")
        np.testing.assert_array_equal(ds.position.values, pos)
        np.testing.assert_array_equal(ds.velocity.values, pos * 2)
        np.testing.assert_array_equal(ds.time.values, np.arange(4) * 0.5)


def test_a_stray_dataset_beside_particles_groups_is_no_flat_group(tmp_path):
    """A dataset in /particles beside a real particles group: the group is read as
    before."""
    from h5mdx.testing import write_h5md

    pos = np.ones((2, 3, 3))
    path = write_h5md(tmp_path / "stray.h5md", {"all": {
        "position": dict(value=pos, step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        f["particles/note"] = np.arange(3)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
    assert not any("directly in /particles" in str(w.message) for w in said)
    with ds:
        assert ds.attrs["h5md_group"] == "/particles/all"
        np.testing.assert_array_equal(ds.position.values, pos)


def _lammps_bounds(path, bounds, chunks=None, step=True):
    """H5MD_Analysis (anyuzx/H5MD_Analysis): a LAMMPS dump's BOX BOUNDS rows stored as
    particles/all/box/edges/value, (T, 3, 2) [lo, hi] or (T, 3, 3) [lo, hi, tilt], with
    no 'dimension' or 'boundary' (``chunks``: of the bounds; ``step``: theirs, else none,
    as GROMACS writes edges)."""
    from h5mdx.testing import write_h5md

    frames = len(bounds)
    rng = np.random.default_rng(5)
    pos = rng.random((frames, 4, 3)) * 5
    path = write_h5md(path, {"all": {
        "position": dict(value=pos, step=np.arange(frames) * 100)}})
    with h5py.File(path, "r+") as f:
        del f["particles/all/box"]
        edges = f.create_group("particles/all/box/edges")
        edges.create_dataset("value", data=bounds, chunks=chunks)
        if step:
            edges["step"] = np.arange(frames) * 100
    return path, pos


def _random_bounds(frames):
    """Bounds [lo, hi] of ``frames`` frames, each frame and axis its own."""
    rng = np.random.default_rng(11)
    lo = -rng.random((frames, 3)) * 3
    hi = lo + 1.0 + rng.random((frames, 3)) * 9
    return lo, hi


def test_lammps_orthogonal_bounds_are_edges_and_offset(tmp_path):
    """(T, 3, 2) [lo, hi] per axis: five warnings that contradicted each other and a
    periodic box with no edges. Now edges hi - lo and offset lo."""
    lo = np.array([[-2.0, -3.0, 0.0], [-2.1, -3.0, 0.0]])
    hi = np.array([[7.0, 6.0, 9.5], [7.0, 6.1, 9.5]])
    path, pos = _lammps_bounds(tmp_path / "ortho.h5", np.stack([lo, hi], axis=-1))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
    texts = [str(w.message) for w in said]
    assert sum("LAMMPS' bounds [lo, hi]" in t for t in texts) == 1
    assert not any("taken from edges shape" in t or "left out" in t for t in texts)
    with ds:
        assert ds.box_edges.dims == ("time", "spatial")
        np.testing.assert_allclose(ds.box_edges.values, hi - lo)
        np.testing.assert_allclose(ds.box_offset.values, lo)
        assert ds.box_edges.attrs["boundary"] == ["periodic"] * 3
        np.testing.assert_array_equal(ds.position.values, pos)


def test_info_lists_the_box_members(tmp_path, capsys):
    """h5mdx info listed the box's edges alone: HALMD's offset (or one computed from
    LAMMPS' bounds, said so) and znh5md's pbc were served but not listed."""
    import json

    from h5mdx.cli import main

    lo, hi = _random_bounds(3)
    lammps, _ = _lammps_bounds(tmp_path / "lammps.h5", np.stack([lo, hi], axis=-1))
    halmd = tmp_path / "halmd.h5"
    with h5py.File(lammps, "r") as src, h5py.File(halmd, "w") as f:
        src.copy("h5md", f)
        src.copy("particles", f)
        box = f["particles/all/box"]
        del box["edges"]
        box.attrs["dimension"], box.attrs["boundary"] = 3, np.array([b"periodic"] * 3)
        box["edges"], box["offset"], box["pbc"] = hi[0] - lo[0], lo[0], np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        assert main(["info", str(lammps)]) == 0
        text = capsys.readouterr().out
        assert main(["info", "--json", str(halmd)]) == 0
        box = json.loads(capsys.readouterr().out)["particles"]["all"]["box"]
        assert main(["info", str(halmd)]) == 0
        plain = capsys.readouterr().out
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("    ")}
    assert lines["box_edges"].startswith("    box_edges  3×3 ")
    assert lines["box_edges"].endswith("(hi - lo of LAMMPS' bounds)")
    assert lines["box_offset"].endswith("(lo of LAMMPS' bounds)")
    assert box["offset"]["path"] == "/particles/all/box/offset"
    assert box["pbc"]["shape"] == [3] and box["edges"]["shape"] == [3]
    particles = plain.split("conformance")[0]
    lines = [line.split()[:2] for line in particles.splitlines() if line.startswith("    ")]
    assert lines == [["box_edges", "3"], ["box_offset", "3"], ["box_pbc", "3"]]
    assert "LAMMPS" not in particles


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
def test_lammps_bounds_are_read_lazily(tmp_path, monkeypatch, chunks):
    """The open reads the first frame of the bounds alone (it read all of them: 48 bytes a
    frame of a long run, at every open); the edges and the offset are computed from the
    frames asked for, with chunks={} and without, by slice, list and single frame."""
    from h5mdx.format.h5md import _box, _elements, _meta, _sampling

    rng = np.random.default_rng(9)
    lo = -rng.random((40, 3))
    hi = 5.0 + rng.random((40, 3))
    path, _ = _lammps_bounds(tmp_path / "long.h5", np.stack([lo, hi], axis=-1))
    read = []
    small = _sampling._read_small
    for module in (_box, _elements, _meta, _sampling):  # every reader of small datasets
        monkeypatch.setattr(module, "_read_small", lambda c, dset, where, n=None, start=0: (
            read.append((dset.name, n)), small(c, dset, where, n, start))[1])
    with warnings.catch_warnings(record=True) as said:  # and no 'dimension', 'boundary'
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md", chunks=chunks)
    assert sum("LAMMPS' bounds" in str(w.message) for w in said) == 1
    assert ("/particles/all/box/edges/value", 1) in read
    assert not any(name.endswith("edges/value") and n != 1 for name, n in read)
    with ds:
        assert ds.box_edges.dims == ("time", "spatial") and ds.box_edges.shape == (40, 3)
        np.testing.assert_allclose(ds.box_edges.values, hi - lo)
        np.testing.assert_allclose(ds.box_offset.values, lo)
        np.testing.assert_allclose(ds.box_edges.isel(time=slice(5, 30, 4)).values,
                                   (hi - lo)[5:30:4])
        np.testing.assert_allclose(ds.box_offset.isel(time=[3, 17], spatial=1).values,
                                   lo[[3, 17], 1])
        np.testing.assert_allclose(ds.box_edges.isel(time=7).values, (hi - lo)[7])


def test_lammps_bounds_read_by_hdf5_chunks_when_used(tmp_path, monkeypatch):
    """No read of the open but the first frame takes bounds from h5py (at every open); the
    variables are lazy, dask blocks hold whole HDF5 chunks, frames taken backwards or
    out of order are right, and a block shipped to a worker (pickled) computes."""
    import pickle

    from h5mdx.engine.arrays import backend_array

    lo, hi = _random_bounds(40)
    path, _ = _lammps_bounds(tmp_path / "long.h5", np.stack([lo, hi], axis=-1),
                             chunks=(8, 3, 2))
    rows: list[int] = []
    getitem = h5py.Dataset.__getitem__

    def counted(dset, key, *args, **kwargs):
        out = getitem(dset, key, *args, **kwargs)
        if dset.name == "/particles/all/box/edges/value":
            rows.append(np.shape(out)[0] if np.ndim(out) else 1)
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        lazy = xr.open_dataset(path, engine="h5md")
        # the box alone (the positions' blocks, of the largest variable, would win)
        chunked = xr.open_dataset(path, engine="h5md", chunks={}, chunk_mib=1e-6,
                                  drop_variables=["position"])
    assert rows and max(rows) <= 1, rows  # the first frame, checked at each open
    with lazy, chunked:
        for name, want in (("box_edges", hi - lo), ("box_offset", lo)):
            var = lazy[name].variable
            assert backend_array(var._data) is not None and not var._in_memory
            assert chunked[name].chunks[0] == (8,) * 5  # one HDF5 chunk each (tiny blocks)
            np.testing.assert_allclose(lazy[name].isel(time=slice(None, None, -4)).values,
                                       want[::-4])
            np.testing.assert_allclose(lazy[name].isel(time=[17, 2, 33, 2]).values,
                                       want[[17, 2, 33, 2]])
            np.testing.assert_allclose(chunked[name].isel(time=slice(9, 27)).values,
                                       want[9:27])
            shipped = pickle.loads(pickle.dumps(chunked[name].data))  # as to a worker
            np.testing.assert_allclose(shipped.compute(), want)


def test_lammps_bounds_without_step_follow_the_positions(tmp_path):
    """Bounds without a step take the positions' frames (as GROMACS' edges do): their
    lower corner too, which kept a time axis of its own; (T, 1, 3, 2) bounds, whose
    offset of shape (T, 1, 3) failed the open, are served as (T, 3). The stored axes are
    the scan's (the open opened the dataset again for them)."""
    from h5mdx.format.h5md import scan

    lo, hi = _random_bounds(6)
    for name, bounds in (("plain", np.stack([lo, hi], axis=-1)),
                         ("one", np.stack([lo, hi], axis=-1)[:, None])):
        path, _ = _lammps_bounds(tmp_path / f"{name}.h5", bounds, step=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", H5MDConformanceWarning)
            box = scan(path).particles["all"].box
            ds = xr.open_dataset(path, engine="h5md", chunks={})
        assert box.edges.stored_tail == box.offset.stored_tail == bounds.shape[1:]
        with ds:
            assert ds.box_edges.dims == ds.box_offset.dims == ("time", "spatial")
            np.testing.assert_allclose(ds.box_edges.values, hi - lo)
            np.testing.assert_allclose(ds.box_offset.values, lo)


def test_lammps_bounds_of_a_live_file_are_cut_with_the_positions(tmp_path):
    """A live (SWMR) file's bounds a frame ahead of the positions (one shared step):
    cut to the frames both hold, edges and offset alike."""
    lo, hi = _random_bounds(5)
    path = tmp_path / "live.h5"
    with h5py.File(path, "w", libver="latest") as f:
        _h5md(f, "H5MD_Analysis")
        g = f.create_group("particles/all")
        g.create_dataset("position/value", data=np.ones((4, 2, 3)), maxshape=(None, 2, 3))
        g["position/step"] = np.arange(5) * 100
        g.create_dataset("box/edges/value", data=np.stack([lo, hi], axis=-1),
                         maxshape=(None, 3, 2))
        g["box/edges/step"] = g["position/step"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        ds = xr.open_dataset(path, engine="h5md", swmr=True)
    with ds:
        assert ds.sizes["time"] == 4
        assert ds.box_edges.dims == ds.box_offset.dims == ("time", "spatial")
        np.testing.assert_allclose(ds.box_edges.values, (hi - lo)[:4])
        np.testing.assert_allclose(ds.box_offset.values, lo[:4])


@pytest.mark.parametrize("case", ["live", "no_step"])
def test_a_stored_box_offset_is_sampled_as_the_edges(tmp_path, case):
    """HALMD's box/offset kept a time axis of its own where the edges took the positions':
    in a live file a frame ahead of the positions (one shared step), 5 frames beside 4;
    without a step of its own, as many frames as the positions (as GROMACS writes edges),
    on 'time_box_offset'. Now on 'time' with the edges, in both."""
    live = case == "live"
    lo = -np.arange(5.0)[:, None] * np.ones(3)
    path = tmp_path / f"{case}.h5"
    with h5py.File(path, "w", libver="latest") as f:
        _h5md(f, "HALMD")
        g = f.create_group("particles/all")
        g.create_dataset("position/value", data=np.ones((4, 2, 3)), maxshape=(None, 2, 3))
        g["position/step"] = np.arange(5 if live else 4) * 100
        box = g.create_group("box")
        box.attrs["dimension"], box.attrs["boundary"] = 3, np.array([b"periodic"] * 3)
        for name, value in (("edges", 10.0 - lo), ("offset", lo)):
            box.create_dataset(f"{name}/value", data=value if live else value[:4],
                               maxshape=(None, 3))
            if live:
                box[f"{name}/step"] = g["position/step"]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md", swmr=live)
    assert all("no step: sampled as /particles/all/position" in str(w.message)
               for w in said) and len(said) == (0 if live else 2)
    with ds:
        assert dict(ds.sizes) == {"time": 4, "atom": 2, "spatial": 3}
        assert ds.box_edges.dims == ds.box_offset.dims == ("time", "spatial")
        np.testing.assert_array_equal(ds.box_offset.values, lo[:4])
        np.testing.assert_array_equal(ds.box_edges.values, (10.0 - lo)[:4])


def test_lammps_triclinic_bounds_are_no_box_matrix(tmp_path):
    """(T, 3, 3) [lo, hi, tilt] rows were served as box vectors (determinant -0.25) with
    nothing said. Now left out, said once, and no periodic box assumed."""
    from h5mdx.format.h5md import scan

    frame = [[-2.0, 7.0, 0.5], [-3.0, 6.0, 0.5], [0.0, 9.5, 0.5]]
    path, pos = _lammps_bounds(tmp_path / "tri.h5", np.array([frame, frame]))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
        box = scan(path).particles["all"].box
    texts = [str(w.message) for w in said]
    assert sum("reads as LAMMPS' triclinic bounds, rows [lo, hi, tilt]" in t
               and "determinant -0.25" in t for t in texts) == 1
    assert box is not None and box.edges is None and box.boundary == ("none",) * 3
    with ds:
        assert "box_edges" not in ds
        np.testing.assert_array_equal(ds.position.values, pos)


def test_lammps_bounds_copy_to_zarr_verified(tmp_path):
    """The edges computed from bounds are checked by value, not by the file's digest."""
    from h5mdx.layout.rechunk import rechunk

    lo, hi = np.zeros((2, 3)), np.full((2, 3), 4.0)
    path, pos = _lammps_bounds(tmp_path / "ortho.h5", np.stack([lo, hi], axis=-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        rechunk(path, tmp_path / "out.zarr", verify=True)
        ds = xr.open_zarr(tmp_path / "out.zarr")
    np.testing.assert_allclose(ds.box_edges.values, hi - lo)
    np.testing.assert_allclose(ds.position.values, pos)


def test_root_groups_h5md_does_not_define_are_served(tmp_path, capsys):
    """RMPCDMD (programs/single_body.f90) keeps its averaged fields in /fields, Mosaic its
    universe in /mosaic: they vanished in silence, from the datatree and from `info`
   . Now free-form nodes, as /parameters; a soft link at the
    root is not walked twice."""
    from h5mdx.cli import main
    from h5mdx.testing import write_h5md

    conc = np.arange(2 * 4 * 4, dtype=np.float64).reshape(2, 4, 4)
    path = write_h5md(tmp_path / "rmpcdmd.h5", {"janus": {
        "position": dict(value=np.ones((2, 3, 3)), step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        fields = f.create_group("fields")
        fields["polar_concentration"] = conc
        fields["polar_concentration"].attrs["r_min"] = 1.5
        fields.create_group("sub")["n"] = np.int32(7)
        f["alias"] = h5py.SoftLink("/particles")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = xr.open_datatree(path, engine="h5md")
        ds = xr.open_dataset(path, engine="h5md", group="fields")
        sub = xr.open_dataset(path, engine="h5md", group="/fields/sub")
    with tree, ds, sub:
        assert "/fields" in tree.groups and "/alias" not in tree.groups
        np.testing.assert_array_equal(tree["/fields"].polar_concentration.values, conc)
        np.testing.assert_array_equal(ds.polar_concentration.values, conc)
        assert ds.polar_concentration.attrs["r_min"] == 1.5
        assert int(sub.n) == 7
    with pytest.raises(ValueError, match="'fields'"):
        xr.open_dataset(path, engine="h5md", group="nothing")
    assert main(["info", str(path)]) == 0
    assert "fields (not H5MD's): polar_concentration, sub/n" in capsys.readouterr().out


def test_a_version_of_an_array_type_is_a_minor_departure(tmp_path):
    """VOTCA (csg h5mdtrajectorywriter.cc, initializeHeader) writes the version as one
    int[2] value in a scalar dataspace: accepted without a note, even by strict=True
   . Now a minor departure: read as 1.1, refused by strict=True."""
    from h5mdx.format.h5md import scan
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "votca.h5", {"atoms": {
        "position": dict(value=np.ones((2, 3, 3)), step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        del f["h5md"].attrs["version"]
        array = h5py.h5t.array_create(h5py.h5t.NATIVE_INT32, (2,))
        attr = h5py.h5a.create(f["h5md"].id, b"version", array,
                               h5py.h5s.create(h5py.h5s.SCALAR))
        attr.write(np.array([1, 1], np.int32), mtype=array)
    info = scan(path)
    assert info.version == (1, 1)
    assert [p.minor for p in info.problems if "array type" in p.message] == [True]
    with pytest.raises(H5MDFormatError, match="one value of an array type"):
        xr.open_dataset(path, engine="h5md", strict=True)



@pytest.mark.parametrize("frame", [
    [[4.0, 0.0], [1.0, 4.0]], [[4.0, 0.0], [0.0, 4.0]], [[4.0, 5.0], [0.0, 4.0]]])
def test_a_2d_box_matrix_is_no_bounds(tmp_path, frame):
    """A (2, 2) box matrix of a 2-D box was taken for [lo, hi] bounds."""
    path = _periodic_box(tmp_path / "2d.h5md", frame, dimension=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.box_edges.values, frame)
        assert "box_offset" not in ds


@pytest.mark.parametrize("frame", [
    [[5.0, 0.0, 0.0], [1.0, 5.0, 0.0], [0.5, 0.5, 5.0]],   # H5MD's form, right-handed
    [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 0.0]],   # a slab: no third vector
    [[5.0, 0.0, 0.0], [0.0, 0.0, 5.0], [0.0, 5.0, 0.0]],   # left-handed
    [[-5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]])
def test_box_matrices_that_are_no_bounds_are_kept(tmp_path, frame):
    """A triclinic box of H5MD's form, a slab's zero vector or a left-handed cell is no
    LAMMPS bounds block: served as stored, in silence."""
    path, _ = _lammps_bounds(tmp_path / "slab.h5", np.array([frame, frame]))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")
    assert not any("LAMMPS" in str(w.message) for w in said)
    with ds:
        np.testing.assert_array_equal(ds.box_edges.values[0], frame)


def test_fixed_bounds_of_one_frame(tmp_path):
    """Fixed bounds (1, 3, 2), as the one-box forms (1, 3) and (1, 3, 3)."""

    path = _two_frames(tmp_path / "one.h5md")
    with h5py.File(path, "r+") as f:
        del f["particles/all/box"]
        f["particles/all/box/edges"] = np.array([[[-2.0, 7.0], [-3.0, 6.0], [0.0, 9.5]]])
    with pytest.warns(H5MDConformanceWarning, match="LAMMPS' bounds"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.box_edges.values, [9.0, 9.0, 9.5])
        np.testing.assert_array_equal(ds.box_offset.values, [-2.0, -3.0, 0.0])


@pytest.mark.parametrize("fixed", [False, True], ids=["per_frame", "fixed"])
def test_to_h5md_keeps_the_box_offset_of_lammps_bounds(tmp_path, fixed):
    """ds.md.to_h5md wrote box_offset as an element of its own (particles/all/box_offset)
    that the copy did not read back: LAMMPS' lower corner was lost. Now box/offset, as
    HALMD writes it, read back as box_offset, sampled with the edges or fixed."""
    lo, hi = _random_bounds(4)
    path, pos = _lammps_bounds(tmp_path / "ortho.h5", np.stack([lo, hi], axis=-1))
    with h5py.File(path, "r+") as f:
        if fixed:
            del f["particles/all/box/edges"]
            f["particles/all/box/edges"] = np.stack([lo[0], hi[0]], axis=-1)
        edges = f["particles/all/box/edges"]
        (edges if fixed else edges["value"]).attrs["unit"] = "nm"
        f["particles/all/position/value"].attrs["unit"] = "nm"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md")  # also no dimension, no boundary
    assert sum("LAMMPS' bounds" in str(w.message) for w in said) == 1
    out = tmp_path / "copy.h5md"
    with ds, pytest.warns(UserWarning, match="box_offset as box/offset, as HALMD"):
        ds.md.to_h5md(out)
    with h5py.File(out, "r") as f:
        assert ("value" in f["particles/all/box/offset"]) is not fixed
        assert "box_offset" not in f["particles/all"]
    with xr.open_dataset(out, engine="h5md") as copy:  # in silence: pytest errs on warnings
        want_lo, want_edges = (lo[0], (hi - lo)[0]) if fixed else (lo, hi - lo)
        assert copy.box_offset.dims == copy.box_edges.dims
        assert copy.box_offset.attrs["units"] == copy.box_edges.attrs["units"] == "nm"
        np.testing.assert_allclose(copy.box_offset.values, want_lo)
        np.testing.assert_allclose(copy.box_edges.values, want_edges)
        np.testing.assert_array_equal(copy.position.values, pos)


@pytest.mark.parametrize("variant", ["one_longer", "time_only", "behind"])
def test_shared_series_variants(tmp_path, variant):
    """Sarkas-like files a stopped writer or another writer leaves: step and time one
    entry longer than the data, a time and no step, a dataset one frame behind; and a
    fixed (N, 3) dataset with N equal to the frames stays fixed."""
    path = tmp_path / "s.h5"
    pos = _sarkas(path, frames=6, n=6)
    with h5py.File(path, "r+") as f:
        g = f["particles"]
        g["initial"] = pos[0]  # (6, 3): per particle, not a series
        if variant == "one_longer":
            for key in ("pos", "vel", "acc"):
                g[key].resize(5, axis=0)
        elif variant == "time_only":
            del g["step"]
        else:
            g["vel"].resize(5, axis=0)
    with pytest.warns(H5MDConformanceWarning) as said:
        ds = xr.open_dataset(path, engine="h5md")
    texts = [str(w.message) for w in said]
    assert not any("particles but" in t for t in texts)
    frames = 5 if variant == "one_longer" else 6
    with ds:
        assert ds.position.dims == ("time", "atom", "spatial")
        np.testing.assert_array_equal(ds.position.values, pos[:frames])
        assert ds.initial.dims == ("atom", "spatial")
        np.testing.assert_array_equal(ds.initial.values, pos[0])
        if variant == "time_only":
            np.testing.assert_array_equal(ds.step.values, np.arange(6))
            np.testing.assert_allclose(ds.time.values, np.arange(6) * 1e-15)
            assert sum("beside a shared 'time' (" in t for t in texts) == 1
        else:
            np.testing.assert_array_equal(ds.step.values, np.arange(frames) * 10)
        if variant == "behind":
            np.testing.assert_array_equal(ds.velocity.values, pos[:5] * 2)


def test_an_external_particles_group_beside_a_stray_dataset_is_no_flat_group(tmp_path):
    """/particles/all an external link, /particles holding one stray dataset: /particles
    was taken for a flat group."""
    from h5mdx.testing import write_h5md

    pos = np.ones((2, 3, 3))
    other = write_h5md(tmp_path / "other.h5md", {"all": {
        "position": dict(value=pos, step=np.array([0, 1]))}})
    path = write_h5md(tmp_path / "main.h5md", {"x": {
        "position": dict(value=pos, step=np.array([0, 1]))}})
    with h5py.File(path, "r+") as f:
        del f["particles/x"]
        f["particles/all"] = h5py.ExternalLink(str(other), "/particles/all")
        f["particles/note"] = np.arange(3)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = xr.open_dataset(path, engine="h5md", allow_external=True)
    assert not any("directly in /particles" in str(w.message) for w in said)
    with ds:
        np.testing.assert_array_equal(ds.position.values, pos)


def test_root_groups_are_walked_only_where_served(tmp_path, capsys):
    """A problem inside a root group H5MD does not define warned at every open of the
    particles and made strict=True refuse a conformant file; its datasets were walked at
    every open."""
    from h5mdx.format.h5md import scan

    path = _two_frames(tmp_path / "extra.h5md")
    with h5py.File(path, "r+") as f:
        extra = f.create_group("analysis")
        extra["ok"] = np.arange(4.0)
        extra.create_group("sub")["n"] = np.int32(3)
        extra["refs"] = np.array([f.ref], dtype=h5py.ref_dtype)
        extra["link"] = h5py.SoftLink("/analysis/ok")
    assert scan(path).other_groups == ("analysis",)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xr.open_dataset(path, engine="h5md", strict=True).close()
        sub = xr.open_dataset(path, engine="h5md", group="analysis/sub")
    with sub:
        assert int(sub.n) == 3
    with pytest.warns(H5MDConformanceWarning) as said:
        top = xr.open_dataset(path, engine="h5md", group="analysis")
    texts = [str(w.message) for w in said]
    assert any("[/analysis/refs]" in t for t in texts)
    assert any("does not follow in /analysis" in t for t in texts)
    assert not any("parameter" in t for t in texts)
    with top:
        np.testing.assert_array_equal(top.ok.values, np.arange(4.0))
        assert "refs" not in top
    # h5mdx info lists what the open warns of (it listed the references as readable, and
    # neither problem)
    from h5mdx.cli import main

    assert main(["info", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["other_groups"]["analysis"]) == {"ok", "sub/n"}
    said = {p["path"]: p["problem"] for p in data["problems"]}
    assert said["/analysis/refs"] == "object references, which h5mdx does not follow"
    assert "a soft link to /analysis/ok" in said["/analysis/link"]
    assert not any(p["departure"] for p in data["problems"])

    # what H5MD leaves free (references, sequences, links in /parameters and the groups
    # it does not define) is warned about, never refused by strict=True: those files are
    # H5MD, and strict=True refused them
    with h5py.File(path, "r+") as f:
        seq = f.create_dataset("parameters/seq", (2,), dtype=h5py.vlen_dtype(np.int32))
        seq[0], seq[1] = np.arange(3, dtype=np.int32), np.arange(1, dtype=np.int32)
        f["parameters/t"] = 300.0
        f["parameters/also"] = h5py.SoftLink("/parameters/t")
    with warnings.catch_warnings():  # nor warned at an open of another group
        warnings.simplefilter("error")
        xr.open_dataset(path, engine="h5md", strict=True).close()
    assert main(["info", "--json", str(path)]) == 0
    said = {p["path"]: p for p in json.loads(capsys.readouterr().out)["problems"]}
    assert said["/parameters/seq"]["departure"] is False  # listed by info (it was not)
    for group, served, left in (("analysis", "ok", "[/analysis/refs]"),
                                ("parameters", "t", "[/parameters/seq]")):
        with pytest.warns(H5MDConformanceWarning) as said:
            ds = xr.open_dataset(path, engine="h5md", group=group, strict=True)
        assert any(left in str(w.message) for w in said)
        with ds:
            assert served in ds


def test_flat_group_spellings_and_a_lone_small_dataset(tmp_path):
    """The flat group opens by each name a user builds from the scan
    (``f"particles/{name}"`` too: the fuzz test's open); a lone 1-D dataset in
    /particles is no flat group (found by the fuzz test)."""
    from h5mdx.format.h5md import scan

    path = tmp_path / "sarkas.h5"
    pos = _sarkas(path)
    names = list(scan(path).particles)
    assert names == ["particles"]
    for group in ("particles", "/particles", "particles/particles"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", H5MDConformanceWarning)
            ds = xr.open_dataset(path, engine="h5md", group=group)
        with ds:
            np.testing.assert_array_equal(ds.position.values, pos)
    lone = _beside_energy(tmp_path / "lone.h5", "particles/trajectory", np.arange(4))
    assert scan(lone).particles == {}


def test_the_paths_below_each_group_found_in_one_pass():
    """_dealign found each group's descendants by a walk of all groups per group
    (quadratic: 97 s of the NOMAD file's tree); _below gives the same lists in
    the same order."""
    from h5mdx.engine.groups import _below

    paths = ["/", "/a", "/ab", "/a/b", "/a/b/c", "/ab/c", "/b", "/a/bc"]
    naive = {p: [q for q in paths if q != p and q.startswith(p.rstrip("/") + "/")]
             for p in paths}
    assert _below(paths) == naive
    assert _below(paths)["/a"] == ["/a/b", "/a/b/c", "/a/bc"]


def test_many_groups_of_connectivity(tmp_path, capsys):
    """H5MD-NOMAD writes a connectivity group per molecule (10,482 in
    nomad-parser-plugins-atomistic's OpenMM test file): each group's elements were found
    by a walk of all of them (quadratic), a mistyped group= listed every group (778,747
    characters), and `h5mdx info` printed a line per element."""
    from h5mdx.cli import main
    from h5mdx.format.h5md import scan

    path = _two_frames(tmp_path / "nomad.h5")
    with h5py.File(path, "r+") as f:
        con = f.create_group("connectivity")
        con["bonds"] = np.array([[0, 1]])
        for i in range(60):
            g = con.create_group(f"mol{i:02d}")
            g["bonds"] = np.array([[0, 1], [1, 2]]) + i
            g["angles"] = np.array([[0, 1, 2]]) + i
    info = scan(path)
    assert set(info.elements_under("connectivity")) == {"bonds"}
    assert set(info.elements_under("connectivity", "mol07")) == {"bonds", "angles"}
    assert info.elements_under("connectivity", "mol07")["bonds"].path == \
        "/connectivity/mol07/bonds"
    assert info.elements_under("connectivity", "nothing") == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        ds = xr.open_dataset(path, engine="h5md", group="connectivity/mol07")
        with ds:
            np.testing.assert_array_equal(ds.bonds.values, [[7, 8], [8, 9]])
        with pytest.raises(ValueError, match=r"and \d+ more \(h5mdx info lists them\)"):
            xr.open_dataset(path, engine="h5md", group="nope")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "... and 21 more in 61 group(s)" in out


def test_groups_below_connectivity_are_walked_only_when_opened(tmp_path):
    """An open of the particles does not walk the groups below /connectivity (25 s for
    nomad-parser-plugins-atomistic's OpenMM file, 52,273 elements); /connectivity's own
    elements are read (GROMACS' bonds give selections their bonds)."""
    from h5mdx.format.h5md import scan

    path = _two_frames(tmp_path / "c.h5")
    with h5py.File(path, "r+") as f:
        con = f.create_group("connectivity")
        con["bonds"] = np.array([[0, 1]])
        bad = con.create_group("mol0/broken")
        bad["step"] = np.arange(2)  # step, no value: left out, with a warning
        con["mol0/bonds"] = np.array([[1, 2]])
    shallow = scan(path, deep_connectivity=False)
    assert set(shallow.connectivity) == {"bonds"} and "mol0" in shallow.connectivity_groups
    assert not any("broken" in p.path for p in shallow.problems)
    assert set(scan(path).connectivity) == {"bonds", "mol0/bonds"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xr.open_dataset(path, engine="h5md", strict=True).close()
    with pytest.warns(H5MDConformanceWarning, match="mol0/broken"):
        ds = xr.open_dataset(path, engine="h5md", group="connectivity/mol0")
    with ds:
        np.testing.assert_array_equal(ds.bonds.values, [[1, 2]])


def test_an_open_of_one_group_of_connectivity_reads_only_the_way_to_it(tmp_path):
    """An open of one group below /connectivity walked all of them (16 s for one molecule
    of nomad-parser-plugins-atomistic's OpenMM file, 52,269 datasets); now only the groups
    on the way to it are opened (0.6 s): another group's problem is not its own, and a
    mistyped name lists how far the path went."""
    from h5mdx.format.h5md import scan

    path = _two_frames(tmp_path / "c.h5")
    with h5py.File(path, "r+") as f:
        con = f.create_group("connectivity")
        con["bonds"] = np.array([[0, 1]])
        for m in range(3):
            con[f"particles_group/mol{m}/indices"] = np.arange(3) + 3 * m
            con[f"particles_group/mol{m}/label"] = "SOL"
        con["particles_group/mol1/broken/step"] = np.arange(2)  # step, no value
        con["particles_group/mol2/residue/indices"] = np.array([7])
    info = scan(path, deep_connectivity="particles_group/mol2")
    assert set(info.connectivity) == {"particles_group/mol2/indices",
                                      "particles_group/mol2/label"}
    assert info.connectivity_groups == ("particles_group", "particles_group/mol2",
                                        "particles_group/mol2/residue")
    assert not info.problems
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # mol1's problem is not mol2's
        with xr.open_dataset(path, engine="h5md", group="connectivity/particles_group/mol2"
                             ) as ds:
            np.testing.assert_array_equal(ds.indices.values, [6, 7, 8])
            assert ds.label.values.item() == "SOL" and "bonds" not in ds
        with xr.open_dataset(path, engine="h5md",
                             group="/connectivity/particles_group/mol2/residue/") as ds:
            np.testing.assert_array_equal(ds.indices.values, [7])
    with pytest.warns(H5MDConformanceWarning, match="mol1/broken"):
        xr.open_dataset(path, engine="h5md", group="connectivity/particles_group/mol1").close()
    with pytest.raises(ValueError, match=r"no group 'connectivity/particles_group/mol9'; "
                       r"available: .*'connectivity/particles_group'"):
        xr.open_dataset(path, engine="h5md", group="connectivity/particles_group/mol9")


def test_a_datatree_of_a_group_of_connectivity_reads_only_its_subtree(tmp_path):
    """``open_datatree(group="connectivity/<group>")`` walked every group below
    /connectivity (16 s for a subtree of nomad-parser-plugins-atomistic's OpenMM file,
    its ten thousand molecules); now the way to the group and every group below it
    (``scan(connectivity_subtree=True)``): another group's problem is not its own, even
    with ``strict=True``."""
    from h5mdx.format.h5md import scan

    path = _two_frames(tmp_path / "c.h5")
    with h5py.File(path, "r+") as f:
        con = f.create_group("connectivity")
        con["bonds"] = np.array([[0, 1]])
        con["water/mol0/indices"] = np.arange(3)
        con["water/mol0/broken/step"] = np.arange(2)  # step, no value
        con["ions/na/indices"] = np.array([3])
        con["ions/na/site/indices"] = np.array([3])
        con.create_group("empty/none")  # no elements below it: its datatree is empty
    info = scan(path, deep_connectivity="ions", connectivity_subtree=True)
    assert set(info.connectivity) == {"ions/na/indices", "ions/na/site/indices"}
    assert info.connectivity_groups == ("ions", "ions/na", "ions/na/site")
    assert not info.problems
    for group in ("connectivity/ions", "/connectivity/ions/na/"):
        with xr.open_datatree(path, engine="h5md", group=group, strict=True) as tree:
            np.testing.assert_array_equal(tree["na/site" if group.endswith("ions") else
                                               "site"].indices.values, [3])
            assert "water" not in tree and "bonds" not in tree
    groups = xr.open_groups(path, engine="h5md", group="connectivity/ions", strict=True)
    assert set(groups) == {"/", "/na", "/na/site"}
    for ds in groups.values():
        ds.close()
    with xr.open_datatree(path, engine="h5md", group="connectivity/empty") as tree:
        assert {node.path for node in tree.subtree} == {"/", "/none"} and not tree["none"]
    with pytest.raises(H5MDFormatError, match="water/mol0/broken"):
        xr.open_datatree(path, engine="h5md", group="connectivity/water", strict=True)
    with pytest.raises(ValueError, match=r"has no group 'connectivity/ions/k'; its groups: "
                       r"/particles, /particles/all, /connectivity, /connectivity/ions$"):
        xr.open_datatree(path, engine="h5md", group="connectivity/ions/k")


def test_a_datatree_of_one_group_reads_only_that_group(tmp_path):
    """``open_datatree(group="observables")`` built the whole tree and kept a subtree: 28 s
    for the observables of nomad-parser-plugins-atomistic's OpenMM file, its ten thousand
    groups of connectivity walked (0.8 s now). Only that group is scanned and built: the
    problems of the others are not its own."""

    path = _two_frames(tmp_path / "c.h5", observables={"energy": dict(value=np.arange(2.0), step=np.array([0, 1]))})
    with h5py.File(path, "r+") as f:
        f["connectivity/mol0/bonds"] = np.array([[1, 2]])
        f["connectivity/mol0/broken/step"] = np.arange(2)  # step, no value: noted
        f["parameters/thermostat/tau"] = 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for group, nodes in (("observables", {"/"}), ("particles", {"/", "/all"}),
                             ("/parameters/thermostat/", {"/"})):
            with xr.open_datatree(path, engine="h5md", group=group) as tree:
                assert {node.path for node in tree.subtree} == nodes
        with xr.open_datatree(path, engine="h5md", group="observables") as tree:
            np.testing.assert_array_equal(tree.energy.values, [0.0, 1.0])
        with xr.open_datatree(path, engine="h5md", group="parameters") as tree:
            assert float(tree["thermostat"].tau) == 0.5
    with pytest.warns(H5MDConformanceWarning, match="mol0/broken"):
        tree = xr.open_datatree(path, engine="h5md", group="connectivity")
    with tree:
        np.testing.assert_array_equal(tree["mol0"].bonds.values, [[1, 2]])
    for bad in ("nope", "parameters/nope", "observables/nope"):  # each lists the groups
        with pytest.raises(ValueError, match=f"has no group '{bad}'; its groups: "
                           "/particles, .*/observables, .*/parameters"):
            xr.open_datatree(path, engine="h5md", group=bad)


def _mdmc(path, frames=4, n=5):
    """MDMC's exporter (ISISNeutronMuon/MDMC MDMC/exporters/trajectories/H5MD_build.py,
    write_H5MD): /particles/all with species, charge ('e') and mass ('amu') as plain
    datasets; position an element of fixed-interval step (1, offset 0) and time (the
    increment, offset the first time, unit 'fs'); box/edges an element whose value is
    the one box, shape (3,), with copies of the position's step and time (no
    attributes); the box's 'dimensions' (sic) and, for a fixed box, 'boundary'; the atom
    symbols in /parameters. (MDANSE's H5MDTrajectory reads such files; MDANSE's test
    data Ar_mdmc_h5md.h5 is one, whose older writer set 'boundary' to NaNs.)"""
    rng = np.random.default_rng(8)
    pos = rng.random((frames, n, 3)) * 38.4441
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = [1, 1]
        a = h.create_group("author")
        a.attrs["name"], a.attrs["email"] = "tests", "tests@example.org"
        c = h.create_group("creator")
        c.attrs["name"], c.attrs["version"] = "MDMC", [0, 2]
        h.create_group("modules/units").attrs["version"] = [1, 0]
        al = f.create_group("particles/all")
        box = al.create_group("box")
        f.create_group("parameters")
        al.create_dataset("species", data=[18] * n, chunks=True)
        al.create_dataset("charge", data=np.zeros(n), chunks=True).attrs["unit"] = "e"
        al.create_dataset("mass", data=np.full(n, 39.948), chunks=True).attrs["unit"] = "amu"
        position = al.create_group("position")
        position.create_dataset("value", data=pos, chunks=(1, n, 3)).attrs["unit"] = "Ang"
        time = position.create_dataset("time", data=152.83395)
        step = position.create_dataset("step", data=1)
        time.attrs["offset"], time.attrs["unit"], step.attrs["offset"] = 0.0, "fs", 0
        edges = box.create_group("edges")
        edges.create_dataset("value", data=np.full(3, 38.4441), chunks=True
                             ).attrs["unit"] = "Ang"
        edges.create_dataset("time", data=position["time"])
        edges.create_dataset("step", data=position["step"])
        box.attrs["dimensions"] = 3
        box.attrs["boundary"] = ["periodic"] * 3
        f["parameters"].create_dataset("atom_symbols", data=np.array(["Ar"] * n,
                                                                     dtype=object))
    return pos


def test_mdmc_box_edges_without_a_frame_axis(tmp_path, capsys):
    """MDMC's box/edges, an element whose value is one box of shape (3,), were left out
    ("box edges have shape (3,)"): now fixed edges, said."""
    from h5mdx.cli import main

    path = tmp_path / "mdmc.h5"
    pos = _mdmc(path)
    with pytest.warns(H5MDConformanceWarning) as said:
        ds = xr.open_dataset(path, engine="h5md")
    dims, edges = sorted((str(w.message) for w in said), key=lambda m: "edges]" in m)
    assert len(said) == 2
    assert "box has a 'dimensions' attribute instead of 'dimension'" in dims
    assert ("[/particles/all/box/edges]: box edges are an element with step and time but "
            "a value of shape (3,), one box with no axis of frames") in edges
    assert "read as fixed edges" in edges
    with ds:
        np.testing.assert_array_equal(ds.position.values, pos)
        assert ds.position.attrs["units"] == "Ang"
        np.testing.assert_allclose(ds.time.values, 152.83395 * np.arange(4))
        assert ds.time.attrs["units"] == "fs"
        np.testing.assert_array_equal(ds.step.values, np.arange(4))
        assert ds.box_edges.dims == ("spatial",)
        np.testing.assert_array_equal(ds.box_edges.values, [38.4441] * 3)
        assert ds.box_edges.attrs["units"] == "Ang"
        assert ds.box_edges.attrs["boundary"] == ["periodic"] * 3
        assert ds.mass.attrs["units"] == "amu" and ds.charge.attrs["units"] == "e"
    with pytest.warns(H5MDConformanceWarning):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        assert tree["/particles/all"].box_edges.shape == (3,)
        assert list(tree["/parameters"].atom_symbols.values) == ["Ar"] * 5
    with pytest.raises(H5MDFormatError):
        xr.open_dataset(path, engine="h5md", strict=True)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"box_edges +3 +float64", out) and "read as fixed edges" in out


def _fortran_string(obj, name, value):
    """fortran_h5md's h5md_write_attribute_cs/_c1: fixed-length strings of the Fortran
    length, H5T_STR_NULLTERM, with no room left for the terminator."""
    values = [value] if isinstance(value, str) else list(value)
    size = max(len(v) for v in values)
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    space = (h5py.h5s.create(h5py.h5s.SCALAR) if isinstance(value, str)
             else h5py.h5s.create_simple((len(values),)))
    data = np.array([v.ljust(size).encode() for v in values], dtype=f"S{size}")
    h5py.h5a.create(obj.id, name.encode(), tid, space).write(
        data.reshape(()) if isinstance(value, str) else data, mtype=tid)


def _fortran_element(group, name, value, step, time=None):
    """h5md_element_t%create_time with H5MD_LINEAR (RMPCDMD's ior(H5MD_LINEAR,
    H5MD_STORE_TIME)), then appends: ``value`` chunked, unlimited along its first axis
    (the Fortran arrays' last), ``step`` a scalar int32 interval without ``offset``, and
    ``time`` a scalar float64 only with H5MD_STORE_TIME."""
    el = group.create_group(name)
    value = np.asarray(value)
    el.create_dataset("value", data=value, maxshape=(None,) + value.shape[1:], chunks=True)
    el["step"] = np.int32(step)
    if time is not None:
        el["time"] = np.float64(time)
    return el


RMPCDMD_DT = 0.01


def _rmpcdmd(path):
    """A file of RMPCDMD (pdebuyl-lab/RMPCDMD programs/single_body.f90 and
    single_dimer_pbc.f90, src/particle_system_io.f90) written with fortran_h5md
    (pdebuyl/fortran_h5md h5md_module.f90, h5md_element_create_time.f90): /h5md of
    h5md_file_t%create (version [1, 1] int32; author and creator names as Fortran
    strings); particles groups whose position, velocity, image hold fixed-interval steps
    and times (H5MD_LINEAR + H5MD_STORE_TIME), species a plain int32 dataset
    (H5MD_FIXED) or a fixed-interval element; a box of 'dimension' 3 and fixed 'edges',
    and no 'boundary'; thermo observables (H5MD_LINEAR + H5MD_STORE_TIME), n_solvent
    with a step and no time (H5MD_LINEAR alone); /connectivity/janus_links (pairs,
    0-based) whose particles_group is the string 'janus'; /fields, /timers, no units."""
    rng = np.random.default_rng(5)
    pos = rng.random((3, 4, 3)) * 32
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        _fortran_string(h.create_group("author"), "name", "Pierre de Buyl")
        creator = h.create_group("creator")
        _fortran_string(creator, "name", "RMPCDMD::single_body")
        _fortran_string(creator, "version", "1.0-17-g1234567")
        particles, obs = f.create_group("particles"), f.create_group("observables")
        f.create_group("parameters")["seed"] = np.int64(12345)
        janus = particles.create_group("janus")
        _fortran_element(janus, "position", pos, 50, 50 * RMPCDMD_DT)
        _fortran_element(janus, "velocity", rng.random((3, 4, 3)), 50, 50 * RMPCDMD_DT)
        _fortran_element(janus, "image", np.zeros((3, 4, 3), np.int32), 50, 50 * RMPCDMD_DT)
        janus["species"] = np.array([1, 2, 2, 1], np.int32)
        solvent = particles.create_group("solvent")
        _fortran_element(solvent, "position", rng.random((1, 6, 3)), 1000, 1000 * RMPCDMD_DT)
        _fortran_element(solvent, "species", np.ones((1, 6), np.int32), 1000,
                         1000 * RMPCDMD_DT)
        for grp in (janus, solvent):
            box = grp.create_group("box")
            box.attrs["dimension"] = np.int32(3)
            box["edges"] = np.array([32.0, 32.0, 32.0])
        _fortran_element(obs, "temperature", 1 + np.arange(10) / 10, 10, 10 * RMPCDMD_DT)
        _fortran_element(obs, "center_of_mass_velocity", rng.random((10, 3)), 10,
                         10 * RMPCDMD_DT)
        _fortran_element(obs, "n_solvent", np.arange(5, dtype=np.int32), 100)
        fields = f.create_group("fields")
        hist = _fortran_element(fields, "cylindrical_shell_histogram", rng.random((2, 7)), 100)
        hist.attrs["r_min"] = 1.0
        links = f.create_group("connectivity")
        links["janus_links"] = np.array([[0, 1], [1, 2], [2, 3]], np.int32)
        _fortran_string(links["janus_links"], "particles_group", "janus")
        f.create_group("timers")["total"] = np.float64(3.5)
    return pos


def test_rmpcdmd_fortran_h5md_layout(tmp_path, capsys):
    """fortran_h5md's fixed-interval elements, Fortran strings and plain datasets read as
    H5MD says; the boxes without 'boundary' are said (periodic assumed), once per group
    opened; connectivity's particles_group, the group's name as a string (not an object
    reference), is a minor departure served as the group's path (it was served as
    'janus', where a reference serves '/particles/janus', and strict=True let it by)."""
    from h5mdx.cli import main

    path = tmp_path / "rmpcdmd.h5"
    pos = _rmpcdmd(path)
    with pytest.warns(H5MDConformanceWarning, match=r"janus/box\]: the box has no "
                      r"'boundary'.*periodic' assumed") as said:
        ds = xr.open_dataset(path, engine="h5md", group="janus")
    assert len(said) == 1
    with ds:
        assert ds.attrs["creator_name"] == "RMPCDMD::single_body"
        assert ds.attrs["author_name"] == "Pierre de Buyl"
        np.testing.assert_array_equal(ds.position.values, pos)
        np.testing.assert_array_equal(ds.step.values, [0, 50, 100])
        np.testing.assert_allclose(ds.time.values, [0.0, 0.5, 1.0])
        assert "units" not in ds.position.attrs and "units" not in ds.time.attrs
        np.testing.assert_array_equal(ds.box_edges.values, [32.0] * 3)
        assert ds.box_edges.attrs["boundary"] == ["periodic"] * 3
        np.testing.assert_array_equal(ds.species.values, [1, 2, 2, 1])
        assert ds.species.dims == ("atom",) and ds.image.dtype == np.int32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs = xr.open_dataset(path, engine="h5md", group="observables")
        links = xr.open_dataset(path, engine="h5md", group="connectivity")
    with obs, links:
        np.testing.assert_allclose(obs.temperature.values, 1 + np.arange(10) / 10)
        np.testing.assert_allclose(obs.time.values, np.arange(10) / 10)
        np.testing.assert_array_equal(obs.step_n_solvent.values, [0, 100, 200, 300, 400])
        assert obs.center_of_mass_velocity.shape == (10, 3)
        np.testing.assert_array_equal(links.janus_links.values, [[0, 1], [1, 2], [2, 3]])
        assert links.janus_links.attrs["particles_group"] == "/particles/janus"
    with pytest.warns(H5MDConformanceWarning, match="no 'boundary'") as said:
        tree = xr.open_datatree(path, engine="h5md")
    assert len(said) == 2
    with tree:
        assert {"/particles/janus", "/particles/solvent", "/observables", "/connectivity",
                "/fields", "/timers"} <= set(tree.groups)
        assert tree["/particles/solvent"].species.shape == (1, 6)
    with pytest.raises(H5MDFormatError, match="no 'boundary'"):
        xr.open_dataset(path, engine="h5md", group="janus", strict=True)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "'particles_group' is the string 'janus', not an object reference" in out
    assert "served as '/particles/janus'" in out and "(minor: not warned)" in out
    assert "steps 0..100, t 0..1 (fixed)" in out


def test_elements_of_a_free_form_group_are_time_series(tmp_path, capsys):
    """RMPCDMD's /fields holds fortran_h5md elements (value, fixed-interval step): they were
    served as plain datasets, a scalar 'step' beside a 'value' of no time axis. Now each
    is a variable of its group's Dataset sampled by its step (and time), as an
    observable is, with the group's attributes; one that cannot be read as an element
    keeps its datasets, with a warning. h5mdx info lists them as elements."""
    import json

    from h5mdx.cli import main

    path = tmp_path / "rmpcdmd.h5"
    _rmpcdmd(path)
    with h5py.File(path, "r+") as f:
        hist = f["fields/cylindrical_shell_histogram/value"][()]
        deep = f["fields"].create_group("planar")
        _fortran_element(deep, "velocity", np.arange(12.0).reshape(4, 3), 25, 25 * RMPCDMD_DT)
        bad = f["fields"].create_group("broken")
        bad["value"], bad["step"] = np.float64(1.0), np.arange(3)  # no time axis
    with pytest.warns(H5MDConformanceWarning, match=r"fields/broken/value\]: 'value' of a "
                      r"time-dependent element must have a time axis.*served as they are"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        assert "/fields/cylindrical_shell_histogram" not in tree.groups
        fields = tree["/fields"].to_dataset()  # its time renamed: /fields/planar has 4
        var = fields.cylindrical_shell_histogram
        assert var.dims[0] == "time_fields" and var.attrs["r_min"] == 1.0
        np.testing.assert_array_equal(var.values, hist)
        np.testing.assert_array_equal(fields.step_fields.values, [0, 100])
        planar = tree["/fields/planar"].to_dataset()
        np.testing.assert_array_equal(planar.velocity.values, np.arange(12.0).reshape(4, 3))
        np.testing.assert_array_equal(planar.step.values, [0, 25, 50, 75])
        np.testing.assert_allclose(planar.time.values, [0.0, 0.25, 0.5, 0.75])
        broken = tree["/fields/broken"].to_dataset()
        assert float(broken.value) == 1.0
        np.testing.assert_array_equal(broken.step.values, [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        with xr.open_dataset(path, engine="h5md", group="fields/planar") as ds:
            np.testing.assert_array_equal(ds.velocity.values, np.arange(12.0).reshape(4, 3))
        with xr.open_dataset(path, engine="h5md", group="fields", chunks={}) as ds:
            assert ds.cylindrical_shell_histogram.dims[0] == "time"
            np.testing.assert_array_equal(ds.cylindrical_shell_histogram.values, hist)
            np.testing.assert_array_equal(ds.step.values, [0, 100])
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fields (not H5MD's): broken/step, broken/value\n" in out
    lines = out.split("fields (not H5MD's)")[1].splitlines()[1:3]
    assert lines[0].split()[:3] == ["cylindrical_shell_histogram", "2×7", "float64"]
    assert lines[0].endswith("steps 0..100 (fixed)")
    assert lines[1].split()[:2] == ["planar/velocity", "4×3"]
    assert main(["info", "--json", str(path)]) == 0
    described = json.loads(capsys.readouterr().out)
    elements = described["other_elements"]["fields"]
    assert list(elements) == ["cylindrical_shell_histogram", "planar/velocity"]
    assert sorted(described["other_groups"]["fields"]) == ["broken/step", "broken/value"]


def test_free_form_elements_keep_what_lies_beside_them(tmp_path):
    """Found by an audit: a plain 'step' or 'time' dataset beside an element of a free-form
    group replaced the element's coordinate without a word (its values on a time axis of
    none); a group holding more than value/step/time lost its other datasets and groups
    (served as plain datasets before); a file opened with swmr=True had its free-form
    elements checked as a stopped file's (a step one entry ahead warned); group= an element
    (a group of the file, a node before) said only that there is no such group; strict=True
    refused a free-form group that merely looks like an element (opened before)."""
    path = tmp_path / "beside.h5"
    _rmpcdmd(path)
    with h5py.File(path, "r+") as f:
        hist = f["fields/cylindrical_shell_histogram/value"][()]
        f["fields/step"], f["fields/time"] = np.int32(5), np.array([9.0, 8.0, 7.0])
        more = f["fields"].create_group("more")
        more["value"], more["step"], more["extra"] = np.arange(3.0), np.arange(3), np.ones(5)
    with pytest.warns(H5MDConformanceWarning, match=r"\[/fields/step\]: a dataset named "
                      r"'step' clashes.*served as 'step_dataset'"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        fields = tree["/fields"].to_dataset()
        var = fields.cylindrical_shell_histogram
        np.testing.assert_array_equal(var.values, hist)
        np.testing.assert_array_equal(fields[var.dims[0]].values, [0.0, 100.0])  # its steps
        np.testing.assert_array_equal(fields.time_dataset.values, [9.0, 8.0, 7.0])
        assert int(fields.step_dataset) == 5
        more = tree["/fields/more"].to_dataset()
        assert {"value", "extra"} <= set(more.data_vars)
        np.testing.assert_array_equal(more.extra.values, np.ones(5))
    plain = tmp_path / "plain.h5"  # no element, nor a departure from H5MD: strict opens it
    with h5py.File(plain, "w") as f:
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h5md.create_group("author").attrs["name"] = "me"
        h5md.create_group("creator").attrs.update(name="me", version="1")
        f.create_group("fields/broken").update(value=np.float64(1.0), step=np.arange(3))
    said = r"\[/fields/broken/value\].*; its datasets served as they are"
    with pytest.warns(H5MDConformanceWarning, match=said):  # warned, not refused
        with xr.open_dataset(plain, engine="h5md", group="fields/broken", strict=True) as ds:
            assert float(ds.value) == 1.0
    with pytest.warns(H5MDConformanceWarning, match=said):
        with xr.open_datatree(plain, engine="h5md", strict=True) as tree:
            assert "/fields/broken" in tree.groups
    with warnings.catch_warnings():  # an element is no group: the error says where it is
        warnings.simplefilter("ignore", H5MDConformanceWarning)
        for opener in (xr.open_dataset, xr.open_datatree):
            with pytest.raises(ValueError, match=r"no group 'fields/cylindrical_shell_"
                               r"histogram' \(it is an H5MD element: the variable "
                               r"'cylindrical_shell_histogram' of group 'fields'\)"):
                opener(path, engine="h5md", group="fields/cylindrical_shell_histogram")

    live = tmp_path / "live.h5"
    with h5py.File(live, "w", libver="latest") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1], dtype=np.int32)
        for root in ("observables", "fields"):
            g = f.require_group(root).create_group("x")
            g.create_dataset("value", data=np.arange(3.0), maxshape=(None,), chunks=(2,))
            g.create_dataset("step", data=np.arange(4), maxshape=(None,), chunks=(2,))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with xr.open_dataset(live, engine="h5md", group="fields", swmr=True) as ds:
            np.testing.assert_array_equal(ds.x.values, [0.0, 1.0, 2.0])
    assert not [w for w in said if "/fields/x" in str(w.message)], [str(w.message) for w in said]


def test_a_string_particles_group_is_refused_by_strict(tmp_path):
    """The minor departure alone: strict=True refuses it; a string that names no
    particles group is served as stored."""
    path = tmp_path / "rmpcdmd.h5"
    _rmpcdmd(path)
    with h5py.File(path, "r+") as f:
        for name in ("janus", "solvent"):
            _fortran_string(f[f"particles/{name}/box"], "boundary", ["periodic"] * 3)
        f["connectivity/other"] = np.array([[0, 1]], np.int32)
        _fortran_string(f["connectivity/other"], "particles_group", "nothing")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_dataset(path, engine="h5md", group="connectivity") as ds:
            assert ds.other.attrs["particles_group"] == "nothing"
        xr.open_dataset(path, engine="h5md", group="janus").close()
    with pytest.raises(H5MDFormatError, match=r"janus_links\]: 'particles_group' is the "
                       "string 'janus'"):
        xr.open_dataset(path, engine="h5md", group="janus", strict=True)
    with h5py.File(path, "r+") as f:  # H5MD's object references: no departure (the scan
        for name in ("janus_links", "other"):  # reads them as the paths they point to)
            f[f"connectivity/{name}"].attrs["particles_group"] = f["particles/janus"].ref
    with xr.open_dataset(path, engine="h5md", group="connectivity", strict=True) as ds:
        assert ds.janus_links.attrs["particles_group"] == "/particles/janus"
    xr.open_dataset(path, engine="h5md", group="janus", strict=True).close()


def _mdanse(path, legacy=False):
    """MDANSE 2.x's TrajectoryWriter (ISISNeutronMuon/MDANSE
    MDANSE/Src/MDANSE/MolecularDynamics/Trajectory.py; ChemicalSystem.serialize in
    MDANSE/Src/MDANSE/Chemistry/ChemicalSystem.py): no /h5md and no /particles, but
    /composition (/chemical_system before 2025), /configuration/coordinates (frames,
    atoms, 3) with netCDF's 'units', /unit_cell (frames, 3, 3), /time and /charge."""
    with h5py.File(path, "w") as f:
        system = f.create_group("chemical_system" if legacy else "composition")
        system.attrs["name"] = ""
        system.create_dataset("atom_types", data=["C", "O", "O"], dtype=h5py.string_dtype())
        conf = f.create_group("configuration")
        conf.create_dataset("coordinates", data=np.zeros((2, 3, 3)), chunks=(1, 3, 3)
                            ).attrs["units"] = "nm"
        f.create_dataset("unit_cell", data=np.tile(np.eye(3), (2, 1, 1)), chunks=(1, 3, 3)
                         ).attrs["units"] = "nm"
        f.create_dataset("time", data=[0.0, 1.0], chunks=(1,)).attrs["units"] = "ps"
        f["charge"] = np.zeros(3)


@pytest.mark.parametrize("legacy", [False, True], ids=["2025", "before-2025"])
def test_mdanse_trajectories_are_no_h5md_and_said_so(tmp_path, capsys, legacy):
    """MDANSE's .mdt is its own HDF5 layout, not H5MD: refused (as before), naming it and
    where its data are, by the engine, the datatree and ``info`` (no traceback)."""
    from h5mdx.cli import main

    path = tmp_path / "traj.mdt"
    _mdanse(path, legacy)
    said = r"not an H5MD file: there is no /h5md group \(it is MDANSE's trajectory format"
    with pytest.raises(H5MDFormatError, match=said):
        xr.open_dataset(path, engine="h5md")
    with pytest.raises(H5MDFormatError, match=said):
        xr.open_datatree(path, engine="h5md")
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err
    assert "MDANSE's trajectory format (.mdt)" in err and "Traceback" not in err
    with xr.open_dataset(path, engine="h5netcdf", group="configuration",
                         phony_dims="sort") as ds:
        assert ds.coordinates.shape == (2, 3, 3)


def test_free_form_elements_are_read_by_the_files_rules(tmp_path, capsys):
    """An element of a free-form group is read by the H5MD version the file declares (a
    scalar 'step' is H5MD 1.1's, a minor departure in a 1.0 file, as for an observable),
    and what is no departure is marked so by ``h5mdx info``, which lists the problems of
    the free-form groups too (it listed none of them)."""
    from h5mdx.cli import main
    from h5mdx.format.h5md import free_form, scan

    path = tmp_path / "rmpcdmd.h5"
    _rmpcdmd(path)
    with h5py.File(path, "r+") as f:
        f["h5md"].attrs["version"] = np.array([1, 0], dtype=np.int32)
        f.create_group("fields/broken").update(value=np.float64(1.0), step=np.arange(3))
    info = scan(path)
    found = free_form(path, "fields", info=info)
    assert set(found.elements) == {"cylindrical_shell_histogram"}
    assert found.groups == ("", "broken")
    assert set(found.datasets) == {"broken/step", "broken/value"}
    said = {p.path: p for p in found.problems}
    fixed = said["/fields/cylindrical_shell_histogram/step"]
    assert "H5MD 1.1's, not 1.0's" in fixed.message and fixed.minor and fixed.departure
    broken = said["/fields/broken/value"]
    assert broken.assumed == "its datasets served as they are" and not broken.departure
    # without the file's scan, H5MD 1.1's rules
    assert "/fields/cylindrical_shell_histogram/step" not in {
        p.path for p in free_form(path, "fields").problems}
    with pytest.raises(H5MDFormatError, match=r"fixed-interval sampling .* H5MD 1.1's"):
        xr.open_dataset(path, engine="h5md", group="fields", strict=True)

    assert main(["info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "/fields/broken/value" in text and "(no departure: strict=True reads it)" in text
    assert main(["info", "--json", str(path)]) == 0
    problems = {p["path"]: p for p in json.loads(capsys.readouterr().out)["problems"]}
    assert problems["/fields/broken/value"]["departure"] is False
    assert problems["/fields/cylindrical_shell_histogram/step"]["minor"] is True

    only = tmp_path / "only_fields.h5"  # departures in /fields alone: the particles open
    with h5py.File(only, "w") as f:
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h5md.create_group("author").attrs["name"] = "me"
        h5md.create_group("creator").attrs.update(name="me", version="1")
        g = f.create_group("particles/all")
        g["position"] = np.zeros((4, 3))
        box = g.create_group("box")
        box.attrs["dimension"] = np.int32(3)
        box.attrs["boundary"] = np.array([b"none"] * 3)
        f.create_group("fields/x").update(value=np.arange(3.0), time=np.arange(3.0))
    assert scan(only).problems == ()
    with xr.open_dataset(only, engine="h5md", strict=True) as ds:
        assert ds.position.shape == (4, 3)
    with pytest.raises(H5MDFormatError, match=r"/fields/x"):
        xr.open_dataset(only, engine="h5md", group="fields", strict=True)
    assert main(["info", str(only)]) == 0
    assert ("1 problem(s) (strict=True refuses an open of the groups they are in)"
            in capsys.readouterr().out)



def test_free_form_problems_warned_at_the_open_of_their_own_group(tmp_path):
    """A reference and a soft link in /fields/a/b and /parameters/sub/deep are warned
    about at an open of that group alone, not of the groups above it (audit62: the opens
    of /fields, /fields/a, /parameters and /parameters/sub warned of them too)."""
    import warnings as _w

    path = tmp_path / "free.h5"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1], dtype=np.int32)
        f.create_group("h5md/author").attrs["name"] = "me"
        g = f.create_group("particles/trajectory")
        g.create_dataset("position/value", data=np.zeros((4, 5, 3)))
        box = g.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array([b"none"] * 3)
        f["fields/x"] = np.arange(3.0)
        f["fields/a/y"] = np.arange(2.0)
        f["fields/a/b/ref"] = np.array([f["h5md"].ref], dtype=h5py.ref_dtype)
        f["fields/a/b/soft"] = h5py.SoftLink("/fields/x")
        f["parameters/x"] = 1.0
        f["parameters/sub/y"] = 2.0
        f["parameters/sub/deep/ref"] = np.array([f["h5md"].ref], dtype=h5py.ref_dtype)

    def warned(group):
        with _w.catch_warnings(record=True) as caught:
            _w.simplefilter("always")
            xr.open_dataset(path, engine="h5md", group=group).close()
        return sorted(str(c.message).split("[")[1].split("]")[0] for c in caught
                      if issubclass(c.category, h5mdx.errors.H5MDConformanceWarning))

    assert warned("/fields") == []
    assert warned("/fields/a") == []
    assert warned("/fields/a/b") == ["/fields/a/b/ref", "/fields/a/b/soft"]
    assert warned("/parameters") == []
    assert warned("/parameters/sub") == []
    assert warned("/parameters/sub/deep") == ["/parameters/sub/deep/ref"]


def test_an_element_hdf5_cannot_read_is_served_as_datasets(tmp_path, monkeypatch):
    """A group of a free-form root laid out as an element whose read fails inside h5py
    (a structure no check anticipated) is served as its datasets, with a note, not a
    bare traceback out of the open."""
    from h5mdx.format.h5md import _walk, free_form

    path = tmp_path / "rmpcdmd.h5"
    _rmpcdmd(path)

    def failing(*args, **kwargs):
        raise OSError("Can't read data (wrong B-tree signature)")

    monkeypatch.setattr(_walk, "_element", failing)
    found = free_form(path, "fields")
    assert found.elements == {}
    assert "cylindrical_shell_histogram/value" in found.datasets
    (problem,) = [p for p in found.problems if "cannot read it as an element" in p.message]
    assert "wrong B-tree signature" in problem.message and not problem.departure
    with pytest.warns(H5MDConformanceWarning, match="cannot read it as an element"):
        with xr.open_dataset(path, engine="h5md",
                             group="fields/cylindrical_shell_histogram") as ds:
            assert "value" in ds
