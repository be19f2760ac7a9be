"""What of the parallel stack is usable here: ``h5mdx doctor``.

Each check reports ``"ok"``, ``"missing"`` or ``"info"``, a one-line detail (versions, states)
and, when something is missing, the command that fixes it. Nothing here imports mpi4py or h5py
into the calling process: the probes that load MPI (``import h5py`` loads mpi4py when h5py is
built with MPI) run in a subprocess with a timeout, so that a broken MPI installation is
reported instead of crashing or hanging the caller. Optional packages are looked up by their
metadata, without importing them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from h5mdx._machine import cpu_description
from h5mdx._subprocess import RUN_AS_ROOT_ENV, allow_run_as_root, run
from h5mdx.timing.report import render_table

__all__ = ["Check", "Report", "run_checks"]

Status = Literal["ok", "missing", "info"]

#: How to get the pieces, shown next to a missing check.
FIX_MPI_DEBIAN = ("apt-get install openmpi-bin libopenmpi-dev libhdf5-openmpi-dev (Debian/"
                  "Ubuntu; in a clone of h5mdx: bash scripts/setup.sh --mpi), or load your "
                  "site's MPI module")
# h5py is installed where its MPI is missing: a plain 'pip install h5py' keeps it as it is
# ('Requirement already satisfied'), and pip's cache would give back a serial build
FIX_H5PY_MPI = (
    "CC=mpicc HDF5_MPI=ON pip install --force-reinstall --no-deps --no-cache-dir "
    "--no-binary=h5py h5py && pip install mpi4py (against a parallel HDF5: on Debian add "
    "HDF5_PKGCONFIG_NAME=hdf5-openmpi; in a clone of h5mdx: bash scripts/setup.sh --mpi); "
    "with conda: conda install -c conda-forge 'h5py=*=mpi_openmpi*' openmpi mpi4py"
)
FIX_SLURM_LOCAL = (
    "load your site's SLURM module; for a local test cluster, in a clone of h5mdx: "
    "bash scripts/setup.sh --slurm && bash scripts/slurm-local.sh start"
)

#: What a probe that ran past its timeout says (:func:`_run`), and the fix for it: the
#: package is there (a slow file system, a loaded machine, an MPI that hangs as it starts)
_NO_ANSWER = "no answer within"
FIX_TIMEOUT = ("h5mdx doctor --timeout 120 (more time for the probe); if it never answers, "
               "MPI may hang as it starts: run the python -c 'import h5py' or "
               "'from mpi4py import MPI' of this check by hand")

_H5PY_PROBE = """
import json, h5py
cfg = h5py.get_config()
print(json.dumps({"version": h5py.__version__, "hdf5": h5py.version.hdf5_version,
                  "mpi": bool(cfg.mpi), "chunk_iter": hasattr(h5py.h5d.DatasetID, "chunk_iter")}))
"""

_MPI4PY_PROBE = """
import json, mpi4py
from mpi4py import MPI
print(json.dumps({"version": mpi4py.__version__,
                  "library": ", ".join(MPI.Get_library_version().replace("\\0", "")
                                       .strip().splitlines()[0].split(", ")[:2]),
                  "standard": "%d.%d" % MPI.Get_version()}))
"""


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes
    ----------
    name : str
        What was checked (e.g. ``"h5py MPI"``).
    status : {"ok", "missing", "info"}
        ``"info"`` reports a setting without judging it.
    detail : str
        Versions, states or the reason of a failure.
    fix : str or None
        The command that installs or starts what is missing.
    """

    name: str
    status: Status
    detail: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the check passed (``"info"`` counts as passed)."""
        return self.status != "missing"


@dataclass(frozen=True)
class Report:
    """All checks and which parallel paths they make usable.

    Attributes
    ----------
    checks : list of Check
        In display order.
    paths : dict
        ``{"mpi-io": bool, "dask-mpi": bool, "slurm": bool}``.
    python : str
        The interpreter that was examined.
    """

    checks: list[Check]
    paths: dict[str, bool] = field(default_factory=dict)
    python: str = ""

    def __getitem__(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able form (what ``h5mdx doctor --json`` prints)."""
        return {
            "python": self.python,
            "checks": [{**asdict(c), "ok": c.ok} for c in self.checks],
            "paths": dict(self.paths),
        }

    def format(self) -> str:
        """A human-readable table with fixes under the missing items."""
        rows = []
        for c in self.checks:
            rows.append([c.name, c.status, c.detail])
            if c.status == "missing" and c.fix:
                rows.append(["", "", f"fix: {c.fix}"])
        rows.append(["", "", ""])
        rows += [[f"{name} path", "usable" if usable else "NOT usable", ""]
                 for name, usable in self.paths.items()]
        table = render_table(rows, align="<<<")
        lines = [f"h5mdx doctor (python: {self.python})", ""]
        lines += [f"  {line}" if line else "" for line in table.splitlines()]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------- probes


def _run(cmd: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> tuple[
    int | None, str, str
]:
    """(returncode or None on timeout/OSError, stdout, stderr) of ``cmd``, bounded."""
    try:
        proc = run(cmd, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, "", f"{_NO_ANSWER} {timeout:g} s"
    except OSError as err:
        return None, "", str(err)
    return proc.returncode, proc.stdout, proc.stderr


def _python_probe(python: str, code: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run ``code`` in a fresh interpreter; (parsed JSON of its last line, or None; error)."""
    rc, out, err = _run([python, "-c", code], timeout, env=allow_run_as_root())
    if rc == 0:
        try:
            return json.loads(out.strip().splitlines()[-1]), ""
        except (ValueError, IndexError):
            return None, f"unexpected output: {out.strip()[-200:]!r}"
    if rc is None:
        return None, err
    if rc < 0:
        return None, f"the interpreter crashed (signal {-rc}): {_last_line(err)}"
    return None, _last_line(err) or f"exit code {rc}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed(dist: str, module: str) -> str | None:
    """The installed version of ``dist`` where ``module`` can be imported; else None."""
    version = _dist_version(dist)
    if version is None or importlib.util.find_spec(module) is None:
        return None
    return version


def _kernel_layout() -> str:
    from h5mdx.analysis.qcp import kernel_layout

    try:
        return kernel_layout()
    except Exception as exc:  # noqa: BLE001 - a broken numba must not stop the report
        return f"unknown ({type(exc).__name__}: {exc})"


def _package_check(name: str, dist: str, module: str, fix: str) -> Check:
    version = _installed(dist, module)
    if version is None:
        return Check(name, "missing", "not installed", fix)
    return Check(name, "ok", version)


# ----------------------------------------------------------------------------------- checks


def _h5py_checks(probe: dict[str, Any] | None, error: str) -> list[Check]:
    if probe is None and error.startswith(_NO_ANSWER):  # not a missing h5py: a slow one
        return [Check("h5py", "missing", f"importing it gave {error}", FIX_TIMEOUT),
                Check("h5py MPI", "missing", "unknown (importing h5py gave no answer)",
                      FIX_TIMEOUT)]
    if probe is None:
        return [
            Check("h5py", "missing", f"cannot be imported: {error}", "pip install h5py"),
            Check("h5py MPI", "missing", "unknown (h5py cannot be imported)", FIX_H5PY_MPI),
        ]
    h5py_check = Check("h5py", "ok", f"h5py {probe['version']}, HDF5 {probe['hdf5']}")
    if probe["mpi"]:
        mpi_check = Check("h5py MPI", "ok", "built with MPI (driver='mpio' available)")
    else:
        mpi_check = Check("h5py MPI", "missing", "serial build (no driver='mpio')", FIX_H5PY_MPI)
    return [h5py_check, mpi_check]


def _mpi4py_check(probe: dict[str, Any] | None, error: str) -> Check:
    fix = "pip install mpi4py  (needs an MPI library: " + FIX_MPI_DEBIAN + ")"
    if importlib.util.find_spec("mpi4py") is None:
        return Check("mpi4py", "missing", "not installed", fix)
    if probe is None:
        return Check("mpi4py", "missing", f"installed but MPI does not initialise: {error}",
                     FIX_TIMEOUT if error.startswith(_NO_ANSWER) else fix)
    return Check(
        "mpi4py",
        "ok",
        f"mpi4py {probe['version']}, MPI {probe['standard']}: {probe['library']}",
    )


def _mpirun_check(timeout: float) -> Check:
    fix = "apt-get install -y openmpi-bin  (or: " + FIX_MPI_DEBIAN + ")"
    exe = shutil.which("mpirun")
    if exe is None:
        return Check("mpirun", "missing", "not on PATH", fix)
    rc, out, err = _run([exe, "--version"], timeout)
    if rc != 0:
        slow = rc is None and err.startswith(_NO_ANSWER)
        return Check("mpirun", "missing", f"{exe} does not run: {_last_line(err)}",
                     FIX_TIMEOUT if slow else fix)
    first = next((line for line in out.splitlines() if line.strip()), "").strip()
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if "Open MPI" in first and as_root and not all(os.environ.get(k) for k in RUN_AS_ROOT_ENV):
        # 'mpirun --version' answers as root; 'mpirun -n 2 ...' refuses to start there
        allow = " ".join(f"{k}={v}" for k, v in RUN_AS_ROOT_ENV.items())
        return Check("mpirun", "ok", f"{exe} ({first}); as root it starts ranks only with "
                     f"export {allow} (h5mdx's own mpirun commands set them)")
    return Check("mpirun", "ok", f"{exe} ({first})")


def _slurm_checks(timeout: float) -> list[Check]:
    fix_install = "apt-get install -y slurm-wlm munge  (or: " + FIX_SLURM_LOCAL + ")"
    missing = [exe for exe in ("sbatch", "sinfo") if shutil.which(exe) is None]
    if missing:
        return [
            Check("SLURM commands", "missing", f"not on PATH: {', '.join(missing)}", fix_install),
            Check("SLURM cluster", "missing", "no SLURM commands", FIX_SLURM_LOCAL),
        ]
    commands = Check("SLURM commands", "ok", f"sbatch, sinfo in {os.path.dirname(shutil.which('sinfo') or '')}")
    rc, out, err = _run(["sinfo", "-h", "-o", "%P %a %D %T"], timeout)
    if rc != 0:
        detail = "sinfo does not answer: " + (_last_line(err) or f"exit code {rc}")
        return [commands, Check("SLURM cluster", "missing", detail, FIX_SLURM_LOCAL)]
    lines = [line.split() for line in out.splitlines() if line.strip()]
    states = ", ".join(" ".join(line) for line in lines)
    if not any(_usable_partition(line) for line in lines):
        # 'sinfo' answers for a cluster whose partitions are down or whose nodes are all
        # down or drained: jobs would wait forever, where the check said ok
        detail = (f"answers, but no partition is up with nodes that take jobs (partition "
                  f"avail nodes state: {states or 'none'})")
        return [commands, Check("SLURM cluster", "missing", detail, FIX_SLURM_LOCAL)]
    return [commands, Check("SLURM cluster", "ok", f"answers (partition avail nodes state: {states})")]


#: node states of sinfo's %T in which a node takes no job (a trailing '*': not responding;
#: powered down nodes are started for a job, reserved ones take the reservation's)
_NO_JOBS = ("down", "drain", "drained", "draining", "fail", "failing", "future", "inval")


def _usable_partition(fields: list[str]) -> bool:
    """Whether a line of ``sinfo -h -o '%P %a %D %T'`` is a partition that is up with
    nodes in a state that takes jobs (idle, mixed, allocated, completing...)."""
    if len(fields) < 4 or fields[1] != "up":
        return False
    state = fields[3].rstrip("*~#!%$@^-+").lower()
    return not fields[3].endswith("*") and state not in _NO_JOBS


def _chunk_index_check(probe: dict[str, Any] | None, error: str = "") -> Check:
    """How lock-free reads find the chunks of a dataset (:mod:`h5mdx.format.chunk_index`);
    ``error``: why the h5py probe gave nothing."""
    name = "chunk index"
    if probe is None:  # a probe past its timeout is no h5py that cannot be imported
        why = ("importing h5py gave no answer" if error.startswith(_NO_ANSWER)
               else "h5py cannot be imported")
        return Check(name, "info", f"unknown ({why})")
    pyfive = _installed("pyfive", "pyfive")
    tree = f"pyfive {pyfive} finds chunk B-trees (read as reads need them)"
    if probe.get("chunk_iter"):
        detail = f"HDF5 {probe['hdf5']} lists a dataset's chunks in one pass"
        return Check(name, "ok", f"{detail}; {tree}" if pyfive else detail)
    if pyfive is not None:
        return Check(name, "ok", f"HDF5 {probe['hdf5']} has no chunk iteration; {tree}")
    return Check(name, "missing",
                 f"HDF5 {probe['hdf5']} has no chunk iteration and pyfive is not installed: "
                 "datasets of many small chunks are read through h5py, one thread at a time",
                 "pip install pyfive")


def _file_locking_check() -> Check:
    value = os.environ.get("HDF5_USE_FILE_LOCKING")
    if value is None:
        detail = (
            "unset (HDF5 locks files; on Lustre/NFS without locking support set "
            "HDF5_USE_FILE_LOCKING=FALSE)"
        )
    else:
        detail = f"HDF5_USE_FILE_LOCKING={value}"
    return Check("HDF5 file locking", "info", detail)


def run_checks(*, python: str | None = None, timeout: float = 30.0) -> Report:
    """Check the parallel stack of an interpreter.

    Parameters
    ----------
    python : str, optional
        The interpreter whose h5py and mpi4py are probed (default: the running one). Package
        versions are read from the running interpreter's metadata.
    timeout : float, optional
        Seconds allowed for each probe subprocess (positive).

    Returns
    -------
    Report
        The checks and the usable paths (``mpi-io``, ``dask-mpi``, ``slurm``).

    Raises
    ------
    ValueError
        If ``timeout`` is not a positive number (every probe then reported its package
        missing).

    Examples
    --------
    >>> report = run_checks()
    >>> report["h5py"].status
    'ok'
    """
    if not 0 < timeout < float("inf"):  # -5 or NaN: every probe 'gave no answer'
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout:g}")
    python = python or sys.executable
    with ThreadPoolExecutor(max_workers=4) as pool:
        h5py_future = pool.submit(_python_probe, python, _H5PY_PROBE, timeout)
        mpi4py_future = (
            pool.submit(_python_probe, python, _MPI4PY_PROBE, timeout)
            if importlib.util.find_spec("mpi4py") is not None
            else None
        )
        mpirun_future = pool.submit(_mpirun_check, timeout)
        slurm_future = pool.submit(_slurm_checks, timeout)
        h5py_probe, h5py_error = h5py_future.result()
        mpi4py_probe, mpi4py_error = (
            mpi4py_future.result() if mpi4py_future is not None else (None, "not installed")
        )
        checks = [
            *_h5py_checks(h5py_probe, h5py_error),
            _mpi4py_check(mpi4py_probe, mpi4py_error),
            mpirun_future.result(),
            _package_check("dask-mpi", "dask-mpi", "dask_mpi", "pip install dask-mpi"),
            _package_check(
                "distributed", "distributed", "distributed", "pip install distributed"
            ),
            _package_check(
                "dask-jobqueue", "dask-jobqueue", "dask_jobqueue", "pip install dask-jobqueue"
            ),
            *slurm_future.result(),
            _file_locking_check(),
            # what the benchmarks' figures depend on (cores x threads, vector unit, caches)
            Check("CPU", "info", cpu_description()),
            _package_check("numba", "numba", "numba", "pip install numba"),
            # the kernel's layout follows the vectors LLVM uses on this CPU (docs/performance.md)
            Check("RMSD kernel", "info", _kernel_layout()),
            _chunk_index_check(h5py_probe, h5py_error),
        ]
    ok = {c.name: c.ok for c in checks}
    paths = {
        "mpi-io": ok["h5py MPI"] and ok["mpi4py"] and ok["mpirun"],
        "dask-mpi": ok["mpi4py"] and ok["mpirun"] and ok["dask-mpi"] and ok["distributed"],
        "slurm": ok["SLURM cluster"] and ok["dask-jobqueue"] and ok["distributed"],
    }
    return Report(checks=checks, paths=paths, python=python)
