"""Every strict rule, by service and operation: one place that says what the embedded AWS refuses."""

from collections.abc import Mapping
from typing import Any

from conveyor.local.strict import dynamodb, event_sources, scheduler, sqs
from conveyor.local.strict.violation import EntryFailures, Rule, Violation

# Keyed by botocore's hyphenated service id, as client events name them.
RULES: dict[str, dict[str, Rule]] = {
    "sqs": sqs.RULES,
    "dynamodb": dynamodb.RULES,
    "scheduler": scheduler.RULES,
    "lambda": event_sources.RULES,
}


# Every refusal in this process, as "service Operation: message": a test suite asserts that only
# the tests that provoke refusals on purpose saw any (tests/conftest.py).
_refused: list[str] = []


def check(service: str, operation: str, params: Mapping[str, Any]) -> EntryFailures:
    """Raise ``Violation`` if AWS would refuse this request; else the batch entries AWS would fail, if any.

    Parameters are in wire (JSON) form: blobs as base64 text.
    """
    rule = RULES.get(service, {}).get(operation)
    try:
        failures = (rule(params) if rule else None) or {}
    except Violation as violation:
        _refused.append(f"{service} {operation}: {violation}")
        raise
    _refused.extend(f"{service} {operation} entry {entry}: {why}" for entry, why in failures.items())
    return failures


def refused() -> list[str]:
    """What strict mode has refused in this process so far, oldest first."""
    return list(_refused)
