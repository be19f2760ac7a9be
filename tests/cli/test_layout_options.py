"""``h5mdx convert`` and ``h5mdx rechunk``: layout option values refused as usage errors
(exit status 2, argparse's line naming the option) before any file is opened."""

from __future__ import annotations

import pytest

from h5mdx.cli import main
from infra import random_trajectory


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return random_trajectory(tmp_path_factory.mktemp("layout_options") / "t.h5md", 12, 20, 4, 4)


@pytest.mark.parametrize(("options", "said"), [
    (["--frames-per-chunk", "0"], "argument --frames-per-chunk: must be >= 1, not 0"),
    (["--frames-per-chunk", "-3"], "argument --frames-per-chunk: must be >= 1, not -3"),
    (["--chunk-mib", "-1"], "argument --chunk-mib: must be a finite number > 0, not -1"),
    (["--chunk-mib", "nan"], "argument --chunk-mib: must be a finite number > 0, not nan"),
    (["--buffer-mib", "0"], "argument --buffer-mib: must be a finite number > 0, not 0"),
    (["--buffer-mib", "1e308"],
     "argument --buffer-mib: must be at most 1,048,576 MiB (1 TiB), not 1e+308"),
    (["--chunk-mib", "1e308"],
     "argument --chunk-mib: must be at most 1,048,576 MiB (1 TiB), not 1e+308"),
    (["--compression", "gzip:99"], "argument --compression: gzip level must be 0-9"),
    (["--compression", "brotli"], "argument --compression: unknown compression 'brotli'"),
])
def test_rechunk_option_values_are_usage_errors(small, tmp_path, capsys, options, said):
    """--frames-per-chunk 0, --buffer-mib 0, --compression gzip:99: said with exit status
    1 and a '(run with --debug for the traceback)' hint, as a failure of the copy."""
    with pytest.raises(SystemExit) as stop:
        main(["rechunk", small, str(tmp_path / "o.h5md"), *options])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"h5mdx rechunk: error: {said}" in err and "--debug" not in err
    assert not (tmp_path / "o.h5md").exists()


def test_convert_compression_is_checked_before_the_inputs(tmp_path, capsys):
    """convert's --compression is read before the topology is: a bad one is a usage
    error even where the inputs would take minutes to read."""
    with pytest.raises(SystemExit) as stop:
        main(["convert", str(tmp_path / "none.psf"), str(tmp_path / "o.h5md"),
              "--compression", "zstd:0"])
    assert stop.value.code == 2
    assert "argument --compression: zstd level must be 1-22" in capsys.readouterr().err


def test_good_values_still_pass(small, tmp_path, capsys):
    assert main(["rechunk", small, str(tmp_path / "o.h5md"), "--frames-per-chunk", "6",
                 "--compression", "GZIP:1", "--buffer-mib", "0.5", "--no-progress"]) == 0
    import h5py

    with h5py.File(tmp_path / "o.h5md") as f:
        v = f["particles/all/position/value"]
        assert v.chunks == (6, 20, 3) and v.compression == "gzip" and v.compression_opts == 1


@pytest.mark.parametrize("step", ["0", "-1"])
def test_convert_step_below_one_is_a_usage_error(tmp_path, capsys, step):
    """--step 0 was refused after the topology and trajectory were read, with exit status 1
    and a --debug hint."""
    with pytest.raises(SystemExit) as stop:
        main(["convert", str(tmp_path / "none.psf"), str(tmp_path / "o.h5md"), "--step", step])
    assert stop.value.code == 2
    assert f"argument --step: must be >= 1, not {step}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["convert", "rechunk"])
def test_contiguous_with_compression_is_a_usage_error(small, tmp_path, capsys, command):
    """--contiguous --compression gzip: HDF5 compresses chunks only; said by the writer,
    after the inputs were read, with exit status 1; now one line, exit status 2."""
    argv = ([command, small, str(tmp_path / "o.h5md")] if command == "rechunk" else
            [command, str(tmp_path / "none.psf"), str(tmp_path / "o.h5md")])
    assert main([*argv, "--contiguous", "--compression", "gzip"]) == 2
    err = capsys.readouterr().err
    assert err == (f"h5mdx {command}: --contiguous and --compression gzip: HDF5 compresses "
                   "chunked data only; drop --contiguous or --compression\n")
    assert main([*argv, "--contiguous", "--compression", "none", "--no-progress"]) == (
        0 if command == "rechunk" else 1)  # convert: no such topology
    capsys.readouterr()


@pytest.mark.parametrize(("options", "said"), [
    (["--start", "50", "--stop", "10"], "--start 50 --stop 10 select no frames"),
    (["--start", "98"], "--start 98 selects no frames"),
    (["--start", "200", "--step", "2"], "--start 200 --step 2 select no frames"),
    (["--stop", "-200"], "--stop -200 selects no frames"),
])
def test_convert_frames_selecting_nothing_are_usage_errors(tmp_path, capsys, options, said):
    """--start 50 --stop 10 (or a start past the end) said 'no frames to write: the
    trajectory has 98 frames (start=50, stop=10, step=None)', Python's words, with exit
    status 1 and a --debug hint; it names the options and the frames, exit status 2."""
    from MDAnalysisTests.datafiles import DCD, PSF

    out = tmp_path / "o.h5md"
    assert main(["convert", PSF, DCD, str(out), *options]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx convert: {said}: the trajectory has 98 frames (0 to 97; "
                            "negative values count from the end)\n")
    assert captured.out == "" and not out.exists()


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="Linux's /proc")
@pytest.mark.parametrize("command", ["convert", "rechunk"])
@pytest.mark.parametrize("out", ["/proc/h5mdx-out.h5md", "/proc/h5mdx-out.zarr"])
def test_an_output_that_cannot_be_written_is_refused_first(small, tmp_path, capsys,
                                                           command, out):
    """An output in /proc failed after the inputs were read, with exit status 1 and
    HDF5's words naming the temporary file ('Unable to create file (unable to open file:
    name = '/proc/.x.h5md.vm...h5mdx-partial', errno = 2 ...'); it is refused before
    any input is read (exit 2), by the check of h5mdx rmsd's outputs."""
    from MDAnalysisTests.datafiles import DCD, PSF

    argv = [PSF, DCD, out] if command == "convert" else [small, out]
    assert main([command, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx {command}: the output {out!r} cannot be written: '/proc' "
                            "is a kernel file system, which holds no files\n")
    assert captured.out == ""


def test_a_zarr_store_to_replace_is_checked_inside(small, tmp_path, capsys):
    """An existing store (a directory) given with --overwrite is not 'a directory; give a
    file name': the check looks inside it, and the copy replaces it."""
    out = tmp_path / "o.zarr"
    out.mkdir()
    assert main(["rechunk", small, str(out), "--overwrite", "--no-progress"]) == 0
    assert (out / "zarr.json").exists() or (out / ".zgroup").exists()
    capsys.readouterr()


@pytest.mark.parametrize("command", ["convert", "rechunk"])
def test_an_output_named_as_no_file_written_is_a_usage_error(small, tmp_path, capsys,
                                                             command):
    """OUT.txt was refused with exit status 1 and a '(run with --debug ...)' hint, as a
    failure of the copy; it is a usage error (exit 2), one line."""
    from MDAnalysisTests.datafiles import DCD, PSF

    out = str(tmp_path / "o.txt")
    argv = [PSF, DCD, out] if command == "convert" else [small, out]
    assert main([command, *argv]) == 2
    assert capsys.readouterr().err == (f"h5mdx {command}: the output {out!r} is named as a "
                                       f".txt file: {command} writes H5MD (.h5md, .h5, "
                                       ".hdf5) or Zarr (.zarr)\n")


def test_an_output_the_library_refuses_is_a_usage_error(small, tmp_path, capsys):
    """The output given as the input, or in a directory that does not exist, was refused
    with exit status 1 and a '(run with --debug ...)' hint, as a failure of the copy; the
    library's own check says it first, as a usage error (exit 2), one line."""
    assert main(["rechunk", small, small, "--overwrite"]) == 2
    assert capsys.readouterr().err == (f"h5mdx rechunk: the output {small!r} is also an "
                                       "input; h5mdx never writes over its input: choose "
                                       "another output name\n")
    out = str(tmp_path / "none" / "o.h5md")
    assert main(["rechunk", small, out]) == 2
    assert capsys.readouterr().err == (f"h5mdx rechunk: the output directory "
                                       f"{str(tmp_path / 'none')!r} does not exist\n")
    existing = tmp_path / "o.h5md"  # an existing output: said by the command, as before
    existing.write_bytes(b"")
    assert main(["rechunk", small, str(existing)]) == 1
    assert "already exists; pass --overwrite to replace it" in capsys.readouterr().err
