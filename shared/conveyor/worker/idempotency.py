"""Run a job's handler at most once per idempotency key: Powertools idempotency on DynamoDB.

Each job type gets its own config and its own persistence layer (Powertools lets the first
config win when two share a layer, silently dropping idempotency from the second). The key
prefix is the job type's name, not the function's, so moving a job to another queue or
running it locally keeps its dedupe history.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemNotFoundError
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract import limits
from conveyor.contract.declarations import JobType

# A redriven DLQ entry must still find its record: keep records for the job's whole retry
# window plus the DLQ's retention, the longest a message can wait for a redrive.
DLQ_REDRIVE_WINDOW = limits.SQS_MAX_RETENTION
KEY_PREFIX = "conveyor"
# The idempotency table's key and TTL attributes; the stack and the local runtime create it with these.
RECORD_KEY = "id"
RECORD_TTL = "expiration"


def record_lifetime(job_type: JobType[Any]) -> timedelta:
    return job_type.retry.max_wall_time + DLQ_REDRIVE_WINDOW


# The record's response of a run the job discarded on purpose: {"discarded": <masked reason>}.
DISCARDED = "discarded"


@dataclass(frozen=True)
class Discarded:
    """What a run returns to complete its key as discarded: the reason, already masked, is stored with it."""

    reason: str


@dataclass(frozen=True)
class Completion:
    """How a key's run ended: ``ran`` False for a duplicate (absorbed, nothing ran); ``discarded`` the
    reason when the run (this one, or the one a duplicate repeats) was discarded."""

    ran: bool
    discarded: str | None = None


def _run_once(job: dict[str, str], call: Callable[[], object], state: dict[str, bool]) -> dict[str, str] | None:
    """Powertools stores what this returns as the record's response, and hands it back to each duplicate."""
    state["ran"] = True
    result = call()
    return {DISCARDED: result.reason} if isinstance(result, Discarded) else None


class IdempotentRunner:
    def __init__(self, job_type: JobType[Any], *, table_name: str, dynamodb_client: Any) -> None:
        self._config = IdempotencyConfig(
            event_key_jmespath="key",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=int(record_lifetime(job_type).total_seconds()),
        )
        self._persistence = DynamoDBPersistenceLayer(
            table_name=table_name, key_attr=RECORD_KEY, expiry_attr=RECORD_TTL, boto3_client=dynamodb_client
        )
        self._key_prefix = f"{KEY_PREFIX}.{job_type.name}"
        self._run = idempotent_function(
            _run_once,
            data_keyword_argument="job",
            persistence_store=self._persistence,
            config=self._config,
            key_prefix=self._key_prefix,
        )

    def register(self, context: LambdaContext) -> None:
        """Tie in-progress locks to this invocation's deadline, so a crash frees the key."""
        self._config.register_lambda_context(context)

    def run(self, key: str, call: Callable[[], object]) -> Completion:
        """Run ``call`` unless ``key`` already completed; a ``call`` that returns ``Discarded`` completes it as such."""
        state = {"ran": False}
        response = self._run(job={"key": key}, call=call, state=state)
        discarded = response.get(DISCARDED) if isinstance(response, dict) else None
        return Completion(ran=state["ran"], discarded=discarded)

    def completed(self, key: str) -> bool:
        """Whether a run under ``key`` has completed: how `conveyor dlq redrive --canary` sees a success.

        Read through Powertools' own persistence layer, so the record is found exactly as the
        worker writes it.
        """
        self._persistence.configure(self._config, key_prefix=self._key_prefix)
        try:
            record = self._persistence.get_record({"key": key})
        except IdempotencyItemNotFoundError:
            return False
        return record is not None and record.status == STATUS_CONSTANTS["COMPLETED"]
