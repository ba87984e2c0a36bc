"""The transactional outbox end to end: transact, the stream relays and the workers, on the local runtime.

What these prove is what the outbox promises: a job exists only if its transaction committed;
a relay that crashes before, during or after a send, or that relays a record twice, loses
nothing and applies nothing twice; a poison outbox item is set aside with its reason and blocks
nothing; a stream rule fires on inserts only; and a killed worker process, restarted, reads the
streams again from their start and still charges every order exactly once.

The crash and duplicate tests relay ``record_effect`` jobs, which only the worker's idempotency
dedupes (the ledger applies every call): an effect applied once means the repeat was absorbed.
"""

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract import message_attributes as attrs
from conveyor.contract.envelope import Envelope, new_job_id
from conveyor.contract.errors import TransactionConditionError
from conveyor.contract.reasons import Reason
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.local.event_source import Handler
from conveyor.local.stream_source import StreamPoller
from conveyor.sdk import outbox
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.outcomes import Kind
from conveyor.worker.relay import RELAY_SOURCE, Relay
from functions.orders import NEW, ORDER_ID, ORDERS_TABLE, PLACED, STATUS, Order
from tests.e2e.conftest import STOP_S, InProcess, LocalAws, jobs_process, wait_until
from tests.fixtures.e2e_topology import charge_key, record_key
from tests.fixtures.outbox_e2e_topology import TOPOLOGY, TOPOLOGY_SPEC

# Written before the test's relay starts, so its first read takes them all in one batch.
BATCH_ORDERS = 6
KILLED_ORDERS = 8
ROW_ONLY_ORDERS = 4
# Each charge placed before the kill takes this long either side of the charge itself.
HALF_CHARGE_MS = 250
CURRENCY = "EUR"
RAN = frozenset({Kind.SUCCEEDED, Kind.DUPLICATE})


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


class Moment(StrEnum):
    """When, in its first SendMessageBatch, the relay's process dies."""

    BEFORE = "before"
    DURING = "during"  # after half the batch's entries went out
    AFTER = "after"  # SQS accepted the batch; the relay never learnt it


class RelayCrashError(Exception):
    """The relay's process dying: nothing in the relay catches it, so the invocation fails."""


class _CrashingSqs:
    """The relay's SQS client, dying once at ``moment`` of the first batch; then a plain client that records sends."""

    def __init__(self, sqs: Any, moment: Moment) -> None:
        self._sqs = sqs
        self._moment = moment
        self.crashed = False
        self.sent_before_crash: set[str] = set()
        self.sent_after_crash: set[str] = set()

    def send_message(self, **request: Any) -> Any:
        return self._sqs.send_message(**request)

    def send_message_batch(self, **request: Any) -> Any:
        entries = request["Entries"]
        if self.crashed:
            response = self._sqs.send_message_batch(**request)
            self.sent_after_crash |= _job_ids(entries)
            return response
        self.crashed = True
        sent = {Moment.BEFORE: [], Moment.DURING: entries[: len(entries) // 2], Moment.AFTER: entries}[self._moment]
        if sent:
            self._sqs.send_message_batch(QueueUrl=request["QueueUrl"], Entries=sent)
        self.sent_before_crash = _job_ids(sent)
        raise RelayCrashError(f"the relay died {self._moment} sending {len(entries)} messages")


def _job_ids(entries: list[dict[str, Any]]) -> set[str]:
    return {json.loads(entry["MessageBody"])["id"] for entry in entries}


StartRelay = Callable[[Handler], None]


@pytest.fixture
def start_relay(runtime: InProcess) -> StartRelay:
    """The runtime with its outbox relay stopped: a test writes the outbox, then starts a relay of its own.

    Stopped before anything is written, so the test's relay reads the stream from its start; the
    runtime's drain stops it with the rest.
    """
    local = runtime.runtime
    stopped = local.stream_pollers[OUTBOX_SOURCE]
    stopped.stop()
    stop_deadline = time.monotonic() + STOP_S
    assert stopped.join(stop_deadline), "the runtime's outbox relay did not stop"

    def start(handler: Handler) -> None:
        poller = StreamPoller(
            stream_arn=stopped.stream_arn,
            handler=handler,
            streams=local.streams,
            sqs=local.sqs,
            dlq_url=local.provisioned.relay_dlq_url,
            function_name="e2e-outbox-relay",
        )
        local.stream_pollers[OUTBOX_SOURCE] = poller
        poller.start()

    return start


def _relay(aws: LocalAws, sqs_client: Any) -> Relay:
    return Relay(
        TOPOLOGY, aws.provisioned.relay_settings(OUTBOX_SOURCE), sqs_client=sqs_client, dynamodb_client=aws.dynamodb
    )


def _client(aws: LocalAws) -> JobClient:
    return JobClient(
        TOPOLOGY, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb, outbox_table=aws.provisioned.outbox_table
    )


def _orders_table(aws: LocalAws) -> str:
    return aws.provisioned.tables[ORDERS_TABLE.name]


def _orders(prefix: str, count: int) -> list[Order]:
    return [Order(f"{prefix}-{index:02d}", amount_cents=100 + index, currency=CURRENCY) for index in range(count)]


def _record(order: Order) -> JobRequest:
    return JobRequest("record_effect", {"name": order.order_id})


def _place(aws: LocalAws, order: Order, job: JobRequest) -> str:
    """The order's row and ``job`` in one transaction, as functions.orders.place_order commits a charge."""
    (job_id,) = _client(aws).transact([order.placement(_orders_table(aws))], [job])
    return job_id


def _applied(aws: LocalAws, orders: list[Order], effect_key: Callable[[str], str]) -> dict[str, int]:
    """How often each order's effect was applied, for the orders the ledger has one for."""
    effects = aws.effects()
    return {order.order_id: effects[key].applied for order in orders if (key := effect_key(order.order_id)) in effects}


def _recorded(aws: LocalAws, orders: list[Order]) -> dict[str, int]:
    return _applied(aws, orders, record_key)


def _charged(aws: LocalAws, orders: list[Order]) -> dict[str, int]:
    return _applied(aws, orders, charge_key)


def _kinds(runtime: InProcess) -> dict[str, set[Kind]]:
    """Every outcome the in-process workers reported, by job id."""
    kinds: dict[str, set[Kind]] = {}
    with runtime.observed.lock:
        for outcome in runtime.observed.outcomes:
            if outcome.job_id:
                kinds.setdefault(outcome.job_id, set()).add(outcome.kind)
    return kinds


def _outbox_ids(aws: LocalAws) -> set[str]:
    pages = aws.dynamodb.get_paginator("scan").paginate(TableName=aws.provisioned.outbox_table, ConsistentRead=True)
    return {item[outbox.KEY]["S"] for page in pages for item in page["Items"]}


def test_failed_domain_condition_leaves_no_outbox_item_and_no_job(aws: LocalAws, runtime: InProcess) -> None:
    taken, later = Order("taken", 100, CURRENCY), Order("later", 200, CURRENCY)
    first_job = _place(aws, taken, _record(taken))
    wait_until(lambda: _recorded(aws, [taken]), "the order placed first has had its job run")
    retry = JobRequest("record_effect", {"name": taken.order_id}, job_id="second-job-for-taken")

    with pytest.raises(TransactionConditionError) as raised:
        _client(aws).transact([taken.placement(_orders_table(aws))], [retry])

    assert raised.value.failed_writes == {0: "ConditionalCheckFailed"}
    assert raised.value.failed_jobs == {}
    assert _outbox_ids(aws) == {first_job}
    # One shard, read in order: once a later transaction's job has run, the relay is past the refused one.
    later_job = _place(aws, later, _record(later))
    wait_until(lambda: _recorded(aws, [later]) and aws.is_empty(aws.queue_url), "the later order's job has run")
    # record_effect applies on every run its job id is new: a second job would have made it 2.
    assert _recorded(aws, [taken, later]) == {taken.order_id: 1, later.order_id: 1}
    assert set(_kinds(runtime)) == {first_job, later_job}


@pytest.mark.parametrize("moment", list(Moment))
def test_relay_crash_loses_nothing_and_applies_each_effect_once(
    aws: LocalAws, runtime: InProcess, start_relay: StartRelay, moment: Moment
) -> None:
    orders = _orders(f"crash-{moment}", BATCH_ORDERS)
    job_ids = {_place(aws, order, _record(order)) for order in orders}
    crashing = _CrashingSqs(aws.sqs, moment)
    relay = _relay(aws, crashing)

    start_relay(lambda event, context: relay.handle(event))

    wait_until(lambda: crashing.sent_after_crash >= job_ids, "the relay, retried after its crash, has sent every job")
    wait_until(
        lambda: len(_recorded(aws, orders)) == len(orders) and aws.is_empty(aws.queue_url),
        "every job has run and the queue is empty",
    )
    assert crashing.crashed
    assert _recorded(aws, orders) == {order.order_id: 1 for order in orders}
    kinds = _kinds(runtime)
    assert all(kinds[job_id] & RAN for job_id in job_ids)
    # What went out before the crash went out again, and the worker absorbed it.
    assert {job_id for job_id in crashing.sent_before_crash if Kind.DUPLICATE in kinds[job_id]} == (
        crashing.sent_before_crash
    )
    assert aws.is_empty(aws.provisioned.relay_dlq_url)


def test_duplicate_relay_delivery_applies_the_effect_once(
    aws: LocalAws, runtime: InProcess, start_relay: StartRelay
) -> None:
    orders = _orders("twice", BATCH_ORDERS)
    job_ids = {_place(aws, order, _record(order)) for order in orders}
    relay = _relay(aws, aws.sqs)

    def relay_twice(event: dict[str, Any], context: Any) -> Any:
        """Lambda may invoke the relay with the same records again (a retried batch)."""
        relay.handle(event)
        return relay.handle(event)

    start_relay(relay_twice)

    wait_until(
        lambda: (
            all(Kind.DUPLICATE in _kinds(runtime).get(job_id, set()) for job_id in job_ids)
            and aws.is_empty(aws.queue_url)
        ),
        "each job's second copy has been absorbed and the queue is empty",
    )
    assert _recorded(aws, orders) == {order.order_id: 1 for order in orders}


def _foreign_item(job_id: str) -> dict[str, Any]:
    """A well-formed outbox item as a foreign producer writes it with plain boto3 (docs/outbox.md)."""
    envelope = Envelope(type="record_effect", v=1, id=job_id, created_at=datetime.now(UTC), data={"name": job_id})
    return {
        "id": {"S": job_id},
        "queue": {"S": "e2e"},
        "envelope": {"S": envelope.to_json()},
        "created_at": {"S": datetime.now(UTC).isoformat()},
    }


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"envelope": None}, Reason.INVALID_OUTBOX_ITEM),
        ({"queue": {"S": "nowhere"}}, Reason.UNKNOWN_QUEUE),
        ({"envelope": {"S": "not JSON"}}, Reason.INVALID_JSON),
    ],
    ids=["no-envelope", "unknown-queue", "envelope-not-json"],
)
def test_poison_outbox_item_goes_to_the_relay_dlq_with_its_reason_and_later_items_flow(
    aws: LocalAws, runtime: InProcess, change: dict[str, Any], reason: Reason
) -> None:
    poison_id = new_job_id()
    item = {name: value for name, value in {**_foreign_item(poison_id), **change}.items() if value is not None}
    aws.dynamodb.put_item(TableName=aws.provisioned.outbox_table, Item=item)
    later = Order("after-poison", 100, CURRENCY)
    _place(aws, later, _record(later))

    wait_until(
        lambda: _recorded(aws, [later]) and aws.depth(aws.provisioned.relay_dlq_url).visible == 1,
        "the later order's job has run and the poison item is in the relay DLQ",
    )
    (message,) = aws.receive_all(aws.provisioned.relay_dlq_url)
    attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    assert attributes[attrs.REASON] == reason.value
    assert attributes[attrs.ERROR]
    assert attributes[RELAY_SOURCE] == OUTBOX_SOURCE
    # The whole stream record, so nothing of the item is lost.
    assert json.loads(message["Body"])["dynamodb"]["NewImage"] == item
    assert _recorded(aws, [Order(poison_id, 1, CURRENCY)]) == {}


def test_stream_rule_fires_on_insert_only(aws: LocalAws, runtime: InProcess) -> None:
    table = _orders_table(aws)
    updated, inserted = Order("updated-to-new", 100, CURRENCY), Order("inserted-new", 200, CURRENCY)
    aws.dynamodb.put_item(TableName=table, Item=updated.item(PLACED))
    aws.dynamodb.update_item(
        TableName=table,
        Key={ORDER_ID: {"S": updated.order_id}},
        UpdateExpression="SET #status = :new",
        ExpressionAttributeNames={"#status": STATUS},
        ExpressionAttributeValues={":new": {"S": NEW}},
    )
    aws.dynamodb.put_item(TableName=table, Item=inserted.item(NEW))

    # One shard, read in order: once the later insert is charged, the update has been passed over.
    wait_until(
        lambda: _charged(aws, [inserted]) and aws.is_empty(aws.queue_url), "the order inserted as NEW is charged"
    )
    assert _charged(aws, [updated, inserted]) == {inserted.order_id: 1}
    row = aws.dynamodb.get_item(TableName=table, Key={ORDER_ID: {"S": updated.order_id}}, ConsistentRead=True)
    assert row["Item"][STATUS] == {"S": NEW}
    assert len(_kinds(runtime)) == 1


def test_killed_worker_process_restarted_charges_every_order_once(aws: LocalAws, tmp_path: Path) -> None:
    placed = _orders("placed", KILLED_ORDERS)
    rows = _orders("row", ROW_ONLY_ORDERS)
    for order in placed:
        charge = {
            "order_id": order.order_id,
            "amount_cents": order.amount_cents,
            "before_ms": HALF_CHARGE_MS,
            "after_ms": HALF_CHARGE_MS,
        }
        _place(aws, order, JobRequest("slow_charge", charge))
    for order in rows:
        aws.dynamodb.put_item(TableName=_orders_table(aws), Item=order.item(NEW))
    orders = placed + rows

    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path / "first", topology=TOPOLOGY_SPEC) as first:
        wait_until(lambda: first.running() and _charged(aws, placed), "the first worker has charged an order")
        first.kill()  # kill -9: the stream checkpoints die with it; messages in flight return when visible
    assert len(_charged(aws, orders)) < len(orders), "every order was charged before the kill, so nothing was tested"

    # The second process reads both streams from TRIM_HORIZON again and re-sends every job.
    with jobs_process(
        "work", "--endpoint", aws.endpoint, workdir=tmp_path / "second", topology=TOPOLOGY_SPEC
    ) as second:
        wait_until(
            lambda: second.running() and len(_charged(aws, orders)) == len(orders) and aws.is_empty(aws.queue_url),
            "a second worker has charged every order and emptied the queue",
        )

    assert _charged(aws, orders) == {order.order_id: 1 for order in orders}
    assert aws.depth(aws.dlq_url).total == 0
    assert aws.is_empty(aws.provisioned.relay_dlq_url)
