"""The example trajectory: adenylate kinase at a real size, built once and cached.

:func:`build_adk_trajectory` writes an H5MD file of ``frames`` frames of adenylate kinase
(3341 atoms) made from the 98 frames of MDAnalysisTests' PSF/DCD: frames 0-97 are the
DCD's frames exactly; the trajectory then runs back and forth through them
(:func:`source_index`), every later frame moved by a small rigid rotation and translation
plus Gaussian noise of 0.05 Å (:func:`perturbed_frames`), drawn from a generator seeded
by the frame number, so the file is the same on every machine.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any

import h5py
import numpy as np

from h5mdx.floor import POSITION as _POSITION

__all__ = ["DEFAULT_FRAMES", "SYNTHETIC", "build_adk_trajectory", "describe_file",
           "is_cached", "is_example_file", "perturbed_frames", "remove_dead_builds", "source_index"]

#: Default number of frames of the example trajectory (~1.2 GB).
DEFAULT_FRAMES = 30_000

_FRAMES_PER_CHUNK = 100
_NOISE = 0.05  # Å, standard deviation of the per-coordinate noise
_MAX_ANGLE = math.radians(10.0)
_MAX_SHIFT = 2.0  # Å
_SEED = 15
_RECIPE = 3  # bump when the construction changes: cached files are rebuilt


def _adk_source() -> tuple[Any, np.ndarray, float, float]:
    """The adk Universe, its 98 frames (float32, Å), first time and dt (ps)."""
    from h5mdx._optional import import_optional

    mda = import_optional("MDAnalysis", "the adk example")
    datafiles = import_optional("MDAnalysisTests.datafiles", "the adk example data")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCD/PSF warnings about missing box and dt
        u = mda.Universe(datafiles.PSF, datafiles.DCD)
        frames = np.stack([ts.positions.copy() for ts in u.trajectory]).astype(np.float32)
        t0, dt = float(u.trajectory[0].time), float(u.trajectory.dt)
    return u, frames, t0, dt


def _rotations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` rotation matrices about random axes by angles up to ``_MAX_ANGLE``."""
    axis = rng.standard_normal((n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    half = 0.5 * rng.uniform(0.0, _MAX_ANGLE, n)
    w, (x, y, z) = np.cos(half), (axis * np.sin(half)[:, None]).T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], axis=1)


def source_index(frame: Any, n_source: int = 98) -> Any:
    """The source frame behind ``frame``: forward, then backward, then forward ...

    ``0, 1, ..., n-1, n-1, n-2, ..., 0, 0, 1, ...``: consecutive frames are always
    neighbours in the source, so the long trajectory goes back and forth along
    the DCD's transition without jumps.

    Examples
    --------
    >>> source_index([0, 97, 98, 195, 196], n_source=98).tolist()
    [0, 97, 97, 0, 0]
    """
    k = np.asarray(frame) % (2 * n_source)
    return np.where(k < n_source, k, 2 * n_source - 1 - k)


def perturbed_frames(source: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Frames ``[start, stop)`` of the example trajectory built from ``source``.

    Parameters
    ----------
    source : numpy.ndarray
        The original frames, shape ``(n_source, n_atoms, 3)``.
    start, stop : int
        Frame range.

    Returns
    -------
    numpy.ndarray
        float32 ``(stop - start, n_atoms, 3)``. Frames below ``n_source`` are the
        source frames unchanged; frame ``i`` above is source frame
        ``source_index(i)`` rotated about its centre, shifted and with Gaussian
        noise, from a generator seeded by ``i`` (so any block gives the same frames).
    """
    n_src = len(source)
    out = source[source_index(np.arange(start, stop), n_src)].copy()
    for j, i in enumerate(range(max(start, n_src), stop), start=max(start, n_src) - start):
        rng = np.random.default_rng((_SEED, i))
        frame = out[j].astype(np.float64)
        centre = frame.mean(axis=0)
        rot = _rotations(rng, 1)[0]
        shift = rng.uniform(-_MAX_SHIFT, _MAX_SHIFT, 3)
        noise = rng.standard_normal(frame.shape) * _NOISE
        out[j] = ((frame - centre) @ rot.T + centre + shift + noise).astype(np.float32)
    return out


def _recipe(frames: int) -> str:
    return json.dumps({"recipe": _RECIPE, "frames": frames, "seed": _SEED, "noise": _NOISE,
                       "frames_per_chunk": _FRAMES_PER_CHUNK}, sort_keys=True)


def is_cached(path: str, frames: int) -> bool:
    """Whether ``path`` is a complete example file of ``frames`` frames and this recipe."""
    if not os.path.exists(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            return (f.attrs.get("h5mdx_example") == _recipe(frames)
                    and f[_POSITION].shape[0] == frames)
    except (OSError, KeyError):
        return False


def is_example_file(path: str) -> bool:
    """Whether ``path`` is a trajectory the example built, of any size or recipe (one
    that :func:`build_adk_trajectory` may replace); False where it cannot be read."""
    try:
        with h5py.File(path, "r") as f:
            return "h5mdx_example" in f.attrs
    except OSError:
        return False


def build_adk_trajectory(
    path: str | os.PathLike[str],
    frames: int = DEFAULT_FRAMES,
    *,
    progress: bool = True,
    block: int = 1000,
) -> str:
    """Write the example adk trajectory of ``frames`` frames to H5MD (once; cached).

    Parameters
    ----------
    path : path-like
        The H5MD file. If it already holds this example with ``frames`` frames it
        is reused; otherwise it is (re)built in a temporary file next to it and
        renamed into place when complete.
    frames : int, default 30,000
        Number of frames (at least 98, the frames of the DCD); 30,000 frames of
        3341 atoms are 1.2 GB.
    progress : bool, default True
        Show a progress bar.
    block : int, default 1000
        Frames generated per write (memory: ``block * n_atoms * 12`` bytes).

    Returns
    -------
    str
        ``path``. Its topology is :func:`h5mdx.testing.adk_topology`.

    Raises
    ------
    ValueError
        If ``frames`` is below 98.
    """
    from h5mdx._progress import progress_bar
    from h5mdx.format.writer import ELEMENT_UNITS, ElementSpec, H5MDWriter, Layout
    from h5mdx.layout._atomic import atomic_output
    from h5mdx.layout.convert import _static

    path = os.fspath(path)
    u, source, t0, dt = _adk_source()
    if frames < len(source):
        raise ValueError(f"the example needs at least {len(source)} frames (the DCD's), "
                         f"not {frames}")
    if is_cached(path, frames):
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    n_atoms = source.shape[1]
    spec = ElementSpec("position", (n_atoms, 3), np.float32, ELEMENT_UNITS["position"])
    layout = Layout(frames_per_chunk=_FRAMES_PER_CHUNK)
    desc = f"building {os.path.basename(path)} ({frames:,} frames)"
    first_step = round(t0 / dt) if dt > 0 else 0
    with atomic_output(path, overwrite=True, hdf5=True) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["h5mdx_example"] = _recipe(frames)
        with H5MDWriter(f, [spec], n_frames=frames, layout=layout, static=_static(u.atoms),
                        author="h5mdx example") as writer, \
                progress_bar(frames, desc, progress) as advance:
            for a in range(0, frames, block):
                b = min(frames, a + block)
                idx = np.arange(a, b)
                # steps counted in dt, as the DCD's own (step 1 at 1 ps; adk_example's too)
                writer.extend(idx + first_step, t0 + idx * dt,
                              position=perturbed_frames(source, a, b))
                advance(b - a)
    return path


def remove_dead_builds(out: str) -> list[str]:
    """Remove the partial trajectories that builds killed in ``out`` left, of any frame count.

    A build killed outright (SIGKILL, a closed session) leaves its hidden
    ``.adk-N.h5md.HOST.PID.*.h5mdx-partial`` file (1.2 GB at the default size); the next
    build of the same ``N`` removes it, a run of another size left it for good. Those of
    processes still running (another build) stay.

    Returns
    -------
    list of str
        The trajectories whose leftovers were looked at (``adk-N.h5md`` in ``out``).
    """
    from pathlib import Path

    from h5mdx.layout._atomic import _SUFFIX, _clean_stale

    targets = sorted({name[1:].split(".h5md.", 1)[0] + ".h5md" for name in os.listdir(out)
                      if name.startswith(".adk-") and name.endswith(_SUFFIX)})
    for target in targets:
        _clean_stale(Path(out) / target)  # this host's dead processes only
    return targets


def describe_file(path: str) -> tuple[int, int, int, tuple[int, ...]]:
    """Frames, atoms, bytes and chunk shape of the positions of the example file ``path``."""
    with h5py.File(path, "r") as f:
        d = f[_POSITION]
        return d.shape[0], d.shape[1], int(d.size * d.dtype.itemsize), tuple(d.chunks or ())


#: What the example's trajectory is, said wherever its figures are shown.
SYNTHETIC = ("made from the 98 frames of MDAnalysisTests' adk DCD, played back and forth "
             "with small rigid moves and 0.05 Å noise (not a real simulation)")
