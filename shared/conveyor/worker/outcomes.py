"""What became of each run: the harness reports one outcome per record it handled.

The local runtime counts them for its live view and report; metrics come from the same
events, so what a test or the demo sees is what production dashboards show.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Kind(StrEnum):
    SUCCEEDED = "succeeded"
    DUPLICATE = "duplicate"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    SNOOZED = "snoozed"
    DEFERRED = "deferred"
    DISCARDED = "discarded"  # the handler raised Discard: final, not a failure


@dataclass(frozen=True)
class JobOutcome:
    queue: str
    kind: Kind
    job_type: str | None
    job_id: str | None
    attempt: int
    created_at: datetime | None
    finished_at: datetime
    started_at: datetime | None = None
    # A dead-letter Reason, the retry's Failure kind, or a discard's reason text (masked).
    reason: str | None = None
    error_class: str | None = None


Observer = Callable[[JobOutcome], None]


def ignore(outcome: JobOutcome) -> None:
    """The default observer."""


def fan_out(*observers: Observer) -> Observer:
    """One observer that tells each of ``observers``, in order."""

    def observe(outcome: JobOutcome) -> None:
        for observer in observers:
            observer(outcome)

    return observe
