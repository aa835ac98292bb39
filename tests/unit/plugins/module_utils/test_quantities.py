"""Kubernetes quantities: exact parsing of every suffix form and the formats people write."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.quantities import (
    QuantityError,
    format_bytes,
    format_cpu,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64Gi", 64 * 2**30),
        ("1536Mi", 1536 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("100m", Decimal("0.1")),
        ("2", 2),
        ("1e3", 1000),
        ("1E-3", Decimal("0.001")),
        ("128M", 128 * 10**6),
        ("1k", 1000),
        (".5", Decimal("0.5")),
        ("+4Ki", 4096),
        (8, 8),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize("text", ["64GB", "Gi", "1.2.3", "", "64 Gi", "1K", "one", True, None, [1]])
def test_parse_quantity_refuses(text):
    with pytest.raises(QuantityError):
        parse_quantity(text, "memory")


def test_parse_error_names_the_value():
    with pytest.raises(QuantityError, match=r"memory '64GB' is not a Kubernetes quantity"):
        parse_quantity("64GB", "memory")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (64 * 2**30, "64Gi"),
        (1536 * 2**20, "1536Mi"),
        (2**20 + 1, "2Mi"),  # rounded up: a limit must never shrink
        (0, "0"),
        (2**40, "1Ti"),
    ],
)
def test_format_bytes(value, expected):
    assert format_bytes(value) == expected


def test_format_bytes_round_trips():
    for text in ("64Gi", "1536Mi", "3Ti"):
        assert format_bytes(parse_quantity(text)) == text


@pytest.mark.parametrize(
    ("value", "expected"), [(2, "2"), (Decimal("1.5"), "1500m"), (Decimal("0.0001"), "1m"), (96, "96")]
)
def test_format_cpu(value, expected):
    assert format_cpu(value) == expected
