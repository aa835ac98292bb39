# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubernetes resource quantities: parse them exactly, format them the way people write them.

Quantities follow the API's grammar (k8s.io/apimachinery resource.Quantity): a signed
decimal number, optionally with an exponent (``1e3``), a decimal SI suffix (``n u m k M G T
P E``) or a binary one (``Ki Mi Gi Ti Pi Ei``). Parsing returns a ``Decimal`` so that
``100m`` CPU and ``1Gi`` bytes stay exact; nothing is rounded before formatting.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message names it."""


def parse_quantity(value, what="quantity"):
    """Return the quantity as an exact Decimal in base units (bytes, cores)."""
    if isinstance(value, bool):
        raise QuantityError("%s must be a quantity such as '64Gi' or 2, got a boolean" % what)
    if isinstance(value, (int, Decimal, float)):
        number = Decimal(value) if isinstance(value, (int, Decimal)) else Decimal(repr(value))
        if not number.is_finite():
            raise QuantityError("%s must be a finite quantity, got %r" % (what, value))
        return number
    if not isinstance(value, str):
        raise QuantityError("%s must be a quantity such as '64Gi', got %s" % (what, type(value).__name__))
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        raise QuantityError(
            "%s %r is not a Kubernetes quantity (a number with an optional suffix such as Mi, Gi, m or k)"
            % (what, value)
        )
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation as error:
        raise QuantityError("%s %r is not a number" % (what, value)) from error
    try:
        if match.group("binary"):
            return number * BINARY_SUFFIXES[match.group("binary")]
        if match.group("exponent"):
            return number * Decimal(10) ** int(match.group("exponent")[1:])
        return number * DECIMAL_SUFFIXES[match.group("decimal") or ""]
    except ArithmeticError as error:  # an exponent beyond what Decimal holds
        raise QuantityError("%s %r is out of range" % (what, value)) from error


def format_bytes(value, granularity="Mi"):
    """Round bytes up to whole ``granularity`` units and write them with the largest exact
    binary suffix: 68719476736 -> '64Gi', 1.5 GiB -> '1536Mi'."""
    unit = BINARY_SUFFIXES[granularity]
    units = (Decimal(value) / unit).to_integral_value(rounding=ROUND_CEILING)
    total = int(units) * unit
    if total == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if BINARY_SUFFIXES[suffix] >= unit and total % BINARY_SUFFIXES[suffix] == 0:
            return "%d%s" % (total // BINARY_SUFFIXES[suffix], suffix)
    return str(total)


def format_cpu(value):
    """Cores as Kubernetes writes them: whole cores as an integer string, else millicores
    rounded up ('2', '1500m')."""
    millicores = (Decimal(value) * 1000).to_integral_value(rounding=ROUND_CEILING)
    if millicores % 1000 == 0:
        return str(int(millicores // 1000))
    return "%dm" % millicores
