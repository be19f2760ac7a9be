#!/usr/bin/env bash
# The scaling benchmarks on a lent machine that has numpy, h5py, numba, xarray, pandas and
# matplotlib but not dask or distributed, and no network (the 16-core `device` machine: see
# ../shared/RECIPES.md in the workplace).
#
#   bash benchmarks/device.sh wheels             # here: the wheels it lacks, into .whl/
#   bash benchmarks/device.sh run SCRIPT [ARGS]  # there: install them, run one benchmark
#   bash benchmarks/device.sh next               # there: the runs still to do (below)
#
# `run` installs .whl/*.whl into .site (no index, no dependencies) where dask is missing
# (once for the same wheels: later runs reuse it),
# runs benchmarks/SCRIPT.py with its data under ${H5MDX_BENCH_DATA:-/tmp/h5mdx-bench}, and
# copies the result files it wrote to $OUT (what the device tool brings back) when set.
# bench_scale writes its report into $OUT/results itself, again after every N: a call that
# runs out of time still brings back the layouts and N it finished (marked "Partial").
# The repository travels to the lent machine with .whl/ beside it. E.g., one command of
# under 10 minutes each, there:
#   bash benchmarks/device.sh run bench_scale --layouts c100 --tag=-16core-c100
# Where 15 minutes of machine time are all there is (its start included), one command
# measures N workers and 16 threads against the floor on all three layouts (3 x 4 GB
# written in ~75 s; the grid on 2 cores takes ~1/3 of the full one's 8.5 min at N=1,2):
#   bash benchmarks/device.sh run bench_scale --workers 1,2,4,8,16 \
#       --schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0 --tag=-16core
# (434 s on 2026-11-26, the three 4 GB files written in ~75 s.)
#
# Run on 2026-11-26 with the fused read (docs/performance.md, "On 16 cores, with the fused
# read"; commands in docs/conf.py): the grid at N=8, 16 on 100,000 and 400,000 frames,
# fused forced at N=8, bench_fused at N=16, bench_tasks and bench_blocks (--layout) at
# N=16. One call ran the first three in 132 s, one the next three in 250 s (16 GB files
# written in ~10 s each). The tool brings back at most 8 files a call, so `run` packs each
# finished benchmark's files into $OUT/results-SCRIPT-K.tgz (here: tar xzf it).
# Run on 2026-11-26 in a second lease: every step `next` then had (kernel, tasks,
# contig-low, compute, mapped, step1024, step4096, threads, cli; two calls, 5.5 and 4.5
# minutes; results *-16core*.md of that day, docs/performance.md's "The second 16-core lease").
# Not run there yet (the steps of `next`, below):
# - kernel: the kernel alone with its layouts side by side: 12 lanes (shipped on this
#   Xeon, whose AVX-512 LLVM tunes to 256-bit vectors), 24, and 24 two frames a pass
#   (shipped on AMD Zen 4: 4.0x the 12 lanes there; built for sapphirerapids on that VM
#   they spilled, 0.3x): whether the Xeon agrees, ~1 min;
# - kernel512: the same with LLVM told to use 512-bit vectors (bench_kernel --prefer-512:
#   NUMBA_CPU_FEATURES with -prefer-256-bit). Built so on the Zen 4 VM, Intel's tuning
#   ran 24 lanes two frames a pass at 458,000 all-atom frames/s against 294,000 for its
#   own 12 lanes: if the Xeon gains as much, its all-atom tasks could pass 0.8x, ~1 min;
# - mapped-real, mapped-real8: the RMSD tasks on a mapping of the file
#   (H5MDX_MAPPED_READ=1, off by default) against the default, paired: the kernel alone on
#   a mapping ran 1.08-1.89x the fused read's pread there (all atoms, contiguous, 16
#   threads: 0.69 -> 0.90x the floor), and all atoms on contiguous positions are the cell
#   still below 0.8x; if the tasks gain as much, the mapping could be the default where
#   every core runs a task, ~2 min;
# - fused256, fused1024: 16 threads with the fused read's step at 256 KiB and at 1 MiB (the
#   default), all atoms too: with C-alpha 256 KiB ran 1.19x / 1.51x the floor against
#   0.99x / 1.38x (contiguous / one-frame chunks), ~2 min;
# - tasks: bench_tasks with its own function loaded on every worker first (the run of the
#   second lease timed its load in the one-task graphs on distributed and processes), ~30 s;
# - compute100k: where a distributed compute's time goes on 8 and 16 workers (4 GB
#   contiguous), now with distributed's own cost beside it (bench_compute's empty graphs
#   and the bound they set: floor / (floor + one empty task)): whether the 4 GB floor of
#   ~70 ms is too short for any tool through distributed (an empty one-task compute cost
#   17 ms on 8 workers in a lease before, a bound of 0.80; the RMSD computes spent 27-34
#   ms outside their tasks, finalize collecting 32 blocks 13-17 ms of it), ~1 min. It
#   replaces a 16 GB compute400k, which asked the same less directly.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=.whl

# The steps above, in order of what they tell per
# minute, as one command (each step packed into its own archive as it finishes; a failed
# step does not stop the rest). NEXT_ONLY=name,name picks steps; NEXT_DRY=1 prints them.
# One call of under 10 minutes covers them all (~9 min; the machine's start ~35 s;
# each step is packed as it finishes, so a call cut short keeps the steps before):
#   PYTHONUNBUFFERED=1 bash benchmarks/device.sh next 2>&1 | tail -c 11000
NEXT_STEPS=(
    "kernel|bench_kernel --tag=-16core-lanes"
    "kernel512|bench_kernel --prefer-512 --tag=-16core-512"
    "compute100k|bench_compute --frames 100000 --layout contig --workers 8,16 --repeats 5 --tag=-16core-bound"
    "mapped-real|bench_fused --switch mapped --frames 100000 --workers 16 --layouts contig,c1 --selections ca,all --repeats 5 --tag=-16core"
    "mapped-real8|bench_fused --switch mapped --frames 100000 --workers 8 --layouts contig --selections ca,all --repeats 5 --tag=-16core-n8"
    "fused256|bench_scale --layouts contig,c1 --workers 16 --schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only --fused-kib 256 --tag=-16core-fused256"
    "fused1024|bench_scale --layouts contig,c1 --workers 16 --schedulers threads --opens lazy --repeats 5 --rss-frames 0 --grid-only --fused-kib 1024 --tag=-16core-fused1024"
    "tasks|bench_tasks --workers 8,16 --tasks 32 --ms 20 --repeats 5 --tag=-16core-warm"
    "compressed|bench_scale --layouts gz100,lzf100 --frames 40000 --workers 1,4,16 --schedulers threads,distributed --opens lazy --selections ca --repeats 3 --rss-frames 0 --grid-only --tag=-16core-compressed"
)

case "${1:-}" in
next)
    for step in "${NEXT_STEPS[@]}"; do
        name=${step%%|*}
        args=${step#*|}
        if [ -n "${NEXT_ONLY:-}" ] && [[ ",$NEXT_ONLY," != *",$name,"* ]]; then
            continue
        fi
        echo "==> device.sh next: $name: $args"
        [ -n "${NEXT_DRY:-}" ] && continue
        # shellcheck disable=SC2086  # the step's words are its arguments
        bash "$SELF" run $args || echo "device.sh next: $name failed (rc $?)" >&2
    done
    ;;
wheels)
    # the device's Python (3.12 in 2026-11) decides the wheels' tags. With their
    # dependencies, resolved by pip (~8 MB without numpy and pandas, which the device
    # has): dask imports yaml, psutil, msgpack and more that a list by hand
    # missed (a bare-venv run of `run` found them one at a time)
    pyver=${DEVICE_PYTHON_VERSION:-3.12}
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    "$PY" -m pip download -q --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$WHEELS" \
        dask distributed xarray \
        pyfive numcodecs imagecodecs  # pyfive: chunk index where HDF5 < 1.12.3;
                                      # imagecodecs: zlib-ng and LZF (28 MB)
    # numpy and pandas (27 MB) come with the machine, and `run` never installs over them
    rm -f "$WHEELS"/numpy-*.whl "$WHEELS"/pandas-*.whl
    # the project itself (build isolation: a recent setuptools reads the license field)
    "$PY" -m pip wheel -q --no-deps . -w "$WHEELS"
    du -sh "$WHEELS"
    ls "$WHEELS"
    ;;
run)
    shift
    script=${1:?which benchmark: bench_scale or bench_blocks}
    shift
    # what an earlier run installed from the same wheels (the steps of `next` each run here
    # in turn: ~5 s a step saved); other wheels (h5mdx rebuilt from another branch) install anew
    sums=$( (cat "$WHEELS"/*.whl 2>/dev/null || true) | md5sum | cut -d' ' -f1)
    if [ -d "$PWD/.site" ] && [ "$(cat "$PWD/.site/.wheels" 2>/dev/null)" = "$sums" ]; then
        export PYTHONPATH="$PWD/.site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    if ! "$PY" -c "import dask, distributed, h5mdx" 2>/dev/null; then
        [ -d "$WHEELS" ] || { echo "device.sh: no $WHEELS/ (bash benchmarks/device.sh wheels)" >&2; exit 2; }
        # every wheel but the compiled stack the machine brings (numpy, pandas, h5py, numba...:
        # never a second numpy over the one its numba was built with) and what it already
        # has at the same version
        mapfile -t pick < <("$PY" - "$WHEELS" <<'PICK'
import importlib.metadata as md, os, re, sys
keep = {"numpy", "scipy", "pandas", "h5py", "numba", "llvmlite", "matplotlib"}
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith(".whl"):
        continue
    name, version = f.split("-")[:2]
    name = re.sub(r"[-_.]+", "-", name).lower()
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or (have != version and name not in keep):
        print(os.path.join(sys.argv[1], f))
PICK
)
        rm -rf "$PWD/.site"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$PWD/.site" "${pick[@]}"
        echo "$sums" > "$PWD/.site/.wheels"
        export PYTHONPATH="$PWD/.site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    data=${H5MDX_BENCH_DATA:-/tmp/h5mdx-bench}
    stamp=$(mktemp)
    # bench_scale (and the benchmarks that save through it) write straight into $OUT, as
    # they go: what a run stopped by the tool's time limit wrote still comes back
    if [ -n "${OUT:-}" ]; then export H5MDX_BENCH_RESULTS="$OUT/results"; fi
    # what the cores are, in the log too (the results record it; a lost file would not)
    "$PY" -c "from h5mdx._machine import cpu_description; print('cpu:', cpu_description())"
    "$PY" "benchmarks/$script.py" --data "$data" "$@"
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT/results"  # and what the other benchmarks wrote in the tree
        find benchmarks/results -type f -newer "$stamp" -exec cp {} "$OUT/results/" \;
        ls "$OUT/results"
        # the tool brings back at most 8 files a call: one archive per finished benchmark
        # (a run stopped by the time limit leaves its files as they are)
        n=$(find "$OUT" -maxdepth 1 -name 'results-*.tgz' | wc -l)
        tar czf "$OUT/results-$script-$n.tgz" -C "$OUT" results
        rm -rf "$OUT/results"
        echo "device.sh: results in \$OUT/results-$script-$n.tgz"
    fi
    rm -f "$stamp"
    ;;
*)
    sed -n '2,15p' "$SELF" >&2
    exit 2
    ;;
esac
