"""Atomic enqueue: the caller's DynamoDB writes and its jobs' outbox items in one TransactWriteItems call.

DynamoDB refuses a whole transaction that breaks one of its limits, and reports a cancellation
only as reasons aligned with the actions. So the limits are checked here, before the call, with
an error naming the write or job at fault, and a cancellation is mapped back to the writes and
jobs that caused it. Each outbox item is a conditional put: a job id used before fails the
transaction instead of replacing a job the relay may already have sent.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError, ParamValidationError
from botocore.validate import validate_parameters

from conveyor.contract import limits
from conveyor.contract.errors import EnqueueError, InvalidJobError, TransactionCanceledError, TransactionConditionError
from conveyor.contract.sizes import item_bytes
from conveyor.contract.trace_header import SYSTEM_ATTRIBUTE
from conveyor.sdk import outbox
from conveyor.sdk.prepare import PreparedJob

OPERATION = "TransactWriteItems"
# The member of each action that holds the item's key: a Put's whole item, the others' Key.
KEY_MEMBERS = {"Put": "Item", "Update": "Key", "Delete": "Key", "ConditionCheck": "Key"}
KEY_TYPES = frozenset({"S", "N", "B"})
CANCELED = "TransactionCanceledException"
CONDITION_FAILED = "ConditionalCheckFailed"
NOT_FAILED = "None"
NEW_OUTBOX_ITEM = f"attribute_not_exists({outbox.KEY})"

_deserializer = TypeDeserializer()

# A key as (attribute name, value) pairs sorted by name; values are str, Decimal or Binary.
Key = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class _Action:
    """One action of the transaction: what the checks and the error messages need to know of it."""

    operation: str
    table: str
    key: Key
    size: int
    write: int | None = None  # its index in ``writes``; None for a job's outbox item
    job_id: str | None = None

    @property
    def label(self) -> str:
        if self.job_id is not None:
            return f"job {self.job_id}"
        key = ", ".join(f"{name}={_render(value)}" for name, value in self.key)
        return f"write {self.write} ({self.operation} on {self.table}, key {key})"

    def failure(self, reason: Mapping[str, Any]) -> str:
        """One cancellation reason, in words; a failed condition's message says nothing more than its code."""
        code = reason["Code"]
        if code == CONDITION_FAILED:
            if self.job_id is None:
                return f"{self.label}: {code}"
            if self.operation == "Put":
                return f"{self.label}: an outbox item with this id exists"
            return f"{self.label}: its dedupe_key was taken over by another enqueue"
        message = reason.get("Message")
        return f"{self.label}: {code} ({message})" if message else f"{self.label}: {code}"


class OutboxWriter:
    """Commits jobs with the caller's writes; learns each table's key once (one DescribeTable per table)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._key_names: dict[str, tuple[str, ...]] = {table: (outbox.KEY,)}

    def transact(
        self,
        writes: Sequence[Mapping[str, Any]],
        jobs: Sequence[PreparedJob],
        *,
        dedupe_marks: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """Write ``writes`` and one outbox item per job in one transaction; every check runs before it.

        ``jobs`` may be empty when every job of the caller's was a duplicate: the writes still commit.

        ``dedupe_marks`` maps a job id to the Update that marks its dedupe key sent
        (conveyor.sdk.dedupe), committed with the job so the mark holds if and only if the job does.
        """
        marks = dict(dedupe_marks or {})
        count = len(writes) + len(jobs) + len(marks)
        if count > limits.DYNAMODB_MAX_TRANSACT_ITEMS:
            raise InvalidJobError(
                f"transact: {count} actions (one per write, one per job and one per dedupe key), "
                f"over DynamoDB's limit of {limits.DYNAMODB_MAX_TRANSACT_ITEMS} per transaction"
            )
        created_at = datetime.now(UTC)
        puts = [self._outbox_put(index, job, created_at) for index, job in enumerate(jobs)]
        updates = [{"Update": dict(update)} for update in marks.values()]
        job_ids = [job.job_id for job in jobs]
        # No ClientRequestToken of ours: botocore makes one per call, which its own retries reuse.
        request = {"TransactItems": [*writes, *puts, *updates]}
        self._validate(request)
        actions = [self._action(write, write=index) for index, write in enumerate(writes)]
        actions += [self._action(put, job_id=job.job_id) for put, job in zip(puts, jobs, strict=True)]
        actions += [self._action(update, job_id=job_id) for update, job_id in zip(updates, marks, strict=True)]
        _check_sizes(actions)
        _check_distinct(actions)
        try:
            self._dynamodb.transact_write_items(**request)
        except ClientError as error:
            raise _failure(error, actions, job_ids) from error
        return job_ids

    def _outbox_put(self, index: int, job: PreparedJob, created_at: datetime) -> dict[str, Any]:
        if "DelaySeconds" in job.entry:
            raise InvalidJobError(f"job {index} ({job.job_id}): the outbox sends jobs at once; use enqueue for delays")
        entry = outbox.OutboxEntry(
            job_id=job.job_id,
            queue=job.queue,
            envelope=job.entry["MessageBody"],
            created_at=created_at,
            group=job.entry.get("MessageGroupId"),
            # The trace header message_entry took from the request writing the item: the relay sends it on.
            trace_header=job.entry.get("MessageSystemAttributes", {}).get(SYSTEM_ATTRIBUTE, {}).get("StringValue"),
        )
        return {"Put": {"TableName": self._table, "Item": entry.item(), "ConditionExpression": NEW_OUTBOX_ITEM}}

    def _validate(self, request: Mapping[str, Any]) -> None:
        """botocore's own check of the request's shape, run now rather than at the call."""
        shape = self._dynamodb.meta.service_model.operation_model(OPERATION).input_shape
        try:
            validate_parameters(request, shape)
        except ParamValidationError as error:
            raise InvalidJobError("transact: " + "; ".join(str(error.kwargs["report"]).splitlines())) from error

    def _action(self, action: Mapping[str, Any], *, write: int | None = None, job_id: str | None = None) -> _Action:
        where = f"job {job_id}" if job_id is not None else f"write {write}"
        if len(action) != 1:
            raise InvalidJobError(
                f"{where}: an action holds exactly one of {', '.join(KEY_MEMBERS)}; got {sorted(action) or 'none'}"
            )
        ((operation, body),) = action.items()
        carried = body[KEY_MEMBERS[operation]]
        try:
            # What DynamoDB will count is unknown for an item that an Update grows or that a Delete
            # removes, so each action counts the attributes it carries: its Item or Key, and its
            # expression attribute values.
            size = item_bytes(carried) + item_bytes(body.get("ExpressionAttributeValues", {}))
        except ValueError as error:
            raise InvalidJobError(f"{where}: {error}") from error
        names = self._table_key(body["TableName"], where) if operation == "Put" else tuple(carried)
        return _Action(
            operation=operation,
            table=body["TableName"],
            key=_key(carried, names, where),
            size=size,
            write=write,
            job_id=job_id,
        )

    def _table_key(self, table: str, where: str) -> tuple[str, ...]:
        if table not in self._key_names:
            try:
                schema = self._dynamodb.describe_table(TableName=table)["Table"]["KeySchema"]
            except self._dynamodb.exceptions.ResourceNotFoundException as error:
                raise InvalidJobError(f"{where}: table {table!r} does not exist") from error
            self._key_names[table] = tuple(part["AttributeName"] for part in schema)
        return self._key_names[table]


def _key(attributes: Mapping[str, Any], names: Sequence[str], where: str) -> Key:
    key = []
    for name in sorted(names):
        value = attributes.get(name)
        if value is None:
            raise InvalidJobError(f"{where}: the item lacks the table's key attribute {name!r}")
        if next(iter(value)) not in KEY_TYPES:
            raise InvalidJobError(f"{where}: key attribute {name!r} must be a string (S), number (N) or binary (B)")
        key.append((name, _deserializer.deserialize(value)))
    return tuple(key)


def _check_sizes(actions: Sequence[_Action]) -> None:
    for action in actions:
        if action.operation == "Put" and action.size > limits.DYNAMODB_MAX_ITEM_BYTES:
            raise InvalidJobError(
                f"{action.label}: the item is about {action.size} bytes, over DynamoDB's "
                f"{limits.DYNAMODB_MAX_ITEM_BYTES}-byte item limit; send large data by reference"
            )
    total = sum(action.size for action in actions)
    if total > limits.DYNAMODB_MAX_TRANSACT_BYTES:
        raise InvalidJobError(
            f"transact: the items come to about {total} bytes, over DynamoDB's "
            f"{limits.DYNAMODB_MAX_TRANSACT_BYTES}-byte limit per transaction; split the call"
        )


def _check_distinct(actions: Sequence[_Action]) -> None:
    first: dict[tuple[str, Key], _Action] = {}
    for action in actions:
        earlier = first.setdefault((action.table, action.key), action)
        if earlier is not action:
            raise InvalidJobError(
                f"{earlier.label} and {action.label} act on the same item; "
                "DynamoDB allows one action per item in a transaction"
            )


def _failure(error: ClientError, actions: Sequence[_Action], job_ids: Sequence[str]) -> Exception:
    """The error for a refused call: a cancellation names its actions; anything else fails every job."""
    code = error.response["Error"]["Code"]
    message = error.response["Error"].get("Message", "")
    if code != CANCELED:
        why = f"{code}: {message}"
        return EnqueueError(f"transact: no job accepted: {why}", accepted=[], rejected=dict.fromkeys(job_ids, why))
    reasons = error.response.get("CancellationReasons", [])
    failed = [
        (action, reason)
        for action, reason in zip(actions, reasons, strict=False)
        if reason.get("Code", NOT_FAILED) != NOT_FAILED
    ]
    kind = (
        TransactionConditionError
        if any(reason["Code"] == CONDITION_FAILED for _, reason in failed)
        else TransactionCanceledError
    )
    return kind(
        "transaction canceled, nothing was written: "
        + ("; ".join(action.failure(reason) for action, reason in failed) or message),
        failed_writes={action.write: reason["Code"] for action, reason in failed if action.write is not None},
        failed_jobs={action.job_id: reason["Code"] for action, reason in failed if action.job_id is not None},
    )


def _render(value: Any) -> str:
    """A key value as Python writes it: 'o-1' for a string, 5 for a number."""
    return str(value) if isinstance(value, Decimal) else repr(value)
