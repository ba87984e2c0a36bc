"""Schedules: EventBridge's expression rules at declaration, its DST semantics, missed runs, one id per occurrence.

The DST cases follow what EventBridge Scheduler documents (Scheduler User Guide, "Schedule types",
daylight saving time; AWS Knowledge Center "eventbridge-scheduler-adjust-dst"): when the clocks go
forward an occurrence whose local time does not exist is skipped; when they go back an occurrence
whose local time happens twice runs once (AWS does not say which instant: Conveyor takes the first);
``rate`` is elapsed time. Kyiv's clocks go 03:00 -> 04:00 on 2026-03-29 and 04:00 -> 03:00 on
2026-10-25, so 03:30 local is in the gap and in the repeated hour.
"""

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conveyor.contract.cron import next_occurrence, occurrences, previous_occurrence
from conveyor.contract.declarations import JobType, Queue, RetryPolicy
from conveyor.contract.envelope import parse_envelope
from conveyor.contract.errors import DeclarationError
from conveyor.contract.schedule_inputs import (
    SCHEDULE_ARN,
    SCHEDULED_TIME,
    Occurrence,
    parse_occurrence_id,
    render_catch_up,
    render_input,
    schedule_input,
    schedule_inputs,
    shard_of,
)
from conveyor.contract.schedules import MissedReason, Schedule, catch_up, skip
from conveyor.contract.topology import Topology
from conveyor.worker.missed_runs import apply_missed_policy, missed_occurrences
from tests.fixtures.schedule_topology import (
    HEARTBEAT,
    NIGHTLY_REPORT,
    SWEEP_ORDERS,
    TOPOLOGY,
    Report,
    build_report,
    sweep_orders,
)

KYIV = ZoneInfo("Europe/Kyiv")
ARN = "arn:aws:scheduler:us-east-1:123456789012:schedule/conveyor/nightly-report"
ONE_DAY = timedelta(days=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def kyiv(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    """A Kyiv wall-clock time as a UTC instant (the first one, in a repeated hour)."""
    return datetime(year, month, day, hour, minute, tzinfo=KYIV).astimezone(UTC)


def schedule(expression: str, **options: Any) -> Schedule:
    return Schedule("nightly-report", expression, job="build_report", **options)


def test_kyiv_changes_its_clocks_where_these_tests_assume() -> None:
    assert datetime(2026, 3, 29, 0, 59, tzinfo=UTC).astimezone(KYIV).hour == 2
    assert datetime(2026, 3, 29, 1, 0, tzinfo=UTC).astimezone(KYIV).hour == 4
    first, second = utc(2026, 10, 25, 0, 30).astimezone(KYIV), utc(2026, 10, 25, 1, 30).astimezone(KYIV)
    assert (first.hour, first.minute, first.fold) == (3, 30, 0)
    assert (second.hour, second.minute, second.fold) == (3, 30, 1)


# --- expressions at declaration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "cron(0 2 * * *)",
            "has 5 fields; EventBridge cron needs 6: minutes hours day-of-month month day-of-week year",
        ),
        ("cron(0 2 * * ? * *)", "has 7 fields"),
        ("cron(0 2 * * * *)", "needs ? in exactly one of day-of-month and day-of-week"),
        ("cron(0 2 ? * ? *)", "needs ? in exactly one of day-of-month and day-of-week"),
        ("cron(60 2 * * ? *)", "minutes: 60 is outside 0-59"),
        ("cron(0 24 * * ? *)", "hours: 24 is outside 0-23"),
        ("cron(0 2 0 * ? *)", "day-of-month: 0 is outside 1-31"),
        ("cron(0 2 32 * ? *)", "day-of-month: 32 is outside 1-31"),
        ("cron(0 2 * 13 ? *)", "month: 13 is outside 1-12 or JAN-DEC"),
        ("cron(0 2 ? * 0 *)", "day-of-week: 0 is outside 1-7 or SUN-SAT"),
        ("cron(0 2 ? * 8 *)", "day-of-week: 8 is outside 1-7 or SUN-SAT"),
        ("cron(0 2 ? * FUN *)", "day-of-week: 'FUN' is not a number or SUN-SAT"),
        ("cron(0 2 * * ? 1969)", "year: 1969 is outside 1970-2199"),
        ("cron(0 2 * * ? 2200)", "year: 2200 is outside 1970-2199"),
        ("cron(0 2 ? * MON/2 *)", "day-of-week: '/' is not allowed"),
        ("cron(0 2 ? * 2#1,6#3 *)", "day-of-week: # and L stand alone"),
        ("cron(0 2 ? * 6L,2 *)", "day-of-week: # and L stand alone"),
        ("cron(0 2 ? * 2#6 *)", "day-of-week: in '2#6' the week of the month must be 1-5"),
        ("cron(0 2 1,15W * ? *)", "day-of-month: L and W stand alone"),
        ("cron(0 2 1-L * ? *)", "day-of-month: L and W stand alone"),
        ("cron(0 2 ?,1 * ? *)", "day-of-month: '?' is not valid"),
        ("cron(*/0 2 * * ? *)", "minutes: the step in '*/0' must be at least 1"),
        ("cron(0 22-2 * * ? *)", "hours: the range '22-2' runs backwards"),
        ("cron(0 2 31 2 ? *)", "never fires: no date matches it"),
        ("rate(0 minutes)", "needs a value of at least 1"),
        ("rate(1 minutes)", "takes the singular unit for 1: rate(1 minute)"),
        ("rate(5 minute)", "takes the plural unit above 1: rate(5 minutes)"),
        ("rate(2 weeks)", "needs a positive whole number and minute(s), hour(s) or day(s)"),
        ("rate(-5 minutes)", "needs a positive whole number"),
        ("at(2026-02-30T10:00:00)", "is not a real date and time"),
        ("at(2026-03-29 03:30)", "needs the form at(yyyy-mm-ddThh:mm:ss)"),
        ("every day", "is not cron(...), rate(...) or at(...)"),
    ],
)
def test_expression_eventbridge_would_reject_fails_naming_the_schedule(expression: str, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        schedule(expression)
    assert str(raised.value).startswith(f"schedule 'nightly-report': {expression} ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_at_time_the_clocks_skip_is_rejected() -> None:
    with pytest.raises(DeclarationError, match=r"does not exist in Europe/Kyiv: the clocks skip it that day"):
        schedule("at(2026-03-29T03:30:00)", timezone="Europe/Kyiv")


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # EventBridge numbers days from Sunday = 1: 2 is Monday.
        ("cron(0 9 ? * 2 *)", utc(2026, 5, 2), utc(2026, 5, 4, 9)),
        ("cron(0 9 ? * MON-FRI *)", utc(2026, 5, 1, 10), utc(2026, 5, 4, 9)),
        ("cron(0 9 ? * 2-6 *)", utc(2026, 5, 1, 10), utc(2026, 5, 4, 9)),
        # L alone in day-of-week is the week's last day, Saturday.
        ("cron(0 9 ? * L *)", utc(2026, 5, 4), utc(2026, 5, 9, 9)),
        ("cron(0 9 ? * 6L *)", utc(2026, 5, 4), utc(2026, 5, 29, 9)),  # the last Friday
        ("cron(0 9 ? * 2#1 *)", utc(2026, 5, 5), utc(2026, 6, 1, 9)),  # the first Monday
        ("cron(0 9 15W * ? *)", utc(2026, 8, 1), utc(2026, 8, 14, 9)),  # the 15th is a Saturday
        ("cron(0 9 L * ? *)", utc(2028, 2, 1), utc(2028, 2, 29, 9)),
        ("cron(1/10 * * * ? *)", utc(2026, 5, 1, 10, 2), utc(2026, 5, 1, 10, 11)),
        ("cron(0 0 1 JAN ? 2030,2032)", utc(2030, 1, 2), utc(2032, 1, 1)),
        ("cron(0 0 1 JAN ? 2030,2032)", utc(2032, 1, 1), None),
        ("rate(1 minute)", utc(2026, 5, 1, 10, 0, 30), utc(2026, 5, 1, 10, 1)),
        ("rate(2 hours)", utc(2026, 5, 1, 1), utc(2026, 5, 1, 2)),
        ("rate(1 day)", utc(2026, 5, 1, 1), utc(2026, 5, 2)),
        ("at(2026-12-31T23:00:00)", utc(2026, 5, 1), utc(2026, 12, 31, 23)),
        ("at(2026-12-31T23:00:00)", utc(2026, 12, 31, 23), None),
    ],
)
def test_expression_means_what_eventbridge_documents(
    expression: str, after: datetime, expected: datetime | None
) -> None:
    assert next_occurrence(schedule(expression), after) == expected


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Nightly"}, "name must match"),
        ({"name": "x" * 41}, "name must match"),
        ({"timezone": "Europe/Kyjiv"}, "unknown time zone 'Europe/Kyjiv' (use an IANA name)"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"timezone": "Europe"}, "unknown time zone 'Europe'"),
        ({"flexible_window": timedelta(seconds=30)}, "flexible_window must be whole minutes between 1m and 1d"),
        ({"flexible_window": timedelta(seconds=90)}, "flexible_window must be whole minutes"),
        ({"flexible_window": timedelta(minutes=1441)}, "flexible_window must be whole minutes"),
        (
            {"expression": "rate(15 minutes)", "flexible_window": timedelta(minutes=15)},
            "flexible_window must be shorter than the shortest time between occurrences (15m)",
        ),
        ({"shards": 0}, "shards must be between 1 and 32, got 0"),
        ({"shards": 33}, "shards must be between 1 and 32, got 33"),
        ({"missed": catch_up(0)}, "catch_up(max_runs) must be between 1 and 100, got 0"),
        ({"missed": catch_up(101)}, "catch_up(max_runs) must be between 1 and 100, got 101"),
        ({"payload": {"at": datetime(2026, 1, 1)}}, "payload is not JSON-serializable"),
        ({"payload": {"shard": 1}, "shards": 2}, "payload sets ['shard'], which a sharded schedule fills in"),
    ],
)
def test_undeployable_schedule_fails_naming_schedule_and_rule(overrides: dict[str, Any], message: str) -> None:
    options = {"name": "nightly-report", "expression": "cron(30 3 * * ? *)", "job": "build_report"} | overrides
    with pytest.raises(DeclarationError) as raised:
        Schedule(**options)
    assert str(raised.value).startswith(f"schedule {options['name']!r}: ")
    assert message in str(raised.value)


# --- checked against the topology -----------------------------------------------------------------


def topology(*schedules: Schedule, job_types: tuple[JobType[Any], ...] = (build_report, sweep_orders)) -> Topology:
    return Topology(
        queues=(Queue("reports", age_objective=timedelta(minutes=5)),),
        job_types=job_types,
        schedules=schedules,
    )


def test_schedule_of_an_undeclared_job_fails_naming_the_schedule() -> None:
    with pytest.raises(DeclarationError) as raised:
        topology(Schedule("nightly-report", "cron(30 3 * * ? *)", job="build_reprot"))
    assert str(raised.value) == (
        "schedule 'nightly-report': job type 'build_reprot' is not declared (declared: build_report, sweep_orders)"
    )


def test_schedule_declared_twice_fails() -> None:
    with pytest.raises(DeclarationError, match=r"^schedule 'heartbeat': declared twice$"):
        topology(HEARTBEAT, HEARTBEAT)


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            Schedule("bad-payload", "rate(1 hour)", job="build_report", payload={"report": 5}),
            "payload does not fit Report of job type 'build_report': report: Input should be a valid string",
        ),
        (
            Schedule("bad-shards", "rate(1 hour)", job="build_report", payload={"report": "x"}, shards=2),
            "shards=2 needs int fields 'shard' and 'shards' on Report, the model of job type 'build_report'",
        ),
        (
            Schedule("missing-field", "rate(1 hour)", job="sweep_orders", shards=2),
            "payload does not fit SweepShard of job type 'sweep_orders': table: Field required",
        ),
    ],
)
def test_payload_the_job_cannot_read_fails_at_declaration(declared: Schedule, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        topology(declared)
    assert str(raised.value) == f"schedule {declared.name!r}: {message}"


def test_scheduled_job_on_a_fifo_queue_fails() -> None:
    fifo_job = dataclasses.replace(build_report, queue="ordered")
    with pytest.raises(DeclarationError, match=r"runs on FIFO queue 'ordered', which Scheduler cannot send to"):
        Topology(
            queues=(Queue("ordered", age_objective=timedelta(minutes=1), fifo=True),),
            job_types=(fifo_job,),
            schedules=(HEARTBEAT,),
        )


def test_job_keyed_on_payload_fields_cannot_be_scheduled() -> None:
    keyed = dataclasses.replace(build_report, idempotency_key="{report}")
    with pytest.raises(DeclarationError, match=r"only the first would run"):
        topology(HEARTBEAT, job_types=(keyed,))


def test_flexible_window_must_end_before_the_job_would_expire() -> None:
    short = dataclasses.replace(build_report, retry=RetryPolicy(max_wall_time=timedelta(hours=1)))
    late = dataclasses.replace(NIGHTLY_REPORT, flexible_window=timedelta(hours=1))
    with pytest.raises(DeclarationError, match=r"flexible_window must be shorter than the retry.max_wall_time"):
        topology(late, job_types=(short,))


def test_fixture_topology_declares_its_schedules() -> None:
    assert [s.name for s in TOPOLOGY.schedules] == ["nightly-report", "sweep-orders", "heartbeat"]


# --- occurrences and DST --------------------------------------------------------------------------


def test_daily_run_in_the_skipped_hour_is_skipped_in_late_march() -> None:
    assert occurrences(NIGHTLY_REPORT, kyiv(2026, 3, 27), kyiv(2026, 4, 1)) == [
        kyiv(2026, 3, 27, 3, 30),  # 01:30Z, winter time
        kyiv(2026, 3, 28, 3, 30),
        # 2026-03-29 03:30 does not exist in Kyiv: no run.
        kyiv(2026, 3, 30, 3, 30),  # 00:30Z, summer time
        kyiv(2026, 3, 31, 3, 30),
    ]
    assert kyiv(2026, 3, 30, 3, 30) == utc(2026, 3, 30, 0, 30)


def test_daily_run_in_the_repeated_hour_runs_once_in_late_october() -> None:
    assert occurrences(NIGHTLY_REPORT, kyiv(2026, 10, 24), kyiv(2026, 10, 27)) == [
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),  # 03:30 summer time, the first of the two 03:30s; not 01:30Z as well
        utc(2026, 10, 26, 1, 30),
    ]


def test_hourly_runs_lose_no_utc_hour_in_march_and_the_repeated_one_in_october() -> None:
    hourly = schedule("cron(0 * * * ? *)", timezone="Europe/Kyiv")
    march = occurrences(hourly, utc(2026, 3, 28, 21, 30), utc(2026, 3, 29, 3))
    assert march == [utc(2026, 3, 28, 22) + timedelta(hours=h) for h in range(6)]
    october = occurrences(hourly, utc(2026, 10, 24, 21, 30), utc(2026, 10, 25, 2))
    # Local 03:00 comes twice (00:00Z and 01:00Z) and runs once; 04:00 winter time is 02:00Z.
    assert october == [utc(2026, 10, 24, 22), utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 2)]


def test_previous_occurrence_in_the_repeated_hour_finds_the_first_pass() -> None:
    half_hourly = schedule("cron(0/30 3 * * ? *)", timezone="Europe/Kyiv")
    assert occurrences(half_hourly, utc(2026, 10, 24, 22), utc(2026, 10, 25, 3)) == [
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 0, 30),
    ]
    # 01:45Z is 03:45 in the second pass; 03:30 of the first pass (00:30Z) came before it.
    assert previous_occurrence(half_hourly, utc(2026, 10, 25, 1, 45)) == utc(2026, 10, 25, 0, 30)
    assert previous_occurrence(half_hourly, utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 0, 30)
    assert previous_occurrence(NIGHTLY_REPORT, utc(2026, 3, 30, 0, 29)) == kyiv(2026, 3, 28, 3, 30)


def test_rate_is_elapsed_time_across_a_clock_change() -> None:
    daily = schedule("rate(1 day)", timezone="Europe/Kyiv")
    anchor = kyiv(2026, 3, 28, 2, 30)
    runs = occurrences(daily, anchor, anchor + 3 * ONE_DAY, anchor=anchor)
    assert runs == [anchor + ONE_DAY, anchor + 2 * ONE_DAY, anchor + 3 * ONE_DAY]
    # 24 hours apart in UTC, so the local time moves by the hour the clocks jumped (at 01:00Z on the 29th).
    assert [f"{run.astimezone(KYIV):%d %H:%M}" for run in runs] == ["29 02:30", "30 03:30", "31 03:30"]


def test_rate_counts_from_its_anchor_or_the_epoch() -> None:
    assert next_occurrence(HEARTBEAT, utc(2026, 5, 1, 10, 3, 27)) == utc(2026, 5, 1, 10, 5)
    anchor = utc(2026, 5, 1, 9, 58, 27)
    assert next_occurrence(HEARTBEAT, utc(2026, 5, 1, 10, 3, 27), anchor=anchor) == utc(2026, 5, 1, 10, 8, 27)
    assert previous_occurrence(HEARTBEAT, utc(2026, 5, 1, 10, 3, 27), anchor=anchor) == utc(2026, 5, 1, 10, 3, 27)
    assert previous_occurrence(HEARTBEAT, utc(2026, 5, 1, 9, 58), anchor=anchor) is None


def test_at_fires_once_in_its_time_zone() -> None:
    once = schedule("at(2026-10-25T03:30:00)", timezone="Europe/Kyiv")
    assert occurrences(once, utc(2026, 1, 1), utc(2027, 1, 1)) == [utc(2026, 10, 25, 0, 30)]
    assert previous_occurrence(once, utc(2026, 10, 25, 0, 29)) is None


def test_occurrences_exclude_after_and_include_until() -> None:
    first, second = kyiv(2026, 5, 1, 3, 30), kyiv(2026, 5, 2, 3, 30)
    assert occurrences(NIGHTLY_REPORT, first, second) == [second]


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_occurrence(NIGHTLY_REPORT, datetime(2026, 5, 1))


# --- missed runs ------------------------------------------------------------------------------------


def test_catch_up_enqueues_the_most_recent_runs_after_an_outage_and_records_the_rest() -> None:
    last, now = kyiv(2026, 5, 1, 3, 30), kyiv(2026, 5, 12, 3, 30)
    missed = missed_occurrences(NIGHTLY_REPORT, last, now)
    assert missed == [kyiv(2026, 5, day, 3, 30) for day in range(2, 12)]

    plan = apply_missed_policy(NIGHTLY_REPORT, missed)
    assert plan.to_enqueue == [kyiv(2026, 5, day, 3, 30) for day in (9, 10, 11)]
    assert plan.to_record_missed == [kyiv(2026, 5, day, 3, 30) for day in range(2, 9)]
    assert NIGHTLY_REPORT.missed.reason is MissedReason.BEYOND_CATCH_UP_LIMIT


def test_skip_records_every_missed_run_and_enqueues_none() -> None:
    skipping = dataclasses.replace(NIGHTLY_REPORT, missed=skip())
    missed = missed_occurrences(skipping, kyiv(2026, 5, 1, 3, 30), kyiv(2026, 5, 12, 3, 30))
    to_enqueue, to_record_missed = apply_missed_policy(skipping, missed)
    assert to_enqueue == []
    assert to_record_missed == missed
    assert len(missed) == 10
    assert skipping.missed.reason is MissedReason.SKIPPED_BY_POLICY


def test_outage_over_the_march_change_misses_no_run_that_never_existed() -> None:
    last, now = kyiv(2026, 3, 27, 3, 30), kyiv(2026, 3, 31, 3, 30)
    missed = missed_occurrences(NIGHTLY_REPORT, last, now)
    assert missed == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 30, 0, 30)]
    assert apply_missed_policy(NIGHTLY_REPORT, missed) == (missed, [])
    assert apply_missed_policy(dataclasses.replace(NIGHTLY_REPORT, missed=skip()), missed) == ([], missed)
    assert apply_missed_policy(dataclasses.replace(NIGHTLY_REPORT, missed=catch_up(1)), missed) == (
        [utc(2026, 3, 30, 0, 30)],
        [utc(2026, 3, 28, 1, 30)],
    )


def test_outage_over_the_october_change_misses_the_repeated_run_once() -> None:
    missed = missed_occurrences(NIGHTLY_REPORT, utc(2026, 10, 24, 0, 30), utc(2026, 10, 27, 1, 30))
    assert missed == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert apply_missed_policy(dataclasses.replace(NIGHTLY_REPORT, missed=skip()), missed) == ([], missed)


def test_nothing_is_missed_before_the_first_run_or_between_consecutive_runs() -> None:
    assert missed_occurrences(NIGHTLY_REPORT, None, kyiv(2026, 5, 12, 3, 30)) == []
    assert missed_occurrences(NIGHTLY_REPORT, kyiv(2026, 5, 11, 3, 30), kyiv(2026, 5, 12, 3, 30)) == []


def test_missed_rate_runs_count_from_the_last_real_run() -> None:
    last = utc(2026, 5, 1, 10, 3, 27)  # a schedule created at 10:03:27 runs at :03:27, :08:27, ...
    missed = missed_occurrences(HEARTBEAT, last, last + timedelta(minutes=20))
    assert missed == [last + timedelta(minutes=m) for m in (5, 10, 15)]


# --- the target input: exactly one run per occurrence ---------------------------------------------


def test_rendered_input_is_a_valid_envelope_with_a_deterministic_id() -> None:
    template = schedule_input(NIGHTLY_REPORT, build_report)
    body = render_input(template, utc(2026, 3, 30, 0, 30), ARN)

    envelope = parse_envelope(body)
    assert envelope.type == "build_report"
    assert envelope.v == build_report.version
    assert envelope.id == "schedule:nightly-report@2026-03-30T00:30:00Z"
    assert envelope.dedupe_key == envelope.id
    assert envelope.created_at == utc(2026, 3, 30, 0, 30)
    assert envelope.correlation.origin == "schedule:nightly-report"
    assert envelope.correlation.actor == ARN
    assert build_report.load_payload(envelope.data, envelope.v) == Report(report="daily-sales")


def test_template_uses_scheduled_time_and_arn_never_the_per_attempt_execution_id() -> None:
    template = schedule_input(NIGHTLY_REPORT, build_report)
    assert SCHEDULED_TIME in template
    assert SCHEDULE_ARN in template
    assert "<aws.scheduler.execution-id>" not in template
    assert "<aws.scheduler.attempt-number>" not in template


def test_every_delivery_of_one_occurrence_is_byte_identical_and_shares_one_idempotency_key() -> None:
    template = schedule_input(NIGHTLY_REPORT, build_report)
    first = render_input(template, utc(2026, 3, 30, 0, 30), ARN)
    retried = render_input(template, kyiv(2026, 3, 30, 3, 30), ARN)  # the same instant, written in Kyiv time
    tomorrow = render_input(template, utc(2026, 3, 31, 0, 30), ARN)
    assert first == retried
    assert parse_envelope(tomorrow).id == "schedule:nightly-report@2026-03-31T00:30:00Z"

    def key(body: str) -> str:
        envelope = parse_envelope(body)
        payload = build_report.load_payload(envelope.data, envelope.v)
        return build_report.idempotency_key_for(job_id=envelope.id, dedupe_key=envelope.dedupe_key, payload=payload)

    assert key(first) == key(retried) != key(tomorrow)


def test_catch_up_run_keeps_the_occurrence_id_but_counts_its_age_from_enqueue() -> None:
    template = schedule_input(NIGHTLY_REPORT, build_report)
    missed_at, now = utc(2026, 5, 9, 0, 30), utc(2026, 5, 12, 0, 31)
    late = parse_envelope(render_catch_up(template, missed_at, ARN, now))
    on_time = parse_envelope(render_input(template, missed_at, ARN))
    assert late.id == late.dedupe_key == on_time.id == "schedule:nightly-report@2026-05-09T00:30:00Z"
    assert late.created_at == now
    assert late.data == on_time.data


def test_schedule_input_is_for_the_schedules_own_job_and_shards() -> None:
    with pytest.raises(ValueError, match="runs job type 'build_report', not 'sweep_orders'"):
        schedule_input(NIGHTLY_REPORT, sweep_orders)
    with pytest.raises(ValueError, match="has shards 0-3, not 4"):
        schedule_input(SWEEP_ORDERS, sweep_orders, shard=4)


def test_sharded_schedule_sends_one_job_per_shard_with_its_own_id() -> None:
    at = utc(2026, 5, 1, 10, 15)
    envelopes = [parse_envelope(render_input(t, at, ARN)) for t in schedule_inputs(SWEEP_ORDERS, sweep_orders)]

    assert [e.id for e in envelopes] == [f"schedule:sweep-orders@2026-05-01T10:15:00Z#{i}" for i in range(4)]
    assert [e.data for e in envelopes] == [{"table": "orders", "shard": i, "shards": 4} for i in range(4)]
    assert {e.created_at for e in envelopes} == {at}
    for envelope in envelopes:
        sweep_orders.load_payload(envelope.data, envelope.v)


def test_occurrence_id_names_schedule_time_and_shard() -> None:
    at = utc(2026, 5, 1, 10, 15)
    sharded = parse_envelope(render_input(schedule_inputs(SWEEP_ORDERS, sweep_orders)[2], at, ARN))
    single = parse_envelope(render_input(schedule_input(NIGHTLY_REPORT, build_report), at, ARN))
    assert parse_occurrence_id(sharded.id) == Occurrence("sweep-orders", at, 2)
    assert parse_occurrence_id(single.id) == Occurrence("nightly-report", at, None)
    assert parse_occurrence_id("3f1e0c1a-5b7e-4a43-9a39-0c1f5a0e2b77") is None


def test_shard_of_is_stable_and_spreads_keys_over_every_shard() -> None:
    assert shard_of("order-42", 4) == shard_of("order-42", 4)
    owners = {shard_of(f"order-{n}", 4) for n in range(200)}
    assert owners == {0, 1, 2, 3}
