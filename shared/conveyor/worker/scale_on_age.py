"""Scale by age: raise a queue's MaximumConcurrency while its oldest message is older than the objective.

A queue declared with ``scale_on_age=True`` keeps its event source mapping's MaximumConcurrency
between its ``scale_bounds``. Every minute (an EventBridge rule in AWS, the local runtime's loop
locally) the controller reads each such queue's ApproximateAgeOfOldestMessage and:

- **raises** the concurrency ``STEP_FACTOR`` times (capped at the upper bound) when the newest
  datapoint is over the age objective: once a minute while the queue stays behind;
- **lowers** it by the same factor (floored at the lower bound) once the age has stayed at or under
  ``CALM_SHARE`` of the objective for ``COOL_DOWN`` and the mapping has not changed for as long.
  Between the two thresholds nothing moves: that band, and the cool-down, keep it from flapping.

It starts from the mapping's current value, whoever set it: a value set with `conveyor concurrency`
is raised when the queue is behind (never past the upper bound; a value already above it is left
while behind) and lowered once calm (to the upper bound at most, never below the lower one).
A paused mapping is never touched. Each change is audited as `conveyor concurrency` audits one
(action ``concurrency``, ``from`` and ``to``), by ``ACTOR``, with the age and objective behind it.

The decision (``decide``) is a pure function of the readings and an injected time; the readers and
the writer around it are boto3 adapters, so the Lambda entry point and the local runtime share all of it.
"""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.declarations import Queue
from conveyor.contract.errors import ConveyorError
from conveyor.contract.loader import load_topology
from conveyor.contract.scale_settings import ScaleSettings
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.worker.audit import AuditWriter

logger = Logger(service=SERVICE_NAME)

ACTOR = "conveyor:scale-on-age"
# The audit action of a MaximumConcurrency change, by hand or by this controller.
ACTION = "concurrency"
# How often the controller runs: SQS publishes ApproximateAgeOfOldestMessage once a minute.
PERIOD = timedelta(minutes=1)
# Doubling while behind reaches any bound in at most 9 steps (2 -> 1000); halving retraces them.
STEP_FACTOR = 2
# Calm means at or under half the objective: the band between that and the objective holds still.
CALM_SHARE = 0.5
# How long the age must stay calm, and the mapping unchanged, before a step down.
COOL_DOWN = timedelta(minutes=10)
# A datapoint older than this is no reading of the current age (CloudWatch lags a minute or two).
LATEST_WITHIN = timedelta(minutes=5)
# How much of the cool-down's start may lack datapoints: CloudWatch aligns them to the minute.
COVERAGE_SLACK = timedelta(minutes=2)
SQS_NAMESPACE = "AWS/SQS"
AGE_METRIC = "ApproximateAgeOfOldestMessage"
# Lambda states in which a mapping is not polling (or is about to stop).
PAUSED_STATES = frozenset({"Disabled", "Disabling"})


class ScaleError(ConveyorError):
    """Some queues could not be read or scaled this time; the message names them (the next run tries again)."""


@dataclass(frozen=True)
class Ages:
    """A queue's oldest-message age in seconds: the newest datapoint, and the highest over ``COOL_DOWN``.

    ``peak_s`` is None unless datapoints cover the whole cool-down (within ``COVERAGE_SLACK``): a queue
    seen for two calm minutes has not been calm for ten.
    """

    latest_s: float | None
    peak_s: float | None


@dataclass(frozen=True)
class MappingState:
    enabled: bool
    max_concurrency: int | None
    # When the mapping last changed (any change: a pause, a resume, a resize); None if unknown.
    changed_at: datetime | None


@dataclass(frozen=True)
class Change:
    queue: str
    before: int
    after: int
    age_s: float
    objective_s: float
    why: str

    def details(self) -> dict[str, Any]:
        """The audit row's details: ``from`` and ``to`` as a manual change has, and what moved the controller."""
        return {
            "from": self.before,
            "to": self.after,
            "age_s": round(self.age_s, 1),
            "objective_s": self.objective_s,
            "why": self.why,
        }


def decide(queue: Queue, mapping: MappingState, ages: Ages, now: datetime) -> Change | None:
    """The one step the controller takes for ``queue`` at ``now``, or None to leave it as it is."""
    if not queue.scale_on_age or not mapping.enabled:
        return None
    low, high = queue.scale_bounds
    current = mapping.max_concurrency or queue.max_concurrency
    objective = queue.age_objective.total_seconds()

    def change(after: int, age_s: float, why: str) -> Change | None:
        return Change(queue.name, current, after, age_s, objective, why) if after != current else None

    if ages.latest_s is not None and ages.latest_s > objective:
        raised = min(high, max(low, current * STEP_FACTOR))
        return change(raised, ages.latest_s, "age over objective") if raised > current else None
    calm = ages.peak_s is not None and ages.peak_s <= objective * CALM_SHARE
    settled = mapping.changed_at is None or now - mapping.changed_at >= COOL_DOWN
    if ages.peak_s is None or not (calm and settled):
        return None
    lowered = max(low, min(high, current // STEP_FACTOR))
    return change(lowered, ages.peak_s, f"age under half the objective for {COOL_DOWN}") if lowered < current else None


def read_ages(cloudwatch: Any, queue_names: Mapping[str, str], now: datetime) -> dict[str, Ages]:
    """Each queue's ``Ages`` at ``now``, in one GetMetricData request; ``queue_names`` maps declared to SQS names."""
    ids = {f"q{index}": name for index, name in enumerate(queue_names)}
    queries = [
        {
            "Id": query_id,
            "MetricStat": {
                "Metric": {
                    "Namespace": SQS_NAMESPACE,
                    "MetricName": AGE_METRIC,
                    "Dimensions": [{"Name": "QueueName", "Value": queue_names[name]}],
                },
                "Period": int(PERIOD.total_seconds()),
                "Stat": "Maximum",
            },
        }
        for query_id, name in ids.items()
    ]
    points: dict[str, list[tuple[datetime, float]]] = {name: [] for name in queue_names}
    for page in cloudwatch.get_paginator("get_metric_data").paginate(
        MetricDataQueries=queries, StartTime=now - COOL_DOWN, EndTime=now
    ):
        for result in page["MetricDataResults"]:
            points[ids[result["Id"]]] += zip(result["Timestamps"], result["Values"], strict=True)
    ages = {}
    for name, found in points.items():
        recent = [(at, value) for at, value in found if at >= now - LATEST_WITHIN]
        covered = bool(found) and min(at for at, _ in found) <= now - COOL_DOWN + COVERAGE_SLACK
        ages[name] = Ages(
            latest_s=max(recent)[1] if recent else None,
            peak_s=max(value for _, value in found) if covered else None,
        )
    return ages


class Mappings(Protocol):
    """Where the mappings' state is: Lambda's event source mappings, or the local runtime's table."""

    def read(self, queue: str) -> MappingState: ...

    def set_max_concurrency(self, queue: str, value: int) -> None: ...


class LambdaMappings:
    """The deployed event source mappings, by queue name."""

    def __init__(self, lambda_client: Any, uuids: Mapping[str, str]) -> None:
        self._lambda = lambda_client
        self._uuids = uuids

    def read(self, queue: str) -> MappingState:
        mapping = self._lambda.get_event_source_mapping(UUID=self._uuids[queue])
        return MappingState(
            enabled=mapping["State"] not in PAUSED_STATES,
            max_concurrency=(mapping.get("ScalingConfig") or {}).get("MaximumConcurrency"),
            changed_at=mapping.get("LastModified"),
        )

    def set_max_concurrency(self, queue: str, value: int) -> None:
        self._lambda.update_event_source_mapping(UUID=self._uuids[queue], ScalingConfig={"MaximumConcurrency": value})


class AgeScaler:
    """One controller run per ``tick``, over every queue of ``topology`` that scales on age."""

    def __init__(
        self,
        topology: Topology,
        *,
        ages: Callable[[datetime], Mapping[str, Ages]],
        mappings: Mappings,
        audit: AuditWriter,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.queues = tuple(queue for queue in topology.queues if queue.scale_on_age)
        self._ages = ages
        self._mappings = mappings
        self._audit = audit
        self._clock = clock or (lambda: datetime.now(UTC))

    def tick(self) -> list[Change]:
        """Take one step per queue where one is due; a queue that fails is logged, and the others still run.

        Raises ScaleError naming the queues that failed, after the others were done, so the run counts as failed.
        """
        if not self.queues:
            return []
        now = self._clock()
        ages = self._ages(now)
        changes, failed = [], []
        for queue in self.queues:
            try:
                change = decide(queue, self._mappings.read(queue.name), ages[queue.name], now)
                if change is None:
                    continue
                self._mappings.set_max_concurrency(queue.name, change.after)
                changes.append(change)
                self._audit.record(ACTION, queue=queue.name, details=change.details())
            except (BotoCoreError, ClientError) as error:
                logger.exception("scaling queue %s on age failed", queue.name, extra={"queue": queue.name})
                failed.append(f"{queue.name} ({error})")
                continue
            logger.info(
                "queue %s: max concurrency %d -> %d (%s)",
                queue.name,
                change.before,
                change.after,
                change.why,
                extra={"queue": queue.name, **change.details()},
            )
        if failed:
            raise ScaleError(f"scaling on age failed for {', '.join(failed)}")
        return changes


def make_scale_handler(topology: Topology | None = None) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda entry point of the controller; its settings come from the environment on the first call."""
    declared = topology or load_topology()
    scaler: AgeScaler | None = None

    @logger.inject_lambda_context(clear_state=True)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        nonlocal scaler
        if scaler is None:
            settings = ScaleSettings.from_environment(os.environ)
            scaler = AgeScaler(
                declared,
                ages=partial(read_ages, boto3.client("cloudwatch"), settings.queue_names),
                mappings=LambdaMappings(boto3.client("lambda"), settings.mappings),
                audit=AuditWriter(boto3.client("dynamodb"), settings.audit_table, actor=ACTOR),
            )
        return {"changes": [{"queue": change.queue, **change.details()} for change in scaler.tick()]}

    return handler
