"""One scheduler vocabulary for every command (h5mdx.parallel.schedulers)."""

from __future__ import annotations

from h5mdx.bench.grid import SCHEDULERS as BENCH
from h5mdx.cli import build_parser
from h5mdx.cli.rmsd import SCHEDULERS as RMSD
from h5mdx.parallel.schedulers import ALIASES, SCHEDULERS, canonical
from h5mdx.timing.records import BACKENDS


def test_every_command_draws_from_one_vocabulary():
    assert set(SCHEDULERS) <= set(BACKENDS)
    assert set(RMSD) <= set(SCHEDULERS)
    assert set(BENCH) <= set(SCHEDULERS)
    assert set(ALIASES.values()) <= set(SCHEDULERS)


def test_old_name_mpi_is_dask_mpi(capsys):
    assert canonical("mpi") == "dask-mpi"
    assert "dask-mpi" in capsys.readouterr().err
    args = build_parser().parse_args(["rmsd", "x.h5md", "--scheduler", "mpi"])
    assert args.scheduler == "dask-mpi"
    args = build_parser().parse_args(["rmsd", "x.h5md"])
    assert args.scheduler == "distributed"
