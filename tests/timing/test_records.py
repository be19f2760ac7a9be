"""The timing schema: building, validating, saving and loading records."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pytest

from h5mdx.timing import records as rec


def _rows(n=3, backend="threads"):
    return [
        {"run_id": "r1", "backend": backend, "n_workers": 2, "worker": f"thread-{i % 2}",
         "task_key": f"('rmsd-abc', {i})", "kind": "rmsd", "frame_start": 10 * i,
         "frame_stop": 10 * i + 10, "t_start": 100.0 + i, "t_stop": 100.5 + i,
         "t_io": 0.2, "t_compute": 0.25, "t_wait": 0.01 * i, "bytes_read": 1000 * i}
        for i in range(n)
    ]


def test_to_frame_fills_unknown_phases_with_nan_not_zero():
    df = rec.to_frame(_rows())
    assert list(df.columns[: len(rec.COLUMNS)]) == list(rec.COLUMNS)
    assert df["t_init_top"].isna().all() and df["t_comm_gather"].isna().all()
    assert df["rank"].isna().all() and df["slurm_job_id"].isna().all()
    np.testing.assert_allclose(df["wall"], 0.5)
    assert df["frame_start"].dtype == "Int64" and df["n_workers"].dtype == "int64"
    assert df["t_io"].tolist() == [0.2, 0.2, 0.2]


def test_to_frame_takes_run_fields_from_meta():
    rows = [{k: v for k, v in r.items() if k not in ("run_id", "backend", "n_workers")}
            for r in _rows(2)]
    meta = rec.run_metadata(backend="processes", n_workers=4, run_id="xyz", file="a.h5md")
    df = rec.to_frame(rows, meta)
    assert set(df["run_id"]) == {"xyz"} and set(df["backend"]) == {"processes"}
    assert set(df["n_workers"]) == {4}
    for key in ("versions", "machine", "timestamp", "layout", "selection"):
        assert key in meta
    assert meta["versions"]["h5py"] and meta["versions"]["HDF5"]
    assert meta["machine"]["cpu_count"] >= 1


def test_validate_lists_missing_and_wrong_columns():
    df = rec.to_frame(_rows())
    bad = df.drop(columns=["wall", "t_io"]).assign(n_workers=1.5, worker=None)
    with pytest.raises(ValueError) as err:
        rec.validate(bad)
    msg = str(err.value)
    assert "missing column(s): wall, t_io" in msg
    assert "n_workers" in msg and "worker" in msg


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"backend": "pbs"}, "unknown backend"),
        ({"t_io": -1.0}, "negative durations"),
        ({"t_stop": 0.0}, "t_stop before t_start"),
    ],
)
def test_validate_rejects_bad_values(change, words):
    df = rec.to_frame(_rows())
    for col, value in change.items():
        df.loc[1, col] = value
    with pytest.raises(ValueError, match=words):
        rec.validate(df)


def test_to_frame_missing_required_column():
    rows = [{k: v for k, v in r.items() if k != "worker"} for r in _rows()]
    with pytest.raises(ValueError, match="worker"):
        rec.to_frame(rows)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_save_load_roundtrip(tmp_path, suffix):
    rows = _rows()
    rows[0]["extra_col"] = 1.5
    df = rec.to_frame(rows)
    meta = rec.run_metadata(backend="threads", n_workers=2, run_id="r1", layout={"chunks": [10]})
    path = rec.save(df, tmp_path / f"t{suffix}", meta)
    back, meta2 = rec.load(path)
    pd.testing.assert_frame_equal(back, df, check_dtype=True)
    assert meta2 == json.loads(json.dumps(meta))
    if suffix == ".csv":
        assert (tmp_path / "t.meta.json").exists()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_saved_records_state_their_units(tmp_path, suffix):
    """A timing.csv and its sidecar said nowhere that the times are seconds (t_start and
    t_stop: Unix times) and bytes_read bytes; the metadata saved with them says so, also
    for metadata of the caller's own (a bench's) that does not."""
    df = rec.to_frame(_rows())
    for meta in (rec.run_metadata(backend="threads", n_workers=2, run_id="r1"), {"runs": []}):
        _, back = rec.load(rec.save(df, tmp_path / f"t{suffix}", meta))
        units = back["units"]
        assert units["t_io"] == units["wall"] == units["t_warmup"] == "s"
        assert units["t_start"] == units["t_stop"] == "s (Unix time)"
        assert units["bytes_read"] == "bytes"
        assert {c for c in df.columns if c.startswith("t_")} <= set(units)
    if suffix == ".csv":
        side = json.loads((tmp_path / "t.meta.json").read_text())
        assert side["units"]["t_compute"] == "s"
    own = {"units": {"t_io": "ms"}}  # metadata that says its units keeps them
    assert rec.load(rec.save(df, tmp_path / f"u{suffix}", own))[1]["units"] == {"t_io": "ms"}


def test_loading_parquet_without_pyarrow_names_the_fix(tmp_path, monkeypatch):
    """save() named the missing pyarrow and how to install it; load() raised a bare
    ModuleNotFoundError."""
    import sys

    from h5mdx.errors import MissingDependencyError

    path = rec.save(rec.to_frame(_rows()), tmp_path / "t.parquet", {"run_id": "r1"})
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match="'pyarrow' is needed for timing "
                                                     "records in Parquet.*pip install"):
        rec.load(path)


def test_save_accepts_meta_path_order_and_rejects_suffix(tmp_path):
    df = rec.to_frame(_rows())
    path = rec.save(df, {"run_id": "r1"}, tmp_path / "a.parquet")
    assert rec.load(path)[1] == {"run_id": "r1", "units": rec.UNITS}
    with pytest.raises(ValueError, match=r"\.parquet or \.csv"):
        rec.save(df, tmp_path / "a.txt")


def test_mpi_rank_records_roundtrip(tmp_path):
    rows = [
        {"run_id": "m", "backend": "mpi-io", "n_workers": 2, "worker": f"rank-{r}",
         "host": "h", "rank": r, "slurm_job_id": "42", "task_key": f"mpi-{r}", "kind": "rmsd",
         "frame_start": 50 * r, "frame_stop": 50 * r + 50, "t_start": 10.0, "t_stop": 11.0,
         "wall": 1.0, "t_init_top": 0.1, "t_init_traj": 0.05, "t_io": 0.3, "t_compute": 0.3,
         "t_wait": 0.2, "t_comm_gather": 0.05, "bytes_read": 10}
        for r in range(2)
    ]
    df = rec.to_frame(rows)
    back, _ = rec.load(rec.save(df, tmp_path / "m.csv", {}))
    assert back["rank"].tolist() == [0, 1] and back["slurm_job_id"].tolist() == ["42", "42"]
    # SPMD: the barrier wait is inside the wall, so the phases add up to it and busy excludes it
    np.testing.assert_allclose(rec.phase_sum(back), back["wall"])
    np.testing.assert_allclose(rec.busy(back), 0.8)


def test_dask_wait_is_outside_wall():
    df = rec.to_frame(_rows())
    np.testing.assert_allclose(rec.busy(df), df["wall"])
    np.testing.assert_allclose(rec.phase_sum(df), 0.45)


def test_empty_frame_validates():
    rec.validate(rec.empty())


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_slurm_job_id_beside_none_builds_and_roundtrips(tmp_path, suffix):
    # a SLURM run's records joined with a local run's: one job id, one None. pandas 3's
    # Series.map made the None a NaN, which to_frame and load refused
    pytest.importorskip("pyarrow")
    rows = _rows(2)
    rows[0]["slurm_job_id"] = "4242"
    df = rec.to_frame(rows)
    assert df["slurm_job_id"].tolist() == ["4242", None]
    back, _ = rec.load(rec.save(df, tmp_path / f"mixed{suffix}", {}))
    assert back["slurm_job_id"].tolist() == ["4242", None]


def test_csv_keeps_every_digit_of_short_phases_and_unix_times(tmp_path):
    # "%.9f" wrote 1.234567e-06 s as 0.000001235 and cut unix times to nanoseconds
    rows = _rows(2)
    rows[0].update(t_io=1.234567e-6, t_compute=3.3e-11, t_start=1.7e9 + 0.123456789012,
                   t_stop=1.7e9 + 0.5)
    df = rec.to_frame(rows)
    back, _ = rec.load(rec.save(df, tmp_path / "short.csv", {}))
    for col in ("t_io", "t_compute", "t_start", "t_stop", "wall"):
        assert back[col].tolist() == df[col].tolist(), col


def test_csv_reads_back_an_empty_host_or_kind(tmp_path):
    # an empty text field read as NaN: save wrote host '' and kind '', load refused them
    rows = _rows(2)
    rows[0].update(host="", kind="")
    rows[1].update(host="node1")
    df = rec.to_frame(rows)
    back, _ = rec.load(rec.save(df, tmp_path / "empty.csv", {}))
    assert back["host"].iloc[0] == "" and back["kind"].tolist() == ["", "rmsd"]
    assert back["slurm_job_id"].tolist() == [None, None]


def test_load_of_a_file_that_is_not_timing_records_names_it(tmp_path):
    # an RMSD series, and records whose n_workers is not a number: the error said what
    # was wrong (or only pandas' 'Unable to parse string') but not in which file
    series = tmp_path / "rmsd.csv"
    series.write_text("frame,rmsd\n0,0.0\n1,0.5\n")
    with pytest.raises(ValueError, match=r"rmsd\.csv: invalid timing records: missing "
                                         r"column\(s\): run_id"):
        rec.load(series)
    bad = tmp_path / "bad.csv"
    rec.to_frame(_rows(1)).assign(n_workers="two").to_csv(bad, index=False)
    with pytest.raises(ValueError, match=r"bad\.csv: invalid timing records: .*'two'"):
        rec.load(bad)


def test_validate_names_the_rows_of_bad_times():
    # a host whose clock stepped back: the error said 't_stop before t_start in some rows'
    df = rec.to_frame(_rows(6))
    df.loc[1, "t_stop"] = 0.0
    df.loc[[2, 3, 4, 5], "t_io"] = -1.0
    with pytest.raises(ValueError) as err:
        rec.validate(df)
    assert ("negative durations in column(s): t_io (rows 2, 3, 4 and 1 more: tasks "
            "('rmsd-abc', 2), ('rmsd-abc', 3), ('rmsd-abc', 4))") in str(err.value)
    assert "t_stop before t_start (row 1: task ('rmsd-abc', 1))" in str(err.value)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_load_leaves_out_records_of_impossible_times_and_keeps_the_others(tmp_path, suffix):
    """One record whose stop came before its start (a host's clock stepped back) made
    load refuse the whole file; the others are read, the one left out with a warning
    naming the file and the task."""
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    df = rec.to_frame(_rows(4))
    path = tmp_path / f"timing{suffix}"
    rec.save(df, path, {"backend": "dask-threads"})
    bad = df.copy()
    bad.loc[2, "t_stop"] = bad.loc[2, "t_start"] - 0.5
    bad.to_csv(path, index=False) if suffix == ".csv" else bad.to_parquet(path)
    # records written by another program: no sidecar (the one left would be said to be
    # of other contents, test_a_csv_and_a_sidecar_of_other_records_are_told_apart)
    (tmp_path / "timing.meta.json").unlink(missing_ok=True)
    with pytest.warns(UserWarning, match=re.escape(
            f"{path}: 1 of 4 timing record(s) left out, their times impossible") + ".*"
            + re.escape("row 2: task ('rmsd-abc', 2)")):
        got, _ = rec.load(path)
    assert list(got["task_key"]) == [t for i, t in enumerate(df["task_key"]) if i != 2]
    np.testing.assert_array_equal(got["t_start"], df["t_start"].drop(index=2))
    bad["t_stop"] = bad["t_start"] - 1.0  # every record: no timing records in the file
    bad.to_csv(path, index=False) if suffix == ".csv" else bad.to_parquet(path)
    with pytest.raises(ValueError, match="invalid timing records: t_stop before t_start"):
        rec.load(path)


_FAIL_HALF_WAY = """
import os, resource, signal, sys
from pathlib import Path
from h5mdx.timing import records as rec

path = Path(sys.argv[1])
rows = [{"run_id": "r1", "backend": "threads", "n_workers": 2, "worker": f"thread-{i % 2}",
         "task_key": f"('rmsd-abc', {i})", "kind": "rmsd", "frame_start": 10 * i,
         "frame_stop": 10 * i + 10, "t_start": 100.0 + i, "t_stop": 100.5 + i,
         "t_io": 0.2, "t_compute": 0.25, "t_wait": 0.01 * i, "bytes_read": 1000 * i}
        for i in range(20000)]
rec.save(rec.to_frame(rows[:3]), path, {"run_id": "r1"})
size = max(os.path.getsize(p) for p in path.parent.iterdir())
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full disk: the write fails (EFBIG)
resource.setrlimit(resource.RLIMIT_FSIZE, (4 * size, 4 * size))
try:
    rec.save(rec.to_frame(rows), path, {"run_id": "r1", "second": True})
except OSError as err:
    print("failed:", err)
"""


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_save_that_fails_half_way_leaves_the_earlier_records(tmp_path, suffix):
    """Records written over earlier ones when the disk fills half-way: the earlier file
    was left torn (the first rows of the new records, cut mid-line); now the
    new records are written beside it and renamed over it, so it stays as it was."""
    import subprocess
    import sys

    path = tmp_path / f"timing{suffix}"
    proc = subprocess.run([sys.executable, "-c", _FAIL_HALF_WAY, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "File too large" in proc.stdout, proc.stdout + proc.stderr
    back, meta = rec.load(path)
    pd.testing.assert_frame_equal(back, rec.to_frame(_rows()))
    assert meta == {"run_id": "r1", "units": rec.UNITS}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, "timing.meta.json"] if suffix == ".csv" else [path.name])


def test_the_wall_time_of_mpi_ranks_is_the_longest_rank_s():
    """One rule for the run time of MPI ranks (the straggler summary, run_table and
    mpi-rmsd's summary line take it from here): the longest rank's wall, NaN left out."""
    from h5mdx.timing.records import spmd_wall

    assert spmd_wall([0.35, 0.45, float("nan")]) == 0.45
    assert np.isnan(spmd_wall([])) and np.isnan(spmd_wall([float("nan")]))


def test_a_csv_and_a_sidecar_of_other_records_are_told_apart(tmp_path, monkeypatch):
    """timing.csv and timing.meta.json were renamed into place one after the other: a
    process stopped between the two renames left the new records beside the old
    metadata (its units, its run), read back without a word. Now the sidecar records
    the CSV's digest and is renamed first; load() warns of a pair that does not belong
    together, naming both files, and leaves that metadata out."""
    from h5mdx import _replace

    path = tmp_path / "timing.csv"
    first = rec.to_frame(_rows(3))
    rec.save(first, path, {"run_id": "r1", "units": {"t_io": "ms"}})
    side = json.loads((tmp_path / "timing.meta.json").read_text())
    assert side[_replace.CSV_DIGEST] == _replace.csv_digest(path)
    back, meta = rec.load(path)  # a pair that belongs together: no warning, no digest
    assert meta == {"run_id": "r1", "units": {"t_io": "ms"}}
    real = _replace.os.replace
    calls = []

    def stop_before_the_csv(src, dst):  # the sidecar lands, then the process "dies"
        calls.append(os.path.basename(dst))
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(_replace.os, "replace", stop_before_the_csv)
    with pytest.raises(KeyboardInterrupt):
        rec.save(rec.to_frame(_rows(5)), path, {"run_id": "r2"})
    monkeypatch.setattr(_replace.os, "replace", real)
    assert calls == ["timing.meta.json", "timing.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timing.csv", "timing.meta.json"]
    with pytest.warns(UserWarning, match=r"timing\.meta\.json was written for other contents "
                                         r"than .*timing\.csv .*metadata \(units, run\) left"):
        back, meta = rec.load(path)
    pd.testing.assert_frame_equal(back, first)  # the records as they were
    assert meta == {}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_saved_records_keep_the_mode_and_the_link_of_the_file_replaced(tmp_path, suffix):
    """Records saved again over a group-writable timing.csv came back with the umask's
    mode (0644: the group could no longer write them), and a timing.csv that was a
    symbolic link (into a shared results directory) became a regular file, the file it
    led to left as it was. Now the file the link leads to is replaced, with its mode,
    and the link stays; a CSV's sidecar is beside that file."""
    import stat

    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    shared = tmp_path / "shared"
    shared.mkdir()
    real = rec.save(rec.to_frame(_rows(2)), shared / f"timing{suffix}", {"run_id": "r1"})
    os.chmod(real, 0o664)
    link = tmp_path / f"timing{suffix}"
    link.symlink_to(real)
    rec.save(rec.to_frame(_rows(4)), link, {"run_id": "r2"})
    assert link.is_symlink() and os.path.samefile(link, real)
    assert stat.S_IMODE(real.stat().st_mode) == 0o664
    back, meta = rec.load(real)
    assert len(back) == 4 and meta["run_id"] == "r2"
    assert sorted(p.name for p in shared.iterdir()) == sorted(
        [real.name] + (["timing.meta.json"] if suffix == ".csv" else []))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared", link.name]  # the
    # sidecar beside the CSV it belongs to, not beside the link


def test_a_full_disk_names_the_records_file_not_a_temporary_one(tmp_path, monkeypatch):
    """Records saved on a full disk failed with pandas' bare '[Errno 28] No space left
    on device' (or naming the hidden temporary file): which output, not said. Now the
    error names timing.csv; the earlier file stays and no temporary file is left."""
    path = rec.save(rec.to_frame(_rows(2)), tmp_path / "timing.csv", {"run_id": "r1"})
    before = path.read_bytes()

    def full(self, where, *args, **kwargs):
        with open(where, "w") as fh:
            fh.write("run_id,ba")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with pytest.raises(OSError, match=r"^\[Errno 28\] cannot write '.*timing\.csv': No space "
                                      r"left on device$"):
        rec.save(rec.to_frame(_rows(3)), path, {"run_id": "r2"})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timing.csv", "timing.meta.json"]


def test_temporary_files_of_killed_processes_are_removed_by_the_next_save(tmp_path):
    """A save killed while writing (SIGKILL, power loss: no cleanup runs) left its hidden
    temporary file, and every later save of the same file left them where they were.
    Now the next save on this host removes those of processes no longer running, and
    keeps those of live ones (still writing)."""
    from h5mdx._replace import host_name

    host = host_name()
    dead = [tmp_path / f".timing.{host}.999999999.0b62aa11.tmp.csv",
            tmp_path / f".timing.meta.{host}.999999999.0b62aa12.tmp.json"]
    alive = tmp_path / f".timing.{host}.{os.getpid()}.77aa0000.tmp.csv"
    other = tmp_path / ".timing.otherhost.999999999.0b62aa13.tmp.csv"  # may be alive there
    for path in (*dead, alive, other):
        path.write_text("run_id,back")
    rec.save(rec.to_frame(_rows(2)), tmp_path / "timing.csv", {"run_id": "r1"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [alive.name, other.name, "timing.csv", "timing.meta.json"])
    assert len(rec.load(tmp_path / "timing.csv")[0]) == 2


def test_saved_records_reach_the_disk_before_their_name(tmp_path, monkeypatch):
    """A CSV, its sidecar or a Parquet file was renamed over the earlier one without
    being flushed: after a crash of the machine (power loss) the rename could be on
    disk and the bytes not, an empty file in place of the earlier records (XFS, ext4
    without auto_da_alloc). Now each is flushed (fsync) before its rename."""
    from h5mdx import _replace

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.basename(src)))
        real_replace(src, dst)

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("no /proc/self/fd to tell which file a descriptor is")
    monkeypatch.setattr(_replace.os, "fsync", fsync)
    monkeypatch.setattr(_replace.os, "replace", replace)
    rec.save(rec.to_frame(_rows(2)), tmp_path / "timing.csv", {"run_id": "r1"})
    names = [name for _, name in events]
    # each flushed, renamed, and then its directory flushed: the rename itself was lost
    # in a power loss before (the earlier file back, or none where there was none)
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"] * 2
    assert names[0] == names[1] and names[3] == names[4]
    assert names[2] == names[5] == tmp_path.name
    assert names[0].startswith(".timing.meta.") and names[3].startswith(".timing.")


def test_records_of_a_name_near_the_file_systems_limit_are_saved(tmp_path):
    """Records saved under a name of 240 bytes (a file system takes 255) failed with
    "File name too long": the hidden temporary name added the host, the process and
    more to it. Now a temporary name that would be too long is shortened (the name's
    start and a digest), as h5mdx's HDF5 and Zarr outputs' are, and the records land
    under the name asked for, with nothing left beside them."""
    from h5mdx._replace import name_max

    if name_max(tmp_path) < 250:
        pytest.skip("a file system of short names")
    path = tmp_path / ("r" * 236 + ".csv")
    rec.save(rec.to_frame(_rows(3)), path, {"run_id": "r1"})
    rec.save(rec.to_frame(_rows(4)), path, {"run_id": "r2"})  # and replaced
    back, meta = rec.load(path)
    assert len(back) == 4 and meta["run_id"] == "r2"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, "r" * 236 + ".meta.json"])


def test_a_sidecar_cut_short_is_left_out_with_a_warning(tmp_path):
    """A timing.meta.json cut short (written by an earlier version straight into place,
    on a full disk) made load fail with a bare JSONDecodeError, naming no file: the
    records beside it could not be read. Now its metadata is left out with a warning
    naming it, and the records are read."""
    df = rec.to_frame(_rows(3))
    path = rec.save(df, tmp_path / "timing.csv", {"run_id": "r1"})
    (tmp_path / "timing.meta.json").write_text('{"run_id": "r1", "uni')
    with pytest.warns(UserWarning, match=r"timing\.meta\.json: not the JSON of timing\.csv's "
                                         r"metadata .*read without it"):
        back, meta = rec.load(path)
    pd.testing.assert_frame_equal(back, df)
    assert meta == {}
