"""Schedules: jobs that EventBridge Scheduler enqueues on a cron, rate or at expression.

A ``Schedule`` is declared beside the job types and checked as it is built, so an expression
EventBridge would reject, an unknown time zone or a payload the job cannot read fails at import
with one line naming the schedule, not at deploy. The same declaration drives the stack (one
Scheduler schedule per shard), the local scheduler emulator and the missed-run policy.

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

import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import count
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from conveyor import limits
from conveyor.declarations import DeclarationError, JobType
from conveyor.durations import format_duration
from conveyor.errors import ContractError
from conveyor.timestamps import parse_utc, utc_text

# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-cron-expressions.html
CRON_MIN_YEAR = 1970
CRON_MAX_YEAR = 2199
CRON_MAX_WEEK_OF_MONTH = 5

# Like queue names, at most 40 characters: Scheduler's 64 leave room for a prefix and a shard suffix.
SCHEDULE_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
# Each shard is its own AWS::Scheduler::Schedule, and a stack holds at most 500 resources.
MAX_SHARDS = 32
# Catch-up runs are enqueued by the run that finds them missing, in one go: bound the burst.
MAX_CATCH_UP_RUNS = 100

# Scheduler's context attributes, replaced in the target input on every invocation
# (https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html).
# ``<aws.scheduler.execution-id>`` is never used: it changes on every retry of one occurrence.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
SCHEDULE_ARN = "<aws.scheduler.schedule-arn>"
# How Scheduler writes the scheduled time, for example 2022-03-22T18:59:43Z.
ORIGIN_PREFIX = "schedule:"
# The payload fields a sharded schedule fills in.
SHARD_FIELD = "shard"
SHARDS_FIELD = "shards"

# Where a rate schedule's occurrences are counted from when its real start is unknown (see occurrences).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)

_OCCURRENCE_ID = re.compile(
    rf"^{ORIGIN_PREFIX}(?P<name>[a-z][a-z0-9-]*)@(?P<time>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?:#(?P<shard>\d+))?$"
)


class MissedReason(StrEnum):
    """Why an occurrence is recorded missed instead of run: the audit's reason codes."""

    SKIPPED_BY_POLICY = "skipped_by_policy"
    BEYOND_CATCH_UP_LIMIT = "beyond_catch_up_limit"


@dataclass(frozen=True)
class MissedRunPolicy:
    """What a run does with earlier occurrences that never ran; build it with ``skip()`` or ``catch_up(n)``."""

    kind: Literal["skip", "catch_up"] = "skip"
    max_runs: int = 0

    @property
    def reason(self) -> MissedReason:
        """The reason recorded for the occurrences this policy does not run."""
        return MissedReason.SKIPPED_BY_POLICY if self.kind == "skip" else MissedReason.BEYOND_CATCH_UP_LIMIT


def skip() -> MissedRunPolicy:
    """Record every missed occurrence as missed and run none of them."""
    return MissedRunPolicy()


def catch_up(max_runs: int) -> MissedRunPolicy:
    """Enqueue the most recent ``max_runs`` missed occurrences; record the older ones as missed."""
    return MissedRunPolicy("catch_up", max_runs)


class _ExpressionError(ValueError):
    """An expression EventBridge Scheduler would reject (or Conveyor cannot evaluate); the text says why."""


@dataclass(frozen=True)
class _Cron:
    dialect: str  # the five croniter fields, evaluated on naive wall-clock times
    years: frozenset[int]


@dataclass(frozen=True)
class _Rate:
    period: timedelta


@dataclass(frozen=True)
class _At:
    local: datetime  # naive, in the schedule's time zone


_Expression = _Cron | _Rate | _At


@dataclass(frozen=True)
class Schedule:
    """A job EventBridge Scheduler enqueues at each occurrence of ``expression``, in ``timezone``.

    ``expression`` is ``cron(minutes hours day-of-month month day-of-week year)``, ``rate(5
    minutes)`` or ``at(2026-12-31T23:00:00)``; ``timezone`` is an IANA name and is kept as
    declared, so the schedule follows that zone's clock changes. ``flexible_window`` lets
    Scheduler invoke up to that much later (None: exactly on time). ``shards=N`` enqueues N jobs
    per occurrence, payload plus ``shard`` (0..N-1) and ``shards``.
    """

    name: str
    expression: str
    job: str
    payload: Mapping[str, Any] | None = None
    timezone: str = "UTC"
    flexible_window: timedelta | None = None
    missed: MissedRunPolicy = field(default_factory=skip)
    shards: int = 1
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _parsed: _Expression = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"schedule {self.name!r}"
        _require(
            bool(SCHEDULE_NAME_PATTERN.match(self.name)), where, f"name must match {SCHEDULE_NAME_PATTERN.pattern}"
        )
        try:
            object.__setattr__(self, "_zone", ZoneInfo(self.timezone))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise DeclarationError(f"{where}: unknown time zone {self.timezone!r} (use an IANA name)") from None
        try:
            parsed = _parse(self.expression, self._zone)
        except _ExpressionError as error:
            raise DeclarationError(f"{where}: {self.expression} {error}") from None
        object.__setattr__(self, "_parsed", parsed)
        if isinstance(parsed, _Cron):
            _require(
                next_occurrence(self, EPOCH) is not None,
                where,
                f"{self.expression} never fires: no date matches it",
            )
        self._check_options(where)
        gaps = occurrence_gaps(self) if self.flexible_window is not None else []
        _require(
            self.flexible_window is None or not gaps or self.flexible_window < min(gaps),
            where,
            f"flexible_window must be shorter than the shortest time between occurrences "
            f"({format_duration(min(gaps)) if gaps else '-'}), or runs would arrive out of order",
        )

    def _check_options(self, where: str) -> None:
        window = self.flexible_window
        least, most = limits.SCHEDULER_MIN_FLEXIBLE_WINDOW, limits.SCHEDULER_MAX_FLEXIBLE_WINDOW
        _require(
            window is None or (least <= window <= most and not window % least),
            where,
            f"flexible_window must be whole minutes between {format_duration(least)} and "
            f"{format_duration(most)}, or None for exactly on time",
        )
        _require(1 <= self.shards <= MAX_SHARDS, where, f"shards must be between 1 and {MAX_SHARDS}, got {self.shards}")
        _require(
            self.missed.kind == "skip" or 1 <= self.missed.max_runs <= MAX_CATCH_UP_RUNS,
            where,
            f"catch_up(max_runs) must be between 1 and {MAX_CATCH_UP_RUNS}, got {self.missed.max_runs}",
        )
        payload = dict(self.payload or {})
        try:
            json.dumps(payload)
        except (TypeError, ValueError) as error:
            raise DeclarationError(f"{where}: payload is not JSON-serializable: {error}") from None
        reserved = sorted({SHARD_FIELD, SHARDS_FIELD} & payload.keys())
        _require(
            self.shards == 1 or not reserved,
            where,
            f"payload sets {reserved}, which a sharded schedule fills in",
        )

    def shard_payload(self, shard: int) -> dict[str, Any]:
        """The payload of shard ``shard``'s job: the declared payload, plus its shard on a sharded schedule."""
        data = dict(self.payload or {})
        if self.shards > 1:
            data |= {SHARD_FIELD: shard, SHARDS_FIELD: self.shards}
        return data

    def check_job(self, job_type: JobType[Any]) -> None:
        """Checks against the scheduled job type, run by ``Topology``: every shard's input must run."""
        where = f"schedule {self.name!r}"
        fields = set(job_type.model.model_fields)
        _require(
            self.shards == 1 or {SHARD_FIELD, SHARDS_FIELD} <= fields,
            where,
            f"shards={self.shards} needs int fields {SHARD_FIELD!r} and {SHARDS_FIELD!r} on "
            f"{job_type.model.__name__}, the model of job type {job_type.name!r}",
        )
        for shard in range(self.shards):
            try:
                job_type.load_payload(self.shard_payload(shard), job_type.version)
            except ContractError as error:
                raise DeclarationError(
                    f"{where}: payload does not fit {job_type.model.__name__} of job type {job_type.name!r}: {error}"
                ) from None
        _require(
            job_type.idempotency_key is None,
            where,
            f"job type {job_type.name!r} keys idempotency on payload fields ({job_type.idempotency_key}), which are "
            "the same at every occurrence, so only the first would run; scheduled jobs key on schedule and time",
        )
        _require(
            self.flexible_window is None or self.flexible_window < job_type.retry.max_wall_time,
            where,
            f"flexible_window must be shorter than the retry.max_wall_time of job type {job_type.name!r} "
            f"({format_duration(job_type.retry.max_wall_time)}): a job's age counts from its scheduled time",
        )


def _require(condition: bool, where: str, rule: str) -> None:
    if not condition:
        raise DeclarationError(f"{where}: {rule}")


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
            raise _ExpressionError(f"{self.label}: {text!r} is not a number{self._name_hint()}")
        number = int(text)
        if not self.low <= number <= self.high:
            raise _ExpressionError(f"{self.label}: {number} is outside {self.low}-{self.high}{self._name_hint()}")
        return number

    def _name_hint(self) -> str:
        return f" or {self.names[0]}-{self.names[-1]}" if self.names else ""

    def values(self, item: str) -> range:
        """The values one list item names: ``*``, ``n``, ``a-b``, each optionally ``/step``."""
        match = _ITEM.match(item)
        if match is None:
            raise _ExpressionError(f"{self.label}: {item!r} is not valid")
        if match["step"] is not None and not self.steps:
            raise _ExpressionError(f"{self.label}: '/' is not allowed")
        step = int(match["step"] or 1)
        if step < 1:
            raise _ExpressionError(f"{self.label}: the step in {item!r} must be at least 1")
        if match["star"]:
            return range(self.low, self.high + 1, step)
        start = self.value(match["start"])
        if match["end"] is None:
            return range(start, self.high + 1, step) if match["step"] else range(start, start + 1)
        end = self.value(match["end"])
        if end < start:
            raise _ExpressionError(f"{self.label}: the range {item!r} runs backwards; list it as two ranges")
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


def _parse(expression: str, zone: ZoneInfo) -> _Expression:
    match = _EXPRESSION.match(expression)
    if match is None:
        raise _ExpressionError("is not cron(...), rate(...) or at(...)")
    body = match["body"]
    if match["kind"] == "cron":
        return _parse_cron(body)
    if match["kind"] == "rate":
        return _parse_rate(body)
    return _parse_at(body, zone)


def _parse_rate(body: str) -> _Rate:
    match = _RATE.match(body)
    if match is None:
        raise _ExpressionError("needs a positive whole number and minute(s), hour(s) or day(s), like rate(5 minutes)")
    value, unit = int(match["value"]), match["unit"]
    singular = unit.rstrip("s")
    if value < 1:
        raise _ExpressionError("needs a value of at least 1")
    if value == 1 and unit != singular:
        raise _ExpressionError(f"takes the singular unit for 1: rate(1 {singular})")
    if value > 1 and unit == singular:
        raise _ExpressionError(f"takes the plural unit above 1: rate({value} {singular}s)")
    return _Rate(_RATE_UNITS[singular] * value)


def _parse_at(body: str, zone: ZoneInfo) -> _At:
    match = _AT.match(body)
    if match is None:
        raise _ExpressionError("needs the form at(yyyy-mm-ddThh:mm:ss)")
    year, month, day, hour, minute, second = (int(part) for part in match.groups())
    try:
        local = datetime(year, month, day, hour, minute, second)
    except ValueError as error:
        raise _ExpressionError(f"is not a real date and time: {error}") from None
    if _instant(local, zone) is None:
        raise _ExpressionError(f"does not exist in {zone.key}: the clocks skip it that day")
    return _At(local)


def _parse_cron(body: str) -> _Cron:
    fields = body.upper().split()
    if len(fields) != len(_CRON_FIELDS):
        raise _ExpressionError(f"has {len(fields)} fields; EventBridge cron needs 6: {' '.join(_CRON_FIELDS)}")
    minutes, hours, day_of_month, month, day_of_week, year = fields
    if (day_of_month == "?") == (day_of_week == "?"):
        raise _ExpressionError("needs ? in exactly one of day-of-month and day-of-week")
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
        raise _ExpressionError(f"cannot be evaluated: {error}") from None
    return _Cron(dialect, years)


def _translate_day_of_month(text: str) -> str:
    if text in ("?", "L"):
        return "*" if text == "?" else "L"
    if nearest := _NEAREST_WEEKDAY.match(text):
        return f"{_DAY_OF_MONTH.value(nearest['day'])}W"
    if "L" in text or "W" in text:
        raise _ExpressionError("day-of-month: L and W stand alone, as L or as one day like 15W")
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
            raise _ExpressionError(f"day-of-week: in {text!r} the week of the month must be 1-{CRON_MAX_WEEK_OF_MONTH}")
        return f"{_DAY_OF_WEEK.value(nth['day']) + _CRONITER_WEEKDAY_SHIFT}#{week}"
    if "#" in text or "L" in text:
        raise _ExpressionError("day-of-week: # and L stand alone, like 2#1 (first Monday) or 6L (last Friday)")
    return _DAY_OF_WEEK.translate(text, shift=_CRONITER_WEEKDAY_SHIFT)


# --- occurrences ------------------------------------------------------------------------------


def occurrences(
    schedule: Schedule, after: datetime, until: datetime, *, anchor: datetime | None = None
) -> list[datetime]:
    """Every occurrence strictly after ``after`` and at or before ``until``, as UTC datetimes, in order.

    ``anchor`` is where a rate schedule counts from: its first invocation, which Scheduler makes
    at its StartDate or, without one, as soon as it is created. A declaration cannot know that
    moment, so by default a rate counts from the Unix epoch (``rate(5 minutes)`` on :00, :05, ...).
    Cron and at schedules ignore it.
    """
    _require_aware(after, until)
    result = []
    for instant in _forward(schedule, after, anchor):
        if instant > until:
            break
        result.append(instant)
    return result


def next_occurrence(schedule: Schedule, after: datetime, *, anchor: datetime | None = None) -> datetime | None:
    """The first occurrence strictly after ``after`` (UTC), or None if the schedule never fires again."""
    _require_aware(after)
    return next(_forward(schedule, after, anchor), None)


# How many occurrences `occurrence_gaps` samples: enough to see a weekend in a weekday schedule
# and the short months in a monthly one.
SAMPLED_OCCURRENCES = 64


def occurrence_gaps(schedule: Schedule) -> list[timedelta]:
    """The times between the first consecutive occurrences, on a clock without DST (the expression in UTC).

    Empty for a one-off (``at``). Counted from a fixed instant, so the answer does not change with
    the day it is asked; a clock change stretches or skips one gap a year, which callers allow for.
    """
    on_utc = dataclasses.replace(schedule, timezone="UTC", flexible_window=None)
    moments: list[datetime] = []
    moment = next_occurrence(on_utc, EPOCH)
    while moment is not None and len(moments) < SAMPLED_OCCURRENCES:
        moments.append(moment)
        moment = next_occurrence(on_utc, moment)
    return [later - earlier for earlier, later in itertools.pairwise(moments)]


def previous_occurrence(
    schedule: Schedule, at_or_before: datetime, *, anchor: datetime | None = None
) -> datetime | None:
    """The last occurrence at or before ``at_or_before`` (UTC), or None if there was none."""
    _require_aware(at_or_before)
    return next(_backward(schedule, at_or_before, anchor), None)


def _require_aware(*moments: datetime) -> None:
    if any(moment.utcoffset() is None for moment in moments):
        raise ValueError("schedule arithmetic needs timezone-aware datetimes")


def _forward(schedule: Schedule, after: datetime, anchor: datetime | None) -> Iterator[datetime]:
    parsed = schedule._parsed
    if isinstance(parsed, _Rate):
        start = (anchor or EPOCH).astimezone(UTC)
        first = 0 if after < start else (after - start) // parsed.period + 1
        yield from (start + parsed.period * k for k in count(first))
    elif isinstance(parsed, _At):
        instant = _instant(parsed.local, schedule._zone)
        if instant is not None and instant > after:
            yield instant
    else:
        wall = after.astimezone(schedule._zone).replace(tzinfo=None)
        for local in _wall_matches(parsed, wall, reverse=False):
            instant = _instant(local, schedule._zone)
            # After a repeated hour's second pass, the first pass's later wall times are earlier instants.
            if instant is not None and instant > after:
                yield instant


def _backward(schedule: Schedule, at_or_before: datetime, anchor: datetime | None) -> Iterator[datetime]:
    parsed = schedule._parsed
    if isinstance(parsed, _Rate):
        start = (anchor or EPOCH).astimezone(UTC)
        if at_or_before >= start:
            last = (at_or_before - start) // parsed.period
            yield from (start + parsed.period * k for k in range(last, -1, -1))
    elif isinstance(parsed, _At):
        instant = _instant(parsed.local, schedule._zone)
        if instant is not None and instant <= at_or_before:
            yield instant
    else:
        local = at_or_before.astimezone(schedule._zone)
        # In a repeated hour's second pass, the first pass's wall times up to an hour later are
        # still earlier instants: start that much later on the wall clock and filter in UTC.
        repeated = _offset(local.replace(fold=0)) - _offset(local)
        wall = local.replace(tzinfo=None) + repeated + _ONE_SECOND
        for candidate in _wall_matches(parsed, wall, reverse=True):
            instant = _instant(candidate, schedule._zone)
            if instant is not None and instant <= at_or_before:
                yield instant


def _offset(moment: datetime) -> timedelta:
    return moment.utcoffset() or timedelta(0)


def _wall_matches(cron: _Cron, start: datetime, *, reverse: bool) -> Iterator[datetime]:
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


# --- missed runs --------------------------------------------------------------------------------


class MissedRunPlan(NamedTuple):
    """What a run does about missed occurrences: enqueue some, record the rest missed (``policy.reason``)."""

    to_enqueue: list[datetime]
    to_record_missed: list[datetime]


def missed_occurrences(schedule: Schedule, last_scheduled: datetime | None, now_scheduled: datetime) -> list[datetime]:
    """Occurrences strictly between the last recorded run and this one: the runs that never came.

    With no run recorded yet there is nothing to miss. A rate schedule counts from
    ``last_scheduled``, which was one of its real occurrences.
    """
    if last_scheduled is None:
        return []
    between = occurrences(schedule, last_scheduled, now_scheduled, anchor=last_scheduled)
    return [moment for moment in between if moment < now_scheduled]


def apply_missed_policy(schedule: Schedule, missed: Sequence[datetime]) -> MissedRunPlan:
    """Split missed occurrences by the schedule's policy: catch_up(n) enqueues the n most recent, skip none."""
    ordered = sorted(missed)
    kept = min(schedule.missed.max_runs, len(ordered)) if schedule.missed.kind == "catch_up" else 0
    split = len(ordered) - kept
    return MissedRunPlan(to_enqueue=ordered[split:], to_record_missed=ordered[:split])


# --- the target input: one envelope per occurrence and shard --------------------------------------


class Occurrence(NamedTuple):
    """The schedule, scheduled time and shard a scheduled job's id names."""

    schedule: str
    scheduled_time: datetime
    shard: int | None


def schedule_input(schedule: Schedule, job_type: JobType[Any], shard: int = 0) -> str:
    """The Scheduler target input for one shard: the job's envelope, templated on the occurrence.

    ``id`` and ``dedupe_key`` are ``schedule:<name>@<scheduled time>`` (plus ``#<shard>`` on a
    sharded schedule), the same on every retry and duplicate delivery of one occurrence, so
    the harness runs each occurrence once. ``created_at`` is the scheduled time; the schedule's
    ARN goes in ``correlation.actor``.
    """
    if job_type.name != schedule.job:
        raise ValueError(f"schedule {schedule.name!r} runs job type {schedule.job!r}, not {job_type.name!r}")
    if not 0 <= shard < schedule.shards:
        raise ValueError(f"schedule {schedule.name!r} has shards 0-{schedule.shards - 1}, not {shard}")
    job_id = f"{ORIGIN_PREFIX}{schedule.name}@{SCHEDULED_TIME}" + (f"#{shard}" if schedule.shards > 1 else "")
    envelope = {
        "type": job_type.name,
        "v": job_type.version,
        "id": job_id,
        "dedupe_key": job_id,
        "created_at": SCHEDULED_TIME,
        "correlation": {"origin": f"{ORIGIN_PREFIX}{schedule.name}", "actor": SCHEDULE_ARN},
        "data": schedule.shard_payload(shard),
    }
    return json.dumps(envelope, separators=(",", ":"))


def schedule_inputs(schedule: Schedule, job_type: JobType[Any]) -> tuple[str, ...]:
    """One target input per shard. The stack makes one Scheduler schedule per shard, all on the
    same expression: shards start together, and the flexible window is what spreads them.
    """
    return tuple(schedule_input(schedule, job_type, shard) for shard in range(schedule.shards))


def render_input(template: str, scheduled_time: datetime, schedule_arn: str) -> str:
    """The input as Scheduler delivers it: each context attribute replaced by its value, as text."""
    _require_aware(scheduled_time)
    text = utc_text(scheduled_time, timespec="seconds")
    return template.replace(SCHEDULED_TIME, text).replace(SCHEDULE_ARN, schedule_arn)


def render_catch_up(template: str, scheduled_time: datetime, schedule_arn: str, enqueued_at: datetime) -> str:
    """A missed occurrence's input, enqueued late by the run that found it missing.

    Its id still names the occurrence, so a late delivery by Scheduler collapses into it; but
    ``created_at`` is the enqueue time, because the harness's ``max_wall_time`` counts from
    ``created_at`` and a missed occurrence may be days old.
    """
    _require_aware(enqueued_at)
    envelope = json.loads(render_input(template, scheduled_time, schedule_arn))
    envelope["created_at"] = enqueued_at.astimezone(UTC).isoformat()
    return json.dumps(envelope, separators=(",", ":"))


def parse_occurrence_id(job_id: str) -> Occurrence | None:
    """The occurrence a scheduled job's id names, or None for a job no schedule enqueued."""
    match = _OCCURRENCE_ID.match(job_id)
    if match is None:
        return None
    moment = parse_utc(match["time"])
    return Occurrence(match["name"], moment, None if match["shard"] is None else int(match["shard"]))


def shard_of(key: str, shards: int) -> int:
    """The shard (0..shards-1) that owns ``key``: a stable hash, the same in every process and run."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards
