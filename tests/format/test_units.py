"""H5MD unit strings and their conversion to MDAnalysis' base units."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

from h5mdx.errors import H5MDConformanceWarning, H5MDFormatError, H5MDUnitError
from h5mdx.format.units import conversion, parse_unit
from h5mdx.testing import write_h5md


@pytest.mark.parametrize(
    "unit, factor, base",
    [
        ("nm", 10.0, "Angstrom"),
        ("Angstrom", 1.0, "Angstrom"),
        ("A", 1.0, "Angstrom"),
        ("pm", 0.01, "Angstrom"),
        ("fs", 1e-3, "ps"),
        ("ns", 1e3, "ps"),
        ("ps", 1.0, "ps"),
        ("nm ps-1", 10.0, "Angstrom ps-1"),
        ("Angstrom fs-1", 1e3, "Angstrom ps-1"),
        ("kJ mol-1 nm-1", 0.1, "kJ mol-1 Angstrom-1"),
        ("kcal mol-1 Angstrom-1", 4.184, "kJ mol-1 Angstrom-1"),
        ("kJ/(mol*nm)", 0.1, "kJ mol-1 Angstrom-1"),
        ("eV/Angstrom", 96.4853321233, "kJ mol-1 Angstrom-1"),
        ("kJ mol-1", 1.0, "kJ mol-1"),
        ("eV", 96.4853321233, "kJ mol-1"),
        ("u", 1.0, "u"),
        ("nm+3", 1000.0, "Angstrom3"),
        ("K", 1.0, "K"),
        ("kelvin", 1.0, "K"),
        ("bar nm3", 1e5 * 1e-27 * 6.02214076e23 / 1e3, "kJ mol-1"),
        # pint's way of writing powers (found by an audit: once read as factors)
        ("nanometer ** 2", 100.0, "Angstrom2"),
        ("nm**-1", 0.1, "Angstrom-1"),
        ("nm ^ 3", 1000.0, "Angstrom3"),
        ("nanometer / picosecond", 10.0, "Angstrom ps-1"),
        ("kilojoule / mole / nanometer", 0.1, "kJ mol-1 Angstrom-1"),
        ("nm * ps ** -1", 10.0, "Angstrom ps-1"),
        ("10 nm", 100.0, "Angstrom"),
        # the H5MD units module: its Angstrom, its powers of ten, and
        # Boltzmann's constant, which pint took for a kilobyte (x8000)
        ("Ang", 1.0, "Angstrom"),
        ("Ang ps-1", 1.0, "Angstrom ps-1"),
        ("10+3 m", 1e13, "Angstrom"),
        ("10-1 nm", 1.0, "Angstrom"),
        ("kB K", 1.380649e-23 * 6.02214076e23 / 1e3, "kJ mol-1"),
        ("Eh", 2625.4996394799, "kJ mol-1"),
        # UDUNITS' product (CF's unit strings): it was "unknown unit 'nm.ps-1'"
        ("nm.ps-1", 10.0, "Angstrom ps-1"),
        ("kJ.mol-1.nm-1", 0.1, "kJ mol-1 Angstrom-1"),
        ("1.5 nm", 15.0, "Angstrom"),  # a number's "." is no product
        # a power of ten written with ^ or ** ("unknown unit '10^-9'")
        ("10^-9 m", 10.0, "Angstrom"),
        ("10**-12 s", 1.0, "ps"),
        ("10^3 nm", 1e4, "Angstrom"),
        ("100 nm", 1000.0, "Angstrom"),  # a number, not 10 to the power 0
    ],
)
def test_conversion(unit, factor, base):
    got = conversion(unit)
    assert got is not None
    assert got[0] == pytest.approx(factor, rel=1e-9)
    assert got[1] == base


def test_no_base_unit_for_odd_dimensions():
    assert conversion("eV/fs") is None  # energy per time: left as it is


@pytest.mark.parametrize("unit", ["nm 2", "nm*2", "nm * -1", "ps-1 10"])
def test_a_number_after_a_unit_is_refused(unit):
    """A power written apart from its unit is not a factor: refused, not misread."""
    with pytest.raises(H5MDUnitError, match="a number .* after a unit"):
        parse_unit(unit)


@pytest.mark.parametrize(("unit", "bohr"), [("a0", True), ("a0 aut-1", True),
                                           ("nm0", False), ("ps^0", False)])
def test_a_power_of_zero_is_refused(unit, bohr):
    """castep_outputs_tools writes the Bohr radius as ``a0``: under H5MD's grammar ``a``
    to the power 0. It was blamed on ``a`` (a year); ``nm0`` was read as 1, silently."""
    with pytest.raises(H5MDUnitError, match="to the power 0, which is 1") as err:
        parse_unit(unit)
    assert ("the Bohr radius is written bohr" in str(err.value)) == bohr
    assert "year" not in str(err.value)


def test_unknown_unit():
    with pytest.raises(H5MDUnitError, match="blorp"):
        parse_unit("blorp ps-1")


def test_temperature_is_not_an_energy():
    """Issue #12: 300 K opened as 2.494 kJ mol-1; a temperature stays in K."""
    assert parse_unit("K") == (1.0, (0, 0, 0, 0, 1))
    assert conversion("K") == (1.0, "K")
    assert conversion("K ps-1") is None  # no base unit: left as it is


def test_symbols_outside_the_table_come_from_pint():
    pytest.importorskip("pint")
    factor, base = conversion("furlong fortnight-1")
    assert base == "Angstrom ps-1"
    assert factor == pytest.approx(201.1684 * 1e10 / (14 * 86400 * 1e12), rel=1e-6)
    factor, base = conversion("coulomb")  # charge: pint's current x time
    assert base == "e"
    assert factor == pytest.approx(1 / 1.602176634e-19)
    for offset in ("degC", "°C", "degF K-1"):  # an offset unit is never a factor
        with pytest.raises(H5MDUnitError, match="temperature scale with an offset"):
            parse_unit(offset)


def _temperature_file(tmp_path, unit):
    return write_h5md(
        tmp_path / "temp.h5md",
        particles={"g": {"position": dict(value=np.zeros((3, 2, 3)), step=np.arange(3),
                                          unit="nm")}},
        observables={"temperature": dict(value=np.array([300.0, 310.0, 320.0]),
                                         step=np.arange(3), unit=unit)},
    )


def test_temperature_opens_in_kelvin(tmp_path):
    path = _temperature_file(tmp_path, "K")
    with xr.open_dataset(path, engine="h5md", group="observables", convert_units=True) as ds:
        np.testing.assert_array_equal(ds.temperature, [300.0, 310.0, 320.0])
        assert ds.temperature.attrs["units"] == "K"


def test_unknown_unit_left_unconverted_with_a_warning(tmp_path):
    path = _temperature_file(tmp_path, "blorp")
    with pytest.warns(H5MDConformanceWarning,
                      match=r"\[/observables/temperature/value\].*blorp.*left unconverted"):
        ds = xr.open_dataset(path, engine="h5md", group="observables", convert_units=True)
    with ds:
        np.testing.assert_array_equal(ds.temperature, [300.0, 310.0, 320.0])
        assert ds.temperature.attrs["units"] == "blorp"
    with pytest.raises(H5MDFormatError, match=r"temperature/value.*blorp") as err:
        xr.open_dataset(path, engine="h5md", group="observables", convert_units=True,
                        strict=True)
    assert path in str(err.value)
    with h5py.File(path) as f:  # the file itself is left alone
        assert f["observables/temperature/value"].attrs["unit"] == "blorp"


def test_dimensionless():
    assert parse_unit("") == (1.0, (0, 0, 0, 0, 0))


@pytest.mark.parametrize(("unit", "factor", "base"), [
    ("\u00b5m", 1e4, "Angstrom"),  # the micro sign
    ("\u03bcs", 1e6, "ps"),  # the Greek mu
    ("Bohr", 0.529177210903, "Angstrom"),
    ("ANGSTROM", 1.0, "Angstrom"),
    ("Kelvin", 1.0, "K"),
    ("Dalton", 1.0, "u"),
])
def test_symbols_other_writers_use(unit, factor, base):
    got = conversion(unit)
    assert got is not None and got[1] == base
    assert got[0] == pytest.approx(factor)


@pytest.mark.parametrize("unit", ["au", "AU", "a"])
def test_symbols_pint_reads_otherwise_are_refused(unit):
    """pint reads ``au`` as the astronomical unit (1.5e21 times a bohr) and ``a`` as a
    year: refused (left unconverted by the engine), not converted wrongly."""
    with pytest.raises(H5MDUnitError, match="ambiguous"):
        conversion(unit)


def test_converted_times_select_as_written(tmp_path):
    """Times in fs served in ps: 9 fs is 0.009 ps exactly as Python writes it, so
    ``ds.sel(time=0.009)`` finds it (9 * 0.001 gave 0.009000000000000001, a KeyError)."""
    path = tmp_path / "fs.h5md"
    write_h5md(path, {"t": {"position": {"value": np.zeros((4, 2, 3)), "unit": "nm",
                                         "step": np.arange(4), "time": np.arange(4) * 3.0,
                                         "time_unit": "fs"}}})
    with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
        assert ds.time.attrs["units"] == "ps"
        assert list(ds.time.values) == [0.0, 0.003, 0.006, 0.009]
        assert ds.sel(time=0.009).step.item() == 3


@pytest.mark.parametrize(("unit", "factor", "base"), [
    ("g mol-1", 1.0, "u"), ("g/mol", 1.0, "u"), ("amu", 1.0, "u"), ("Da", 1.0, "u"),
    ("amu nm2 ps-2", 1.0, "kJ mol-1"), ("u Angstrom2 ps-2", 0.01, "kJ mol-1"),
    ("g mol-1 nm ps-1", 10.0, "u Angstrom ps-1"),
])
def test_md_mass_units_convert_exactly(unit, factor, base):
    """u is g/mol per particle, as MD programs mean it: a mass of 12 g/mol is 12 u (not
    12.0000000042, CODATA's u being 3.5e-10 below g/mol since the 2019 SI) and GROMACS'
    u nm2 ps-2 is exactly its kJ/mol."""
    assert conversion(unit) == (factor, base)
    assert 12.0 * conversion("g mol-1")[0] == 12.0


def test_box_edges_without_a_unit_beside_converted_positions_are_said_so(tmp_path):
    """Positions in nm, box edges without a unit: convert_units=True scaled the positions
    to Angstrom (x10) and served the edges as stored, in silence: a box a tenth of the
    system's size. Warned once; H5MD's units are optional, so strict
    reads it; without convert_units there is nothing to say."""
    path = str(tmp_path / "mixed.h5md")
    write_h5md(path, {"g": {"position": {"value": np.ones((2, 3, 3)), "step": np.arange(2),
                                         "unit": "nm"}}},
               box={"g": {"edges": {"value": np.array([5.0, 6.0, 7.0])}}})
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md", convert_units=True)
    with ds:
        np.testing.assert_array_equal(ds.position, np.full((2, 3, 3), 10.0))
        np.testing.assert_array_equal(ds.box_edges, [5.0, 6.0, 7.0])
    [said] = [str(w.message) for w in record if "/particles/g/box/edges" in str(w.message)]
    assert "no unit, the positions 'nm'" in said and said.endswith("box edges left unconverted")
    with pytest.warns(H5MDConformanceWarning, match="box edges left unconverted"):
        xr.open_dataset(path, engine="h5md", convert_units=True, strict=True).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        xr.open_dataset(path, engine="h5md").close()


@pytest.mark.parametrize("unit, factor, base", [
    ("\u212b", 1.0, "Angstrom"),  # the Angstrom sign, not the letter Å
    ("A\u030a", 1.0, "Angstrom"),  # A and a combining ring (decomposed, as macOS writes)
    ("nm\u00b2", 100.0, "Angstrom2"),
    ("nm ps\u207b\u00b9", 10.0, "Angstrom ps-1"),
    ("kJ\u00b7mol\u207b\u00b9", 1.0, "kJ mol-1"),
    ("nm ps\u22121", 10.0, "Angstrom ps-1"),  # the minus sign U+2212
    ("\u212a", 1.0, "K"),  # the Kelvin sign
])
def test_unicode_forms_of_units_convert(unit, factor, base):
    """Unit strings typed with Unicode's own forms were 'unknown' and left unconverted
    (positions in 'Å' served as Å beside others converted from nm); now read as the
    ASCII H5MD writes."""
    got = conversion(unit)
    assert got is not None and got[1] == base
    assert got[0] == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("unit, factor, base", [
    ("Angstroms", 1.0, "Angstrom"), ("Ångström", 1.0, "Angstrom"),
    ("ångström2", 1.0, "Angstrom2"), ("KJ/mol", 1.0, "kJ mol-1"),
    ("kj/mol", 1.0, "kJ mol-1"), ("Kcal/mol", 4.184, "kJ mol-1"),
])
def test_units_as_writers_spell_them_convert(unit, factor, base):
    """Spellings of units by hand and by other writers were 'unknown' and left
    unconverted."""
    got = conversion(unit)
    assert got is not None and got[1] == base
    assert got[0] == pytest.approx(factor, rel=1e-12)


def test_positions_in_the_angstrom_sign_open_converted(tmp_path):
    path = write_h5md(tmp_path / "a.h5md", {"all": {"position": dict(
        value=np.full((2, 1, 3), 1.5, np.float32), step=1, time=1.0, unit="nm"),
        "velocity": dict(value=np.full((2, 1, 3), 2.0, np.float32), step=1, time=1.0,
                         unit="\u212b ps\u207b\u00b9")}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", H5MDConformanceWarning)
        with xr.open_dataset(path, engine="h5md", convert_units=True) as ds:
            np.testing.assert_allclose(ds.position, 15.0)
            np.testing.assert_allclose(ds.velocity, 2.0)
            assert ds.velocity.attrs["units"] == "Angstrom ps-1"


def test_a_latin1_unit_is_read_as_latin1_with_a_warning(tmp_path):
    """A unit stored as Latin-1 bytes (b'\\xc5' for Å, b'\\xb5m ps-1' for µm/ps, as older
    writers do) was decoded as UTF-8 with the bad byte replaced: unit '\\ufffd', left
    unconverted beside converted elements. Now read as Latin-1, said once, converted."""
    path = write_h5md(tmp_path / "l1.h5md", {"all": {
        "position": dict(value=np.full((2, 1, 3), 1.5, np.float32), step=1, time=1.0),
        "velocity": dict(value=np.full((2, 1, 3), 2.0, np.float32), step=1, time=1.0)}})
    with h5py.File(path, "a") as f:
        f["particles/all/position/value"].attrs["unit"] = np.bytes_(b"\xc5")
        f["particles/all/velocity/value"].attrs["unit"] = np.bytes_(b"\xb5m ps-1")
    with pytest.warns(H5MDConformanceWarning) as record:
        ds = xr.open_dataset(path, engine="h5md", convert_units=True)
    said = [str(w.message) for w in record]
    assert any("position/value]: the 'unit' attribute b'\\xc5' is not UTF-8 text; read "
               "as Latin-1: 'Å'" in m for m in said), said
    assert any("velocity/value]" in m and "Latin-1: 'µm ps-1'" in m for m in said), said
    with ds:
        np.testing.assert_allclose(ds.position, 1.5)
        assert ds.position.attrs["units"] == "Angstrom"
        np.testing.assert_allclose(ds.velocity, 2.0e4)
        assert ds.velocity.attrs["units"] == "Angstrom ps-1"
