"""chaos.faults: each fault fires on exactly the call it names and on no other, at rate 1 always and at rate 0 never.

In-process, against moto with the example topology (the ``aws`` fixture), a crash raises
``Crashed`` instead of ending the test run; the clients that carry the hooks are made after
``install``, as botocore copies its handlers when a session is made. The crash faults are
also run for real: a chaos child (chaos.child, the whole local runtime) against a moto server,
which must exit with CRASH_EXIT_CODE at the intended call, leave its event line, and leave the
records that call implies (an effect applied or not, a record saved or not, a message sent or not).
"""

import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError
from botocore.exceptions import ClientError
from botocore.handlers import BUILTIN_HANDLERS

from chaos.faults import (
    CRASH_EXIT_CODE,
    FAULTS,
    RELAY_THREAD_PREFIX,
    THROTTLE_ERRORS,
    ChaosTables,
    FaultMix,
    install,
    installed,
    read_event_records,
    read_events,
    window_faults_by_key,
    windows_journal,
)
from chaos.topology import TOPOLOGY as CHAOS_TOPOLOGY
from conveyor.contract.errors import TransactionCanceledError, TransactionConditionError
from conveyor.contract.topology import Topology
from conveyor.local.embedded import LOOPBACK, EmbeddedAws, free_port
from conveyor.local.provision import Provisioned, provision
from conveyor.sdk.client import JobClient
from conveyor.sdk.outbox import KEY as OUTBOX_KEY
from conveyor.worker import checkpoints, lease
from conveyor.worker.idempotency import RECORD_KEY, IdempotentRunner
from functions.jobs.send_welcome_email import WelcomeEmail, send_welcome_email
from functions.orders import AMOUNT_CENTS, CURRENCY, NEW, ORDER_ID, ORDERS_TABLE, STATUS, Order, place_order
from functions.providers import email
from functions.providers.effects import EFFECTS_TABLE, Effect, EffectsLedger
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.e2e.conftest import wait_until
from tests.lambda_context import lambda_context

ROOT = Path(__file__).resolve().parents[3]
SEED = 7
BATCH = 5
CHILD_STOP_S = 30.0
CHILD_WAIT_S = 60.0


class Crashed(Exception):  # noqa: N818 - it stands for the process's end, not an error of the code under test
    """What a crash does in-process, where os._exit would end the test run."""

    def __init__(self, code: int) -> None:
        super().__init__(f"crashed with exit code {code}")
        self.code = code


def crash(code: int) -> NoReturn:
    raise Crashed(code)


@dataclass
class Hooked:
    """Clients made after ``install``, so they carry the hooks; the ``aws`` fixture's clients do not."""

    dynamodb: Any
    sqs: Any
    tables: ChaosTables
    events: Path

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        return [(event["fault"], event["detail"]) for event in read_event_records(self.events)]

    def ledger(self) -> EffectsLedger:
        return EffectsLedger(table_name=self.tables.effects, client=self.dynamodb)


@contextmanager
def hooked(aws: Aws, tmp_path: Path, **rates: float) -> Iterator[Hooked]:
    tables = ChaosTables.of(aws.provisioned)
    events = tmp_path / "faults.jsonl"
    with installed(FaultMix(**rates), random.Random(SEED), events, tables, crash=crash):
        session = boto3.session.Session()
        yield Hooked(session.client("dynamodb"), session.client("sqs"), tables, events)


def effect(aws: Aws, key: str) -> Effect | None:
    return EffectsLedger(table_name=aws.provisioned.tables[EFFECTS_TABLE.name], client=aws.dynamodb).get(key)


def welcome_runner(table: str, dynamodb: Any) -> IdempotentRunner:
    """The welcome email's idempotency, as the harness runs it within an invocation."""
    runner = IdempotentRunner(send_welcome_email, table_name=table, dynamodb_client=dynamodb)
    runner.register(lambda_context())
    return runner


def on_queue(sqs: Any, url: str) -> int:
    """Messages on the queue, visible or in flight."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def entries(count: int) -> list[dict[str, str]]:
    return [{"Id": f"e{index}", "MessageBody": f"m{index}"} for index in range(count)]


def on_thread(name: str, call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` on a thread named ``name``; what it raised, if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return raised[0] if raised else None


# -- the fault mix ---------------------------------------------------------------------------


def test_the_faults_are_the_ten_the_chaos_run_names() -> None:
    assert list(FAULTS) == [
        "crash_before_effect",
        "crash_after_effect",
        "crash_after_save",
        "crash_before_delete",
        "throttle_dynamodb",
        "transaction_conflict",
        "send_batch_partial",
        "dlq_send_failure",
        "relay_crash_before_send",
        "relay_crash_after_send",
    ]
    assert all(description and "\n" not in description for description in FAULTS.values())


def test_specs_override_the_defaults_and_the_mix_survives_json() -> None:
    mix = FaultMix.parse(
        ["crash_after_effect=0.002", " throttle_dynamodb = 1 ", "crash_after_effect=0"],
        {"crash_after_effect": 0.5, "send_batch_partial": 0.25},
    )
    assert mix.rates == {
        **dict.fromkeys(FAULTS, 0.0),
        "throttle_dynamodb": 1.0,
        "send_batch_partial": 0.25,
    }
    assert FaultMix.from_json(mix.to_json()) == mix
    assert FaultMix.from_json("{}") == FaultMix()
    assert mix.only(["send_batch_partial", "crash_before_effect"]) == FaultMix(send_batch_partial=0.25)


@pytest.mark.parametrize(
    ("specs", "defaults", "says"),
    [
        (["crash_after_efect=0.1"], {}, "unknown fault 'crash_after_efect'; known faults: crash_before_effect, "),
        (["crash_after_effect"], {}, "expected NAME=RATE"),
        (["=0.1"], {}, "expected NAME=RATE"),
        (["crash_after_effect="], {}, "expected NAME=RATE"),
        (["crash_after_effect=often"], {}, "'often' is not a number from 0 to 1"),
        (["crash_after_effect=1.5"], {}, "1.5 is not a number from 0 to 1"),
        (["crash_after_effect=-0.1"], {}, "-0.1 is not a number from 0 to 1"),
        (["crash_after_effect=nan"], {}, "nan is not a number from 0 to 1"),
        (["crash\nafter=0.1"], {}, "unknown fault 'crash\\nafter'"),
        ([], {"crash_later": 0.1}, "unknown fault 'crash_later'"),
        ([], {"crash_after_effect": 2.0}, "2.0 is not a number from 0 to 1"),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(specs: list[str], defaults: dict[str, float], says: str) -> None:
    with pytest.raises(ValueError, match="fault") as refused:
        FaultMix.parse(specs, defaults)
    message = str(refused.value)
    assert says in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "text", ["not json", "[0.1]", '{"crash_later": 0.1}', '{"crash_after_effect": 1.5}', '{"crash_after_effect": true}']
)
def test_a_bad_mix_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="fault mix") as refused:
        FaultMix.from_json(text)
    assert "\n" not in str(refused.value)


def test_the_targets_are_the_provisioned_tables_and_the_job_queues(aws: Aws) -> None:
    tables = ChaosTables.of(aws.provisioned)
    assert tables == ChaosTables.for_topology(TOPOLOGY)
    assert tables.effects == aws.provisioned.tables[EFFECTS_TABLE.name]
    assert tables.job_queues == {"conveyor-default", "conveyor-critical", "conveyor-bulk"}


# -- the events file -------------------------------------------------------------------------


def jsonl(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_events_are_counted_across_files_and_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    line = {"pid": 1, "at": "2026-12-01T00:00:00+00:00"}
    first.write_text(
        jsonl(
            {**line, "fault": "crash_after_effect", "detail": {"open_windows": ["email:k"]}},
            {**line, "fault": "throttle_dynamodb", "detail": {"window_effect_keys": ["email:k", "w:1"]}},
        )
    )
    second.write_text(jsonl({**line, "fault": "crash_after_effect", "detail": {}}) + '{"fault": "crash_af')
    assert read_events(tmp_path) == {"crash_after_effect": 2, "throttle_dynamodb": 1}
    assert read_events(first) == {"crash_after_effect": 1, "throttle_dynamodb": 1}
    assert read_events([first, tmp_path / "missing.jsonl"]) == read_events(first)
    (tmp_path / "bad.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a fault event"):
        read_events(tmp_path)


def test_windows_count_where_a_throttle_or_a_process_end_cut_them(tmp_path: Path) -> None:
    events = tmp_path / "faults.jsonl"
    events.write_text(
        jsonl({"pid": 1, "at": "-", "fault": "throttle_dynamodb", "detail": {"window_effect_keys": ["email:t"]}})
    )
    windows_journal(events).write_text(
        jsonl(
            # pid 1, thread 10: saved; thread 11: cut by the end of pid 1 (one key's request failed).
            {"pid": 1, "thread": 10, "op": "open", "key": "email:saved"},
            {"pid": 1, "thread": 11, "op": "open", "key": "email:cut"},
            {"pid": 1, "thread": 11, "op": "open", "key": "payments:declined"},
            {"pid": 1, "thread": 11, "op": "drop", "key": "payments:declined"},
            {"pid": 1, "thread": 10, "op": "close"},
            # pid 2 reuses thread id 10 and is cut in the same effect's window again.
            {"pid": 2, "thread": 10, "op": "open", "key": "email:cut"},
        )
        + '{"pid": 2, "thread": 10, "op": "op'  # torn by a SIGKILL
    )
    assert window_faults_by_key(events) == {"email:t": 1, "email:cut": 2}
    assert window_faults_by_key(tmp_path) == window_faults_by_key(events)


# -- each fault at rate 1: on its call, and on no other ---------------------------------------


def test_crash_before_effect_fires_before_the_applied_update_only(aws: Aws, tmp_path: Path) -> None:
    with hooked(aws, tmp_path, crash_before_effect=1.0) as faults:
        ledger = faults.ledger()
        ledger.call("email:a", provider="email", job_id="j1")  # the calls counter
        with pytest.raises(Crashed):
            ledger.apply("email:a", provider="email", job_id="j1")
        with pytest.raises(Crashed):
            ledger.apply_once_per_token("payments:b", "token", provider="payments", job_id="j2")
        # The same expression on another table is not an effect.
        orders = aws.provisioned.tables[ORDERS_TABLE.name]
        faults.dynamodb.update_item(
            TableName=orders,
            Key={ORDER_ID: {"S": "o"}},
            UpdateExpression="ADD applied :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    assert effect(aws, "email:a") == Effect(calls=1, applied=0)
    assert effect(aws, "payments:b") is None
    assert [(fault, detail["effect_key"]) for fault, detail in faults.faults()] == [
        ("crash_before_effect", "email:a"),
        ("crash_before_effect", "payments:b"),
    ]


def test_crash_after_effect_fires_once_the_effect_took_place(aws: Aws, tmp_path: Path) -> None:
    with hooked(aws, tmp_path, crash_after_effect=1.0) as faults:
        ledger = faults.ledger()
        ledger.call("email:a", provider="email", job_id="j1")
        with pytest.raises(Crashed):
            ledger.apply("email:a", provider="email", job_id="j1")
        # The journal shows the window the crash cut.
        assert window_faults_by_key(faults.events) == {"email:a": 1}
        with pytest.raises(Crashed):
            ledger.apply_once_per_token("payments:b", "token", provider="payments", job_id="j2")
        # A second application under the same token fails its condition: no effect, no crash.
        assert ledger.apply_once_per_token("payments:b", "token", provider="payments", job_id="j2") is None
    assert effect(aws, "email:a") == Effect(calls=1, applied=1)
    assert effect(aws, "payments:b") == Effect(calls=0, applied=1)
    recorded = faults.faults()
    assert [(fault, detail["effect_key"]) for fault, detail in recorded] == [
        ("crash_after_effect", "email:a"),
        ("crash_after_effect", "payments:b"),
    ]
    assert recorded[0][1]["open_windows"] == ["email:a"]


def test_crash_after_save_fires_once_the_record_says_completed(aws: Aws, tmp_path: Path) -> None:
    table = aws.provisioned.idempotency_table
    with hooked(aws, tmp_path, crash_after_save=1.0) as faults:
        runner = welcome_runner(table, faults.dynamodb)
        ran: list[str] = []
        with pytest.raises(IdempotencyPersistenceLayerError) as failed:  # Powertools wraps what the save raised
            runner.run("k1", lambda: ran.append("k1"))
        assert isinstance(failed.value.__cause__, Crashed)
        assert runner.run("k1", lambda: ran.append("again")).ran is False  # a duplicate: no save, no crash

        def fails() -> None:
            raise RuntimeError("the job failed")

        with pytest.raises(RuntimeError, match="the job failed"):  # its record is deleted, not saved
            runner.run("k2", fails)
    assert ran == ["k1"]
    reader = IdempotentRunner(send_welcome_email, table_name=table, dynamodb_client=aws.dynamodb)
    assert reader.completed("k1")
    assert [(fault, detail["operation"], detail["table"]) for fault, detail in faults.faults()] == [
        ("crash_after_save", "UpdateItem", table)
    ]


def test_crash_before_delete_fires_on_a_job_queue_only(aws: Aws, tmp_path: Path) -> None:
    url, dlq = aws.queue_url("default"), aws.dlq_url("default")
    with hooked(aws, tmp_path, crash_before_delete=1.0) as faults:
        faults.sqs.send_message(QueueUrl=url, MessageBody="job")
        (message,) = aws.receive(url)
        with pytest.raises(Crashed):
            faults.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        with pytest.raises(Crashed):
            faults.sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": message["ReceiptHandle"]}]
            )
        faults.sqs.send_message(QueueUrl=dlq, MessageBody="dead")
        (dead,) = aws.receive(dlq)
        faults.sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"])  # a DLQ is no job queue
    assert on_queue(aws.sqs, url) == 1
    assert on_queue(aws.sqs, dlq) == 0
    assert faults.faults() == [
        (
            "crash_before_delete",
            {"operation": op, "queue": "conveyor-default", "thread": "MainThread", "open_windows": []},
        )
        for op in ("DeleteMessage", "DeleteMessageBatch")
    ]


def data_calls(dynamodb: Any, table: str, item: dict[str, Any]) -> list[Callable[[], object]]:
    """A call of each kind of DynamoDB data operation on ``table``."""
    return [
        partial(dynamodb.put_item, TableName=table, Item=item),
        partial(dynamodb.get_item, TableName=table, Key=item),
        partial(dynamodb.delete_item, TableName=table, Key=item),
        partial(dynamodb.scan, TableName=table),
        partial(dynamodb.batch_write_item, RequestItems={table: [{"PutRequest": {"Item": item}}]}),
        partial(dynamodb.transact_write_items, TransactItems=[{"Put": {"TableName": table, "Item": item}}]),
    ]


def test_throttle_hits_conveyors_own_tables_and_never_the_effects(aws: Aws, tmp_path: Path) -> None:
    provisioned = aws.provisioned
    keyed = {
        provisioned.idempotency_table: RECORD_KEY,
        provisioned.outbox_table: OUTBOX_KEY,
        provisioned.leases_table: lease.KEY,
        provisioned.checkpoints_table: checkpoints.KEY,
    }
    with hooked(aws, tmp_path, throttle_dynamodb=1.0) as faults:
        dynamodb = faults.dynamodb
        calls = [call for table, key in keyed.items() for call in data_calls(dynamodb, table, {key: {"S": "k"}})]
        codes: set[str] = set()
        for call in calls:
            with pytest.raises(ClientError) as throttled:
                call()
            error = throttled.value.response
            assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
            assert isinstance(throttled.value, getattr(dynamodb.exceptions, error["Error"]["Code"]))
            codes.add(error["Error"]["Code"])
        assert codes == set(THROTTLE_ERRORS)
        # Never the effects ledger, alone or in a transaction with a throttled table; nor a control call.
        faults.ledger().call("email:a", provider="email", job_id="j")
        faults.ledger().apply("email:a", provider="email", job_id="j")
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": faults.tables.effects, "Item": {"effect_key": {"S": "t"}}}},
                {"Put": {"TableName": provisioned.idempotency_table, "Item": {RECORD_KEY: {"S": "t"}}}},
            ]
        )
        dynamodb.put_item(TableName=provisioned.tables[ORDERS_TABLE.name], Item={ORDER_ID: {"S": "o"}})
        dynamodb.describe_table(TableName=provisioned.idempotency_table)
    assert effect(aws, "email:a") == Effect(calls=1, applied=1)
    recorded = faults.faults()
    assert len(recorded) == len(calls)
    assert {detail["table"] for _, detail in recorded} == set(keyed)
    assert {fault for fault, _ in recorded} == {"throttle_dynamodb"}


def test_a_throttle_in_an_effect_window_names_the_effect(aws: Aws, tmp_path: Path) -> None:
    """A job whose effect took place and whose record cannot then be saved runs again: the window."""
    table = aws.provisioned.idempotency_table
    with hooked(aws, tmp_path, throttle_dynamodb=0.0) as faults:
        runner = welcome_runner(table, faults.dynamodb)
        runner.run("k1", lambda: faults.ledger().apply("email:a", provider="email", job_id="j"))
    assert faults.faults() == []
    with hooked(aws, tmp_path, throttle_dynamodb=1.0) as faults:
        ledger = faults.ledger()
        ledger.apply("email:b", provider="email", job_id="j")  # the effect...
        with pytest.raises(ClientError):  # ...then the record's save
            faults.dynamodb.update_item(
                TableName=table,
                Key={RECORD_KEY: {"S": "k2"}},
                UpdateExpression="SET #status = :status",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":status": {"S": "COMPLETED"}},
            )
        with pytest.raises(ClientError):  # the window was counted once
            faults.dynamodb.get_item(TableName=table, Key={RECORD_KEY: {"S": "k2"}})
    assert window_faults_by_key(faults.events) == {"email:b": 1}


def test_a_transaction_is_canceled_by_a_conflict_per_item(aws: Aws, tmp_path: Path) -> None:
    orders = aws.provisioned.tables[ORDERS_TABLE.name]
    with hooked(aws, tmp_path, transaction_conflict=1.0) as faults:
        with pytest.raises(faults.dynamodb.exceptions.TransactionCanceledException) as canceled:
            faults.dynamodb.transact_write_items(
                TransactItems=[{"Put": {"TableName": orders, "Item": {ORDER_ID: {"S": name}}}} for name in "ab"]
            )
        assert canceled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert (
            canceled.value.response["CancellationReasons"]
            == [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}] * 2
        )
        # The producer SDK reads it as AWS's: canceled, not a failed condition.
        client = JobClient(TOPOLOGY, sqs_client=faults.sqs, dynamodb_client=faults.dynamodb)
        with pytest.raises(TransactionCanceledError) as placing:
            place_order(client, orders, Order(order_id="o-1", amount_cents=100, currency="EUR"))
        assert not isinstance(placing.value, TransactionConditionError)
        faults.dynamodb.put_item(TableName=orders, Item={ORDER_ID: {"S": "c"}})  # not a transaction
    assert [item[ORDER_ID]["S"] for item in aws.dynamodb.scan(TableName=orders)["Items"]] == ["c"]
    assert [(fault, detail["items"]) for fault, detail in faults.faults()] == [
        ("transaction_conflict", 2),
        ("transaction_conflict", 2),
    ]


def test_a_partial_batch_failure_reports_sent_entries_as_failed(aws: Aws, tmp_path: Path) -> None:
    url = aws.queue_url("default")
    with hooked(aws, tmp_path, send_batch_partial=1.0) as faults:
        response = faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(BATCH))
        faults.sqs.send_message(QueueUrl=url, MessageBody="single")  # not a batch
    failed = response.get("Failed", [])
    assert failed
    assert all(entry["Code"] == "InternalError" and entry["SenderFault"] is False for entry in failed)
    assert sorted(entry["Id"] for entry in [*response["Successful"], *failed]) == [f"e{i}" for i in range(BATCH)]
    assert on_queue(aws.sqs, url) == BATCH + 1  # every entry was sent
    ((fault, detail),) = faults.faults()
    assert fault == "send_batch_partial"
    assert detail["failed_ids"] == [entry["Id"] for entry in failed]


def test_a_send_to_a_dlq_fails_and_a_send_to_a_job_queue_does_not(aws: Aws, tmp_path: Path) -> None:
    fifo_dlq = aws.sqs.create_queue(QueueName="conveyor-extra-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    dlq = aws.dlq_url("default")
    with hooked(aws, tmp_path, dlq_send_failure=1.0) as faults:
        sqs = faults.sqs
        for request in (
            {"QueueUrl": dlq, "MessageBody": "x"},
            {"QueueUrl": aws.provisioned.relay_dlq_url, "MessageBody": "x"},
            {"QueueUrl": fifo_dlq, "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"},
        ):
            with pytest.raises(ClientError) as failed:
                sqs.send_message(**request)
            assert failed.value.response["Error"]["Code"] == "InternalError"
            assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        sqs.send_message(QueueUrl=aws.queue_url("default"), MessageBody="job")
        sqs.send_message_batch(QueueUrl=dlq, Entries=entries(1))  # only SendMessage
    assert on_queue(aws.sqs, dlq) == 1
    assert on_queue(aws.sqs, aws.queue_url("default")) == 1
    assert [detail["queue"] for _, detail in faults.faults()] == [
        "conveyor-default-dlq",
        "conveyor-relay-dlq",
        "conveyor-extra-dlq.fifo",
    ]


@pytest.mark.parametrize(("fault", "sent"), [("relay_crash_before_send", 0), ("relay_crash_after_send", 1)])
def test_a_relay_crash_fires_on_a_stream_pollers_batch_send_only(
    aws: Aws, tmp_path: Path, fault: str, sent: int
) -> None:
    url = aws.queue_url("critical")
    with hooked(aws, tmp_path, **{fault: 1.0}) as faults:
        faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(1))  # a producer's, on the main thread
        relay = RELAY_THREAD_PREFIX + "conveyor-relay-orders"
        assert isinstance(
            on_thread(relay, lambda: faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(1))), Crashed
        )
        # A stream poller's give-up is a SendMessage to the relay DLQ.
        assert (
            on_thread(relay, lambda: faults.sqs.send_message(QueueUrl=aws.provisioned.relay_dlq_url, MessageBody="x"))
            is None
        )
        assert (
            on_thread("poller-critical-0", lambda: faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(1)))
            is None
        )
    assert on_queue(aws.sqs, url) == 2 + sent
    assert [(name, detail["thread"]) for name, detail in faults.faults()] == [(fault, relay)]


def test_nothing_fires_at_rate_zero(aws: Aws, tmp_path: Path) -> None:
    """Every call some fault aims at, once each, with every fault at 0."""
    url, dlq = aws.queue_url("critical"), aws.dlq_url("critical")
    table = aws.provisioned.idempotency_table
    with hooked(aws, tmp_path) as faults:
        ledger = faults.ledger()
        ledger.call("email:a", provider="email", job_id="j")
        ledger.apply("email:a", provider="email", job_id="j")
        welcome_runner(table, faults.dynamodb).run("k", lambda: None)
        faults.dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": aws.provisioned.outbox_table, "Item": {OUTBOX_KEY: {"S": "o"}}}}]
        )
        faults.sqs.send_message(QueueUrl=dlq, MessageBody="dead")
        response = faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(BATCH))
        assert (
            on_thread(
                RELAY_THREAD_PREFIX + "r", lambda: faults.sqs.send_message_batch(QueueUrl=url, Entries=entries(1))
            )
            is None
        )
        messages = aws.receive(url)
        faults.sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        )
    assert len(response["Successful"]) == BATCH
    assert not response.get("Failed")
    assert effect(aws, "email:a") == Effect(calls=1, applied=1)
    assert not faults.events.exists()


# -- installing and uninstalling -------------------------------------------------------------


def test_uninstalled_hooks_are_gone_and_inert(aws: Aws, tmp_path: Path) -> None:
    before = list(BUILTIN_HANDLERS)
    with hooked(aws, tmp_path, dlq_send_failure=1.0) as faults:
        assert len(BUILTIN_HANDLERS) == len(before) + 4
        with pytest.raises(RuntimeError, match="already installed"):
            install(FaultMix(), random.Random(SEED), faults.events, faults.tables)
    assert before == BUILTIN_HANDLERS
    faults.sqs.send_message(QueueUrl=aws.dlq_url("default"), MessageBody="x")  # its session still has them: inert
    boto3.session.Session().client("sqs").send_message(QueueUrl=aws.dlq_url("default"), MessageBody="x")
    assert len(faults.faults()) == 0


def test_clients_made_before_install_are_hooked_only_when_passed(aws: Aws, tmp_path: Path) -> None:
    dlq = aws.dlq_url("default")
    passed, other = boto3.session.Session().client("sqs"), boto3.session.Session().client("sqs")
    events = tmp_path / "faults.jsonl"
    tables = ChaosTables.of(aws.provisioned)
    mix = FaultMix(dlq_send_failure=1.0)
    with installed(mix, random.Random(SEED), events, tables, clients=[passed], crash=crash) as installation:
        later = boto3.session.Session().client("sqs")
        with pytest.raises(ClientError):
            passed.send_message(QueueUrl=dlq, MessageBody="x")
        other.send_message(QueueUrl=dlq, MessageBody="x")
        installation.uninstall()
    # Hooked twice (made after an install, and passed): one fault per call.
    with installed(mix, random.Random(SEED), events, tables, clients=[later], crash=crash), pytest.raises(ClientError):
        later.send_message(QueueUrl=dlq, MessageBody="x")
    passed.send_message(QueueUrl=dlq, MessageBody="x")
    assert read_events(events) == {"dlq_send_failure": 2}


# -- for real: a chaos child crashes at the intended call ------------------------------------


@dataclass
class Local:
    """A moto server in this process, the chaos topology provisioned on it, and clients to read it."""

    server: EmbeddedAws
    sqs: Any
    dynamodb: Any
    provisioned: Provisioned
    topology: Topology


@pytest.fixture
def local() -> Iterator[Local]:
    server = EmbeddedAws(free_port())
    server.start()
    try:
        _reset(server.port)
        sqs, dynamodb = server.client("sqs"), server.client("dynamodb")
        yield Local(server, sqs, dynamodb, provision(CHAOS_TOPOLOGY, sqs=sqs, dynamodb=dynamodb), CHAOS_TOPOLOGY)
    finally:
        server.stop()


def _reset(port: int) -> None:
    """moto keeps its state per process, not per server (tests/e2e/conftest.py does the same)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=30)
    try:
        connection.request("POST", "/moto-api/reset")
        assert connection.getresponse().status == http.HTTPStatus.OK
    finally:
        connection.close()


@dataclass
class Child:
    process: "subprocess.Popen[bytes]"
    folder: Path
    generation: int

    def output(self) -> str:
        err = (self.folder / "stderr.log").read_text(errors="replace")
        return f"exit {self.process.poll()}; stderr:\n{err[-3000:]}"

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"chaos child exited before it was ready: {self.output()}")
        return f"chaos child {self.generation} ready\n" in (self.folder / "stdout.log").read_text(errors="replace")

    def exit_code(self, timeout_s: float = CHILD_WAIT_S) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"chaos child still running after {timeout_s:g}s: {self.output()}") from None


@contextmanager
def chaos_child(local: Local, tmp_path: Path, generation: int, mix: FaultMix) -> Iterator[Child]:
    folder = tmp_path / f"child-{generation}"
    folder.mkdir()
    argv = [
        sys.executable,
        "-m",
        "chaos.child",
        "--endpoint",
        local.server.endpoint_url,
        "--seed",
        str(SEED),
        "--generation",
        str(generation),
        "--faults",
        mix.to_json(),
        "--events",
        str(tmp_path / "faults.jsonl"),
    ]
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": python_path}
    with (folder / "stdout.log").open("wb") as out, (folder / "stderr.log").open("wb") as err:
        process = subprocess.Popen(argv, cwd=folder, env=environment, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    child = Child(process, folder, generation)
    try:
        wait_until(child.ready, f"chaos child {generation} is ready", timeout_s=CHILD_WAIT_S)
        yield child
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(CHILD_STOP_S)


@dataclass(frozen=True)
class Welcome:
    job_id: str
    payload: WelcomeEmail

    @property
    def effect_key(self) -> str:
        return email.effect_key(f"{self.payload.user_id}@users.example", f"welcome-{self.payload.locale}")


def welcome(local: Local, user: str) -> Welcome:
    """Enqueue a welcome email, as a producer does."""
    payload = WelcomeEmail(user_id=user)
    client = JobClient(local.topology, sqs_client=local.sqs, dynamodb_client=local.dynamodb)
    return Welcome(client.enqueue(send_welcome_email, payload), payload)


def new_order(local: Local, order_id: str) -> None:
    """A row as a producer without the SDK writes it: the stream rule makes its charge."""
    local.dynamodb.put_item(
        TableName=local.provisioned.tables[ORDERS_TABLE.name],
        Item={ORDER_ID: {"S": order_id}, STATUS: {"S": NEW}, AMOUNT_CENTS: {"N": "100"}, CURRENCY: {"S": "EUR"}},
    )


def completed(local: Local, job: Welcome) -> bool:
    """Whether the job's idempotency record says COMPLETED, read as the worker writes it."""
    runner = IdempotentRunner(
        send_welcome_email, table_name=local.provisioned.idempotency_table, dynamodb_client=local.dynamodb
    )
    return runner.completed(
        send_welcome_email.idempotency_key_for(job_id=job.job_id, dedupe_key=None, payload=job.payload)
    )


def ledger(local: Local) -> EffectsLedger:
    return EffectsLedger(table_name=local.provisioned.tables[EFFECTS_TABLE.name], client=local.dynamodb)


def test_a_child_refuses_a_bad_fault_mix_in_one_line(tmp_path: Path) -> None:
    argv = ["--endpoint", "http://127.0.0.1:9", "--seed", "1", "--generation", "0", "--events", str(tmp_path / "e")]
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    finished = subprocess.run(
        [sys.executable, "-m", "chaos.child", *argv, "--faults", '{"crash_later": 1}'],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=CHILD_WAIT_S,
        check=False,
    )
    assert finished.returncode == 2
    assert finished.stderr.startswith("chaos child: fault mix: unknown fault 'crash_later'")
    assert finished.stderr.count("\n") == 1


def applied_once(local: Local, key: str) -> bool:
    return ledger(local).get(key) == Effect(calls=1, applied=1)


def test_a_child_runs_until_sigterm_and_a_restarted_one_finds_its_resources(local: Local, tmp_path: Path) -> None:
    for generation in (0, 1):
        with chaos_child(local, tmp_path, generation, FaultMix()) as child:
            key = welcome(local, f"user-{generation}").effect_key
            wait_until(partial(applied_once, local, key), f"{key} is applied")
            child.process.send_signal(signal.SIGTERM)
            assert child.exit_code() == 0, child.output()
    assert not (tmp_path / "faults.jsonl").exists()
    assert window_faults_by_key(tmp_path / "faults.jsonl") == {}  # every window closed: none cut by the exits


@pytest.mark.parametrize(
    "fault",
    [
        "crash_before_effect",
        "crash_after_effect",
        "crash_after_save",
        "crash_before_delete",
        "relay_crash_before_send",
        "relay_crash_after_send",
    ],
)
def test_a_crash_ends_the_child_at_its_call_with_its_code_and_its_event(
    local: Local, tmp_path: Path, fault: str
) -> None:
    relayed = fault.startswith("relay_")
    with chaos_child(local, tmp_path, 0, FaultMix(**{fault: 1.0})) as child:
        if relayed:
            new_order(local, "o-1")
        else:
            job = welcome(local, "u-1")
        assert child.exit_code() == CRASH_EXIT_CODE, child.output()
    ((event),) = read_event_records(tmp_path / "faults.jsonl")
    assert (event["fault"], event["pid"]) == (fault, child.process.pid)
    critical = local.provisioned.queues["critical"].url
    default = local.provisioned.queues["default"].url
    if relayed:
        assert event["detail"]["thread"].startswith(RELAY_THREAD_PREFIX)
        assert event["detail"]["queue"] == "conveyor-critical"
        assert on_queue(local.sqs, critical) == (1 if fault == "relay_crash_after_send" else 0)
        return
    applied = 0 if fault == "crash_before_effect" else 1
    assert ledger(local).get(job.effect_key) == Effect(calls=1, applied=applied)
    assert completed(local, job) is (fault in ("crash_after_save", "crash_before_delete"))
    assert on_queue(local.sqs, default) == 1  # never deleted: it comes back
    # Only a crash after the effect and before the save cuts its window; the journal survived the exit.
    cut = {job.effect_key: 1} if fault == "crash_after_effect" else {}
    assert window_faults_by_key(tmp_path / "faults.jsonl") == cut
