"""The layout diagnosis: findings, cost estimates and the fix command."""

from __future__ import annotations

import json
import shlex

import h5py
import numpy as np
import pytest

from h5mdx.format.h5md import scan
from h5mdx.layout import diagnose, finding_dict, read_cost, recommended_frames, render_findings
from h5mdx.testing import write_element

N_FRAMES, N_ATOMS = 30, 3341


def _file(path, chunks, compression=None, opts=None, data=None, shuffle=False):
    data = np.zeros((N_FRAMES, N_ATOMS, 3), np.float32) if data is None else data
    with h5py.File(path, "w") as f:
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/trajectory")
        g.create_group("box").attrs.update({"dimension": 3, "boundary": ["none"] * 3})
        write_element(g, "position", data, step=np.arange(N_FRAMES), time=np.arange(N_FRAMES),
                      unit="Angstrom", chunks=chunks, compression=compression,
                      compression_opts=opts, shuffle=shuffle)
    return scan(path)


def test_cost_model_matches_measured_ratios():
    shape = (29988, N_ATOMS, 3)
    good = read_cost(shape, 4, (100, N_ATOMS, 3))
    # measured one-call reads: (100,n,3) 5.5 GB/s, (1,n,3) 2.2, (64,209,1) 0.5, gzip-1 0.21
    assert read_cost(shape, 4, (1, N_ATOMS, 3)) / good == pytest.approx(5.5 / 2.2, rel=0.15)
    assert read_cost(shape, 4, (64, 209, 1)) / good == pytest.approx(5.5 / 0.5, rel=0.15)
    assert read_cost(shape, 4, (32, 128, 3)) / good == pytest.approx(5.5 / 2.25, rel=0.15)
    assert read_cost(shape, 4, (100, N_ATOMS, 3), "gzip-unshuffled") / good == pytest.approx(
        5.5 / 0.21, rel=0.15)
    # gzip after the shuffle: 3.29x faster than without (layouts-shuffle.md: 2.192 s and
    # 0.666 s, on another machine; the ratio, not the speeds, carries over)
    assert read_cost(shape, 4, (100, N_ATOMS, 3), "gzip") / good == pytest.approx(
        5.5 / 0.21 / 3.29, rel=0.15)
    assert recommended_frames(N_ATOMS * 12, 29988) == 104


def test_split_frames(tmp_path):
    info = _file(tmp_path / "auto.h5md", (16, 209, 1))
    found = diagnose(info, min_bytes=0)
    split = next(f for f in found if f.code == "split-frames")
    assert split.severity == "problem"
    assert "each frame is spread over 48 chunks" in split.message
    assert "reading one frame reads 16 frames of data" in split.message
    assert split.cost > 5
    cmd = shlex.split(split.fix)
    assert cmd[:3] == ["h5mdx", "rechunk", str(tmp_path / "auto.h5md")]
    assert cmd[3] == str(tmp_path / "auto.rechunked.h5md")
    assert cmd[4:] == ["--frames-per-chunk", str(N_FRAMES)]


def test_small_chunks_and_good_layout(tmp_path):
    found = diagnose(_file(tmp_path / "one.h5md", (1, N_ATOMS, 3)), min_bytes=0)
    assert [f.code for f in found] == ["small-chunks"]
    assert "chunks of 39 KiB (1 frame each, 30 chunks)" in found[0].message
    assert "one task per frame" in found[0].message
    assert found[0].cost == pytest.approx(2.5, rel=0.2)
    good = diagnose(_file(tmp_path / "good.h5md", (N_FRAMES, N_ATOMS, 3)), min_bytes=0)
    assert [f.severity for f in good] == ["ok"]
    assert good[0].cost == pytest.approx(1.0)
    cont = diagnose(_file(tmp_path / "cont.h5md", None), min_bytes=0)
    assert [f.code for f in cont] == ["contiguous"]
    # small files are not worth a finding by default
    assert diagnose(scan(tmp_path / "one.h5md")) == []
    # a file's name does as well as its scan (the guide's call; an audit's AttributeError)
    assert [f.code for f in diagnose(tmp_path / "one.h5md", min_bytes=0)] == ["small-chunks"]


def test_compression(tmp_path):
    rng = np.random.default_rng(0)
    noisy = rng.normal(size=(N_FRAMES, N_ATOMS, 3)).astype(np.float32)
    found = diagnose(_file(tmp_path / "gz.h5md", (N_FRAMES, N_ATOMS, 3), "gzip", 9, noisy),
                     min_bytes=0)
    comp = next(f for f in found if f.code == "compression")
    assert comp.message.startswith("gzip level 9 compression saves")
    assert "store it uncompressed" in comp.message  # random floats hardly compress
    assert comp.fix.endswith("--compression none")
    lines = render_findings(found)
    assert any(line.startswith("[warning]") for line in lines)
    assert lines[-1] == f"fix: {comp.fix}"
    json.dumps([finding_dict(f) for f in found])
    zeros = diagnose(_file(tmp_path / "gz0.h5md", (N_FRAMES, N_ATOMS, 3), "gzip", 9),
                     min_bytes=0)
    comp = next(f for f in zeros if f.code == "compression")
    assert "saves 100%" in comp.message or "saves 99%" in comp.message
    assert comp.fix.endswith("--compression gzip")  # with the shuffle


def test_gzip_without_the_byte_shuffle_is_named(tmp_path, adk_positions):
    """Float coordinates deflated without HDF5's shuffle filter hardly compress and
    inflate slowly (what MDAnalysis' and other writers' plain gzip give): the finding
    says so, and that h5mdx's --compression adds it; with the shuffle it says nothing
    of it."""
    x = np.asarray(adk_positions, np.float32)[:N_FRAMES]
    for shuffle in (False, True):
        found = diagnose(_file(tmp_path / f"gz{shuffle}.h5md", (N_FRAMES, N_ATOMS, 3),
                               "gzip", 1, x, shuffle=shuffle), min_bytes=0)
        comp = next(f for f in found if f.code == "compression")
        said = "stored without HDF5's byte shuffle filter" in comp.message
        assert said is not shuffle, comp.message
    assert "(h5mdx's --compression gzip adds it)" in diagnose(
        _file(tmp_path / "plain.h5md", (N_FRAMES, N_ATOMS, 3), "gzip", 1, x),
        min_bytes=0)[-1].message


def test_gzip_without_the_shuffle_is_left_where_the_shuffle_would_grow_it(tmp_path):
    """Values of two decimals spread over 0..10 nm deflate better without the shuffle
    (gzip saved 52% without it, 37% with): the advice to rewrite with it grew the file
    from 11.0 to 14.5 MiB. A probe of the first chunk measures both,
    and the finding says so instead of giving the fix."""
    x = np.round(np.random.default_rng(0).random((N_FRAMES, N_ATOMS, 3)) * 10, 2
                 ).astype(np.float32)
    path = tmp_path / "rounded.h5md"
    found = diagnose(_file(path, (10, N_ATOMS, 3), "gzip", 4, x), min_bytes=0)
    comp = next(f for f in found if f.code == "compression")
    assert comp.fix is None and comp.severity == "info", comp
    assert "which would not make it smaller (gzip of its first 10 frames saves" in comp.message
    assert not any("--compression" in (f.fix or "") for f in found), found  # kept as is
    # what the probe says holds for the whole file: with the shuffle it is larger
    with h5py.File(path, "a") as f:
        f.create_dataset("shuffled", data=x, chunks=(10, N_ATOMS, 3), compression="gzip",
                         compression_opts=4, shuffle=True)
        plain = f["particles/trajectory/position/value"].id.get_storage_size()
        assert f["shuffled"].id.get_storage_size() > 1.2 * plain
    from h5mdx.format.deflate_probe import gzip_savings

    probe = gzip_savings(path, "/particles/trajectory/position/value", 4, 10)
    assert probe is not None and probe.frames == 10
    assert probe.plain == pytest.approx(1 - plain / x.nbytes, abs=0.01)


def test_the_fix_for_gzip_without_the_shuffle_is_not_flagged_again(tmp_path, adk_positions):
    """Coordinates of an XTC's precision (0.01 Å) deflated without the shuffle save 36%:
    the fix was lzf, which saves 6% of them, so the rechunked file was flagged again
    ("store it uncompressed"). The fix is now gzip with the shuffle, which saves more and
    reads faster; the file it writes is not flagged."""
    x = np.round(np.asarray(adk_positions, np.float32)[:N_FRAMES], 2)
    path = tmp_path / "xtc.h5md"
    found = diagnose(_file(path, (10, N_ATOMS, 3), "gzip", 1, x), min_bytes=0)
    comp = next(f for f in found if f.code == "compression")
    assert comp.severity == "warning" and comp.fix.endswith("--compression gzip"), comp
    assert "rewritten with the shuffle it reads about 3x faster" in comp.message
    from h5mdx.cli import main

    assert main([*shlex.split(comp.fix)[1:], "--no-progress"]) == 0
    done = next(f for f in diagnose(tmp_path / "xtc.rechunked.h5md", min_bytes=0)
                if f.code == "compression")
    assert done.severity == "info" and done.fix is None, done
    assert "stored without HDF5's byte shuffle" not in done.message
    saved = int(done.message.split("saves ")[1].split("%")[0])
    assert saved >= 30, done.message


def test_large_chunks_warn_only_where_filters_make_a_frame_decode_the_chunk(tmp_path):
    """HDF5 reads the frames asked for from an uncompressed chunk the cache cannot hold,
    so large uncompressed chunks are only worth a note; compressed ones decode whole."""
    def big_chunks(name, **kwargs):
        path = tmp_path / name
        with h5py.File(path, "w") as f:
            g = f.create_group("particles/trajectory")
            write_element(g, "position", np.zeros((40, 80_000, 3), np.float32),
                          step=np.arange(40), chunks=(40, 80_000, 3), **kwargs)
        return diagnose(scan(path), min_bytes=0)

    big = next(f for f in big_chunks("plain.h5md") if f.code == "large-chunks")
    assert big.severity == "info" and "frame-by-frame reading is not slowed" in big.message
    big = next(f for f in big_chunks("gz.h5md", compression="gzip", compression_opts=1)
               if f.code == "large-chunks")
    assert big.severity == "warning" and "decode a chunk per frame" in big.message
    assert "deflate" in big.message


def test_zstd_without_the_byte_shuffle_is_named(tmp_path, adk_positions):
    """The same for hdf5plugin's zstd (a plugin filter, known to h5py by its id 32015)."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    x = np.asarray(adk_positions, np.float32)[:N_FRAMES]
    zstd = hdf5plugin.Zstd(clevel=3)
    for shuffle in (False, True):
        found = diagnose(_file(tmp_path / f"zs{shuffle}.h5md", (N_FRAMES, N_ATOMS, 3),
                               zstd["compression"], zstd["compression_opts"], x,
                               shuffle=shuffle), min_bytes=0)
        comp = next(f for f in found if f.code == "compression")
        assert comp.message.startswith("zstd compression saves"), comp.message
        said = "stored without HDF5's byte shuffle filter" in comp.message
        assert said is not shuffle, comp.message


def test_the_chunk_cache_named_is_this_hdf5s(tmp_path, adk_positions, monkeypatch):
    """Frame-by-frame readers decode a chunk per frame only where it exceeds HDF5's chunk
    cache: 8 MiB since HDF5 2.0, not the 1 MiB the finding said."""
    from h5mdx.layout import diagnosis

    x = np.asarray(adk_positions, np.float32)[:N_FRAMES]  # chunks of 1.1 MiB
    info = _file(tmp_path / "gz.h5md", (N_FRAMES, N_ATOMS, 3), "gzip", 1, x, shuffle=True)
    for cache, said in ((8 * 2**20, False), (2**20, True)):
        monkeypatch.setattr(diagnosis, "_chunk_cache", lambda cache=cache: cache)
        comp = next(f for f in diagnose(info, min_bytes=0) if f.code == "compression")
        assert ("a whole 1.1 MiB chunk for every frame" in comp.message) is said, comp.message
        if said:
            assert "does not fit HDF5's chunk cache (1.0 MiB here)" in comp.message


def test_one_fix_for_elements_that_need_other_frames_per_chunk(tmp_path):
    """Float positions and double velocities, both split: each element's fix named its own
    --frames-per-chunk (4 and 2), two commands writing one output, either one undoing the
    other. One command now, with rechunk's default (about 4 MiB for each element), and the
    file it writes is good throughout."""
    n_frames, n_atoms = 4, 60_000
    path = tmp_path / "two.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/trajectory")
        for name, dtype in (("position", np.float32), ("velocity", np.float64)):
            write_element(g, name, np.zeros((n_frames, n_atoms, 3), dtype),
                          step=np.arange(n_frames), time=np.arange(n_frames),
                          chunks=(1, n_atoms // 2, 3))
    found = diagnose(path, min_bytes=0)
    assert {f.code for f in found} == {"split-frames", "small-chunks"}
    split = next(f for f in found if f.code == "split-frames")  # not 'reads 1 frames'
    assert "reading one frame looks up 2 chunks;" in split.message, split.message
    assert {f.fix for f in found} == {
        f"h5mdx rechunk {path} {tmp_path / 'two.rechunked.h5md'}"}
    assert render_findings(found)[-1] == f"fix: {found[0].fix}"
    from h5mdx.cli import main

    assert main([*shlex.split(found[0].fix)[1:], "--no-progress"]) == 0
    done = diagnose(tmp_path / "two.rechunked.h5md", min_bytes=0)
    assert [(f.element.rpartition("/")[2], f.severity) for f in done] == [
        ("position", "ok"), ("velocity", "ok")]
    assert "chunks of 4 whole frames" in done[0].message
    assert "chunks of 2 whole frames" in done[1].message


def test_frames_larger_than_a_chunk_split_into_good_chunks_are_not_flagged(tmp_path):
    """A 5.7 MiB frame (500,000 atoms) stored in two chunks of 2.9 MiB, one frame each:
    a frame reads only its own bytes (1.01x the read time of one-frame chunks), and was
    flagged with a rechunk; a half-frame chunk of many frames still is."""
    n_atoms = 500_000
    path = tmp_path / "big_frames.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/trajectory")
        write_element(g, "position", np.zeros((3, n_atoms, 3), np.float32),
                      step=np.arange(3), time=np.arange(3), chunks=(1, n_atoms // 2, 3))
    found = diagnose(path, min_bytes=0)
    assert [(f.severity, f.code) for f in found] == [("ok", "good")]
    assert found[0].cost == pytest.approx(1.0, abs=0.02)
    assert found[0].fix is None
    assert found[0].message.startswith("chunks of one frame in 2 parts (2.9 MiB)")
    split = diagnose(_file(tmp_path / "half.h5md", (N_FRAMES, N_ATOMS // 2 + 1, 3)),
                     min_bytes=0)
    assert "split-frames" in [f.code for f in split]


def test_small_chunks_are_costed_apart_from_the_compression_the_fix_drops(tmp_path):
    """Chunks of one frame, gzip after the shuffle on noisy coordinates (it saves little,
    so the fix stores them uncompressed): the small-chunks finding was a problem, 'about
    8x the read time of 30-frame chunks', when 30-frame gzip chunks read about as slowly;
    all but a few percent of that was the gzip's, said in its own finding."""
    noisy = np.random.default_rng(0).normal(size=(N_FRAMES, N_ATOMS, 3)).astype(np.float32)
    found = diagnose(_file(tmp_path / "gz1.h5md", (1, N_ATOMS, 3), "gzip", 1, noisy,
                           shuffle=True), min_bytes=0)
    small = next(f for f in found if f.code == "small-chunks")
    share = float(small.message.split("; about ")[1].split("x the read time")[0])
    assert share == pytest.approx(1.1, abs=0.15), small.message
    assert small.severity == "warning", small
    assert f"({small.cost:.1f}x that of the fix's layout, which changes the compression" \
        in small.message
    assert small.cost > 5  # the whole cost, against the fix's uncompressed chunks
    comp = next(f for f in found if f.code == "compression")
    assert "store it uncompressed" in comp.message and comp.fix == small.fix


def test_a_compressor_outside_the_cost_table_is_still_compression(tmp_path):
    """Bitshuffle with LZ4 (filter 32008, hdf5plugin's default) on noisy coordinates saves
    about 12%: the diagnosis knew only gzip, lzf, blosc and zstd and called it 'a good
    layout for reading'; it is now a compression finding, costed, and the fix drops it."""
    hdf5plugin = pytest.importorskip("hdf5plugin")
    noisy = np.round(np.random.default_rng(0).random((N_FRAMES, N_ATOMS, 3)) * 10, 2)
    filt = hdf5plugin.Bitshuffle()
    info = _file(tmp_path / "bshuf.h5md", (N_FRAMES, N_ATOMS, 3), filt.filter_id,
                 filt.filter_options, noisy.astype(np.float32))
    el = info.particles["trajectory"].elements["position"]
    saved = 1 - el.storage_size / el.nbytes
    assert 0.05 < saved < 0.2
    found = diagnose(info, min_bytes=0)
    assert [f.code for f in found] == ["compression"], found
    comp = found[0]
    assert comp.message.startswith(f"bitshuffle compression saves {saved:.0%} of the space")
    assert "store it uncompressed" in comp.message
    assert comp.fix.endswith("--compression none") and comp.cost > 2


def test_the_one_fix_does_not_decompress_an_element_whose_compression_pays(tmp_path):
    """Positions deflated after the shuffle for 34% beside velocities for 13%, both in
    one-frame chunks: the velocities' '--compression none' became the file's one fix, and
    rechunk wrote the positions uncompressed too. The fix now keeps the compression
    (rechunk keeps each element's filters) and the velocities' finding says why."""
    rng = np.random.default_rng(0)
    path = tmp_path / "mixed.h5md"
    with h5py.File(path, "w") as f:
        f.create_group("h5md").attrs["version"] = np.array([1, 1])
        g = f.create_group("particles/trajectory")
        for name, data in (("position", np.round(rng.random((N_FRAMES, N_ATOMS, 3)) * 10, 2)),
                           ("velocity", rng.normal(size=(N_FRAMES, N_ATOMS, 3)))):
            write_element(g, name, data.astype(np.float32), step=np.arange(N_FRAMES),
                          time=np.arange(N_FRAMES), chunks=(1, N_ATOMS, 3),
                          compression="gzip", shuffle=True)
    found = diagnose(path, min_bytes=0)
    fixes = {f.fix for f in found if f.fix}
    assert fixes == {f"h5mdx rechunk {path} {tmp_path / 'mixed.rechunked.h5md'} "
                     f"--frames-per-chunk {N_FRAMES}"}, found
    vel = next(f for f in found if f.code == "compression" and "velocity" in f.element)
    assert "store it uncompressed (not in the fix: rechunk's --compression applies to " \
           "every element, and /particles/trajectory/position saves its space)" in vel.message
    assert not any("that of the fix's layout" in f.message for f in found)
    from h5mdx.cli import main

    assert main([*shlex.split(fixes.pop())[1:], "--no-progress"]) == 0
    with h5py.File(tmp_path / "mixed.rechunked.h5md") as f:
        pos = f["particles/trajectory/position/value"]
        assert pos.chunks == (N_FRAMES, N_ATOMS, 3) and pos.compression == "gzip"
        assert pos.id.get_storage_size() < 0.8 * pos.nbytes


def test_compression_that_adds_bytes_saves_no_space(tmp_path):
    """Random bits deflated come out a few bytes larger: the finding read 'gzip level 9
    compression saves -0% of the space'."""
    bits = np.random.default_rng(0).integers(0, 2**31, size=(N_FRAMES, N_ATOMS, 3),
                                             dtype=np.uint32).view(np.float32)
    info = _file(tmp_path / "bits.h5md", (N_FRAMES, N_ATOMS, 3), "gzip", 9, bits)
    el = info.particles["trajectory"].elements["position"]
    assert el.storage_size >= el.nbytes
    comp = next(f for f in diagnose(info, min_bytes=0) if f.code == "compression")
    assert comp.message.startswith("gzip level 9 compression saves no space ("), comp
    assert comp.fix.endswith("--compression none")
