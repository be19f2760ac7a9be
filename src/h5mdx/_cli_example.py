"""``h5mdx example``: the main job on the embedded adenylate-kinase example.

Converts the PSF/DCD shipped with MDAnalysisTests to H5MD with ``h5mdx
convert``'s library call, shows ``h5mdx info`` for it, opens it lazily with the
``h5md`` engine and, where the RMSD module is present, computes the C-alpha
RMSD on a local dask cluster, writing a CSV file and a plot.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "example",
        help="run the main job on the embedded adk example (no cluster, no MPI needed)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="h5mdx-example", help="output directory")
    p.add_argument("--workers", type=int, default=2, help="dask worker processes")
    p.add_argument("--select", default="name CA", help="MDAnalysis atom selection")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import xarray as xr

    from h5mdx._cli_info import render
    from h5mdx.h5md import scan
    from h5mdx.testing import adk_example, adk_topology

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "adk.h5md")
    t0 = time.perf_counter()
    adk_example(path)
    topology = adk_topology()
    print(f"example trajectory: {path}  (topology {os.path.basename(topology)})\n")
    print(render(scan(path)))
    t0 = time.perf_counter()
    ds = xr.open_dataset(path, engine="h5md", topology=topology)
    t_open = time.perf_counter() - t0
    print(f"\nxr.open_dataset({path!r}, engine='h5md', topology=...) "
          f"in {t_open * 1e3:.1f} ms:\n")
    print(ds)
    try:
        from h5mdx._cli_rmsd import run_rmsd_job
    except ImportError:
        ds.close()
        return 0
    print()
    code = run_rmsd_job(ds, select=args.select, workers=args.workers, out_dir=args.out)
    ds.close()
    return code
