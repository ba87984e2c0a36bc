"""The stream relay: outbox items and stream-rule jobs reach their queues; nothing is lost, nothing blocks."""

import io
import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from conveyor.contract.declarations import DEFAULT_DEDUPE_WINDOW
from conveyor.contract.envelope import Correlation, parse_envelope
from conveyor.contract.errors import DeclarationError
from conveyor.contract.reasons import Reason
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.contract.trace_header import TRACE_ENV
from conveyor.local.stream_source import drop_moto_duplicates, to_lambda_record
from conveyor.sdk import outbox
from conveyor.sdk.catalog import TopologyCatalog
from conveyor.sdk.client import JobClient
from conveyor.sdk.dedupe import DedupeKey, DedupeRecords
from conveyor.sdk.outbox import OutboxEntry
from conveyor.sdk.prepare import JobRequest, prepare
from conveyor.worker.relay import RELAY_SOURCE, SEQUENCE_NUMBER, Relay, stream_job_id
from tests.aws import Aws
from tests.events import REGION
from tests.fixtures.relay_topology import (
    CHARGE_NEW_ORDERS,
    DEDUPE_TOPOLOGY,
    FIFO,
    NEW,
    ORDERS,
    RECEIPT_FOR_NEW_ORDERS,
    RECEIPT_ONCE_PER_ORDER,
    STANDARD,
    TOPOLOGY,
)

CREATED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
_sequence_numbers = itertools.count(4_000_000_000_000_000_001)
_event_ids = itertools.count(1)


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


# --- event factories, shaped like a real DynamoDB Streams event (a NEW_IMAGE stream) -------------------------


def stream_record(
    aws: Aws, source: str, image: dict[str, Any], *, key: str, event_name: str = "INSERT"
) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "ApproximateCreationDateTime": CREATED.timestamp(),
        "Keys": {key: image[key]},
        "SequenceNumber": str(next(_sequence_numbers)),
        "SizeBytes": len(json.dumps(image)),
        "StreamViewType": "NEW_IMAGE",
    }
    if event_name != "REMOVE":  # a delete has no new image
        stream["NewImage"] = image
    return {
        "eventID": f"{next(_event_ids):032x}",
        "eventVersion": "1.1",
        "dynamodb": stream,
        "awsRegion": REGION,
        "eventName": event_name,
        "eventSourceARN": aws.provisioned.streams[source],
        "eventSource": "aws:dynamodb",
    }


def stream_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def envelope(request: JobRequest) -> str:
    """An envelope as JobClient writes it into the outbox."""
    body: str = prepare(TopologyCatalog(TOPOLOGY), 0, request, Correlation()).entry["MessageBody"]
    return body


def outbox_item(queue: str, text: str, *, group: str | None = None, job_id: str = "job-1") -> dict[str, Any]:
    return OutboxEntry(job_id=job_id, queue=queue, envelope=text, created_at=CREATED, group=group).item()


def outbox_record(aws: Aws, item: dict[str, Any], *, event_name: str = "INSERT") -> dict[str, Any]:
    return stream_record(aws, OUTBOX_SOURCE, item, key=outbox.KEY, event_name=event_name)


def charge_envelope(order_id: str = "o-1") -> str:
    return envelope(JobRequest("charge", {"order_id": order_id, "amount_cents": 100}))


def ship_envelope() -> str:
    return envelope(JobRequest("ship", {"order_id": "o-1"}, group="any"))  # the body does not carry the group


def order_record(
    aws: Aws, order_id: str = "o-1", *, event_name: str = "INSERT", status: str = NEW, amount_cents: str | None = "1250"
) -> dict[str, Any]:
    item = {"order_id": {"S": order_id}, "status": {"S": status}}
    if amount_cents is not None:
        item["amount_cents"] = {"N": amount_cents}
    return stream_record(aws, ORDERS, item, key="order_id", event_name=event_name)


def sequence_number(record: dict[str, Any]) -> str:
    number: str = record["dynamodb"]["SequenceNumber"]
    return number


def drain(aws: Aws, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := aws.receive(url):
        messages += batch
    return messages


def bodies(aws: Aws, queue: str) -> list[str]:
    return [message["Body"] for message in drain(aws, aws.queue_url(queue))]


def relay(aws: Aws, source: str = OUTBOX_SOURCE, sqs: Any = None) -> Relay:
    return Relay(
        TOPOLOGY, aws.provisioned.relay_settings(source), sqs_client=sqs or aws.sqs, dynamodb_client=aws.dynamodb
    )


def failures(*records: dict[str, Any]) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": sequence_number(record)} for record in records]}


NO_FAILURES = failures()


class FlakySqs:
    """The moto client, except that SendMessageBatch fails the entries ``fails`` picks, as SQS reports
    an entry it could not take, and every call to a queue in ``down`` raises (moto can do neither)."""

    def __init__(
        self, sqs: Any, *, fails: Callable[[str], bool] = lambda body: False, down: frozenset[str] = frozenset()
    ) -> None:
        self._sqs = sqs
        self._fails = fails
        self._down = down
        self.batch_sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def _check(self, url: str, operation: str) -> None:
        if url in self._down:
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, operation)

    def send_message(self, **request: Any) -> Any:
        self._check(request["QueueUrl"], "SendMessage")
        return self._sqs.send_message(**request)

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:  # noqa: N803 - boto3's names
        self._check(QueueUrl, "SendMessageBatch")
        self.batch_sizes.append(len(Entries))
        failing = [entry for entry in Entries if self._fails(entry["MessageBody"])]
        passing = [entry for entry in Entries if entry not in failing]
        response: dict[str, Any] = {"Successful": []}
        if passing:
            response = self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=passing)
        response["Failed"] = [
            {"Id": entry["Id"], "SenderFault": False, "Code": "InternalError", "Message": "try again"}
            for entry in failing
        ]
        return response


# --- the outbox --------------------------------------------------------------------------------------------


def test_an_outbox_insert_is_sent_byte_for_byte_to_its_queue(aws: Aws) -> None:
    # Not how Conveyor would serialize it: indented, with a field this version does not know.
    text = json.dumps({**json.loads(charge_envelope()), "x-foreign": True}, indent=1)
    response = relay(aws).handle(stream_event(outbox_record(aws, outbox_item(STANDARD, text))))
    assert response == NO_FAILURES
    assert bodies(aws, STANDARD) == [text]
    assert drain(aws, aws.provisioned.relay_dlq_url) == []


def test_updates_and_deletes_of_outbox_items_are_ignored(aws: Aws) -> None:
    item = outbox_item(STANDARD, charge_envelope())
    event = stream_event(outbox_record(aws, item, event_name="MODIFY"), outbox_record(aws, item, event_name="REMOVE"))
    assert relay(aws).handle(event) == NO_FAILURES
    assert bodies(aws, STANDARD) == []
    assert drain(aws, aws.provisioned.relay_dlq_url) == []


def test_the_same_outbox_record_delivered_twice_sends_the_same_body(aws: Aws) -> None:
    record = outbox_record(aws, outbox_item(STANDARD, charge_envelope()))
    relay(aws).handle(stream_event(record))
    relay(aws).handle(stream_event(record))
    first, second = bodies(aws, STANDARD)
    assert first == second


def test_a_fifo_outbox_item_is_sent_with_its_group_and_the_job_id_as_deduplication_id(aws: Aws) -> None:
    text = ship_envelope()
    record = outbox_record(aws, outbox_item(FIFO, text, group="customer-7"))
    for _ in range(2):
        assert relay(aws).handle(stream_event(record)) == NO_FAILURES
    (message,) = drain(aws, aws.queue_url(FIFO))  # SQS drops the redelivery: same deduplication id
    assert message["Body"] == text
    assert message["Attributes"]["MessageGroupId"] == "customer-7"
    assert message["Attributes"]["MessageDeduplicationId"] == parse_envelope(text).id


PRODUCER_TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
RELAY_TRACE = "Root=1-67891233-abcdef012345678912345678;Parent=463ac35c9f6413ad;Sampled=1"


def outbox_stream_event(aws: Aws) -> dict[str, Any]:
    """Every INSERT of the outbox table's real (moto) stream so far, as Lambda would deliver them."""
    streams = boto3.client("dynamodbstreams")
    arn = aws.provisioned.streams[OUTBOX_SOURCE]
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records += streams.get_records(ShardIterator=iterator)["Records"]
    return stream_event(*(to_lambda_record(record, stream_arn=arn) for record in drop_moto_duplicates(records)))


def test_an_outbox_job_carries_the_trace_header_of_the_request_that_wrote_it(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = JobClient(
        TOPOLOGY, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb, outbox_table=aws.provisioned.outbox_table
    )
    monkeypatch.setenv(TRACE_ENV, PRODUCER_TRACE)  # the producer's traced request
    (traced,) = client.transact([], [JobRequest("charge", {"order_id": "o-1", "amount_cents": 100})])
    monkeypatch.delenv(TRACE_ENV)  # a producer outside any trace
    (untraced,) = client.transact([], [JobRequest("charge", {"order_id": "o-2", "amount_cents": 100})])
    monkeypatch.setenv(TRACE_ENV, RELAY_TRACE)  # the relay's own invocation
    assert relay(aws).handle(outbox_stream_event(aws)) == NO_FAILURES
    received = {
        parse_envelope(m["Body"]).id: m["Attributes"].get("AWSTraceHeader") for m in drain(aws, aws.queue_url(STANDARD))
    }
    # The job links to the request that wrote it, not to the relay; one written outside a trace gets the relay's.
    assert received == {traced: PRODUCER_TRACE, untraced: RELAY_TRACE}


@pytest.mark.parametrize("header", [{"S": "not a trace header"}, {"N": "7"}])
def test_an_outbox_trace_header_that_names_no_trace_is_left_out_and_the_job_still_goes(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, header: dict[str, str]
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    item = {**outbox_item(STANDARD, charge_envelope()), outbox.TRACE_HEADER: header}
    assert relay(aws).handle(stream_event(outbox_record(aws, item))) == NO_FAILURES
    (message,) = drain(aws, aws.queue_url(STANDARD))
    assert "AWSTraceHeader" not in message["Attributes"]
    assert drain(aws, aws.provisioned.relay_dlq_url) == []


def without(item: dict[str, Any], attribute: str) -> dict[str, Any]:
    return {name: value for name, value in item.items() if name != attribute}


@pytest.mark.parametrize(
    ("item", "reason", "error"),
    [
        pytest.param(outbox_item(STANDARD, "{not json"), Reason.INVALID_JSON, "not JSON", id="non-JSON envelope"),
        pytest.param(
            outbox_item(STANDARD, json.dumps({"type": "charge"})),
            Reason.INVALID_ENVELOPE,
            "id: Field required",
            id="envelope without an id",
        ),
        pytest.param(
            outbox_item("nowhere", charge_envelope()),
            Reason.UNKNOWN_QUEUE,
            "'nowhere' is not declared",
            id="unknown queue",
        ),
        pytest.param(
            outbox_item(STANDARD, charge_envelope().replace('"charge"', '"refund"')),
            Reason.UNKNOWN_TYPE,
            "unknown job type 'refund'",
            id="unknown type",
        ),
        pytest.param(
            outbox_item(FIFO, charge_envelope(), group="g"),
            Reason.WRONG_QUEUE,
            "runs on queue 'standard', not 'ordered'",
            id="type on the wrong queue",
        ),
        pytest.param(
            without(outbox_item(STANDARD, charge_envelope()), outbox.ENVELOPE),
            Reason.INVALID_OUTBOX_ITEM,
            "needs string attributes",
            id="no envelope attribute",
        ),
        pytest.param(
            without(outbox_item(STANDARD, charge_envelope()), outbox.QUEUE),
            Reason.INVALID_OUTBOX_ITEM,
            "needs string attributes",
            id="no queue attribute",
        ),
        pytest.param(
            outbox_item(FIFO, ship_envelope()), Reason.INVALID_OUTBOX_ITEM, "is FIFO", id="FIFO without a group"
        ),
        pytest.param(
            outbox_item(FIFO, ship_envelope(), group="not a group"),
            Reason.INVALID_OUTBOX_ITEM,
            "is FIFO",
            id="FIFO group SQS would refuse",
        ),
    ],
)
def test_a_poison_outbox_record_goes_whole_to_the_relay_dlq_and_later_records_flow(
    aws: Aws, item: dict[str, Any], reason: Reason, error: str
) -> None:
    poison = outbox_record(aws, item)
    good = outbox_record(aws, outbox_item(STANDARD, charge_envelope("o-2")))
    assert relay(aws).handle(stream_event(poison, good)) == NO_FAILURES
    (dead,) = drain(aws, aws.provisioned.relay_dlq_url)
    assert json.loads(dead["Body"]) == poison
    attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
    assert attributes["conveyor.reason"] == reason.value
    assert error in attributes["conveyor.error"]
    assert attributes[RELAY_SOURCE] == OUTBOX_SOURCE
    assert attributes[SEQUENCE_NUMBER] == sequence_number(poison)
    assert [parse_envelope(body).data["order_id"] for body in bodies(aws, STANDARD)] == ["o-2"]


def test_a_poison_record_that_cannot_be_dead_lettered_is_reported_failed(aws: Aws) -> None:
    poison = outbox_record(aws, outbox_item("nowhere", charge_envelope()))
    good = outbox_record(aws, outbox_item(STANDARD, charge_envelope("o-2")))
    sqs = FlakySqs(aws.sqs, down=frozenset({aws.provisioned.relay_dlq_url}))
    assert relay(aws, sqs=sqs).handle(stream_event(poison, good)) == failures(poison)
    assert len(bodies(aws, STANDARD)) == 1


def test_entries_sqs_failed_report_exactly_their_records(aws: Aws) -> None:
    records = [outbox_record(aws, outbox_item(STANDARD, charge_envelope(f"o-{n}"))) for n in range(1, 4)]
    sqs = FlakySqs(aws.sqs, fails=lambda body: '"o-2"' in body)
    assert relay(aws, sqs=sqs).handle(stream_event(*records)) == failures(records[1])
    assert sorted(parse_envelope(body).data["order_id"] for body in bodies(aws, STANDARD)) == ["o-1", "o-3"]


def test_a_failed_batch_call_reports_the_records_of_that_queue_only(aws: Aws) -> None:
    standard = outbox_record(aws, outbox_item(STANDARD, charge_envelope()))
    fifo = outbox_record(aws, outbox_item(FIFO, ship_envelope(), group="g"))
    sqs = FlakySqs(aws.sqs, down=frozenset({aws.queue_url(FIFO)}))
    assert relay(aws, sqs=sqs).handle(stream_event(fifo, standard)) == failures(fifo)
    assert len(bodies(aws, STANDARD)) == 1


def test_sends_are_batched_by_ten(aws: Aws) -> None:
    records = [
        outbox_record(aws, outbox_item(STANDARD, charge_envelope(f"o-{n}"), job_id=f"job-{n}")) for n in range(12)
    ]
    sqs = FlakySqs(aws.sqs)
    assert relay(aws, sqs=sqs).handle(stream_event(*records)) == NO_FAILURES
    assert sqs.batch_sizes == [10, 2]
    assert len(bodies(aws, STANDARD)) == 12


def test_counts_are_written_as_emf_metrics_by_source(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    event = stream_event(
        outbox_record(aws, outbox_item(STANDARD, charge_envelope())),
        outbox_record(aws, outbox_item("nowhere", charge_envelope())),
    )
    capsys.readouterr()
    relay(aws).handle(event)
    (document,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["source"]]
    assert document["source"] == OUTBOX_SOURCE
    assert (document["Relayed"], document["RelayPoisoned"], document["RelayFailed"]) == ([1.0], [1.0], [0.0])


# --- stream rules ------------------------------------------------------------------------------------------


def test_a_new_order_becomes_the_jobs_of_its_stream_rules(aws: Aws) -> None:
    record = order_record(aws)
    assert relay(aws, ORDERS).handle(stream_event(record)) == NO_FAILURES
    envelopes = {e.type: e for e in map(parse_envelope, bodies(aws, STANDARD))}
    assert envelopes["charge"].data == {"order_id": "o-1", "amount_cents": 1250}
    assert envelopes["charge"].id == stream_job_id(CHARGE_NEW_ORDERS, record["eventID"])
    assert envelopes["send_receipt"].id == stream_job_id(RECEIPT_FOR_NEW_ORDERS, record["eventID"])
    assert envelopes["charge"].correlation.origin == f"stream:{ORDERS}"


def test_stream_rules_fire_on_inserts_with_their_status_only(aws: Aws) -> None:
    event = stream_event(order_record(aws, status="PAID"), order_record(aws, event_name="MODIFY"))
    assert relay(aws, ORDERS).handle(event) == NO_FAILURES
    assert bodies(aws, STANDARD) == []
    assert drain(aws, aws.provisioned.relay_dlq_url) == []


def test_a_redelivered_stream_record_yields_the_same_job_ids(aws: Aws) -> None:
    record = order_record(aws)
    relay(aws, ORDERS).handle(stream_event(record))
    relay(aws, ORDERS).handle(stream_event(record))
    ids = sorted(parse_envelope(body).id for body in bodies(aws, STANDARD))
    assert ids[0::2] == ids[1::2]
    assert len(set(ids)) == 2


@pytest.mark.parametrize(
    ("amount_cents", "reason", "error"),
    [
        ("0", Reason.INVALID_PAYLOAD, "amount_cents: Input should be greater than 0"),
        (None, Reason.STREAM_RULE_FAILED, "rule 'charge-new-orders' raised KeyError"),
    ],
    ids=["payload fails validation", "payload function raises"],
)
def test_a_rule_that_cannot_make_its_job_makes_the_record_poison(
    aws: Aws, amount_cents: str | None, reason: Reason, error: str
) -> None:
    poison = order_record(aws, "o-1", amount_cents=amount_cents)
    good = order_record(aws, "o-2")
    assert relay(aws, ORDERS).handle(stream_event(poison, good)) == NO_FAILURES
    (dead,) = drain(aws, aws.provisioned.relay_dlq_url)
    assert json.loads(dead["Body"]) == poison
    assert dead["MessageAttributes"]["conveyor.reason"]["StringValue"] == reason.value
    assert error in dead["MessageAttributes"]["conveyor.error"]["StringValue"]
    assert dead["MessageAttributes"][RELAY_SOURCE]["StringValue"] == ORDERS
    # None of the poison record's jobs went out, not even the receipt its other rule made.
    assert {parse_envelope(body).data["order_id"] for body in bodies(aws, STANDARD)} == {"o-2"}


def test_a_record_fails_if_any_of_its_jobs_failed_to_send(aws: Aws) -> None:
    record = order_record(aws)
    sqs = FlakySqs(aws.sqs, fails=lambda body: parse_envelope(body).type == "send_receipt")
    assert relay(aws, ORDERS, sqs=sqs).handle(stream_event(record)) == failures(record)
    # The charge went out; the retry sends it again under the same id, and the worker absorbs it.
    assert [parse_envelope(body).type for body in bodies(aws, STANDARD)] == ["charge"]


def test_a_relay_for_a_source_nothing_streams_is_refused(aws: Aws) -> None:
    with pytest.raises(DeclarationError, match="relay source 'payments' is neither"):
        relay(aws, "payments")


# --- dedupe at enqueue ---------------------------------------------------------------------------------------


def keyed_envelope(key: str, order_id: str = "o-1") -> str:
    return envelope(JobRequest("charge", {"order_id": order_id, "amount_cents": 100}, dedupe_key=key))


def test_outbox_items_with_one_dedupe_key_make_one_job(aws: Aws, logs: io.StringIO) -> None:
    first = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1"), job_id="job-1"))
    second = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1", "o-2"), job_id="job-2"))
    assert relay(aws).handle(stream_event(first, second)) == NO_FAILURES
    (sent,) = bodies(aws, STANDARD)
    assert parse_envelope(sent).data["order_id"] == "o-1"
    (absorbed,) = [
        line
        for line in map(json.loads, logs.getvalue().splitlines())
        if line["message"] == "duplicate enqueue absorbed"
    ]
    assert absorbed["first_job_id"] == parse_envelope(sent).id != absorbed["job_id"]


def test_a_retried_record_claims_its_own_key_again(aws: Aws) -> None:
    record = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1")))
    sqs = FlakySqs(aws.sqs, fails=lambda body: True)
    assert relay(aws, sqs=sqs).handle(stream_event(record)) == failures(record)
    assert relay(aws).handle(stream_event(record)) == NO_FAILURES
    assert len(bodies(aws, STANDARD)) == 1


def test_an_outbox_item_whose_key_a_producer_already_sent_is_absorbed(aws: Aws) -> None:
    client = JobClient(TOPOLOGY, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    first = client.enqueue("charge", {"order_id": "o-1", "amount_cents": 100}, dedupe_key="checkout-1")
    record = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1")))
    assert relay(aws).handle(stream_event(record)) == NO_FAILURES
    assert [parse_envelope(body).id for body in bodies(aws, STANDARD)] == [first]


def test_a_key_another_producer_is_still_sending_makes_the_record_come_again(aws: Aws) -> None:
    holder = DedupeRecords(aws.dynamodb, aws.provisioned.dedupe_table)
    holder.claim(DedupeKey("charge", "checkout-1", DEFAULT_DEDUPE_WINDOW), "job-of-a-producer")
    record = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1")))
    assert relay(aws).handle(stream_event(record)) == failures(record)
    assert bodies(aws, STANDARD) == []


@pytest.mark.parametrize("topology", [DEDUPE_TOPOLOGY])
def test_a_stream_rules_dedupe_key_makes_one_job_per_key(aws: Aws, topology: Topology) -> None:
    rules = Relay(topology, aws.provisioned.relay_settings(ORDERS), sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    inserted_twice = stream_event(order_record(aws, "o-1"), order_record(aws, "o-1"), order_record(aws, "o-2"))
    assert rules.handle(inserted_twice) == NO_FAILURES
    receipts = [parse_envelope(body) for body in bodies(aws, STANDARD)]
    assert sorted((e.data["order_id"], e.dedupe_key) for e in receipts) == [
        ("o-1", "receipt-o-1"),
        ("o-2", "receipt-o-2"),
    ]


KEY_ON_A_MISSING_FIELD = replace(
    DEDUPE_TOPOLOGY, stream_rules=(replace(RECEIPT_ONCE_PER_ORDER, dedupe_key=lambda item: item["coupon"]),)
)


@pytest.mark.parametrize("topology", [KEY_ON_A_MISSING_FIELD])
def test_a_dedupe_key_function_that_raises_makes_the_record_poison(aws: Aws, topology: Topology) -> None:
    rules = Relay(topology, aws.provisioned.relay_settings(ORDERS), sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    assert rules.handle(stream_event(order_record(aws))) == NO_FAILURES
    (dead,) = drain(aws, aws.provisioned.relay_dlq_url)
    assert dead["MessageAttributes"]["conveyor.reason"]["StringValue"] == Reason.STREAM_RULE_FAILED.value
    error = dead["MessageAttributes"]["conveyor.error"]["StringValue"]
    assert "rule 'receipt-once-per-order': dedupe_key raised KeyError" in error
    assert bodies(aws, STANDARD) == []


def test_a_dedupe_table_that_cannot_be_written_makes_the_record_come_again(aws: Aws, logs: io.StringIO) -> None:
    settings = replace(aws.provisioned.relay_settings(OUTBOX_SOURCE), dedupe_table="no-such-table")
    broken = Relay(TOPOLOGY, settings, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    keyed = outbox_record(aws, outbox_item(STANDARD, keyed_envelope("checkout-1"), job_id="job-1"))
    plain = outbox_record(aws, outbox_item(STANDARD, charge_envelope("o-2"), job_id="job-2"))
    assert broken.handle(stream_event(keyed, plain)) == failures(keyed)
    # The record without a key went out; the keyed one is neither sent nor dead-lettered: Lambda retries it.
    assert [parse_envelope(body).data["order_id"] for body in bodies(aws, STANDARD)] == ["o-2"]
    assert drain(aws, aws.provisioned.relay_dlq_url) == []
    assert "could not claim a dedupe key; the record comes again" in logs.getvalue()
