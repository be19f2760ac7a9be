"""The main example: a real-size adk trajectory, C-alpha RMSD at the read floor, a report.

What ``h5mdx example`` does, as library calls:

1. :func:`build_adk_trajectory` writes (once; cached by frame count) an H5MD
   file of ``frames`` frames of adenylate kinase (3341 atoms) made from the 98
   frames of MDAnalysisTests' PSF/DCD: frames 0-97 are the DCD's frames
   exactly; the trajectory then runs back and forth through them
   (:func:`source_index`), every later frame moved by a small rigid
   rotation and translation plus Gaussian noise of 0.05 Å, drawn from a
   generator seeded by the frame number, so the file is the same on every
   machine and the RMSD stays meaningful. Layout: chunks of 100 whole frames
   (~3.8 MiB), uncompressed -- the layout that reads fastest in blocks.
2. The RMSD on a local cluster, the read floor (:func:`floor_reader`: plain h5py,
   one slab per worker process, page cache warm) and raw reads of the same bytes
   (``os.preadv``, no HDF5: the ceiling above the floor) are timed in paired rounds,
   each timing all three back to back, so that they see the same spell of a shared
   machine (each round's seconds go to ``rounds.json``); a last RMSD runs with
   per-task timing (:func:`h5mdx.timing.capture`), which the Gantt chart shows.
3. :func:`mdanalysis_sample_rate` times MDAnalysis' ``RMSD`` on the first
   frames of the same file, to extrapolate to all frames.
4. :func:`summary_lines` and :func:`write_report` turn the figures into a few
   lines of text and a small HTML report with plots.

The package's modules, one job each (each builds on those after it):

- :mod:`h5mdx.examples.run`: :func:`run_example`, what ``h5mdx example`` calls: the paired
  rounds, the run with per-task timing, MDAnalysis' speed, the outputs staged and
  published together;
- :mod:`h5mdx.examples.report`: :class:`ExampleResult`, the summary lines, the HTML report
  and the RMSD plot;
- :mod:`h5mdx.examples.trajectory`: the example trajectory, built once and cached.

The read floor itself is :mod:`h5mdx.floor` (the benchmarks use it too).
"""

from __future__ import annotations

from h5mdx.examples.report import (
    ExampleResult,
    machine_description,
    plot_rmsd,
    summary_lines,
    timing_split,
    write_report,
)
from h5mdx.examples.run import ROUNDS, mdanalysis_sample_rate, run_example
from h5mdx.examples.trajectory import (
    DEFAULT_FRAMES,
    SYNTHETIC,
    build_adk_trajectory,
    perturbed_frames,
    source_index,
)
from h5mdx.floor import floor_reader, read_floor

__all__ = [
    "DEFAULT_FRAMES",
    "ROUNDS",
    "SYNTHETIC",
    "ExampleResult",
    "build_adk_trajectory",
    "floor_reader",
    "machine_description",
    "mdanalysis_sample_rate",
    "perturbed_frames",
    "plot_rmsd",
    "read_floor",
    "run_example",
    "source_index",
    "summary_lines",
    "timing_split",
    "write_report",
]
