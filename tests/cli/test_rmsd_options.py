"""``h5mdx rmsd``'s option values refused before any work, as usage errors (exit 2)."""

from __future__ import annotations

import pytest

from h5mdx.cli import main
from infra import random_trajectory


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return random_trajectory(tmp_path_factory.mktemp("rmsd_options") / "t.h5md", 20, 30, 4, 3)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_frames_per_block_below_one_is_a_usage_error(small, capsys, value):
    """--frames-per-block 0 was refused only after the scheduler was chosen and said,
    with exit 1 and a --debug hint; it is a usage error now, before any work."""
    assert main(["rmsd", small, "--frames-per-block", value, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"h5mdx rmsd: --frames-per-block must be at least 1, not {value}\n"
    assert captured.out == ""


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_chunk_mib_not_positive_and_finite_is_a_usage_error(small, capsys, value):
    """--chunk-mib nan (or inf) passed the check ('must be positive') and failed later with
    'chunk_mib= must be ...', exit status 1 and a --debug hint."""
    assert main(["rmsd", small, "--chunk-mib", value, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx rmsd: --chunk-mib must be a positive, finite number of "
                            f"MiB, not {float(value):g}\n") and captured.out == ""


def test_more_workers_than_cpus_are_refused(small, capsys, monkeypatch):
    """--workers 1000 on two CPUs ran 1,000 workers; as h5mdx example, h5mdx rmsd refuses
    more workers than the CPUs this process may use (exit 2), with a local scheduler."""
    from h5mdx import _machine

    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    assert main(["rmsd", small, "--workers", "3", "--scheduler", "threads",
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx rmsd: --workers 3 is more than the 2 CPUs this process "
                            "may use: --scheduler threads runs its workers on this machine "
                            "(--scheduler slurm elsewhere), so give at most 2\n")
    assert captured.out == ""
    assert main(["rmsd", small, "--workers", "2", "--scheduler", "threads",
                 "--no-progress"]) == 0
    assert "on threads with 2 workers" in capsys.readouterr().out


def test_mass_weights_without_masses_are_said_in_the_options_terms(small, capsys):
    """--weights mass on a file with no masses and no --topology said 'open it with
    topology=..., or pass the masses as weights=<array...>': Python's words, exit status 1
    and a --debug hint. The command line names --topology (exit 2); the library's error
    keeps its Python terms."""
    import xarray as xr

    from h5mdx.errors import TopologyError

    assert main(["rmsd", small, "--weights", "mass", "--scheduler", "threads",
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx rmsd: --weights mass needs masses: {small} has no 'mass' "
                            "element; give --topology FILE (a PSF, TPR, PDB, ... of the same "
                            "atoms, with their masses)\n") and captured.out == ""
    with xr.open_dataset(small, engine="h5md") as ds, \
            pytest.raises(TopologyError, match=r"open it with topology=\.\.\."):
        ds.md.rmsd(weights="mass")


@pytest.mark.parametrize(("options", "said"), [
    (["--cores", "0"], "--cores must be at least 1, not 0"),
    (["--jobs", "0"], "--jobs must be at least 1, not 0: without a worker job the "
                      "computation would wait for a worker forever"),
    (["--memory", "4XB"], "--memory '4XB' is not a size: give a number with a unit, e.g. "
                          "--memory 4GiB"),
    (["--walltime", "abc"], "--walltime 'abc' is not a SLURM time: use 'MM', 'HH:MM:SS', "
                            "'D-HH' or 'D-HH:MM:SS' (or UNLIMITED), e.g. --walltime 00:30:00"),
    (["--wait-timeout", "-1"], "--wait-timeout must be a positive number of seconds, not -1"),
    (["--job-log-dir", "/proc/h5mdx-logs"], "--job-log-dir '/proc/h5mdx-logs': the worker "
     "jobs' output '/proc/h5mdx-logs/slurm-JOBID.out' cannot be written: '/proc' is a "
     "kernel file system, which holds no files"),
])
def test_slurm_option_values_are_usage_errors(small, capsys, monkeypatch, options, said):
    """--cores 0, --jobs 0, --memory 4XB, --walltime abc were refused when the cluster
    started, after the file was opened, with exit status 1, a --debug hint and Python's
    words (walltime='00:30:00'); --wait-timeout -1 went on to ask SLURM. They are usage
    errors now, before any work (exit 2), without starting a cluster."""
    import os

    from h5mdx.parallel import cluster

    if "/proc" in said and not os.path.isdir("/proc/self"):
        pytest.skip("Linux's /proc")

    def started(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(cluster, "slurm_client", started)
    assert main(["rmsd", small, "--scheduler", "slurm", *options, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"h5mdx rmsd: {said}\n" and captured.out == ""


class _Comm:
    """An MPI communicator of ``size`` ranks, as this process's rank ``rank``."""

    def __init__(self, size, rank=0):
        self.size, self.rank = size, rank

    def Get_size(self):  # noqa: N802 - mpi4py's name
        return self.size

    def Get_rank(self):  # noqa: N802 - mpi4py's name
        return self.rank


@pytest.mark.parametrize(("size", "workers", "said"), [
    (1, "5", "--scheduler dask-mpi needs at least 3 MPI ranks (scheduler, client, one "
             "worker) but the job has 1: run it as mpirun -n 4 h5mdx rmsd ... --scheduler "
             "dask-mpi"),
    (1, None, "--scheduler dask-mpi needs at least 3 MPI ranks (scheduler, client, one "
              "worker) but the job has 1: run it as mpirun -n 4 h5mdx rmsd ... --scheduler "
              "dask-mpi"),
    (4, "3", "--scheduler dask-mpi runs one worker on each rank but the scheduler's and "
             "the client's: 4 ranks give 2 workers, not 3 (run mpirun -n 5, or leave "
             "--workers out)"),
])
def test_dask_mpi_ranks_and_workers_are_usage_errors(small, capsys, monkeypatch, size,
                                                     workers, said):
    """Too few ranks for dask-mpi, or --workers not the ranks less two, were said with exit
    status 1 and a --debug hint, and --workers 5 on one rank as '1 ranks give -1
    workers'; they are usage errors (exit 2), said by rank 0 alone."""
    import h5mdx.mpi

    monkeypatch.setattr(h5mdx.mpi, "comm_world", lambda: _Comm(size))
    argv = ["rmsd", small, "--scheduler", "dask-mpi", "--no-progress",
            *(["--workers", workers] if workers else [])]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"h5mdx rmsd: {said}\n" and captured.out == ""
    monkeypatch.setattr(h5mdx.mpi, "comm_world", lambda: _Comm(size, rank=1))
    assert main(argv) == 2
    assert capsys.readouterr().err == ""


def test_chunk_mib_beyond_a_tib_is_a_usage_error(small, capsys):
    """--chunk-mib 1e308 passed the check (positive, finite) and failed with 'cannot
    convert float NaN to integer', exit status 1 and a --debug hint."""
    assert main(["rmsd", small, "--chunk-mib", "1e308", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx rmsd: --chunk-mib must be at most 1,048,576 MiB (1 TiB), "
                            "not 1e+308\n") and captured.out == ""


def test_a_group_the_file_does_not_have_is_one_line_without_the_debug_hint(small, capsys):
    """--group nope ended with '(run with --debug for the traceback)', as if the message
    were not complete; now one line lists the groups there are, and nothing more."""
    import xarray as xr

    from h5mdx.errors import NoSuchGroupError

    assert main(["rmsd", small, "--group", "nope", "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx rmsd: error: {small} has no group 'nope'; available: "
                            "'particles/all'\n")
    with pytest.raises(NoSuchGroupError, match="has no group 'nope'") as err:
        xr.open_dataset(small, engine="h5md", group="nope")
    assert isinstance(err.value, ValueError)  # as before the class: except ValueError works
    with pytest.raises(NoSuchGroupError, match="has no group 'nope'; its groups: "):
        xr.open_datatree(small, engine="h5md", group="nope")



def test_a_selection_matching_nothing_or_refused_is_a_usage_error(small, adk_h5md, capsys):
    """--select matching no atom, or one MDAnalysis refuses, was said with exit status 1,
    as a problem of the file; it is the option's mistake: exit 2, one line naming the
    file, no --debug hint."""
    from MDAnalysisTests.datafiles import PSF

    for path, options, said in (
            (small, [], "the selection 'prop z > 100' matches no atom"),
            (adk_h5md, ["--topology", PSF], "invalid selection 'name CA and'")):
        select = said.split("'")[1]
        assert main(["rmsd", path, *options, "--select", select, "--no-progress"]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"h5mdx rmsd: {path}: {said}")
        assert captured.err.count("\n") == 1 and "--debug" not in captured.err
        assert captured.out == ""


def test_a_topology_of_a_format_mdanalysis_does_not_know_is_one_line(small, tmp_path,
                                                                      capsys):
    """--topology of a format MDAnalysis does not know printed its 9-line message (the
    list of formats) and the --debug hint; now one line, naming the file and the fix."""
    top = tmp_path / "atoms.xyz123"
    top.write_text("not a topology\n")
    assert main(["rmsd", small, "--topology", str(top), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx rmsd: error: {top}: MDAnalysis cannot read this "
                            "topology: 'XYZ123' isn't a valid topology format, nor a "
                            "coordinate format; give a file of a topology format it reads "
                            "(PSF, PDB, GRO, TPR, ...)\n")
    assert captured.out == ""
