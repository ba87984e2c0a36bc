"""Payload models: the base class job payloads extend, and the mark for sensitive fields."""

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SENSITIVE_KEY = "x-conveyor-sensitive"
MASK = "***"


class Payload(BaseModel):
    """Base for job payloads: unknown fields are rejected and a received payload is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def sensitive(**field_options: Any) -> Any:
    """``email: str = sensitive()``: the field is masked in logs, DLQ error texts and `conveyor dlq show`."""
    return Field(json_schema_extra={SENSITIVE_KEY: True}, **field_options)


def sensitive_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(
        name
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get(SENSITIVE_KEY)
    )


def mask_values(text: str, values: list[str]) -> str:
    """Replace every occurrence of the given values in ``text`` with a mask, longest first."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = re.sub(re.escape(value), MASK, text)
    return text


def sensitive_values(model: type[BaseModel], data: Any) -> list[str]:
    """The string values of ``data``'s sensitive top-level fields, for masking in free text."""
    if not isinstance(data, dict):
        return []
    return [str(data[name]) for name in sensitive_fields(model) if isinstance(data.get(name), str | int)]
