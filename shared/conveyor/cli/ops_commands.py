"""`conveyor status | dlq ... | pause | resume | concurrency | drain | audit`: operating deployed queues.

The same commands work against AWS (resources from the stack's outputs) and against any
``AWS_ENDPOINT_URL`` (the local runtime's fixed names). Every change is recorded in the audit
table. Nothing is deleted from a DLQ unless its copy was sent, or `discard --yes` was given.
"""

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from conveyor.cli.project import Project
from conveyor.cli.support import Incomplete, NotFound, aws_errors, emit, user_input
from conveyor.contract.durations import format_duration, parse_duration
from conveyor.contract.naming import OWN_QUEUES
from conveyor.ops.dlq_entries import REASONS, DlqEntry, DlqFilter
from conveyor.ops.dlq_scan import read_entries
from conveyor.ops.event_sources import check_max_concurrency
from conveyor.ops.own_dlqs import (
    RELAY,
    RELAY_REASONS,
    RelayRedrive,
    own_detail,
    own_dlq_url,
    own_filter,
    relay_source,
    schedules_source,
)
from conveyor.ops.rate import RateLimiter, parse_rate
from conveyor.ops.redrive import DEFAULT_CANARY_TIMEOUT, DlqSource, Redrive, RedriveReport, discard
from conveyor.ops.schedule_pauses import SchedulePauses
from conveyor.ops.status import queue_counts, queue_status
from conveyor.ops.target import TargetNotFoundError

DEFAULT_DRAIN_TIMEOUT = timedelta(minutes=5)
DRAIN_POLL_S = 2.0
DRAINED_READINGS = 2
DASH = "-"

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _duration(text: str | None) -> timedelta | None:
    return None if text is None else user_input(lambda: parse_duration(text))


@dataclass(frozen=True)
class Filters:
    """The DLQ filters as typed; ``selection`` checks them against the declarations."""

    reasons: tuple[str, ...]
    job_types: tuple[str, ...]
    since: str | None
    until: str | None
    limit: int | None

    def selection(self, project: Project, queue: str) -> DlqFilter:
        """For ``queue``'s DLQ, or the relay's or the schedules' (``queue`` checked by ``_dlq_name`` first)."""
        build = own_filter if queue in OWN_QUEUES else DlqFilter.build
        selection: DlqFilter = user_input(
            lambda: build(
                project.topology,
                queue,
                reasons=self.reasons,
                job_types=self.job_types,
                since=self.since,
                until=self.until,
            )
        )
        return selection


def filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """The filters `dlq ls`, `redrive` and `discard` share, handed to the command as one ``filters``."""

    @functools.wraps(command)
    def with_filters(
        *args: Any,
        reasons: tuple[str, ...],
        job_types: tuple[str, ...],
        since: str | None,
        until: str | None,
        limit: int | None,
        **kwargs: Any,
    ) -> None:
        command(*args, filters=Filters(reasons, job_types, since, until, limit), **kwargs)

    for option in reversed(
        (
            click.option(
                "--reason",
                "reasons",
                multiple=True,
                help=f"Only this reason (repeatable): {', '.join(REASONS)}; for the relay DLQ "
                f"{', '.join(RELAY_REASONS)}; for the schedules DLQ, Scheduler's ERROR_CODE.",
            ),
            click.option("--type", "job_types", multiple=True, help="Only this job type (repeatable)."),
            click.option("--since", help="Failed at or after: ISO 8601, or a duration ago (2h)."),
            click.option("--until", help="Failed before: ISO 8601, or a duration ago."),
            click.option("--limit", type=click.IntRange(min=1), help="At most this many entries."),
        )
    ):
        with_filters = option(with_filters)
    return with_filters


def _concurrency(live: int | None, declared: int | None) -> str:
    """The live MaximumConcurrency, and the declared one beside it when they differ (a deploy may restore it)."""
    if live is None:
        return DASH
    return str(live) if declared in (None, live) else f"{live} (declared {declared})"


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else DASH


@click.command()
@click.argument("queue", required=False)
@json_option
@click.pass_obj
def status(project: Project, queue: str | None, as_json: bool) -> None:
    """Backlog, in flight, delayed, oldest age, DLQ depth and consumption state, per queue."""
    names = [project.queue_name(queue)] if queue else [q.name for q in project.topology.queues]
    target = project.target
    with aws_errors("reading queue status"):
        found = [queue_status(target, project.topology, target.queue(name)) for name in names]
    emit(
        as_json,
        [entry.as_dict() for entry in found],
        ("QUEUE", "VISIBLE", "IN FLIGHT", "DELAYED", "OLDEST", "DLQ", "STATE", "MAX CONC", "JOB TYPES"),
        [
            (
                entry.name,
                str(entry.visible),
                str(entry.in_flight),
                str(entry.delayed),
                DASH if entry.oldest_age_s is None else format_duration(timedelta(seconds=int(entry.oldest_age_s))),
                str(entry.dlq_visible) + (f" (+{entry.dlq_in_flight} held)" if entry.dlq_in_flight else ""),
                ("paused" + (f" until {entry.resume_at}" if entry.resume_at else "")) if entry.paused else "running",
                _concurrency(entry.max_concurrency, entry.declared_max_concurrency)
                + (f" (by age {entry.scale_on_age[0]}-{entry.scale_on_age[1]})" if entry.scale_on_age else ""),
                ",".join(entry.job_types) or DASH,
            )
            for entry in found
        ],
    )


@click.group()
def dlq() -> None:
    """Inspect, redrive or discard dead-lettered jobs: a queue's DLQ, or `relay` or `schedules` for the stack's own."""


def _dlq_name(project: Project, name: str) -> str:
    """A declared queue or one of the stack's own DLQs; otherwise one line listing them (exit 3)."""
    valid = [queue.name for queue in project.topology.queues] + sorted(OWN_QUEUES)
    if name not in valid:
        raise NotFound(f"unknown DLQ {name!r}; one of: {', '.join(valid)}")
    return name


def _source(project: Project, name: str) -> DlqSource:
    """Where the DLQ is and how its entries read: a queue's, the relay's or the schedules'."""
    target = project.target
    if name not in OWN_QUEUES:
        return DlqSource.of_queue(target.queue(name))
    try:
        url = own_dlq_url(target, name)
    except TargetNotFoundError as error:
        raise NotFound(str(error)) from error
    return relay_source(url) if name == RELAY else schedules_source(target, project.topology, url)


def _entry_row(queue: str, entry: DlqEntry) -> tuple[str, ...]:
    """A `dlq ls` row: a job's id and type; a relay record's message id and source; a scheduled job's and schedule."""
    first = entry.message_id if queue == RELAY else entry.job_id
    second = entry.source if queue in OWN_QUEUES else entry.job_type
    return (
        first or DASH,
        second or DASH,
        entry.reason,
        entry.error_class or DASH,
        str(entry.attempts or DASH),
        _time(entry.failed_at),
        (entry.error or DASH)[:60],
    )


@dlq.command("ls")
@click.argument("queue")
@filter_options
@click.option("--group", is_flag=True, help="Count entries by reason and error class instead of listing them.")
@json_option
@click.pass_obj
def dlq_ls(
    project: Project,
    queue: str,
    filters: Filters,
    group: bool,
    as_json: bool,
) -> None:
    """List DLQ entries without consuming them."""
    selection = filters.selection(project, _dlq_name(project, queue))
    source = _source(project, queue)
    with aws_errors("reading the DLQ"):
        entries, truncated = read_entries(project.target.clients("sqs"), source.url, parse=source.parse)
    matched = [entry for entry in entries if selection.matches(entry)][: filters.limit]
    if truncated:
        click.echo(
            f"conveyor: read the first {len(entries)} entries only; narrow the filters to see the rest", err=True
        )
    if group:
        counts: dict[tuple[str, str], int] = {}
        for entry in matched:
            key = (entry.reason, entry.error_class or DASH)
            counts[key] = counts.get(key, 0) + 1
        ordered = sorted(counts.items(), key=lambda item: -item[1])
        emit(
            as_json,
            [
                {"reason": reason, "error_class": error_class, "count": count}
                for (reason, error_class), count in ordered
            ],
            ("REASON", "ERROR CLASS", "COUNT"),
            [(reason, error_class, str(count)) for (reason, error_class), count in ordered],
        )
        return
    own = {RELAY: ("MESSAGE ID", "SOURCE"), "schedules": ("JOB ID", "SCHEDULE")}
    emit(
        as_json,
        [entry.summary() | ({"source": entry.source} if queue in OWN_QUEUES else {}) for entry in matched],
        (*own.get(queue, ("JOB ID", "TYPE")), "REASON", "ERROR CLASS", "ATTEMPTS", "FAILED AT", "ERROR"),
        [_entry_row(queue, entry) for entry in matched],
    )


@dlq.command("show")
@click.argument("queue")
@click.argument("job_id")
@click.option("--raw", is_flag=True, help="Also show a body that is not a JSON object (it cannot be masked).")
@json_option
@click.pass_obj
def dlq_show(project: Project, queue: str, job_id: str, raw: bool, as_json: bool) -> None:
    """One DLQ entry in full (by job id or message id), sensitive payload fields masked."""
    source = _source(project, _dlq_name(project, queue))
    with aws_errors("reading the DLQ"):
        entries, _ = read_entries(project.target.clients("sqs"), source.url, parse=source.parse)
    found = [entry for entry in entries if job_id in (entry.job_id, entry.message_id)]
    if not found:
        raise NotFound(f"no entry with job id {job_id!r} in the DLQ of {queue!r}")
    details = [
        own_detail(project.topology, entry, raw=raw) if queue in OWN_QUEUES else entry.detail(project.topology, raw=raw)
        for entry in found
    ]
    if as_json:
        click.echo(json.dumps(details, indent=2))
        return
    for detail in details:
        for key, value in detail.items():
            if key not in ("envelope", "body", "attributes"):
                click.echo(f"{key + ':':<17}{DASH if value is None else value}")
        for name, value in detail.get("attributes", {}).items():
            click.echo(f"  {name}: {value}")
        click.echo("envelope:" if detail["envelope"] else "body:")
        click.echo(json.dumps(detail["envelope"], indent=2) if detail["envelope"] else detail["body"])


def _redrive_rows(report: RedriveReport) -> list[tuple[str, str]]:
    rows = [
        ("scanned", str(report.scanned)),
        ("matched", str(report.matched)),
        ("redriven", "0 (dry run)" if report.dry_run else str(report.redriven)),
        ("send failures", str(len(report.send_failures))),
    ]
    rows += [("refused", f"{message_id}: {why}") for message_id, why in report.refused.items()]
    if report.canary:
        rows.append(
            (
                "canary",
                f"{len(report.canary.completed)}/{len(report.canary.jobs)} completed, "
                f"{len(report.canary.failed_again)} failed again, {len(report.canary.pending)} pending",
            )
        )
    if report.stopped:
        rows.append(("stopped", report.stopped))
    if report.truncated:
        rows.append(("truncated", "yes: only the first entries were read; run again for the rest"))
    rows += [
        ("sample", " ".join(str(s[key] or DASH) for key in ("job_id", "job_type", "reason"))) for s in report.samples
    ]
    return rows


def _report_dict(report: RedriveReport) -> dict[str, Any]:
    data = {key: value for key, value in vars(report).items() if key != "canary"}
    data["canary"] = vars(report.canary) if report.canary else None
    return data


@dlq.command("redrive")
@click.argument("queue")
@filter_options
@click.option("--dry-run", is_flag=True, help="Count and sample what would be redriven; change nothing.")
@click.option("--rate", "rate_text", help="At most this many per second (5/s, 300/m).")
@click.option("--canary", default=0, type=click.IntRange(min=0), help="Redrive N first; go on only if all complete.")
@click.option(
    "--canary-timeout",
    default=format_duration(DEFAULT_CANARY_TIMEOUT),
    show_default=True,
    help="How long the canary may take.",
)
@json_option
@click.pass_obj
def dlq_redrive(
    project: Project,
    queue: str,
    filters: Filters,
    dry_run: bool,
    rate_text: str | None,
    canary: int,
    canary_timeout: str,
    as_json: bool,
) -> None:
    """Return matching DLQ entries to their queue; each DLQ copy is deleted only after its send succeeded.

    From the schedules DLQ, each job goes to the queue its schedule targets; from the relay DLQ, each
    poison record runs through the relay again (a record still poison is dead-lettered again).
    """
    selection = filters.selection(project, _dlq_name(project, queue))
    if queue == RELAY and canary:
        raise click.UsageError(
            "--canary does not apply to the relay DLQ: each record is checked again by the relay as it is redriven"
        )
    rate = RateLimiter(user_input(lambda: parse_rate(rate_text)) if rate_text else None)
    timeout = _duration(canary_timeout) or DEFAULT_CANARY_TIMEOUT
    target = project.target
    source = _source(project, queue)
    redrive: Redrive | RelayRedrive
    if queue == RELAY:
        redrive = RelayRedrive(
            sqs=target.clients("sqs"),
            dynamodb=target.clients("dynamodb"),
            topology=project.topology,
            target=target,
            url=source.url,
            rate=rate,
        )
    else:
        redrive = Redrive(
            sqs=target.clients("sqs"),
            topology=project.topology,
            queue=source,
            runners=lambda job_type: target.idempotency(project.topology, job_type),
            rate=rate,
            canary_timeout=timeout,
        )
    report = redrive.report(selection, dry_run=dry_run)
    finished = False
    try:
        with aws_errors("redriving"):
            if isinstance(redrive, RelayRedrive):
                redrive.run(report, selection, limit=filters.limit)
            else:
                redrive.run(report, selection, limit=filters.limit, canary=canary)
        finished = True
    finally:
        if not dry_run:  # recorded even when interrupted, with what was done by then
            with aws_errors("recording the redrive in the audit"):
                target.audit().record(
                    "dlq.redrive",
                    queue=queue,
                    details={
                        "redrive_id": report.redrive_id,
                        "filters": report.filters,
                        "limit": filters.limit,
                        "rate": rate_text,
                        "canary": canary,
                        "matched": report.matched,
                        "redriven": report.redriven,
                        "send_failures": len(report.send_failures),
                        "refused": len(report.refused),
                        "stopped": report.stopped,
                        "interrupted": not finished,
                    },
                )
    emit(as_json, _report_dict(report), ("REDRIVE", report.redrive_id), _redrive_rows(report))
    if report.stopped:
        raise Incomplete(
            f"redrive stopped: {report.stopped}; {report.matched - report.redriven} matched entries were not sent "
            "(see `conveyor dlq ls` for what the DLQ holds now)"
        )
    if report.send_failures:
        raise click.ClickException(f"{len(report.send_failures)} entries could not be sent and stay in the DLQ")
    if report.refused:
        why = next(iter(report.refused.values()))
        raise click.ClickException(f"{len(report.refused)} entries were not redriven and stay in the DLQ: {why}")
    if report.truncated:
        raise Incomplete("only part of the DLQ was read (see `truncated`); run the command again for the rest")


@dlq.command("discard")
@click.argument("queue")
@filter_options
@click.option("--yes", is_flag=True, help="Really delete the matching entries.")
@json_option
@click.pass_obj
def dlq_discard(
    project: Project,
    queue: str,
    filters: Filters,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete matching DLQ entries for good (refuses without --yes)."""
    selection = filters.selection(project, _dlq_name(project, queue))
    if not yes:
        raise click.UsageError(
            "discard deletes entries for good; pass --yes (try `conveyor dlq ls` with the same filters first)"
        )
    target = project.target
    with aws_errors("discarding"):
        scanned, deleted, truncated = discard(
            target.clients("sqs"), _source(project, queue), selection, limit=filters.limit
        )
        target.audit().record(
            "dlq.discard",
            queue=queue,
            details={"filters": selection.describe(), "limit": filters.limit, "deleted": deleted},
        )
    emit(
        as_json,
        {"queue": queue, "scanned": scanned, "deleted": deleted, "truncated": truncated},
        ("DISCARD", queue),
        [("scanned", str(scanned)), ("deleted", str(deleted))],
    )
    if truncated:
        raise Incomplete("only part of the DLQ was read; run the command again for the rest")


def _state_change(
    project: Project, queue: str, action: str, change: Callable[[], None], details: dict[str, Any], as_json: bool
) -> None:
    """Apply ``change`` to the queue's event source, audit it, and print the state it left."""
    target = project.target
    with aws_errors(action):
        change()
    with aws_errors(f"{action} was applied, but recording it in the audit failed"):
        entry = target.audit().record(action, queue=queue, details=details)
    with aws_errors(f"{action} was applied and audited; reading the state back"):
        state = target.event_sources.state(queue)
    summary = {
        "queue": queue,
        "action": action,
        "paused": not state.enabled,
        "max_concurrency": state.max_concurrency,
        "resume_at": state.resume_at.isoformat() if state.resume_at else None,
        "audit_id": entry.id,
    }
    emit(
        as_json,
        summary,
        ("QUEUE", queue),
        [(key, DASH if value is None else str(value)) for key, value in summary.items() if key != "queue"],
    )


@click.command()
@click.argument("queue")
@click.option("--reason", required=True, help="Why (recorded in the audit).")
@click.option("--for", "for_text", help="Resume by itself after this long (90s, 15m, 2h).")
@json_option
@click.pass_obj
def pause(project: Project, queue: str, reason: str, for_text: str | None, as_json: bool) -> None:
    """Stop consuming a queue (messages wait in it); batches in flight finish."""
    project.queue_name(queue)
    duration = _duration(for_text)
    resume_at = datetime.now(UTC) + duration if duration else None
    with aws_errors("reading the event source"):
        before = project.target.event_sources.state(queue)
    details = {
        "reason": reason,
        "for": for_text,
        "resume_at": resume_at.isoformat(timespec="seconds") if resume_at else None,
        # A pause over a pause replaces it: the audit keeps what it replaced.
        "previous": {
            "paused": not before.enabled,
            "resume_at": before.resume_at.isoformat() if before.resume_at else None,
        },
    }
    _state_change(
        project,
        queue,
        "pause",
        lambda: project.target.event_sources.pause(queue, resume_at=resume_at, reason=reason),
        details,
        as_json,
    )
    _mark_schedules(project, "pause", lambda pauses: pauses.queue_paused(queue, until=resume_at))


@click.command()
@click.argument("queue")
@json_option
@click.pass_obj
def resume(project: Project, queue: str, as_json: bool) -> None:
    """Consume a paused queue again (and cancel a timed resume)."""
    project.queue_name(queue)
    _state_change(project, queue, "resume", lambda: project.target.event_sources.resume(queue), {}, as_json)
    _mark_schedules(project, "resume", lambda pauses: pauses.queue_resumed(queue))


def _mark_schedules(project: Project, action: str, mark: Callable[[SchedulePauses], object]) -> None:
    """Tell the queue's schedules (their state in the run audit) of the pause, so their runs record it as ``paused``."""
    table = project.target.schedule_runs_table
    if table is None:
        return
    with aws_errors(f"{action} was applied and audited; marking it on the queue's schedules"):
        mark(SchedulePauses(project.topology, project.target.clients("dynamodb"), table))


@click.command()
@click.argument("queue")
@click.argument("value", type=int)
@json_option
@click.pass_obj
def concurrency(project: Project, queue: str, value: int, as_json: bool) -> None:
    """Set how many batches of the queue run at once (Lambda's MaximumConcurrency, 2-1000).

    It lasts until a deploy updates the queue's event source mapping, which sets the declared value again
    (CloudFormation updates a mapping only when its template changes); to keep it, declare it.
    """
    reserved = project.topology.queue(project.queue_name(queue)).reserved_concurrency
    user_input(lambda: check_max_concurrency(value))
    if reserved is not None and value > reserved:
        raise click.UsageError(
            f"queue {queue!r} reserves {reserved} concurrent executions; a MaximumConcurrency of {value} "
            "would throttle its own batches (raise reserved_concurrency in the declarations and deploy first)"
        )
    with aws_errors("reading the event source"):
        before = project.target.event_sources.state(queue).max_concurrency
    _state_change(
        project,
        queue,
        "concurrency",
        lambda: project.target.event_sources.set_max_concurrency(queue, value),
        {"from": before, "to": value},
        as_json,
    )
    declared = project.topology.queue(queue).max_concurrency
    if value != declared:
        click.echo(
            f"conveyor: {queue!r} declares max_concurrency={declared}: a deploy that updates its event source mapping "
            f"sets it back; to keep {value}, declare it in the topology and deploy",
            err=True,
        )


@click.command()
@click.argument("queue")
@click.option(
    "--timeout",
    "timeout_text",
    default=format_duration(DEFAULT_DRAIN_TIMEOUT),
    show_default=True,
    help="How long to wait for in-flight work (the queue stays paused either way).",
)
@json_option
@click.pass_obj
def drain(project: Project, queue: str, timeout_text: str, as_json: bool) -> None:
    """Before a deploy: pause the queue, then wait until nothing of it is in flight."""
    project.queue_name(queue)
    timeout = _duration(timeout_text) or DEFAULT_DRAIN_TIMEOUT
    target = project.target
    with aws_errors("draining"):
        target.event_sources.pause(queue, resume_at=None)
        deadline = time.monotonic() + timeout.total_seconds()
        # Pollers notice a pause within moments and the counts are approximate: only
        # DRAINED_READINGS zero readings in a row, DRAIN_POLL_S apart, count as drained.
        zeros = 0
        while True:
            counts = queue_counts(target.clients("sqs"), target.queue(queue).url)
            zeros = zeros + 1 if counts["in_flight"] == 0 else 0
            if zeros >= DRAINED_READINGS or time.monotonic() >= deadline:
                break
            time.sleep(DRAIN_POLL_S)
        drained = zeros >= DRAINED_READINGS
        target.audit().record(
            "drain",
            queue=queue,
            details={"timeout": timeout_text, "drained": drained, "in_flight": counts["in_flight"]},
        )
    summary = {"queue": queue, "paused": True, "drained": drained, **counts}
    emit(as_json, summary, ("DRAIN", queue), [(key, str(value)) for key, value in summary.items() if key != "queue"])
    if not drained:
        raise Incomplete(
            f"{counts['in_flight']} messages of {queue!r} still in flight after {timeout_text} "
            "(retries waiting out their backoff count too); the queue stays paused"
        )


@click.command()
@click.argument("queue", required=False)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@json_option
@click.pass_obj
def audit(project: Project, queue: str | None, limit: int, as_json: bool) -> None:
    """Who redrove, discarded, paused, resumed or resized what, newest first."""
    if queue:
        project.queue_name(queue)
    target = project.target
    with aws_errors("reading the audit"):
        entries = target.audit().entries(queue=queue, limit=limit)
    emit(
        as_json,
        [vars(entry) for entry in entries],
        ("AT", "ACTION", "QUEUE", "ACTOR", "DETAILS"),
        [(e.at, e.action, e.queue or DASH, e.actor, json.dumps(e.details, sort_keys=True)) for e in entries],
    )


COMMANDS = (status, dlq, pause, resume, concurrency, drain, audit)
