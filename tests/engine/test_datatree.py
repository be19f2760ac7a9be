"""xr.open_datatree(..., engine="h5md"): subtrees, /parameters, attributes, links."""

from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError
from h5mdx.testing import write_h5md

FILE_ATTRS = {"h5md_version": "1.1", "author_name": "h5mdx tests",
              "creator_name": "h5mdx.testing", "creator_version": "0"}


@pytest.fixture
def small(tmp_path):
    """A particles group, observables with a subgroup, /parameters with a subgroup."""
    frames = {"step": np.arange(3), "time": np.arange(3.0)}
    path = write_h5md(
        tmp_path / "small.h5",
        {"all": {"position": {"value": np.arange(36, dtype="f4").reshape(3, 4, 3), **frames}}},
        observables={"energy": {"value": np.arange(3.0), **frames},
                     "sub/temp": {"value": np.arange(3.0) + 300, **frames}},
        parameters={"a": 1.5},
    )
    with h5py.File(path, "a") as f:
        f["parameters"].create_group("run").create_dataset("b", data=2.5)
        f["observables"].attrs["note"] = "obs"
    return path


def _said(record):
    """What each warning of ``record`` says after the file's name (``path]: ...``)."""
    return [str(w.message).split(" [", 1)[1] for w in record]


@pytest.mark.parametrize("group", ["observables", "particles", "particles/all", "parameters",
                                   "parameters/run", "observables/sub"])
def test_a_subtree_root_holds_the_file_attributes(small, group):
    """group= below the root gave a tree whose root lacked the file's attributes
    (h5md_version, author, creator, source), which the whole tree's root has."""
    with xr.open_datatree(small, engine="h5md") as whole:
        assert {k: whole.attrs[k] for k in FILE_ATTRS} == FILE_ATTRS
    with xr.open_datatree(small, engine="h5md", group=group) as tree:
        assert {k: tree.attrs.get(k) for k in FILE_ATTRS} == FILE_ATTRS
        assert tree.attrs["source"] == str(small)
        if group == "observables":  # the group's own kept beside them
            assert tree.attrs["note"] == "obs"
            assert tree.attrs["h5md_group"] == "/observables"
            with xr.open_dataset(small, engine="h5md", group=group) as ds:
                assert tree.attrs == ds.attrs
                np.testing.assert_array_equal(tree["energy"].values, ds["energy"].values)


@pytest.mark.parametrize("group", ["parameters", "parameters/run", "extra"])
def test_a_parameters_group_opened_alone_holds_the_file_attributes(small, group):
    """open_dataset(group="parameters") (or a group below it, or a root group H5MD does not
    define) gave the group's own attributes alone, without the file's (h5md_version,
    author, creator, source) that a particles or observables group opened alone carries;
    a group's own attribute of one of those names stays its own."""
    with h5py.File(small, "a") as f:
        f.require_group("extra").create_dataset("c", data=1.0)
        f[group].attrs["creator_name"] = "the group's own"
        f[group].attrs["kind"] = "nvt"
    with xr.open_dataset(small, engine="h5md", group=group) as ds:
        assert ds.attrs == {**FILE_ATTRS, "creator_name": "the group's own", "kind": "nvt",
                            "source": str(small), "h5md_group": f"/{group}"}


def test_an_element_of_parameters_is_one_variable(small):
    """A group of /parameters laid out as an H5MD element (value, step, time) was served
    as three unrelated variables of a group of their own; it is one variable along time,
    with its step, as the observables are (and the other root groups' elements)."""
    with h5py.File(small, "a") as f:
        el = f["parameters"].create_group("thermostat")
        el["value"] = np.array([300.0, 301.0, 302.0])
        el["value"].attrs["unit"] = "K"
        el["step"] = np.array([0, 10, 20])
        el["time"] = np.array([0.0, 0.5, 1.0])
    with xr.open_datatree(small, engine="h5md") as tree:
        assert "thermostat" not in tree["parameters"].children
        par = tree["parameters"]
        np.testing.assert_array_equal(par["thermostat"].values, [300.0, 301.0, 302.0])
        assert par["thermostat"].dims == ("time",)
        assert par["thermostat"].attrs["units"] == "K"
        np.testing.assert_array_equal(par["step"].values, [0, 10, 20])
        np.testing.assert_array_equal(par["time"].values, [0.0, 0.5, 1.0])
        assert float(par["a"]) == 1.5
    with xr.open_dataset(small, engine="h5md", group="parameters") as ds:
        np.testing.assert_array_equal(ds["thermostat"].values, [300.0, 301.0, 302.0])
    with pytest.raises(ValueError, match="it is an H5MD element: the variable 'thermostat' "
                       "of group 'parameters'"):
        xr.open_dataset(small, engine="h5md", group="parameters/thermostat")


def test_a_group_not_found_lists_the_groups_of_parameters(small):
    """The listing of a group= not found named /parameters but none of its groups, which
    the tree holds; an element of /parameters is said to be a variable."""
    with h5py.File(small, "a") as f:
        f["parameters/run/thermostat/tau"] = 0.5
        el = f["parameters"].create_group("ramp")
        el["value"], el["step"] = np.arange(3.0), np.arange(3)
    listing = ("its groups: /particles, /particles/all, /observables, /observables/sub, "
               "/parameters, /parameters/run, /parameters/run/thermostat$")
    for bad in ("nope", "parameters/nope", "observables/nope"):
        with pytest.raises(ValueError, match=f"has no group '{bad}'; {listing}"):
            xr.open_datatree(small, engine="h5md", group=bad)
    with pytest.raises(ValueError, match=r"has no group 'parameters/ramp' \(it is an H5MD "
                       r"element: the variable 'ramp' of group 'parameters'\)"):
        xr.open_datatree(small, engine="h5md", group="parameters/ramp")
    with xr.open_datatree(small, engine="h5md", group="parameters/run/thermostat") as tree:
        assert float(tree["tau"]) == 0.5


def test_a_compound_parameter_is_one_variable_per_field(small):
    """A compound (structured) dataset of /parameters was served as one variable of a
    structured dtype, which netCDF and Zarr refuse; it is one variable per field, said
    once, string fields as text, nested compounds' fields joined, references left out."""
    dt = np.dtype([("x", "f8"), ("name", "S4"), ("v", "f4", (3,)),
                   ("inner", [("a", "i2"), ("b", "f4")]), ("r", h5py.ref_dtype)])
    with h5py.File(small, "a") as f:
        d = np.zeros(2, dtype=dt)
        d["x"], d["name"], d["inner"]["a"] = [1.5, 2.5], [b"ab", b"cd"], [5, 6]
        d["v"] = [[1, 2, 3], [4, 5, 6]]
        d["r"] = f["parameters"].ref
        f["parameters"].create_dataset("comp", data=d)
        f["parameters"].create_dataset("one", data=np.array((7.0, 8), dtype=[("p", "f8"),
                                                                            ("q", "i4")]))
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    messages = [str(w.message) for w in record]
    assert any("[/parameters/comp]: a compound dataset of fields x, name, v, inner, r; "
               "served as one variable per field: comp_x, comp_name, comp_v, comp_inner_a, "
               "comp_inner_b" in m for m in messages)
    assert any("[/parameters/comp]: its field 'r' holds object references" in m
               for m in messages)
    with tree:
        par = tree["parameters"]
        np.testing.assert_array_equal(par["comp_x"].values, [1.5, 2.5])
        assert par["comp_x"].dims == ("comp_dim_0",)
        assert par["comp_name"].values.tolist() == ["ab", "cd"]
        np.testing.assert_array_equal(par["comp_v"].values, [[1, 2, 3], [4, 5, 6]])
        assert par["comp_v"].dims == ("comp_dim_0", "comp_v_dim_1")
        np.testing.assert_array_equal(par["comp_inner_a"].values, [5, 6])
        assert "comp_r" not in par and "comp" not in par
        assert float(par["one_p"]) == 7.0 and int(par["one_q"]) == 8
        assert float(par["a"]) == 1.5
        par.to_dataset().to_netcdf(str(small) + ".nc")  # a structured dtype refused this
    # H5MD leaves /parameters free: no departure, strict=True warns of it too
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md", strict=True)
    assert len(record) == 3 and any("[/parameters/comp]: a compound" in str(w.message)
                                    for w in record)
    with tree:
        np.testing.assert_array_equal(tree["parameters/comp_x"].values, [1.5, 2.5])


def test_a_compound_parameter_too_large_to_read_at_open_is_read_lazily(small):
    """A compound parameter of more than 1 MiB was left out ("too large to read"); its
    fields are variables read when indexed, named as a small one's, each field alone
    (also through dask, and after pickling); a text field, fixed-size or of variable
    length, is decoded when read (it was left out, where a small compound's is served);
    a field of references is left out, said."""
    from h5mdx.engine.arrays import backend_array

    dt = np.dtype([("x", "f8"), ("n", "i4"), ("v", "f4", (3,)), ("name", "S8"),
                   ("inner", [("a", "i2"), ("b", "f8")]), ("note", h5py.string_dtype()),
                   ("ref", h5py.ref_dtype)])
    n = 40_000  # 58 bytes each: 2.32 MB
    d = np.zeros(n, dtype=dt)
    d["x"], d["n"], d["inner"]["b"] = np.arange(n) * 0.5, np.arange(n), -np.arange(n)
    d["v"] = np.arange(3 * n).reshape(n, 3)
    d["name"] = [f"atöm{i % 7}".encode() for i in range(n)]
    d["note"] = [f"n{i}" for i in range(n)]
    d["ref"] = h5py.Reference()
    with h5py.File(small, "a") as f:
        f["parameters"].create_dataset("big", data=d, chunks=(1000,))
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(small, engine="h5md", group="parameters")
    assert sorted(_said(record)) == [
        "/parameters/big]: a compound dataset of fields x, n, v, name, inner, note, ref; "
        "served as one variable per field: big_x, big_n, big_v, big_name, big_note, "
        "big_inner_a, big_inner_b",
        "/parameters/big]: its field 'ref' is of type object, and the dataset (2320000 "
        "bytes) too large to read at open; field left out"]
    with ds:
        assert backend_array(ds["big_name"].variable._data) is not None  # not read at open
        assert ds["big_name"].dtype == np.dtype("U8") and ds["big_note"].dtype == object
        assert ds["big_name"][8].item() == "atöm1" and ds["big_note"][-1].item() == "n39999"
        np.testing.assert_array_equal(ds["big_name"].isel(big_dim_0=[0, 3]).values,
                                      ["atöm0", "atöm3"])
        np.testing.assert_array_equal(ds["big_note"][:2].values, ["n0", "n1"])
        assert backend_array(ds["big_x"].variable._data) is not None  # not read at open
        assert ds["big_v"].dims == ("big_dim_0", "big_v_dim_1")
        assert ds["big_v"].dtype == np.float32 and ds["big_n"].dtype == np.int32
        np.testing.assert_array_equal(ds["big_x"].values, d["x"])
        np.testing.assert_array_equal(ds["big_v"][5:7].values, d["v"][5:7])
        assert float(ds["big_v"][3, 1]) == 10.0
        np.testing.assert_array_equal(ds["big_v"].isel(big_v_dim_1=[0, 2])[10].values,
                                      [30.0, 32.0])
        np.testing.assert_array_equal(ds["big_inner_b"].isel(big_dim_0=[1, 5]).values,
                                      [-1.0, -5.0])
        assert "big_ref" not in ds and "big" not in ds
    with pytest.warns(H5MDConformanceWarning):
        lazy = xr.open_dataset(small, engine="h5md", group="parameters", chunks={})
    with lazy:
        assert lazy["big_note"][5:7].values.tolist() == ["n5", "n6"]
        assert lazy["big_name"][-1].values.item() == f"atöm{(n - 1) % 7}"
        assert int(lazy["big_n"].sum()) == n * (n - 1) // 2
        assert float(lazy["big_x"].sum() + lazy["big_inner_b"].sum()) == n * (n - 1) / 4 \
            - n * (n - 1) / 2
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(lazy))["big_x"][:3], [0, .5, 1])


def _opaque_attr(obj, name):
    """An attribute of HDF5's opaque type, which h5py has no conversion for."""
    kind = h5py.h5t.create(h5py.h5t.OPAQUE, 4)
    kind.set_tag(b"a tag")
    h5py.h5a.create(obj.id, name.encode(), kind, h5py.h5s.create(h5py.h5s.SCALAR))


def test_an_attribute_that_cannot_be_read_is_warned_about(small):
    """An attribute h5py cannot read (an opaque one) was left out in silence; it is left
    out with one warning naming the file, the object and the attribute, and refused with
    strict=True where H5MD defines the group (not in /parameters, which is free)."""
    with h5py.File(small, "a") as f:
        for path in ("parameters", "parameters/a", "observables", "observables/energy/value"):
            _opaque_attr(f[path], "blob")
        f["parameters"].attrs["kept"] = 3
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    found = sorted(_said(record))
    why = ("its attribute 'blob' cannot be read (OSError: Unable to read attribute (no "
           "appropriate function for conversion path)); attribute left out")
    assert found == sorted(f"{p}]: {why}" for p in (
        "/observables", "/observables/energy/value", "/parameters", "/parameters/a"))
    assert all(str(w.message).startswith(f"{small} [") for w in record)
    with tree:
        assert tree["parameters"].attrs == {"kept": 3}
        assert float(tree["parameters/a"]) == 1.5
        np.testing.assert_array_equal(tree["observables/energy"].values, [0.0, 1.0, 2.0])
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(small, engine="h5md", group="parameters")
    assert sorted(_said(record)) == [
        f"/parameters/a]: {why}", f"/parameters]: {why}"]
    with ds:
        assert ds.attrs == {**FILE_ATTRS, "source": str(small), "kept": 3,
                            "h5md_group": "/parameters"}
    with pytest.raises(H5MDFormatError, match=r"\[/observables/energy/value\]: its attribute "
                       "'blob' cannot be read"):
        xr.open_datatree(small, engine="h5md", strict=True)


def test_a_particles_group_reference_to_no_particles_group_is_warned_about(small):
    """A connectivity element's particles_group pointing to a group that is no particles
    group (or a null reference) was served without a word; H5MD requires a reference to a
    particles group: warned about naming the path, refused with strict=True."""
    with h5py.File(small, "a") as f:
        con = f.create_group("connectivity")
        con["bonds"] = np.array([[0, 1], [1, 2]])
        con["bonds"].attrs["particles_group"] = f["observables"].ref
        con["angles"] = np.array([[0, 1, 2]])
        con["angles"].attrs["particles_group"] = h5py.Reference()  # null
        con["pairs"] = np.array([[0, 3]])
        con["pairs"].attrs["particles_group"] = f["particles/all"].ref  # right
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    assert sorted(_said(record)) == [
        "/connectivity/angles]: 'particles_group' is a null or dangling object reference "
        "(H5MD requires a reference to a particles group); served as stored",
        "/connectivity/bonds]: 'particles_group' points to /observables, which is no "
        "particles group h5mdx reads (H5MD requires a reference to a particles group); "
        "served as stored"]
    with tree:
        con = tree["connectivity"]
        assert con["bonds"].attrs["particles_group"] == "/observables"
        assert con["pairs"].attrs["particles_group"] == "/particles/all"
        np.testing.assert_array_equal(con["bonds"].values, [[0, 1], [1, 2]])
    with pytest.raises(H5MDFormatError, match=r"\[/connectivity/angles\]: 'particles_group' "
                       "is a null"):
        xr.open_datatree(small, engine="h5md", strict=True)


def test_links_at_the_root_that_serve_nothing_are_warned_about(small, tmp_path):
    """An external link or a dangling soft link at the file's root (beside H5MD's groups)
    was left out of the tree without a word, and group= of it said only "no group"; a soft
    link to a group of the file stays silent (that group is served under its own name)."""
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["fields/rho"] = np.arange(4.0)
    with h5py.File(small, "a") as f:
        f["gone"] = h5py.SoftLink("/nowhere")
        f["fields"] = h5py.ExternalLink(str(other), "/fields")
        f["alias"] = h5py.SoftLink("/parameters")
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    assert sorted(_said(record)) == [
        f"/fields]: an external link to {other}:/fields, which h5mdx does not follow at "
        "the file's root; left out",
        "/gone]: a dangling soft link to /nowhere, which h5mdx does not follow at the "
        "file's root; left out"]
    with tree:
        assert {"/parameters", "/observables"} <= set(tree.groups)
        assert not {"/gone", "/fields", "/alias"} & set(tree.groups)
        assert float(tree["parameters/a"]) == 1.5
    with pytest.raises(ValueError, match=r"has no group 'fields' \(an external link to "
                       rf"{other}:/fields, which h5mdx does not follow\); its groups: "):
        xr.open_datatree(small, engine="h5md", group="fields")
    with xr.open_datatree(small, engine="h5md", group="observables") as sub:  # not said
        np.testing.assert_array_equal(sub["energy"].values, [0.0, 1.0, 2.0])
    # opted in, an external link at the root is the way soft links take to the other
    # file's groups: the dangling one alone is said
    with h5py.File(small, "a") as f:
        f["other"] = h5py.SoftLink("/fields/rho")
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md", allow_external=True)
    tree.close()
    assert _said(record) == [
        "/gone]: a dangling soft link to /nowhere, which h5mdx does not follow at the "
        "file's root; left out"]


def test_drop_variables_drops_parameters_in_the_tree(small):
    """drop_variables= left the parameters named in every node of open_datatree, where
    open_dataset(group="parameters") drops them; now dropped in each node, as elements."""
    with xr.open_datatree(small, engine="h5md", drop_variables=["a", "b", "energy"]) as tree:
        assert "a" not in tree["parameters"].variables
        assert "b" not in tree["parameters/run"].variables
        assert "energy" not in tree["observables"].variables
        np.testing.assert_array_equal(tree["observables/sub/temp"].values, [300, 301, 302])
    with xr.open_datatree(small, engine="h5md", group="parameters",
                          drop_variables="b") as tree:
        assert float(tree["a"]) == 1.5 and "b" not in tree["run"].variables
    with xr.open_dataset(small, engine="h5md", group="parameters", drop_variables="a") as ds:
        assert "a" not in ds.variables


def test_open_dataset_lists_an_element_of_parameters_as_no_group(small):
    """open_dataset's listing of the groups of a file (group= not found) named a group
    of /parameters laid out as an element, which no open finds (it is a variable of the
    group above it); that group is listed in its place."""
    with h5py.File(small, "a") as f:
        f["parameters/run/ramp/value"] = np.arange(3.0)
        f["parameters/run/ramp/step"] = np.arange(3)
        f["parameters/deep/ramp/value"] = np.arange(2.0)
        f["parameters/deep/ramp/step"] = np.arange(2)
    with pytest.raises(ValueError) as err:
        xr.open_dataset(small, engine="h5md", group="nope")
    assert str(err.value).endswith("available: 'particles/all', 'observables', "
                                   "'observables/sub', 'parameters', 'parameters/deep', "
                                   "'parameters/run'")
    with xr.open_dataset(small, engine="h5md", group="parameters/deep") as ds:
        np.testing.assert_array_equal(ds["ramp"].values, [0.0, 1.0])
    with xr.open_dataset(small, engine="h5md", group="parameters/run") as ds:
        np.testing.assert_array_equal(ds["ramp"].values, [0.0, 1.0, 2.0])
        assert float(ds["b"]) == 2.5


def test_a_group_named_as_a_variable_of_its_parent_is_renamed(small):
    """A group named as a variable of its parent (/observables/time beside the
    observables' time coordinate) made xarray refuse the whole file with a bare
    KeyError; it is served as the node '<name>_group', said once."""
    with h5py.File(small, "a") as f:
        t = f["observables"].create_group("time")
        t["drift/value"], t["drift/step"] = np.array([0.5, 0.25, 0.125]), np.arange(3)
        t["drift/time"] = np.arange(3.0)
        t["drift/time"].attrs["unit"] = "ps"  # the observables' time: no dim renamed
        t.create_group("deeper")["n"] = 4
        f["parameters/ramp/value"], f["parameters/ramp/step"] = np.arange(3.0), np.arange(3)
        f["parameters/step/dt"] = 0.002
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    assert sorted(_said(record)) == [
        "/observables/time]: the group's name is that of a variable of /observables; "
        "served as the node 'time_group'",
        "/parameters/step]: the group's name is that of a variable of /parameters; served "
        "as the node 'step_group'"]
    with tree:
        np.testing.assert_array_equal(tree["observables/time_group/drift"].values,
                                      [0.5, 0.25, 0.125])
        assert tree["observables/time_group"].attrs["h5md_group"] == "/observables/time"
        np.testing.assert_array_equal(tree["observables/time"].values, [0.0, 1.0, 2.0])
        assert float(tree["parameters/step_group/dt"]) == 0.002
        np.testing.assert_array_equal(tree["parameters/step"].values, [0, 1, 2])
    with pytest.warns(H5MDConformanceWarning, match="served as the node 'time_group'"):
        sub = xr.open_datatree(small, engine="h5md", group="observables")
    with sub:
        assert set(sub.children) == {"sub", "time_group"}
    with xr.open_datatree(small, engine="h5md", group="observables/time") as alone:
        np.testing.assert_array_equal(alone["drift"].values, [0.5, 0.25, 0.125])


def test_h5md_metadata_that_cannot_be_read_is_not_said_missing(small):
    """An /h5md attribute H5MD requires that h5py cannot read (the author's name, the
    version) was reported as missing ("has no 'name' attribute", a minor problem no open
    warned of); it is said to be unreadable, warned about, and refused with strict=True."""
    from h5mdx.format.h5md import scan

    with h5py.File(small, "a") as f:
        del f["h5md/author"].attrs["name"]
        _opaque_attr(f["h5md/author"], "name")
        del f["h5md"].attrs["version"]
        _opaque_attr(f["h5md"], "version")
    why = ("cannot be read (OSError: Unable to read attribute (no appropriate function for "
           "conversion path))")
    said = {(p.path, p.message, p.assumed, p.minor) for p in scan(small).problems}
    assert said == {("/h5md", f"its attribute 'version' {why}", "read as H5MD 1.1", False),
                    ("/h5md/author", f"its attribute 'name' {why}", "not recorded", False)}
    with pytest.warns(H5MDConformanceWarning) as record:
        tree = xr.open_datatree(small, engine="h5md")
    assert len(record) == 2
    with tree:
        assert tree.attrs["h5md_version"] == "1.1" and "author_name" not in tree.attrs
        assert tree.attrs["creator_name"] == "h5mdx.testing"
    with pytest.raises(H5MDFormatError, match=r"\[/h5md\]: its attribute 'version' cannot"):
        xr.open_datatree(small, engine="h5md", strict=True)
