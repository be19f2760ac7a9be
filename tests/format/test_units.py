"""H5MD unit strings and their conversion to MDAnalysis' base units."""

from __future__ import annotations

import pytest

from h5mdx.errors import H5MDUnitError
from h5mdx.format.units import conversion, parse_unit


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
    ],
)
def test_conversion(unit, factor, base):
    got = conversion(unit)
    assert got is not None
    assert got[0] == pytest.approx(factor, rel=1e-9)
    assert got[1] == base


def test_no_base_unit_for_odd_dimensions():
    assert conversion("eV/fs") is None  # energy per time: left as it is


def test_unknown_unit():
    with pytest.raises(H5MDUnitError, match="furlong"):
        parse_unit("furlong fortnight-1")


def test_dimensionless():
    assert parse_unit("") == (1.0, (0, 0, 0, 0))
