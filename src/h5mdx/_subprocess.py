"""The one way h5mdx runs a command: bounded, captured, with errors that name the command.

Used by the SLURM helpers (``sinfo``, ``squeue``, ``scontrol``, ``sbatch``, ``scancel``),
``h5mdx doctor``'s probes and the ``mpirun`` runs of ``h5mdx bench``. Also the one
copy of Open MPI's run-as-root variables (:func:`allow_run_as_root`), which
:func:`h5mdx.mpi.commands.mpi_env`, the doctor and the batch scripts use.

Only the standard library is imported.
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence

__all__ = [
    "RUN_AS_ROOT_ENV",
    "CommandNotFoundError",
    "CommandTimeoutError",
    "allow_run_as_root",
    "run",
]

#: The variables without which Open MPI refuses to start as root (containers, CI).
RUN_AS_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _show(cmd: Sequence[str]) -> str:
    return shlex.join(str(c) for c in cmd)


class CommandTimeoutError(subprocess.TimeoutExpired):
    """A command ran past its timeout; it and its children were killed.

    A :class:`subprocess.TimeoutExpired`, so ``except subprocess.TimeoutExpired``
    still catches it.
    """

    def __str__(self) -> str:
        return (f"{_show(self.cmd)} did not finish within {self.timeout:g} s "
                "(killed it and its child processes)")


class CommandNotFoundError(FileNotFoundError):
    """The executable of a command does not exist (a :class:`FileNotFoundError`)."""

    def __init__(self, cmd: Sequence[str]) -> None:
        super().__init__(errno.ENOENT, os.strerror(errno.ENOENT), str(cmd[0]))
        self.cmd = list(cmd)

    def __str__(self) -> str:
        return (f"{self.cmd[0]} not found (running {_show(self.cmd)}): is it installed "
                "and on PATH?")


def _kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the process group of ``proc`` (e.g. mpirun and its ranks), then SIGKILL."""
    if not hasattr(os, "killpg"):  # pragma: no cover - not POSIX
        proc.kill()
        proc.wait()
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # what is left of the group once the leader is gone
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, capture its output as text, and stop it after ``timeout`` seconds.

    The command runs in a new session, so on timeout (or when the caller is
    interrupted) its whole process group is killed, not only its first process:
    ``mpirun`` leaves no ranks behind. A non-zero exit is not an error here; the
    caller reads ``returncode``.

    Parameters
    ----------
    cmd : sequence of str or path
        The command and its arguments.
    timeout : float
        Seconds before the command is killed.
    env : mapping, optional
        Its environment (default: this process's).
    stdin : str, optional
        Text written to its standard input (default: none, it reads ``/dev/null``).
    cwd : path-like, optional
        Its working directory.

    Returns
    -------
    subprocess.CompletedProcess
        ``returncode``, ``stdout`` and ``stderr`` (str).

    Raises
    ------
    CommandTimeoutError
        If it ran past ``timeout`` (a :class:`subprocess.TimeoutExpired`).
    CommandNotFoundError
        If its executable does not exist (a :class:`FileNotFoundError`).
    OSError
        If it cannot be started for another reason (e.g. not executable).

    Examples
    --------
    >>> run(["echo", "hi"], timeout=10).stdout
    'hi\\n'
    >>> run(["no-such-command-h5mdx"], timeout=10)
    Traceback (most recent call last):
    ...
    h5mdx._subprocess.CommandNotFoundError: no-such-command-h5mdx not found (running no-such-command-h5mdx): is it installed and on PATH?
    """
    argv = [os.fspath(c) for c in cmd]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            cwd=None if cwd is None else os.fspath(cwd),
            start_new_session=True,
        )
    except FileNotFoundError as err:
        if err.filename not in (None, argv[0]):
            raise  # e.g. cwd does not exist
        raise CommandNotFoundError(argv) from None
    try:
        out, err_text = proc.communicate(input=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err_text = proc.communicate()
        raise CommandTimeoutError(argv, timeout, output=out, stderr=err_text) from None
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err_text)


def allow_run_as_root(env: Mapping[str, str] | None = None, *,
                      as_root: bool | None = None) -> dict[str, str]:
    """A copy of ``env`` with Open MPI's run-as-root variables when running as root.

    Variables the caller set are kept.

    Parameters
    ----------
    env : mapping, optional
        The environment (default: this process's).
    as_root : bool, optional
        Add the variables (default: when this process runs as root).

    Returns
    -------
    dict

    Examples
    --------
    >>> allow_run_as_root({"A": "1"}, as_root=True)["OMPI_ALLOW_RUN_AS_ROOT"]
    '1'
    >>> allow_run_as_root({"A": "1"}, as_root=False)
    {'A': '1'}
    """
    out = dict(os.environ if env is None else env)
    if as_root is None:
        as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if as_root:
        for key, value in RUN_AS_ROOT_ENV.items():
            out.setdefault(key, value)
    return out
