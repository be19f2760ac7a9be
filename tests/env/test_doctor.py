"""``h5mdx doctor``: its checks agree with the real environment, and it never crashes."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

import h5py
import pytest

from h5mdx import doctor
from h5mdx.cli import main
from h5mdx.cli.doctor import add_parser, run

NAMES = [
    "h5py",
    "h5py MPI",
    "mpi4py",
    "mpirun",
    "dask-mpi",
    "distributed",
    "dask-jobqueue",
    "SLURM commands",
    "SLURM cluster",
    "HDF5 file locking",
    "CPU",
    "numba",
    "RMSD kernel",
    "chunk index",
]


@pytest.fixture(scope="module")
def report():
    return doctor.run_checks()


def test_all_checks_present(report):
    assert [c.name for c in report.checks] == NAMES
    assert all(c.status in ("ok", "missing", "info") for c in report.checks)
    assert all(c.fix for c in report.checks if c.status == "missing")
    assert report.python == sys.executable
    assert set(report.paths) == {"mpi-io", "dask-mpi", "slurm"}


def test_h5py_matches_this_interpreter(report):
    assert report["h5py"].status == "ok"
    assert report["h5py"].detail == f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}"
    assert (report["h5py MPI"].status == "ok") is bool(h5py.get_config().mpi)


def test_packages_match_metadata(report):
    for name, dist in [("dask-jobqueue", "dask-jobqueue"), ("numba", "numba"),
                       ("distributed", "distributed"), ("dask-mpi", "dask-mpi")]:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            assert report[name].status == "missing"
            assert "pip install" in report[name].fix
        else:
            assert report[name].status == "ok"
            assert report[name].detail == version


def test_mpirun_and_slurm_match_path(report):
    assert (report["mpirun"].status == "ok") is (shutil.which("mpirun") is not None)
    has_slurm = shutil.which("sinfo") is not None and shutil.which("sbatch") is not None
    assert (report["SLURM commands"].status == "ok") is has_slurm
    if report["SLURM cluster"].status == "ok":
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True)
        assert out.stdout.split()[0] in report["SLURM cluster"].detail


def test_mpi4py_reports_library(report):
    if report["mpi4py"].status == "ok":
        code = "import mpi4py; print(mpi4py.__version__)"
        version = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert report["mpi4py"].detail.startswith(f"mpi4py {version}, MPI ")


def test_ci_stack_is_complete(report):
    """Under CI (H5MDX_REQUIRE_*) the doctor must find every parallel path usable."""
    if os.environ.get("H5MDX_REQUIRE_MPI") != "1" and os.environ.get("H5MDX_REQUIRE_SLURM") != "1":
        pytest.skip("H5MDX_REQUIRE_MPI/H5MDX_REQUIRE_SLURM not set")
    if os.environ.get("H5MDX_REQUIRE_MPI") == "1":
        assert report.paths["mpi-io"], report.format()
        assert report.paths["dask-mpi"], report.format()
    if os.environ.get("H5MDX_REQUIRE_SLURM") == "1":
        assert report.paths["slurm"], report.format()


def test_missing_commands_name_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    rep = doctor.run_checks()
    assert rep["mpirun"].status == "missing"
    assert "apt-get install -y openmpi-bin" in rep["mpirun"].fix
    assert rep["SLURM commands"].status == "missing"
    assert "slurm-wlm" in rep["SLURM commands"].fix
    assert rep["SLURM cluster"].status == "missing"
    assert "slurm-local.sh start" in rep["SLURM cluster"].fix
    assert not rep.paths["mpi-io"] and not rep.paths["slurm"]
    text = rep.format()
    assert "fix: apt-get install -y openmpi-bin" in text
    assert "mpi-io path" in text and "NOT usable" in text


def test_crashing_interpreter_is_reported_not_raised(tmp_path):
    """A probe interpreter that dies of a signal (like a broken MPI) becomes a 'missing' check."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nkill -SEGV $$\n")
    fake.chmod(0o755)
    rep = doctor.run_checks(python=str(fake))
    assert rep["h5py"].status == "missing"
    assert "crashed (signal 11)" in rep["h5py"].detail
    assert rep["h5py MPI"].status == "missing"
    if rep["mpi4py"].detail != "not installed":
        assert "does not initialise" in rep["mpi4py"].detail


def test_hanging_interpreter_times_out(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    rep = doctor.run_checks(python=str(fake), timeout=1.0)
    assert rep["h5py"].status == "missing"
    assert "no answer within 1 s" in rep["h5py"].detail


def test_file_locking_setting_is_shown(monkeypatch):
    monkeypatch.setenv("HDF5_USE_FILE_LOCKING", "FALSE")
    check = doctor._file_locking_check()
    assert (check.status, check.detail) == ("info", "HDF5_USE_FILE_LOCKING=FALSE")
    monkeypatch.delenv("HDF5_USE_FILE_LOCKING")
    assert "unset" in doctor._file_locking_check().detail


def test_the_cpu_is_shown(monkeypatch):
    """The CPU the benchmarks' figures depend on: cores x threads, vector unit, caches."""
    monkeypatch.setattr(doctor, "cpu_description", lambda: "Xeon, 8 CPUs = 4 cores x 2 threads")
    report = doctor.run_checks(timeout=20)
    assert (report["CPU"].status, report["CPU"].detail) == (
        "info", "Xeon, 8 CPUs = 4 cores x 2 threads")


def test_the_kernels_layout_is_shown(report):
    """The lanes and frames a pass the numba kernel takes on this CPU (or the numpy one)."""
    from h5mdx.analysis.qcp import has_numba

    check = report["RMSD kernel"]
    assert check.status == "info"
    if not has_numba():
        assert "numpy kernel" in check.detail
        return
    from h5mdx.analysis import _qcp_numba

    assert check.detail.startswith(f"{_qcp_numba._LANES} lanes a sum, ")
    assert ("two frames" in check.detail) is _qcp_numba._PAIRS
    assert ("512-bit" in check.detail) is _qcp_numba._WIDE


def test_doctor_does_not_load_mpi_in_caller():
    code = (
        "import sys, h5mdx.doctor as d; r = d.run_checks(); "
        "assert 'mpi4py' not in sys.modules, sorted(sys.modules); "
        "print(len(r.checks))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(NAMES))


def test_cli_json(capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in data["checks"]] == NAMES
    assert data["python"] == sys.executable
    assert set(data["paths"]) == {"mpi-io", "dask-mpi", "slurm"}
    h5 = next(c for c in data["checks"] if c["name"] == "h5py")
    assert h5["ok"] is True and h5py.__version__ in h5["detail"]


def test_cli_text_and_strict(capsys, monkeypatch, tmp_path):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    assert run(parser.parse_args(["doctor"])) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun, no SLURM: --strict fails
    assert run(parser.parse_args(["doctor", "--strict"])) == 1
    assert run(parser.parse_args(["doctor"])) == 0


def test_chunk_index_check_names_the_way_chunks_are_found(monkeypatch):
    new = doctor._chunk_index_check({"hdf5": "1.14.6", "chunk_iter": True})
    assert new.status == "ok"
    assert new.detail.startswith("HDF5 1.14.6 lists a dataset's chunks in one pass")
    old = {"hdf5": "1.10.8", "chunk_iter": False}
    if doctor._dist_version("pyfive") is not None:
        check = doctor._chunk_index_check(old)
        assert check.status == "ok" and "pyfive" in check.detail
    monkeypatch.setattr(doctor, "_dist_version", lambda dist: None)
    check = doctor._chunk_index_check(old)
    assert check.status == "missing" and "read through h5py" in check.detail
    assert "pyfive" in check.fix
    assert doctor._chunk_index_check(None).status == "info"


def test_chunk_index_check_matches_this_h5py(report):
    import h5py
    check = report["chunk index"]
    assert check.status == "ok"  # CI installs pyfive with the fast extra
    assert h5py.version.hdf5_version in check.detail
    assert "pyfive" in check.detail  # CI installs it
    assert ("no chunk iteration" in check.detail) != hasattr(h5py.h5d.DatasetID, "chunk_iter")


def test_a_probe_past_its_timeout_asks_for_more_time_not_an_install(tmp_path, monkeypatch):
    """An interpreter that does not answer in time has h5py (and mpi4py) all the same: the
    fix was 'pip install h5py' (and 'pip install mpi4py'), which changes nothing; with
    --timeout 0 every installed h5py was 'missing'."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    rep = doctor.run_checks(python=str(fake), timeout=1.0)
    for name in ("h5py", "h5py MPI"):
        assert rep[name].status == "missing" and rep[name].fix == doctor.FIX_TIMEOUT
    assert rep["h5py"].detail == "importing it gave no answer within 1 s"
    # not 'h5py cannot be imported'
    assert rep["chunk index"].detail == "unknown (importing h5py gave no answer)"
    if rep["mpi4py"].detail != "not installed":
        assert rep["mpi4py"].fix == doctor.FIX_TIMEOUT
    assert "fix: h5mdx doctor --timeout 120" in rep.format()
    fake_mpirun = tmp_path / "mpirun"
    fake_mpirun.write_text("#!/bin/sh\nexec sleep 60\n")
    fake_mpirun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    check = doctor._mpirun_check(1.0)
    assert check.status == "missing" and check.fix == doctor.FIX_TIMEOUT


def test_mpirun_as_root_names_the_variables_it_needs(tmp_path, monkeypatch):
    """As root, 'mpirun --version' answers but 'mpirun -n 2 ...' refuses to start without
    Open MPI's run-as-root variables: the check said only 'ok'."""
    from h5mdx._subprocess import RUN_AS_ROOT_ENV

    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\necho 'mpirun (Open MPI) 4.1.4'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    for name in RUN_AS_ROOT_ENV:
        monkeypatch.delenv(name, raising=False)
    check = doctor._mpirun_check(10.0)
    assert check.status == "ok"
    assert check.detail == (f"{fake} (mpirun (Open MPI) 4.1.4); as root it starts ranks only "
                            "with export OMPI_ALLOW_RUN_AS_ROOT=1 "
                            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (h5mdx's own mpirun commands "
                            "set them)")
    for name, value in RUN_AS_ROOT_ENV.items():
        monkeypatch.setenv(name, value)
    assert doctor._mpirun_check(10.0).detail == f"{fake} (mpirun (Open MPI) 4.1.4)"


def test_the_fix_for_a_serial_h5py_rebuilds_the_installed_one():
    """'h5py MPI' is missing where a serial h5py is installed: the fix 'CC=mpicc HDF5_MPI=ON
    pip install --no-binary=h5py h5py mpi4py' answered 'Requirement already satisfied: h5py'
    and changed nothing; it reinstalls h5py from source now, past pip's cache of wheels."""
    checks = doctor._h5py_checks({"version": "3.16.0", "hdf5": "1.14.6", "mpi": False,
                                  "chunk_iter": True}, "")
    fix = checks[1].fix
    assert checks[1].status == "missing" and fix == doctor.FIX_H5PY_MPI
    command = fix.split(" (")[0]
    assert command.startswith("CC=mpicc HDF5_MPI=ON pip install --force-reinstall --no-deps "
                              "--no-cache-dir --no-binary=h5py h5py && pip install mpi4py")


def test_mpi_rmsd_s_hint_for_a_serial_h5py_rebuilds_the_installed_one():
    """mpi-rmsd's error for a serial h5py gave the fix doctor had, which pip answers with
    'Requirement already satisfied': it gives doctor's rebuild now."""
    from h5mdx.mpi import PARALLEL_H5PY_HINT

    rebuild = doctor.FIX_H5PY_MPI.split(" && ")[0]
    assert rebuild in PARALLEL_H5PY_HINT and "HDF5_PKGCONFIG_NAME=hdf5-openmpi" in PARALLEL_H5PY_HINT


@pytest.mark.parametrize("timeout", ["-5", "0", "nan", "inf", "1e308", "86401"])
def test_a_timeout_that_is_no_time_is_refused_not_reported_as_missing_packages(
        timeout, capsys):
    """``--timeout -5`` (or 0, nan) made every probe 'give no answer': h5py, h5py MPI,
    mpi4py and mpirun all 'missing', installed as they are, and exit 0 (nan: a ValueError
    of subprocess); 1e308 ended in a traceback (OverflowError of selectors). It is now
    one clear line, before any probe."""
    assert main(["doctor", "--timeout", timeout]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("h5mdx doctor: error: --timeout must be a positive number of "
                           f"seconds, at most 86,400 (a day), not {float(timeout):g}")
    if not 0 < float(timeout) < float("inf"):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            doctor.run_checks(timeout=float(timeout))


@pytest.mark.parametrize("listed, usable", [
    ("debug* up 1 idle", True),
    ("debug* up 1 mixed\nlong up 2 down", True),
    ("debug* up 1 idle~", True),  # powered down: started for a job
    ("debug* up 1 down*", False),
    ("debug* up 2 drained", False),
    ("debug* down 1 idle", False),
    ("", False),
])
def test_a_cluster_without_a_partition_that_takes_jobs_is_not_usable(
        listed, usable, monkeypatch, tmp_path):
    """'sinfo' answering was taken for a usable cluster: partitions down, nodes down or
    drained, or none at all gave 'SLURM cluster ok' and 'slurm path usable', where a job
    would wait forever."""
    for name in ("sinfo", "sbatch"):
        exe = tmp_path / name
        exe.write_text(f"#!/bin/sh\nprintf '%s\\n' '{listed}'\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    check = doctor._slurm_checks(10.0)[1]
    assert (check.status == "ok") is usable, check
    if not usable:
        assert check.detail.startswith("answers, but no partition is up with nodes that "
                                       "take jobs"), check
        assert check.fix == doctor.FIX_SLURM_LOCAL
