"""Run the reliability tests and collect their figures into ``results/reliability.json``.

Every figure comes from a test that really does the thing (kills a worker, runs eight
readers, opens generated hostile files, reads a file while a writer appends). The tests
append their figures as JSON lines to the file named by ``H5MDX_RELIABILITY_OUT``; this
script runs them, aggregates the lines and writes the JSON report.

Usage::

    python benchmarks/bench_reliability.py [--fuzz-examples 1100]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parents[1]
TOPICS = ["fuzz", "external", "load", "faults", "swmr"]


def test_file(topic: str) -> Path:
    """The test module that measures ``topic``."""
    return ROOT / "tests" / "reliability" / f"test_reliability_{topic}.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz-examples", type=int, default=1100)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp) / "records.jsonl"
        env = dict(os.environ, H5MDX_RELIABILITY_OUT=str(spool),
                   H5MDX_FUZZ_EXAMPLES=str(args.fuzz_examples))
        tests: dict[str, dict] = {}
        for topic in TOPICS:
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", str(test_file(topic)), "-q",
                 "-m", "slow or not slow", "-p", "no:cacheprovider", "-p", "no:logging"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
            )
            summary = [ln for ln in proc.stdout.splitlines() if " passed" in ln or " failed" in ln]
            tests[topic] = {"exit_code": proc.returncode,
                            "summary": summary[-1] if summary else proc.stdout[-300:],
                            "seconds": round(time.perf_counter() - t0, 1)}
            print(f"{topic:9s} {tests[topic]['summary']} ({tests[topic]['seconds']} s)")
        records = [json.loads(line) for line in spool.read_text().splitlines()] \
            if spool.exists() else []
    empty = [t for t, r in tests.items() if r["exit_code"] == 5]  # pytest: no tests ran
    if empty:
        print(f"bench_reliability: no tests ran for {', '.join(empty)}; "
              f"{args.out} left as it was", file=sys.stderr)
        return 2

    by_section: dict[str, list] = collections.defaultdict(list)
    for rec in records:
        by_section[rec.pop("section")].append(rec)
    report = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "hdf5": h5py.version.hdf5_version, "h5py": h5py.__version__},
        "tests": tests,
        "fuzz": by_section.get("fuzz", [{}])[-1],
        "faults": by_section.get("faults", []),
        "load": {k: v for rec in by_section.get("load", []) for k, v in rec.items()},
        "swmr": by_section.get("swmr", []),
        "all_passed": all(t["exit_code"] == 0 for t in tests.values()),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["fuzz"], indent=1))
    print(f"wrote {args.out}")
    return 0 if report["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
