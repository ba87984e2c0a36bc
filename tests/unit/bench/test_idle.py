"""The idle row: requests per second, by operation and by queue or table, against the 1 req/s target."""

from collections import Counter

from bench.counting import Call
from bench.idle import row


def test_idle_requests_are_per_second_by_operation_and_resource() -> None:
    counts = Counter(
        {
            Call("sqs", "ReceiveMessage", "conveyor-critical"): 6,
            Call("sqs", "ReceiveMessage", "conveyor-bulk"): 3,
            Call("dynamodb", "Scan", "conveyor-local-event-sources"): 6,
        }
    )
    idle = row(counts, 30.0)
    (figure,) = idle.figures
    assert figure.value == 0.5
    assert figure.met is True
    by_operation, by_resource = idle.tables
    assert by_operation.rows == (("sqs.ReceiveMessage", "0.30"), ("dynamodb.Scan", "0.20"))
    assert ("sqs.ReceiveMessage", "conveyor-critical", "0.20") in by_resource.rows
    assert by_resource.rows[-1] == ("sqs.ReceiveMessage", "conveyor-bulk", "0.10")


def test_above_one_request_per_second_misses_the_target() -> None:
    (figure,) = row(Counter({Call("sqs", "ReceiveMessage", "q"): 31}), 30.0).figures
    assert figure.met is False
