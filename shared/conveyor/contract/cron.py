"""EventBridge Scheduler expressions: parsed once, then evaluated to UTC instants.

**Why croniter.** Expressions are evaluated by a maintained library, not by hand-written calendar
math. croniter evaluates every day-of-month and day-of-week form EventBridge documents (``L``,
``15W``, ``6L``, ``2#1``); cronsim, the other candidate, has no ``nW``. Neither library's own DST
handling is EventBridge's (cronsim copies Debian cron, which runs a job whose time the spring gap
skipped right after the gap), so both would be fed wall-clock times anyway, and EventBridge's
rule is applied here, in ``_instant``. croniter's one dependency, python-dateutil, is already in
the Lambda runtime (botocore requires it); croniter and tzdata must ship in the worker bundle.
EventBridge's cron dialect is translated to croniter's in one place, ``_parse_cron``.

**Daylight saving time, as EventBridge Scheduler documents it** (Scheduler User Guide, "Schedule
types", daylight saving time; AWS Knowledge Center, "eventbridge-scheduler-adjust-dst"):

- clocks go forward: an occurrence whose local time does not exist that day is skipped;
- clocks go back: an occurrence whose local time happens twice runs once. AWS does not say which
  of the two instants; this module takes the first, as cron does;
- ``rate`` is elapsed time: ``rate(1 day)`` fires 24 hours after the previous invocation,
  whatever the clocks do, so the time zone does not affect it.
"""

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, CroniterError, croniter

# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-cron-expressions.html
CRON_MIN_YEAR = 1970
CRON_MAX_YEAR = 2199
CRON_MAX_WEEK_OF_MONTH = 5

# Where a rate schedule's occurrences are counted from when its real start is unknown (see occurrences).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)


class ExpressionError(ValueError):
    """An expression EventBridge Scheduler would reject (or Conveyor cannot evaluate); the text says why."""


@dataclass(frozen=True)
class Cron:
    dialect: str  # the five croniter fields, evaluated on naive wall-clock times
    years: frozenset[int]


@dataclass(frozen=True)
class Rate:
    period: timedelta


@dataclass(frozen=True)
class At:
    local: datetime  # naive, in the schedule's time zone


Expression = Cron | Rate | At


@dataclass(frozen=True)
class Timetable:
    """An expression parsed in its time zone: what every occurrence question is asked of."""

    expression: Expression
    zone: ZoneInfo

    @classmethod
    def parse(cls, expression: str, zone: ZoneInfo) -> "Timetable":
        """Raises ExpressionError saying why EventBridge would reject ``expression``."""
        return cls(_parse(expression, zone), zone)


class Timed(Protocol):
    """What has a timetable: a declared Schedule."""

    @property
    def timetable(self) -> Timetable: ...


# --- parsing: EventBridge's grammar, translated to croniter's -----------------------------------

_EXPRESSION = re.compile(r"^(?P<kind>cron|rate|at)\((?P<body>.*)\)$")
_RATE = re.compile(r"^(?P<value>\d+) (?P<unit>minutes?|hours?|days?)$")
_AT = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)$")
_RATE_UNITS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
_CRON_FIELDS = ("minutes", "hours", "day-of-month", "month", "day-of-week", "year")
_ITEM = re.compile(r"^(?:(?P<star>\*)|(?P<start>[A-Z0-9]+)(?:-(?P<end>[A-Z0-9]+))?)(?:/(?P<step>\d+))?$")
_NEAREST_WEEKDAY = re.compile(r"^(?P<day>\d+)W$")
_LAST_WEEKDAY_OF_MONTH = re.compile(r"^(?P<day>[A-Z0-9]+)L$")
_NTH_WEEKDAY = re.compile(r"^(?P<day>[A-Z0-9]+)#(?P<week>\d+)$")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class _Field:
    label: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    steps: bool = True

    def value(self, text: str) -> int:
        if text in self.names:
            return self.low + self.names.index(text)
        if not text.isdigit():
            raise ExpressionError(f"{self.label}: {text!r} is not a number{self._name_hint()}")
        number = int(text)
        if not self.low <= number <= self.high:
            raise ExpressionError(f"{self.label}: {number} is outside {self.low}-{self.high}{self._name_hint()}")
        return number

    def _name_hint(self) -> str:
        return f" or {self.names[0]}-{self.names[-1]}" if self.names else ""

    def values(self, item: str) -> range:
        """The values one list item names: ``*``, ``n``, ``a-b``, each optionally ``/step``."""
        match = _ITEM.match(item)
        if match is None:
            raise ExpressionError(f"{self.label}: {item!r} is not valid")
        if match["step"] is not None and not self.steps:
            raise ExpressionError(f"{self.label}: '/' is not allowed")
        step = int(match["step"] or 1)
        if step < 1:
            raise ExpressionError(f"{self.label}: the step in {item!r} must be at least 1")
        if match["star"]:
            return range(self.low, self.high + 1, step)
        start = self.value(match["start"])
        if match["end"] is None:
            return range(start, self.high + 1, step) if match["step"] else range(start, start + 1)
        end = self.value(match["end"])
        if end < start:
            raise ExpressionError(f"{self.label}: the range {item!r} runs backwards; list it as two ranges")
        return range(start, end + 1, step)

    def translate(self, text: str, *, shift: int = 0) -> str:
        """The field in croniter's dialect: ``*``, or the list of values it names, shifted by ``shift``."""
        if text == "*":
            return text
        return ",".join(str(value + shift) for item in text.split(",") for value in self.values(item))


_MINUTES = _Field("minutes", 0, 59)
_HOURS = _Field("hours", 0, 23)
_DAY_OF_MONTH = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS)
# EventBridge numbers days 1-7 from Sunday; croniter 0-6. No '/' in this field.
_DAY_OF_WEEK = _Field("day-of-week", 1, 7, _DAYS, steps=False)
_YEAR = _Field("year", CRON_MIN_YEAR, CRON_MAX_YEAR)
_CRONITER_WEEKDAY_SHIFT = -1
_SATURDAY = 7


def _parse(expression: str, zone: ZoneInfo) -> Expression:
    match = _EXPRESSION.match(expression)
    if match is None:
        raise ExpressionError("is not cron(...), rate(...) or at(...)")
    body = match["body"]
    if match["kind"] == "cron":
        return _parse_cron(body)
    if match["kind"] == "rate":
        return _parse_rate(body)
    return _parse_at(body, zone)


def _parse_rate(body: str) -> Rate:
    match = _RATE.match(body)
    if match is None:
        raise ExpressionError("needs a positive whole number and minute(s), hour(s) or day(s), like rate(5 minutes)")
    value, unit = int(match["value"]), match["unit"]
    singular = unit.rstrip("s")
    if value < 1:
        raise ExpressionError("needs a value of at least 1")
    if value == 1 and unit != singular:
        raise ExpressionError(f"takes the singular unit for 1: rate(1 {singular})")
    if value > 1 and unit == singular:
        raise ExpressionError(f"takes the plural unit above 1: rate({value} {singular}s)")
    return Rate(_RATE_UNITS[singular] * value)


def _parse_at(body: str, zone: ZoneInfo) -> At:
    match = _AT.match(body)
    if match is None:
        raise ExpressionError("needs the form at(yyyy-mm-ddThh:mm:ss)")
    year, month, day, hour, minute, second = (int(part) for part in match.groups())
    try:
        local = datetime(year, month, day, hour, minute, second)
    except ValueError as error:
        raise ExpressionError(f"is not a real date and time: {error}") from None
    if _instant(local, zone) is None:
        raise ExpressionError(f"does not exist in {zone.key}: the clocks skip it that day")
    return At(local)


def _parse_cron(body: str) -> Cron:
    fields = body.upper().split()
    if len(fields) != len(_CRON_FIELDS):
        raise ExpressionError(f"has {len(fields)} fields; EventBridge cron needs 6: {' '.join(_CRON_FIELDS)}")
    minutes, hours, day_of_month, month, day_of_week, year = fields
    if (day_of_month == "?") == (day_of_week == "?"):
        raise ExpressionError("needs ? in exactly one of day-of-month and day-of-week")
    dialect = " ".join(
        (
            _MINUTES.translate(minutes),
            _HOURS.translate(hours),
            _translate_day_of_month(day_of_month),
            _MONTH.translate(month),
            _translate_day_of_week(day_of_week),
        )
    )
    years = frozenset(v for item in year.split(",") for v in _YEAR.values(item))
    try:
        croniter(dialect, EPOCH.replace(tzinfo=None))
    except CroniterError as error:
        raise ExpressionError(f"cannot be evaluated: {error}") from None
    return Cron(dialect, years)


def _translate_day_of_month(text: str) -> str:
    if text in ("?", "L"):
        return "*" if text == "?" else "L"
    if nearest := _NEAREST_WEEKDAY.match(text):
        return f"{_DAY_OF_MONTH.value(nearest['day'])}W"
    if "L" in text or "W" in text:
        raise ExpressionError("day-of-month: L and W stand alone, as L or as one day like 15W")
    return _DAY_OF_MONTH.translate(text)


def _translate_day_of_week(text: str) -> str:
    if text in ("?", "L"):
        # L alone is the last day of the week: Saturday.
        return "*" if text == "?" else str(_SATURDAY + _CRONITER_WEEKDAY_SHIFT)
    if last := _LAST_WEEKDAY_OF_MONTH.match(text):
        return f"L{_DAY_OF_WEEK.value(last['day']) + _CRONITER_WEEKDAY_SHIFT}"
    if nth := _NTH_WEEKDAY.match(text):
        week = int(nth["week"])
        if not 1 <= week <= CRON_MAX_WEEK_OF_MONTH:
            raise ExpressionError(f"day-of-week: in {text!r} the week of the month must be 1-{CRON_MAX_WEEK_OF_MONTH}")
        return f"{_DAY_OF_WEEK.value(nth['day']) + _CRONITER_WEEKDAY_SHIFT}#{week}"
    if "#" in text or "L" in text:
        raise ExpressionError("day-of-week: # and L stand alone, like 2#1 (first Monday) or 6L (last Friday)")
    return _DAY_OF_WEEK.translate(text, shift=_CRONITER_WEEKDAY_SHIFT)


# --- occurrences ------------------------------------------------------------------------------


def occurrences(timed: Timed, after: datetime, until: datetime, *, anchor: datetime | None = None) -> list[datetime]:
    """Every occurrence strictly after ``after`` and at or before ``until``, as UTC datetimes, in order.

    ``anchor`` is where a rate schedule counts from: its first invocation, which Scheduler makes
    at its StartDate or, without one, as soon as it is created. A declaration cannot know that
    moment, so by default a rate counts from the Unix epoch (``rate(5 minutes)`` on :00, :05, ...).
    Cron and at schedules ignore it.
    """
    require_aware(after, until)
    result = []
    for instant in _forward(timed.timetable, after, anchor):
        if instant > until:
            break
        result.append(instant)
    return result


def next_occurrence(timed: Timed, after: datetime, *, anchor: datetime | None = None) -> datetime | None:
    """The first occurrence strictly after ``after`` (UTC), or None if the schedule never fires again."""
    require_aware(after)
    return next(_forward(timed.timetable, after, anchor), None)


# How many occurrences `occurrence_gaps` samples: enough to see a weekend in a weekday schedule
# and the short months in a monthly one.
SAMPLED_OCCURRENCES = 64


def occurrence_gaps(timed: Timed) -> list[timedelta]:
    """The times between the first consecutive occurrences, on a clock without DST (the expression in UTC).

    Empty for a one-off (``at``). Counted from a fixed instant, so the answer does not change with
    the day it is asked; a clock change stretches or skips one gap a year, which callers allow for.
    """
    on_utc = Timetable(timed.timetable.expression, ZoneInfo("UTC"))
    moments: list[datetime] = []
    moment = next(_forward(on_utc, EPOCH, None), None)
    while moment is not None and len(moments) < SAMPLED_OCCURRENCES:
        moments.append(moment)
        moment = next(_forward(on_utc, moment, None), None)
    return [later - earlier for earlier, later in itertools.pairwise(moments)]


def previous_occurrence(timed: Timed, at_or_before: datetime, *, anchor: datetime | None = None) -> datetime | None:
    """The last occurrence at or before ``at_or_before`` (UTC), or None if there was none."""
    require_aware(at_or_before)
    return next(_backward(timed.timetable, at_or_before, anchor), None)


def require_aware(*moments: datetime) -> None:
    if any(moment.utcoffset() is None for moment in moments):
        raise ValueError("schedule arithmetic needs timezone-aware datetimes")


def _forward(timetable: Timetable, after: datetime, anchor: datetime | None) -> Iterator[datetime]:
    parsed = timetable.expression
    if isinstance(parsed, Rate):
        start = (anchor or EPOCH).astimezone(UTC)
        first = 0 if after < start else (after - start) // parsed.period + 1
        yield from (start + parsed.period * k for k in count(first))
    elif isinstance(parsed, At):
        instant = _instant(parsed.local, timetable.zone)
        if instant is not None and instant > after:
            yield instant
    else:
        wall = after.astimezone(timetable.zone).replace(tzinfo=None)
        for local in _wall_matches(parsed, wall, reverse=False):
            instant = _instant(local, timetable.zone)
            # After a repeated hour's second pass, the first pass's later wall times are earlier instants.
            if instant is not None and instant > after:
                yield instant


def _backward(timetable: Timetable, at_or_before: datetime, anchor: datetime | None) -> Iterator[datetime]:
    parsed = timetable.expression
    if isinstance(parsed, Rate):
        start = (anchor or EPOCH).astimezone(UTC)
        if at_or_before >= start:
            last = (at_or_before - start) // parsed.period
            yield from (start + parsed.period * k for k in range(last, -1, -1))
    elif isinstance(parsed, At):
        instant = _instant(parsed.local, timetable.zone)
        if instant is not None and instant <= at_or_before:
            yield instant
    else:
        local = at_or_before.astimezone(timetable.zone)
        # In a repeated hour's second pass, the first pass's wall times up to an hour later are
        # still earlier instants: start that much later on the wall clock and filter in UTC.
        repeated = _offset(local.replace(fold=0)) - _offset(local)
        wall = local.replace(tzinfo=None) + repeated + _ONE_SECOND
        for candidate in _wall_matches(parsed, wall, reverse=True):
            instant = _instant(candidate, timetable.zone)
            if instant is not None and instant <= at_or_before:
                yield instant


def _offset(moment: datetime) -> timedelta:
    return moment.utcoffset() or timedelta(0)


def _wall_matches(cron: Cron, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    """Naive wall-clock times matching ``cron`` strictly after (or before) ``start``, in its years only."""
    iterator = croniter(cron.dialect, start)
    while True:
        try:
            local = iterator.get_prev(datetime) if reverse else iterator.get_next(datetime)
        except CroniterBadDateError:  # no match for decades: nothing more will come
            return
        if local.year in cron.years:
            yield local
            continue
        years = [y for y in cron.years if (y < local.year if reverse else y > local.year)]
        if not years:
            return
        if reverse:
            iterator = croniter(cron.dialect, datetime(max(years) + 1, 1, 1))
        else:
            iterator = croniter(cron.dialect, datetime(min(years), 1, 1) - _ONE_SECOND)


def _instant(local: datetime, zone: ZoneInfo) -> datetime | None:
    """The UTC instant of a wall-clock time, EventBridge's way: None in a gap, the first of two in an overlap."""
    aware = local.replace(tzinfo=zone, fold=0)
    instant = aware.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) != local:
        return None
    return instant
