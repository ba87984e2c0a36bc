"""Pause, resume and concurrency, as the ops CLI changes them: locally in a table, in AWS on the mapping."""

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from conveyor.contract.declarations import Queue
from conveyor.contract.topology import Topology
from conveyor.ops.event_sources import (
    RESUME_TARGET_ARN,
    EventSources,
    EventSourceState,
    LambdaEventSources,
    LocalEventSources,
    ResumeSchedules,
)
from tests.aws import moto_aws

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
DECLARED_CONCURRENCY = 3
TOPOLOGY = Topology(queues=(Queue("q", age_objective=timedelta(minutes=1), max_concurrency=DECLARED_CONCURRENCY),))
SCHEDULE_GROUP = "conveyor-ops"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Local:
    dynamodb: Any
    table: str
    clock: Clock

    def sources(self, dynamodb: Any = None) -> LocalEventSources:
        return LocalEventSources(dynamodb or self.dynamodb, self.table, clock=self.clock)


@pytest.fixture
def local() -> Iterator[Local]:
    for aws in moto_aws(TOPOLOGY):
        yield Local(aws.dynamodb, aws.provisioned.event_sources_table, Clock(NOW))


@dataclass
class Deployed:
    lambda_client: Any
    scheduler: Any
    uuid: str
    sources: LambdaEventSources
    schedules: ResumeSchedules

    def schedule_names(self) -> list[str]:
        listed = self.scheduler.list_schedules(GroupName=SCHEDULE_GROUP)["Schedules"]
        return [schedule["Name"] for schedule in listed]


def _function_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    """A mapping in moto on a queue nothing sends to: moto's mapping would consume what arrives."""
    with mock_aws():
        role = boto3.client("iam").create_role(
            RoleName="conveyor-worker",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )["Role"]["Arn"]
        lambda_client = boto3.client("lambda")
        function = lambda_client.create_function(
            FunctionName="conveyor-q-worker",
            Runtime="python3.12",
            Role=role,
            Handler="index.handler",
            Code={"ZipFile": _function_zip()},
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
        scheduler = boto3.client("scheduler")
        scheduler.create_schedule_group(Name=SCHEDULE_GROUP)
        schedules = ResumeSchedules(group=SCHEDULE_GROUP, role_arn=role, prefix="conveyor")
        sources = LambdaEventSources(lambda_client, scheduler, mappings={"q": uuid}, schedules=schedules)
        yield Deployed(lambda_client, scheduler, uuid, sources, schedules)


@pytest.fixture(params=["local", "deployed"])
def event_sources(request: pytest.FixtureRequest) -> EventSources:
    """Either implementation, for the behaviour both must share."""
    backend = request.getfixturevalue(request.param)
    sources: EventSources = backend.sources() if isinstance(backend, Local) else backend.sources
    return sources


# Both implementations


@pytest.mark.parametrize("value", [1, 1001])
def test_concurrency_outside_lambdas_range_is_refused(event_sources: EventSources, value: int) -> None:
    with pytest.raises(ValueError, match=f"concurrency {value}: must be between 2 and 1000"):
        event_sources.set_max_concurrency("q", value)
    assert event_sources.state("q").max_concurrency == DECLARED_CONCURRENCY


@pytest.mark.parametrize(
    "operation",
    [
        lambda sources: sources.state("nope"),
        lambda sources: sources.pause("nope", resume_at=None),
        lambda sources: sources.resume("nope"),
        lambda sources: sources.set_max_concurrency("nope", 5),
    ],
    ids=["state", "pause", "resume", "set_max_concurrency"],
)
def test_an_unknown_queue_is_a_lookup_error(
    event_sources: EventSources, operation: Callable[[EventSources], object]
) -> None:
    with pytest.raises(LookupError, match="'nope'"):
        operation(event_sources)


def test_pause_then_resume_round_trips(event_sources: EventSources) -> None:
    event_sources.pause("q", resume_at=None)
    assert event_sources.state("q") == EventSourceState(enabled=False, max_concurrency=DECLARED_CONCURRENCY)
    event_sources.resume("q")
    assert event_sources.state("q") == EventSourceState(enabled=True, max_concurrency=DECLARED_CONCURRENCY)


def test_a_timed_pause_reads_back_its_resume_time(event_sources: EventSources) -> None:
    event_sources.pause("q", resume_at=LATER)
    assert event_sources.state("q") == EventSourceState(
        enabled=False, max_concurrency=DECLARED_CONCURRENCY, resume_at=LATER
    )
    event_sources.resume("q")
    assert event_sources.state("q").resume_at is None


def test_set_max_concurrency_is_read_back(event_sources: EventSources) -> None:
    event_sources.set_max_concurrency("q", 7)
    assert event_sources.state("q").max_concurrency == 7


# Local


def test_seeding_again_keeps_a_paused_queue_and_adds_new_ones(local: Local) -> None:
    sources = local.sources()
    sources.pause("q", resume_at=LATER)
    grown = Topology(queues=(*TOPOLOGY.queues, Queue("r", age_objective=timedelta(minutes=1), max_concurrency=4)))
    sources.seed(grown)
    assert sources.state("q") == EventSourceState(enabled=False, max_concurrency=DECLARED_CONCURRENCY, resume_at=LATER)
    assert sources.state("r") == EventSourceState(enabled=True, max_concurrency=4)


def test_a_due_timed_pause_reads_as_enabled_and_is_persisted_as_resumed(local: Local) -> None:
    sources = local.sources()
    sources.pause("q", resume_at=LATER)
    assert not sources.state("q").enabled
    local.clock.now = LATER
    assert sources.state("q") == EventSourceState(enabled=True, max_concurrency=DECLARED_CONCURRENCY)
    # A reader whose clock is still before the resume time sees it resumed: it was written back.
    assert LocalEventSources(local.dynamodb, local.table, clock=Clock(NOW)).state("q").enabled


def test_states_reads_every_queue_and_fires_a_due_resume(local: Local) -> None:
    sources = local.sources()
    sources.seed(Topology(queues=(*TOPOLOGY.queues, Queue("r", age_objective=timedelta(minutes=1), max_concurrency=4))))
    sources.pause("q", resume_at=LATER)
    sources.pause("r", resume_at=None)
    local.clock.now = LATER
    assert sources.states(["q", "r"]) == {
        "q": EventSourceState(enabled=True, max_concurrency=DECLARED_CONCURRENCY),
        "r": EventSourceState(enabled=False, max_concurrency=4),
    }
    assert LocalEventSources(local.dynamodb, local.table, clock=Clock(NOW)).state("q").enabled


def test_states_with_an_unknown_queue_is_a_lookup_error_naming_it(local: Local) -> None:
    with pytest.raises(LookupError, match="'nope'"):
        local.sources().states(["q", "nope"])


class PausingAgainAfterRead:
    """The table's client, with an operator's new pause landing just after the first read."""

    def __init__(self, dynamodb: Any, sources: LocalEventSources, resume_at: datetime) -> None:
        self._dynamodb = dynamodb
        self._sources = sources
        self._resume_at: datetime | None = resume_at
        self.exceptions = dynamodb.exceptions

    def get_item(self, **kwargs: Any) -> Any:
        item = self._dynamodb.get_item(**kwargs)
        if self._resume_at is not None:
            self._sources.pause("q", resume_at=self._resume_at)
            self._resume_at = None
        return item

    def update_item(self, **kwargs: Any) -> Any:
        return self._dynamodb.update_item(**kwargs)


def test_a_due_resume_does_not_undo_a_pause_made_meanwhile(local: Local) -> None:
    local.sources().pause("q", resume_at=NOW)
    much_later = LATER + timedelta(days=1)
    racing = local.sources(PausingAgainAfterRead(local.dynamodb, local.sources(), much_later))
    local.clock.now = LATER
    assert racing.state("q") == EventSourceState(
        enabled=False, max_concurrency=DECLARED_CONCURRENCY, resume_at=much_later
    )


# Deployed


def test_pause_disables_the_mapping(deployed: Deployed) -> None:
    deployed.sources.pause("q", resume_at=None)
    mapping = deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)
    assert mapping["State"] == "Disabled"
    assert deployed.schedule_names() == []


def test_a_timed_pause_leaves_a_one_time_schedule_that_enables_the_mapping(deployed: Deployed) -> None:
    deployed.sources.pause("q", resume_at=LATER)
    schedule = deployed.scheduler.get_schedule(Name=deployed.schedules.name("q"), GroupName=SCHEDULE_GROUP)
    assert schedule["ScheduleExpression"] == "at(2026-11-20T10:30:00)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == RESUME_TARGET_ARN
    assert schedule["Target"]["RoleArn"] == deployed.schedules.role_arn
    assert json.loads(schedule["Target"]["Input"]) == {"UUID": deployed.uuid, "Enabled": True}
    assert schedule["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 3600}


def test_pausing_again_moves_the_resume_time(deployed: Deployed) -> None:
    deployed.sources.pause("q", resume_at=LATER)
    deployed.sources.pause("q", resume_at=LATER + timedelta(hours=1))
    assert deployed.schedule_names() == [deployed.schedules.name("q")]
    assert deployed.sources.state("q").resume_at == LATER + timedelta(hours=1)


def test_resume_deletes_the_schedule_and_enables_the_mapping(deployed: Deployed) -> None:
    deployed.sources.pause("q", resume_at=LATER)
    deployed.sources.resume("q")
    assert deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)["State"] == "Enabled"
    assert deployed.schedule_names() == []


def test_set_max_concurrency_sets_the_mappings_scaling_config(deployed: Deployed) -> None:
    deployed.sources.set_max_concurrency("q", 7)
    mapping = deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 7}
