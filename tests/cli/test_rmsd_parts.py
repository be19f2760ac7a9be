"""``h5mdx rmsd`` of a trajectory in several files (audit46: it took one file)."""

from __future__ import annotations

import csv
import shutil
import warnings

import numpy as np
import pytest
import xarray as xr
from MDAnalysis.analysis import rms
from MDAnalysisTests.datafiles import PSF

from h5mdx.cli import main
from h5mdx.cli.parts import NotOneTrajectory, expand, open_parts

ATOL = 1e-4  # Angstrom; float32 positions


@pytest.fixture(scope="module")
def expected_ca(adk_universe):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rms.RMSD(adk_universe, select="name CA").run().results.rmsd[:, 2]


@pytest.fixture(scope="module")
def parts(tmp_path_factory, adk_h5md):
    """adk in three files, as a run continued twice from its last frame: frames 0-39,
    39-69 and 69-97 (each part begins with the frame its predecessor ended with)."""
    where = tmp_path_factory.mktemp("parts")
    names = []
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        for i, (a, b) in enumerate(((0, 40), (39, 70), (69, 98))):
            names.append(ds.isel(time=slice(a, b)).md.to_h5md(where / f"run-{i + 1}.h5md"))
    return names


def _series(path):
    with open(path) as f:
        return np.array([float(row["rmsd"]) for row in csv.DictReader(f)])


def test_rmsd_of_a_run_in_three_files_is_mdanalysis_of_the_whole(parts, expected_ca,
                                                                 tmp_path, capsys):
    out = tmp_path / "rmsd.csv"
    assert main(["rmsd", *parts, "--topology", PSF, "--select", "name CA",
                 "--no-progress", "--out", str(out)]) == 0
    got = _series(out)
    assert got.size == 98 and np.abs(got - expected_ca).max() < ATOL
    assert "98 frames of 3 files" in capsys.readouterr().out
    # a quoted pattern stands for the files it matches, sorted
    assert expand([parts[0].replace("run-1", "run-*")]) == parts
    out2 = tmp_path / "rmsd2.csv"
    assert main(["rmsd", parts[0].replace("run-1", "run-*"), "--topology", PSF,
                 "--select", "name CA", "--no-progress", "--out", str(out2)]) == 0
    np.testing.assert_array_equal(_series(out2), got)


def test_the_parts_keep_the_repeated_frame_once(parts, adk_h5md):
    with open_parts(parts) as opened, xr.open_dataset(adk_h5md, engine="h5md") as whole:
        assert [ds.sizes["time"] for ds in opened] == [40, 30, 28]
        np.testing.assert_array_equal(np.concatenate([ds.step.values for ds in opened]),
                                      whole.step.values)
        np.testing.assert_array_equal(
            np.concatenate([ds.position.values for ds in opened]), whole.position.values)
        assert all(ds.position.chunks is None for ds in opened)  # each read as alone


def test_rmsd_of_parts_from_python_is_the_whole_runs(parts, adk_universe, expected_ca):
    """h5mdx.rmsd takes the parts as a list: one series, the reference a frame of them
    all (here frame 50, in the second part), each part read as a file alone."""
    import h5mdx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rms.RMSD(adk_universe, select="name CA", ref_frame=50).run().results.rmsd
    with open_parts(parts, topology=PSF) as opened:
        series = h5mdx.rmsd(list(opened), 50, select="name CA")
        assert series.attrs["reference_frame"] == 50 and series.sizes["time"] == 98
        assert np.abs(series.values - want[:, 2]).max() < ATOL
        np.testing.assert_array_equal(series.step.values, want[:, 0].astype(int) + 1)
        with pytest.raises(IndexError, match="reference frame 98 out of range for 98 "
                           r"frames \(of 3 parts\)"):
            h5mdx.rmsd(list(opened), 98)


def test_files_that_are_not_one_trajectory_are_refused(parts, tmp_path, capsys, adk_h5md):
    assert main(["rmsd", parts[1], parts[0], "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "run-1.h5md begins at step 1, before the last of" in err and "run-2.h5md (70)" in err
    assert "--debug" not in err
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        ds.isel(time=slice(98 - 10, None), atom=slice(0, 100)).md.to_h5md(tmp_path / "few.h5md")
    shutil.copy(parts[0], tmp_path / "first.h5md")
    assert main(["rmsd", str(tmp_path / "first.h5md"), str(tmp_path / "few.h5md"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the files hold other atoms, so they are not one trajectory: first.h5md 3341, " \
           "few.h5md 100" in err
    assert main(["rmsd", str(tmp_path / "run-*.h5md"), "--no-progress"]) == 2
    assert "No file matches" in capsys.readouterr().err


def test_an_empty_part_is_no_seam(parts, tmp_path, adk_h5md):
    """A part without frames (a run stopped before its first) between two others: the
    frame repeated at the seam was kept twice (99 frames, step 40 twice) and parts in the
    wrong order around it were taken. The RMSD is MDAnalysis' of the parts
    read by its ChainReader, the repeated frames left out."""
    import MDAnalysis as mda

    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        empty = ds.isel(time=slice(0, 0)).md.to_h5md(tmp_path / "empty.h5md")
    given = [parts[0], empty, parts[1], empty, parts[2]]
    with open_parts(given) as opened:
        assert [ds.sizes["time"] for ds in opened] == [40, 0, 30, 0, 28]
        np.testing.assert_array_equal(np.concatenate([ds.step.values for ds in opened]),
                                      np.arange(1, 99))
    out = tmp_path / "rmsd.csv"
    assert main(["rmsd", *given, "--topology", PSF, "--select", "name CA",
                 "--no-progress", "--out", str(out)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chained = mda.Universe(PSF, list(parts))  # 40 + 31 + 29 frames
        want = rms.RMSD(chained, select="name CA").run().results.rmsd[:, 2]
    got = _series(out)
    assert got.size == 98 and np.abs(got - np.delete(want, [40, 71])).max() < ATOL
    with pytest.raises(NotOneTrajectory, match="run-1.h5md begins at step 1, before the "
                       r"last of .*run-2.h5md \(70\)"):
        open_parts([parts[1], empty, parts[0]])


def test_a_part_without_times_times_the_series_by_step(parts, tmp_path, expected_ca):
    """A part whose file has no time (pyh5md writes none; a stopped writer's is ignored)
    among parts timed in ps: h5mdx rmsd failed, "cannot parse unit 'step'".
    Now the series is timed by the steps of every part, with a warning."""
    import h5py

    import h5mdx

    untimed = str(shutil.copy(parts[1], tmp_path / "run-2.h5md"))
    with h5py.File(untimed, "a") as f:
        for element in f["particles/trajectory"].values():
            if isinstance(element, h5py.Group) and "time" in element:
                del element["time"]
    given = [parts[0], untimed, parts[2]]
    with open_parts(given, topology=PSF) as opened:
        assert opened[1].time.attrs["units"] == "step" != opened[0].time.attrs["units"]
        with pytest.warns(RuntimeWarning, match="part 1 of the trajectory has no times"):
            series = h5mdx.rmsd(list(opened), 0, select="name CA").compute()
    np.testing.assert_array_equal(series.time.values, np.arange(1, 99))
    np.testing.assert_array_equal(series.step.values, np.arange(1, 99))
    assert series.time.attrs["units"] == "step"
    assert np.abs(series.values - expected_ca).max() < ATOL
    out = tmp_path / "rmsd.csv"
    with pytest.warns(RuntimeWarning, match="no times"):
        assert main(["rmsd", *given, "--topology", PSF, "--select", "name CA",
                     "--no-progress", "--out", str(out)]) == 0
    assert np.abs(_series(out) - expected_ca).max() < ATOL


def test_a_pattern_takes_its_files_in_the_order_of_their_numbers(adk_h5md, tmp_path,
                                                                   expected_ca):
    """'run-*.h5md' over run-1 .. run-11 took run-10 and run-11 before run-2 (the order of
    their letters) and was refused as out of order."""
    with xr.open_dataset(adk_h5md, engine="h5md") as ds:
        for i, a in enumerate(range(0, 98, 9)):
            ds.isel(time=slice(a, a + 9)).md.to_h5md(tmp_path / f"run-{i + 1}.h5md")
    pattern = str(tmp_path / "run-*.h5md")
    assert [p.rsplit("/", 1)[1] for p in expand([pattern])] == [
        f"run-{i}.h5md" for i in range(1, 12)]
    out = tmp_path / "rmsd.csv"
    assert main(["rmsd", pattern, "--topology", PSF, "--select", "name CA",
                 "--no-progress", "--out", str(out)]) == 0
    got = _series(out)
    assert got.size == 98 and np.abs(got - expected_ca).max() < ATOL


def test_parts_opened_alone_say_their_repeated_frame(parts, adk_universe):
    """Parts opened each on its own, given to h5mdx.rmsd: the frame that ends one and
    begins the next is in the series twice (100 frames, where h5mdx rmsd of the files
    gives 98), which was said nowhere."""
    import h5mdx

    opened = [xr.open_dataset(p, engine="h5md", topology=PSF) for p in parts]
    try:
        with pytest.warns(RuntimeWarning) as said:
            series = h5mdx.rmsd(opened, 0, select="name CA")
        seams = [str(w.message) for w in said if "begins with the frame" in str(w.message)]
        assert len(seams) == 2 and "part 1 of the trajectory" in seams[0]
        assert "(step 40)" in seams[0] and "(step 70)" in seams[1]
        assert series.sizes["time"] == 100
        with open_parts(parts, topology=PSF) as cut, warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # nothing repeated: no warning
            assert h5mdx.rmsd(list(cut), 0, select="name CA").sizes["time"] == 98
    finally:
        for ds in opened:
            ds.close()


def test_a_part_timed_in_ns_joins_in_ps_as_its_decimals(parts, tmp_path):
    """Part 1's times in ns, joined to part 0's in ps (files opened without converting
    units keep theirs), were multiplied into float noise (0.0041 ns as
    4.1000000000000005 ps), which series.sel(time=...) missed."""
    import h5py

    import h5mdx

    first = str(shutil.copy(parts[0], tmp_path / "run-1.h5md"))
    second = str(shutil.copy(parts[1], tmp_path / "run-2.h5md"))
    for path, times, unit in ((first, np.arange(1, 41) / 10, "ps"),
                              (second, np.arange(40, 71) / 1e4, "ns")):
        with h5py.File(path, "a") as f:
            time = f["particles/trajectory/position/time"]
            time[...], time.attrs["unit"] = times, unit
    with open_parts([first, second], convert_units=False) as opened:
        assert opened[1].time.attrs["units"] == "ns"
        series = h5mdx.rmsd(list(opened), 0).compute()
    assert series.time.attrs["units"] == "ps"
    np.testing.assert_array_equal(series.time.values, np.arange(1, 71) / 10)
    assert int(series.sel(time=4.1).step) == 41


def _restepped(parts, tmp_path, how):
    """Copies of ``parts`` whose steps begin at 0 in each file ("renumbered": a run
    restarted with its step count reset) or that have no steps ("no steps")."""
    import h5py

    given = []
    for i, path in enumerate(parts):
        copy = str(shutil.copy(path, tmp_path / f"run-{i + 1}.h5md"))
        with h5py.File(copy, "a") as f:
            for element in f["particles/trajectory"].values():
                if isinstance(element, h5py.Group) and "step" in element:
                    if how == "no steps":
                        del element["step"]
                    else:
                        element["step"][...] = np.arange(element["step"].shape[0])
        given.append(copy)
    return given


@pytest.mark.parametrize("how", ["renumbered", "no steps"])
def test_parts_opened_alone_say_their_repeated_frame_by_time(parts, tmp_path, how):
    """Parts whose steps start anew (or that have none), opened each on its own and given
    to h5mdx.rmsd: the frame that ends one and begins the next, which h5mdx rmsd of the
    files keeps once (found by their times), was in the series twice without a word (the
    warning compared steps alone). It now finds the seams as h5mdx rmsd does."""
    import h5mdx

    given = _restepped(parts, tmp_path, how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the files' missing steps
        opened = [xr.open_dataset(p, engine="h5md") for p in given]
    try:
        times = [float(ds.time[-1]) for ds in opened[:2]]
        with pytest.warns(RuntimeWarning) as said:
            series = h5mdx.rmsd(opened, 0)
        seams = [str(w.message) for w in said if "begins with the frame" in str(w.message)]
        assert len(seams) == 2 and "part 1 of the trajectory" in seams[0]
        assert f"(time {times[0]})" in seams[0] and f"(time {times[1]})" in seams[1]
        assert series.sizes["time"] == 100
    finally:
        for ds in opened:
            ds.close()


@pytest.mark.parametrize("how", ["renumbered", "no steps"])
def test_parts_whose_steps_start_anew_are_ordered_by_time(parts, tmp_path, expected_ca, how):
    """Parts whose steps begin at 0 again (a run restarted with its step count reset) or
    that have no steps (frames numbered 0..n-1) were refused as out of order ('begins at
    step 0, before the last of ...'), though their times follow. Now their
    times order them, the repeated frame kept once; a wrong order is still refused."""
    given = _restepped(parts, tmp_path, how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the files' missing steps
        with open_parts(given) as opened:
            assert [ds.sizes["time"] for ds in opened] == [40, 30, 28]
        with pytest.raises(NotOneTrajectory, match="run-1.h5md begins at step 0"):
            open_parts([given[1], given[0]])
        out = tmp_path / "rmsd.csv"
        assert main(["rmsd", *given, "--topology", PSF, "--select", "name CA",
                     "--no-progress", "--out", str(out)]) == 0
    got = _series(out)
    assert got.size == 98 and np.abs(got - expected_ca).max() < ATOL


def test_the_cli_series_names_the_reference_by_its_step(parts, tmp_path, adk_h5md):
    """``h5mdx rmsd`` of the parts with --reference 50: the .nc says the reference's step
    and time (the frame index alone is an index of the frames given)."""
    out = tmp_path / "r.nc"
    assert main(["rmsd", *parts, "--topology", PSF, "--select", "name CA", "--reference",
                 "50", "--out", str(out), "--no-progress", "--scheduler", "threads",
                 "--workers", "1"]) == 0
    with xr.open_dataset(adk_h5md, engine="h5md", convert_units=True) as whole, \
            xr.open_dataarray(out) as back:
        assert back.attrs["reference_frame"] == 50
        assert back.attrs["reference_step"] == int(whole.step[50])
        assert back.attrs["reference_time"] == float(whole.time[50])


def test_a_first_part_of_no_frames_does_not_choose_the_scheduler(tmp_path, capsys):
    """A first part of no frames (a run stopped before its first frame) chose the
    scheduler: 'distributed (... empty or scalar dataset)', a local cluster of worker
    processes started for a file h5mdx reads with threads. The first part with frames
    chooses it now."""
    from h5mdx.testing import write_h5md
    from infra import random_trajectory

    empty = write_h5md(tmp_path / "a.h5md", {"all": {"position": {
        "value": np.zeros((0, 30, 3), np.float32), "step": np.zeros(0, np.int64),
        "time": np.zeros(0), "unit": "nm"}}})
    full = random_trajectory(tmp_path / "b.h5md", 20, 30, 4, 3)
    assert main(["rmsd", empty, full, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("h5mdx rmsd: scheduler threads (")
    assert "rmsd: 20 frames of 2 files" in captured.out


def test_a_part_of_no_frames_sets_no_unit_and_is_warned_of_for_none(tmp_path, capsys):
    """A part of no frames and no unit, first or not, was warned of ('part 1 of the
    trajectory has its RMSD in no unit, the first part in Angstrom') and, first, labelled
    the series with its missing unit ('rmsd (the file's length unit, which it does not
    name)'). The first part with frames sets the units; a part of none is not warned of."""
    from h5mdx.testing import write_h5md
    from infra import random_trajectory

    empty = write_h5md(tmp_path / "a.h5md", {"all": {"position": {
        "value": np.zeros((0, 30, 3), np.float32), "step": np.zeros(0, np.int64),
        "time": np.zeros(0)}}})
    full = random_trajectory(tmp_path / "b.h5md", 20, 30, 4, 3)
    for given in ([empty, full], [full, empty]):
        assert main(["rmsd", *given, "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert "warning" not in captured.err
        assert "\nrmsd (Å): first " in captured.out
