#!/usr/bin/env bash
# Set up h5mdx for development in a virtual environment at <repo>/.venv.
#
#   bash scripts/setup.sh [--mpi] [--slurm] [--force]
#
#   (no flag)  create .venv if absent and install the project: pip install -e ".[all,test,bench]"
#              (bench: MDTraj, which the benchmarks compare against)
#   --mpi      also install Open MPI and parallel HDF5 (Debian packages), build h5py against
#              them once (the wheel is cached outside the venv, in $H5MDX_CACHE/wheels) and
#              install it with mpi4py and dask-mpi (the "mpi" extra)
#   --slurm    also install SLURM and munge (Debian packages); start a local cluster with
#              scripts/slurm-local.sh start
#   --force    ignore the stamp file and run pip again
#
# Idempotent: the pip step is skipped while .venv/.h5mdx-stamp matches pyproject.toml, this
# script and the Python version; apt is skipped when dpkg shows the packages installed; the MPI
# build of h5py is checked every time (a plain `pip install` cannot silently swap it back to the
# serial wheel unnoticed) and reinstalled from the cache when needed.
#
# Environment: H5MDX_VENV (default <repo>/.venv), H5MDX_CACHE (default ~/.cache/h5mdx),
# PYTHON (interpreter used to create the venv, default python3).
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${H5MDX_VENV:-$REPO/.venv}"
CACHE="${H5MDX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/h5mdx}"
WHEELS="$CACHE/wheels"
PYTHON="${PYTHON:-python3}"
VPY="$VENV/bin/python"
STAMP="$VENV/.h5mdx-stamp"

MPI_PACKAGES=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev pkg-config)
SLURM_PACKAGES=(slurm-wlm munge)
HDF5_PKGCONFIG=hdf5-openmpi

want_mpi=0
want_slurm=0
force=0
for arg in "$@"; do
    case "$arg" in
        --mpi) want_mpi=1 ;;
        --slurm) want_slurm=1 ;;
        --force) force=1 ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

t_start=$SECONDS
summary=()
note() { echo "==> $*"; }
warn() { echo "setup.sh: WARNING: $*" >&2; }
elapsed() { echo "$((SECONDS - $1)) s"; }

# pip PYTHON ARGS...: pip of that interpreter, without the noise of configured local indexes
# that do not exist on this machine ("Location 'file:///...' is ignored").
pip() {
    local py="$1"; shift
    "$py" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

# ---------------------------------------------------------------------------------------------
# root / apt helpers
# ---------------------------------------------------------------------------------------------
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n env DEBIAN_FRONTEND=noninteractive "$@"
    else
        return 1
    fi
}

can_be_root() {
    [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }
}

missing_packages() {
    local pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            echo "$pkg"
        fi
    done
}

apt_updated=0
# apt_ensure WHAT PKG... : install the Debian packages that are missing. Returns 1 (after
# printing what to install) when that is not possible (not root, no sudo, not Debian).
apt_ensure() {
    local what="$1"; shift
    if ! command -v dpkg-query >/dev/null 2>&1; then
        warn "$what: not a Debian/Ubuntu system; install the equivalent of: $* (or use environment.yml with conda)"
        return 1
    fi
    local missing
    missing="$(missing_packages "$@" | tr '\n' ' ')"
    if [ -z "${missing// /}" ]; then
        note "$what: Debian packages present ($*)"
        return 0
    fi
    if ! can_be_root; then
        warn "$what: missing Debian packages: $missing"
        warn "  install them as root:  apt-get update && apt-get install -y $missing"
        warn "  then run this script again; continuing without $what."
        return 1
    fi
    local t=$SECONDS
    note "$what: apt-get install -y $missing"
    if [ "$apt_updated" -eq 0 ]; then
        as_root apt-get update -q </dev/null
        apt_updated=1
    fi
    # shellcheck disable=SC2086
    as_root apt-get install -y -q $missing </dev/null
    note "$what: Debian packages installed in $(elapsed "$t")"
}

# ---------------------------------------------------------------------------------------------
# 1. system packages
# ---------------------------------------------------------------------------------------------
have_mpi=0
if [ "$want_mpi" -eq 1 ]; then
    if apt_ensure "MPI" "${MPI_PACKAGES[@]}"; then
        if command -v mpicc >/dev/null && pkg-config --exists "$HDF5_PKGCONFIG"; then
            have_mpi=1
        else
            warn "MPI: mpicc or pkg-config '$HDF5_PKGCONFIG' not found after installation; continuing without MPI"
        fi
    fi
fi
have_slurm=0
if [ "$want_slurm" -eq 1 ]; then
    if apt_ensure "SLURM" "${SLURM_PACKAGES[@]}"; then
        have_slurm=1
    fi
fi

# ---------------------------------------------------------------------------------------------
# 2. virtual environment and the project
# ---------------------------------------------------------------------------------------------
if [ ! -x "$VPY" ]; then
    t=$SECONDS
    note "creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV"
    rm -f "$STAMP"
    note "venv created in $(elapsed "$t")"
fi

extras="all,test,bench"
if [ "$have_mpi" -eq 1 ]; then
    extras="all,test,bench,mpi"
fi
pyversion="$("$VPY" -c 'import sys; print(sys.version)')"
stamp_value="$(
    {
        cat "$REPO/pyproject.toml" "${BASH_SOURCE[0]}"
        echo "python=$pyversion"
    } | sha256sum | cut -d' ' -f1
)"

# The stamp holds the hash (line 1) and the extras installed with it (line 2); a run that asks
# for fewer extras than were installed (e.g. plain setup after --mpi) skips pip too.
stamp_ok=0
if [ "$force" -eq 0 ] && [ -f "$STAMP" ] && [ "$(sed -n 1p "$STAMP")" = "$stamp_value" ]; then
    stamp_ok=1
    stamped_extras=",$(sed -n 2p "$STAMP"),"
    for extra in ${extras//,/ }; do
        case "$stamped_extras" in
            *",$extra,"*) ;;
            *) stamp_ok=0 ;;
        esac
    done
    if ! "$VPY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("h5mdx") is None)' \
            2>/dev/null; then
        stamp_ok=0
    fi
fi

if [ "$stamp_ok" -eq 1 ]; then
    note "project: up to date (stamp $STAMP matches), pip skipped"
    summary+=("pip:      skipped (stamp matches)")
else
    t=$SECONDS
    note "project: pip install -e \".[$extras]\""
    pip "$VPY" install -q --upgrade pip
    pip "$VPY" install -q -e "$REPO[$extras]"
    printf '%s\n%s\n' "$stamp_value" "$extras" > "$STAMP"
    note "project installed in $(elapsed "$t")"
    summary+=("pip:      installed .[$extras] in $(elapsed "$t")")
fi

# ---------------------------------------------------------------------------------------------
# 3. parallel h5py (built once against Debian's parallel HDF5, cached outside the venv)
# ---------------------------------------------------------------------------------------------
# Open MPI refuses to run as root without these; only for the commands of this script.
mpi_env=()
if [ "$(id -u)" -eq 0 ]; then
    mpi_env=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
fi

h5py_is_mpi() {
    env "${mpi_env[@]}" "$VPY" -c 'import sys, h5py; sys.exit(0 if h5py.get_config().mpi else 1)' \
        >/dev/null 2>&1
}

build_h5py_wheel() {  # build_h5py_wheel VERSION DEST_DIR
    local version="$1" dest="$2"
    local pytag bvenv tmp t=$SECONDS
    pytag="$("$VPY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    bvenv="$CACHE/build-venv-$pytag"
    note "h5py: building h5py $version against parallel HDF5 (takes a few minutes, done once)"
    if [ ! -x "$bvenv/bin/python" ]; then
        "$VPY" -m venv "$bvenv"
    fi
    pip "$bvenv/bin/python" install -q --upgrade pip
    pip "$bvenv/bin/python" install -q --upgrade numpy cython pkgconfig mpi4py "setuptools>=77" wheel
    tmp="$(mktemp -d "$CACHE/build.XXXXXX")"
    # HDF5_DIR and HDF5_PKGCONFIG_NAME are mutually exclusive for h5py's build.
    if ! env -u HDF5_DIR CC=mpicc HDF5_MPI=ON HDF5_PKGCONFIG_NAME="$HDF5_PKGCONFIG" \
        "$bvenv/bin/python" -m pip wheel -q --no-deps --no-binary=h5py --no-build-isolation \
        --no-cache-dir -w "$tmp" "h5py==$version" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
        rm -rf "$tmp"
        echo "setup.sh: ERROR: building h5py $version with MPI failed (see above); needs mpicc" \
             "and pkg-config '$HDF5_PKGCONFIG' (Debian: libhdf5-openmpi-dev)" >&2
        exit 1
    fi
    mkdir -p "$dest"
    mv "$tmp"/h5py-*.whl "$dest"/
    rm -rf "$tmp"
    note "h5py: wheel built in $(elapsed "$t") and cached in $dest"
}

if [ "$have_mpi" -eq 1 ]; then
    t=$SECONDS
    if h5py_is_mpi; then
        note "h5py: already built with MPI"
        summary+=("h5py:     MPI build present")
    else
        h5py_version="$("$VPY" -c 'import importlib.metadata as m; print(m.version("h5py"))')"
        hdf5_version="$(pkg-config --modversion "$HDF5_PKGCONFIG")"
        ompi_version="$(mpirun --version 2>/dev/null | head -n1 | awk '{print $NF}')"
        pytag="$("$VPY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
        key="h5py-${h5py_version}_hdf5-${hdf5_version}_openmpi-${ompi_version}_${pytag}_$(uname -m)"
        dest="$WHEELS/$key"
        mkdir -p "$CACHE"
        # One build at a time, also across concurrent runs of this script.
        exec 9>"$CACHE/.build.lock"
        flock 9
        wheel="$(find "$dest" -maxdepth 1 -name 'h5py-*.whl' 2>/dev/null | head -n1 || true)"
        if [ -z "$wheel" ]; then
            build_h5py_wheel "$h5py_version" "$dest"
            wheel="$(find "$dest" -maxdepth 1 -name 'h5py-*.whl' | head -n1)"
            how="built and installed"
        else
            note "h5py: using cached wheel $wheel"
            how="installed from cache"
        fi
        flock -u 9
        # One pip command replaces the serial h5py by the MPI build.
        pip "$VPY" install -q --no-deps --force-reinstall "$wheel"
        if ! h5py_is_mpi; then
            echo "setup.sh: ERROR: h5py from $wheel does not report MPI support:" >&2
            env "${mpi_env[@]}" "$VPY" -c 'import h5py; print(h5py.get_config().mpi)' >&2 || true
            exit 1
        fi
        summary+=("h5py:     MPI build $how in $(elapsed "$t")")
    fi
    if ! env "${mpi_env[@]}" "$VPY" -c 'import mpi4py, dask_mpi' >/dev/null 2>&1; then
        pip "$VPY" install -q mpi4py dask-mpi
    fi
fi

# ---------------------------------------------------------------------------------------------
# 4. summary
# ---------------------------------------------------------------------------------------------
h5py_line="$(env "${mpi_env[@]}" "$VPY" -c '
import h5py
print(f"h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}, mpi={h5py.get_config().mpi}")
' 2>&1 | tail -n1)"
echo
echo "h5mdx setup done in $((SECONDS - t_start)) s"
echo "  venv:     $VENV ($("$VPY" -c 'import sys; print("Python", sys.version.split()[0])'))"
for line in "${summary[@]}"; do
    echo "  $line"
done
echo "  h5py:     $h5py_line"
if [ "$want_mpi" -eq 1 ]; then
    if [ "$have_mpi" -eq 1 ]; then
        mpi4py_line="$(env "${mpi_env[@]}" "$VPY" -c 'import mpi4py; print("mpi4py", mpi4py.__version__)' 2>&1 | tail -n1)"
        echo "  MPI:      $(mpirun --version 2>/dev/null | head -n1); $mpi4py_line"
    else
        echo "  MPI:      NOT set up (see the warnings above)"
    fi
fi
if [ "$want_slurm" -eq 1 ]; then
    if [ "$have_slurm" -eq 1 ]; then
        echo "  SLURM:    slurm-wlm $(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null); start a local test cluster with: bash scripts/slurm-local.sh start"
    else
        echo "  SLURM:    NOT installed (see the warnings above)"
    fi
fi
echo "  check:    $VENV/bin/h5mdx doctor"
