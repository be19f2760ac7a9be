"""Usage checks that several subcommands share: each returns what is wrong with an
option's value as one line (None: nothing), which the subcommand prints after its name
and answers with exit status 2, as argparse does its own usage errors; or a subcommand
raises :class:`UsageError`, which :func:`h5mdx.cli.main` says so."""

from __future__ import annotations


class UsageError(ValueError):
    """An option's value refused by a subcommand: :func:`h5mdx.cli.main` prints the
    message on one line, in the command's terms, with no --debug hint, and exits with
    status 2 (argparse's status for a usage error)."""


def workers_problem(workers: int, why: str) -> str | None:
    """What is wrong with ``--workers workers`` on this machine (None: nothing): fewer
    than 1, or more than the CPUs this process may use (``--workers 1000`` on two cores
    started 1,000 processes). ``why`` says why the command's workers
    must fit this machine's CPUs.

    >>> workers_problem(0, "")
    '--workers must be at least 1, not 0'
    """
    from h5mdx._machine import usable_cpus

    if workers < 1:
        return f"--workers must be at least 1, not {workers}"
    cpus = usable_cpus()
    if workers > cpus:
        return (f"--workers {workers} is more than the {cpus} CPU{'s' if cpus != 1 else ''} "
                f"this process may use: {why}, so give at most {cpus}")
    return None


#: The largest size in MiB an option takes (1 TiB): --chunk-mib 1e308 ended in
#: 'cannot convert float NaN to integer', --buffer-mib and --read-mib 1e308 in a traceback
#:.
MAX_MIB = 2**20


def mib_problem(value: float) -> str | None:
    """What is wrong with a size of ``value`` MiB beyond the checks of the option's
    own (positive, finite): more than :data:`MAX_MIB` (None: nothing).

    >>> mib_problem(1e308)
    'must be at most 1,048,576 MiB (1 TiB), not 1e+308'
    """
    if value > MAX_MIB:
        return f"must be at most {MAX_MIB:,} MiB (1 TiB), not {value:g}"
    return None
