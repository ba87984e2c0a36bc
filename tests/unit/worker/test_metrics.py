"""Job metrics: EMF documents with the right names, units and dimensions, written even for failed batches."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from functions.topology import TOPOLOGY
from tests.aws import moto_aws
from tests.harness_support import DEFAULT_AGE, QueueDriver, envelope

# The job metrics' sets, and the destination metrics' (conveyor.worker.destinations.metrics): never a job id or a key.
ALLOWED_DIMENSION_SETS = [
    ["queue", "job_type"],
    ["queue", "job_type", "reason"],
    ["destination"],
    ["destination", "reason"],
]


@pytest.fixture
def critical() -> Iterator[QueueDriver]:
    for aws in moto_aws(TOPOLOGY):
        yield QueueDriver(aws, "critical")


def charge(order_id: str) -> str:
    return envelope("charge_order", {"order_id": order_id, "amount_cents": 100, "currency": "EUR"})


def emf_documents(output: str) -> list[dict[str, Any]]:
    documents = [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"_aws"' in line]
    return documents


def metric_values(documents: list[dict[str, Any]]) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]:
    """(metric name, dimensions) -> values, across documents."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        (dimension_names,) = directive["Dimensions"]
        dimensions = tuple((name, document[name]) for name in dimension_names)
        for metric in directive["Metrics"]:
            values = document[metric["Name"]]
            found.setdefault((metric["Name"], dimensions), []).extend(values if isinstance(values, list) else [values])
    return found


def test_a_batch_writes_outcome_counts_and_latencies_per_job_type(
    critical: QueueDriver, capsys: pytest.CaptureFixture[str]
) -> None:
    for order in ("o-1", "o-flaky-1", "declined-1"):
        critical.send(charge(order))
    capsys.readouterr()
    critical.run(*critical.receive())
    documents = emf_documents(capsys.readouterr().out)
    values = metric_values(documents)
    base = (("queue", "critical"), ("job_type", "charge_order"))
    assert values[("Succeeded", base)] == [1.0]
    assert values[("Retried", base)] == [1.0]
    assert values[("Retried", (*base, ("reason", "retryable_error")))] == [1.0]
    assert values[("DeadLettered", base)] == [1.0]
    assert values[("DeadLettered", (*base, ("reason", "permanent_error")))] == [1.0]
    # The driver's clock stands still: each job was enqueued DEFAULT_AGE before it ran and finished.
    age_ms = DEFAULT_AGE.total_seconds() * 1000
    assert values[("EndToEnd", base)] == [age_ms]
    assert values[("QueueWait", base)] == [age_ms, age_ms, age_ms]
    assert values[("Duration", base)] == [0.0, 0.0, 0.0]


def test_metrics_use_one_namespace_units_and_no_high_cardinality_dimension(
    critical: QueueDriver, capsys: pytest.CaptureFixture[str]
) -> None:
    critical.send(charge("o-1"))
    critical.send("not json")
    capsys.readouterr()
    critical.run(*critical.receive())
    documents = emf_documents(capsys.readouterr().out)
    assert documents
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "Conveyor"
        assert directive["Dimensions"][0] in ALLOWED_DIMENSION_SETS
        for metric in directive["Metrics"]:
            expected = (
                "Milliseconds"
                if metric["Name"] in {"EndToEnd", "QueueWait", "Duration", "DestinationLatency"}
                else "Count"
            )
            assert metric["Unit"] == expected
        assert "job_id" not in document
    unreadable = (("queue", "critical"), ("job_type", "unreadable"), ("reason", "invalid_json"))
    assert metric_values(documents)[("DeadLettered", unreadable)] == [1.0]


def test_metrics_are_written_when_every_record_of_a_batch_fails(
    critical: QueueDriver, capsys: pytest.CaptureFixture[str]
) -> None:
    critical.send(charge("o-flaky-3"))
    capsys.readouterr()
    failed = critical.run(*critical.receive())
    assert len(failed) == 1
    values = metric_values(emf_documents(capsys.readouterr().out))
    assert values[("Retried", (("queue", "critical"), ("job_type", "charge_order")))] == [1.0]


def test_duplicates_are_counted(critical: QueueDriver, capsys: pytest.CaptureFixture[str]) -> None:
    body = charge("o-7")
    critical.send(body)
    critical.send(body)
    capsys.readouterr()
    critical.run(*critical.receive())
    values = metric_values(emf_documents(capsys.readouterr().out))
    base = (("queue", "critical"), ("job_type", "charge_order"))
    assert values[("Succeeded", base)] == [1.0]
    assert values[("Duplicate", base)] == [1.0]


def test_dimensions_stay_exactly_as_declared_under_the_lambda_service_name(
    critical: QueueDriver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Lambda, POWERTOOLS_SERVICE_NAME is set; Powertools would add a `service` dimension that
    no alarm, dashboard or `conveyor stats` query names, leaving them all blind."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "conveyor")
    critical.send(charge("o-1"))
    capsys.readouterr()
    critical.run(*critical.receive())
    documents = emf_documents(capsys.readouterr().out)
    assert documents
    assert all(
        document["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0] in ALLOWED_DIMENSION_SETS for document in documents
    )
    assert not any("service" in document for document in documents)
