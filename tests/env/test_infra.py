"""The test infrastructure itself: mpirun with parallel HDF5, and jobs on the local SLURM.

These run for real whenever the components exist (``bash scripts/test.sh`` installs them as
root); with ``H5MDX_REQUIRE_MPI=1`` / ``H5MDX_REQUIRE_SLURM=1`` (CI) a missing component is a
failure, not a skip.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from infra import (
    BoundedTimeout,
    mpirun_command,
    require_mpi,
    require_slurm,
    run_bounded,
    run_mpi,
    sbatch,
    venv_python,
)

#: Rank r reads its balanced slab of /data with the mpio driver (independently, or with a
#: collective read_direct), rank 0 gathers the slabs with Gatherv and compares them to a
#: serial read of the same file; it prints the slab of every rank (in rank order) and OK.
MPIO_SCRIPT = textwrap.dedent(
    '''
    import sys

    import h5py
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    path, mode = sys.argv[1], sys.argv[2]
    assert h5py.get_config().mpi

    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        dset = f["data"]
        n, shape = dset.shape[0], dset.shape[1:]
        counts = np.array([n // size + (r < n % size) for r in range(size)])
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        a, b = int(starts[rank]), int(starts[rank] + counts[rank])
        local = np.empty((b - a, *shape), dtype=dset.dtype)
        if mode == "collective":
            with dset.collective:
                dset.read_direct(local, np.s_[a:b], np.s_[0:b - a])
        else:
            local[...] = dset[a:b]
    # one process prints (ranks writing to the same pipe may interleave within a line)
    slabs = comm.gather(f"{a}:{b}", root=0)

    row = int(np.prod(shape))
    recv = np.empty((n, *shape), dtype=local.dtype) if rank == 0 else None
    comm.Gatherv(local, (recv, counts * row, starts * row, MPI.FLOAT) if rank == 0 else None,
                 root=0)
    comm.Barrier()
    if rank == 0:
        with h5py.File(path, "r") as f:
            serial = f["data"][:]
        assert np.array_equal(recv, serial), "gathered slabs differ from the serial read"
        print("slabs " + " ".join(slabs))
        print(f"OK size={size} frames={n} sum={float(recv.astype(np.float64).sum()):.6f}")
    '''
)

N_FRAMES, N_ATOMS = 103, 40  # uneven split over 2 and 4 ranks, several chunks


@pytest.fixture(scope="module")
def mpio_files(tmp_path_factory):
    """A chunked float32 dataset and the SPMD script that reads it with MPI-IO."""
    tmp = tmp_path_factory.mktemp("mpio")
    data = np.random.default_rng(7).random((N_FRAMES, N_ATOMS, 3), dtype=np.float32)
    path = tmp / "slabs.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(10, N_ATOMS, 3))
    script = tmp / "mpio_gather.py"
    script.write_text(MPIO_SCRIPT)
    return path, script, data


def _check_mpio_output(proc: subprocess.CompletedProcess, n: int, data: np.ndarray) -> None:
    assert proc.returncode == 0, f"mpirun failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    slab_lines = [line.split()[1:] for line in lines if line.startswith("slabs ")]
    assert len(slab_lines) == 1, proc.stdout
    ranges = [tuple(int(x) for x in slab.split(":")) for slab in slab_lines[0]]
    assert len(ranges) == n, proc.stdout
    # the slabs tile the frames exactly, without overlap, in balanced sizes
    assert ranges[0][0] == 0 and ranges[-1][1] == N_FRAMES
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(ranges))
    assert {b - a for a, b in ranges} <= {N_FRAMES // n, N_FRAMES // n + 1}
    ok = [line for line in lines if line.startswith("OK ")]
    assert ok == [f"OK size={n} frames={N_FRAMES} sum={float(data.astype(np.float64).sum()):.6f}"]


# ------------------------------------------------------------------------------------ helpers


def test_mpirun_command_shape():
    cmd = mpirun_command(3, "script.py", "--flag")
    assert cmd[1:3] == ["-n", "3"]
    assert cmd[-3:] == [venv_python(), "script.py", "--flag"]
    assert mpirun_command(2, "-c", "pass")[-3:] == [venv_python(), "-c", "pass"]
    assert mpirun_command(2, "/bin/true")[-1] == "/bin/true"


def test_run_bounded_kills_process_group(tmp_path):
    # a background child must go too: the whole process group is killed
    marker, pidfile = tmp_path / "finished", tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; sleep 300; touch {marker}"
    t0 = time.monotonic()
    with pytest.raises(BoundedTimeout) as info:
        run_bounded(["bash", "-c", script], timeout=1.0)
    assert time.monotonic() - t0 < 15
    assert "timed out after 1.0 s" in str(info.value)
    stat = Path("/proc") / pidfile.read_text().strip() / "stat"

    def running() -> bool:
        try:  # a zombie (state Z) waiting to be reaped by init counts as gone
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    for _ in range(50):
        if not running():
            break
        time.sleep(0.1)
    assert not running(), "the background child survived the timeout"
    assert not marker.exists()


def test_run_bounded_returns_output():
    proc = run_bounded([venv_python(), "-c", "import sys; print('out'); sys.exit(3)"], timeout=60)
    assert proc.returncode == 3
    assert proc.stdout.strip() == "out"


# ---------------------------------------------------------------------------------------- MPI


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("n", "mode"), [(2, "independent"), (4, "independent"), (2, "collective")]
)
def test_mpirun_mpio_slabs_gathered(mpio_files, n, mode):
    require_mpi()
    path, script, data = mpio_files
    proc = run_mpi(n, [script, path, mode], timeout=180)
    _check_mpio_output(proc, n, data)


@pytest.mark.mpi
def test_mpirun_failing_rank_exits_promptly(tmp_path):
    # under ``python -m mpi4py`` an uncaught exception on one rank aborts the whole job
    require_mpi()
    script = tmp_path / "fail.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank == 1:\n"
        "    raise RuntimeError('rank 1 fails on purpose')\n"
        "comm.Barrier()\n"
    )
    t0 = time.monotonic()
    proc = run_mpi(2, ["-m", "mpi4py", script], timeout=120)
    assert proc.returncode != 0
    assert "rank 1 fails on purpose" in proc.stderr
    assert time.monotonic() - t0 < 60


def _processes_running(needle: str) -> list[int]:
    """Pids whose command line contains ``needle`` (read from /proc, nothing is signalled)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in cmdline and state != "Z":
                pids.append(int(entry.name))
    return pids


@pytest.mark.mpi
def test_run_mpi_hung_job_is_killed(tmp_path):
    # rank 1 leaves (finalising) while rank 0 waits in a Barrier forever: a hang that only
    # the timeout ends; mpirun and every rank must be gone afterwards
    require_mpi()
    script = tmp_path / "hang.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank == 0:\n"
        "    comm.Barrier()\n"
    )
    t0 = time.monotonic()
    with pytest.raises(BoundedTimeout):
        run_mpi(2, script, timeout=8)
    assert time.monotonic() - t0 < 30
    for _ in range(50):
        if not _processes_running(str(script)):
            break
        time.sleep(0.1)
    assert _processes_running(str(script)) == []


# -------------------------------------------------------------------------------------- SLURM


@pytest.mark.slurm
def test_sbatch_wrap_runs(tmp_path):
    require_slurm()
    out = tmp_path / "wrap.out"
    job_id, proc = sbatch(
        ["-o", out, "-t", "5", "--mem=200", "--wrap", "echo h5mdx-sbatch-ok job=$SLURM_JOB_ID"],
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert job_id.isdigit()
    assert out.read_text().strip() == f"h5mdx-sbatch-ok job={job_id}"


@pytest.mark.slurm
@pytest.mark.mpi
def test_sbatch_mpirun_two_ranks(mpio_files, tmp_path):
    require_slurm()
    require_mpi()
    path, script, data = mpio_files
    out = tmp_path / "mpi-job.out"
    launch = " ".join(mpirun_command(2, script, path, "independent"))
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\n"
        "#SBATCH -n 2\n"
        f"#SBATCH -o {out}\n"
        "#SBATCH -t 5\n"
        "#SBATCH --mem-per-cpu=500\n"
        'echo "tasks=$SLURM_NTASKS"\n'
        f"{launch}\n"
    )
    job_id, proc = sbatch([job], cwd=tmp_path, timeout=180)
    text = out.read_text()
    assert proc.returncode == 0, f"{proc.stderr}\n{text}"
    assert job_id.isdigit()
    assert text.splitlines()[0] == "tasks=2"
    _check_mpio_output(
        subprocess.CompletedProcess(job, 0, "\n".join(text.splitlines()[1:]), ""), 2, data
    )


# ------------------------------------------------------------------------------ requirements


def test_require_mpi_fails_when_required(monkeypatch):
    import infra

    monkeypatch.setattr(infra, "mpi_missing", lambda: ["mpirun is not on PATH"])
    monkeypatch.setenv("H5MDX_REQUIRE_MPI", "1")
    with pytest.raises(pytest.fail.Exception, match="H5MDX_REQUIRE_MPI is set .*mpirun"):
        infra.require_mpi()
    monkeypatch.delenv("H5MDX_REQUIRE_MPI")
    with pytest.raises(pytest.skip.Exception, match="scripts/setup.sh --mpi"):
        infra.require_mpi()


def test_require_slurm_without_commands(monkeypatch, tmp_path):
    import infra

    monkeypatch.setenv("PATH", str(tmp_path))
    assert any("sbatch is not on PATH" in m for m in infra.slurm_missing())
    monkeypatch.setenv("H5MDX_REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="slurm-local.sh start"):
        infra.require_slurm()
    monkeypatch.setenv("H5MDX_REQUIRE_SLURM", "0")
    with pytest.raises(pytest.skip.Exception):
        infra.require_slurm()


def test_ci_requirements_are_met():
    """Under CI (H5MDX_REQUIRE_*), the components are really there."""
    import infra

    if os.environ.get("H5MDX_REQUIRE_MPI") == "1":
        assert infra.mpi_missing() == []
    if os.environ.get("H5MDX_REQUIRE_SLURM") == "1":
        assert infra.slurm_missing() == []
    if not any(os.environ.get(v) == "1" for v in ("H5MDX_REQUIRE_MPI", "H5MDX_REQUIRE_SLURM")):
        pytest.skip("neither H5MDX_REQUIRE_MPI nor H5MDX_REQUIRE_SLURM is set")


def test_scripts_are_valid_bash():
    root = Path(__file__).resolve().parents[2]
    for script in [*sorted((root / "scripts").glob("*.sh")), root / ".ci" / "run"]:
        if script.exists():
            proc = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
            assert proc.returncode == 0, f"{script}: {proc.stderr}"


def test_environment_yml_has_parallel_stack():
    yaml = pytest.importorskip("yaml")
    root = Path(__file__).resolve().parents[2]
    env = yaml.safe_load((root / "environment.yml").read_text())
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    assert "conda-forge" in env["channels"]
    assert "h5py=*=mpi_openmpi*" in deps
    for name in ("openmpi", "mpi4py", "dask-mpi", "dask-jobqueue", "xarray", "mdanalysis"):
        assert name in deps
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip


def test_reliability_benchmark_names_the_test_modules_that_exist():
    """``benchmarks/bench_reliability.py`` runs one test module per topic: each exists (the
    tests moved to tests/reliability/, the script ran none and wrote an empty report)."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "bench_reliability", root / "benchmarks" / "bench_reliability.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for topic in bench.TOPICS:
        assert bench.test_file(topic).is_file(), topic
