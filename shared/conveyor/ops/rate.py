"""Pace a loop to at most N operations per second, so a redrive or backfill cannot flood a queue."""

import math
import time
from collections.abc import Callable


class RateLimiter:
    """Spaces calls to ``wait`` at least ``1 / per_second`` apart; ``None`` means no limit."""

    def __init__(
        self,
        per_second: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # An infinite rate would silently mean "no limit" and NaN would never sleep: both are mistakes.
        if per_second is not None and not (per_second > 0 and math.isfinite(per_second)):
            raise ValueError(f"rate must be a finite number above 0 per second, not {per_second:g}")
        self._interval = 1.0 / per_second if per_second else 0.0
        self._clock = clock
        self._sleep = sleep
        self._next = clock()

    def wait(self, *, tick: Callable[[], None] | None = None, tick_every_s: float = 5.0) -> None:
        """Block until the next operation may start, calling ``tick`` at least every ``tick_every_s``.

        A redrive waiting out a slow rate must still renew its hold on the DLQ entries: ``tick``.
        """
        if not self._interval:
            return
        now = self._clock()
        while self._next > now:
            if tick is not None:
                tick()
            self._sleep(min(self._next - now, tick_every_s) if tick is not None else self._next - now)
            now = self._clock()
        self._next = max(self._next, now) + self._interval


# A month of 730 hours: a twelfth of a 365-day year, so a year is twelve of them.
SECONDS_PER_MONTH = 365 * 24 * 3600 // 12
# What a rate may be per: "5" is per second; "m" and "min" are both a minute.
RATE_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "day": 86_400, "month": SECONDS_PER_MONTH}


def parse_rate(text: str) -> float:
    """``"5/s"``, ``"5"``, ``"300/m"``, ``"1e9/month"`` -> operations per second."""
    count, per_s = parse_rate_as_written(text)
    return count / per_s


def parse_rate_as_written(text: str) -> tuple[float, int]:
    """``"300/min"`` -> ``(300.0, 60)``: the count and the seconds it is per, for a limit kept as declared."""
    number, _, unit = text.strip().partition("/")
    per = RATE_UNITS.get(unit.strip())
    try:
        value = float(number)
    except ValueError:
        value = 0.0
    if per is None or not (value > 0 and math.isfinite(value)):
        raise ValueError(
            f"rate {text!r}: expected a positive number per s, min, h, day or month, e.g. 5/s, 300/min or 1e9/month"
        )
    return value, per
