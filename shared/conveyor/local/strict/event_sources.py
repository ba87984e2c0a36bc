"""Lambda event source mapping requests AWS refuses and moto (5.2) accepts: the settings the ops code changes."""

from collections.abc import Mapping
from typing import Any

from conveyor.contract import limits
from conveyor.local.strict.violation import Rule, Violation

UPDATE = "https://docs.aws.amazon.com/lambda/latest/api/API_UpdateEventSourceMapping.html"
SCALING = "https://docs.aws.amazon.com/lambda/latest/api/API_ScalingConfig.html"

INVALID = "InvalidParameterValueException"
MAX_BATCHING_WINDOW_S = int(limits.ESM_MAX_BATCHING_WINDOW.total_seconds())


def _in_range(value: Any, low: int, high: int, what: str, citation: str) -> None:
    if value is not None and not low <= value <= high:
        raise Violation(INVALID, f"{what} must be between {low} and {high}, got {value}.", citation=citation)


def put_mapping(params: Mapping[str, Any]) -> None:
    """CreateEventSourceMapping and UpdateEventSourceMapping take the same settings."""
    scaling = params.get("ScalingConfig") or {}
    _in_range(
        scaling.get("MaximumConcurrency"),
        limits.ESM_MIN_MAX_CONCURRENCY,
        limits.ESM_MAX_MAX_CONCURRENCY,
        "ScalingConfig.MaximumConcurrency",
        SCALING,
    )
    _in_range(params.get("BatchSize"), 1, limits.ESM_MAX_BATCH_SIZE_STANDARD, "BatchSize", UPDATE)
    window = params.get("MaximumBatchingWindowInSeconds")
    _in_range(window, 0, MAX_BATCHING_WINDOW_S, "MaximumBatchingWindowInSeconds", UPDATE)
    if (params.get("BatchSize") or 0) > limits.ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW and window == 0:
        raise Violation(
            INVALID,
            "Maximum batch window in seconds must be greater than 0 if maximum batch size is greater than "
            f"{limits.ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW}",
            citation=UPDATE,
        )


RULES: dict[str, Rule] = {
    "CreateEventSourceMapping": put_mapping,
    "UpdateEventSourceMapping": put_mapping,
}
