"""A queue that scales on age declares bounds Lambda accepts around its declared concurrency, or fails at import."""

from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract.declarations import Queue
from conveyor.contract.errors import DeclarationError


def queue(**overrides: Any) -> Queue:
    return Queue("elastic", age_objective=timedelta(minutes=2), **overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scale_on_age": True}, "scale_on_age needs scale_max"),
        ({"scale_max": 20}, "scale_min and scale_max need scale_on_age=True"),
        ({"scale_min": 4}, "scale_min and scale_max need scale_on_age=True"),
        (
            {"scale_on_age": True, "scale_max": 1001},
            "scale_max must be between 2 and 1000 (Lambda's MaximumConcurrency range), got 1001",
        ),
        (
            {"scale_on_age": True, "scale_min": 1, "scale_max": 20},
            "scale_min must be between 2 and 1000 (Lambda's MaximumConcurrency range), got 1",
        ),
        ({"scale_on_age": True, "scale_min": 30, "scale_max": 20}, "scale_min (30) must not be above scale_max (20)"),
        (
            {"scale_on_age": True, "max_concurrency": 10, "scale_max": 5},
            "max_concurrency (10) must lie between scale_min (10) and scale_max (5)",
        ),
        (
            {"scale_on_age": True, "max_concurrency": 3, "scale_min": 4, "scale_max": 20},
            "max_concurrency (3) must lie between scale_min (4) and scale_max (20)",
        ),
        (
            {"scale_on_age": True, "scale_max": 50, "reserved_concurrency": 20},
            "reserved_concurrency (20) must not be below scale_max (50)",
        ),
    ],
)
def test_bad_scaling_bounds_fail_naming_queue_and_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        queue(**overrides)
    assert str(raised.value).startswith("queue 'elastic': ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_bounds_default_to_the_declared_concurrency_below_and_are_the_declared_value_without_scaling() -> None:
    assert queue(max_concurrency=5, scale_on_age=True, scale_max=40).scale_bounds == (5, 40)
    assert queue(max_concurrency=5, scale_on_age=True, scale_min=2, scale_max=40).scale_bounds == (2, 40)
    assert queue(max_concurrency=5).scale_bounds == (5, 5)


def test_a_fifo_queue_may_scale_on_age_as_maximum_concurrency_applies_to_it_too() -> None:
    declared = queue(fifo=True, scale_on_age=True, scale_min=2, scale_max=1000)
    assert declared.scale_bounds == (2, 1000)
