"""A sample of a file's bytes by its stamp: a file whose change time alone moved had its
attributes changed (``chmod``, ``chown``, a hard link, an extended attribute), or was
rewritten in place with its modification time set back (``cp -p``, ``rsync --inplace``
over it). Only its bytes tell the two apart.

:func:`note` samples a file as h5mdx opens it (:func:`h5mdx.format.reader_cache.file_stamp`
is the key); :func:`attributes_only` says whether a file still holds the bytes sampled
under an earlier stamp that differs from its stamp now in the change time alone. The
sample is a digest of the first and last 64 KiB (the HDF5 superblock, the root group's
and the last objects' metadata) and of 16 pages of 4 KiB spread over the file (the data
of a trajectory of the same size differs there).

This module knows the standard library only.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

__all__ = ["attributes_only", "note"]

#: Stamps sampled per process, the least recently noted dropped first
_MAX = 1024
_EDGE = 64 * 1024
_PAGE = 4096
_PAGES = 16

_SAMPLES: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
_LOCK = threading.Lock()


def _sample(filename: str, size: int) -> bytes | None:
    """The digest of the sampled bytes of ``filename`` (``size`` bytes long); None where
    it cannot be read."""
    spread = [i * max(size - _PAGE, 0) // (_PAGES - 1) for i in range(_PAGES)]
    spans = [(0, _EDGE), (max(size - _EDGE, 0), _EDGE), *((at, _PAGE) for at in spread)]
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(filename, "rb", buffering=0) as fh:  # a read moves no change time
            for at, n in spans:
                fh.seek(at)
                digest.update(fh.read(n))
    except OSError:
        return None
    return digest.digest()


def note(filename: str, stamp: tuple[int, ...] | None) -> None:
    """Sample ``filename`` under its ``stamp`` (``(device, inode, size, mtime_ns,
    ctime_ns)``, taken now), once a stamp."""
    if stamp is None:
        return
    with _LOCK:
        if stamp in _SAMPLES:
            _SAMPLES.move_to_end(stamp)
            return
    got = _sample(filename, stamp[2])
    if got is not None:
        _keep(stamp, got)


def _keep(stamp: tuple[int, ...], digest: bytes) -> None:
    """Keep ``digest`` under ``stamp``, dropping the least recently kept beyond ``_MAX``."""
    with _LOCK:
        _SAMPLES[stamp] = digest
        _SAMPLES.move_to_end(stamp)
        while len(_SAMPLES) > _MAX:
            _SAMPLES.popitem(last=False)


def attributes_only(filename: str, then: tuple[int, ...], now: tuple[int, ...]) -> bool:
    """Whether the file of stamp ``then`` has, at stamp ``now``, changed in its change
    time alone and holds the bytes sampled under ``then`` (:func:`note`): its attributes
    changed, not its contents. False where ``then`` was not sampled."""
    if then[:4] != now[:4] or then == now:
        return False
    with _LOCK:
        before = _SAMPLES.get(then)
    if before is None or _sample(filename, now[2]) != before:
        return False
    _keep(now, before)
    return True
