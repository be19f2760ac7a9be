"""``benchmarks/bench_open_tree.py``: opening a file of a group per molecule, every way."""

from __future__ import annotations

import json


def test_every_way_opens_the_built_tree(bench_open_tree, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_open_tree.bench_scale, "RESULTS", str(tmp_path / "results"))
    assert bench_open_tree.main(["--data", str(tmp_path), "--molecules", "40",
                                 "--repeats", "1", "--name", "t"]) == 0
    with open(tmp_path / "results" / "open-tree-t.json") as fh:
        got = json.load(fh)
    assert [r["way"] for r in got["rows"]] == list(bench_open_tree.WAYS)
    assert all(r["seconds"] > 0 for r in got["rows"])
    # the molecules' groups and those on the way to them; 5 datasets each, and the
    # particles' and observables' (position, potential energy: value, step, time each)
    assert got["meta"]["datasets"] == 40 * 5 + 6
    assert "| one molecule |" in (tmp_path / "results" / "open-tree-t.md").read_text()
    assert (tmp_path / "tree-40.h5").exists()
