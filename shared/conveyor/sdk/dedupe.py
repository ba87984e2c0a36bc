"""Dedupe at enqueue: a second enqueue with the same ``dedupe_key`` makes no second job.

One item per job type and dedupe key in the dedupe table, taken with a conditional PutItem, so
two producers racing on a key make one job without a read before the write. The item says which
job the key made and whether it went out:

- ``pending``: a producer took the key and is sending the job. It holds the key for
  ``CLAIM_LEASE``; past that, the producer is taken to have crashed, and the next enqueue of the
  key takes the key over and sends its own job (if the first send did go out after all, the
  worker's idempotency absorbs the second: both carry the key).
- ``sent``: SQS, or the outbox's transaction, accepted the job. Until the job type's
  ``dedupe_window`` has passed since the first enqueue, every enqueue of the key returns this id.

The SDK's direct sends take the key ``pending`` and mark it ``sent`` once SQS accepted the job (two
writes); ``transact`` marks it inside its own transaction; the stream relay takes it ``sent`` at once,
since Lambda retries a record whose send failed. docs/contracts.md, "Dedupe at enqueue", has the rules.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from conveyor.contract.errors import ConveyorError

KEY = "id"
JOB_ID = "job_id"
STATE = "state"
LEASE_UNTIL = "lease_until"
EXPIRES_AT = "expires_at"
PENDING = "pending"
SENT = "sent"
# Longer than a producer's own send retries (conveyor.sdk.client.SEND_RETRY: five attempts, at
# most 2 s apart), so a live producer never has its key taken over mid-send.
CLAIM_LEASE = timedelta(seconds=30)
CONDITION_FAILED = "ConditionalCheckFailedException"
_NAMES = {"#id": KEY, "#job": JOB_ID, "#state": STATE, "#lease": LEASE_UNTIL, "#expires": EXPIRES_AT}


@dataclass(frozen=True)
class DedupeKey:
    """A job type's dedupe key and how long it holds."""

    job_type: str
    key: str
    window: timedelta

    @property
    def name(self) -> str:
        # Job type names have no "#" (JOB_NAME_PATTERN): the two parts never run into each other.
        return f"{self.job_type}#{self.key}"

    def item_key(self) -> dict[str, Any]:
        return {KEY: {"S": self.name}}


@dataclass(frozen=True)
class Claim:
    """The outcome of taking a key: the job id it stands for, and whether this caller sends that job."""

    job_id: str
    owned: bool


class ClaimPendingError(ConveyorError):
    """Another producer holds the key and has not said yet whether its send went out."""

    def __init__(self, key: DedupeKey, job_id: str, lease_until: datetime) -> None:
        super().__init__(
            f"job type {key.job_type!r}, dedupe_key {key.key!r}: job {job_id} is being enqueued by another "
            f"producer (until {lease_until.isoformat()} at the latest)"
        )
        self.job_id = job_id
        self.lease_until = lease_until


class DedupeRecords:
    """The dedupe table: ``claim`` before a job is sent, ``sent`` or ``release`` after."""

    def __init__(self, dynamodb: Any, table: str, *, clock: Callable[[], datetime] | None = None) -> None:
        self._dynamodb = dynamodb
        self.table = table
        self._clock = clock or (lambda: datetime.now(UTC))

    def claim(self, key: DedupeKey, job_id: str, *, sent: bool = False) -> Claim:
        """Take ``key`` for job ``job_id``, or learn which job already has it.

        Owned when the key is free, its window has passed, it is already ``job_id``'s (a retry of
        this very job), or its pending holder's lease ran out. ``sent=True`` takes it as sent at
        once (the relay, which Lambda retries). Raises ``ClaimPendingError`` while another
        producer's claim is pending and live.
        """
        now = self._clock()
        state = SENT if sent else PENDING
        try:
            self._dynamodb.put_item(
                TableName=self.table,
                Item={
                    **key.item_key(),
                    JOB_ID: {"S": job_id},
                    STATE: {"S": state},
                    LEASE_UNTIL: {"N": _epoch(now + CLAIM_LEASE)},
                    EXPIRES_AT: {"N": _epoch(now + key.window)},
                },
                ConditionExpression="attribute_not_exists(#id) OR #expires <= :now OR #job = :job",
                ExpressionAttributeNames={name: _NAMES[name] for name in ("#id", "#expires", "#job")},
                ExpressionAttributeValues={":now": {"N": _epoch(now)}, ":job": {"S": job_id}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != CONDITION_FAILED:
                raise
            held: dict[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
        else:
            return Claim(job_id, owned=True)
        if held is None:  # the item expired (TTL) between the check and now: try once more
            return self.claim(key, job_id, sent=sent)
        holder = held[JOB_ID]["S"]
        if held[STATE]["S"] == SENT:
            return Claim(holder, owned=False)
        lease_until = _from_epoch(held[LEASE_UNTIL]["N"])
        if lease_until > now:
            raise ClaimPendingError(key, holder, lease_until)
        return self._take_over(key, job_id, holder, held[LEASE_UNTIL]["N"], state, now)

    def _take_over(self, key: DedupeKey, job_id: str, holder: str, old_lease: str, state: str, now: datetime) -> Claim:
        """A pending claim whose producer is gone: this job takes the key, within the first enqueue's window."""
        try:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=key.item_key(),
                UpdateExpression="SET #job = :job, #state = :state, #lease = :lease",
                ConditionExpression="#job = :holder AND #lease = :old_lease",
                ExpressionAttributeNames={name: _NAMES[name] for name in ("#state", "#lease", "#job")},
                ExpressionAttributeValues={
                    ":job": {"S": job_id},
                    ":state": {"S": state},
                    ":lease": {"N": _epoch(now + CLAIM_LEASE)},
                    ":holder": {"S": holder},
                    ":old_lease": {"N": old_lease},
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != CONDITION_FAILED:
                raise
            # Another producer took it over first: it sends the job.
            raise ClaimPendingError(key, holder, now + CLAIM_LEASE) from error
        return Claim(job_id, owned=True)

    def sent(self, key: DedupeKey, job_id: str) -> None:
        """Mark ``job_id``'s claim sent (a mark lost leaves it pending: see CLAIM_LEASE)."""
        self._dynamodb.update_item(**self.mark_sent(key, job_id))

    def mark_sent(self, key: DedupeKey, job_id: str) -> dict[str, Any]:
        """The conditional Update that marks a claim sent, as UpdateItem (and TransactWriteItems' Update) take it."""
        return {
            "TableName": self.table,
            "Key": key.item_key(),
            "UpdateExpression": "SET #state = :sent",
            "ConditionExpression": "#job = :job",
            "ExpressionAttributeNames": {"#state": STATE, "#job": JOB_ID},
            "ExpressionAttributeValues": {":sent": {"S": SENT}, ":job": {"S": job_id}},
        }

    def release(self, key: DedupeKey, job_id: str) -> None:
        """Free a claim whose job was not accepted, so the caller's retry makes it; a claim since taken over is kept."""
        try:
            self._dynamodb.delete_item(
                TableName=self.table,
                Key=key.item_key(),
                ConditionExpression="#job = :job AND #state = :pending",
                ExpressionAttributeNames={"#job": JOB_ID, "#state": STATE},
                ExpressionAttributeValues={":job": {"S": job_id}, ":pending": {"S": PENDING}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != CONDITION_FAILED:
                raise


def _epoch(moment: datetime) -> str:
    """Whole epoch seconds, rounded up: DynamoDB's TTL reads the attribute as seconds."""
    seconds = moment.timestamp()
    return str(int(seconds) + (0 if seconds == int(seconds) else 1))


def _from_epoch(text: str) -> datetime:
    return datetime.fromtimestamp(int(text), UTC)
