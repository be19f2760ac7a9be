"""The MPI paths: chunk-aligned decomposition, slab reads, mpirun runs of mpi-rmsd and dask-mpi.

The mpirun tests really run ``mpirun`` with 1, 2 and 4 ranks (oversubscribed on
small machines). They skip only when MPI (mpirun, mpi4py, a parallel h5py) is
absent and ``H5MDX_REQUIRE_MPI`` is unset; CI sets it, so there they fail instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from h5mdx._optional import has_module
from h5mdx.mpi.decompose import Block, atom_runs, chunk_aligned_blocks
from h5mdx.mpi.io import SlabReader, position_source

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
SELECT = "name CA"

# ----------------------------------------------------------------------------- MPI harness

from infra import mpi_env, require_mpi, run_mpi  # noqa: E402  (tests/ is on sys.path)


def mpirun(n: int, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``n`` ranks (bounded; the process group is killed on timeout)."""
    return run_mpi(n, argv, timeout=timeout, env={**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE"})


def h5mdx_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "h5mdx", *args]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def adk_contiguous(tmp_path_factory, adk_universe, adk_positions):
    """adk with contiguous (unchunked) positions, written with plain h5py."""
    from h5mdx.testing import write_h5md

    path = tmp_path_factory.mktemp("adk") / "adk_contiguous.h5md"
    n = len(adk_positions)
    return write_h5md(path, {"trajectory": {"position": {
        "value": adk_positions, "step": np.arange(n), "time": np.arange(n) * 1.0,
        "unit": "Angstrom", "chunks": None}}})


@pytest.fixture(scope="session")
def adk_chunk64(tmp_path_factory, adk_positions):
    """adk with (64, n_atoms, 3) chunks: two chunks, so 4 ranks leave two idle."""
    from h5mdx.testing import write_h5md

    path = tmp_path_factory.mktemp("adk") / "adk_chunk64.h5md"
    n = len(adk_positions)
    return write_h5md(path, {"trajectory": {"position": {
        "value": adk_positions, "step": np.arange(n), "time": np.arange(n) * 1.0,
        "unit": "Angstrom", "chunks": (64, adk_positions.shape[1], 3)}}})


@pytest.fixture(scope="session")
def layouts(adk_h5md, adk_h5md_blocked, adk_contiguous, adk_chunk64):
    return {"chunk1": adk_h5md, "chunk10": adk_h5md_blocked,
            "contiguous": adk_contiguous, "chunk64": adk_chunk64}


@pytest.fixture(scope="session")
def mda_rmsd(adk_universe):
    """MDAnalysis' RMSD of the C-alpha atoms, keyed by (reference frame, weights)."""
    from MDAnalysis.analysis.rms import RMSD

    cache: dict = {}

    def get(ref_frame: int = 0, weights: str | None = None) -> np.ndarray:
        key = (ref_frame, weights)
        if key not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = RMSD(adk_universe, select=SELECT, ref_frame=ref_frame,
                         weights=weights).run()
            cache[key] = r.results.rmsd[:, 2].copy()
        return cache[key]

    return get


# ----------------------------------------------------------------------------- decomposition


@pytest.mark.parametrize(
    ("n_frames", "n_ranks", "chunk"),
    [(98, 1, 1), (98, 4, 10), (98, 4, None), (98, 3, 64), (5, 8, 1), (0, 3, 10),
     (29988, 7, 100), (1000, 16, 1)],
)
def test_blocks_cover_balanced_and_chunk_aligned(n_frames, n_ranks, chunk):
    blocks = chunk_aligned_blocks(n_frames, n_ranks, chunk)
    assert [b.rank for b in blocks] == list(range(n_ranks))
    assert blocks[0].start == 0 and blocks[-1].stop == n_frames
    for a, b in zip(blocks[:-1], blocks[1:], strict=True):
        assert a.stop == b.start
    c = chunk or 1
    for b in blocks:
        assert b.start % c == 0 or b.start == n_frames
    n_chunks = [-(-b.n_frames // c) for b in blocks]
    assert max(n_chunks) - min(n_chunks) <= 1
    assert sum(b.n_frames for b in blocks) == n_frames


def test_blocks_examples_and_subrange():
    assert [(b.start, b.stop) for b in chunk_aligned_blocks(98, 4, 10)] == [
        (0, 30), (30, 60), (60, 80), (80, 98)]
    # a sub-range is cut on the file's chunk grid, not the sub-range's
    assert [(b.start, b.stop) for b in chunk_aligned_blocks(98, 2, 10, start=15, stop=55)] == [
        (15, 40), (40, 55)]
    assert chunk_aligned_blocks(98, 3, 64)[2] == Block(rank=2, start=98, stop=98)


@pytest.mark.parametrize("bad", [dict(n_ranks=0), dict(chunk_frames=0), dict(start=50, stop=10),
                                 dict(stop=200)])
def test_blocks_reject_bad_arguments(bad):
    kwargs = dict(n_frames=98, n_ranks=2, chunk_frames=10) | bad
    with pytest.raises(ValueError):
        chunk_aligned_blocks(**kwargs)


def test_atom_runs():
    assert atom_runs(np.array([0, 1, 2, 5, 7, 8])) == [(0, 3), (5, 6), (7, 9)]
    assert atom_runs(np.array([], dtype=int)) == []
    with pytest.raises(ValueError, match="strictly increasing"):
        atom_runs(np.array([3, 1]))


# ----------------------------------------------------------------------------- slab reads (serial)


def test_slab_reader_reads_selection_exactly(adk_h5md_blocked, adk_universe):
    ca = np.sort(adk_universe.select_atoms(SELECT).indices)
    with h5py.File(adk_h5md_blocked, "r") as f:
        src = position_source(f)
        assert (src.n_frames, src.n_atoms, src.chunk_frames) == (98, 3341, 10)
        dset = f[src.element.value_path]
        sel = SlabReader(dset, ca)
        np.testing.assert_array_equal(sel.read(7, 23), dset[7:23][:, ca])
        full = SlabReader(dset)
        np.testing.assert_array_equal(full.read(95, 98), dset[95:98])
        sel.read_none()  # an empty selection reads nothing and does not fail
        assert sel.bytes_read == 16 * len(ca) * 3 * 4
        with pytest.raises(ValueError, match="read_none"):
            sel.read(5, 5)


def test_a_slab_that_cannot_be_read_names_the_file_and_frames(tmp_path):
    """A corrupt gzip chunk on the MPI-IO path said only ``OSError: Can't read data
    (inflate() failed)``; it names the file, the dataset and the frames, as the other
    paths do."""
    from h5mdx.errors import H5MDReadError

    path = tmp_path / "corrupt.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.random.default_rng(0).random((50, 7, 3)),
                         chunks=(10, 7, 3), compression="gzip")
        info = f["x"].id.get_chunk_info_by_coord((40, 0, 0))
    with open(path, "r+b") as fh:  # garble the chunk of frames 40-49
        fh.seek(info.byte_offset + 8)
        fh.write(b"\xff" * 32)
    with h5py.File(path, "r") as f:
        reader = SlabReader(f["x"])
        np.testing.assert_array_equal(reader.read(0, 10), f["x"][0:10])
        with pytest.raises(H5MDReadError, match=r"corrupt\.h5 \[/x\]: reading frames "
                           r"35-49 failed"):
            reader.read(35, 50)


def test_position_source_errors(tmp_path):
    from h5mdx.errors import H5MDFormatError
    from h5mdx.testing import write_h5md

    pos = {"value": np.zeros((2, 3, 3), np.float32), "step": np.arange(2)}
    path = write_h5md(tmp_path / "two.h5md", {"a": {"position": pos}, "b": {"position": pos}})
    with h5py.File(path) as f:
        with pytest.raises(H5MDFormatError, match="--group"):
            position_source(f)
        assert position_source(f, "particles/b").group == "b"
        with pytest.raises(H5MDFormatError, match="groups with positions"):
            position_source(f, "c")
    # one static frame: it has positions, but no trajectory (it said 'no particles group
    # has positions')
    path = write_h5md(tmp_path / "static.h5md", {"a": {"position": {"value": np.zeros((3, 3))}}})
    with h5py.File(path) as f, pytest.raises(H5MDFormatError) as err:
        position_source(f)
    assert err.value.problem == ("no particles group has time-dependent positions "
                                 "(/particles/a/position: one time-independent frame, no "
                                 "trajectory to compare)")


# ----------------------------------------------------------------------------- errors without MPI


def test_cli_module_does_not_import_mpi4py():
    code = ("import sys, h5mdx.cli.mpi, h5mdx.mpi.decompose, h5mdx.mpi.io;"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_serial_h5py_error_names_the_fix(monkeypatch, adk_h5md):
    import h5mdx.mpi
    from h5mdx.cli import main
    from h5mdx.errors import MissingDependencyError

    monkeypatch.setattr(h5mdx.mpi, "has_parallel_h5py", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"scripts/setup.sh --mpi"):
        h5mdx.mpi.require_parallel_h5py()
    assert main(["mpi-rmsd", adk_h5md]) == 1


def test_a_serial_h5py_is_said_by_the_first_rank_alone(monkeypatch, adk_h5md, capsys):
    """Without a parallel h5py every rank of the job printed the same line (64 ranks, 64
    lines). The first rank says it, as for the usage errors, and exits with 1, the job's
    status; the others end with 0 (one that failed first had mpirun kill the first rank
    before it printed)."""
    import h5mdx.mpi
    from h5mdx.cli import main

    monkeypatch.setattr(h5mdx.mpi, "has_parallel_h5py", lambda: False)
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_RANK", "1")
    assert main(["mpi-rmsd", adk_h5md]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PMI_RANK", "0")
    assert main(["mpi-rmsd", adk_h5md]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("h5mdx mpi-rmsd: error: ") \
        and "is a serial build" in err[0]


def test_locking_failure_gives_advice(monkeypatch, tmp_path):
    pytest.importorskip("mpi4py")
    import h5mdx.mpi.io as mio

    def locked(*args, **kwargs):
        raise OSError("Unable to open file (unable to lock file, errno = 11)")

    monkeypatch.setattr(mio, "require_parallel_h5py", lambda: None)
    monkeypatch.setattr(mio, "open_h5md", locked)
    monkeypatch.delenv("HDF5_USE_FILE_LOCKING", raising=False)
    one_rank = SimpleNamespace(rank=0, bcast=lambda value, root=0: value,
                               allgather=lambda value: [value])
    with pytest.raises(OSError, match="HDF5_USE_FILE_LOCKING=FALSE"):
        mio.open_parallel(tmp_path / "x.h5md", comm=one_rank)


@pytest.mark.parametrize(("chunk", "n_atoms", "step"), [
    (100, 3341, 100),  # one 4 MB chunk
    (1, 3341, 104),  # 104 one-frame chunks: 4.2 MB
    (10, 3341, 100),
    (None, 214, 1633),  # contiguous, C-alpha only (--selected-only)
    (400, 3341, 400),  # a chunk over 4 MiB: one chunk at a time
])
def test_read_pieces_are_whole_chunks_of_about_4_mib(chunk, n_atoms, step):
    from h5mdx.mpi.rmsd import _pieces, _step_frames

    element = type("E", (), {"shape": (5000, n_atoms, 3), "chunks": None})()
    source = type("S", (), {"element": element, "chunk_frames": chunk})()
    assert _step_frames(source, n_atoms, 4) == step
    blocks = chunk_aligned_blocks(5000, 3, chunk)
    for block in blocks:
        pieces = _pieces(block, "step", step)
        assert pieces[0][0] == block.start and pieces[-1][1] == block.stop
        assert all(b == c for (_, b), (c, _) in zip(pieces, pieces[1:], strict=False))  # no gap
        assert all(b - a == step for a, b in pieces[:-1])  # full pieces but the last
        assert all(a % (chunk or 1) == 0 for a, _ in pieces)  # each starts a chunk
        assert _pieces(block, "block", step) == [(block.start, block.stop)]
        assert _pieces(block, "frame", step) == [(i, i + 1) for i in range(block.start, block.stop)]
    assert _pieces(Block(0, 7, 7), "step", step) == []


@pytest.mark.parametrize("read", ["step", "block", "frame"])
def test_rank_reads_its_block_piece_by_piece(read, adk_h5md, adk_universe):
    """A rank's RMSD, read in pieces of two chunks into one buffer, equals the kernel's on
    the whole block (serial HDF5: SlabReader's independent reads need no MPI)."""
    from h5mdx.analysis.qcp import prepare, rmsd_qcp
    from h5mdx.mpi.rmsd import MPIRMSDOptions, _Job, _read_and_compute, _Timer

    idx = adk_universe.select_atoms("name CA").indices
    with h5py.File(adk_h5md, "r") as f:
        dset = f["particles/trajectory/position/value"]
        frames = dset[...]
        reader = SlabReader(dset)
        block = Block(0, 31, 97)
        reads = []
        read_frames = reader.read

        def counted(a, b, out=None):
            reads.append((a, b, out.ctypes.data))
            return read_frames(a, b, out=out)

        reader.read = counted
        kernel = prepare(frames[3, idx].astype(np.float64), None, True, atoms=idx)
        job = _Job(f, None, [block], block, reader, kernel, step=2)
        got = _read_and_compute(MPIRMSDOptions(str(adk_h5md), read=read), job, _Timer())
    want = rmsd_qcp(frames[3, idx], frames[31:97, idx])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    n_reads = {"step": 33, "block": 1, "frame": 66}[read]
    assert len(reads) == n_reads
    assert len({address for _, _, address in reads}) == 1  # one buffer for every piece
    assert reader.bytes_read == 66 * 3341 * 3 * 4


def test_a_rank_sleeps_the_injected_delay_in_its_phase(adk_h5md, monkeypatch):
    from h5mdx.analysis.qcp import prepare
    from h5mdx.mpi.rmsd import MPIRMSDOptions, _Job, _read_and_compute, _Timer
    from h5mdx.timing.phases import DELAY_ENV

    with h5py.File(adk_h5md, "r") as f:
        dset = f["particles/trajectory/position/value"]
        kernel = prepare(dset[0].astype(np.float64), None, True)
        for spec, slept in (("31:0.3", ("io", 0.3)), ("32:0.3", None), ("31:0.2:compute",
                                                                       ("compute", 0.2))):
            monkeypatch.setenv(DELAY_ENV, spec)
            block = Block(0, 31, 97)
            job = _Job(f, None, [block], block, SlabReader(dset), kernel, step=66)
            timer = _Timer()
            _read_and_compute(MPIRMSDOptions(str(adk_h5md)), job, timer)
            if slept is None:
                assert max(timer.phases.values()) < 0.2
            else:
                assert timer.phases[slept[0]] >= slept[1]


def test_options_are_checked():
    from h5mdx.mpi.rmsd import MPIRMSDOptions

    with pytest.raises(ValueError, match="needs a topology"):
        MPIRMSDOptions("x.h5md", select="name CA").check()
    with pytest.raises(ValueError, match="read must be"):
        MPIRMSDOptions("x.h5md", read="chunk").check()
    with pytest.raises(ValueError, match="read_mib must be positive"):
        MPIRMSDOptions("x.h5md", read_mib=0).check()
    # inf failed later, in every rank's open: "OverflowError: cannot convert float infinity
    # to integer", naming no option
    with pytest.raises(ValueError, match=r"read_mib must be positive and finite, got inf"):
        MPIRMSDOptions("x.h5md", read_mib=float("inf")).check()


def test_commands_and_environment(monkeypatch):
    from h5mdx.mpi.commands import dask_mpi_command, mpi_env, mpi_io_command

    monkeypatch.setenv("H5MDX_MPIRUN", "/opt/x/bin/mpirun")
    cmd = mpi_io_command(3, "t.h5md", "out", topology="t.psf", select="name CA",
                         options=["--collective"])
    assert cmd[:3] == ["/opt/x/bin/mpirun", "-n", "3"] and "--oversubscribe" in cmd
    assert cmd[-1] == "--collective" and cmd[cmd.index("--select") + 1] == "name CA"
    assert dask_mpi_command(2, "t.h5md", "out")[2] == "4"
    env = mpi_env({"HDF5_USE_FILE_LOCKING": "TRUE"}, as_root=True)
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["HDF5_USE_FILE_LOCKING"] == "TRUE"
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in mpi_env({}, as_root=False)


# ----------------------------------------------------------------------------- mpirun runs


def _read_rmsd(out: Path) -> np.ndarray:
    if (out / "rmsd.nc").exists():
        import xarray as xr

        with xr.open_dataarray(out / "rmsd.nc") as da:
            return da.values.copy()
    data = np.genfromtxt(out / "rmsd.csv", delimiter=",", names=True)
    return np.asarray(data["rmsd"])


def _check_records(out: Path, n_ranks: int, n_frames: int, backend: str = "mpi-io"):
    from h5mdx.timing import records

    frame, meta = records.load(out / "timing.csv")
    records.validate(frame)
    assert meta["backend"] == backend and meta["n_workers"] == n_ranks
    assert len(frame) == n_ranks
    assert set(frame["backend"]) == {backend}
    assert sorted(frame["rank"]) == list(range(n_ranks))
    assert int(frame["frame_stop"].max()) == n_frames and int(frame["frame_start"].min()) == 0
    assert int((frame["frame_stop"] - frame["frame_start"]).sum()) == n_frames
    for phase in records.PHASES:  # the MPI-IO path measures every phase
        assert frame[phase].notna().all() and (frame[phase] >= 0).all()
    np.testing.assert_allclose(records.phase_sum(frame), frame["wall"], atol=0.05, rtol=0.05)
    assert (frame["bytes_read"] > 0).sum() >= 1
    if backend == "mpi-io" and has_module("numba"):  # loading numba: its own phase
        assert (frame["t_warmup"] > 0.01).all()
    return frame


MPI_CASES = [
    # n ranks, layout, options, (reference, weights)
    pytest.param(1, "chunk1", ["--read", "block"], (0, None), id="n1-chunk1-block"),
    pytest.param(2, "chunk10", ["--read-mib", "0.5"], (0, None), id="n2-chunk10-step"),
    pytest.param(4, "chunk1", ["--read-mib", "0.2", "--collective", "--weights", "mass"],
                 (0, "mass"), id="n4-chunk1-step-collective-mass"),
    pytest.param(2, "chunk10", ["--read", "frame", "--collective", "--selected-only"],
                 (0, None), id="n2-chunk10-frame-collective-selected"),
    pytest.param(2, "contiguous", ["--read", "frame", "--weights", "mass", "--reference", "5"],
                 (5, "mass"), id="n2-contiguous-frame-mass-ref5"),
    pytest.param(4, "contiguous", ["--topology-on-root", "--format", "nc", "--selected-only"],
                 (0, None), id="n4-contiguous-toproot-nc"),
    pytest.param(4, "chunk64", ["--collective"], (0, None), id="n4-chunk64-idle-ranks-collective"),
]


@pytest.mark.mpi
@pytest.mark.parametrize(("n", "layout", "options", "expect"), MPI_CASES)
def test_mpi_rmsd_matches_mdanalysis(n, layout, options, expect, layouts, mda_rmsd, tmp_path):
    require_mpi()
    from h5mdx.testing import adk_topology

    out = tmp_path / "out"
    proc = mpirun(n, h5mdx_argv("mpi-rmsd", layouts[layout], "--topology", adk_topology(),
                                "--select", SELECT, "--out", str(out), *options))
    assert proc.returncode == 0, proc.stderr
    assert "CommClosedError" not in proc.stderr
    rmsd = _read_rmsd(out)
    ref_frame, weights = expect
    np.testing.assert_allclose(rmsd, mda_rmsd(ref_frame, weights), rtol=0, atol=1e-4)
    frame = _check_records(out, n, len(rmsd))
    assert set(frame["n_workers"]) == {n}
    if "--selected-only" in options:  # only the C-alpha atoms came from disk
        assert int(frame["bytes_read"].sum()) == len(rmsd) * 214 * 3 * 4
    else:
        assert int(frame["bytes_read"].sum()) == len(rmsd) * 3341 * 3 * 4
    if layout == "chunk64":  # two chunks, four ranks: two idle ranks took part in the read
        assert sorted((frame["frame_stop"] - frame["frame_start"]).tolist()) == [0, 0, 34, 64]
    assert f"on {n} rank(s)" in proc.stdout


@pytest.fixture(scope="session")
def adk_lzf64(tmp_path_factory, adk_positions):
    """adk with lzf in (64, n_atoms, 3) chunks: lzf cannot shrink the first chunk, which
    HDF5 stores without the filter (its filter mask says so)."""
    from h5mdx.testing import write_h5md

    path = tmp_path_factory.mktemp("adk") / "adk_lzf64.h5md"
    n = len(adk_positions)
    return write_h5md(path, {"trajectory": {"position": {
        "value": adk_positions, "step": np.arange(n), "time": np.arange(n) * 1.0,
        "unit": "Angstrom", "chunks": (64, adk_positions.shape[1], 3),
        "compression": "lzf"}}})


def test_a_chunk_stored_without_its_filter_is_found(adk_lzf64, adk_h5md):
    from h5mdx.mpi.io import skips_a_filter

    with h5py.File(adk_lzf64) as f:
        dset = f["particles/trajectory/position/value"]
        masks = [dset.id.get_chunk_info(i).filter_mask for i in range(2)]
        assert masks == [1, 0]
        assert skips_a_filter(dset)
    with h5py.File(adk_h5md) as f:  # no filter
        assert not skips_a_filter(f["particles/trajectory/position/value"])


def test_chunks_stored_without_their_filter_are_found_in_one_pass(tmp_path, monkeypatch):
    """The masks come from one pass over the chunk index (HDF5's chunk_iter, or the
    B-tree read from the file): HDF5 1.10's chunk-by-chunk look-up, which every rank ran,
    takes time quadratic in the chunks (0.65 s for 8,000; minutes for a trajectory of a
    chunk per frame). The look-up, the last resort, finds the same chunks."""
    import h5mdx.mpi.io as mpi_io

    class Counted:  # a dataset whose chunk look-ups are counted
        def __init__(self, dset, calls):
            self._dset, self._calls = dset, calls

        def __getattr__(self, name):
            return getattr(self._dset, name)

        @property
        def id(self):
            outer = self

            class Id:
                def __getattr__(self, name):
                    if name in ("get_chunk_info", "get_chunk_info_by_coord"):
                        outer._calls.append(name)
                    return getattr(outer._dset.id, name)
            return Id()

    path = tmp_path / "lzf.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(300, 10, 3), chunks=(1, 10, 3), dtype="f4",
                             compression="lzf")
        d[:150] = 0.0  # shrinks: filtered
        d[150:] = np.random.default_rng(0).random((150, 10, 3))  # does not: stored raw
        f.create_dataset("y", data=np.zeros((300, 10, 3), "f4"), chunks=(1, 10, 3),
                         compression="lzf")
    with h5py.File(path) as f:
        calls: list[str] = []
        assert mpi_io.skips_a_filter(Counted(f["x"], calls))
        assert not mpi_io.skips_a_filter(Counted(f["y"], calls))
        if mpi_io.index_all_chunks(f["x"]) is not None or mpi_io.chunk_tree(f["x"]):
            assert len(calls) < 10, len(calls)  # not one a chunk
        monkeypatch.setattr(mpi_io, "index_all_chunks", lambda dset: None)
        monkeypatch.setattr(mpi_io, "chunk_tree", lambda dset: None)
        assert mpi_io.skips_a_filter(f["x"]) and not mpi_io.skips_a_filter(f["y"])
        # more chunks than it looks up one by one (seconds, minutes): not known, at once
        calls.clear()
        assert mpi_io.skips_a_filter(Counted(f["x"], calls), lookup_chunks=299) is None
        assert not calls


@pytest.mark.mpi
def test_collective_reads_of_chunks_stored_without_their_filter(adk_lzf64, mda_rmsd,
                                                                tmp_path):
    """--collective on an lzf file whose first chunk lzf could not shrink: HDF5 1.10's
    collective reads ran lzf on the raw chunk and every rank failed ('Invalid data for LZF
    decompression', as if the file were corrupt). The ranks read it
    independently, say so once, and the records say what ran."""
    require_mpi()
    import json

    from h5mdx.testing import adk_topology

    out = tmp_path / "out"
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", adk_lzf64, "--topology", adk_topology(),
                                "--select", SELECT, "--out", str(out), "--collective"))
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), mda_rmsd(0, None), rtol=0, atol=1e-4)
    assert proc.stderr.count("reading independently instead of --collective") == 1, \
        proc.stderr
    meta = json.loads((out / "timing.meta.json").read_text())
    assert meta["options"]["collective"] is False


@pytest.mark.mpi
def test_mass_weights_without_a_topology_take_the_files_masses(adk_universe, adk_positions,
                                                               tmp_path):
    """h5mdx rmsd --weights mass takes the file's own mass element; mpi-rmsd refused it
    ('mass weights need a topology')."""
    require_mpi()
    from MDAnalysis.analysis.rms import RMSD

    from h5mdx.testing import write_h5md

    n = len(adk_positions)
    path = write_h5md(tmp_path / "mass.h5md", {"trajectory": {
        "position": {"value": adk_positions, "step": np.arange(n), "unit": "Angstrom",
                     "chunks": (10, adk_positions.shape[1], 3)},
        "mass": {"value": adk_universe.atoms.masses.astype(np.float64)}}})
    out = tmp_path / "out"
    proc = mpirun(3, h5mdx_argv("mpi-rmsd", str(path), "--weights", "mass", "--out", str(out)))
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(adk_universe, weights="mass").run().results.rmsd[:, 2]
    np.testing.assert_allclose(_read_rmsd(out), expected, rtol=0, atol=1e-4)
    unweighted = RMSD(adk_universe).run().results.rmsd[:, 2]
    assert np.abs(expected - unweighted).max() > 0.01  # the weights matter
    # a file without masses says what to pass, once
    none = write_h5md(tmp_path / "none.h5md", {"trajectory": {"position": {
        "value": adk_positions[:3], "step": np.arange(3)}}})
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(none), "--weights", "mass"))
    assert proc.returncode == 2, proc.stderr  # the user's mistake: a usage error
    assert _error_lines(proc.stderr) == [
        f"h5mdx mpi-rmsd: {none}: mass weights need masses: pass --topology FILE "
        "(/particles/trajectory has no mass element of one mass per atom)"], proc.stderr


@pytest.mark.mpi
def test_a_delay_makes_the_rank_that_starts_at_its_frame_a_straggler(layouts, tmp_path):
    """``H5MDX_TIMING_DELAY`` (``h5mdx bench --delay``) slows the rank whose frames start
    at its frame, in its phase, as it slows a dask task (the MPI path ignored it)."""
    require_mpi()
    from h5mdx.testing import adk_topology

    out = tmp_path / "out"
    proc = run_mpi(2, h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--topology", adk_topology(),
                                 "--select", SELECT, "--out", str(out)),
                   timeout=120, env={**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE",
                                     "H5MDX_TIMING_DELAY": "0:0.6:compute"})
    assert proc.returncode == 0, proc.stderr
    frame = _check_records(out, 2, 98).set_index("frame_start")
    assert frame.loc[0, "t_compute"] >= 0.6
    assert frame.drop(index=0)["t_compute"].max() < 0.6
    # the summary gives the rate of the reads and the kernel beside the wall time's, whose
    # start-up dominates a short run; the delay is the busiest's compute
    rate = re.search(r"; ([\d,]+) frames/s in the busiest rank's io \+ compute", proc.stdout)
    assert rate, proc.stdout
    busiest = frame["t_io"] + frame["t_compute"]
    assert int(rate.group(1).replace(",", "")) == pytest.approx(98 / busiest.max(), rel=0.02)


@pytest.mark.mpi
def test_mpi_rmsd_without_mpirun_runs_on_one_rank_and_says_so(layouts, mda_rmsd, tmp_path):
    require_mpi()
    from h5mdx.mpi import _LAUNCHER_VARS
    from h5mdx.testing import adk_topology

    env = {k: v for k, v in mpi_env().items() if k not in _LAUNCHER_VARS}
    out = tmp_path / "out"
    proc = subprocess.run(
        h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--topology", adk_topology(), "--select",
                   SELECT, "--out", str(out), "--read", "frame"),
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "not started by mpirun" in proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), mda_rmsd(0, None), rtol=0, atol=1e-4)
    assert "--out DIR" not in proc.stdout
    # the reference frame is said as an index from the first frame, as h5mdx.rmsd says it
    # (it was -1 as given, where h5mdx.rmsd of the parts of a run said 97). Into the same
    # --out: the first run's rmsd.csv is removed, not left to be read as this run's series
    assert (out / "rmsd.csv").is_file() and (out / "rmsd.meta.json").is_file()
    assert f"wrote rmsd_meta: {out / 'rmsd.meta.json'}" in proc.stdout
    proc = subprocess.run(
        h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--reference", "-1", "--format", "nc",
                   "--out", str(out)), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "rmsd.csv").exists() and not (out / "rmsd.meta.json").exists()
    assert f"removed {out / 'rmsd.csv'}: an earlier run's series" in proc.stdout
    import xarray as xr

    with xr.open_dataarray(out / "rmsd.nc") as da:
        assert da.attrs["reference_frame"] == 97 and float(da[97]) < 1e-5 < float(da[0])
        assert da.attrs["reference_step"] == int(da.step[97])
        assert da.attrs["selection"] == "all" and da.attrs["units"] == "Angstrom"
    # without --out nothing is written: the summary says how to keep the series (as
    # h5mdx rmsd does)
    proc = subprocess.run(h5mdx_argv("mpi-rmsd", layouts["chunk10"]), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "the series and the per-rank timings: --out DIR" in proc.stdout


@pytest.mark.mpi
def test_a_file_of_selected_atoms_finds_them_in_the_whole_topology(adk_h5md, adk_universe,
                                                                  tmp_path):
    """A file of selected atoms (h5mdx's id) with the whole system's PSF: the selection
    and masses are the topology's atoms, found by the id, as the dask schedulers find
    them (mpi-rmsd refused it: 3341 atoms against 214); with --topology-on-root too.
    Another program's id is refused on every rank, once, with the way to pass the atoms."""
    require_mpi()
    import xarray as xr
    from MDAnalysis.analysis.rms import RMSD

    from h5mdx.testing import adk_topology

    ca = adk_universe.select_atoms("name CA")
    with xr.open_dataset(adk_h5md, engine="h5md", topology=adk_topology()) as ds:
        ds.isel(atom=ca.indices).md.to_h5md(tmp_path / "ca.h5md")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(adk_universe, select="name CA and resid 1:50",
                        weights="mass").run().results.rmsd[:, 2]
    for extra in ([], ["--topology-on-root"]):
        out = tmp_path / f"out{len(extra)}"
        proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(tmp_path / "ca.h5md"), "--topology",
                                    adk_topology(), "--select", "resid 1:50", "--weights",
                                    "mass", "--out", str(out), *extra))
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(_read_rmsd(out), expected, rtol=0, atol=1e-4)
        assert _check_records(out, 2, len(expected))["bytes_read"].sum() == \
            len(expected) * 214 * 3 * 4  # the file's atoms, not the topology's
    tagged = tmp_path / "tagged.h5md"
    tagged.write_bytes((tmp_path / "ca.h5md").read_bytes())
    with h5py.File(tagged, "r+") as f:
        del f["particles/trajectory/id"].attrs["long_name"]
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(tagged), "--topology", adk_topology(),
                                "--select", "resid 1:50"))
    assert proc.returncode == 1
    assert proc.stderr.count("does not say which of the topology's atoms they are") == 1
    assert "on the command line, --topology a file of those atoms alone" in proc.stderr
    # what that says to do works: a topology of the file's atoms alone (C-alphas of equal
    # mass: the unweighted RMSD is the mass-weighted one)
    ca.write(tmp_path / "ca.pdb")
    out = tmp_path / "out-pdb"
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(tagged), "--topology", str(tmp_path / "ca.pdb"),
                                "--select", "resid 1:50", "--out", str(out)))
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), expected, rtol=0, atol=1e-4)
    # a topology of fewer atoms than the file's is no system of them: said with the remedy
    adk_universe.atoms[:10].write(tmp_path / "ten.pdb")
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(tagged), "--topology",
                                str(tmp_path / "ten.pdb")))
    assert proc.returncode == 1
    assert "has 10 atoms but the trajectory has 214; pass the topology of the file's atoms" \
        in proc.stderr


@pytest.mark.mpi
def test_a_file_with_vmds_structure_module_is_its_own_topology(adk_universe, adk_positions,
                                                               tmp_path):
    """mpi-rmsd --select --weights mass without --topology on a file holding VMD's
    structure module: the selection and the masses are the module's (its resid 0-based:
    resid 10:49 is the PSF's 11:50), equal to MDAnalysis on the PSF to 1e-4 A."""
    require_mpi()
    from MDAnalysis.analysis.rms import RMSD

    from vmd_files import write_adk_vmd

    path = write_adk_vmd(tmp_path / "adk_vmd.h5", adk_universe, adk_positions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = RMSD(adk_universe, select="name CA and resid 11:50",
                        weights="mass").run().results.rmsd[:, 2]
    out = tmp_path / "out"
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", path, "--select", "name CA and resid 10:49",
                                "--weights", "mass", "--out", str(out)))
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), expected, rtol=0, atol=1e-4)


@pytest.mark.mpi
def test_mpi_rmsd_file_equals_the_dask_paths(layouts, tmp_path):
    """Same columns (frame, time, step, rmsd), same values as ``h5mdx rmsd`` (dask)."""
    require_mpi()
    from h5mdx.cli import main
    from h5mdx.testing import adk_topology

    out = tmp_path / "out"
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--topology", adk_topology(),
                                "--select", SELECT, "--out", str(out), "--selected-only",
                                "--quiet"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    dask_csv = tmp_path / "dask.csv"
    assert main(["rmsd", layouts["chunk10"], "--topology", adk_topology(), "--select", SELECT,
                 "--scheduler", "threads", "--workers", "1", "--out", str(dask_csv),
                 "--no-progress"]) == 0
    mpi = np.genfromtxt(out / "rmsd.csv", delimiter=",", names=True)
    dask = np.genfromtxt(dask_csv, delimiter=",", names=True)
    assert mpi.dtype.names == dask.dtype.names == ("frame", "time", "step", "rmsd")
    for name in ("frame", "time", "step"):
        np.testing.assert_allclose(mpi[name], dask[name], rtol=1e-9)
    np.testing.assert_allclose(mpi["rmsd"], dask["rmsd"], rtol=0, atol=1e-6)


@pytest.mark.mpi
def test_failing_rank_aborts_the_job(layouts, tmp_path):
    require_mpi()
    proc = mpirun(2, [sys.executable, str(SCRIPTS / "fail_rank.py"), layouts["chunk10"],
                      str(tmp_path / "out")], timeout=90)
    assert proc.returncode != 0
    assert "rank 1 of 2 failed: RuntimeError: injected failure" in proc.stderr
    assert not (tmp_path / "out" / "rmsd.csv").exists()


@pytest.mark.mpi
def test_a_file_open_for_writing_is_refused_on_every_rank(layouts, tmp_path):
    """HDF5's MPI-IO driver takes no file lock: mpi-rmsd read a file another process was
    writing, in silence (a snapshot, or torn metadata). Rank 0 now asks the serial way,
    and every rank refuses as h5mdx rmsd does."""
    import shutil

    require_mpi()
    path = str(tmp_path / "held.h5md")
    shutil.copy(layouts["chunk10"], path)
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    with h5py.File(path, "a"):  # a writer holds it
        proc = run_mpi(2, h5mdx_argv("mpi-rmsd", path, "--out", str(tmp_path / "out")),
                       timeout=90, env=env)
    assert proc.returncode != 0
    assert "HDF5 cannot lock the file" in proc.stderr, proc.stderr
    assert "another process has it open for writing" in proc.stderr
    assert not (tmp_path / "out" / "rmsd.csv").exists()


@pytest.mark.mpi
@pytest.mark.parametrize("has_it", [0, 1], ids=["rank-0-only", "rank-1-only"])
def test_a_file_only_some_ranks_see_is_refused_on_every_rank(layouts, tmp_path, has_it):
    """One path, a file on one node's /tmp only: the ranks that saw it waited forever in the
    collective MPI-IO open for the one that failed before it. Every
    rank now refuses it, naming what each rank sees, and the job exits 1."""
    import shutil

    require_mpi()
    seen, unseen = tmp_path / "node-a", tmp_path / "node-b"
    seen.mkdir()
    unseen.mkdir()
    shutil.copy(layouts["chunk10"], seen / "t.h5md")
    size = (seen / "t.h5md").stat().st_size
    code = ("import os, sys; from mpi4py import MPI; from h5mdx.cli import main; "
            "os.chdir(sys.argv[1] if MPI.COMM_WORLD.rank == int(sys.argv[3]) else sys.argv[2]); "
            "sys.exit(main(['mpi-rmsd', 't.h5md', '-q']))")
    proc = mpirun(2, [sys.executable, "-c", code, str(seen), str(unseen), str(has_it)],
                  timeout=60)
    assert proc.returncode == 1, proc.stderr
    lines = _error_lines(proc.stderr)
    views = {has_it: f"{size} bytes", 1 - has_it: "No such file or directory"}
    assert lines == [f"h5mdx mpi-rmsd: all 2 ranks failed: H5MDReadError: t.h5md: the ranks "
                     f"do not see the same file (rank(s) 0: {views[0]}; rank(s) 1: "
                     f"{views[1]}); put it on a file system every rank (every node) sees, "
                     "such as the shared scratch"], proc.stderr


@pytest.mark.mpi
def test_killed_rank_ends_the_job(layouts, tmp_path):
    """A rank killed by SIGKILL mid-run: mpirun exits non-zero within the bound, no hang."""
    require_mpi()
    t0 = time.monotonic()
    proc = mpirun(2, [sys.executable, str(SCRIPTS / "fail_rank.py"), layouts["chunk10"],
                      str(tmp_path / "out"), "kill"], timeout=90)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 90
    assert not (tmp_path / "out" / "rmsd.csv").exists()


@pytest.mark.mpi
def test_dask_mpi_cluster_starts_and_stops_cleanly():
    require_mpi()
    pytest.importorskip("dask_mpi")
    proc = mpirun(4, [str(SCRIPTS / "dask_mpi_hello.py")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ranks [2, 3] sum 6" in proc.stdout
    assert "CommClosedError" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_dask_mpi_needs_three_ranks():
    require_mpi()
    pytest.importorskip("dask_mpi")
    code = "from h5mdx.mpi.launch import dask_mpi_client\nwith dask_mpi_client(): pass"
    proc = mpirun(2, ["-c", code], timeout=60)
    assert proc.returncode != 0
    assert "needs at least 3 MPI ranks" in proc.stderr


@pytest.mark.mpi
def test_dask_mpi_rmsd_matches_mdanalysis(layouts, mda_rmsd, tmp_path):
    require_mpi()
    pytest.importorskip("dask_mpi")
    from h5mdx.testing import adk_topology

    out = tmp_path / "out"
    from h5mdx.mpi.commands import dask_mpi_command

    cmd = dask_mpi_command(2, layouts["chunk10"], str(out), topology=adk_topology(),
                           select=SELECT)
    assert cmd[cmd.index("-n") + 1] == "4"  # scheduler + client + 2 workers
    proc = mpirun(4, cmd[cmd.index(sys.executable):], timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "CommClosedError" not in proc.stderr and "Traceback" not in proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), mda_rmsd(0, None), rtol=0, atol=1e-4)
    from h5mdx.timing import records

    frame, meta = records.load(out / "timing.csv")
    assert meta["backend"] == "dask-mpi"
    # each worker loaded the kernel before the first task (the seconds are in the metadata)
    assert len(meta["warm_up_s"]) == 2 and all(v >= 0 for v in meta["warm_up_s"].values())
    assert set(frame["backend"]) == {"dask-mpi"}
    assert set(frame["rank"]) <= {2, 3}  # the workers are ranks 2 and 3
    assert frame["t_io"].notna().all() and frame["t_compute"].notna().all()
    assert frame["t_comm_gather"].isna().all()  # unknown for dask tasks, never 0
    assert set(frame["n_workers"]) == {2}
    assert int((frame["frame_stop"] - frame["frame_start"]).sum()) == 98


@pytest.mark.mpi
def test_dask_mpi_command_line_takes_every_option(layouts, mda_rmsd, tmp_path):
    """``h5mdx rmsd --scheduler dask-mpi`` under mpirun honours the options of the other
    schedulers (it dropped --no-superposition, --timing, --plot, --group, --kernel and
    --frames-per-block, and gave the superposed RMSD); --workers
    other than the job's is an error."""
    require_mpi()
    pytest.importorskip("dask_mpi")
    import xarray as xr

    import h5mdx
    from h5mdx.testing import adk_topology

    path = layouts["chunk10"]
    with xr.open_dataset(path, engine="h5md", topology=adk_topology()) as ds:
        want = h5mdx.rmsd(ds.position, select=SELECT, superposition=False).values
    assert np.abs(want - mda_rmsd(0, None)).max() > 0.02  # not the superposed one
    out, timing = tmp_path / "r.csv", tmp_path / "timing"
    argv = h5mdx_argv("rmsd", path, "--topology", adk_topology(), "--select", SELECT,
                      "--scheduler", "dask-mpi", "--no-superposition", "--group", "trajectory",
                      "--frames-per-block", "20", "--kernel", "numpy", "--out", str(out),
                      "--plot", str(tmp_path / "r.png"), "--timing", str(timing))
    proc = mpirun(4, argv, timeout=180)
    assert proc.returncode == 0, proc.stderr
    data = np.genfromtxt(out, delimiter=",", names=True)
    np.testing.assert_allclose(data["rmsd"], want, rtol=0, atol=1e-4)
    assert (tmp_path / "r.png").stat().st_size > 0
    from h5mdx.timing import records

    frame, meta = records.load(timing / "timing.csv")
    assert meta["backend"] == "dask-mpi" and len(frame) == 5  # 98 frames in blocks of 20
    assert not (tmp_path / "timing.csv").exists()
    proc = mpirun(3, [*argv[:-2], "--workers", "2"], timeout=120)
    assert proc.returncode != 0 and "3 ranks give 1 workers, not 2" in proc.stderr


_SLOW_RANK0 = """
import sys, time
from h5mdx.mpi import rmsd as m
from h5mdx.mpi import comm_world

select = m._select

def slow(*args):
    if comm_world().Get_rank() == 0:
        time.sleep(3.0)  # a rank held up before the collective open
    return select(*args)

m._select = slow
res = m.run_rmsd(m.MPIRMSDOptions(sys.argv[1], topology=sys.argv[2], select="name CA",
                                  topology_on_root=sys.argv[3] == "1"))
if res is not None:
    for r in sorted(res.records, key=lambda r: r["rank"]):
        print("RANK", r["rank"], r["t_init_top"], r["t_init_traj"], r["t_wait"])
"""


@pytest.mark.mpi
@pytest.mark.parametrize("on_root", [False, True])
def test_mpi_io_waiting_for_a_slow_rank_is_wait(layouts, tmp_path, on_root):
    """Rank 0 held up 3 s before the collective open: rank 1 waits, and its record says
    so (t_wait), not t_init_traj (it was flagged the straggler for it) nor t_init_top
    (--topology-on-root); found by an audit."""
    require_mpi()
    from h5mdx.testing import adk_topology

    script = tmp_path / "slow.py"
    script.write_text(_SLOW_RANK0)
    proc = mpirun(2, [sys.executable, str(script), layouts["chunk10"], adk_topology(),
                      "1" if on_root else "0"], timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = {int(r): [float(x) for x in rest] for r, *rest in
            (line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("RANK"))}
    (top0, _, wait0), (top1, traj1, wait1) = rows[0], rows[1]
    assert top0 >= 3.0, rows
    assert wait1 >= 3.0 - top1 - 0.2 and traj1 < 1.5, rows  # its own topology, then waits
    assert wait0 < 1.0, rows
    if on_root:
        assert top1 < 0.5, rows  # rank 1 reads no topology: waiting for rank 0's


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("h5mdx mpi-rmsd:")]


@pytest.mark.mpi
@pytest.mark.parametrize("on_root", [False, True], ids=["every-rank", "topology-on-root"])
def test_a_start_up_failure_of_every_rank_is_reported_once(layouts, tmp_path, on_root):
    """A bad selection fails alike on every rank: one line from rank 0, naming the ranks,
    status 1, no abort (each of 64 ranks printed its own line)."""
    require_mpi()
    from h5mdx.testing import adk_topology

    argv = h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--topology", adk_topology(),
                      "--select", "name CA and nonsense", "--out", str(tmp_path / "out"),
                      *(["--topology-on-root"] if on_root else []))
    proc = mpirun(3, argv, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = _error_lines(proc.stderr)
    who = "rank 0 of 3" if on_root else "all 3 ranks"
    assert len(lines) == 1 and lines[0].startswith(f"h5mdx mpi-rmsd: {who} failed: "), \
        proc.stderr
    assert "nonsense" in lines[0]
    assert "MPI_ABORT" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "rmsd.csv").exists()


@pytest.mark.mpi
def test_a_bad_option_is_reported_once(layouts, tmp_path):
    """--out naming a file fails alike on every rank: one line from rank 0, no abort
    (every rank printed it and called MPI_Abort); a usage error, said
    before MPI starts, with status 2."""
    require_mpi()
    (tmp_path / "afile").write_text("")
    proc = mpirun(3, h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--out",
                                str(tmp_path / "afile")), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("h5mdx mpi-rmsd: --out "), proc.stderr
    assert "is a file; the timing records need a directory" in lines[0]
    assert "MPI_ABORT" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_a_file_that_is_not_there_is_reported_once(tmp_path):
    require_mpi()
    missing = str(tmp_path / "missing.h5md")
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", missing), timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and "all 2 ranks failed" in lines[0] and missing in lines[0], \
        proc.stderr


def test_failures_are_grouped_by_their_ranks(capsys):
    from h5mdx.mpi.rmsd import _report

    _report(["E: a", "E: b", "E: a", None, "E: a", "E: a"], 6)
    _report(["E: c"] * 4, 4)
    assert capsys.readouterr().err.splitlines() == [
        "h5mdx mpi-rmsd: ranks 0, 2, 4-5 of 6 failed: E: a",
        "h5mdx mpi-rmsd: rank 1 of 6 failed: E: b",
        "h5mdx mpi-rmsd: all 4 ranks failed: E: c",
    ]


@pytest.mark.mpi
def test_mpi_rmsd_of_a_file_without_frames_says_so(tmp_path):
    """Positions with no frame: 'no frames', not 'reference frame 0 is out of range'
   ."""
    require_mpi()
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "empty.h5md", {"trajectory": {"position": {
        "value": np.zeros((0, 4, 3)), "step": np.zeros(0, dtype=int)}}})
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", str(path)), timeout=120)
    assert proc.returncode != 0
    assert "the positions have no frames" in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_what_the_scan_assumed_of_the_positions_is_warned_once(layouts, mda_rmsd, tmp_path):
    """A ``step`` and ``time`` of 90 entries beside 98 frames: mpi-rmsd wrote steps
    0..97 and no word of what the engine assumed. Now rank 0 warns once, naming the file
    and the path of ``step``, and the 90 frames that have a step are read at their steps
    and times (the time, as long as the step, is read from the same entries, unsaid)."""
    require_mpi()
    import shutil

    from h5mdx.testing import adk_topology

    path = tmp_path / "short_step.h5md"
    shutil.copy(layouts["chunk10"], path)
    with h5py.File(path, "a") as f:
        g = f["particles/trajectory/position"]
        for name in ("step", "time"):
            kept = g[name][:90]
            del g[name]
            g[name] = kept
    out = tmp_path / "out"
    proc = mpirun(3, h5mdx_argv("mpi-rmsd", str(path), "--topology", adk_topology(),
                                "--select", SELECT, "--out", str(out), "--quiet"))
    assert proc.returncode == 0, proc.stderr
    said = {part: [ln for ln in proc.stderr.splitlines()
                   if f"[/particles/trajectory/position/{part}]" in ln]
            for part in ("step", "time")}
    assert len(said["step"]) == 1 and str(path) in said["step"][0], proc.stderr
    assert "has 98 frames" in said["step"][0] and "last 8 frame(s)" in said["step"][0]
    assert said["time"] == [], proc.stderr
    np.testing.assert_allclose(_read_rmsd(out), mda_rmsd(0, None)[:90], rtol=0, atol=1e-4)


@pytest.mark.mpi
def test_a_reference_out_of_range_names_the_file_once(layouts):
    """--reference 98 of 98 frames: 'reference frame 98 is out of range for 98 frames',
    naming no file; then once, with the file, the path and the range, but as a failure of
    every rank ('all 2 ranks failed: IndexError: ...') with exit status 1. It is the
    user's mistake: one line, as it is, and exit status 2, as for a usage error."""
    require_mpi()
    path = layouts["chunk10"]
    proc = mpirun(2, h5mdx_argv("mpi-rmsd", path, "--reference", "98"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert _error_lines(proc.stderr) == [
        f"h5mdx mpi-rmsd: {path} [/particles/trajectory/"
        "position/value]: reference frame 98 is out of range for 98 frames (0 to 97, or "
        "-98 to -1 from the end)"], proc.stderr
    assert "--debug" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_selection_without_a_topology_is_a_usage_error(layouts, ranks):
    """--select without --topology, of a file that holds none: said by every rank's
    failure with exit status 1 (on one rank with a --debug hint); now one line, once,
    with exit status 2."""
    require_mpi()
    proc = mpirun(ranks, h5mdx_argv("mpi-rmsd", layouts["chunk10"], "--select", "name CA"),
                  timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert _error_lines(proc.stderr) == [
        "h5mdx mpi-rmsd: a selection ('name CA') needs a topology: pass --topology FILE"], \
        proc.stderr
    assert "--debug" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_a_damaged_chunk_on_one_rank_closes_the_file_before_mpi_ends(tmp_path):
    """On one rank a read error goes up as it is; the file stayed open, and h5py closed it
    after MPI was finalised: two 'Can't decrement id ref count' tracebacks and Open MPI's
    'MPI_File_close() function was called after MPI_FINALIZE ... will now abort' (an
    audit). Now the error line alone, status 1."""
    require_mpi()
    from h5mdx.mpi import _LAUNCHER_VARS
    from h5mdx.testing import write_h5md

    pos = np.random.default_rng(0).random((30, 20, 3)).astype(np.float32)
    path = write_h5md(tmp_path / "damaged.h5md", {"trajectory": {"position": {
        "value": pos, "step": np.arange(30), "chunks": (10, 20, 3), "compression": "gzip"}}})
    with h5py.File(path, "r") as f:
        info = f["particles/trajectory/position/value"].id.get_chunk_info_by_coord((20, 0, 0))
    with open(path, "r+b") as fh:  # garble the chunk of frames 20-29
        fh.seek(info.byte_offset + 8)
        fh.write(b"\xff" * 32)
    env = {k: v for k, v in mpi_env().items() if k not in _LAUNCHER_VARS}
    proc = subprocess.run(h5mdx_argv("mpi-rmsd", str(path), "--read", "frame"), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert f"{path} [/particles/trajectory/position/value]: reading frames 20-20 failed" \
        in proc.stderr
    assert "Traceback" not in proc.stderr and "MPI_FINALIZE" not in proc.stderr, proc.stderr


@pytest.mark.mpi
def test_dask_mpi_refusals_are_said_once(layouts):
    """Every rank checks the options before dask-mpi starts: a refusal was printed once
    per rank; rank 0 says it once, and names the ranks of one that only some
    ranks gave."""
    require_mpi()
    pytest.importorskip("dask_mpi")
    proc = mpirun(3, h5mdx_argv("rmsd", layouts["chunk10"], "--scheduler", "dask-mpi",
                                "--select", "name CA"), timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("h5mdx rmsd: --select 'name CA' needs --topology") == 1, \
        proc.stderr
    code = ("import sys\nfrom h5mdx.mpi import comm_world\n"
            "from h5mdx.mpi.launch import refused_on_any_rank\n"
            "rank = comm_world().Get_rank()\n"
            "refused = refused_on_any_rank('cannot see F\\n' if rank else None)\n"
            "print(f'rank {rank} refused {refused}')\n")
    proc = mpirun(3, ["-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot see F") == 1 and "(ranks 1-2 of 3) cannot see F" in \
        proc.stderr
    # the ranks' lines come through mpirun as it forwards them, at times run together
    assert sorted(re.findall(r"rank \d refused (?:True|False)", proc.stdout)) == [
        f"rank {r} refused True" for r in range(3)], proc.stdout


@pytest.mark.mpi
def test_a_rank_whose_checks_raise_does_not_leave_the_others_waiting():
    """The ranks of a dask-mpi job agree on a refusal with one allgather: a rank whose
    checks raised (a file only it cannot read) never reached it, and the others waited
    for it for ever (mpirun -n 3 hung). It takes part, then raises its error."""
    require_mpi()
    code = ("import sys\nimport h5mdx.cli.rmsd as r\nfrom h5mdx.cli import main\n"
            "from h5mdx.mpi import comm_world\n"
            "def checks(args):\n"
            "    if comm_world().Get_rank() == 1:\n"
            "        raise OSError('rank 1 cannot read x.h5md')\n"
            "    return False\n"
            "r._refused = checks\n"
            "sys.exit(main(['rmsd', 'x.h5md', '--scheduler', 'dask-mpi']))\n")
    proc = mpirun(3, ["-c", code], timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.count("h5mdx rmsd: error: rank 1 cannot read x.h5md") == 1, proc.stderr


def test_the_summary_s_run_time_is_the_longest_rank_whatever_the_nodes_clocks(capsys):
    """Two ranks of 1.0 s on nodes whose clocks are 0.3 s apart: the summary said 1.300 s
    (the span of their start and stop times) and 77 frames/s."""
    from h5mdx.mpi import rmsd as m

    recs = [{"rank": r, "frame_start": 50 * r, "frame_stop": 50 * r + 50,
             "t_start": 100.0 + 0.3 * r, "t_stop": 101.0 + 0.3 * r, "wall": 1.0,
             "t_io": 0.4, "t_compute": 0.4} for r in range(2)]
    res = SimpleNamespace(records=recs, rmsd=np.linspace(0.0, 1.0, 100), unit=None, files={})
    m._summary(res, None)
    assert "RMSD of 100 frames on 2 rank(s) in 1.000 s (100 frames/s;" in capsys.readouterr().out


def test_times_in_ns_are_the_decimals_the_engine_gives():
    """mpi-rmsd's times in ns, put in ps, held float noise (0.0041 ns: 4.1000000000000005
    ps in the .nc output) where the h5md engine gives 4.1."""
    from h5mdx.mpi.rmsd import _in_base_unit

    times, unit = _in_base_unit(np.array([0.0, 0.0041, 0.0049]), "ns", "t.h5md",
                                "the times are", decimals=True)
    assert unit == "ps" and times.tolist() == [0.0, 4.1, 4.9]


def _boxed_adk(tmp_path, adk_positions):
    """adk's frames in nm in a 3.5 nm cubic box (an H5MD file), and MDAnalysis' Universe
    of the PSF/DCD in the same box."""
    import MDAnalysis as mda
    from MDAnalysis.transformations.boxdimensions import set_dimensions
    from MDAnalysisTests.datafiles import DCD, PSF

    from h5mdx.testing import write_h5md

    path = write_h5md(
        tmp_path / "boxed.h5md",
        {"all": {"position": {"value": adk_positions / 10, "step": 1, "time": 1.0,
                              "unit": "nm"}}},
        box={"all": {"dimension": 3, "edges": {"value": np.full(3, 3.5), "unit": "nm"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
        u.trajectory.add_transformations(set_dimensions([35.0, 35.0, 35.0, 90.0, 90.0, 90.0]))
    return path, u


def test_dask_mpi_selection_by_distance_in_the_files_box(tmp_path, adk_positions):
    """h5mdx rmsd --scheduler dask-mpi made a selection by distance without the file's
    box (h5mdx.rmsd of the positions alone), unlike the other schedulers."""
    from MDAnalysis.analysis import rms
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.mpi.launch import file_rmsd

    path, u = _boxed_adk(tmp_path, adk_positions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = rms.RMSD(u, select="around 3 resid 1").run().results.rmsd[:, 2]
    got = file_rmsd(path, topology=PSF, group=None, convert_units=True,
                    select="around 3 resid 1", reference=0)
    np.testing.assert_allclose(got.values, expected, atol=1e-4)


def test_mpi_rmsd_selection_by_position_takes_lengths_alone(tmp_path):
    """mpi-rmsd --select 'around 3 resid 1' on positions in a unit of time took them
    as lengths (the unit's factor, whatever its dimension); it is the h5md engine's rule
    now: an error naming the dataset and its unit."""
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.mpi.rmsd import _select
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "ps.h5md", {"all": {"position": {
        "value": np.zeros((2, 3341, 3), np.float32), "step": 1, "time": 1.0, "unit": "ps"}}})
    with pytest.raises(ValueError, match=r"ps.h5md \[/particles/all/position\] is in 'ps'"):
        _select(PSF, "around 3 resid 1", None, path, None, 0)


def test_mpi_rmsd_selection_by_position_on_the_reference_frame(tmp_path, adk_positions):
    """mpi-rmsd --select 'around 3 resid 1' failed ("AtomGroup has no attribute
    dimensions"); now made on the reference frame, in Angstrom, in the file's box."""
    from MDAnalysisTests.datafiles import PSF

    from h5mdx.mpi.rmsd import _select

    path, u = _boxed_adk(tmp_path, adk_positions)
    for select, frame in (("around 3 resid 1", 5), ("prop z < 0", 40)):
        u.trajectory[frame]
        idx, masses, n = _select(PSF, select, None, path, None, frame)
        np.testing.assert_array_equal(idx, u.select_atoms(select).indices)
        assert masses is None and n == 3341


def test_dask_mpi_rows_of_a_worker_of_unknown_rank_are_said():
    """A dask-mpi timing row whose worker is not in the worker-to-rank map (not named
    after its rank, or gone before the map was taken) got rank NaN and no word. Its rank
    is left empty and a warning names the worker, once."""
    import pandas as pd

    from h5mdx.mpi.launch import with_ranks

    records = pd.DataFrame({"worker": ["tcp://a:1", "tcp://b:2", "tcp://gone:3",
                                       "tcp://gone:3"], "wall": [1.0, 2.0, 3.0, 4.0]})
    with pytest.warns(RuntimeWarning, match=r"^2 timing record\(s\) of 1 dask-mpi worker\(s\) "
                                            r"whose MPI rank is not known \(tcp://gone:3\)") \
            as said:
        frame = with_ranks(records, {"tcp://a:1": 2, "tcp://b:2": 3})
    assert len(said) == 1
    assert frame["rank"].tolist()[:2] == [2, 3] and frame["rank"].isna().tolist() == [
        False, False, True, True]
    assert "rank" not in records  # the records given are left as they were
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert with_ranks(records[:2], {"tcp://a:1": 2, "tcp://b:2": 3})["rank"].tolist() \
            == [2, 3]


def test_a_unit_the_series_cannot_be_put_in_names_the_dataset(tmp_path):
    """mpi-rmsd keeps a series whose unit it cannot read, with a warning that named the
    file alone and said 'the series is left in' of the times too. It names the file, the
    dataset and what is left as it is."""
    from h5mdx.mpi.rmsd import MPIRMSDOptions, _result
    from h5mdx.testing import write_h5md

    path = write_h5md(tmp_path / "units.h5md", {"trajectory": {"position": {
        "value": np.zeros((3, 2, 3)), "step": np.arange(3), "time": np.arange(3) * 2.0,
        "unit": "furlongz", "time_unit": "fortnightz"}}})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with h5py.File(path, "r") as f:
            source = position_source(f)
        res = _result(MPIRMSDOptions(path), source, np.array([0.0, 1.0, 2.0]), [])
    texts = [str(w.message) for w in said]
    where = f"{path} [/particles/trajectory/position"
    assert any(t.startswith(f"{where}/value]: ") and t.endswith(
        "; the RMSD is left in 'furlongz'") for t in texts), texts
    assert any(t.startswith(f"{where}/time]: ") and t.endswith(
        "; the times are left in 'fortnightz'") for t in texts), texts
    assert res.unit == "furlongz" and res.time_unit == "fortnightz"
    np.testing.assert_array_equal(res.rmsd, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(res.time, [0.0, 2.0, 4.0])


def test_a_worker_frozen_at_the_dask_mpi_warm_up_is_named_and_the_run_goes_on(monkeypatch):
    """The kernel's warm-up on every worker at a dask-mpi start (``client.run``) had no
    time limit: a frozen rank held the whole job without a word. Each answer is now
    awaited for a bounded time; the workers that did not answer are named with their
    ranks (dask-mpi names its workers after them), and the others' seconds are kept."""
    import importlib

    distributed = pytest.importorskip("distributed")
    from h5mdx.mpi.launch import warm_up_workers

    capture_module = importlib.import_module("h5mdx.timing.capture")
    monkeypatch.setattr(capture_module, "ANSWER_TIMEOUT_S", 1.0)

    def warm_up(dask_worker=None):
        import time as _time

        if dask_worker.name == 1:  # a frozen rank
            _time.sleep(4.0)
        return 0.25

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        frozen = next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
                      if w["name"] == 1)
        t0 = time.monotonic()
        with pytest.warns(RuntimeWarning, match=rf"dask-mpi: 1 worker\(s\) did not load the "
                          rf"RMSD kernel at start-up within 1 s \(rank 1 \({frozen}\): "
                          rf"{frozen} did not answer within 1 s\)") as said:
            warm = warm_up_workers(client, warm_up)
        assert time.monotonic() - t0 < 3.5
        assert len(said) == 1
        assert list(warm.values()) == [0.25] and frozen not in warm
