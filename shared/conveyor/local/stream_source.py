"""Lambda's DynamoDB Streams event source mapping, emulated with the relays' settings.

The settings are the deployed mapping's (``conveyor.contract.relay_mapping``), and so is what this does:
- every shard is read from TRIM_HORIZON, a child shard only once its parent is read to its end,
  one batch of up to ``batch_size`` records at a time per shard (parallelization factor 1), in
  sequence order;
- only INSERT records reach the function (the mapping's filter); the others count as processed;
- each record is the GetRecords record as Lambda sends it (JSON: binary values in base64, the
  creation time in epoch seconds), with ``eventSourceARN`` and ``awsRegion``;
- the function's ``batchItemFailures`` (ReportBatchItemFailures): the records before the lowest
  failed sequence number are done, and that record and every later one are invoked again, so
  the relay must be idempotent (it is). An empty or missing list: all done. An exception, or an
  entry that is empty or names no record of the batch (or names them all): the whole batch
  failed, and is split in two, each half retried in turn (BisectBatchOnFunctionError; a split
  uses no retry);
- records retried more than ``max_retry_attempts`` times, or older than ``max_record_age``, are
  given up on: an invocation record goes to the on-failure destination (the relay DLQ) and the
  shard moves on. As from Lambda to an SQS destination, it is metadata only (the shard and the
  range of sequence numbers, ``DDBStreamBatchInfo``), not the records: whoever handles it must
  re-read the stream within its 24 h retention.

A batch being retried is kept in memory, not read again; a shard's checkpoint (where a new
iterator starts after a failed read) moves once everything that read returned is done or given up on.

Polling: while records come, shards are read again at once; once a pass reads nothing, the waits
grow from Lambda's 250 ms (it polls each shard four times a second) to ``IDLE_POLL_CAP_S``, and
the first records reset them. The shards are listed (DescribeStream) at the start, every
``SHARD_LISTING_S`` and once a shard has ended, rather than on every pass.

moto workaround: an ``update_item`` that creates an item makes moto emit two INSERT records,
the first with only the key, where DynamoDB emits one. An INSERT whose NewImage is just its
Keys, followed by an INSERT of the same keys, is dropped; a read that ends with such a record
holds it back until the next read shows what follows it.

moto workaround: a canceled TransactWriteItems puts back a copy, taken before it, of every table
it touched, so an iterator opened before the cancel goes on reading the discarded table's stream:
it returns the records of the canceled transaction's writes, and never those written after, which
reuse their sequence numbers (checked on moto 5.2.5; an iterator is otherwise right after an
empty read: it stays at the same sequence number). So an iterator is kept only while reads return
records (as Lambda reads on at once then): a read that returns nothing drops it, and the next read
opens one after the checkpoint. An idle poll therefore costs two requests, GetShardIterator and
GetRecords, which ``IDLE_POLL_CAP_S`` allows for.
"""

import base64
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import takewhile
from typing import Any, cast

from conveyor.contract import limits, relay_mapping
from conveyor.contract.timestamps import utc_text
from conveyor.local.event_source import Handler, failed_ids
from conveyor.local.lambda_context import LocalLambdaContext

log = logging.getLogger(__name__)

# The longest wait between passes over the shards that read nothing. An idle poll costs two
# requests per shard (see the moto workaround): 0.2 a second per stream at this cap. A record
# written after a quiet spell waits at most this long.
IDLE_POLL_CAP_S = 10.0
# How often the shards are listed even when none has ended. DynamoDB Streams creates, splits and
# retires shards by itself (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html),
# so a new one must be noticed in time, but not looked for on every pass.
SHARD_LISTING_S = 60.0
# The pause before a failed batch (or half of one) is invoked again, so that a function that
# fails on every call does not spin.
RETRY_DELAY_S = 0.2
# What Lambda's invocation records for stream on-failure destinations carry:
# https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html
INVOCATION_RECORD_VERSION = "1.0"
RETRY_ATTEMPTS_EXHAUSTED = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"
# Lambda's functionError for a function that raised.
UNHANDLED = "Unhandled"
EXECUTED_VERSION = "$LATEST"
INVOKE_STATUS = 200


def to_lambda_record(record: Mapping[str, Any], *, stream_arn: str) -> dict[str, Any]:
    """A GetRecords record in the shape Lambda delivers it; a fresh JSON copy, so a retry sees it intact."""
    lambda_record = cast(dict[str, Any], json.loads(json.dumps(record, default=_as_json)))
    lambda_record["eventSourceARN"] = stream_arn
    lambda_record["awsRegion"] = stream_arn.split(":")[3]
    return lambda_record


def _as_json(value: object) -> object:
    """Lambda's JSON for what boto3 decodes: binary attribute values in base64, times in epoch seconds."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return _truncated(value).timestamp()
    raise TypeError(f"{type(value).__name__} is not part of a stream record")


def _truncated(value: datetime) -> datetime:
    """DynamoDB reports creation times rounded down to the second; moto adds milliseconds."""
    return value.replace(microsecond=0)


def _created(record: Mapping[str, Any]) -> datetime:
    return _truncated(cast(datetime, record["dynamodb"]["ApproximateCreationDateTime"]))


def _sequence_number(record: Mapping[str, Any]) -> str:
    return str(record["dynamodb"]["SequenceNumber"])


def _key_only_insert(record: Mapping[str, Any]) -> bool:
    data = record["dynamodb"]
    return bool(record["eventName"] == "INSERT" and data.get("NewImage") == data["Keys"])


def drop_moto_duplicates(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the key-only INSERTs moto emits before the real INSERT of an ``update_item``."""
    return [
        record
        for record, following in zip(records, [*records[1:], None], strict=True)
        if not (
            following is not None
            and _key_only_insert(record)
            and following["eventName"] == "INSERT"
            and following["dynamodb"]["Keys"] == record["dynamodb"]["Keys"]
        )
    ]


@dataclass
class _Shard:
    shard_id: str
    # Every record up to this sequence number is done; a new iterator starts after it (None:
    # at the mapping's starting position).
    checkpoint: str | None = None
    iterator: str | None = None
    # A key-only INSERT that ended the last read (see drop_moto_duplicates).
    held: list[dict[str, Any]] = field(default_factory=list)
    # Closed and read to its end: its children may be read.
    ended: bool = False


@dataclass
class _Batch:
    """Records invoked together, and what Lambda counts for them; halves and retries inherit the counts."""

    records: list[dict[str, Any]]
    retries: int = 0
    invocations: int = 0
    # Of the last invocation: its request id, and whether it raised.
    request_id: str | None = None
    function_error: str | None = None

    def part(self, start: int, end: int | None = None) -> "_Batch":
        return replace(self, records=self.records[start:end])


@dataclass(frozen=True)
class _Outcome:
    # Index of the first record to invoke again; None: all done.
    retry_from: int | None
    # An exception, or a response failing every record: the batch may be split.
    whole_batch: bool = False


_SUCCEEDED = _Outcome(retry_from=None)
_WHOLE_BATCH_FAILED = _Outcome(retry_from=0, whole_batch=True)


class Backoff:
    """The waits between passes that read nothing: ``base_s``, doubling up to ``cap_s``; ``reset`` on records.

    It starts at the cap: a poller's first pass reads whatever the stream holds, and nothing yet
    suggests that more is coming.
    """

    def __init__(
        self, base_s: float = limits.LAMBDA_STREAM_POLL_INTERVAL.total_seconds(), cap_s: float = IDLE_POLL_CAP_S
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self._next_s = cap_s

    def reset(self) -> None:
        """Records came: poll again soon, as Lambda does, in case more follow."""
        self._next_s = self.base_s

    def next_wait(self) -> float:
        """The wait after a pass that read nothing; each doubles the next, up to the cap."""
        wait, self._next_s = self._next_s, min(self.cap_s, self._next_s * 2)
        return wait


class StreamPoller:
    """One stream's event source mapping: a thread reading its shards and invoking ``handler``.

    ``stop`` ends it after the invocation in flight: no read, retry or further invocation
    follows. ``streams`` is a DynamoDB Streams client and ``sqs`` an SQS client of the endpoint;
    ``dlq_url`` is the on-failure destination. ``backoff`` paces the polls of a quiet stream (a
    parameter so that tests need not wait out its cap).
    """

    def __init__(
        self,
        *,
        stream_arn: str,
        handler: Handler,
        streams: Any,
        sqs: Any,
        dlq_url: str,
        function_name: str,
        batch_size: int = relay_mapping.BATCH_SIZE,
        max_retry_attempts: int = relay_mapping.MAX_RETRY_ATTEMPTS,
        max_record_age: timedelta = relay_mapping.MAX_RECORD_AGE,
        backoff: Backoff | None = None,
    ) -> None:
        self.stream_arn = stream_arn
        self._handler = handler
        self._streams = streams
        self._sqs = sqs
        self._dlq_url = dlq_url
        self._function_name = function_name
        self._batch_size = batch_size
        self._max_retry_attempts = max_retry_attempts
        self._max_record_age = max_record_age
        self._backoff = backoff or Backoff()
        self._shards: dict[str, _Shard] = {}
        # The last DescribeStream's shards, and when (monotonic) to list them again.
        self._listed: list[dict[str, Any]] = []
        self._list_at = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stream-poller-{function_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def resume_after(self, previous: "StreamPoller") -> None:
        """Before ``start``: read on from where ``previous`` (stopped, on the same stream) was done, not from
        the stream's start, as a mapping whose function was redeployed does (a reload of the local runtime)."""
        self._shards = {
            shard_id: _Shard(shard_id, checkpoint=shard.checkpoint, ended=shard.ended)
            for shard_id, shard in previous._shards.items()
        }

    def stop(self) -> None:
        """Stop reading and invoking; the invocation in flight runs to completion."""
        self._stopping.set()

    def join(self, deadline: float) -> bool:
        """After ``stop``, wait until ``deadline`` (monotonic) for the invocation in flight; True if it finished."""
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                progressed = self._poll_shards()
            except Exception:  # a poller survives a failed DescribeStream, as Lambda's pollers do
                log.exception("listing the shards of stream %s failed; retrying", self.stream_arn)
                progressed = False
            if progressed:
                self._backoff.reset()
            else:
                self._stopping.wait(self._backoff.next_wait())

    def _poll_shards(self) -> bool:
        """Read and deliver one batch from every shard that may be read now; True if any record was read."""
        progressed = False
        for shard in self._readable_shards():
            if self._stopping.is_set():
                break
            try:
                progressed |= self._poll(shard)
            except Exception:  # an expired iterator, a failed read or send: resume from the checkpoint
                log.exception(
                    "stream %s shard %s failed; resuming after sequence number %s",
                    self.stream_arn,
                    shard.shard_id,
                    shard.checkpoint,
                )
                shard.iterator, shard.held = None, []
        return progressed

    def _readable_shards(self) -> list[_Shard]:
        """The stream's shards not yet read to their end whose parent (if the stream still has it) is, in order."""
        if time.monotonic() >= self._list_at:
            self._listed = self._describe_shards()
            self._list_at = time.monotonic() + SHARD_LISTING_S
            self._shards = {
                shard["ShardId"]: self._shards.get(shard["ShardId"]) or _Shard(shard["ShardId"])
                for shard in self._listed
            }
        return [
            self._shards[shard["ShardId"]]
            for shard in self._listed
            if not self._shards[shard["ShardId"]].ended
            and (shard.get("ParentShardId") not in self._shards or self._shards[shard["ParentShardId"]].ended)
        ]

    def _describe_shards(self) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        page: dict[str, str] = {}
        while True:
            description = self._streams.describe_stream(StreamArn=self.stream_arn, **page)["StreamDescription"]
            shards += description["Shards"]
            if "LastEvaluatedShardId" not in description:
                return shards
            page = {"ExclusiveStartShardId": description["LastEvaluatedShardId"]}

    def _poll(self, shard: _Shard) -> bool:
        """Read the shard's next records and deliver its INSERTs; True if any record was read."""
        records = self._read(shard)
        if not records:
            return bool(shard.held)  # a record held back: read again at once to see what follows it
        inserts = [
            record for record in drop_moto_duplicates(records) if record["eventName"] == relay_mapping.EVENT_NAME
        ]
        # A record held back from the previous read can make one record more than a batch.
        for start in range(0, len(inserts), self._batch_size):
            if not self._deliver(shard.shard_id, _Batch(inserts[start : start + self._batch_size])):
                return True  # stopping: the checkpoint stays before what is not done
        shard.checkpoint = _sequence_number(records[-1])
        return True

    def _read(self, shard: _Shard) -> list[dict[str, Any]]:
        """The shard's next records, with the one held back before; a key-only INSERT ending them is held back."""
        if shard.iterator is None:
            position = (
                {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": shard.checkpoint}
                if shard.checkpoint
                else {"ShardIteratorType": relay_mapping.STARTING_POSITION}
            )
            shard.iterator = self._streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard.shard_id, **position
            )["ShardIterator"]
        response = self._streams.get_records(ShardIterator=shard.iterator, Limit=self._batch_size)
        shard.iterator = response.get("NextShardIterator")
        if shard.iterator is None:  # read to its end: list the shards again to find its children
            shard.ended, self._list_at = True, 0.0
        fresh: list[dict[str, Any]] = response["Records"]
        if not fresh and not shard.ended:
            shard.iterator = None  # see the moto workaround above: the next read reopens after the checkpoint
        records = [*shard.held, *fresh]
        shard.held = records[-1:] if fresh and not shard.ended and _key_only_insert(records[-1]) else []
        return records[: len(records) - len(shard.held)]

    def _deliver(self, shard_id: str, batch: _Batch) -> bool:
        """Invoke until every record is done or given up on; False if stopped first."""
        pending = deque([batch])
        while pending:
            batch = pending.popleft()
            expired = list(takewhile(self._expired, batch.records))  # the oldest come first
            if expired:
                self._give_up(shard_id, batch.part(0, len(expired)), RECORD_AGE_EXCEEDED)
                batch = batch.part(len(expired))
            if not batch.records:
                continue
            if self._stopping.is_set():
                return False
            outcome = self._invoke(batch)
            if outcome.retry_from is None:
                continue
            if outcome.whole_batch and relay_mapping.BISECT_ON_ERROR and len(batch.records) > 1:
                half = len(batch.records) // 2
                pending.extendleft([batch.part(half), batch.part(0, half)])
            else:
                rest = batch.part(outcome.retry_from)
                rest.retries += 1
                if rest.retries > self._max_retry_attempts:
                    self._give_up(shard_id, rest, RETRY_ATTEMPTS_EXHAUSTED)
                    continue
                pending.appendleft(rest)
            self._stopping.wait(RETRY_DELAY_S)
        return True

    def _expired(self, record: Mapping[str, Any]) -> bool:
        return datetime.now(UTC) - _created(record) > self._max_record_age

    def _invoke(self, batch: _Batch) -> _Outcome:
        timeout = relay_mapping.FUNCTION_TIMEOUT.total_seconds()
        context = LocalLambdaContext(function_name=self._function_name, timeout_s=timeout)
        batch.invocations += 1
        batch.request_id = context.aws_request_id
        event = {"Records": [to_lambda_record(record, stream_arn=self.stream_arn) for record in batch.records]}
        started = time.monotonic()
        try:
            response = self._handler(event, context.as_lambda_context())
        except Exception:
            log.exception("invocation of %s failed; the whole batch is retried", self._function_name)
            batch.function_error = UNHANDLED
            return _WHOLE_BATCH_FAILED
        if time.monotonic() - started > timeout:  # Lambda would have stopped it: no response counts
            log.error(
                "invocation of %s ran past its %ss timeout; the whole batch is retried", self._function_name, timeout
            )
            batch.function_error = UNHANDLED
            return _WHOLE_BATCH_FAILED
        batch.function_error = None
        if not relay_mapping.REPORT_BATCH_ITEM_FAILURES:  # Lambda would ignore the response
            return _SUCCEEDED
        sequence_numbers = [_sequence_number(record) for record in batch.records]
        failed = failed_ids(response, set(sequence_numbers))
        if not failed:
            return _SUCCEEDED
        if failed == set(sequence_numbers):
            return _WHOLE_BATCH_FAILED
        return _Outcome(retry_from=min(sequence_numbers.index(number) for number in failed))

    def _give_up(self, shard_id: str, batch: _Batch, condition: str) -> None:
        """Send Lambda's invocation record for ``batch`` to the on-failure destination."""
        first, last = batch.records[0], batch.records[-1]
        document: dict[str, Any] = {
            "requestContext": {
                "requestId": batch.request_id or str(uuid.uuid4()),
                "functionArn": LocalLambdaContext(function_name=self._function_name).invoked_function_arn,
                "condition": condition,
                "approximateInvokeCount": batch.invocations,
            },
            "version": INVOCATION_RECORD_VERSION,
            "timestamp": utc_text(datetime.now(UTC), timespec="milliseconds"),
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": _sequence_number(first),
                "endSequenceNumber": _sequence_number(last),
                "approximateArrivalOfFirstRecord": _iso(_created(first)),
                "approximateArrivalOfLastRecord": _iso(_created(last)),
                "batchSize": len(batch.records),
                "streamArn": self.stream_arn,
            },
        }
        if batch.invocations:  # records that expired before any invocation have no response
            response = {"statusCode": INVOKE_STATUS, "executedVersion": EXECUTED_VERSION}
            if batch.function_error:
                response["functionError"] = batch.function_error
            document["responseContext"] = response
        self._sqs.send_message(QueueUrl=self._dlq_url, MessageBody=json.dumps(document))
        log.error(
            "stream %s shard %s: gave up on %d records (sequence numbers %s to %s): %s; see the relay DLQ",
            self.stream_arn,
            shard_id,
            len(batch.records),
            _sequence_number(first),
            _sequence_number(last),
            condition,
        )


def _iso(value: datetime) -> str:
    return utc_text(value, timespec="seconds")
