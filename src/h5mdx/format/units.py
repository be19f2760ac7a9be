"""H5MD unit strings: parsing, and conversion to MDAnalysis' base units.

H5MD stores units as strings of space-separated factors with integer
exponents, e.g. ``"nm ps-1"`` or ``"kJ mol-1 nm-1"``; some writers use
``"eV/Angstrom"`` instead, or UDUNITS' ``"nm.ps-1"``. :func:`parse_unit` turns such a
string into a scale factor to SI and a dimension vector, and :func:`conversion` gives the
factor that converts a unit into the base unit of the same dimension:
Å (length), ps (time), Å/ps (velocity), kJ/(mol·Å) (force), kJ/mol (energy),
u (mass), e (charge) — the base units of MDAnalysis — and K (temperature).

H5MD's syntax (space-separated factors with integer exponents, ``ps-1``) is
tokenised here, and the symbols MD programs write are looked up in a table of
their own. A symbol the table lacks is looked up in `pint
<https://pint.readthedocs.io>`_'s registry when pint is installed (``furlong``,
``fortnight``, ``kelvin``, ``statvolt``...); offset units such as ``degC`` are
never converted. A temperature stays a temperature: ``K`` is not ``k_B T``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
from typing import Any

import numpy as np

from h5mdx.errors import H5MDUnitError

__all__ = ["BASE_UNITS", "as_decimal", "base_factor", "conversion", "parse_unit", "scaled",
           "shortest_decimals"]

_NA = 6.02214076e23
_E = 1.602176634e-19
_U = 1e-3 / _NA

#: dimension vector: exponents of (length m, mass kg, time s, charge C, temperature K)
Dims = tuple[int, int, int, int, int]
_L, _M, _T, _Q, _K = (1, 0, 0, 0, 0), (0, 1, 0, 0, 0), (0, 0, 1, 0, 0), (0, 0, 0, 1, 0), \
    (0, 0, 0, 0, 1)
_ONE = (0, 0, 0, 0, 0)
_ENERGY = (2, 1, -2, 0, 0)
_FORCE = (1, 1, -2, 0, 0)
_PRESSURE = (-1, 1, -2, 0, 0)

#: symbol -> (factor to SI, dimension vector)
_SYMBOLS: dict[str, tuple[float, Dims]] = {
    # length
    "m": (1.0, _L),
    "cm": (1e-2, _L),
    "mm": (1e-3, _L),
    "um": (1e-6, _L),
    "nm": (1e-9, _L),
    "Angstrom": (1e-10, _L),
    "angstrom": (1e-10, _L),
    "Ang": (1e-10, _L),  # the H5MD units module's symbol
    "A": (1e-10, _L),
    "Å": (1e-10, _L),
    "pm": (1e-12, _L),
    "fm": (1e-15, _L),
    "bohr": (5.29177210903e-11, _L),
    "Bohr": (5.29177210903e-11, _L),
    "ANGSTROM": (1e-10, _L),
    # as other writers spell them (pint reads "angstroms", not these)
    "Angstroms": (1e-10, _L),
    "Ångström": (1e-10, _L),
    "Ångstrom": (1e-10, _L),
    "ångström": (1e-10, _L),
    # time
    "s": (1.0, _T),
    "second": (1.0, _T),
    "sec": (1.0, _T),
    "ms": (1e-3, _T),
    "us": (1e-6, _T),
    "ns": (1e-9, _T),
    "ps": (1e-12, _T),
    "fs": (1e-15, _T),
    "AKMA": (4.888821e-14, _T),
    # mass: u is g/mol per particle, as MD programs define it (GROMACS: kJ/mol is exactly
    # u nm2 ps-2), not CODATA's 1.66053906660e-27 kg, 3.5e-10 less since the 2019 SI
    "kg": (1.0, _M),
    "g": (1e-3, _M),
    "u": (_U, _M),
    "amu": (_U, _M),
    "Da": (_U, _M),
    "dalton": (_U, _M),
    "Dalton": (_U, _M),
    # charge
    "C": (1.0, _Q),
    "e": (_E, _Q),
    # energy
    "J": (1.0, _ENERGY),
    "kJ": (1e3, _ENERGY),
    "KJ": (1e3, _ENERGY),  # kilojoules as written by hand (KJ/mol, kj/mol), no kelvin joule
    "kj": (1e3, _ENERGY),
    "Kcal": (4184.0, _ENERGY),
    "KCal": (4184.0, _ENERGY),
    "cal": (4.184, _ENERGY),
    "kcal": (4184.0, _ENERGY),
    "eV": (_E, _ENERGY),
    "meV": (_E * 1e-3, _ENERGY),
    "hartree": (4.3597447222071e-18, _ENERGY),
    "Hartree": (4.3597447222071e-18, _ENERGY),
    "Ha": (4.3597447222071e-18, _ENERGY),
    # temperature: a temperature, never an energy k_B T
    "K": (1.0, _K),
    "kelvin": (1.0, _K),
    "Kelvin": (1.0, _K),
    # the H5MD units module's constants: Boltzmann's (kB K is an energy; pint's kB is a
    # kilobyte) and Avogadro's number
    "kB": (1.380649e-23, (2, 1, -2, 0, -1)),
    "Nav": (_NA, _ONE),
    "Eh": (4.3597447222071e-18, _ENERGY),
    # force
    "N": (1.0, _FORCE),
    "Newton": (1.0, _FORCE),
    # amount: a pure number (per-particle quantities)
    "mol": (_NA, _ONE),
    # pressure
    "Pa": (1.0, _PRESSURE),
    "bar": (1e5, _PRESSURE),
    "atm": (101325.0, _PRESSURE),
}

#: dimension vector -> (base unit string, its factor to SI)
BASE_UNITS: dict[Dims, str] = {
    _L: "Angstrom",
    _T: "ps",
    (1, 0, -1, 0, 0): "Angstrom ps-1",
    (1, 0, -2, 0, 0): "Angstrom ps-2",
    _FORCE: "kJ mol-1 Angstrom-1",
    _ENERGY: "kJ mol-1",
    _M: "u",
    _Q: "e",
    _K: "K",
    (1, 1, -1, 0, 0): "u Angstrom ps-1",
    (3, 0, 0, 0, 0): "Angstrom3",
    (2, 0, 0, 0, 0): "Angstrom2",
    (-1, 0, 0, 0, 0): "Angstrom-1",
}

_TOKEN = re.compile(r"^([A-Za-zÅåö\u00b5\u03bc_]+)(?:\^|\*\*)?([+-]?\d+)?$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
#: A "." between units (UDUNITS' product, ``"nm.ps-1"``): after a unit symbol and its
#: power, before a unit symbol
_UDUNITS_PRODUCT = re.compile(
    r"([A-Za-zÅ\u00b5\u03bc_](?:\^)?[+-]?\d*)\.(?=[A-Za-zÅ\u00b5\u03bc])")
#: A power of a number as the H5MD units module writes it: ``10+3`` is 1000, ``10-9`` 1e-9
#: (and as others do: ``10^-9``, ``10**-9``).
_POWER_OF = re.compile(r"^(\d+)(?:(?:\^|\*\*)([+-]?\d+)|([+-]\d+))$")


#: pint base dimension -> (position, sign) in the dimension vector (current: charge/time)
_PINT_DIMS = {"[length]": ((0, 1),), "[mass]": ((1, 1),), "[time]": ((2, 1),),
              "[current]": ((3, 1), (2, -1)), "[temperature]": ((4, 1),)}


@lru_cache(maxsize=1)
def _pint_registry() -> Any:
    try:
        import pint
    except ImportError:
        return None
    return pint.UnitRegistry()


@lru_cache(maxsize=256)
def _pint_symbol(symbol: str) -> tuple[float, Dims] | None:
    """``symbol`` looked up in pint's registry, or None (no pint, unknown, offset unit)."""
    ureg = _pint_registry()
    if ureg is None:
        return None
    try:
        one = ureg.Quantity(1.0, symbol)
        if not one._is_multiplicative:
            return None  # degC, degF: an offset, not a factor
        base = one.to_base_units()
    except Exception:  # noqa: BLE001 - pint raises many kinds of errors for odd strings
        return None
    factor = float(base.magnitude)
    dims = [0, 0, 0, 0, 0]
    for name, power in dict(base.dimensionality).items():
        if float(power) != int(power):
            return None
        if name == "[substance]":  # mol is a number (N_A) here
            factor *= _NA ** int(power)
            continue
        if name not in _PINT_DIMS:
            return None
        for i, sign in _PINT_DIMS[name]:
            dims[i] += sign * int(power)
    return factor, (dims[0], dims[1], dims[2], dims[3], dims[4])


#: temperature scales with an offset: not a factor, so never converted
_OFFSET_UNITS = frozenset({"degC", "°C", "celsius", "degree_Celsius", "degF", "°F",
                           "fahrenheit", "degree_Fahrenheit"})


#: symbols pint reads otherwise than MD codes mean them: ``au`` (atomic units of what?
#: pint: the astronomical unit, 1.5e11 m) and ``a`` (pint: a year)
_AMBIGUOUS = {"au": "atomic units of which quantity (bohr, hartree, ...)? pint reads "
                    "it as the astronomical unit",
              "AU": "atomic units, or the astronomical unit?",
              "a": "pint reads it as a year; for Ångström write A, Ang or Angstrom"}
#: the micro sign and the Greek mu, both written for the SI prefix
_MICRO = ("\u00b5", "\u03bc")


def _symbol(symbol: str) -> tuple[float, Dims]:
    if symbol in _AMBIGUOUS:
        raise H5MDUnitError(f"{symbol!r} is ambiguous ({_AMBIGUOUS[symbol]}) and is not "
                            "converted")
    if symbol[:1] in _MICRO:  # µm, μs: the prefix as the H5MD units module writes it
        symbol = "u" + symbol[1:]
    known = _SYMBOLS.get(symbol) or _pint_symbol(symbol)
    if known is None and symbol in _OFFSET_UNITS:
        raise H5MDUnitError(f"{symbol!r} is a temperature scale with an offset, not a "
                            "multiple of a unit, and is not converted")
    if known is None:
        raise H5MDUnitError(f"unknown unit {symbol!r}")
    return known


def _parse_product(text: str, sign: int) -> tuple[float, list[int]]:
    factor = 1.0
    dims = [0, 0, 0, 0, 0]
    seen_unit = False
    for token in re.split(r"[\s*·]+", text.strip()):
        if not token or (token == "1" and not seen_unit):
            continue
        power_of = _POWER_OF.match(token)
        if _NUMBER.match(token) or power_of:
            if seen_unit:  # "nm 2", "nm*2": a power written apart, or a misplaced factor
                raise H5MDUnitError(f"a number ({token}) after a unit: write a power as "
                                    "nm2, nm^2 or nm**2, a factor before the units")
            value = (float(power_of.group(1)) ** int(power_of.group(2) or power_of.group(3))
                     if power_of
                     else float(token))
            factor *= value ** sign
            continue
        seen_unit = True
        match = _TOKEN.match(token)
        if match is None and token in _OFFSET_UNITS:
            _symbol(token)  # raises: an offset unit
        if match is None:
            raise H5MDUnitError(f"unknown unit {token!r}")
        if match.group(2) is not None and int(match.group(2)) == 0:
            # castep_outputs_tools writes the Bohr radius as a0: "a" to the power 0 here
            bohr = "; the Bohr radius is written bohr" if match.group(1) == "a" else ""
            raise H5MDUnitError(
                f"{token!r} reads as {match.group(1)!r} to the power 0, which is 1 (H5MD "
                f"writes a unit's power right after its symbol){bohr}")
        scale, dim = _symbol(match.group(1))
        power = int(match.group(2) or 1) * sign
        factor *= scale**power
        for i in range(5):
            dims[i] += dim[i] * power
    return factor, dims


@lru_cache(maxsize=256)
def parse_unit(unit: str) -> tuple[float, Dims]:
    """Parse an H5MD unit string.

    Parameters
    ----------
    unit : str
        For example ``"nm ps-1"``, ``"kJ mol-1 nm-1"``, ``"eV/Angstrom"`` or UDUNITS'
        ``"nm.ps-1"``.

    Returns
    -------
    factor : float
        The value of one ``unit`` in SI (per particle: ``mol`` is a number).
    dims : tuple of int
        Exponents of length, mass, time, charge and temperature.

    Raises
    ------
    H5MDUnitError
        If a factor of the string is not a known unit.
    """
    # Unicode's compatibility forms as the ASCII H5MD writes: the Angstrom sign U+212B
    # and a decomposed A + ring (macOS file names) as Å, superscripts (nm², ps⁻¹) as
    # powers, the Kelvin sign as K, and the minus sign U+2212 as '-'
    text = unicodedata.normalize("NFKC", unit).replace("\u2212", "-")
    text = text.strip().replace("(", " ").replace(")", " ")
    # a power written apart from its unit (pint's "nanometer ** 2", "nm ^ -1") joins it
    text = re.sub(r"\s*(\*\*|\^)\s*", "^", text)
    # UDUNITS' product of units "kJ.mol-1" (CF's unit strings): a "." after a unit and
    # its power, before a unit (never within a number: "1.5 nm")
    text = _UDUNITS_PRODUCT.sub(r"\1 ", text)
    if not text:
        return 1.0, _ONE
    numerator, *denominators = text.split("/")
    try:
        factor, dims = _parse_product(numerator, 1)
        for den in denominators:
            f, d = _parse_product(den, -1)
            factor *= f
            dims = [a + b for a, b in zip(dims, d, strict=True)]
    except H5MDUnitError as err:
        raise H5MDUnitError(f"cannot parse unit {unit!r}: {err}") from None
    return factor, (dims[0], dims[1], dims[2], dims[3], dims[4])


def conversion(unit: str) -> tuple[float, str] | None:
    """Factor and unit string that convert ``unit`` to MDAnalysis' base units.

    Parameters
    ----------
    unit : str
        An H5MD unit string.

    Returns
    -------
    (factor, base_unit) or None
        Multiply values in ``unit`` by ``factor`` to get them in ``base_unit``.
        ``None`` where the dimension has no base unit (the values are then left
        as they are).

    Examples
    --------
    >>> conversion("nm")
    (10.0, 'Angstrom')
    """
    factor, dims = parse_unit(unit)
    base = BASE_UNITS.get(dims)
    if base is None:
        return None
    base_factor, _ = parse_unit(base)
    ratio = factor / base_factor
    # round away float noise such as 9.999999999999998
    ratio = float(f"{ratio:.12g}")
    return ratio, base


def scaled(values: Any, factor: float, *, decimals: bool = False) -> Any:
    """``values * factor``, divided by the inverse where that is a whole number: 9 fs is
    then 0.009 ps, as ``ds.sel(time=0.009)`` expects, not 0.009000000000000001.

    ``decimals``: a float array multiplied by a power of ten (ns or us to ps) gives each
    value as the shortest decimal consistent with it, shifted: 0.0041 ns is 4.1 ps, not
    4.1000000000000005 (which ``ds.sel(time=4.1)`` missed).

    Examples
    --------
    >>> float(scaled(9.0, 1e-3))
    0.009
    >>> scaled(np.array([0.0041, 0.0049]), 1e3, decimals=True).tolist()
    [4.1, 4.9]
    """
    if factor in (0.0, 1.0):
        return values * factor if factor == 0.0 else values
    inverse = 1.0 / factor
    if inverse > 1.0 and abs(inverse - round(inverse)) <= 1e-9 * inverse:
        return values / round(inverse)
    if decimals and isinstance(values, np.ndarray) and values.dtype.kind == "f" and \
            factor > 1.0 and factor == 10.0 ** round(math.log10(factor)):
        return _shifted(values, factor)
    return values * factor


def _shifted(values: np.ndarray, factor: float) -> np.ndarray:
    """``values * factor`` (a power of ten ``10**k``), each value's shortest decimal of up
    to 15 decimals (``n / 10**d``) shifted by ``k`` places and rounded once; the product
    where a value has no such decimal."""
    k = round(math.log10(factor))
    out = np.asarray(values * factor)  # of a 0-d array, a 0-d array (numpy gives a scalar)
    todo = np.isfinite(out) & (out != np.round(out))
    at, n, d = shortest_decimals(values, np.dtype(np.float64), todo, 1, 15)
    np.put(out, at, as_decimal(n, d, k))
    return out


def shortest_decimals(x: np.ndarray, stored: np.dtype, todo: np.ndarray,
                      first: np.ndarray | int, tries: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shortest decimal ``n / 10**k`` of each value of ``x`` (float64) where ``todo``:
    the first ``k`` of ``first``, ``first + 1``, ... (``tries`` of them; ``first`` one
    for all, or one per value) whose decimal, held as ``stored``, is the value held as
    ``stored``, with ``n`` a whole number float64 holds exactly (``abs(n) < 2**53``).

    The one search of h5mdx for the decimal a value was written as: float32 times
    widened (``h5mdx.format.h5md._decimals.widened``), float64 times shifted by a
    power of ten (:func:`scaled`).

    Returns
    -------
    tuple of numpy.ndarray
        ``(at, n, k)``: the flat indices of the values found (``np.put`` takes them),
        their ``n`` (whole float64 numbers) and ``k`` (int64); a value not found is not
        in ``at``.
    """
    x = x.reshape(-1)
    want = x.astype(stored)
    starts = np.broadcast_to(np.asarray(first, dtype=np.int64), todo.shape).reshape(-1)
    at = np.flatnonzero(todo)
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        for step in range(tries):
            if not at.size:
                break
            k = starts[at] + step  # decimals kept: round(x * 10**k) / 10**k
            scale = np.power(10.0, np.abs(k))
            # a whole number over an exact power of ten: the decimal, rounded once
            n = np.where(k >= 0, np.round(x[at] * scale), np.round(x[at] / scale))
            hit = (as_decimal(n, k).astype(stored) == want[at]) & (np.abs(n) < 2.0**53)
            found.append((at[hit], n[hit], k[hit]))
            at = at[~hit]
    if not found:
        return np.empty(0, np.intp), np.empty(0), np.empty(0, np.int64)
    ats, ns, ks = zip(*found, strict=True)
    return np.concatenate(ats), np.concatenate(ns), np.concatenate(ks)


def as_decimal(n: np.ndarray, k: np.ndarray, shift: int = 0) -> np.ndarray:
    """``n / 10**k`` shifted by ``shift`` places (``* 10**shift``), each rounded once: a
    whole number divided or multiplied by an exact power of ten."""
    places = k - shift
    scale = np.power(10.0, np.abs(places))
    return np.where(places >= 0, n / scale, n * scale)


def base_factor(unit: str) -> tuple[float, str, str | None]:
    """What converting values in ``unit`` takes, for a reader that keeps what it cannot
    convert: ``(factor, unit after, problem)``. The factor and base unit of
    :func:`conversion`; ``(1.0, unit, None)`` where the dimension has no base unit; and
    ``(1.0, unit, why)`` where ``unit`` cannot be read (the caller says so).

    Examples
    --------
    >>> base_factor("nm")
    (10.0, 'Angstrom', None)
    """
    try:
        conv = conversion(unit)
    except H5MDUnitError as err:
        return 1.0, unit, str(err)
    return (1.0, unit, None) if conv is None else (conv[0], conv[1], None)
