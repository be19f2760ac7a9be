"""Helpers for tests that need MPI or SLURM: skip-or-fail checks and bounded launchers.

Tests import them with ``from infra import require_mpi, run_mpi`` (pytest puts ``tests/`` on
``sys.path``). A missing component makes a test *skip*, unless the matching environment
variable is set (``H5MDX_REQUIRE_MPI=1``, ``H5MDX_REQUIRE_SLURM=1``; CI sets both), in
which case the test *fails* and says what is missing and how to install it.

Every launcher here is bounded by a timeout; on timeout the whole process group (mpirun and
all its ranks) is killed, so that a hanging collective cannot hang the test suite.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

__all__ = [
    "BoundedTimeout",
    "mpi_env",
    "mpi_missing",
    "mpirun_command",
    "require_mpi",
    "require_slurm",
    "run_bounded",
    "run_mpi",
    "sbatch",
    "slurm_missing",
    "venv_python",
]

#: Fix hints shown when a component is missing.
MPI_FIX = "bash scripts/setup.sh --mpi (as root), or use environment.yml with conda"
SLURM_FIX = "bash scripts/setup.sh --slurm && bash scripts/slurm-local.sh start (as root)"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _required(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() not in ("", "0", "false", "no")


def venv_python() -> str:
    """The interpreter running the tests (the project's ``.venv/bin/python`` under test.sh)."""
    return sys.executable


# --------------------------------------------------------------------------------- bounded runs


class BoundedTimeout(subprocess.TimeoutExpired):
    """A command ran longer than its timeout; its process group was killed.

    ``str()`` shows the command and the end of its output, so a failing test explains itself.
    """

    def __str__(self) -> str:
        def tail(text: str | bytes | None) -> str:
            if not text:
                return "(none)"
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
            return "\n".join(text.splitlines()[-20:])

        return (
            f"command timed out after {self.timeout} s and was killed (whole process group): "
            f"{' '.join(map(str, self.cmd))}\n--- stdout (tail):\n{tail(self.output)}"
            f"\n--- stderr (tail):\n{tail(self.stderr)}"
        )


def _kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace`` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; ranks may linger in the group a moment longer
        if sig is signal.SIGTERM:
            time.sleep(0.2)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


def run_bounded(
    cmd: Sequence[str | os.PathLike],
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a new process group, capturing text output, bounded by ``timeout``.

    Parameters
    ----------
    cmd : sequence of str or path
        The command.
    timeout : float, optional
        Seconds before the whole process group is killed.
    env : mapping, optional
        The environment (default: the current one).
    cwd : path, optional
        Working directory.

    Returns
    -------
    subprocess.CompletedProcess
        With ``returncode``, ``stdout`` and ``stderr`` (str).

    Raises
    ------
    BoundedTimeout
        If the command did not finish in time (after killing its process group).
    """
    argv = [os.fspath(c) for c in cmd]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise BoundedTimeout(argv, timeout, output=out, stderr=err) from None
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# ------------------------------------------------------------------------------------------ MPI


@functools.cache
def _mpirun_flavour(mpirun: str) -> str:
    try:
        out = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    if "HYDRA" in out or "MPICH" in out or "Intel" in out:
        return "mpich"
    return "unknown"


def mpi_missing() -> list[str]:
    """What is missing for running MPI programs with parallel HDF5 (empty list: nothing).

    Checks ``mpirun`` on PATH, that mpi4py can be imported (without initialising MPI in this
    process) and that h5py is built with MPI.
    """
    missing = []
    if shutil.which("mpirun") is None:
        missing.append("mpirun is not on PATH (Debian: apt-get install -y openmpi-bin)")
    if importlib.util.find_spec("mpi4py") is None:
        missing.append("mpi4py is not installed (pip install mpi4py; bash scripts/setup.sh installs it)")
    try:
        import h5py

        if not h5py.get_config().mpi:
            missing.append(
                f"h5py {h5py.__version__} is not built with MPI (HDF5 "
                f"{h5py.version.hdf5_version}; needs parallel HDF5 and an MPI build of h5py)"
            )
    except ImportError as err:  # pragma: no cover - h5py is a core dependency
        missing.append(f"h5py cannot be imported ({err})")
    return missing


def require_mpi() -> None:
    """Skip the calling test unless MPI with a parallel h5py is usable.

    With ``H5MDX_REQUIRE_MPI=1`` in the environment the test fails instead, naming what is
    missing and how to install it.
    """
    missing = mpi_missing()
    if not missing:
        return
    message = "MPI is not usable: " + "; ".join(missing) + f". Fix: {MPI_FIX}"
    if _required("H5MDX_REQUIRE_MPI"):
        pytest.fail(f"H5MDX_REQUIRE_MPI is set but {message}", pytrace=False)
    pytest.skip(message)


def mpi_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for mpirun: root allowed (when root), oversubscription, unbuffered output."""
    env = dict(os.environ if base is None else base)
    if _is_root():
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def mpirun_command(n: int, *argv: str | os.PathLike) -> list[str]:
    """The command line that runs ``argv`` on ``n`` MPI ranks.

    Parameters
    ----------
    n : int
        Number of ranks.
    *argv : str or path
        The program and its arguments. A first element that is a ``.py`` file, ``-c`` or
        ``-m`` is run with the test interpreter (the venv's python); ``"h5mdx"`` means the
        venv's ``h5mdx`` script.

    Returns
    -------
    list of str
        ``[mpirun, -n, N, (Open MPI:) --oversubscribe --bind-to none (--allow-run-as-root), ...]``.
    """
    mpirun = os.environ.get("H5MDX_MPIRUN") or shutil.which("mpirun") or "mpirun"
    cmd = [mpirun, "-n", str(int(n))]
    if _mpirun_flavour(mpirun) == "openmpi":
        # --bind-to none: concurrent jobs on a small machine must not all pin to core 0
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if _is_root():
            cmd.append("--allow-run-as-root")
    args = [os.fspath(a) for a in argv]
    if args:
        first = args[0]
        if first.endswith(".py") or first in ("-c", "-m"):
            args.insert(0, venv_python())
        elif first == "h5mdx":
            script = Path(venv_python()).with_name("h5mdx")
            if script.exists():
                args[0] = str(script)
    return cmd + args


def run_mpi(
    n: int,
    script_or_args: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run a program on ``n`` MPI ranks, bounded by ``timeout``.

    Parameters
    ----------
    n : int
        Number of ranks.
    script_or_args : path or sequence
        A Python script (run with the venv's python), or a full argument list (see
        :func:`mpirun_command`).
    timeout : float, optional
        Seconds before mpirun and all ranks are killed (then :class:`BoundedTimeout` is raised).
    env : mapping, optional
        Base environment (default: the current one); root/oversubscribe settings are added.
    cwd : path, optional
        Working directory.

    Returns
    -------
    subprocess.CompletedProcess
        ``returncode``, ``stdout``, ``stderr`` (text).
    """
    if isinstance(script_or_args, (str, os.PathLike)):
        argv: list[str | os.PathLike] = [venv_python(), script_or_args]
    else:
        argv = list(script_or_args)
    return run_bounded(mpirun_command(n, *argv), timeout=timeout, env=mpi_env(env), cwd=cwd)


# ---------------------------------------------------------------------------------------- SLURM

_USABLE_NODE_STATES = ("idle", "mixed")


def _node_states() -> tuple[str | None, list[str]]:
    """(error or None, node states) from ``sinfo``."""
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s", []
    except OSError as err:
        return f"sinfo cannot run ({err})", []
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip() or proc.stdout.strip()}", []
    return None, [s.strip().rstrip("*~#!%$@^-") for s in proc.stdout.split()]


def slurm_missing(wait: float = 30.0) -> list[str]:
    """What is missing for submitting SLURM jobs (empty list: nothing).

    Checks that ``sbatch``/``sinfo`` are on PATH, that the controller answers and that a node
    is idle (or partly used). Waits up to ``wait`` seconds for a busy node to become free.
    """
    missing = [
        f"{exe} is not on PATH (Debian: apt-get install -y slurm-wlm munge)"
        for exe in ("sbatch", "sinfo", "scancel")
        if shutil.which(exe) is None
    ]
    if missing:
        return missing
    deadline = time.monotonic() + wait
    while True:
        error, states = _node_states()
        if error:
            return [f"no SLURM controller answers: {error}"]
        if any(s in _USABLE_NODE_STATES for s in states):
            return []
        if not states:
            return ["sinfo lists no nodes"]
        if time.monotonic() >= deadline or not any(
            s in ("allocated", "completing") for s in states
        ):
            return [f"no idle SLURM node (node states: {', '.join(states)})"]
        time.sleep(1.0)


def require_slurm() -> None:
    """Skip the calling test unless a SLURM controller answers and a node is idle.

    With ``H5MDX_REQUIRE_SLURM=1`` in the environment the test fails instead.
    """
    missing = slurm_missing()
    if not missing:
        return
    message = "SLURM is not usable: " + "; ".join(missing) + f". Fix: {SLURM_FIX}"
    if _required("H5MDX_REQUIRE_SLURM"):
        pytest.fail(f"H5MDX_REQUIRE_SLURM is set but {message}", pytrace=False)
    pytest.skip(message)


def sbatch(
    args: Sequence[str | os.PathLike],
    *,
    timeout: float = 180.0,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[str, subprocess.CompletedProcess]:
    """Submit a job with ``sbatch --wait --parsable`` and wait for it to end.

    Parameters
    ----------
    args : sequence
        Further sbatch arguments: a script path, or ``["--wrap", "command"]`` and options.
    timeout : float, optional
        Seconds to wait; on timeout the job is cancelled and :class:`BoundedTimeout` raised.
    cwd, env : optional
        Working directory (default output files go there) and environment of the submission
        (sbatch passes it on to the job).

    Returns
    -------
    (job_id, CompletedProcess)
        ``returncode`` is the job's exit code (sbatch ``--wait`` semantics).
    """
    name = f"h5mdx-test-{uuid.uuid4().hex[:10]}"
    cmd = ["sbatch", "--wait", "--parsable", f"--job-name={name}", *map(os.fspath, args)]
    try:
        proc = run_bounded(cmd, timeout=timeout, cwd=cwd, env=mpi_env(env))
    except BoundedTimeout:
        subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30)
        raise
    job_id = proc.stdout.strip().split(";")[0].splitlines()[0] if proc.stdout.strip() else ""
    return job_id, proc


def random_trajectory(path: os.PathLike | str, frames: int, atoms: int,
                      frames_per_chunk: int, seed: int) -> str:
    """A small H5MD file of random positions in nm, ``frames`` x ``atoms``, a step per
    frame and 0.5 ps between frames, stored in chunks of ``frames_per_chunk`` frames:
    input for the command line's option checks."""
    import numpy as np

    from h5mdx.testing import write_h5md

    pos = np.random.default_rng(seed).random((frames, atoms, 3), dtype=np.float32)
    write_h5md(path, {"all": {"position": {"value": pos, "step": np.arange(frames),
                                           "time": np.arange(frames) * 0.5, "unit": "nm",
                                           "chunks": (frames_per_chunk, atoms, 3)}}})
    return str(path)
