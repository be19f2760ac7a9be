"""``h5mdx info`` for people and for machines."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from h5mdx.cli import main
from h5mdx.testing import write_h5md


def test_info_text(adk_h5md, capsys):
    assert main(["info", adk_h5md]) == 0
    out = capsys.readouterr().out
    assert "particles/trajectory" in out
    assert "98×3341×3" in out
    assert "chunks 1×3341×3" in out
    assert "Angstrom" in out


def test_info_json(adk_h5md, capsys):
    assert main(["info", "--json", adk_h5md]) == 0
    data = json.loads(capsys.readouterr().out)
    pos = data["particles"]["trajectory"]["elements"]["position"]
    assert pos["shape"] == [98, 3341, 3]
    assert pos["chunks"] == [1, 3341, 3]
    assert pos["unit"] == "Angstrom"
    assert pos["sampling"]["n_frames"] == 98
    assert data["h5md_version"] == "1.1"


def test_info_bad_file_one_clear_line(tmp_path):
    bad = tmp_path / "bad.h5md"
    bad.write_text("definitely not an HDF5 file\n" * 20)
    proc = subprocess.run([sys.executable, "-m", "h5mdx", "info", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "not an HDF5 file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr


def test_info_observables_and_fixed(tmp_path, capsys):
    path = write_h5md(
        tmp_path / "o.h5md",
        particles={"g": {"position": dict(value=np.zeros((5, 2, 3)), step=2, time=0.1,
                                          unit="nm")}},
        observables={"energy": dict(value=np.arange(5.0), step=2, time=0.1, unit="kJ mol-1")},
    )
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "(fixed)" in out and "energy" in out and "steps 0..8" in out
    # how to open them, which the default view does not show
    assert '\nobservables  (xr.open_dataset(..., engine="h5md", group="observables"), or ' \
           'open_datatree)\n' in out


def test_info_says_how_to_open_observables_of_a_subgroup(capsys):
    """ZnH5MD's observables live in /observables/atoms (MDAnalysisTests' cu.h5md)."""
    pytest.importorskip("MDAnalysisTests")
    from MDAnalysisTests.datafiles import H5MD_energy

    assert main(["info", H5MD_energy]) == 0
    assert 'engine="h5md", group="observables/atoms"), or open_datatree)' in \
        capsys.readouterr().out


def test_output_into_a_closed_pipe_ends_quietly(adk_h5md, tmp_path, monkeypatch, capsys):
    """``h5mdx info F | head -1``: the reader goes away; no error line, SIGPIPE's status."""
    sink = open(tmp_path / "stdout", "w")  # a real descriptor for the command to drop

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return sink.fileno()

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    try:
        assert main(["info", str(adk_h5md)]) == 141
    finally:
        sink.close()
    assert capsys.readouterr().err == ""


def test_a_reference_frame_out_of_range_is_one_clear_line(adk_h5md, capsys):
    assert main(["rmsd", str(adk_h5md), "--reference", "200", "--scheduler", "threads",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == ("h5mdx rmsd: --reference 200 is out of range: the trajectory has 98 "
                   "frames (0 to 97, or -1 for the last)\n")  # before a scheduler is chosen


def test_a_creator_without_a_version_has_no_stray_space(capsys):
    """``creator ZnH5MD )`` where the file names no version (MDAnalysisTests'
    cu_malformed.h5md)."""
    pytest.importorskip("MDAnalysisTests")
    from MDAnalysisTests.datafiles import H5MD_malformed

    assert main(["info", H5MD_malformed]) in (0, 1)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("creator ZnH5MD)"), first


def test_warnings_are_lines_of_the_command(tmp_path, capsys):
    """A file's conformance warning, printed by a command, is one ``h5mdx rmsd: warning:``
    line, not Python's ``backend.py:1084: H5MDConformanceWarning:`` with the code that
    raised it; a 2-D trajectory's error names the file."""
    import warnings

    rng = np.random.default_rng(0)
    path = write_h5md(tmp_path / "flags.h5md", {"g": {
        "position": {"value": rng.random((4, 5, 3)), "step": np.arange(4)}}})
    import h5py

    with h5py.File(path, "r+") as f:
        f["particles/g/box"].attrs["boundary"] = np.array([1, 1, 0])
    # as a user's shell runs it: this session's pytest records warnings instead
    proc = subprocess.run([sys.executable, "-m", "h5mdx", "rmsd", path, "--scheduler",
                           "threads", "--workers", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (f"h5mdx rmsd: warning: {path} [/particles/g/box]: box 'boundary' holds flags"
            in proc.stderr), proc.stderr
    assert "H5MDConformanceWarning" not in proc.stderr and ".py:" not in proc.stderr
    shown = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["rmsd", path, "--scheduler", "threads", "--no-progress"]) == 0
    assert warnings.formatwarning is shown  # restored after the command

    flat = write_h5md(tmp_path / "flat.h5md", {"g": {
        "position": {"value": rng.random((4, 5, 2)), "step": np.arange(4)}}})
    assert main(["rmsd", flat, "--scheduler", "threads", "--no-progress"]) == 1
    assert f"not 2 (of {flat} [/particles/g/position])" in capsys.readouterr().err


def test_rmsd_under_mpirun_without_dask_mpi_is_refused(adk_h5md, capsys, monkeypatch):
    """``mpirun -n 2 h5mdx rmsd`` ran two whole RMSDs writing the same files (found by an
    audit): refused, with the two ways to run under mpirun."""
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert main(["rmsd", str(adk_h5md), "--scheduler", "threads", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "started by mpirun with 2 ranks" in err
    assert "--scheduler dask-mpi" in err and "h5mdx mpi-rmsd" in err
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")  # one rank: runs as without mpirun
    assert main(["rmsd", str(adk_h5md), "--scheduler", "threads", "--no-progress"]) == 0


def test_modules_are_shown(tmp_path, capsys):
    """GROMACS 2026 declares its own modules beside H5MD's units module; info, --json
    and the dataset's attributes name them (they were left unmentioned)."""
    import h5py
    import xarray as xr

    path = write_h5md(tmp_path / "m.h5md", particles={"g": {"position": dict(
        value=np.zeros((2, 2, 3)), step=1, time=1.0, unit="nm")}})
    with h5py.File(path, "a") as f:
        mods = f.create_group("h5md/modules")
        mods.create_group("units").attrs.update(version=np.array([1, 0]), system="SI")
        mods.create_group("gromacs").attrs["version"] = np.array([0, 1], dtype=np.int32)
        mods.create_group("bare")
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "modules: bare, gromacs 0.1, units 1.0" in out
    assert "/h5md/modules/bare: the module has no 'version' attribute" in out
    assert main(["info", "--json", path]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modules"]["units"] == {"version": "1.0", "system": "SI"}
    with xr.open_dataset(path, engine="h5md") as ds:
        assert ds.attrs["h5md_modules"] == "bare, gromacs 0.1, units 1.0"


def test_a_damaged_root_group_is_called_damage(tmp_path, adk_h5md, capsys):
    """Metadata bytes flipped under the root group: 'an HDF5 file but not an H5MD file ...
    open it with h5netcdf' sent the user the wrong way."""
    import shutil

    bad = tmp_path / "damaged.h5md"
    shutil.copy(adk_h5md, bad)
    with open(bad, "r+b") as fh:
        fh.seek(800)
        data = fh.read(2000)
        fh.seek(800)
        fh.write(bytes(x ^ 0x55 for x in data))
    assert main(["info", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "the file is damaged: HDF5 cannot read its root group" in err, err
    assert "h5netcdf" not in err


def test_errors_hint_at_a_traceback_only_where_their_message_may_not_say_all(
        tmp_path, capsys, monkeypatch, adk_h5md):
    """Every error ended in "(run with --debug for the traceback)", a missing file or an
    output in the way too, and the CLI said "pass overwrite=True (--overwrite on the
    command line)"; an unexpected error keeps the hint."""
    import h5mdx.cli.info
    from h5mdx.cli import main

    out = tmp_path / "out.h5md"
    out.write_bytes(b"keep")
    assert main(["rechunk", str(adk_h5md), str(out)]) == 1
    err = capsys.readouterr().err
    assert "already exists; pass --overwrite to replace it" in err, err
    assert "--debug" not in err and "overwrite=True" not in err
    assert out.read_bytes() == b"keep"

    def broken(args):
        raise ValueError("something h5mdx did not expect")

    monkeypatch.setattr(h5mdx.cli.info, "run", broken)
    assert main(["info", str(adk_h5md)]) == 1
    err = capsys.readouterr().err
    assert "error: something h5mdx did not expect" in err
    assert "(run with --debug for the traceback)" in err
    monkeypatch.undo()

    # a format error wrapping a failure no check anticipated keeps the hint
    import h5mdx.format.h5md._walk

    def failing(*args, **kwargs):
        raise TypeError("an h5py surprise")

    monkeypatch.setattr(h5mdx.format.h5md._walk, "_scan", failing)
    assert main(["info", str(adk_h5md)]) == 1
    err = capsys.readouterr().err
    assert "unreadable H5MD structure (TypeError: an h5py surprise)" in err, err
    assert "(run with --debug for the traceback)" in err


def test_debug_after_the_command_shows_the_traceback(tmp_path, capsys):
    """The errors' hint says "run with --debug": `h5mdx info F --debug` was a usage error
   ; it raises, as `h5mdx --debug info F` does."""
    from h5mdx.cli import main

    missing = str(tmp_path / "nope.h5md")
    assert main(["info", missing]) == 1
    err = capsys.readouterr().err
    assert "No such file" in err
    # a missing file says all there is: no hint of a traceback
    assert "--debug" not in err, err
    for argv in (["info", missing, "--debug"], ["--debug", "info", missing]):
        with pytest.raises(FileNotFoundError, match="No such file"):
            main(argv)


def _connectivity_per_molecule(path, molecules):
    """H5MD-NOMAD's connectivity: a group per molecule below ``particles_group``, each with
    its indices and scalar strings (its OpenMM test file has 10,385 water molecules)."""
    import h5py

    path = write_h5md(path, particles={"all": {"position": dict(
        value=np.zeros((2, 3 * molecules, 3)), step=1, time=1.0, unit="nm")}})
    with h5py.File(path, "r+") as f:
        f["connectivity/bonds"] = np.array([[0, 1], [0, 2]], dtype=np.int32)
        for m in range(molecules):
            g = f.create_group(f"connectivity/particles_group/water_{m}")
            g["indices"], g["label"], g["formula"] = np.arange(3 * m, 3 * m + 3), "SOL", "H2O"
    return path


def test_info_counts_a_large_connectivity_tree_rather_than_scanning_it(
        tmp_path, capsys, monkeypatch):
    """Groups below /connectivity holding more datasets than ``_WALKED`` are counted, not
    scanned (H5MD-NOMAD's 52,269 took 14 s; counting them, 0.9 s); --json still lists
    every element; a small tree is listed as before."""
    from h5mdx.cli import info as info_cli

    path = _connectivity_per_molecule(tmp_path / "nomad.h5", 4)
    assert main(["info", path]) == 0  # 12 datasets: walked
    out = capsys.readouterr().out
    assert "  particles_group/water_3/formula " in out and "not read here" not in out
    monkeypatch.setattr(info_cli, "_WALKED", 11)
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "  bonds " in out and "water_3" not in out
    assert "  particles_group/  4 group(s), 12 dataset(s) below: not read here\n" in out
    assert 'group="connectivity/particles_group/<sub>" opens one)' in out
    assert main(["info", "--json", path]) == 0
    elements = json.loads(capsys.readouterr().out)["connectivity"]
    assert "particles_group/water_3/formula" in elements and len(elements) == 13


def test_info_lists_the_links_of_parameters(tmp_path, capsys):
    """A soft link in /parameters is warned about at an open of /parameters: h5mdx info
    lists it too (audit62: it listed those of the other free-form roots alone)."""
    import h5py

    path = tmp_path / "links.h5md"
    write_h5md(path, {"g": {"position": {"value": np.zeros((2, 3, 3)), "step": np.arange(2)}}})
    with h5py.File(path, "a") as f:
        f["parameters/x"] = 1.0
        f["parameters/alias"] = h5py.SoftLink("/parameters/x")
    main(["info", str(path)])
    out = capsys.readouterr().out
    assert "/parameters/alias: a soft link to /parameters/x" in out


def test_the_time_range_is_printed_as_the_json_holds_it(tmp_path, capsys):
    """A microsecond run's last time, 1234567.5 ps, printed with ``:g``'s 6 digits read
    1.23457e+06 (not the JSON's value; two runs' ends alike); a float32 time is printed
    as its shortest digits (0.1), the noise of ``offset + i * interval`` cut (0.3)."""
    path = write_h5md(tmp_path / "long.h5md", {"all": {
        "position": dict(value=np.zeros((3, 2, 3), np.float32), step=np.array([0, 5, 9]),
                         time=np.array([0.1, 1000.0, 1234567.5], np.float32), unit="nm"),
        "velocity": dict(value=np.zeros((3, 2, 3), np.float32), step=10, time=0.1,
                         time_offset=0.1 + 0.2, unit="nm ps-1")}})
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "steps 0..9, t 0.1..1234567.5 ps (explicit)" in out, out
    assert "steps 0..20, t 0.3..0.5 ps (fixed)" in out, out
    assert main(["info", "--json", path]) == 0
    pos = json.loads(capsys.readouterr().out)["particles"]["all"]["elements"]["position"]
    assert pos["sampling"]["time_last"] == 1234567.5


def test_sizes_just_under_a_unit_are_said_in_the_next():
    """1 MiB less a byte printed as '1024.0 KiB'."""
    from h5mdx.format.text import human_bytes
    from h5mdx.layout.diagnosis import _human as diagnosis_human

    assert [human_bytes(n) for n in (1023, 2**20 - 1, 2**30 - 2**10, 1536)] == [
        "1023 B", "1.0 MiB", "1.0 GiB", "1.5 KiB"]
    assert [diagnosis_human(n) for n in (2**20 - 100, 2**20 + 2**19)] == ["1.0 MiB", "1.5 MiB"]
