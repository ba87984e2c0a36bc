"""EventBridge Scheduler requests AWS refuses and moto (5.2) accepts: names and ranges the ops code sets."""

import re
from collections.abc import Mapping
from typing import Any

from conveyor.contract import limits
from conveyor.local.strict.violation import Rule, Violation

CREATE = "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html"
RETRY_POLICY = "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html"
FLEXIBLE_WINDOW = "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_FlexibleTimeWindow.html"

VALIDATION = "ValidationException"
_NAME = re.compile(limits.SCHEDULER_NAME_PATTERN)
ACTIONS_AFTER_COMPLETION = ("NONE", "DELETE")


def _in_range(value: Any, low: float, high: float, what: str, citation: str) -> None:
    if value is not None and not low <= value <= high:
        raise Violation(
            VALIDATION,
            f"1 validation error detected: Value '{value}' at '{what}' failed to satisfy constraint: "
            f"Member must have value between {low:g} and {high:g}",
            citation=citation,
        )


def put_schedule(params: Mapping[str, Any]) -> None:
    """CreateSchedule and UpdateSchedule take the same members."""
    for member in ("Name", "GroupName"):
        value = params.get(member)
        if value is not None and not _NAME.fullmatch(value):
            raise Violation(
                VALIDATION,
                f"1 validation error detected: Value '{value}' at '{member[0].lower() + member[1:]}' failed to "
                f"satisfy constraint: Member must satisfy regular expression pattern: {limits.SCHEDULER_NAME_PATTERN}",
                citation=CREATE,
            )
    window = params.get("FlexibleTimeWindow") or {}
    if window.get("Mode") == "FLEXIBLE" and window.get("MaximumWindowInMinutes") is None:
        raise Violation(
            VALIDATION,
            "1 validation error detected: Value null at 'flexibleTimeWindow.maximumWindowInMinutes' failed to "
            "satisfy constraint: Member must not be null",
            citation=FLEXIBLE_WINDOW,
        )
    if window.get("Mode") == "FLEXIBLE":
        _in_range(
            window.get("MaximumWindowInMinutes"),
            limits.SCHEDULER_MIN_FLEXIBLE_WINDOW.total_seconds() / 60,
            limits.SCHEDULER_MAX_FLEXIBLE_WINDOW.total_seconds() / 60,
            "flexibleTimeWindow.maximumWindowInMinutes",
            FLEXIBLE_WINDOW,
        )
    retry = (params.get("Target") or {}).get("RetryPolicy") or {}
    _in_range(
        retry.get("MaximumRetryAttempts"),
        0,
        limits.SCHEDULER_MAX_RETRY_ATTEMPTS,
        "target.retryPolicy.maximumRetryAttempts",
        RETRY_POLICY,
    )
    _in_range(
        retry.get("MaximumEventAgeInSeconds"),
        limits.SCHEDULER_MIN_EVENT_AGE.total_seconds(),
        limits.SCHEDULER_MAX_EVENT_AGE.total_seconds(),
        "target.retryPolicy.maximumEventAgeInSeconds",
        RETRY_POLICY,
    )
    action = params.get("ActionAfterCompletion")
    if action is not None and action not in ACTIONS_AFTER_COMPLETION:
        raise Violation(
            VALIDATION,
            f"1 validation error detected: Value '{action}' at 'actionAfterCompletion' failed to satisfy "
            f"constraint: Member must satisfy enum value set: [{', '.join(ACTIONS_AFTER_COMPLETION)}]",
            citation=CREATE,
        )


RULES: dict[str, Rule] = {"CreateSchedule": put_schedule, "UpdateSchedule": put_schedule}
