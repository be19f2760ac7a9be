"""No reach outside the file unless asked, and no code execution from file content."""

from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError
from h5mdx.testing import write_h5md

SRC = Path(__file__).resolve().parents[2] / "src" / "h5mdx"
SCAN = sorted((SRC / "format" / "h5md").glob("*.py"))  # the scan's modules
ENGINE = [*(p.relative_to(SRC).as_posix() for p in SCAN), "engine/backend.py",
          "engine/arrays.py", "engine/assembly.py", "engine/files.py", "engine/groups.py",
          "engine/topology.py", "format/units.py", "format/schema.py", "engine/chunking.py",
          "engine/live.py", "errors.py"]


def _base(path, n=4):
    return write_h5md(path, particles={"g": {"position": dict(
        value=np.arange(n * 6, dtype=np.float64).reshape(n, 2, 3), step=np.arange(n))}})


def _other(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["v"] = np.full((4, 2, 3), 7.0)
        f["step"] = np.arange(4)
        f["mass"] = np.array([12.0, 16.0])
    return other


def _refused(path, what, part):
    """Without allow_external the part reaching into another file is left out, with one
    warning naming the file and allow_external; the rest opens; strict=True refuses."""
    with pytest.warns(H5MDConformanceWarning, match=what) as record:
        ds = xr.open_dataset(path, engine="h5md")
    [message] = [str(w.message) for w in record if what in str(w.message)]
    assert "allow_external=True" in message and str(path) in message
    assert "left out" in message
    with ds:
        assert part not in ds.variables
        np.testing.assert_array_equal(ds.position.values, np.arange(24.0).reshape(4, 2, 3))
    with pytest.raises(H5MDFormatError, match=what) as err:
        xr.open_dataset(path, engine="h5md", strict=True)
    assert "allow_external=True" in str(err.value)


def test_external_link_needs_opt_in(tmp_path):
    other = _other(tmp_path)
    path = _base(tmp_path / "elink.h5md")
    with h5py.File(path, "a") as f:
        g = f.create_group("particles/g/velocity")
        g["value"] = h5py.ExternalLink(str(other), "/v")
        g["step"] = h5py.ExternalLink(str(other), "/step")
    _refused(path, "external link", "velocity")
    with xr.open_dataset(path, engine="h5md", allow_external=True) as ds:
        np.testing.assert_array_equal(ds.velocity.values, np.full((4, 2, 3), 7.0))
    tree = xr.open_datatree(path, engine="h5md", allow_external=True)
    assert "velocity" in tree["particles/g"]
    tree.close()
    with pytest.raises(H5MDFormatError, match="allow_external"):
        xr.open_datatree(path, engine="h5md", strict=True)
    # a string is truthy: scan(path, allow_external="no") followed the link
    from h5mdx.format.h5md import free_form, scan, scan_free_form

    for call in (lambda: scan(path, allow_external="no"),
                 lambda: free_form(path, "particles", allow_external="no"),
                 lambda: scan_free_form(path, "particles", allow_external="no")):
        with pytest.raises(TypeError, match="allow_external= takes True or False, not 'no'"):
            call()


def test_soft_link_through_external_link(tmp_path):
    other = _other(tmp_path)
    path = _base(tmp_path / "soft.h5md")
    with h5py.File(path, "a") as f:
        f["hidden"] = h5py.ExternalLink(str(other), "/")
        f["particles/g/mass"] = h5py.SoftLink("/hidden/mass")
    _refused(path, "another file", "mass")
    with xr.open_dataset(path, engine="h5md", allow_external=True) as ds:
        np.testing.assert_array_equal(ds.mass.values, [12.0, 16.0])


def test_external_raw_data_needs_opt_in(tmp_path):
    raw = tmp_path / "raw.bin"
    data = np.arange(8, dtype="<f8")
    raw.write_bytes(data.tobytes())
    path = _base(tmp_path / "ext.h5md")
    with h5py.File(path, "a") as f:
        f["particles/g"].create_dataset("charge", shape=(2,), dtype="<f8",
                                        external=[(str(raw), 0, 16)])
    _refused(path, "external files", "charge")
    with xr.open_dataset(path, engine="h5md", allow_external=True) as ds:
        np.testing.assert_array_equal(ds.charge.values, data[:2])


def test_virtual_dataset_from_other_file_needs_opt_in(tmp_path):
    other = _other(tmp_path)
    path = _base(tmp_path / "vds.h5md")
    with h5py.File(path, "a") as f:
        layout = h5py.VirtualLayout(shape=(4, 2, 3), dtype="f8")
        layout[:] = h5py.VirtualSource(str(other), "v", shape=(4, 2, 3))
        g = f.create_group("particles/g/force")
        g.create_virtual_dataset("value", layout)
        g["step"] = f["particles/g/position/step"]
    _refused(path, "virtual dataset", "force")
    with xr.open_dataset(path, engine="h5md", allow_external=True) as ds:
        np.testing.assert_array_equal(ds.force.values, np.full((4, 2, 3), 7.0))


def test_virtual_dataset_within_the_file_is_fine(tmp_path):
    path = _base(tmp_path / "vds_self.h5md")
    with h5py.File(path, "a") as f:
        layout = h5py.VirtualLayout(shape=(4, 2, 3), dtype="f8")
        layout[:] = h5py.VirtualSource(".", "particles/g/position/value", shape=(4, 2, 3))
        g = f.create_group("particles/g/force")
        g.create_virtual_dataset("value", layout)
        g["step"] = f["particles/g/position/step"]
    with xr.open_dataset(path, engine="h5md") as ds:
        np.testing.assert_array_equal(ds.force.values, ds.position.values)


def test_allow_external_is_an_engine_parameter():
    from h5mdx.engine.backend import H5MDBackendEntrypoint

    assert "allow_external" in H5MDBackendEntrypoint.open_dataset_parameters


class _Boom:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_content_is_never_unpickled(tmp_path):
    marker = tmp_path / "pwned"
    blob = pickle.dumps(_Boom(str(marker)))
    path = _base(tmp_path / "pickle.h5md")
    with h5py.File(path, "a") as f:
        f["particles/g/position/value"].attrs["unit"] = pickle.dumps(_Boom(str(marker)), 0)
        f["particles/g/position/value"].attrs["opaque"] = np.void(blob)
        text = pickle.dumps(_Boom(str(marker)), 0)
        f["particles/g"].create_dataset("species", data=[text, text],
                                        dtype=h5py.string_dtype("ascii"))
        par = f.create_group("parameters")
        par["blob"] = np.void(blob)
        par["text"] = pickle.dumps(_Boom(str(marker)), 0)
    for call in (lambda: xr.open_dataset(path, engine="h5md"),
                 lambda: xr.open_datatree(path, engine="h5md")):
        try:
            obj = call()
            obj.load()
            obj.close()
        except (H5MDFormatError, ValueError):
            pass
    assert not marker.exists()


BANNED_MODULES = {"pickle", "cloudpickle", "marshal", "shelve", "dill", "importlib", "joblib"}
BANNED_NAMES = {"eval", "exec", "compile", "__import__"}  # builtins that run code
BANNED_METHODS = {"loads", "load"}  # pickle.loads, np.load(..., allow_pickle), yaml.load


@pytest.mark.parametrize("name", ENGINE)
def test_engine_source_never_unpickles_or_evaluates(name):
    """Grep-level (AST) check: no unpickling or evaluation anywhere in the engine."""
    import ast

    tree = ast.parse((SRC / name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & BANNED_MODULES, name
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in BANNED_MODULES, name
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                assert func.id not in BANNED_NAMES, f"{name}:{node.lineno} calls {func.id}"
            elif isinstance(func, ast.Attribute):
                assert func.attr not in BANNED_METHODS, f"{name}:{node.lineno} .{func.attr}()"
            for kw in node.keywords:
                if kw.arg == "allow_pickle":
                    assert isinstance(kw.value, ast.Constant) and kw.value.value is False


@pytest.mark.parametrize("how", ["external link", "soft link through one"])
def test_parameters_in_another_file_are_not_served_without_opt_in(tmp_path, how):
    """/parameters an external link (or a soft link through one): the scan left it out
    and warned so, but the tree served its groups and attributes from the other file all
    the same (``thermostat``, ``cutoff``). Now nothing of it without allow_external; with
    it, all of it; and an open of the group says what to pass."""
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["parameters/force_field/epsilon"] = np.array([0.1, 0.2])
        f["parameters"].attrs["thermostat"] = "nose-hoover"
        f["parameters/force_field"].attrs["cutoff"] = 1.2
    path = _base(tmp_path / "par.h5md")
    with h5py.File(path, "a") as f:
        if how == "external link":
            f["parameters"] = h5py.ExternalLink(str(other), "/parameters")
        else:
            f["hidden"] = h5py.ExternalLink(str(other), "/")
            f["parameters"] = h5py.SoftLink("/hidden/parameters")
    with pytest.warns(H5MDConformanceWarning, match="allow_external=True"):
        tree = xr.open_datatree(path, engine="h5md")
    with tree:
        assert "parameters" not in tree.children
        np.testing.assert_array_equal(tree["particles/g"].position.values,
                                      np.arange(24.0).reshape(4, 2, 3))
    with xr.open_datatree(path, engine="h5md", allow_external=True) as tree:
        assert tree["parameters"].attrs == {"thermostat": "nose-hoover"}
        assert tree["parameters/force_field"].attrs == {"cutoff": 1.2}
        np.testing.assert_array_equal(tree["parameters/force_field"].epsilon, [0.1, 0.2])
    with pytest.raises(H5MDFormatError, match=r"\[/parameters\].*allow_external=True"):
        xr.open_dataset(path, engine="h5md", group="parameters/force_field")
