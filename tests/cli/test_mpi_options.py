"""``h5mdx mpi-rmsd``'s option values refused before MPI starts, as usage errors (exit 2)."""

from __future__ import annotations

import pytest

from h5mdx.cli import main


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_read_mib_not_positive_and_finite_is_a_usage_error(tmp_path, capsys, monkeypatch,
                                                           value):
    """--read-mib 0 exited with status 1, a --debug hint and 'read_mib must be positive
    and finite', where h5mdx rmsd says its --chunk-mib with status 2 in its own words."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert main(["mpi-rmsd", str(tmp_path / "t.h5md"), "--read-mib", value]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx mpi-rmsd: --read-mib must be a positive, finite number "
                            f"of MiB, not {float(value):g}\n") and captured.out == ""


def test_a_usage_error_is_said_by_the_first_rank_alone(tmp_path, capsys, monkeypatch):
    """Under mpirun every rank refuses the value; only rank 0 says it, and exits 2, the
    job's status. The others end with 0: one that ended first with a failure had mpirun
    kill rank 0 before it printed its line (the job failed without a word)."""
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert main(["mpi-rmsd", str(tmp_path / "t.h5md"), "--read-mib", "0"]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    assert main(["mpi-rmsd", str(tmp_path / "t.h5md"), "--read-mib", "0"]) == 2
    assert "--read-mib must be" in capsys.readouterr().err


def test_an_out_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """--out /proc/x was refused once MPI had started, by every rank, with exit status 1;
    it is a usage error said before (exit 2), by the check of h5mdx rmsd's outputs."""
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("Linux's /proc")
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert main(["mpi-rmsd", str(tmp_path / "t.h5md"), "--out", "/proc/h5mdx-out"]) == 2
    assert capsys.readouterr().err == (
        "h5mdx mpi-rmsd: --out '/proc/h5mdx-out': the timing records "
        "'/proc/h5mdx-out/timing.csv' cannot be written: '/proc' is a kernel file system, "
        "which holds no files\n")


def test_read_mib_beyond_a_tib_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """--read-mib 1e308 passed the check (positive, finite) and ended in a traceback
    (OverflowError: cannot convert float infinity to integer)."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert main(["mpi-rmsd", str(tmp_path / "t.h5md"), "--read-mib", "1e308"]) == 2
    assert capsys.readouterr().err == ("h5mdx mpi-rmsd: --read-mib must be at most "
                                       "1,048,576 MiB (1 TiB), not 1e+308\n")
