"""Leases: one owner for a named piece of work for a time window, with a fencing token.

A lease is one item in a DynamoDB table, keyed by the work's name. Acquiring it is a
conditional write that succeeds when the item has no holder, when the holder's lease has
expired, or when the caller already holds it. A holder renews it (its heartbeat) before it
expires and releases it when done; one that crashes loses it at ``expires_at``.

Expiry is checked in the write's condition, against the caller's clock, never left to DynamoDB
TTL: TTL deletes an expired item lazily, up to days later. Holders therefore compare their own
clocks with ``expires_at``, so the clock skew between them must be well under the TTL.

Every acquisition by a new holder, a takeover included, adds one to the item's ``token``. A
holder that stalls past its expiry (a GC pause, a frozen Lambda) still believes it holds the
lease, so a commit must prove it: either in the same transaction as a ``ConditionCheck`` on the
lease item (``Leases.fence``, ``Leases.fenced_write``), or by storing the token on the protected
resource and refusing an older one. docs/leases.md is the contract.
"""

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from conveyor.contract import limits
from conveyor.contract.durations import format_duration
from conveyor.contract.errors import TransactionCanceledError, TransactionConditionError
from conveyor.contract.timestamps import parse_utc, utc_text
from conveyor.worker.lease_values import InvalidLeaseError, Lease, LeaseError, LeaseLostError

# The item. ``expires_at`` is whole epoch seconds, the form DynamoDB TTL reads; see docs/leases.md
# before enabling TTL on it, as a deleted item restarts the token.
KEY = "name"
HOLDER = "holder"
TOKEN = "token"  # noqa: S105 - an attribute name, not a secret
EXPIRES_AT = "expires_at"
ACQUIRED_AT = "acquired_at"

# Below this, a DynamoDB call's retries, the clock skew between holders and the 1-second
# granularity of ``expires_at`` eat most of the lease before its holder can use it.
MIN_TTL = timedelta(seconds=5)
# A crashed holder blocks the work until its lease expires; work that runs longer renews instead.
MAX_TTL = timedelta(hours=1)

CANCELED = "TransactionCanceledException"
CONDITION_FAILED = "ConditionalCheckFailed"
NOT_FAILED = "None"

# Placeholders carry a "lease_" prefix so a fence condition can join a caller's own expression.
_HOLDER = "#lease_holder"
_TOKEN = "#lease_token"  # noqa: S105 - a placeholder, not a secret
_EXPIRES_AT = "#lease_expires_at"
_ACQUIRED_AT = "#lease_acquired_at"
_ATTRIBUTES = {_HOLDER: HOLDER, _TOKEN: TOKEN, _EXPIRES_AT: EXPIRES_AT, _ACQUIRED_AT: ACQUIRED_AT}
# A new holder may take the lease: nobody holds it, or somebody else's has expired.
_FREE = f"attribute_not_exists({_HOLDER}) OR ({_EXPIRES_AT} <= :lease_now AND {_HOLDER} <> :lease_holder)"
_TAKE = (
    f"SET {_HOLDER} = :lease_holder, {_EXPIRES_AT} = :lease_expires_at, {_ACQUIRED_AT} = :lease_acquired_at "
    f"ADD {_TOKEN} :lease_one"
)
_OURS = f"{_HOLDER} = :lease_holder"
_HELD = f"{_HOLDER} = :lease_holder AND {_TOKEN} = :lease_token"
_LIVE = f"{_HELD} AND {_EXPIRES_AT} > :lease_now"
_EXTEND = f"SET {_EXPIRES_AT} = :lease_expires_at"
_CLEAR = f"REMOVE {_HOLDER}, {_EXPIRES_AT}, {_ACQUIRED_AT}"


class FenceCondition(NamedTuple):
    """A condition on the lease item, to join a caller's own write to that item (one action per item)."""

    expression: str
    names: Mapping[str, str]
    values: Mapping[str, Any]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Leases:
    """Leases in ``table_name`` (key ``name``, a string). ``clock`` must return aware datetimes."""

    def __init__(self, dynamodb: Any, table_name: str, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._dynamodb = dynamodb
        self._table = table_name
        self._clock = clock

    def acquire(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        """The lease on ``name`` for ``holder``, or None while another holder's is live.

        ``holder`` must be unique to this owner (a process or attempt id): two owners sharing one
        would both hold the lease. Acquiring a lease already held extends it and keeps its token.
        """
        now = self._clock()
        values = {
            ":lease_holder": {"S": holder},
            ":lease_expires_at": _epoch_value(now + _checked(ttl)),
        }
        try:
            item = self._dynamodb.update_item(
                TableName=self._table,
                Key=_key(name),
                UpdateExpression=_TAKE,
                ConditionExpression=_FREE,
                ExpressionAttributeNames=_names(_HOLDER, _EXPIRES_AT, _ACQUIRED_AT, _TOKEN),
                ExpressionAttributeValues={
                    **values,
                    ":lease_now": _epoch_value(now),
                    ":lease_acquired_at": {"S": utc_text(now)},
                    ":lease_one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
            if error.response.get("Item", {}).get(HOLDER) != {"S": holder}:
                return None
            try:
                item = self._dynamodb.update_item(
                    TableName=self._table,
                    Key=_key(name),
                    UpdateExpression=_EXTEND,
                    ConditionExpression=_OURS,
                    ExpressionAttributeNames=_names(_HOLDER, _EXPIRES_AT),
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                )["Attributes"]
            except self._dynamodb.exceptions.ConditionalCheckFailedException:
                return None  # taken over between the two calls
        return _lease(name, item)

    def renew(self, lease: Lease, ttl: timedelta) -> Lease:
        """The lease extended to ``ttl`` from now, if nobody took it over: else LeaseLostError.

        A lease that expired but that nobody took is renewed: no other holder can have acted.
        """
        expires_at = _epoch_value(self._clock() + _checked(ttl))
        try:
            item = self._dynamodb.update_item(
                TableName=self._table,
                Key=_key(lease.name),
                UpdateExpression=_EXTEND,
                ConditionExpression=_HELD,
                ExpressionAttributeNames=_names(_HOLDER, _TOKEN, _EXPIRES_AT),
                ExpressionAttributeValues={**_held_values(lease), ":lease_expires_at": expires_at},
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
            raise _lost(lease, error.response.get("Item"), action="renew") from error
        return _lease(lease.name, item)

    def release(self, lease: Lease) -> bool:
        """Give the lease up; False if it was already lost. The item stays, so its token keeps counting."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key=_key(lease.name),
                UpdateExpression=_CLEAR,
                ConditionExpression=_HELD,
                ExpressionAttributeNames=_names(_HOLDER, _TOKEN, _EXPIRES_AT, _ACQUIRED_AT),
                ExpressionAttributeValues=_held_values(lease),
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def current(self, name: str) -> Lease | None:
        """The live lease on ``name`` by this clock, or None if it is free or expired."""
        item = self._dynamodb.get_item(TableName=self._table, Key=_key(name), ConsistentRead=True).get("Item")
        if item is None or HOLDER not in item or int(item[EXPIRES_AT]["N"]) <= _epoch(self._clock()):
            return None
        return _lease(name, item)

    def fence_condition(self, lease: Lease) -> FenceCondition:
        """Holder, token and expiry as a condition, for a caller's own write to the lease item itself."""
        return FenceCondition(
            expression=_LIVE,
            names=_names(_HOLDER, _TOKEN, _EXPIRES_AT),
            values={**_held_values(lease), ":lease_now": _epoch_value(self._clock())},
        )

    def fence(self, lease: Lease) -> dict[str, Any]:
        """A TransactWriteItems ``ConditionCheck``: the transaction commits only while ``lease`` is live."""
        condition = self.fence_condition(lease)
        return {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": _key(lease.name),
                "ConditionExpression": condition.expression,
                "ExpressionAttributeNames": dict(condition.names),
                "ExpressionAttributeValues": dict(condition.values),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def fenced_write(self, lease: Lease, writes: Sequence[Mapping[str, Any]]) -> None:
        """Commit ``writes`` (TransactWriteItems actions) only while ``lease`` is live: else LeaseLostError.

        Nothing is written on a failure. A cancellation for another cause raises
        TransactionCanceledError, or TransactionConditionError when a write's own condition failed,
        with ``failed_writes`` keyed by the index into ``writes``. A write to the lease item itself
        is not allowed here (one action per item); join ``fence_condition`` to it instead.
        """
        if len(writes) + 1 > limits.DYNAMODB_MAX_TRANSACT_ITEMS:
            raise InvalidLeaseError(
                f"fenced_write: {len(writes)} writes and the fence, over DynamoDB's limit of "
                f"{limits.DYNAMODB_MAX_TRANSACT_ITEMS} actions per transaction"
            )
        try:
            self._dynamodb.transact_write_items(TransactItems=[self.fence(lease), *writes])
        except ClientError as error:
            if error.response["Error"]["Code"] != CANCELED:
                raise
            raise _canceled(lease, error.response.get("CancellationReasons", [])) from error


def _checked(ttl: timedelta) -> timedelta:
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise InvalidLeaseError(
            f"lease ttl {ttl.total_seconds():g}s: must be from {format_duration(MIN_TTL)} "
            f"to {format_duration(MAX_TTL)}; renew a lease to hold it longer"
        )
    return ttl


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def _epoch_value(moment: datetime) -> dict[str, str]:
    return {"N": str(_epoch(moment))}


def _key(name: str) -> dict[str, Any]:
    return {KEY: {"S": name}}


def _names(*placeholders: str) -> dict[str, str]:
    """Only the placeholders an expression uses: DynamoDB refuses unused ones."""
    return {placeholder: _ATTRIBUTES[placeholder] for placeholder in placeholders}


def _held_values(lease: Lease) -> dict[str, Any]:
    return {":lease_holder": {"S": lease.holder}, ":lease_token": {"N": str(lease.token)}}


def _lease(name: str, item: Mapping[str, Any]) -> Lease:
    return Lease(
        name=name,
        holder=item[HOLDER]["S"],
        token=int(item[TOKEN]["N"]),
        acquired_at=parse_utc(item[ACQUIRED_AT]["S"]),
        expires_at=datetime.fromtimestamp(int(item[EXPIRES_AT]["N"]), UTC),
    )


def _lost(lease: Lease, item: Mapping[str, Any] | None, *, action: str) -> LeaseLostError:
    """Why ``lease`` failed its condition, from the item as it stood (ALL_OLD)."""
    where = f"{action}: lease {lease.name!r} of {lease.holder!r} (token {lease.token})"
    if item is None or HOLDER not in item:
        why = "is no longer held by anyone"
    elif (item[HOLDER]["S"], int(item[TOKEN]["N"])) != (lease.holder, lease.token):
        why = f"was taken over by {item[HOLDER]['S']!r} (token {item[TOKEN]['N']})"
    else:
        expired = datetime.fromtimestamp(int(item[EXPIRES_AT]["N"]), UTC).isoformat()
        why = f"expired at {expired}; renew it before committing"
    return LeaseLostError(f"{where} {why}; nothing was written", lease=lease)


def _canceled(lease: Lease, reasons: Sequence[Mapping[str, Any]]) -> LeaseError | TransactionCanceledError:
    """The error for a canceled fenced write; reason 0 is the fence's, the rest align with the writes."""
    if reasons and reasons[0].get("Code") == CONDITION_FAILED:
        return _lost(lease, reasons[0].get("Item"), action="fenced_write")
    failed = [(index, reason["Code"]) for index, reason in enumerate(reasons) if reason.get("Code") != NOT_FAILED]
    labels = [f"write {index - 1}: {code}" if index else f"the fence: {code}" for index, code in failed]
    failed_writes = {index - 1: code for index, code in failed if index}
    kind = TransactionConditionError if CONDITION_FAILED in failed_writes.values() else TransactionCanceledError
    return kind(
        "fenced_write canceled, nothing was written: " + ("; ".join(labels) or "no reason given"),
        failed_writes=failed_writes,
        failed_jobs={},
    )
