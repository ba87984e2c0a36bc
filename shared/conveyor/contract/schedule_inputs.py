"""The Scheduler target input: one envelope template per schedule and shard, and the ids it gives jobs.

The same template is what the stack gives Scheduler and what the local scheduler renders.
"""

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from conveyor.contract import limits
from conveyor.contract.cron import require_aware
from conveyor.contract.declarations import JobType
from conveyor.contract.schedules import Schedule
from conveyor.contract.timestamps import parse_utc, utc_text

# Scheduler's context attributes, replaced in the target input on every invocation
# (https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html).
# ``<aws.scheduler.execution-id>`` is never used: it changes on every retry of one occurrence.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
SCHEDULE_ARN = "<aws.scheduler.schedule-arn>"
# How Scheduler writes the scheduled time, for example 2022-03-22T18:59:43Z.
ORIGIN_PREFIX = "schedule:"

_OCCURRENCE_ID = re.compile(
    rf"^{ORIGIN_PREFIX}(?P<name>[a-z][a-z0-9-]*)@(?P<time>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?:#(?P<shard>\d+))?$"
)


# Scheduler's defaults are 185 retries over 24 hours. Sending to SQS fails only when SQS throttles
# or is unavailable; a few retries ride that out, and an occurrence still undelivered after an
# hour goes to the DLQ, where its alarm pages a human, instead of arriving a day late. The stack
# deploys this policy and the local scheduler follows it.
RETRY_ATTEMPTS = 3
MAX_EVENT_AGE = timedelta(hours=1)
# What Scheduler sets on a dead-letter event: the body is the target input, these its message attributes
# (https://docs.aws.amazon.com/scheduler/latest/UserGuide/configuring-schedule-dlq.html). The local
# scheduler writes them and `conveyor dlq ... schedules` reads them. EXHAUSTED_RETRY_CONDITION is set
# only when a retryable error outlasted the retry policy: MaximumRetryAttempts or MaximumEventAgeInSeconds.
DLQ_ERROR_CODE = "ERROR_CODE"
DLQ_ERROR_MESSAGE = "ERROR_MESSAGE"
DLQ_EXECUTION_ID = "EXECUTION_ID"
DLQ_EXHAUSTED_RETRY_CONDITION = "EXHAUSTED_RETRY_CONDITION"
DLQ_IS_PAYLOAD_TRUNCATED = "IS_PAYLOAD_TRUNCATED"
DLQ_RETRY_ATTEMPTS = "RETRY_ATTEMPTS"
DLQ_SCHEDULED_TIME = "SCHEDULED_TIME"
DLQ_SCHEDULE_ARN = "SCHEDULE_ARN"
DLQ_TARGET_ARN = "TARGET_ARN"


class DeliveryRetry(NamedTuple):
    """A schedule target's RetryPolicy: retries after the first try, and how long an occurrence may be tried."""

    max_retry_attempts: int
    max_event_age: timedelta


def delivery_retry(schedule: Schedule, job_type: JobType[Any]) -> DeliveryRetry:
    """``RETRY_ATTEMPTS``, and ``MAX_EVENT_AGE`` shortened so no delivery arrives after the job's ``max_wall_time``.

    The harness counts a scheduled job's age from its scheduled time, and Scheduler may invoke
    up to the flexible window after it. Never under Scheduler's minimum age.
    """
    remaining = job_type.retry.max_wall_time - (schedule.flexible_window or timedelta(0))
    age = max(limits.SCHEDULER_MIN_EVENT_AGE, min(MAX_EVENT_AGE, remaining))
    return DeliveryRetry(max_retry_attempts=RETRY_ATTEMPTS, max_event_age=age)


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
    require_aware(scheduled_time)
    text = utc_text(scheduled_time, timespec="seconds")
    return template.replace(SCHEDULED_TIME, text).replace(SCHEDULE_ARN, schedule_arn)


def render_catch_up(template: str, scheduled_time: datetime, schedule_arn: str, enqueued_at: datetime) -> str:
    """A missed occurrence's input, enqueued late by the run that found it missing.

    Its id still names the occurrence, so a late delivery by Scheduler collapses into it; but
    ``created_at`` is the enqueue time, because the harness's ``max_wall_time`` counts from
    ``created_at`` and a missed occurrence may be days old.
    """
    require_aware(enqueued_at)
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
