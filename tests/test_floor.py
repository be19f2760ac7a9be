"""The read floor (h5mdx.floor): N processes reading a trajectory's positions with plain
h5py, and raw reads of the same bytes, on the example's adk trajectory."""

from __future__ import annotations

import itertools

import h5py
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # reader processes started for each test

pytest.importorskip("MDAnalysisTests")

from h5mdx.examples import build_adk_trajectory  # noqa: E402
from h5mdx.floor import (  # noqa: E402
    _SLAB,
    POSITION,
    _byte_spans,
    _read_slab,
    _read_spans,
    floor_reader,
    floor_slabs,
    frame_slabs,
    read_floor,
)


def test_read_floor_and_slabs(tmp_path):
    assert frame_slabs(1000, 100, 2) == [(0, 500), (500, 1000)]
    assert frame_slabs(250, 100, 2) == [(0, 200), (200, 250)]
    assert frame_slabs(50, 100, 4) == [(0, 50)]
    path = build_adk_trajectory(tmp_path / "adk.h5md", 200, progress=False)
    nbytes = 200 * 3341 * 3 * 4
    for workers in (1, 2):
        floor = read_floor(path, workers=workers, repeats=1)
        assert floor["bytes"] == nbytes and floor["frames"] == 200
        assert floor["gb_per_s"] == pytest.approx(nbytes / floor["seconds"] / 1e9)


@pytest.mark.parametrize("chunks", [(100, 3341, 3), None], ids=["c100", "contig"])
def test_floor_gives_every_process_a_slab_of_its_own(tmp_path, chunks):
    """Every layout splits among the floor's processes (a contiguous one did not)."""
    src = build_adk_trajectory(tmp_path / "adk.h5md", 1000, progress=False)
    path = tmp_path / "copy.h5md"
    with h5py.File(src, "r") as f, h5py.File(path, "w") as g:
        g.create_dataset(POSITION, data=f[POSITION][:], chunks=chunks)
    for workers in (1, 2, 4):
        slabs = floor_slabs(str(path), workers)
        assert len(slabs) == workers
        assert slabs[0][0] == 0 and slabs[-1][1] == 1000
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(slabs))
        if chunks:
            assert all(a % 100 == 0 for a, _ in slabs)


def test_floor_reads_the_file_in_whole_chunks_into_one_buffer(tmp_path):
    path = build_adk_trajectory(tmp_path / "adk.h5md", 250, progress=False)
    with h5py.File(path, "r") as f:
        frames = f[POSITION][:]
    _SLAB.clear()
    assert _read_slab(str(path), 0, 250) == frames.nbytes
    buf = _SLAB["buffer"]
    assert buf.shape == (100, 3341, 3)  # one chunk of 100 frames (~4 MiB) at a time
    np.testing.assert_array_equal(buf[:50], frames[200:250])  # the last piece it read
    assert _read_slab(str(path), 40, 140) == 100 * 3341 * 3 * 4
    assert _SLAB["buffer"] is buf  # the same buffer, not a new array per read
    np.testing.assert_array_equal(buf, frames[40:140])
    # kept open, the readers time one read per call, the same bytes every time
    with floor_reader(path, workers=2) as read:
        timings = [read() for _ in range(3)] + [read(raw=True) for _ in range(2)]
    assert all(sec > 0 and nbytes == frames.nbytes for sec, nbytes in timings)


@pytest.mark.parametrize("chunks", [(100, 3341, 3), None], ids=["c100", "contig"])
def test_raw_reads_cover_the_positions_bytes(tmp_path, chunks):
    """The raw reads (os.preadv, no HDF5) of each slab are the bytes of its frames: the
    whole dataset once, every layout."""
    src = build_adk_trajectory(tmp_path / "adk.h5md", 250, progress=False)
    path = tmp_path / "copy.h5md"
    with h5py.File(src, "r") as f, h5py.File(path, "w") as g:
        frames = f[POSITION][:]
        g.create_dataset(POSITION, data=frames, chunks=chunks)
    slabs = floor_slabs(str(path), 2)
    spans = _byte_spans(str(path), slabs)
    raw = b""
    with open(path, "rb") as fh:
        for slab in spans:
            for offset, n in slab:
                fh.seek(offset)
                raw += fh.read(n)
    assert raw == frames.tobytes()
    assert sum(_read_spans(str(path), slab) for slab in spans) == frames.nbytes


def test_the_floor_counts_the_processes_that_read(tmp_path):
    """98 frames are one chunk: one process reads it, whatever the workers asked for (the
    floor said '3 h5py reader(s)' for what one had read)."""
    path = build_adk_trajectory(tmp_path / "adk.h5md", 98, progress=False)
    assert floor_slabs(path, 3) == [(0, 98)]
    floor = read_floor(path, workers=3, repeats=1)
    assert floor["workers"] == 1 and floor["frames"] == 98


def test_the_floor_of_no_workers_asked_is_one_process_s(tmp_path):
    """floor_reader starts one process where asked for none (workers=0), and the floor
    said so; since the floor counts the slabs, read_floor(workers=0) raised
    ZeroDivisionError from floor_slabs."""
    path = build_adk_trajectory(tmp_path / "adk.h5md", 98, progress=False)
    assert floor_slabs(path, 0) == [(0, 98)]
    floor = read_floor(path, workers=0, repeats=1)
    assert floor["workers"] == 1 and floor["frames"] == 98
    assert floor["bytes"] == 98 * 3341 * 3 * 4


def test_raw_reads_read_every_byte_they_count(tmp_path, monkeypatch):
    """One os.preadv reads what it can (nothing past the end of the file, at most 2 GiB on
    Linux): _read_spans counted the bytes it was asked for as read, the bytes of a
    truncated file too, and took a buffer of a contiguous slab's size. Now it
    reads each span to its end in pieces of _RAW_PIECE, and says where the file ends."""
    import h5mdx.floor as floor

    src = build_adk_trajectory(tmp_path / "adk.h5md", 250, progress=False)
    path = tmp_path / "contig.h5md"
    with h5py.File(src, "r") as f, h5py.File(path, "w") as g:
        frames = f[POSITION][:]
        g.create_dataset(POSITION, data=frames, chunks=None)
    (span,), = _byte_spans(str(path), [(0, 250)])
    monkeypatch.setattr(floor, "_RAW_PIECE", 2**20, raising=False)
    _SLAB.clear()
    assert _read_spans(str(path), [span]) == frames.nbytes
    assert _SLAB["raw"].size == 2**20  # pieces of 1 MiB, the last of the positions
    tail = frames.nbytes % 2**20 or 2**20
    np.testing.assert_array_equal(_SLAB["raw"][:tail],
                                  np.frombuffer(frames.tobytes()[-tail:], dtype=np.uint8))
    with open(path, "r+b") as fh:  # the file cut in the middle of the positions
        fh.truncate(span[0] + span[1] // 2)
    with pytest.raises(OSError, match=r"contig\.h5md: .* bytes of the positions at byte "
                                      r"\d+ lie past the end of the file"):
        _read_spans(str(path), [span])


def test_a_file_without_the_floors_positions_is_said_with_its_path(tmp_path):
    """Positions in /particles/all: read_floor raised h5py's bare KeyError ('Unable to
    open object (component not found)') from deep inside h5o."""
    from h5mdx.errors import H5MDFormatError
    from h5mdx.testing import write_h5md

    pos = np.zeros((4, 5, 3), dtype=np.float32)
    path = str(write_h5md(tmp_path / "all.h5md", {"all": {"position": {
        "value": pos, "step": np.arange(4)}}}))
    with pytest.raises(H5MDFormatError, match=r"all\.h5md \[/particles/trajectory/position/"
                                              r"value\]: the read floor reads the positions "
                                              r"of /particles/trajectory"):
        read_floor(path, workers=1, repeats=1)
