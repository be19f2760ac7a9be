"""The ``h5mdx`` command line: parses arguments and calls the library.

Each subcommand lives in a module of its own in this package with
``add_parser(subparsers)`` and ``run(args) -> int``; the list below is explicit, and a
subcommand whose module fails to import is an error, never skipped. Errors print one
clear line and a hint; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence

from h5mdx._version import __version__
from h5mdx.cli import bench, doctor, example, info, layout, mpi, rmsd, slurm
from h5mdx.cli._usage import UsageError
from h5mdx.errors import (
    H5MDError,
    H5MDFormatError,
    H5MDUnitError,
    MissingDependencyError,
    NoSuchGroupError,
    PositionsError,
    TopologyError,
)

#: Errors whose message says all there is (a file missing or in the way, a bad file, a
#: selection matching nothing, a group the file does not have, positions missing, empty or
#: not numbers, a package to install): no "--debug" hint after them, unless they wrap an
#: error no check anticipated (``H5MDError.unexpected``).
_SAID_ALL = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
             NotADirectoryError, H5MDFormatError, H5MDUnitError, TopologyError,
             MissingDependencyError, NoSuchGroupError, PositionsError)

#: Subcommand modules, in the order they appear in ``h5mdx --help``.
SUBCOMMAND_MODULES = (info, example, rmsd, layout, bench, doctor, mpi, slurm)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="h5mdx",
        description="Lazy, chunk-aligned H5MD trajectories: inspect, convert, analyse, time.",
    )
    parser.add_argument("--version", action="version", version=f"h5mdx {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        before = set(sub.choices)
        module.add_parser(sub)
        for command in set(sub.choices) - before:
            if sub.choices[command].get_default("func") is None:
                sub.choices[command].set_defaults(func=module.run)
    return parser


class _Terminated(SystemExit):
    """SIGTERM or SIGHUP received (``kill PID``, a batch system ending the job, the
    terminal or ssh session closed); ``code`` is the exit status, 128 + the signal."""


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the command as Ctrl-C does: the ``with`` blocks close
    what they opened (the worker processes of the processes scheduler or a local cluster,
    SLURM jobs, temporary outputs). By default the signal killed this process alone, and
    the worker processes lived on, holding its output pipes; a closed terminal (SIGHUP)
    left the example's staged outputs and leaked semaphores."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [sig for sig in (getattr(signal, n, None) for n in ("SIGTERM", "SIGHUP"))
               if sig is not None and signal.getsignal(sig) is signal.SIG_DFL]

    def handler(signum: int, frame: object) -> None:
        raise _Terminated(128 + signum)

    for sig in signals:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)


#: Exit codes of the writers stopped by a signal, and the signal's name: a batch system's
#: log said nothing of a cancelled rechunk or convert.
_SIGNAL_EXITS = {128 + int(getattr(signal, n)): n for n in ("SIGTERM", "SIGHUP", "SIGXCPU")
                 if hasattr(signal, n)}


@contextlib.contextmanager
def _warnings_as_lines(command: str, debug: bool) -> Iterator[None]:
    """Warnings shown as ``h5mdx COMMAND: warning: ...`` lines, as the command's own, not
    with the file and line of the code that raised them (``--debug`` keeps those).

    Only the text of a shown warning changes (``warnings.formatwarning``): filters, and
    code that records warnings, see them as they are."""
    if debug:
        yield
        return
    shown = warnings.formatwarning

    def line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             text: str | None = None) -> str:
        return f"h5mdx {command}: warning: {message}\n"

    warnings.formatwarning = line  # type: ignore[assignment]
    try:
        yield
    finally:
        warnings.formatwarning = shown


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``h5mdx`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv[1:]:  # `h5mdx info F --debug`, as the errors' hint reads too
        argv = ["--debug", *(a for a in argv if a != "--debug")]
    args, extra = parser.parse_known_args(argv)
    dest = getattr(args, "trailing_positionals", None)
    if extra and dest and not any(e.startswith("-") for e in extra):
        # `convert TOP TRAJ --contiguous OUT`: argparse ends a list of positionals at an
        # option; a subcommand whose last positionals form one list names it
        setattr(args, dest, [*getattr(args, dest), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        with _terminate_as_exit(), _warnings_as_lines(args.command, args.debug):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("h5mdx: interrupted", file=sys.stderr)
        return 130
    except _Terminated as stop:
        code = int(stop.code) if isinstance(stop.code, int) else 128 + signal.SIGTERM
        print("h5mdx: terminated" + (" (hang-up)" if code == 128 + getattr(
            signal, "SIGHUP", -128) else ""), file=sys.stderr)
        return code
    except SystemExit as stop:  # a writer stopped by a signal (h5mdx.layout._atomic)
        name = _SIGNAL_EXITS.get(stop.code) if isinstance(stop.code, int) else None
        if name is not None:
            print(f"h5mdx: stopped by {name}", file=sys.stderr)
        raise
    except BrokenPipeError:
        # the reader of our output stopped (``h5mdx info F | head``): end quietly, as a
        # process killed by SIGPIPE would, and keep Python from flushing into the pipe
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except UsageError as err:  # a subcommand's own usage error, as argparse's: exit 2
        if args.debug:
            raise
        print(f"h5mdx {args.command}: {_as_options(str(err), parser, args.command)}",
              file=sys.stderr)
        return 2
    except (H5MDError, OSError, ValueError, IndexError, ImportError) as err:
        if args.debug:
            raise
        print(f"h5mdx {args.command}: error: {_as_options(str(err), parser, args.command)}",
              file=sys.stderr)
        if not isinstance(err, _SAID_ALL) or getattr(err, "unexpected", False):
            print("  (run with --debug for the traceback)", file=sys.stderr)
        return 1


def _as_options(message: str, parser: argparse.ArgumentParser, command: str) -> str:
    """An error of the Python API said in the command's terms: ``frames_per_chunk must
    be >= 1`` as ``--frames-per-chunk must be >= 1``."""
    import re

    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            sub = action.choices.get(command)
            break
    else:  # pragma: no cover - every command is a subparser
        return message
    # "pass overwrite=True (--overwrite on the command line)": the option alone
    message = re.sub(r"pass \w+=True \((--[\w-]+)(?: on the command line)?\)", r"pass \1",
                     message)
    # "give one with --format (format=)": the option, without the keyword's name
    message = re.sub(r"(--[\w-]+) \(\w+=\)", r"\1", message)
    # "e.g. walltime='00:30:00' (--walltime 00:30:00)": the option's example alone
    message = re.sub(r"e\.g\. \w+='([^']*)' \((--[\w-]+) \1\)", r"e.g. \2 \1", message)
    for opt in (sub._actions if sub is not None else ()):  # noqa: SLF001
        long = [o for o in opt.option_strings if o.startswith("--")]
        if long and "_" in opt.dest:
            message = re.sub(rf"(?<![\w\-=]){re.escape(opt.dest)}(?= must\b)", long[0],
                             message)
        if long:  # "walltime 'abc' is not a SLURM time", "cores must be ...": the option
            message = re.sub(rf"^{re.escape(opt.dest)}(?= '| must\b)", long[0], message)
    return message


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
