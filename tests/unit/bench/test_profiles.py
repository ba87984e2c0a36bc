"""bench.profiles: the SQS floor, which requests belong to a window's jobs, and a job type's profile."""

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from bench.counting import Call
from bench.meter import Window, metric_values
from bench.profiles import attributable, job_profile, request_builders, sqs_floor, sqs_per_job
from bench.skipped import CannotRunError
from conveyor.worker.outcomes import JobOutcome, Kind
from functions.topology import TOPOLOGY

QUEUE_URL = "http://127.0.0.1:4566/000000000000/conveyor-critical"
DLQ_URL = "http://127.0.0.1:4566/000000000000/conveyor-critical-dlq"
STARTED = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def emf(metrics: dict[str, float | list[float]], dimension_sets: list[list[str]]) -> str:
    document = {
        "_aws": {
            "Timestamp": 1_790_000_000_000,
            "CloudWatchMetrics": [
                {
                    "Namespace": "Conveyor",
                    "Dimensions": dimension_sets,
                    "Metrics": [{"Name": name, "Unit": "Count"} for name in metrics],
                }
            ],
        },
        "queue": "critical",
        "job_type": "charge_order",
        **metrics,
    }
    return json.dumps(document)


def outcome(job_type: str, kind: Kind, ms: float) -> JobOutcome:
    return JobOutcome(
        queue="critical",
        kind=kind,
        job_type=job_type,
        job_id="j",
        attempt=1,
        created_at=STARTED,
        started_at=STARTED,
        finished_at=STARTED + timedelta(milliseconds=ms),
    )


def test_the_floor_is_a_shared_send_receive_and_delete_per_job() -> None:
    assert sqs_floor(10) == pytest.approx(0.3)
    assert sqs_floor(1) == pytest.approx(1.2)


def test_a_window_keeps_its_queues_data_requests_and_the_tables_but_the_state_table() -> None:
    keep = attributable((QUEUE_URL, DLQ_URL), "conveyor-local-event-sources")
    assert keep(Call("sqs", "ReceiveMessage", "conveyor-critical"))
    assert keep(Call("sqs", "SendMessage", "conveyor-critical-dlq"))
    assert keep(Call("dynamodb", "PutItem", "conveyor-idempotency"))
    assert not keep(Call("sqs", "ReceiveMessage", "conveyor-default"))  # another queue's poller
    assert not keep(Call("sqs", "GetQueueUrl", "conveyor-critical"))  # a producer's one-time lookup
    assert not keep(Call("dynamodb", "GetItem", "conveyor-local-event-sources"))  # Lambda's own state
    assert not keep(Call("dynamodb", "BatchGetItem", "conveyor-local-event-sources"))
    assert not keep(Call("dynamodb", "CreateTable", "conveyor-idempotency"))  # provisioning
    assert not keep(Call("cloudwatch", "PutMetricData"))  # the local stand-in for EMF extraction
    assert not keep(Call("dynamodbstreams", "GetRecords"))


def test_metric_values_count_each_value_once_per_dimension_set() -> None:
    output = "\n".join(
        [
            '{"level": "INFO", "message": "job succeeded"}',
            emf({"Succeeded": 1, "Duration": [3.0, 4.0]}, [["queue", "job_type"]]),
            emf({"DeadLettered": 1}, [["queue", "job_type"], ["queue"]]),
        ]
    )
    assert metric_values(output) == 1 + 2 + 2


def test_a_profile_is_per_successful_job() -> None:
    output = emf({"Succeeded": [1, 1]}, [["queue", "job_type"]]) + "\n"
    window = Window(
        job_type="charge_order",
        queue="critical",
        jobs=2,
        counts=Counter(
            {
                Call("sqs", "SendMessageBatch", "conveyor-critical"): 1,
                Call("sqs", "ReceiveMessage", "conveyor-critical"): 3,
                Call("sqs", "ReceiveMessage", "conveyor-bulk"): 7,
                Call("dynamodb", "PutItem", "conveyor-idempotency"): 2,
            }
        ),
        invocations=1,
        outcomes=(outcome("charge_order", Kind.SUCCEEDED, 10), outcome("charge_order", Kind.SUCCEEDED, 30)),
        output=output,
    )
    profile = job_profile(window, attributable((QUEUE_URL, DLQ_URL), "state"))
    assert profile == {
        "queue": "critical",
        "requests_per_job": {"sqs.ReceiveMessage": 1.5, "dynamodb.PutItem": 1.0, "sqs.SendMessageBatch": 0.5},
        "invocations_per_job": 0.5,
        "duration_ms_per_job": pytest.approx(20.0),
        "log_bytes_per_job": len(output.encode()) / 2,
        "metric_values_per_job": 1.0,
    }
    assert sqs_per_job(profile["requests_per_job"]) == 2.0


def test_a_window_whose_jobs_did_not_all_succeed_is_no_profile() -> None:
    window = Window(
        job_type="charge_order",
        queue="critical",
        jobs=2,
        counts=Counter(),
        invocations=1,
        outcomes=(outcome("charge_order", Kind.SUCCEEDED, 10), outcome("charge_order", Kind.RETRIED, 10)),
        output="",
    )
    with pytest.raises(
        CannotRunError, match=r"charge_order: 1 of 2 jobs succeeded \(outcomes seen: \['retried', 'succeeded'\]\)"
    ):
        job_profile(window, lambda call: True)


def test_every_example_job_type_a_producer_enqueues_has_a_valid_request() -> None:
    scheduled = {schedule.job for schedule in TOPOLOGY.schedules}
    builders = request_builders()
    assert set(builders) == {job_type.name for job_type in TOPOLOGY.job_types} - scheduled
    for name, build in builders.items():
        job_type = TOPOLOGY.job_type(name)
        job_type.model.model_validate(build(7).payload)
