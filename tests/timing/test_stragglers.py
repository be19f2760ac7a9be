"""Straggler flags, worker totals, imbalance, ratios, speed-up and advice on known records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from h5mdx.timing import records as rec
from h5mdx.timing.stragglers import (
    advice,
    flag_stragglers,
    load_imbalance,
    per_worker,
    ratios,
    run_table,
    speedup,
)


def _run(run_id="r", n_workers=2, n_tasks=8, io=0.1, compute=0.3, backend="threads",
         slow=None):
    """Tasks laid end to end on ``n_workers`` workers; ``slow={i: ("io", extra)}``."""
    rows, clock = [], dict.fromkeys(range(n_workers), 1000.0)
    for i in range(n_tasks):
        w = i % n_workers
        t_io, t_comp = io, compute
        if slow and i in slow:
            phase, extra = slow[i]
            t_io += extra if phase == "io" else 0.0
            t_comp += extra if phase == "compute" else 0.0
        dur = t_io + t_comp + 0.001
        rows.append({"run_id": run_id, "backend": backend, "n_workers": n_workers,
                     "worker": f"w{w}", "task_key": f"k{i}", "kind": "rmsd",
                     "frame_start": 10 * i, "frame_stop": 10 * i + 10,
                     "t_start": clock[w], "t_stop": clock[w] + dur, "t_io": t_io,
                     "t_compute": t_comp, "t_wait": 0.0, "bytes_read": 100})
        clock[w] += dur
    return rec.to_frame(rows)


@pytest.mark.parametrize("phase", ["io", "compute"])
def test_slow_task_is_flagged_with_its_phase(phase):
    df = flag_stragglers(_run(slow={5: (phase, 1.0)}))
    assert df["is_straggler"].tolist() == [i == 5 for i in range(8)]
    assert df.loc[5, "slow_phase"] == phase
    assert (df.loc[df.index != 5, "slow_phase"] == "").all()
    np.testing.assert_allclose(df["threshold"], 1.5 * 0.401)


def test_no_stragglers_in_uniform_run():
    df = flag_stragglers(_run())
    assert not df["is_straggler"].any()


def test_fastest_group_rule():
    # durations 0.401 (x6), 0.701 and 0.901: the median rule (threshold 0.60) flags both,
    # twice the fastest quarter's mean (0.802) flags only the slowest
    df = _run(slow={2: ("compute", 0.3), 5: ("io", 0.5)})
    assert flag_stragglers(df)["is_straggler"].sum() == 2
    fg = flag_stragglers(df, rule="fastest-group")
    assert fg["is_straggler"].tolist() == [i == 5 for i in range(8)]
    np.testing.assert_allclose(fg["threshold"], 2 * 0.401)
    with pytest.raises(ValueError, match="valid options"):
        flag_stragglers(df, rule="mad")


def test_groups_are_separate_runs():
    df = pd.concat([_run("a", compute=0.3), _run("b", compute=3.0)], ignore_index=True)
    assert not flag_stragglers(df)["is_straggler"].any()


def test_per_worker_totals_and_imbalance():
    df = _run(slow={1: ("io", 1.0)})
    pw = per_worker(df).loc["r"]
    assert pw["n_tasks"].tolist() == [4, 4]
    np.testing.assert_allclose(pw["busy"], [4 * 0.401, 4 * 0.401 + 1.0])
    np.testing.assert_allclose(pw["t_io"], [0.4, 1.4])
    np.testing.assert_allclose(pw["t_other"], [0.004, 0.004], atol=1e-9)
    assert pw["t_init_top"].isna().all()  # unknown stays unknown
    mean = (8 * 0.401 + 1.0) / 2
    np.testing.assert_allclose(load_imbalance(df)["r"], (4 * 0.401 + 1.0) / mean)


def test_idle_worker_counts_in_imbalance():
    df = _run(n_workers=1, n_tasks=4)
    df["n_workers"] = 2  # a second worker that ran nothing
    np.testing.assert_allclose(load_imbalance(df)["r"], 2.0)


def test_ratios():
    r = ratios(_run(io=0.1, compute=0.3)).loc["r"]
    np.testing.assert_allclose(r["R_comp_io"], 3.0)
    assert np.isnan(r["R_comp_comm"])  # no communication measured


def test_speedup_and_efficiency():
    runs = pd.DataFrame({
        "backend": ["threads"] * 5 + ["processes"] * 2,
        "n_workers": [1, 1, 2, 4, 4, 2, 4],
        "wall": [10.0, 12.0, 6.0, 4.0, 3.0, 5.0, 3.0],
    })
    t = speedup(runs).set_index(["backend", "n_workers"])
    assert t.loc[("threads", 1), "S"] == 1.0 and t.loc[("threads", 1), "E"] == 1.0
    np.testing.assert_allclose(t.loc[("threads", 2), "S"], 11.0 / 6.0)
    np.testing.assert_allclose(t.loc[("threads", 4), "E"], 11.0 / 3.5 / 4)
    assert t.loc[("threads", 4), "n_runs"] == 2
    assert np.isnan(t.loc[("processes", 2), "S"])  # no 1-worker run in that series


def test_a_baseline_of_no_time_gives_no_speed_up():
    """A 1-worker run whose time less warm-up is 0 (it only loaded the kernel) said
    S = 0 and E = 0 for every other N of its series, as if more workers made it
    infinitely slower; S and E are unknown (NaN) there, as for a t_N of 0."""
    runs = pd.DataFrame({"backend": ["threads"] * 3, "n_workers": [1, 2, 4],
                         "wall": [0.5, 0.3, 0.2], "warmup": [0.5, 0.1, 0.1]})
    t = speedup(runs).set_index("n_workers")
    assert t["t_N"].tolist() == pytest.approx([0.0, 0.2, 0.1])
    assert t["S"].isna().all() and t["E"].isna().all()


def test_run_table_uses_meta_wall():
    df = pd.concat([_run("a", n_workers=1), _run("b", n_workers=2)], ignore_index=True)
    runs = run_table(df, [{"run_id": "a", "wall": 4.0, "blocks_per_worker": 1},
                          {"run_id": "b", "wall": 2.5, "blocks_per_worker": 1}])
    assert runs.loc["a", "wall"] == 4.0 and runs.loc["b", "n_tasks"] == 8
    sp = speedup(runs)
    np.testing.assert_allclose(sp["S"], [1.0, 1.6])
    assert "blocks_per_worker" in sp


def test_runs_of_other_frame_counts_are_other_series():
    """Runs of 80 frames (8 tasks of 10) and of 800 (the same tasks, 10x the frames and
    the time) in one table: the 1-worker run of 80 frames was the baseline of them all
    and the median of N=2 mixed both (S(2) of 3.2 s against 16 s and 1.6 s said 0.36);
    each number of frames is a series of its own."""
    small = [_run("s1", n_workers=1), _run("s2", n_workers=2)]
    big = [_run("b2", n_workers=2, io=1.0, compute=3.0), _run("b4", n_workers=4, io=1.0,
                                                                compute=3.0)]
    for part in big:
        part[["frame_start", "frame_stop"]] *= 10
    runs = run_table(pd.concat([*small, *big], ignore_index=True),
                     [{"run_id": r, "wall": w} for r, w in
                      [("s1", 3.2), ("s2", 1.6), ("b2", 16.0), ("b4", 8.0)]])
    assert runs.loc[["s1", "s2", "b2", "b4"], "n_frames"].tolist() == [80.0, 80.0, 800.0,
                                                                        800.0]
    table = speedup(runs).set_index(["n_frames", "n_workers"])
    assert table.attrs["by"] == ["backend", "n_frames"]
    np.testing.assert_allclose(table.loc[(80.0, 2), ["t_N", "S", "E"]], [1.6, 2.0, 1.0])
    assert table.loc[(800.0, 2), "t_N"] == 16.0
    assert np.isnan(table.loc[(800.0, 2), "S"])  # no 1-worker run of 800 frames
    # the metadata's frames win over the records' span; runs of one size: no new series
    runs = run_table(pd.concat(small, ignore_index=True),
                     [{"run_id": "s1", "n_frames": 98}, {"run_id": "s2", "n_frames": 98}])
    assert runs.loc[["s1", "s2"], "n_frames"].tolist() == [98.0, 98.0]
    assert speedup(runs).attrs["by"] == ["backend"]


def test_a_straggler_of_two_tasks_is_found():
    """Two workers, one twice as slow: the median of the *other* task (a median holding
    the task itself flagged one only beyond 3x the other)."""
    df = flag_stragglers(_run(n_tasks=2, slow={1: ("io", 0.5)}))  # 0.901 s against 0.401 s
    assert df["is_straggler"].tolist() == [False, True]
    assert df.loc[1, "slow_phase"] == "io"
    np.testing.assert_allclose(df["threshold"], [1.5 * 0.901, 1.5 * 0.401])
    assert not flag_stragglers(_run(n_tasks=2, slow={1: ("io", 0.15)}))["is_straggler"].any()
    assert not flag_stragglers(_run(n_tasks=1))["is_straggler"].any()  # a lone task


def test_speedup_of_saved_records_takes_their_metadata(tmp_path):
    """Records alone give each run's task span as its time; with the metadata saved
    beside them, speedup() gives what bench reported."""
    df = pd.concat([_run("a", n_workers=1), _run("b", n_workers=2)], ignore_index=True)
    metas = {"runs": [{"run_id": "a", "wall": 4.0, "blocks_per_worker": 1},
                      {"run_id": "b", "wall": 2.5, "blocks_per_worker": 1}]}
    path = tmp_path / "records.parquet"
    rec.save(df, path, metas)
    loaded, meta = rec.load(path)
    table = speedup(loaded, metas=meta)
    np.testing.assert_allclose(table["t_N"], [4.0, 2.5])
    np.testing.assert_allclose(table["S"], [1.0, 1.6])
    assert table.attrs["by"] == ["backend", "blocks_per_worker"]
    with pytest.warns(UserWarning, match="without their runs' metadata"):
        spans = speedup(loaded)
    assert not np.allclose(spans["t_N"], [4.0, 2.5])
    one = speedup(_run("a", n_workers=1), metas={"run_id": "a", "wall": 3.0})  # one run's
    assert one["t_N"].tolist() == [3.0]


def test_advice_sentences():
    io_bound = advice(_run(io=1.0, compute=0.3, slow={3: ("io", 5.0)}))
    assert io_bound[0].startswith("I/O bound: R_comp/IO = 0.18")  # 8 x 0.3 / (8 x 1 + 5)
    assert "h5mdx rechunk" in io_bound[0]
    assert any("straggler" in a and "mostly slow in io" in a for a in io_bound)
    assert any(a.startswith("Load imbalance") for a in io_bound)
    assert advice(_run(io=0.01, compute=1.0))[0].startswith("Compute bound")
    assert "No timing records" in advice(rec.empty())[0]
    assert "mpi-rmsd" in io_bound[0]  # dask tasks: parallel HDF5 is the other way
    # schedulers whose ratios differ in kind are said apart: one ratio of them all said
    # 'Balanced: R_comp/IO = 1.2' of threads at 3 and mpi-io at 0.1
    mixed = pd.concat([_run("a", io=0.1, compute=0.25),
                       _run("b", io=1.0, compute=0.1, backend="mpi-io")], ignore_index=True)
    assert advice(mixed)[0].startswith("R_comp/IO differs by scheduler: mpi-io 0.1 (I/O "
                                       "bound), threads 2.5 (balanced)")
    alike = pd.concat([_run("a", io=1.0, compute=0.3),
                       _run("b", io=1.0, compute=0.1, backend="mpi-io")], ignore_index=True)
    assert advice(alike)[0].startswith("I/O bound: R_comp/IO = 0.2")


def test_imbalance_advice_asks_for_more_blocks_only_where_there_were_few():
    """With one task per worker, more blocks let a fast worker help; with several, the
    blocks were there and the workers differ (h5mdx bench advised --blocks-per-worker 3
    after a grid that had run it)."""
    few = [a for a in advice(_run(n_tasks=2, slow={1: ("io", 1.0)}))
           if a.startswith("Load imbalance")]
    assert len(few) == 1 and "--blocks-per-worker 3" in few[0]
    many = [a for a in advice(_run(n_tasks=8, slow={3: ("io", 5.0)}))
            if a.startswith("Load imbalance")]
    assert len(many) == 1 and "--blocks-per-worker" not in many[0]
    assert "4 tasks per worker to share out" in many[0]
    ranks = _run(n_tasks=2, slow={1: ("io", 1.0)}, backend="mpi-io")  # mpi-rmsd has no M
    said = [a for a in advice(ranks) if a.startswith("Load imbalance")]
    assert len(said) == 1 and "--blocks-per-worker" not in said[0]
    assert "busiest MPI rank" in said[0]


def test_imbalance_advice_of_a_grid_quotes_the_median_and_the_runs_with_more_blocks():
    """h5mdx bench quoted the worst repeat (2.00 x) beside a table of medians (1.56 at
    most), asked for --blocks-per-worker 3 after a grid that had run it, and asked for
    smaller blocks beside idle advice asking for larger ones."""
    m1 = [_run(f"threads-n2-m1-r{r}", n_tasks=2, slow={1: ("io", extra)})
          for r, extra in enumerate((0.2, 0.4, 1.0))]  # 1.20, 1.33 and 1.55 x the mean
    m3 = [_run(f"threads-n2-m3-r{r}", n_tasks=6, slow={1: ("io", 0.1)}) for r in range(3)]
    said = [a for a in advice(pd.concat(m1 + m3, ignore_index=True))
            if a.startswith("Load imbalance")]
    assert len(said) == 1, said
    assert "1.33 x the mean in threads-n2-m1 (median of 3 repeats; the most, 1.55, in " \
           "threads-n2-m1-r2)" in said[0], said[0]
    assert "--blocks-per-worker 3" not in said[0]
    assert "; threads-n2-m3, with more blocks per worker, had 1.04 x: more blocks share " \
           "the work out." in said[0], said[0]
    # only the same scheduler and workers count, and 1.42 is no remedy
    n4 = [_run(f"threads-n4-m3-r{r}", n_workers=4, n_tasks=12) for r in range(3)]
    still = [_run(f"threads-n2-m3-r{r}", n_tasks=6, slow={1: ("io", 0.9)}) for r in range(3)]
    said = [a for a in advice(pd.concat(m1 + still + n4, ignore_index=True))
            if a.startswith("Load imbalance")]
    assert "threads-n2-m3, with more blocks per worker, had " in said[0], said[0]
    assert "did not even it out" in said[0] and "n4" not in said[0]
    # run ids of the user's own records need not be strings
    ints = pd.concat(m1, ignore_index=True)
    ints["run_id"] = ints["run_id"].str[-1].astype(int)
    assert any(a.startswith("Load imbalance") for a in advice(ints))
    alone = [a for a in advice(pd.concat(m1, ignore_index=True))
             if a.startswith("Load imbalance")]
    assert "--blocks-per-worker 3" in alone[0] and "median of 3 repeats" in alone[0]
    idle = pd.concat(m1, ignore_index=True).assign(t_wait=5.0)
    out = advice(idle)
    assert any(a.startswith("Workers were idle") and "larger blocks" in a for a in out)
    said = [a for a in out if a.startswith("Load imbalance")]
    assert len(said) == 1 and "smaller blocks" not in said[0] and "stood idle" in said[0]


def test_straggler_advice_asks_for_more_blocks_only_where_there_were_few():
    """The same for the stragglers' sentence: "More blocks per worker (e.g. 3)" after runs
    of 3 or more."""
    def said(df):
        return [a for a in advice(df) if "straggler" in a]

    [few] = said(_run(n_workers=4, n_tasks=8, slow={1: ("io", 1.0)}))
    assert "More blocks per worker (e.g. 3)" in few
    [many] = said(_run(n_tasks=8, slow={3: ("io", 5.0)}))
    assert "More blocks per worker" not in many
    assert "Those runs had 4 or more blocks per worker already" in many


def test_advice_to_mpi_ranks_fits_them():
    """MPI ranks are told what their command can do: not to use mpi-rmsd (they do), and
    --topology-on-root, not 'once per worker', where opening the topology costs."""
    ranks = _run(n_workers=2, n_tasks=2, io=1.0, compute=0.3, backend="mpi-io")
    ranks["rank"] = [0, 1]
    ranks["t_init_top"] = 0.5
    said = advice(ranks)
    assert said[0].startswith("I/O bound") and "mpi-rmsd" not in said[0]
    assert any("--topology-on-root" in a for a in said)
    assert not any("once per worker" in a for a in said)


def test_advice_to_mpi_ranks_knows_what_they_did():
    """Ranks that read the topology on rank 0 are not told to (the others' time is wait);
    ranks that gather with MPI are not told to; a rank has one block, so no 'more blocks
    per worker'; a bench of MPI ranks and dask tasks gets the advice of each (found by an
    audit)."""
    ranks = _run(n_workers=2, n_tasks=2, io=0.1, compute=0.001, backend="mpi-io",
                 slow={1: ("io", 1.0)})
    ranks["rank"] = [0, 1]
    ranks["t_init_top"] = [0.5, 0.0]  # --topology-on-root: rank 1 waited instead
    ranks["t_comm_gather"] = 0.01
    said = " ".join(advice(ranks))
    assert "--topology-on-root" not in said and "rank 0 alone reads the topology" in said
    assert "gather with MPI" not in said and "Gatherv" in said
    assert "blocks per worker" not in said and "one block" in said
    tasks = _run(n_workers=2, n_tasks=4, io=0.1, compute=0.3)
    tasks["t_init_traj"] = 0.2
    ranks["t_init_top"] = [0.5, 0.5]
    mixed = " ".join(advice(pd.concat([ranks, tasks], ignore_index=True)))
    assert "of the dask tasks; open once per worker" in mixed
    assert "of the MPI ranks; let rank 0 read the topology" in mixed


def test_a_rank_given_no_frames_shows_in_the_imbalance_and_the_advice():
    """More ranks than chunks: a rank with no frames still loads the kernel and opens the
    files, which are not the work shared out; the imbalance shows it idle, and the advice
    says why (it read 1.00 and said nothing)."""
    ranks = _run(n_workers=3, n_tasks=3, io=0.1, compute=0.3, backend="mpi-io")
    ranks["rank"] = [0, 1, 2]
    ranks["t_warmup"] = 0.5
    ranks["t_init_traj"] = 0.2
    ranks.loc[2, ["frame_start", "frame_stop"]] = [98, 98]
    ranks.loc[2, ["t_io", "t_compute"]] = [0.0, 0.0]
    ranks["t_stop"] = ranks["t_start"] + [1.101, 1.101, 0.701]  # rank 2: set-up only
    ranks["wall"] = ranks["t_stop"] - ranks["t_start"]
    np.testing.assert_allclose(load_imbalance(ranks).iloc[0], 0.401 / (0.803 / 3), rtol=1e-2)
    assert any("1 MPI rank(s) of 3 had no frames" in a for a in advice(ranks))


def test_scaling_advice_refers_to_remarks_only_where_there_are_some():
    table = pd.DataFrame({"backend": ["threads"] * 2, "n_workers": [1, 2], "S": [1.0, 0.3],
                          "E": [1.0, 0.15]})
    said = advice(_run(io=0.01, compute=1.0, n_tasks=2), table)
    assert said[-1].startswith("Poor scaling: E(2) = 0.15") and "remarks above" in said[-1]
    from h5mdx.timing.stragglers import _scaling_advice

    assert "tenths of a second" in _scaling_advice(table, remarks=False)


# --- warm-up and the minimum absolute excess (issue #15, item 6) -----------------------------

def _small_tasks(n_tasks=14, n_workers=2, seed=0, base=0.010, jitter=0.3, warmup=0.3,
                 delayed=None, delay=1.0, warmup_recorded=True):
    """``n_tasks`` blocks of ~``base`` s (log-normal jitter) on ``n_workers`` workers.

    The first task of each worker also loads the kernel (``warmup`` s inside its
    wall time, recorded as ``t_warmup`` when ``warmup_recorded``); block ``delayed``
    spends ``delay`` more seconds in I/O.
    """
    rng = np.random.default_rng(seed)
    rows, clock = [], dict.fromkeys(range(n_workers), 1000.0)
    for i in range(n_tasks):
        w = i % n_workers
        t_io = base * 0.6 * float(np.exp(jitter * rng.standard_normal()))
        t_comp = base * 0.4 * float(np.exp(jitter * rng.standard_normal()))
        if i == delayed:
            t_io += delay
        warm = warmup if i < n_workers else 0.0
        wall = warm + t_io + t_comp + 0.0005
        rows.append({"run_id": "r", "backend": "distributed", "n_workers": n_workers,
                     "worker": f"w{w}", "task_key": f"k{i}", "kind": "rmsd",
                     "frame_start": 100 * i, "frame_stop": 100 * i + 100,
                     "t_start": clock[w], "t_stop": clock[w] + wall, "t_io": t_io,
                     "t_compute": t_comp if warmup_recorded else t_comp + warm,
                     "t_wait": 0.0, "bytes_read": 100,
                     **({"t_warmup": warm} if warmup_recorded else {})})
        clock[w] += wall
    return rec.to_frame(rows)


def test_issue_scenario_flags_only_the_delayed_block():
    # 2 workers, 14 blocks of ~10 ms, block 5 delayed by 1 s, first blocks warm up the kernel
    df = _small_tasks(delayed=5, seed=3)
    flagged = flag_stragglers(df)
    assert flagged.index[flagged["is_straggler"]].tolist() == [5]
    assert flagged.loc[5, "slow_phase"] == "io"
    np.testing.assert_allclose(flagged.loc[:1, "warmup"], 0.3)
    # the judged duration leaves the warm-up out
    np.testing.assert_allclose(flagged["duration"], df["wall"] - df["t_warmup"])
    # without warm-up accounting the first blocks would look like compute stragglers
    old = flag_stragglers(_small_tasks(delayed=5, seed=3, warmup_recorded=False))
    assert {0, 1, 5} <= set(old.index[old["is_straggler"]])
    assert old.loc[0, "slow_phase"] == "compute"


def test_min_excess_hides_millisecond_jitter():
    # jitter alone pushes some 10 ms blocks past 1.5x the median ...
    df = _small_tasks(n_tasks=200, seed=1, jitter=0.5)
    assert flag_stragglers(df, min_excess=0.0)["is_straggler"].any()
    # ... but never 50 ms past it
    assert not flag_stragglers(df)["is_straggler"].any()
    thr = flag_stragglers(df)["threshold"].iloc[0]
    assert thr == pytest.approx(float(df["wall"].iloc[2:].median() + 0.05), abs=0.01)
    with pytest.raises(ValueError, match="min_excess"):
        flag_stragglers(df, min_excess=-1)


@pytest.mark.parametrize("seed", range(25))
def test_ordinary_runs_flag_nothing_and_a_delayed_task_is_always_flagged(seed):
    rng = np.random.default_rng(1000 + seed)
    n_tasks = int(rng.integers(8, 400))
    n_workers = int(rng.integers(1, 9))
    base = float(rng.uniform(0.002, 0.02))  # "small": 2-20 ms
    ordinary = _small_tasks(n_tasks, n_workers, seed=seed, base=base)
    assert not flag_stragglers(ordinary)["is_straggler"].any()
    delayed = int(rng.integers(0, n_tasks))  # the warm-up task itself may be delayed
    slow = flag_stragglers(_small_tasks(n_tasks, n_workers, seed=seed, base=base,
                                        delayed=delayed, delay=0.2))
    assert slow.index[slow["is_straggler"]].tolist() == [delayed]


def test_old_records_without_warmup_load_as_zero(tmp_path):
    df = _run()
    path = tmp_path / "old.csv"
    df.drop(columns=["t_warmup"]).to_csv(path, index=False)
    loaded, _ = rec.load(path)
    assert (loaded["t_warmup"] == 0.0).all()
    assert list(loaded.columns[:len(rec.COLUMNS)]) == list(rec.COLUMNS)


def test_warmup_is_reported_apart():
    from h5mdx.timing.stragglers import straggler_rule, warmup_summary

    df = _small_tasks(n_tasks=4, seed=2)
    w = warmup_summary(df)
    assert w["n_tasks"] == 2 and w["seconds"] == pytest.approx(0.6)
    assert w["fraction"] == pytest.approx(0.6 / df["wall"].sum())
    assert any(a.startswith("Warm-up (loading the kernel)") for a in advice(df))
    assert straggler_rule() == ("a task is a straggler when > 1.5x the median of the other "
                                "tasks and > 50 ms longer, warm-up excluded")
    assert "> 2x the fastest" in straggler_rule("fastest-group", min_excess=0.1)
    # per-worker busy time still contains the warm-up
    pw = per_worker(df).loc["r"]
    np.testing.assert_allclose(pw["busy"].sum(), df["wall"].sum())
    np.testing.assert_allclose(pw["t_warmup"], [0.3, 0.3])


def test_real_run_warmup_and_delay(tmp_path, monkeypatch):
    """Many small dask tasks, the first per thread warming up, one delayed by 1 s."""
    import threading
    import time

    import dask
    import dask.array as da

    from h5mdx.timing import capture
    from h5mdx.timing.phases import DELAY_ENV, BlockTimer

    seen = threading.local()

    def block(x, block_info=None):
        start = block_info[0]["array-location"][0][0]
        with BlockTimer(start, start + len(x), kind="rmsd") as timer:
            if not getattr(seen, "warm", False):
                with timer.phase("warmup"):
                    time.sleep(0.3)
                seen.warm = True
            with timer.phase("io"):
                time.sleep(0.008)
            with timer.phase("compute"):
                out = x * 2
        return out

    arr = da.ones(40 * 10, chunks=10).map_blocks(block, dtype=float)
    with capture(backend="threads", n_workers=2, env={DELAY_ENV: "170:1.0"}) as run:
        dask.compute(arr, scheduler="threads", num_workers=2)
    flagged = flag_stragglers(run.records)
    assert len(flagged) == 40
    assert (flagged["warmup"] > 0.25).sum() == 2  # one kernel load per thread
    assert flagged.loc[flagged["is_straggler"], "frame_start"].tolist() == [170]


def test_records_of_several_runs_joined_as_they_come():
    """``pd.concat`` of two runs' records repeats their index labels (0..n-1 each): the
    flags, the run table and the speed-up are those of each run alone."""
    one = _run("a", n_workers=1)
    two = _run("b", n_workers=2, slow={5: ("io", 1.0)})
    joined = pd.concat([one, two])
    assert joined.index.has_duplicates
    flags = flag_stragglers(joined)
    assert flags.index.equals(joined.index)
    assert flags["is_straggler"].tolist() == [False] * 8 + [i == 5 for i in range(8)]
    assert flags.loc[flags["is_straggler"], "slow_phase"].tolist() == ["io"]
    alone = pd.concat([flag_stragglers(one), flag_stragglers(two)])
    pd.testing.assert_frame_equal(flags, alone)
    pd.testing.assert_frame_equal(run_table(joined), run_table(pd.concat([one, two],
                                                                          ignore_index=True)))
    s = speedup(run_table(joined))
    assert s["n_workers"].tolist() == [1, 2] and s["S"].iloc[0] == 1.0


def test_speedup_leaves_warm_up_out_and_reports_it_beside():
    """A 1-worker run that loads the kernel (0.5 s in its first task) is not 0.5 s slower
    for S(N): loading is not work (issue 14, item 7); the table shows it apart."""
    one = _run("a", n_workers=1, n_tasks=4)  # 4 x 0.401 s end to end
    one.loc[0, "t_warmup"] = 0.5
    one.loc[:, ["t_start", "t_stop"]] += np.array([[0.0, 0.5]] + [[0.5, 0.5]] * 3)
    two = _run("b", n_workers=2, n_tasks=4)  # 2 x 0.401 s on each worker
    runs = run_table(pd.concat([one, two]))
    assert runs.loc["a", "warmup"] == pytest.approx(0.5) and runs.loc["b", "warmup"] == 0.0
    s = speedup(runs).set_index("n_workers")
    assert s.loc[1, "t_N"] == pytest.approx(4 * 0.401)
    assert s.loc[1, "warmup"] == pytest.approx(0.5)
    assert s.loc[2, "S"] == pytest.approx(2.0) and s.loc[2, "E"] == pytest.approx(1.0)


def test_a_run_of_a_few_ms_gets_no_advice_but_that():
    """A run of 2 ms in all drew advice to rechunk, use MPI-IO and more blocks, and
    "74% of the work (0.00 s)": microseconds judge nothing."""
    said = advice(_run(io=0.0005, compute=0.0002, n_tasks=2))
    assert len(said) == 1 and said[0].startswith("The run's tasks worked 3.4 ms in all: "
                                                 "too short to judge"), said


def test_tasks_without_a_stop_time_do_not_hide_a_straggler():
    # 3 tasks of 0.401 s, one of 1.401 s, and three whose stop time is unknown: sorted
    # last, the NaNs had made every other task's median NaN, and nothing was flagged
    df = _run(n_tasks=4, slow={3: ("io", 1.0)})
    unknown = df.iloc[:3].assign(task_key=["u0", "u1", "u2"], t_stop=np.nan, wall=np.nan)
    flagged = flag_stragglers(pd.concat([df, unknown], ignore_index=True))
    assert flagged["is_straggler"].tolist() == [i == 3 for i in range(7)]
    np.testing.assert_allclose(flagged["threshold"], 1.5 * 0.401)
    assert flagged.loc[3, "slow_phase"] == "io"


def test_a_group_key_unknown_for_some_tasks_still_judges_them():
    # by a column that dask tasks leave empty (rank, slurm_job_id): groupby dropped the
    # NaN keys, and those tasks got no threshold and were never flagged
    df = _run(slow={5: ("io", 1.0)})
    flagged = flag_stragglers(df, by=("run_id", "rank"))
    assert flagged["is_straggler"].tolist() == [i == 5 for i in range(8)]
    np.testing.assert_allclose(flagged["threshold"], 1.5 * 0.401)


def test_mpi_run_time_is_not_lengthened_by_another_host_s_clock():
    # 1 rank for 1.9 s; 2 ranks for 1.0 s, the second on a node whose clock is 0.3 s ahead:
    # the span of their records (1.3 s) made S(2) = 1.46 instead of 1.9
    def ranks(run_id, n, wall, skew):
        return [{"run_id": run_id, "backend": "mpi-io", "n_workers": n, "worker": f"rank-{r}",
                 "rank": r, "host": f"node{r}", "task_key": f"{run_id}-{r}", "kind": "rmsd",
                 "t_start": 100.0 + skew * r, "t_stop": 100.0 + skew * r + wall,
                 "t_io": wall / 2, "t_compute": wall / 2, "t_wait": 0.0} for r in range(n)]

    df = rec.to_frame(ranks("one", 1, 1.9, 0.0) + ranks("two", 2, 1.0, 0.3))
    np.testing.assert_allclose(run_table(df)["wall"], [1.9, 1.0])
    table = speedup(run_table(df))
    np.testing.assert_allclose(table["S"], [1.0, 1.9])
    np.testing.assert_allclose(table["E"], [1.0, 0.95])


def test_a_worker_s_threads_warming_up_side_by_side_count_once():
    # worker A runs two threads, each of whose first task loads the kernel (0.5 s) at the
    # same time; worker B warms up twice, one task after the other (0.3 s + 0.3 s). The
    # sums per worker (A: 1.0 s) took 1.0 s off a 2.5 s run: t_N 1.5 s instead of 1.9 s
    rows = []
    for lane in range(2):
        rows += [{"task_key": f"a{lane}", "worker": "A", "t_start": 100.0, "t_stop": 101.5,
                  "t_warmup": 0.5},
                 {"task_key": f"b{lane}", "worker": "A", "t_start": 101.5, "t_stop": 102.5,
                  "t_warmup": 0.0}]
    rows += [{"task_key": f"c{i}", "worker": "B", "t_start": 100.0 + i, "t_stop": 101.0 + i,
              "t_warmup": 0.3} for i in range(2)]
    df = rec.to_frame([{**r, "run_id": "r", "backend": "distributed", "n_workers": 2,
                        "kind": "rmsd", "t_io": 0.1, "t_compute": 0.1} for r in rows])
    runs = run_table(df)
    np.testing.assert_allclose(runs[["wall", "warmup"]].to_numpy(), [[2.5, 0.6]])
    np.testing.assert_allclose(speedup(runs)["t_N"], [1.9])


def test_ranks_given_no_frames_do_not_make_the_working_ranks_stragglers():
    # 4 ranks, 2 of them without a chunk (frames 98-98: 0.2 s of opening after the warm-up)
    # and 2 that worked 0.6 s: the working ranks' median of the others was 0.2 s, and both
    # were called stragglers 'slow in compute: look at the CPU'
    ranks = _run(n_workers=4, n_tasks=4, io=0.1, compute=0.3, backend="mpi-io")
    ranks["rank"] = [0, 1, 2, 3]
    ranks["t_warmup"] = 0.5
    ranks["t_init_traj"] = 0.2
    ranks.loc[[2, 3], ["frame_start", "frame_stop"]] = 98
    ranks.loc[[2, 3], ["t_io", "t_compute"]] = 0.0
    ranks["t_stop"] = ranks["t_start"] + [1.101, 1.101, 0.701, 0.701]
    ranks["wall"] = ranks["t_stop"] - ranks["t_start"]
    flagged = flag_stragglers(ranks)
    assert not flagged["is_straggler"].any()
    np.testing.assert_allclose(flagged["threshold"], 1.5 * 0.601)
    np.testing.assert_allclose(flagged["duration"], [0.601, 0.601, 0.201, 0.201])
    # a working rank slower than the other one still is one
    ranks.loc[1, ["t_stop", "wall"]] += 1.0
    ranks.loc[1, "t_io"] += 1.0
    flagged = flag_stragglers(ranks)
    assert flagged["is_straggler"].tolist() == [False, True, False, False]
    assert flagged.loc[1, "slow_phase"] == "io"


def test_a_run_that_only_warmed_up_has_no_speed_up_rather_than_an_error():
    # N=4's 0.2 s were all warm-up: t_N = 0, and speedup raised ZeroDivisionError
    runs = pd.DataFrame({"backend": ["threads"] * 3, "n_workers": [1, 2, 4],
                         "wall": [1.0, 0.5, 0.2], "warmup": [0.1, 0.1, 0.2]})
    table = speedup(runs)
    np.testing.assert_allclose(table["t_N"], [0.9, 0.4, 0.0])
    np.testing.assert_allclose(table["S"], [1.0, 2.25, np.nan])
    np.testing.assert_allclose(table["E"], [1.0, 1.125, np.nan])


def test_the_rule_says_its_minimum_excess_as_given():
    """straggler_rule rounded the minimum excess to whole milliseconds: a rule of
    min_excess=0.0004 s said '> 0 ms longer', one of 2.5 s '> 2500 ms longer'."""
    from h5mdx.timing.stragglers import straggler_rule

    assert "> 0.4 ms longer" in straggler_rule(min_excess=0.0004)
    assert "> 2.5 s longer" in straggler_rule(min_excess=2.5)
    assert "> 50 ms longer" in straggler_rule()
    assert "> 0 ms longer" in straggler_rule(min_excess=0.0)
