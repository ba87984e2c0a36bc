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
from botocore.stub import Stubber
from moto import mock_aws

from conveyor.contract.declarations import Queue
from conveyor.contract.topology import Topology
from conveyor.ops.audit import AuditLog
from conveyor.ops.event_sources import (
    EventSources,
    EventSourceState,
    LambdaEventSources,
    LocalEventSources,
    ResumeSchedules,
)
from conveyor.worker.audit import AuditWriter
from conveyor.worker.timed_resume import TimedResume, TimedResumer
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
    audit_table: str

    def sources(self, dynamodb: Any = None, clock: Clock | None = None) -> LocalEventSources:
        return LocalEventSources(
            dynamodb or self.dynamodb, self.table, clock=clock or self.clock, audit_table=self.audit_table
        )

    def audit(self) -> AuditLog:
        return AuditLog(self.dynamodb, self.audit_table, actor="test")


@pytest.fixture
def local() -> Iterator[Local]:
    for aws in moto_aws(TOPOLOGY):
        yield Local(aws.dynamodb, aws.provisioned.event_sources_table, Clock(NOW), aws.provisioned.audit_table)


@dataclass
class Deployed:
    lambda_client: Any
    scheduler: Any
    uuid: str
    sources: LambdaEventSources
    schedules: ResumeSchedules
    audit: AuditLog

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
        schedules = ResumeSchedules(group=SCHEDULE_GROUP, role_arn=role, prefix="conveyor", function_arn=function)
        sources = LambdaEventSources(lambda_client, scheduler, mappings={"q": uuid}, schedules=schedules)
        dynamodb = boto3.client("dynamodb")
        dynamodb.create_table(
            TableName="audit",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield Deployed(lambda_client, scheduler, uuid, sources, schedules, AuditLog(dynamodb, "audit", actor="test"))


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


def test_a_due_timed_resume_writes_one_audit_row_naming_the_pause_it_ends(local: Local) -> None:
    sources = local.sources()
    sources.pause("q", resume_at=LATER, reason="provider outage INC-9")
    assert sources.state("q").enabled is False
    assert local.audit().entries() == []  # not due yet: nothing to record
    local.clock.now = LATER
    sources.state("q")
    sources.states(["q"])  # read again, and by the batch read the pollers use: still one row
    (entry,) = local.audit().entries()
    assert (entry.actor, entry.action, entry.queue) == ("conveyor:timed-resume", "resume", "q")
    assert entry.details == {
        "ends_pause": {
            "resume_at": "2026-11-20T10:30:00+00:00",  # as the pause's own row has it
            "reason": "provider outage INC-9",
            "paused_at": "2026-11-20T09:30:00+00:00",
        }
    }


def test_a_resume_by_hand_writes_no_timed_resume_row(local: Local) -> None:
    sources = local.sources()
    sources.pause("q", resume_at=LATER, reason="x")
    sources.resume("q")
    local.clock.now = LATER
    assert sources.state("q").enabled
    assert local.audit().entries() == []


class ResumingRivalAfterRead:
    """The table's client, with a second reader applying the same due resume just after this one read it."""

    def __init__(self, dynamodb: Any, rival: LocalEventSources) -> None:
        self._dynamodb = dynamodb
        self._rival: LocalEventSources | None = rival
        self.exceptions = dynamodb.exceptions

    def get_item(self, **kwargs: Any) -> Any:
        item = self._dynamodb.get_item(**kwargs)
        if self._rival is not None:
            rival, self._rival = self._rival, None
            assert rival.state("q").enabled  # the rival wins the conditional update and records the resume
        return item

    def update_item(self, **kwargs: Any) -> Any:
        return self._dynamodb.update_item(**kwargs)


def test_two_readers_racing_on_a_due_resume_write_its_audit_row_once(local: Local) -> None:
    local.sources().pause("q", resume_at=LATER, reason="x")
    local.clock.now = LATER
    racing = local.sources(ResumingRivalAfterRead(local.dynamodb, local.sources()))
    # This reader saw the resume due too, but its conditional update lost: it reads the state again, records nothing.
    assert racing.state("q") == EventSourceState(enabled=True, max_concurrency=DECLARED_CONCURRENCY)
    assert [entry.action for entry in local.audit().entries()] == ["resume"]


def test_a_timed_resume_that_cannot_be_audited_still_resumes_and_says_why(local: Local) -> None:
    sources = LocalEventSources(local.dynamodb, local.table, clock=local.clock, audit_table="no-such-table")
    sources.pause("q", resume_at=LATER)
    local.clock.now = LATER
    with pytest.raises(local.dynamodb.exceptions.ResourceNotFoundException):
        sources.state("q")
    # The resume itself was applied (the mapping is what matters); the error names the missing audit table.
    assert local.sources().state("q").enabled


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
    # The timed-resume function, not a bare UpdateEventSourceMapping: it also writes the audit row.
    assert schedule["Target"]["Arn"] == deployed.schedules.function_arn
    assert schedule["Target"]["RoleArn"] == deployed.schedules.role_arn
    given = json.loads(schedule["Target"]["Input"])
    assert given == {
        "queue": "q",
        "uuid": deployed.uuid,
        "resume_at": "2026-11-20T10:30:00+00:00",
        "reason": None,
        "paused_at": given["paused_at"],
    }
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


def test_the_schedules_target_enables_the_mapping_and_audits_the_pause_it_ends(deployed: Deployed) -> None:
    deployed.sources.pause("q", resume_at=LATER, reason="INC-9")
    schedule = deployed.scheduler.get_schedule(Name=deployed.schedules.name("q"), GroupName=SCHEDULE_GROUP)
    audit = AuditWriter(boto3.client("dynamodb"), "audit", actor="conveyor:timed-resume")
    # What Scheduler does at the time: invoke the function with the schedule's input.
    TimedResumer(deployed.lambda_client, audit)(TimedResume.of(json.loads(schedule["Target"]["Input"])))
    assert deployed.lambda_client.get_event_source_mapping(UUID=deployed.uuid)["State"] == "Enabled"
    (entry,) = deployed.audit.entries()
    assert (entry.actor, entry.action, entry.queue) == ("conveyor:timed-resume", "resume", "q")
    assert entry.details["ends_pause"]["resume_at"] == "2026-11-20T10:30:00+00:00"
    assert entry.details["ends_pause"]["reason"] == "INC-9"


def test_a_timed_resume_whose_mapping_update_fails_writes_no_row(deployed: Deployed) -> None:
    audit = AuditWriter(boto3.client("dynamodb"), "audit", actor="conveyor:timed-resume")
    request = TimedResume(queue="q", uuid=deployed.uuid, resume_at="2026-11-20T10:30:00+00:00")
    # moto updates any mapping it is asked to; AWS can refuse (throttled, or the mapping is mid-update).
    with Stubber(deployed.lambda_client) as stubbed:
        stubbed.add_client_error("update_event_source_mapping", "ResourceConflictException", http_status_code=409)
        with pytest.raises(deployed.lambda_client.exceptions.ResourceConflictException):
            TimedResumer(deployed.lambda_client, audit)(request)
    assert deployed.audit.entries() == []  # Scheduler retries; a row would claim a resume that did not happen


@pytest.mark.parametrize("event", [{}, {"queue": "q", "uuid": 7, "resume_at": "x"}], ids=["empty", "uuid-not-text"])
def test_a_timed_resume_input_that_is_not_one_is_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"timed resume input: .*missing or not a string"):
        TimedResume.of(event)
