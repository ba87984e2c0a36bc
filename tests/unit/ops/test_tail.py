"""`conveyor tail`'s ops side: a JSON filter pattern from the options, FilterLogEvents paged and followed.

Against moto's CloudWatch Logs, which ignores JSON filter patterns: the client-side filter is what
narrows the events there, and in AWS it re-checks what the pattern already selected.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from conveyor.local.log_shipper import batches
from conveyor.ops.tail import INGESTION_LAG, POLL_INTERVAL, TailFilter, filtered_events, follow

GROUP = "/aws/lambda/conveyor-default-worker"
OTHER = "/aws/lambda/conveyor-bulk-worker"
NOW = datetime.now(UTC)


@pytest.fixture
def logs(empty_aws: None) -> Any:
    client = boto3.client("logs")
    for group in (GROUP, OTHER):
        client.create_log_group(logGroupName=group)
        client.create_log_stream(logGroupName=group, logStreamName="s")
    return client


def put(logs: Any, group: str, at: datetime, **record: Any) -> None:
    event = {"timestamp": int(at.timestamp() * 1000), "message": json.dumps(record)}
    logs.put_log_events(logGroupName=group, logStreamName="s", logEvents=[event])


def event(job_id: str, *, outcome: str = "succeeded", job_type: str = "ping", queue: str = "default") -> dict[str, Any]:
    return {"message": "job " + outcome, "outcome": outcome, "job_id": job_id, "job_type": job_type, "queue": queue}


def test_the_pattern_is_a_json_filter_with_every_option() -> None:
    assert TailFilter().pattern() == "{ $.outcome = * }"
    assert TailFilter(job_id="3f2a", job_type="charge_order", queue="critical").pattern() == (
        '{ $.outcome = * && $.job_id = "3f2a*" && $.job_type = "charge_order" && $.queue = "critical" }'
    )
    assert TailFilter(job_id='a"b').pattern() == '{ $.outcome = * && $.job_id = "a\\"b*" }'


def test_the_same_filter_applies_to_records() -> None:
    wanted = TailFilter(job_id="3f2a", queue="default")
    assert wanted.matches(event("3f2a9c1e"))
    assert not wanted.matches(event("9c1e3f2a"))
    assert not wanted.matches(event("3f2a9c1e", queue="bulk"))
    assert not wanted.matches({"message": "working", "job_id": "3f2a9c1e", "queue": "default"})  # not an event


def test_follow_yields_each_matching_event_once_in_time_order(logs: Any) -> None:
    put(logs, GROUP, NOW - timedelta(seconds=3), **event("job-b"))
    put(logs, OTHER, NOW - timedelta(seconds=5), **event("job-a", queue="bulk"))
    put(logs, GROUP, NOW - timedelta(seconds=4), message="working", job_id="job-a", queue="default")
    put(logs, GROUP, NOW - timedelta(hours=1), **event("job-old"))
    sleeps: list[float] = []
    polls = follow(logs, [GROUP, OTHER], TailFilter(), since=NOW - timedelta(minutes=10), sleep=sleeps.append)
    assert [record["job_id"] for record in next(polls)] == ["job-a", "job-b"]
    put(logs, GROUP, NOW - timedelta(seconds=1), **event("job-c", outcome="retried"))
    assert [(record["job_id"], record["outcome"]) for record in next(polls)] == [("job-c", "retried")]
    assert next(polls) == []
    assert sleeps == [POLL_INTERVAL.total_seconds()] * 2


def test_a_late_event_inside_the_look_back_is_still_found(logs: Any) -> None:
    put(logs, GROUP, NOW, **event("job-now"))
    polls = follow(logs, [GROUP], TailFilter(), since=NOW - timedelta(minutes=1), sleep=lambda _: None)
    assert [record["job_id"] for record in next(polls)] == ["job-now"]
    put(logs, GROUP, NOW - INGESTION_LAG / 2, **event("job-late"))
    assert [record["job_id"] for record in next(polls)] == ["job-late"]


def test_follow_filters_by_job_prefix_type_and_queue(logs: Any) -> None:
    put(logs, GROUP, NOW, **event("3f2a9c1e", job_type="charge_order"))
    put(logs, GROUP, NOW, **event("3f2a0000", job_type="ping"))
    put(logs, GROUP, NOW, **event("77777777", job_type="charge_order"))
    wanted = TailFilter(job_id="3f2a", job_type="charge_order")
    (found,) = next(follow(logs, [GROUP], wanted, since=NOW - timedelta(minutes=1), sleep=lambda _: None))
    assert found["job_id"] == "3f2a9c1e"


def test_a_group_nobody_logged_to_yet_has_no_events(logs: Any) -> None:
    missing = "/aws/lambda/conveyor-new-worker"
    assert list(filtered_events(logs, missing, TailFilter().pattern(), 0)) == []
    assert next(follow(logs, [missing], TailFilter(), since=NOW, sleep=lambda _: None)) == []


def test_every_page_is_read(logs: Any) -> None:
    """More events than one FilterLogEvents page holds (10,000): the rest come with nextToken."""
    start = int((NOW - timedelta(minutes=5)).timestamp() * 1000)
    messages = [json.dumps(event(f"job-{index:05d}")) for index in range(10_005)]
    events = [{"timestamp": start + index, "message": message} for index, message in enumerate(messages)]
    for batch in batches(events):  # PutLogEvents takes at most 10,000 events
        logs.put_log_events(logGroupName=GROUP, logStreamName="s", logEvents=batch)
    found = list(filtered_events(logs, GROUP, TailFilter().pattern(), start))
    assert len(found) == len(messages)
