"""The topology: every declaration of a project, checked against each other as a whole.

Queues, job types, tables and stream rules are declared in conveyor.contract.declarations,
schedules in conveyor.contract.schedules; this module holds what ties them together.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from conveyor.contract import limits
from conveyor.contract.declarations import REDRIVE_BACKSTOP_MARGIN, JobType, Queue, RetryPolicy, StreamRule, Table
from conveyor.contract.destinations import Destination
from conveyor.contract.durations import format_duration
from conveyor.contract.errors import ContractError, DeclarationError, require
from conveyor.contract.reasons import Reason
from conveyor.contract.schedules import Schedule


@dataclass(frozen=True)
class Topology:
    """The declared queues and job types, checked against each other as a whole."""

    queues: tuple[Queue, ...]
    job_types: tuple[JobType[Any], ...] = ()
    tables: tuple[Table, ...] = ()
    stream_rules: tuple[StreamRule, ...] = ()
    schedules: tuple[Schedule, ...] = ()
    destinations: tuple[Destination, ...] = ()

    def __post_init__(self) -> None:
        require(bool(self.queues), "topology", "declare at least one queue")
        _reject_duplicates("queue", (q.name for q in self.queues))
        _reject_duplicates("job type", (j.name for j in self.job_types))
        _reject_duplicates("table", (t.name for t in self.tables))
        by_name = {q.name: q for q in self.queues}
        for job in self.job_types:
            where = f"job type {job.name!r}"
            queue = by_name.get(job.queue)
            if queue is None:
                raise DeclarationError(
                    f"{where}: routed to unknown queue {job.queue!r} (declared: {', '.join(sorted(by_name))})"
                )
            require(
                job.timeout is None or job.timeout <= queue.function_timeout,
                where,
                f"timeout exceeds the function_timeout of queue {queue.name!r} "
                f"({format_duration(queue.function_timeout)})",
            )
            require(
                job.retry.max_wall_time <= queue.retention,
                where,
                f"retry.max_wall_time exceeds the retention of queue {queue.name!r} "
                f"({format_duration(queue.retention)}); messages would expire before their last attempt",
            )

        self._check_stream_rules()
        self._check_schedules()
        self._check_destinations()

    def _check_destinations(self) -> None:
        _reject_duplicates("destination", (d.name for d in self.destinations))
        declared = {d.name: d for d in self.destinations}
        for job in self.job_types:
            where = f"job type {job.name!r}"
            for name in job.destinations:
                destination = declared.get(name)
                if destination is None:
                    raise DeclarationError(
                        f"{where}: calls destination {name!r}, which is not declared "
                        f"(declared: {', '.join(sorted(declared)) or 'none'})"
                    )
                key = destination.rate.key if destination.rate else None
                require(
                    key is None or key in job.model.model_fields,
                    where,
                    f"destination {name!r} limits per {key!r}, which is not a field of {job.model.__name__}",
                )

    def _check_schedules(self) -> None:
        _reject_duplicates("schedule", (s.name for s in self.schedules))
        jobs = {j.name: j for j in self.job_types}
        for schedule in self.schedules:
            where = f"schedule {schedule.name!r}"
            job_type = jobs.get(schedule.job)
            if job_type is None:
                declared = ", ".join(sorted(jobs)) or "none"
                raise DeclarationError(f"{where}: job type {schedule.job!r} is not declared (declared: {declared})")
            queue = self.queue(job_type.queue)
            require(
                not queue.fifo,
                where,
                f"job type {job_type.name!r} runs on FIFO queue {queue.name!r}, which Scheduler cannot send to "
                "without content-based deduplication; schedule a job on a standard queue",
            )
            schedule.check_job(job_type)

    def _check_stream_rules(self) -> None:
        _reject_duplicates("stream rule", (r.name for r in self.stream_rules))
        tables = {t.name for t in self.tables}
        jobs = {j.name for j in self.job_types}
        for rule in self.stream_rules:
            where = f"stream rule {rule.name!r}"
            require(
                rule.table in tables,
                where,
                f"table {rule.table!r} is not declared (declared: {', '.join(sorted(tables)) or 'none'})",
            )
            require(rule.job in jobs, where, f"job type {rule.job!r} is not declared")
            queue = self.queue(self.job_type(rule.job).queue)
            require(
                not queue.fifo,
                where,
                f"job type {rule.job!r} runs on FIFO queue {queue.name!r}, and a stream rule has no message group; "
                "enqueue it through the outbox with group=",
            )

    def streamed_tables(self) -> tuple[Table, ...]:
        """The declared tables some stream rule reads: their streams are enabled and relayed."""
        read = {rule.table for rule in self.stream_rules}
        return tuple(table for table in self.tables if table.name in read)

    def rules_for(self, table: str) -> tuple[StreamRule, ...]:
        return tuple(rule for rule in self.stream_rules if rule.table == table)

    def queue(self, name: str) -> Queue:
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise DeclarationError(f"unknown queue {name!r}")

    def job_type(self, name: str) -> JobType[Any]:
        for job_type in self.job_types:
            if job_type.name == name:
                return job_type
        raise ContractError(Reason.UNKNOWN_TYPE, f"unknown job type {name!r}")

    def destination(self, name: str) -> Destination:
        for destination in self.destinations:
            if destination.name == name:
                return destination
        declared = ", ".join(sorted(d.name for d in self.destinations)) or "none"
        raise DeclarationError(f"destination {name!r} is not declared (declared: {declared})")

    def effect(self, name: str) -> Destination:
        """The destination declaring effect ``name`` (``payments.charge``); DeclarationError lists the declared ones."""
        for destination in self.destinations:
            if name in destination.effect_names:
                return destination
        declared = ", ".join(sorted(self.effect_names())) or "none"
        raise DeclarationError(f"effect {name!r} is not declared (declared: {declared})")

    def effect_names(self) -> tuple[str, ...]:
        return tuple(name for destination in self.destinations for name in destination.effect_names)

    def job_types_on(self, queue_name: str) -> tuple[JobType[Any], ...]:
        return tuple(job for job in self.job_types if job.queue == queue_name)

    def max_attempts(self, queue_name: str) -> int:
        """The most attempts the harness makes on any job routed to the queue."""
        attempts = [job.retry.max_attempts for job in self.job_types_on(queue_name)]
        return max(attempts, default=RetryPolicy().max_attempts)

    def max_receive_count(self, queue_name: str) -> int:
        """The redrive policy's backstop: above every attempt count the harness will make."""
        return max(
            self.max_attempts(queue_name) + REDRIVE_BACKSTOP_MARGIN,
            limits.MIN_MAX_RECEIVE_COUNT,
        )


def _reject_duplicates(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        require(name not in seen, f"{kind} {name!r}", "declared twice")
        seen.add(name)
