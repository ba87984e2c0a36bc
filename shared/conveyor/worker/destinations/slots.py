"""Concurrency caps every worker shares: a counting semaphore per destination, in DynamoDB.

One item per destination (``state.slots_key``) holds the map ``holders``: holder id -> when its slot
expires (epoch seconds, to the millisecond). Taking a slot is one conditional ``UpdateItem`` that adds the holder while
the map has fewer than ``cap`` entries; releasing removes it. A worker that dies never releases, so
every slot carries an expiry, and a worker that finds the map full removes the expired entries it
saw, in the same write that adds its own, on condition that each still has the expiry it saw: a
holder that renewed meanwhile keeps its slot, and the map never holds more than ``cap`` entries.

Expiry is compared against the caller's clock, as for leases (conveyor.worker.lease), never left to
DynamoDB TTL. ``size()`` of a missing attribute crashes moto (5.2: a ValueError, not a failed
condition) and AWS documents no answer for it, so every condition on the map's size first asks that
the map exists; the map is created by the first holder's write and never removed.
"""

import time
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.settings import SERVICE_NAME
from conveyor.worker.destinations.rate import MICROS, bounded_name, micros_of, seconds_text
from conveyor.worker.destinations.state import HOLDERS, KEY, slots_key

logger = Logger(service=SERVICE_NAME, child=True)

# Holder ids up to this many bytes are stored as they are, longer ones as a 23-byte hash: the map of
# a destination at its largest cap (MAX_DESTINATION_CONCURRENCY entries of name, expiry and overhead)
# then fits in one DynamoDB item (tests/unit/worker/destinations/test_slots.py checks it).
MAX_HOLDER_BYTES = 24
# Expired holders one write removes, oldest first: one is enough to take a slot, and the condition
# naming each of them must stay well within DynamoDB's expression length.
MAX_RECLAIMED = 32
# Writes per acquisition: each failed one saw another worker's write, and returned the map as it is.
MAX_WRITES = 3
MILLISECOND = MICROS // 1000

_HOLDERS = "#holders"
_HOLDER = "#holder"
_HELD = f"attribute_exists({_HOLDERS}.{_HOLDER})"
_ROOM = f"{_HELD} OR (attribute_exists({_HOLDERS}) AND size({_HOLDERS}) < :cap)"
_ADD = f"SET {_HOLDERS}.{_HOLDER} = :expires_at"
_CREATE = f"SET {_HOLDERS} = :holders"
_NO_MAP = f"attribute_not_exists({_HOLDERS})"


class Slots:
    """The concurrency slots in the limits table ``table``; ``clock`` returns epoch seconds."""

    def __init__(self, dynamodb_client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock

    def acquire(self, destination: str, cap: int, holder: str, *, expires_at: float) -> bool:
        """Take one of ``cap`` slots for ``holder`` until ``expires_at`` (epoch seconds); False if all are held.

        ``holder`` must be unique to the call (a job run and a nonce): holding a slot already extends it.
        """
        name = bounded_name(holder, MAX_HOLDER_BYTES)
        # To the millisecond, rounded up: a slot lasts at least until ``expires_at``.
        expiry = {"N": seconds_text(-(-round(expires_at * MICROS) // MILLISECOND) * MILLISECOND)}
        request = _add(name, cap, expiry)
        for _ in range(MAX_WRITES):
            try:
                self._dynamodb.update_item(
                    TableName=self._table,
                    Key={KEY: {"S": slots_key(destination)}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **request,
                )
            except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
                holders = _holders(error.response.get("Item"))
            else:
                return True
            if holders is None:
                request = _create(name, expiry)
            elif name in holders or len(holders) < cap:
                request = _add(name, cap, expiry)
            else:
                now = self._micros()
                expired = sorted((at, h) for h, v in holders.items() if (at := micros_of(v["N"])) <= now)
                if not expired:
                    return False
                request = _reclaim(name, cap, expiry, {h: holders[h] for _, h in expired[:MAX_RECLAIMED]})
        return False

    def release(self, destination: str, holder: str) -> None:
        """Give ``holder``'s slot back. Never raises: a slot not released expires anyway."""
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: {"S": slots_key(destination)}},
                UpdateExpression=f"REMOVE {_HOLDERS}.{_HOLDER}",
                ConditionExpression=_HELD,
                ExpressionAttributeNames={_HOLDERS: HOLDERS, _HOLDER: bounded_name(holder, MAX_HOLDER_BYTES)},
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            logger.debug("slot already gone (expired and reclaimed)", extra={"destination": destination})
        except (BotoCoreError, ClientError):
            logger.warning(
                "could not release a concurrency slot; it expires anyway",
                exc_info=True,
                extra={"destination": destination},
            )

    def in_use(self, destination: str) -> int:
        """Holders whose slot has not expired by this clock; one consistent read."""
        item = self._dynamodb.get_item(
            TableName=self._table, Key={KEY: {"S": slots_key(destination)}}, ConsistentRead=True
        ).get("Item")
        now = self._micros()
        return sum(1 for value in (_holders(item) or {}).values() if micros_of(value["N"]) > now)

    def _micros(self) -> int:
        return round(self._clock() * MICROS)


def _add(name: str, cap: int, expiry: Mapping[str, str]) -> dict[str, Any]:
    """The common case: the holder added while the map has room (or extended if it holds a slot already)."""
    return {
        "UpdateExpression": _ADD,
        "ConditionExpression": _ROOM,
        "ExpressionAttributeNames": {_HOLDERS: HOLDERS, _HOLDER: name},
        "ExpressionAttributeValues": {":expires_at": expiry, ":cap": {"N": str(cap)}},
    }


def _create(name: str, expiry: Mapping[str, str]) -> dict[str, Any]:
    """The first holder ever: the map itself, if nobody created it meanwhile."""
    return {
        "UpdateExpression": _CREATE,
        "ConditionExpression": _NO_MAP,
        "ExpressionAttributeNames": {_HOLDERS: HOLDERS},
        "ExpressionAttributeValues": {":holders": {"M": {name: expiry}}},
    }


def _reclaim(name: str, cap: int, expiry: Mapping[str, str], expired: Mapping[str, Any]) -> dict[str, Any]:
    """Remove ``expired`` (holder -> the expiry seen) if each still has it, and add ``name``.

    Before the write the map holds fewer than ``cap + len(expired)`` entries, ``expired`` among them,
    so after it at most ``cap``.
    """
    names = {_HOLDERS: HOLDERS, _HOLDER: name}
    values: dict[str, Any] = {":expires_at": expiry, ":cap": {"N": str(cap + len(expired))}}
    unchanged = []
    for index, (holder, seen) in enumerate(expired.items()):
        names[f"#x{index}"] = holder
        values[f":x{index}"] = seen
        unchanged.append(f"{_HOLDERS}.#x{index} = :x{index}")
    removed = ", ".join(f"{_HOLDERS}.#x{index}" for index in range(len(expired)))
    return {
        "UpdateExpression": f"{_ADD} REMOVE {removed}",
        # The entries first: with them present the map exists, so size() never sees a missing one.
        "ConditionExpression": " AND ".join([*unchanged, f"size({_HOLDERS}) < :cap"]),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def _holders(item: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The holders map of an item (None if there is no item or no map)."""
    if not item or HOLDERS not in item:
        return None
    holders: dict[str, Any] = item[HOLDERS]["M"]
    return holders
