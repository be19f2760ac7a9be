"""Atomic output: write to a temporary name in the target directory, rename when done.

An interrupted write (exception, Ctrl-C, SIGTERM, a full disk) removes the
temporary file; a killed process (SIGKILL, power loss) can leave only a hidden
``.NAME.HOST.PID.h5mdx-partial`` file, never a half-written file under the
target name. Such leftovers of dead processes on this host are removed the next
time the same target is written.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shlex
import shutil
import signal
import stat
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from h5mdx._replace import fsync_path as _fsync
from h5mdx._replace import give_stat, keep_mode, name_max, pid_alive, short_stem, warn_if_linked
from h5mdx._replace import host_name as _host
from h5mdx.format.schema import H5MD_SIGNATURE, ZARR_MARKERS

__all__ = ["atomic_output", "check_target", "partial_files", "raise_if_interrupted"]

_SUFFIX = ".h5mdx-partial"


def _stem(target: Path) -> str:
    """The target's name as its temporary names start (``.STEM.HOST.PID.RANDOM``): the
    name itself, or, where the temporary name would be longer than the file system takes
    (a target name of over 200 characters), its start and a digest of the whole
    (:func:`h5mdx._replace.short_stem`, the rule of every output h5mdx replaces)."""
    return short_stem(target.name, target.parent, len(_SUFFIX))


def partial_files(target: str | os.PathLike[str]) -> list[Path]:
    """Leftover temporary outputs of ``target`` (from any process)."""
    t = Path(target)
    return sorted(t.parent.glob(f".{glob.escape(_stem(t))}.*{_SUFFIX}"))


#: How long a failed Zarr write's temporary store is removed again while writes in
#: flight re-create parts of it; and how long it must then stay gone. On a loaded machine
#: (2 cores, two test suites beside) a thread compressing a chunk was held up for over
#: 0.3 s, and 3 s did not see the writes in flight land: the store stayed in 2 of 6 runs.
REMOVE_SECONDS = 15.0
GONE_SECONDS = 1.0


def _remove(path: Path, *, in_flight: bool = False) -> None:
    """Remove a temporary output, best effort: a cleanup never hides the error that
    called it (a read-only file system refuses even to unlink what is not there).

    ``in_flight``: the output of a write that just failed, whose writes in flight may
    still land."""
    if not os.path.lexists(path):
        return
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
        return
    _rmtree(path)
    if not in_flight:
        return
    # a Zarr store: chunk writes already handed to zarr's I/O thread or to dask's workers
    # may land after the error that stopped the write (an interrupt): remove until it
    # stays gone, for a few seconds at most
    deadline = time.monotonic() + REMOVE_SECONDS
    gone_since: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if os.path.lexists(path):
            gone_since = None
            _rmtree(path)
        elif gone_since is None:
            gone_since = now
        elif now - gone_since >= GONE_SECONDS:  # stayed gone: no write in flight
            break
        time.sleep(0.05)


def _rmtree(path: Path) -> None:
    """Remove the directory ``path`` and all in it, best effort; where some of it stays
    (a read-only store, 0o555 directories, whose entries this user may not unlink), its
    directories are made writable and it is removed again. A replaced read-only store
    stayed behind for good as ``.NAME.HOST.PID.old.h5mdx-partial``."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path):
        return
    todo = [os.fspath(path)]
    while todo:  # top-down: a directory made writable (and readable) before it is listed
        top = todo.pop()
        with contextlib.suppress(OSError):
            os.chmod(top, stat.S_IMODE(os.lstat(top).st_mode) | stat.S_IRWXU)
            with os.scandir(top) as entries:
                todo += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    shutil.rmtree(path, ignore_errors=True)


#: The middle of the name a replaced Zarr store is moved to while the new one takes
#: its place (``.NAME.HOST.PID.old.h5mdx-partial``).
_OLD = "old"


def _clean_stale(target: Path) -> None:
    """Remove the leftovers of dead processes on this host; a store one of them had moved
    aside to put its new one in place, and died before it did, is put back."""
    host = _host()
    for p in partial_files(target):
        parts = p.name[len(_stem(target)) + 2: -len(_SUFFIX)].split(".")
        # .NAME.HOST.PID.RANDOM.h5mdx-partial
        if len(parts) >= 3 and parts[0] == host and parts[1].isdigit() and not pid_alive(
            int(parts[1])
        ):
            if parts[2] == _OLD and not os.path.lexists(target):
                os.replace(p, target)
            else:
                _remove(p)


def _zarr_or_empty(path: Path) -> bool:
    """Whether the directory ``path`` is a Zarr store or array (or empty): one h5mdx may
    replace."""
    if any((path / m).exists() for m in (*ZARR_MARKERS, ".zarray")):
        return True
    with os.scandir(path) as entries:
        return next(entries, None) is None


def check_target(
    target: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    directory: bool = False,
    hdf5: bool = False,
) -> Path:
    """Refuse to write ``target`` over an existing file or over one of the inputs.

    Parameters
    ----------
    target : str or path-like
        The output path.
    overwrite : bool, default False
        Allow replacing an existing target.
    inputs : iterable of path-like
        Files read by the operation; the target may never be one of them.
    directory : bool, default False
        The output is a directory (a Zarr store).
    hdf5 : bool, default False
        The output is an HDF5 file: ``overwrite`` replaces only an HDF5 file (or an
        empty one), never another kind (a trajectory given where the output belongs).

    Returns
    -------
    pathlib.Path
        The absolute target path; for a symbolic link, the path of the file (or store) it
        leads to, which the output replaces, the link kept.

    Raises
    ------
    FileExistsError
        If the target exists and ``overwrite`` is False.
    ValueError
        If the target is one of the inputs, its directory does not exist, its name is
        longer than the file system takes, or it is a
        file or directory that ``overwrite`` may not replace: a file that is not HDF5
        (nor empty) for an HDF5 output, any directory for a file output, a directory that
        is not a Zarr store (nor empty) or a file (not empty) for a store.
    """
    t = Path(os.path.abspath(os.fspath(target)))
    for i in inputs:
        ip = Path(os.path.abspath(os.fspath(i)))
        same = ip == t
        with contextlib.suppress(OSError):
            same = same or (t.exists() and os.path.samefile(ip, t))
        if same:
            raise ValueError(
                f"the output {os.fspath(target)!r} is also an input; h5mdx never writes over "
                "its input: choose another output name"
            )
    if not t.parent.is_dir():
        raise ValueError(f"the output directory {str(t.parent)!r} does not exist")
    if len(t.name.encode()) > name_max(t.parent):
        raise ValueError(f"the output name {t.name[:40]!r}... is {len(t.name.encode())} "
                         f"bytes long, longer than the {name_max(t.parent)} the file system "
                         f"of {str(t.parent)!r} takes: choose a shorter name")
    if (t.exists() or t.is_symlink()) and not overwrite:
        raise FileExistsError(
            f"{os.fspath(target)!r} already exists; pass overwrite=True (--overwrite on the "
            "command line) to replace it"
        )
    t = _followed(t, target)
    if t.exists() and not (t.is_file() or t.is_dir()):
        # os.replace would put the output in place of the node itself (as root, /dev/null)
        raise ValueError(
            f"{os.fspath(target)!r} is not a regular file (a device, FIFO or socket): "
            "h5mdx writes its output as a new file and would replace it: choose another "
            "output name")
    if hdf5 and t.is_file() and not _replaceable_file(t):
        raise ValueError(
            f"{os.fspath(target)!r} exists and is not an HDF5 file: h5mdx replaces only a "
            "file of its own kind (H5MD/HDF5), never another, such as a trajectory or a "
            "topology: choose another output name")
    if hdf5 and t.is_file():
        _refuse_if_written(t, target)
    if directory and t.is_file() and not t.is_symlink() and t.stat().st_size:
        raise ValueError(f"{os.fspath(target)!r} is a file, not a Zarr store: h5mdx replaces "
                         "only a Zarr store (a directory) there, never another kind of file: "
                         "choose another output name")
    if t.is_dir() and not t.is_symlink():
        if not directory:
            raise ValueError(f"{os.fspath(target)!r} is a directory; h5mdx replaces a file "
                             "there, never a directory: choose another output name")
        if not _zarr_or_empty(t):
            raise ValueError(f"{os.fspath(target)!r} is a directory but not a Zarr store; "
                             "h5mdx replaces only a Zarr store: choose another output name")
    return t


def _followed(path: Path, target: str | os.PathLike[str]) -> Path:
    """The file (or store) a symbolic link ``path`` leads to, through every link: the
    output replaces it and the link stays, as ``cp`` does (the link was replaced by a
    regular file); ``path`` itself where it is no link."""
    if not path.is_symlink():
        return path
    real = Path(os.path.realpath(path))
    if real.is_symlink() or not real.parent.is_dir():
        raise ValueError(f"{os.fspath(target)!r} is a symbolic link that leads nowhere a file "
                         f"can be written ({str(real)!r}: a loop of links, or a directory "
                         "that does not exist): choose another output name")
    return real


def _refuse_if_written(path: Path, target: str | os.PathLike[str]) -> None:
    """Refuse to replace an HDF5 file another process holds open for writing. Replaced,
    that process went on writing into the file no longer named, and what it wrote was
    lost without a word.

    A writer is seen by HDF5's exclusive lock (``flock``) on the file, or by the
    superblock's file-consistency flags (a file of superblock version 3, ``libver=
    "latest"``): a SWMR writer (``swmr_mode=True``) releases the lock once it has set
    them, and so does every writer where file locking is off (``HDF5_USE_FILE_LOCKING=
    FALSE``, file systems without locks)."""
    if _locked(path):
        raise ValueError(
            f"{os.fspath(target)!r} is open for writing in another process (HDF5 holds its "
            "lock): replaced, what that process goes on writing would be lost; close it "
            "there first, or choose another output name")
    flags = _consistency_flags(path)
    if flags & (_WRITE_ACCESS | _SWMR_WRITE_ACCESS):
        who = "a SWMR writer" if flags & _SWMR_WRITE_ACCESS else "a writer"
        raise ValueError(
            f"{os.fspath(target)!r} is marked open for writing by {who} (the file-"
            "consistency flags of its HDF5 superblock): replaced, what that process goes "
            "on writing would be lost; close it there first, or choose another output "
            "name. If no process writes it any more (a writer that crashed leaves this "
            f"mark), clear the mark with `h5clear -s {shlex.quote(os.fspath(target))}` or "
            "remove the file")


def _locked(path: Path) -> bool:
    """Whether another process holds an exclusive ``flock`` on ``path`` (HDF5's lock)."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): HDF5 does not lock there either
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing to tell
        pass
    finally:
        os.close(fd)  # releases the shared lock taken
    return False


#: The superblock's file-consistency flags (superblock versions 2 and 3, its 12th byte):
#: open for writing; open for writing by a SWMR writer (H5Fpkg.h).
_WRITE_ACCESS, _SWMR_WRITE_ACCESS = 0x01, 0x04


def _superblock_offset(path: Path) -> int | None:
    """Where ``path``'s HDF5 superblock starts (after a user block), or None where the
    file holds no HDF5 signature (or cannot be read)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            offset = 0
            while offset + len(H5MD_SIGNATURE) <= size:
                fh.seek(offset)
                if fh.read(len(H5MD_SIGNATURE)) == H5MD_SIGNATURE:
                    return offset
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        pass
    return None


def _consistency_flags(path: Path) -> int:
    """The file-consistency flags of ``path``'s superblock (0 where it has none: a
    superblock of version 0 or 1, which HDF5 never marks, or no HDF5 file)."""
    offset = _superblock_offset(path)
    if offset is None:
        return 0
    try:
        with open(path, "rb") as fh:
            fh.seek(offset + len(H5MD_SIGNATURE))
            head = fh.read(4)  # version, size of offsets, size of lengths, flags
    except OSError:
        return 0
    return head[3] if len(head) == 4 and head[0] >= 2 else 0


def _replaceable_file(path: Path) -> bool:
    """Whether an existing file may be replaced by an output: an HDF5 file (its signature
    at offset 0, 512, 1024, ... as HDF5 looks for it; a user block comes first), or an
    empty one."""
    try:
        if path.stat().st_size == 0:
            return True
        return _superblock_offset(path) is not None or not os.access(path, os.R_OK)
    except OSError:
        return True  # unreadable here: the write itself will say what is wrong


#: Signals received while an output was being written (in this process).
_RECEIVED: list[int] = []
#: Set while a replaced store and its successor swap names: a signal then is only noted.
_SWAPPING = threading.Event()


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def raise_if_interrupted() -> None:
    """Raise for a Ctrl-C or SIGTERM received while writing, if one was.

    The signal handler raises at once, but Python drops an exception raised inside a
    callback it calls for itself (a weakref's, a finaliser: "Exception ignored in ...").
    Writers call this between chunks, and :func:`atomic_output` before it renames the
    output into place, so that an interrupted write never completes.
    """
    if _RECEIVED:
        _raise_for(_RECEIVED[0])


#: Signals that end a write cleanly: Ctrl-C, kill, a closed terminal or ssh session
#: (unless ignored, as under nohup) and a CPU-time limit (which would dump core).
_STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGXCPU")
                  if hasattr(signal, name))


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGINT into KeyboardInterrupt and SIGTERM, SIGHUP and SIGXCPU into SystemExit
    while writing, and remember them (:func:`raise_if_interrupted`), so that the cleanup
    runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        _RECEIVED.append(signum)
        if not _SWAPPING.is_set():
            _raise_for(signum)

    hook = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        # the interrupt Python drops in a callback is remembered and raised again later:
        # no "Exception ignored in ..." block for it
        if not (_RECEIVED and unraisable.exc_type in (KeyboardInterrupt, SystemExit)):
            hook(unraisable)

    old = {}
    try:
        for sig in _STOPPING:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                old[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main interpreter
        for sig, previous in old.items():
            signal.signal(sig, previous)
        yield
        return
    sys.unraisablehook = quiet
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, previous in old.items():
            signal.signal(sig, previous)
        _RECEIVED.clear()


#: Errors that only a write gives (a full disk or quota, a read-only file system, a file
#: too large): whatever raises them, they are the output's.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def _keep_store_mode(target: Path, new: Path) -> None:
    """Give the new store ``new`` the group and permission bits of the store ``target``
    it replaces: its directories those of the old store's top directory, its files
    those of the old store's metadata file (``zarr.json``, ``.zgroup``). A store shared
    in a project's group came back in the user's own group with the umask's mode, its
    members no longer able to read or replace it."""
    try:
        old_dir, new_dir = target.stat(), new.stat()
        marker = next((m for m in (*ZARR_MARKERS, ".zarray") if (target / m).is_file()
                       and (new / m).is_file()), None)
        old_file = (target / marker).stat() if marker else None
        new_file = (new / marker).stat() if marker else None
    except OSError:
        return
    dirs = (old_dir.st_gid != new_dir.st_gid, old_dir.st_mode != new_dir.st_mode)
    files = (old_file is not None and new_file is not None
             and (old_file.st_gid != new_file.st_gid, old_file.st_mode != new_file.st_mode))
    if not any(dirs) and not (files and any(files)):
        return  # the same already (the common case): no walk over the chunks
    for root, _, names in os.walk(new):
        give_stat(root, old_dir, dirs[0])
        if old_file is not None:
            for name in names:
                give_stat(os.path.join(root, name), old_file, bool(files and files[0]))


def _fsync_store(store: Path) -> None:
    """Flush every file and directory of the new store ``store`` to the disk, before it
    takes the place of the store it replaces: swapped unflushed, a power loss could leave
    the new store's chunks empty and the old store removed."""
    for root, _, names in os.walk(store, topdown=False):
        for name in names:
            _fsync(Path(root, name))
        _fsync(Path(root))


def _swap(target: Path, new: Path, old: Path) -> None:
    """Put the directory ``new`` in place of ``target``, moved to ``old`` first (and then
    removed). A signal between the two renames would leave no store under the target
    name: it is noted and raised once both are done. A process killed there leaves
    ``old``, which the next write to the target puts back."""
    _SWAPPING.set()
    try:
        os.replace(target, old)
        os.replace(new, target)
    except BaseException:
        if os.path.lexists(old) and not os.path.lexists(target):
            os.replace(old, target)  # the old store stays where it was
        raise
    finally:
        _SWAPPING.clear()
    _remove(old)
    if os.path.lexists(old):  # the new store is in place: said, not raised
        warnings.warn(f"{os.fspath(target)!r} was replaced, but the store it replaced could "
                      f"not be removed: it is left as {os.fspath(old)!r}; remove it by hand",
                      RuntimeWarning, stacklevel=4)


@contextlib.contextmanager
def atomic_output(
    target: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    directory: bool = False,
    hdf5: bool = False,
) -> Iterator[str]:
    """Yield a temporary path next to ``target``; rename it to ``target`` on success.

    Parameters
    ----------
    target : str or path-like
        The final output path (a file, or a directory for Zarr stores).
    overwrite : bool, default False
        Replace an existing target (only once the new output is complete).
    inputs : iterable of path-like
        Files read by the operation (the target may not be one of them).
    directory : bool, default False
        The output is a directory (the temporary path is not created: the writer
        creates it).
    hdf5 : bool, default False
        The output is an HDF5 file: an existing file that is not one (nor empty) is
        never replaced (:func:`check_target`).

    Yields
    ------
    str
        The temporary path to write to.

    Raises
    ------
    FileExistsError
        If ``target`` exists and ``overwrite`` is False.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with atomic_output(os.path.join(d, "out.txt")) as tmp, open(tmp, "w") as f:
    ...     _ = f.write("done")
    >>> os.listdir(d)
    ['out.txt']
    """
    t = check_target(target, overwrite=overwrite, inputs=inputs, directory=directory,
                     hdf5=hdf5)
    _clean_stale(t)
    tmp = t.parent / f".{_stem(t)}.{_host()}.{os.getpid()}.{uuid.uuid4().hex[:8]}{_SUFFIX}"
    try:
        with _signals_raise():
            yield str(tmp)
            raise_if_interrupted()
            if not tmp.exists():
                raise FileNotFoundError(f"the writer produced no output at {tmp}")
            if not directory:
                _fsync(tmp)
            if (t.exists() or t.is_symlink()) and not overwrite:  # appeared meanwhile
                raise FileExistsError(
                    f"{os.fspath(target)!r} appeared while writing; pass overwrite=True "
                    "(--overwrite) to replace it"
                )
            if directory and t.is_dir() and not t.is_symlink():
                old = t.parent / f".{_stem(t)}.{_host()}.{os.getpid()}.{_OLD}{_SUFFIX}"
                _keep_store_mode(t, tmp)  # its group and permission bits
                _fsync_store(tmp)  # on disk before the old store goes
                _swap(t, tmp, old)
                raise_if_interrupted()  # the new store is whole and in place
            else:
                if directory and t.exists():
                    t.unlink()
                keep_mode(t, tmp)  # its group and permission bits
                warn_if_linked(t, target, stacklevel=4)
                if hdf5 and t.is_file():  # a writer that opened it meanwhile
                    _refuse_if_written(t, target)
                os.replace(tmp, t)
            _fsync(t.parent)
    except OSError as err:
        _remove(tmp, in_flight=True)
        if str(tmp) not in str(err) and tmp.name not in str(err) \
                and err.errno not in _WRITE_ERRNOS:
            raise
        # name the output asked for, not the hidden temporary file next to it (nor none:
        # a full disk under a Zarr writer says only "No space left on device")
        text = err.strerror or str(err).replace(str(tmp), os.fspath(target))
        message = f"cannot write {os.fspath(target)!r}: {text}"
        raise (OSError(err.errno, message) if err.errno else OSError(message)) from None
    except BaseException:
        _remove(tmp, in_flight=True)
        raise
