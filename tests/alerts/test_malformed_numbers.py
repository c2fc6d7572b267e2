"""A malformed number in a condition is named as the number, never blamed on the unit."""
from __future__ import annotations

import pytest

from alerts.rules import parse_condition


@pytest.mark.parametrize("text, number", [
    ("p99 > 5.5.5ms", "5.5.5"), ("p99 > 1e3ms", "1e3"), ("p99 > 5,5ms", "5,5"),
    ("batch_duration > 1.2.3s", "1.2.3"), ("throughput < 10..5k/s", "10..5"),
    ("rows_behind > 1e6", "1e6"), ("backpressure > 5.0.%", "5.0."),
])
def test_a_malformed_number_is_named(text, number):
    with pytest.raises(ValueError) as e:
        parse_condition(text)
    msg = str(e.value)
    assert f"{number!r} is not a number" in msg and "unit" not in msg.split("is not a number")[0]


def test_well_formed_numbers_still_parse():
    assert parse_condition("p99 > 5.5ms").threshold == 5.5e6
    assert parse_condition("batch_duration > .5s").threshold > 0
    assert parse_condition("throughput < 10k/s").threshold == 10e3
