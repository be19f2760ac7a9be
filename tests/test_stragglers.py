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


def test_run_table_uses_meta_wall():
    df = pd.concat([_run("a", n_workers=1), _run("b", n_workers=2)], ignore_index=True)
    runs = run_table(df, [{"run_id": "a", "wall": 4.0, "blocks_per_worker": 1},
                          {"run_id": "b", "wall": 2.5, "blocks_per_worker": 1}])
    assert runs.loc["a", "wall"] == 4.0 and runs.loc["b", "n_tasks"] == 8
    sp = speedup(runs)
    np.testing.assert_allclose(sp["S"], [1.0, 1.6])
    assert "blocks_per_worker" in sp


def test_advice_sentences():
    io_bound = advice(_run(io=1.0, compute=0.3, slow={3: ("io", 5.0)}))
    assert io_bound[0].startswith("I/O bound: R_comp/IO = 0.18")  # 8 x 0.3 / (8 x 1 + 5)
    assert "h5mdx rechunk" in io_bound[0]
    assert any("straggler" in a and "mostly slow in io" in a for a in io_bound)
    assert any(a.startswith("Load imbalance") for a in io_bound)
    assert advice(_run(io=0.01, compute=1.0))[0].startswith("Compute bound")
    assert "No timing records" in advice(rec.empty())[0]
