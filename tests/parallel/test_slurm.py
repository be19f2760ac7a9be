"""Real SLURM: dask workers as SLURM jobs, and an sbatch MPI job of ``h5mdx mpi-rmsd``.

Needs a SLURM controller with an idle node (``bash scripts/slurm-local.sh start`` gives a
single-node cluster on localhost). Skips when SLURM is absent, unless
``H5MDX_REQUIRE_SLURM=1`` is set (CI), in which case the tests fail. Every test is
bounded by timeouts and cancels the jobs it submitted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from infra import require_mpi, require_slurm, run_bounded

pytest.importorskip("dask_jobqueue")
distributed = pytest.importorskip("distributed")
xr = pytest.importorskip("xarray")

import h5mdx  # noqa: E402
from h5mdx.parallel import cluster  # noqa: E402
from h5mdx.timing import capture  # noqa: E402

pytestmark = pytest.mark.slurm

PSF = pytest.importorskip("MDAnalysisTests.datafiles").PSF

_GONE = {"ENDED", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"}


@pytest.fixture(autouse=True)
def _slurm(monkeypatch, tmp_path):
    require_slurm()
    # worker jobs write slurm-<id>.out into the submission directory
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def submitted():
    """Job ids a test submitted; whatever is still queued at the end is cancelled."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


def _wait_gone(ids, timeout=20.0):
    deadline = time.monotonic() + timeout
    states = cluster.job_states(ids)
    while time.monotonic() < deadline:
        states = cluster.job_states(ids)
        if all(state in _GONE for state, _ in states.values()):
            return states
        time.sleep(0.5)
    return states


def _scontrol(job_id):
    out = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True,
                         text=True, timeout=30, check=False).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def _partition():
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()
    default = [p for p in out if p.endswith("*")]
    return (default or out)[0].rstrip("*")


@pytest.fixture(scope="module")
def local_rmsd(adk_h5md_blocked):
    with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
        return h5mdx.rmsd(ds.position, select="name CA", frames_per_block=10).compute(
            scheduler="synchronous").values


def test_rmsd_on_two_slurm_worker_jobs(adk_h5md_blocked, local_rmsd, tmp_path, submitted):
    """Two one-core jobs compute the C-alpha RMSD equal to the local result; records carry
    the jobs' ids; walltime and partition reach the jobs."""
    queue = _partition()
    with cluster.slurm_client(jobs=2, cores=1, memory="1GiB", walltime="00:07:00",
                              queue=queue, log_directory=tmp_path / "logs",
                              timeout=90) as client:
        slurm_cluster = client.cluster
        ids = cluster.job_ids(slurm_cluster)
        submitted.extend(ids)
        assert len(ids) == 2
        script = slurm_cluster.job_script()
        assert "#SBATCH -t 00:07:00" in script and f"#SBATCH -p {queue}" in script
        assert cluster.HDF5_PROLOGUE in script
        for job_id in ids:
            info = _scontrol(job_id)
            assert info["TimeLimit"] == "00:07:00" and info["Partition"] == queue
            assert info["JobState"] == "RUNNING"
        # the workers really run inside the jobs, with HDF5 locking off
        env = client.run(lambda: (os.environ.get("SLURM_JOB_ID"),
                                  os.environ.get("HDF5_USE_FILE_LOCKING")))
        assert sorted(job for job, _ in env.values()) == sorted(ids)
        assert {lock for _, lock in env.values()} == {"FALSE"}

        with xr.open_dataset(adk_h5md_blocked, engine="h5md", topology=PSF) as ds:
            lazy = h5mdx.rmsd(ds.position, select="name CA", frames_per_block=10)
            with capture(backend="slurm", client=client) as run:
                result = client.compute(lazy).result()
            records = cluster.annotate_job_ids(run, client)
        assert cluster.worker_job_ids(client).keys() == env.keys()

    np.testing.assert_allclose(result.values, local_rmsd, rtol=0, atol=1e-10)
    assert result.sizes["time"] == 98 and abs(float(result[0])) < 1e-5
    assert len(records) == 10 and set(records["backend"]) == {"slurm"}
    assert set(records["slurm_job_id"]) <= set(ids)
    assert records["slurm_job_id"].notna().all()
    assert records["t_io"].notna().all() and records["t_compute"].notna().all()
    # the cluster released its jobs
    states = _wait_gone(ids)
    assert all(state in _GONE for state, _ in states.values()), states


def test_timeout_names_pending_jobs_and_releases_them(tmp_path, submitted):
    """More jobs than the node can run: a clear timeout message, then no job left."""
    cpus = int(subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                              timeout=30, check=True).stdout.split()[0].rstrip("+"))
    slurm_cluster = cluster.slurm(jobs=3, cores=cpus, processes=1, memory="1GiB",
                                  walltime="00:05:00", log_directory=tmp_path / "logs")
    try:
        with distributed.Client(slurm_cluster) as client:
            with pytest.raises(cluster.WorkerTimeoutError) as info:
                cluster.wait_for_workers(slurm_cluster, client, timeout=5)
            ids = cluster.job_ids(slurm_cluster)
            submitted.extend(ids)
    finally:
        left = cluster.release(slurm_cluster)
    message = str(info.value)
    assert len(ids) == 3 and info.value.wanted == 3 and info.value.n_workers < 3
    assert message.startswith(f"{info.value.n_workers} of 3 workers after ")
    pending = [j for j, (state, _) in info.value.states.items() if state == "PENDING"]
    assert len(pending) >= 2  # one job of `cpus` cores fills the node
    assert "PENDING (" in message and all(j in message for j in pending)
    assert "Resources" in message or "Priority" in message
    assert set(left) <= set(ids)
    states = _wait_gone(ids)
    assert all(state in _GONE for state, _ in states.values()), states


def test_slurm_rejects_bad_partition_at_once():
    with pytest.raises(cluster.SlurmError, match="SLURM rejects the worker jobs"):
        cluster.slurm(jobs=1, queue="no-such-partition-h5mdx", cores=1, memory="1GiB")


_CHILD = """
import sys, time
from h5mdx.parallel import cluster
c = cluster.slurm(jobs=1, cores=1, memory="1GiB", walltime="00:05:00",
                  log_directory=sys.argv[1])
t0 = time.monotonic()
while not cluster.job_ids(c) and time.monotonic() - t0 < 30:
    time.sleep(0.1)
print(",".join(cluster.job_ids(c)), flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_jobs_released_when_the_process_is_interrupted(sig, tmp_path, submitted):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline().strip()
        ids = [i for i in line.split(",") if i]
        submitted.extend(ids)
        assert len(ids) == 1, proc.stderr.read() if proc.poll() is not None else line
        proc.send_signal(sig)
        proc.wait(timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode != 0
    states = _wait_gone(ids)
    assert all(state in _GONE for state, _ in states.values()), states


def test_sbatch_mpi_rmsd_job(adk_h5md_blocked, local_rmsd, tmp_path, submitted):
    """``h5mdx slurm-script mpi-rmsd ... --submit``: 2 MPI ranks in one job; per-rank
    timings collected and summarised; the RMSD equals the dask result."""
    require_mpi()
    h5mdx_exe = Path(sys.executable).with_name("h5mdx")
    cmd = [str(h5mdx_exe), "slurm-script", "mpi-rmsd", adk_h5md_blocked, "--topology", PSF,
           "--select", "name CA", "--ntasks", "2", "--time", "00:05:00", "--submit",
           "--timeout", "150"]
    proc = run_bounded(cmd, timeout=200, cwd=tmp_path)
    job_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("submitted SLURM job")]
    if job_lines:
        submitted.append(job_lines[0].split()[3])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert job_lines, proc.stderr
    job_id = submitted[-1]
    assert f"SLURM job {job_id}: COMPLETED" in proc.stdout
    assert ("stragglers (a task is a straggler when > 1.5x the median of the other tasks and "
            "> 50 ms longer, warm-up excluded)") in proc.stdout
    out = tmp_path / f"h5mdx-mpi-rmsd-{job_id}"
    from h5mdx.timing.records import load

    records, meta = load(out / "timing.csv")
    assert len(records) == 2 and set(records["backend"]) == {"mpi-io"}
    assert sorted(records["rank"].tolist()) == [0, 1]
    assert set(records["slurm_job_id"]) == {job_id}
    for phase in ("t_init_top", "t_init_traj", "t_io", "t_compute", "t_wait", "t_comm_gather"):
        assert records[phase].notna().all(), phase
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        series = np.genfromtxt(out / "rmsd.csv", delimiter=",", names=True)
    np.testing.assert_allclose(series["rmsd"], local_rmsd, rtol=0, atol=1e-6)
    log = (tmp_path / f"h5mdx-mpi-rmsd-{job_id}.out").read_text()
    assert "2 rank(s)" in log


def test_command_line_counts_the_workers_that_ran(adk_h5md_blocked, local_rmsd, tmp_path):
    """``h5mdx rmsd --scheduler slurm --jobs 1`` reports and records the one worker that
    ran (it said 2, the default of --workers, and the records' imbalance read 2.0; found
    by an audit)."""
    from h5mdx.timing import records

    proc = run_bounded(
        [sys.executable, "-m", "h5mdx", "rmsd", str(adk_h5md_blocked), "--topology", PSF,
         "--select", "name CA", "--scheduler", "slurm", "--jobs", "1", "--cores", "1",
         "--memory", "1GiB", "--walltime", "00:07:00", "--no-progress",
         "--timing", str(tmp_path / "timing"), "--out", str(tmp_path / "r.csv")],
        timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "on slurm with 1 worker " in proc.stdout, proc.stdout
    frame, _ = records.load(tmp_path / "timing" / "timing.csv")
    assert set(frame["n_workers"]) == {1}
    assert frame["t_warmup"].max() < 0.5  # the worker loaded the kernel when it joined
    got = np.genfromtxt(tmp_path / "r.csv", delimiter=",", names=True)["rmsd"]
    np.testing.assert_allclose(got, local_rmsd, rtol=0, atol=1e-4)
