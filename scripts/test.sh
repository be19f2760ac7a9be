#!/usr/bin/env bash
# Set up everything and run ruff, mypy and the whole test suite.
#
#   bash scripts/test.sh [pytest arguments]
#
# As root (or with password-less sudo) this installs Open MPI, parallel HDF5 and SLURM
# (scripts/setup.sh --mpi --slurm), starts a local single-node SLURM unless one already
# answers (and stops it at exit only if it started it), and allows mpirun to run as root
# and to oversubscribe the cores. Otherwise it runs the plain setup and the MPI and SLURM
# tests skip (unless H5MDX_REQUIRE_MPI=1 / H5MDX_REQUIRE_SLURM=1, which turn those skips into
# failures: CI sets both).
#
# Exit status: non-zero if ruff or pytest fails, or if pytest collects no tests.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="${H5MDX_VENV:-$REPO/.venv}"

privileged=0
if [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
    privileged=1
fi

if [ "$privileged" -eq 1 ]; then
    bash scripts/setup.sh --mpi --slurm
else
    echo "test.sh: not root: plain setup (no MPI, no SLURM installation)"
    bash scripts/setup.sh
fi

if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1

started_slurm=0
cleanup() {
    if [ "$started_slurm" -eq 1 ]; then
        bash scripts/slurm-local.sh stop || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$(id -u)" -eq 0 ] && [ -x /usr/sbin/slurmctld ]; then
    if bash scripts/slurm-local.sh status >/dev/null 2>&1; then
        echo "test.sh: using the SLURM that is already running (it is left running)"
    else
        started_slurm=1
        if ! bash scripts/slurm-local.sh start; then
            started_slurm=0
            echo "test.sh: could not start the local SLURM" >&2
            if [ "${H5MDX_REQUIRE_SLURM:-0}" = "1" ]; then
                exit 1
            fi
        fi
    fi
else
    echo "test.sh: no local SLURM (needs root and scripts/setup.sh --slurm); SLURM tests skip"
fi

status=0

lint_paths=()
for d in src tests benchmarks notebooks; do
    [ -d "$d" ] && lint_paths+=("$d")
done
echo "==> ruff check ${lint_paths[*]}"
if ! "$VENV/bin/ruff" check "${lint_paths[@]}"; then
    echo "test.sh: ruff found problems" >&2
    status=1
fi

echo "==> mypy (the type hints of src/h5mdx)"
if ! "$VENV/bin/python" -m mypy; then
    echo "test.sh: mypy found problems" >&2
    status=1
fi

# Everything, fast and slow (a plain `pytest` leaves out the tests marked slow: fuzzing,
# load, faults, notebooks, the Sphinx build, MPI and SLURM); arguments given here come
# after, so `bash scripts/test.sh -m "not slow"` runs the fast suite only.
echo "==> pytest -m 'slow or not slow' $*"
set +e
"$VENV/bin/python" -m pytest -m "slow or not slow" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    rc=1
fi
if [ "$rc" -ne 0 ]; then
    status=$rc
fi

# The engine and RMSD tests again with the lock-free direct reads off: every read through
# h5py (both read paths must give the same results; tests/format/test_direct.py compares bytes).
if [ "$#" -eq 0 ]; then
    echo "==> pytest (H5MDX_DIRECT_READ=0: reads through h5py only) engine and rmsd tests"
    set +e
    H5MDX_DIRECT_READ=0 "$VENV/bin/python" -m pytest -q -m "slow or not slow" \
        tests/engine/test_backend.py tests/engine/test_frames.py tests/analysis/test_rmsd.py \
        tests/analysis/test_rmsd_paths.py
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        status=$rc
    fi
fi
exit "$status"
