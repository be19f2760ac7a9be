"""Job-script and message tests of h5mdx.parallel.cluster and h5mdx.parallel.batch (no SLURM needed)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dask_jobqueue")
dask = pytest.importorskip("dask")

from h5mdx.parallel import cluster  # noqa: E402
from h5mdx.parallel.batch import mpi_rmsd_script, straggler_summary  # noqa: E402
from h5mdx.parallel.cluster import (  # noqa: E402
    HDF5_PROLOGUE,
    WorkerTimeoutError,
    job_script_preview,
    job_states,
    slurm_options,
    wait_for_workers,
)


@pytest.fixture(autouse=True)
def _no_sinfo(monkeypatch):
    """The interface default must not depend on the machine's SLURM in these tests."""
    monkeypatch.setattr(cluster, "_INTERFACE_CACHE", {"value": None})
    monkeypatch.delenv(cluster.INTERFACE_ENV, raising=False)


def _lines(script: str) -> list[str]:
    return script.splitlines()


def test_sbatch_lines_reach_the_job_script():
    script = job_script_preview(cores=2, memory="3GiB", walltime="01:02:03", queue="short",
                                account="proj1", interface="lo")
    lines = _lines(script)
    assert lines[0].startswith("#!")
    for expected in ("#SBATCH -t 01:02:03", "#SBATCH -p short", "#SBATCH -A proj1",
                     "#SBATCH --cpus-per-task=2", "#SBATCH --mem=3G", "#SBATCH -n 1"):
        assert expected in lines, (expected, script)
    assert HDF5_PROLOGUE in lines
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert worker.startswith(sys.executable + " ")
    # one single-threaded worker process per core, on the loopback interface
    assert "--nworkers 2" in worker and "--nthreads 1" in worker
    assert "--interface lo" in worker
    # the prologue comes after the directives and before the worker
    assert lines.index("#SBATCH -t 01:02:03") < lines.index(HDF5_PROLOGUE) < lines.index(worker)


def test_defaults_one_core_two_gib_and_unique_job_name():
    opts = slurm_options(interface=None)
    assert opts["cores"] == 1 and opts["processes"] == 1 and opts["memory"] == "2GiB"
    assert opts["job_script_prologue"] == [HDF5_PROLOGUE]
    assert opts["job_name"].startswith("h5mdx-dask-")
    assert opts["job_name"] != slurm_options(interface=None)["job_name"]
    assert opts["scheduler_options"] == {"dashboard_address": ":0"}
    # no h5mdx default: left to dask-jobqueue, which reads its config itself
    for key in ("walltime", "queue", "account", "python", "log_directory",
                "job_extra_directives"):
        assert key not in opts, key
    script = job_script_preview(interface=None, job_name="h5mdx-dask-test")
    lines = _lines(script)
    assert "#SBATCH -J h5mdx-dask-test" in lines
    assert f"#SBATCH -t {dask.config.get('jobqueue.slurm.walltime')}" in lines
    assert any(line.startswith(sys.executable + " ") for line in lines)
    assert "--interface" not in script


def test_dask_config_is_used_and_arguments_override_it():
    config = {
        "jobqueue.slurm.walltime": "02:00:00",
        "jobqueue.slurm.queue": "cfgq",
        "jobqueue.slurm.account": "cfgacct",
        "jobqueue.slurm.cores": 4,
        "jobqueue.slurm.memory": "8GiB",
        "jobqueue.slurm.job-script-prologue": ["module load hdf5"],
        "jobqueue.slurm.job-extra-directives": ["--exclusive"],
        "jobqueue.slurm.interface": "ib0",
    }
    with dask.config.set(config):
        lines = _lines(job_script_preview())
        assert "#SBATCH -t 02:00:00" in lines and "#SBATCH -p cfgq" in lines
        assert "#SBATCH -A cfgacct" in lines and "#SBATCH --cpus-per-task=4" in lines
        assert "#SBATCH --mem=8G" in lines and "#SBATCH --exclusive" in lines
        # the config's prologue is kept and the HDF5 line added after it
        assert lines.index("module load hdf5") < lines.index(HDF5_PROLOGUE)
        assert any("--interface ib0" in line for line in lines)
        opts = slurm_options()
        assert opts["interface"] == "ib0"
        # given scheduler options extend the config's
        with dask.config.set({"jobqueue.slurm.scheduler-options": {"port": 8790}}):
            sched = slurm_options(scheduler_options={"host": "10.0.0.1"})["scheduler_options"]
        assert sched == {"port": 8790, "host": "10.0.0.1", "dashboard_address": ":0"}

        lines = _lines(job_script_preview(walltime="00:05:00", queue="debug", cores=1,
                                          memory="1GiB", interface="lo",
                                          job_script_prologue=["echo hi"]))
        assert "#SBATCH -t 00:05:00" in lines and "#SBATCH -p debug" in lines
        assert "#SBATCH -t 02:00:00" not in lines and "#SBATCH -p cfgq" not in lines
        assert "module load hdf5" not in lines and lines.count(HDF5_PROLOGUE) == 1
        assert "echo hi" in lines
        assert any("--interface lo" in line for line in lines)


def test_a_prologue_that_sets_locking_is_not_overridden():
    lines = _lines(job_script_preview(
        interface=None, job_script_prologue=["export HDF5_USE_FILE_LOCKING=TRUE"]))
    assert "export HDF5_USE_FILE_LOCKING=TRUE" in lines and HDF5_PROLOGUE not in lines


def test_interface_default_from_environment_and_single_node(monkeypatch):
    assert slurm_options()["interface"] is None
    monkeypatch.setattr(cluster, "_INTERFACE_CACHE", {"value": "lo"})
    assert slurm_options()["interface"] == "lo"
    monkeypatch.setenv(cluster.INTERFACE_ENV, "ib0")
    assert slurm_options()["interface"] == "ib0"
    # the config comes first
    with dask.config.set({"jobqueue.slurm.interface": "eth1"}):
        assert slurm_options()["interface"] == "eth1"
    # dask-jobqueue, not h5mdx, gives the scheduler the workers' interface (unless
    # scheduler_options names a host or an interface)
    opts = slurm_options(scheduler_options={"host": "10.0.0.1"})
    assert opts["scheduler_options"] == {"host": "10.0.0.1", "dashboard_address": ":0"}


def test_single_node_interface_compares_sinfo_nodes_with_this_host(monkeypatch):
    import socket

    here = socket.gethostname()
    monkeypatch.setattr(cluster, "_INTERFACE_CACHE", {})
    monkeypatch.setattr(cluster.shutil, "which", lambda exe: "/usr/bin/" + exe)
    answers = {"out": f"{here}\n"}
    monkeypatch.setattr(cluster, "_run", lambda cmd, timeout=30.0, stdin=None:
                        subprocess.CompletedProcess(cmd, 0, answers["out"], ""))
    assert cluster.single_node_interface() == "lo"
    monkeypatch.setattr(cluster, "_INTERFACE_CACHE", {})
    answers["out"] = f"{here}\nnode002\n"
    assert cluster.single_node_interface() is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"walltime": "1h"}, "not a SLURM time"),
        ({"cores": 0}, "at least 1"),
        ({"cores": 2, "processes": 3}, "between 1 and cores=2"),
        ({"cores": "many"}, "whole number"),
    ],
)
def test_bad_options_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        slurm_options(interface=None, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        # dask-jobqueue failed these with "TypeError: not all arguments converted during
        # string formatting" while formatting #SBATCH --mem
        ({"memory": "-1"}, "memory '-1' is -1 bytes per job: give at least 1 MiB"),
        ({"memory": "0"}, "memory '0' is 0 bytes"),
        ({"memory": "4"}, "memory '4' is 4 bytes .*a bare number is bytes"),
        ({"memory": 4}, "memory 4 is 4 bytes"),
        ({"memory": "4 gigs"}, "memory '4 gigs' is not a size: .*memory='4GiB'"),
        # taken as 2 cores and 2 processes in silence
        ({"cores": 2.5}, "cores must be a whole number, not 2.5"),
        ({"cores": 2, "processes": 1.5}, "processes must be a whole number, not 1.5"),
        ({"processes": "x"}, "processes must be a whole number, not 'x'"),
    ],
)
def test_bad_memory_and_fractions_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        slurm_options(interface=None, **kwargs)
    with pytest.raises(ValueError, match=match):
        job_script_preview(interface=None, **kwargs)


def test_memory_of_the_config_is_checked_too():
    with dask.config.set({"jobqueue.slurm.memory": "-1"}), \
            pytest.raises(ValueError, match="memory '-1' is -1 bytes"):
        slurm_options(interface=None)


@pytest.mark.parametrize(("memory", "mem"), [("4GB", "4G"), ("4 GiB", "4G"), ("4G", "4G"),
                                             ("1.5GiB", "2G"), (4 * 2**30, "4G"),
                                             ("1MiB", "1M")])
def test_memory_sizes_are_accepted(memory, mem):
    assert f"#SBATCH --mem={mem}" in job_script_preview(interface=None, memory=memory)


@pytest.mark.parametrize("walltime", ["30", "00:30:00", "1-00", "1-12:00", "2-00:00:00",
                                      "25:00:00", "UNLIMITED", "infinite"])
def test_slurm_time_formats_are_accepted(walltime):
    """SLURM's formats, and its words for no limit, which sbatch takes (on a partition
    without a limit) and which were refused as 'not a SLURM time'."""
    assert slurm_options(interface=None, walltime=walltime)["walltime"] == walltime
    assert f"#SBATCH --time={walltime}" in _lines(
        mpi_rmsd_script(["t.h5md"], ntasks=2, time_limit=walltime))


@pytest.mark.parametrize("walltime", ["unlimitedd", "1:2:3:4", "forever", "1-2-3"])
def test_times_slurm_refuses_are_refused(walltime):
    with pytest.raises(ValueError, match="not a SLURM time"):
        slurm_options(interface=None, walltime=walltime)


@pytest.mark.parametrize(("walltime", "said"), [
    ("1:00", "walltime '1:00' is 1 min 0 s (SLURM reads M:SS); for 1 h write '1:00:00'"),
    ("2:30", "walltime '2:30' is 2 min 30 s (SLURM reads M:SS); for 2 h 30 min write "
             "'2:30:00'"),
])
def test_a_walltime_of_minutes_and_seconds_is_said_as_slurm_reads_it(walltime, said):
    """walltime='1:00' (meant as an hour) went to SLURM, which reads M:SS: the workers'
    jobs ended after one minute, in the middle of the run."""
    with pytest.warns(UserWarning, match=re.escape(said)) as caught:
        assert slurm_options(interface=None, walltime=walltime)["walltime"] == walltime
    assert len(caught) == 1 and caught[0].filename == __file__
    with pytest.warns(UserWarning, match=re.escape(said)):
        script = job_script_preview(interface=None, walltime=walltime)
    assert f"#SBATCH -t {walltime}" in _lines(script)
    with pytest.warns(UserWarning, match=re.escape(said)):
        mpi_rmsd_script(["t.h5md"], ntasks=2, time_limit=walltime)


@pytest.mark.parametrize("walltime", ["5:00", "10:30", "30:00"])
def test_a_walltime_of_minutes_a_worker_job_may_ask_for_is_taken_quietly(walltime):
    """"30:00" is half an hour as SLURM users write it: said only where so short a job
    is surely an hour misread (up to 4 minutes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert slurm_options(interface=None, walltime=walltime)["walltime"] == walltime


def _fake_run(stdout, returncode=0, stderr=""):
    def run(cmd, timeout=30.0, stdin=None):
        return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)

    return run


def test_job_states_parses_squeue(monkeypatch):
    monkeypatch.setattr(cluster, "_run", _fake_run(
        "12 PENDING Resources\n13 RUNNING None\n"))
    assert job_states(["12", "13", "14"]) == {
        "12": ("PENDING", "Resources"), "13": ("RUNNING", ""), "14": ("ENDED", "")}
    monkeypatch.setattr(cluster, "_run", _fake_run(
        "", 1, "slurm_load_jobs error: Invalid job id specified"))
    assert job_states(["99"]) == {"99": ("ENDED", "")}
    monkeypatch.setattr(cluster, "_run", _fake_run("", 1, "Unable to contact slurm controller"))
    state, reason = job_states(["99"])["99"]
    assert state == "UNKNOWN" and "Unable to contact" in reason
    assert job_states([]) == {}


def test_a_controller_that_does_not_answer_is_not_the_options_fault(monkeypatch):
    """sbatch --test-only failing because slurmctld is down says so, not that SLURM
    rejects the jobs for their queue or account; a real rejection
    still names the options."""
    from h5mdx.parallel.cluster import SlurmError

    monkeypatch.setattr(cluster.shutil, "which", lambda name: "/usr/bin/" + name)
    jq = cluster._import_jobqueue()
    options = cluster.slurm_options(interface="lo")
    monkeypatch.setattr(cluster, "_run", _fake_run(
        "", 1, "sbatch: error: Batch job submission failed: Unable to contact slurm "
        "controller (connect failure)"))
    with pytest.raises(SlurmError, match=r"controller does not answer.*scontrol ping") as err:
        cluster._preflight(options, jq)
    assert "rejects" not in str(err.value)
    monkeypatch.setattr(cluster, "_run", _fake_run(
        "", 1, "sbatch: error: invalid partition specified: nope"))
    with pytest.raises(SlurmError, match="SLURM rejects the worker jobs: .*invalid partition"):
        cluster._preflight(options, jq)


class _Client:
    def __init__(self, n):
        self.n = n

    def scheduler_info(self, n_workers=-1):
        return {"workers": {f"tcp://w{i}": {} for i in range(self.n)}}


def _cluster(*ids, processes=1):
    return SimpleNamespace(
        workers={f"w{i}": SimpleNamespace(job_id=j) for i, j in enumerate(ids)},
        worker_spec=dict.fromkeys(ids),
        new_spec={"options": {"processes": processes}},
    )


def test_timeout_message_names_jobs_states_and_reasons(monkeypatch):
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {
        "12": ("PENDING", "Resources"), "13": ("PENDING", "Resources")})
    with pytest.raises(WorkerTimeoutError) as info:
        wait_for_workers(_cluster("12", "13"), _Client(0), timeout=0.2, poll=0.05)
    message = str(info.value)
    assert message.startswith("0 of 2 workers after 0 s: jobs 12, 13 are PENDING (Resources)")
    assert "fewer or smaller jobs" in message
    assert info.value.wanted == 2 and info.value.n_workers == 0
    assert info.value.states["12"] == ("PENDING", "Resources")
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, OSError)


def test_timeout_message_mixed_states(monkeypatch):
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {
        "14": ("RUNNING", ""), "15": ("PENDING", "Resources"), "16": ("PENDING", "Priority")})
    with pytest.raises(WorkerTimeoutError) as info:
        wait_for_workers(_cluster("14", "15", "16", processes=2), _Client(2), timeout=0.1,
                         poll=0.05)
    message = str(info.value)
    assert message.startswith(
        "2 of 6 workers after 0 s: job 14 is RUNNING; job 15 is PENDING (Resources); "
        "job 16 is PENDING (Priority)")
    # the running job's workers connected: no hint about the network interface
    assert "interface" not in message


def test_running_jobs_without_workers_hint_at_interface(monkeypatch):
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {"7": ("RUNNING", "")})
    with pytest.raises(WorkerTimeoutError, match=r"0 of 1 workers .*job 7 is RUNNING.*interface"):
        wait_for_workers(_cluster("7"), _Client(0), timeout=0.1, poll=0.05)


def test_jobs_that_ended_fail_fast(monkeypatch):
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {"8": ("ENDED", "")})
    with pytest.raises(WorkerTimeoutError, match="job 8 is no longer queued") as info:
        wait_for_workers(_cluster("8"), _Client(0), timeout=30.0, poll=0.05)
    assert "read its output" in str(info.value)


@pytest.mark.parametrize("reason", ["PartitionTimeLimit", "PartitionConfig,Priority"])
def test_jobs_that_can_never_start_fail_fast(monkeypatch, reason):
    """Worker jobs pending for a reason no wait ends (a walltime above the partition's
    limit) were waited on for the whole timeout (--wait-timeout 3600 for a busy queue: an
    hour) before the error said why; it says so as soon as SLURM does. A job that waits
    its turn beside one that can never start is still waited on."""
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {
        "9": ("PENDING", reason), "10": ("ENDED", "")})
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match=rf"0 of 2 workers after \d+ s: job 10 is "
                       rf"no longer queued.*job 9 is PENDING \({reason}\)") as info:
        wait_for_workers(_cluster("9", "10"), _Client(0), timeout=30.0, poll=0.05)
    assert time.monotonic() - t0 < 10.0
    assert info.value.states["9"] == ("PENDING", reason)
    assert "partition" in str(info.value)
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {
        "9": ("PENDING", reason), "10": ("PENDING", "Priority")})
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="after 3 s"):
        wait_for_workers(_cluster("9", "10"), _Client(0), timeout=3.0, poll=0.05)
    assert time.monotonic() - t0 >= 3.0


def test_no_jobs_submitted_message():
    with pytest.raises(WorkerTimeoutError, match="0 of 1 workers .*no job was submitted"):
        wait_for_workers(_cluster(), _Client(0), n=1, timeout=0.1, poll=0.05)


def test_enough_workers_returns_at_once():
    assert wait_for_workers(_cluster("1", "2"), _Client(2), timeout=0.1) == 2


def test_cli_options_and_job_count(monkeypatch):
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=None)
    cluster.add_cli_arguments(parser)
    seen = {}

    def fake_client(jobs=1, timeout=0.0, **kwargs):
        seen.update(jobs=jobs, timeout=timeout, **kwargs)
        return "client-context"

    monkeypatch.setattr(cluster, "slurm_client", fake_client)
    args = parser.parse_args(["--workers", "5", "--cores", "2", "--walltime", "00:09:00",
                              "--queue", "q", "--slurm-timeout", "7"])
    assert cluster.slurm_client_from_args(args) == "client-context"
    assert seen["jobs"] == 3  # ceil(5 workers / 2 processes per job)
    assert seen["timeout"] == 7.0 and seen["walltime"] == "00:09:00" and seen["queue"] == "q"
    seen.clear()
    args = parser.parse_args(["--jobs", "4"])
    cluster.cli_client(args)
    assert seen["jobs"] == 4 and seen["timeout"] == cluster.DEFAULT_TIMEOUT
    # the options of another command's parser (helper: --wait-timeout) are understood too
    seen.clear()
    cluster.slurm_client_from_args(SimpleNamespace(wait_timeout=9.0, jobs=None), workers=2)
    assert seen["jobs"] == 2 and seen["timeout"] == 9.0


# ------------------------------------------------------------------------------ slurm-script


def test_mpi_rmsd_script_text(tmp_path):
    script = mpi_rmsd_script(
        ["adk.h5md", "--topology", "adk.psf", "--select", "name CA"], ntasks=4,
        time_limit="00:10:00", partition="p1", account="acc", mem_per_cpu="2G",
        chdir=tmp_path, extra_directives=["--exclusive"], prologue=["module load openmpi"],
        h5mdx=["/venv/bin/h5mdx"])
    lines = _lines(script)
    assert lines[0] == "#!/bin/bash"
    for expected in ("#SBATCH --ntasks=4", "#SBATCH --time=00:10:00", "#SBATCH --partition=p1",
                     "#SBATCH --account=acc", "#SBATCH --mem-per-cpu=2G",
                     "#SBATCH --exclusive", f"#SBATCH --chdir={tmp_path}",
                     "#SBATCH --output=h5mdx-mpi-rmsd-%j.out", "export HDF5_USE_FILE_LOCKING=FALSE",
                     "module load openmpi"):
        assert expected in lines, expected
    command = lines[-1]
    assert command == ("mpirun -n 4 /venv/bin/h5mdx mpi-rmsd adk.h5md --topology adk.psf "
                       "--select 'name CA' --out \"h5mdx-mpi-rmsd-${SLURM_JOB_ID}\"")
    # Open MPI's root variables only when the job runs as root
    root = lines.index('if [ "$(id -u)" -eq 0 ]; then')
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in lines[root + 2]
    assert "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in lines[root + 2] and lines[root + 3] == "fi"
    assert sum("OMPI_ALLOW_RUN_AS_ROOT" in line for line in lines) == 1
    if shutil.which("bash"):
        path = tmp_path / "job.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


@pytest.mark.parametrize("memory", ["4GiB", "4 GB", "2.5G", "-1", "lots", "2B", "2GBB"])
def test_mpi_rmsd_script_refuses_a_memory_sbatch_would_refuse(memory):
    """--mem-per-cpu 4GiB (dask's spelling, which --memory takes) was written into the
    script as is, to fail only at sbatch; SLURM takes a whole number with K/M/G/T."""
    with pytest.raises(ValueError, match=f"--mem-per-cpu {re.escape(repr(memory))} is not "
                                         "a SLURM memory size: .*e.g. 2G"):
        mpi_rmsd_script(["t.h5md"], ntasks=2, mem_per_cpu=memory)


@pytest.mark.parametrize("memory", ["2G", "512M", "4096", "1t", " 2G", "2GB", "512mb",
                                    "1Tb"])
def test_mpi_rmsd_script_takes_slurm_memory_sizes(memory):
    """As sbatch takes them (SLURM's str_to_mbytes): a B after the unit too; ``4GB`` was
    refused as "not a SLURM memory size", which sbatch 22.05 takes."""
    lines = _lines(mpi_rmsd_script(["t.h5md"], ntasks=2, mem_per_cpu=memory))
    assert f"#SBATCH --mem-per-cpu={memory.strip()}" in lines


def test_mpi_rmsd_script_keeps_given_out_and_uses_this_h5mdx():
    script = mpi_rmsd_script(["t.h5md", "-o", "res"], ntasks=2)
    command = _lines(script)[-1]
    assert command.endswith("mpi-rmsd t.h5md -o res") and "SLURM_JOB_ID}\"" not in command
    from pathlib import Path

    exe = Path(command.split()[3])
    assert exe.name == "h5mdx" or command.split()[3].endswith("python")
    with pytest.raises(ValueError, match="at least 1"):
        mpi_rmsd_script(["t.h5md"], ntasks=0)


def test_cli_slurm_script_prints_script(capsys, tmp_path, monkeypatch):
    from h5mdx.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("x.h5md", "top.psf"):  # where the job starts (else slurm-script warns)
        (tmp_path / name).touch()
    rc = main(["slurm-script", "mpi-rmsd", "x.h5md", "-t", "top.psf", "--select", "name CA",
               "--ntasks", "3", "--time", "00:04:00", "--partition", "debug",
               "--sbatch=--exclusive", "--collective"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = _lines(out)
    assert "#SBATCH --ntasks=3" in lines and "#SBATCH --time=00:04:00" in lines
    assert "#SBATCH --partition=debug" in lines and "#SBATCH --exclusive" in lines
    assert f"#SBATCH --chdir={tmp_path}" in lines
    assert re.search(r"mpirun -n 3 \S+ mpi-rmsd x\.h5md -t top\.psf --select 'name CA' "
                     r"--collective --out", lines[-1])
    # slurm-script options before the program work as well
    rc = main(["slurm-script", "--ntasks", "2", "mpi-rmsd", "x.h5md"])
    assert rc == 0 and "#SBATCH --ntasks=2" in capsys.readouterr().out


def test_cli_slurm_script_needs_ntasks(capsys):
    from h5mdx.cli import main

    assert main(["slurm-script", "mpi-rmsd", "x.h5md"]) == 2  # a usage error
    assert "--ntasks N is required" in capsys.readouterr().err


def test_cli_slurm_script_checks_program_arguments(capsys):
    from h5mdx.cli import main

    with pytest.raises(SystemExit):
        main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", "--read", "sideways"])
    assert "invalid choice" in capsys.readouterr().err


def _rank_records(io_times, compute=0.1):
    from h5mdx.timing.records import to_frame

    rows = []
    t0 = 1000.0
    for rank, io in enumerate(io_times):
        wall = 0.05 + io + compute
        rows.append({
            "run_id": "r1", "backend": "mpi-io", "n_workers": len(io_times),
            "worker": f"rank-{rank}", "host": "node1", "rank": rank, "slurm_job_id": "42",
            "task_key": f"mpi-rmsd-rank-{rank}", "kind": "rmsd",
            "frame_start": 10 * rank, "frame_stop": 10 * rank + 10,
            "t_start": t0, "t_stop": t0 + wall, "t_init_top": 0.02, "t_init_traj": 0.03,
            "t_io": io, "t_compute": compute, "t_wait": 0.0, "t_comm_gather": 0.001,
        })
    return to_frame(rows)


def test_straggler_summary_flags_the_slow_rank():
    text = straggler_summary(_rank_records([0.1, 0.1, 0.1, 2.0]), {"file": "adk.h5md"})
    lines = text.splitlines()
    assert "4 record(s), backend mpi-io, 4 worker(s)/rank(s)" in lines[0]
    assert "adk.h5md" in lines[0]
    rank3 = next(line for line in lines if line.lstrip().startswith("3 "))
    assert rank3.endswith("STRAGGLER") and " 42" in rank3
    assert "rank 3 (" in text and "slow in io" in text
    assert "load imbalance" in text and any(line.startswith("advice:") for line in lines)


def test_straggler_summary_states_the_rule_it_applies():
    """Of two ranks, 0.65 s and 1.05 s, the slower is a straggler (> 1.5 x the other's
    0.65 s): the summary said its rule was "> 1.5 x median" (of both, 0.85 s: 1.275 s,
    which 1.05 s is not above) beside "1.050 s > 0.975 s"."""
    text = straggler_summary(_rank_records([0.5, 0.9]))
    assert ("stragglers (a task is a straggler when > 1.5x the median of the other tasks "
            "and > 50 ms longer, warm-up excluded): rank 1 (1.050 s > 0.975 s, slow in io)"
            in text)


def test_straggler_summary_clean_run():
    text = straggler_summary(_rank_records([0.1, 0.11]))
    rule = ("a task is a straggler when > 1.5x the median of the other tasks and > 50 ms "
            "longer, warm-up excluded")
    assert f"stragglers ({rule}): none" in text
    assert "STRAGGLER" not in text
    assert straggler_summary(pd.DataFrame()) == "no timing records"
    assert np.isfinite(float(re.search(r"R_comp/IO: (\S+)", text).group(1)))


def test_ctrl_c_still_raises_keyboardinterrupt_after_import():
    """dask_jobqueue's import turns SIGINT into sys.exit() (status 0); h5mdx undoes that."""
    import signal

    job_script_preview(interface=None)
    handler = signal.getsignal(signal.SIGINT)
    assert getattr(handler, "__module__", "") != "dask_jobqueue.runner"


def test_signal_handlers_are_restored_when_the_last_cluster_is_released(monkeypatch):
    import signal

    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {})
    monkeypatch.setattr(cluster.shutil, "which", lambda name: None)
    before = signal.getsignal(signal.SIGTERM)
    class _Fake:  # weakly referenced, as live clusters are
        workers: dict = {}

        def close(self, timeout=None):
            pass

    fake = _Fake()
    cluster._LIVE.add(fake)
    try:
        cluster._install_cleanup()
        if before is signal.SIG_DFL:
            assert signal.getsignal(signal.SIGTERM) is cluster._on_signal
    finally:
        cluster.release(fake)
    assert signal.getsignal(signal.SIGTERM) is before


def test_release_cancels_by_name_only_the_clusters_slurm_made(monkeypatch):
    """scancel --name is safe only for a name unique to the cluster (given by slurm())."""
    calls = []
    monkeypatch.setattr(cluster, "job_states", lambda ids, timeout=20.0: {})
    monkeypatch.setattr(cluster.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(cluster, "_run", lambda cmd, timeout=30.0, stdin=None:
                        calls.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))

    class _Fake:
        workers: dict = {}

        def close(self, timeout=None):
            pass

    theirs, ours = _Fake(), _Fake()
    cluster._JOB_NAMES[ours] = "h5mdx-dask-abcd1234"
    assert cluster.release(theirs) == [] and calls == []
    cluster.release(ours)
    assert calls == [["scancel", "--name=h5mdx-dask-abcd1234",
                      f"--user={cluster.getpass.getuser()}"]]


def test_walltime_of_the_config_is_checked_too():
    with dask.config.set({"jobqueue.slurm.walltime": "2 hours"}), \
            pytest.raises(ValueError, match="not a SLURM time"):
        slurm_options(interface=None)


@pytest.mark.parametrize("reason", ["PartitionConfig", "PartitionTimeLimit",
                                    "DependencyNeverSatisfied", "BadConstraints",
                                    "QOSMaxWallDurationPerJobLimit", "AccountNotAllowed"])
def test_waiting_on_a_job_that_can_never_start_ends_at_once(monkeypatch, reason):
    """``slurm-script --submit`` waited without end, saying nothing, on a job asking for
    more CPUs than the partition has (PENDING, PartitionConfig): the
    job is cancelled and the error says why and what to do."""
    from h5mdx.parallel import batch
    from h5mdx.parallel.cluster import SlurmError

    polls, cancelled = [], []
    monkeypatch.setattr(batch, "_query_job", lambda jid: polls.append(jid) or ({
        "JobState": "PENDING", "Reason": reason}, ""))
    monkeypatch.setattr(batch, "_scancel", cancelled.append)
    # a dependency that can never be met, constraints no node has, a walltime above the
    # QOS's limit: slurm-script --submit waited on them without end (SLURM's job reason
    # codes: these wait for nothing that will happen)
    with pytest.raises(SlurmError, match=rf"job 42 can never start as asked: it is PENDING "
                       rf"\({reason}\): .+; cancelled it"):
        batch.wait_for_job("42", poll=0.01)
    assert polls == ["42"] and cancelled == ["42"]
    # a job waiting its turn is waited on
    states = iter([{"JobState": "PENDING", "Reason": "Resources"},
                   {"JobState": "COMPLETED", "ExitCode": "0:0"}])
    monkeypatch.setattr(batch, "_query_job", lambda jid: (next(states), ""))
    assert batch.wait_for_job("43", poll=0.01).state == "COMPLETED"


def test_waiting_on_a_job_gives_up_when_slurm_stops_answering(monkeypatch):
    """slurmctld died while slurm-script --submit waited: scontrol failed at every poll
    and the wait went on forever, saying nothing. After ``max_failed_polls`` failures in
    a row it gives up, naming the job, its last state and scontrol's last error; failures
    between answers of a job still pending or running do not end the wait."""
    import subprocess

    from h5mdx.parallel import batch
    from h5mdx.parallel.cluster import SlurmError

    answers = iter(["JobState=PENDING Reason=Resources", "",
                    "JobState=RUNNING Reason=None", "", "", "", ""])
    calls = []

    def scontrol(cmd, **kwargs):
        calls.append(cmd)
        out = next(answers)
        err = "" if out else "slurm_load_jobs error: Unable to contact slurm controller"
        return subprocess.CompletedProcess(cmd, 0 if out else 1, out, err)

    monkeypatch.setattr(batch, "_run", scontrol)
    monkeypatch.setattr(batch, "_scancel", lambda jid: pytest.fail("cancelled"))
    with pytest.raises(SlurmError, match=r"gave up waiting for SLURM job 44: SLURM did not "
                       r"answer 3 poll\(s\) in a row .*the last error: scontrol -o show job "
                       r"44 failed \(exit status 1\): slurm_load_jobs error: Unable to contact "
                       r"slurm controller; the job was last seen RUNNING"):
        batch.wait_for_job("44", poll=0.001, max_failed_polls=3)
    # a failure between two answers started the count again: 6 polls, not 3
    assert len(calls) == 6 and calls[0] == ["scontrol", "-o", "show", "job", "44"]
    answers = iter(["", "JobState=COMPLETED ExitCode=0:0"])
    assert batch.wait_for_job("45", poll=0.001, max_failed_polls=3).ok


def test_straggler_summary_of_ranks_on_nodes_whose_clocks_differ():
    """Ranks of 0.35 s and 0.45 s; the second node's clock 0.3 s ahead: the header said
    0.750 s (the span of their start and stop times) for a run of 0.45 s."""
    df = _rank_records([0.2, 0.3])
    df.loc[1, ["t_start", "t_stop"]] += 0.3
    assert "0.450 s (the longest rank)" in straggler_summary(df).splitlines()[0]


@pytest.mark.parametrize("jobs", [0, -1])
def test_a_client_of_no_worker_job_is_refused(monkeypatch, capsys, adk_h5md, jobs):
    """slurm_client(jobs=0) (h5mdx rmsd --scheduler slurm --jobs 0) submitted no job,
    waited for none of its 0 workers, and the computation then waited for a worker
    forever; it is refused before anything reaches SLURM."""
    def submitted(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(cluster, "slurm", submitted)
    with pytest.raises(ValueError, match=rf"jobs \(--jobs\) must be at least 1, not {jobs}: "
                                         "without a worker job"):
        with cluster.slurm_client(jobs=jobs, interface=None):
            pass
    from h5mdx.cli import main

    assert main(["rmsd", adk_h5md, "--scheduler", "slurm", "--jobs", str(jobs),
                 "--no-progress"]) == 2  # a usage error, before the file is opened
    assert f"h5mdx rmsd: --jobs must be at least 1, not {jobs}" in capsys.readouterr().err
