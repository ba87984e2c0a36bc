"""The envelope: the JSON body of every message. Its shape is public (docs/contracts.md).

Producers in any language write it; unknown top-level fields are ignored so that a newer
producer never breaks an older worker.
"""

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from conveyor.contract.errors import ContractError
from conveyor.contract.reasons import Reason

MAX_ID_LENGTH = 128


class Correlation(BaseModel):
    """Who and what caused the job, carried into every log line of its run."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    request_id: str | None = None
    origin: str | None = None
    actor: str | None = None


class Envelope(BaseModel):
    """The JSON body of every job message: type and version, id, dedupe key, creation time, correlation, data.

    Unknown top-level fields are ignored, so a newer producer's extra field never poisons a message.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str = Field(min_length=1)
    v: int = Field(ge=1, strict=True)
    id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    dedupe_key: str | None = Field(default=None, min_length=1)
    created_at: AwareDatetime
    correlation: Correlation = Correlation()
    data: dict[str, Any]

    @field_validator("created_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def to_json(self) -> str:
        return self.model_dump_json()


def new_job_id() -> str:
    return str(uuid.uuid4())


def parse_json(text: str) -> Any:
    """``json.loads`` for text from outside: too deep a nesting is a ValueError, as any other bad JSON is.

    The parser recurses once per level, so a hostile body nested a few thousand deep raises
    RecursionError, which callers that expect ValueError for bad JSON would let escape.
    """
    try:
        return json.loads(text)
    except RecursionError as error:
        raise ValueError("JSON nested deeper than the parser allows") from error


def parse_envelope(body: str) -> Envelope:
    """The envelope in ``body``, or a ContractError whose reason says what was wrong with it."""
    try:
        document = parse_json(body)
    except ValueError as error:
        raise ContractError(Reason.INVALID_JSON, f"body is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise ContractError(Reason.INVALID_ENVELOPE, f"body is a JSON {type(document).__name__}, not an object")
    try:
        return Envelope.model_validate(document)
    except ValidationError as error:
        raise ContractError(Reason.INVALID_ENVELOPE, summarize_validation_error(error)) from error


def summarize_validation_error(error: ValidationError) -> str:
    """Field paths and messages only: pydantic's default text echoes input values, secrets included."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in error.errors())
