"""What a job's handler is told about the run it is in, and how a long job keeps its progress."""

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol, TypeVar

from aws_lambda_powertools import Logger

from conveyor.contract.effects import Effect, default_key
from conveyor.contract.envelope import Correlation

T = TypeVar("T")


class Resumable(Protocol):
    """Where a run keeps its progress: the worker's checkpoint store (conveyor.worker.checkpoints.Progress)."""

    def resume_state(self) -> dict[str, Any] | None: ...

    def checkpoint(self, state: Mapping[str, Any]) -> None: ...

    def continue_later(self, state: Mapping[str, Any]) -> NoReturn: ...


class Guard(Protocol):
    """The shared limits of declared destinations (conveyor.worker.destinations.JobGuard in the worker)."""

    def limit(self, destination: str, *, key: str | None = None) -> AbstractContextManager[None]: ...

    def call(self, destination: str, fn: Callable[[], T], *, key: str | None = None) -> T: ...


class Unguarded:
    """No limits: the guard of a context built outside the harness, as a unit test of a handler builds one."""

    @contextmanager
    def limit(self, destination: str, *, key: str | None = None) -> Iterator[None]:
        yield

    def call(self, destination: str, fn: Callable[[], T], *, key: str | None = None) -> T:
        return fn()


class Effects(Protocol):
    """The run's effect ledger (conveyor.worker.effects.RunEffects in the worker)."""

    def effect(
        self, name: str, *, key: str, request: Mapping[str, Any] | None = None
    ) -> AbstractContextManager[Effect]: ...


class Unrecorded:
    """No ledger: the effects of a context built outside the harness, as a unit test of a handler builds one.

    Every effect is new (never ``done``) and nothing is written; the key is the one the harness would use.
    """

    @contextmanager
    def effect(self, name: str, *, key: str, request: Mapping[str, Any] | None = None) -> Iterator[Effect]:
        yield Effect(name, key)


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
    progress: Resumable = field(repr=False)
    guard: Guard = field(default_factory=Unguarded, repr=False)
    effects: Effects = field(default_factory=Unrecorded, repr=False)

    def remaining_time(self) -> timedelta:
        """Time left before the job's own timeout (or the invocation's end, if sooner)."""
        return timedelta(seconds=max(0.0, self.deadline_monotonic - time.monotonic()))

    def resume_state(self) -> dict[str, Any] | None:
        """The state to resume from: this run's last checkpoint, or what the previous chunk handed on.

        None means start from the beginning. Read from DynamoDB on the first call only.
        """
        return self.progress.resume_state()

    def checkpoint(self, state: Mapping[str, Any]) -> None:
        """Persist progress (JSON, within DynamoDB's 400 KB item): a redelivery resumes from it.

        Large state goes by reference (an S3 key); too large raises CheckpointTooLargeError.
        """
        self.progress.checkpoint(state)

    def continue_later(self, state: Mapping[str, Any]) -> NoReturn:
        """Enqueue the rest of the work as the next chunk, resuming from ``state``, and end this run.

        Call it between units of work when ``remaining_time()`` runs low; the run then ends as a
        success (it raises ``Continued``, which the harness catches: let it propagate).
        """
        self.progress.continue_later(state)

    def limit(self, destination: str, *, key: str | None = None) -> AbstractContextManager[None]:
        """Hold a token and a slot of ``destination`` for the block: ``with ctx.limit("payments"): ...``.

        Waits at most the destination's ``max_wait``; beyond it, or while its breaker is open, it
        raises ``Throttled`` and the harness snoozes the job without spending an attempt. ``key``
        defaults to the payload field a per-key rate limit names. A failure raised in the block
        counts against the breaker and the retry budget as ``call`` does.
        """
        return self.guard.limit(destination, key=key)

    def call(self, destination: str, fn: Callable[[], T], *, key: str | None = None) -> T:
        """``fn()`` under ``destination``'s limits and breaker (``limit`` around one call), returning its result."""
        return self.guard.call(destination, fn, key=key)

    def effect(
        self, name: str, *, key: str | None = None, request: Mapping[str, Any] | None = None
    ) -> AbstractContextManager[Effect]:
        """Record an effect of a declared destination around its call: intent before, outcome after.

        ``with ctx.effect("payments.charge", request={...}) as effect: if not effect.done: ...`` and
        pass ``effect.key`` to the provider as its idempotency key. ``key`` defaults to one derived from
        the job's idempotency key, the same on every retry and redelivery; give one per call when a run
        makes the same effect more than once (a mail per recipient). ``request`` is a small summary of
        the call (sensitive payload values are masked), for whoever checks the provider. A block left
        cleanly confirms the effect; one that raises a permanent failure records it failed; any other
        failure leaves it intended, for the next attempt or `conveyor reconcile`. An undeclared name
        raises DeclarationError naming it.
        """
        return self.effects.effect(
            name, key=key or default_key(self.job_type, self.idempotency_key, name), request=request
        )
