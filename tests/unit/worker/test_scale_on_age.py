"""Scale by age: the controller's steps, and its entry point against moto's mapping, CloudWatch and audit table."""

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from conveyor.contract.declarations import Queue
from conveyor.contract.errors import DeclarationError
from conveyor.contract.scale_settings import ScaleSettings
from conveyor.contract.settings import AUDIT_TABLE_ENV
from conveyor.contract.topology import Topology
from conveyor.ops.audit import AUDIT_KEY, AuditLog
from conveyor.worker.audit import AuditWriter
from conveyor.worker.scale_on_age import (
    ACTOR,
    AGE_METRIC,
    COOL_DOWN,
    SQS_NAMESPACE,
    Ages,
    AgeScaler,
    LambdaMappings,
    MappingState,
    ScaleError,
    decide,
    make_scale_handler,
    read_ages,
)
from tests.lambda_context import lambda_context

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
OBJECTIVE_S = 120.0
ELASTIC = Queue(
    "elastic",
    age_objective=timedelta(seconds=OBJECTIVE_S),
    max_concurrency=4,
    scale_on_age=True,
    scale_min=2,
    scale_max=16,
)
BEHIND = Ages(latest_s=OBJECTIVE_S + 1, peak_s=OBJECTIVE_S + 1)
CALM = Ages(latest_s=0.0, peak_s=OBJECTIVE_S / 2)
LONG_AGO = NOW - COOL_DOWN


def mapping(concurrency: int | None, *, enabled: bool = True, changed_at: datetime | None = LONG_AGO) -> MappingState:
    return MappingState(enabled=enabled, max_concurrency=concurrency, changed_at=changed_at)


def step(current: int | None, ages: Ages, **state: Any) -> int | None:
    """Where one run leaves the mapping's concurrency; None when it leaves it alone."""
    change = decide(ELASTIC, mapping(current, **state), ages, NOW)
    return None if change is None else change.after


@pytest.mark.parametrize(
    ("current", "after"),
    [(4, 8), (8, 16), (12, 16), (16, None), (None, 8), (1, 2), (40, None)],
    ids=["doubles", "doubles-to-max", "capped-at-max", "at-max", "unset-is-declared", "hand-set-low", "hand-set-high"],
)
def test_behind_the_objective_it_doubles_within_the_bounds(current: int | None, after: int | None) -> None:
    assert step(current, BEHIND) == after


@pytest.mark.parametrize(
    ("current", "after"),
    [(16, 8), (8, 4), (3, 2), (2, None), (40, 16)],
    ids=["halves", "halves-again", "floored-at-min", "at-min", "hand-set-high-comes-back-to-max"],
)
def test_calm_for_the_cool_down_it_halves_within_the_bounds(current: int, after: int | None) -> None:
    assert step(current, CALM) == after


@pytest.mark.parametrize(
    ("ages", "state"),
    [
        (Ages(latest_s=OBJECTIVE_S, peak_s=OBJECTIVE_S), {}),  # at the objective: not behind, not calm
        (Ages(latest_s=0.0, peak_s=OBJECTIVE_S / 2 + 1), {}),  # recovered, but not for the whole cool-down
        (CALM, {"changed_at": NOW - COOL_DOWN + timedelta(seconds=1)}),  # calm, but changed within the cool-down
        (Ages(latest_s=None, peak_s=None), {}),  # no datapoint: nothing known, nothing done
        (BEHIND, {"enabled": False}),  # paused
        (CALM, {"enabled": False}),
    ],
    ids=["at-objective", "calm-too-briefly", "changed-recently", "no-data", "paused-behind", "paused-calm"],
)
def test_it_holds_still_in_the_band_within_the_cool_down_without_data_and_while_paused(
    ages: Ages, state: dict[str, Any]
) -> None:
    assert step(8, ages, **state) is None


def test_a_queue_that_does_not_scale_on_age_is_never_changed() -> None:
    fixed = Queue("fixed", age_objective=timedelta(minutes=1), max_concurrency=4)
    assert decide(fixed, mapping(4), BEHIND, NOW) is None


def test_the_change_carries_what_moved_it_for_the_audit() -> None:
    change = decide(ELASTIC, mapping(4), Ages(latest_s=250.04, peak_s=250.04), NOW)
    assert change is not None
    assert change.details() == {"from": 4, "to": 8, "age_s": 250.0, "objective_s": 120.0, "why": "age over objective"}


def put_age(cloudwatch: Any, queue_name: str, at: datetime, age_s: float) -> None:
    cloudwatch.put_metric_data(
        Namespace=SQS_NAMESPACE,
        MetricData=[
            {
                "MetricName": AGE_METRIC,
                "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                "Timestamp": at,
                "Value": age_s,
                "Unit": "Seconds",
            }
        ],
    )


def test_ages_are_the_newest_recent_datapoint_and_the_peak_over_the_cool_down(empty_aws: None) -> None:
    cloudwatch = boto3.client("cloudwatch")
    for minutes_ago, age in ((9, 500.0), (6, 30.0), (2, 10.0)):
        put_age(cloudwatch, "conveyor-busy", NOW - timedelta(minutes=minutes_ago), age)
    put_age(cloudwatch, "conveyor-stale", NOW - timedelta(minutes=8), 20.0)

    ages = read_ages(cloudwatch, {"busy": "conveyor-busy", "stale": "conveyor-stale", "quiet": "conveyor-quiet"}, NOW)

    assert ages == {
        "busy": Ages(latest_s=10.0, peak_s=500.0),
        "stale": Ages(latest_s=None, peak_s=20.0),
        "quiet": Ages(latest_s=None, peak_s=None),
    }


DECLARED_CONCURRENCY = 3


@dataclass
class Deployed:
    lambda_client: Any
    uuid: str


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    """A mapping in moto on a queue nothing sends to: moto's mapping would consume what arrives."""
    with mock_aws():
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = boto3.client("iam").create_role(RoleName="worker", AssumeRolePolicyDocument=json.dumps(trust))
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("index.py", "def handler(event, context):\n    return None\n")
        lambda_client = boto3.client("lambda")
        function = lambda_client.create_function(
            FunctionName="conveyor-q-worker",
            Runtime="python3.12",
            Role=role["Role"]["Arn"],
            Handler="index.handler",
            Code={"ZipFile": code.getvalue()},
        )["FunctionArn"]
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="conveyor-q")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        uuid = lambda_client.create_event_source_mapping(
            EventSourceArn=queue_arn,
            FunctionName=function,
            BatchSize=10,
            ScalingConfig={"MaximumConcurrency": DECLARED_CONCURRENCY},
        )["UUID"]
        yield Deployed(lambda_client, uuid)


SCALED = Topology(
    queues=(
        Queue(
            "q",
            age_objective=timedelta(seconds=OBJECTIVE_S),
            max_concurrency=DECLARED_CONCURRENCY,
            scale_on_age=True,
            scale_max=10,
        ),
    )
)
AUDIT_TABLE = "conveyor-ops-audit"


def audit_table() -> str:
    boto3.client("dynamodb").create_table(
        TableName=AUDIT_TABLE,
        KeySchema=[{"AttributeName": AUDIT_KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": AUDIT_KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return AUDIT_TABLE


def test_the_entry_point_raises_the_mapping_and_audits_it_as_a_concurrency_change(
    deployed: Deployed,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = ScaleSettings(audit_table=audit_table(), mappings={"q": deployed.uuid}, queue_names={"q": "conveyor-q"})
    for name, value in settings.to_environment().items():
        monkeypatch.setenv(name, value)
    put_age(boto3.client("cloudwatch"), "conveyor-q", datetime.now(UTC) - timedelta(minutes=1), OBJECTIVE_S * 3)

    response = make_scale_handler(SCALED)({}, lambda_context(function_name="conveyor-scale-on-age"))

    assert response == {
        "changes": [
            {"queue": "q", "from": 3, "to": 6, "age_s": 360.0, "objective_s": 120.0, "why": "age over objective"}
        ]
    }
    scaling = deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)["ScalingConfig"]
    assert scaling == {"MaximumConcurrency": 6}
    (entry,) = AuditLog(boto3.client("dynamodb"), AUDIT_TABLE, actor="reader").entries(queue="q")
    assert (entry.actor, entry.action, entry.details["from"], entry.details["to"]) == (ACTOR, "concurrency", 3, 6)


def test_a_queue_that_cannot_be_read_fails_the_run_after_the_others_are_scaled(
    deployed: Deployed,
) -> None:
    topology = Topology(
        queues=(*SCALED.queues, Queue("gone", age_objective=timedelta(minutes=1), scale_on_age=True, scale_max=20))
    )
    scaler = AgeScaler(
        topology,
        ages=lambda now: dict.fromkeys(("gone", "q"), BEHIND),
        mappings=LambdaMappings(
            deployed.lambda_client, {"q": deployed.uuid, "gone": "0" * 8 + "-0000-0000-0000-" + "0" * 12}
        ),
        audit=AuditWriter(boto3.client("dynamodb"), audit_table(), actor=ACTOR),
    )

    with pytest.raises(ScaleError, match=r"^scaling on age failed for gone \(.*ResourceNotFoundException"):
        scaler.tick()

    assert deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)["ScalingConfig"] == {
        "MaximumConcurrency": 6
    }


def test_the_entry_point_without_its_settings_fails_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUDIT_TABLE_ENV, raising=False)
    with pytest.raises(DeclarationError, match=f"^scale-on-age environment: missing {AUDIT_TABLE_ENV}, "):
        make_scale_handler(SCALED)({}, lambda_context())
