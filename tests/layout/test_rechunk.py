"""rechunk(): new layout, everything else (groups, attributes, links, observables) kept."""

from __future__ import annotations

import argparse
import os
import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.cli import layout as _cli_layout
from h5mdx.layout.rechunk import rechunk
from h5mdx.testing import write_element

d = pytest.importorskip("MDAnalysisTests.datafiles")


def _tree(path):
    """path -> (kind, object id shared by hard links, attrs, data) of every object."""
    out = {}
    with h5py.File(path) as f:
        addrs = {}

        def visit(name, obj):
            addr = h5py.h5o.get_info(obj.id).addr
            ident = addrs.setdefault(addr, len(addrs))
            attrs = {k: np.asarray(obj.attrs[k]).tolist() for k in obj.attrs}
            data = obj[()] if isinstance(obj, h5py.Dataset) else None
            out[name] = (type(obj).__name__, ident, attrs, data)

        names = []
        f.visit_links(names.append)
        for name in names:
            link = f.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                out[name] = ("SoftLink", link.path, None, None)
            else:
                visit(name, f[name])
        out["/"] = ("File", None, {k: np.asarray(f.attrs[k]).tolist() for k in f.attrs}, None)
    return out


def _assert_same(a, b):
    ta, tb = _tree(a), _tree(b)
    assert sorted(ta) == sorted(tb)
    for k in ta:
        ka, ia, aa, da = ta[k]
        kb, ib, ab, db = tb[k]
        assert (ka, ia, aa) == (kb, ib, ab), k
        if da is not None:
            np.testing.assert_array_equal(da, db)


@pytest.fixture
def rich_file(tmp_path):
    """Two particle groups, observables (nested), parameters, soft link, hard links, attrs."""
    path = tmp_path / "rich.h5md"
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h.create_group("author").attrs["name"] = "me"
        h.create_group("creator").attrs.update({"name": "test", "version": "1"})
        f.attrs["note"] = "root attribute"
        g = f.create_group("particles/all")
        box = g.create_group("box")
        box.attrs["dimension"] = 3
        box.attrs["boundary"] = np.array([b"periodic"] * 3, dtype="S8")
        pos = write_element(g, "position", rng.normal(size=(40, 30, 3)).astype(np.float32),
                            step=np.arange(40) * 5, time=np.arange(40) * 0.1, unit="nm",
                            chunks=(7, 10, 1), compression="gzip", compression_opts=6)
        write_element(g, "velocity", rng.normal(size=(40, 30, 3)).astype(np.float32),
                      unit="nm ps-1", link_sampling_from=pos, chunks=True)
        write_element(box, "edges", np.full((40, 3), 5.0), link_sampling_from=pos, unit="nm")
        write_element(g, "species", np.arange(30) % 4)
        g2 = f.create_group("particles/other")
        g2.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        write_element(g2, "position", np.ones((10, 4, 3)), step=1, time=0.5, unit="nm")
        obs = f.create_group("observables")
        write_element(obs, "energy", rng.normal(size=40), step=np.arange(40) * 5,
                      time=np.arange(40) * 0.1, unit="kJ mol-1")
        sub = obs.create_group("atoms")
        write_element(sub, "temperature", rng.normal(size=(40, 2)), link_sampling_from=pos)
        f["parameters/thermostat"] = 300.0
        f["parameters/thermostat"].attrs["unit"] = "K"
        f["parameters/alias"] = h5py.SoftLink("/parameters/thermostat")
    return path


@pytest.mark.parametrize("opts", [dict(frames_per_chunk=8), dict(contiguous=True),
                                  dict(chunk_mib=0.001, compression="lzf"),
                                  dict(compression="none")])
def test_rechunk_keeps_everything(tmp_path, rich_file, opts):
    out = tmp_path / "out.h5md"
    stats = rechunk(rich_file, out, verify=True, buffer_mib=0.01, **opts)
    assert stats.verified
    _assert_same(rich_file, out)
    with h5py.File(out) as f:
        v = f["particles/all/position/value"]
        if opts.get("frames_per_chunk"):
            assert v.chunks == (8, 30, 3) and v.compression == "gzip"  # filters kept
        if opts.get("contiguous"):
            assert v.chunks is None
        if opts.get("compression") == "lzf":
            assert v.compression == "lzf" and v.chunks[1:] == (30, 3)
        if opts.get("compression") == "none":
            assert v.compression is None
        # hard links stay one object
        assert f["particles/all/position/step"].id == f["observables/atoms/temperature/step"].id
        assert f.get("parameters/alias", getlink=True).path == "/parameters/thermostat"


def test_rechunk_mdanalysis_file_and_engine(tmp_path, adk_h5md, adk_positions):
    out = tmp_path / "adk100.h5md"
    rechunk(adk_h5md, out, frames_per_chunk=20, verify=True)
    _assert_same(adk_h5md, out)
    ds = xr.open_dataset(out, engine="h5md")
    assert ds.position.encoding["chunksizes"] == (20, 3341, 3)
    np.testing.assert_array_equal(ds.position.values, adk_positions)
    ds.close()
    with pytest.raises(FileExistsError, match="--overwrite"):
        rechunk(adk_h5md, out)
    with pytest.raises(ValueError, match="also an input"):
        rechunk(adk_h5md, adk_h5md, overwrite=True)


def test_rechunk_to_zarr(tmp_path, rich_file):
    """Every group reaches the store: particles, observables and their subgroups, the
    groups of /parameters (a soft link there is left out with a warning); byte strings
    verify against the strings the store holds."""
    from h5mdx.errors import H5MDConformanceWarning

    with h5py.File(rich_file, "r+") as f:
        f["particles/all/name"] = np.array([b"CA", b"N"] * 15)
        f["parameters/thermostat_group/tau"] = 0.5
        # an element of /parameters (value, step, time): one variable of /parameters
        f["parameters/ramp/value"] = np.array([300.0, 310.0, 320.0])
        f["parameters/ramp/step"] = np.array([0, 5, 10])
        f["parameters/ramp/time"] = np.array([0.0, 0.5, 1.0])
    store = tmp_path / "rich.zarr"
    with pytest.warns(H5MDConformanceWarning, match=r"\[/parameters/alias\].*soft link"):
        stats = rechunk(rich_file, store, frames_per_chunk=8, verify=True)
    assert stats.verified
    assert stats.elements == ["particles/all", "particles/other", "observables",
                              "observables/atoms", "parameters",
                              "parameters/thermostat_group"]
    for group, zgroup in (("particles/all", None), ("particles/other", "particles/other"),
                          ("observables", "observables"),
                          ("observables/atoms", "observables/atoms"),
                          ("parameters", "parameters"),
                          ("parameters/thermostat_group", "parameters/thermostat_group")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", H5MDConformanceWarning)
            a = xr.open_dataset(rich_file, engine="h5md", group=group)
        b = xr.open_zarr(store, group=zgroup)
        assert set(a.variables) == set(b.variables)
        for name in a.variables:
            assert a[name].dims == b[name].dims
            assert a[name].attrs == b[name].attrs
            np.testing.assert_array_equal(a[name].values, b[name].values)
        a.close()
    b = xr.open_zarr(store, group="parameters")
    np.testing.assert_array_equal(b.ramp.values, [300.0, 310.0, 320.0])
    assert b.ramp.dims == ("time",)
    np.testing.assert_array_equal(b.step.values, [0, 5, 10])
    b = xr.open_zarr(store)
    assert b.position.encoding["chunks"] == (8, 30, 3)


@pytest.mark.parametrize("spec, kept", [("gzip:2", "GzipCodec"), ("zstd:7", "ZstdCodec"),
                                         ("lzf", None), (None, None)])
def test_a_copy_into_zarr_keeps_the_compression_by_default(tmp_path, adk_h5md, spec, kept):
    """``--compression`` defaults to "keep the input filters": a gzip (or zstd) file was
    copied into an uncompressed store; Zarr has no LZF, which gives none."""
    if spec == "zstd:7":
        pytest.importorskip("hdf5plugin")
    src = tmp_path / "in.h5md"
    rechunk(adk_h5md, src, frames_per_chunk=10, compression=spec)
    store = tmp_path / "out.zarr"
    stats = rechunk(src, store, verify=True)
    assert stats.verified and f"compression {spec or 'none'}".replace("lzf", "none") \
        in stats.layout
    with xr.open_zarr(store) as ds:
        codecs = [type(c).__name__ for c in ds.position.encoding.get("compressors") or ()]
        assert codecs == ([kept] if kept else []), codecs
        with xr.open_dataset(adk_h5md, engine="h5md") as a:
            np.testing.assert_array_equal(ds.position.values, a.position.values)
    # contiguous, as into HDF5: no compression kept
    stats = rechunk(src, tmp_path / "one.zarr", contiguous=True)
    assert "contiguous, compression none" in stats.layout


def test_a_zarr_store_as_input_is_said_as_such(tmp_path, adk_h5md, capsys):
    """``rechunk STORE.zarr OUT.h5md`` said the store "is a directory, not an H5MD file";
    it names the store and the way to write it as H5MD."""
    from h5mdx.cli import main

    store = tmp_path / "adk.zarr"
    rechunk(adk_h5md, store)
    (tmp_path / "adir").mkdir()
    for given, said in ((store, "is a Zarr store, not an H5MD file"),
                        (tmp_path / "adir", "is a directory, not an H5MD file")):
        assert main(["rechunk", str(given), str(tmp_path / "o.h5md")]) == 1
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err
    assert not (tmp_path / "o.h5md").exists()


def test_cli_rechunk(tmp_path, adk_h5md, capsys):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    _cli_layout.add_parser(sub)
    out = tmp_path / "cli.h5md"
    args = parser.parse_args(["rechunk", adk_h5md, str(out), "--frames-per-chunk", "49",
                              "--compression", "gzip:1", "--verify"])
    assert args.func(args) == 0
    assert "verified" in capsys.readouterr().out
    with h5py.File(out) as f:
        v = f["particles/trajectory/position/value"]
        assert v.chunks == (49, 3341, 3) and v.compression_opts == 1
    # a chunk size in MiB is said as the frames a chunk holds, as h5mdx info shows them
    # ("chunks of about 4 MiB of whole frames")
    for dst, chunks in ((tmp_path / "mib.h5md", 26), (tmp_path / "mib.zarr", 26)):
        args = parser.parse_args(["rechunk", adk_h5md, str(dst), "--chunk-mib", "1"])
        assert args.func(args) == 0
        said = capsys.readouterr().out
        assert f"chunks of {chunks} frames (0.994 MiB)" in said, said  # 26 x 40,092 bytes
    with h5py.File(tmp_path / "mib.h5md") as f:
        assert f["particles/trajectory/position/value"].chunks == (26, 3341, 3)


def test_an_output_named_as_another_format_is_refused(tmp_path, adk_h5md):
    """``rechunk IN out.xtc`` wrote an HDF5 file named as an XTC (MDAnalysis then fails on
    it as one); convert refuses such a name, and so does rechunk, before any work."""
    for name in ("out.xtc", "out.dcd"):
        with pytest.raises(ValueError, match=r"named as a \.[a-z]+ file: rechunk writes H5MD"):
            rechunk(adk_h5md, tmp_path / name, progress=False)
        assert not (tmp_path / name).exists()
    rechunk(adk_h5md, tmp_path / "out.h5", progress=False)  # HDF5's own names are taken


def test_a_damaged_chunk_names_the_file_the_element_and_the_frames(tmp_path):
    from h5mdx.errors import H5MDReadError
    from h5mdx.layout._atomic import partial_files
    from h5mdx.testing import write_h5md

    value = np.random.default_rng(0).normal(size=(40, 50, 3)).round(1)
    path = write_h5md(tmp_path / "damaged.h5md", particles={"g": {"position": dict(
        value=value, step=np.arange(40), chunks=(10, 50, 3), compression="gzip")}})
    with h5py.File(path, "r") as f:
        info = f["particles/g/position/value"].id.get_chunk_info(1)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(b"\xff" * min(info.size, 64))
    out = tmp_path / "out.h5md"
    with pytest.raises(H5MDReadError, match=r"damaged.h5md \[/particles/g/position/value\]: "
                       r"cannot read frames \d+-\d+"):
        rechunk(path, out, frames_per_chunk=10, buffer_mib=0.01)
    assert not out.exists() and not partial_files(out)


def test_object_references_point_into_the_copy(tmp_path, adk_h5md):
    """H5MD's particles_group (an object reference, on connectivity and observables) points
    to the same group of the copy: copied as it was, it held an address in the input and
    could not be opened. A null reference stays null."""
    src = tmp_path / "refs.h5md"
    import shutil

    shutil.copy(adk_h5md, src)
    with h5py.File(src, "r+") as f:
        group = f["particles/trajectory"]
        bonds = f.create_dataset("connectivity/bonds", data=np.array([[0, 1], [1, 2]]))
        bonds.attrs["particles_group"] = group.ref
        pairs = f.create_group("connectivity/pairs")
        pairs.attrs["particles_group"] = group.ref
        pairs.create_dataset("value", data=np.zeros((98, 1, 2), dtype=np.int64))
        pairs["step"] = f["particles/trajectory/position/step"]
        f.require_group("observables").attrs["several"] = np.array([group.ref, h5py.Reference()],
                                                     dtype=h5py.ref_dtype)
    out = tmp_path / "out.h5md"
    rechunk(src, out, frames_per_chunk=7, verify=True)
    with h5py.File(out, "r") as f:
        for where in ("connectivity/bonds", "connectivity/pairs"):
            assert f[f[where].attrs["particles_group"]].name == "/particles/trajectory"
            assert f[where].attrs["particles_group"] != h5py.Reference()
        several = f["observables"].attrs["several"]
        assert f[several[0]].name == "/particles/trajectory" and not several[1]
        np.testing.assert_array_equal(f["connectivity/bonds"], [[0, 1], [1, 2]])


def _small_frames(path, n=20_000, atoms=10, chunk=1):
    from h5mdx.format.writer import ElementSpec, H5MDWriter, Layout

    pos = np.zeros((n, atoms, 3), np.float32)
    pos[:, :, 0] = np.arange(n)[:, None] % 7
    with H5MDWriter(path, [ElementSpec("position", (atoms, 3), np.float32, unit="nm")],
                    n_frames=n, layout=Layout(frames_per_chunk=chunk)) as w:
        w.extend(np.arange(n), np.arange(n, dtype=float), position=pos)
    return pos


def test_a_read_spans_a_bounded_number_of_input_chunks(tmp_path, monkeypatch):
    """64 MiB of one-frame chunks of 10 atoms is 560,000 chunks in one read, for which
    HDF5 took 3.9 GB to copy a 183 MB file; a read now spans at most 4,096 input chunks.
   """
    from h5mdx.layout import rechunk as module

    src = tmp_path / "c1.h5md"
    pos = _small_frames(src)
    spans = []
    real = h5py.Dataset.read_direct

    def spy(self, dest, source_sel=None, dest_sel=None):
        if self.name.endswith("position/value"):
            spans.append(source_sel.stop - source_sel.start)
        return real(self, dest, source_sel, dest_sel)

    monkeypatch.setattr(h5py.Dataset, "read_direct", spy)
    rechunk(src, tmp_path / "out.h5md", frames_per_chunk=100)
    assert spans and max(spans) <= module._CHUNKS_PER_READ and sum(spans) == len(pos)
    with h5py.File(tmp_path / "out.h5md") as f:
        np.testing.assert_array_equal(f["particles/trajectory/position/value"][()], pos)


def test_a_compressed_copy_needs_room_for_what_it_writes(tmp_path, monkeypatch):
    """The room check of a compressed copy counted every block uncompressed: a 0.6 MiB
    gzip copy was refused with 50 MiB free (a copy of one block: the first is
    not counted). It counts them at the compression seen so
    far."""
    import collections

    from h5mdx.format import writer

    src = tmp_path / "in.h5md"
    _small_frames(src, n=200_000, chunk=1000)  # 24 MB, compresses to little
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(writer.shutil, "disk_usage",
                        lambda path: usage(2**40, 0, 20 * 2**20))  # 20 MiB free
    rechunk(src, tmp_path / "gz.h5md", compression="gzip", frames_per_chunk=1000)
    with h5py.File(tmp_path / "gz.h5md") as f:
        assert f["particles/trajectory/position/value"].compression == "gzip"
    with pytest.raises(OSError, match="No space left on device"):
        rechunk(src, tmp_path / "raw.h5md", frames_per_chunk=1000)  # 24 MB uncompressed


@pytest.mark.parametrize("code, name", [(143, "SIGTERM"), (129, "SIGHUP")])
def test_a_writer_stopped_by_a_signal_says_so(tmp_path, monkeypatch, capsys, code, name):
    """rechunk and convert stopped by SIGTERM (scancel) or SIGHUP exited 143/129 with no
    word: a batch job's log showed nothing."""
    from h5mdx.cli import main
    from h5mdx.layout import rechunk as module

    def stopped(*args, **kwargs):
        raise SystemExit(code)  # as h5mdx.layout._atomic stops a write

    monkeypatch.setattr(module, "rechunk", stopped)
    with pytest.raises(SystemExit) as stop:
        main(["rechunk", str(tmp_path / "in.h5md"), str(tmp_path / "out.h5md")])
    assert stop.value.code == code
    assert f"h5mdx: stopped by {name}" in capsys.readouterr().err


def test_a_copy_to_zarr_and_the_verification_show_progress(tmp_path, capsys):
    """rechunk to Zarr ran without a sign of life (12-29 s for 4 GB), and --verify read
    the copy back in silence after the bar had reached 100 %."""
    pytest.importorskip("zarr")
    src = tmp_path / "in.h5md"
    _small_frames(src, n=2000, chunk=100)
    rechunk(src, tmp_path / "out.zarr", progress=True, verify=True)
    out = capsys.readouterr().out
    assert "rechunk particles/trajectory -> out.zarr" in out and "Completed" in out
    assert "verify out.zarr" in out
    rechunk(src, tmp_path / "out.h5md", progress=True, verify=True)
    assert "verify out.h5md" in capsys.readouterr().out


def test_summary_counts_particles_without_a_position(tmp_path):
    """A velocity-only dump (LAMMPS) has its particles counted from the velocity, and a
    file of time-independent data only says so (found by an audit: '0 atoms', '()')."""
    from h5mdx.testing import write_h5md

    vel = write_h5md(tmp_path / "vel.h5", {"all": {
        "velocity": {"value": np.ones((3, 6, 3)), "step": np.arange(3)}}})
    stats = rechunk(vel, tmp_path / "vel.h5md")
    assert (stats.n_frames, stats.n_atoms) == (3, 6)
    assert "3 frames x 6 atoms (/particles/all/velocity)" in stats.summary()

    # observables sampled more often than the positions: the positions' frames (it said
    # '40 frames x 5 atoms' of a file of 4 frames of positions)
    both = write_h5md(tmp_path / "both.h5", {"all": {
        "position": {"value": np.ones((4, 5, 3)), "step": np.arange(4) * 10}}},
        observables={"energy": {"value": np.arange(40.0), "step": np.arange(40)}})
    stats = rechunk(both, tmp_path / "both.h5md")
    assert (stats.n_frames, stats.n_atoms) == (4, 5)
    assert "4 frames x 5 atoms" in stats.summary()

    # two groups, the first without positions: frames and atoms of the group whose
    # positions give the chunks' frame bytes (it counted the first group's: 3 x 6)
    two = write_h5md(tmp_path / "two.h5", {
        "ions": {"velocity": {"value": np.ones((3, 6, 3)), "step": np.arange(3)}},
        "protein": {"position": {"value": np.ones((500, 4000, 3), np.float32),
                                 "step": np.arange(500)}}})
    stats = rechunk(two, tmp_path / "two.h5md")
    assert (stats.n_frames, stats.n_atoms) == (500, 4000)
    assert "chunks of 87 frames (3.98 MiB)" in stats.summary()

    fixed = write_h5md(tmp_path / "fixed.h5", {"all": {"position": {"value": np.ones((6, 3))}}})
    stats = rechunk(fixed, tmp_path / "fixed.h5md")
    assert stats.n_atoms == 6
    assert "(no time series: the file's data copied as stored)" in stats.summary()
    with h5py.File(tmp_path / "fixed.h5md") as f:
        np.testing.assert_array_equal(f["particles/all/position"][()], np.ones((6, 3)))


def test_verify_takes_a_dataset_of_no_values(tmp_path, capsys):
    """A dataset of HDF5's null dataspace (``h5py.Empty``, e.g. a parameter set to
    nothing) is copied, and --verify compares it: it failed with a bare TypeError from
    inside the checksums ('NoneType' object is not iterable)."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        f["parameters"].create_dataset("unset", data=h5py.Empty("f8"))
    assert rechunk(src, tmp_path / "out.h5md", verify=True).verified
    with h5py.File(tmp_path / "out.h5md") as f:
        assert f["parameters/unset"].shape is None
    assert _cli_layout.run(argparse.Namespace(
        command="rechunk", input=str(src), output=str(tmp_path / "cli.h5md"),
        buffer_mib=64.0, progress=False, frames_per_chunk=None, chunk_mib=None,
        contiguous=False, compression=None, overwrite=False, verify=True, json=False)) == 0
    assert "verified" in capsys.readouterr().out


def test_a_copy_to_zarr_keeps_the_root_groups_h5md_does_not_define(tmp_path):
    """The groups of a root group H5MD leaves free (RMPCDMD's ``/fields``: an element of
    fixed-interval sampling and plain datasets), which the engine opens, are copied to the
    store as they open; they were left out, silently. One named as an
    array of the store's root (the first particles group's ``time``) is left out, with a
    warning naming it: it failed naming the hidden temporary store."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((6, 4, 3)), "step": np.arange(6)}}})
    with h5py.File(src, "a") as f:
        write_element(f.create_group("fields"), "rho", np.arange(48.0).reshape(6, 8),
                      step=10, time=0.5)
        f.create_dataset("fields/grid/x", data=np.arange(8.0))
        f.create_dataset("extra/y", data=np.arange(3))
        f.create_dataset("time/z", data=np.arange(2))
    with pytest.warns(UserWarning, match=r"\[/time\]: its name is an array"):
        stats = rechunk(src, tmp_path / "out.zarr", verify=True)
    assert stats.verified
    for group in ("fields", "fields/grid", "extra"):
        with xr.open_dataset(src, engine="h5md", group=group) as ds, \
                xr.open_dataset(tmp_path / "out.zarr", engine="zarr", group=group) as z:
            assert set(ds.variables) == set(z.variables)
            for name in ds.variables:
                np.testing.assert_array_equal(z[name].values, ds[name].values)


def test_verify_compares_variable_length_strings_by_their_text(tmp_path):
    """A variable-length string array (h5py's default for a list of str: a parameter, an
    observable of labels) failed ``--verify`` of every copy: its digest covered the
    addresses in memory of the strings read, not their text."""
    from h5mdx.format.checksums import dataset_checksums
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        f["parameters"].create_dataset("names", data=["Ar", "Kr"], dtype=h5py.string_dtype())
        label = f.create_group("observables/label")
        label.create_dataset("value", data=["a", "bb", "c"], dtype=h5py.string_dtype())
        label.create_dataset("step", data=np.arange(3))
    assert rechunk(src, tmp_path / "out.h5md", verify=True).verified
    with h5py.File(src, "a") as f:  # a string changed: the digest differs
        f["parameters/names"][1] = "Xe"
    paths = ["parameters/names", "observables/label/value"]
    before, after = dataset_checksums(tmp_path / "out.h5md", paths), dataset_checksums(src, paths)
    assert before["parameters/names"] != after["parameters/names"]
    assert before["observables/label/value"] == after["observables/label/value"]


def test_a_dataset_of_object_references_points_into_the_copy(tmp_path):
    """HDF5 copies a dataset of object references to another file as null references:
    rechunk left them so, silently, where it remade those of attributes (found by an
    audit). They point to the same paths in the copy, and --verify checks so."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        f["parameters"].create_dataset("group", data=f["particles/all"].ref,
                                       dtype=h5py.ref_dtype)
        f["parameters"].create_dataset("several", dtype=h5py.ref_dtype, data=np.array(
            [f["particles/all/position"].ref, h5py.Reference()], dtype=h5py.ref_dtype))
    assert rechunk(src, tmp_path / "out.h5md", verify=True).verified
    with h5py.File(tmp_path / "out.h5md") as f:
        assert f[f["parameters/group"][()]].name == "/particles/all"
        first, null = f["parameters/several"][()]
        assert f[first].name == "/particles/all/position" and not null


def test_a_reference_of_the_files_own_attributes_points_into_the_copy(tmp_path):
    """An object reference among the root group's attributes was copied as it was (an
    address in the input): the copy's could not be opened."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}})
    with h5py.File(src, "a") as f:
        f.attrs.create("main", f["particles/all"].ref, dtype=h5py.ref_dtype)
    rechunk(src, tmp_path / "out.h5md", verify=True)
    with h5py.File(tmp_path / "out.h5md") as f:
        assert f[f.attrs["main"]].name == "/particles/all"


def test_a_file_of_nothing_to_copy_into_zarr_says_so(tmp_path, capsys):
    """An H5MD file of its /h5md group alone (valid H5MD) copied to Zarr failed with "the
    writer produced no output at OUT.zarr": it says what is wrong with
    the input now, on the command line as one line."""
    from h5mdx.cli import main

    src = tmp_path / "bare.h5md"
    with h5py.File(src, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1], dtype=np.int32)
        f["h5md"].create_group("author").attrs["name"] = "me"
        f["h5md"].create_group("creator").attrs.update({"name": "me", "version": "0"})
    with pytest.raises(ValueError, match="bare.h5md: holds no particles"):
        rechunk(src, tmp_path / "out.zarr")
    assert main(["rechunk", str(src), str(tmp_path / "out.zarr")]) == 1
    assert "holds no particles, observables" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.h5md"]


def test_dimension_scales_stay_attached_in_the_copy(tmp_path):
    """HDF5's dimension scales (netCDF-4's dimensions: references in the attributes
    DIMENSION_LIST and REFERENCE_LIST) were copied as they were, addresses in the input:
    the copy's axes could not be read. They are attached again."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        x = f["parameters"].create_dataset("x", data=np.arange(4.0))
        x.make_scale("x")
        grid = f["parameters"].create_dataset("grid", data=np.ones((4, 2)))
        grid.dims[0].attach_scale(x)
        grid.dims[0].label = "x"
    rechunk(src, tmp_path / "out.h5md", verify=True)
    with h5py.File(tmp_path / "out.h5md") as f:
        grid = f["parameters/grid"]
        assert [s.name for s in grid.dims[0].values()] == ["/parameters/x"]
        assert grid.dims[0].label == "x" and not grid.dims[1].keys()
        assert f["parameters/x"].is_scale


def _szip_positions(path, value, chunks, opts=None):
    """Store ``value`` SZIP-compressed (``opts``: h5py's (method, pixels per block), its
    default where None) as the positions of particles group g of ``path``."""
    with h5py.File(path, "r+") as f:
        g = f["particles/g/position"]
        del g["value"]
        g.create_dataset("value", data=value, chunks=chunks, compression="szip",
                         **({} if opts is None else {"compression_opts": opts}))


def _nbit_int32(group, name, data, bits=12):
    """A chunked int32 dataset of ``bits``-bit precision with HDF5's N-bit filter."""
    tid = h5py.h5t.STD_I32LE.copy()
    tid.set_precision(bits)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((4, *data.shape[1:]))
    dcpl.set_filter(h5py.h5z.FILTER_NBIT, h5py.h5z.FLAG_OPTIONAL)  # H5Pset_nbit
    dsid = h5py.h5d.create(group.id, name.encode(), tid, h5py.h5s.create_simple(data.shape),
                           dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    return group[name]


def test_szip_is_kept_and_n_bit_said(tmp_path):
    """Keeping the input's filters kept SZIP nor N-bit, in silence: an SZIP-compressed
    element is SZIP-compressed in the copy (where h5py writes it), an N-bit packed one is
    copied at its full size with a warning naming the file and the element."""
    from h5mdx.testing import write_h5md

    if "szip" not in h5py.filters.encode:
        pytest.skip("this HDF5 cannot write SZIP")
    rng = np.random.default_rng(3)
    value = rng.normal(size=(16, 20, 3)).astype(np.float32)
    image = rng.integers(-500, 500, size=(16, 20, 3)).astype(np.int32)
    path = write_h5md(tmp_path / "packed.h5md", particles={"g": {
        "position": dict(value=value, step=np.arange(16), chunks=(4, 20, 3)),
        "image": dict(value=image, step=np.arange(16), chunks=(4, 20, 3))}})
    _szip_positions(path, value, (4, 20, 3), ("nn", 8))
    with h5py.File(path, "r+") as f:
        g = f["particles/g/image"]
        del g["value"]
        packed = _nbit_int32(g, "value", image)
        assert packed.id.get_create_plist().get_filter(0)[0] == h5py.h5z.FILTER_NBIT
    out = tmp_path / "out.h5md"
    with pytest.warns(UserWarning, match=r"packed.h5md \[/particles/g/image/value\]: N-bit "
                      r"packed; copied at the full 32 bits"):
        rechunk(path, out, frames_per_chunk=8)
    with h5py.File(out) as f:
        pos, img = f["particles/g/position/value"], f["particles/g/image/value"]
        assert pos.chunks == (8, 20, 3) and pos.compression == "szip"
        assert pos.compression_opts == ("nn", 8)
        np.testing.assert_array_equal(pos[()], value)
        np.testing.assert_array_equal(img[()], image)


def test_szip_an_hdf5_cannot_write_is_said(tmp_path, monkeypatch):
    """Where h5py cannot write SZIP, the element is copied uncompressed with a warning
    naming the file and the element (not in silence)."""
    from h5mdx.testing import write_h5md

    if "szip" not in h5py.filters.decode:
        pytest.skip("this HDF5 cannot read SZIP")
    value = np.random.default_rng(4).normal(size=(8, 10, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "szip.h5md", particles={"g": {
        "position": dict(value=value, step=np.arange(8), chunks=(4, 10, 3))}})
    if "szip" not in h5py.filters.encode:
        pytest.skip("this HDF5 cannot write the SZIP file to copy")
    _szip_positions(path, value, (4, 10, 3))
    monkeypatch.setattr(h5py.filters, "encode", tuple(
        c for c in h5py.filters.encode if c != "szip"))
    out = tmp_path / "out.h5md"
    with pytest.warns(UserWarning, match=r"szip.h5md \[/particles/g/position/value\]: "
                      "SZIP-compressed, which this HDF5 cannot write; copied uncompressed"):
        rechunk(path, out, frames_per_chunk=8)
    with h5py.File(out) as f:
        assert f["particles/g/position/value"].compression is None
        np.testing.assert_array_equal(f["particles/g/position/value"][()], value)


def test_szip_of_more_values_than_a_new_chunk_holds_is_dropped_and_said(tmp_path):
    """SZIP keeps blocks of its pixels per block (32 here), more values than a chunk of 2
    frames of 2 atoms holds (12): HDF5 refuses to create such a dataset, and the rechunk
    failed ('pixels per block greater than total number of elements in the chunk') where
    it copied before; it is copied uncompressed, with a warning, the values equal."""
    from h5mdx.testing import write_h5md

    if "szip" not in h5py.filters.encode:
        pytest.skip("this HDF5 cannot write SZIP")
    value = np.random.default_rng(6).normal(size=(8, 2, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "szip32.h5md", particles={"g": {
        "position": dict(value=value, step=np.arange(8), chunks=(8, 2, 3))}})
    _szip_positions(path, value, (8, 2, 3), ("nn", 32))
    out = tmp_path / "out.h5md"
    with pytest.warns(UserWarning, match=r"szip32.h5md \[/particles/g/position/value\]: "
                      r"SZIP-compressed in blocks of 32 values, more than a chunk of "
                      r"\(2, 2, 3\) holds; copied uncompressed"):
        rechunk(path, out, frames_per_chunk=2)
    with h5py.File(out) as f:
        pos = f["particles/g/position/value"]
        assert pos.chunks == (2, 2, 3) and pos.compression is None
        np.testing.assert_array_equal(pos[()], value)
    rechunk(path, tmp_path / "kept.h5md", frames_per_chunk=8)  # 48 values: SZIP kept
    with h5py.File(tmp_path / "kept.h5md") as f:
        assert f["particles/g/position/value"].compression_opts == ("nn", 32)


def test_region_references_point_into_the_copy(tmp_path):
    """Region references (an attribute's, a dataset's) select the same values of the copy:
    copied as they were, the attribute's read as garbage and the dataset's were null."""
    from h5mdx.testing import write_h5md

    value = np.random.default_rng(5).normal(size=(8, 10, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "regions.h5md", particles={"g": {
        "position": dict(value=value, step=np.arange(8), chunks=(4, 10, 3))}})
    with h5py.File(path, "r+") as f:
        v = f["particles/g/position/value"]
        f.create_group("parameters").attrs["frames"] = v.regionref[2:5, 1:3]
        d = f["parameters"].create_dataset("sel", (3,), dtype=h5py.regionref_dtype)
        d[0], d[1] = v.regionref[0:1], v.regionref[3:4, ::2]  # d[2]: a null one
    out = tmp_path / "out.h5md"
    rechunk(path, out, frames_per_chunk=8)
    with h5py.File(out) as f:
        v = f["particles/g/position/value"]
        assert v.chunks == (8, 10, 3)
        ref = f["parameters"].attrs["frames"]
        assert f[ref].name == v.name
        np.testing.assert_array_equal(v[ref].ravel(), value[2:5, 1:3].ravel())
        refs = f["parameters/sel"][()]
        np.testing.assert_array_equal(v[refs[0]].ravel(), value[0:1].ravel())
        np.testing.assert_array_equal(v[refs[1]].ravel(), value[3:4, ::2].ravel())
        assert not refs[2]


def test_the_summary_says_whose_chunks_it_gives(tmp_path):
    """A float32 position and a float64 velocity, rechunked to about 4 MiB of whole
    frames, get 34- and 17-frame chunks: the summary said only "chunks of 34 frames"
   ; it now says they are the positions'."""
    from h5mdx.testing import write_h5md

    x = np.arange(40 * 10000 * 3, dtype=np.float32).reshape(40, 10000, 3)
    src = write_h5md(tmp_path / "multi.h5", {"all": {
        "position": dict(value=x, step=1, time=1.0, unit="nm", chunks=(1, 10000, 3)),
        "velocity": dict(value=x.astype(np.float64), step=1, time=1.0, unit="nm ps-1",
                         chunks=(1, 10000, 3))}})
    stats = rechunk(src, tmp_path / "out.h5", compression="none", progress=False)
    assert stats.layout.startswith("chunks of 34 frames (3.89 MiB) for the positions, as "
                                   "many MiB of whole frames for each other element"), stats
    with h5py.File(tmp_path / "out.h5") as f:
        assert f["particles/all/position/value"].chunks == (34, 10000, 3)
        assert f["particles/all/velocity/value"].chunks == (17, 10000, 3)
        np.testing.assert_array_equal(f["particles/all/velocity/value"][17:19], x[17:19])
    alone = write_h5md(tmp_path / "one.h5", {"all": {"position": dict(
        value=x, step=1, time=1.0, unit="nm", chunks=(1, 10000, 3))}})
    assert "for the positions" not in rechunk(alone, tmp_path / "one.out.h5",
                                              progress=False).layout


def test_an_external_link_reaches_its_file_from_a_copy_in_another_directory(tmp_path):
    """HDF5 finds a relative external link's file next to the file that holds the link: a
    copy into another directory kept the name as it was, and its link dangled."""
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    with h5py.File(tmp_path / "in" / "forces.h5", "w") as f:
        f["data"] = np.arange(6.0)
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in" / "run.h5md", {"all": {
        "position": {"value": np.arange(24.0).reshape(2, 4, 3), "step": np.arange(2)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        f["parameters/forces"] = h5py.ExternalLink("forces.h5", "/data")
        f["parameters/elsewhere"] = h5py.ExternalLink("/no/such/file.h5", "/data")
    out = tmp_path / "out" / "copy.h5md"
    rechunk(src, out, frames_per_chunk=1)
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["parameters/forces"][()], np.arange(6.0))
        assert f["parameters"].get("forces", getlink=True).filename == "../in/forces.h5"
        assert f["parameters"].get("elsewhere", getlink=True).filename == "/no/such/file.h5"
    same_dir = tmp_path / "in" / "copy.h5md"  # next to the input: the name as it was
    rechunk(src, same_dir)
    with h5py.File(same_dir) as f:
        assert f["parameters"].get("forces", getlink=True).filename == "forces.h5"
        np.testing.assert_array_equal(f["parameters/forces"][()], np.arange(6.0))


@pytest.mark.parametrize("input_chunks", [None, (1, 1, 3)])
def test_an_element_of_no_particles_is_copied(tmp_path, input_chunks):
    """A particles group of no particles, ``value`` (frames, 0, 3), is copied with its
    frames' steps: the copy failed with h5py's bare 'All chunk dimensions must be
    positive'."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.arange(30.0).reshape(5, 2, 3), "step": np.arange(5)}}})
    with h5py.File(src, "a") as f:
        g = f.create_group("particles/none/position")
        g.create_dataset("value", shape=(5, 0, 3), dtype="f4", chunks=input_chunks,
                         maxshape=(None, None, 3) if input_chunks else None)
        g["step"] = np.arange(5) * 10
        g["value"].attrs["unit"] = "nm"
    out = tmp_path / "out.h5md"
    stats = rechunk(src, out, frames_per_chunk=2, verify=True)
    assert "/particles/none/position" in stats.elements
    with h5py.File(out) as f:
        assert f["particles/none/position/value"].shape == (5, 0, 3)
        assert f["particles/none/position/value"].dtype == np.float32
        assert f["particles/none/position/value"].attrs["unit"] == "nm"
        np.testing.assert_array_equal(f["particles/none/position/step"][()], np.arange(5) * 10)
        np.testing.assert_array_equal(f["particles/all/position/value"][()],
                                      np.arange(30.0).reshape(5, 2, 3))
        assert f["particles/all/position/value"].chunks == (2, 2, 3)


def test_a_virtual_dataset_reads_its_sources_from_a_copy_in_another_directory(tmp_path):
    """HDF5 looks for a virtual dataset's relative source files next to its file: copied as
    it was into another directory, the copy read the fill value (-1) in place of every
    mapped value, silently."""
    from h5mdx.testing import write_h5md

    (tmp_path / "in" / "parts").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    for i in range(2):
        with h5py.File(tmp_path / "in" / "parts" / f"p{i}.h5", "w") as f:
            f["x"] = np.arange(5.0) + 10 * i
    src = write_h5md(tmp_path / "in" / "run.h5md", {"all": {
        "position": {"value": np.arange(24.0).reshape(2, 4, 3), "step": np.arange(2)}}},
        parameters={"seed": 1})
    layout = h5py.VirtualLayout((8,), "f8")
    layout[0:5] = h5py.VirtualSource("parts/p0.h5", "x", shape=(5,))  # the whole source
    layout[5:8] = h5py.VirtualSource("parts/p1.h5", "x", shape=(5,))[1:4]  # a part of it
    with h5py.File(src, "a") as f:
        f["parameters"].create_virtual_dataset("joined", layout, fillvalue=-1)
        f["parameters/joined"].attrs["unit"] = "nm"
    want = np.array([0, 1, 2, 3, 4, 11, 12, 13], dtype=float)
    out = tmp_path / "out" / "copy.h5md"
    assert rechunk(src, out, verify=True).verified
    with h5py.File(out) as f:
        joined = f["parameters/joined"]
        np.testing.assert_array_equal(joined[()], want)
        assert joined.is_virtual and joined.fillvalue == -1 and joined.attrs["unit"] == "nm"
        assert [m.file_name for m in joined.virtual_sources()] == ["../in/parts/p0.h5",
                                                                   "../in/parts/p1.h5"]
    same_dir = tmp_path / "in" / "copy.h5md"
    rechunk(src, same_dir)
    with h5py.File(same_dir) as f:
        np.testing.assert_array_equal(f["parameters/joined"][()], want)


def test_an_attribute_of_no_value_does_not_stop_a_copy_into_zarr(tmp_path):
    """An attribute of HDF5's null dataspace (``h5py.Empty``) on an element reached the
    Dataset's attrs as h5py's Empty object: the copy into Zarr failed with xarray's bare
    'TypeError: Invalid attribute in Dataset.attrs.' and wrote nothing."""
    import zarr

    from h5mdx.testing import write_h5md

    positions = np.arange(24.0).reshape(2, 4, 3)
    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": positions, "step": np.arange(2), "unit": "nm"}}})
    with h5py.File(src, "a") as f:
        f["particles/all/position/value"].attrs["unset"] = h5py.Empty("f8")
        f["particles/all/position/value"].attrs["origin"] = "md"
        f["particles/all/position"].attrs["also_unset"] = h5py.Empty("i4")
    out = tmp_path / "out.zarr"
    assert rechunk(src, out, verify=True).verified
    position = zarr.open_group(out, mode="r")["position"]
    np.testing.assert_array_equal(position[...], positions)
    assert position.attrs["units"] == "nm" and position.attrs["origin"] == "md"
    assert "unset" not in position.attrs and "also_unset" not in position.attrs
    rechunk(src, tmp_path / "copy.h5md")  # HDF5 keeps it, as it is
    with h5py.File(tmp_path / "copy.h5md") as f:
        assert isinstance(f["particles/all/position/value"].attrs["unset"], h5py.Empty)


def test_the_summary_of_elements_chunked_alike_names_one_chunking(tmp_path):
    """MDAnalysis' cobrotoxin file (float32 positions, velocities and forces, box edges in
    time): every element got 3-frame chunks, and the summary said 'for the positions, as
    many MiB of whole frames for each other element', counting the box's edges."""
    out = tmp_path / "out.h5md"
    stats = rechunk(d.H5MD_xvf, out)
    assert stats.layout == "chunks of 3 frames (0.666 MiB), compression kept"
    with h5py.File(out) as f:
        for name in ("position", "velocity", "force"):
            assert f[f"particles/trajectory/{name}/value"].chunks == (3, 19385, 3)


def test_a_rounding_scale_offset_filter_is_not_applied_again_to_other_chunks(tmp_path):
    """HDF5's scale-offset filter rounds each chunk from its own minimum: kept for the new
    chunks, it rounded the already-rounded values again, changing them silently (an
    observable 0.66666667 stored at 3 decimals in chunks of 2 became 0.66633333)."""
    from h5mdx.testing import write_h5md

    rng = np.random.default_rng(5)
    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": rng.normal(size=(8, 5, 3)) * 10, "step": np.arange(8)}}})
    with h5py.File(src, "a") as f:
        for name, data, opts in (("energy", np.linspace(0.0, 1.0, 8), 3),
                                 ("count", np.arange(8) * 1000 + 3, 0)):  # lossless
            g = f.create_group(f"observables/{name}")
            g.create_dataset("value", data=data, chunks=(2,), scaleoffset=opts or True)
            g["step"] = np.arange(8)
        del f["particles/all/position/value"]
        f["particles/all/position"].create_dataset(
            "value", data=rng.normal(size=(8, 5, 3)) * 10, chunks=(1, 5, 3),
            maxshape=(None, 5, 3), scaleoffset=2)
        want = {p: f[p][()] for p in ("observables/energy/value", "observables/count/value",
                                      "particles/all/position/value")}
    out = tmp_path / "out.h5md"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rechunk(src, out, frames_per_chunk=4)
    with h5py.File(out) as f:
        for path, values in want.items():
            np.testing.assert_array_equal(f[path][()], values, err_msg=path)
        assert f["particles/all/position/value"].chunks == (4, 5, 3)
        assert f["particles/all/position/value"].scaleoffset is None
        assert f["observables/count/value"].scaleoffset == 0  # lossless: kept
    said = sorted(str(w.message).partition(" [")[2] for w in caught)
    assert said == [
        "/observables/energy/value]: stored with HDF5's scale-offset filter (3 decimals), "
        "which rounds each chunk from its own minimum: applied again to chunks of (8,), not "
        "(2,), it would change the values; copied without it (the values are the same)",
        "/particles/all/position/value]: stored with HDF5's scale-offset filter (2 "
        "decimals), which rounds each chunk from its own minimum: applied again to chunks "
        "of (4, 5, 3), not (1, 5, 3), it would change the values; copied without it (the "
        "values are the same)"]


def test_an_attribute_zarr_cannot_hold_is_left_out_of_a_zarr_copy_and_said(tmp_path):
    """A complex-valued attribute of an element failed the whole copy into Zarr with
    xarray's bare 'TypeError: Invalid attribute in Dataset.attrs.'; now it alone is left
    out, with a warning naming the file, the group and the variable."""
    import zarr

    from h5mdx.testing import write_h5md

    positions = np.arange(24.0).reshape(2, 4, 3)
    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": positions, "step": np.arange(2), "unit": "nm"}}})
    with h5py.File(src, "a") as f:
        f["particles/all/position/value"].attrs["phase"] = 1 + 2j
        f["particles/all/position/value"].attrs["origin"] = "md"
    out = tmp_path / "out.zarr"
    with pytest.warns(UserWarning, match=r"in\.h5md \[/particles/all, variable position\]: "
                      r"attribute 'phase' \(\(1\+2j\)\) is of a type Zarr's metadata cannot "
                      r"hold; left out of the Zarr store"):
        assert rechunk(src, out, verify=True).verified
    position = zarr.open_group(out, mode="r")["position"]
    np.testing.assert_array_equal(position[...], positions)
    assert position.attrs["units"] == "nm" and position.attrs["origin"] == "md"
    assert "phase" not in position.attrs


def test_the_progress_bar_counts_the_frames_of_every_element_it_reports(tmp_path, capsys):
    """The bar's total was the positions' frames, but the velocities' and forces' frames
    advanced it too: a copy of MDAnalysis' cobrotoxin file (3 frames of each) ended at
    '9/3 frames'."""
    rechunk(d.H5MD_xvf, tmp_path / "out.h5md", progress=True)
    out = capsys.readouterr().out
    assert "9/9 frames" in out and "/3 frames" not in out


def test_blosc_leaves_variable_length_strings_uncompressed_and_says_so(tmp_path):
    """hdf5plugin's Blosc filter divides by zero on variable-length data: a rechunk
    --compression blosc of a file with a string observable killed the process (SIGFPE,
    no message). Run in a child process: before, it died."""
    import subprocess
    import sys

    pytest.importorskip("hdf5plugin")
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.arange(24.0).reshape(2, 4, 3), "step": np.arange(2)}}})
    with h5py.File(src, "a") as f:
        g = f.create_group("observables/label")
        g.create_dataset("value", data=np.array(["a", "bb", "ccc"], dtype=object),
                         dtype=h5py.string_dtype())
        g["step"] = np.arange(3)
    out = tmp_path / "out.h5md"
    code = ("import warnings; from h5mdx.layout.rechunk import rechunk\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    rechunk({str(src)!r}, {str(out)!r}, compression='blosc', verify=True)\n"
            "print(*[str(x.message) for x in w], sep='\\n')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert ("[/observables/label/value]: variable-length data, which HDF5's Blosc filter "
            "cannot compress (it crashes); copied uncompressed") in done.stdout
    with h5py.File(out) as f:
        assert f["observables/label/value"].asstr()[()].tolist() == ["a", "bb", "ccc"]
        assert f["observables/label/value"].compression is None
        plist = f["particles/all/position/value"].id.get_create_plist()
        assert 32001 in [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]  # Blosc
        np.testing.assert_array_equal(f["particles/all/position/value"][()],
                                      np.arange(24.0).reshape(2, 4, 3))


def test_a_hard_link_to_the_root_stays_a_link_to_the_root(tmp_path):
    """A hard link back to the file's root (/parameters/root -> /) was copied as a new
    group holding a second walk of the file, under which the particles were rechunked;
    /particles became a link into it."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.arange(18.0).reshape(3, 2, 3), "step": np.arange(3)}}},
        parameters={"seed": 1})
    with h5py.File(src, "a") as f:
        f["parameters/root"] = f["/"]
    out = tmp_path / "out.h5md"
    stats = rechunk(src, out, verify=True)
    assert stats.elements == ["/particles/all/position"]
    with h5py.File(out) as f:
        assert f["parameters/root"] == f["/"]
        assert f["particles/all/position/value"].name == "/particles/all/position/value"
        np.testing.assert_array_equal(f["particles/all/position/value"][()],
                                      np.arange(18.0).reshape(3, 2, 3))


def test_metadata_of_no_value_is_not_read_as_text_nor_copied_into_zarr(tmp_path):
    """An /h5md/author 'email' or /h5md/creator 'version' attribute of no value (h5py's
    Empty) was read as the text "Empty(dtype=dtype('S1'))", served as the Dataset's
    author_email and written as such into a Zarr copy."""
    import zarr

    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"all": {
        "position": {"value": np.ones((3, 2, 3)), "step": np.arange(3)}}})
    with h5py.File(src, "a") as f:
        f["h5md/author"].attrs["email"] = h5py.Empty("S1")
        f["h5md/creator"].attrs["version"] = h5py.Empty("S1")
    out = tmp_path / "out.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # creator 'version' missing: H5MD requires one
        rechunk(src, out, verify=True)
    attrs = dict(zarr.open_group(out, mode="r").attrs)
    assert attrs["author_name"] == "h5mdx tests"
    assert "author_email" not in attrs and "creator_version" not in attrs
    assert not any("Empty" in str(v) for v in attrs.values())


def test_json_statistics_redirected_from_a_terminal_hold_no_progress_bar(tmp_path):
    """Run from a terminal (stderr a tty) with stdout redirected, 'h5mdx rechunk IN OUT
    --json > stats.json' drew its progress bar into the file, before the JSON: the file
    was no JSON ('rechunk -> out.h5md ━━━ 3/3 frames' on its first line)."""
    import json
    import os
    import pty
    import subprocess
    import sys

    if sys.platform == "win32":
        pytest.skip("no pseudo-terminal on Windows")
    main_fd, tty_fd = pty.openpty()
    try:
        with open(tmp_path / "stats.json", "w") as stats:
            done = subprocess.run(
                [sys.executable, "-m", "h5mdx", "rechunk", d.H5MD_xvf,
                 str(tmp_path / "out.h5md"), "--json"],
                stdout=stats, stderr=tty_fd, timeout=300, check=False)
    finally:
        os.close(tty_fd)
        os.close(main_fd)
    assert done.returncode == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["n_frames"] == 3 and stats["n_atoms"] == 19385


def _fixed_text(where, name, value, size, pad, cset, dataset=False):
    """A fixed-length string attribute (or dataset of two) of HDF5 padding ``pad``."""
    t = h5py.h5t.C_S1.copy()
    t.set_size(size)
    t.set_strpad(pad)
    t.set_cset(cset)
    if dataset:
        d = h5py.h5d.create(where.id, name.encode(), t, h5py.h5s.create_simple((2,)))
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([value, b"x"], f"S{size}"), mtype=t)
        return
    a = h5py.h5a.create(where.id, name.encode(), t, h5py.h5s.create(h5py.h5s.SCALAR))
    a.write(np.array(value, f"S{size}"), mtype=t)


def _order_and_text(path):
    """Names in the order HDF5 lists them, and (padding, cset, value) of the text."""
    with h5py.File(path) as f:
        pos = f["particles/trajectory/position/value"]
        g = f["parameters"]
        text = {k: (g.attrs.get_id(k).get_type().get_strpad(),
                    g.attrs.get_id(k).get_type().get_cset(), g.attrs[k])
                for k in ("nulltermed", "spaced", "padded")}
        text["ds"] = (g["spaced_ds"].id.get_type().get_strpad(), g["spaced_ds"][0])
        text["vlen"] = (f.attrs.get_id("ascii").get_type().get_cset(), f.attrs["ascii"])
        return (list(f), list(f.attrs), list(g), list(g.attrs), list(pos.attrs)), text


def test_a_copy_keeps_the_creation_order_and_the_padding_of_text(tmp_path):
    """rechunk listed a copy's groups and attributes in alphabetical order where the input
    tracked their creation order (track_order=True), and wrote its NULLTERM and SPACEPAD
    text attributes NULLPAD, an ASCII one UTF-8; now the copy keeps all of them."""
    src, dst = tmp_path / "in.h5md", tmp_path / "out.h5md"
    pos = np.arange(6 * 4 * 3, dtype=np.float32).reshape(6, 4, 3)
    with h5py.File(src, "w", track_order=True) as f:
        f.attrs["zeta"] = 1
        f.attrs.create("ascii", "plain", dtype=h5py.string_dtype("ascii"))
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = np.array([1, 1], np.int32)
        h5md.create_group("author").attrs["name"] = "me"
        h5md.create_group("creator").attrs.update({"name": "test", "version": "1"})
        traj = f.create_group("particles/trajectory")
        traj.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        el = traj.create_group("position")
        el.create_dataset("step", data=np.arange(6))
        el.create_dataset("time", data=np.arange(6.0))
        v = el.create_dataset("value", data=pos, chunks=(1, 4, 3), track_order=True)
        v.attrs["zz"], v.attrs["aa"] = 1, 2
        g = f.create_group("parameters", track_order=True)
        for k in ("zeta", "alpha", "mid"):
            g.attrs[k] = 1
            g.create_dataset(k, data=1)
        _fixed_text(g, "nulltermed", b"abc", 8, h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_ASCII)
        _fixed_text(g, "spaced", b"abc", 8, h5py.h5t.STR_SPACEPAD, h5py.h5t.CSET_UTF8)
        _fixed_text(g, "padded", b"abc", 8, h5py.h5t.STR_NULLPAD, h5py.h5t.CSET_UTF8)
        _fixed_text(g, "spaced_ds", b"ab", 4, h5py.h5t.STR_SPACEPAD, h5py.h5t.CSET_ASCII,
                    dataset=True)
    rechunk(src, dst, frames_per_chunk=3, progress=False)
    order, text = _order_and_text(dst)
    assert order == (["h5md", "particles", "parameters"],
                     ["zeta", "ascii"],
                     ["zeta", "alpha", "mid", "spaced_ds"],
                     ["zeta", "alpha", "mid", "nulltermed", "spaced", "padded"],
                     ["zz", "aa"])
    assert order == _order_and_text(src)[0]
    assert text == {"nulltermed": (h5py.h5t.STR_NULLTERM, h5py.h5t.CSET_ASCII, b"abc"),
                    "spaced": (h5py.h5t.STR_SPACEPAD, h5py.h5t.CSET_UTF8, b"abc"),
                    "padded": (h5py.h5t.STR_NULLPAD, h5py.h5t.CSET_UTF8, b"abc"),
                    "ds": (h5py.h5t.STR_SPACEPAD, b"ab"),
                    "vlen": (h5py.h5t.CSET_ASCII, "plain")}
    with h5py.File(dst) as f:
        assert f["particles/trajectory/position/value"].chunks == (3, 4, 3)
        np.testing.assert_array_equal(f["particles/trajectory/position/value"][()], pos)


@pytest.mark.parametrize("mode", [0o664, 0o600])
def test_a_file_replaced_with_overwrite_keeps_its_permissions(tmp_path, mode):
    """rechunk --overwrite (as convert and to_h5md) replaced a group-writable file with
    one of the umask's mode (0644): the group could no longer write it. Now the new
    file has the permission bits of the one it replaces."""
    import os
    import stat

    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.arange(24, dtype=np.float32).reshape(4, 2, 3), "step": np.arange(4)}}})
    out = tmp_path / "shared out.h5md"
    rechunk(src, out, frames_per_chunk=4, progress=False)
    os.chmod(out, mode)
    rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)
    assert stat.S_IMODE(out.stat().st_mode) == mode
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)


def test_a_file_another_process_writes_is_not_replaced(tmp_path):
    """--overwrite replaced an HDF5 file another process held open for writing: that
    process went on writing into the file no longer named, and its frames were lost
    without a word. Now the replacement is refused, naming the file, and it is kept."""
    import subprocess
    import sys

    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.zeros((4, 2, 3), np.float32), "step": np.arange(4)}}})
    out = tmp_path / "busy.h5md"
    rechunk(src, out, frames_per_chunk=4, progress=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, h5py; f = h5py.File(sys.argv[1], 'a'); "
         "print('open', flush=True); sys.stdin.read()", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(ValueError, match=r"busy\.h5md' is open for writing in another "
                                             r"process"):
            rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)
    finally:
        holder.communicate("")
    with h5py.File(out) as f:  # the file as it was
        assert f["particles/trajectory/position/value"].chunks == (4, 2, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy.h5md", "in.h5md"]
    rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)  # closed: replaced
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)


def test_a_copy_keeps_the_user_block_of_its_input(tmp_path):
    """A file with a user block (another program's header before HDF5's signature, as a
    MATLAB v7.3 file has) was copied without it: the copy began with the signature. Now
    the copy has a user block as large, holding the same bytes."""
    from h5mdx.testing import write_h5md

    plain = write_h5md(tmp_path / "plain.h5md", {"trajectory": {"position": {
        "value": np.arange(24, dtype=np.float32).reshape(4, 2, 3), "step": np.arange(4)}}})
    src, out = tmp_path / "with header.h5md", tmp_path / "out.h5md"
    with h5py.File(plain) as fin, h5py.File(src, "w", userblock_size=512) as f:
        for name in fin:
            fin.copy(fin[name], f, name=name)
        for k, v in fin.attrs.items():
            f.attrs[k] = v
    header = b"MYPROGRAM trajectory header v2\n".ljust(512, b"\0")
    with open(src, "r+b") as fh:
        fh.write(header)
    rechunk(src, out, frames_per_chunk=2, progress=False)
    assert out.read_bytes()[:512] == header
    with h5py.File(out) as f:
        assert f.userblock_size == 512
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)
        np.testing.assert_array_equal(f["particles/trajectory/position/value"][()],
                                      np.arange(24, dtype=np.float32).reshape(4, 2, 3))


@pytest.mark.parametrize("how", ["swmr", "no_lock"])
def test_a_file_a_swmr_writer_holds_is_not_replaced(tmp_path, how):
    """--overwrite refused a file another process held open for writing by HDF5's lock
    alone, but a SWMR writer (``swmr_mode=True``) releases that lock, and a writer with
    ``HDF5_USE_FILE_LOCKING=FALSE`` takes none: the file was replaced under them. Now
    the superblock's file-consistency flags they set are read too."""
    import subprocess
    import sys

    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.zeros((4, 2, 3), np.float32), "step": np.arange(4)}}})
    out = tmp_path / "live.h5md"
    with h5py.File(out, "w", libver="latest") as f:
        f.create_dataset("x", data=np.arange(3.0), chunks=True, maxshape=(None,))
    swmr = "f.swmr_mode = True; " if how == "swmr" else ""
    env = dict(os.environ, HDF5_USE_FILE_LOCKING="FALSE") if how == "no_lock" else None
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, h5py; f = h5py.File(sys.argv[1], 'a', "
         f"libver='latest'); {swmr}print('open', flush=True); sys.stdin.read()", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "open"
        what = "a SWMR writer" if how == "swmr" else "a writer"
        with pytest.raises(ValueError, match=rf"live\.h5md' is marked open for writing by "
                                             rf"{what} .*`h5clear -s .*live\.h5md`"):
            rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)
    finally:
        holder.communicate("")
    with h5py.File(out) as f:  # the file as it was
        np.testing.assert_array_equal(f["x"][()], np.arange(3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5md", "live.h5md"]
    rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)  # closed: replaced
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)


def test_overwrite_through_a_symbolic_link_replaces_its_file_and_keeps_the_link(tmp_path):
    """--overwrite onto a symbolic link replaced the link with a regular file: the file it
    pointed to (in another directory, shared by other links) stayed as it was. Now, as
    with ``cp``, the file the link leads to is replaced, with its mode, and the link
    stays; no temporary file is left in either directory."""
    import stat

    from h5mdx.layout._atomic import atomic_output
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.arange(24, dtype=np.float32).reshape(4, 2, 3), "step": np.arange(4)}}})
    (tmp_path / "data").mkdir()
    (tmp_path / "work").mkdir()
    real = tmp_path / "data" / "real.h5md"
    rechunk(src, real, frames_per_chunk=4, progress=False)
    os.chmod(real, 0o664)
    link = tmp_path / "work" / "link.h5md"
    link.symlink_to(os.path.relpath(real, link.parent))
    rechunk(src, link, frames_per_chunk=2, overwrite=True, progress=False)
    assert link.is_symlink() and os.path.samefile(link, real)
    with h5py.File(real) as f:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)
    assert stat.S_IMODE(real.stat().st_mode) == 0o664
    assert os.listdir(tmp_path / "data") == ["real.h5md"]
    assert os.listdir(tmp_path / "work") == ["link.h5md"]
    store = tmp_path / "data" / "store.zarr"  # a link to a store: the store replaced
    store.mkdir()
    (store / "zarr.json").write_text("{}")
    (tmp_path / "work" / "store.zarr").symlink_to(store)
    with atomic_output(tmp_path / "work" / "store.zarr", overwrite=True,
                       directory=True) as tmp:
        os.mkdir(tmp)
        with open(os.path.join(tmp, "zarr.json"), "w") as fh:
            fh.write('{"new": 1}')
    assert (tmp_path / "work" / "store.zarr").is_symlink()
    assert (store / "zarr.json").read_text() == '{"new": 1}'
    assert sorted(os.listdir(tmp_path / "data")) == ["real.h5md", "store.zarr"]
    loop = tmp_path / "work" / "loop.h5md"
    loop.symlink_to(loop)
    with pytest.raises(ValueError, match=r"loop\.h5md' is a symbolic link that leads nowhere"):
        rechunk(src, loop, overwrite=True, progress=False)


def test_compression_applies_to_every_dataset_not_only_the_time_series(tmp_path):
    """``rechunk --compression gzip`` compressed only the time series' values: step and
    time, fixed-in-time data (species), /parameters and connectivity kept the input's
    storage, uncompressed, and ``--compression none`` left their filters on. Now every
    dataset of rows gets the compression asked (in its own chunks, HDF5's guess for an
    unchunked one); scalars and small unchunked datasets stay as they are."""
    from h5mdx.testing import write_h5md

    n, atoms = 520, 600
    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {
        "position": {"value": np.zeros((n, atoms, 3), np.float32),
                     "step": np.arange(n) * 10, "time": np.arange(n) * 0.5},
        "species": {"value": np.arange(atoms, dtype=np.int64) % 3}}},
        parameters={"bonds": np.arange(6000, dtype=np.int64).reshape(3000, 2),
                    "small": np.arange(4.0), "temperature": 300.0})
    with h5py.File(src, "a") as f:
        f.create_dataset("parameters/chunked", data=np.arange(16.0), chunks=(4,),
                         compression="gzip")
    out, plain = tmp_path / "out.h5md", tmp_path / "plain.h5md"
    rechunk(src, out, compression="gzip:4", verify=True, buffer_mib=0.01, progress=False)
    position = "particles/trajectory/position/"
    with h5py.File(src) as fin, h5py.File(out) as f:
        for name in (position + "value", position + "step", position + "time",
                     "particles/trajectory/species", "parameters/bonds",
                     "parameters/chunked"):
            assert (f[name].compression, f[name].compression_opts) == ("gzip", 4), name
            assert f[name].shuffle, name
            np.testing.assert_array_equal(f[name][()], fin[name][()])
        assert f["parameters/chunked"].chunks == (4,)
        for name in ("parameters/small", "parameters/temperature"):  # kept as they were
            assert f[name].chunks is None and f[name].compression is None, name
            np.testing.assert_array_equal(f[name][()], fin[name][()])
    rechunk(out, plain, compression="none", progress=False)
    with h5py.File(plain) as f:
        names = []
        f.visititems(lambda name, obj: names.append(name)
                     if isinstance(obj, h5py.Dataset) and obj.compression else None)
        assert names == []
        np.testing.assert_array_equal(f["parameters/bonds"][()],
                                      np.arange(6000).reshape(3000, 2))


def _other_group():
    """A group this user may give a file other than its own (any for root), or None."""
    if not hasattr(os, "chown"):
        return None
    if os.geteuid() == 0:
        return 4242
    return next((g for g in os.getgroups() if g != os.getegid()), None)


def test_a_file_replaced_keeps_its_group(tmp_path):
    """A file shared in a project's group (chgrp proj, mode 0664) replaced with
    --overwrite, or a timing.csv saved again, came back in the user's own group, its
    mode kept: the project's members could no longer write it. Now the new file has
    the group of the one it replaces (where the user is in that group)."""
    import stat

    from h5mdx.testing import write_h5md
    from h5mdx.timing import records as rec

    gid = _other_group()
    if gid is None:
        pytest.skip("this user is in no group but its own")
    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.arange(24, dtype=np.float32).reshape(4, 2, 3), "step": np.arange(4)}}})
    out = tmp_path / "shared.h5md"
    rechunk(src, out, frames_per_chunk=4, progress=False)
    timing = rec.save(rec.to_frame([{
        "run_id": "r1", "backend": "threads", "n_workers": 1, "worker": "t0",
        "task_key": "k", "kind": "rmsd", "t_start": 1.0, "t_stop": 2.0}]),
        tmp_path / "timing.csv", {"run_id": "r1"})
    for path in (out, timing):
        os.chown(path, -1, gid)
        os.chmod(path, 0o664)
    rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)
    rec.save(rec.load(timing)[0], timing, {"run_id": "r2"})
    for path in (out, timing):
        assert path.stat().st_gid == gid, path
        assert stat.S_IMODE(path.stat().st_mode) == 0o664, path
    with h5py.File(out) as f:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)


def test_overwrite_of_a_file_with_other_hard_links_says_they_keep_the_old_one(tmp_path):
    """--overwrite of a file with other hard links (a copy made with cp -l, ln) replaced
    the name given without a word: the other names kept the earlier contents, where
    cp, writing in place, changes them all. Now a warning names the file and says so."""
    from h5mdx.testing import write_h5md

    src = write_h5md(tmp_path / "in.h5md", {"trajectory": {"position": {
        "value": np.zeros((4, 2, 3), np.float32), "step": np.arange(4)}}})
    out, other = tmp_path / "out.h5md", tmp_path / "backup.h5md"
    rechunk(src, out, frames_per_chunk=4, progress=False)
    os.link(out, other)
    with pytest.warns(UserWarning, match=r"out\.h5md' has 1 other hard link\(s\): the new "
                                         r"file replaces this name only"):
        rechunk(src, out, frames_per_chunk=2, overwrite=True, progress=False)
    with h5py.File(out) as f, h5py.File(other) as g:
        assert f["particles/trajectory/position/value"].chunks == (2, 2, 3)
        assert g["particles/trajectory/position/value"].chunks == (4, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rechunk(src, out, frames_per_chunk=1, overwrite=True, progress=False)  # one link
