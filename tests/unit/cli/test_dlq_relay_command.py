"""`conveyor dlq ... relay`: the relay DLQ read, its poison records run through the relay again, and discarded.

The poison records are dead-lettered by the relay itself (conveyor.worker.relay) in the in-process moto;
Lambda's on-failure record is the document the local stream poller writes for a batch it gave up on.
"""

import json
from typing import Any

import pytest

from conveyor.cli.support import EXIT_FAILED, EXIT_NOT_FOUND
from conveyor.contract.envelope import parse_envelope
from conveyor.contract.payloads import MASK
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.worker.relay import Relay
from tests.aws import Aws
from tests.cli_support import conveyor, conveyor_json
from tests.fixtures.relay_topology import ORDERS, STANDARD, TOPOLOGY, charge
from tests.unit.worker.test_relay import charge_envelope, order_record, outbox_item, outbox_record, stream_event

SPEC = ("--topology", "tests.fixtures.relay_topology:TOPOLOGY")
# The declarations as they were when the records were poisoned: without the `charge` job type.
BEFORE = Topology(queues=TOPOLOGY.queues, job_types=tuple(job for job in TOPOLOGY.job_types if job is not charge))
ON_FAILURE = {
    "requestContext": {"requestId": "r-1", "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:relay",
                       "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 4},
    "version": "1.0",
    "timestamp": "2026-11-29T12:00:00.000Z",
    "DDBStreamBatchInfo": {
        "shardId": "shardId-0001", "startSequenceNumber": "100", "endSequenceNumber": "109", "batchSize": 10,
        "streamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/conveyor-outbox/stream/2026-11-29T00:00:00.000",
    },
}  # fmt: skip


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


def poison(aws: Aws, *items: dict[str, Any], topology: Topology = BEFORE) -> None:
    """The relay, under ``topology``, dead-letters each outbox item it cannot turn into a job."""
    relay = Relay(
        topology, aws.provisioned.relay_settings(OUTBOX_SOURCE), sqs_client=aws.sqs, dynamodb_client=aws.dynamodb
    )
    records = [outbox_record(aws, item) for item in items]
    assert relay.handle(stream_event(*records)) == {"batchItemFailures": []}


def dlq(*argv: str) -> tuple[int, str, str]:
    return conveyor(*SPEC, "dlq", *argv)


def dlq_json(*argv: str) -> Any:
    return conveyor_json(*SPEC, "dlq", *argv)


def sent(aws: Aws) -> list[str]:
    return [parse_envelope(message["Body"]).data["order_id"] for message in aws.receive(aws.queue_url(STANDARD))]


def test_ls_groups_by_the_relays_reason_and_explains_lambdas_records(local: Aws) -> None:
    poison(local, outbox_item(STANDARD, charge_envelope("o-1")), outbox_item("nowhere", charge_envelope("o-2")))
    local.sqs.send_message(QueueUrl=local.provisioned.relay_dlq_url, MessageBody=json.dumps(ON_FAILURE))
    assert sorted((row["reason"], row["error_class"]) for row in dlq_json("ls", "relay", "--group")) == [
        ("batch_given_up", "RetryAttemptsExhausted"),
        ("unknown_queue", "-"),
        ("unknown_type", "-"),
    ]
    (given_up,) = dlq_json("ls", "relay", "--reason", "batch_given_up")
    assert given_up["source"] == "conveyor-outbox"
    assert given_up["error"].startswith(
        "Lambda gave up on 10 records of shard shardId-0001, sequence numbers 100 to 109"
    )


def test_show_lists_the_attributes_and_masks_a_streamed_items_values(local: Aws) -> None:
    poison(local, outbox_item(STANDARD, charge_envelope("o-1")))
    relay = Relay(
        TOPOLOGY, local.provisioned.relay_settings(ORDERS), sqs_client=local.sqs, dynamodb_client=local.dynamodb
    )
    relay.handle(stream_event(order_record(local, "o-secret", amount_cents="0")))  # the charge rule's payload fails
    outbox_entry, order_entry = sorted(dlq_json("ls", "relay"), key=lambda entry: entry["source"] != OUTBOX_SOURCE)

    (detail,) = dlq_json("show", "relay", outbox_entry["message_id"])
    assert detail["attributes"]["conveyor.relay_source"] == OUTBOX_SOURCE
    assert detail["attributes"]["conveyor.reason"] == "unknown_type"
    # The outbox item's envelope is masked by its type's declared sensitive fields (charge has none), as a job's is.
    envelope = json.loads(detail["envelope"]["dynamodb"]["NewImage"]["envelope"]["S"])
    assert (envelope["type"], envelope["data"]["order_id"]) == ("charge", "o-1")

    (detail,) = dlq_json("show", "relay", order_entry["message_id"])
    assert (detail["reason"], detail["attributes"]["conveyor.relay_source"]) == ("invalid_payload", ORDERS)
    assert "o-secret" not in json.dumps(detail)  # no declaration says which fields of a table's item are safe
    assert detail["envelope"]["dynamodb"]["Keys"] == {"order_id": MASK}


def test_redrive_runs_records_through_the_relay_again_keeps_still_poison_ones_and_audits(local: Aws) -> None:
    poison(local, outbox_item(STANDARD, charge_envelope("o-1")), outbox_item("nowhere", charge_envelope("o-2")))
    local.sqs.send_message(QueueUrl=local.provisioned.relay_dlq_url, MessageBody=json.dumps(ON_FAILURE))
    assert dlq_json("redrive", "relay", "--dry-run")["matched"] == 3
    assert sent(local) == []

    code, out, err = dlq("redrive", "relay", "--json")
    assert code == EXIT_FAILED
    report = json.loads(out)
    assert (report["matched"], report["redriven"], len(report["refused"])) == (3, 1, 2)
    assert sorted(report["refused"].values()) == [
        "Lambda's record of a batch it gave up on holds no stream record: read the records from the stream",
        "still poison, dead-lettered again: unknown_queue: queue 'nowhere' is not declared",
    ]
    assert err.strip().splitlines()[-1].startswith("conveyor: 2 entries were not redriven and stay in the DLQ: ")
    assert sent(local) == ["o-1"]  # now that `charge` is declared, its record became the job
    assert sorted(entry["reason"] for entry in dlq_json("ls", "relay")) == ["batch_given_up", "unknown_queue"]
    (row,) = json.loads(conveyor(*SPEC, "audit", "--json")[1])
    assert (row["action"], row["queue"], row["details"]["redriven"], row["details"]["refused"]) == (
        "dlq.redrive",
        "relay",
        1,
        2,
    )


def test_discard_deletes_what_matches_and_audits(local: Aws) -> None:
    poison(local, outbox_item("nowhere", charge_envelope("o-2")))
    local.sqs.send_message(QueueUrl=local.provisioned.relay_dlq_url, MessageBody=json.dumps(ON_FAILURE))
    assert dlq_json("discard", "relay", "--reason", "batch_given_up", "--yes")["deleted"] == 1
    assert [entry["reason"] for entry in dlq_json("ls", "relay")] == ["unknown_queue"]
    (row,) = json.loads(conveyor(*SPEC, "audit", "--json")[1])
    assert (row["action"], row["queue"]) == ("dlq.discard", "relay")


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (
            ("ls", "relays"),
            EXIT_NOT_FOUND,
            "conveyor: unknown DLQ 'relays'; one of: standard, ordered, relay, schedules",
        ),
        (
            ("ls", "schedules"),
            EXIT_NOT_FOUND,
            "conveyor: there is no schedules DLQ: no schedules are declared (or deployed)",
        ),
        (
            ("ls", "relay", "--type", "charge"),
            2,
            "conveyor: the relay DLQ holds stream records, not jobs: --type does not apply to it",
        ),
        (("ls", "relay", "--reason", "permanent_eror"), 2, None),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(
    local: Aws, argv: tuple[str, ...], code: int, line: str | None
) -> None:
    got, out, err = dlq(*argv)
    assert (got, out, len(err.strip().splitlines())) == (code, "", 1)
    if line:
        assert err.strip() == line
