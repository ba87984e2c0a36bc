"""JobClient.transact: a job exists if and only if the caller's writes committed with it.

Misuse (over a limit, two actions on one item, a delay, a malformed action) fails before any
TransactWriteItems call; a cancellation names the write or job whose condition failed.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from conveyor.contract import limits
from conveyor.contract.envelope import Correlation, parse_envelope
from conveyor.contract.errors import EnqueueError, InvalidJobError, TransactionCanceledError, TransactionConditionError
from conveyor.contract.topology import Topology
from conveyor.sdk import outbox
from conveyor.sdk.client import JobClient
from conveyor.sdk.correlation import correlated
from conveyor.sdk.prepare import JobRequest
from functions.jobs.charge_order import ChargeOrder, charge_order
from tests.aws import Aws
from tests.fixtures.outbox_topology import TOPOLOGY, LedgerEntry, attach_receipt, post_ledger

Write = dict[str, Any]


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture
def client(aws: Aws) -> JobClient:
    # No outbox_table: the default, naming.table_name(naming.OUTBOX_TABLE), is the one provisioned.
    return JobClient(TOPOLOGY, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)


@pytest.fixture
def transact_calls(aws: Aws) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    aws.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.TransactWriteItems", lambda params, **_: calls.append(params)
    )
    return calls


def orders(aws: Aws) -> str:
    return aws.provisioned.tables["orders"]


def place(aws: Aws, order_id: str, *, note: str = "") -> Write:
    """The order row, put only if no order has this id yet."""
    item = {"order_id": {"S": order_id}, "status": {"S": "NEW"}, "amount_cents": {"N": "1250"}}
    if note:
        item["note"] = {"S": note}
    return {"Put": {"TableName": orders(aws), "Item": item, "ConditionExpression": "attribute_not_exists(order_id)"}}


def mark_paid(aws: Aws, order_id: str) -> Write:
    return {
        "Update": {
            "TableName": orders(aws),
            "Key": {"order_id": {"S": order_id}},
            "UpdateExpression": "SET #s = :paid",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":paid": {"S": "PAID"}},
        }
    }


def charge(order_id: str, **options: Any) -> JobRequest:
    return JobRequest(charge_order, ChargeOrder(order_id=order_id, amount_cents=1250, currency="EUR"), **options)


def outbox_items(aws: Aws) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = aws.dynamodb.scan(TableName=aws.provisioned.outbox_table)["Items"]
    return items


def order_rows(aws: Aws) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = aws.dynamodb.scan(TableName=orders(aws))["Items"]
    return rows


def test_the_order_row_and_its_job_commit_together(aws: Aws, client: JobClient) -> None:
    (job_id,) = client.transact([place(aws, "o-1")], [charge("o-1", dedupe_key="checkout-1")])
    row = aws.dynamodb.get_item(TableName=orders(aws), Key={"order_id": {"S": "o-1"}})["Item"]
    assert row["status"] == {"S": "NEW"}
    item = aws.dynamodb.get_item(TableName=aws.provisioned.outbox_table, Key={outbox.KEY: {"S": job_id}})["Item"]
    assert item[outbox.QUEUE] == {"S": "critical"}
    assert outbox.GROUP not in item
    envelope = parse_envelope(item[outbox.ENVELOPE]["S"])
    assert (envelope.id, envelope.type, envelope.v, envelope.dedupe_key) == (job_id, "charge_order", 1, "checkout-1")
    assert envelope.data == {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}
    expires_at = int(item[outbox.EXPIRES_AT]["N"])
    assert expires_at - envelope.created_at.timestamp() == pytest.approx(outbox.RETENTION.total_seconds(), abs=5)
    assert item[outbox.CREATED_AT]["S"].endswith("Z")


def test_ids_come_back_in_the_order_of_the_jobs(aws: Aws, client: JobClient) -> None:
    ids = client.transact([place(aws, "o-1")], [charge("o-1", job_id="first"), charge("o-2", job_id="second")])
    assert ids == ["first", "second"]
    assert {item[outbox.KEY]["S"] for item in outbox_items(aws)} == {"first", "second"}


def test_a_failed_domain_condition_leaves_no_job_and_names_the_write(
    aws: Aws, client: JobClient, transact_calls: list[dict[str, Any]]
) -> None:
    client.transact([place(aws, "o-1")], [charge("o-1")])
    before = outbox_items(aws)
    with pytest.raises(TransactionConditionError) as raised:
        client.transact([place(aws, "o-1", note="again"), mark_paid(aws, "o-0")], [charge("o-1")])
    assert "write 0 (Put on conveyor-orders, key order_id='o-1'): ConditionalCheckFailed" in str(raised.value)
    assert "nothing was written" in str(raised.value)
    assert raised.value.failed_writes == {0: "ConditionalCheckFailed"}
    assert raised.value.failed_jobs == {}
    assert len(transact_calls) == 2
    assert outbox_items(aws) == before
    assert [row["order_id"]["S"] for row in order_rows(aws)] == ["o-1"]
    assert "note" not in order_rows(aws)[0]


def test_a_job_id_already_in_the_outbox_is_reported_as_such(
    aws: Aws, client: JobClient, transact_calls: list[dict[str, Any]]
) -> None:
    client.transact([place(aws, "o-1")], [charge("o-1", job_id="charge-o-1")])
    with pytest.raises(TransactionConditionError) as raised:
        client.transact([place(aws, "o-2")], [charge("o-2", job_id="charge-o-1")])
    assert "job charge-o-1: an outbox item with this id exists" in str(raised.value)
    assert raised.value.failed_jobs == {"charge-o-1": "ConditionalCheckFailed"}
    assert raised.value.failed_writes == {}
    assert [row["order_id"]["S"] for row in order_rows(aws)] == ["o-1"]
    assert parse_envelope(outbox_items(aws)[0][outbox.ENVELOPE]["S"]).data["order_id"] == "o-1"


def _too_many(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [place(aws, f"o-{i}") for i in range(limits.DYNAMODB_MAX_TRANSACT_ITEMS)], [charge("o-0")]


def _too_large(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    note = "x" * 390_000
    return [place(aws, f"o-{i}", note=note) for i in range(11)], [charge("o-0")]


def _put_and_update_one_item(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [place(aws, "o-1"), mark_paid(aws, "o-1")], [charge("o-1")]


def _check_and_delete_one_item(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    key = {"order_id": {"S": "o-1"}}
    check = {"TableName": orders(aws), "Key": key, "ConditionExpression": "attribute_exists(order_id)"}
    return [{"ConditionCheck": check}, {"Delete": {"TableName": orders(aws), "Key": key}}], [charge("o-1")]


def _write_over_a_job(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    item = {outbox.KEY: {"S": "charge-o-1"}, outbox.QUEUE: {"S": "critical"}, outbox.ENVELOPE: {"S": "{}"}}
    return [{"Put": {"TableName": aws.provisioned.outbox_table, "Item": item}}], [charge("o-1", job_id="charge-o-1")]


def _delayed(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [place(aws, "o-1")], [charge("o-1", delay=timedelta(seconds=30))]


def _unknown_operation(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{"Upsert": place(aws, "o-1")["Put"]}], [charge("o-1")]


def _two_operations(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{**place(aws, "o-1"), **mark_paid(aws, "o-2")}], [charge("o-1")]


def _plain_values(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{"Put": {"TableName": orders(aws), "Item": {"order_id": "o-1"}}}], [charge("o-1")]


def _two_types_in_a_value(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    item = {"order_id": {"S": "o-1"}, "amount_cents": {"S": "1250", "N": "1250"}}
    return [{"Put": {"TableName": orders(aws), "Item": item}}], [charge("o-1")]


def _no_key(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{"Put": {"TableName": orders(aws), "Item": {"id": {"S": "o-1"}}}}], [charge("o-1")]


def _map_key(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{"Put": {"TableName": orders(aws), "Item": {"order_id": {"M": {}}}}}], [charge("o-1")]


def _unknown_table(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [{"Put": {"TableName": "conveyor-invoices", "Item": {"id": {"S": "i-1"}}}}], [charge("o-1")]


def _no_job(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [place(aws, "o-1")], []


def _job_too_large_for_an_item(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    receipt = JobRequest(attach_receipt, {"order_id": "o-1", "pdf_base64": "A" * 500_000})
    return [place(aws, "o-1")], [receipt]


def _repeated_job_id(aws: Aws) -> tuple[list[Write], list[JobRequest]]:
    return [place(aws, "o-1")], [charge("o-1", job_id="j"), charge("o-2", job_id="j")]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            _too_many,
            "101 actions (one per write, one per job and one per dedupe key), over DynamoDB's limit of 100",
        ),
        (_too_large, "over DynamoDB's 4194304-byte limit per transaction; split the call"),
        (
            _put_and_update_one_item,
            "write 0 (Put on conveyor-orders, key order_id='o-1') and write 1 (Update on conveyor-orders, "
            "key order_id='o-1') act on the same item",
        ),
        (_check_and_delete_one_item, "write 0 (ConditionCheck on conveyor-orders, key order_id='o-1') and write 1"),
        (_write_over_a_job, "and job charge-o-1 act on the same item"),
        (_delayed, "job 0 ("),
        (_delayed, "the outbox sends jobs at once; use enqueue for delays"),
        (_unknown_operation, 'Unknown parameter in TransactItems[0]: "Upsert", must be one of: ConditionCheck, Put'),
        (_two_operations, "write 0: an action holds exactly one of Put, Update, Delete, ConditionCheck"),
        (_plain_values, "Invalid type for parameter TransactItems[0].Put.Item.order_id"),
        (_two_types_in_a_value, "write 0: an attribute value holds exactly one type"),
        (_no_key, "write 0: the item lacks the table's key attribute 'order_id'"),
        (_map_key, "write 0: key attribute 'order_id' must be a string (S), number (N) or binary (B)"),
        (_unknown_table, "write 0: table 'conveyor-invoices' does not exist"),
        (_no_job, "transact: pass at least one job"),
        (_job_too_large_for_an_item, "over DynamoDB's 409600-byte item limit; send large data by reference"),
        (_repeated_job_id, "job 1: job_id 'j' is also the id of job 0"),
    ],
)
def test_misuse_is_refused_before_the_transaction(
    aws: Aws,
    client: JobClient,
    transact_calls: list[dict[str, Any]],
    case: Callable[[Aws], tuple[list[Write], list[JobRequest]]],
    message: str,
) -> None:
    writes, jobs = case(aws)
    with pytest.raises(InvalidJobError) as raised:
        client.transact(writes, jobs)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert transact_calls == []
    assert outbox_items(aws) == []
    assert order_rows(aws) == []


def test_each_tables_key_is_described_once(aws: Aws, client: JobClient) -> None:
    described: list[str] = []
    aws.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.DescribeTable", lambda params, **_: described.append(params["TableName"])
    )
    client.transact([place(aws, "o-1")], [charge("o-1")])
    client.transact([place(aws, "o-2"), mark_paid(aws, "o-1")], [charge("o-2")])
    assert described == [orders(aws)]


def test_correlation_is_carried_into_the_envelope(aws: Aws, client: JobClient) -> None:
    with correlated(request_id="req-1", origin="checkout", actor="user-7"):
        client.transact([place(aws, "o-1")], [charge("o-1", job_id="implicit")])
    client.transact([], [charge("o-2", job_id="explicit")], correlation=Correlation(request_id="req-2"))
    envelopes = {item[outbox.KEY]["S"]: parse_envelope(item[outbox.ENVELOPE]["S"]) for item in outbox_items(aws)}
    assert envelopes["implicit"].correlation == Correlation(request_id="req-1", origin="checkout", actor="user-7")
    assert envelopes["explicit"].correlation == Correlation(request_id="req-2")


def test_a_fifo_job_needs_a_group_and_the_item_stores_it(
    aws: Aws, client: JobClient, transact_calls: list[dict[str, Any]]
) -> None:
    entry = LedgerEntry(account="acct-1", amount_cents=1250)
    with pytest.raises(InvalidJobError, match="queue 'ledger' is FIFO; pass group="):
        client.transact([place(aws, "o-1")], [JobRequest(post_ledger, entry)])
    assert transact_calls == []
    (job_id,) = client.transact([place(aws, "o-1")], [JobRequest(post_ledger, entry, group="acct-1")])
    (item,) = outbox_items(aws)
    assert item[outbox.KEY] == {"S": job_id}
    assert item[outbox.QUEUE] == {"S": "ledger"}
    assert item[outbox.GROUP] == {"S": "acct-1"}


def test_a_cancellation_without_a_failed_condition_is_a_canceled_error(aws: Aws, client: JobClient) -> None:
    """A transaction conflict (which moto cannot produce) is worth retrying, unlike a failed condition."""
    reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}, {"Code": "None"}]
    with Stubber(aws.dynamodb) as stub:
        stub.add_client_error(
            "transact_write_items",
            service_error_code="TransactionCanceledException",
            modeled_fields={"CancellationReasons": reasons},
        )
        with pytest.raises(TransactionCanceledError) as raised:
            client.transact([mark_paid(aws, "o-1")], [charge("o-1")])
    assert not isinstance(raised.value, TransactionConditionError)
    assert "write 0 (Update on conveyor-orders, key order_id='o-1'): TransactionConflict (Transaction is ongoing" in (
        str(raised.value)
    )
    assert raised.value.failed_writes == {0: "TransactionConflict"}


def test_any_other_refusal_fails_every_job(aws: Aws, client: JobClient) -> None:
    with Stubber(aws.dynamodb) as stub:
        stub.add_client_error(
            "transact_write_items", service_error_code="ValidationException", service_message="Item too large"
        )
        with pytest.raises(EnqueueError) as raised:
            client.transact([mark_paid(aws, "o-1")], [charge("o-1", job_id="j-1")])
    assert str(raised.value) == "transact: no job accepted: ValidationException: Item too large"
    assert raised.value.accepted == []
    assert raised.value.rejected == {"j-1": "ValidationException: Item too large"}
