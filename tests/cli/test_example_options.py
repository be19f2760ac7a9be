"""``h5mdx example``'s options, checked before anything is built (fast: no trajectory)."""

from __future__ import annotations

import argparse

from h5mdx import _machine
from h5mdx.cli import example, main


def _args(*argv: str) -> argparse.Namespace:
    return example.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(argv)


def test_more_workers_than_cpus_are_refused(tmp_path, capsys, monkeypatch):
    """``--workers 1000`` on two CPUs started 1,000 worker processes; it is refused
    (exit 2) before anything is built, naming the option and the CPUs."""
    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    assert main(["example", "--frames", "100", "--out", str(tmp_path / "o"),
                 "--workers", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("h5mdx example: --workers 1000 is more than the 2 CPUs this "
                          "process may use") and "give at most 2" in err
    assert err.count("\n") == 1 and not (tmp_path / "o").exists()
    assert main(["example", "--frames", "100", "--workers", "0"]) == 2
    assert capsys.readouterr().err == "h5mdx example: --workers must be at least 1, not 0\n"


def test_the_default_workers_fit_the_cpus(monkeypatch):
    """Without --workers: 2 worker processes, 1 where this process may use one CPU."""
    monkeypatch.setattr(_machine, "usable_cpus", lambda: 8)
    args = _args()
    assert not example._workers_refused(args) and args.workers == 2
    monkeypatch.setattr(_machine, "usable_cpus", lambda: 1)
    args = _args()
    assert not example._workers_refused(args) and args.workers == 1
    args = _args("--workers", "1")
    assert not example._workers_refused(args) and args.workers == 1


def test_help_states_the_defaults(capsys):
    """--out, --workers, --select and --mda-frames said nothing of their defaults."""
    text = example.add_parser(argparse.ArgumentParser().add_subparsers()).format_help()
    flat = " ".join(text.split())
    for said in ("(default h5mdx-example)", "(default 2, or 1 on one CPU)",
                 "(default 'name CA')", "(default 300; 0: skip)"):
        assert said in flat


def test_frames_beyond_the_free_disk_space_are_refused(tmp_path, capsys, monkeypatch):
    """--frames 99999999999 (4 PB of positions) started building the trajectory, to fill
    the disk; a trajectory larger than the free space is refused first (exit 2)."""
    import shutil
    from collections import namedtuple

    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10**9))
    out = tmp_path / "new" / "ex"  # not there yet: the space of the directory above
    assert main(["example", "--frames", "99999999999", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("h5mdx example: --frames 99999999999: the trajectory needs "
                   "4,009,200.0 GB (40,092 bytes a frame), and the disk of "
                   f"{str(out)!r} has 1.0 GB free; give fewer frames\n")
    assert not (tmp_path / "new").exists()
    assert example._space_problem(str(out), 20_000) is None  # 0.8 GB fit in 1 GB


def test_an_out_that_cannot_be_written_is_said_so(capsys, monkeypatch):
    """--out /proc/x was refused as a disk of '0.0 GB free; give fewer frames', which
    fewer frames do not cure; it is said as an --out that cannot be written (exit 2)."""
    import os

    import pytest

    if not os.path.isdir("/proc/self"):
        pytest.skip("Linux's /proc")
    monkeypatch.setattr(_machine, "usable_cpus", lambda: 2)
    assert main(["example", "--frames", "100", "--out", "/proc/h5mdx-example"]) == 2
    assert capsys.readouterr().err == (
        "h5mdx example: --out '/proc/h5mdx-example': the report "
        "'/proc/h5mdx-example/report.html' cannot be written: '/proc' is a kernel file "
        "system, which holds no files\n")
