"""Sphinx configuration of the h5mdx documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html``
(``tests/env/test_docs.py`` does exactly this). Nothing is fetched from the
network: intersphinx is not used, so references to other projects are
written as plain text, and every reference to an h5mdx object or command-line
option must resolve (``nitpicky``).

The notebooks are rendered by myst-nb: ``docs/notebooks/*.py`` are symbolic links to
the jupytext percent-format sources in ``notebooks/``, read with ``jupytext.reads``
and executed at every build (a cell that raises fails the build).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "src"))

import h5mdx  # noqa: E402

project = "h5mdx"
author = "h5mdx developers"
copyright = "h5mdx developers"  # noqa: A001
release = h5mdx.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_nb",  # includes myst_parser
    "sphinx.ext.autodoc",
    "numpydoc",
    "sphinx.ext.mathjax",
    "h5mdx_docs",
]

root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "_ext", "README.md", "conf.py",
                    "**.ipynb_checkpoints"]
templates_path: list[str] = []

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# -- notebooks (myst-nb) --------------------------------------------------------------------
# The jupytext percent scripts are the notebooks; myst-nb reads them with jupytext.
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
nb_execution_mode = "force"  # always run them: the pages show what the code does today
nb_execution_in_temp = True  # they write their small data files to the working directory
nb_execution_timeout = 300  # seconds per cell
nb_execution_raise_on_error = True  # a broken notebook fails the build
nb_execution_show_tb = True
nb_merge_streams = True
# where the HPC notebook finds benchmarks/results when it runs in a temporary directory
os.environ.setdefault("H5MDX_REPO", str(HERE.parent))
# the quick start builds the `h5mdx example` trajectory: a small one for the docs
os.environ.setdefault("H5MDX_EXAMPLE_FRAMES", "2000")

# -- API reference -----------------------------------------------------------------------
autodoc_typehints = "none"  # types are in the numpydoc "Parameters" sections
autodoc_member_order = "bysource"
autodoc_mock_imports: list[str] = []
numpydoc_show_class_members = False  # autodoc documents the members
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False  # parameter types stay text ("str or path-like, optional")
numpydoc_attributes_as_param_list = True

#: Modules whose absence is not an error: none. Every module of h5mdx exists, and an import
#: failure of one is a broken build (it used to be turned into a note while modules were
#: being written).
h5mdx_api_optional: list[str] = []

#: Pages written elsewhere, linked from the index when they exist.
h5mdx_optional_pages = ["reliability"]

#: Benchmark result files shown on the benchmarks page: (file, title, command that writes it).
h5mdx_results = [
    ("open.md", "Opening files: time against trajectory length",
     "python benchmarks/bench_open.py"),
    ("rmsd.md", "RMSD: h5mdx against the 2-process read floor (paired), MDAnalysis and "
     "mdtraj (h5py from PyPI, HDF5 2.0)",
     "python benchmarks/bench_rmsd.py"),
    ("rmsd-hdf5-1.10.md", "RMSD: the same with h5py on HDF5 1.10.8 (setup.sh --mpi), whose "
     "h5py reads 4 MiB chunks at memory speed; MDAnalysis, which reads one frame per h5py "
     "call, runs 1.4x faster on it",
     "python benchmarks/bench_rmsd.py --tag=-hdf5-1.10  # in a .venv of setup.sh --mpi"),
    ("scale-2core-paired.md",
     "Scaling against the N-process read floor, paired: the floor and every run timed in "
     "the same rounds (2 cores, 100,000 frames, 4 GB per layout, h5py from PyPI)",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 --repeats 5 "
     "--tag=-2core-paired"),
    ("scale-2core-paired-hdf5-1.10.md",
     "Scaling against the N-process read floor, paired, with h5py built on HDF5 1.10.8 by "
     "setup.sh --mpi (it reads whole 4 MiB chunks at memory speed: the c100 floor is "
     "1.5-2.1x HDF5 2.0's)",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 --repeats 5 "
     "--rss-frames 0 --tag=-2core-paired-hdf5-1.10"),
    ("scale-16core.md",
     "Scaling on a lent 16-core machine, N=1-16, lazy open, distributed and threads "
     "(h5py 3.16 on HDF5 2.0). Its contiguous rows are against a floor read by one process "
     "at every N (fixed since: see scale-16core-after.md)",
     "bash benchmarks/device.sh run bench_scale --workers 1,2,4,8,16 "
     "--schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0 "
     "--tag=-16core"),
    ("threads-16core.md",
     "One process, T threads, on the 16-core machine: plain os.preadv scales like processes; "
     "h5mdx's threads queue for the GIL (4 MiB reads, read-ahead) until reads grow",
     "bash benchmarks/device.sh run bench_threads --frames 100000 --threads 1,2,4,8,16 "
     "--repeats 3 --tag=-16core"),
    ("threads-2core.md",
     "One process of T threads against T processes on 2 cores, every layout: a lean "
     "os.preadv + kernel process reaches 0.97-0.98x the contiguous floor, 1.4-2.2x the "
     "chunked ones",
     "python benchmarks/bench_threads.py --frames 100000 --threads 1,2 "
     "--layouts c100,c1,contig --tag=-2core"),
    ("scale-16core-after.md",
     "The 16-core machine at N=8 and 16 after the reads grow with the threads of a process "
     "and read-ahead stops past 4 of them; the contiguous floor split among N processes",
     "bash benchmarks/device.sh run bench_scale --layouts contig,c100,c1 --workers 8,16 "
     "--schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0 --grid-only "
     "--tag=-16core-after"),
    ("scale-2core-contig-fixed-floor.md",
     "Contiguous positions on 2 cores against a floor read by N processes (the earlier "
     "2-core files' contiguous N=2 floors were read by one)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig --workers 1,2 "
     "--repeats 3 --rss-frames 0 --grid-only --tag=-2core-contig-fixed-floor"),
    ("scale-2core-not-fused.md",
     "Fused read A/B on 2 cores, off: every task reads from Python, then runs the kernel "
     "(H5MDX_FUSED_READ=0; run right after the next one)",
     "H5MDX_FUSED_READ=0 python benchmarks/bench_scale.py --frames 100000 --layouts "
     "contig,c1,c100 --workers 1,2 --schedulers distributed,threads,processes --opens lazy "
     "--repeats 3 --rss-frames 0 --tag=-2core-not-fused"),
    ("scale-2core-fused.md",
     "Fused read A/B on 2 cores, auto: where no task reads ahead (N=2 here), each reads and "
     "computes in one compiled call without the GIL",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1,c100 "
     "--workers 1,2 --schedulers distributed,threads,processes --opens lazy --repeats 3 "
     "--rss-frames 0 --tag=-2core-fused"),
    ("scale-2core-compressed-base.md",
     "Compressed chunks on 2 cores, before (ae1839e): gzip+shuffle and LZF, 100-frame "
     "chunks, each task's block decoded at once into new arrays",
     "python benchmarks/bench_scale.py --frames 20000 --layouts gz100,lzf100 --workers 1,2 "
     "--schedulers threads,processes,distributed --opens lazy --selections ca,all "
     "--repeats 3 --grid-only --rss-frames 0 --tag=-2core-compressed-base"),
    ("scale-2core-compressed-head.md",
     "Compressed chunks on 2 cores, after: streamed whole chunks a read into buffers each "
     "thread keeps, zlib-ng and numcodecs' unshuffle (1.4-2.1x the floor on gzip)",
     "python benchmarks/bench_scale.py --frames 20000 --layouts gz100,lzf100 --workers 1,2 "
     "--schedulers threads,processes,distributed --opens lazy --selections ca,all "
     "--repeats 3 --grid-only --rss-frames 0 --tag=-2core-compressed-head"),
    ("scale-2core-numba-unshuffle-base.md",
     "gzip+shuffle on 2 cores before numba's unshuffle (0bcdc39): numcodecs' loop, which "
     "holds the GIL",
     "PYTHONPATH=<a worktree at 0bcdc39>/src python benchmarks/bench_scale.py --frames 20000 "
     "--layouts gz100 --workers 1,2 --schedulers threads,processes,distributed --opens lazy "
     "--selections ca,all --repeats 3 --grid-only --rss-frames 0 "
     "--tag=-2core-numba-unshuffle-base"),
    ("scale-2core-numba-unshuffle-head.md",
     "gzip+shuffle on 2 cores after: the shuffle undone by numba's loops where the kernel "
     "has loaded numba (2.1-3.1x the floor; 1.2-1.9x the frames/s before)",
     "python benchmarks/bench_scale.py --frames 20000 --layouts gz100 --workers 1,2 "
     "--schedulers threads,processes,distributed --opens lazy --selections ca,all "
     "--repeats 3 --grid-only --rss-frames 0 --tag=-2core-numba-unshuffle-head"),
    ("fused-2core.md",
     "The fused read on and off in the same rounds (N=2, distributed and threads, every "
     "layout, C-alpha and all atoms): 1.04-1.34x faster on, in all twelve",
     "python benchmarks/bench_fused.py --frames 100000 --workers 2 --tag=-2core"),
    ("scale-16core-fused.md",
     "The 16-core machine at N=8 and 16 with the fused read (every task at N=16): one- and "
     "100-frame chunks 0.98-1.88x the floor at N=16; contiguous runs last 70 ms",
     "bash benchmarks/device.sh run bench_scale --frames 100000 --layouts contig,c1,c100 "
     "--workers 8,16 --schedulers distributed,threads --opens lazy --repeats 3 "
     "--rss-frames 0 --grid-only --tag=-16core-fused"),
    ("scale-16core-fused-forced.md",
     "The 16-core machine at N=8 with the fused read forced (H5MDX_FUSED_READ=1) instead of "
     "read-ahead: no better, so the rule stays",
     "H5MDX_FUSED_READ=1 bash benchmarks/device.sh run bench_scale --frames 100000 "
     "--layouts contig,c1 --workers 8 --schedulers distributed,threads --opens lazy "
     "--repeats 3 --rss-frames 0 --grid-only --tag=-16core-fused-forced"),
    ("scale-16core-fused-400k.md",
     "The 16-core machine at N=8 and 16 on 400,000 frames (16 GB per layout), contiguous "
     "and one-frame chunks",
     "bash benchmarks/device.sh run bench_scale --frames 400000 --layouts contig,c1 "
     "--workers 8,16 --schedulers distributed,threads --opens lazy --repeats 5 "
     "--rss-frames 0 --grid-only --tag=-16core-fused-400k"),
    ("fused-16core.md",
     "The fused read on and off in the same rounds at N=16 (100,000 frames, C-alpha)",
     "bash benchmarks/device.sh run bench_fused --frames 100000 --workers 16 "
     "--layouts c1,contig,c100 --selections ca --repeats 3 --tag=-16core"),
    ("fused-16core-400k.md",
     "The fused read on and off in the same rounds at N=16 on 400,000 frames: 1.01-2.61x "
     "faster on",
     "bash benchmarks/device.sh run bench_fused --frames 400000 --workers 16 "
     "--layouts contig,c1 --selections ca,all --repeats 5 --tag=-16core-400k"),
    ("tasks-16core.md",
     "What one task costs dask's threads and distributed on 16 cores, N=8 and 16 (before "
     "2026-11-26's fix: its \"1 task\" column holds two tasks' work, and each task ran "
     "beside an alias task)",
     "bash benchmarks/device.sh run bench_tasks --workers 8,16 --tasks 32 --ms 20 "
     "--schedulers distributed,threads --repeats 5 --tag=-16core"),
    ("scale-16core-contig-low.md",
     "The second 16-core lease (2026-11-26): contiguous positions at N=1, 2 and 4 against "
     "the floor split among N processes, distributed and threads",
     "bash benchmarks/device.sh run bench_scale --layouts contig --workers 1,2,4 "
     "--schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0 --grid-only "
     "--tag=-16core-contig-low"),
    ("scale-16core-step1024.md",
     "Contiguous positions at N=8 on 16 cores with 1 MiB read-ahead steps",
     "bash benchmarks/device.sh run bench_scale --layouts contig --workers 8 "
     "--schedulers distributed,threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--read-step-kib 1024 --tag=-16core-step1024"),
    ("scale-16core-step4096.md",
     "The same with 4 MiB read-ahead steps (the default), in the same lease",
     "bash benchmarks/device.sh run bench_scale --layouts contig --workers 8 "
     "--schedulers distributed,threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--read-step-kib 4096 --tag=-16core-step4096"),
    ("compute-16core.md",
     "Where an RMSD compute's time goes on 8 and 16 distributed workers, 4 GB contiguous "
     "file: the parts outside the tasks, beside the floor",
     "bash benchmarks/device.sh run bench_compute --frames 100000 --layout contig "
     "--workers 8,16 --repeats 5 --tag=-16core"),
    ("kernel-16core.md",
     "The RMSD kernel alone on the 16-core machine's AVX-512 core: 24 fused lanes 1.06x the "
     "shipped 12 on all atoms, 0.96x on C-alpha",
     "bash benchmarks/device.sh run bench_kernel --sizes 107,214,428,856,1712,3341 "
     "--tag=-16core"),
    ("mapped-16core.md",
     "Contiguous positions on 16 cores: the kernel on 64 MiB windows of a mapping of the "
     "file against the fused read's pread, 1.08-1.89x (2 cores: no gain)",
     "bash benchmarks/device.sh run bench_mapped --frames 100000 --workers 8,16 "
     "--repeats 5 --tag=-16core"),
    ("threads-16core-fused.md",
     "One process, T threads, on 16 cores with the fused read's variants: 256 KiB steps "
     "1.08-1.19x the floor on contiguous positions, 1.43-1.51x on one-frame chunks",
     "bash benchmarks/device.sh run bench_threads --frames 100000 --threads 8,16 "
     "--layouts contig,c1 --tag=-16core-fused"),
    ("tasks-16core-meta.md",
     "What a task costs each scheduler on 16 cores, graphs as h5mdx.rmsd builds them (its "
     "distributed rows: back-to-back computes, see the performance notes; bench_tasks warms every "
     "worker since)",
     "bash benchmarks/device.sh run bench_tasks --workers 8,16 --tasks 32 --ms 20 "
     "--repeats 5 --tag=-16core-meta"),
    ("cli-16core.md",
     "h5mdx rmsd as a user runs it on 16 cores, per scheduler and auto, 100,000 frames, "
     "all atoms: threads 0.31-0.35x distributed's wall time",
     "bash benchmarks/device.sh run bench_cli --frames 100000 --layouts contig,c100 "
     "--selections all --repeats 3 --tag=-16core"),
    ("blocks-16core-contig-100k.md",
     "Block size against the floor on 16 cores, 100,000 contiguous frames, distributed: "
     "fewer rounds, less of distributed's own cost",
     "bash benchmarks/device.sh run bench_blocks --layout contig --frames 100000 "
     "--workers 16 --schedulers distributed --mib 64,128,256 --repeats 7 "
     "--tag=-16core-contig-100k"),
    ("blocks-16core-contig-400k.md",
     "Block size against the floor on 16 cores, 400,000 contiguous frames, distributed "
     "and threads",
     "bash benchmarks/device.sh run bench_blocks --layout contig --frames 400000 "
     "--workers 16 --schedulers distributed,threads --mib 128,256,512,1024 --repeats 5 "
     "--tag=-16core-contig-400k"),
    ("blocks-16core-c1-400k.md",
     "Block size against the floor on 16 cores, 400,000 frames in one-frame chunks",
     "bash benchmarks/device.sh run bench_blocks --layout c1 --frames 400000 --workers 16 "
     "--schedulers distributed --mib 128,256,512,1024 --repeats 5 --tag=-16core-c1-400k"),
    ("mapped-2core.md",
     "Contiguous positions on 2 cores: the fused read against the kernel on a mapping of the "
     "file (64 MiB windows: 1.06-1.32x; one mapping kept per worker: 1.49-1.76x)",
     "python benchmarks/bench_mapped.py --frames 100000 --workers 1,2 --repeats 5 "
     "--tag=-2core"),
    ("mapped-read-2core.md",
     "The RMSD tasks with H5MDX_MAPPED_READ=1 (the kernel on 64 MiB windows of a mapping) "
     "against h5mdx's default, paired, N=2 (2 cores): slower, most on one-frame chunks",
     "python benchmarks/bench_fused.py --switch mapped --frames 100000 --workers 2 "
     "--layouts contig,c1,c100 --repeats 5 --tag=-2core"),
    ("mapped-read-2core-n1.md",
     "The same with one worker (2 cores)",
     "python benchmarks/bench_fused.py --switch mapped --frames 100000 --workers 1 "
     "--layouts contig,c1,c100 --repeats 5 --tag=-2core-n1"),
    ("mapped-2core-recheck.md",
     "The same, a day later on the same kind of VM: 64 MiB windows 0.68-1.06x the fused read, "
     "one mapping kept per worker 1.42-1.83x",
     "python benchmarks/bench_mapped.py --frames 100000 --workers 1,2 "
     "--modes threads,processes --repeats 5 --tag=-2core-recheck"),
    ("mapped-2core-zen4.md",
     "The kernel on a mapping of the file, 2-core Zen 4 VM with the 512-bit kernel: 64 MiB "
     "windows 0.76-1.02x the fused read (all atoms 0.76-0.93x)",
     "python benchmarks/bench_mapped.py --frames 100000 --workers 1,2 "
     "--modes threads,processes --repeats 5 --tag=-2core-zen4"),
    ("threads-2core-fused.md",
     "One process of T threads on 2 cores, every layout, with the fused read at 256 KiB, "
     "1 MiB and 4 MiB a read against the reads from Python",
     "python benchmarks/bench_threads.py --frames 30000 --threads 1,2 "
     "--layouts contig,c1,c100 --tag=-2core-fused"),
    ("scale-read-ahead-auto-hdf5-1.10-pair2.md",
     "Read-ahead A/B, pair 2 (the same grid run back to back, auto first), auto: "
     "each task reads ahead where the machine has a spare core for every task, here "
     "at N=1 (2 cores, h5py built on HDF5 1.10.8)",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--schedulers distributed,threads --repeats 3 --rss-frames 0 "
     "--tag=-read-ahead-auto-hdf5-1.10-pair2  # in a .venv of setup.sh --mpi"),
    ("scale-read-ahead-off-hdf5-1.10-pair2.md",
     "Read-ahead A/B, pair 2, off: every task reads, then computes "
     "(H5MDX_READ_AHEAD=0)",
     "H5MDX_READ_AHEAD=0 python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--schedulers distributed,threads --repeats 3 --rss-frames 0 "
     "--tag=-read-ahead-off-hdf5-1.10-pair2  # in a .venv of setup.sh --mpi"),
    ("scale-read-ahead-auto-hdf5-1.10-pair1.md",
     "Read-ahead A/B, pair 1 (an earlier pair, auto first), auto: each task reads ahead where "
     "the machine has a spare core for every task, here at N=1 (2 cores, h5py built "
     "on HDF5 1.10.8)",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--schedulers distributed,threads --repeats 3 --rss-frames 0 "
     "--tag=-read-ahead-auto-hdf5-1.10-pair1  # in a .venv of setup.sh --mpi"),
    ("scale-read-ahead-off-hdf5-1.10-pair1.md",
     "Read-ahead A/B, pair 1, off: every task reads, then computes "
     "(H5MDX_READ_AHEAD=0)",
     "H5MDX_READ_AHEAD=0 python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--schedulers distributed,threads --repeats 3 --rss-frames 0 "
     "--tag=-read-ahead-off-hdf5-1.10-pair1  # in a .venv of setup.sh --mpi"),
    ("scale-read-ahead-forced-on-hdf5-1.10.md",
     "Read-ahead forced at every N (H5MDX_READ_AHEAD=2): at N=2 on 2 cores the reader "
     "threads take turns with the workers (100-frame chunks, lazy open, h5py built on "
     "HDF5 1.10.8)",
     "H5MDX_READ_AHEAD=2 python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--layouts c100 --opens lazy --schedulers distributed,threads --repeats 3 "
     "--rss-frames 0 --tag=-read-ahead-forced-on-hdf5-1.10"),
    ("scale-read-ahead-forced-off-hdf5-1.10.md",
     "Read-ahead forced off (H5MDX_READ_AHEAD=0), run right before the forced-on one",
     "H5MDX_READ_AHEAD=0 python benchmarks/bench_scale.py --frames 100000 --workers 1,2 "
     "--layouts c100 --opens lazy --schedulers distributed,threads --repeats 3 "
     "--rss-frames 0 --tag=-read-ahead-forced-off-hdf5-1.10"),
    ("scale-bind-before.md",
     "A/B, before: RMSD tasks whose every 4 MiB read checks the file on disk and looks "
     "up its direct reader (lazy open, distributed and threads, 2 cores, h5py from PyPI)",
     "PYTHONPATH=<checkout of 00dce9e>/src python benchmarks/bench_scale.py --frames 100000 "
     "--workers 1,2 --repeats 5 --opens lazy --schedulers distributed,threads "
     "--rss-frames 0 --tag=-bind-before"),
    ("scale-bind-after.md",
     "A/B, after: each task binds its reader once (FrameReader.bind), run right after "
     "the one before",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 --repeats 5 "
     "--opens lazy --schedulers distributed,threads --rss-frames 0 --tag=-bind-after"),
    ("scale-2core.md", "Scaling against the N-process read floor, not paired: the floor's "
     "best of 5 (one call into a new array) measured first (2 cores, h5py from PyPI)",
     "python benchmarks/bench_scale.py --frames 30000 --workers 1,2 --repeats 5 "
     "--tag=-2core"),
    ("scale-2core-hdf5-1.10.md",
     "Scaling against the N-process read floor, not paired (2 cores, h5py built on HDF5 "
     "1.10.8 by setup.sh --mpi)",
     "python benchmarks/bench_scale.py --frames 30000 --workers 1,2 --repeats 5 "
     "--tag=-2core-hdf5-1.10"),
    ("scale-2core-100k.md",
     "Scaling against the N-process read floor at the issue's size, not paired: 100,000 "
     "frames, 4 GB per layout (2 cores, h5py built on HDF5 1.10.8 by setup.sh --mpi)",
     "python benchmarks/bench_scale.py --frames 100000 --workers 1,2 --repeats 5 "
     "--rss-frames 0 --tag=-2core-100k"),
    ("blocks.md", "RMSD against the dask block size (2 cores)",
     "python benchmarks/bench_blocks.py --workers 1,2"),
    ("blocks-large.md", "RMSD against the dask block size, 128 MiB to 1 GiB (2 cores, "
     "100,000 frames): why streamed blocks go up to 512 MiB",
     "python benchmarks/bench_blocks.py --frames 100000 --workers 1,2 --repeats 5 "
     "--mib 128,256,512,1024 --tag=-large"),
    ("steps.md", "One worker's RMSD against the size of each read (2 cores)",
     "python benchmarks/bench_steps.py"),
    ("kernel.md", "The RMSD kernels alone, in memory, one core: h5mdx, MDTraj, MDAnalysis",
     "python benchmarks/bench_kernel.py"),
    ("kernel-2core-lanes.md",
     "The kernels again, with 24 fused accumulator lanes beside the shipped 12 (AVX2: 0.75x "
     "all atoms, 0.87x C-alpha)",
     "python benchmarks/bench_kernel.py --tag=-2core-lanes"),
    ("kernel-2core-sizes.md",
     "The kernel against the selection's size: ~1 billion atoms/s a core whether the "
     "reference it streams fits the L1 cache or not (2 cores)",
     "python benchmarks/bench_kernel.py --frames 3000 --repeats 5 "
     "--sizes 107,214,428,856,1712,3341 --tag=-2core-sizes"),
    ("index.md", "What finding the chunks costs a process (h5py from PyPI, HDF5 2.0)",
     "python benchmarks/bench_index.py"),
    ("index-hdf5-1.10.md",
     "What finding the chunks costs a process (h5py built on HDF5 1.10.8 by setup.sh --mpi)",
     "python benchmarks/bench_index.py --tag=-hdf5-1.10"),
    ("runs.md", "Reads of whole frames: runs from the chunks' offset table, or chunk by chunk",
     "python benchmarks/bench_runs.py"),
    ("tasks.md", "What one task costs each dask scheduler (2 cores; before 2026-11-26's fix: "
     "its \"1 task\" column holds two tasks' work, and each task ran beside an alias task)",
     "python benchmarks/bench_tasks.py"),
    ("tasks-2core.md", "What a compute and a task cost each dask scheduler, graphs built as "
     "h5mdx.rmsd builds its own, and the parts of a distributed compute (2 cores)",
     "python benchmarks/bench_tasks.py --tasks 32 --workers 1,2 --repeats 7 --tag=-2core"),
    ("compute-2core.md", "Where an RMSD compute's time goes on distributed: the parts "
     "outside the tasks, beside the floor (2 cores, 100,000 contiguous frames)",
     "python benchmarks/bench_compute.py --frames 100000 --workers 1,2 --repeats 5 "
     "--tag=-2core"),
    ("tasks-2core-saturation-inf.md", "The same on distributed with worker-saturation inf "
     "(every task sent to its worker at once): no faster (2 cores)",
     "python benchmarks/bench_tasks.py --tasks 32 --workers 1,2 --schedulers distributed "
     "--saturation inf --repeats 7 --tag=-2core-saturation-inf"),
    ("scale-2core-fused256.md",
     "2 threads, the fused read's step at 256 KiB, contiguous and one-frame chunks "
     "(2 cores; runs of 256 and 1024 KiB one after the other, first)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 256 --tag=-2core-fused256"),
    ("scale-2core-fused1024.md",
     "2 threads, the fused read's step at 1024 KiB, contiguous and one-frame chunks "
     "(2 cores; runs of 256 and 1024 KiB one after the other, first)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 1024 --tag=-2core-fused1024"),
    ("scale-2core-fused256-b.md",
     "2 threads, the fused read's step at 256 KiB, contiguous and one-frame chunks "
     "(2 cores; runs of 256 and 1024 KiB one after the other, again, 1 MiB first)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 256 --tag=-2core-fused256-b"),
    ("scale-2core-fused1024-b.md",
     "2 threads, the fused read's step at 1024 KiB, contiguous and one-frame chunks "
     "(2 cores; runs of 256 and 1024 KiB one after the other, again, 1 MiB first)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 1024 --tag=-2core-fused1024-b"),
    ("kernel-2core-zen4.md", "The RMSD kernel on a Zen 4 (AVX-512) core: 24 lanes and two "
     "frames a pass (shipped there) against 12 lanes, the build before, 4.0x with all atoms",
     "python benchmarks/bench_kernel.py --tag=-2core-zen4"),
    ("scale-2core-zen4.md", "The grid on the 2-core Zen 4 VM with the kernel's 512-bit "
     "layout (100,000 frames, N=1,2)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1,c100 "
     "--workers 1,2 --schedulers distributed,threads --opens lazy --repeats 3 "
     "--rss-frames 0 --grid-only --tag=-2core-zen4"),
    ("scale-2core-zen4-before.md", "The same grid with the build before (12 lanes, one frame "
     "a pass), on the same VM",
     "git worktree add ../before 08de508 && cd ../before && PYTHONPATH=src python "
     "benchmarks/bench_scale.py --frames 100000 --layouts contig,c1,c100 --workers 1,2 "
     "--schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0 --grid-only "
     "--tag=-2core-zen4-before"),
    ("compute-2core-zen4.md", "Where a distributed compute's time goes, 2-core Zen 4 VM, "
     "after the kernel's 512-bit layout",
     "python benchmarks/bench_compute.py --frames 100000 --workers 1,2 --tag=-2core-zen4"),
    ("open-chunks-2core.md", "RMSD on positions opened with chunks= (100-frame blocks, the "
     "engine's blocks, lazy): the open's blocks run together into 8-10 tasks, 1.45-1.63x "
     "the floor",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --tag=-2core"),
    ("open-chunks-2core-before.md", "The same before: one task per block of the open, 1000 "
     "tasks for 100-frame blocks, 0.13-0.16x the floor",
     "git checkout b979080 && python benchmarks/bench_open_chunks.py --frames 100000 "
     "--workers 1,2 --tag=-2core-before"),
    ("open-chunks-2core-zarr.md", "The same with the frames in Zarr (4 MiB chunks of whole "
     "frames), workers without MALLOC_TRIM_THRESHOLD_ and Zarr tasks without a reader "
     "thread: 0.22-0.30x the HDF5 floor, 0.52-1.04x a floor of zarr's own reads",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --zarr "
     "--tag=-2core-zarr"),
    ("open-chunks-2core-zarr-coords.md", "The same, timing .compute() (the RMSD and its "
     "coordinates): step read where the result is computed, Zarr's time and step in "
     "65,536-frame chunks; chunks={'time': 100} 1.34-1.45x the floor, Zarr 0.66-1.67x "
     "the Zarr floor",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --zarr "
     "--tag=-2core-zarr-coords"),
    ("open-chunks-2core-zarr-coords-before.md", "The same before (this benchmark, the code "
     "and the Zarr store of a7aab8c): step's getter tasks, time and step in 962 chunks "
     "each; chunks={'time': 100} 0.15-0.21x the floor, Zarr 0.21-0.81x the Zarr floor",
     "git checkout a7aab8c -- src && python benchmarks/bench_open_chunks.py --frames "
     "100000 --workers 1,2 --zarr --tag=-2core-zarr-coords-before"),
    ("open-chunks-2core-skip.md", "The same on position.isel(time=slice(10000, None)), "
     "opened with chunks=: the sliced open still read by the tasks themselves; HDF5 "
     "1.15-1.53x the floor of the frames read",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --zarr "
     "--skip 10000 --tag=-2core-skip"),
    ("open-chunks-2core-skip-before.md", "The same before (the code of bd7a72a): a slice "
     "after the open kept dask's getter tasks, 900 tasks for 100-frame blocks, "
     "0.04-0.42x the floor",
     "git checkout bd7a72a -- src && python benchmarks/bench_open_chunks.py --frames "
     "100000 --workers 1,2 --zarr --skip 10000 --tag=-2core-skip-before"),
    ("open-chunks-2core-skip-aligned.md", "The same with tasks and reads aligned to the "
     "stored chunks (frame 10,000 starts inside a 104-frame Zarr chunk): Zarr lazy "
     "0.62-1.30x the Zarr floor",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --zarr "
     "--skip 10000 --tag=-2core-skip-aligned"),
    ("open-chunks-2core-skip-unaligned.md", "The same before (the code of 068d787): reads "
     "counted from the slice's first frame, each across two Zarr chunks; Zarr lazy "
     "0.40-0.54x the Zarr floor",
     "git checkout 068d787 -- src && python benchmarks/bench_open_chunks.py --frames "
     "100000 --workers 1,2 --zarr --skip 10000 --tag=-2core-skip-unaligned"),
    ("open-chunks-2core-stride2.md", "Every other frame of the contiguous file "
     "(isel(time=slice(0, None, 2))), read in one compiled call a task: 0.33-0.37x the "
     "floor scaled to the frames read",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --layout contig "
     "--stride 2 --tag=-2core-stride2"),
    ("open-chunks-2core-stride2-before.md", "The same before (the code of 6eb9b35~1): a "
     "strided h5py box a read, 0.18-0.29x",
     "git checkout 6eb9b35~1 -- src && python benchmarks/bench_open_chunks.py --frames "
     "100000 --workers 1,2 --layout contig --stride 2 --tag=-2core-stride2-before"),
    ("open-chunks-2core-nm.md", "Positions that say nm, opened with convert_units=True "
     "(served in Angstrom): at N=2 the fused read scales each read in the kernel, 0.91-1.02x "
     "the same open of the file as stored (N=1 reads ahead and scales in numpy: 0.67-0.82x)",
     "python benchmarks/bench_open_chunks.py --frames 100000 --workers 1,2 --layout contig "
     "--nm --repeats 5 --tag=-2core-nm"),
    ("open-chunks-2core-nm-before.md", "The same before (the code of 9607419~1): every "
     "converted read scaled by numpy, no fused read: 0.63-0.84x as stored at N=2",
     "git checkout 9607419~1 -- src && python benchmarks/bench_open_chunks.py --frames "
     "100000 --workers 1,2 --layout contig --nm --repeats 5 --tag=-2core-nm-before"),
    ("open-chunks-2core-zarr-read-ahead.md", "The same with a reader thread in the Zarr "
     "tasks at N=1 (as before): 0.42-0.48x the Zarr floor there",
     "git checkout 62fba20 && python benchmarks/bench_open_chunks.py --frames 100000 "
     "--workers 1,2 --zarr --tag=-2core-zarr-read-ahead"),
    ("open-chunks-2core-zarr-trim.md", "The same with distributed's MALLOC_TRIM_THRESHOLD_"
     "=65536 in the workers (every allocation above 128 KiB new pages): 0.08-0.14x the "
     "HDF5 floor, 0.13-0.42x the Zarr floor",
     "git checkout 86613f7 && python benchmarks/bench_open_chunks.py --frames 100000 "
     "--workers 1,2 --zarr --tag=-2core-zarr-trim"),
    ("open-chunks-2core-zarr-before.md", "The same before: a task per Zarr chunk (962), "
     "0.07-0.09x the HDF5 floor",
     "git checkout f1c33df && python benchmarks/bench_open_chunks.py --frames 100000 "
     "--workers 1,2 --zarr --tag=-2core-zarr-before"),
    ("scale-2core-zen4-opens.md", "The scale grid with chunks={} beside the lazy open, one "
     "task per block of the open (30 tasks)",
     "git checkout b979080 && python benchmarks/bench_scale.py --frames 100000 --layouts "
     "contig,c100 --workers 1,2 --schedulers distributed,threads --opens chunks,lazy "
     "--repeats 3 --rss-frames 0 --grid-only --tag=-2core-zen4-opens"),
    ("scale-2core-zen4-opens-after.md", "The same after: the open's blocks run together (8-10 "
     "tasks); chunks={} over lazy 0.89 -> 0.96 (geometric mean of the cells)",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c100 --workers 1,2 "
     "--schedulers distributed,threads --opens chunks,lazy --repeats 3 --rss-frames 0 "
     "--grid-only --tag=-2core-zen4-opens-after"),
    ("compute-2core-bound.md", "The same with distributed's own cost beside it: graphs of "
     "empty tasks (13-17 ms for one, 36-40 ms for 8, 22-33 ms gathered by the client "
     "instead of dask's finalize task) and the bound they set",
     "python benchmarks/bench_compute.py --frames 100000 --workers 1,2 --tag=-2core-bound"),
    ("compute-2core-zen4-before.md", "The same at N=2 with the build before (12 lanes): all "
     "atoms 0.31x the floor",
     "git checkout 08de508 && python benchmarks/bench_compute.py --frames 100000 "
     "--workers 2 --tag=-2core-zen4-before"),
    ("mapped-read-2core-zen4.md", "H5MDX_MAPPED_READ on and off on the 2-core Zen 4 VM, "
     "with the faster kernel: the mapping still 0.79-0.88x the default",
     "python benchmarks/bench_fused.py --switch mapped --frames 100000 --workers 2 "
     "--layouts contig --selections ca,all --repeats 5 --tag=-2core-zen4"),
    ("scale-2core-zen4-fused256.md", "2 threads, the fused step at 256 KiB, Zen 4 VM (24 "
     "lanes, one frame a pass): worse than 1 MiB again",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 256 --tag=-2core-zen4-fused256"),
    ("scale-2core-zen4-fused1024.md", "The same at 1 MiB (the default), run right after",
     "python benchmarks/bench_scale.py --frames 100000 --layouts contig,c1 --workers 2 "
     "--schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only "
     "--fused-kib 1024 --tag=-2core-zen4-fused1024"),
    ("cli-2core.md", "h5mdx rmsd as a user runs it (a fresh process per run), per "
     "scheduler and with the default auto, against the read floor (2 cores, 30,000 frames)",
     "python benchmarks/bench_cli.py --frames 30000 --repeats 5 --tag=-2core"),
    ("cli-2core-before.md", "The same before local threads computed without importing "
     "distributed (dask's 0.3 s at the first compute of a process)",
     "git checkout 00e598c && python benchmarks/bench_cli.py --frames 30000 --repeats 5 "
     "--tag=-2core-before"),
    ("worker.md", "One worker's RMSD: the client's process against a distributed worker",
     "python benchmarks/bench_worker.py"),
    ("balance.md", "RMSD with blocks shared out evenly over the workers (2 cores)",
     "python benchmarks/bench_balance.py --frames 3300,9900,30000 --repeats 15"),
    ("layouts.md", "Layouts: chunks, compression and Zarr",
     "python benchmarks/bench_layouts.py --cold"),
    ("mpi.md", "MPI-IO (a few MiB at a time, or each rank's block at once), dask-mpi and "
     "local dask processes",
     "python benchmarks/bench_mpi.py"),
]

# -- every h5mdx reference must resolve; other projects' names are plain text ------------
nitpicky = True
_EXTERNAL = (
    r"(xarray|xr|numpy|np|pandas|pd|dask|distributed|h5py|MDAnalysis|matplotlib|mpi4py|"
    r"dask_mpi|dask_jobqueue|zarr|hdf5plugin|numba|mdtraj|rich|tqdm|psutil|pathlib|os|typing|collections|concurrent|argparse|"
    r"datetime|enum|io|json|types)(\..*)?"
)
_BUILTIN = (
    r"(str|int|float|bool|bytes|dict|list|tuple|set|object|None|callable|iterable|mapping|"
    r"sequence|path-like|array-like|optional|scalar|module|lock|Path|Any|Enum|"
    r"Exception|ValueError|OSError|ImportError|RuntimeError|TypeError|KeyError|"
    r"BaseException|ExceptionGroup)"
)
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL),
    (r"py:.*", _BUILTIN),
    # private modules (h5mdx._optional, h5mdx.layout._atomic) are not part of the reference
    (r"py:.*", r"h5mdx\.([a-z]+\.)*_[a-z_]+(\..*)?"),
]

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"h5mdx {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False
