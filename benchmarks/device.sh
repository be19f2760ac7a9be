#!/usr/bin/env bash
# The scaling benchmarks on a lent machine that has numpy, h5py, numba, xarray, pandas and
# matplotlib but not dask or distributed, and no network (the 16-core `device` machine: see
# ../shared/RECIPES.md in the workplace).
#
#   bash benchmarks/device.sh wheels             # here: the wheels it lacks, into .whl/
#   bash benchmarks/device.sh run SCRIPT [ARGS]  # there: install them, run one benchmark
#
# `run` installs .whl/*.whl into .site (no index, no dependencies) where dask is missing,
# runs benchmarks/SCRIPT.py with its data under ${H5MDX_BENCH_DATA:-/tmp/h5mdx-bench}, and
# copies the result files it wrote to $OUT (what the device tool brings back) when set.
# E.g., each call under the tool's 10 minutes:
#   run(command="bash benchmarks/device.sh run bench_scale --layouts c100 --tag=-16core-c100",
#       carry=[".whl"])
# Where a session has 15 minutes of device time in all (starting the machine included),
# one call covers items 2-3 of issue 14 on all three layouts (3 x 4 GB written in ~75 s;
# the grid on 2 cores takes ~1/3 of the full one's 8.5 min at N=1,2):
#   run(command="bash benchmarks/device.sh run bench_scale --workers 1,2,4,8,16
#       --schedulers distributed,threads --opens lazy --repeats 3 --rss-frames 0
#       --tag=-16core", carry=[".whl"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=.whl

case "${1:-}" in
wheels)
    # the device's Python (3.12 in 2026-11) decides the wheels' tags
    pyver=${DEVICE_PYTHON_VERSION:-3.12}
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$WHEELS" \
        dask distributed partd locket tblib zict tornado cloudpickle toolz fsspec \
        sortedcontainers urllib3 packaging xarray \
        pyfive numcodecs typing_extensions  # pyfive: chunk index where HDF5 < 1.12.3
    # the project itself (build isolation: a recent setuptools reads the license field)
    "$PY" -m pip wheel -q --no-deps . -w "$WHEELS"
    du -sh "$WHEELS"
    ls "$WHEELS"
    ;;
run)
    shift
    script=${1:?which benchmark: bench_scale or bench_blocks}
    shift
    if ! "$PY" -c "import dask, distributed, h5mdx" 2>/dev/null; then
        [ -d "$WHEELS" ] || { echo "device.sh: no $WHEELS/ (bash benchmarks/device.sh wheels)" >&2; exit 2; }
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$PWD/.site" "$WHEELS"/*.whl
        export PYTHONPATH="$PWD/.site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    data=${H5MDX_BENCH_DATA:-/tmp/h5mdx-bench}
    stamp=$(mktemp)
    "$PY" "benchmarks/$script.py" --data "$data" "$@"
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT/results"
        find benchmarks/results -type f -newer "$stamp" -exec cp {} "$OUT/results/" \;
        ls "$OUT/results"
    fi
    rm -f "$stamp"
    ;;
*)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac
