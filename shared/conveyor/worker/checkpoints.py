"""Checkpoints: a long job's progress in DynamoDB, so that a redelivery resumes instead of restarting.

A run's checkpoint is one item keyed ``<job type>#<idempotency key>``: the key that makes the run
happen once also finds its progress, so a retry after a crash, a redelivery or a redrive resumes
where the last attempt checkpointed. The state is the handler's own JSON. The item lives as long
as the job's idempotency record (a redrive days later still resumes) and is deleted when the run
completes. DynamoDB caps an item at 400 KB: larger state goes by reference (an S3 key), and a
checkpoint over the cap raises CheckpointTooLargeError.

``continue_later`` hands the rest of the work to the next *chunk*, a new job of the same type and
payload. Its id is ``<first job's id>#<n>`` and its idempotency key ``<first job's key>#<n>``, so
a chunk that is retried and continues again enqueues a copy that the next chunk's idempotency
absorbs. The next chunk's starting state is written as its checkpoint before it is enqueued, and
only if it has none yet: the first hand-off wins, and a retried chunk never rewinds one that
has started. Carrying the state here rather than in the message leaves the envelope and payload
models alone, keeps state out of SQS bodies and DLQ dumps, and gives a continuation and a
redelivery one way to resume.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from conveyor.contract import limits
from conveyor.contract.errors import CheckpointError, CheckpointTooLargeError, Continued
from conveyor.contract.sizes import item_bytes

# The item; the stack and the local runtime create the table with KEY and the TTL attribute EXPIRES_AT.
KEY = "key"
STATE = "state"
UPDATED_AT = "updated_at"
EXPIRES_AT = "expires_at"
# Where the run sits in its chain of chunks, so that its hand-off can name the next one.
CHUNK = "chunk"
ORIGIN_ID = "origin_id"
ORIGIN_KEY = "origin_key"
# Joins a job type to a key (the item's key), and a first job's id or key to a chunk's number.
SEPARATOR = "#"


@dataclass(frozen=True)
class Chunk:
    """Where a run sits in its job's chain of chunks; chunk 0 is the job as first enqueued."""

    number: int
    origin_id: str
    origin_key: str

    @property
    def job_id(self) -> str:
        return self._suffixed(self.origin_id)

    @property
    def idempotency_key(self) -> str:
        return self._suffixed(self.origin_key)

    def following(self) -> "Chunk":
        return Chunk(self.number + 1, self.origin_id, self.origin_key)

    def _suffixed(self, origin: str) -> str:
        return f"{origin}{SEPARATOR}{self.number}" if self.number else origin


@dataclass(frozen=True)
class Saved:
    """A stored checkpoint; the state is kept as JSON text, exactly as a redelivery reads it back."""

    state_json: str
    chunk: Chunk


class CheckpointStore:
    """The checkpoints table, one item per run; the client is injected, as the harness's others are."""

    def __init__(self, dynamodb_client: Any, table_name: str) -> None:
        self._dynamodb = dynamodb_client
        self._table = table_name

    def load(self, key: str) -> Saved | None:
        item = self._dynamodb.get_item(TableName=self._table, Key={KEY: {"S": key}}, ConsistentRead=True).get("Item")
        if item is None:
            return None
        chunk = Chunk(int(item[CHUNK]["N"]), item[ORIGIN_ID]["S"], item[ORIGIN_KEY]["S"])
        return Saved(state_json=item[STATE]["S"], chunk=chunk)

    def save(self, key: str, saved: Saved, *, now: datetime, expires_at: datetime, only_if_new: bool = False) -> None:
        """Write the checkpoint; with ``only_if_new``, keep the one already there (the first hand-off wins)."""
        item = {
            KEY: {"S": key},
            STATE: {"S": saved.state_json},
            UPDATED_AT: {"S": now.isoformat()},
            EXPIRES_AT: {"N": str(int(expires_at.timestamp()))},
            CHUNK: {"N": str(saved.chunk.number)},
            ORIGIN_ID: {"S": saved.chunk.origin_id},
            ORIGIN_KEY: {"S": saved.chunk.origin_key},
        }
        size = item_bytes(item)
        if size > limits.DYNAMODB_MAX_ITEM_BYTES:
            raise CheckpointTooLargeError(
                f"checkpoint {key!r} is {size} bytes, over DynamoDB's {limits.DYNAMODB_MAX_ITEM_BYTES}-byte item "
                "limit: store large state by reference (an S3 key, say) and checkpoint the reference"
            )
        request: dict[str, Any] = {"TableName": self._table, "Item": item}
        if only_if_new:
            request["ConditionExpression"] = "attribute_not_exists(#key)"
            request["ExpressionAttributeNames"] = {"#key": KEY}
        try:
            self._dynamodb.put_item(**request)
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return  # the chunk was handed its state before, and may have moved on since

    def delete(self, key: str) -> None:
        self._dynamodb.delete_item(TableName=self._table, Key={KEY: {"S": key}})


class Progress:
    """One run's checkpoints: what ``ctx.resume_state``, ``ctx.checkpoint`` and ``ctx.continue_later`` do.

    The run's item is read at most once, on first use; a run that never uses checkpoints makes no call.
    ``hand_off`` enqueues a chunk; it is None for a job type whose idempotency key comes from its
    payload, since every chunk would then share one key and the next would be absorbed as a duplicate.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        job_type: str,
        job_id: str,
        idempotency_key: str,
        lifetime: timedelta,
        clock: Callable[[], datetime],
        hand_off: Callable[[Chunk], None] | None,
    ) -> None:
        self._store = store
        self._job_type = job_type
        self._key = self._item_key(idempotency_key)
        self._first = Chunk(0, job_id, idempotency_key)
        self._lifetime = lifetime
        self._clock = clock
        self._hand_off = hand_off
        self._saved: Saved | None = None
        self._loaded = False

    def resume_state(self) -> dict[str, Any] | None:
        saved = self._load()
        state: dict[str, Any] | None = json.loads(saved.state_json) if saved else None
        return state

    def checkpoint(self, state: Mapping[str, Any]) -> None:
        saved = Saved(state_json=_encode(state), chunk=self._chunk())
        self._save(self._key, saved)
        self._saved = saved

    def continue_later(self, state: Mapping[str, Any]) -> NoReturn:
        if self._hand_off is None:
            raise CheckpointError(
                f"job type {self._job_type!r} takes its idempotency key from its payload, so its chunks would "
                "share one key and the next would never run; drop idempotency_key (the job id, or the "
                "producer's dedupe_key, is then the key)"
            )
        following = self._chunk().following()
        self._save(self._item_key(following.idempotency_key), Saved(_encode(state), following), only_if_new=True)
        self._hand_off(following)
        raise Continued(following.job_id)

    def finish(self) -> None:
        """The run completed: delete its checkpoint, if it has one."""
        if self._saved is not None:
            self._store.delete(self._key)

    def _load(self) -> Saved | None:
        if not self._loaded:
            self._saved = self._store.load(self._key)
            self._loaded = True
        return self._saved

    def _chunk(self) -> Chunk:
        saved = self._load()
        return saved.chunk if saved else self._first

    def _save(self, key: str, saved: Saved, *, only_if_new: bool = False) -> None:
        now = self._clock()
        self._store.save(key, saved, now=now, expires_at=now + self._lifetime, only_if_new=only_if_new)

    def _item_key(self, idempotency_key: str) -> str:
        return f"{self._job_type}{SEPARATOR}{idempotency_key}"


def _encode(state: Mapping[str, Any]) -> str:
    return json.dumps(state, separators=(",", ":"), allow_nan=False)
