"""Small output files replaced whole, and a CSV with its ``.meta.json`` sidecar as a pair.

:func:`replacing` gives a temporary name beside a file, renamed over it when the write
succeeds (flushed to disk first, with the replaced file's group and permission bits;
through a symbolic link, the file it leads to is replaced and the link kept; the
directory flushed after the rename) and removed when it fails, Ctrl-C included:
a write stopped half-way never leaves a torn file in place of a good one. A process
killed while writing (SIGKILL) leaves only its hidden ``.NAME.HOST.PID.RANDOM.tmp.SUFFIX``
file, which the next write of the same file on this host removes; where that name would
pass the file system's limit, ``NAME`` is shortened to its start and a digest
(:func:`short_stem`, the rule of :func:`h5mdx.layout._atomic.atomic_output` too).

A CSV and its sidecar (``timing.csv`` and ``timing.meta.json``, ``rmsd.csv``,
``runs.csv``, ``speedup.csv``) are two files, renamed one after the other: a process
killed between the two renames left a CSV beside the sidecar of another (units that
were not its own). :func:`write_with_sidecar` records the CSV's digest in the sidecar
(:data:`CSV_DIGEST`), which is renamed into place first; :func:`read_sidecar` compares
it with the CSV and leaves a sidecar of other contents out, with a warning.

Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import socket
import stat
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["CSV_DIGEST", "csv_digest", "fsync_path", "give_stat", "host_name", "keep_mode",
           "keep_stat", "name_max", "pid_alive", "read_sidecar", "replacing", "short_stem",
           "sidecar_of", "warn_if_linked", "write_with_sidecar"]

#: Errors only a write gives (a full disk or quota, a read-only file system, a file too
#: large): whatever raises them, they are the output's.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


class _OutputError(OSError):
    """An error of a write, said of the file asked for (a sidecar's inside a CSV's
    block is not said again of the CSV)."""


#: The sidecar's key of its CSV's digest (BLAKE2b of 16 bytes, hex, of the file's bytes).
CSV_DIGEST = "csv_blake2b"


def _real(path: Path) -> Path:
    """``path``, or the file a symbolic link ``path`` leads to (the link is kept)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def host_name() -> str:
    """This host's short name, as temporary names carry it (``.NAME.HOST.PID...``)."""
    return socket.gethostname().split(".")[0] or "host"


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def name_max(directory: Path) -> int:
    """The longest file name the file system of ``directory`` takes (255 where unknown)."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf on Windows
        return 255


def short_stem(name: str, directory: Path, tail: int) -> str:
    """How a temporary name ``.NAME.HOST.PID.RANDOM`` and a tail of ``tail`` bytes, in
    ``directory``, starts for ``name``: the name itself, or, where the whole would be
    longer than the file system takes (a name of over 200 bytes), its start and a
    digest of the whole (``head~digest``), so that the write does not fail with "File
    name too long" where the output's own name fits."""
    # ".", "." HOST, "." PID (at most 10 digits), "." RANDOM (8), the tail
    room = name_max(directory) - (len(host_name().encode()) + 22 + tail)
    if len(name.encode()) <= room:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    head = name.encode()[:max(room - len(digest) - 1, 1)].decode(errors="ignore")
    return f"{head}~{digest}"


def _tail(target: Path) -> str:
    """The end of ``target``'s temporary names: ``.tmp`` and its suffix (``.csv``: the
    writers pick the format by the suffix)."""
    return f".tmp{target.suffix}"


def _head(target: Path) -> str:
    """The start of ``target``'s temporary names on this host: ``.STEM.HOST.``."""
    stem = short_stem(target.stem, target.parent, len(_tail(target).encode()))
    return f".{stem}.{host_name()}."


def _clean_stale(target: Path) -> None:
    """Remove the temporary files of ``target`` that processes of this host left when
    killed (SIGKILL, power loss: no cleanup ran); those of live processes stay."""
    head = _head(target)
    pattern = f"{glob.escape(head)}*{glob.escape(_tail(target))}"
    with contextlib.suppress(OSError):
        for left in target.parent.glob(pattern):
            pid = left.name[len(head):].split(".", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    left.unlink()


def fsync_path(path: Path) -> None:
    """Flush ``path`` to the disk, best effort: a file's bytes, or a directory's entries
    (a rename in it survives a power loss only once its directory is flushed). A file
    system that cannot: nothing to do."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def warn_if_linked(target: Path, shown: str | os.PathLike[str], stacklevel: int = 3) -> None:
    """Warn where the file ``target`` that a new one replaces has other hard links: the
    new file takes the name ``shown`` alone, and the other names keep the earlier
    contents (``cp`` writes in place, and they all changed; a rename cannot)."""
    try:
        links = target.stat().st_nlink if target.is_file() else 1
    except OSError:
        return
    if links > 1:
        warnings.warn(f"{os.fspath(shown)!r} has {links - 1} other hard link(s): the new "
                      "file replaces this name only, the other names keep the earlier "
                      "contents (a copy written in place could be left torn)", UserWarning,
                      stacklevel=stacklevel)


def keep_mode(target: Path, tmp: Path) -> None:
    """Give the new file ``tmp`` the group and the permission bits of the file ``target``
    it replaces, where it may: a group-writable file shared in a project's group came
    back in the user's own group (its members could no longer write it), or with the
    umask's mode. A group the user is not in, or another owner's file, stays as made."""
    try:
        if not target.is_file():
            return
        old = target.stat()
    except OSError:
        return
    keep_stat(old, tmp)


def keep_stat(old: os.stat_result, tmp: Path) -> None:
    """Give the new file ``tmp`` the group and permission bits of ``old``, the status of
    the file it replaces, taken before that file was removed (:func:`keep_mode`)."""
    try:
        if not tmp.is_file():
            return
        new = tmp.stat()
    except OSError:
        return
    give_stat(tmp, old, group=new.st_gid != old.st_gid)


def give_stat(path: str | os.PathLike[str], old: os.stat_result, group: bool) -> None:
    """Give ``path`` (a file or a directory) the permission bits of ``old`` (and its group
    where ``group``), where it may: a group the user is not in stays as made."""
    if group and hasattr(os, "chown"):
        with contextlib.suppress(OSError):  # before the mode: chown drops setgid bits
            os.chown(path, -1, old.st_gid)
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IMODE(old.st_mode))


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file beside ``path`` to write, renamed over it when the block succeeds
    and removed when it fails (an exception, Ctrl-C).

    The new file gets the group and permission bits of the file it replaces (a
    group-writable ``timing.csv`` stays so, :func:`keep_mode`); a ``path`` that is a
    symbolic link keeps being one, the file it leads to replaced. An error of the write
    (a full disk) names ``path``, not the temporary file.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with replacing(os.path.join(d, "a.txt")) as tmp:
    ...     _ = tmp.write_text("done")
    >>> os.listdir(d)
    ['a.txt']
    """
    target = _real(Path(path))
    _clean_stale(target)
    tmp = target.with_name(f"{_head(target)}{os.getpid()}.{uuid.uuid4().hex[:8]}"
                           f"{_tail(target)}")
    try:
        yield tmp
        keep_mode(target, tmp)
        warn_if_linked(target, path)
        fsync_path(tmp)  # on disk before its name: a crash after the rename (power loss)
        os.replace(tmp, target)  # left an empty file in place of the earlier one (XFS, ext4)
        fsync_path(target.parent)  # the rename itself: without it, lost in a power loss
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, _OutputError) or (str(tmp) not in str(err)
                                             and err.errno not in _WRITE_ERRNOS):
            raise
        # the file asked for, not the hidden temporary one (nor none: a full disk under
        # pandas' or matplotlib's writer says only "No space left on device")
        message = f"cannot write {os.fspath(path)!r}: {err.strerror or err}"
        raise (_OutputError(err.errno, message) if err.errno else _OutputError(message)) \
            from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sidecar_of(path: str | os.PathLike[str]) -> Path:
    """The sidecar of the CSV ``path``: ``<stem>.meta.json`` beside it, or beside the file
    it leads to where ``path`` is a symbolic link (where the CSV is written)."""
    return _real(Path(path)).with_suffix(".meta.json")


def csv_digest(path: str | os.PathLike[str]) -> str:
    """The digest of a file's bytes a sidecar records (:data:`CSV_DIGEST`)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_with_sidecar(
    path: str | os.PathLike[str],
    write: Callable[[Path], object],
    meta: Mapping[str, Any],
    **dumps: Any,
) -> Path:
    """Write a CSV with ``write(tmp)`` and its sidecar (:func:`sidecar_of`), the JSON of
    ``meta`` (and the CSV's digest under :data:`CSV_DIGEST`), each through
    :func:`replacing`.

    Both are written in full before either is renamed; the sidecar is renamed first, so
    that a process killed between the two renames leaves a new sidecar beside the old
    CSV, which :func:`read_sidecar` tells (the digest differs), never an old sidecar of
    no digest beside a new CSV. ``dumps`` are keyword arguments of :func:`json.dumps`.
    """
    with replacing(path) as tmp:
        write(tmp)
        text = json.dumps({**meta, CSV_DIGEST: csv_digest(tmp)}, **dumps)
        with replacing(sidecar_of(path)) as tmp_meta:  # ends first: renamed before the CSV
            tmp_meta.write_text(text + "\n", encoding="utf-8")
    return Path(path)


def read_sidecar(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the CSV ``path`` in its sidecar (:func:`sidecar_of`; without the
    digest), or {}
    where there is none or it was written for other contents (its digest differs: a
    write stopped between the renames of the two files), with a warning naming both.
    A sidecar of no digest (written before h5mdx recorded one) is taken as it is."""
    side = sidecar_of(path)
    if not side.exists():
        return {}
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        warnings.warn(f"{side}: not the JSON of {Path(path).name}'s metadata ({err}); "
                      "read without it (no units)", UserWarning, stacklevel=3)
        return {}
    if not isinstance(meta, dict):
        return {}
    recorded = meta.pop(CSV_DIGEST, None)
    if recorded is not None and recorded != csv_digest(path):
        warnings.warn(f"{side} was written for other contents than {path} (a write "
                      "stopped between the renames of the two files, or the CSV edited "
                      "since?): its metadata (units, run) left out; write both again",
                      UserWarning, stacklevel=3)
        return {}
    return meta
