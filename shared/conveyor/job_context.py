"""What a job's handler is told about the run it is in."""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from conveyor.envelope import Correlation


@dataclass(frozen=True)
class JobContext:
    """The run's identity and budget. ``logger`` already carries job id, type, attempt and correlation."""

    job_id: str
    job_type: str
    attempt: int
    max_attempts: int
    idempotency_key: str
    created_at: datetime
    correlation: Correlation
    logger: Logger
    deadline_monotonic: float

    def remaining_time(self) -> timedelta:
        """Time left before the job's own timeout (or the invocation's end, if sooner)."""
        return timedelta(seconds=max(0.0, self.deadline_monotonic - time.monotonic()))
