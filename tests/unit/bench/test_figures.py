"""A figure's ratio to its anchor, and whether it meets issue 16's target."""

import math

import pytest

from bench.figures import TIMES, Figure, Row, Target


@pytest.mark.parametrize(
    ("target", "value", "anchor", "met"),
    [
        (Target(1.05), 0.31, 0.3, True),
        (Target(1.05), 0.32, 0.3, False),
        (Target(1.05), 0.315, 0.3, True),  # on the bound
        (Target(0.9, at_most=False), 45.0, 50.0, True),
        (Target(0.9, at_most=False), 44.0, 50.0, False),
        (Target(1.0, on_ratio=False, unit="req/s"), 0.8, None, True),
        (Target(1.0, on_ratio=False, unit="req/s"), 1.2, None, False),
    ],
)
def test_met_compares_the_ratio_or_the_value_with_the_bound(
    target: Target, value: float, anchor: float | None, met: bool
) -> None:
    assert Figure("f", value, "u", anchor=anchor, target=target).met is met


def test_a_count_has_no_ratio_and_a_zero_anchor_no_finite_one() -> None:
    assert Figure("count", 3.0, "req/s").ratio is None
    zero = Figure("f", 3.0, "u", anchor=0.0, target=Target(1.1))
    assert zero.ratio is not None
    assert math.isnan(zero.ratio)
    assert zero.met is None
    assert zero.to_json()["ratio"] is None


def test_a_figure_without_a_target_is_neither_met_nor_missed() -> None:
    assert Figure("f", 2.0, "u", anchor=1.0).met is None


def test_targets_read_as_the_issue_writes_them() -> None:
    assert str(Target(1.05)) == f"≤ 1.05{TIMES}"
    assert str(Target(0.9, at_most=False)) == f"≥ 0.9{TIMES}"
    assert str(Target(1, on_ratio=False, unit="req/s")) == "≤ 1 req/s"


def test_json_carries_value_anchor_ratio_target_and_met() -> None:
    figure = Figure("jobs per second", 45.0, "jobs/s", anchor=50.0, anchor_label="loop", target=Target(0.9, False))
    assert figure.to_json() == {
        "name": "jobs per second",
        "value": 45.0,
        "unit": "jobs/s",
        "anchor": 50.0,
        "anchor_label": "loop",
        "ratio": 0.9,
        "target": f"≥ 0.9{TIMES}",
        "met": True,
    }


def test_a_skipped_row_keeps_its_reason_on_one_line() -> None:
    row = Row.skip("celery", "Celery", "celery is not installed;\n  pip install 'conveyor[bench]'")
    assert row.skipped == "celery is not installed; pip install 'conveyor[bench]'"
    assert row.to_json()["status"] == "skipped"
    assert row.to_json()["figures"] == []
