"""``benchmarks/bench_scale.py`` judges its runs against issue 14's speed targets."""

from __future__ import annotations


def _row(scheduler, n, vs_floor, select="ca", open_="lazy"):
    fps = 100_000.0 * vs_floor * n
    return {"scheduler": scheduler, "open": open_, "select": select, "n": n,
            "frames_per_s": fps, "ratios": [vs_floor]}


def _results(rows_by_layout):
    return {"layouts": {name: {"floor": [{"n": n, "frames_per_s": 100_000.0 * n}
                                         for n in (1, 2, 4)],
                               "h5mdx": rows}
                        for name, rows in rows_by_layout.items()}}


def test_targets_count_the_runs_each_covers_and_list_the_ones_below(bench_scale):
    results = _results({
        "c100": [_row("distributed", 1, 0.91), _row("distributed", 2, 0.79),
                 _row("distributed", 4, 0.85), _row("threads", 1, 0.62, "all"),
                 _row("threads", 4, 0.80), _row("first pass (new process)", 1, 0.10)],
        "c1": [_row("threads", 2, 0.70), _row("threads", 4, 0.55, "all", "chunks")],
    })
    bench_scale.derive(results)
    judged = {t["what"][:2]: t for t in bench_scale.targets(results)}
    one = judged["1."]  # N=1 on every scheduler; the first pass is reported apart
    assert len(one["runs"]) == 2 and one["meet"] == 1
    assert [(name, r["vs_floor"]) for name, r in one["below"]] == [("c100", 0.62)]
    dist = judged["2."]
    assert len(dist["runs"]) == 3 and dist["meet"] == 2
    assert [r["n"] for _, r in dist["below"]] == [2]
    threads = judged["3."]  # only the largest N of threads: 4
    assert "N=4" in threads["what"]
    assert len(threads["runs"]) == 2 and threads["meet"] == 1  # 0.80 meets 0.8
    assert [(name, r["vs_floor"]) for name, r in threads["below"]] == [("c1", 0.55)]

    text = "\n".join(bench_scale.targets_markdown(results))
    assert "| 2. distributed, every N | 3 | 2 | c100 distributed lazy ca N=2: 0.79 |" in text
    assert "c1 threads chunks all N=4: 0.55" in text
    report = bench_scale.markdown({**results, "machine": {"platform": "p", "cores": 4,
                                                          "memory_gib": 8},
                                   "frames": 100_000, "gb": 4.0, "repeats": 3, "versions": {}})
    # a run with no N=1 of its own has no S(N), E(N): a dash, not a crash
    assert "| h5mdx threads, chunks, all | 4 | 220,000 | 0.55 | - | - | 2.20 |" in report
    assert bench_scale.markdown({**results, "machine": {"platform": "p", "cores": 4,
                                                        "memory_gib": 8},
                                 "frames": 100_000, "gb": 4.0, "repeats": 3,
                                 "versions": {}}).count("Against issue 14") == 1


def test_a_report_written_before_the_run_ends_says_so(bench_scale, tmp_path):
    results = _results({"c100": [_row("threads", 1, 0.9)]})
    base = {"machine": {"platform": "p", "cores": 2, "memory_gib": 8}, "frames": 1000,
            "gb": 0.04, "repeats": 1, "versions": {}}
    stem = str(tmp_path / "scale-t")
    bench_scale.write_report({**base, **results, "complete": False}, stem, quiet=True,
                             figure=False)
    assert "**Partial**" in (tmp_path / "scale-t.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-t.json", "scale-t.md"]
    bench_scale.write_report({**base, **results, "complete": True}, stem, quiet=True)
    assert "Partial" not in (tmp_path / "scale-t.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-t.json", "scale-t.md",
                                                          "scale-t.png"]  # no .partial left


def test_no_targets_without_rows(bench_scale):
    results = _results({"c100": []})
    bench_scale.derive(results)
    assert bench_scale.targets(results) == []
    assert bench_scale.targets_markdown(results) == []
