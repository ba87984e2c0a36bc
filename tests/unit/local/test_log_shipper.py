"""The local runtime's stand-in for Lambda's log delivery: records reach their queue's log group, EMF never."""

import io
import json
from typing import Any

import boto3
import pytest

from conveyor.contract import limits
from conveyor.local.log_shipper import STREAM, LogShipper, batches

GROUPS = {"default": "/aws/lambda/conveyor-default-worker", "bulk": "/aws/lambda/conveyor-bulk-worker"}


@pytest.fixture
def logs(empty_aws: None) -> Any:
    return boto3.client("logs")


@pytest.fixture
def shipper(logs: Any) -> tuple[LogShipper, io.StringIO]:
    out = io.StringIO()
    shipper = LogShipper(out, logs, GROUPS)
    shipper.add_groups(GROUPS)  # what start() does, without its thread: the test flushes itself
    return shipper, out


def messages(logs: Any, group: str) -> list[str]:
    return [event["message"] for event in logs.get_log_events(logGroupName=group, logStreamName=STREAM)["events"]]


def test_each_queues_records_reach_its_log_group_and_every_line_the_console(
    logs: Any, shipper: tuple[LogShipper, io.StringIO]
) -> None:
    ship, out = shipper
    default = json.dumps({"message": "job succeeded", "queue": "default", "outcome": "succeeded"})
    bulk = json.dumps({"message": "working", "queue": "bulk"})
    lines = [default, bulk, json.dumps({"message": "no queue"}), "print output"]
    for line in lines:
        ship.write(line + "\n")
    ship.flush_logs()
    assert out.getvalue() == "".join(line + "\n" for line in lines)
    assert messages(logs, GROUPS["default"]) == [default]
    assert messages(logs, GROUPS["bulk"]) == [bulk]


def test_groups_and_streams_that_exist_are_kept(logs: Any, shipper: tuple[LogShipper, io.StringIO]) -> None:
    ship, _ = shipper
    ship.write(json.dumps({"queue": "default", "message": "first"}) + "\n")
    ship.flush_logs()
    again = LogShipper(io.StringIO(), logs, GROUPS)
    again.add_groups(GROUPS)  # a restarted runtime on the same embedded AWS
    assert len(messages(logs, GROUPS["default"])) == 1


def test_stop_ships_what_is_pending(logs: Any) -> None:
    ship = LogShipper(io.StringIO(), logs, GROUPS)
    ship.start()
    ship.write(json.dumps({"queue": "bulk", "message": "last words"}) + "\n")
    ship.stop()
    assert json.loads(messages(logs, GROUPS["bulk"])[0])["message"] == "last words"


def test_batches_keep_within_put_log_events_limits() -> None:
    big = "x" * (limits.LOGS_MAX_BATCH_BYTES // 2)
    events = [{"timestamp": 1, "message": big} for _ in range(3)]
    assert [len(batch) for batch in batches(events)] == [1, 1, 1]  # two halves plus overhead exceed the limit
    small = [{"timestamp": 1, "message": "m"}] * (limits.LOGS_MAX_BATCH_EVENTS + 1)
    assert [len(batch) for batch in batches(small)] == [limits.LOGS_MAX_BATCH_EVENTS, 1]


def test_a_refused_shipment_is_one_warning_and_the_console_keeps_the_lines(
    logs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    ship = LogShipper(out, logs, GROUPS)
    ship.start()
    logs.delete_log_group(logGroupName=GROUPS["bulk"])  # gone from under it
    line = json.dumps({"queue": "bulk", "message": "unshippable"})
    ship.write(line + "\n")
    ship.stop()
    assert out.getvalue() == line + "\n"
    (warning,) = [record for record in caplog.records if record.name == "conveyor.local.log_shipper"]
    assert "ResourceNotFoundException" in warning.getMessage()
