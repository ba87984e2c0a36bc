"""Percentiles as CloudWatch computes them, durations as operators type them, the stats table."""

from datetime import timedelta

import pytest

from conveyor.contract.durations import parse_duration
from conveyor.ops.stats import SOURCE_RAW, JobStats, percentile, render_stats


@pytest.mark.parametrize(
    ("values", "pct", "expected"),
    [
        ([], 50, None),
        ([7.0], 99, 7.0),
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 95, 95.0),
        ([float(v) for v in range(1, 101)], 99, 99.0),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], pct: int, expected: float | None) -> None:
    assert percentile(values, pct) == expected


@pytest.mark.parametrize(("text", "expected"), [("90s", 90), ("15m", 900), ("1h", 3600), ("2d", 172800)])
def test_durations_parse(text: str, expected: int) -> None:
    parsed = parse_duration(text)
    assert parsed == timedelta(seconds=expected)


@pytest.mark.parametrize("text", ["", "h", "1", "0m", "-5m", "1.5h", "1w"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration like 90s, 15m, 1h or 2d"):
        parse_duration(text)


def test_stats_table_shows_counts_reasons_and_where_percentiles_came_from() -> None:
    entry = JobStats(
        queue="critical",
        job_type="charge_order",
        counts={"Succeeded": 9, "Retried": 2, "Discarded": 1},
        retried_by_reason={"throttled": 2},
        end_to_end_ms={"p50": 120.4, "p95": 310.0, "p99": None},
        percentiles_from=SOURCE_RAW,
    )
    header, row, reasons, source = render_stats([entry]).splitlines()
    assert header.split()[:10] == [
        "QUEUE",
        "JOB",
        "TYPE",
        "SUCCEEDED",
        "DUPLICATE",
        "RETRIED",
        "DEADLETTERED",
        "SNOOZED",
        "DEFERRED",
        "DISCARDED",
    ]
    assert row.split() == ["critical", "charge_order", "9", "0", "2", "0", "0", "0", "1", "120", "310", "-"]
    assert reasons == "charge_order retried: throttled 2"
    assert source == f"percentiles from: {SOURCE_RAW}"
