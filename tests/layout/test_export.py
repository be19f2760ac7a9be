"""Zarr codecs and checksums of h5mdx.layout.export, from the one parser and the one digest."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5mdx.format.checksums import dataset_checksums
from h5mdx.layout.export import zarr_checksums, zarr_compressors

zarr = pytest.importorskip("zarr")  # an optional dependency of h5mdx, not one of its modules


def test_zarr_compressors_follow_the_parser():
    assert zarr_compressors(None) is None and zarr_compressors("none") is None
    (gz,) = zarr_compressors("gzip")
    assert type(gz).__name__ == "GzipCodec" and gz.level == 4
    (zs,) = zarr_compressors("zstd:7")
    assert type(zs).__name__ == "ZstdCodec" and zs.level == 7
    (bl,) = zarr_compressors("blosc:zstd:3")
    assert type(bl).__name__ == "BloscCodec" and bl.clevel == 3
    assert str(bl.cname.value if hasattr(bl.cname, "value") else bl.cname) == "zstd"
    with pytest.raises(ValueError, match="not available for Zarr"):
        zarr_compressors("lzf")
    with pytest.raises(ValueError, match="gzip level must be 0-9"):
        zarr_compressors("gzip:12")


def test_zarr_and_hdf5_checksums_agree(tmp_path):
    x = np.random.default_rng(1).random((30, 5, 3)).astype(np.float32)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(4, 5, 3))
    root = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    root.create_array("x", shape=x.shape, chunks=(6, 5, 3), dtype=x.dtype)[:] = x
    assert zarr_checksums(tmp_path / "a.zarr", ["x"], block_bytes=100) == \
        dataset_checksums(tmp_path / "a.h5", ["x"])


def test_zarr_writer_keeps_time_variables_in_few_chunks(tmp_path, monkeypatch):
    """``time`` and ``step`` are 8 bytes a frame: their chunks hold TIME_CHUNK_ENTRIES
    frames, not the positions' 10 (a file a chunk, each read at every open); appends
    across those chunks keep every value, with the frame count unknown or known."""
    import xarray as xr

    from h5mdx.format.writer import ElementSpec, Layout
    from h5mdx.layout import export

    monkeypatch.setattr(export, "TIME_CHUNK_ENTRIES", 16)
    x = np.random.default_rng(2).random((95, 7, 3)).astype(np.float32)
    for n_frames, chunk in ((None, 16), (95, 16), (12, 12)):
        store = tmp_path / f"w{n_frames}.zarr"
        frames = x[:n_frames or 95]
        with export.ZarrWriter(store, [ElementSpec("position", (7, 3), np.float32, "nm")],
                               n_frames=n_frames, layout=Layout(frames_per_chunk=10)) as w:
            for i, frame in enumerate(frames):
                w.append(i * 10, i * 0.5, position=frame)
        root = zarr.open_group(str(store), mode="r")
        assert root["position"].chunks == (10, 7, 3)
        assert root["step"].chunks == root["time"].chunks == (chunk,)
        with xr.open_zarr(store) as ds:
            np.testing.assert_array_equal(ds.position.values, frames)
            np.testing.assert_array_equal(ds.step.values, np.arange(len(frames)) * 10)
            np.testing.assert_array_equal(ds.time.values, np.arange(len(frames)) * 0.5)
            # the appends keep the store's attributes (xarray replaces them at each write)
            assert ds.attrs["creator_name"] == "h5mdx"
            assert ds.attrs["h5md_group"] == "/particles/trajectory"


def test_dataset_to_zarr_writes_time_variables_from_memory(tmp_path, monkeypatch):
    """1-D variables on ``time`` (coordinates and one-value observables) get chunks of
    their own, written from memory, whatever the positions' dask blocks."""
    import xarray as xr

    from h5mdx.format.writer import Layout
    from h5mdx.layout import export

    monkeypatch.setattr(export, "TIME_CHUNK_ENTRIES", 16)
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"position": (("time", "atom", "spatial"), rng.random((45, 4, 3)).astype(np.float32)),
         "energy": (("time",), rng.random(45))},
        coords={"time": np.arange(45) * 0.5, "step": ("time", np.arange(45) * 10)},
    ).chunk({"time": 10})
    export.dataset_to_zarr(ds, tmp_path / "d.zarr", layout=Layout(frames_per_chunk=5))
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="r")
    assert root["position"].chunks == (5, 4, 3)
    assert root["step"].chunks == root["time"].chunks == root["energy"].chunks == (16,)
    with xr.open_zarr(tmp_path / "d.zarr") as back:
        xr.testing.assert_identical(back.load(), ds.load())


def test_a_store_missing_chunks_is_said_so(tmp_path, adk_h5md, capsys):
    """A store that lost a chunk file (a copy that did not finish) reads those frames as
    NaN: ``h5mdx info`` says so, ``open_zarr_store(check_chunks=True)`` warns, and
    ``h5mdx rmsd`` counts the frames without an RMSD (it exited 0 with NaN in the
    series and said nothing)."""
    import json
    import shutil

    from h5mdx.cli import main
    from h5mdx.errors import H5MDConformanceWarning
    from h5mdx.layout.export import missing_chunks, open_zarr_store
    from h5mdx.layout.rechunk import rechunk

    store = tmp_path / "lost.zarr"
    rechunk(adk_h5md, store, frames_per_chunk=10)
    with open_zarr_store(store) as ds:
        assert missing_chunks(store, ds) == {}
    chunk = store / "position" / "c" / "3"  # frames 30-39
    shutil.rmtree(chunk)
    with pytest.warns(H5MDConformanceWarning, match=r"lost\.zarr \[position\]: stores 9 of "
                      r"its 10 chunks .* read as nan"):
        open_zarr_store(store, check_chunks=True).close()
    assert main(["info", str(store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["missing_chunks"] == {"position": {"stored": 9, "expected": 10,
                                                     "reads_as": "nan"}}
    assert main(["info", str(store)]) == 0
    assert "warning: position stores 9 of its 10 chunks" in capsys.readouterr().out
    with pytest.warns(H5MDConformanceWarning, match=r"\[position\]: stores 9 of its 10"):
        assert main(["rmsd", str(store), "--scheduler", "threads", "--no-progress"]) == 0
    assert "warning: 10 of 98 frames have no RMSD (NaN)" in capsys.readouterr().err


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_damaged_chunk_of_a_store_is_named(tmp_path, adk_h5md, capsys, compression):
    """A truncated chunk of a Zarr store fails the RMSD with one line naming the store,
    the array and the frames (a 134-line traceback from the codec, or "cannot reshape"
    naming nothing)."""
    from h5mdx.cli import main
    from h5mdx.layout.rechunk import rechunk

    store = tmp_path / "bad.zarr"
    rechunk(adk_h5md, store, frames_per_chunk=10, compression=compression)
    chunk = store / "position" / "c" / "3" / "0" / "0"  # frames 30-39
    chunk.write_bytes(chunk.read_bytes()[:500])
    assert main(["rmsd", str(store), "--scheduler", "threads", "--no-progress",
                 "--frames-per-block", "10"]) == 1
    err = capsys.readouterr().err
    assert f"error: {store} [position]: cannot read frames 30-39: " in err, err
    assert "Traceback" not in err
    # the reference frame's chunk (read before the tasks): named alike, not "cannot
    # reshape array of size 2"
    assert main(["rmsd", str(store), "--scheduler", "threads", "--no-progress",
                 "--reference", "35"]) == 1
    err = capsys.readouterr().err
    assert f"error: {store} [position]: cannot read the reference frame 35: " in err, err


def test_text_that_is_not_ascii_is_written_as_utf8(tmp_path, adk_h5md):
    """to_h5md wrote unicode variables as ASCII-typed strings holding UTF-8 bytes, which
    h5mdx's own reader then left out ('ascii' codec can't decode)."""
    import warnings

    import xarray as xr

    from h5mdx.layout.export import to_h5md

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        n = ds.sizes["atom"]
        labels = np.array(["ÅB", "x", "ünï"] + ["y"] * (n - 3))
        out = to_h5md(ds.isel(time=slice(0, 2)).assign(
            label=("atom", labels), tag=(("time", "atom"), np.full((2, n), "é"))),
            tmp_path / "text.h5md")
    with h5py.File(out) as f:
        assert h5py.check_string_dtype(f["particles/trajectory/label"].dtype).encoding == \
            "utf-8"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out
        with xr.open_dataset(out, engine="h5md") as back:
            np.testing.assert_array_equal(back.label.values, labels)
            assert back.tag.values[1, 0] == "é"


def test_zarr_writer_chunks_the_box_as_the_h5md_writer_does(tmp_path):
    """``h5mdx convert OUT.zarr`` stored the box (36 bytes a frame) in chunks of the
    positions' frames: a file for every frame or two (the GRO/TRR of adk with
    --frames-per-chunk 2: five chunks of 2 frames, where the H5MD file has one of 10;
    audit77). The box's chunks hold whole blocks of at least 64 KiB now, as in H5MD, and
    appends across them keep every value."""
    import MDAnalysis as mda
    import xarray as xr
    from MDAnalysisTests import datafiles as d

    from h5mdx.format.writer import ElementSpec, Layout
    from h5mdx.layout import export
    from h5mdx.layout.convert import convert

    rng = np.random.default_rng(3)
    x = rng.random((95, 7, 3)).astype(np.float32)
    box = rng.random((95, 3, 3)).astype(np.float32)
    specs = [ElementSpec("position", (7, 3), np.float32, "nm"),
             ElementSpec("box_edges", (3, 3), np.float32, "nm")]
    for n_frames, chunk in ((None, 10 * -(-65536 // 360)), (95, 95)):
        store = tmp_path / f"w{n_frames}.zarr"
        with export.ZarrWriter(store, specs, n_frames=n_frames,
                               layout=Layout(frames_per_chunk=10)) as w:
            for i in range(95):
                w.append(i, 0.5 * i, position=x[i], box_edges=box[i])
        root = zarr.open_group(str(store), mode="r")
        assert root["position"].chunks == (10, 7, 3)
        assert root["box_edges"].chunks == (chunk, 3, 3)
        with xr.open_zarr(store) as ds:
            np.testing.assert_array_equal(ds.position.values, x)
            np.testing.assert_array_equal(ds.box_edges.values, box)
    h5, store = tmp_path / "adk.h5md", tmp_path / "adk.zarr"
    convert(d.GRO, [d.TRR], h5, frames_per_chunk=2, progress=False)
    convert(d.GRO, [d.TRR], store, frames_per_chunk=2, progress=False, verify=True)
    root = zarr.open_group(str(store), mode="r")
    with h5py.File(h5) as f:
        assert root["box_edges"].chunks == f["particles/trajectory/box/edges/value"].chunks
    assert root["box_edges"].nchunks_initialized == 1
    u = mda.Universe(d.GRO, d.TRR)
    with xr.open_zarr(store) as ds:
        np.testing.assert_allclose(ds.box_edges.values,
                                   [ts.triclinic_dimensions for ts in u.trajectory])


def test_zarr_writer_refuses_what_the_h5md_writer_refuses(tmp_path):
    """ZarrWriter ("the same interface as H5MDWriter") wrote steps 0, 10, 5, 5 as they came
    (a store whose ``time`` goes back), and an element left out was a bare KeyError
   ; it refuses both as H5MDWriter does, and a missing time, before writing."""
    import xarray as xr

    from h5mdx.format.writer import ElementSpec, Layout
    from h5mdx.layout import export

    specs = [ElementSpec("position", (2, 3), np.float32, "nm")]
    frame = np.ones((2, 3), np.float32)
    store = tmp_path / "w.zarr"
    with pytest.raises(ValueError, match=r"w.zarr: step 5 after step 10: H5MD's steps "):
        with export.ZarrWriter(store, specs, layout=Layout(frames_per_chunk=2)) as w:
            for s in (0, 10, 5):
                w.append(s, s * 0.1, position=frame)
    with pytest.raises(ValueError, match=r"step 3 after step 3"):
        with export.ZarrWriter(tmp_path / "x.zarr", specs) as w:
            w.extend([1, 2, 3, 3], [0.1, 0.2, 0.3, 0.3], position=np.stack([frame] * 4))
    two = [*specs, ElementSpec("velocity", (2, 3), np.float32, "nm ps-1")]
    with pytest.raises(ValueError, match=r"elements missing: \['velocity'\], unexpected: \[\]"):
        with export.ZarrWriter(tmp_path / "y.zarr", two) as w:
            w.append(0, 0.0, position=frame)
    with pytest.raises(ValueError, match="time is None"):
        with export.ZarrWriter(tmp_path / "z.zarr", specs) as w:
            w.extend([0, 1], None, position=np.stack([frame] * 2))
    good = tmp_path / "good.zarr"
    with export.ZarrWriter(good, specs, layout=Layout(frames_per_chunk=2)) as w:
        w.extend([0, 10, 20], [0.0, 1.0, 2.0], position=np.stack([frame] * 3))
    with xr.open_zarr(good) as ds:
        np.testing.assert_array_equal(ds.step.values, [0, 10, 20])
        np.testing.assert_array_equal(ds.time.values, [0.0, 1.0, 2.0])


def test_an_output_named_as_the_other_kind_is_refused(tmp_path, adk_h5md):
    """``ds.md.to_h5md("out.zarr")`` wrote an HDF5 file named as a Zarr store (which
    xr.open_zarr refuses, and h5mdx's tools take for a store), and ``ds.md.to_zarr(
    "out.h5md")`` a store the h5md engine refuses: both are refused before
    anything is written, naming the writer to use; the right names write as before."""
    import xarray as xr

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        part = ds.isel(time=slice(0, 3))
        for name in ("out.zarr", "OUT.ZARR"):
            with pytest.raises(ValueError, match=rf"'{tmp_path / name}' is named as a Zarr "
                                                 r"store: to_h5md writes H5MD .*md.to_zarr"):
                part.md.to_h5md(tmp_path / name)
        for name in ("out.h5md", "out.h5"):
            with pytest.raises(ValueError, match=r"is named as an H5MD file: to_zarr writes "
                                                 r"a Zarr store .*md.to_h5md"):
                part.md.to_zarr(tmp_path / name)
        assert os.listdir(tmp_path) == []
        part.md.to_h5md(tmp_path / "out.h5md")
        part.md.to_zarr(tmp_path / "out.zarr")
        with xr.open_zarr(tmp_path / "out.zarr") as z, \
                xr.open_dataset(tmp_path / "out.h5md", engine="h5md") as h:
            np.testing.assert_array_equal(z.position.values, part.position.values)
            np.testing.assert_array_equal(h.position.values, part.position.values)


def test_a_zarr_copy_selects_residues_of_insertion_codes_by_their_names(tmp_path):
    """A Zarr copy of positions opened with a PDB whose residues share numbers
    (insertion codes: 163, 163A, ...) holds each atom's resname; selections in its own
    names (coords_topology, a store without its topology file) made one residue of
    each number, named by its first atom: "resname ALA" took 50 atoms where MDAnalysis
    takes 55 (64 atoms misnamed). A residue starts where the
    resname changes too, as MDAnalysis' PDB parser splits them."""
    import warnings

    import MDAnalysis as mda
    import xarray as xr
    from MDAnalysisTests.datafiles import PDB_icodes

    from h5mdx.engine.topology import coords_topology
    from h5mdx.layout.convert import convert

    u = mda.Universe(PDB_icodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the VMD module's resname left out, said
        convert(u, [], tmp_path / "icodes.h5md", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(tmp_path / "icodes.h5md", engine="h5md",
                             topology=PDB_icodes) as ds:
            ds.md.to_zarr(tmp_path / "icodes.zarr", progress=False)
    with xr.open_zarr(tmp_path / "icodes.zarr") as z:
        own = coords_topology(z.position)  # the store's names, without the PDB
        np.testing.assert_array_equal(own.atoms.resnames, u.atoms.resnames)
        for sel in ("resname ALA", "resname ASN", "resname GLY and name CA"):
            np.testing.assert_array_equal(own.select_atoms(sel).indices,
                                          u.select_atoms(sel).indices)


def test_one_frame_without_its_axis_is_said_as_such(tmp_path, adk_h5md):
    """``ds.isel(time=2).md.to_h5md(OUT)`` said only that the Dataset had no variable on
    'time' and 'atom' (it has the positions, of one frame); now the error says a frame was
    taken without its axis and how to keep it, and the selection it gives writes it."""
    import xarray as xr

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        t = float(ds.time[2])
        with pytest.raises(ValueError, match=r"one frame at time .*isel\(time=\[0\]\)"):
            ds.isel(time=2).md.to_h5md(tmp_path / "one.h5md")
        assert os.listdir(tmp_path) == []
        ds.sel(time=[t]).md.to_h5md(tmp_path / "one.h5md")
        with xr.open_dataset(tmp_path / "one.h5md", engine="h5md") as back:
            assert back.sizes["time"] == 1 and float(back.time[0]) == t
            np.testing.assert_array_equal(back.position[0].values, ds.position[2].values)


def test_a_variable_of_python_objects_is_refused_by_name_before_writing(tmp_path, adk_h5md):
    """A string variable of dtype object on 'time' failed deep in the writer with h5py's
    "Object dtype dtype('O') has no native HDF5 equivalent"; now a ValueError
    names it and the fix, nothing is written, and the fix writes it."""
    import xarray as xr

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        ds = ds.isel(time=slice(0, 3))
        ds["label"] = ("time", np.array(["a0", "b1", "c2"], dtype=object))
        with pytest.raises(ValueError, match=r"variable 'label' holds Python objects .*"
                                             r"ds\['label'\]\.astype\(str\)"):
            ds.md.to_h5md(tmp_path / "w.h5md")
        assert os.listdir(tmp_path) == []
        ds["label"] = ds["label"].astype(str)
        ds.md.to_h5md(tmp_path / "w.h5md")
    with h5py.File(tmp_path / "w.h5md", "r") as f:  # an observable: a value per frame
        assert [v.decode() for v in f["observables/label/value"][()]] == ["a0", "b1", "c2"]


def test_to_h5md_says_the_observables_of_its_file_it_leaves_out(tmp_path):
    """to_h5md of a file's Dataset left the file's /observables out in silence (the
    engine opens them as a group of their own); now a warning names them."""
    import warnings

    import xarray as xr
    from MDAnalysisTests.datafiles import H5MD_energy

    with xr.open_dataset(H5MD_energy, engine="h5md") as ds, \
            pytest.warns(UserWarning, match=r"the observables of .*cu\.h5md \(atoms/energy\) "
                                            r"are not in the Dataset and are not written"):
        ds.md.to_h5md(tmp_path / "w.h5md")
    with xr.open_dataset(tmp_path / "w.h5md", engine="h5md") as ds, \
            warnings.catch_warnings():
        warnings.simplefilter("error")  # a file without observables: no word
        ds.md.to_h5md(tmp_path / "again.h5md")


def _zarr_codecs(store):
    """Array path -> names of its compressors, for every array of a Zarr store."""
    out = {}

    def walk(group, prefix=""):
        for name, arr in group.arrays():
            out[prefix + name] = [type(c).__name__ for c in arr.compressors]
        for name, sub in group.groups():
            walk(sub, f"{prefix}{name}/")

    walk(zarr.open_group(str(store), mode="r"))
    return out


@pytest.mark.parametrize("spec, codec", [("none", []), ("gzip:3", ["GzipCodec"])])
def test_every_array_of_a_zarr_output_has_the_compression_asked(tmp_path, spec, codec):
    """compression='none' (or gzip) reached the frames only: a converted store's species,
    mass, charge, names, time and step, and to_zarr's coordinates, kept Zarr's default
    zstd. Now every array of the store holds the compression asked."""
    import xarray as xr
    from MDAnalysisTests.datafiles import DCD, PSF

    from h5mdx.layout.convert import convert
    from h5mdx.layout.export import to_zarr

    convert(PSF, DCD, tmp_path / "c.zarr", stop=3, compression=spec, progress=False)
    got = _zarr_codecs(tmp_path / "c.zarr")
    assert {"position", "species", "mass", "charge", "name", "time", "step"} <= set(got)
    assert got == {k: codec for k in got}
    with xr.open_dataset(tmp_path / "c.zarr", engine="zarr") as ds:
        to_zarr(ds, tmp_path / "copy.zarr", compression=spec)
    got = _zarr_codecs(tmp_path / "copy.zarr")
    assert {"position", "mass", "name", "time", "atom"} <= set(got)
    assert got == {k: codec for k in got}


def test_to_h5md_says_how_many_frames_have_no_box(tmp_path):
    """A Dataset whose box_edges are zeros in some frames (MDAnalysis' no box, as convert
    writes frames without a box) was written by to_h5md without a word; now one warning
    names the Dataset's file and how many frames, and the values are kept as they are."""
    import xarray as xr

    from h5mdx.testing import write_h5md

    edges = np.stack([np.eye(3) * 30.0, np.zeros((3, 3)), np.zeros((3, 3)), np.eye(3) * 31.0])
    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {
        "position": {"value": np.ones((4, 2, 3)), "step": np.arange(4), "time": np.arange(4.0),
                     "unit": "nm"}}},
        box={"trajectory": {"dimension": 3, "boundary": ["periodic"] * 3, "edges": {
            "value": edges, "step": np.arange(4), "time": np.arange(4.0), "unit": "nm"}}})
    with xr.open_dataset(src, engine="h5md") as ds, \
            pytest.warns(UserWarning, match=r"in\.h5md: 2 of 4 frames have no box \(box_edges "
                                            r"all zero\); written to .*out\.h5md as zeros") as got:
        ds.md.to_h5md(tmp_path / "out.h5md", frames_per_chunk=1)
    assert len(got) == 1
    with h5py.File(tmp_path / "out.h5md") as f:
        np.testing.assert_array_equal(f["particles/trajectory/box/edges/value"][()], edges)


def test_a_store_replaced_keeps_its_group_and_mode(tmp_path):
    """A Zarr store written again with overwrite=True (--overwrite) came back with the
    umask's mode and the user's own group: a store shared group-writable in a project's
    group could no longer be replaced (nor, at 0o750, read) by the group's members. Now
    the new store's directories get the old top directory's group and mode, and its
    files those of the old store's zarr.json."""
    import stat

    from h5mdx.layout._atomic import atomic_output

    def write(tmp, text):
        os.mkdir(tmp)
        (Path(tmp) / "zarr.json").write_text(text)
        os.makedirs(Path(tmp) / "x" / "c" / "0")
        (Path(tmp) / "x" / "c" / "0" / "0").write_bytes(b"chunk")

    target = tmp_path / "out.zarr"
    groups = [g for g in os.getgroups() if g != os.getegid()]
    umask = os.umask(0o022)
    try:
        with atomic_output(target, directory=True) as tmp:
            write(tmp, "{}")
        for root, _dirs, files in os.walk(target):
            os.chmod(root, 0o2770)
            for name in files:
                os.chmod(os.path.join(root, name), 0o660)
            if groups:
                os.chown(root, -1, groups[0])
                for name in files:
                    os.chown(os.path.join(root, name), -1, groups[0])
                os.chmod(root, 0o2770)
        with atomic_output(target, overwrite=True, directory=True) as tmp:
            write(tmp, '{"new": 1}')
    finally:
        os.umask(umask)
    assert (target / "zarr.json").read_text() == '{"new": 1}'
    assert sorted(os.listdir(tmp_path)) == ["out.zarr"]
    for d in (target, target / "x", target / "x" / "c" / "0"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o2770, d
    for f in (target / "zarr.json", target / "x" / "c" / "0" / "0"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o660, f
    if groups:
        assert {p.stat().st_gid for p in (target, target / "zarr.json",
                                          target / "x" / "c" / "0" / "0")} == {groups[0]}


def test_a_store_is_on_disk_before_it_replaces_another(tmp_path, monkeypatch):
    """A Zarr store written with overwrite=True over another was swapped into place
    without flushing its chunks (only an HDF5 output was flushed): a power loss after
    the swap could leave the new store's chunks empty and the old store gone. Now
    every file and directory of the new store is flushed before the swap."""
    from h5mdx.layout import _atomic
    from h5mdx.layout._atomic import atomic_output

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("no /proc/self/fd to tell which file a descriptor is")
    target = tmp_path / "out.zarr"
    for text in ("{}", '{"new": 1}'):
        events = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd, events=events, real_fsync=real_fsync):
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            real_fsync(fd)

        def replace(src, dst, events=events, real_replace=real_replace):
            events.append(("replace", os.fspath(src)))
            real_replace(src, dst)

        monkeypatch.setattr(_atomic.os, "fsync", fsync)
        monkeypatch.setattr(_atomic.os, "replace", replace)
        with atomic_output(target, overwrite=True, directory=True) as tmp:
            os.mkdir(tmp)
            (Path(tmp) / "zarr.json").write_text(text)
            os.makedirs(Path(tmp) / "x" / "c")
            (Path(tmp) / "x" / "c" / "0").write_bytes(b"chunk")
        monkeypatch.undo()
    swap = next(i for i, (kind, _) in enumerate(events) if kind == "replace")
    flushed = {path for kind, path in events[:swap] if kind == "fsync"}
    assert {str(Path(tmp) / "x" / "c" / "0"), str(Path(tmp) / "zarr.json"),
            str(Path(tmp) / "x"), tmp} <= flushed
    assert (target / "zarr.json").read_text() == '{"new": 1}'


def _denied_in_read_only_directories(monkeypatch):
    """os.unlink and os.rmdir refuse, as for a user other than root, an entry of a
    directory without the owner's write bit (the tests run as root, which ignores it)."""
    import stat

    def guarded(real):
        def call(path, *, dir_fd=None):
            parent = os.fstat(dir_fd) if dir_fd is not None else os.stat(
                os.path.dirname(os.path.abspath(path)))
            if not parent.st_mode & stat.S_IWUSR:
                raise PermissionError(13, "Permission denied", path)
            return real(path, dir_fd=dir_fd)
        return call

    monkeypatch.setattr(os, "unlink", guarded(os.unlink))
    monkeypatch.setattr(os, "rmdir", guarded(os.rmdir))


def test_a_read_only_store_replaced_is_removed(tmp_path, monkeypatch):
    """A read-only Zarr store (0o555 directories) replaced with overwrite=True could not be
    removed: the removal failed without a word and left
    ``.NAME.HOST.PID.old.h5mdx-partial`` beside the new store for good. Its directories
    are now made writable and it is removed."""
    from h5mdx.layout._atomic import atomic_output, partial_files

    target = tmp_path / "out.zarr"
    for text in ("{}", '{"new": 1}'):
        with atomic_output(target, overwrite=True, directory=True) as tmp:
            os.makedirs(Path(tmp) / "x" / "c")
            (Path(tmp) / "zarr.json").write_text(text)
            (Path(tmp) / "x" / "c" / "0").write_bytes(b"chunk")
        for d in (target / "x" / "c", target / "x", target):
            d.chmod(0o555)
        _denied_in_read_only_directories(monkeypatch)
    assert (target / "zarr.json").read_text() == '{"new": 1}'
    assert partial_files(target) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_a_replaced_store_that_cannot_be_removed_is_named(tmp_path):
    """Where the replaced store cannot be removed even so, a warning names what is left."""
    from h5mdx.layout import _atomic
    from h5mdx.layout._atomic import atomic_output, partial_files

    target = tmp_path / "out.zarr"
    for text in ("{}", '{"new": 1}'):
        with pytest.MonkeyPatch.context() as mp:
            if text != "{}":
                mp.setattr(_atomic.shutil, "rmtree", lambda path, **kw: None)
            ctx = pytest.warns(RuntimeWarning, match=r"out\.zarr' was replaced, but the store"
                               r" it replaced could not be removed: it is left as '.*\.old\.") \
                if text != "{}" else contextlib.nullcontext()
            with ctx, atomic_output(target, overwrite=True, directory=True) as tmp:
                os.mkdir(tmp)
                (Path(tmp) / "zarr.json").write_text(text)
    assert (target / "zarr.json").read_text() == '{"new": 1}'
    assert [p.name.split(".")[-2] for p in partial_files(target)] == ["old"]
