"""Checkpoints and continuations through the harness on moto: resume, not restart; hand off once.

Jobs here record which rows they processed and from where each run started, so a test can
show that a redelivered job resumed from its checkpoint, that a chain of chunks covered every
row, and that a retried chunk's second hand-off ran nothing twice.
"""

import json
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pydantic import Field

from conveyor.contract import limits
from conveyor.contract import message_attributes as attrs
from conveyor.contract.declarations import Queue, RetryPolicy
from conveyor.contract.errors import Continued
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.reasons import Reason
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job
from conveyor.worker import checkpoints
from conveyor.worker.idempotency import record_lifetime
from conveyor.worker.outcomes import Kind
from functions.jobs import generate_report as report
from functions.providers.effects import Effect, EffectsLedger
from functions.topology import TOPOLOGY
from tests.aws import Aws, moto_aws
from tests.harness_support import QueueDriver, Record, envelope, requests_to

QUEUE = "reports"
RETRY = RetryPolicy(max_attempts=3, base=timedelta(seconds=10))
NEXT = "next"

# What the jobs did, in order; cleared before each test.
processed: list[tuple[str, int]] = []  # (job id, row)
starts: list[tuple[str, int, int]] = []  # (job id, attempt, first row of the run)


class CrashedError(Exception):
    """The worker died mid-run, as far as the harness can tell: retried."""


class Rows(Payload):
    rows: int = Field(gt=0)
    every: int = Field(default=1, gt=0)
    crash_at: int | None = None
    crash_after_handoff: bool = False


def resume(ctx: JobContext) -> int:
    state = ctx.resume_state()
    first = int(state[NEXT]) if state else 0
    starts.append((ctx.job_id, ctx.attempt, first))
    return first


@job("tally", queue=QUEUE, model=Rows, retry=RETRY)
def tally(payload: Rows, ctx: JobContext) -> None:
    """Checkpoints after every ``every`` rows; its first attempt crashes while processing row ``crash_at``."""
    for row in range(resume(ctx), payload.rows):
        processed.append((ctx.job_id, row))
        if row == payload.crash_at and ctx.attempt == 1:
            raise CrashedError(f"crashed at row {row}")
        if (row + 1) % payload.every == 0:
            ctx.checkpoint({NEXT: row + 1})


@job("chunked", queue=QUEUE, model=Rows, retry=RETRY)
def chunked(payload: Rows, ctx: JobContext) -> None:
    """Processes ``every`` rows per run, then hands the rest to its next chunk."""
    first = resume(ctx)
    end = min(first + payload.every, payload.rows)
    processed.extend((ctx.job_id, row) for row in range(first, end))
    if end == payload.rows:
        return
    try:
        ctx.continue_later({NEXT: end})
    except Continued:
        if payload.crash_after_handoff and ctx.attempt == 1:
            raise CrashedError("crashed after handing off") from None
        raise


@job("keyed_chunks", queue=QUEUE, model=Rows, idempotency_key="report-{rows}", retry=RETRY)
def keyed_chunks(payload: Rows, ctx: JobContext) -> None:
    ctx.continue_later({NEXT: 1})


class Blob(Payload):
    size: int = Field(gt=0)


@job("hoard", queue=QUEUE, model=Blob, retry=RETRY)
def hoard(payload: Blob, ctx: JobContext) -> None:
    """Checkpoints ``size`` characters of state, then crashes, so the checkpoint stays to be read."""
    state = ctx.resume_state()
    starts.append((ctx.job_id, ctx.attempt, len(state["blob"]) if state else 0))
    ctx.checkpoint({"blob": "x" * payload.size})
    raise CrashedError("crashed after a large checkpoint")


@job("plain", queue=QUEUE, model=Blob, retry=RETRY)
def plain(payload: Blob, ctx: JobContext) -> None:
    """Uses no checkpoints."""


TEST_TOPOLOGY = Topology(
    queues=(Queue(QUEUE, age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=10)),),
    job_types=(tally, chunked, keyed_chunks, hoard, plain),
)


@pytest.fixture(autouse=True)
def history() -> Iterator[None]:
    processed.clear()
    starts.clear()
    yield
    processed.clear()
    starts.clear()


@pytest.fixture
def topology() -> Topology:
    return TEST_TOPOLOGY


def driver(aws: Aws, queue: str) -> QueueDriver:
    """A queue's driver on the wall clock: a next chunk's envelope is stamped with the real time."""
    queue_driver = QueueDriver(aws, queue)
    queue_driver.now = datetime.now(UTC)
    return queue_driver


@pytest.fixture
def reports(aws: Aws) -> QueueDriver:
    return driver(aws, QUEUE)


def stored(aws: Aws) -> dict[str, dict[str, Any]]:
    """Every checkpoint in the table: item key -> its state."""
    items = aws.dynamodb.scan(TableName=aws.provisioned.checkpoints_table, ConsistentRead=True)["Items"]
    return {item[checkpoints.KEY]["S"]: json.loads(item[checkpoints.STATE]["S"]) for item in items}


def rows_of(job_id: str) -> list[int]:
    return [row for ran, row in processed if ran == job_id]


def job_ids(records: list[Record]) -> list[str]:
    return [json.loads(record["body"])["id"] for record in records]


# --- checkpoints ---------------------------------------------------------------------------------


def test_crashed_job_resumes_from_its_checkpoint_and_the_checkpoint_goes_when_it_completes(
    reports: QueueDriver, aws: Aws
) -> None:
    record = reports.send_and_receive(envelope("tally", {"rows": 10, "every": 3, "crash_at": 7}, job_id="job-t"))

    assert reports.run(record) == [record["messageId"]]
    assert stored(aws) == {"tally#job-t": {NEXT: 6}}

    assert reports.run(reports.redeliver(record)) == []

    assert starts == [("job-t", 1, 0), ("job-t", 2, 6)]
    # Rows 6 and 7 came after the last checkpoint, so they ran again; rows 0 to 5 did not.
    assert rows_of("job-t") == [0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9]
    assert stored(aws) == {}
    assert [outcome.kind for outcome in reports.outcomes] == [Kind.RETRIED, Kind.SUCCEEDED]


def checkpoint_calls(aws: Aws, record: Record, reports: QueueDriver) -> list[str]:
    """Run ``record``, which must succeed; the DynamoDB operations it made on the checkpoints table."""
    operations = ("GetItem", "PutItem", "DeleteItem")
    with ExitStack() as stack:
        calls = {operation: stack.enter_context(requests_to(aws.dynamodb, operation)) for operation in operations}
        assert reports.run(record) == []
    table = aws.provisioned.checkpoints_table
    return [operation for operation in operations for call in calls[operation] if call["TableName"] == table]


def test_checkpoints_cost_nothing_to_a_job_that_does_not_use_them(reports: QueueDriver, aws: Aws) -> None:
    assert checkpoint_calls(aws, reports.send_and_receive(envelope("plain", {"size": 1})), reports) == []

    # Asked for a checkpoint, found none, saved none: one read, and no delete.
    quiet = envelope("tally", {"rows": 2, "every": 5})
    assert checkpoint_calls(aws, reports.send_and_receive(quiet), reports) == ["GetItem"]


def test_checkpoint_that_cannot_be_deleted_leaves_the_job_succeeded_and_expires_with_its_record(
    reports: QueueDriver, aws: Aws
) -> None:
    record = reports.send_and_receive(envelope("tally", {"rows": 4, "every": 2}, job_id="job-stuck"))

    def unavailable(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] == aws.provisioned.checkpoints_table:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "try again"}}, "DeleteItem")

    event = "provide-client-params.dynamodb.DeleteItem"
    aws.dynamodb.meta.events.register(event, unavailable)
    try:
        assert reports.run(record) == []
    finally:
        aws.dynamodb.meta.events.unregister(event, unavailable)

    assert [outcome.kind for outcome in reports.outcomes] == [Kind.SUCCEEDED]
    (item,) = aws.dynamodb.scan(TableName=aws.provisioned.checkpoints_table)["Items"]
    expires_at = reports.now + record_lifetime(tally)
    assert item[checkpoints.EXPIRES_AT] == {"N": str(int(expires_at.timestamp()))}


def test_checkpoint_over_the_item_size_limit_dead_letters_the_job_saying_to_store_state_by_reference(
    reports: QueueDriver, aws: Aws
) -> None:
    body = envelope("hoard", {"size": limits.DYNAMODB_MAX_ITEM_BYTES}, job_id="job-huge")
    record = reports.send_and_receive(body)

    assert reports.run(record) == []

    (letter,) = reports.dead_letters()
    assert letter.body == body
    assert letter.attributes[attrs.REASON] == Reason.PERMANENT_ERROR
    assert letter.attributes[attrs.ERROR_CLASS] == "CheckpointTooLargeError"
    assert "by reference" in letter.attributes[attrs.ERROR]
    assert stored(aws) == {}


def test_checkpoint_just_under_the_item_size_limit_is_stored_and_resumed(reports: QueueDriver, aws: Aws) -> None:
    # 8 KiB under AWS's limit; moto caps items a little lower (at 405,000 bytes) than AWS does.
    size = limits.DYNAMODB_MAX_ITEM_BYTES - 8 * 1024
    record = reports.send_and_receive(envelope("hoard", {"size": size}, job_id="job-big"))

    assert reports.run(record) == [record["messageId"]]
    assert reports.run(reports.redeliver(record)) == [record["messageId"]]

    assert starts == [("job-big", 1, 0), ("job-big", 2, size)]
    assert reports.dead_letters() == []


# --- continuations -------------------------------------------------------------------------------


def run_chain(reports: QueueDriver) -> list[str]:
    """Run whatever is on the queue until it is empty; the job ids run, in order."""
    ran: list[str] = []
    while records := reports.receive():
        assert reports.run(*records) == []
        ran += job_ids(records)
    return ran


def test_continued_job_runs_as_a_chain_of_chunks_each_resuming_where_the_last_stopped(
    reports: QueueDriver, aws: Aws
) -> None:
    reports.send(envelope("chunked", {"rows": 5, "every": 2}, job_id="job-c"))

    assert run_chain(reports) == ["job-c", "job-c#1", "job-c#2"]

    assert starts == [("job-c", 1, 0), ("job-c#1", 1, 2), ("job-c#2", 1, 4)]
    assert [row for _, row in processed] == [0, 1, 2, 3, 4]
    assert [outcome.kind for outcome in reports.outcomes] == [Kind.SUCCEEDED] * 3
    assert stored(aws) == {}, "each chunk deleted the checkpoint it was handed"


def test_chunk_keeps_its_correlation_and_runs_under_its_own_idempotency_key(reports: QueueDriver) -> None:
    reports.send(envelope("chunked", {"rows": 3, "every": 2}, job_id="job-k"))
    assert reports.run(reports.receive_one()) == []

    (following,) = reports.receive()
    sent = json.loads(following["body"])
    assert (sent["id"], sent["dedupe_key"], sent["type"]) == ("job-k#1", "job-k#1", "chunked")
    assert sent["data"] == {"rows": 3, "every": 2, "crash_at": None, "crash_after_handoff": False}
    assert sent["correlation"]["request_id"] == "req-ünïcode"


def test_retried_chunk_hands_off_again_but_its_next_chunk_runs_once(reports: QueueDriver) -> None:
    record = reports.send_and_receive(
        envelope("chunked", {"rows": 4, "every": 2, "crash_after_handoff": True}, job_id="job-r")
    )
    assert reports.run(record) == [record["messageId"]]  # handed off, then crashed: retried

    reports.end_backoff(record)
    batch = reports.receive()
    assert sorted(job_ids(batch)) == ["job-r", "job-r#1"]
    assert reports.run(*batch) == []  # the retry hands off again, under the same id, as chunk 1 runs
    (copy,) = reports.receive()
    assert job_ids([copy]) == ["job-r#1"]
    assert reports.run(copy) == []

    assert [start for start in starts if start[0] == "job-r#1"] == [("job-r#1", 1, 2)]
    assert [outcome.kind for outcome in reports.outcomes if outcome.job_id == "job-r#1"] == [
        Kind.SUCCEEDED,
        Kind.DUPLICATE,
    ]
    assert rows_of("job-r#1") == [2, 3]
    assert reports.receive() == []


def test_job_keyed_by_its_payload_cannot_continue_and_is_dead_lettered(reports: QueueDriver, aws: Aws) -> None:
    record = reports.send_and_receive(envelope("keyed_chunks", {"rows": 2}, job_id="job-keyed"))

    assert reports.run(record) == []

    (letter,) = reports.dead_letters()
    assert letter.attributes[attrs.ERROR_CLASS] == "CheckpointError"
    assert "idempotency_key" in letter.attributes[attrs.ERROR]
    assert reports.receive() == [], "nothing was handed off"
    assert stored(aws) == {}


# --- the example job -----------------------------------------------------------------------------


@pytest.fixture
def bulk() -> Iterator[QueueDriver]:
    for aws in moto_aws(TOPOLOGY):
        yield driver(aws, "bulk")


def test_generate_report_hands_off_when_time_runs_low_and_applies_each_row_once(bulk: QueueDriver) -> None:
    rows = 250
    bulk.send(envelope("generate_report", {"report_id": "r-1", "rows": rows}, job_id="job-report"))
    # A fifth of a second over the hand-off reserve, once the harness's 2 s reserve is kept back.
    invocation_s = report.HANDOFF_RESERVE.total_seconds() + 2.2

    chunks = 0
    while records := bulk.receive():
        assert bulk.run(*records, timeout_s=invocation_s) == []
        chunks += 1

    assert chunks > 1, "the report should have been handed off at least once"
    ledger = EffectsLedger(client=bulk.aws.dynamodb)
    assert {row: ledger.get(report.row_key("r-1", row)) for row in range(rows)} == dict.fromkeys(
        range(rows), Effect(calls=1, applied=1)
    )
    assert stored(bulk.aws) == {}
