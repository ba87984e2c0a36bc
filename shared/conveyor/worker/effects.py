"""The effect ledger: one item per effect, its intent written before the call and its outcome after.

``ctx.effect`` (conveyor.contract.job_context) is served by ``RunEffects``, which the harness builds per
run. Each effect costs two conditional UpdateItems on the ledger table:

- the intent, before the call: creates the item, or takes it back to ``intended`` for a new attempt,
  but never resets a confirmed one. When an earlier attempt confirmed it, the failed condition
  returns the item (``ALL_OLD``), so the same one request says ``done`` and the provider is not called;
- the outcome, after it: ``confirmed`` (with a small result) when the block is left cleanly or
  ``effect.confirm()`` is called, ``failed`` when the block raised what the harness classifies as
  permanent (the provider refused: nothing took place). An ambiguous failure (a timeout, a 5xx, a
  crash) writes nothing: the effect stays ``intended``, and the next attempt calls again with the
  same key, which the provider dedupes, or `conveyor reconcile` settles it.

While intended, an item carries ``pending`` = ``<effect>#<shard>`` and ``intended_at``: the keys of a
sparse index (PENDING_INDEX) that holds only unconfirmed effects, so "intended but not confirmed since
T" is a query of that index, never a scan. The shard spreads one busy effect over PENDING_SHARDS
partition values, each of which DynamoDB serves up to 1,000 writes a second
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-sharding.html).

Items expire (EXPIRES_AT) a reconciliation window after the last moment the job could still run:
its retries, then a redrive from its DLQ (conveyor.worker.idempotency.record_lifetime). Until then a
retried or redriven job finds its confirmed effect and does not call again.
"""

import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.declarations import JobType
from conveyor.contract.effects import Effect, EffectRecord, Status, Verdict, bounded_summary
from conveyor.contract.payloads import mask_values
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.worker.classify import FailureKind, classify
from conveyor.worker.idempotency import record_lifetime

logger = Logger(service=SERVICE_NAME)

# The item; the stack and the local runtime create the table with KEY, the TTL attribute EXPIRES_AT
# and the index PENDING_INDEX on (PENDING, INTENDED_AT).
KEY = "id"
EFFECT = "effect"
EFFECT_KEY = "effect_key"
STATUS = "status"
JOB_ID = "job_id"
JOB_TYPE = "job_type"
ATTEMPT = "attempt"
INTENDED_AT = "intended_at"
FIRST_INTENDED_AT = "first_intended_at"
REQUEST = "request"
RESULT = "result"
ERROR = "error"
RESOLVED_AT = "resolved_at"
RESOLVED_BY = "resolved_by"
PENDING = "pending"
EXPIRES_AT = "expires_at"
PENDING_INDEX = "pending-by-effect"
PENDING_SHARDS = 10
# Joins an effect's name to its key (the item's key), and to a shard (the index's partition).
SEPARATOR = "#"
# What a worker calls: two conditional updates per effect, nothing else.
WORKER_ACTIONS = ("dynamodb:UpdateItem",)
# After the last moment a job could still run, how long its unconfirmed effects stay to be reconciled.
RECONCILE_WINDOW = timedelta(days=7)
# Who resolved an effect: the worker that made the call, or an operator's reconciliation.
BY_WORKER = "worker"


def item_key(name: str, key: str) -> str:
    return f"{name}{SEPARATOR}{key}"


def pending_partition(name: str, shard: int) -> str:
    return f"{name}{SEPARATOR}{shard}"


def _shard(key: str) -> int:
    return zlib.crc32(key.encode()) % PENDING_SHARDS


def _epoch(moment: datetime) -> str:
    return f"{moment.timestamp():.3f}"


def _names(*attributes: str) -> dict[str, str]:
    """Every attribute through a placeholder: several (status, result, error) are DynamoDB reserved words."""
    return {f"#{attribute}": attribute for attribute in attributes}


class EffectLedger:
    """The ledger table, for workers and `conveyor reconcile`; the client is injected, as the harness's others are."""

    def __init__(self, dynamodb_client: Any, table_name: str, *, clock: Callable[[], datetime]) -> None:
        self._dynamodb = dynamodb_client
        self._table = table_name
        self._clock = clock

    def intend(
        self,
        name: str,
        key: str,
        *,
        job_id: str,
        job_type: str,
        attempt: int,
        request: str | None,
        expires_at: datetime,
    ) -> EffectRecord | None:
        """Record the intent to make the effect; the confirmed record instead if an earlier attempt confirmed it."""
        now = self._clock()
        assignments = [
            f"#{EFFECT} = :effect",
            f"#{EFFECT_KEY} = :key",
            f"#{STATUS} = :intended",
            f"#{JOB_ID} = :job_id",
            f"#{JOB_TYPE} = :job_type",
            f"#{ATTEMPT} = :attempt",
            f"#{INTENDED_AT} = :now",
            f"#{FIRST_INTENDED_AT} = if_not_exists(#{FIRST_INTENDED_AT}, :now)",
            f"#{PENDING} = :pending",
            f"#{EXPIRES_AT} = :expires_at",
        ]
        values: dict[str, Any] = {
            ":effect": {"S": name},
            ":key": {"S": key},
            ":intended": {"S": Status.INTENDED.value},
            ":confirmed": {"S": Status.CONFIRMED.value},
            ":job_id": {"S": job_id},
            ":job_type": {"S": job_type},
            ":attempt": {"N": str(attempt)},
            ":now": {"N": _epoch(now)},
            ":pending": {"S": pending_partition(name, _shard(key))},
            ":expires_at": {"N": str(int(expires_at.timestamp()))},
        }
        if request is not None:
            assignments.append(f"#{REQUEST} = :request")
            values[":request"] = {"S": request}
        try:
            self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: {"S": item_key(name, key)}},
                UpdateExpression=f"SET {', '.join(assignments)} REMOVE #{ERROR}",
                ConditionExpression=f"attribute_not_exists(#{KEY}) OR #{STATUS} <> :confirmed",
                ExpressionAttributeNames=_names(
                    KEY,
                    EFFECT,
                    EFFECT_KEY,
                    STATUS,
                    JOB_ID,
                    JOB_TYPE,
                    ATTEMPT,
                    INTENDED_AT,
                    FIRST_INTENDED_AT,
                    PENDING,
                    EXPIRES_AT,
                    ERROR,
                    *([REQUEST] if request is not None else []),
                ),
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
            return record_of(error.response["Item"])
        return None

    def confirm(self, name: str, key: str, *, result: str | None, by: str = BY_WORKER) -> None:
        """The call took place. The worker that made it is the authority: only the item's existence is checked."""
        self._resolve(
            name, key, Status.CONFIRMED, by=by, detail=(RESULT, result), condition=f"attribute_exists(#{KEY})"
        )

    def fail(self, name: str, key: str, *, error: str, by: str = BY_WORKER) -> None:
        """The provider refused: nothing took place. Never overrides a confirmation."""
        self._resolve(name, key, Status.FAILED, by=by, detail=(ERROR, error), condition=f"#{STATUS} = :intended")

    def settle(self, record: EffectRecord, verdict: Verdict, *, by: str) -> bool:
        """Apply a reconciliation's verdict to the intent it was asked about; False if that intent moved on since.

        Conditioned on the same intent (status and ``intended_at``): a new attempt's intent, or the
        worker's own confirmation, in the meantime is left alone.
        """
        if verdict is Verdict.UNKNOWN:
            return False
        detail: tuple[str, str | None]
        if verdict is Verdict.CONFIRMED:
            status, detail = Status.CONFIRMED, (RESULT, None)
        else:
            status, detail = Status.FAILED, (ERROR, f"not applied at {record.destination} (reconciled)")
        try:
            self._resolve(
                record.name,
                record.key,
                status,
                by=by,
                detail=detail,
                condition=f"#{STATUS} = :intended AND #{INTENDED_AT} = :seen",
                seen=record.intended_at,
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _resolve(
        self,
        name: str,
        key: str,
        status: Status,
        *,
        by: str,
        detail: tuple[str, str | None],
        condition: str,
        seen: datetime | None = None,
    ) -> None:
        """Set the outcome and leave the pending index. DynamoDB refuses placeholders an expression does not
        use, so each is added only with what uses it."""
        attribute, text = detail
        assignments = [f"#{STATUS} = :status", f"#{RESOLVED_AT} = :now", f"#{RESOLVED_BY} = :by"]
        names = _names(STATUS, RESOLVED_AT, RESOLVED_BY, PENDING)
        values: dict[str, Any] = {
            ":status": {"S": status.value},
            ":now": {"N": _epoch(self._clock())},
            ":by": {"S": by},
        }
        if text is not None:
            assignments.append(f"#{attribute} = :detail")
            names |= _names(attribute)
            values[":detail"] = {"S": text}
        if f"#{KEY}" in condition:
            names |= _names(KEY)
        if ":intended" in condition:
            values[":intended"] = {"S": Status.INTENDED.value}
        if seen is not None:
            names |= _names(INTENDED_AT)
            values[":seen"] = {"N": _epoch(seen)}
        self._dynamodb.update_item(
            TableName=self._table,
            Key={KEY: {"S": item_key(name, key)}},
            UpdateExpression=f"SET {', '.join(assignments)} REMOVE #{PENDING}",
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def pending(self, name: str, *, intended_after: datetime, intended_before: datetime) -> list[EffectRecord]:
        """Effects of ``name`` still intended, whose latest intent lies between the two instants, oldest first."""
        found: list[EffectRecord] = []
        paginator = self._dynamodb.get_paginator("query")
        for shard in range(PENDING_SHARDS):
            for page in paginator.paginate(
                TableName=self._table,
                IndexName=PENDING_INDEX,
                KeyConditionExpression=f"#{PENDING} = :pending AND #{INTENDED_AT} BETWEEN :after AND :before",
                ExpressionAttributeNames=_names(PENDING, INTENDED_AT),
                ExpressionAttributeValues={
                    ":pending": {"S": pending_partition(name, shard)},
                    ":after": {"N": _epoch(intended_after)},
                    ":before": {"N": _epoch(intended_before)},
                },
            ):
                found.extend(record_of(item) for item in page["Items"])
        return sorted(found, key=lambda record: (record.intended_at, record.key))


def record_of(item: Mapping[str, Any]) -> EffectRecord:
    def text(attribute: str) -> str | None:
        return item[attribute]["S"] if attribute in item else None

    def document(attribute: str) -> dict[str, Any] | None:
        value = text(attribute)
        return json.loads(value) if value is not None else None

    return EffectRecord(
        name=item[EFFECT]["S"],
        key=item[EFFECT_KEY]["S"],
        status=Status(item[STATUS]["S"]),
        job_id=item[JOB_ID]["S"],
        job_type=item[JOB_TYPE]["S"],
        attempt=int(item[ATTEMPT]["N"]),
        intended_at=datetime.fromtimestamp(float(item[INTENDED_AT]["N"]), UTC),
        request=document(REQUEST),
        result=document(RESULT),
        error=text(ERROR),
    )


class RunEffects:
    """One run's effects, as ``ctx.effect`` records them; the harness builds it with the run's identity."""

    def __init__(
        self,
        ledger: EffectLedger,
        topology: Topology,
        job_type: JobType[Any],
        *,
        job_id: str,
        attempt: int,
        sensitive: Callable[[], list[str]],
        now: datetime,
    ) -> None:
        self._ledger = ledger
        self._topology = topology
        self._job_type = job_type
        self._job_id = job_id
        self._attempt = attempt
        self._sensitive = sensitive
        self._expires_at = now + record_lifetime(job_type) + RECONCILE_WINDOW

    @contextmanager
    def effect(self, name: str, *, key: str, request: Mapping[str, Any] | None = None) -> Iterator[Effect]:
        self._topology.effect(name)  # an undeclared name fails the run here, naming it, before any call
        confirmed = self._ledger.intend(
            name,
            key,
            job_id=self._job_id,
            job_type=self._job_type.name,
            attempt=self._attempt,
            request=bounded_summary(request, self._mask),
            expires_at=self._expires_at,
        )
        if confirmed is not None:
            logger.info("effect confirmed before; not made again", extra={"effect": name, "effect_key": key})
            yield Effect(name, key, done=True, result=confirmed.result)
            return
        effect = Effect(name, key, record=partial(self._confirm, name, key))
        try:
            yield effect
        except Exception as error:
            if not effect.confirmed and classify(error, self._job_type) is FailureKind.PERMANENT:
                reason = self._mask(f"{type(error).__name__}: {error}")
                self._write(name, key, lambda: self._ledger.fail(name, key, error=reason))
            raise
        effect.confirm()

    def _confirm(self, name: str, key: str, result: dict[str, Any] | None) -> None:
        summary = bounded_summary(result, self._mask)
        self._write(name, key, lambda: self._ledger.confirm(name, key, result=summary))

    @cached_property
    def _sensitive_values(self) -> list[str]:
        # Found only when an effect is recorded: most runs record none, and the payload's dump is not free.
        return self._sensitive()

    def _mask(self, text: str) -> str:
        return mask_values(text, self._sensitive_values)

    @staticmethod
    def _write(name: str, key: str, write: Callable[[], None]) -> None:
        """An outcome the ledger cannot take leaves the effect intended: the call happened (or was refused)
        regardless, so the job goes on, and `conveyor reconcile` finds the effect."""
        try:
            write()
        except (BotoCoreError, ClientError):
            logger.warning(
                "could not record an effect's outcome; it stays intended for `conveyor reconcile`",
                extra={"effect": name, "effect_key": key},
                exc_info=True,
            )
