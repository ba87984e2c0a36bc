"""The local EMF forwarder: every line passes through; EMF documents also become CloudWatch metrics."""

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from conveyor.local.emf import EmfForwarder, metric_data

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
DOCUMENT = {
    "_aws": {
        "Timestamp": int(NOW.timestamp() * 1000),
        "CloudWatchMetrics": [
            {
                "Namespace": "Conveyor",
                "Dimensions": [["queue", "job_type"]],
                "Metrics": [{"Name": "Succeeded", "Unit": "Count"}, {"Name": "EndToEnd", "Unit": "Milliseconds"}],
            }
        ],
    },
    "queue": "default",
    "job_type": "send_welcome_email",
    "Succeeded": [1.0, 1.0],
    "EndToEnd": [120.0, 80.0],
}


@pytest.fixture
def cloudwatch() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("cloudwatch")


def test_an_emf_document_becomes_put_metric_data_entries() -> None:
    namespace, entries = metric_data(DOCUMENT)
    assert namespace == "Conveyor"
    by_name = {entry["MetricName"]: entry for entry in entries}
    assert by_name["EndToEnd"]["Values"] == [120.0, 80.0]
    assert by_name["EndToEnd"]["Counts"] == [1.0, 1.0]
    assert by_name["EndToEnd"]["Unit"] == "Milliseconds"
    assert by_name["Succeeded"]["Dimensions"] == [
        {"Name": "queue", "Value": "default"},
        {"Name": "job_type", "Value": "send_welcome_email"},
    ]
    assert by_name["Succeeded"]["Timestamp"] == NOW


def test_lines_pass_through_and_emf_reaches_cloudwatch(cloudwatch: Any, tmp_path: Path) -> None:
    out = io.StringIO()
    raw = tmp_path / "metrics.jsonl"
    forwarder = EmfForwarder(out, cloudwatch, raw)
    line = json.dumps(DOCUMENT)
    # print() writes a line and its newline separately; a line may also arrive in pieces.
    forwarder.write('{"level":"INFO","message":"job succeeded"}')
    forwarder.write("\n")
    forwarder.write(line[:40])
    forwarder.write(line[40:] + "\n")
    assert out.getvalue() == '{"level":"INFO","message":"job succeeded"}\n' + line + "\n"
    result = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "e2e",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "Conveyor",
                        "MetricName": "EndToEnd",
                        "Dimensions": [
                            {"Name": "queue", "Value": "default"},
                            {"Name": "job_type", "Value": "send_welcome_email"},
                        ],
                    },
                    "Period": 60,
                    "Stat": "SampleCount",
                },
            }
        ],
        StartTime=NOW - timedelta(minutes=1),
        EndTime=NOW + timedelta(minutes=1),
    )
    assert result["MetricDataResults"][0]["Values"] == [2.0]
    records = [json.loads(text) for text in raw.read_text().splitlines()]
    assert {record["name"]: record["values"] for record in records} == {
        "Succeeded": [1.0, 1.0],
        "EndToEnd": [120.0, 80.0],
    }


def test_lines_that_are_not_emf_are_only_passed_through(cloudwatch: Any, tmp_path: Path) -> None:
    out = io.StringIO()
    raw = tmp_path / "metrics.jsonl"
    forwarder = EmfForwarder(out, cloudwatch, raw)
    forwarder.write('{"_aws": broken json\nplain text\n')
    assert out.getvalue() == '{"_aws": broken json\nplain text\n'
    assert not raw.exists()
