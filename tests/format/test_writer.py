"""The H5MD writer, layouts, safe writes and Dataset -> H5MD."""

from __future__ import annotations

import os
import signal
import sys
import warnings
import weakref
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import ParticleOrderWarning
from h5mdx.format.h5md import scan
from h5mdx.format.writer import (
    ElementSpec,
    H5MDWriter,
    Layout,
    compression_kwargs,
    dataset_checksums,
)
from h5mdx.layout._atomic import atomic_output, partial_files
from h5mdx.layout.export import to_h5md

RNG = np.random.default_rng(7)


def _frames(n=25, atoms=11):
    pos = RNG.normal(size=(n, atoms, 3)).astype(np.float32)
    box = np.tile(np.diag([10.0, 11.0, 12.0]).astype(np.float32), (n, 1, 1))
    return pos, box


def _write(path, pos, box, layout=None, n_frames=None, by_block=False, **kw):
    specs = [ElementSpec("position", pos.shape[1:], np.float32, "Angstrom"),
             ElementSpec("box_edges", (3, 3), np.float32, "Angstrom")]
    steps = np.arange(pos.shape[0]) * 10
    times = np.arange(pos.shape[0]) * 0.5
    with H5MDWriter(path, specs, layout=layout, n_frames=n_frames, **kw) as w:
        if by_block:
            w.extend(steps[:7], times[:7], position=pos[:7], box_edges=box[:7])
            w.extend(steps[7:], times[7:], position=pos[7:], box_edges=box[7:])
        else:
            for i in range(pos.shape[0]):
                w.append(steps[i], times[i], position=pos[i], box_edges=box[i])
    return w


@pytest.mark.parametrize("by_block", [False, True])
@pytest.mark.parametrize("layout", [Layout(), Layout(frames_per_chunk=4),
                                    Layout(chunk_mib=0.001), Layout(frames_per_chunk=3,
                                                                    compression="gzip:1")])
def test_round_trip(tmp_path, layout, by_block):
    pos, box = _frames()
    path = tmp_path / "w.h5md"
    _write(path, pos, box, layout=layout, by_block=by_block,
           static={"mass": (np.arange(11.0), "u", {})})
    with h5py.File(path) as f:
        assert tuple(f["h5md"].attrs["version"]) == (1, 1)
        assert f["h5md/creator"].attrs["name"] == b"h5mdx"  # fixed-length, as H5MD asks
        grp = f["particles/trajectory"]
        v = grp["position/value"]
        np.testing.assert_array_equal(v[()], pos)
        np.testing.assert_array_equal(grp["box/edges/value"][()], box)
        np.testing.assert_array_equal(grp["position/step"][()], np.arange(25) * 10)
        np.testing.assert_allclose(grp["position/time"][()], np.arange(25) * 0.5)
        assert v.attrs["unit"] == "Angstrom"
        assert grp["position/time"].attrs["unit"] == "ps"
        assert list(grp["box"].attrs["boundary"]) == [b"periodic"] * 3
        # step/time are one object shared by hard links
        assert grp["position/step"].id == grp["box/edges/step"].id
        assert grp["position/time"].id == grp["box/edges/time"].id
        if layout.frames_per_chunk:
            assert v.chunks == (layout.frames_per_chunk, 11, 3)
        assert v.compression == ("gzip" if layout.compression else None)
        np.testing.assert_array_equal(grp["mass"][()], np.arange(11.0))
        assert grp["mass"].attrs["unit"] == "u"
    info = scan(path)
    assert info.particles["trajectory"].elements["position"].shape == (25, 11, 3)


def test_contiguous(tmp_path):
    pos, box = _frames()
    with pytest.raises(ValueError, match="number of frames"):
        _write(tmp_path / "a.h5md", pos, box, layout=Layout(contiguous=True))
    _write(tmp_path / "b.h5md", pos, box, layout=Layout(contiguous=True), n_frames=25)
    with h5py.File(tmp_path / "b.h5md") as f:
        assert f["particles/trajectory/position/value"].chunks is None
        np.testing.assert_array_equal(f["particles/trajectory/position/value"][()], pos)
    with pytest.raises(ValueError, match="announced"):
        _write(tmp_path / "c.h5md", pos, box, layout=Layout(contiguous=True), n_frames=30)


def test_layout_validation():
    with pytest.raises(ValueError, match="choose one"):
        Layout(frames_per_chunk=2, contiguous=True)
    with pytest.raises(ValueError, match="chunked storage"):
        Layout(contiguous=True, compression="gzip")
    with pytest.raises(ValueError, match="unknown compression"):
        Layout(compression="brotli")
    with pytest.raises(ValueError, match="0-9"):
        compression_kwargs("gzip:12")
    assert compression_kwargs("gzip:1") == {"compression": "gzip", "compression_opts": 1,
                                            "shuffle": True}
    assert compression_kwargs("none") == {}
    # 4 MiB default of 40 KB frames
    assert Layout().frames(3341 * 12, 10**6) == 4 * 2**20 // (3341 * 12)
    assert Layout(frames_per_chunk=5).frames(36, 10**6, small=True) == 65536 // 36 + 1


@pytest.mark.parametrize("spec", ["blosc", "zstd:5", "blosc:zstd:3"])
def test_plugin_compression(tmp_path, spec):
    pytest.importorskip("hdf5plugin")
    pos, box = _frames()
    _write(tmp_path / "p.h5md", pos, box, layout=Layout(frames_per_chunk=5, compression=spec))
    with h5py.File(tmp_path / "p.h5md") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/value"][()], pos)


def test_checksums_independent_of_layout(tmp_path):
    pos, box = _frames()
    w1 = _write(tmp_path / "a.h5md", pos, box, layout=Layout(frames_per_chunk=2), checksum=True)
    _write(tmp_path / "b.h5md", pos, box, layout=Layout(contiguous=True), n_frames=25)
    paths = ["/particles/trajectory/position/value", "/particles/trajectory/box/edges/value"]
    a = dataset_checksums(tmp_path / "a.h5md", paths, block_bytes=100)
    b = dataset_checksums(tmp_path / "b.h5md", paths)
    assert a == b
    assert {p: w1.checksums[p] for p in paths} == a
    pos[3, 0, 0] += 1
    _write(tmp_path / "c.h5md", pos, box)
    assert dataset_checksums(tmp_path / "c.h5md", paths)[paths[0]] != a[paths[0]]


def test_atomic_output_refuses_and_cleans(tmp_path):
    hdf5 = b"\x89HDF\r\n\x1a\n"  # the signature HDF5 looks for
    target = tmp_path / "out.h5"
    with atomic_output(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path)
        with open(tmp, "wb") as fh:
            fh.write(hdf5 + b"one")
    assert target.read_bytes() == hdf5 + b"one"
    with pytest.raises(FileExistsError, match="--overwrite"):
        with atomic_output(target):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_output(target, overwrite=True) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(hdf5 + b"two")
            raise RuntimeError("boom")
    assert target.read_bytes() == hdf5 + b"one"
    assert partial_files(target) == []
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(tmp_path / "new.bin") as tmp:
            open(tmp, "w").close()
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5"]
    with pytest.raises(ValueError, match="also an input"):
        with atomic_output(target, overwrite=True, inputs=[target]):
            pass


def test_overwrite_replaces_only_an_hdf5_file(tmp_path):
    """--overwrite replaced any file: `h5mdx convert top.gro traj.xtc --overwrite` (the
    output forgotten, as the error advised) replaced the trajectory with a one-frame HDF5
    file. Only an HDF5 file (signature at 0 or after a user block) or an empty one is
    replaced now."""
    xtc = tmp_path / "traj.xtc"
    xtc.write_bytes(b"\x00\x00\x07\xcb" + bytes(100))
    with pytest.raises(ValueError, match="exists and is not an HDF5 file"):
        with atomic_output(xtc, overwrite=True, hdf5=True):
            pass
    with atomic_output(tmp_path / "notes.json", overwrite=True) as tmp:  # not an HDF5 output
        open(tmp, "w").close()
    assert xtc.read_bytes()[:4] == b"\x00\x00\x07\xcb"
    blocked = tmp_path / "user_block.h5"
    blocked.write_bytes(bytes(512) + b"\x89HDF\r\n\x1a\n" + bytes(8))
    empty = tmp_path / "empty.h5md"
    empty.touch()
    for target in (blocked, empty):
        with atomic_output(target, overwrite=True, hdf5=True) as tmp:
            open(tmp, "wb").close()


def test_overwrite_replaces_no_file_with_a_zarr_store(tmp_path, adk_h5md):
    """--overwrite of a Zarr output replaced a file of that name, whatever it held (a
    zipped store, notes), where it replaces only a Zarr store; an
    empty file is replaced, as for an HDF5 output."""
    from h5mdx.layout.rechunk import rechunk

    kept = tmp_path / "zipped.zarr"
    kept.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(ValueError, match="is a file, not a Zarr store"):
        rechunk(adk_h5md, kept, overwrite=True)
    with xr.open_dataset(adk_h5md, engine="h5md") as ds, \
            pytest.raises(ValueError, match="is a file, not a Zarr store"):
        ds.md.to_zarr(kept, overwrite=True)
    assert kept.read_bytes()[:4] == b"PK\x03\x04" and not partial_files(kept)
    empty = tmp_path / "empty.zarr"
    empty.touch()
    with atomic_output(empty, overwrite=True, directory=True) as tmp:
        os.mkdir(tmp)
    assert empty.is_dir()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGXCPU],
                         ids=["ctrl-c", "sigterm", "sighup", "sigxcpu"])
def test_a_signal_python_drops_still_stops_the_write(tmp_path, monkeypatch, sig, request):
    """Ctrl-C or SIGTERM (or SIGHUP, SIGXCPU: a closed session, a CPU-time limit) that
    lands in a callback Python calls for itself (a weakref's) is dropped there ("Exception
    ignored in ..."): the write must still not complete, and the dropped exception is not
    printed (it is raised again)."""
    if signal.getsignal(sig) is signal.SIG_IGN:  # under nohup: a write would ignore it too
        signal.signal(sig, signal.SIG_DFL)
        request.addfinalizer(lambda: signal.signal(sig, signal.SIG_IGN))
    printed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: printed.append(u.exc_type))
    reached, continued = [], []

    class Held:
        pass

    def callback(_ref):
        os.kill(os.getpid(), sig)  # the handler raises inside this callback
        for _ in range(1000):  # give the interpreter its check for pending signals
            pass
        reached.append(True)  # not reached: the exception left the callback

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                               signal.SIGXCPU)}
    target = tmp_path / "out.bin"
    expected = KeyboardInterrupt if sig == signal.SIGINT else SystemExit
    with pytest.raises(expected):
        with atomic_output(target) as tmp:
            with open(tmp, "w") as fh:
                fh.write("all of it")
            held = Held()
            ref = weakref.ref(held, callback)
            del held  # the callback runs here, and Python drops its exception
            assert ref() is None
            continued.append(True)  # the write went on as if nothing happened
    assert reached == [] and continued == [True]
    assert printed == []  # no "Exception ignored" block for it
    assert not target.exists() and partial_files(target) == []
    assert {s: signal.getsignal(s) for s in before} == before
    assert sys.unraisablehook is not None and printed == []
    with atomic_output(target) as tmp:  # the next write is not taken as interrupted
        open(tmp, "w").close()
    assert target.exists()
    weakref.ref(Held(), lambda _: 1 / 0)  # other dropped exceptions are still reported
    assert printed == [ZeroDivisionError]


def test_stale_partials_of_dead_processes_are_removed(tmp_path):
    import socket

    target = tmp_path / "x.h5md"
    host = socket.gethostname().split(".")[0]
    stale = tmp_path / f".x.h5md.{host}.999999999.abcd.h5mdx-partial"
    stale.write_text("half")
    with atomic_output(target) as tmp:
        open(tmp, "w").close()
    assert not stale.exists()


def test_outputs_of_long_names_are_written_and_too_long_ones_refused(tmp_path):
    """A name of 230 characters fits the file system (255) but its temporary name, the
    name and 40 more, did not: every write failed with "File name too long" naming the
    hidden file. It is now written (its temporary name shortened, found again for
    cleaning), and a name longer than the file system takes is refused up front (found by
    an audit)."""
    import socket

    name = "r" * 225 + ".h5md"
    target = tmp_path / name
    with atomic_output(target) as tmp:
        assert len(os.path.basename(tmp)) <= 255
        open(tmp, "w").close()
        assert partial_files(target) == [Path(tmp)]
    assert os.listdir(tmp_path) == [name]
    host = socket.gethostname().split(".")[0]
    stale = Path(tmp).parent / os.path.basename(tmp).replace(f".{host}.{os.getpid()}.",
                                                            f".{host}.999999999.")
    stale.write_text("half")
    with atomic_output(target, overwrite=True, directory=True) as tmp:  # a store
        os.mkdir(tmp)
    assert not stale.exists() and (tmp_path / name).is_dir()
    with pytest.raises(ValueError, match=r"is 261 bytes long, longer than the 255 the "
                                         "file system"):
        with atomic_output(tmp_path / ("s" * 256 + ".h5md")):
            pass


def _store(path, text):
    path.mkdir()
    (path / "zarr.json").write_text(text)


def test_a_store_replaced_is_never_lost(tmp_path, monkeypatch):
    """A replaced Zarr store is moved aside, then the new one takes its name. A signal
    between the two renames waits until both are done; a failure there puts the old store
    back; a process killed there leaves the old store aside, and the next write to the
    target puts it back instead of removing it as a leftover."""
    import socket

    from h5mdx.layout import _atomic

    target = tmp_path / "t.zarr"
    _store(target, "old")
    real = os.replace

    def interrupted(a, b):  # Ctrl-C right after the old store was moved aside
        real(a, b)
        if str(b).endswith(".old.h5mdx-partial"):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass

    monkeypatch.setattr(_atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(target, overwrite=True, directory=True) as tmp:
            _store(Path(tmp), "new")
    assert (target / "zarr.json").read_text() == "new"  # whole, then the interrupt
    assert partial_files(target) == []

    def failing(a, b):
        real(a, b)
        if str(b).endswith(".old.h5mdx-partial"):
            raise OSError(5, "I/O error")

    monkeypatch.setattr(_atomic.os, "replace", failing)
    with pytest.raises(OSError, match="I/O error"):
        with atomic_output(target, overwrite=True, directory=True) as tmp:
            _store(Path(tmp), "newer")
    assert (target / "zarr.json").read_text() == "new"
    assert partial_files(target) == []
    monkeypatch.setattr(_atomic.os, "replace", real)
    # a process killed between the renames: the old store aside, no target
    host = socket.gethostname().split(".")[0]
    real(target, tmp_path / f".t.zarr.{host}.999999999.old.h5mdx-partial")
    with atomic_output(tmp_path / "t.zarr", overwrite=True, directory=True) as tmp:
        assert (target / "zarr.json").read_text() == "new"  # put back before writing
        _store(Path(tmp), "newest")
    assert (target / "zarr.json").read_text() == "newest"
    assert partial_files(target) == []


def test_a_failed_write_names_the_output_not_its_cleanup(tmp_path, monkeypatch):
    """An error while writing is reported, named by the output, even where removing the
    temporary file fails too (a read-only file system refuses to unlink what is not
    there)."""
    from h5mdx.layout import _atomic

    def refuse(self, *args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(_atomic.Path, "unlink", refuse)
    target = tmp_path / "out.h5md"
    with pytest.raises(OSError, match=r"cannot write '.*out\.h5md': No space left"):
        with atomic_output(target) as tmp:
            open(tmp, "w").close()
            raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match=r"cannot write '.*out\.h5md': Read-only"):
        with atomic_output(target):
            raise OSError(30, "Read-only file system")


@pytest.mark.parametrize("contiguous", [False, True])
def test_a_full_disk_stops_the_write_before_hdf5_hits_it(tmp_path, monkeypatch, adk_h5md,
                                                         contiguous):
    """Writers check the room left before each block (before a contiguous dataset, for
    all of it): HDF5 on a full disk fails inside, and h5py can crash at close (a
    segfault after the error). The error names the output; nothing
    is left behind, and an existing output is untouched."""
    from collections import namedtuple

    from h5mdx.format import writer
    from h5mdx.layout.rechunk import rechunk

    usage = namedtuple("usage", "total used free")
    free = {"bytes": 10**12}
    monkeypatch.setattr(writer.shutil, "disk_usage",
                        lambda path: usage(10**12, 0, free["bytes"]))
    pos, box = _frames(n=40)
    target = tmp_path / "out.h5md"
    _write(target, pos, box, layout=Layout(frames_per_chunk=4))
    before = target.read_bytes()
    free["bytes"] = writer.ROOM_MARGIN + 100  # room for no block
    layout = Layout(contiguous=True) if contiguous else Layout(frames_per_chunk=4)
    with pytest.raises(OSError, match=r"cannot write '.*out\.h5md': No space left on "
                                      r"device: the next .* MiB to write"):
        with atomic_output(target, overwrite=True) as tmp:
            _write(tmp, pos, box, layout=layout, n_frames=40)
    with pytest.raises(OSError, match=r"cannot write '.*re\.h5md': No space left"):
        rechunk(adk_h5md, tmp_path / "re.h5md", contiguous=contiguous)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.h5md"]


def test_to_h5md_round_trip(tmp_path, adk_h5md):
    ds = xr.open_dataset(adk_h5md, engine="h5md", chunks={})
    sub = ds.isel(time=slice(3, 60, 4), atom=slice(100, 400))
    out = tmp_path / "sub.h5md"
    to_h5md(sub, out, frames_per_chunk=5)
    back = xr.open_dataset(out, engine="h5md")
    np.testing.assert_array_equal(back.position.values, sub.position.values)
    np.testing.assert_array_equal(back.step.values, sub.step.values)
    np.testing.assert_allclose(back.time.values, sub.time.values)
    assert back.position.attrs["units"] == sub.position.attrs["units"]
    assert back.position.encoding["chunksizes"] == (5, 300, 3)
    for name in sub.data_vars:
        np.testing.assert_array_equal(back[name].values, sub[name].values)
    with pytest.raises(FileExistsError):
        to_h5md(sub, out)
    with pytest.raises(ValueError, match="also an input"):
        to_h5md(ds, adk_h5md, overwrite=True)
    ds.close()


def test_to_h5md_keeps_attributes_and_writes_observables(tmp_path, adk_h5md):
    """Species ``labels`` (``convert`` writes them) and a user's attributes go with their
    element; a variable on time but not on atom is an observable (it went into the
    particles group, where a (time, spatial) one was then left out as "3 particles")."""
    from MDAnalysisTests.datafiles import DCD, PSF

    from h5mdx.layout.convert import convert

    src = tmp_path / "adk.h5md"
    convert(PSF, [DCD], src, progress=False, stop=6)
    with xr.open_dataset(src, engine="h5md") as ds:
        labels = ds.species.attrs["labels"]
        assert len(labels) > 1
        ds = ds.assign(rg=("time", np.arange(6.0), {"units": "Angstrom", "note": "mine"}),
                       com=(("time", "spatial"), np.arange(18.0).reshape(6, 3)))
        ds.position.attrs["origin"] = "test"
        ds.position.attrs["scalar"] = np.array(2.5)  # 0-d: written as a number
        ds.position.attrs["ragged"] = [[1, 2], [3]]  # no HDF5 attribute: left out
        ds.position.attrs["names"] = np.array(["a", "b"])  # unicode: as strings
        out = tmp_path / "out.h5md"
        to_h5md(ds, out)
        with h5py.File(out) as f:
            assert "rg" not in f["particles/trajectory"] and "com" not in f["particles/trajectory"]
            assert f["observables/rg/value"].attrs["unit"] == "Angstrom"
            np.testing.assert_array_equal(f["observables/rg/step"][()], ds.step.values)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            back = xr.open_datatree(out, engine="h5md")
        part = back["particles/trajectory"]
        assert list(part.species.attrs["labels"]) == list(labels)
        assert part.position.attrs["origin"] == "test"
        assert part.position.attrs["scalar"] == 2.5 and "ragged" not in part.position.attrs
        assert list(part.position.attrs["names"]) == ["a", "b"]
        np.testing.assert_array_equal(part.position.values, ds.position.values)
        np.testing.assert_array_equal(back["observables"].rg.values, np.arange(6.0))
        assert back["observables"].rg.attrs["note"] == "mine"
        np.testing.assert_array_equal(back["observables"].com.values, ds.com.values)
        back.close()


def test_writers_refuse_steps_that_do_not_increase_and_a_missing_time(tmp_path, adk_h5md):
    """H5MD's steps increase strictly: frames reversed or repeated were written, and every
    reader warned; a missing time was written as NaN."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        renamed = ds.isel(time=slice(0, 3)).assign_coords(time=np.arange(3.0))
        with pytest.warns(UserWarning, match="time written without a unit"):
            to_h5md(renamed, tmp_path / "no_unit.h5md")  # assign_coords dropped time's unit
        for index in ([2, 1, 0], [0, 0, 1]):
            with pytest.raises(ValueError, match="H5MD's steps increase strictly.*sortby"):
                to_h5md(ds.isel(time=index), tmp_path / "bad.h5md")
        assert not (tmp_path / "bad.h5md").exists()
    spec = [ElementSpec("position", (4, 3), np.float32, "nm")]
    with H5MDWriter(tmp_path / "w.h5md", spec) as w:
        w.append(0, 0.0, position=np.zeros((4, 3)))
        with pytest.raises(ValueError, match="step 0 after step 0"):
            w.append(0, 1.0, position=np.zeros((4, 3)))
        with pytest.raises(ValueError, match="step 3 after step 5"):
            w.extend([5, 3], [1.0, 2.0], position=np.zeros((2, 4, 3)))
        with pytest.raises(ValueError, match="time is None.*with_time=False"):
            w.append(9, None, position=np.zeros((4, 3)))
        with pytest.raises(ValueError):  # a frame of the wrong shape: not written...
            w.append(10, 1.0, position=np.ones((5, 3)))
        w.append(10, 1.0, position=np.ones((4, 3)))  # ...so its step is free again
    with h5py.File(tmp_path / "w.h5md") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][()], [0, 10])


def test_to_h5md_keeps_the_topology_a_converted_file_holds(tmp_path):
    """A file ``convert`` wrote holds its topology (VMD's structure module from a PSF,
    GROMACS' module and /connectivity/bonds from a TPR); ``to_h5md`` of it lost the bonds
    (no variable of the Dataset), the module's masses and charges (served as elements, not
    coordinates: ``ds.md.rmsd(weights="mass")`` failed on the copy) and GROMACS' atomic
    numbers, silently. A selection keeps the bonds among its atoms."""
    from MDAnalysisTests.datafiles import DCD, PSF, TPR, XTC

    from h5mdx.engine.topology import load_universe
    from h5mdx.layout.convert import convert

    for top, traj in ((PSF, DCD), (TPR, XTC)):
        src = tmp_path / f"{Path(top).stem}.h5md"
        convert(top, [traj], src, progress=False, stop=3)
        whole, part = tmp_path / f"{src.stem}-all.h5md", tmp_path / f"{src.stem}-part.h5md"
        with xr.open_dataset(src, engine="h5md") as ds:
            to_h5md(ds, whole)
            to_h5md(ds.isel(atom=slice(10, 60)), part)
        u, copy = load_universe(src), load_universe(whole)
        assert len(u.bonds) and np.array_equal(copy.bonds.indices, u.bonds.indices)
        for attr in ("names", "masses", "charges", "resids"):
            np.testing.assert_array_equal(getattr(copy.atoms, attr), getattr(u.atoms, attr))
        if top == TPR:
            np.testing.assert_array_equal(copy.atoms.elements, u.atoms.elements)
        kept = u.atoms[10:60]
        among = kept.bonds.atomgroup_intersection(kept, strict=True)
        assert len(load_universe(part).bonds) == len(among) > 0
        with xr.open_dataset(whole, engine="h5md") as back:
            assert back.md.rmsd(select="name CA", weights="mass").shape == (3,)


def test_to_h5md_keeps_a_fixed_box_and_the_author(tmp_path):
    """A box without ``time`` is written as H5MD's fixed ``box/edges`` with its boundary
    (it became a per-particle dataset, and the box non-periodic), and the author stays."""
    pos = RNG.normal(size=(4, 2, 3)).astype(np.float32)
    ds = xr.Dataset(
        {"position": (("time", "atom", "spatial"), pos, {"units": "nm"}),
         "box_edges": (("spatial",), np.array([2.0, 3.0, 4.0]),
                       {"units": "nm", "boundary": ["periodic", "periodic", "none"],
                        "dimension": 3})},
        coords={"time": ("time", np.arange(4.0), {"units": "ps"}),
                "step": ("time", np.arange(4) * 10)},
        attrs={"author_name": "Ada", "author_email": "ada@example.org"})
    out = tmp_path / "fixed.h5md"
    to_h5md(ds, out)
    with h5py.File(out) as f:
        part = f["particles/trajectory"]
        assert sorted(part) == ["box", "position"]
        np.testing.assert_array_equal(part["box/edges"][()], [2.0, 3.0, 4.0])
        assert list(part["box"].attrs["boundary"]) == [b"periodic", b"periodic", b"none"]
        assert f["h5md/author"].attrs["name"] == b"Ada"
        assert f["h5md/author"].attrs["email"] == b"ada@example.org"
    with xr.open_dataset(out, engine="h5md") as back:
        np.testing.assert_array_equal(back.box_edges.values, [2.0, 3.0, 4.0])
        assert list(back.box_edges.attrs["boundary"]) == ["periodic", "periodic", "none"]
        np.testing.assert_array_equal(back.position.values, pos)
        assert back.attrs["author_name"] == "Ada"
        assert back.attrs["author_email"] == "ada@example.org"


def test_to_h5md_writes_elements_sampled_on_their_own_time_axis(tmp_path):
    """Elements the engine opens on ``time_<name>`` (box edges at other steps, a charge
    sampled every third frame) are written back with their own step and time."""
    from h5mdx.errors import H5MDConformanceWarning
    from h5mdx.testing import write_h5md

    pos = np.random.default_rng(0).normal(size=(6, 4, 3))
    path = write_h5md(
        tmp_path / "own.h5md",
        {"g": {"position": dict(value=pos, step=np.arange(6) * 10, time=np.arange(6) * 0.5,
                                unit="nm"),
               "charge": dict(value=np.arange(8.0).reshape(2, 4), step=np.array([0, 30]),
                              time=np.array([0.0, 1.5]))}},
        box={"g": {"edges": dict(value=np.array([[5.0] * 3, [6.0] * 3]), step=np.array([0, 50]),
                                 time=np.array([0.0, 2.5]), unit="nm")}},
    )
    with pytest.warns(H5MDConformanceWarning, match="box/edges"):
        ds = xr.open_dataset(path, engine="h5md")
    out = tmp_path / "back.h5md"
    with ds:
        assert ds.box_edges.dims == ("time_box_edges", "spatial")
        to_h5md(ds, out, frames_per_chunk=2)
    with pytest.warns(H5MDConformanceWarning, match="box/edges"):
        back = xr.open_dataset(out, engine="h5md")
        ds = xr.open_dataset(path, engine="h5md")
    with back, ds:
        for name in ("position", "charge", "box_edges"):
            assert back[name].dims == ds[name].dims
            np.testing.assert_array_equal(back[name].values, ds[name].values)
        np.testing.assert_array_equal(back.step_box_edges, [0, 50])
        np.testing.assert_array_equal(back.time_charge, [0.0, 1.5])
        assert back.time_box_edges.attrs["units"] == "ps"
        assert back.box_edges.attrs["units"] == "nm"
        assert back.box_edges.attrs["boundary"] == ["periodic"] * 3


def test_writer_adds_an_element_on_its_own_sampling(tmp_path):
    """``add_element`` writes an element with its own step and time beside the shared
    ones, in the writer's layout, checksummed like the rest; bad input is refused."""
    pos, box = _frames(n=6)
    path = tmp_path / "own.h5md"
    specs = [ElementSpec("position", pos.shape[1:], np.float32, "Angstrom")]
    charge = np.arange(3 * 11, dtype=np.float32).reshape(3, 11)
    with H5MDWriter(path, specs, layout=Layout(frames_per_chunk=2, compression="gzip:1"),
                    checksum=True) as w:
        w.extend(np.arange(6) * 10, np.arange(6) * 0.5, position=pos)
        w.add_element(ElementSpec("charge", (11,), np.float32, "e"), charge, [0, 20, 40],
                      [0.0, 1.0, 2.0], time_unit="ps")
        w.add_element(ElementSpec("box_edges", (3, 3), np.float32, "Angstrom"), box[:2],
                      [0, 50])
        with pytest.raises(ValueError, match="already written"):
            w.add_element(ElementSpec("charge", (11,)), charge, [0, 1, 2])
        with pytest.raises(ValueError, match="already written"):
            w.add_element(ElementSpec("position", pos.shape[1:]), pos, np.arange(6))
        with pytest.raises(ValueError, match=r"frames of shape \(11,\), not \(4,\)"):
            w.add_element(ElementSpec("mass", (4,)), charge, [0, 1, 2])
        with pytest.raises(ValueError, match="3 frames but 2 steps"):
            w.add_element(ElementSpec("mass", (11,)), charge, [0, 1])
    with h5py.File(path, "r") as f:
        value = f["particles/trajectory/charge/value"]
        assert value.chunks == (3, 11) and value.compression == "gzip"  # small: >= 64 KiB
        assert value.attrs["unit"] == "e"
        assert f["particles/trajectory/charge/time"].attrs["unit"] == "ps"
        assert "time" not in f["particles/trajectory/box/edges"]
    assert w.checksums == dataset_checksums(path, w.checksums)
    assert "/particles/trajectory/charge/value" in w.checksums
    from h5mdx.errors import H5MDConformanceWarning

    with pytest.warns(H5MDConformanceWarning, match="box/edges.*kept on its own time axis"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds:
        np.testing.assert_array_equal(ds.charge, charge)
        np.testing.assert_array_equal(ds.step_charge, [0, 20, 40])
        np.testing.assert_array_equal(ds.box_edges, box[:2])
        np.testing.assert_array_equal(ds.step_box_edges, [0, 50])


def test_to_h5md_keeps_what_h5md_allows_the_input(tmp_path):
    """A 2-D system keeps dimension 2, a file without time gets none (time equal to the
    step was invented), fill values stay fill values (an id of -1 marks an absent
    particle), and string species are written as fixed-length strings (h5py raised 'No
    conversion path'); found by an audit."""
    from h5mdx.testing import write_h5md

    pos = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)
    pos[1, 3] = np.nan
    ids = np.array([[0, 1, 2, 3], [0, 1, 2, -1], [0, 1, 2, 3]])
    path = write_h5md(tmp_path / "in.h5md", {"g": {
        "position": dict(value=pos, step=np.array([0, 10, 20]), time=None, fillvalue=np.nan),
        "id": dict(value=ids, step=np.array([0, 10, 20]), time=None, fillvalue=-1),
        "species": dict(value=np.array([b"C", b"O", b"O", b"H"]))}},
        box={"g": {"dimension": 2, "boundary": ["none", "none"], "edges": None}})
    with h5py.File(path, "r+") as f:  # write_element writes a time: this file has none
        for name in ("position", "id"):
            f[f"particles/g/{name}"].pop("time", None)
    out = tmp_path / "out.h5md"
    with pytest.warns(ParticleOrderWarning, match="frame 1 has 1 slot"):  # the absent one
        ds = xr.open_dataset(path, engine="h5md")
    with ds, pytest.warns(UserWarning, match=r"out\.h5md: position written without a unit"):
        to_h5md(ds, out)
    with h5py.File(out, "r") as f:
        g = f["particles/g"]
        assert g["box"].attrs["dimension"] == 2
        assert list(g["box"].attrs["boundary"]) == [b"none", b"none"]
        assert "time" not in g["position"] and "time" not in g["id"]
        assert g["id/value"].fillvalue == -1
        assert g["species"].dtype.kind == "S"
        np.testing.assert_array_equal(g["species"][()], [b"C", b"O", b"O", b"H"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # conformant: nothing to warn of
        warnings.simplefilter("ignore", ParticleOrderWarning)  # but the absent particle
        back = xr.open_dataset(out, engine="h5md")
        ds = xr.open_dataset(path, engine="h5md")
    with back, ds:
        np.testing.assert_array_equal(back.position.values, ds.position.values)
        np.testing.assert_array_equal(back.id.values, ids)
        assert back.id.encoding["_FillValue"] == -1
        np.testing.assert_array_equal(back.step.values, [0, 10, 20])
        assert back.time.attrs["units"] == "step"
        assert list(back.species.values) == ["C", "O", "O", "H"]


def test_write_h5md_replaces_a_file_a_dataset_still_has_open(tmp_path):
    """Rerunning a notebook cell that writes a file a Dataset still has open failed with
    HDF5's bare "unable to truncate a file which is already open"; the helper writes
    aside and renames, as the writers do."""
    from h5mdx.testing import write_h5md

    path = tmp_path / "cell.h5md"
    parts = {"all": {"position": {"value": np.zeros((3, 2, 3)), "step": np.arange(3),
                                  "time": np.arange(3.0)}}}
    write_h5md(path, parts)
    with xr.open_dataset(path, engine="h5md") as ds:
        assert ds.position.values.sum() == 0  # the file is open
        parts["all"]["position"]["value"] = np.ones((3, 2, 3))
        write_h5md(path, parts)
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.position.values, 1.0)


def _small_disk(path, size):
    """A tmpfs of ``size`` at ``path`` (root only; skipped otherwise)."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")


@pytest.mark.parametrize("command", ["convert", "rechunk"])
def test_a_disk_that_fills_at_closing_is_one_clear_error(tmp_path, adk_h5md, command):
    """HDF5 holds some of the last writes until the file closes: where they no longer fit,
    the close failed inside h5py (RuntimeError: Can't decrement id ref count), and the
    process crashed (a segfault). Now: one error line naming the output, status 1, the
    good file in place, nothing left behind."""
    import subprocess
    import sys

    from MDAnalysisTests.datafiles import DCD, PSF

    disk = tmp_path / "disk"
    _small_disk(disk, "40m")
    try:
        good = disk / "good.h5md"
        _write(good, *_frames(n=10))
        before = good.read_bytes()
        argv = (["convert", "--overwrite", PSF, *[DCD] * 10, str(good)]
                if command == "convert" else
                ["rechunk", "--overwrite", "--frames-per-chunk", "25", _tiled(tmp_path, adk_h5md),
                 str(good)])
        done = subprocess.run([sys.executable, "-m", "h5mdx", *argv], capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
        assert f"h5mdx {command}: error: [Errno 28] cannot write '{good}': No space left" \
            in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert good.read_bytes() == before
        assert [p.name for p in disk.iterdir()] == ["good.h5md"]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _tiled(tmp_path, adk_h5md):
    """adk's frames ten times over (39 MiB), as one H5MD file outside the small disk."""
    from h5mdx.testing import write_h5md

    out = tmp_path / "tiled.h5md"
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        pos = np.tile(ds.position.values, (10, 1, 1))
    write_h5md(out, {"trajectory": {"position": {"value": pos, "step": np.arange(len(pos)),
                                                 "unit": "Angstrom"}}})
    return str(out)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_contiguous_writer_after_a_failure_raises_the_failure(tmp_path, error):
    """A failure inside ``with H5MDWriter(..., Layout(contiguous=True))`` became the
    writer's own "ValueError: 3 frames written but 25 announced" at its close;
    the failure is raised now, and the file is closed (it opens again)."""
    pos, box = _frames()
    specs = [ElementSpec("position", pos.shape[1:], np.float32, "Angstrom"),
             ElementSpec("box_edges", (3, 3), np.float32, "Angstrom")]
    path = tmp_path / "c.h5md"
    with pytest.raises(error) as caught:
        with H5MDWriter(path, specs, layout=Layout(contiguous=True), n_frames=25) as w:
            for i in range(3):
                w.append(i, 0.5 * i, position=pos[i], box_edges=box[i])
            raise error("failed at frame 3")
    assert str(caught.value) == "failed at frame 3"
    assert caught.value.__context__ is None
    assert w.file is None
    with h5py.File(path, "r") as f:  # closed: no h5py handle left open on it
        assert f["particles/trajectory/position/value"].shape == (25, 11, 3)


def test_a_frame_of_another_shape_is_refused_not_broadcast(tmp_path):
    """A box given as its 3 lengths, to an element declared as the (3, 3) matrix of box
    vectors, was broadcast into 3 equal rows ([[10, 20, 30]] * 3, a flat box) and one
    xyz into every atom's position, without a word; a frame of 5 atoms for 4 said only
    numpy's 'could not broadcast input array from shape (5,3) into shape (4,3)' (an
    audit). Both writers now refuse them naming the element and its shape; nothing of
    them is written."""
    from h5mdx.layout.export import ZarrWriter

    spec = [ElementSpec("position", (4, 3), np.float32, "Angstrom"),
            ElementSpec("box_edges", (3, 3), np.float32, "Angstrom")]
    box = np.diag([10.0, 20.0, 30.0])
    for writer, out in ((H5MDWriter, tmp_path / "w.h5md"), (ZarrWriter, tmp_path / "w.zarr")):
        with writer(out, spec) as w:
            with pytest.raises(ValueError, match=r"box_edges: a frame of shape \(3,\), not "
                                                 r"\(3, 3\)"):
                w.append(0, 0.0, position=np.zeros((4, 3)), box_edges=[10.0, 20.0, 30.0])
            with pytest.raises(ValueError, match=r"position: a frame of shape \(3,\), not "
                                                 r"\(4, 3\)"):
                w.append(0, 0.0, position=np.zeros(3), box_edges=box)
            with pytest.raises(ValueError, match=r"position: (a frame|frames) of shape \(5, 3\), "
                                                 r"not \(4, 3\)"):
                w.extend([0], [0.0], position=np.zeros((1, 5, 3)), box_edges=box[None])
            w.append(0, 0.0, position=np.ones((4, 3)), box_edges=box)
        with (xr.open_zarr(out) if writer is ZarrWriter
              else xr.open_dataset(out, engine="h5md")) as ds:
            assert ds.sizes["time"] == 1
            np.testing.assert_array_equal(ds.box_edges[0].values, box)
            np.testing.assert_array_equal(ds.position[0].values, np.ones((4, 3)))


def test_a_step_that_is_no_integer_is_refused(tmp_path):
    """A step coordinate made float with NaN (frames without a step, after xr.concat or
    reindex) was written by to_h5md as step -9223372036854775808, or refused as 'step
    -9223372036854775808 after step 0'; fractional steps were cut to integers ([0, 1.5,
    2.7] written as [0, 1, 2]). Now each writer refuses a step that is no
    integer, naming it, and writes nothing of the block; whole steps given as floats are
    written as they are."""
    from h5mdx.layout.export import ZarrWriter

    spec = [ElementSpec("position", (2, 3), np.float32, "Angstrom")]
    zeros = np.zeros((2, 2, 3))
    for writer, out in ((H5MDWriter, tmp_path / "w.h5md"), (ZarrWriter, tmp_path / "w.zarr")):
        with writer(out, spec) as w:
            with pytest.raises(ValueError, match=r"step nan \(the 1st given\) is no integer"):
                w.append(np.nan, 0.0, position=zeros[0])
            with pytest.raises(ValueError, match=r"step 1.5 \(the 2nd given\) is no integer"):
                w.extend([0.0, 1.5], [0.0, 1.0], position=zeros)
            w.extend([0.0, 2.0], [0.0, 1.0], position=zeros)
        with (xr.open_zarr(out) if writer is ZarrWriter
              else xr.open_dataset(out, engine="h5md")) as ds:
            np.testing.assert_array_equal(ds.step.values, [0, 2])
    u = pytest.importorskip("MDAnalysisTests.datafiles")
    from h5mdx.layout.convert import convert

    convert(u.GRO, [u.XTC], tmp_path / "x.h5md", progress=False, stop=4)
    with xr.open_dataset(tmp_path / "x.h5md", engine="h5md") as ds:
        for steps in ([0.0, np.nan, 200.0, 300.0], [0.0, 0.5, 1.5, 2.7]):
            bad = ds.assign_coords(step=("time", np.array(steps)))
            with pytest.raises(ValueError, match=rf"step {steps[1]} \(the 2nd given\)"):
                to_h5md(bad, tmp_path / "bad.h5md")
            assert not (tmp_path / "bad.h5md").exists()


def test_a_compressed_writer_compresses_its_bonds_and_fixed_data(tmp_path):
    """H5MDWriter with a compression gave it to the time series alone: the bonds, step,
    time and fixed-in-time data were written uncompressed. Now those of at least 4 KiB
    (step and time always) get it too; a small one stays unchunked."""
    pos, box = _frames(n=5, atoms=700)
    path = tmp_path / "c.h5md"
    bonds = np.stack([np.arange(699), np.arange(1, 700)], axis=1)
    static = {"mass": (np.full(700, 12.0), "u", {}), "charge": (np.zeros(3), None, {})}
    _write(path, pos, box, layout=Layout(compression="gzip:2"), bonds=bonds, static=static)
    with h5py.File(path) as f:
        for name in ("connectivity/bonds", "particles/trajectory/mass",
                     "particles/trajectory/position/step", "particles/trajectory/position/time"):
            assert (f[name].compression, f[name].compression_opts) == ("gzip", 2), name
        np.testing.assert_array_equal(f["connectivity/bonds"][()], bonds)
        np.testing.assert_array_equal(f["particles/trajectory/mass"][()], np.full(700, 12.0))
        small = f["particles/trajectory/charge"]
        assert small.chunks is None and small.compression is None
