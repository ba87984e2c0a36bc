"""The declared schedules deploy as EventBridge Scheduler schedules with bounded retries, a DLQ,
the templated envelope and a least-privilege role, each watched by a dead man's switch."""

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract import limits, outputs
from conveyor.contract.declarations import Queue, RetryPolicy
from conveyor.contract.errors import DeclarationError
from conveyor.contract.outputs import STACK_NAME
from conveyor.contract.schedule_inputs import (
    MAX_EVENT_AGE,
    RETRY_ATTEMPTS,
    SCHEDULE_ARN,
    SCHEDULED_TIME,
    delivery_retry,
    schedule_inputs,
)
from conveyor.contract.schedules import Schedule
from conveyor.contract.settings import METRICS_NAMESPACE, WorkerSettings
from conveyor.worker import metrics
from conveyor.worker.missed_runs import emit_schedule_succeeded
from infra.app import PREFIX_CONTEXT, project_context
from infra.job_queue import DLQ_RETENTION
from infra.schedules import (
    DEAD_MANS_INTERVALS,
    MAX_EVALUATION_RANGE,
    MAX_PERIOD,
    MAX_SHORT_PERIOD_RANGE,
    SHORT_PERIOD,
    AlarmWindow,
    alarm_window,
    longest_gap,
    scheduler_name,
)
from tests.fixtures import schedule_topology as fixture
from tests.infra.conftest import Synthesized, synthesize

# The fixture's schedules (daily in Kyiv, sharded every 15 minutes, a 5-minute rate), plus an
# hourly cron and a one-off.
HOURLY = Schedule(
    "hourly-digest",
    "cron(0 * * * ? *)",
    job=fixture.build_report.name,
    payload={"report": "digest"},
    timezone="America/New_York",
)
ONE_OFF = Schedule(
    "launch-report", "at(2027-01-15T09:00:00)", job=fixture.build_report.name, payload={"report": "launch"}
)
TOPOLOGY = dataclasses.replace(fixture.TOPOLOGY, schedules=(*fixture.TOPOLOGY.schedules, HOURLY, ONE_OFF))
PREFIX: str = project_context()[PREFIX_CONTEXT]
EXECUTION_ID = "<aws.scheduler.execution-id>"
# Scheduler's defaults, which an unbounded target would get.
DEFAULT_RETRY_ATTEMPTS = limits.SCHEDULER_DEFAULT_RETRY_ATTEMPTS
DEFAULT_MAX_EVENT_AGE = limits.SCHEDULER_DEFAULT_EVENT_AGE
SHARDS = [(schedule, shard) for schedule in TOPOLOGY.schedules for shard in range(schedule.shards)]
ONE_DAY = 86400


def _id(value: tuple[Schedule, int] | Schedule) -> str:
    schedule, shard = value if isinstance(value, tuple) else (value, 0)
    return f"{schedule.name}#{shard}"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(
        TOPOLOGY, "tests.fixtures.schedule_topology:TOPOLOGY", tmp_path_factory.mktemp("cdk.out.schedules")
    )


def _schedules(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    """Every Scheduler schedule's properties, by its name."""
    return {
        resource["Properties"]["Name"]: resource["Properties"]
        for resource in synthesized.template.find_resources("AWS::Scheduler::Schedule").values()
    }


def _group(synthesized: Synthesized) -> str:
    (group_id,) = [
        logical_id
        for logical_id, resource in synthesized.template.find_resources("AWS::Scheduler::ScheduleGroup").items()
        if resource["Properties"]["Name"] == f"{PREFIX}-schedules"
    ]
    return group_id


def _arn(logical_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def test_one_scheduler_schedule_per_declaration_and_shard(synthesized: Synthesized) -> None:
    deployed = _schedules(synthesized)
    # The ops group's one-time resumes are created by `conveyor`, not by the stack.
    assert set(deployed) == {scheduler_name(PREFIX, schedule, shard) for schedule, shard in SHARDS}
    assert len(deployed) == sum(schedule.shards for schedule in TOPOLOGY.schedules) == 8
    assert "conveyor-sweep-orders-3" in deployed
    assert "conveyor-nightly-report" in deployed


@pytest.mark.parametrize(("schedule", "shard"), SHARDS, ids=[_id(value) for value in SHARDS])
def test_schedule_keeps_the_declared_expression_time_zone_and_window(
    synthesized: Synthesized, schedule: Schedule, shard: int
) -> None:
    properties = _schedules(synthesized)[scheduler_name(PREFIX, schedule, shard)]
    assert properties["ScheduleExpression"] == schedule.expression
    assert properties["ScheduleExpressionTimezone"] == schedule.timezone
    window = schedule.flexible_window
    assert properties["FlexibleTimeWindow"] == (
        {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": int(window / timedelta(minutes=1))}
        if window
        else {"Mode": "OFF"}
    )
    assert properties["GroupName"] == synthesized.properties(_group(synthesized))["Name"]
    assert properties["State"] == "ENABLED"


@pytest.mark.parametrize(("schedule", "shard"), SHARDS, ids=[_id(value) for value in SHARDS])
def test_schedule_sends_its_shards_envelope_template_to_the_jobs_queue(
    synthesized: Synthesized, schedule: Schedule, shard: int
) -> None:
    job_type = TOPOLOGY.job_type(schedule.job)
    target = _schedules(synthesized)[scheduler_name(PREFIX, schedule, shard)]["Target"]
    assert target["Arn"] == _arn(synthesized.of_queue(job_type.queue).queue)
    assert target["Input"] == schedule_inputs(schedule, job_type)[shard]
    envelope = json.loads(target["Input"])
    assert envelope["type"] == job_type.name
    # One occurrence, one id, however often Scheduler retries it: never the per-attempt execution id.
    assert SCHEDULED_TIME in envelope["id"]
    assert envelope["dedupe_key"] == envelope["id"]
    assert envelope["created_at"] == SCHEDULED_TIME
    assert envelope["correlation"]["actor"] == SCHEDULE_ARN
    assert EXECUTION_ID not in target["Input"]
    assert envelope["data"] == schedule.shard_payload(shard)


@pytest.mark.parametrize(("schedule", "shard"), SHARDS, ids=[_id(value) for value in SHARDS])
def test_retries_are_bounded_and_undeliverable_invocations_go_to_the_dlq(
    synthesized: Synthesized, schedule: Schedule, shard: int
) -> None:
    target = _schedules(synthesized)[scheduler_name(PREFIX, schedule, shard)]["Target"]
    retry = target["RetryPolicy"]
    assert retry == {
        "MaximumRetryAttempts": RETRY_ATTEMPTS,
        "MaximumEventAgeInSeconds": int(
            delivery_retry(schedule, TOPOLOGY.job_type(schedule.job)).max_event_age.total_seconds()
        ),
    }
    assert retry["MaximumRetryAttempts"] < DEFAULT_RETRY_ATTEMPTS
    assert retry["MaximumEventAgeInSeconds"] <= MAX_EVENT_AGE.total_seconds() < DEFAULT_MAX_EVENT_AGE.total_seconds()
    assert target["DeadLetterConfig"] == {"Arn": _arn(synthesized.output_ref(outputs.SCHEDULES_DLQ_URL))}


def test_max_event_age_never_delivers_a_job_its_wall_time_has_expired() -> None:
    report = fixture.build_report
    sweep = fixture.sweep_orders
    assert delivery_retry(fixture.NIGHTLY_REPORT, report) == (RETRY_ATTEMPTS, MAX_EVENT_AGE)
    short = dataclasses.replace(sweep, retry=RetryPolicy(max_wall_time=timedelta(minutes=30)))
    # Scheduler may invoke 5 minutes late (the flexible window): 25 minutes of retries are left.
    assert delivery_retry(fixture.SWEEP_ORDERS, short).max_event_age == timedelta(minutes=25)
    tight = dataclasses.replace(sweep, retry=RetryPolicy(max_wall_time=timedelta(minutes=5, seconds=30)))
    assert delivery_retry(fixture.SWEEP_ORDERS, tight).max_event_age == timedelta(minutes=1)  # Scheduler's minimum


def test_schedules_dlq_is_encrypted_tls_only_retained_and_alarmed(synthesized: Synthesized) -> None:
    dlq_id = synthesized.output_ref(outputs.SCHEDULES_DLQ_URL)
    dlq = synthesized.properties(dlq_id)
    assert dlq["QueueName"] == f"{PREFIX}-schedules-dlq"
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == DLQ_RETENTION.to_seconds()
    (policy,) = [
        resource["Properties"]["PolicyDocument"]["Statement"]
        for resource in synthesized.template.find_resources("AWS::SQS::QueuePolicy").values()
        if resource["Properties"]["Queues"] == [{"Ref": dlq_id}]
    ]
    assert {
        "Action": "sqs:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Resource": _arn(dlq_id),
    } in policy
    (alarm,) = [
        resource["Properties"]
        for resource in synthesized.template.find_resources("AWS::CloudWatch::Alarm").values()
        if resource["Properties"].get("Dimensions")
        == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}]
    ]
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]


def test_scheduler_role_may_send_to_its_queue_and_the_dlq_only(synthesized: Synthesized) -> None:
    roles = {json.dumps(properties["Target"]["RoleArn"]) for properties in _schedules(synthesized).values()}
    # Every scheduled job of the fixture runs on one queue: one role.
    (role_arn,) = roles
    role_id = json.loads(role_arn)["Fn::GetAtt"][0]
    role = synthesized.properties(role_id)
    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
            # Only schedules of this account's group (confused-deputy protection).
            "Condition": {
                "StringEquals": {
                    "aws:SourceAccount": {"Ref": "AWS::AccountId"},
                    "aws:SourceArn": _arn(_group(synthesized)),
                }
            },
        }
    ]
    granted: dict[str, set[str]] = {}
    for policy in synthesized.template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            for resource in resources:
                granted.setdefault(json.dumps(resource), set()).update(actions)
    assert granted == {
        json.dumps(_arn(synthesized.of_queue("reports").queue)): {"sqs:SendMessage"},
        json.dumps(_arn(synthesized.output_ref(outputs.SCHEDULES_DLQ_URL))): {"sqs:SendMessage"},
    }


def _dead_mans_alarms(synthesized: Synthesized, *, per_shard: bool = False) -> dict[Any, dict[str, Any]]:
    """The dead man's alarms, by the schedule their metric's dimensions name (or by schedule and shard)."""
    found: dict[Any, dict[str, Any]] = {}
    for resource in synthesized.template.find_resources("AWS::CloudWatch::Alarm").values():
        properties = resource["Properties"]
        if properties.get("MetricName") == metrics.SCHEDULE_SUCCEEDED:
            dimensions = {dimension["Name"]: dimension["Value"] for dimension in properties["Dimensions"]}
            if (metrics.SHARD_DIMENSION in dimensions) != per_shard:
                continue
            if per_shard:
                assert dimensions.keys() == {metrics.SCHEDULE_DIMENSION, metrics.SHARD_DIMENSION}
                found[(dimensions[metrics.SCHEDULE_DIMENSION], int(dimensions[metrics.SHARD_DIMENSION]))] = properties
            else:
                assert dimensions.keys() == {metrics.SCHEDULE_DIMENSION}
                found[dimensions[metrics.SCHEDULE_DIMENSION]] = properties
    return found


def test_a_sharded_schedule_has_a_dead_mans_switch_per_shard_on_what_each_shard_writes(
    synthesized: Synthesized, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = fixture.SWEEP_ORDERS
    per_shard = _dead_mans_alarms(synthesized, per_shard=True)
    assert set(per_shard) == {(sweep.name, shard) for shard in range(sweep.shards)}, "unsharded schedules have none"
    whole = _dead_mans_alarms(synthesized)[sweep.name]
    for alarm in per_shard.values():
        for setting in ("Period", "EvaluationPeriods", "Threshold", "ComparisonOperator", "TreatMissingData"):
            assert alarm[setting] == whole[setting]
    emit_schedule_succeeded(sweep.name, 2)
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    written = [set(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) for d in documents]
    assert {metrics.SCHEDULE_DIMENSION, metrics.SHARD_DIMENSION} in written
    assert {metrics.SCHEDULE_DIMENSION} in written


def test_the_alarm_watches_exactly_what_the_worker_writes_on_lambda(
    synthesized: Synthesized, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An alarm matches a metric's dimension set exactly: one dimension more or less, and it never sees a run."""
    settings = WorkerSettings(
        queue="reports",
        queue_url="q",
        dlq_url="d",
        idempotency_table="i",
        checkpoints_table="c",
        schedule_runs_table="r",
        leases_table="l",
        limits_table="lim",
        ledger_table="led",
    )
    for name, value in settings.to_environment().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    emit_schedule_succeeded(fixture.NIGHTLY_REPORT.name)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    document = json.loads(line)
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    (dimension_names,) = directive["Dimensions"]
    alarm = _dead_mans_alarms(synthesized)[fixture.NIGHTLY_REPORT.name]
    assert directive["Namespace"] == alarm["Namespace"]
    assert [metric["Name"] for metric in directive["Metrics"]] == [alarm["MetricName"]]
    written = {name: document[name] for name in dimension_names}
    assert written == {dimension["Name"]: dimension["Value"] for dimension in alarm["Dimensions"]}


@pytest.mark.parametrize(
    ("schedule", "period", "evaluation_periods"),
    [
        (fixture.NIGHTLY_REPORT, ONE_DAY, 2),  # daily: two days without a run
        (HOURLY, 3600, 2),  # hourly: two hours
        (fixture.SWEEP_ORDERS, 20 * 60, 2),  # every 15 minutes, up to 5 minutes late
        (fixture.HEARTBEAT, 5 * 60, 2),
    ],
    ids=lambda value: value.name if isinstance(value, Schedule) else str(value),
)
def test_dead_mans_switch_fires_when_no_run_succeeded_for_two_intervals(
    synthesized: Synthesized, schedule: Schedule, period: int, evaluation_periods: int
) -> None:
    alarm = _dead_mans_alarms(synthesized)[schedule.name]
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    assert alarm["Namespace"] == METRICS_NAMESPACE
    assert alarm["Statistic"] == "Sum"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("LessThanThreshold", 1)
    # A run that never happened writes no data point: missing data is the failure.
    assert alarm["TreatMissingData"] == "breaching"
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (period, evaluation_periods)
    assert "DatapointsToAlarm" not in alarm  # every evaluated period must be empty
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]


def test_a_one_off_schedule_has_no_dead_mans_switch(synthesized: Synthesized) -> None:
    assert set(_dead_mans_alarms(synthesized)) == {s.name for s in TOPOLOGY.schedules} - {ONE_OFF.name}


def _every(expression: str, **options: Any) -> Schedule:
    return Schedule("probe", expression, job="probe", **options)


@pytest.mark.parametrize(
    ("expression", "options", "expected"),
    [
        ("cron(0/1 * * * ? *)", {}, AlarmWindow(timedelta(minutes=1), 2)),
        ("rate(1 hour)", {"flexible_window": timedelta(minutes=15)}, AlarmWindow(timedelta(minutes=75), 2)),
        # A clock change is not an interval: a daily run in Kyiv is watched like one in UTC.
        ("cron(30 3 * * ? *)", {"timezone": "Europe/Kyiv"}, AlarmWindow(timedelta(days=1), 2)),
        # Longer than a day: counted in days. Weekdays only: Friday to Monday is the longest gap.
        ("cron(0 9 ? * MON-FRI *)", {}, AlarmWindow(timedelta(days=1), 6)),
        ("rate(2 days)", {}, AlarmWindow(timedelta(days=1), 4)),
        # Two intervals would exceed CloudWatch's 7 days: all 7, still a day more than an interval.
        ("rate(6 days)", {}, AlarmWindow(timedelta(days=1), 7)),
        # Weekly and sparser: 7 days cannot hold an interval and a day of slack.
        ("cron(0 9 ? * MON *)", {}, None),
        ("cron(0 0 1 * ? *)", {}, None),
        ("at(2027-01-15T09:00:00)", {}, None),
    ],
)
def test_alarm_window_follows_the_interval_within_cloudwatch_limits(
    expression: str, options: dict[str, Any], expected: AlarmWindow | None
) -> None:
    window = alarm_window(_every(expression, **options))
    assert window == expected
    if window is not None:
        period, evaluation_periods = window
        assert period <= MAX_PERIOD
        assert not period % timedelta(minutes=1)
        limit = MAX_SHORT_PERIOD_RANGE if period < SHORT_PERIOD else MAX_EVALUATION_RANGE
        assert period * evaluation_periods <= limit
        gap = longest_gap(_every(expression, **options))
        assert gap is not None
        # Never fires while runs arrive on time: the window holds an interval and a period of slack.
        interval = gap + options.get("flexible_window", timedelta(0))
        assert period * evaluation_periods >= min(DEAD_MANS_INTERVALS * interval, interval + period)


def test_longest_gap_is_the_longest_of_the_sampled_gaps_not_the_first() -> None:
    # From 1970-01-31, the first gap is February's 28 days.
    assert longest_gap(_every("cron(0 0 L * ? *)")) == timedelta(days=31)
    assert longest_gap(_every("cron(0 0 1 * ? *)")) == timedelta(days=31)


def test_a_scheduler_name_over_64_characters_fails_with_the_schedules_name() -> None:
    schedule = dataclasses.replace(fixture.SWEEP_ORDERS, name="s" * 40)
    assert len(scheduler_name("p" * 20, schedule, 31)) == 64
    with pytest.raises(DeclarationError, match=r"^schedule 's{40}': its Scheduler name 'p{21}-s{40}-31' has 65"):
        scheduler_name("p" * 21, schedule, 31)


def test_a_queue_whose_dlq_would_take_the_schedules_dlqs_name_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"^queue 'schedules': the name is reserved"):
        Queue("schedules", age_objective=timedelta(minutes=5))


def test_outputs_name_the_group_and_the_dlq(synthesized: Synthesized) -> None:
    stack_outputs = synthesized.template.to_json()["Outputs"]
    assert stack_outputs[outputs.SCHEDULE_GROUP]["Value"] == f"{PREFIX}-schedules"
    dlq_id = synthesized.output_ref(outputs.SCHEDULES_DLQ_URL)
    assert synthesized.properties(dlq_id)["QueueName"] == f"{PREFIX}-schedules-dlq"
    assert outputs.SCHEDULE_RUNS_TABLE in stack_outputs
    assert outputs.LEASES_TABLE in stack_outputs


def test_dashboard_shows_each_watched_schedule_and_the_dlq(synthesized: Synthesized) -> None:
    (dashboard,) = synthesized.template.find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(part for part in parts if isinstance(part, str))
    assert "## Schedules" in body
    for name in _dead_mans_alarms(synthesized):
        assert f'"{metrics.SCHEDULE_SUCCEEDED}","{metrics.SCHEDULE_DIMENSION}","{name}"' in body


def test_schedules_pass_aws_solutions_checks_with_one_acknowledgment(synthesized: Synthesized) -> None:
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    assert [plugin for plugin in report["pluginReports"] if plugin.get("conclusion") == "failure"] == []
    metadata = json.loads((synthesized.outdir / f"{STACK_NAME}.metadata.json").read_text())
    acknowledged = {
        path: entry["data"]
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == "aws:cdk:acknowledged-rules" and path.startswith(f"/{STACK_NAME}/Schedules/")
    }
    # The schedules DLQ is itself a dead-letter queue, of the schedules' targets rather than of a queue.
    assert list(acknowledged) == [f"/{STACK_NAME}/Schedules/Dlq"]
    assert list(acknowledged[f"/{STACK_NAME}/Schedules/Dlq"]) == ["AwsSolutions::AwsSolutions-SQS3"]
