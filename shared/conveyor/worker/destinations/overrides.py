"""Operators' overrides of a destination's declared rate and concurrency (`conveyor limits set`).

An override lives in the limits table (``override#<destination>``) so it reaches every worker
without a deploy: ops writes it, each worker reads it at most once per OVERRIDE_REFRESH_S per
destination and applies it instead of the declaration. An override keeps the declaration's
per-key field: the operator changes how much, never what is limited per.
"""

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.destinations import Destination, RateLimit
from conveyor.contract.settings import SERVICE_NAME
from conveyor.worker.destinations.state import (
    BURST,
    CONCURRENCY,
    KEY,
    OVERRIDE_REFRESH_S,
    PER_S,
    RATE,
    REASON,
    SET_AT,
    SET_BY,
    override_key,
)

logger = Logger(service=SERVICE_NAME)

# Every attribute of an override item but its key; one with neither RATE nor CONCURRENCY is no override.
_ATTRIBUTES = (RATE, PER_S, BURST, CONCURRENCY, SET_BY, SET_AT, REASON)


@dataclass(frozen=True)
class Override:
    """What an operator set instead of the declaration; ``None`` keeps the declared value.

    ``rate`` has no ``key``: the declaration's applies (``Overrides.effective``). ``set_at`` is
    epoch seconds.
    """

    rate: RateLimit | None
    concurrency: int | None
    set_by: str
    set_at: float
    reason: str | None


class Overrides:
    """Reads and writes overrides; reads are cached per destination for OVERRIDE_REFRESH_S."""

    def __init__(self, dynamodb_client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock
        self._cache: dict[str, tuple[float, Override | None]] = {}

    def get(self, destination: str) -> Override | None:
        """The destination's override, at most OVERRIDE_REFRESH_S old.

        The read is consistent so that staleness is bounded by the refresh alone, not also by replication.
        """
        now = self._clock()
        cached = self._cache.get(destination)
        if cached is not None and now - cached[0] < OVERRIDE_REFRESH_S:
            return cached[1]
        try:
            item = self._dynamodb.get_item(
                TableName=self._table, Key={KEY: {"S": override_key(destination)}}, ConsistentRead=True
            ).get("Item")
        except (ClientError, BotoCoreError):
            # An unreadable override keeps the one last read (or the declaration) until the next refresh:
            # a throttled table must not fail a job, least of all one whose handler already ran.
            logger.warning("override unreadable: keeping the last one read", destination=destination, exc_info=True)
            found = cached[1] if cached is not None else None
        else:
            found = _override(item) if item and (RATE in item or CONCURRENCY in item) else None
        self._cache[destination] = (now, found)
        return found

    def set(
        self,
        destination: Destination,
        *,
        rate: RateLimit | None = None,
        concurrency: int | None = None,
        by: str,
        reason: str | None = None,
    ) -> Override:
        """Override the rate and/or concurrency, keeping whichever of them was overridden before and is not given.

        Checked as a declaration would be (DeclarationError, a ValueError), before anything is written.
        """
        if rate is None and concurrency is None:
            raise ValueError(f"destination {destination.name!r}: nothing to override; give a rate or a concurrency")
        # The declaration's own checks, on what the override makes of it.
        _apply(destination, rate, concurrency)
        fields: dict[str, Any] = {SET_BY: {"S": by}, SET_AT: {"N": repr(self._clock())}}
        if rate is not None:
            fields |= {
                RATE: {"N": str(rate.rate)},
                PER_S: {"N": repr(rate.per.total_seconds())},
                BURST: {"N": str(rate.burst)},
            }
        if concurrency is not None:
            fields[CONCURRENCY] = {"N": str(concurrency)}
        if reason is not None:
            fields[REASON] = {"S": reason}
        expression = "SET " + ", ".join(f"#{name} = :{name}" for name in fields)
        if reason is None:  # a reason belongs to the change it came with
            expression += f" REMOVE #{REASON}"
        item = self._dynamodb.update_item(
            TableName=self._table,
            Key={KEY: {"S": override_key(destination.name)}},
            UpdateExpression=expression,
            ExpressionAttributeNames={f"#{name}": name for name in (*fields, REASON)},
            ExpressionAttributeValues={f":{name}": value for name, value in fields.items()},
            ReturnValues="ALL_NEW",
        )["Attributes"]
        found = _override(item)
        self._cache[destination.name] = (self._clock(), found)
        return found

    def clear(self, destination: str) -> None:
        """Back to the declaration: the override's attributes removed (an update, as operators may not delete)."""
        # Never overridden: nothing to clear, and no empty item left behind.
        with contextlib.suppress(self._dynamodb.exceptions.ConditionalCheckFailedException):
            self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: {"S": override_key(destination)}},
                UpdateExpression="REMOVE " + ", ".join(f"#{name}" for name in _ATTRIBUTES),
                ConditionExpression=f"attribute_exists(#{KEY})",
                ExpressionAttributeNames={f"#{name}": name for name in (*_ATTRIBUTES, KEY)},
            )
        self._cache[destination] = (self._clock(), None)

    def effective(self, destination: Destination) -> Destination:
        """The declaration with its override applied."""
        found = self.get(destination.name)
        return destination if found is None else _apply(destination, found.rate, found.concurrency)


def _apply(destination: Destination, rate: RateLimit | None, concurrency: int | None) -> Destination:
    """``destination`` with ``rate`` (under the declared rate's key) and ``concurrency`` where given."""
    changes: dict[str, Any] = {}
    if rate is not None:
        changes["rate"] = replace(rate, key=destination.rate.key if destination.rate else None)
    if concurrency is not None:
        changes["concurrency"] = concurrency
    return replace(destination, **changes)


def _override(item: dict[str, Any]) -> Override:
    rate = (
        RateLimit(
            int(item[RATE]["N"]),
            per=timedelta(seconds=float(item[PER_S]["N"])),
            burst=int(item[BURST]["N"]),
        )
        if RATE in item
        else None
    )
    return Override(
        rate=rate,
        concurrency=int(item[CONCURRENCY]["N"]) if CONCURRENCY in item else None,
        set_by=item[SET_BY]["S"],
        set_at=float(item[SET_AT]["N"]),
        reason=item[REASON]["S"] if REASON in item else None,
    )
