"""convert(): every MDAnalysis input format -> H5MD/Zarr, compared frame by frame."""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import h5mdx.errors
import h5mdx.layout.export
from h5mdx.cli import layout as _cli_layout
from h5mdx.cli import main
from h5mdx.format.writer import H5MDWriter
from h5mdx.layout._atomic import partial_files
from h5mdx.layout.convert import convert
from h5mdx.testing import write_h5md

mda = pytest.importorskip("MDAnalysis")
d = pytest.importorskip("MDAnalysisTests.datafiles")

FORMATS = {
    "dcd": (d.PSF, [d.DCD]),
    "xtc": (d.GRO, [d.XTC]),
    "trr": (d.GRO, [d.TRR]),
    "h5md": (d.COORDINATES_TOPOLOGY, [d.COORDINATES_H5MD]),
    "ncdf": (d.PRMncdf, [d.NCDF]),
    "pdb-multiframe": (d.PDB_multiframe, []),
    # a GRO file of one frame, with velocities: MDAnalysis reads no more (a GRO file of
    # several frames is refused: test_a_gro_file_of_several_frames_is_refused)
    "gro": (d.GRO_velocity, []),
}


def universe(top, trajs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not trajs:
            return mda.Universe(top)
        return mda.Universe(top, trajs if len(trajs) > 1 else trajs[0])


def compare_with_mda(ref, out, top, *, indices=None, frames=None, velocities=False,
                     forces=False, time_offsets=None):
    """Every frame of ``out`` (read by MDAnalysis' H5MDReader) equals ``ref``; its times
    are ``ref``'s plus ``time_offsets`` (per frame; concatenated runs continue)."""
    back = universe(top, [str(out)]) if indices is None else None
    with h5py.File(out) as f:
        grp = f["particles/trajectory"]
        pos = grp["position/value"]
        frames = list(range(ref.trajectory.n_frames)) if frames is None else frames
        assert pos.shape[0] == len(frames)
        for i, fr in enumerate(frames):
            ts = ref.trajectory[fr]
            want = ts.positions if indices is None else ts.positions[indices]
            np.testing.assert_allclose(pos[i], want, atol=1e-5)
            shift = 0.0 if time_offsets is None else time_offsets[i]
            assert grp["position/time"][i] == pytest.approx(ts.time + shift, abs=1e-4)
            if ts.dimensions is not None and np.all(ts.dimensions[:3] > 0):
                np.testing.assert_allclose(grp["box/edges/value"][i], ts.triclinic_dimensions,
                                           atol=1e-4)
            if velocities:
                np.testing.assert_allclose(grp["velocity/value"][i], ts.velocities, atol=1e-5)
            if forces:
                np.testing.assert_allclose(grp["force/value"][i], ts.forces, atol=1e-5)
            if back is not None:
                bts = back.trajectory[i]
                np.testing.assert_allclose(bts.positions, want, atol=1e-5)
                if ts.dimensions is not None and np.all(ts.dimensions[:3] > 0):
                    np.testing.assert_allclose(bts.dimensions, ts.dimensions, atol=1e-3)
                assert bts.time == pytest.approx(ts.time + shift, abs=1e-4)
        steps = grp["position/step"][()]
        assert np.all(np.diff(steps) > 0)


@pytest.mark.filterwarnings("ignore:Reader has no dt")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_round_trip_every_format(tmp_path, fmt):
    top, trajs = FORMATS[fmt]
    ref = universe(top, trajs)
    ts = ref.trajectory[0]
    out = tmp_path / f"{fmt}.h5md"
    stats = convert(top, trajs, out, progress=False, frames_per_chunk=3, verify=True)
    assert stats.verified and stats.n_frames == ref.trajectory.n_frames
    assert ("velocity" in stats.elements) == bool(ts.has_velocities)
    compare_with_mda(ref, out, top, velocities=ts.has_velocities, forces=ts.has_forces)
    # the h5md engine reads the output
    ds = xr.open_dataset(out, engine="h5md")
    assert ds.position.dims == ("time", "atom", "spatial")
    assert ds.position.attrs["units"] == "Angstrom"
    assert ds.time.attrs["units"] == "ps"
    assert ds.position.encoding["chunksizes"] == (min(3, stats.n_frames), ref.atoms.n_atoms, 3)
    ref.trajectory[-1]
    np.testing.assert_allclose(ds.position.values[-1], ref.trajectory.ts.positions, atol=1e-5)
    if hasattr(ref.atoms, "masses"):
        np.testing.assert_allclose(ds.mass.values, ref.atoms.masses)
        assert ds.mass.attrs["units"] == "u"
    ds.close()


def test_select_slice_and_options(tmp_path):
    ref = universe(d.PSF, [d.DCD])
    out = tmp_path / "ca.h5md"
    stats = convert(d.PSF, [d.DCD], out, select="name CA", start=5, stop=60, step=7,
                    chunk_mib=0.01, compression="gzip:1", progress=False)
    ca = ref.select_atoms("name CA").indices
    assert stats.n_atoms == ca.size == 214
    compare_with_mda(ref, out, d.PSF, indices=ca, frames=list(range(5, 60, 7)))
    with h5py.File(out) as f:
        v = f["particles/trajectory/position/value"]
        assert v.compression == "gzip" and v.compression_opts == 1
        assert v.chunks[0] == int(0.01 * 2**20 // (214 * 12))
    with pytest.raises(FileExistsError, match="--overwrite"):
        convert(d.PSF, [d.DCD], out, progress=False)
    convert(d.PSF, [d.DCD], out, progress=False, overwrite=True, contiguous=True)
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks is None
    with pytest.raises(ValueError, match="no velocities"):
        convert(d.PSF, [d.DCD], tmp_path / "v.h5md", velocities=True, progress=False)


def test_trr_without_velocities_and_concatenation(tmp_path):
    out = tmp_path / "novel.h5md"
    stats = convert(d.GRO, [d.TRR], out, velocities=False, progress=False)
    assert stats.elements == ["position", "box_edges"]
    out2 = tmp_path / "two.h5md"
    stats = convert(d.GRO, [d.XTC, d.XTC], out2, progress=False)
    assert stats.n_frames == 20 and stats.steps_renumbered
    ref = universe(d.GRO, [d.XTC, d.XTC])
    # the second run's times continue the first's by its time step, as its steps do
    times = np.array([ts.time for ts in ref.trajectory])
    dt = times[1] - times[0]
    shift = np.r_[np.zeros(10), np.full(10, times[9] + dt - times[10])]
    compare_with_mda(ref, out2, d.GRO, time_offsets=shift)
    with h5py.File(out2) as f:
        steps = f["particles/trajectory/position/step"][()]
        t = f["particles/trajectory/position/time"][()]
    np.testing.assert_array_equal(steps, np.arange(20) * 50000)
    np.testing.assert_allclose(t, times[0] + np.arange(20) * dt, rtol=1e-6)
    with xr.open_dataset(out2, engine="h5md") as ds:  # time is a usable index
        assert ds.sel(time=slice(t[5], t[15])).sizes["time"] == 11


def test_zarr_matches_engine(tmp_path):
    h5 = tmp_path / "adk.h5md"
    store = tmp_path / "adk.zarr"
    convert(d.GRO, [d.TRR], h5, frames_per_chunk=4, progress=False)
    stats = convert(d.GRO, [d.TRR], store, frames_per_chunk=4, progress=False, verify=True)
    assert stats.verified
    a = xr.open_dataset(h5, engine="h5md")
    b = xr.open_zarr(store)
    assert set(a.variables) == set(b.variables)
    assert {"name", "resname", "resid"} <= set(b.coords)  # the GRO's, from the module
    for name in a.variables:
        assert a[name].dims == b[name].dims, name
        np.testing.assert_array_equal(a[name].values, b[name].values)
        # the H5MD file is its own topology (VMD's structure module): the store is not
        own = {"topology": str(h5)} if name == "atom" else {}
        assert a[name].attrs == {**b[name].attrs, **own}, name
    assert b.position.encoding["chunks"] == (4, 47681, 3)
    a.close()


def test_a_tpr_converted_to_zarr_keeps_the_names_of_its_module(tmp_path):
    """A TPR's atoms get GROMACS' topology module in an H5MD file; in a Zarr store the
    coordinates the engine serves from it (the store had no name, resname, resid or segid,
    where a GRO's atoms get those of VMD's module)."""
    h5, store = tmp_path / "tpr.h5md", tmp_path / "tpr.zarr"
    convert(d.TPR, [d.XTC], h5, progress=False)
    convert(d.TPR, [d.XTC], store, progress=False)
    u = universe(d.TPR, [d.XTC])
    with xr.open_dataset(h5, engine="h5md") as a, xr.open_zarr(store) as b:
        assert {"name", "resname", "resid", "segid", "moltype", "molnum"} <= set(b.coords)
        assert set(a.coords) == set(b.coords)
        for name in ("name", "resname", "resid", "segid", "moltype", "molnum"):
            np.testing.assert_array_equal(a[name].values, b[name].values)
            assert a[name].attrs == b[name].attrs, name
        np.testing.assert_array_equal(b["name"].values, u.atoms.names)
        np.testing.assert_array_equal(b["resid"].values, u.atoms.resids)


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "x.h5md"
    calls = []
    original = H5MDWriter._flush

    def failing(self):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        original(self)

    monkeypatch.setattr(H5MDWriter, "_flush", failing)
    with pytest.raises(KeyboardInterrupt):
        convert(d.PSF, [d.DCD], out, frames_per_chunk=10, progress=False)
    assert os.listdir(tmp_path) == []


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="module")
def big_h5md(tmp_path_factory):
    """~240 MB H5MD file: the adk frames repeated (written quickly with h5py)."""
    ref = universe(d.PSF, [d.DCD])
    pos = np.stack([ts.positions.copy() for ts in ref.trajectory])
    n = 98 * 61
    path = tmp_path_factory.mktemp("big") / "big.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        f["h5md"].create_group("author").attrs["name"] = "test"
        f["h5md"].create_group("creator").attrs["name"] = "test"
        g = f.create_group("particles/trajectory")
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        v = g.create_dataset("position/value", shape=(n, 3341, 3), dtype=np.float32,
                             chunks=(1, 3341, 3))
        v.attrs["unit"] = "Angstrom"
        for i in range(0, n, 98):
            v[i:i + 98] = pos
        g["position/step"] = np.arange(n)
        g["position/time"] = np.arange(n, dtype=np.float64)
        g["position/time"].attrs["unit"] = "ps"
    return str(path)


CHILD = """
import os, resource, sys
import MDAnalysis, h5py, numpy
from h5mdx.layout.convert import convert
from h5mdx.testing import write_h5md
from h5mdx.layout.rechunk import rechunk
def vm():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize"):
            return int(line.split()[1]) * 1024
limit = vm() + {extra}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
{call}
print("ok", limit)
"""


def run_child(call, extra, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    code = textwrap.dedent(CHILD).format(call=call, extra=extra)
    return subprocess.Popen([sys.executable, "-c", code], env=env, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_mib", [0, 20, 120])
def test_kill_mid_write_leaves_no_target(tmp_path, big_h5md, kill_after_mib):
    """SIGKILL at several points: before, early in and late in the write."""
    before = _sha(big_h5md)
    out = tmp_path / "killed.h5md"
    call = (f"convert({d.PSF!r}, [{big_h5md!r}], {str(out)!r}, frames_per_chunk=50, "
            "progress=False)")
    proc = run_child(call, 2**34, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        parts = partial_files(out)
        if parts and parts[0].stat().st_size >= kill_after_mib * 2**20:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    assert _sha(big_h5md) == before


@pytest.mark.slow
def test_memory_bounded_below_file_size(tmp_path, big_h5md):
    """rechunk and convert of a 240 MB file under a 150 MB address-space allowance."""
    size = os.path.getsize(big_h5md)
    allowance = 150 * 2**20
    assert size > allowance
    out = tmp_path / "r.h5md"
    proc = run_child(f"rechunk({big_h5md!r}, {str(out)!r}, frames_per_chunk=100, "
                     "buffer_mib=16)", allowance, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    with h5py.File(out) as f, h5py.File(big_h5md) as g:
        v = f["particles/trajectory/position/value"]
        assert v.chunks == (100, 3341, 3)
        np.testing.assert_array_equal(v[-5:], g["particles/trajectory/position/value"][-5:])
    out2 = tmp_path / "c.h5md"
    proc = run_child(f"convert({d.PSF!r}, [{big_h5md!r}], {str(out2)!r}, start=0, stop=3000, "
                     "frames_per_chunk=100, progress=False)", allowance,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    # the same child fails when told to hold the whole input in memory
    proc = run_child(f"h5py.File({big_h5md!r})['particles/trajectory/position/value'][()]",
                     allowance, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.communicate(timeout=120)
    assert proc.returncode != 0


def _cli(argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    _cli_layout.add_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_convert(tmp_path, capsys):
    out = tmp_path / "cli.h5md"
    code = _cli(["convert", d.PSF, d.DCD, str(out), "--frames-per-chunk", "7", "--select",
                 "name CA", "--stop", "20", "--compression", "lzf", "--verify"])
    assert code == 0
    text = capsys.readouterr().out
    assert "frames/s" in text and "verified" in text and "20 frames x 214 atoms" in text
    with h5py.File(out) as f:
        v = f["particles/trajectory/position/value"]
        assert v.chunks == (7, 214, 3) and v.compression == "lzf"
    with pytest.raises(FileExistsError):
        _cli(["convert", d.PSF, d.DCD, str(out)])
    assert _cli(["convert", d.PSF, d.DCD, str(out), "--overwrite", "--contiguous",
                 "--json"]) == 0
    assert '"n_frames": 98' in capsys.readouterr().out


def test_an_h5md_inputs_observables_are_reported_left_behind(tmp_path, capsys):
    """What MDAnalysis gives per frame (the scalar ``lambda``) is copied; what it does not
    (``/parameters``, a vector observable) is named as left behind."""
    import shutil

    src = tmp_path / "cobro_in.h5md"
    shutil.copy(d.H5MD_xvf, src)
    with h5py.File(src, "r+") as f:
        f["parameters/temperature"] = 300.0
        n = f["observables/lambda/value"].shape[0]
        com = f.create_group("observables/com")
        com["value"] = np.zeros((n, 3))
        com["step"] = f["observables/lambda/step"]
        com["time"] = f["observables/lambda/time"]
    out = tmp_path / "cobro.h5md"
    stats = convert(d.TPR_xvf, [str(src)], out, progress=False)
    assert any("/observables and /parameters not copied" in n and "h5mdx rechunk" in n
               for n in stats.notes), stats.notes
    # convert reads H5MD frame by frame through MDAnalysis: 10-20x slower than rechunk
    assert any("is H5MD already: h5mdx rechunk copies it" in n for n in stats.notes)
    with h5py.File(out) as f:
        assert list(f["observables"]) == ["lambda"]
    assert main(["convert", d.TPR_xvf, str(src), str(tmp_path / "c2.h5md"),
                 "--no-progress"]) == 0
    assert "/observables and /parameters not copied" in capsys.readouterr().out
    stats = convert(d.PSF, [d.DCD], tmp_path / "adk.h5md", progress=False)
    assert not any("not copied" in n or "H5MD already" in n for n in stats.notes)


# ----------------------------------------------------------------------------- found by audits


def test_a_truncated_trajectory_fails_instead_of_writing_fewer_frames(tmp_path):
    """MDAnalysis ends a trajectory at a read error: convert refuses to write the short copy."""
    from h5mdx.errors import H5MDReadError

    data = open(d.XTC, "rb").read()
    short = tmp_path / "short.xtc"
    short.write_bytes(data[: len(data) * 6 // 10])
    out = tmp_path / "out.h5md"
    n = len(mda.Universe(d.GRO, str(short)).trajectory)
    with pytest.raises(H5MDReadError, match=rf"short.xtc: MDAnalysis read \d+ of the {n} frames"):
        convert(d.GRO, [short], out, progress=False)
    assert not out.exists() and not partial_files(out)


def test_a_dcd_cut_inside_a_frame_fails_instead_of_writing_the_whole_ones(tmp_path):
    """MDAnalysis counts a DCD's frames from its size: a file cut inside frame 13 read as
    12 frames, and convert wrote them with exit 0. A whole DCD, alone
    or after another trajectory, converts as before."""
    from h5mdx.errors import H5MDReadError

    short = tmp_path / "cut.dcd"
    short.write_bytes(open(d.DCD, "rb").read()[:500_000])
    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"cut.dcd: the file ends \d+ bytes into frame "
                                            r"13 .* reads only the 12 whole frames"):
        convert(d.PSF, [short], out, progress=False)
    assert not out.exists() and not partial_files(out)
    with pytest.raises(H5MDReadError, match="cut.dcd"):
        convert(d.PSF, [d.DCD, short], out, progress=False)
    convert(d.PSF, [d.DCD, d.DCD], out, progress=False)
    with xr.open_dataset(out, engine="h5md") as ds:
        assert ds.sizes["time"] == 2 * 98


def test_an_unreadable_input_is_one_message(tmp_path, capsys):
    """An input MDAnalysis cannot open gives one error: no 'Exception ignored in
    ReaderBase.__del__' block after it, and no --format hint where the format was known
   ."""
    import gc

    from h5mdx.cli import main

    broken = tmp_path / "broken.h5md"  # not HDF5 (an empty file is said as empty)
    broken.write_bytes(b"not an HDF5 file\n" * 8)
    assert main(["convert", d.PSF, str(broken), str(tmp_path / "o.h5md"), "--no-progress"]) == 1
    gc.collect()
    err = capsys.readouterr().err
    assert "MDAnalysis cannot read" in err and "broken.h5md" in err
    assert "Exception ignored" not in err and "--format" not in err
    assert err.count("\n") <= 2, err


def test_a_box_the_first_frame_lacks_is_said_and_a_missing_box_is_zeros(tmp_path, capsys):
    """The first frame decides the elements: the box of later frames (an XYZ file without
    one, then an XTC) was left out without a word; a frame without a box after boxed ones
    is written as zeros (MDAnalysis' no box), where the command said NaN."""
    u = universe(d.COORDINATES_TOPOLOGY, [d.COORDINATES_XTC])
    u.dimensions = None
    xyz = tmp_path / "nobox.xyz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mda.Writer(str(xyz), n_atoms=u.atoms.n_atoms) as w:
            w.write(u.atoms)
    stats = convert(d.COORDINATES_TOPOLOGY, [xyz, d.COORDINATES_XTC], tmp_path / "a.h5md",
                    progress=False)
    assert "box_edges" not in stats.elements
    n = len(universe(d.COORDINATES_TOPOLOGY, [d.COORDINATES_XTC]).trajectory)
    assert f"{n} frames had a box, not written: the first frame written has none" in \
        " ".join(stats.notes)
    out = tmp_path / "b.h5md"
    n_all = n + 1
    with pytest.warns(UserWarning, match=rf"test\.xtc, .*nobox\.xyz: 1 of {n_all} frames have no box; "
                      r"their /particles/trajectory/box/edges are written as zeros"):
        assert main(["convert", d.COORDINATES_TOPOLOGY, d.COORDINATES_XTC, str(xyz), str(out),
                     "--no-progress"]) == 0
    assert "had no box" not in capsys.readouterr().out  # the warning, not a second note
    with xr.open_dataset(out, engine="h5md") as ds:
        assert (ds.box_edges.values[-1] == 0).all() and (ds.box_edges.values[0] > 0).any()


def test_a_library_convert_says_how_many_frames_had_no_box(tmp_path):
    """Frames without a box are written as zeros; only the command line said so, and
    convert(...) called from Python wrote them in silence. Now it warns once, naming the
    input and how many frames; MDAnalysis reads those frames back as having no box."""
    from MDAnalysis.coordinates.memory import MemoryReader

    src = universe(d.PSF, [d.DCD])
    pos = np.stack([ts.positions.copy() for ts in src.trajectory[:4]])
    dims = np.array([[50, 50, 50, 90, 90, 90]] * 4, dtype=np.float32)
    dims[[1, 3]] = 0
    u = mda.Universe(d.PSF, pos, format=MemoryReader, dimensions=dims)
    out = tmp_path / "some boxes.h5md"
    with pytest.warns(UserWarning) as got:
        stats = convert(u, out=out, progress=False)
    said = [str(w.message) for w in got if "no box" in str(w.message)]
    assert said == [f"{d.PSF}: 2 of 4 frames have no box; their /particles/trajectory/box/"
                    "edges are written as zeros, MDAnalysis' mark of no box (its readers give "
                    "such a frame no dimensions); do not take them as a box"]
    assert stats.missing == {"box_edges": 2}
    with h5py.File(out) as f:
        edges = f["particles/trajectory/box/edges/value"][()]
    np.testing.assert_array_equal(edges[:, 0, 0], [50, 0, 50, 0])
    back = universe(d.PSF, [str(out)])
    assert [ts.dimensions is None for ts in back.trajectory] == [False, True, False, True]


def test_times_restarting_after_one_frame_continue_by_the_readers_dt(tmp_path):
    one = tmp_path / "one.h5md"
    convert(d.GRO, [d.TRR], one, stop=1, progress=False)
    cat = tmp_path / "cat.h5md"
    convert(d.GRO, [one, d.TRR], cat, progress=False)
    dt = mda.Universe(d.GRO, d.TRR).trajectory.dt
    with xr.open_dataset(cat, engine="h5md") as ds:
        time = ds.time.values
        assert (np.diff(time) > 0).all() and (np.diff(ds.step.values) > 0).all()
        np.testing.assert_allclose(time[1] - time[0], dt, rtol=1e-6)


def test_a_negative_step_is_refused(tmp_path):
    with pytest.raises(ValueError, match="positive number of frames, not -1"):
        convert(d.PSF, [d.DCD], tmp_path / "rev.h5md", step=-1, progress=False)


def test_overwrite_replaces_only_a_file_or_a_zarr_store(tmp_path):
    precious = tmp_path / "notzarr.zarr"
    precious.mkdir()
    (precious / "precious").write_text("keep")
    with pytest.raises(ValueError, match="not a Zarr store"):
        convert(d.PSF, [d.DCD], precious, overwrite=True, progress=False)
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a directory; h5mdx replaces a file"):
        convert(d.PSF, [d.DCD], folder, overwrite=True, progress=False)
    assert (precious / "precious").read_text() == "keep" and folder.is_dir()
    store = tmp_path / "real.zarr"
    convert(d.PSF, [d.DCD], store, stop=2, progress=False)
    convert(d.PSF, [d.DCD], store, stop=3, overwrite=True, progress=False)
    with xr.open_zarr(store) as ds:
        assert ds.sizes["time"] == 3


@pytest.mark.parametrize("name", ["fifo.h5md", "fifo.zarr"])
def test_overwrite_never_replaces_a_fifo_or_a_device(tmp_path, adk_h5md, name):
    """--overwrite put the output in place of a FIFO or device node (as root, /dev/null
    became a 4 MB file), rc 0."""
    from h5mdx.layout.rechunk import rechunk

    node = tmp_path / name
    os.mkfifo(node)
    link = tmp_path / ("link" + node.suffix)
    link.symlink_to(node)
    for target in (node, link):
        with pytest.raises(ValueError, match="is not a regular file"):
            convert(d.PSF, [d.DCD], target, stop=2, overwrite=True, progress=False)
        with pytest.raises(ValueError, match="is not a regular file"):
            rechunk(adk_h5md, target, overwrite=True)
    assert node.is_fifo() and link.is_symlink()


def test_the_output_forgotten_never_replaces_the_trajectory(tmp_path, capsys):
    """`h5mdx convert top.gro traj.xtc` takes traj.xtc as the output; its error advised
    --overwrite, which replaced the trajectory with a one-frame HDF5 file, and `out.dcd`
    was written as HDF5. An output named as another format is refused, with the usage.
   """
    import shutil

    xtc = tmp_path / "traj.xtc"
    shutil.copy(d.XTC, xtc)
    before = xtc.read_bytes()
    for extra in ([], ["--overwrite"]):
        assert main(["convert", d.GRO, str(xtc), *extra]) != 0
        err = capsys.readouterr().err
        assert "named as a .xtc file" in err and "did you forget the output?" in err
    assert xtc.read_bytes() == before
    with pytest.raises(ValueError, match=r"named as a .dcd file: convert writes H5MD"):
        convert(d.PSF, [d.DCD], tmp_path / "out.dcd", progress=False)
    assert not (tmp_path / "out.dcd").exists()
    convert(d.PSF, [d.DCD], tmp_path / "out.hdf5", stop=2, progress=False)  # HDF5 names


def test_an_h5md_trajectory_taken_as_the_output_is_said_to_be_forgotten(tmp_path, capsys):
    """`h5mdx convert top.pdb traj.h5md` (the output forgotten) said "pass --overwrite to
    replace it", which wrote the PDB's one frame over the trajectory's five."""
    import shutil

    traj = tmp_path / "traj.h5md"
    shutil.copy(d.COORDINATES_H5MD, traj)
    before = traj.read_bytes()
    assert main(["convert", d.COORDINATES_TOPOLOGY, str(traj), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "did you forget the output?" in err and "the topology's own frames" in err
    assert "already exists; pass --overwrite" not in err
    assert traj.read_bytes() == before
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        convert(d.COORDINATES_TOPOLOGY, [d.COORDINATES_XTC], traj, progress=False)


def test_a_topology_without_coordinates_is_a_clear_error(tmp_path, capsys):
    from h5mdx.errors import TopologyError

    with pytest.raises(TopologyError, match="holds no coordinates MDAnalysis reads"):
        convert(d.PSF, [], tmp_path / "x.h5md", progress=False)
    assert main(["convert", d.PSF, str(tmp_path / "x.h5md")]) != 0
    assert "holds no coordinates" in capsys.readouterr().err


def test_errors_name_the_output_not_the_hidden_temporary_file(tmp_path, monkeypatch):
    def fail(self, path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(H5MDWriter, "__init__", fail)
    out = tmp_path / "out.h5md"
    with pytest.raises(PermissionError) as err:
        convert(d.PSF, [d.DCD], out, progress=False)
    assert f"cannot write {str(out)!r}" in str(err.value) and "partial" not in str(err.value)
    assert not partial_files(out)


@pytest.mark.parametrize("group", ["a/b", "/", "", ".."])
def test_a_group_that_is_not_one_name_is_refused(tmp_path, group):
    out = tmp_path / "g.h5md"
    with pytest.raises(ValueError, match="one non-empty name without '/'"):
        convert(d.PSF, [d.DCD], out, group=group, progress=False)
    assert not out.exists()


def test_format_given_where_the_file_name_does_not_tell_it(tmp_path, capsys):
    """A LAMMPS dump named .lammpstrj: MDAnalysis needs format="LAMMPSDUMP"."""
    out = tmp_path / "lmp.h5md"
    assert main(["convert", d.LAMMPS_image_vf, d.LAMMPSDUMP_image_vf, str(out)]) != 0
    err = capsys.readouterr().err
    # MDAnalysis' 8 lines said in one, with the format it knows by that name
    assert err.splitlines()[0].endswith(
        "it knows no trajectory format 'LAMMPSTRJ' (of "
        f"{d.LAMMPSDUMP_image_vf!r}); give one with --format: LAMMPSDUMP?"), err
    assert len(err.splitlines()) == 1, err  # one line: it says all (no --debug hint)
    assert main(["convert", d.LAMMPSDUMP_image_vf, str(out)]) != 0
    # the option alone on the command line (the API's keyword too said "(format=)")
    assert "it knows no topology format 'LAMMPSTRJ'; give one with --topology-format: " \
        "LAMMPSDUMP?" in capsys.readouterr().err
    assert main(["convert", "--format", "NOSUCH", d.LAMMPS_image_vf,
                 d.LAMMPSDUMP_image_vf, str(out)]) != 0
    err = capsys.readouterr().err
    assert "it knows no trajectory format 'NOSUCH'" in err and "LAMMPSDUMP, " in err, err
    assert main(["convert", "--format", "LAMMPSDUMP", d.LAMMPS_image_vf,
                 d.LAMMPSDUMP_image_vf, str(out)]) == 0
    u = mda.Universe(d.LAMMPS_image_vf, d.LAMMPSDUMP_image_vf, format="LAMMPSDUMP")
    with xr.open_dataset(out, engine="h5md") as ds:
        assert ds.sizes["time"] == len(u.trajectory)
        for i, ts in enumerate(u.trajectory):
            np.testing.assert_allclose(ds.position[i].values, ts.positions, rtol=1e-6)


def test_bad_numbers_and_a_file_given_to_doctor_are_clear(tmp_path, capsys):
    from h5mdx.format.writer import Layout
    from h5mdx.layout.rechunk import rechunk

    for mib in (float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match="chunk_mib must be a finite number > 0"):
            Layout(chunk_mib=mib)
    src = tmp_path / "a.h5md"
    convert(d.PSF, [d.DCD], src, stop=2, progress=False)
    with pytest.raises(ValueError, match="buffer_mib must be a finite number > 0"):
        rechunk(src, tmp_path / "b.h5md", buffer_mib=0)
    stats = rechunk(src, tmp_path / "c.h5md", contiguous=True)
    assert "compression kept" not in stats.summary()
    assert main(["doctor", str(src)]) == 2
    assert f"h5mdx info {src}" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".h5md", ".zarr"])
def test_a_selection_keeps_which_atoms_it_holds_as_h5md_id(tmp_path, suffix):
    import h5mdx
    from h5mdx.testing import adk_example

    out = tmp_path / f"ca{suffix}"
    convert(d.PSF, [d.DCD], out, select="name CA", stop=3, progress=False)
    ca = mda.Universe(d.PSF, d.DCD).select_atoms("name CA").indices
    opened = (xr.open_zarr(out) if suffix == ".zarr" else xr.open_dataset(out, engine="h5md"))
    with opened as ds:
        np.testing.assert_array_equal(ds["id"].values, ca)
        if suffix == ".h5md":
            h5mdx.to_h5md(ds.isel(atom=[3, 1]), tmp_path / "two.h5md")
            with xr.open_dataset(tmp_path / "two.h5md", engine="h5md") as two:
                np.testing.assert_array_equal(two["id"].values, ca[[3, 1]])
    # a Dataset without id: to_h5md writes the atom coordinate of a selection as id
    with xr.open_dataset(adk_example(tmp_path / "adk.h5md"), engine="h5md") as ds:
        h5mdx.to_h5md(ds.isel(atom=[7, 2], time=slice(0, 2)), tmp_path / f"sel{suffix}.h5md")
    with xr.open_dataset(tmp_path / f"sel{suffix}.h5md", engine="h5md") as sel:
        np.testing.assert_array_equal(sel["id"].values, [7, 2])


def test_a_psf_converted_file_carries_its_topology(tmp_path):
    """convert of a PSF's trajectory writes VMD's structure module, as VMD's H5MD plugin
    reads it (names per species, bonds 1-based): the file names its atoms and selects and
    weights them without the PSF, equal to MDAnalysis on the PSF; a selection's file
    holds its atoms' own."""
    from MDAnalysis.analysis.rms import RMSD

    import h5mdx  # noqa: F401 - registers ds.md
    from h5mdx.engine.topology import load_universe

    out = tmp_path / "adk.h5md"
    convert(d.PSF, [d.DCD], out, progress=False)
    ref = universe(d.PSF, [d.DCD])
    with xr.open_dataset(out, engine="h5md") as ds:
        for coord, attr in (("name", "names"), ("type", "types"), ("resname", "resnames"),
                            ("resid", "resids"), ("segid", "segids")):
            np.testing.assert_array_equal(ds[coord].values, getattr(ref.atoms, attr))
        got = ds.md.rmsd(select="backbone and resid 10:60", weights="mass").values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(ref, select="backbone and resid 10:60",
                        weights="mass").run().results.rmsd[:, 2]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(np.sort(load_universe(str(out)).bonds.indices, axis=0),
                                  np.sort(ref.bonds.indices, axis=0))
    with h5py.File(out) as f:  # as the plugin reads it: name[k] of species indexOfSpecies[k]
        vmd = f["parameters/vmd_structure"]
        lookup = dict(zip(vmd["indexOfSpecies"][()].tolist(),
                          vmd["name"][()].astype(str).tolist(), strict=True))
        species = f["particles/trajectory/species"][()].tolist()
        assert [lookup[s] for s in species] == list(ref.atoms.names)
        assert vmd["bond_from"][()].min() >= 1 and vmd["name"].dtype.kind == "S"
    convert(d.PSF, [d.DCD], tmp_path / "ca.h5md", select="name CA", stop=3, progress=False)
    with xr.open_dataset(tmp_path / "ca.h5md", engine="h5md", select="resid 1:50") as ca:
        assert ca.sizes["atom"] == 50 and set(ca.name.values.tolist()) == {"CA"}
        np.testing.assert_array_equal(ca["id"].values,
                                      ref.select_atoms("name CA and resid 1:50").indices)


def test_chains_numbering_residues_alike_are_said_to_lose_their_resnames(tmp_path):
    """VMD's structure module holds one resname per residue number: two chains numbered
    alike with other residues left the names out without a word. The convert says so,
    naming the output and a residue; the names and residue numbers written read back."""
    import MDAnalysis as mda

    ref = universe(d.PSF, [d.DCD])
    two = mda.Merge(ref.atoms, ref.atoms)  # two chains, residues numbered 1..214 each
    two.segments.segids = ["A", "B"]
    two.residues[214:].resnames = ["GLY"] * 214
    out = tmp_path / "two.h5md"
    with pytest.warns(UserWarning, match=r"two\.h5md \[/parameters/vmd_structure/resname\]: "
                      r"\d+ residue number\(s\) stand for residues of other resnames "
                      r"\(resid 1: 'GLY', 'MET'\).*resname left out"):
        convert(two, [], out, progress=False)
    with xr.open_dataset(out, engine="h5md") as ds:
        assert "resname" not in ds.coords
        np.testing.assert_array_equal(ds.resid.values, two.atoms.resids)
        np.testing.assert_array_equal(ds.name.values, two.atoms.names)
    # one name per number: written, and no warning
    two.residues[214:].resnames = ref.residues.resnames
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        convert(two, [], tmp_path / "same.h5md", progress=False)
    with xr.open_dataset(tmp_path / "same.h5md", engine="h5md") as ds:
        np.testing.assert_array_equal(ds.resname.values, two.atoms.resnames)


def test_a_zstd_file_reads_through_h5py_in_a_fresh_process(tmp_path):
    """h5py decodes hdf5plugin's filters only once hdf5plugin is imported: the engine
    imports it where a file needs it (found by an audit: the h5py path failed)."""
    pytest.importorskip("hdf5plugin")
    out = tmp_path / "z.h5md"
    convert(d.PSF, [d.DCD], out, stop=3, compression="zstd", progress=False)
    code = ("import sys, xarray as xr; assert 'hdf5plugin' not in sys.modules; "
            f"ds = xr.open_dataset({str(out)!r}, engine='h5md'); "
            "print(repr(float(ds.position[2].astype('f8').sum())))")
    env = {**os.environ, "H5MDX_DIRECT_READ": "0"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    want = mda.Universe(d.PSF, d.DCD).trajectory[2].positions.astype("f8").sum()
    assert float(got.stdout) == pytest.approx(want, rel=1e-6)


def test_a_contiguous_zarr_store_too_large_to_hold_is_refused(tmp_path, monkeypatch):
    from h5mdx.layout import export

    monkeypatch.setattr(export, "MAX_ONE_CHUNK_BYTES", 2**20)  # the adk DCD: 3.9 MB
    out = tmp_path / "c.zarr"
    with pytest.raises(ValueError, match="contiguous makes one Zarr chunk of .* GiB"):
        convert(d.PSF, [d.DCD], out, contiguous=True, progress=False)
    assert not out.exists()
    convert(d.PSF, [d.DCD], out, contiguous=True, stop=5, progress=False)  # 0.2 MB: fine


def test_the_summary_gives_the_chunks_written(tmp_path):
    """Chunks never exceed the frames written: a 3-frame copy says chunks of 3 frames."""
    stats = convert(d.PSF, [d.DCD], tmp_path / "three.h5md", stop=3,
                    frames_per_chunk=1_000_000, progress=False)
    assert "chunks of 3 frames" in stats.summary()
    with h5py.File(tmp_path / "three.h5md") as f:
        assert f["particles/trajectory/position/value"].chunks[0] == 3


def test_an_option_between_the_trajectories_and_the_output(tmp_path, capsys):
    """`h5mdx convert TOP TRAJ --contiguous OUT` (argparse ends the file list at the
    option); other unknown arguments stay an error."""
    out = tmp_path / "c.h5md"
    assert main(["convert", d.PSF, d.DCD, "--contiguous", str(out)]) == 0
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks is None
    with pytest.raises(SystemExit):
        main(["convert", d.PSF, d.DCD, "--contiguous", str(tmp_path / "d.h5md"), "--bogus"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_observables_the_reader_gives_are_written(tmp_path):
    """A TRR's ``lambda`` (MDAnalysis' ``ts.data``) is written as ``/observables/lambda``
    on the frames' steps and times, as MDAnalysis' H5MDWriter does (it was dropped
    silently); an H5MD input whose observables are all copied gets no "not copied" note;
    a Zarr output says it leaves them out."""
    u = mda.Universe(d.TPR_xvf, d.TRR_xvf)
    want = np.array([ts.data["lambda"] for ts in u.trajectory])
    out = tmp_path / "trr.h5md"
    stats = convert(d.TPR_xvf, [d.TRR_xvf], out, progress=False)
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["observables/lambda/value"][()], want)
        np.testing.assert_array_equal(f["observables/lambda/step"][()],
                                      f["particles/trajectory/position/step"][()])
    with xr.open_dataset(out, engine="h5md", group="observables") as obs:
        np.testing.assert_array_equal(obs["lambda"].values, want)
    assert not stats.notes
    again = convert(d.TPR_xvf, [d.H5MD_xvf], tmp_path / "h5md.h5md", progress=False)
    assert not [n for n in again.notes if "not copied" in n]
    # an H5MD input's observable keeps its unit (MDAnalysis gives the value alone)
    import shutil

    src = tmp_path / "units.h5md"
    shutil.copy(d.H5MD_xvf, src)
    with h5py.File(src, "r+") as f:
        f["observables/lambda/value"].attrs["unit"] = "kcal mol-1"
    convert(d.TPR_xvf, [str(src)], tmp_path / "units_out.h5md", progress=False)
    with h5py.File(tmp_path / "units_out.h5md") as f:
        assert f["observables/lambda/value"].attrs["unit"] == "kcal mol-1"
    zarr = convert(d.TPR_xvf, [d.TRR_xvf], tmp_path / "trr.zarr", progress=False)
    assert any("observables ['lambda'] not written" in n for n in zarr.notes)
    # a Universe of two H5MD files whose units differ: the first file's unit was given to
    # the second's values too (only its filename was looked at); now none, as
    # for the two files given by name
    other = tmp_path / "units_kj.h5md"
    shutil.copy(d.H5MD_xvf, other)
    with h5py.File(other, "r+") as f:
        f["observables/lambda/value"].attrs["unit"] = "kJ mol-1"
    for given in ((mda.Universe(d.TPR_xvf, [str(src), str(other)]), []),
                  (d.TPR_xvf, [str(src), str(other)])):
        out2 = tmp_path / "two.h5md"
        convert(*given, out2, progress=False, overwrite=True)
        with h5py.File(out2) as f:
            assert "unit" not in f["observables/lambda/value"].attrs


def test_a_reader_that_knows_no_units_is_noted(tmp_path):
    """A LAMMPS dump: MDAnalysis knows none of its units and converts nothing; the copy is
    labelled in MDAnalysis' units, so convert says so (it said nothing)."""
    stats = convert(d.LAMMPS_image_vf, [d.LAMMPSDUMP_image_vf], tmp_path / "lmp.h5md",
                    format="LAMMPSDUMP", progress=False)
    assert any("does not know the length, time, velocity units" in n for n in stats.notes)
    # MDAnalysis' warning of the first frame, read before the others, is a note too (it
    # was also shown as a warning)
    assert stats.notes.count("MDAnalysis: Reader has no dt information, set to 1.0 ps") == 1
    clean = convert(d.PSF, [d.DCD], tmp_path / "adk.h5md", progress=False)
    assert not any("does not know" in n for n in clean.notes)
    # a GRO file: its lengths are converted from nm, its time is not known (an audit
    # found the note said "converts nothing")
    gro = convert(d.GRO, [], tmp_path / "gro.h5md", progress=False)
    [note] = [n for n in gro.notes if "does not know" in n]
    assert "does not know the time units" in note and "(time as ps)" in note, note
    assert note.endswith("; converted: length from nm"), note


def test_an_h5md_file_mdanalysis_cannot_read_points_to_h5mdx(tmp_path, capsys):
    """Other programs' H5MD files often lack what MDAnalysis' reader needs (here units,
    as LAMMPS writes none): the error says that h5mdx reads them itself, and how to copy
    them."""
    from h5mdx.cli import main

    rng = np.random.default_rng(1)
    traj = write_h5md(tmp_path / "lammps.h5", {"all": {
        "position": {"value": rng.random((3, 3341, 3)), "step": np.arange(3)}}},
        box={"all": {"dimension": 3, "boundary": ["periodic"] * 3,
                     "edges": {"value": np.full((3, 3), 50.0), "step": np.arange(3)}}})
    assert main(["convert", d.PSF, traj, str(tmp_path / "o.h5md"), "--format", "H5MD",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "MDAnalysis cannot read" in err
    assert f"h5mdx reads {traj} itself: h5mdx rechunk IN OUT copies" in err
    assert not (tmp_path / "o.h5md").exists()


def test_a_topology_of_other_atoms_is_one_line_without_the_h5md_hint(tmp_path, capsys):
    """The atom counts that differ were said in MDAnalysis' three lines, and of an H5MD
    trajectory with the hint that h5mdx reads it itself (rechunk does not help there)."""
    from h5mdx.cli import main

    for traj in (d.COORDINATES_H5MD, d.TRR_multi_frame):
        assert main(["convert", d.PSF, traj, str(tmp_path / "o.h5md"), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "same number of atoms!; Topology number of atoms 3341; Trajectory:" in err
        assert "h5mdx reads" not in err and "rechunk" not in err
        assert not (tmp_path / "o.h5md").exists()


def test_a_directory_or_a_zarr_store_given_as_input_is_said_as_such(tmp_path, capsys):
    """A directory was "a format ''" MDAnalysis does not know, with its 50 formats listed;
    a Zarr store written by h5mdx was "format 'ZARR'"."""
    from h5mdx.cli import main

    store = tmp_path / "adk.zarr"
    assert main(["convert", d.PSF, d.DCD, str(store), "--stop", "2", "--no-progress"]) == 0
    capsys.readouterr()
    (tmp_path / "adir").mkdir()
    # the advice runs as printed: .md exists once h5mdx is imported
    for argv, said in (([d.PSF, str(store)], ".md.to_h5md(OUT) writes it as H5MD (after "
                                             "import h5mdx"),
                       ([d.PSF, str(tmp_path / "adir")], "is a directory, not a topology"),
                       ([str(tmp_path / "adir"), d.DCD], "is a directory, not a topology")):
        assert main(["convert", *argv, str(tmp_path / "o.h5md"), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert said in err and "formats" not in err and "Traceback" not in err, err
        assert not (tmp_path / "o.h5md").exists()


def test_an_mdtraj_hdf5_trajectory_is_named_as_such(tmp_path, capsys):
    """MDTraj's HDF5 file was "no trajectory format 'H5'; give --format: H5MD?" (and with
    --format H5MD, "object 'particles' doesn't exist"); h5mdx info names the format."""
    from h5mdx.cli import main

    for name in ("traj.h5", "traj.h5md"):
        path = tmp_path / name
        with h5py.File(path, "w") as f:
            f.attrs["conventions"] = "Pande"
            f["coordinates"] = np.zeros((2, 3341, 3), np.float32)
        for extra in ([], ["--format", "H5MD"]):
            assert main(["convert", d.PSF, str(path), str(tmp_path / "o.h5md"),
                         "--no-progress", *extra]) == 1
            err = capsys.readouterr().err
            assert "it is MDTraj's HDF5 format" in err and "H5MD?" not in err, err
            assert "'particles' doesn't exist" not in err


def test_an_h5md_input_without_frames_says_so(tmp_path):
    """convert of an H5MD file whose positions hold no frames: MDAnalysis' error says
    nothing (the message read 'adk.psf with zero.h5md: .')."""
    empty = tmp_path / "zero.h5md"
    convert(d.PSF, [d.DCD], empty, stop=2, progress=False)
    with h5py.File(empty, "a") as f:
        for name in ("value", "step", "time"):
            f[f"particles/trajectory/position/{name}"].resize(0, axis=0)
    with pytest.raises(Exception, match=r"zero\.h5md: the positions hold no frames; there "
                                        "is nothing to convert"):
        convert(d.PSF, [str(empty)], tmp_path / "out.h5md", progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_zarr_write_leaves_no_partial_store(tmp_path, big_h5md, sig):
    """A Zarr write stopped by SIGINT/SIGTERM: chunk writes already handed to zarr's I/O
    thread and dask's workers landed after the cleanup, and the hidden partial store
    stayed behind in 5 of 8 runs. It is removed until it stays gone."""
    out = tmp_path / "out.zarr"
    for delay in (0.3, 0.8, 1.5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "h5mdx", "rechunk", "--compression", "gzip:6",
             str(big_h5md), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        deadline = time.time() + 60
        while not partial_files(out) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(sig)
        text, _ = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, text
        time.sleep(0.5)  # what a write still in flight would re-create
        assert [p.name for p in tmp_path.iterdir()] == [], (delay, text)


def test_adk_example_reuses_its_file_and_refuses_another(tmp_path, monkeypatch):
    """``adk_example(path)`` is written once and reused; another file at that path (or
    the example in other chunks) is refused, not served as the example (found by an
    audit); the default cache's stale copy is rewritten."""
    from h5mdx.testing import adk_example

    path = adk_example(tmp_path / "adk.h5md")
    stamp = os.stat(path).st_mtime_ns
    assert adk_example(path) == path and os.stat(path).st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match=r"not the adk example \(chunks \(10, 3341, 3\), "
                       "not of 5 frames\\); remove it"):
        adk_example(path, frames_per_chunk=5)
    other = write_h5md(tmp_path / "other.h5md", {"trajectory": {"position": {
        "value": np.zeros((20, 3341, 3)), "step": np.arange(20)}}})
    with pytest.raises(FileExistsError, match=r"positions of shape \(20, 3341, 3\)"):
        adk_example(other)
    big = adk_example(tmp_path / "big.h5md", frames_per_chunk=200)  # chunks of its 98
    assert adk_example(big, frames_per_chunk=200) == big  # its own file: reused
    monkeypatch.setenv("HOME", str(tmp_path))
    cached = tmp_path / ".cache" / "h5mdx" / "adk-c10.h5md"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(open(other, "rb").read())
    with xr.open_dataset(adk_example(), engine="h5md") as ds:
        assert ds.sizes["time"] == 98


def test_errors_of_the_command_line_name_its_options(tmp_path, capsys):
    """The API's keyword names (frames_per_chunk, chunk_mib) are said as the options the
    user typed; a start past the end gives the frame count."""
    from h5mdx.cli import main

    src = str(tmp_path / "a.h5md")
    convert(d.PSF, [d.DCD], src, stop=2, progress=False)
    for option, said in (("--frames-per-chunk", "--frames-per-chunk: must be >= 1, not 0"),
                         ("--chunk-mib", "--chunk-mib: must be a finite number > 0")):
        with pytest.raises(SystemExit) as stop:  # a usage error, said by argparse
            main(["rechunk", src, str(tmp_path / "b.h5md"), option, "0"])
        assert stop.value.code == 2
        assert f"h5mdx rechunk: error: argument {said}" in capsys.readouterr().err
    assert main(["convert", d.PSF, d.DCD, str(tmp_path / "c.h5md"), "--start", "200"]) == 2
    assert "--start 200 selects no frames: the trajectory has 98 frames" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match=r"no frames to write: the trajectory has 98 frames "
                                         r"\(start=200, stop=None, step=None\)"):
        convert(d.PSF, [d.DCD], str(tmp_path / "c.h5md"), start=200, progress=False)


def test_a_resname_warning_points_at_the_caller(tmp_path):
    """The warning that VMD's structure module cannot hold a resname names the line that
    called convert or to_h5md (audit62: it named convert.py's _writer and export.py's
    _structure)."""
    ref = universe(d.PSF, [d.DCD])
    two = mda.Merge(ref.atoms, ref.atoms)
    two.residues[214:].resnames = ["GLY"] * 214
    with pytest.warns(UserWarning, match="resname left out") as caught:
        convert(two, [], tmp_path / "two.h5md", progress=False)
    assert [w.filename for w in caught if "resname" in str(w.message)] == [__file__]
    with xr.open_dataset(tmp_path / "two.h5md", engine="h5md") as ds:
        ds = ds.assign_coords(resname=("atom", two.atoms.resnames))
        with pytest.warns(UserWarning, match="resname left out") as caught:
            h5mdx.layout.export.to_h5md(ds, tmp_path / "again.h5md")
    assert [w.filename for w in caught if "resname" in str(w.message)] == [__file__]


@pytest.mark.parametrize("failure", ["truncated", "interrupt"])
def test_a_contiguous_write_that_fails_raises_its_own_error(tmp_path, monkeypatch, failure):
    """With --contiguous, a read error or a Ctrl-C while converting came out as "ValueError:
    .x.h5md.HOST.PID.RND.h5mdx-partial: 0 frames written but 98 announced for contiguous
    storage" (the writer's count, at its close after the failure): the failure
    itself is raised now, and nothing is left."""
    import h5mdx.layout.convert as module
    from h5mdx.errors import H5MDReadError

    out = tmp_path / "out.h5md"
    if failure == "truncated":
        data = open(d.XTC, "rb").read()
        short = tmp_path / "short.xtc"
        short.write_bytes(data[: len(data) * 6 // 10])
        n = len(mda.Universe(d.GRO, str(short)).trajectory)
        with pytest.raises(H5MDReadError, match=rf"short.xtc: MDAnalysis read \d+ of the {n} "):
            convert(d.GRO, [short], out, contiguous=True, progress=False)
    else:
        original = module._frame_arrays
        seen = []

        def interrupted(*args, **kwargs):
            seen.append(1)
            if len(seen) == 25:
                raise KeyboardInterrupt
            return original(*args, **kwargs)

        monkeypatch.setattr(module, "_frame_arrays", interrupted)
        with pytest.raises(KeyboardInterrupt):
            convert(d.PSF, [d.DCD], out, contiguous=True, progress=False)
        assert len(seen) == 25
    assert not out.exists() and not partial_files(out)


def test_a_universe_is_not_converted_over_the_files_it_reads(tmp_path):
    """convert(Universe(top, 'a.h5md'), [], 'a.h5md', overwrite=True) replaced its own
    input (its /parameters and what convert does not copy lost): only files given by name
    counted as inputs. The Universe's topology and trajectory files (each of a
    chain) are inputs now; a Universe built in memory converts as before."""
    a, b = tmp_path / "a.h5md", tmp_path / "b.h5md"
    convert(d.PSF, [d.DCD], a, stop=3, progress=False)
    convert(d.PSF, [d.DCD], b, start=3, stop=5, progress=False)
    before = _sha(b)
    for u in (universe(d.PSF, [str(b)]), universe(d.PSF, [str(a), str(b)])):
        with pytest.raises(ValueError, match=r"b.h5md' is also an input"):
            convert(u, [], b, overwrite=True, progress=False)
    assert _sha(b) == before and not partial_files(b)
    merged = mda.Merge(universe(d.PSF, [d.DCD]).atoms)
    assert convert(merged, [], tmp_path / "m.h5md", progress=False).n_frames == 1


def test_a_trz_files_energies_are_written_as_observables(tmp_path):
    """MDAnalysis gives a TRZ's pressure, energies and temperature as arrays of one value
    (``ts.data['pressure']`` is ``array([2062131.5])``): convert wrote only scalars and
    dropped them without a word. They are written as one-value observables now,
    read back alike by the h5md engine and MDAnalysis; the pressure tensor (6 values a
    frame) is noted as left out."""
    u = universe(d.TRZ_psf, [d.TRZ])
    names = ("pressure", "total_energy", "potential_energy", "kinetic_energy", "temperature")
    want = {k: np.array([ts.data[k][0] for ts in u.trajectory]) for k in names}
    out = tmp_path / "trz.h5md"
    stats = convert(d.TRZ_psf, [d.TRZ], out, progress=False)
    assert "observable 'pressure_tensor' left out: 6 values a frame (shape (1, 6)); convert " \
           "writes those of one value" in stats.notes
    with xr.open_dataset(out, engine="h5md", group="observables") as obs:
        for k in names:
            np.testing.assert_array_equal(obs[k].values, want[k])
        assert "pressure_tensor" not in obs
    back = universe(d.TRZ_psf, [str(out)])
    np.testing.assert_array_equal([ts.data["pressure"] for ts in back.trajectory],
                                  want["pressure"])
    # a PDB's per-atom occupancy is no observable, and no note
    pdb = convert(d.PDB_multiframe, [], tmp_path / "nmr.h5md", progress=False)
    assert not [n for n in pdb.notes if "observable" in n]
    with h5py.File(tmp_path / "nmr.h5md") as f:
        assert "observables" not in f


def test_a_selections_per_atom_values_are_no_observable_left_out(tmp_path):
    """A PDB's occupancy and tempfactor are per-atom arrays of all its atoms: with a
    selection they were taken for several values a frame and noted "observable
    'occupancy' left out: 47681 values a frame (shape (47681,))". No note
    now, as without the selection."""
    stats = convert(d.PDB, [], tmp_path / "ca.h5md", select="name CA", progress=False)
    assert not [n for n in stats.notes if "observable" in n], stats.notes
    with h5py.File(tmp_path / "ca.h5md") as f:
        assert "observables" not in f
        assert f["particles/trajectory/position/value"].shape[1] == 214


def test_an_output_named_in_capitals_zarr_is_a_zarr_store(tmp_path):
    """``h5mdx convert adk.psf adk.dcd OUT.ZARR`` wrote an HDF5 file named OUT.ZARR (the
    suffix was matched in lower case only, and ".ZARR" passed as a Zarr name):
    it writes a Zarr store now, as OUT.zarr does."""
    out = tmp_path / "OUT.ZARR"
    stats = convert(d.PSF, [d.DCD], out, stop=3, progress=False)
    assert out.is_dir() and not h5py.is_hdf5(out)
    want = universe(d.PSF, [d.DCD]).trajectory
    with xr.open_zarr(out) as ds:
        np.testing.assert_array_equal(ds.position.values,
                                      [ts.positions for ts in want[:3]])
    assert stats.n_frames == 3


def test_a_selection_error_names_the_topology(tmp_path, capsys):
    """``--select`` that matches nothing, or does not parse, said neither the file nor its
    atoms ("the selection 'name CA and resname XYZ' matches no atoms")."""
    out = str(tmp_path / "q.h5md")
    assert main(["convert", d.GRO, d.XTC, out, "--select", "name CA and resname XYZ"]) == 1
    assert (f"error: the selection 'name CA and resname XYZ' matches none of the atoms of "
            f"{d.GRO} (47681 atoms)") in capsys.readouterr().err
    assert main(["convert", d.GRO, d.XTC, out, "--select", "nme CA"]) == 1
    assert (f"error: cannot use the selection 'nme CA' on {d.GRO} (47681 atoms): Unknown "
            "selection token: 'nme'") in capsys.readouterr().err
    assert not os.path.exists(out) and not partial_files(out)


def test_an_h5md_file_read_through_a_universe_is_reported_left_behind(tmp_path):
    """convert(Universe(top, 'in.h5md'), [], out) said nothing of the /parameters it did
    not copy (the notes looked at the files given by name only); it says what
    convert(top, ['in.h5md'], out) says."""
    import shutil

    src = tmp_path / "cobro_in.h5md"
    shutil.copy(d.H5MD_xvf, src)
    with h5py.File(src, "r+") as f:
        f["parameters/temperature"] = 300.0
    named = convert(d.TPR_xvf, [str(src)], tmp_path / "a.h5md", progress=False)
    given = convert(universe(d.TPR_xvf, [str(src)]), [], tmp_path / "b.h5md", progress=False)
    left = [n for n in given.notes if "/parameters not copied" in n]
    assert len(left) == 1 and str(src) in left[0]
    assert given.notes == named.notes


def test_a_trr_damaged_in_its_middle_fails_instead_of_writing_its_first_frames(tmp_path):
    """MDAnalysis counts an XTC's or TRR's frames by scanning it, and stops without a word
    at a frame it cannot read: adk's TRR of 10 frames, 4000 bytes garbled in its middle,
    converted as its first 5 frames with exit 0. convert refuses it, saying
    how much follows the last frame counted; whole files convert as before."""
    from h5mdx.errors import H5MDReadError

    data = bytearray(open(d.TRR, "rb").read())
    half = len(data) // 2
    data[half:half + 4000] = bytes((b * 7 + 13) % 256 for b in data[half:half + 4000])
    bad = tmp_path / "garbled.trr"
    bad.write_bytes(bytes(data))
    counted = universe(d.GRO, [str(bad)]).trajectory.n_frames
    assert counted == 5  # of 10
    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"garbled.trr: \d+ bytes follow its frame 5, "
                                            r"which ends at byte \d+: the file is damaged"):
        convert(d.GRO, [bad], out, progress=False)
    assert not out.exists() and not partial_files(out)
    # after a whole file too (the chain's readers are each checked)
    with pytest.raises(H5MDReadError, match="garbled.trr"):
        convert(d.GRO, [d.XTC, bad], out, progress=False)
    stats = convert(d.GRO, [d.TRR, d.XTC], out, progress=False, start=3)
    assert stats.n_frames == 17


def test_partial_converts_the_frames_before_a_damaged_or_cut_end(tmp_path, capsys):
    """A run that crashed while writing leaves a file cut inside a frame: convert refused
    it with no way to take the whole frames before the cut. ``partial=True``
    (``--partial``) converts them, with a warning naming the file and what was left;
    the refusal names the option."""
    from h5mdx.cli import main
    from h5mdx.errors import H5MDReadError

    cut = tmp_path / "cut.dcd"
    cut.write_bytes(open(d.DCD, "rb").read()[:500_000])
    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"pass partial=True \(--partial on the command "
                                            r"line\) to convert the 12 frames before it"):
        convert(d.PSF, [cut], out, progress=False)
    with pytest.warns(UserWarning, match=r"cut.dcd: the file ends \d+ bytes into frame 13 "
                                         r".*; the 12 frames before it are converted"):
        stats = convert(d.PSF, [cut], out, progress=False, partial=True)
    want = np.stack([ts.positions.copy() for ts in mda.Universe(d.PSF, d.DCD).trajectory[:12]])
    with xr.open_dataset(out, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, want)
    assert stats.n_frames == 12
    data = open(d.XTC, "rb").read()
    short = tmp_path / "short.xtc"
    short.write_bytes(data[: len(data) * 6 // 10])
    read = sum(1 for _ in _frames_read(d.GRO, short))
    assert 0 < read < len(mda.Universe(d.GRO, str(short)).trajectory)
    assert main(["convert", d.GRO, str(short), str(out), "--overwrite", "--no-progress"]) == 1
    assert "pass --partial to convert the" in capsys.readouterr().err
    with pytest.warns(UserWarning, match=rf"short.xtc: MDAnalysis read {read} of the \d+ "
                      rf"frames .*; the {read} frames read are converted"):
        assert main(["convert", d.GRO, str(short), str(out), "--overwrite", "--no-progress",
                     "--partial"]) == 0
    with xr.open_dataset(out, engine="h5md") as ds:
        assert ds.sizes["time"] == read
    with pytest.raises(H5MDReadError, match="nothing written"):  # contiguous: all or none
        convert(d.GRO, [short], tmp_path / "c.h5md", progress=False, partial=True,
                contiguous=True)


def _frames_read(topology, path):
    """The frames MDAnalysis yields of ``path`` before it stops at a read error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(topology, str(path))
        try:
            for ts in u.trajectory:
                yield ts.frame
        except (OSError, EOFError, ValueError):
            return



@pytest.mark.parametrize("traj", ["XTC", "TRR"])
def test_a_selection_by_position_is_made_in_the_first_frame_of_an_xtc(tmp_path, traj):
    """The end check of an XTC or TRR (``_xdr_end``) reads its last frame: a selection by
    position was then made in the last frame (GRO + XTC, 'prop z < 30': 25151 atoms for
    the first frame's 25231). The Universe is put back at its first frame."""
    out = tmp_path / "sel.h5md"
    convert(d.GRO, [getattr(d, traj)], out, select="prop z < 30", progress=False)
    u = mda.Universe(d.GRO, getattr(d, traj))
    want = u.select_atoms("prop z < 30")
    pos = np.stack([want.positions.copy() for _ in u.trajectory])
    with xr.open_dataset(out, engine="h5md") as ds:
        assert ds.sizes["atom"] == want.n_atoms
        np.testing.assert_array_equal(ds.position.values, pos)
    given = mda.Universe(d.GRO, [getattr(d, traj)] * 2)  # a chain of readers, given as is
    convert(given, [], tmp_path / "chain.h5md", select="prop z < 30", progress=False)
    with xr.open_dataset(tmp_path / "chain.h5md", engine="h5md") as ds:
        assert ds.sizes["atom"] == want.n_atoms


def test_an_atom_group_as_topology_is_refused_by_name(tmp_path):
    """convert(u.select_atoms(...), out=...) failed with 'expected str, bytes or
    os.PathLike object, not AtomGroup', raised while the error was being worded; now a
    TypeError says what to give, and nothing is written."""
    u = mda.Universe(d.PSF, d.DCD)
    out = tmp_path / "ca.h5md"
    with pytest.raises(TypeError, match=r"not an AtomGroup \(214 atoms\).*select="):
        convert(u.select_atoms("name CA"), out=out, progress=False)
    assert not out.exists() and not os.listdir(tmp_path)


@pytest.mark.filterwarnings("ignore:Reader has no dt information")
def test_a_universe_in_memory_is_not_noted_as_unconverted(tmp_path):
    """A Universe loaded in memory holds what the DCD reader gave, converted to
    MDAnalysis' units (its times from AKMA): the note said MDAnalysis did not know the
    length and time units of the DCD and wrote them as read. The values are MDAnalysis'
    all the same, as written."""
    ref = mda.Universe(d.PSF_TRICLINIC, d.DCD_TRICLINIC)
    u = mda.Universe(d.PSF_TRICLINIC, d.DCD_TRICLINIC, in_memory=True)
    stats = convert(u, out=tmp_path / "mem.h5md", progress=False)
    assert not any("does not know" in n for n in stats.notes), stats.notes
    with xr.open_dataset(tmp_path / "mem.h5md", engine="h5md") as ds:
        for i, ts in enumerate(ref.trajectory):
            np.testing.assert_allclose(ds.position[i].values, ts.positions, atol=1e-6)
            np.testing.assert_allclose(ds.box_edges[i].values, ts.triclinic_dimensions,
                                       atol=1e-5)
            # MDAnalysis' MemoryReader times: i * dt (the DCD's offset of 1 dt is lost)
            assert float(ds.time[i]) == pytest.approx(u.trajectory[i].time)
    # a GRO file in memory: its time is unknown to MDAnalysis, its lengths converted
    gro = convert(mda.Universe(d.GRO, in_memory=True), out=tmp_path / "gro.h5md",
                  progress=False)
    [note] = [n for n in gro.notes if "does not know" in n]
    assert "does not know the time units" in note and note.endswith("length from nm"), note


def test_an_xyz_file_cut_inside_a_frame_fails_instead_of_writing_the_whole_ones(tmp_path):
    """MDAnalysis counts an XYZ file's frames as its lines over a frame's, rounded down: a
    file of 10 frames cut inside frame 7 read as 6, and convert wrote them with exit 0 (an
    audit). Now it is refused, nothing written; partial=True converts the 6 frames, and a
    whole file, or one ending in blank lines, converts as before."""
    from h5mdx.errors import H5MDReadError

    data = open(d.XYZ, "rb").read()
    cut = tmp_path / "cut.xyz"
    cut.write_bytes(data[: int(len(data) * 0.65)])
    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"cut.xyz: 644 lines follow its frame 6, of the "
                                            r"1286 lines of a frame: the file is cut inside "
                                            r"frame 7 .*partial=True"):
        convert(d.XYZ_psf, [cut], out, progress=False)
    assert not out.exists() and not partial_files(out)
    with pytest.warns(UserWarning, match="cut inside frame 7"):
        stats = convert(d.XYZ_psf, [cut], out, progress=False, partial=True)
    assert stats.n_frames == 6
    blank = tmp_path / "blank.xyz"
    blank.write_bytes(data + b"\n\n")
    u = mda.Universe(d.XYZ_psf, d.XYZ)
    convert(d.XYZ_psf, [blank], out, progress=False, overwrite=True)
    with xr.open_dataset(out, engine="h5md") as ds:
        assert ds.sizes["time"] == 10
        np.testing.assert_allclose(ds.position[9].values, u.trajectory[9].positions)


@pytest.mark.filterwarnings("ignore:Reader has no dt information")
def test_a_frame_mdanalysis_fails_to_read_is_named_with_its_file(tmp_path):
    """A LAMMPS dump cut inside its second frame failed with MDAnalysis' bare 'IndexError:
    list index out of range', an Amber TRJ cut inside the frame after the 7 MDAnalysis
    counts with 'ValueError: FixedcolumnEntry(16,24,'F'): Failed to read&convert' (an
    audit): neither named the file or the frame. Now an H5MDReadError does, nothing is
    written, and partial=True converts the frames before it, with a warning."""
    from h5mdx.errors import H5MDReadError

    cases = ((d.LAMMPS_image_vf, d.LAMMPSDUMP_image_vf, "cut.lammpstrj", "LAMMPSDUMP",
              r"frame 2 of the 2 to convert \(IndexError: list index out of range\)", 1),
             (d.PRM, d.TRJ, "cut.trj", None, r"frame 8, after the 7 it counts, "
              r"\(ValueError: FixedcolumnEntry", 7))
    for top, traj, name, fmt, said, before in cases:
        which = "the frame" if before == 1 else f"the {before} frames"  # not "the 1 frames"
        cut = tmp_path / name
        data = open(traj, "rb").read()
        cut.write_bytes(data[: int(len(data) * 0.65)])
        out = tmp_path / f"{name}.h5md"
        with pytest.raises(H5MDReadError, match=rf"{name}: MDAnalysis cannot read {said}.*"
                                                rf"convert {which} before it"):
            convert(top, [cut], out, progress=False, format=fmt)
        assert not out.exists() and not partial_files(out)
        with pytest.warns(UserWarning, match=rf"{name}: .*partial=True"):
            stats = convert(top, [cut], out, progress=False, format=fmt, partial=True)
        assert stats.n_frames == before
        u = mda.Universe(top, traj, format=fmt) if fmt else mda.Universe(top, traj)
        with xr.open_dataset(out, engine="h5md") as ds:
            np.testing.assert_allclose(ds.position[before - 1].values,
                                       u.trajectory[before - 1].positions, atol=1e-5)


def test_a_trz_file_cut_inside_a_frame_is_refused_naming_its_whole_frames(tmp_path):
    """MDAnalysis counts no frame of a TRZ file whose size is not whole frames: one cut
    inside frame 4 failed with 'no frames to write: the trajectory has 0 frames', and
    after a whole TRZ it was left out of the copy without a word, 6 frames written of the
    9. Now both are refused, partial=True too (MDAnalysis reads none of it),
    naming the bytes that hold its whole frames; a copy of those converts them."""
    from h5mdx.errors import H5MDReadError

    data = open(d.TRZ, "rb").read()
    cut = tmp_path / "cut.trz"
    cut.write_bytes(data[: int(len(data) * 0.65)])
    out = tmp_path / "out.h5md"
    said = (r"cut.trz: the file ends 176991 bytes into frame 4 .* a copy of its first "
            r"590188 bytes holds the 3 whole frames; nothing written")
    for trajs, partial in (([cut], False), ([d.TRZ, cut], False), ([d.TRZ, cut], True)):
        with pytest.raises(H5MDReadError, match=said):
            convert(d.TRZ_psf, trajs, out, progress=False, partial=partial)
        assert not out.exists() and not partial_files(out)
    whole = tmp_path / "whole.trz"
    whole.write_bytes(data[:590188])
    assert convert(d.TRZ_psf, [whole], out, progress=False).n_frames == 3
    u = mda.Universe(d.TRZ_psf, d.TRZ)
    with xr.open_dataset(out, engine="h5md") as ds:
        for i in range(3):
            np.testing.assert_allclose(ds.position[i].values, u.trajectory[i].positions,
                                       atol=1e-5)


def test_a_gro_file_of_several_frames_is_refused(tmp_path):
    """MDAnalysis' GRO reader reads a file's first frame alone: MDAnalysisTests' GRO file
    of 2 frames (the second's first atom at (12.30, 16.28, 11.13) Å, in a box of 120 Å)
    was converted as its first frame, exit 0. Now it is refused, naming the
    frames and the way to convert them; partial=True converts the first frame."""
    from h5mdx.errors import H5MDReadError

    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"two_water_gro_multiframe.gro: the file holds 2 "
                                            r"frames \(18 lines, of 9 a frame\).*first frame "
                                            r"only: .*gmx trjconv"):
        convert(d.two_water_gro_multiframe, [], out, progress=False)
    assert not out.exists() and not partial_files(out)
    with pytest.warns(UserWarning, match="holds 2 frames.*partial=True"):
        stats = convert(d.two_water_gro_multiframe, [], out, progress=False, partial=True)
    assert stats.n_frames == 1
    with xr.open_dataset(out, engine="h5md") as ds:
        np.testing.assert_allclose(ds.position[0, 0].values, [2.30, 6.28, 1.13], atol=1e-5)
    assert convert(d.GRO, [], tmp_path / "one.h5md", progress=False).n_frames == 1


@pytest.mark.filterwarnings("ignore:Reader has no dt information")
def test_a_universe_read_without_unit_conversion_is_refused(tmp_path):
    """Universe(GRO, TRR, convert_units=False) gives the TRR's values in nm: convert wrote
    them labelled 'Angstrom' (a first atom at 5.43 'Angstrom' where it is at 54.25 Å;
    velocities and box likewise 10 times too small), and MDAnalysis read the copy so (an
    audit). Now it is refused, naming the file's units; a file already in MDAnalysis'
    units for what is written (an Amber NetCDF: Å and ps, no forces) converts as before."""
    u = mda.Universe(d.GRO, d.TRR, convert_units=False)
    out = tmp_path / "out.h5md"
    with pytest.raises(ValueError, match=r"adk_oplsaa.trr: its reader was opened with "
                                         r"convert_units=False.*\(length in nm, velocity in "
                                         r"nm/ps\)"):
        convert(u, out=out, progress=False)
    assert not out.exists() and not partial_files(out)
    chain = mda.Universe(d.GRO, [d.XTC, d.TRR], convert_units=False)
    with pytest.raises(ValueError, match="convert_units=False"):
        convert(chain, out=out, progress=False)
    ref = mda.Universe(d.PRMncdf, d.NCDF)
    convert(mda.Universe(d.PRMncdf, d.NCDF, convert_units=False), out=out, progress=False)
    with xr.open_dataset(out, engine="h5md") as ds:
        np.testing.assert_allclose(ds.position[3].values, ref.trajectory[3].positions,
                                   atol=1e-5)
        assert float(ds.time[3]) == pytest.approx(ref.trajectory[3].time)


@pytest.mark.filterwarnings("ignore:Reader has no dt information")
def test_a_single_frame_universe_is_written_as_it_holds_its_frame(tmp_path):
    """A CRD file's Universe given a box (u.dimensions = ...) and moved: convert read the
    file again as it iterated its one frame, and wrote the file's positions with a box of
    zeros (the box element decided before, from the Universe's frame). Now
    the frame the Universe holds is written, as MDAnalysis' writers write it."""
    u = mda.Universe(d.CRD)
    u.dimensions = [50.0, 60.0, 70.0, 90.0, 90.0, 90.0]
    u.atoms.translate([1.0, 2.0, 3.0])
    want = u.atoms.positions.copy()
    stats = convert(u, out=tmp_path / "moved.h5md", progress=False)
    assert stats.missing == {}
    with xr.open_dataset(tmp_path / "moved.h5md", engine="h5md") as ds:
        np.testing.assert_allclose(ds.position[0].values, want)
        np.testing.assert_allclose(ds.box_edges[0].values, np.diag([50.0, 60.0, 70.0]))


def test_an_h5md_input_scaled_by_a_unit_factor_is_refused(tmp_path):
    """H5MD-NOMAD's unit_factor scales the values stored; MDAnalysis' H5MD reader ignores
    it: cobrotoxin.h5md with unit_factor 10 on its positions (the first atom at 323.1 Å,
    as h5mdx reads it) was converted with the atom at 32.3 Å, without a word.
    Now it is refused, naming the file, the dataset and what writes it right, which does."""
    import shutil

    from h5mdx.errors import H5MDUnitError

    src = tmp_path / "scaled.h5md"
    shutil.copy(d.H5MD_xvf, src)
    os.chmod(src, 0o644)
    with h5py.File(src, "r+") as f:
        f["particles/trajectory/position/value"].attrs["unit_factor"] = 10.0
    out = tmp_path / "out.h5md"
    said = (r"scaled.h5md \[/particles/trajectory/position/value\]: values in units of "
            r"unit_factor 10.0 .* MDAnalysis' H5MD reader ignores")
    with pytest.raises(H5MDUnitError, match=said):
        convert(d.TPR_xvf, [src], out, progress=False)
    with pytest.raises(H5MDUnitError, match=said):
        convert(mda.Universe(d.TPR_xvf, str(src)), out=out, progress=False)
    assert not out.exists() and not partial_files(out)
    with xr.open_dataset(src, engine="h5md", convert_units=True) as ds, \
            pytest.warns(UserWarning, match=r"the observables of .* \(lambda\) are not"):
        ds.md.to_h5md(out)
    want = mda.Universe(d.TPR_xvf, d.H5MD_xvf).atoms.positions * 10
    np.testing.assert_allclose(mda.Universe(d.TPR_xvf, str(out)).atoms.positions, want,
                               rtol=1e-6)


def test_a_lammps_dcd_is_noted_for_the_units_it_is_read_in(tmp_path):
    """A DCD beside a LAMMPS data file was read as CHARMM's (times in AKMA) and its times
    written 48.9 times too large for LAMMPS' 'real' style (0, 24.44, 48.89 ps for 0,
    0.5, 1 ps), and with format='LAMMPS' in 'real' units whatever the run's style,
    without a word. Now a note says each, and what to give."""
    plain = convert(d.LAMMPSdata2, [d.LAMMPSdcd2], tmp_path / "a.h5md", progress=False)
    [note] = [n for n in plain.notes if "ifabp_apo_100mM.dcd" in n]
    assert "read as CHARMM's DCD (times in AKMA" in note and "format='LAMMPS'" in note
    lammps = convert(d.LAMMPSdata2, [d.LAMMPSdcd2], tmp_path / "b.h5md", progress=False,
                     format="LAMMPS")
    [note] = [n for n in lammps.notes if "ifabp_apo_100mM.dcd" in n]
    assert "in LAMMPS' 'real' style" in note and "timeunit='ps'" in note
    with xr.open_dataset(tmp_path / "a.h5md", engine="h5md") as a, \
            xr.open_dataset(tmp_path / "b.h5md", engine="h5md") as b:
        np.testing.assert_allclose(a.time.values[:3], [0.0, 24.444105, 48.88821], rtol=1e-6)
        np.testing.assert_allclose(b.time.values[:3], [0.0, 0.5, 1.0], rtol=1e-6)
    u = mda.Universe(d.LAMMPSdata2, d.LAMMPSdcd2, format="LAMMPS", timeunit="ps")
    assert not any("LAMMPS" in n for n in convert(u, out=tmp_path / "c.h5md",
                                                  progress=False).notes)
    assert not any("LAMMPS" in n for n in convert(d.PSF, [d.DCD], tmp_path / "d.h5md",
                                                  progress=False).notes)


@pytest.mark.parametrize("frames, seconds, shown", [
    (1, 2.07, "0.48 frames/s"), (3, 0.5, "6 frames/s"), (130, 1.0, "130 frames/s"),
    (0, 0.71, "0 frames/s")])
def test_the_summary_shows_a_slow_rate_that_is_not_zero(frames, seconds, shown):
    """A frame copied in 2 s (a small Zarr store: the store's files take the time) was
    summed up as '0 frames/s'; a rate under 10 now shows two significant digits."""
    from h5mdx.layout.convert import ConvertStats

    stats = ConvertStats(output="o.zarr", n_frames=frames, n_atoms=5, elements=["position"],
                         seconds=seconds, bytes_written=0, layout="chunks of 1 frame")
    assert stats.summary().endswith(f"{seconds:.2f} s, {shown}")


def test_an_empty_trajectory_file_is_named_and_left_out_with_partial(tmp_path):
    """An empty XTC (a run stopped before its first frame) among the trajectories failed
    with MDAnalysis' 'XDR read error = endoffile', naming every file. Now the empty file is
    named; with partial=True it is left out with a warning and the others' frames written."""
    empty = tmp_path / "run 2 é.xtc"
    empty.write_bytes(b"")
    out = tmp_path / "o.h5md"
    with pytest.raises(h5mdx.errors.H5MDReadError,
                       match=r"run 2 é\.xtc: the file is empty \(0 bytes\): it holds no frames; "
                             r"nothing written to .*o\.h5md: pass partial=True"):
        convert(d.GRO, [d.XTC, empty], out, progress=False)
    assert not out.exists()
    with pytest.raises(h5mdx.errors.H5MDReadError, match=r"run 2 é\.xtc: the file is empty"):
        convert(d.GRO, [empty], out, partial=True, progress=False)
    with pytest.warns(UserWarning, match=r"run 2 é\.xtc: the file is empty \(0 bytes\): it "
                                         r"holds no frames and is left out \(partial=True\)"):
        stats = convert(d.GRO, [d.XTC, empty], out, partial=True, progress=False)
    ref = universe(d.GRO, [d.XTC])
    assert stats.n_frames == len(ref.trajectory) == 10
    with h5py.File(out) as f:
        np.testing.assert_allclose(f["particles/trajectory/position/value"][-1],
                                   ref.trajectory[-1].positions, atol=1e-4)


def test_a_compressed_conversion_compresses_step_time_and_fixed_data_too(tmp_path):
    """convert --compression gzip (and to_h5md) compressed the positions alone: step and
    time, the fixed-in-time species, masses and charges, a writer's bonds and the
    topology modules were written uncompressed. Now every such dataset of rows of at
    least 4 KiB gets the compression asked, step and time always; smaller ones stay
    unchunked."""
    import h5py

    from h5mdx.layout.convert import convert

    out = tmp_path / "adk.h5md"
    convert(d.PSF, [d.DCD], out, progress=False, stop=6, compression="gzip:3")
    seen = {}

    def note(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.shape and obj.dtype.kind != "O" \
                and (obj.nbytes >= 4096 or name.endswith(("/step", "/time"))):
            seen[name] = obj.compression

    with h5py.File(out) as f:
        f.visititems(note)
        assert {n for n in seen if n.startswith("particles/")} == {
            "particles/trajectory/position/value", "particles/trajectory/position/step",
            "particles/trajectory/position/time", "particles/trajectory/species",
            "particles/trajectory/mass", "particles/trajectory/charge"}
        assert {n for n, c in seen.items() if c != "gzip"} == set()
        assert "parameters/vmd_structure/resid" in seen  # the topology module's too
        assert f["particles/trajectory/species"].compression_opts == 3
        n_atoms = f["particles/trajectory/position/value"].shape[1]
        assert f["particles/trajectory/mass"].shape == (n_atoms,)
