"""JobClient: misuse fails before anything is sent; accepted ids are returned only once SQS took them."""

import json
import random
from datetime import timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from conveyor.contract import limits
from conveyor.contract.envelope import Correlation, parse_envelope
from conveyor.contract.errors import EnqueueError, InvalidJobError
from conveyor.sdk.client import SEND_RETRY, JobClient
from conveyor.sdk.correlation import correlated
from conveyor.sdk.prepare import JobRequest
from functions.jobs.charge_order import ChargeOrder, charge_order
from functions.jobs.deliver_webhook import deliver_webhook
from functions.jobs.send_welcome_email import send_welcome_email
from functions.topology import TOPOLOGY
from tests.aws import Aws


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(aws: Aws, sleeps: list[float]) -> JobClient:
    return JobClient(TOPOLOGY, sqs_client=aws.sqs, rng=random.Random(7), sleep=sleeps.append)


def drain(aws: Aws, queue: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := aws.receive(aws.queue_url(queue)):
        messages.extend(batch)
    return messages


def test_enqueue_sends_an_envelope_to_the_job_types_queue(aws: Aws, client: JobClient) -> None:
    payload = ChargeOrder(order_id="o-1", amount_cents=1250, currency="EUR")
    job_id = client.enqueue(charge_order, payload, dedupe_key="checkout-9")
    (message,) = drain(aws, "critical")
    envelope = parse_envelope(message["Body"])
    assert envelope.id == job_id
    assert envelope.type == "charge_order"
    assert envelope.v == charge_order.version
    assert envelope.dedupe_key == "checkout-9"
    assert envelope.data == {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}
    assert envelope.created_at.utcoffset() == timedelta(0)
    assert json.loads(message["Body"])["created_at"].endswith("Z")


def test_enqueue_accepts_a_dict_payload_and_a_job_name(aws: Aws, client: JobClient) -> None:
    client.enqueue("send_welcome_email", {"user_id": "u-1"})
    (message,) = drain(aws, "default")
    assert parse_envelope(message["Body"]).data == {"user_id": "u-1", "locale": "en"}


def test_enqueue_many_batches_by_queue_and_returns_ids_in_request_order(aws: Aws, client: JobClient) -> None:
    requests = [JobRequest(send_welcome_email, {"user_id": f"u-{i}"}) for i in range(23)]
    requests.insert(5, JobRequest(charge_order, {"order_id": "o-1", "amount_cents": 1, "currency": "USD"}))
    sent: list[int] = []
    aws.sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: sent.append(len(params["Entries"]))
    )
    ids = client.enqueue_many(requests)
    assert len(ids) == len(set(ids)) == 24
    assert sorted(sent) == [1, 3, 10, 10]
    received = {parse_envelope(m["Body"]).id for m in drain(aws, "default")}
    assert received == set(ids) - {ids[5]}
    assert parse_envelope(drain(aws, "critical")[0]["Body"]).id == ids[5]


def test_batches_stay_under_the_request_size_limit(aws: Aws, client: JobClient) -> None:
    body = "x" * 200_000
    requests = [
        JobRequest(deliver_webhook, {"url": "https://hooks.example/a", "event_id": f"e-{i}", "body": body})
        for i in range(7)
    ]
    sizes: list[int] = []
    aws.sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch",
        lambda params, **_: sizes.append(sum(len(e["MessageBody"].encode()) for e in params["Entries"])),
    )
    client.enqueue_many(requests)
    assert len(sizes) > 1
    assert all(size <= limits.SQS_MAX_BATCH_BYTES for size in sizes)
    assert len(drain(aws, "bulk")) == 7


def test_correlation_from_the_context_variable_is_carried(aws: Aws, client: JobClient) -> None:
    with correlated(request_id="req-1", origin="checkout"), correlated(actor="user-7"):
        client.enqueue(send_welcome_email, {"user_id": "u-1"})
    client.enqueue(send_welcome_email, {"user_id": "u-2"}, correlation=Correlation(request_id="explicit"))
    first, second = (parse_envelope(m["Body"]) for m in drain(aws, "default"))
    by_user = {e.data["user_id"]: e.correlation for e in (first, second)}
    assert by_user["u-1"] == Correlation(request_id="req-1", origin="checkout", actor="user-7")
    assert by_user["u-2"] == Correlation(request_id="explicit")


def test_delay_is_applied_per_message(aws: Aws, client: JobClient) -> None:
    client.enqueue(send_welcome_email, {"user_id": "u-1"}, delay=timedelta(seconds=60))
    assert aws.receive(aws.queue_url("default")) == []
    attributes = aws.sqs.get_queue_attributes(
        QueueUrl=aws.queue_url("default"), AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"


def test_a_callers_job_id_is_the_envelopes_id_and_the_one_returned(aws: Aws, client: JobClient) -> None:
    requests = [
        JobRequest(send_welcome_email, {"user_id": "u-1"}, job_id="backfill-7"),
        JobRequest(send_welcome_email, {"user_id": "u-2"}),
    ]
    ids = client.enqueue_many(requests)
    assert ids[0] == "backfill-7"
    assert ids[1] != "backfill-7"
    envelopes = [parse_envelope(message["Body"]) for message in drain(aws, "default")]
    assert {envelope.data["user_id"]: envelope.id for envelope in envelopes} == {"u-1": "backfill-7", "u-2": ids[1]}


def test_a_job_id_used_twice_in_one_call_is_refused_before_sending(aws: Aws, client: JobClient) -> None:
    requests = [JobRequest(send_welcome_email, {"user_id": f"u-{i}"}, job_id="j-1") for i in range(2)]
    with pytest.raises(InvalidJobError, match="job 1: job_id 'j-1' is also the id of job 0"):
        client.enqueue_many(requests)
    assert drain(aws, "default") == []


def test_queue_urls_are_resolved_once(aws: Aws, client: JobClient) -> None:
    lookups: list[str] = []
    aws.sqs.meta.events.register(
        "provide-client-params.sqs.GetQueueUrl", lambda params, **_: lookups.append(params["QueueName"])
    )
    for i in range(3):
        client.enqueue(send_welcome_email, {"user_id": f"u-{i}"})
    assert lookups == ["conveyor-default"]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (JobRequest("send_invoice", {}), "job: unknown job type 'send_invoice'"),
        (
            JobRequest(charge_order, {"order_id": "o-1", "amount_cents": "12", "currency": "EUR"}),
            "job 1 (charge_order): payload: amount_cents: Input should be a valid integer",
        ),
        (
            JobRequest(charge_order, {"order_id": "o-1", "amount_cents": 12, "currency": "EUR", "tip": 1}),
            "job 1 (charge_order): payload: tip: Extra inputs are not permitted",
        ),
        (JobRequest(charge_order, ["o-1"]), "job 1 (charge_order): payload is a list; expected ChargeOrder or a dict"),  # type: ignore[arg-type]
        (
            JobRequest(deliver_webhook, {"url": "https://h.example", "event_id": "e", "body": "x" * 300_000}),
            "over the 262144-byte limit (max_payload_bytes)",
        ),
        (
            JobRequest(send_welcome_email, {"user_id": "u"}, delay=timedelta(minutes=16)),
            "delay must be between 0 and 900s",
        ),
        (JobRequest(send_welcome_email, {"user_id": "u"}, group="g"), "group= applies to FIFO queues"),
        (JobRequest(send_welcome_email, {"user_id": "u"}, job_id=""), "job_id must be 1 to 128 letters, digits or"),
        (JobRequest(send_welcome_email, {"user_id": "u"}, job_id="a b"), "job_id must be 1 to 128 letters"),
        (JobRequest(send_welcome_email, {"user_id": "u"}, job_id="x" * 129), "job_id must be 1 to 128 letters"),
        (
            JobRequest(send_welcome_email, {"user_id": "u"}, dedupe_key="signup\x00-7"),
            "job 1 (send_welcome_email): envelope: dedupe_key: Value error, holds a character SQS cannot carry",
        ),
        (JobRequest(send_welcome_email, {"user_id": "u"}, dedupe_key=""), "envelope: dedupe_key: String should have"),
    ],
)
def test_misuse_fails_before_anything_is_sent(aws: Aws, client: JobClient, request_: JobRequest, message: str) -> None:
    good = JobRequest(send_welcome_email, {"user_id": "u-ok"})
    with pytest.raises(InvalidJobError) as raised:
        client.enqueue_many([good, request_])
    assert message in str(raised.value)
    assert drain(aws, "default") == []


def test_a_job_type_that_is_not_the_declared_one_is_refused(client: JobClient) -> None:
    from dataclasses import replace

    impostor = replace(charge_order, queue="bulk")
    with pytest.raises(InvalidJobError, match="'charge_order' is not the job type declared in the topology"):
        client.enqueue(impostor, {"order_id": "o-1", "amount_cents": 1, "currency": "EUR"})


def _batch_response(request_ids: list[str], failed: dict[str, bool]) -> dict[str, Any]:
    return {
        "Successful": [
            {"Id": i, "MessageId": f"m-{i}", "MD5OfMessageBody": "0" * 32} for i in request_ids if i not in failed
        ],
        "Failed": [
            {"Id": i, "SenderFault": sender, "Code": "InternalError" if not sender else "InvalidParameterValue"}
            for i, sender in failed.items()
        ],
    }


def test_only_failed_entries_are_retried_with_backoff(aws: Aws, client: JobClient, sleeps: list[float]) -> None:
    url = aws.queue_url("default")
    client.enqueue(send_welcome_email, {"user_id": "warm-up"})  # resolves the URL before stubbing
    requests = [JobRequest(send_welcome_email, {"user_id": f"u-{i}"}) for i in range(3)]
    with Stubber(aws.sqs) as stub:
        stub.add_response("send_message_batch", _batch_response(["0", "1", "2"], {"1": False}))
        stub.add_response(
            "send_message_batch", _batch_response(["1"], {}), expected_params={"QueueUrl": url, "Entries": OneEntry()}
        )
        ids = client.enqueue_many(requests)
        stub.assert_no_pending_responses()
    assert len(ids) == 3
    assert len(sleeps) == 1
    assert 0 <= sleeps[0] <= SEND_RETRY.base.total_seconds()


class OneEntry:
    """Matches an Entries list holding exactly the one re-sent entry."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, list) and len(other) == 1


def test_an_enqueue_that_fails_midway_reports_what_was_accepted(aws: Aws, client: JobClient) -> None:
    client.enqueue(send_welcome_email, {"user_id": "warm-up"})
    requests = [JobRequest(send_welcome_email, {"user_id": f"u-{i}"}) for i in range(12)]
    with Stubber(aws.sqs) as stub:
        stub.add_response("send_message_batch", _batch_response([str(i) for i in range(10)], {"3": True}))
        for _ in range(SEND_RETRY.max_attempts):
            stub.add_client_error("send_message_batch", service_error_code="ServiceUnavailable", http_status_code=503)
        with pytest.raises(EnqueueError) as raised:
            client.enqueue_many(requests)
    error = raised.value
    assert len(error.accepted) == 9
    assert len(error.rejected) == 3
    assert any("InvalidParameterValue" in why for why in error.rejected.values())
    assert any("ServiceUnavailable" in why for why in error.rejected.values())
    assert not set(error.accepted) & set(error.rejected)


def _sent_entries(aws: Aws) -> list[dict[str, Any]]:
    """The SendMessageBatch entries as the SDK hands them to SQS (moto drops system attributes of batches)."""
    entries: list[dict[str, Any]] = []
    aws.sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: entries.extend(params["Entries"])
    )
    return entries


def test_the_producers_trace_header_rides_along(aws: Aws, client: JobClient, monkeypatch: pytest.MonkeyPatch) -> None:
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    monkeypatch.setenv("_X_AMZN_TRACE_ID", header)
    entries = _sent_entries(aws)
    client.enqueue(send_welcome_email, {"user_id": "u-1"})
    (entry,) = entries
    assert entry["MessageSystemAttributes"] == {"AWSTraceHeader": {"DataType": "String", "StringValue": header}}


def test_no_trace_header_without_a_trace(aws: Aws, client: JobClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    entries = _sent_entries(aws)
    client.enqueue(send_welcome_email, {"user_id": "u-1"})
    (entry,) = entries
    assert "MessageSystemAttributes" not in entry
