"""The envelope: the JSON body of every message. Its shape is public (docs/contracts.md).

Producers in any language write it; unknown top-level fields are ignored so that a newer
producer never breaks an older worker.
"""

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from conveyor.contract.errors import ContractError
from conveyor.contract.reasons import Reason
from conveyor.contract.sqs_text import first_uncarried

MAX_ID_LENGTH = 128
# RFC 3339's date-time (section 5.6), with the space its note allows between date and time.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


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

    @field_validator("created_at", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        """RFC 3339 text (or a datetime, from Python): left alone, pydantic would read a number as Unix time."""
        if isinstance(value, datetime) or (isinstance(value, str) and _RFC3339.fullmatch(value)):
            return value
        raise ValueError("must be an RFC 3339 date-time with an offset, such as 2026-11-29T12:00:00Z")

    @field_validator("created_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        try:
            return value.astimezone(UTC)
        except OverflowError as error:  # 9999-12-31T23:59:59-01:00, say: a ValueError makes it a validation error
            raise ValueError("lies outside the years 1 to 9999 in UTC") from error

    @field_validator("type", "id", "dedupe_key")
    @classmethod
    def _sqs_characters(cls, value: str | None) -> str | None:
        """A job's identifiers reach message attributes (a dead letter's type and id): they hold what SQS carries."""
        if value is not None and first_uncarried(value):
            raise ValueError("holds a character SQS cannot carry (a control character, U+FFFE or U+FFFF)")
        return value

    def to_json(self) -> str:
        return self.model_dump_json()


def new_job_id() -> str:
    return str(uuid.uuid4())


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def parse_json(text: str) -> Any:
    """``json.loads`` for text from outside: too deep a nesting is a ValueError, as any other bad JSON is.

    The parser recurses once per level, so a hostile body nested a few thousand deep raises
    RecursionError, which callers that expect ValueError for bad JSON would let escape. NaN and
    Infinity, which Python's parser reads by default, are not JSON (RFC 8259) either.
    """
    try:
        return json.loads(text, parse_constant=_not_json)
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
