"""``h5mdx bench``'s option values refused before the grid runs, as usage errors (exit 2)."""

from __future__ import annotations

import os

import pytest

from h5mdx.cli import main
from infra import random_trajectory


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return random_trajectory(tmp_path_factory.mktemp("bench_options") / "t.h5md", 12, 5, 4, 7)


def test_more_workers_than_cpus_are_refused(small, tmp_path, capsys, monkeypatch):
    """--workers 1,1000 on two CPUs started 1,000 worker processes (here 3 on 2); as h5mdx example, the
    bench refuses more workers than the CPUs this process may use, before the grid."""
    from h5mdx import _machine

    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    out = tmp_path / "b"
    assert main(["bench", small, "--workers", "1,3", "--scheduler", "threads", "--repeats",
                 "1", "--blocks-per-worker", "1", "--out", str(out), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx bench: --workers 3 is more than the 2 CPUs this "
                            "process may use: the bench times worker processes (and MPI "
                            "ranks) of this machine, so give at most 2\n")
    assert captured.out == "" and not out.exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux's /proc")
def test_an_out_that_cannot_be_written_is_refused_first(small, tmp_path, capsys):
    """--out /proc/x failed with '[Errno 2] No such file or directory' after the whole
    grid ran; a directory the bench cannot write is refused before it (exit 2), by the
    check of h5mdx rmsd's outputs."""
    assert main(["bench", small, "--workers", "1", "--scheduler", "threads", "--repeats",
                 "1", "--blocks-per-worker", "1", "--out", "/proc/x", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx bench: --out '/proc/x': the bench's records "
                            "'/proc/x/records.parquet' cannot be written: '/proc' is a kernel "
                            "file system, which holds no files\n") and captured.out == ""
    from h5mdx.cli.bench import _unwritable

    assert _unwritable(str(tmp_path / "new" / "b")) is None
    assert not (tmp_path / "new").exists()


def test_a_selection_without_names_is_a_usage_error(small, tmp_path, capsys):
    """--select 'name CA' on a file without atom names and no --topology was refused after
    the file was opened, with exit status 1 and a --debug hint; as h5mdx rmsd says it, it
    is a usage error (exit 2) before the grid."""
    out = tmp_path / "b"
    assert main(["bench", small, "--select", "name CA", "--workers", "1", "--scheduler",
                 "threads", "--repeats", "1", "--blocks-per-worker", "1", "--out", str(out),
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx bench: --select 'name CA' needs --topology (a PSF, PDB, "
                            f"GRO, TPR, ... of the same atoms): {small} holds no atom names "
                            "(GROMACS' H5MD files hold their topology, and files with VMD's "
                            "structure module)\n") and captured.out == ""
    assert not out.exists()


def test_the_default_workers_fit_the_cpus(small, monkeypatch):
    """Without --workers: 1 and 2 workers, 1 alone where this process may use one CPU
    (the default is not refused as more workers than the CPUs)."""
    import argparse

    from h5mdx import _machine
    from h5mdx.bench.grid import SCHEDULERS
    from h5mdx.cli import bench
    from h5mdx.timing.phases import parse_delay

    for cpus, default in ((8, [1, 2]), (1, [1])):
        monkeypatch.setattr(_machine, "usable_cpus", lambda cpus=cpus: cpus)
        args = bench.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(
            [small])
        assert bench._usage_problem(args, SCHEDULERS, parse_delay) is None
        assert args.workers == default


def test_a_delay_beyond_a_day_is_a_usage_error(small, tmp_path, capsys):
    """--delay 0:1e308 passed the check (finite seconds) and ended in a traceback of
    time.sleep in the first task (OverflowError), after the grid had started."""
    out = tmp_path / "b"
    assert main(["bench", small, "--delay", "0:1e308", "--workers", "1", "--scheduler",
                 "threads", "--repeats", "1", "--blocks-per-worker", "1", "--out", str(out),
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("h5mdx bench: --delay '0:1e308' is "
                                   "not FRAME:SECONDS[:PHASE]") and captured.out == ""
    assert "the seconds it sleeps (0 to 86,400, a day)" in captured.err
    assert not out.exists()
