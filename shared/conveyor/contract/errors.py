"""Exceptions a job raises to steer the harness, and those the SDK raises on misuse."""

from datetime import timedelta

from conveyor.contract.reasons import Reason, SnoozeReason


class ConveyorError(Exception):
    """Base of every exception Conveyor raises on purpose."""


class DeclarationError(ConveyorError, ValueError):
    """A declaration that cannot be deployed or run, or a project setting naming none; the message says why."""


def require(condition: bool, where: str, rule: str) -> None:
    """Raise DeclarationError("<where>: <rule>") unless ``condition`` holds."""
    if not condition:
        raise DeclarationError(f"{where}: {rule}")


class PermanentError(ConveyorError):
    """Raised by a job when retrying cannot help (a 4xx, a rejected card): dead-letter now."""


class RetryableError(ConveyorError):
    """Raised by a job for a failure worth retrying with backoff (a 5xx, a timeout).

    ``retry_after`` is the service's own word on when to come back (an HTTP ``Retry-After``):
    the harness waits at least that long, and never less than its jittered backoff.
    """

    def __init__(self, *args: object, retry_after: timedelta | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class JobTimeoutError(RetryableError):
    """The job ran past its declared timeout."""


class Snooze(ConveyorError):  # noqa: N818 - a request, not an error
    """Raised by a job to run again after ``delay`` without spending an attempt.

    On a FIFO queue, which has no per-message delay, the message's visibility is extended
    instead, holding its group; that receive then counts as an attempt.
    """

    def __init__(self, delay: timedelta) -> None:
        super().__init__(f"snoozed for {delay.total_seconds():g}s")
        self.delay = delay


class Throttled(Snooze):
    """A destination cannot take the call now (no token, no slot, breaker open): run the job again after ``delay``.

    Raised by ``ctx.limit`` and ``ctx.call`` (and by the harness for a job type's declared destinations),
    never spending an attempt; ``reason`` says which limit, ``destination`` which service.
    """

    def __init__(self, reason: SnoozeReason, destination: str, delay: timedelta) -> None:
        super().__init__(delay)
        self.args = (f"{destination}: {reason.value}, snoozed for {delay.total_seconds():g}s",)
        self.reason = reason
        self.destination = destination


class Discard(ConveyorError):  # noqa: N818 - a decision, not an error
    """Raised by a job to end it on purpose as discarded (``raise Discard("order cancelled")``).

    Final and not a failure: no retry, no dead letter, the message is acknowledged and its
    idempotency key completed, so a duplicate is absorbed. The harness logs and counts it with
    ``reason`` (sensitive payload values masked). The reason is required, as text that says why,
    and refused here when missing or blank, so every discard can be told apart later.
    """

    def __init__(self, reason: str) -> None:
        if not isinstance(reason, str):
            raise TypeError(f"Discard(reason): the reason must be text saying why, not {type(reason).__name__}")
        if not reason.strip():
            raise ValueError('Discard(reason): the reason must say why the job is dropped, e.g. "order cancelled"')
        super().__init__(reason)
        self.reason = reason


class Continued(ConveyorError):  # noqa: N818 - a hand-off, not an error
    """Raised by ``ctx.continue_later`` once the next chunk is enqueued; the harness ends the run as a success.

    Let it propagate: a handler that swallows it goes on with work the next chunk also does.
    """

    def __init__(self, next_job_id: str) -> None:
        super().__init__(f"continued in job {next_job_id}")
        self.next_job_id = next_job_id


class CheckpointError(PermanentError):
    """A checkpoint or continuation that can never succeed, so retrying cannot help: dead-letter now.

    A redrive after the fix resumes from the last checkpoint that was stored.
    """


class CheckpointTooLargeError(CheckpointError):
    """A checkpoint over DynamoDB's item size limit: store large state by reference (an S3 key) instead."""


class EnqueueError(ConveyorError):
    """Some jobs were not accepted by SQS after retries; ``accepted`` ids were, ``rejected`` were not."""

    def __init__(self, message: str, *, accepted: list[str], rejected: dict[str, str]) -> None:
        super().__init__(message)
        self.accepted = accepted
        self.rejected = rejected


class InvalidJobError(ConveyorError, ValueError):
    """SDK misuse caught before anything is sent: unknown job, bad payload, payload too large."""


class ContractError(ConveyorError, ValueError):
    """A message or payload that breaks the contract; ``reason`` is its dead-letter reason code."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TransactionCanceledError(ConveyorError):
    """DynamoDB canceled a ``JobClient.transact`` call, so none of it was written: no row, no job.

    ``failed_writes`` maps indexes into ``writes``, and ``failed_jobs`` job ids, to DynamoDB's
    cancellation codes. A ``TransactionConflict`` or a throttle is worth retrying; a failed
    condition is not, and raises the subclass ``TransactionConditionError``.
    """

    def __init__(self, message: str, *, failed_writes: dict[int, str], failed_jobs: dict[str, str]) -> None:
        super().__init__(message)
        self.failed_writes = failed_writes
        self.failed_jobs = failed_jobs


class TransactionConditionError(TransactionCanceledError):
    """A condition of the transaction failed: a write's own, or a job id already in the outbox."""
