"""``h5mdx example``: builds the trajectory, runs the timed RMSD, writes the report."""

from __future__ import annotations

import json
import os
import re
import warnings

import h5py
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # the worked example end to end (a local cluster, ~20 s)

pytest.importorskip("MDAnalysisTests")
pytest.importorskip("distributed")
pytest.importorskip("matplotlib")

from h5mdx.cli import main  # noqa: E402
from h5mdx.examples import (  # noqa: E402
    build_adk_trajectory,
    perturbed_frames,
    source_index,
    summary_lines,
)
from h5mdx.examples.trajectory import _adk_source  # noqa: E402
from h5mdx.testing import adk_example, assert_rmsd_close  # noqa: E402

FRAMES = 300
POSITION = "particles/trajectory/position/value"


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("example") / "h5mdx-example"
    code = main(["example", "--frames", str(FRAMES), "--out", str(out), "--no-progress",
                 "--mda-frames", "100"])
    return code, out


@pytest.fixture(scope="module")
def mda_dcd_rmsd():
    """MDAnalysis' C-alpha RMSD on the PSF/DCD itself (98 frames)."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms
    from MDAnalysisTests.datafiles import DCD, PSF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
        return rms.RMSD(u, select="name CA").run().results.rmsd[:, 2]


def test_outputs_exist(example_run, capsys):
    code, out = example_run
    assert code == 0
    for name in ("report.html", "rmsd.png", "gantt.png", "workers.png", "rmsd.csv",
                 "timing.csv", f"adk-{FRAMES}.h5md"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    from h5mdx.examples.run import _MANIFEST

    # no temporary files left; the list of the files published stays
    assert [p for p in os.listdir(out) if p.startswith(".")] == [_MANIFEST]
    page = (out / "report.html").read_text(encoding="utf-8")
    for name in ("rmsd.png", "gantt.png", "workers.png", "rmsd.csv", "timing.csv"):
        assert f'"{name}"' in page  # relative links
    assert "read floor" in page and "MDAnalysis" in page
    assert "raw reads (os.preadv)" in page and "h5mdx example --out" in page
    assert "not a real simulation" in page and "HDF5 " in page  # versions
    rounds = json.loads((out / "rounds.json").read_text())
    assert all(len(rounds["seconds"][k]) == 5 for k in ("rmsd", "floor", "raw"))


def test_rmsd_equals_mdanalysis_on_the_shipped_frames(example_run, mda_dcd_rmsd):
    _, out = example_run
    table = np.genfromtxt(out / "rmsd.csv", delimiter=",", names=True)
    assert table.size == FRAMES
    np.testing.assert_array_equal(table["frame"], np.arange(FRAMES))
    assert_rmsd_close(table["rmsd"][:98], mda_dcd_rmsd, atol=1e-4)
    # the perturbed frames stay close to the frames they come from (noise 0.05 Å)
    later = table["rmsd"][98:]
    expected = mda_dcd_rmsd[source_index(np.arange(98, FRAMES))]
    assert np.all(np.abs(later - expected) < 0.2) and np.all(later > 0.05)


def test_summary_lines(example_run, capsys):
    # the module fixture ran inside the first test; run the CLI again on the cached file
    _, out = example_run
    assert main(["example", "--frames", str(FRAMES), "--out", str(out), "--no-progress",
                 "--mda-frames", "50"]) == 0
    text = capsys.readouterr().out
    assert "(cached)" in text
    assert re.search(rf"^rmsd  {FRAMES} frames  in [\d.]+ s  [\d,]+ frames/s  [\d.]+ GB/s  = "
                     r"[\d.]+x the h5py read floor of this machine \([\d,]+ frames/s", text,
                     re.M)
    # the ceiling above the floor: the same bytes read with os.preadv, paired too
    assert re.search(r"^raw reads of the same bytes \(os.preadv, no HDF5, 2 process\(es\)\): "
                     r"[\d,]+ frames/s, [\d.]+ GB/s; the RMSD runs at [\d.]+x of them", text,
                     re.M)
    assert "not a real simulation" in text
    # the floor and the RMSD timed in the same rounds: the ratio is the median of theirs
    assert re.search(r"2 h5py reader\(s\), medians of 5 rounds timing each back to back; "
                     r"the ratio is the median of the rounds' ratios, by round "
                     r"[\d.]+x-[\d.]+x\)$", text, re.M)
    assert re.search(r"^MDAnalysis \S+ \(serial, as it runs by default\): 50 frames in [\d.]+ "
                     r"s -> [\d,]+ frames/s \(sampled, extrapolated to all: [\d.,]+ s\) -> "
                     r"h5mdx is [\d.,]+x faster", text, re.M)
    assert re.search(r"^I/O \d+%  compute \d+%", text, re.M)
    assert re.search(r"^stragglers: .*> 1\.5x the median of the other tasks and > 50 ms longer", text, re.M)
    assert re.search(r"^warm-up: modules imported and kernel loaded on 2 worker\(s\)", text, re.M)
    assert re.search(r"^outputs: .*report\.html", text, re.M)


def test_trajectory_construction(tmp_path):
    _, source, t0, dt = _adk_source()
    path = build_adk_trajectory(tmp_path / "adk.h5md", 250, progress=False, block=64)
    with h5py.File(path, "r") as f:
        d = f[POSITION]
        assert d.shape == (250, 3341, 3) and d.chunks == (100, 3341, 3)
        assert d.compression is None
        np.testing.assert_array_equal(d[:98], source)  # the DCD's frames, exactly
        # deterministic whatever the block size: the same frames as generated in one go
        np.testing.assert_array_equal(d[98:], perturbed_frames(source, 98, 250))
        np.testing.assert_allclose(f["particles/trajectory/position/time"][:3],
                                   t0 + np.arange(3) * dt)
        # the steps of the DCD's frames (and adk_example's): 1, 2, ... at 1, 2, ... ps
        # (they were 0, 1, ... at 1, 2, ... ps)
        np.testing.assert_array_equal(f["particles/trajectory/position/step"][:3],
                                      [1, 2, 3])
        with h5py.File(adk_example(), "r") as small:
            np.testing.assert_array_equal(f["particles/trajectory/position/step"][:98],
                                          small["particles/trajectory/position/step"][:])
        assert "mass" in f["particles/trajectory"]
    mtime = os.path.getmtime(path)
    assert build_adk_trajectory(path, 250, progress=False) == path  # cached
    assert os.path.getmtime(path) == mtime
    build_adk_trajectory(path, 120, progress=False)  # another size: rebuilt in place
    with h5py.File(path, "r") as f:
        assert f[POSITION].shape[0] == 120
    with pytest.raises(ValueError, match="at least 98 frames"):
        build_adk_trajectory(tmp_path / "small.h5md", 50, progress=False)


def test_source_index_goes_back_and_forth():
    idx = source_index(np.arange(400))
    np.testing.assert_array_equal(idx[:98], np.arange(98))
    np.testing.assert_array_equal(idx[98:196], np.arange(97, -1, -1))
    np.testing.assert_array_equal(idx[196:294], np.arange(98))
    assert np.abs(np.diff(idx)).max() == 1  # no jumps


def test_cli_refuses_a_selection_mdanalysis_cannot_use(tmp_path, capsys):
    assert main(["example", "--out", str(tmp_path), "--select", "protein and ("]) == 2
    err = capsys.readouterr().err
    assert err.startswith("h5mdx example: --select 'protein and (': ") and "Traceback" not in err
    assert main(["example", "--out", str(tmp_path), "--select", "name XYZ"]) == 2
    assert "matches no atoms" in capsys.readouterr().err


def test_cli_runs_a_selection_by_position_on_the_reference_frame(tmp_path, capsys):
    """``--select 'name CA and around 8 resid 1'`` was refused ('AtomGroup has no
    attribute dimensions': checked on the topology alone), though h5mdx and MDAnalysis
    both make it on frame 0; it runs now, on the 18 C-alpha atoms it picks there."""
    import MDAnalysis as mda
    from MDAnalysis.analysis import rms
    from MDAnalysisTests.datafiles import DCD, PSF

    select = "name CA and around 8 resid 1"
    assert main(["example", "--frames", "98", "--out", str(tmp_path), "--no-progress",
                 "--mda-frames", "20", "--select", select]) == 0
    text = capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(PSF, DCD)
        expected = rms.RMSD(u, select=select).run().results.rmsd[:, 2]
    assert u.select_atoms(select).n_atoms == 18
    table = np.genfromtxt(tmp_path / "rmsd.csv", delimiter=",", names=True)
    assert_rmsd_close(table["rmsd"], expected, atol=1e-4)
    assert re.search(r"^MDAnalysis .* same RMSD to \S+ Å$", text, re.M)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "around 8 resid 1&#x27; (18 atoms)</td>" in page


def test_cli_rejects_too_few_frames(tmp_path, capsys):
    assert main(["example", "--frames", "10", "--out", str(tmp_path)]) == 2
    assert "--frames must be at least 98" in capsys.readouterr().err


def test_outputs_are_staged_and_stale_stages_removed(tmp_path):
    """A run writes into a staging directory and renames its outputs into place at the
    end (an interrupted rerun left new series beside an old report); a stage left by a
    process that is gone is removed by the next run, and one interrupted (Ctrl-C) goes
    at once."""
    from h5mdx._replace import host_name
    from h5mdx.examples.run import _STAGE, _staged

    dead = tmp_path / f"{_STAGE}999999999"  # of an earlier version: no host in its name
    dead_here = tmp_path / f"{_STAGE}{host_name()}-999999998"
    for stage in (dead, dead_here):
        stage.mkdir()
        (stage / "rmsd.csv").write_text("old")
    with _staged(str(tmp_path)) as mine:
        assert not dead.exists() and not dead_here.exists()
        assert os.path.basename(mine) == f"{_STAGE}{host_name()}-{os.getpid()}"
        assert os.listdir(mine) == []
    with pytest.raises(KeyboardInterrupt), _staged(str(tmp_path)) as mine:
        (tmp_path / mine / "rmsd.csv").write_text("new")
        raise KeyboardInterrupt
    assert not os.path.exists(mine)


def test_cli_refuses_an_output_that_is_a_file(tmp_path, capsys):
    """``--out FILE`` failed with '[Errno 17] File exists'."""
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    assert main(["example", "--frames", "100", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is a file; the example writes" in err and "Errno" not in err
    assert out.read_text() == "mine"


def _result(seconds=0.5, n_frames=1000, io=0.25, compute=0.25, warmup=0.0, select="name CA",
            **kw):
    """An ExampleResult of made-up figures: two tasks of 1 s, ``io``, ``compute`` and
    ``warmup`` s each."""
    from h5mdx.examples import ExampleResult
    from h5mdx.floor import floor_figures
    from h5mdx.timing import records as rec

    rows = [{"run_id": "r", "backend": "distributed", "n_workers": 2, "worker": f"w{i}",
             "task_key": f"k{i}", "kind": "rmsd", "frame_start": 500 * i,
             "frame_stop": 500 * (i + 1), "t_start": 1.0, "t_stop": 2.0, "t_io": io,
             "t_compute": compute, "t_warmup": warmup} for i in range(2)]
    nbytes = n_frames * 3341 * 12
    floor = floor_figures(2, n_frames, nbytes, seconds)
    return ExampleResult(out="out", trajectory="adk.h5md", n_frames=n_frames, n_atoms=3341,
                         n_selected=214, nbytes=nbytes, chunks=(100, 3341, 3),
                         built_seconds=None, workers=2, select=select, seconds=seconds,
                         rmsd=None, floor=floor, mda=None, records=rec.to_frame(rows), **kw)


def test_the_busy_time_split_adds_up_to_100_percent():
    """Each share was rounded alone: 33.5% + 33.5% + 33% showed as 34% + 34% + 33% = 101%
    (and 99% elsewhere); the largest remainders are rounded up now."""
    from h5mdx.examples.report import _html_rows

    lines = summary_lines(_result(io=0.335, compute=0.335))
    line = next(x for x in lines if x.startswith("I/O "))
    shares = [int(p) for p in re.findall(r"(\d+)%", line)]
    assert sum(shares) == 100 and shares == [34, 33, 33]
    row = dict(_html_rows(_result(io=0.335, compute=0.335)))["busy time split"]
    assert row == "io 34%, compute 33%, warmup 0%, other 33%"
    # the warm-up line shows the warm-up's share as the split does (1.4% is 2% there)
    lines = summary_lines(_result(io=0.501, compute=0.301, warmup=0.014))
    assert next(x for x in lines if x.startswith("I/O ")).startswith(
        "I/O 50%  compute 30%  warm-up 2%  other 18%")
    assert "in 2 task(s) (2% of the work)" in lines[-1]


def test_the_straggler_line_of_one_task():
    """A trajectory of one chunk (98 frames) is one task: the summary said 'stragglers:
    none of 1 tasks'."""
    res = _result(n_frames=98)
    res.records = res.records.iloc[:1]
    line = next(x for x in summary_lines(res) if x.startswith("stragglers: "))
    assert line.startswith("stragglers: none of 1 task (a task is a straggler when")
    assert next(x for x in summary_lines(_result()) if x.startswith("stragglers: ")
                ).startswith("stragglers: none of 2 tasks (")


def test_mdanalysis_faster_than_the_rmsd_is_said_so():
    """Where the RMSD took longer than MDAnalysis would for all frames (a loaded machine,
    a small file), the summary said 'h5mdx is 0.50x faster'; now 'h5mdx is 2.00x slower'."""
    import xarray as xr

    mda = {"version": "2.11.0", "frames": 100, "seconds": 0.1, "frames_per_s": 1000.0,
           "rmsd": np.full(100, 1.5)}
    res = _result(seconds=2.0, n_frames=1000)
    res.mda, res.rmsd = mda, xr.DataArray(np.full(1000, 1.5), dims="time")
    line = next(x for x in summary_lines(res) if x.startswith("MDAnalysis "))
    assert "(sampled, extrapolated to all: 1.00 s) -> h5mdx is 2.00x slower; " in line
    res.seconds = 0.25
    line = next(x for x in summary_lines(res) if x.startswith("MDAnalysis "))
    assert "-> h5mdx is 4.00x faster; same RMSD to 0 Å" in line


def test_the_seconds_shown_give_the_rates_shown():
    """Two decimals showed 0.0384 s as 0.04 s beside 13,017 frames/s (500 / 0.04 = 12,500)
    and a raw read of 0.0037 s as 0.00 s beside its 135,000 frames/s; three significant
    figures at least now."""
    from h5mdx.examples.report import _html_rows
    from h5mdx.floor import floor_figures

    raw = floor_figures(2, 500, 500 * 3341 * 12, 0.00367)
    res = _result(seconds=0.03841, n_frames=500, raw=raw, raw_ratios=[0.1])
    first = summary_lines(res)[0]
    secs, rate, gbs = re.match(r"rmsd  500 frames  in ([\d.]+) s  ([\d,]+) frames/s  "
                               r"([\d.]+) GB/s", first).groups()
    assert secs == "0.0384" and rate == "13,017" and gbs == "0.522"
    assert 500 / float(secs) == pytest.approx(float(rate.replace(",", "")), rel=2e-3)
    rows = dict(_html_rows(res))
    assert rows["RMSD"].startswith("0.0384 s, 13,017 frames/s, 0.522 GB/s")
    assert rows["raw reads (os.preadv)"].startswith("0.00367 s, 136,240 frames/s, 5.46 GB/s")
    assert "0.0200 GB of positions" in rows["trajectory"]


def test_the_floor_counts_the_readers_of_a_file_of_one_chunk(tmp_path):
    """98 frames are one chunk: one h5py process and one raw reader read them; with two
    workers the example said '2 h5py reader(s)' and '2 process(es)'."""
    from h5mdx.examples import run_example
    from h5mdx.layout._atomic import _host

    # and a build of another size killed outright left its partial file: it goes
    dead = tmp_path / f".adk-20000.h5md.{_host()}.999999999.0b62.h5mdx-partial"
    dead.write_bytes(b"\0" * 1000)
    said: list[str] = []
    res = run_example(tmp_path, 98, workers=2, mda_frames=0, progress=False, echo=said.append)
    assert not dead.exists()
    assert res.floor["workers"] == 1 and res.raw["workers"] == 1
    assert any("read floor (1 h5py reader process(es))" in line for line in said)
    first = summary_lines(res)[0]
    assert "with 1 h5py reader(s)" in first
    # rounds.json said only "workers": 2, the cluster's, beside the floor's seconds
    rounds = json.loads((tmp_path / "rounds.json").read_text())
    assert rounds["workers"] == 2 and rounds["readers"] == 1 and rounds["frames"] == 98
    # every file published is named: timing.meta.json was published but not named
    from h5mdx.examples.run import _MANIFEST

    published = json.loads((tmp_path / _MANIFEST).read_text())["files"]
    outputs = next(x for x in summary_lines(res) if x.startswith("outputs: "))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    for name in published:
        assert name == "report.html" or name in outputs, name
        assert f'href="{name}"' in page or name == "report.html", name
    assert len(rounds["seconds"]["floor"]) == 5


def test_the_summary_says_how_the_rmsd_read_the_file(tmp_path, monkeypatch):
    """With H5MDX_DIRECT_READ=0 the RMSD reads through h5py, yet the summary said 'h5mdx
    reads the chunks itself, past HDF5'; it names the read the run made now."""
    from h5mdx.examples import run_example

    monkeypatch.setenv("H5MDX_DIRECT_READ", "0")
    res = run_example(tmp_path, 98, workers=1, mda_frames=0, progress=False,
                      echo=lambda _: None)
    line = next(x for x in summary_lines(res) if x.startswith("raw reads"))
    assert line.endswith("(h5mdx read the positions through h5py here "
                         "(H5MDX_DIRECT_READ=0), then computed)")
    assert "past HDF5" not in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert res.via_h5py == "H5MDX_DIRECT_READ=0"
    monkeypatch.delenv("H5MDX_DIRECT_READ")
    res = run_example(tmp_path, 98, workers=1, mda_frames=0, progress=False,
                      echo=lambda _: None)
    assert res.via_h5py is None
    assert "(h5mdx reads the chunks itself, past HDF5, then computes" in summary_lines(res)[1]


def test_partial_files_of_killed_builds_go_whatever_their_size(tmp_path):
    """A build killed outright (SIGKILL) left .adk-20000.h5md....h5mdx-partial (361 MB at
    20,000 frames): a run of another size into the same --out kept it for good."""
    from h5mdx.examples.trajectory import remove_dead_builds
    from h5mdx.layout._atomic import _host

    dead = tmp_path / f".adk-20000.h5md.{_host()}.999999999.0b62.h5mdx-partial"
    alive = tmp_path / f".adk-500.h5md.{_host()}.{os.getpid()}.77aa.h5mdx-partial"
    other = tmp_path / ".notes.txt"
    for p in (dead, alive, other):
        p.write_bytes(b"x")
    assert remove_dead_builds(str(tmp_path)) == ["adk-20000.h5md", "adk-500.h5md"]
    assert not dead.exists() and alive.exists() and other.exists()


def test_the_report_escapes_the_selection_in_its_figure_titles(tmp_path):
    """A selection such as 'name CA and prop mass < 14' (h5mdx example accepts it) went
    into report.html's figure titles as it is: '<h2>RMSD of 'name CA and prop mass < 14'...'
    and alt="..." unescaped (a double quote in it ended the attribute)."""
    from h5mdx.examples import write_report

    select = 'name CA and prop mass < 14 and not name "X"'
    res = _result(select=select)
    res.out = str(tmp_path)
    page = open(write_report(res)["report"], encoding="utf-8").read()
    assert "mass < 14" not in page and 'name "X"' not in page
    title = "RMSD of &#x27;name CA and prop mass &lt; 14 and not name &quot;X&quot;&#x27;"
    assert f"<h2>{title}</h2>" in page and f'alt="{title}"' in page


def test_cli_refuses_to_replace_files_it_did_not_write(tmp_path, capsys):
    """``h5mdx example --out .`` replaced a report.html or rmsd.csv of the user's own (an
    audit); now refused before any work, unless --overwrite."""
    (tmp_path / "report.html").write_text("<p>my notes</p>")
    (tmp_path / "rmsd.csv").write_text("mine")
    (tmp_path / "notes.txt").write_text("not an output name")
    assert main(["example", "--frames", "100", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "holds rmsd.csv, report.html, which the example would replace" in err
    assert "pass --overwrite" in err and "give another --out" in err and "(out=)" not in err
    assert (tmp_path / "report.html").read_text() == "<p>my notes</p>"
    assert (tmp_path / "rmsd.csv").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "report.html", "rmsd.csv"]


def test_cli_refuses_to_replace_a_trajectory_it_did_not_build(tmp_path, capsys):
    """An adk-98.h5md of the user's own in --out (the adk example converted by hand) was
    rebuilt in its place without a word; now refused before any work, unless --overwrite;
    a trajectory an earlier run built of another recipe is rebuilt as before."""
    import shutil

    mine = tmp_path / "adk-98.h5md"
    shutil.copyfile(adk_example(), mine)
    before = mine.read_bytes()
    assert main(["example", "--frames", "98", "--out", str(tmp_path), "--no-progress",
                 "--mda-frames", "0"]) == 1
    err = capsys.readouterr().err
    assert "holds adk-98.h5md, which the example would replace" in err
    assert mine.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["adk-98.h5md"]
    # the example's own file, of an older recipe: not refused (it is rebuilt)
    from h5mdx.examples.run import foreign_outputs
    from h5mdx.examples.trajectory import is_example_file

    build_adk_trajectory(tmp_path / "other" / "adk-98.h5md", 98, progress=False)
    with h5py.File(tmp_path / "other" / "adk-98.h5md", "r+") as f:
        f.attrs["h5mdx_example"] = '{"recipe": 1}'
    assert is_example_file(str(tmp_path / "other" / "adk-98.h5md"))
    assert not is_example_file(str(mine))
    assert foreign_outputs(tmp_path / "other") == []


def test_an_earlier_runs_outputs_are_its_own(example_run, tmp_path):
    """The run lists what it published; those files are replaced by the next run without
    --overwrite, as are those of a run that wrote no list (known by its report)."""
    from h5mdx.examples.run import _MANIFEST, OUTPUTS, foreign_outputs

    _, out = example_run
    assert sorted(json.loads((out / _MANIFEST).read_text())["files"]) == sorted(OUTPUTS)
    assert foreign_outputs(out) == []
    (tmp_path / "report.html").write_text((out / "report.html").read_text())
    (tmp_path / "rmsd.csv").write_text("an earlier version's")
    assert foreign_outputs(tmp_path) == []  # no list: the report says whose they are
    (tmp_path / _MANIFEST).write_text(json.dumps({"files": ["report.html"]}))
    assert foreign_outputs(tmp_path) == ["rmsd.csv"]


def test_a_publish_stopped_half_way_leaves_no_report_of_other_files(tmp_path, monkeypatch):
    """The outputs were renamed into place one at a time, report.html among the first: a
    run stopped between two renames (killed, a full disk) left the new report.html
    beside the plots and series of the run before. Now the earlier report goes first
    and the new one comes last, and the list of files says the set is not complete
    until it is; a publish that ends puts every new file in place."""
    from types import SimpleNamespace

    from h5mdx.examples import run
    from h5mdx.examples.run import _MANIFEST, OUTPUTS, _publish

    out, stage = tmp_path / "out", tmp_path / "out" / ".example-partial-1"
    stage.mkdir(parents=True)
    for name in OUTPUTS:
        (out / name).write_text(f"old {name}")
        (stage / name).write_text(f"new {name}")
    (out / _MANIFEST).write_text(json.dumps({"files": sorted(OUTPUTS)}))
    real = os.replace

    def stop_at_rounds(src, dst):
        if os.path.basename(dst) == "rounds.json":
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(run.os, "replace", stop_at_rounds)
    res = SimpleNamespace(out=str(stage), files={"report": str(stage / "report.html")})
    with pytest.raises(OSError, match="No space"):
        _publish(res, str(out))
    monkeypatch.setattr(run.os, "replace", real)
    assert not (out / "report.html").exists()  # no page telling of two runs
    assert (out / "rmsd.csv").read_text() == "new rmsd.csv"
    assert (out / "timing.csv").read_text() == "old timing.csv"
    manifest = json.loads((out / _MANIFEST).read_text())
    assert manifest["complete"] is False and sorted(manifest["files"]) == sorted(OUTPUTS)
    assert run.foreign_outputs(out) == []  # the next run replaces them without --overwrite

    (stage / "rounds.json").write_text("new rounds.json")  # a run that goes through
    for name in ("rmsd.csv", "report.html"):
        (stage / name).write_text(f"new {name}")
    names = sorted(p.name for p in stage.iterdir())
    _publish(res, str(out))
    for name in names:
        assert (out / name).read_text() == f"new {name}", name
    assert json.loads((out / _MANIFEST).read_text()) == {"files": names, "complete": True}
    assert res.out == str(out) and res.files == {"report": str(out / "report.html")}
    assert sorted(os.listdir(out)) == sorted([*OUTPUTS, _MANIFEST])


def test_the_report_and_its_plot_replace_the_earlier_ones_whole(tmp_path):
    """write_report wrote report.html through a 'report.html.part' file that a failed
    write left behind, and the new page came back with the umask's mode (a page shared
    group-writable was no longer so); plot_rmsd wrote rmsd.png straight into place, a
    savefig stopped half-way leaving a torn PNG. Now both are written beside the file
    and renamed over it, with the earlier file's mode, and nothing is left beside them."""
    import stat

    import xarray as xr

    from h5mdx.examples import plot_rmsd, write_report

    res = _result()
    res.out = str(tmp_path)
    for name in ("report.html", "rmsd.png"):
        (tmp_path / name).write_text("earlier")
        os.chmod(tmp_path / name, 0o664)
    umask = os.umask(0o022)
    try:
        page = write_report(res)["report"]
        rmsd = xr.DataArray(np.linspace(0.0, 1.0, 50), dims="time",
                            coords={"time": np.arange(50.0)}, attrs={"units": "Angstrom"})
        rmsd["time"].attrs["units"] = "ps"
        plot_rmsd(rmsd, str(tmp_path / "rmsd.png"))
    finally:
        os.umask(umask)
    assert "<title>h5mdx example report</title>" in open(page, encoding="utf-8").read()
    assert (tmp_path / "rmsd.png").read_bytes()[:4] == b"\x89PNG"
    for name in ("report.html", "rmsd.png"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o664, name
    assert sorted(os.listdir(tmp_path)) == ["gantt.png", "report.html", "rmsd.png",
                                            "workers.png"]


def test_published_outputs_keep_the_mode_of_the_files_they_replace(tmp_path):
    """The example's outputs, written in a staging directory and renamed into place, came
    back with the umask's mode: an rmsd.csv or report.html shared group-writable was no
    longer so after the next run. Now each gets the mode of the file it replaces."""
    import stat
    from types import SimpleNamespace

    from h5mdx.examples.run import _publish

    out, stage = tmp_path / "out", tmp_path / "out" / ".example-partial-1"
    stage.mkdir(parents=True)
    umask = os.umask(0o022)
    try:
        for name in ("report.html", "rmsd.csv", "rounds.json"):
            (stage / name).write_text(f"new {name}")
        for name in ("report.html", "rmsd.csv"):
            (out / name).write_text("old")
            os.chmod(out / name, 0o664)
        _publish(SimpleNamespace(out=str(stage), files={}), str(out))
    finally:
        os.umask(umask)
    for name, mode in (("report.html", 0o664), ("rmsd.csv", 0o664), ("rounds.json", 0o644)):
        assert (out / name).read_text() == f"new {name}"
        assert stat.S_IMODE((out / name).stat().st_mode) == mode, name


def test_a_stage_of_another_host_is_left_alone(tmp_path, monkeypatch):
    """A run removed every stage directory whose process number was not running on its
    own host: in an output directory on a shared file system, the stage of a run going
    on on another node (its number unknown here) was removed under it, and that run
    failed while publishing. Now a stage is named by host and process, and only those
    of this host's processes no longer running are removed."""
    from h5mdx import _replace
    from h5mdx.examples.run import _staged

    with monkeypatch.context() as other_node:  # a run on node-07, process 999999999
        other_node.setattr(_replace, "host_name", lambda: "node-07")
        other_node.setattr(os, "getpid", lambda: 999999999)
        with _staged(str(tmp_path)) as theirs:
            pass
    os.makedirs(theirs, exist_ok=True)  # still being written there
    (tmp_path / theirs / "rmsd.csv").write_text("being written on node-07")
    with _staged(str(tmp_path)) as mine:
        assert mine != theirs
    assert (tmp_path / theirs / "rmsd.csv").read_text() == "being written on node-07"
