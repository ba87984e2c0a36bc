"""Dedupe at enqueue: a dedupe_key makes a second enqueue within the window return the first job's id."""

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from conveyor.contract.declarations import DEFAULT_DEDUPE_WINDOW, StreamRule
from conveyor.contract.envelope import parse_envelope
from conveyor.contract.errors import DeclarationError, EnqueueError, TransactionConditionError
from conveyor.contract.schema import envelope_schema
from conveyor.contract.topology import Topology
from conveyor.sdk import dedupe
from conveyor.sdk.client import SEND_RETRY, JobClient
from conveyor.sdk.dedupe import CLAIM_LEASE, DedupeKey, DedupeRecords
from conveyor.sdk.jobs import job
from conveyor.sdk.prepare import JobRequest
from functions.jobs.charge_order import ChargeOrder, charge_order
from functions.jobs.send_welcome_email import WelcomeEmail, send_welcome_email
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.fixtures.relay_topology import FIFO
from tests.fixtures.relay_topology import TOPOLOGY as FIFO_TOPOLOGY
from tests.harness_support import requests_to

START = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(aws: Aws, clock: Clock, sleeps: list[float]) -> JobClient:
    return JobClient(
        TOPOLOGY,
        sqs_client=aws.sqs,
        dynamodb_client=aws.dynamodb,
        clock=clock,
        sleep=sleeps.append,
        rng=random.Random(3),
    )


def messages(aws: Aws, queue: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while batch := aws.receive(aws.queue_url(queue)):
        found.extend(batch)
    return found


def record(aws: Aws, job_type: str, key: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = aws.dynamodb.get_item(
        TableName=aws.provisioned.dedupe_table, Key={dedupe.KEY: {"S": f"{job_type}#{key}"}}, ConsistentRead=True
    ).get("Item")
    return item


def welcome(user: str = "u-1") -> WelcomeEmail:
    return WelcomeEmail(user_id=user)


def test_a_second_enqueue_with_the_same_key_returns_the_first_id_and_sends_nothing(aws: Aws, client: JobClient) -> None:
    first = client.enqueue(send_welcome_email, welcome(), dedupe_key="signup-u-1")
    second = client.enqueue(send_welcome_email, welcome(), dedupe_key="signup-u-1")
    assert second == first
    (message,) = messages(aws, "default")
    assert parse_envelope(message["Body"]).id == first
    stored = record(aws, "send_welcome_email", "signup-u-1")
    assert stored is not None
    assert (stored[dedupe.JOB_ID]["S"], stored[dedupe.STATE]["S"]) == (first, dedupe.SENT)
    expires = int(stored[dedupe.EXPIRES_AT]["N"])
    assert expires == int((START + DEFAULT_DEDUPE_WINDOW).timestamp())


def test_what_dedupe_costs_in_requests(aws: Aws, client: JobClient) -> None:
    with (
        requests_to(aws.dynamodb, "PutItem") as puts,
        requests_to(aws.dynamodb, "UpdateItem") as updates,
        requests_to(aws.dynamodb, "GetItem") as reads,
    ):
        client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
        assert (len(puts), len(updates)) == (1, 1)  # the claim, then the mark once SQS took the job
        client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
        assert (len(puts), len(updates)) == (2, 1)  # a duplicate: one refused conditional put, nothing sent
        client.enqueue(send_welcome_email, welcome())
        assert (len(puts), len(updates)) == (2, 1)  # no dedupe key, no dedupe request
    assert reads == []  # never a read before the write
    assert puts[0]["ConditionExpression"]
    assert puts[0]["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"


def test_keys_are_per_job_type(aws: Aws, client: JobClient) -> None:
    email = client.enqueue(send_welcome_email, welcome(), dedupe_key="same")
    charge = client.enqueue(
        charge_order, ChargeOrder(order_id="o-1", amount_cents=5, currency="EUR"), dedupe_key="same"
    )
    assert email != charge
    assert len(messages(aws, "default")) == len(messages(aws, "critical")) == 1


def test_after_the_window_the_key_makes_a_new_job(aws: Aws, client: JobClient, clock: Clock) -> None:
    first = client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    clock.advance(DEFAULT_DEDUPE_WINDOW - timedelta(seconds=1))
    assert client.enqueue(send_welcome_email, welcome(), dedupe_key="k") == first
    clock.advance(timedelta(seconds=2))
    later = client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    assert later != first
    assert len(messages(aws, "default")) == 2


def test_a_type_with_an_idempotency_key_template_still_dedupes_on_the_callers_key(aws: Aws, client: JobClient) -> None:
    # charge_order's key is "{order_id}#charge_v1"; the caller's dedupe_key still holds at enqueue.
    order = ChargeOrder(order_id="o-1", amount_cents=5, currency="EUR")
    first = client.enqueue(charge_order, order, dedupe_key="checkout-1")
    assert client.enqueue(charge_order, order, dedupe_key="checkout-1") == first
    assert len(messages(aws, "critical")) == 1


def test_one_key_twice_in_one_call_makes_one_job(aws: Aws, client: JobClient) -> None:
    ids = client.enqueue_many(
        [
            JobRequest(send_welcome_email, welcome("a"), dedupe_key="k"),
            JobRequest(send_welcome_email, welcome("b")),
            JobRequest(send_welcome_email, welcome("a"), dedupe_key="k"),
        ]
    )
    assert ids[0] == ids[2] != ids[1]
    assert {parse_envelope(m["Body"]).id for m in messages(aws, "default")} == {ids[0], ids[1]}


def test_a_job_sqs_refused_frees_its_key_so_a_retry_makes_it(aws: Aws, client: JobClient) -> None:
    client.enqueue(send_welcome_email, welcome("warm-up"))  # resolves the queue URL before stubbing
    with Stubber(aws.sqs) as stub:
        for _ in range(SEND_RETRY.max_attempts):
            stub.add_client_error("send_message_batch", service_error_code="ServiceUnavailable", http_status_code=503)
        with pytest.raises(EnqueueError) as raised:
            client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    (refused,) = raised.value.rejected
    assert record(aws, "send_welcome_email", "k") is None
    retried = client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    assert retried != refused
    assert parse_envelope(messages(aws, "default")[-1]["Body"]).id == retried


def crashed_producer(aws: Aws, clock: Clock, job_id: str = "job-crashed") -> None:
    """A producer that claimed key "k" and died before its send: its claim is left pending."""
    records = DedupeRecords(aws.dynamodb, aws.provisioned.dedupe_table, clock=clock)
    records.claim(DedupeKey("send_welcome_email", "k", DEFAULT_DEDUPE_WINDOW), job_id)


def test_a_live_claim_of_another_producer_is_waited_for_then_reported(
    aws: Aws, client: JobClient, clock: Clock, sleeps: list[float]
) -> None:
    crashed_producer(aws, clock)
    with pytest.raises(EnqueueError) as raised:
        client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    (why,) = raised.value.rejected.values()
    assert "job job-crashed is being enqueued by another producer" in why
    assert len(sleeps) == SEND_RETRY.max_attempts - 1
    assert messages(aws, "default") == []


def test_a_claim_left_pending_past_its_lease_is_taken_over(aws: Aws, client: JobClient, clock: Clock) -> None:
    crashed_producer(aws, clock)
    clock.advance(CLAIM_LEASE + timedelta(seconds=1))
    job_id = client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    assert job_id != "job-crashed"
    (message,) = messages(aws, "default")
    assert parse_envelope(message["Body"]).id == job_id
    stored = record(aws, "send_welcome_email", "k")
    assert stored is not None
    assert (stored[dedupe.JOB_ID]["S"], stored[dedupe.STATE]["S"]) == (job_id, dedupe.SENT)
    # The window still counts from the first enqueue.
    assert int(stored[dedupe.EXPIRES_AT]["N"]) == int((START + DEFAULT_DEDUPE_WINDOW).timestamp())


def test_without_the_dedupe_table_the_job_is_rejected_naming_its_key(aws: Aws, clock: Clock) -> None:
    client = JobClient(
        TOPOLOGY, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb, dedupe_table="no-such-table", clock=clock
    )
    plain = client.enqueue(send_welcome_email, welcome("plain"))  # no key: no dedupe table needed
    with pytest.raises(EnqueueError) as raised:
        client.enqueue(send_welcome_email, welcome(), dedupe_key="k")
    (why,) = raised.value.rejected.values()
    assert why.startswith("dedupe_key 'k': ")
    assert "ResourceNotFoundException" in why
    assert [parse_envelope(m["Body"]).id for m in messages(aws, "default")] == [plain]


# --- the outbox: JobClient.transact --------------------------------------------------------------------------


def place_order(aws: Aws, order_id: str) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": aws.provisioned.tables["orders"],
            "Item": {"order_id": {"S": order_id}, "status": {"S": "NEW"}, "amount_cents": {"N": "5"}},
        }
    }


def charge(order_id: str) -> JobRequest:
    return JobRequest(charge_order, ChargeOrder(order_id=order_id, amount_cents=5, currency="EUR"), dedupe_key="c-1")


def outbox_ids(aws: Aws) -> list[str]:
    return [item["id"]["S"] for item in aws.dynamodb.scan(TableName=aws.provisioned.outbox_table)["Items"]]


def test_transact_marks_the_key_sent_inside_its_transaction(aws: Aws, client: JobClient) -> None:
    with (
        requests_to(aws.dynamodb, "TransactWriteItems") as transactions,
        requests_to(aws.dynamodb, "UpdateItem") as updates,
    ):
        (job_id,) = client.transact([place_order(aws, "o-1")], [charge("o-1")])
    (transaction,) = transactions
    assert [next(iter(action)) for action in transaction["TransactItems"]] == ["Put", "Put", "Update"]
    assert updates == []
    stored = record(aws, "charge_order", "c-1")
    assert stored is not None
    assert (stored[dedupe.JOB_ID]["S"], stored[dedupe.STATE]["S"]) == (job_id, dedupe.SENT)
    assert outbox_ids(aws) == [job_id]


def test_a_duplicate_job_of_a_transaction_is_left_out_and_its_writes_still_commit(aws: Aws, client: JobClient) -> None:
    (first,) = client.transact([place_order(aws, "o-1")], [charge("o-1")])
    (second,) = client.transact([place_order(aws, "o-2")], [charge("o-2")])
    assert second == first
    assert outbox_ids(aws) == [first]
    orders = aws.dynamodb.scan(TableName=aws.provisioned.tables["orders"])["Items"]
    assert sorted(row["order_id"]["S"] for row in orders) == ["o-1", "o-2"]


def test_a_canceled_transaction_frees_its_keys(aws: Aws, client: JobClient) -> None:
    client.transact([place_order(aws, "o-1")], [JobRequest(send_welcome_email, welcome())])
    conflicting = {"Put": {**place_order(aws, "o-1")["Put"], "ConditionExpression": "attribute_not_exists(order_id)"}}
    with pytest.raises(TransactionConditionError):
        client.transact([conflicting], [charge("o-1")])
    assert record(aws, "charge_order", "c-1") is None
    (job_id,) = client.transact([place_order(aws, "o-3")], [charge("o-3")])
    assert job_id in outbox_ids(aws)


# --- declarations and producers outside the project ---------------------------------------------------------


@pytest.mark.parametrize("window", [timedelta(0), timedelta(days=15), timedelta(seconds=-1)])
def test_a_dedupe_window_out_of_bounds_fails_at_declaration(window: timedelta) -> None:
    with pytest.raises(DeclarationError, match=r"job type 'bad': dedupe_window must be between 1s and 14d"):

        @job("bad", queue="default", dedupe_window=window)
        def bad(payload: WelcomeEmail, ctx: Any) -> None: ...


def test_a_stream_rule_dedupe_key_must_be_callable() -> None:
    not_callable: Callable[[Any], str] = "order_id"  # type: ignore[assignment]
    with pytest.raises(DeclarationError, match="stream rule 'r': dedupe_key must be a callable or None"):
        StreamRule("r", table="orders", job="charge_order", when=bool, payload=dict, dedupe_key=not_callable)


def test_a_producer_outside_the_project_dedupes_with_the_schemas_window(aws: Aws, clock: Clock) -> None:
    schema = envelope_schema(TOPOLOGY)
    assert schema["x-conveyor"]["job_types"]["send_welcome_email"]["dedupe_window_s"] == 86_400
    outside = JobClient.from_schema(schema, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    first = outside.enqueue("send_welcome_email", {"user_id": "u-1"}, dedupe_key="k")
    assert outside.enqueue("send_welcome_email", {"user_id": "u-1"}, dedupe_key="k") == first
    assert len(messages(aws, "default")) == 1


@pytest.mark.parametrize("topology", [FIFO_TOPOLOGY])
def test_a_fifo_queue_dedupes_past_sqs_five_minutes(aws: Aws, topology: Topology, clock: Clock) -> None:
    client = JobClient(topology, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb, clock=clock)
    first = client.enqueue("ship", {"order_id": "o-1"}, group="o-1", dedupe_key="ship-o-1")
    clock.advance(timedelta(hours=1))  # SQS's own deduplication would have forgotten it
    assert client.enqueue("ship", {"order_id": "o-1"}, group="o-1", dedupe_key="ship-o-1") == first
    (message,) = messages(aws, FIFO)
    assert message["Attributes"]["MessageDeduplicationId"] == "ship-o-1"


def test_a_transaction_whose_key_another_producer_holds_writes_nothing(
    aws: Aws, client: JobClient, clock: Clock, sleeps: list[float]
) -> None:
    DedupeRecords(aws.dynamodb, aws.provisioned.dedupe_table, clock=clock).claim(
        DedupeKey("charge_order", "c-1", DEFAULT_DEDUPE_WINDOW), "job-of-a-producer"
    )
    fresh = JobRequest(send_welcome_email, welcome(), dedupe_key="k")
    with pytest.raises(EnqueueError, match="transact: nothing was written") as raised:
        client.transact([place_order(aws, "o-1")], [charge("o-1"), fresh])
    (why,) = raised.value.rejected.values()
    assert "job job-of-a-producer is being enqueued by another producer" in why
    assert raised.value.accepted == []
    assert outbox_ids(aws) == []
    assert aws.dynamodb.scan(TableName=aws.provisioned.tables["orders"])["Items"] == []
    assert record(aws, "send_welcome_email", "k") is None  # the other job's claim, freed
