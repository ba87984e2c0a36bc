"""RateLimiter spaces operations evenly without bursts after a pause; parse_rate reads what operators type."""

import math

import pytest

from conveyor.ops.rate import RateLimiter, parse_rate


class FakeClock:
    """Time that moves only when the limiter sleeps or the test says so; records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def limiter(per_second: float | None, clock: FakeClock) -> RateLimiter:
    return RateLimiter(per_second, clock=clock, sleep=clock.sleep)


def test_operations_are_spaced_one_interval_apart() -> None:
    clock = FakeClock()
    pace = limiter(4, clock)
    for _ in range(5):
        pace.wait()
    assert clock.sleeps == pytest.approx([0.25] * 4)


def test_time_spent_working_counts_towards_the_interval() -> None:
    clock = FakeClock()
    pace = limiter(2, clock)
    pace.wait()
    clock.now += 0.4
    pace.wait()
    assert clock.sleeps == pytest.approx([0.1])


def test_a_pause_earns_no_burst() -> None:
    clock = FakeClock()
    pace = limiter(10, clock)
    pace.wait()
    clock.now += 60
    for _ in range(3):
        pace.wait()
    assert clock.sleeps == pytest.approx([0.1, 0.1])


def test_no_rate_never_sleeps() -> None:
    clock = FakeClock()
    pace = limiter(None, clock)
    for _ in range(100):
        pace.wait()
    assert clock.sleeps == []


@pytest.mark.parametrize("per_second", [0, -1, math.inf, math.nan])
def test_a_rate_that_cannot_pace_is_refused(per_second: float) -> None:
    with pytest.raises(ValueError, match="rate must be a finite number above 0 per second"):
        RateLimiter(per_second)


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("5/s", 5.0),
        ("5", 5.0),
        (" 2.5 / s ", 2.5),
        ("300/m", 5.0),
        ("300/min", 5.0),
        ("7200/h", 2.0),
        ("1/m", 1 / 60),
        (" 4320000/day ", 50.0),
        ("2628000/month", 1.0),
    ],
)
def test_parse_rate_reads_every_unit(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize(
    "text", ["", "/s", "0/s", "-5/s", "five/s", "5/d", "5/sec", "5/week", "inf/s", "nan", "1e999/s"]
)
def test_parse_rate_refuses_what_is_not_a_positive_finite_rate(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected a positive number per s, min, h, day or month, e\.g\. 5/s"):
        parse_rate(text)
