"""Hostile files: hypothesis generates H5MD structures, a worker process opens them.

Every generated file must either open (and a small read of every variable works or
raises :class:`~h5mdx.errors.H5MDReadError`) or be refused with one of h5mdx's clear
errors -- in the tolerant default (where departures from H5MD become warnings and
unreadable parts are left out) and with ``strict=True`` (where they are errors). The files are opened in a separate, long-lived worker process so that a
segfault or a hang in h5py/HDF5 is caught (the worker is restarted) and reported as a
failure of that example, with the file kept for reproduction.

``H5MDX_FUZZ_EXAMPLES`` sets the number of files (default 1000);
``H5MDX_RELIABILITY_OUT`` names a JSON-lines file the outcome counts are appended to
(used by ``benchmarks/bench_reliability.py``).
"""

from __future__ import annotations

import collections
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # in the full run (scripts/test.sh, CI), not in plain `pytest`

#: Hypothesis examples; about 5% describe structures h5py itself refuses to write, so
#: 1100 examples give at least 1000 files.
N_EXAMPLES = int(os.environ.get("H5MDX_FUZZ_EXAMPLES", "1100"))
MIN_FILES = int(N_EXAMPLES * 0.9)
CASE_TIMEOUT = 30.0  # seconds one file may take in the worker before it counts as a hang
ALLOWED = {"ok", "H5MDFormatError", "H5MDReadError", "TopologyError", "FileNotFoundError"}

# ----------------------------------------------------------------------------- strategies

DTYPES = ["f4"] * 6 + ["f8", "i4", "i8", "u1", "f2", "c8", "bool", "S5", "vlen", "compound",
                      "array"]
NAMES = ["position", "velocity", "force", "image", "species", "mass", "charge", "id", "x y"]
LINKS = ["none"] * 12 + ["soft_other", "dangling", "loop", "external", "external_missing", "hard_cycle"]


def _dims():
    return st.one_of(st.tuples(st.integers(1, 5), st.integers(1, 5), st.just(3)).map(list),
                     st.lists(st.integers(0, 5), min_size=0, max_size=4))


sampling = st.fixed_dictionaries({
    "kind": st.sampled_from(["explicit"] * 6 + ["fixed"] * 3 + ["missing", "group", "wrong_len", "float",
                             "string", "dangling", "loop", "huge"]),
    "time": st.sampled_from(["none", "ok", "ok", "ok", "ok", "wrong_len", "string", "scalar", "huge"]),
    "offset": st.sampled_from([0, 0, 5, 5, "abc", 1.5, 2**62]),
})

element = st.fixed_dictionaries({
    "name": st.sampled_from(NAMES),
    "td": st.booleans(),
    "shape": _dims(),
    "dtype": st.sampled_from(DTYPES),
    "layout": st.sampled_from(["contiguous"] * 3 + ["chunked"] * 3 + [ "tiny_chunks", "big_chunks", "gzip",
                               "lzf", "unknown_filter", "optional_filter", "no_data"]),
    "huge": st.sampled_from([None] * 12 + [10**12, 10**9, 2**40]),
    "huge_axis": st.integers(0, 2),
    "unit": st.sampled_from([None, "nm", "nm", "Angstrom", "furlong", 3, ["nm", "ps"], b"nm"]),
    "sampling": sampling,
    "link": st.sampled_from(LINKS),
    "value_link": st.sampled_from(["none"] * 12 + ["dangling", "loop", "external"]),
    "pickle_attr": st.sampled_from([False] * 4 + [True]),
    "seed": st.integers(0, 2**16),
})

box = st.one_of(st.none(), st.fixed_dictionaries({
    "dimension": st.sampled_from([3] * 6 + [2, 1, 0, 7, "three", [3, 3], 2.5, None]),
    "boundary": st.sampled_from([None, "periodic", ["periodic"] * 3, ["periodic"] * 3,
                                 ["none"] * 2, 5]),
    "edges": st.one_of(st.none(), element),
    "as_dataset": st.sampled_from([False] * 3 + [True]),
}))

group = st.fixed_dictionaries({
    "name": st.sampled_from(["trajectory", "all", "solvent"]),
    "elements": st.lists(element, max_size=4),
    "box": box,
    "kind": st.sampled_from(["group"] * 12 + ["dataset", "dangling", "external"]),
})

file_spec = st.fixed_dictionaries({
    "h5md": st.sampled_from(["ok"] * 20 + ["missing", "dataset", "dangling"]),
    "version": st.sampled_from([[1, 1]] * 20 + [[1, 0], [2, 0], 11, "1.1", None, [1]]),
    "author": st.sampled_from(["ok"] * 6 + ["missing", "dangling", "dataset", "external"]),
    "particles": st.sampled_from(["group"] * 20 + ["dataset", "missing", "loop"]),
    "groups": st.lists(group, max_size=3),
    "observables": st.lists(element, max_size=3),
    "obs_cycle": st.booleans(),
    "parameters": st.sampled_from(["none"] * 4 + ["small", "huge", "pickled", "vlen", "cycle"]),
    "libver": st.sampled_from(["earliest", "latest"]),
})

# ----------------------------------------------------------------------------- file writer


class _Boom:
    """Unpickling this would create a marker file: the engine must never do it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


def _np_dtype(name: str) -> Any:
    if name == "vlen":
        return h5py.string_dtype()
    if name == "compound":
        return np.dtype([("a", "f4"), ("b", "i4")])
    if name == "array":
        return np.dtype("(3,)f4")
    return np.dtype(name)


def _data(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    if dtype == h5py.string_dtype():
        return np.array(["x" * int(rng.integers(0, 4))] * int(np.prod(shape)),
                        dtype=object).reshape(shape)
    out = np.zeros(shape, dtype=dtype)
    if out.dtype.kind in "fciu" and out.size:
        out[...] = rng.integers(0, 100, size=shape).astype(out.dtype)
    return out


def _dataset(parent: h5py.Group, name: str, el: dict[str, Any], shape: tuple[int, ...],
             rng: np.random.Generator) -> h5py.Dataset:
    dtype = _np_dtype(el["dtype"])
    layout = el["layout"]
    huge = el["huge"]
    if huge is not None and shape:
        axis = min(el["huge_axis"], len(shape) - 1)
        shape = tuple(huge if i == axis else s for i, s in enumerate(shape))
        layout = "huge"
    kw: dict[str, Any] = {}
    if layout in ("chunked", "gzip", "lzf", "tiny_chunks", "big_chunks", "unknown_filter",
                  "optional_filter", "huge") and shape and all(shape):
        kw["maxshape"] = (None,) * len(shape)
        kw["chunks"] = {
            "tiny_chunks": (1,) * len(shape),
            "big_chunks": (2**16, *shape[1:]),  # far more frames than the dataset has
            "huge": tuple(min(s, 4) for s in shape),
        }.get(layout, True)
        if layout in ("gzip", "lzf", "unknown_filter"):
            kw["compression"] = "gzip" if layout == "gzip" else "lzf"
    if layout == "optional_filter" and "chunks" in kw and dtype.kind in "fiu":
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(tuple(min(s, 2) for s in shape))
        dcpl.set_filter(32001 + int(rng.integers(0, 200)), h5py.h5z.FLAG_OPTIONAL)
        space = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED,) * len(shape))
        dsid = h5py.h5d.create(parent.id, name.encode(), h5py.h5t.py_create(dtype), space,
                               dcpl=dcpl)
        dset = h5py.Dataset(dsid)
        dset[...] = _data(tuple(dset.shape), dtype, rng)
        return dset
    if layout in ("no_data", "huge") or huge is not None or dtype.subdtype is not None:
        return parent.create_dataset(name, shape=shape, dtype=dtype, **kw)
    return parent.create_dataset(name, data=_data(shape, dtype, rng), dtype=dtype, **kw)


def _link(parent: h5py.Group, name: str, how: str, other: str) -> bool:
    """Put a link of kind ``how`` at ``parent/name``; False when ``how`` is 'none'."""
    if how == "none":
        return False
    full = f"{parent.name.rstrip('/')}/{name}"
    if how == "soft_other":
        parent[name] = h5py.SoftLink(other)
    elif how == "dangling":
        parent[name] = h5py.SoftLink("/no/such/object")
    elif how == "loop":
        parent[name] = h5py.SoftLink(full)
    elif how == "external":
        parent[name] = h5py.ExternalLink("sibling.h5", "/data")
    elif how == "external_missing":
        parent[name] = h5py.ExternalLink("/nonexistent/dir/x.h5", "/x")
    elif how == "hard_cycle":
        parent[name] = parent
    return True


def _sampling(grp: h5py.Group, s: dict[str, Any], n: int, rng: np.random.Generator) -> None:
    kind = s["kind"]
    if kind == "explicit":
        grp["step"] = np.arange(n, dtype=np.int64) * 10
    elif kind == "fixed":
        grp["step"] = np.int64(10)
        grp["step"].attrs["offset"] = s["offset"]
    elif kind == "group":
        grp.create_group("step")
    elif kind == "wrong_len":
        grp["step"] = np.arange(n + 1)
    elif kind == "float":
        grp["step"] = np.arange(n, dtype=np.float64)
    elif kind == "string":
        grp["step"] = np.array([b"a"] * max(n, 1))
    elif kind == "dangling":
        grp["step"] = h5py.SoftLink("/nowhere")
    elif kind == "loop":
        grp["step"] = h5py.SoftLink(f"{grp.name}/step")
    elif kind == "huge":
        grp.create_dataset("step", shape=(10**12,), maxshape=(None,), chunks=(1024,),
                           dtype=np.int64)
    t = s["time"]
    if t == "ok":
        if kind == "fixed":
            grp["time"] = np.float64(0.5)
            grp["time"].attrs["offset"] = s["offset"]
        else:
            grp["time"] = np.arange(n, dtype=np.float64)
        grp["time"].attrs["unit"] = "ps"
    elif t == "wrong_len":
        grp["time"] = np.arange(n + 2, dtype=np.float64)
    elif t == "string":
        grp["time"] = np.array([b"t"] * max(n, 1))
    elif t == "scalar":
        grp["time"] = np.float64(1.0)
    elif t == "huge":
        grp.create_dataset("time", shape=(2**40,), maxshape=(None,), chunks=(4096,),
                           dtype=np.float64)


def _element(parent: h5py.Group, el: dict[str, Any], marker: str, used: set[str]) -> None:
    name = el["name"]
    if name in used:
        return
    used.add(name)
    rng = np.random.default_rng(el["seed"])
    if _link(parent, name, el["link"], "/h5md"):
        return
    shape = tuple(el["shape"])
    if el["td"]:
        grp = parent.create_group(name)
        if not _link(grp, "value", el["value_link"], grp.name):
            dset = _dataset(grp, "value", el, shape, rng)
            _attrs(dset, el, marker)
        _sampling(grp, el["sampling"], shape[0] if shape else 1, rng)
    else:
        dset = _dataset(parent, name, el, shape, rng)
        _attrs(dset, el, marker)


def _attrs(dset: h5py.Dataset, el: dict[str, Any], marker: str) -> None:
    import pickle

    if el["unit"] is not None:
        dset.attrs["unit"] = el["unit"]
    if el["pickle_attr"]:
        dset.attrs["payload"] = np.void(pickle.dumps(_Boom(marker)))
        dset.attrs["unit_pickled"] = pickle.dumps(_Boom(marker), protocol=0)


def build(path: str, spec: dict[str, Any]) -> None:
    """Write the file described by ``spec`` (drawn from :data:`file_spec`)."""
    marker = str(Path(path).with_suffix(".pwned"))
    sibling = Path(path).parent / "sibling.h5"
    if not sibling.exists():
        with h5py.File(sibling, "w") as f:
            f["data"] = np.arange(12.0).reshape(4, 1, 3)
    with h5py.File(path, "w", libver=spec["libver"]) as f:
        if spec["h5md"] == "ok":
            h = f.create_group("h5md")
            if spec["version"] is not None:
                h.attrs["version"] = spec["version"]
            a = spec["author"]
            if a == "ok":
                h.create_group("author").attrs["name"] = "fuzz"
            elif a == "dataset":
                h["author"] = 1
            elif a != "missing":
                _link(h, "author", a, "/")
        elif spec["h5md"] == "dataset":
            f["h5md"] = np.int32(1)
        elif spec["h5md"] == "dangling":
            f["h5md"] = h5py.SoftLink("/missing")
        if spec["particles"] == "dataset":
            f["particles"] = np.zeros(3)
        elif spec["particles"] == "loop":
            f["particles"] = h5py.SoftLink("/particles")
        elif spec["particles"] == "group":
            p = f.create_group("particles")
            for g in spec["groups"]:
                if g["name"] in p:
                    continue
                if g["kind"] == "dataset":
                    p[g["name"]] = np.zeros(2)
                    continue
                if g["kind"] in ("dangling", "external"):
                    _link(p, g["name"], g["kind"], "/")
                    continue
                grp = p.create_group(g["name"])
                used: set[str] = set()
                for el in g["elements"]:
                    _element(grp, el, marker, used)
                b = g["box"]
                if b is not None and "box" not in grp:
                    bx = grp.create_group("box")
                    for key in ("dimension", "boundary"):
                        if b[key] is not None:
                            if b["as_dataset"]:
                                bx[key] = b[key]
                            else:
                                bx.attrs[key] = b[key]
                    if b["edges"] is not None:
                        _element(bx, dict(b["edges"], name="edges"), marker, set())
        if spec["observables"] or spec["obs_cycle"]:
            o = f.create_group("observables")
            used = set()
            for el in spec["observables"]:
                _element(o, el, marker, used)
            if spec["obs_cycle"]:
                sub = o.create_group("sub")
                sub["back"] = o
        par = spec["parameters"]
        if par != "none":
            pg = f.create_group("parameters")
            if par == "small":
                pg["t"] = 300.0
            elif par == "huge":
                pg.create_dataset("big", shape=(10**11,), maxshape=(None,), chunks=(10**5,),
                                  dtype="f8")
            elif par == "pickled":
                import pickle

                pg["blob"] = np.void(pickle.dumps(_Boom(marker)))
            elif par == "vlen":
                pg["names"] = np.array(["a", "bb"], dtype=object).astype(h5py.string_dtype())
            elif par == "cycle":
                pg["self"] = pg
    if "unknown_filter" in json.dumps(spec, default=str):
        _patch_lzf(path)


def _patch_lzf(path: str) -> None:
    """Turn every LZF filter entry into an unregistered filter id (an unknown filter)."""
    raw = bytearray(Path(path).read_bytes())
    start = 0
    while (i := raw.find(b"lzf\x00", start)) >= 0:
        start = i + 1
        if i >= 8 and raw[i - 8: i - 6] == struct.pack("<H", 32000):
            raw[i - 8: i - 6] = struct.pack("<H", 32767)
    Path(path).write_bytes(bytes(raw))


# ----------------------------------------------------------------------------- worker


def _outcome(path: str) -> dict[str, Any]:
    """Open ``path`` every way a user would; return the outcome class and details."""
    import xarray as xr

    from h5mdx.errors import H5MDReadError
    from h5mdx.format.h5md import scan

    def classify(err: BaseException) -> str:
        name = type(err).__name__
        if name == "ValueError" and ("choose one with group=" in str(err)
                                     or "open one of its groups" in str(err)):
            return "ok"  # the engine asks which group: a clear answer
        return name

    steps = []
    try:
        info = scan(path)
        groups = [f"particles/{g}" for g in info.particles]
        if info.observables:
            groups.append("observables")
        for g in groups[:3]:
            with xr.open_dataset(path, engine="h5md", group=g) as ds:
                for name in list(ds.variables)[:8]:
                    var = ds[name].variable
                    try:
                        var[tuple(slice(0, 2) for _ in var.dims)].values  # noqa: B018
                    except H5MDReadError:
                        steps.append("read_error")
        tree = xr.open_datatree(path, engine="h5md")
        tree.close()
    except Exception as err:  # noqa: BLE001 - classified and reported
        msg = str(err)
        return {"class": classify(err), "msg": msg[:300], "steps": steps}
    try:
        xr.open_datatree(path, engine="h5md", strict=True).close()
    except Exception as err:  # noqa: BLE001 - classified and reported
        if classify(err) != "H5MDFormatError":
            return {"class": f"strict {classify(err)}", "msg": str(err)[:300], "steps": steps}
    return {"class": "ok", "steps": steps}


def worker_main() -> None:
    """Read file paths from stdin, write one JSON outcome per line to stdout."""
    import warnings

    warnings.simplefilter("ignore")
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        t0 = time.perf_counter()
        res = _outcome(path)
        res["seconds"] = time.perf_counter() - t0
        marker = Path(path).with_suffix(".pwned")
        res["pwned"] = marker.exists()
        out.write(json.dumps(res) + "\n")
        out.flush()


class Worker:
    """A long-lived worker process; restarted after a crash or a hang."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
            OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import test_reliability_fuzz as t; t.worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env, bufsize=1,
        )

    def run(self, path: str, timeout: float = CASE_TIMEOUT) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        # the first case also pays for the imports
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 20)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            code = self.proc.poll()
            self.close()
            self.restarts += 1
            if code is None:
                return {"class": "hang", "msg": f"no answer within {timeout} s"}
            return {"class": "crash", "msg": f"worker died with exit code {code}"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


# ----------------------------------------------------------------------------- the test


def _record(section: str, data: dict[str, Any]) -> None:
    out = os.environ.get("H5MDX_RELIABILITY_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"section": section, **data}) + "\n")


@pytest.fixture(scope="module")
def fuzz_state():
    state = {"worker": Worker(), "counts": collections.Counter(), "n": 0, "seconds": 0.0,
             "dir": Path(tempfile.mkdtemp(prefix="h5mdx-fuzz-")), "built": 0,
             "unbuildable": collections.Counter(), "messages": collections.Counter()}
    yield state
    state["worker"].close()
    shutil.rmtree(state["dir"], ignore_errors=True)


@settings(max_examples=N_EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(spec=file_spec)
def test_fuzz_hostile_files(fuzz_state, spec):
    state = fuzz_state
    state["n"] += 1
    path = str(state["dir"] / f"case{state['n'] % 50}.h5md")
    for stale in (path, str(Path(path).with_suffix(".pwned"))):
        if os.path.exists(stale):
            os.remove(stale)
    try:
        build(path, spec)
    except (ValueError, TypeError, OSError, KeyError, RuntimeError) as err:
        # h5py itself refuses to write some combinations (e.g. chunks on a 0-size axis)
        state["unbuildable"][f"{type(err).__name__}: {str(err)[:60]}"] += 1
        return
    state["built"] += 1
    t0 = time.perf_counter()
    res = state["worker"].run(path)
    state["seconds"] += time.perf_counter() - t0
    state["counts"][res["class"]] += 1
    state["messages"][res.get("msg", "ok")[:110]] += 1
    if res.get("steps"):
        state["counts"]["read_error_on_slice"] += 1
    assert not res.get("pwned"), "file content was unpickled"
    if res["class"] not in ALLOWED:
        keep = Path(tempfile.gettempdir()) / "h5mdx-fuzz-failure.h5md"
        shutil.copy(path, keep)
        pytest.fail(f"{res['class']}: {res.get('msg')} (file kept at {keep}; spec {spec})")


def test_fuzz_report(fuzz_state):
    """Runs after the fuzz test (same module): print and record the outcome counts.

    Run alone (``pytest -k fuzz_report``) it runs the fuzz first.
    """
    if fuzz_state["n"] == 0:
        test_fuzz_hostile_files(fuzz_state)
    counts = dict(fuzz_state["counts"])
    total = fuzz_state["n"]
    print(f"\nfuzz: {fuzz_state['built']} generated files ({total} examples), outcomes {counts}, "
          f"{fuzz_state['seconds']:.1f} s in the worker, {fuzz_state['worker'].restarts} restarts")
    if os.environ.get("H5MDX_FUZZ_VERBOSE"):
        for msg, n in fuzz_state["messages"].most_common(40):
            print(n, msg)
        print(fuzz_state["unbuildable"])
    _record("fuzz", {"files": fuzz_state["built"], "examples": total,
                     "unbuildable": sum(fuzz_state["unbuildable"].values()), "outcomes": counts,
                     "worker_seconds": round(fuzz_state["seconds"], 2),
                     "worker_restarts": fuzz_state["worker"].restarts})
    assert fuzz_state["built"] >= MIN_FILES
    assert not (set(counts) - ALLOWED - {"read_error_on_slice"})


if __name__ == "__main__":
    worker_main()
