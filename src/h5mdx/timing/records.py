"""One timing schema for every backend, and its Parquet/CSV files (pandas only).

Every parallel run, whatever executed it (dask's threads or processes
scheduler, ``distributed``, dask-mpi, SLURM workers or the MPI-IO path), is
described by one row per task (or per MPI rank) with the columns of
:data:`COLUMNS`:

========================  ==================  ==================================================
column                    type                meaning
========================  ==================  ==================================================
``run_id``                str                 identifier of the run
``backend``               str                 one of :data:`BACKENDS`
``n_workers``             int                 number of workers (ranks) of the run
``worker``                str                 thread id, ``host:pid``, worker address or rank
``host``                  str                 host name
``rank``                  Int64 (nullable)    MPI rank, if any
``slurm_job_id``          str (nullable)      SLURM job id, if any
``task_key``              str                 dask key (``str(key)``) or a made-up rank key
``kind``                  str                 what the task does (``"rmsd"``, ``"read-sum"``)
``frame_start/stop``      Int64 (nullable)    frames ``[start, stop)`` of the task
``t_start``, ``t_stop``   float               absolute unix time (s) the task started/stopped
``wall``                  float               ``t_stop - t_start`` (s)
``t_init_top``            float               opening the topology (s)
``t_init_traj``           float               opening the trajectory (s)
``t_warmup``              float               loading/compiling the kernel, and planning the
                                              file's direct reads, in this task (s; 0 where
                                              neither was done, and in older records)
``t_io``                  float               reading (s)
``t_compute``             float               computing (s)
``t_wait``                float               waiting (s), see below
``t_comm_gather``         float               communication / gathering results (s)
``bytes_read``            Int64 (nullable)    bytes the task read
========================  ==================  ==================================================

Phases that a backend does not measure are NaN ("unknown"), never 0 (which
means "measured, and took no time"). The exception is ``t_warmup``: a task that
loaded no kernel spent no time warming up, so a missing ``t_warmup`` (records
written before the column existed) reads as 0.

``t_warmup`` is one-off start-up cost (numba loading or compiling the QCP kernel,
and finding where the file's chunks lie, in the first task a worker runs on a file),
*not* part of ``t_compute`` or ``t_io``. It lies inside
``wall``; the straggler analysis judges tasks on ``wall - t_warmup`` so that a
worker's first task is not called a straggler for paying it.

``t_wait`` has one meaning with two placements. For SPMD backends
(:data:`SPMD_BACKENDS`: an MPI rank runs from start to finish) it is the time
the rank waited for the others (at the barriers before the collective open and
the gather, and for rank 0's topology) and lies *inside* ``wall``.
For task backends (dask) it is the time the worker sat idle before the task
started -- since the end of its previous task, or since the start of the run
for its first task -- and lies *before* ``t_start``. :func:`busy` and
:func:`phase_sum` take care of the difference.

Extra columns (e.g. ``sched_start``/``sched_stop`` from the scheduler,
``t_transfer`` from ``distributed``, or ``retries`` and ``t_retried`` from
:func:`h5mdx.timing.capture.capture`: the attempts of a task run again, and their
seconds) are allowed and kept.

The run's metadata (file, layout, selection, versions, machine, backend, ...;
see :func:`run_metadata`) is stored in the Parquet key-value metadata under
``b"h5mdx"`` as JSON, or for CSV in a sidecar file ``<name>.meta.json``.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from h5mdx._replace import read_sidecar, replacing, write_with_sidecar

__all__ = [
    "BACKENDS",
    "COLUMNS",
    "PHASES",
    "SPMD_BACKENDS",
    "UNITS",
    "ZERO_DEFAULT_PHASES",
    "busy",
    "empty",
    "load",
    "phase_sum",
    "run_metadata",
    "save",
    "spmd_wall",
    "to_frame",
    "validate",
]

#: Backends a record may come from.
BACKENDS = (
    "threads",
    "processes",
    "synchronous",
    "distributed",
    "dask-mpi",
    "slurm",
    "mpi-io",
)

#: Backends whose rows are whole SPMD ranks (``t_wait`` lies inside ``wall``).
SPMD_BACKENDS = ("mpi-io",)


def spmd_wall(walls: Iterable[Any]) -> float:
    """The wall time of an SPMD run (MPI ranks, :data:`SPMD_BACKENDS`): its longest rank's
    ``wall`` (NaN ones left out; NaN if none is known).

    The ranks leave a barrier together just before each notes its ``t_start``, so the
    run lasts as long as its slowest rank. The span of the ranks' ``t_start`` and
    ``t_stop`` is no measure of it: each rank reads its own node's clock, and a node whose
    clock was 0.3 s ahead lengthened the span of a 1 s run to 1.3 s. The straggler
    summary, :func:`h5mdx.timing.stragglers.run_table` and ``h5mdx mpi-rmsd``'s summary
    line all take the run's time from here.
    """
    known = [w for w in map(float, walls) if not np.isnan(w)]
    return max(known) if known else float("nan")

#: Phase columns, in the order they happen.
PHASES = (
    "t_init_top", "t_init_traj", "t_warmup", "t_io", "t_compute", "t_wait", "t_comm_gather",
)

#: Phases that default to 0.0 (not NaN) when a record or an older file lacks them.
ZERO_DEFAULT_PHASES = ("t_warmup",)

_STR, _INT, _NINT, _FLOAT = "str", "int", "Int64", "float"

#: The schema: column name -> kind of values (``str``, ``int``, nullable ``Int64``, ``float``).
COLUMNS: dict[str, str] = {
    "run_id": _STR,
    "backend": _STR,
    "n_workers": _INT,
    "worker": _STR,
    "host": _STR,
    "rank": _NINT,
    "slurm_job_id": _STR,
    "task_key": _STR,
    "kind": _STR,
    "frame_start": _NINT,
    "frame_stop": _NINT,
    "t_start": _FLOAT,
    "t_stop": _FLOAT,
    "wall": _FLOAT,
    **dict.fromkeys(PHASES, _FLOAT),
    "bytes_read": _NINT,
}

#: The unit of every column that has one, saved with the records (metadata ``units``): a
#: ``timing.csv`` said nowhere that its times are seconds and its ``t_start`` Unix time.
UNITS: dict[str, str] = {
    "t_start": "s (Unix time)",
    "t_stop": "s (Unix time)",
    "wall": "s",
    **dict.fromkeys(PHASES, "s"),
    "bytes_read": "bytes",
    "sched_start": "s (Unix time)",
    "sched_stop": "s (Unix time)",
    "t_transfer": "s",
    "t_retried": "s",
}

_NULLABLE_STR = ("slurm_job_id",)
_META_KEY = b"h5mdx"


def empty() -> pd.DataFrame:
    """An empty records frame with the schema's columns and dtypes."""
    return _coerce(pd.DataFrame({c: [] for c in COLUMNS}))


def _fill_zero_default(df: pd.DataFrame) -> pd.DataFrame:
    """Add the phases of :data:`ZERO_DEFAULT_PHASES` as 0.0 where they are missing."""
    for col in ZERO_DEFAULT_PHASES:
        if col not in df:
            df[col] = 0.0
        else:
            df[col] = pd.to_numeric(df[col]).fillna(0.0)
    return df


def _coerce(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col, kind in COLUMNS.items():
        if col not in out:
            continue
        s = out[col]
        if kind == _STR:
            if col in _NULLABLE_STR:
                # built as objects: ``Series.map`` infers pandas 3's ``str`` dtype, whose
                # missing value is NaN, so a None beside a job id became NaN and failed
                # validate
                out[col] = pd.Series([str(v) if ok else None for v, ok in zip(
                    s, s.notna(), strict=True)], index=s.index, dtype=object)
            else:
                out[col] = s.astype(str)
            out[col] = out[col].astype(object)
        elif kind == _INT:
            out[col] = pd.to_numeric(s).astype("int64")
        elif kind == _NINT:
            out[col] = pd.to_numeric(s.astype(object).where(s.notna(), None)).astype("Int64")
        else:
            out[col] = pd.to_numeric(s.astype(object).where(s.notna(), np.nan)).astype(
                "float64"
            )
    return out


def to_frame(
    records: Iterable[Mapping[str, Any]] | pd.DataFrame,
    run_meta: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Build a validated records frame from dicts (or a frame).

    Columns missing from the records are filled: ``run_id``, ``backend`` and
    ``n_workers`` from ``run_meta``; phases with NaN (unknown), except
    ``t_warmup`` with 0.0; ``wall`` from
    ``t_stop - t_start``; ``rank``, ``slurm_job_id``, frames and ``bytes_read``
    with nulls.

    Parameters
    ----------
    records : iterable of mapping, or DataFrame
        One record per task (or rank).
    run_meta : mapping, optional
        The run's metadata (see :func:`run_metadata`); gives defaults for
        ``run_id``, ``backend``, ``n_workers`` and ``host``.

    Returns
    -------
    pandas.DataFrame
        The records with the schema's columns first (in schema order), then any
        extra columns.

    Raises
    ------
    ValueError
        If the result does not validate (see :func:`validate`).
    """
    df = records.copy() if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    meta = dict(run_meta or {})
    n = len(df)
    for col in ("run_id", "backend", "n_workers", "host"):
        if col not in df and col in meta:
            df[col] = [meta[col]] * n
    if "host" not in df:
        df["host"] = [meta.get("machine", {}).get("hostname", socket.gethostname())] * n
    if "wall" not in df and "t_start" in df and "t_stop" in df:
        df["wall"] = pd.to_numeric(df["t_stop"]) - pd.to_numeric(df["t_start"])
    _fill_zero_default(df)
    for col in PHASES:
        if col not in df:
            df[col] = np.nan
    for col in ("rank", "frame_start", "frame_stop", "bytes_read"):
        if col not in df:
            df[col] = pd.array([pd.NA] * n, dtype="Int64")
    if "slurm_job_id" not in df:
        df["slurm_job_id"] = [None] * n
    if "kind" not in df:
        df["kind"] = ["task"] * n
    missing = [c for c in COLUMNS if c not in df]
    if missing:
        raise ValueError(
            f"timing records lack the column(s) {missing}; pass them in the records "
            f"or give run_id/backend/n_workers in run_meta"
        )
    df = _coerce(df)
    extra = [c for c in df.columns if c not in COLUMNS]
    df = df[list(COLUMNS) + extra].reset_index(drop=True)
    validate(df)
    return df


def validate(df: pd.DataFrame) -> None:
    """Check that ``df`` follows the timing schema.

    Parameters
    ----------
    df : pandas.DataFrame
        Records.

    Raises
    ------
    ValueError
        Listing every missing column, every column of the wrong type, unknown
        backends, negative durations and stop times before start times.
    """
    problems: list[str] = []
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        problems.append(f"missing column(s): {', '.join(missing)}")
    wrong = []
    for col, kind in COLUMNS.items():
        if col not in df.columns:
            continue
        s = df[col]
        if kind == _STR:
            ok = s.map(lambda v: v is None or isinstance(v, str) or v is pd.NA).all() and (
                col in _NULLABLE_STR or s.notna().all()
            )
        elif kind == _INT:
            ok = pd.api.types.is_integer_dtype(s) and s.notna().all()
        elif kind == _NINT:
            ok = pd.api.types.is_integer_dtype(s) or (s.isna().all() and len(s) > 0)
        else:
            ok = pd.api.types.is_float_dtype(s)
        if not ok:
            wrong.append(f"{col} (expected {kind}, got {s.dtype})")
    if wrong:
        problems.append(f"wrong type in column(s): {', '.join(wrong)}")
    if not missing and not wrong and len(df):
        bad = sorted(set(df["backend"]) - set(BACKENDS))
        if bad:
            problems.append(f"unknown backend(s) {bad}; valid options are: {', '.join(BACKENDS)}")
        negative, backwards = _impossible_times(df)
        if negative.any().any():
            cols = [c for c in negative if negative[c].any()]
            problems.append(f"negative durations in column(s): {', '.join(cols)} "
                            f"({_which(negative.any(axis=1), df)})")
        if backwards.any():
            problems.append(f"t_stop before t_start ({_which(backwards, df)})")
    if problems:
        raise ValueError("invalid timing records: " + "; ".join(problems))


def _impossible_times(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Where the times of ``df``'s records cannot be: (negative, by duration column:
    ``wall`` and the phases; backwards, by row: a stop before its start)."""
    return df[["wall", *PHASES]] < 0, df["t_stop"] < df["t_start"]


def _which(bad: pd.Series, df: pd.DataFrame, most: int = 3) -> str:
    """The rows where ``bad`` holds, by position and task key (the first ``most``): a
    clock that stepped back on one host is found by them (said 'in some rows' before)."""
    rows = np.flatnonzero(bad.to_numpy(dtype=bool))
    more = f" and {len(rows) - most} more" if len(rows) > most else ""
    keys = ", ".join(str(df["task_key"].iloc[i]) for i in rows[:most])
    return (f"row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows[:most]))}{more}: "
            f"task{'s' if len(rows) > 1 else ''} {keys}")


def busy(df: pd.DataFrame) -> pd.Series:
    """Time each task spent working (s): ``wall``, minus ``t_wait`` for SPMD ranks.

    For dask tasks ``t_wait`` lies before the task, so ``busy == wall``; an MPI
    rank's ``wall`` includes its barrier wait, which is not work.
    """
    spmd = df["backend"].isin(SPMD_BACKENDS)
    return df["wall"] - df["t_wait"].where(spmd, 0.0).fillna(0.0)


def phase_sum(df: pd.DataFrame) -> pd.Series:
    """Sum of the known phases that lie inside each task's ``wall`` (s).

    Unknown (NaN) phases count as 0 here; ``t_wait`` counts only for SPMD ranks.
    ``wall - phase_sum(df)`` is the time no phase accounts for.
    """
    inside = [p for p in PHASES if p != "t_wait"]
    total = df[inside].fillna(0.0).sum(axis=1)
    spmd = df["backend"].isin(SPMD_BACKENDS)
    return total + df["t_wait"].where(spmd, 0.0).fillna(0.0)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("h5mdx", "dask", "distributed", "h5py", "numpy", "pandas", "xarray"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # noqa: BLE001 - any failure means "unknown"
            out[name] = None
    try:
        import h5py

        out["HDF5"] = h5py.version.hdf5_version
    except ImportError:  # pragma: no cover - h5py is a core dependency
        out["HDF5"] = None
    out["python"] = platform.python_version()
    return out


def run_metadata(
    *,
    backend: str,
    n_workers: int,
    run_id: str | None = None,
    file: str | None = None,
    layout: Any = None,
    selection: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The metadata of one run: what ran where, with which software.

    Parameters
    ----------
    backend : str
        One of :data:`BACKENDS`.
    n_workers : int
        Number of workers (ranks).
    run_id : str, optional
        Identifier of the run.
    file : str, optional
        The trajectory file.
    layout : any, optional
        The storage layout (e.g. HDF5 chunk shape) and dask chunks; JSON-able.
    selection : str, optional
        The atom selection.
    **extra
        More JSON-able entries.

    Returns
    -------
    dict
        With keys ``run_id, backend, n_workers, file, layout, selection,
        versions, machine, timestamp, units`` (:data:`UNITS`) and the extra ones.
    """
    meta: dict[str, Any] = {
        "run_id": run_id,
        "backend": backend,
        "n_workers": int(n_workers),
        "file": None if file is None else os.fspath(file),
        "layout": layout,
        "selection": selection,
        "versions": _versions(),
        "machine": {
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
        },
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "units": dict(UNITS),
    }
    meta.update(extra)
    return meta


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def save(
    df: pd.DataFrame,
    path: str | os.PathLike[str] | Mapping[str, Any],
    metadata: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> Path:
    """Validate and write records to ``.parquet`` or ``.csv`` with the run's metadata.

    Parquet files keep the metadata (JSON) in their key-value metadata under
    ``h5mdx``; CSV files get a sidecar ``<stem>.meta.json``. The metadata says the
    columns' units (``units``, :data:`UNITS`: seconds, Unix times, bytes) unless it
    says them already.

    Parameters
    ----------
    df : pandas.DataFrame
        Records (see :func:`to_frame`).
    path : path-like
        Output file; the suffix (``.parquet``/``.pq`` or ``.csv``) picks the format.
    metadata : mapping, optional
        The run's metadata (see :func:`run_metadata`). For convenience the order
        ``save(df, metadata, path)`` is accepted too.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    ValueError
        If the records do not validate or the suffix is not supported.
    """
    if isinstance(path, Mapping):
        path, metadata = metadata, path  # type: ignore[assignment]
    if path is None:
        raise ValueError("save(df, path, metadata): no output path given")
    meta = dict(metadata or {})  # type: ignore[arg-type]
    meta.setdefault("units", dict(UNITS))
    validate(df)
    path = Path(path)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(meta, default=_json_default, sort_keys=True)
    if path.suffix in (".parquet", ".pq"):
        from h5mdx._optional import import_optional

        pa = import_optional("pyarrow", "timing records in Parquet")
        pq = import_optional("pyarrow.parquet", "timing records in Parquet")

        table = pa.Table.from_pandas(df, preserve_index=False)
        kv = dict(table.schema.metadata or {})
        kv[_META_KEY] = text.encode()
        with replacing(path) as tmp:
            pq.write_table(table.replace_schema_metadata(kv), tmp)
    elif path.suffix == ".csv":
        # floats as repr, which reads back exactly: "%.9f" kept 4 digits of a 1.2 us phase;
        # the sidecar records the CSV's digest: a pair torn by a crash is told on load
        write_with_sidecar(path, lambda tmp: df.to_csv(tmp, index=False), json.loads(text),
                           sort_keys=True)
    else:
        raise ValueError(
            f"cannot save timing records as {path.name!r}: use a .parquet or .csv file name"
        )
    return path


def _without_bad_times(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``df`` without the records whose times cannot be (a negative duration, a stop
    before its start: a clock that stepped back on a host), with one warning naming the
    file and them; the other records of the file stay usable (it was refused whole)."""
    cols = [c for c in ("wall", *PHASES, "t_start", "t_stop") if c in df]
    if len(cols) < len(PHASES) + 3 or not all(pd.api.types.is_float_dtype(df[c])
                                              for c in cols):
        return df  # validate says what is wrong with the columns
    negative, backwards = _impossible_times(df)
    bad = negative.any(axis=1) | backwards
    if not bad.any() or bad.all():
        return df  # none to leave out, or nothing left: validate refuses the file
    warnings.warn(f"{path}: {int(bad.sum())} of {len(df)} timing record(s) left out, "
                  f"their times impossible (a negative duration or a stop before its "
                  f"start: a clock that stepped back?): {_which(bad, df)}", UserWarning,
                  stacklevel=3)
    return df[~bad.to_numpy()].reset_index(drop=True)


def load(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read records and metadata written by :func:`save`.

    Parameters
    ----------
    path : path-like
        A ``.parquet``/``.pq`` or ``.csv`` file.

    Returns
    -------
    (pandas.DataFrame, dict)
        The validated records and the run's metadata (empty if none was stored).
        Records written before ``t_warmup`` existed get ``t_warmup = 0.0``; records
        whose times are impossible (a negative duration, a stop before its start) are
        left out with a warning naming them.

    Raises
    ------
    ValueError
        Naming the file, for a suffix other than those, or a file that does not hold
        timing records (see :func:`validate`).
    """
    path = Path(path)
    meta: dict[str, Any] = {}
    if path.suffix in (".parquet", ".pq"):
        from h5mdx._optional import import_optional

        pq = import_optional("pyarrow.parquet", "timing records in Parquet")
        table = pq.read_table(path)
        raw = (table.schema.metadata or {}).get(_META_KEY)
        if raw:
            meta = json.loads(raw)
        df = table.to_pandas()
    elif path.suffix == ".csv":
        df = pd.read_csv(
            path,
            dtype={"run_id": str, "worker": str, "host": str, "task_key": str, "kind": str,
                   "backend": str, "slurm_job_id": str},
            keep_default_na=False,
            na_values=[""],
        )
        # save let no text column but slurm_job_id be missing: an empty field of the
        # others is an empty name ('' host or kind), not a missing one
        for col in (c for c, kind in COLUMNS.items() if kind == _STR
                    and c not in _NULLABLE_STR and c in df):
            df[col] = df[col].fillna("")
        meta = read_sidecar(path)  # {} for one of another CSV, said
    else:
        raise ValueError(
            f"cannot read timing records from {path.name!r}: expected .parquet or .csv"
        )
    try:
        df = _coerce(_fill_zero_default(df))
        df = _without_bad_times(df, path)
        validate(df)
    except (ValueError, TypeError) as err:  # which file, not only what is wrong in it
        what = str(err).removeprefix("invalid timing records: ")
        raise ValueError(f"{path}: invalid timing records: {what}") from err
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[list(COLUMNS) + extra], meta
