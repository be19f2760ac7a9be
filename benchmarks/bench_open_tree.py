"""Opening a file of many groups: H5MD-NOMAD's connectivity, a group per molecule.

H5MD-NOMAD (nomad-parser-plugins-atomistic's OpenMM test file,
``tests/data/h5md/openmm/test_traj_openmm_5frames.h5`` in its sdist: ``pip download
nomad-parser-plugins-atomistic==1.0.14 --no-deps --no-binary :all:``) writes below
``/connectivity/particles_group`` a group per molecule: 10,481 groups, 52,269 datasets
beside 5 frames of 31,583 atoms. Pass it with ``--file``; without one, a file of the same
shape is built (``--molecules`` water groups of 5 datasets each, in ``--data``).

Ways, timed in the same rounds (the order rotating), after the imports:

- ``floor``: h5py visits every object of the file and asks each dataset its shape and
  dtype (what any reader of the whole tree does at least);
- ``info``, ``info --json``: ``h5mdx info`` (the text counts the connectivity groups
  rather than reading them; ``--json`` reads and checks them all);
- ``particles``: ``xr.open_dataset(path, engine="h5md")``;
- ``one molecule``: ``xr.open_dataset(..., group="connectivity/.../<one molecule>")``;
- ``observables tree``: ``xr.open_datatree(..., group="observables")``;
- ``whole tree``: ``xr.open_datatree(path, engine="h5md")``;
- ``whole tree, no default indexes``: the same with ``create_default_indexes=False`` (the
  engine builds the indexes itself; xarray then skips a second build of the tree).

Medians of ``--repeats`` rounds. Results: ``benchmarks/results/open-tree-<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import statistics
import sys
import warnings
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_scale  # noqa: E402 - beside this script: its timer and machine facts

WAYS = ("floor", "info", "info --json", "particles", "one molecule", "observables tree",
        "whole tree", "whole tree, no default indexes")
#: The molecules' groups, as H5MD-NOMAD names them.
MOLECULES = "connectivity/particles_group/group_water/particles_group"


def build(path: str, molecules: int) -> str:
    """A file shaped as H5MD-NOMAD's: 5 frames of 3 atoms per molecule, a group per
    molecule (``formula``, ``label``, ``type``, ``is_molecule``, ``indices``) and
    observables (once; cached)."""
    if os.path.exists(path):
        return path
    n = 3 * molecules
    tmp = path + ".part"
    with h5py.File(tmp, "w") as f:
        h5md = f.create_group("h5md")
        h5md.attrs["version"] = [1, 0]
        h5md.create_group("creator").attrs["name"] = "h5py"
        pos = f.create_group("particles/all/position")
        pos["value"] = np.zeros((5, n, 3), dtype=np.float32)
        pos["step"], pos["time"] = np.arange(5), np.arange(5.0)
        energy = f.create_group("observables/energy/potential")
        energy["value"], energy["step"], energy["time"] = np.arange(5.0), np.arange(5), \
            np.arange(5.0)
        for m in range(molecules):
            g = f.create_group(f"{MOLECULES}/molecule_{m}")
            g["formula"], g["label"], g["type"] = "H2O", "HOH", "molecule"
            g["is_molecule"], g["indices"] = True, np.arange(3 * m, 3 * m + 3)
    os.replace(tmp, path)
    return path


def ways(path: str) -> dict[str, Callable[[], Any]]:
    """Each way of opening ``path``, as a function."""
    import xarray as xr

    from h5mdx.cli import main as cli

    def floor() -> int:
        seen = [0]

        def visit(_name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                seen[0] += len(obj.shape) + obj.dtype.itemsize

        with h5py.File(path, "r") as f:
            f.visititems(visit)
        return seen[0]

    def info(*extra: str) -> int:
        with contextlib.redirect_stdout(io.StringIO()):
            return cli(["info", *extra, path])

    def opened(open_: Callable[..., Any], **kwargs: Any) -> None:
        open_(path, engine="h5md", **kwargs).close()

    with h5py.File(path, "r") as f:
        one = f"{MOLECULES}/{next(iter(f[MOLECULES]))}"
    return {
        "floor": floor, "info": info, "info --json": functools.partial(info, "--json"),
        "particles": functools.partial(opened, xr.open_dataset),
        "one molecule": functools.partial(opened, xr.open_dataset, group=one),
        "observables tree": functools.partial(opened, xr.open_datatree, group="observables"),
        "whole tree": functools.partial(opened, xr.open_datatree),
        "whole tree, no default indexes": functools.partial(
            opened, xr.open_datatree, create_default_indexes=False),
    }


def measure(path: str, repeats: int) -> dict[str, list[float]]:
    """Seconds of each way in each round (rotating), its warnings silenced (the file's
    departures from H5MD are warned about once per open)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = ways(path)
        for fn in run.values():  # once, before the rounds: imports, caches
            fn()
        timers = {k: functools.partial(bench_scale._timed, fn) for k, fn in run.items()}
        return bench_scale.interleaved(timers, repeats, rotate=True)


def summary(seconds: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Per way: median seconds, and the median of each round's time over the floor's."""
    return [{"way": way, "seconds": statistics.median(seconds[way]),
             "x_floor": statistics.median(bench_scale.round_ratios(seconds[way],
                                                                   seconds["floor"]))}
            for way in WAYS]


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"# Opening a file of {meta['groups']:,} groups, {meta['datasets']:,} datasets "
             f"({meta['file']})", "",
             f"{bench_scale.cores_text(meta['machine'])}; "
             f"{bench_scale.versions_text(meta['machine'])}; medians of {meta['repeats']} "
             "rounds, warm page cache (x the floor: each round's time over h5py's visit "
             "of every object).", "",
             "| way | s | x the floor's time |", "|---|---:|---:|"]
    lines += [f"| {r['way']} | {r['seconds']:.3f} | {r['x_floor']:.2f} |" for r in rows]
    return "\n".join(lines) + "\n"


def _counts(path: str) -> tuple[int, int]:
    counts = [0, 0]

    def count(_name: bytes, info: Any) -> None:
        counts[0 if info.type == h5py.h5o.TYPE_GROUP else 1] += 1

    with h5py.File(path, "r") as f:
        h5py.h5o.visit(f.id, count, info=True)
    return counts[0], counts[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", help="H5MD-NOMAD's OpenMM test file (default: one built)")
    p.add_argument("--data", default=os.path.join(HERE, "data"),
                   help="where the built file is kept")
    p.add_argument("--molecules", type=int, default=10385)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--name", default="2core", help="results: open-tree-NAME.{json,md}")
    args = p.parse_args(argv)
    path = args.file
    if path is None:
        os.makedirs(args.data, exist_ok=True)
        path = build(os.path.join(args.data, f"tree-{args.molecules}.h5"), args.molecules)
    groups, datasets = _counts(path)
    seconds = measure(path, args.repeats)
    rows = summary(seconds)
    meta = {"file": os.path.basename(path), "groups": groups, "datasets": datasets,
            "repeats": args.repeats, "machine": bench_scale.machine()}
    record = {"meta": meta, "rows": rows, "seconds": seconds}
    bench_scale.save_results("open-tree-", args.name, record,
                             lambda r: markdown(r["meta"], r["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
