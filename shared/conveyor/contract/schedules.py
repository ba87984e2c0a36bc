"""Schedules: jobs that EventBridge Scheduler enqueues on a cron, rate or at expression.

A ``Schedule`` is declared beside the job types and checked as it is built, so an expression
EventBridge would reject, an unknown time zone or a payload the job cannot read fails at import
with one line naming the schedule, not at deploy. The same declaration drives the stack (one
Scheduler schedule per shard), the local scheduler emulator and the missed-run policy.

Evaluating the expression is conveyor.contract.cron's; the Scheduler target input is
conveyor.contract.schedule_inputs'.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from conveyor.contract import limits
from conveyor.contract.cron import EPOCH, Cron, ExpressionError, Timetable, next_occurrence, occurrence_gaps
from conveyor.contract.declarations import JobType
from conveyor.contract.durations import format_duration
from conveyor.contract.errors import ContractError, DeclarationError, require

# Like queue names, at most 40 characters: Scheduler's 64 leave room for a prefix and a shard suffix.
SCHEDULE_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
# Each shard is its own AWS::Scheduler::Schedule, and a stack holds at most 500 resources.
MAX_SHARDS = 32
# Catch-up runs are enqueued by the run that finds them missing, in one go: bound the burst.
MAX_CATCH_UP_RUNS = 100

# The payload fields a sharded schedule fills in.
SHARD_FIELD = "shard"
SHARDS_FIELD = "shards"


class MissedReason(StrEnum):
    """Why an occurrence did not run (or not yet): the run audit's own reason codes.

    The policies' two say which policy left an occurrence out; the other three name a cause:
    the queue or the schedule was paused, the run's lease passed to another holder, a
    destination the run declares was down (its breaker open). docs/schedules.md has the table.
    """

    SKIPPED_BY_POLICY = "skipped_by_policy"
    BEYOND_CATCH_UP_LIMIT = "beyond_catch_up_limit"
    PAUSED = "paused"
    LEASE_LOST = "lease_lost"
    DEPENDENCY_DOWN = "dependency_down"


@dataclass(frozen=True)
class MissedRunPolicy:
    """What a run does with earlier occurrences that never ran; build it with ``skip()`` or ``catch_up(n)``."""

    kind: Literal["skip", "catch_up"] = "skip"
    max_runs: int = 0

    @property
    def reason(self) -> MissedReason:
        """The reason recorded for the occurrences this policy does not run."""
        return MissedReason.SKIPPED_BY_POLICY if self.kind == "skip" else MissedReason.BEYOND_CATCH_UP_LIMIT


def skip() -> MissedRunPolicy:
    """Record every missed occurrence as missed and run none of them."""
    return MissedRunPolicy()


def catch_up(max_runs: int) -> MissedRunPolicy:
    """Enqueue the most recent ``max_runs`` missed occurrences; record the older ones as missed."""
    return MissedRunPolicy("catch_up", max_runs)


@dataclass(frozen=True)
class Schedule:
    """A job EventBridge Scheduler enqueues at each occurrence of ``expression``, in ``timezone``.

    ``expression`` is ``cron(minutes hours day-of-month month day-of-week year)``, ``rate(5
    minutes)`` or ``at(2026-12-31T23:00:00)``; ``timezone`` is an IANA name and is kept as
    declared, so the schedule follows that zone's clock changes. ``flexible_window`` lets
    Scheduler invoke up to that much later (None: exactly on time). ``shards=N`` enqueues N jobs
    per occurrence, payload plus ``shard`` (0..N-1) and ``shards``.
    """

    name: str
    expression: str
    job: str
    payload: Mapping[str, Any] | None = None
    timezone: str = "UTC"
    flexible_window: timedelta | None = None
    missed: MissedRunPolicy = field(default_factory=skip)
    shards: int = 1
    timetable: Timetable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"schedule {self.name!r}"
        require(bool(SCHEDULE_NAME_PATTERN.match(self.name)), where, f"name must match {SCHEDULE_NAME_PATTERN.pattern}")
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise DeclarationError(f"{where}: unknown time zone {self.timezone!r} (use an IANA name)") from None
        try:
            timetable = Timetable.parse(self.expression, zone)
        except ExpressionError as error:
            raise DeclarationError(f"{where}: {self.expression} {error}") from None
        object.__setattr__(self, "timetable", timetable)
        if isinstance(timetable.expression, Cron):
            require(
                next_occurrence(self, EPOCH) is not None,
                where,
                f"{self.expression} never fires: no date matches it",
            )
        self._check_options(where)
        gaps = occurrence_gaps(self) if self.flexible_window is not None else []
        require(
            self.flexible_window is None or not gaps or self.flexible_window < min(gaps),
            where,
            f"flexible_window must be shorter than the shortest time between occurrences "
            f"({format_duration(min(gaps)) if gaps else '-'}), or runs would arrive out of order",
        )

    def _check_options(self, where: str) -> None:
        window = self.flexible_window
        least, most = limits.SCHEDULER_MIN_FLEXIBLE_WINDOW, limits.SCHEDULER_MAX_FLEXIBLE_WINDOW
        require(
            window is None or (least <= window <= most and not window % least),
            where,
            f"flexible_window must be whole minutes between {format_duration(least)} and "
            f"{format_duration(most)}, or None for exactly on time",
        )
        require(1 <= self.shards <= MAX_SHARDS, where, f"shards must be between 1 and {MAX_SHARDS}, got {self.shards}")
        require(
            self.missed.kind == "skip" or 1 <= self.missed.max_runs <= MAX_CATCH_UP_RUNS,
            where,
            f"catch_up(max_runs) must be between 1 and {MAX_CATCH_UP_RUNS}, got {self.missed.max_runs}",
        )
        payload = dict(self.payload or {})
        try:
            json.dumps(payload)
        except (TypeError, ValueError) as error:
            raise DeclarationError(f"{where}: payload is not JSON-serializable: {error}") from None
        reserved = sorted({SHARD_FIELD, SHARDS_FIELD} & payload.keys())
        require(
            self.shards == 1 or not reserved,
            where,
            f"payload sets {reserved}, which a sharded schedule fills in",
        )

    def shard_payload(self, shard: int) -> dict[str, Any]:
        """The payload of shard ``shard``'s job: the declared payload, plus its shard on a sharded schedule."""
        data = dict(self.payload or {})
        if self.shards > 1:
            data |= {SHARD_FIELD: shard, SHARDS_FIELD: self.shards}
        return data

    def check_job(self, job_type: JobType[Any]) -> None:
        """Checks against the scheduled job type, run by ``Topology``: every shard's input must run."""
        where = f"schedule {self.name!r}"
        fields = set(job_type.model.model_fields)
        require(
            self.shards == 1 or {SHARD_FIELD, SHARDS_FIELD} <= fields,
            where,
            f"shards={self.shards} needs int fields {SHARD_FIELD!r} and {SHARDS_FIELD!r} on "
            f"{job_type.model.__name__}, the model of job type {job_type.name!r}",
        )
        for shard in range(self.shards):
            try:
                job_type.load_payload(self.shard_payload(shard), job_type.version)
            except ContractError as error:
                raise DeclarationError(
                    f"{where}: payload does not fit {job_type.model.__name__} of job type {job_type.name!r}: {error}"
                ) from None
        require(
            job_type.idempotency_key is None,
            where,
            f"job type {job_type.name!r} keys idempotency on payload fields ({job_type.idempotency_key}), which are "
            "the same at every occurrence, so only the first would run; scheduled jobs key on schedule and time",
        )
        require(
            self.flexible_window is None or self.flexible_window < job_type.retry.max_wall_time,
            where,
            f"flexible_window must be shorter than the retry.max_wall_time of job type {job_type.name!r} "
            f"({format_duration(job_type.retry.max_wall_time)}): a job's age counts from its scheduled time",
        )
